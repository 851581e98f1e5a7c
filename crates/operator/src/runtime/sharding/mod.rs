//! Sharding: several replicas split a controller's objects between them, each reconciling only
//! its share, on Kubernetes' own sharded list and watch (KEP-5866) where the API server serves
//! it.
//!
//! The hash space of KEP-5866 (FNV-1a 64-bit of an object's UID or namespace) is cut into
//! [`BUCKETS`] equal buckets. Replicas announce themselves with a Lease each; every replica
//! computes the same [`assign`]ment of buckets from the live ones, and holds a bucket only once
//! the shared holder map says no other live replica does ([`membership`]): a bucket moves only
//! after its old holder has stopped reconciling it and said so, or after its Lease expired.
//!
//! A replica's watches carry its buckets as a `shardSelector` ([`layer`]), so the API server
//! sends it only its share; an API server without the feature ignores the parameter, and the
//! same buckets then filter on this side ([`Ownership`]), which is also applied when the server
//! filters, as a guard that costs one hash per event.

pub mod layer;
pub mod membership;

use std::collections::BTreeMap;
use std::fmt;

use kube::Resource;
use kube::runtime::watcher::Event;

/// Buckets the hash space is cut into: enough for an even split among a few dozen replicas,
/// few enough that a replica's selector stays a few hundred characters.
pub const BUCKETS: u32 = 64;

/// Bits of the hash that name its bucket.
const BUCKET_SHIFT: u32 = 64 - BUCKETS.trailing_zeros();

/// The label on a Foo's Deployment naming its Foo's bucket: Deployments follow their owner.
pub const BUCKET_LABEL: &str = "sample-operator.k8s.io/shard-bucket";

/// FNV-1a 64-bit, the hash of KEP-5866 (Go's `hash/fnv` `New64a`): the bytes alone, without
/// the terminator that `Hash for str` would add.
pub fn fnv1a(value: &str) -> u64 {
    use std::hash::Hasher;
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(value.as_bytes());
    hasher.finish()
}

/// The bucket of a hash.
pub fn bucket_of(hash: u64) -> u32 {
    (hash >> BUCKET_SHIFT) as u32
}

/// What an object is hashed on, in the field paths KEP-5866 accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// `object.metadata.uid`: an even spread of a kind whose objects stand alone.
    Uid,
    /// `object.metadata.namespace`: a namespace's objects together, for a controller that
    /// joins objects of one namespace (a MyCustomResource and its Pod).
    Namespace,
}

impl Key {
    pub fn field(self) -> &'static str {
        match self {
            Key::Uid => "object.metadata.uid",
            Key::Namespace => "object.metadata.namespace",
        }
    }

    /// The value an object is hashed on.
    pub fn value_of(self, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
        match self {
            Key::Uid => meta.uid.as_deref(),
            Key::Namespace => meta.namespace.as_deref(),
        }
        .unwrap_or_default()
    }
}

/// A set of buckets.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Buckets(u64);

impl Buckets {
    pub const NONE: Buckets = Buckets(0);
    pub const ALL: Buckets = Buckets(u64::MAX);

    pub fn contains(self, bucket: u32) -> bool {
        bucket < BUCKETS && self.0 & (1 << bucket) != 0
    }

    pub fn with(self, bucket: u32) -> Buckets {
        Buckets(self.0 | (1 << bucket))
    }

    pub fn union(self, other: Buckets) -> Buckets {
        Buckets(self.0 | other.0)
    }

    pub fn intersection(self, other: Buckets) -> Buckets {
        Buckets(self.0 & other.0)
    }

