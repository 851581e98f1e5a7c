//! Overlapping prefixes: who keeps a prefix, and whom a change concerns.
//!
//! Within a namespace (a tenant) the prefixes of Networks must not overlap; across namespaces
//! they may only where nodes keep the namespaces apart ([`Scope`]): with the Multus backend a
//! node that hosts Pods of two Networks with the same prefix has two bridges with the same
//! connected route, and one of them takes the other's traffic. When two overlap, the older
//! Network (by creation time, then namespace, then name) keeps working and the newer one is
//! refused. A Network's standing depends only on the older Networks that
//! overlap it, whether or not those are refused themselves, so a decision never cascades: when a
//! Network appears, changes its prefix or goes away, only the newer Networks overlapping its old
//! or its new prefix can change theirs, and [`PrefixIndex::apply`] returns exactly those.
//!
//! The index is kept from the Network watch stream. Per namespace it holds the prefixes in a
//! sorted map keyed by (family, first address, length), so the Networks overlapping a prefix are
//! found without a scan: the wider prefixes containing it by one exact lookup per shorter
//! length, and the prefix itself and the narrower ones inside it by one range of the map.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use super::policy::AddressPolicy;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use sample_operator_api::Network;
use sample_operator_api::ip::{IpFamily, IpPrefix};

/// A Network in the order that decides conflicts: earlier creation first, then name. The
/// apiserver stamps creation in whole seconds, so ties are common and the name settles them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Claimant {
    pub created: Timestamp,
    /// Only breaks ties across namespaces, where conflicts span them.
    pub namespace: String,
    pub name: String,
}

impl Claimant {
    pub fn of(network: &Network) -> Self {
        Self {
            created: network
                .creation_timestamp()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0),
            namespace: network.namespace().unwrap_or_default(),
            name: network.name_any(),
        }
    }
}

/// An older Network whose prefix overlaps: the one that keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overlap {
    pub namespace: String,
    pub name: String,
    pub prefix: IpPrefix,
}

/// How far the prefixes of Networks must not overlap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scope {
    /// Within a namespace: where nodes keep namespaces apart (Neutron's networks are each
    /// their own, or the admin says the nodes do).
    Namespace,
    /// Across the cluster: with Multus, every node routes every Network it hosts.
    #[default]
    Cluster,
}

impl Scope {
    /// The index's bucket of a Network in `namespace`.
    fn bucket(self, namespace: &str) -> String {
        match self {
            Scope::Namespace => namespace.to_owned(),
            Scope::Cluster => String::new(),
        }
    }
}

/// The Network that a Network with `me` must yield to among `overlapping` (the Networks whose
/// prefixes overlap its own): the oldest of those older than it, if any.
pub fn winner_over<'a>(
    me: &Claimant,
    overlapping: impl IntoIterator<Item = (&'a Claimant, IpPrefix)>,
) -> Option<Overlap> {
    overlapping
        .into_iter()
        .filter(|(claimant, _)| *claimant < me)
        .min_by(|a, b| a.0.cmp(b.0))
        .map(|(claimant, prefix)| Overlap {
            namespace: claimant.namespace.clone(),
            name: claimant.name.clone(),
            prefix,
        })
}

/// What a Network claims: a prefix in a bucket (its namespace, or the whole cluster).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Claim {
    bucket: String,
    prefix: IpPrefix,
    claimant: Claimant,
}

impl Claim {
    /// `None` for a Network that claims nothing: one with an invalid spec, one whose prefix
    /// the address policy refuses (it is in no backend, and must not block the Networks that
    /// may be), or one being deleted (its prefix is released as soon as deletion is asked for,
    /// so that the Networks it blocked recover while its cleanup runs).
    fn of(network: &Network, policy: &AddressPolicy, scope: Scope) -> Option<Self> {
        if network.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let prefix = network.validate().ok()?.prefix;
        policy.check(&prefix).ok()?;
        Some(Self {
            bucket: scope.bucket(&network.namespace()?),
            prefix,
            claimant: Claimant::of(network),
        })
    }

