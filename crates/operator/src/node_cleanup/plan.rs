//! What the node clean-up may remove, decided from what it saw: pure functions of the links,
//! the host-local folders and the operator's NetworkAttachmentDefinitions, so that every rule
//! is tested without a node.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::network::backend::multus::{BRIDGE_PREFIX, NetworkAttachmentDefinition};

/// Whether `name` is in the operator's bridge name space, exactly: [`BRIDGE_PREFIX`] and 12
/// lowercase hexadecimal digits, as `multus::bridge_name` writes it. Nothing else is ever
/// touched: not `sonode0` (the local cluster's Pod bridge), not `cni0`, `docker0` or `br-…`.
pub fn is_operator_bridge(name: &str) -> bool {
    name.strip_prefix(BRIDGE_PREFIX).is_some_and(|hex| {
        hex.len() == 12
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Whether `name` is a host-local folder of an operator Network: `<namespace>.<uid>`, as
/// `multus::cni_network_name` writes it (a namespace is a DNS label, a UID a lowercase UUID).
pub fn is_operator_network_name(name: &str) -> bool {
    let Some((namespace, uid)) = name.split_once('.') else {
        return false;
    };
    let label = !namespace.is_empty()
        && namespace.len() <= 63
        && namespace
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !namespace.starts_with('-')
        && !namespace.ends_with('-');
    let uuid = uid.len() == 36
        && uid.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        });
    label && uuid
}

/// The largest configuration a definition of the operator's may have and still hold something.
/// The operator's are a few hundred bytes; anyone may label a definition of their own as the
/// operator's, and up to the API server's limit on an object's size.
pub const MAX_CONFIG_BYTES: usize = 4096;

/// Trims a definition before the clean-up caches it to what [`Held::of`] reads: its name and
/// namespace, and its configuration unless it is larger than any the operator writes (then it
/// holds nothing), so that labelled definitions of any size cost the clean-up little.
pub fn trim(nad: &mut NetworkAttachmentDefinition) {
    nad.types = None;
    nad.metadata = kube::api::ObjectMeta {
        name: nad.metadata.name.take(),
        namespace: nad.metadata.namespace.take(),
        ..Default::default()
    };
    if nad
        .spec
        .config
        .as_ref()
        .is_some_and(|c| c.len() > MAX_CONFIG_BYTES)
    {
        nad.spec.config = None;
    }
}

/// The bridges and CNI network names (host-local's folders) that the operator's definitions
/// hold now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub bridges: HashSet<String>,
    pub networks: HashSet<String>,
}

impl Held {
    /// From the operator's definitions. One whose configuration does not parse holds nothing:
    /// the operator writes every configuration it labels and reverts edits, so such a
    /// definition is not one of its Networks' (a tenant may label a definition of their own).
    pub fn of<'a>(definitions: impl IntoIterator<Item = &'a NetworkAttachmentDefinition>) -> Self {
        let mut held = Held::default();
        for nad in definitions {
            let Some(config) = nad
                .spec
                .config
                .as_deref()
                .and_then(|c| serde_json::from_str::<serde_json::Value>(c).ok())
            else {
                continue;
            };
            if let Some(bridge) = config.get("bridge").and_then(|b| b.as_str()) {
                held.bridges.insert(bridge.to_owned());
            }
            if let Some(name) = config.get("name").and_then(|n| n.as_str()) {
                held.networks.insert(name.to_owned());
            }
        }
        held
    }
}

/// A link of the node, as far as the clean-up reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    pub index: u32,
    pub name: String,
    /// Its kind is `bridge`.
    pub is_bridge: bool,
    /// The index of the bridge (or bond) it is a port of.
    pub controller: Option<u32>,
}

/// The operator's bridges that no definition holds and no link is a port of (no Pod's veth,
/// so no Pod uses them), by index and name.
pub fn unused_bridges(links: &[Link], held: &Held) -> Vec<(u32, String)> {
    let with_ports: HashSet<u32> = links.iter().filter_map(|l| l.controller).collect();
    links
        .iter()
        .filter(|l| l.is_bridge && is_operator_bridge(&l.name))
        .filter(|l| !held.bridges.contains(&l.name) && !with_ports.contains(&l.index))
        .map(|l| (l.index, l.name.clone()))
        .collect()
}

/// A host-local folder as the clean-up reads it: its name and the names of its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolFolder {
    pub name: String,
    pub files: Vec<String>,
}

