//! The cluster's own addresses, which no Network may overlap. With the Multus backend the first
//! Pod attached to a Network puts its gateway and a connected route on the Pod's node: a /29
//! around another tenant's Pod, a Service's virtual IP, a node or the API server would win the
//! node's longest-prefix match and take that traffic. So the Network controller watches where
//! those addresses are:
//!
//! - the Pod CIDRs of every Node (`spec.podCIDRs`),
//! - the Service CIDRs (`ServiceCIDR` objects, or `--network-service-cidrs` on clusters that
//!   have none),
//! - every Node's addresses (`status.addresses`, InternalIP and ExternalIP),
//! - the API server's endpoints (the `kubernetes` Service's EndpointSlices in `default`),
//!
//! and refuses a Network that overlaps any of them, saying which kind of address in words a
//! tenant may read: the other side's address is not theirs to learn. When the addresses change
//! (a node joins with a new Pod CIDR), every Network is checked again. The admission policy
//! refuses the same from the parameters that the operator keeps current in a `ClusterAddresses`
//! object ([`Params`]).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use sample_operator_api::ip::{IpFamily, IpPrefix, parse_ip};
use sample_operator_api::{ClusterAddresses as ClusterAddressesObject, ClusterAddressesSpec};

use crate::runtime::watch::strip_unread_metadata;
use crate::runtime::{FIELD_MANAGER, Shared, Synced};

/// The kinds of the cluster's addresses, in the order a refusal names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Pods,
    Services,
    Nodes,
    ApiServer,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Pods, Kind::Services, Kind::Nodes, Kind::ApiServer];

    /// What a tenant reads in the refusal.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Pods => "the cluster's Pod addresses",
            Kind::Services => "the cluster's Service addresses",
            Kind::Nodes => "a node's address",
            Kind::ApiServer => "the API server's address",
        }
    }
}

/// Where the cluster's addresses come from (`--network-cluster-addresses` and the flags beside
/// it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// Watch the cluster's addresses and refuse Networks that overlap them. Off in the library's
    /// default, which the tests of other rules use; the binary's default is on.
    pub enabled: bool,
    /// The Service CIDRs, for clusters without `ServiceCIDR` objects (before Kubernetes 1.33);
    /// when empty they are watched.
    pub service_cidrs: Vec<IpPrefix>,
    /// The ClusterAddresses object the operator keeps current for the admission policy.
    pub admission_params: Option<String>,
}

/// The addresses of each kind, by the object that holds them.
#[derive(Default)]
struct State {
    by_kind: BTreeMap<Kind, BTreeMap<String, Vec<IpPrefix>>>,
    /// Bumped by every change of what is held, so that a change of anything else (a node's
    /// heartbeat) costs nobody a reconcile.
    version: u64,
}

/// The cluster's addresses as the watches last saw them; shared by the controller's watches and
/// its reconciles. Empty (refusing nothing) when the settings leave them off.
#[derive(Clone, Default)]
pub struct ClusterAddresses {
    state: Arc<RwLock<State>>,
}

impl ClusterAddresses {
    /// `Ok` when `prefix` overlaps none of the cluster's addresses, else a refusal naming the
    /// field and the kind of address (never the address itself).
    pub fn check(&self, prefix: &IpPrefix) -> Result<(), String> {
        let state = self.state.read().expect("the lock is never poisoned");
        for (kind, holders) in &state.by_kind {
            if holders.values().flatten().any(|held| held.overlaps(prefix)) {
                return Err(format!(
                    "spec.cidr: {prefix} overlaps {}, which no Network may use",
                    kind.describe()
                ));
            }
        }
        Ok(())
    }

    /// Sets what `holder` holds of `kind`; `true` when that changed anything.
    pub fn set(&self, kind: Kind, holder: &str, mut prefixes: Vec<IpPrefix>) -> bool {
        prefixes.sort_by_key(sort_key);
        prefixes.dedup();
        let mut state = self.state.write().expect("the lock is never poisoned");
        let holders = state.by_kind.entry(kind).or_default();
        let changed = if prefixes.is_empty() {
            holders.remove(holder).is_some()
        } else {
            holders.insert(holder.to_owned(), prefixes.clone()).as_ref() != Some(&prefixes)
        };
        if changed {
            state.version += 1;
        }
        changed
    }

