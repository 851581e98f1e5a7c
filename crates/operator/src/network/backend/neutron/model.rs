//! What a Network means in Neutron, and what to do to make Neutron say it. Pure: no I/O, so the
//! mapping, the ownership rule and the comparison are unit-tested on their own.
//!
//! One Network is one Neutron network with one subnet. Both carry two tags that say whose they
//! are: the cluster's identity and the Network's UID (kuryr-kubernetes marks what it creates the
//! same way). Ownership is by tags, never by name: a network with the right name but without
//! those tags belongs to somebody else.
//!
//! Neutron refuses `tags` in a create, so an object is created first and tagged by a second
//! request. An operator stopped between the two would leave an untagged object; to know it
//! again, every object is created with a description that names both tags ([`Owner::marker`]),
//! and an untagged object carrying exactly that marker is taken as ours and tagged.

use std::net::IpAddr;

use sample_operator_api::Addressing;
use sample_operator_api::ip::{IpFamily, IpPrefix, from_bits, parse_ip, to_bits};
use serde::Deserialize;

/// Tag prefix of the cluster's identity: `sample-operator.cluster=<id>`.
pub const CLUSTER_TAG: &str = "sample-operator.cluster=";
/// Tag prefix of the Network's UID: `sample-operator.network=<uid>`.
pub const NETWORK_TAG: &str = "sample-operator.network=";
/// Neutron's limit on names (`name` is a string of at most 255 characters).
pub const MAX_NAME: usize = 255;

/// Whose a Neutron object is: one Network of one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub cluster_tag: String,
    pub network_tag: String,
    /// Cluster tags of identities this cluster takes over (`--adopt-cluster-id`): an object of
    /// the Network's name tagged with one of them is the same Network of the cluster before a
    /// rebuild, and is retagged instead of created again.
    pub adopted: Vec<String>,
}

impl Owner {
    pub fn new(cluster_id: &str, network_uid: &str) -> Self {
        Self {
            cluster_tag: cluster_tag(cluster_id),
            network_tag: format!("{NETWORK_TAG}{network_uid}"),
            adopted: Vec::new(),
        }
    }

    /// This owner, also claiming objects tagged for the cluster ids in `adopt`.
    pub fn adopting(mut self, adopt: &[String]) -> Self {
        self.adopted = adopt.iter().map(|id| cluster_tag(id)).collect();
        self
    }

    /// Whether an object is tagged for a cluster id this cluster takes over.
    pub fn adoptable(&self, tags: &[String]) -> bool {
        self.adopted.iter().any(|t| tags.contains(t))
    }

    /// The tag changes that make an object ours: our tags added, and an adopted object's tags
    /// of its former cluster and Network removed. Tags anybody else put there stay.
    pub fn retag(&self, existing: &[String]) -> Retag {
        let ours = self.tags();
        let add = ours.iter().filter(|t| !existing.contains(t)).cloned().collect();
        let remove = if self.adoptable(existing) {
            existing
                .iter()
                .filter(|t| {
                    self.adopted.contains(t) || (t.starts_with(NETWORK_TAG) && **t != self.network_tag)
                })
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        Retag { add, remove }
    }

    /// The tags an owned object carries.
    pub fn tags(&self) -> Vec<String> {
        vec![self.cluster_tag.clone(), self.network_tag.clone()]
    }

    /// Whether an object with these tags is this Network's.
    pub fn owns(&self, tags: &[String]) -> bool {
        tags.contains(&self.cluster_tag) && tags.contains(&self.network_tag)
    }

    /// The description every object is created with, naming both tags.
    pub fn marker(&self) -> String {
        format!(
            "Managed by sample-operator: {} {}",
            self.cluster_tag, self.network_tag
        )
    }

    /// Whether an object is this Network's: tagged as ours, created by us and not yet tagged,
    /// or tagged for a cluster id this cluster adopts (the caller has matched its name).
    pub fn claims(&self, tags: &[String], description: Option<&str>) -> bool {
        self.owns(tags) || description == Some(self.marker().as_str()) || self.adoptable(tags)
    }
}

/// Tags to add to an object and to remove from it, one request each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Retag {
    pub add: Vec<String>,
    pub remove: Vec<String>,
}