/// Whether a host-local folder's files are only its bookkeeping, no lease: `lock` and
/// `last_reserved_ip.<range>`. Each address a Pod holds is a file named by the address, and
/// is released by the Pod's CNI DEL.
fn holds_no_lease(files: &[String]) -> bool {
    files
        .iter()
        .all(|f| f == "lock" || f.starts_with("last_reserved_ip."))
}

/// The host-local folders of operator Networks that no definition names and no Pod holds an
/// address in.
pub fn unused_pools(folders: &[PoolFolder], held: &Held) -> Vec<String> {
    folders
        .iter()
        .filter(|f| is_operator_network_name(&f.name) && !held.networks.contains(&f.name))
        .filter(|f| holds_no_lease(&f.files))
        .map(|f| f.name.clone())
        .collect()
}

/// What has been unused since when: something is removed only once it has been unused for the
/// whole grace period, across passes, so that a bridge the CNI plugin has just made (its
/// definition not yet in the watch, the Pod's veth not yet in it) is left alone.
#[derive(Debug, Default)]
pub struct Pending<K> {
    since: HashMap<K, Instant>,
}

impl<K: Clone + Eq + std::hash::Hash> Pending<K> {
    /// Of what is unused now, what has been so since at least `grace` before `now`; forgets
    /// what is in use again or gone.
    pub fn due(&mut self, unused: Vec<K>, now: Instant, grace: Duration) -> Vec<K> {
        let unused: HashSet<K> = unused.into_iter().collect();
        self.since.retain(|k, _| unused.contains(k));
        let mut due = Vec::new();
        for k in unused {
            let since = *self.since.entry(k.clone()).or_insert(now);
            if now.duration_since(since) >= grace {
                due.push(k);
            }
        }
        due
    }