    pub fn without(self, other: Buckets) -> Buckets {
        Buckets(self.0 & !other.0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn len(self) -> u32 {
        self.0.count_ones()
    }

    pub fn iter(self) -> impl Iterator<Item = u32> {
        (0..BUCKETS).filter(move |b| self.contains(*b))
    }

    /// Runs of adjacent buckets, as `[first, last]`.
    pub fn runs(self) -> Vec<(u32, u32)> {
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for bucket in self.iter() {
            match runs.last_mut() {
                Some((_, last)) if *last + 1 == bucket => *last = bucket,
                _ => runs.push((bucket, bucket)),
            }
        }
        runs
    }

    /// Whether an object hashed on `value` falls in these buckets.
    pub fn admits(self, value: &str) -> bool {
        self.contains(bucket_of(fnv1a(value)))
    }

    /// The `shardSelector` of KEP-5866 selecting these buckets on `key`; `None` for every
    /// bucket (no selector needed) or none (no request should be sent).
    pub fn selector(self, key: Key) -> Option<String> {
        if self == Buckets::ALL || self.is_empty() {
            return None;
        }
        let bound = |bucket: u32| -> String {
            if bucket == BUCKETS {
                // 2^64, the one 17-digit bound the API server accepts.
                "0x10000000000000000".into()
            } else {
                format!("0x{:016x}", u64::from(bucket) << BUCKET_SHIFT)
            }
        };
        let ranges: Vec<String> = self
            .runs()
            .into_iter()
            .map(|(first, last)| {
                format!(
                    "shardRange({}, '{}', '{}')",
                    key.field(),
                    bound(first),
                    bound(last + 1)
                )
            })
            .collect();
        Some(ranges.join(" || "))
    }

    /// The values of [`BUCKET_LABEL`] in these buckets, as a label selector's set.
    pub fn label_selector(self) -> String {
        let values: Vec<String> = self.iter().map(|b| b.to_string()).collect();
        format!("{BUCKET_LABEL} in ({})", values.join(","))
    }
}

/// `0-5,9,12-13`: how buckets are written in the holder map and logs.
impl fmt::Display for Buckets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let runs: Vec<String> = self
            .runs()
            .into_iter()
            .map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
            .collect();
        f.write_str(&runs.join(","))
    }
}

impl fmt::Debug for Buckets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buckets({self})")
    }
}

impl std::str::FromStr for Buckets {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut buckets = Buckets::NONE;
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (first, last) = part.split_once('-').unwrap_or((part, part));
            let parse = |n: &str| {
                n.parse::<u32>()
                    .ok()
                    .filter(|n| *n < BUCKETS)
                    .ok_or_else(|| format!("not a bucket: {n:?} in {text:?}"))
            };
            for bucket in parse(first)?..=parse(last)? {
                buckets = buckets.with(bucket);
            }
        }
        Ok(buckets)
    }
}

/// What a run of the controllers on some buckets needs: the buckets, and the table of
/// selectors the client's [`layer`] sends.
#[derive(Clone, Debug)]
pub struct ShardRun {
    pub buckets: Buckets,
    pub selectors: layer::Selectors,
}

/// Whether the API server applies shard selectors to `collection` (a path such as
/// `/apis/samplecontroller.k8s.io/v1alpha1/foos`), judged by its answers: `None` while the
/// collection is empty and nothing tells.
///
/// A list echoes its selector in `shardInfo` only for built-in kinds: the v1.36 API server
/// filters custom resources without saying so (their list type has no `shardInfo`). So the
/// probe asks for the first object, then for the first object outside that one's bucket: a
/// server that ignores selectors answers with the same object again.
pub async fn server_filters(
    client: &kube::Client,
    collection: &str,
    key: Key,
) -> Result<Option<bool>, kube::Error> {
    #[derive(serde::Deserialize)]
    struct Item {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    }
    #[derive(serde::Deserialize)]
    struct List {
        #[serde(default)]
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta,
        #[serde(default)]
        items: Vec<Item>,
    }
    let first = |buckets: Buckets| {
        let selector = buckets.selector(key).unwrap_or_else(|| {
            // Every bucket, written out: a request naming a selector keeps its own.
            format!(
                "shardRange({}, '0x0000000000000000', '0x10000000000000000')",
                key.field()
            )
        });
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("limit", "1")
            .append_pair("shardSelector", &selector)
            .finish();
        let request = http::Request::get(format!("{collection}?{query}")).body(Vec::new());
        async move {
            let list: List =
                client
                    .request(request.map_err(|e| {
                        kube::Error::BuildRequest(kube::core::request::Error::BuildRequest(e))
                    })?)
                    .await?;
            Ok::<_, kube::Error>((list.metadata.shard_info.is_some(), list.items.into_iter().next()))
        }
    };
    let (echoed, Some(object)) = first(Buckets::ALL).await? else {
        return Ok(None);
    };
    if echoed {
        return Ok(Some(true));
    }
    let value = key.value_of(&object.metadata);
    let elsewhere = Buckets::ALL.without(Buckets::NONE.with(bucket_of(fnv1a(value))));
    let (echoed, next) = first(elsewhere).await?;
    Ok(Some(
        echoed || next.is_none_or(|n| n.metadata.uid != object.metadata.uid),
    ))
}