    /// Replaces everything held of `kind` (after a full list).
    fn replace(&self, kind: Kind, all: BTreeMap<String, Vec<IpPrefix>>) -> bool {
        let all: BTreeMap<_, _> = all
            .into_iter()
            .filter(|(_, prefixes)| !prefixes.is_empty())
            .map(|(holder, mut prefixes)| {
                prefixes.sort_by_key(sort_key);
                prefixes.dedup();
                (holder, prefixes)
            })
            .collect();
        let mut state = self.state.write().expect("the lock is never poisoned");
        let changed = state.by_kind.get(&kind).is_none_or(|held| *held != all);
        if changed {
            state.by_kind.insert(kind, all);
            state.version += 1;
        }
        changed
    }

    fn version(&self) -> u64 {
        self.state.read().expect("the lock is never poisoned").version
    }

    /// The admission policy's parameters: per kind, its prefixes collapsed.
    pub fn params(&self) -> ClusterAddressesSpec {
        let state = self.state.read().expect("the lock is never poisoned");
        let of = |kind: Kind| -> Vec<String> {
            let all: Vec<IpPrefix> = state
                .by_kind
                .get(&kind)
                .into_iter()
                .flat_map(|holders| holders.values().flatten().copied())
                .collect();
            collapse(all).iter().map(ToString::to_string).collect()
        };
        ClusterAddressesSpec {
            pods: of(Kind::Pods),
            services: of(Kind::Services),
            nodes: of(Kind::Nodes),
            api_server: of(Kind::ApiServer),
        }
    }
}

fn sort_key(prefix: &IpPrefix) -> (IpFamily, u128, u8) {
    (prefix.family(), prefix.range().0, prefix.prefix_len())
}

/// The fewest prefixes covering exactly the same addresses: contained prefixes dropped, and two
/// halves of one prefix merged into it, repeatedly. Keeps the admission policy's list short on
/// clusters whose Pod CIDRs are consecutive blocks of one range.
pub fn collapse(mut prefixes: Vec<IpPrefix>) -> Vec<IpPrefix> {
    loop {
        prefixes.sort_by_key(sort_key);
        let mut out: Vec<IpPrefix> = Vec::with_capacity(prefixes.len());
        let mut merged = false;
        for prefix in prefixes {
            match out.last().copied() {
                Some(last) if last.overlaps(&prefix) => {
                    // Sorted by first address then length: `last` is the wider one.
                }
                Some(last)
                    if last.prefix_len() == prefix.prefix_len()
                        && last.prefix_len() > 0
                        && last.family() == prefix.family()
                        && last.truncate(last.prefix_len() - 1)
                            == prefix.truncate(prefix.prefix_len() - 1) =>
                {
                    *out.last_mut().expect("there is a last") = last.truncate(last.prefix_len() - 1);
                    merged = true;
                }
                _ => out.push(prefix),
            }
        }
        if !merged {
            return out;
        }
        prefixes = out;
    }
}

/// A Node's Pod CIDRs, and its addresses as /32 or /128 prefixes. Host names and DNS names are
/// not addresses.
pub fn node_addresses(node: &Node) -> (Vec<IpPrefix>, Vec<IpPrefix>) {
    let spec = node.spec.as_ref();
    let pods = spec
        .and_then(|s| s.pod_cidrs.clone())
        .into_iter()
        .flatten()
        .chain(spec.and_then(|s| s.pod_cidr.clone()))
        .filter_map(|cidr| IpPrefix::parse(&cidr))
        .collect();
    let addresses = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
        .filter_map(|a| host(&a.address))
        .collect();
    (pods, addresses)
}

/// A ServiceCIDR's ranges.
pub fn service_cidrs(object: &ServiceCIDR) -> Vec<IpPrefix> {
    object
        .spec
        .as_ref()
        .and_then(|s| s.cidrs.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|cidr| IpPrefix::parse(cidr))
        .collect()
}