    fn object_ref(claimant: &Claimant) -> ObjectRef<Network> {
        ObjectRef::new(&claimant.name).within(&claimant.namespace)
    }
}

/// Sorts a namespace's prefixes by family, then first address, then length: the prefixes
/// inside one come right after it.
type Key = (IpFamily, u128, u8);

fn key(prefix: &IpPrefix) -> Key {
    (prefix.family(), prefix.range().0, prefix.prefix_len())
}

/// The Networks claiming one prefix (more than one when their prefixes are equal).
struct Holders {
    prefix: IpPrefix,
    claimants: BTreeSet<Claimant>,
}

#[derive(Default)]
struct State {
    /// By bucket (a namespace, or one for the whole cluster): its prefixes.
    namespaces: HashMap<String, BTreeMap<Key, Holders>>,
    /// Every claimant of each namespace, oldest first: who is within the namespace's limit.
    ages: HashMap<String, BTreeSet<Claimant>>,
    /// What each Network claims, to move or drop its claim.
    claims: HashMap<ObjectRef<Network>, Claim>,
}

impl State {
    fn insert(&mut self, obj_ref: ObjectRef<Network>, claim: Claim) {
        self.namespaces
            .entry(claim.bucket.clone())
            .or_default()
            .entry(key(&claim.prefix))
            .or_insert_with(|| Holders {
                prefix: claim.prefix,
                claimants: BTreeSet::new(),
            })
            .claimants
            .insert(claim.claimant.clone());
        self.ages
            .entry(claim.claimant.namespace.clone())
            .or_default()
            .insert(claim.claimant.clone());
        self.claims.insert(obj_ref, claim);
    }

    fn remove(&mut self, obj_ref: &ObjectRef<Network>) -> Option<Claim> {
        let claim = self.claims.remove(obj_ref)?;
        if let Some(prefixes) = self.namespaces.get_mut(&claim.bucket) {
            let key = key(&claim.prefix);
            if let Some(holders) = prefixes.get_mut(&key) {
                holders.claimants.remove(&claim.claimant);
                if holders.claimants.is_empty() {
                    prefixes.remove(&key);
                }
            }
            if prefixes.is_empty() {
                self.namespaces.remove(&claim.bucket);
            }
        }
        if let Some(ages) = self.ages.get_mut(&claim.claimant.namespace) {
            ages.remove(&claim.claimant);
            if ages.is_empty() {
                self.ages.remove(&claim.claimant.namespace);
            }
        }
        Some(claim)
    }

    /// The Network whose place within its namespace's `limit` a change of `claim` may have
    /// altered: the first one beyond the limit, who moved out when `claim` came, or the last one
    /// within it, who moved in when `claim` left; when newer than `claim`.
    fn at_the_limit(&self, claim: &Claim, limit: Option<usize>) -> Vec<ObjectRef<Network>> {
        let (Some(limit), Some(ages)) = (limit, self.ages.get(&claim.claimant.namespace)) else {
            return Vec::new();
        };
        // Present, it came: the one now first beyond the limit was within it. Gone, the one
        // now last within the limit was beyond it.
        let edge = if ages.contains(&claim.claimant) {
            ages.iter().nth(limit)
        } else {
            limit.checked_sub(1).and_then(|last| ages.iter().nth(last))
        };
        edge.filter(|claimant| **claimant > claim.claimant)
            .map(Claim::object_ref)
            .into_iter()
            .collect()
    }

    /// Every claim in `bucket` whose prefix overlaps `prefix`.
    fn overlapping(&self, bucket: &str, prefix: &IpPrefix) -> Vec<(&Claimant, IpPrefix)> {
        self.overlapping_prefixes(bucket, prefix)
            .flat_map(|holders| holders.claimants.iter().map(|c| (c, holders.prefix)))
            .collect()
    }