/// The bucket label of an object hashed on `value`.
pub fn bucket_label(value: &str) -> String {
    bucket_of(fnv1a(value)).to_string()
}

/// Which objects of a watch this replica reconciles: those whose `key` falls in `buckets`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ownership {
    pub key: Key,
    pub buckets: Buckets,
}

impl Ownership {
    pub fn owns<K: Resource>(&self, object: &K) -> bool {
        self.buckets.admits(self.key.value_of(object.meta()))
    }

    /// Whether a watch event passes: those about objects of other buckets do not (an API
    /// server that ignored the selector sends them).
    pub fn admits<K: Resource>(&self, event: &Event<K>) -> bool {
        match event {
            Event::Apply(object) | Event::InitApply(object) | Event::Delete(object) => self.owns(object),
            Event::Init | Event::InitDone => true,
        }
    }
}

/// Every bucket assigned to one of `members`: the same result on every replica that sees the
/// same members, each member getting `BUCKETS / n` or one more, and few buckets moving when a
/// member comes or goes (rendezvous hashing, each bucket going to the member that ranks it
/// highest among those with room left).
pub fn assign<'a>(members: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, Buckets> {
    let mut members: Vec<&str> = members.into_iter().collect();
    members.sort_unstable();
    members.dedup();
    let mut assigned: BTreeMap<String, Buckets> =
        members.iter().map(|m| ((*m).to_owned(), Buckets::NONE)).collect();
    if members.is_empty() {
        return assigned;
    }
    let n = members.len() as u32;
    let (base, mut extra) = (BUCKETS / n, BUCKETS % n);
    for bucket in 0..BUCKETS {
        let mut ranked: Vec<(u64, &str)> = members.iter().map(|m| (weight(m, bucket), *m)).collect();
        ranked.sort_unstable_by(|a, b| b.cmp(a));
        let chosen = ranked
            .into_iter()
            .map(|(_, m)| m)
            .find(|m| {
                let load = assigned[*m].len();
                load < base || (load == base && extra > 0)
            })
            .expect("the quotas add up to every bucket");
        let held = assigned.get_mut(chosen).expect("a member");
        if held.len() == base {
            extra -= 1;
        }
        *held = held.with(bucket);
    }
    assigned
}