/// The addresses of an EndpointSlice of the `kubernetes` Service: where the API server is.
pub fn apiserver_endpoints(slice: &EndpointSlice) -> Vec<IpPrefix> {
    slice
        .endpoints
        .iter()
        .flatten()
        .flat_map(|e| e.addresses.iter())
        .filter_map(|address| host(address))
        .collect()
}

/// One address as a prefix of its own.
fn host(text: &str) -> Option<IpPrefix> {
    let addr: IpAddr = parse_ip(text)?;
    IpPrefix::new(addr, IpFamily::of(addr).bits())
}

/// What a Node costs the watch: its Pod CIDRs and addresses, no images, conditions or labels.
fn trim_node(node: &mut Node) {
    let (pod_cidrs, pod_cidr) = node
        .spec
        .take()
        .map(|s| (s.pod_cidrs, s.pod_cidr))
        .unwrap_or_default();
    node.spec = Some(NodeSpec {
        pod_cidrs,
        pod_cidr,
        ..NodeSpec::default()
    });
    let addresses = node.status.take().and_then(|s| s.addresses);
    node.status = Some(NodeStatus {
        addresses,
        ..NodeStatus::default()
    });
    strip_unread_metadata(node);
}

/// Follows one watch's events into the addresses of the kinds `read` finds in each object,
/// relists included.
fn follower<K: Resource>(
    addresses: ClusterAddresses,
    read: impl Fn(&K) -> Vec<(Kind, Vec<IpPrefix>)> + Send + 'static,
    kinds: &'static [Kind],
) -> impl FnMut(&Event<K>) + Send + 'static {
    let mut listing: Option<BTreeMap<Kind, BTreeMap<String, Vec<IpPrefix>>>> = None;
    move |event| match event {
        Event::Init => listing = Some(BTreeMap::new()),
        Event::InitApply(object) => {
            if let Some(listing) = listing.as_mut() {
                for (kind, prefixes) in read(object) {
                    listing
                        .entry(kind)
                        .or_default()
                        .insert(object.name_any(), prefixes);
                }
            }
        }
        Event::InitDone => {
            let mut listed = listing.take().unwrap_or_default();
            for kind in kinds {
                addresses.replace(*kind, listed.remove(kind).unwrap_or_default());
            }
        }
        Event::Apply(object) => {
            for (kind, prefixes) in read(object) {
                addresses.set(kind, &object.name_any(), prefixes);
            }
        }
        Event::Delete(object) => {
            for kind in kinds {
                addresses.set(*kind, &object.name_any(), Vec::new());
            }
        }
    }
}

/// The cluster's addresses, followed by the watches `settings` asks for: the shared view, the
/// caches to wait for, and a stream that yields once per change of the addresses after the
/// first lists (which the controller turns into a check of every Network). The stream drives the
/// watches: they live as long as the controller polls it.
pub struct Followed {
    pub addresses: ClusterAddresses,
    pub synced: Vec<Synced>,
    pub changes: futures::stream::BoxStream<'static, ()>,
}