impl Retag {
    pub fn is_empty(&self) -> bool {
        self.add.is_empty() && self.remove.is_empty()
    }
}

/// The cluster id an object is tagged for, if any.
pub fn tagged_cluster_id(tags: &[String]) -> Option<&str> {
    tags.iter().find_map(|t| t.strip_prefix(CLUSTER_TAG))
}

pub fn cluster_tag(cluster_id: &str) -> String {
    format!("{CLUSTER_TAG}{cluster_id}")
}

/// The Network UID an object of this cluster is tagged with.
pub fn network_uid(tags: &[String]) -> Option<&str> {
    tags.iter().find_map(|t| t.strip_prefix(NETWORK_TAG))
}

/// Checks a cluster identity given on the command line: Neutron filters tags with a
/// comma-separated list and takes them in URL paths, and limits them to 255 characters.
pub fn validate_cluster_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > 200 {
        return Err(format!(
            "the cluster id must be 1 to 200 characters long, {id:?} is not"
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| matches!(c, ',' | '/') || c.is_whitespace() || c.is_control())
    {
        return Err(format!(
            "the cluster id {id:?} contains {c:?}: Neutron tags cannot carry commas, slashes or spaces"
        ));
    }
    Ok(())
}

/// A Neutron network, the fields this backend reads.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct NeutronNetwork {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    /// Goes up with every change of the object: what tests compare to count writes.
    #[serde(default)]
    pub revision_number: Option<i64>,
}

/// A Neutron subnet, the fields this backend reads.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct NeutronSubnet {
    pub id: String,
    #[serde(default)]
    pub name: String,
    pub network_id: String,
    pub cidr: String,
    #[serde(default)]
    pub gateway_ip: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub allocation_pools: Vec<Pool>,
    #[serde(default)]
    pub revision_number: Option<i64>,
}

/// An allocation pool of a subnet: the addresses Neutron may give to ports.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Pool {
    pub start: String,
    pub end: String,
}

impl Pool {
    fn range(&self) -> Option<(u128, u128)> {
        Some((to_bits(parse_ip(&self.start)?), to_bits(parse_ip(&self.end)?)))
    }
}

/// The pools Neutron gives a subnet created without any (its `ipam.utils.generate_pools`):
/// the prefix without its first address, without the IPv4 broadcast address, and without the
/// gateway.
pub fn default_pools(prefix: &IpPrefix, gateway: Option<IpAddr>) -> Vec<(u128, u128)> {
    let (first, last) = prefix.range();
    if first == last {
        return vec![(first, last)];
    }
    let start = first + 1;
    let end = last - u128::from(prefix.family() == IpFamily::IPv4);
    if start >= end {
        return Vec::new();
    }
    without(vec![(start, end)], gateway.map(to_bits))
}

/// `ranges` with the address `hole` taken out, splitting the range that held it.
fn without(ranges: Vec<(u128, u128)>, hole: Option<u128>) -> Vec<(u128, u128)> {
    let Some(hole) = hole else { return ranges };
    let mut out = Vec::new();
    for (start, end) in ranges {
        if !(start..=end).contains(&hole) {
            out.push((start, end));
            continue;
        }
        if hole > start {
            out.push((start, hole - 1));
        }
        if hole < end {
            out.push((hole + 1, end));
        }
    }
    out
}