    /// The oldest claim in `bucket` older than `me` whose prefix overlaps `prefix`: the oldest
    /// older one of each overlapping prefix, the first of its sorted claimants, so that a
    /// thousand Networks of one prefix cost one lookup each, not a thousand.
    fn oldest_older(&self, bucket: &str, prefix: &IpPrefix, me: &Claimant) -> Option<(&Claimant, IpPrefix)> {
        self.overlapping_prefixes(bucket, prefix)
            .filter_map(|holders| {
                holders
                    .claimants
                    .range(..me)
                    .find(|c| c.name != me.name || c.namespace != me.namespace)
                    .map(|claimant| (claimant, holders.prefix))
            })
            .min_by(|a, b| a.0.cmp(b.0))
    }

    /// The prefixes in `bucket` that overlap `prefix`, with their claimants.
    fn overlapping_prefixes<'a>(
        &'a self,
        bucket: &str,
        prefix: &IpPrefix,
    ) -> impl Iterator<Item = &'a Holders> {
        let prefixes = self.namespaces.get(bucket);
        let prefix = *prefix;
        // Wider prefixes containing this one: each is this one truncated to its length.
        let wider = (0..prefix.prefix_len())
            .filter_map(move |len| prefixes.and_then(|p| p.get(&key(&prefix.truncate(len)))));
        // This prefix and the narrower ones inside it: they start within its range, at its
        // length or longer. (A wider one starting there starts at its first address with a
        // shorter length, which sorts before the range.)
        let (first, last) = prefix.range();
        let (family, len) = (prefix.family(), prefix.prefix_len());
        let inside = prefixes
            .into_iter()
            .flat_map(move |p| p.range((family, first, len)..=(family, last, u8::MAX)))
            .map(|(_, holders)| holders);
        wider.chain(inside)
    }

    /// The Networks newer than `claim`'s that overlap its prefix: the ones whose decision a
    /// change of `claim` may alter.
    fn newer_overlapping(&self, claim: &Claim) -> Vec<ObjectRef<Network>> {
        self.overlapping(&claim.bucket, &claim.prefix)
            .into_iter()
            .filter(|(claimant, _)| **claimant > claim.claimant)
            .map(|(claimant, _)| Claim::object_ref(claimant))
            .collect()
    }
}

/// The index of claimed prefixes, shared; clones see the same state.
#[derive(Clone, Default)]
pub struct PrefixIndex {
    /// Which prefixes may be claimed at all.
    policy: Arc<AddressPolicy>,
    scope: Scope,
    /// The most Networks a namespace may have in the backend; none when `None`.
    limit: Option<usize>,
    live: Arc<RwLock<State>>,
    /// The state being rebuilt during a re-list, and whether a first list completed.
    building: Arc<Mutex<(Option<State>, bool)>>,
}

impl PrefixIndex {
    /// An empty index of the prefixes `policy` allows, which must not overlap within `scope`.
    pub fn new(policy: AddressPolicy, scope: Scope) -> Self {
        Self {
            policy: Arc::new(policy),
            scope,
            ..Self::default()
        }
    }

    /// With at most `limit` Networks a namespace (the oldest that claim a prefix).
    pub fn with_limit(self, limit: Option<usize>) -> Self {
        Self { limit, ..self }
    }

    /// Whether `network` is beyond its namespace's limit: as many older Networks of its
    /// namespace as the limit allows claim a prefix already.
    pub fn beyond_limit(&self, network: &Network) -> Option<usize> {
        let limit = self.limit?;
        let me = Claimant::of(network);
        let state = self.live.read().unwrap_or_else(|e| e.into_inner());
        let older = state
            .ages
            .get(&me.namespace)
            .map_or(0, |ages| ages.range(..&me).take(limit).count());
        (older >= limit).then_some(limit)
    }