pub fn follow(shared: &Shared, settings: &Settings) -> Followed {
    let addresses = ClusterAddresses::default();
    if !settings.enabled {
        return Followed {
            addresses,
            synced: Vec::new(),
            changes: futures::stream::pending().boxed(),
        };
    }
    let client = &shared.client;
    let nodes = shared.watch_followed(
        Api::<Node>::all(client.clone()),
        "cluster-addresses-nodes",
        watcher::Config::default(),
        trim_node,
        follower(
            addresses.clone(),
            |node: &Node| {
                let (pods, hosts) = node_addresses(node);
                vec![(Kind::Pods, pods), (Kind::Nodes, hosts)]
            },
            &[Kind::Pods, Kind::Nodes],
        ),
    );
    let slices = shared.watch_followed(
        Api::<EndpointSlice>::namespaced(client.clone(), "default"),
        "cluster-addresses-apiserver",
        watcher::Config::default().labels("kubernetes.io/service-name=kubernetes"),
        strip_unread_metadata,
        follower(
            addresses.clone(),
            |slice: &EndpointSlice| vec![(Kind::ApiServer, apiserver_endpoints(slice))],
            &[Kind::ApiServer],
        ),
    );
    let mut synced = vec![nodes.synced, slices.synced];
    let mut events: Vec<futures::stream::BoxStream<'static, ()>> = vec![
        nodes.events.map(|_| ()).boxed(),
        slices.events.map(|_| ()).boxed(),
    ];
    if settings.service_cidrs.is_empty() {
        let services = shared.watch_followed(
            Api::<ServiceCIDR>::all(client.clone()),
            "cluster-addresses-services",
            watcher::Config::default(),
            strip_unread_metadata,
            follower(
                addresses.clone(),
                |object: &ServiceCIDR| vec![(Kind::Services, service_cidrs(object))],
                &[Kind::Services],
            ),
        );
        synced.push(services.synced);
        events.push(services.events.map(|_| ()).boxed());
    } else {
        addresses.set(
            Kind::Services,
            "--network-service-cidrs",
            settings.service_cidrs.clone(),
        );
    }
    let changes = changes(
        addresses.clone(),
        synced.clone(),
        futures::stream::select_all(events),
    );
    if let Some(name) = &settings.admission_params {
        let params = Params {
            api: Api::all(client.clone()),
            name: name.clone(),
        };
        tokio::spawn(params.keep(addresses.clone(), synced.clone(), changes.subscribe()));
    }
    Followed {
        addresses,
        synced,
        changes: changes.stream,
    }
}

/// Changes of the addresses, for the controller and for the parameters' writer.
struct Changes {
    stream: futures::stream::BoxStream<'static, ()>,
    notify: tokio::sync::watch::Sender<u64>,
}

impl Changes {
    fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.notify.subscribe()
    }
}

/// Turns the watches' events into one item per change of the addresses once every first list
/// is in. Reconciles wait for those lists, so what the lists found needs no item of its own.
fn changes(
    addresses: ClusterAddresses,
    synced: Vec<Synced>,
    events: impl Stream<Item = ()> + Send + 'static,
) -> Changes {
    let (notify, _) = tokio::sync::watch::channel(0);
    let sender = notify.clone();
    let mut seen = 0;
    let stream = events
        .filter_map(move |()| {
            let version = addresses.version();
            let changed = version != seen;
            seen = version;
            let announced = changed && synced.iter().all(Synced::is_synced);
            if announced {
                sender.send_replace(version);
            }
            futures::future::ready(announced.then_some(()))
        })
        .boxed();
    Changes { stream, notify }
}

/// The object the admission policy reads its parameters from.
struct Params {
    api: Api<ClusterAddressesObject>,
    name: String,
}

impl Params {
    /// Writes the parameters after the first lists and after every change, until the controller
    /// (which owns the sender) stops. A failed write is retried; until it succeeds the admission
    /// policy may admit what the operator then refuses, which the Network's status says.
    async fn keep(
        self,
        addresses: ClusterAddresses,
        synced: Vec<Synced>,
        mut changed: tokio::sync::watch::Receiver<u64>,
    ) {
        for cache in &synced {
            if !cache.wait().await {
                return;
            }
        }
        // Each turn writes the addresses as they are then, so that a change during a failed
        // write's wait is written by the retry.
        loop {
            match self.write(&addresses.params()).await {
                Ok(_) => {
                    if changed.changed().await.is_err() {
                        return;
                    }
                    // Many changes come together (a relist, nodes joining): one write for them.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(error) => {
                    tracing::warn!(params = %self.name, error = %crate::runtime::error_chain(&error), "cannot write the admission policy's parameters; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(10)) => {}
                        result = changed.changed() => if result.is_err() { return },
                    }
                }
            }
        }
    }

