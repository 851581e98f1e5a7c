//! What a Network means in Neutron, and what to do to make Neutron say it. Pure: no I/O, so the
//! mapping, the ownership rule and the comparison are unit-tested on their own.
//!
//! One Network is one Neutron network with one subnet. Both carry two tags that say whose they
//! are: the cluster's identity and the Network's UID (kuryr-kubernetes marks what it creates the
//! same way). Ownership is by tags only, never by name: a network with the right name but
//! without those tags belongs to somebody else.

use std::net::IpAddr;

use sample_operator_api::Addressing;
use sample_operator_api::ip::{IpFamily, IpPrefix, parse_ip};
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
}

impl Owner {
    pub fn new(cluster_id: &str, network_uid: &str) -> Self {
        Self {
            cluster_tag: cluster_tag(cluster_id),
            network_tag: format!("{NETWORK_TAG}{network_uid}"),
        }
    }

    /// The tags an owned object carries.
    pub fn tags(&self) -> Vec<String> {
        vec![self.cluster_tag.clone(), self.network_tag.clone()]
    }

    /// Whether an object with these tags is this Network's.
    pub fn owns(&self, tags: &[String]) -> bool {
        tags.contains(&self.cluster_tag) && tags.contains(&self.network_tag)
    }
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
    pub tags: Vec<String>,
    #[serde(default)]
    pub revision_number: Option<i64>,
}

/// What Neutron holds of one Network: its network, if any, the subnets it owns there, and
/// any further network it owns (left by a create whose answer was lost), which is surplus.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    pub network: Option<NeutronNetwork>,
    pub subnets: Vec<NeutronSubnet>,
    pub surplus_networks: Vec<String>,
}

impl Observed {
    /// Picks one Network's objects out of listings: the first network it owns, its owned
    /// subnets on that network, and the ids of the other networks it owns.
    pub fn pick(owner: &Owner, networks: &[NeutronNetwork], subnets: &[NeutronSubnet]) -> Self {
        let mut owned = networks.iter().filter(|n| owner.owns(&n.tags));
        let network = owned.next().cloned();
        let surplus_networks = owned.map(|n| n.id.clone()).collect();
        let subnets = match &network {
            Some(n) => subnets
                .iter()
                .filter(|s| s.network_id == n.id && owner.owns(&s.tags))
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
    pub tags: Vec<String>,
}

impl Desired {
    pub fn new(namespace: &str, name: &str, addressing: &Addressing, owner: &Owner) -> Self {
        Self {
            name: neutron_name(namespace, name),
            prefix: addressing.prefix,
            gateway: addressing.gateway,
            tags: owner.tags(),
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
    /// Create the network (tagged) and, after it, its subnet.
    CreateNetwork,
    RenameNetwork {
        id: String,
    },
    /// Create the subnet on the existing network.
    CreateSubnet,
    /// Set the subnet's gateway and name back to the desired ones.
    UpdateSubnet {
        id: String,
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
    let mut steps = Vec::new();
    if network.name != desired.name {
        steps.push(Step::RenameNetwork {
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
                steps.push(Step::UpdateSubnet {
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
            tags: owner().tags(),
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

    #[test]
    fn a_changed_gateway_or_name_is_updated_in_place() {
        let d = desired("10.1.0.0/24", "10.1.0.254");
        assert_eq!(
            plan(&d, &observed(vec![subnet("s1", "10.1.0.0/24", "10.1.0.1")])),
            vec![Step::UpdateSubnet { id: "s1".into() }]
        );
        let mut no_gateway = subnet("s1", "10.1.0.0/24", "x");
        no_gateway.gateway_ip = None;
        assert_eq!(
            plan(&d, &observed(vec![no_gateway])),
            vec![Step::UpdateSubnet { id: "s1".into() }]
        );
        let mut renamed = subnet("s1", "10.1.0.0/24", "10.1.0.254");
        renamed.name = "by hand".into();
        assert_eq!(
            plan(&d, &observed(vec![renamed])),
            vec![Step::UpdateSubnet { id: "s1".into() }]
        );
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