    /// Follows one watcher event (call it for every event of the stream, in order) and returns
    /// the Networks whose conflict decision the event may have changed, other than the one it
    /// is about (which its own event reconciles).
    pub fn apply(&self, event: &Event<Network>) -> Vec<ObjectRef<Network>> {
        match event {
            Event::Apply(network) => {
                let obj_ref = ObjectRef::from_obj(network);
                let mut state = self.live.write().unwrap_or_else(|e| e.into_inner());
                let old = state.remove(&obj_ref);
                let new = Claim::of(network, &self.policy, self.scope);
                if let Some(claim) = new.clone() {
                    state.insert(obj_ref.clone(), claim);
                }
                if old == new {
                    return Vec::new();
                }
                let affected: HashSet<_> = old
                    .iter()
                    .chain(new.iter())
                    .flat_map(|claim| {
                        let mut affected = state.newer_overlapping(claim);
                        affected.extend(state.at_the_limit(claim, self.limit));
                        affected
                    })
                    .filter(|r| *r != obj_ref)
                    .collect();
                affected.into_iter().collect()
            }
            Event::Delete(network) => {
                let mut state = self.live.write().unwrap_or_else(|e| e.into_inner());
                match state.remove(&ObjectRef::from_obj(network)) {
                    Some(old) => {
                        let mut affected = state.newer_overlapping(&old);
                        affected.extend(state.at_the_limit(&old, self.limit));
                        affected
                    }
                    None => Vec::new(),
                }
            }
            Event::Init => {
                self.building.lock().unwrap_or_else(|e| e.into_inner()).0 = Some(State::default());
                Vec::new()
            }
            Event::InitApply(network) => {
                let mut building = self.building.lock().unwrap_or_else(|e| e.into_inner());
                if let (Some(state), Some(claim)) =
                    (building.0.as_mut(), Claim::of(network, &self.policy, self.scope))
                {
                    state.insert(ObjectRef::from_obj(network), claim);
                }
                Vec::new()
            }
            Event::InitDone => {
                let mut building = self.building.lock().unwrap_or_else(|e| e.into_inner());
                let Some(new_state) = building.0.take() else {
                    return Vec::new();
                };
                let relist = std::mem::replace(&mut building.1, true);
                let mut live = self.live.write().unwrap_or_else(|e| e.into_inner());
                let old_state = std::mem::replace(&mut *live, new_state);
                // After the first list every Network is reconciled anyway. After a re-list
                // (the watch was lost for a while), the Networks that changed or vanished in
                // between concern their newer neighbours, as single events would have.
                if !relist {
                    return Vec::new();
                }
                let refs: HashSet<_> = old_state.claims.keys().chain(live.claims.keys()).collect();
                let mut affected = HashSet::new();
                for obj_ref in refs {
                    let (old, new) = (old_state.claims.get(obj_ref), live.claims.get(obj_ref));
                    if old == new {
                        continue;
                    }
                    for claim in old.into_iter().chain(new) {
                        affected.extend(live.newer_overlapping(claim).into_iter().filter(|r| r != obj_ref));
                        affected.extend(
                            live.at_the_limit(claim, self.limit)
                                .into_iter()
                                .filter(|r| r != obj_ref),
                        );
                    }
                }
                affected.into_iter().collect()
            }
        }
    }