/// The pools to send with a gateway that moves to `gateway`, or `None` when they may stay:
/// Neutron refuses a gateway inside a pool. Pools that are Neutron's defaults for the old
/// gateway become its defaults for the new one (the old gateway goes back into the pool);
/// pools somebody chose keep their shape, only without the new gateway.
pub fn pools_for_gateway(prefix: &IpPrefix, subnet: &NeutronSubnet, gateway: IpAddr) -> Option<Vec<Pool>> {
    let observed: Option<Vec<(u128, u128)>> = subnet.allocation_pools.iter().map(Pool::range).collect();
    let observed = observed?;
    let old_gateway = subnet.gateway_ip.as_deref().and_then(parse_ip);
    let new = if observed == default_pools(prefix, old_gateway) {
        default_pools(prefix, Some(gateway))
    } else {
        without(observed.clone(), Some(to_bits(gateway)))
    };
    (new != observed).then(|| {
        let family = prefix.family();
        new.into_iter()
            .map(|(start, end)| Pool {
                start: from_bits(family, start).to_string(),
                end: from_bits(family, end).to_string(),
            })
            .collect()
    })
}

/// What Neutron holds of one Network: its network, if any, the subnets it claims there, and
/// any further network it claims (left by a create whose answer was lost), which is surplus.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub network: Option<NeutronNetwork>,
    pub subnets: Vec<NeutronSubnet>,
    pub surplus_networks: Vec<String>,
}

impl Observed {
    /// Picks one Network's objects out of listings: the network it claims (a tagged one before
    /// one only marked), its claimed subnets on that network, and the ids of the other networks
    /// it claims.
    pub fn pick(owner: &Owner, networks: &[NeutronNetwork], subnets: &[NeutronSubnet]) -> Self {
        let mut claimed: Vec<&NeutronNetwork> = networks
            .iter()
            .filter(|n| owner.claims(&n.tags, n.description.as_deref()))
            .collect();
        // Stable: among equals, Neutron's order stays.
        claimed.sort_by_key(|n| !owner.owns(&n.tags));
        let mut claimed = claimed.into_iter();
        let network = claimed.next().cloned();
        let surplus_networks = claimed.map(|n| n.id.clone()).collect();
        let subnets = match &network {
            Some(n) => subnets
                .iter()
                .filter(|s| s.network_id == n.id && owner.claims(&s.tags, s.description.as_deref()))
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        Self {
            network,
            subnets,
            surplus_networks,
        }
    }
}

/// What Neutron should hold for a Network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    pub name: String,
    pub prefix: IpPrefix,
    pub gateway: IpAddr,
    /// Whose the objects are: their tags.
    pub owner: Owner,
    /// The description objects are created with ([`Owner::marker`]).
    pub description: String,
}

impl Desired {
    pub fn new(namespace: &str, name: &str, addressing: &Addressing, owner: &Owner) -> Self {
        Self {
            name: neutron_name(namespace, name),
            prefix: addressing.prefix,
            gateway: addressing.gateway,
            owner: owner.clone(),
            description: owner.marker(),
        }
    }

    pub fn ip_version(&self) -> u8 {
        match self.prefix.family() {
            IpFamily::IPv4 => 4,
            IpFamily::IPv6 => 6,
        }
    }
}

/// The name of a Network's objects in Neutron: `<namespace>/<name>`, readable in `openstack
/// network list`. A namespace and a name can reach 317 characters together, more than Neutron
/// takes; a longer one keeps its start and ends in a hash of the whole, so it stays distinct
/// (the name is for people; the tags are what identifies the objects).
pub fn neutron_name(namespace: &str, name: &str) -> String {
    let full = format!("{namespace}/{name}");
    if full.len() <= MAX_NAME {
        return full;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in full.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    // Names are ASCII (DNS labels and subdomains), so cutting at a byte is cutting at a char.
    format!("{}~{hash:016x}", &full[..MAX_NAME - 17])
}

/// One write that brings Neutron to the desired state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Create the network, tag it, then create and tag its subnet.
    CreateNetwork,
    /// Add our tags to a network we created but could not tag, or retag an adopted one.
    TagNetwork {
        id: String,
    },
    RenameNetwork {
        id: String,
    },
    /// Create the subnet on the existing network, and tag it.
    CreateSubnet,
    /// Add our tags to a subnet we created but could not tag, or retag an adopted one.
    TagSubnet {
        id: String,
    },
    /// Set the subnet's gateway and name back to the desired ones, with the allocation pools
    /// that a moved gateway needs.
    UpdateSubnet {
        id: String,
        pools: Option<Vec<Pool>>,
    },
    DeleteSubnet {
        id: String,
    },
    /// Delete a surplus network that this Network owns.
    DeleteNetwork {
        id: String,
    },
}