    async fn write(&self, params: &ClusterAddressesSpec) -> Result<ClusterAddressesObject, kube::Error> {
        let mut object = ClusterAddressesObject::new(&self.name, params.clone());
        object.metadata.labels = Some(
            [(
                "app.kubernetes.io/managed-by".to_owned(),
                FIELD_MANAGER.to_owned(),
            )]
            .into(),
        );
        self.api
            .patch(
                &self.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(object),
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeAddress;
    use k8s_openapi::api::discovery::v1::Endpoint;
    use k8s_openapi::api::networking::v1::ServiceCIDRSpec;

    fn p(text: &str) -> IpPrefix {
        IpPrefix::parse(text).unwrap()
    }

    fn node(name: &str, pod_cidrs: &[&str], addresses: &[(&str, &str)]) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some(name.into());
        node.spec = Some(NodeSpec {
            pod_cidrs: Some(pod_cidrs.iter().map(|c| (*c).to_owned()).collect()),
            ..NodeSpec::default()
        });
        node.status = Some(NodeStatus {
            addresses: Some(
                addresses
                    .iter()
                    .map(|(type_, address)| NodeAddress {
                        type_: (*type_).into(),
                        address: (*address).into(),
                    })
                    .collect(),
            ),
            ..NodeStatus::default()
        });
        node
    }

    #[test]
    fn a_node_gives_its_pod_cidrs_and_its_ip_addresses_not_its_names() {
        let (pods, hosts) = node_addresses(&node(
            "n1",
            &["10.244.1.0/24", "fd00:10:244:1::/64"],
            &[
                ("InternalIP", "172.18.0.3"),
                ("ExternalIP", "2001:db8::3"),
                ("Hostname", "n1"),
                ("InternalDNS", "n1.internal"),
            ],
        ));
        assert_eq!(pods, vec![p("10.244.1.0/24"), p("fd00:10:244:1::/64")]);
        assert_eq!(hosts, vec![p("172.18.0.3/32"), p("2001:db8::3/128")]);
    }

    #[test]
    fn service_cidrs_and_the_apiservers_endpoints_are_read() {
        let object = ServiceCIDR {
            spec: Some(ServiceCIDRSpec {
                cidrs: Some(vec!["10.96.0.0/16".into(), "fd00:96::/108".into()]),
            }),
            ..ServiceCIDR::default()
        };
        assert_eq!(
            service_cidrs(&object),
            vec![p("10.96.0.0/16"), p("fd00:96::/108")]
        );
        let slice = EndpointSlice {
            endpoints: Some(vec![Endpoint {
                addresses: vec!["192.0.2.10".into(), "192.0.2.11".into()],
                ..Endpoint::default()
            }]),
            ..EndpointSlice::default()
        };
        assert_eq!(
            apiserver_endpoints(&slice),
            vec![p("192.0.2.10/32"), p("192.0.2.11/32")]
        );
    }

    #[test]
    fn a_network_around_any_cluster_address_is_refused_naming_only_the_kind() {
        let addresses = ClusterAddresses::default();
        assert!(addresses.set(Kind::Pods, "n1", vec![p("10.244.1.0/24")]));
        assert!(addresses.set(Kind::Nodes, "n1", vec![p("172.18.0.3/32")]));
        assert!(addresses.set(Kind::Services, "kubernetes", vec![p("10.96.0.0/16")]));
        assert!(addresses.set(Kind::ApiServer, "kubernetes", vec![p("192.0.2.10/32")]));
        for (cidr, kind) in [
            ("10.244.1.8/29", "the cluster's Pod addresses"),
            ("10.244.0.0/16", "the cluster's Pod addresses"),
            ("10.96.4.0/29", "the cluster's Service addresses"),
            ("172.18.0.0/29", "a node's address"),
            ("192.0.2.8/29", "the API server's address"),
        ] {
            let refusal = addresses.check(&p(cidr)).unwrap_err();
            assert_eq!(
                refusal,
                format!("spec.cidr: {cidr} overlaps {kind}, which no Network may use")
            );
        }
        assert_eq!(addresses.check(&p("10.244.2.0/29")), Ok(()));
        assert_eq!(addresses.check(&p("172.18.0.8/29")), Ok(()));
    }

    #[test]
    fn only_a_change_of_what_is_held_counts_as_one() {
        let addresses = ClusterAddresses::default();
        assert!(addresses.set(Kind::Pods, "n1", vec![p("10.244.1.0/24")]));
        let version = addresses.version();
        // A heartbeat: the same Pod CIDR again, in another order with a duplicate.
        assert!(!addresses.set(Kind::Pods, "n1", vec![p("10.244.1.0/24"), p("10.244.1.0/24")]));
        assert_eq!(addresses.version(), version);
        assert!(addresses.set(Kind::Pods, "n1", Vec::new()));
        assert_eq!(addresses.check(&p("10.244.1.0/29")), Ok(()));
        assert!(!addresses.set(Kind::Pods, "n1", Vec::new()));
        // A relist that finds what is held changes nothing; one that finds less does.
        addresses.set(Kind::Pods, "n2", vec![p("10.244.2.0/24")]);
        let listed = BTreeMap::from([("n2".to_owned(), vec![p("10.244.2.0/24")])]);
        assert!(!addresses.replace(Kind::Pods, listed));
        assert!(addresses.replace(Kind::Pods, BTreeMap::new()));
        assert_eq!(addresses.check(&p("10.244.2.0/29")), Ok(()));
    }

    #[test]
    fn a_relist_replaces_what_the_watch_missed() {
        let addresses = ClusterAddresses::default();
        let mut follow = follower(
            addresses.clone(),
            |node: &Node| {
                let (pods, hosts) = node_addresses(node);
                vec![(Kind::Pods, pods), (Kind::Nodes, hosts)]
            },
            &[Kind::Pods, Kind::Nodes],
        );
        follow(&Event::Apply(node(
            "gone",
            &["10.244.9.0/24"],
            &[("InternalIP", "172.18.0.9")],
        )));
        assert!(addresses.check(&p("10.244.9.0/29")).is_err());
        follow(&Event::Init);
        follow(&Event::InitApply(node("n1", &["10.244.1.0/24"], &[])));
        // Until the list is done, what was held still holds.
        assert!(addresses.check(&p("10.244.9.0/29")).is_err());
        follow(&Event::InitDone);
        assert_eq!(addresses.check(&p("10.244.9.0/29")), Ok(()));
        assert_eq!(addresses.check(&p("172.18.0.9/32")), Ok(()));
        assert!(addresses.check(&p("10.244.1.0/29")).is_err());
        follow(&Event::Delete(node("n1", &[], &[])));
        assert_eq!(addresses.check(&p("10.244.1.0/29")), Ok(()));
    }

    #[test]
    fn collapsing_keeps_exactly_the_same_addresses() {
        let collapsed = collapse(vec![
            p("10.244.3.0/24"),
            p("10.244.0.0/24"),
            p("10.244.1.0/24"),
            p("10.244.2.0/24"),
            p("10.244.2.128/25"),
            p("10.244.5.0/24"),
            p("172.18.0.2/32"),
            p("172.18.0.3/32"),
            p("fd00::/64"),
            p("fd00:0:0:1::/64"),
        ]);
        assert_eq!(
            collapsed,
            vec![
                p("10.244.0.0/22"),
                p("10.244.5.0/24"),
                p("172.18.0.2/31"),
                p("fd00::/63"),
            ]
        );
        // Two neighbours that are not halves of one prefix stay apart.
        assert_eq!(
            collapse(vec![p("10.0.1.0/24"), p("10.0.2.0/24")]),
            vec![p("10.0.1.0/24"), p("10.0.2.0/24")]
        );
    }

    #[test]
    fn the_params_list_each_kind_collapsed() {
        let addresses = ClusterAddresses::default();
        addresses.set(Kind::Pods, "n1", vec![p("10.244.0.0/24")]);
        addresses.set(Kind::Pods, "n2", vec![p("10.244.1.0/24")]);
        addresses.set(Kind::Nodes, "n1", vec![p("172.18.0.2/32")]);
        addresses.set(Kind::Nodes, "n2", vec![p("172.18.0.9/32")]);
        let params = addresses.params();
        assert_eq!(params.pods, ["10.244.0.0/23"]);
        assert_eq!(params.nodes, ["172.18.0.2/32", "172.18.0.9/32"]);
        assert!(params.services.is_empty());
        assert!(params.api_server.is_empty());
    }
}