    /// The Network that `network` (with `prefix`, its validated one) must yield to: the oldest
    /// older Network of its namespace (or of the cluster) whose prefix overlaps.
    pub fn winner_over(&self, network: &Network, prefix: &IpPrefix) -> Option<Overlap> {
        let bucket = self.scope.bucket(&network.namespace()?);
        let me = Claimant::of(network);
        let state = self.live.read().unwrap_or_else(|e| e.into_inner());
        // Only older claimants count, and the Network itself is never older than itself.
        winner_over(&me, state.oldest_older(&bucket, prefix, &me))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use sample_operator_api::NetworkSpec;

    /// An index whose policy allows any width (the tests use wide prefixes), of conflicts
    /// within a namespace.
    fn permissive() -> PrefixIndex {
        permissive_in(Scope::Namespace)
    }

    fn permissive_in(scope: Scope) -> PrefixIndex {
        PrefixIndex::new(
            AddressPolicy {
                allowed: Vec::new(),
                min_prefix_v4: 0,
                min_prefix_v6: 0,
            },
            scope,
        )
    }

    /// A Network created `second` seconds after the epoch.
    fn net(namespace: &str, name: &str, cidr: &str, second: i64) -> Network {
        let gateway = IpPrefix::parse(cidr).unwrap().network().to_string();
        let mut network = Network::new(
            name,
            NetworkSpec {
                cidr: cidr.into(),
                gateway,
            },
        );
        network.metadata.namespace = Some(namespace.into());
        network.metadata.creation_timestamp = Some(Time(Timestamp::from_second(second).unwrap()));
        network
    }

    fn winner(index: &PrefixIndex, network: &Network) -> Option<String> {
        let prefix = network.validate().unwrap().prefix;
        index.winner_over(network, &prefix).map(|o| o.name)
    }

    fn names(mut refs: Vec<ObjectRef<Network>>) -> Vec<String> {
        refs.sort_by(|a, b| a.name.cmp(&b.name));
        refs.into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn the_older_keeps_the_prefix_and_the_name_breaks_ties() {
        let me = Claimant {
            created: Timestamp::from_second(10).unwrap(),
            namespace: String::new(),
            name: "m".into(),
        };
        let p = IpPrefix::parse("10.0.0.0/8").unwrap();
        let older = Claimant {
            created: Timestamp::from_second(5).unwrap(),
            namespace: String::new(),
            name: "z".into(),
        };
        let oldest = Claimant {
            created: Timestamp::from_second(1).unwrap(),
            namespace: String::new(),
            name: "y".into(),
        };
        let tie_first = Claimant {
            created: me.created,
            namespace: String::new(),
            name: "a".into(),
        };
        let tie_after = Claimant {
            created: me.created,
            namespace: String::new(),
            name: "n".into(),
        };
        let newer = Claimant {
            created: Timestamp::from_second(11).unwrap(),
            namespace: String::new(),
            name: "b".into(),
        };
        assert_eq!(winner_over(&me, [(&newer, p), (&tie_after, p)]), None);
        assert_eq!(
            winner_over(&me, [(&tie_first, p)]).map(|o| o.name),
            Some("a".into())
        );
        assert_eq!(
            winner_over(&me, [(&older, p), (&newer, p), (&oldest, p)]).map(|o| o.name),
            Some("y".into())
        );
    }

    #[test]
    fn a_network_the_policy_refuses_claims_nothing() {
        let index = PrefixIndex::new(AddressPolicy::default(), Scope::Namespace);
        let everything = net("a", "everything", "0.0.0.0/0", 1);
        let allowed = net("a", "allowed", "10.60.0.0/16", 2);
        index.apply(&Event::Apply(everything));
        index.apply(&Event::Apply(allowed.clone()));
        assert_eq!(winner(&index, &allowed), None, "a refused Network blocks nobody");
    }

    #[test]
    fn a_namespace_keeps_its_oldest_networks_within_its_limit() {
        let index = permissive().with_limit(Some(2));
        let (first, second, third) = (
            net("a", "first", "10.1.0.0/16", 1),
            net("a", "second", "10.2.0.0/16", 2),
            net("a", "third", "10.3.0.0/16", 3),
        );
        let elsewhere = net("b", "elsewhere", "10.4.0.0/16", 4);
        for n in [&first, &second, &elsewhere] {
            assert!(index.apply(&Event::Apply(n.clone())).is_empty());
        }
        // The third of namespace a is beyond; b's first is not, whatever a has.
        assert_eq!(
            names(index.apply(&Event::Apply(third.clone()))),
            Vec::<String>::new()
        );
        assert_eq!(index.beyond_limit(&third), Some(2));
        assert_eq!(index.beyond_limit(&second), None);
        assert_eq!(index.beyond_limit(&elsewhere), None);
        // An older one goes: the third moves in, and is reconciled.
        assert_eq!(names(index.apply(&Event::Delete(first))), ["third"]);
        assert_eq!(index.beyond_limit(&third), None);
        // One older than all comes back (a re-list): the third moves out again.
        let earliest = net("a", "earliest", "10.5.0.0/16", 0);
        assert_eq!(names(index.apply(&Event::Apply(earliest))), ["third"]);
        assert_eq!(index.beyond_limit(&third), Some(2));
        // Without a limit nobody is beyond it.
        assert_eq!(permissive().beyond_limit(&third), None);
    }

    #[test]
    fn across_the_cluster_the_oldest_keeps_the_prefix_whatever_its_namespace() {
        let index = permissive_in(Scope::Cluster);
        let oldest = net("b", "theirs", "10.1.0.0/16", 1);
        let mine = net("a", "mine", "10.1.2.0/24", 2);
        let elsewhere = net("a", "elsewhere", "10.2.0.0/16", 3);
        for n in [&oldest, &mine, &elsewhere] {
            index.apply(&Event::Apply(n.clone()));
        }
        let overlap = index
            .winner_over(&mine, &mine.validate().unwrap().prefix)
            .unwrap();
        assert_eq!(
            (overlap.namespace.as_str(), overlap.name.as_str()),
            ("b", "theirs")
        );
        assert_eq!(winner(&index, &elsewhere), None);
        assert_eq!(winner(&index, &oldest), None, "the oldest yields to no one");
        // A Network of the same name in another namespace is another Network.
        let namesake = net("c", "theirs", "10.1.0.0/16", 4);
        index.apply(&Event::Apply(namesake.clone()));
        assert_eq!(winner(&index, &namesake), Some("theirs".into()));
        // Its deletion concerns the newer ones of every namespace.
        assert_eq!(names(index.apply(&Event::Delete(oldest))), ["mine", "theirs"]);
        assert_eq!(winner(&index, &mine), None);
    }

    #[test]
    fn finds_wider_equal_and_narrower_prefixes_in_the_same_namespace_only() {
        let index = permissive();
        let nets = [
            net("a", "wide", "10.0.0.0/8", 1),
            net("a", "same", "10.1.0.0/16", 2),
            net("a", "inside", "10.1.2.0/24", 3),
            net("a", "beside", "10.2.0.0/16", 4),
            net("a", "v6", "fd12::/16", 5),
            net("b", "elsewhere", "10.1.0.0/16", 0),
        ];
        for n in &nets {
            index.apply(&Event::Apply(n.clone()));
        }
        let me = net("a", "me", "10.1.0.0/16", 10);
        let state = index.live.read().unwrap();
        let mut found: Vec<_> = state
            .overlapping("a", &me.validate().unwrap().prefix)
            .into_iter()
            .map(|(c, p)| format!("{} {p}", c.name))
            .collect();
        found.sort();
        assert_eq!(
            found,
            ["inside 10.1.2.0/24", "same 10.1.0.0/16", "wide 10.0.0.0/8"]
        );
        drop(state);
        assert_eq!(winner(&index, &me), Some("wide".into()));
        // The oldest Network of namespace "b" overlaps nothing of namespace "a".
        assert_eq!(winner(&index, &net("b", "elsewhere", "10.1.0.0/16", 0)), None);
        assert_eq!(
            winner(&index, &net("b", "late", "10.1.0.0/16", 9)),
            Some("elsewhere".into())
        );
        assert_eq!(
            winner(&index, &net("a", "v6-late", "fd12:1::/64", 9)),
            Some("v6".into())
        );
        assert_eq!(winner(&index, &nets[0]), None, "the oldest yields to no one");
    }

    #[test]
    fn a_change_concerns_only_the_newer_overlapping_networks() {
        let index = permissive();
        let old = net("a", "old", "10.0.0.0/16", 1);
        let newer = net("a", "newer", "10.0.1.0/24", 2);
        let newest = net("a", "newest", "10.5.0.0/16", 3);
        let older = net("a", "older", "10.0.0.0/24", 0);
        for n in [&old, &newer, &newest, &older] {
            index.apply(&Event::Apply(n.clone()));
        }
        assert_eq!(winner(&index, &newer), Some("old".into()));

        // Unchanged: nobody to tell.
        assert!(index.apply(&Event::Apply(old.clone())).is_empty());
        // Moving "old" concerns the newer ones overlapping where it was and where it goes,
        // never the older one it overlaps.
        let moved = net("a", "old", "10.5.0.0/24", 1);
        assert_eq!(
            names(index.apply(&Event::Apply(moved.clone()))),
            ["newer", "newest"]
        );
        assert_eq!(winner(&index, &newer), None);
        assert_eq!(winner(&index, &newest), Some("old".into()));

        // Deletion is asked: the prefix is released at once.
        let mut deleting = moved.clone();
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        assert_eq!(names(index.apply(&Event::Apply(deleting.clone()))), ["newest"]);
        assert_eq!(winner(&index, &newest), None);
        assert!(
            index.apply(&Event::Delete(deleting)).is_empty(),
            "already released"
        );

        // An invalid spec claims nothing.
        let mut invalid = net("a", "newest", "10.5.0.0/16", 3);
        invalid.spec.gateway = "192.168.0.1".into();
        index.apply(&Event::Apply(invalid));
        let late = net("a", "late", "10.5.0.0/16", 9);
        assert_eq!(winner(&index, &late), None);
    }

    #[test]
    fn a_relist_tells_the_neighbours_of_what_changed_while_the_watch_was_lost() {
        let index = permissive();
        let old = net("a", "old", "10.0.0.0/16", 1);
        let blocked = net("a", "blocked", "10.0.1.0/24", 2);
        let unrelated = net("a", "unrelated", "10.9.0.0/16", 3);
        index.apply(&Event::Init);
        for n in [&old, &blocked, &unrelated] {
            index.apply(&Event::InitApply(n.clone()));
        }
        assert!(
            index.apply(&Event::InitDone).is_empty(),
            "the first list reconciles all anyway"
        );
        assert_eq!(winner(&index, &blocked), Some("old".into()));

        // "old" was deleted while the watch was down.
        index.apply(&Event::Init);
        for n in [&blocked, &unrelated] {
            index.apply(&Event::InitApply(n.clone()));
        }
        // Until the re-list completes, lookups see the old state.
        assert_eq!(winner(&index, &blocked), Some("old".into()));
        assert_eq!(names(index.apply(&Event::InitDone)), ["blocked"]);
        assert_eq!(winner(&index, &blocked), None);
    }

    #[test]
    fn among_many_overlapping_networks_each_yields_to_the_oldest_older_one() {
        // Same prefixes many times over, nested ones, and ties on the second: the index's
        // answer (one lookup per overlapping prefix) is the one a scan of every Network gives.
        let index = permissive();
        let cidrs = [
            "10.0.0.0/16",
            "10.0.0.0/24",
            "10.0.1.0/24",
            "10.0.0.0/8",
            "10.0.0.128/25",
        ];
        let networks: Vec<Network> = (0..1_000)
            .map(|i| {
                net(
                    "ns",
                    &format!("n{i:04}"),
                    cidrs[(i * 7) % cidrs.len()],
                    (i % 37) as i64,
                )
            })
            .collect();
        for network in &networks {
            index.apply(&Event::Apply(network.clone()));
        }
        let scan = |me: &Network| {
            let mine = me.validate().unwrap().prefix;
            let claimants: Vec<(Claimant, IpPrefix)> = networks
                .iter()
                .filter(|other| other.name_any() != me.name_any())
                .map(|other| (Claimant::of(other), other.validate().unwrap().prefix))
                .filter(|(_, prefix)| prefix.overlaps(&mine))
                .collect();
            winner_over(&Claimant::of(me), claimants.iter().map(|(c, p)| (c, *p))).map(|o| o.name)
        };
        for network in &networks {
            assert_eq!(winner(&index, network), scan(network), "{}", network.name_any());
        }
        assert_eq!(winner(&index, &networks[0]), None, "the oldest yields to none");
    }
}