/// The writes, in order, that turn `observed` into `desired`; empty when Neutron already says
/// what the Network says. Host bits are not drift: Neutron stores `10.0.0.7/24` as
/// `10.0.0.0/24`, and the desired prefix is canonical already.
///
/// A changed prefix is a new subnet, since Neutron's `cidr` cannot be updated. The new one is
/// created before the old one is deleted, so that the network always has a subnet, unless the
/// two overlap: Neutron refuses overlapping subnets on one network, so then the old one goes
/// first.
pub fn plan(desired: &Desired, observed: &Observed) -> Vec<Step> {
    let mut steps = network_steps(desired, observed);
    steps.extend(
        observed
            .surplus_networks
            .iter()
            .map(|id| Step::DeleteNetwork { id: id.clone() }),
    );
    steps
}

fn network_steps(desired: &Desired, observed: &Observed) -> Vec<Step> {
    let Some(network) = &observed.network else {
        return vec![Step::CreateNetwork];
    };
    // Updates go before tags: a tag changes the object's revision, which an update is
    // conditional on.
    let mut steps = Vec::new();
    if network.name != desired.name {
        steps.push(Step::RenameNetwork {
            id: network.id.clone(),
        });
    }
    if !desired.owner.retag(&network.tags).is_empty() {
        steps.push(Step::TagNetwork {
            id: network.id.clone(),
        });
    }
    let same_prefix = |s: &NeutronSubnet| IpPrefix::parse(&s.cidr) == Some(desired.prefix);
    let keep = observed.subnets.iter().find(|s| same_prefix(s));
    let stale: Vec<&NeutronSubnet> = observed
        .subnets
        .iter()
        .filter(|s| keep.is_none_or(|k| k.id != s.id))
        .collect();
    match keep {
        Some(subnet) => {
            let gateway = subnet.gateway_ip.as_deref().and_then(parse_ip);
            if gateway != Some(desired.gateway) || subnet.name != desired.name {
                let pools = (gateway != Some(desired.gateway))
                    .then(|| pools_for_gateway(&desired.prefix, subnet, desired.gateway))
                    .flatten();
                steps.push(Step::UpdateSubnet {
                    id: subnet.id.clone(),
                    pools,
                });
            }
            if !desired.owner.retag(&subnet.tags).is_empty() {
                steps.push(Step::TagSubnet {
                    id: subnet.id.clone(),
                });
            }
            steps.extend(stale.iter().map(|s| Step::DeleteSubnet { id: s.id.clone() }));
        }
        None => {
            let overlaps =
                |s: &&&NeutronSubnet| IpPrefix::parse(&s.cidr).is_none_or(|p| p.overlaps(&desired.prefix));
            let (first, after): (Vec<&&NeutronSubnet>, Vec<&&NeutronSubnet>) =
                stale.iter().partition(overlaps);
            steps.extend(first.iter().map(|s| Step::DeleteSubnet { id: s.id.clone() }));
            steps.push(Step::CreateSubnet);
            steps.extend(after.iter().map(|s| Step::DeleteSubnet { id: s.id.clone() }));
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner::new("c1", "uid-1")
    }

    fn addressing(cidr: &str, gateway: &str) -> Addressing {
        Addressing {
            prefix: IpPrefix::parse(cidr).unwrap(),
            gateway: parse_ip(gateway).unwrap(),
        }
    }

    fn desired(cidr: &str, gateway: &str) -> Desired {
        Desired::new("team-a", "blue", &addressing(cidr, gateway), &owner())
    }

    fn network(id: &str, name: &str, tags: Vec<String>) -> NeutronNetwork {
        NeutronNetwork {
            id: id.into(),
            name: name.into(),
            description: None,
            tags,
            revision_number: Some(1),
        }
    }

    fn subnet(id: &str, cidr: &str, gateway: &str) -> NeutronSubnet {
        NeutronSubnet {
            id: id.into(),
            name: "team-a/blue".into(),
            network_id: "n1".into(),
            cidr: cidr.into(),
            gateway_ip: Some(gateway.into()),
            description: None,
            tags: owner().tags(),
            // What Neutron makes when it is given none.
            allocation_pools: IpPrefix::parse(cidr)
                .map(|p| pools(p.family(), &default_pools(&p, parse_ip(gateway))))
                .unwrap_or_default(),
            revision_number: Some(1),
        }
    }

    fn observed(subnets: Vec<NeutronSubnet>) -> Observed {
        Observed {
            network: Some(network("n1", "team-a/blue", owner().tags())),
            subnets,
            surplus_networks: vec![],
        }
    }

    #[test]
    fn ownership_needs_both_tags() {
        let o = owner();
        assert!(o.owns(&o.tags()));
        assert!(!o.owns(std::slice::from_ref(&o.cluster_tag)));
        assert!(!o.owns(std::slice::from_ref(&o.network_tag)));
        assert!(!o.owns(&Owner::new("c2", "uid-1").tags()));
        assert!(!o.owns(&[]));
        assert_eq!(network_uid(&o.tags()), Some("uid-1"));
    }

    #[test]
    fn nothing_in_neutron_means_create() {
        assert_eq!(
            plan(&desired("10.1.0.0/24", "10.1.0.1"), &Observed::default()),
            vec![Step::CreateNetwork]
        );
    }

    #[test]
    fn a_network_without_subnet_gets_one() {
        assert_eq!(
            plan(&desired("10.1.0.0/24", "10.1.0.1"), &observed(vec![])),
            vec![Step::CreateSubnet]
        );
    }

    #[test]
    fn matching_state_needs_no_write_and_host_bits_are_not_drift() {
        let d = desired("10.1.0.0/24", "10.1.0.1");
        assert_eq!(
            plan(&d, &observed(vec![subnet("s1", "10.1.0.0/24", "10.1.0.1")])),
            vec![]
        );
        // The spec said 10.1.0.7/24; Neutron keeps the network address. Both are canonical here.
        let d = Desired::new("team-a", "blue", &addressing("10.1.0.7/24", "10.1.0.1"), &owner());
        assert_eq!(
            plan(&d, &observed(vec![subnet("s1", "10.1.0.0/24", "10.1.0.1")])),
            vec![]
        );
        // IPv6 written differently is the same address.
        let d = desired("fd00:0:0:1::/64", "fd00:0:0:1::1");
        assert_eq!(
            plan(
                &d,
                &observed(vec![subnet("s1", "fd00:0:0:1::/64", "fd00:0:0:1:0::1")])
            ),
            vec![]
        );
    }

    fn pools(family: IpFamily, ranges: &[(u128, u128)]) -> Vec<Pool> {
        ranges
            .iter()
            .map(|&(start, end)| Pool {
                start: from_bits(family, start).to_string(),
                end: from_bits(family, end).to_string(),
            })
            .collect()
    }

    fn pool(start: &str, end: &str) -> Pool {
        Pool {
            start: start.into(),
            end: end.into(),
        }
    }

    #[test]
    fn a_changed_gateway_or_name_is_updated_in_place() {
        let d = desired("10.1.0.0/24", "10.1.0.254");
        // Neutron's default pool for the old gateway becomes its default for the new one.
        let moved = Some(vec![pool("10.1.0.1", "10.1.0.253")]);
        assert_eq!(
            plan(&d, &observed(vec![subnet("s1", "10.1.0.0/24", "10.1.0.1")])),
            vec![Step::UpdateSubnet {
                id: "s1".into(),
                pools: moved.clone()
            }]
        );
        let mut no_gateway = subnet("s1", "10.1.0.0/24", "x");
        no_gateway.gateway_ip = None;
        assert_eq!(
            plan(&d, &observed(vec![no_gateway])),
            vec![Step::UpdateSubnet {
                id: "s1".into(),
                pools: moved
            }]
        );
        let mut renamed = subnet("s1", "10.1.0.0/24", "10.1.0.254");
        renamed.name = "by hand".into();
        assert_eq!(
            plan(&d, &observed(vec![renamed])),
            vec![Step::UpdateSubnet {
                id: "s1".into(),
                pools: None
            }]
        );
    }

    #[test]
    fn pools_somebody_chose_keep_their_shape_when_the_gateway_moves() {
        let prefix = IpPrefix::parse("10.1.0.0/24").unwrap();
        let mut chosen = subnet("s1", "10.1.0.0/24", "10.1.0.1");
        chosen.allocation_pools = vec![pool("10.1.0.100", "10.1.0.200")];
        let gateway = |g: &str| pools_for_gateway(&prefix, &chosen, parse_ip(g).unwrap());
        assert_eq!(gateway("10.1.0.50"), None, "outside the pool: nothing to change");
        assert_eq!(
            gateway("10.1.0.150"),
            Some(vec![
                pool("10.1.0.100", "10.1.0.149"),
                pool("10.1.0.151", "10.1.0.200")
            ])
        );
        assert_eq!(
            gateway("10.1.0.100"),
            Some(vec![pool("10.1.0.101", "10.1.0.200")])
        );
    }

    #[test]
    fn default_pools_are_neutrons() {
        let of = |cidr: &str, gateway: Option<&str>| {
            let prefix = IpPrefix::parse(cidr).unwrap();
            pools(
                prefix.family(),
                &default_pools(&prefix, gateway.and_then(parse_ip)),
            )
        };
        assert_eq!(
            of("192.168.0.0/16", Some("192.168.0.1")),
            vec![pool("192.168.0.2", "192.168.255.254")]
        );
        assert_eq!(
            of("10.0.0.0/24", Some("10.0.0.100")),
            vec![pool("10.0.0.1", "10.0.0.99"), pool("10.0.0.101", "10.0.0.254")]
        );
        assert_eq!(
            of("fd00:1::/64", Some("fd00:1::1")),
            vec![pool("fd00:1::2", "fd00:1::ffff:ffff:ffff:ffff")]
        );
        assert_eq!(of("10.0.0.0/31", None), vec![]);
        assert_eq!(of("10.0.0.5/32", None), vec![pool("10.0.0.5", "10.0.0.5")]);
    }

    #[test]
    fn a_renamed_network_is_renamed_back() {
        let mut o = observed(vec![subnet("s1", "10.1.0.0/24", "10.1.0.1")]);
        o.network.as_mut().unwrap().name = "renamed".into();
        assert_eq!(
            plan(&desired("10.1.0.0/24", "10.1.0.1"), &o),
            vec![Step::RenameNetwork { id: "n1".into() }]
        );
    }

    #[test]
    fn a_new_prefix_is_created_before_the_old_subnet_goes() {
        let d = desired("10.2.0.0/24", "10.2.0.1");
        assert_eq!(
            plan(&d, &observed(vec![subnet("s1", "10.1.0.0/24", "10.1.0.1")])),
            vec![Step::CreateSubnet, Step::DeleteSubnet { id: "s1".into() }]
        );
    }

    #[test]
    fn an_overlapping_new_prefix_needs_the_old_subnet_gone_first() {
        let d = desired("10.1.0.0/16", "10.1.0.1");
        assert_eq!(
            plan(
                &d,
                &observed(vec![
                    subnet("s1", "10.1.0.0/24", "10.1.0.1"),
                    subnet("s2", "10.9.0.0/24", "10.9.0.1")
                ])
            ),
            vec![
                Step::DeleteSubnet { id: "s1".into() },
                Step::CreateSubnet,
                Step::DeleteSubnet { id: "s2".into() }
            ]
        );
    }

    #[test]
    fn surplus_subnets_of_ours_are_removed() {
        let d = desired("10.1.0.0/24", "10.1.0.1");
        assert_eq!(
            plan(
                &d,
                &observed(vec![
                    subnet("s1", "10.1.0.0/24", "10.1.0.1"),
                    subnet("s2", "10.1.0.0/24", "10.1.0.1")
                ])
            ),
            vec![Step::DeleteSubnet { id: "s2".into() }]
        );
    }

    #[test]
    fn pick_takes_only_owned_objects() {
        let o = owner();
        let networks = vec![
            network("foreign", "team-a/blue", vec![]),
            network("n1", "team-a/blue", o.tags()),
            network("n2", "team-a/blue", o.tags()),
        ];
        let mut foreign_subnet = subnet("s9", "10.1.0.0/24", "10.1.0.1");
        foreign_subnet.tags.clear();
        let mut elsewhere = subnet("s8", "10.1.0.0/24", "10.1.0.1");
        elsewhere.network_id = "n2".into();
        let subnets = vec![subnet("s1", "10.1.0.0/24", "10.1.0.1"), foreign_subnet, elsewhere];
        let observed = Observed::pick(&o, &networks, &subnets);
        assert_eq!(observed.network.as_ref().unwrap().id, "n1");
        assert_eq!(
            observed.subnets.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
            ["s1"]
        );
        assert_eq!(observed.surplus_networks, ["n2"]);
        assert_eq!(
            plan(&desired("10.1.0.0/24", "10.1.0.1"), &observed),
            vec![Step::DeleteNetwork { id: "n2".into() }]
        );
    }

    #[test]
    fn objects_created_but_not_tagged_are_known_by_their_marker_and_tagged() {
        let o = owner();
        let mut marked = network("n1", "team-a/blue", vec!["someone's".into()]);
        marked.description = Some(o.marker());
        let mut other_marker = network("n2", "team-a/blue", vec![]);
        other_marker.description = Some(Owner::new("c1", "uid-2").marker());
        let mut marked_subnet = subnet("s1", "10.1.0.0/24", "10.1.0.1");
        marked_subnet.tags.clear();
        marked_subnet.description = Some(o.marker());
        let observed = Observed::pick(&o, &[other_marker, marked], &[marked_subnet]);
        assert_eq!(observed.network.as_ref().unwrap().id, "n1");
        assert!(
            observed.surplus_networks.is_empty(),
            "another Network's marker is not ours"
        );
        let d = desired("10.1.0.0/24", "10.1.0.1");
        assert_eq!(
            plan(&d, &observed),
            vec![
                Step::TagNetwork { id: "n1".into() },
                Step::TagSubnet { id: "s1".into() }
            ]
        );
        // Ours are added one by one; tags somebody added are neither sent nor removed.
        assert_eq!(
            o.retag(&["someone's".into(), o.cluster_tag.clone()]),
            Retag {
                add: vec![o.network_tag.clone()],
                remove: vec![]
            }
        );
        // A tagged network is preferred over one only marked; the marked one is surplus.
        let mut marked_too = network("n3", "team-a/blue", vec![]);
        marked_too.description = Some(o.marker());
        let tagged = network("n4", "team-a/blue", o.tags());
        let observed = Observed::pick(&o, &[marked_too, tagged], &[]);
        assert_eq!(observed.network.unwrap().id, "n4");
        assert_eq!(observed.surplus_networks, ["n3"]);
    }

    #[test]
    fn an_adopted_network_of_the_name_is_retagged_and_others_stay_foreign() {
        let o = owner().adopting(&["old".into()]);
        let old_tags = vec![
            cluster_tag("old"),
            format!("{NETWORK_TAG}uid-before-the-rebuild"),
            "someone's".into(),
        ];
        assert!(o.claims(&old_tags, None));
        assert!(!owner().claims(&old_tags, None), "only when adopting");
        let other_cluster = vec![cluster_tag("c9"), format!("{NETWORK_TAG}uid-9")];
        assert!(!o.claims(&other_cluster, None));
        assert_eq!(tagged_cluster_id(&other_cluster), Some("c9"));
        assert_eq!(
            o.retag(&old_tags),
            Retag {
                add: o.tags(),
                remove: vec![cluster_tag("old"), format!("{NETWORK_TAG}uid-before-the-rebuild")]
            }
        );
        // Same Network UID (a changed --cluster-id on the same cluster): only the cluster tag.
        let same_uid = vec![cluster_tag("old"), o.network_tag.clone()];
        assert_eq!(
            o.retag(&same_uid),
            Retag {
                add: vec![o.cluster_tag.clone()],
                remove: vec![cluster_tag("old")]
            }
        );
        let d = Desired::new("team-a", "blue", &addressing("10.1.0.0/24", "10.1.0.1"), &o);
        let mut subnet = subnet("s1", "10.1.0.0/24", "10.1.0.1");
        subnet.tags = old_tags.clone();
        let observed = Observed::pick(&o, &[network("n1", "team-a/blue", old_tags)], &[subnet]);
        assert_eq!(
            plan(&d, &observed),
            vec![
                Step::TagNetwork { id: "n1".into() },
                Step::TagSubnet { id: "s1".into() }
            ]
        );
    }

    #[test]
    fn updates_go_before_tags_whose_change_moves_the_revision() {
        let o = owner();
        let mut n = network("n1", "renamed", vec![]);
        n.description = Some(o.marker());
        let mut s = subnet("s1", "10.1.0.0/24", "10.1.0.1");
        s.tags = vec![];
        s.description = Some(o.marker());
        let steps = plan(
            &desired("10.1.0.0/24", "10.1.0.9"),
            &Observed::pick(&o, &[n], &[s]),
        );
        let kinds: Vec<&str> = steps
            .iter()
            .map(|s| match s {
                Step::RenameNetwork { .. } => "rename",
                Step::TagNetwork { .. } => "tag network",
                Step::UpdateSubnet { .. } => "update subnet",
                Step::TagSubnet { .. } => "tag subnet",
                _ => "other",
            })
            .collect();
        assert_eq!(kinds, ["rename", "tag network", "update subnet", "tag subnet"]);
    }

    #[test]
    fn long_names_are_cut_and_stay_distinct() {
        assert_eq!(neutron_name("team-a", "blue"), "team-a/blue");
        let ns = "n".repeat(63);
        let a = neutron_name(&ns, &"a".repeat(253));
        let b = neutron_name(&ns, &format!("{}b", "a".repeat(252)));
        assert_eq!(a.len(), MAX_NAME);
        assert_eq!(b.len(), MAX_NAME);
        assert_ne!(a, b);
        assert_eq!(neutron_name(&ns, &"a".repeat(253)), a, "stable");
    }

    #[test]
    fn cluster_ids_that_tags_cannot_carry_are_refused() {
        assert!(validate_cluster_id("3f2c9a1e-0000-4000-8000-000000000001").is_ok());
        assert!(validate_cluster_id("").is_err());
        assert!(validate_cluster_id("a,b").is_err());
        assert!(validate_cluster_id("a/b").is_err());
        assert!(validate_cluster_id("a b").is_err());
        assert!(validate_cluster_id(&"x".repeat(201)).is_err());
    }
}