    /// Forgets `k` (it was removed).
    pub fn forget(&mut self, k: &K) {
        self.since.remove(k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::backend::multus::{self, NetworkAttachmentDefinitionSpec};
    use sample_operator_api::{Addressing, Network, NetworkSpec};

    fn addressing(cidr: &str, gateway: &str) -> Addressing {
        let spec = NetworkSpec {
            cidr: cidr.into(),
            gateway: gateway.into(),
        };
        Network::new("lab", spec).validate().unwrap()
    }

    fn definition(namespace: &str, uid: &str, cidr: &str, gateway: &str) -> NetworkAttachmentDefinition {
        let addressing = addressing(cidr, gateway);
        NetworkAttachmentDefinition {
            spec: NetworkAttachmentDefinitionSpec {
                config: Some(multus::cni_config(namespace, uid, &addressing)),
            },
            ..Default::default()
        }
    }

    const UID: &str = "0b6e5d3c-1a2b-4c5d-8e9f-a0b1c2d3e4f5";

    fn bridge(index: u32, name: &str) -> Link {
        Link {
            index,
            name: name.into(),
            is_bridge: true,
            controller: None,
        }
    }

    #[test]
    fn only_names_the_operator_writes_are_its_bridges() {
        let written = multus::bridge_name(UID, &addressing("10.1.0.0/24", "10.1.0.1"));
        assert!(is_operator_bridge(&written), "{written}");
        for other in [
            "sonode0",
            "son",
            "son0123456789a",
            "son0123456789abc",
            "son0123456789AB",
            "son0123456789ag",
            "cni0",
            "docker0",
            "br-0123456789ab",
            "xson0123456789a",
        ] {
            assert!(!is_operator_bridge(other), "{other}");
        }
    }

    #[test]
    fn only_names_the_operator_writes_are_its_pools() {
        assert!(is_operator_network_name(&multus::cni_network_name("team-a", UID)));
        for other in [
            "sample-operator-node",
            "cbr0",
            "team-a",
            "team-a.not-a-uid",
            "Team.0b6e5d3c-1a2b-4c5d-8e9f-a0b1c2d3e4f5",
            "-a.0b6e5d3c-1a2b-4c5d-8e9f-a0b1c2d3e4f5",
            ".0b6e5d3c-1a2b-4c5d-8e9f-a0b1c2d3e4f5",
            "a.0b6e5d3c-1a2b-4c5d-8e9f-a0b1c2d3e4f",
            "a.0B6E5D3C-1A2B-4C5D-8E9F-A0B1C2D3E4F5",
            "a/b.0b6e5d3c-1a2b-4c5d-8e9f-a0b1c2d3e4f5",
            "..",
        ] {
            assert!(!is_operator_network_name(other), "{other}");
        }
    }

    #[test]
    fn a_bridge_goes_only_when_no_definition_holds_it_and_no_port_uses_it() {
        let current = definition("team-a", UID, "10.1.0.0/24", "10.1.0.1");
        let held = Held::of([&current]);
        let holds = held.bridges.iter().next().unwrap().clone();
        let gone = "son0123456789ab";
        let in_use = "son00000000beef";
        let mut veth = bridge(9, "veth1234");
        veth.is_bridge = false;
        veth.controller = Some(3);
        let mut not_a_bridge = bridge(4, "son0000000000aa");
        not_a_bridge.is_bridge = false;
        let links = [
            bridge(1, &holds),
            bridge(2, gone),
            bridge(3, in_use),
            not_a_bridge,
            bridge(5, "sonode0"),
            bridge(6, "docker0"),
            veth,
        ];
        assert_eq!(unused_bridges(&links, &held), vec![(2, gone.to_owned())]);
        // Once the definition goes, its bridge is unused too.
        assert_eq!(
            unused_bridges(&links, &Held::default()),
            vec![(1, holds), (2, gone.to_owned())]
        );
    }

    #[test]
    fn a_trimmed_definition_keeps_the_operators_configuration_and_nothing_larger() {
        let mut nad = definition("team-a", UID, "10.1.0.0/24", "10.1.0.1");
        nad.metadata.name = Some("lab".into());
        nad.metadata.namespace = Some("team-a".into());
        nad.metadata.labels = Some([("big".to_owned(), "x".repeat(60))].into());
        nad.metadata.annotations = Some([("big".to_owned(), "x".repeat(100_000))].into());
        let config = nad.spec.config.clone();
        assert!(config.as_ref().unwrap().len() < MAX_CONFIG_BYTES / 4);
        trim(&mut nad);
        assert_eq!(nad.metadata.name.as_deref(), Some("lab"));
        assert_eq!(nad.metadata.namespace.as_deref(), Some("team-a"));
        assert!(nad.metadata.labels.is_none() && nad.metadata.annotations.is_none());
        assert_eq!(nad.spec.config, config);
        // A labelled definition with a megabyte of configuration costs nothing and holds nothing.
        let mut large = definition("team-b", UID, "10.2.0.0/24", "10.2.0.1");
        let padded = config
            .unwrap()
            .replacen('{', &format!("{{\"pad\": \"{}\",", "x".repeat(1 << 20)), 1);
        assert!(serde_json::from_str::<serde_json::Value>(&padded).is_ok());
        large.spec.config = Some(padded);
        trim(&mut large);
        assert_eq!(large.spec.config, None);
        assert_eq!(Held::of([&large]), Held::default());
    }

    #[test]
    fn a_definition_that_does_not_parse_holds_nothing() {
        let mut broken = definition("team-a", UID, "10.1.0.0/24", "10.1.0.1");
        broken.spec.config = Some("{not json".into());
        let empty = NetworkAttachmentDefinition::default();
        assert_eq!(Held::of([&broken, &empty]), Held::default());
    }

    #[test]
    fn a_pool_goes_only_when_no_definition_names_it_and_no_pod_holds_an_address() {
        let name = multus::cni_network_name("team-a", UID);
        let other = multus::cni_network_name("team-b", UID);
        let leased = multus::cni_network_name("team-c", UID);
        let held = Held::of([&definition("team-a", UID, "10.1.0.0/24", "10.1.0.1")]);
        let files = |f: &[&str]| f.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let folders = [
            PoolFolder {
                name: name.clone(),
                files: files(&["lock"]),
            },
            PoolFolder {
                name: other.clone(),
                files: files(&["lock", "last_reserved_ip.0"]),
            },
            PoolFolder {
                name: leased,
                files: files(&["lock", "last_reserved_ip.0", "10.3.0.2"]),
            },
            PoolFolder {
                name: "sample-operator-node".into(),
                files: files(&["lock"]),
            },
        ];
        assert_eq!(unused_pools(&folders, &held), vec![other]);
    }

    #[test]
    fn what_is_unused_goes_only_after_the_grace_period() {
        let grace = Duration::from_secs(30);
        let start = Instant::now();
        let mut pending = Pending::default();
        assert!(pending.due(vec!["a", "b"], start, grace).is_empty());
        // "a" in use again, then unused: its wait starts again.
        assert!(pending.due(vec!["b"], start + grace / 2, grace).is_empty());
        assert_eq!(pending.due(vec!["a", "b"], start + grace, grace), vec!["b"]);
        pending.forget(&"b");
        assert!(
            pending
                .due(vec!["a"], start + grace + grace / 4, grace)
                .is_empty()
        );
        assert_eq!(pending.due(vec!["a"], start + grace * 2, grace), vec!["a"]);
    }
}