/// How highly `member` ranks `bucket`: a well-mixed hash of both. (FNV-1a alone barely
/// stirs its high bits with the last bytes, so every bucket would rank the members alike.)
fn weight(member: &str, bucket: u32) -> u64 {
    // splitmix64's finaliser.
    let mut z = fnv1a(member) ^ u64::from(bucket).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_go_hash_fnv_new64a() {
        // The reference vectors of FNV-1a 64 (and what Go's hash/fnv returns for them).
        assert_eq!(fnv1a(""), 0xcbf29ce484222325);
        assert_eq!(fnv1a("a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a("foobar"), 0x85944171f73967e8);
    }

    /// Why the namespace key spreads as the names do: FNV-1a's last bytes barely stir its high
    /// bits, which the buckets are cut from, so a numbered or lettered family of namespaces
    /// falls into one or two buckets, while names that differ early spread. UIDs, random, spread.
    #[test]
    fn numbered_names_fall_together_and_words_spread() {
        let buckets = |names: Vec<String>| -> std::collections::BTreeSet<u32> {
            names.iter().map(|n| bucket_of(fnv1a(n))).collect()
        };
        assert!(buckets((0..100).map(|i| format!("tenant-{i}")).collect()).len() <= 2);
        assert_eq!(
            buckets((b'a'..=b'z').map(|c| format!("team-{}", c as char)).collect()).len(),
            1
        );
        let words = [
            "payments",
            "search",
            "checkout",
            "billing",
            "identity",
            "monitoring",
            "logging",
            "ingress",
        ];
        assert!(buckets(words.iter().map(|w| (*w).to_owned()).collect()).len() >= 7);
    }

    #[test]
    fn a_selector_follows_the_grammar_of_kep_5866() {
        let half: Buckets = "0-31".parse().unwrap();
        assert_eq!(
            half.selector(Key::Uid).unwrap(),
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')"
        );
        let ends: Buckets = "0,62-63".parse().unwrap();
        assert_eq!(
            ends.selector(Key::Namespace).unwrap(),
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x0400000000000000') || \
             shardRange(object.metadata.namespace, '0xf800000000000000', '0x10000000000000000')"
        );
        assert_eq!(Buckets::ALL.selector(Key::Uid), None);
        assert_eq!(Buckets::NONE.selector(Key::Uid), None);
    }

    #[test]
    fn every_bound_is_sixteen_hex_digits_but_the_end_of_the_space() {
        // The API server compares bounds as strings of equal length: a shorter one would
        // compare wrongly, and it refuses any but 2^64 at 17 digits.
        let odd: Buckets = "1,3,5-9,40,63".parse().unwrap();
        let selector = odd.selector(Key::Uid).unwrap();
        for bound in selector.split('\'').skip(1).step_by(2) {
            let digits = bound.strip_prefix("0x").unwrap();
            assert!(digits.len() == 16 || bound == "0x10000000000000000", "{bound}");
            assert!(
                digits
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
            );
        }
    }

    #[test]
    fn a_bucket_is_the_range_its_selector_names() {
        // An object's hash lies in its bucket's range, written as the API server compares it.
        for value in [
            "",
            "a",
            "default",
            "3f2b4c1e-0000-4000-8000-000000000001",
            "tenant-7",
        ] {
            let bucket = bucket_of(fnv1a(value));
            let selector = Buckets::NONE.with(bucket).selector(Key::Uid).unwrap();
            let bounds: Vec<&str> = selector.split('\'').skip(1).step_by(2).collect();
            let hash = format!("0x{:016x}", fnv1a(value));
            let less = |a: &str, b: &str| (a.len(), a) < (b.len(), b);
            assert!(
                !less(&hash, bounds[0]) && less(&hash, bounds[1]),
                "{value}: {hash} {bounds:?}"
            );
        }
    }

    #[test]
    fn buckets_are_written_and_read_as_runs() {
        let buckets: Buckets = "0-5,9,12-13".parse().unwrap();
        assert_eq!(buckets.len(), 9);
        assert_eq!(buckets.to_string(), "0-5,9,12-13");
        assert_eq!("".parse::<Buckets>().unwrap(), Buckets::NONE);
        assert_eq!(Buckets::ALL.to_string(), "0-63");
        assert!("64".parse::<Buckets>().is_err());
        assert_eq!(
            buckets.label_selector(),
            "sample-operator.k8s.io/shard-bucket in (0,1,2,3,4,5,9,12,13)"
        );
    }

    #[test]
    fn every_bucket_has_one_member_and_shares_differ_by_one_at_most() {
        for n in 1..=12 {
            let names: Vec<String> = (0..n).map(|i| format!("replica-{i}")).collect();
            let assigned = assign(names.iter().map(String::as_str));
            let mut union = Buckets::NONE;
            for held in assigned.values() {
                assert!(union.intersection(*held).is_empty(), "a bucket assigned twice");
                union = union.union(*held);
                let share = held.len();
                assert!(share == BUCKETS / n || share == BUCKETS / n + 1, "{n}: {share}");
            }
            assert_eq!(union, Buckets::ALL, "{n}");
        }
    }

    #[test]
    fn a_member_joining_moves_about_its_share_only() {
        let three = assign(["a", "b", "c"]);
        let four = assign(["a", "b", "c", "d"]);
        let moved: u32 = ["a", "b", "c"]
            .iter()
            .map(|m| three[*m].without(four[*m]).len())
            .sum();
        // d's share is 16; bounded loads move a few more than that, never most of the space.
        assert!((16..=28).contains(&moved), "{moved}");
        // The same members in any order give the same assignment.
        assert_eq!(assign(["c", "a", "b"]), three);
    }

    #[test]
    fn ownership_passes_list_markers_and_the_objects_of_its_buckets() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let object = |uid: &str| {
            let mut map = ConfigMap::default();
            map.metadata.uid = Some(uid.into());
            map
        };
        let bucket = bucket_of(fnv1a("uid-1"));
        let ours = Ownership {
            key: Key::Uid,
            buckets: Buckets::NONE.with(bucket),
        };
        assert!(ours.admits(&Event::Apply(object("uid-1"))));
        assert!(ours.admits(&Event::<ConfigMap>::InitDone));
        let other = (0..1000)
            .map(|i| format!("uid-{i}"))
            .find(|uid| bucket_of(fnv1a(uid)) != bucket)
            .unwrap();
        assert!(!ours.admits(&Event::Delete(object(&other))));
    }
}
