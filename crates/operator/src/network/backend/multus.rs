//! The Multus backend: each Network becomes a NetworkAttachmentDefinition (`k8s.cni.cncf.io/v1`)
//! of the same name and namespace, controlled by the Network through an owner reference, whose
//! `spec.config` is a CNI configuration for a bridge with host-local IPAM on the Network's
//! prefix and gateway. Pods then attach to it with the annotation
//! `k8s.v1.cni.cncf.io/networks: <name>`.
//!
//! The NetworkAttachmentDefinition is built whole ([`desired`], a pure function) and
//! server-side applied, only when a field the operator manages differs from the cached object
//! ([`needs_apply`]); the controller watches the NetworkAttachmentDefinitions it labelled, so a
//! hand edit is reverted at once. The CRD belongs to Multus and may be missing: creating then
//! fails with 404 and the Network reports `BackendUnavailable` until it is installed.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::TypeMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};
use sample_operator_api::{Addressing, BackendReference, Network};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{BackendError, Ensured, NetworkBackend};
use crate::runtime::{FIELD_MANAGER, Synced, children, scoped};

pub const GROUP: &str = "k8s.cni.cncf.io";
pub const VERSION: &str = "v1";
pub const KIND: &str = "NetworkAttachmentDefinition";
pub const PLURAL: &str = "network-attachment-definitions";
/// The name of Multus' CRD.
pub const CRD_NAME: &str = "network-attachment-definitions.k8s.cni.cncf.io";
/// `status.backend.provider` of Networks this backend holds.
pub const PROVIDER: &str = "multus";
/// On every NetworkAttachmentDefinition the operator creates (as on its Deployments); the
/// watch selects on it, so the cache holds only the operator's own.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "sample-operator";
/// The CNI specification version of the generated configuration; the reference `bridge` and
/// `host-local` plugins support it since plugins v1.0.
pub const CNI_VERSION: &str = "1.0.0";

/// A Multus NetworkAttachmentDefinition: the part of it this operator reads and writes.
/// Written by hand rather than derived so that it deserialises whatever Multus accepts: its
/// schema makes neither `spec` nor `spec.config` required.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NetworkAttachmentDefinition {
    #[serde(flatten, default)]
    pub types: Option<TypeMeta>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: NetworkAttachmentDefinitionSpec,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkAttachmentDefinitionSpec {
    /// A JSON CNI configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
}

impl Resource for NetworkAttachmentDefinition {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Logs a warning when the NetworkAttachmentDefinition CRD is not installed (a 404 on a list of
/// one). The controller runs without it: its Networks report `BackendUnavailable` until it is.
pub async fn warn_if_missing(definitions: Api<NetworkAttachmentDefinition>) {
    let listed = definitions
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await;
    if let Err(kube::Error::Api(status)) = listed
        && status.code == 404
    {
        tracing::warn!(
            crd = CRD_NAME,
            "the NetworkAttachmentDefinition CRD is not installed: Networks report BackendUnavailable until it is"
        );
    }
}

/// The label selector of the operator's NetworkAttachmentDefinitions.
pub fn selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY}")
}

/// The label selector of every other definition: those that may be in a Network's way.
pub fn foreign_selector() -> String {
    format!("{MANAGED_BY_LABEL}!={MANAGED_BY}")
}

/// The CNI network's name of the Network with `uid` in `namespace`. host-local IPAM keeps one
/// address pool per CNI network name (a folder of that name on each node), so the name must be
/// one Network's alone: same-named Networks in two namespaces must not share a pool, nor may a
/// Network recreated under the same name inherit the leases of the one before. The UID makes it
/// so, and keeps it short enough for a folder name whatever the Network's name; the namespace
/// in front tells a node's admin whose pool it is.
pub fn cni_network_name(namespace: &str, uid: &str) -> String {
    format!("{namespace}.{uid}")
}

/// What every bridge name of the operator starts with: a name space of its own on the nodes,
/// apart from Docker's `br-…`, `cni0`, `docker0` and the rest, which the bridge plugin would
/// otherwise join as it finds them.
pub const BRIDGE_PREFIX: &str = "son";

/// The name of the Linux bridge of the Network with `uid` and `addressing`. Interface names
/// have at most 15 bytes, so the name is [`BRIDGE_PREFIX`] and 48 bits of a SHA-256: stable
/// across restarts and versions, one bridge, one layer-2 segment, per Network. The prefix and
/// gateway, which a tenant picks, are hashed beside the UID, which the API server picks; with a
/// cryptographic hash, no choice of them finds another Network's bridge short of trying some
/// 2^47 of them. The prefix and gateway are hashed because the bridge holds the gateway address
/// and the CNI bridge plugin refuses a bridge that holds another: a changed Network gets a new
/// bridge on each node, and its Pods from then on join that one (the old bridge stays, with the
/// Pods made before the change, until the node removes it).
pub fn bridge_name(uid: &str, addressing: &Addressing) -> String {
    use sha2::{Digest, Sha256};
    let hash = Sha256::digest(format!("{uid}/{}/{}", addressing.prefix, addressing.gateway));
    // 3 + 12 hex digits: 15 bytes.
    let hex: String = hash[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("{BRIDGE_PREFIX}{hex}")
}

/// The CNI configuration of the Network with `uid` in `namespace`: a bridge of its own that
/// holds the gateway address (`isGateway`), and host-local IPAM handing out the rest of the
/// prefix from a pool of its own. No default route: this is a secondary network, the pod's
/// primary one keeps it.
pub fn cni_config(namespace: &str, uid: &str, addressing: &Addressing) -> String {
    let config = json!({
        "cniVersion": CNI_VERSION,
        "name": cni_network_name(namespace, uid),
        "type": "bridge",
        "bridge": bridge_name(uid, addressing),
        "isGateway": true,
        "ipam": {
            "type": "host-local",
            "ranges": [[{
                "subnet": addressing.prefix.to_string(),
                "gateway": addressing.gateway.to_string(),
            }]],
        },
    });
    // Serialising a `Value` cannot fail; its keys come out in a stable order, so an unchanged
    // Network yields the identical string and needs no write.
    serde_json::to_string_pretty(&config).unwrap_or_else(|_| config.to_string())
}

/// The whole NetworkAttachmentDefinition a Network wants, to be server-side applied: every
/// field in it is one the operator manages, and nothing else. `owner` is the Network's
/// controller owner reference.
pub fn desired(
    network: &Network,
    addressing: &Addressing,
    owner: OwnerReference,
) -> NetworkAttachmentDefinition {
    let name = network.name_any();
    let namespace = network.namespace().unwrap_or_default();
    NetworkAttachmentDefinition {
        types: Some(TypeMeta {
            api_version: NetworkAttachmentDefinition::api_version(&()).into_owned(),
            kind: KIND.into(),
        }),
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            labels: Some(BTreeMap::from([(MANAGED_BY_LABEL.into(), MANAGED_BY.into())])),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        },
        spec: NetworkAttachmentDefinitionSpec {
            config: Some(cni_config(&namespace, &owner.uid, addressing)),
        },
    }
}

/// Trims a definition before it is cached to what [`needs_apply`] and ownership read: the
/// operator's own label, its owners and its spec. Anyone with rights in the namespace may add
/// labels and annotations to it, without bound, and none of them is the operator's to keep.
pub fn trim(nad: &mut NetworkAttachmentDefinition) {
    nad.managed_fields_mut().clear();
    nad.metadata.annotations = None;
    if let Some(labels) = &mut nad.metadata.labels {
        labels.retain(|key, _| key == MANAGED_BY_LABEL);
    }
}

/// Whether `observed` differs from `desired` in a field the operator manages. Fields others
/// manage (an added label or annotation) do not count: they are left alone.
pub fn needs_apply(desired: &NetworkAttachmentDefinition, observed: &NetworkAttachmentDefinition) -> bool {
    let owner_missing = desired
        .owner_references()
        .iter()
        .any(|o| !observed.owner_references().contains(o));
    let label_missing = desired
        .labels()
        .iter()
        .any(|(k, v)| observed.labels().get(k) != Some(v));
    owner_missing || label_missing || desired.spec.config != observed.spec.config
}

/// Which Network holds each bridge name, from the operator's own definitions: a bridge name is
/// 48 bits of a hash, and the operator refuses to give a second Network one that is taken
/// (the CNI bridge plugin would join both to one bridge). Shared; clones see the same state.
#[derive(Clone, Default)]
pub struct Bridges {
    /// What is held, and what a re-list in progress has found so far.
    held: Arc<Mutex<(Held, Option<Held>)>>,
}

/// By definition (namespace/name), its bridge and its owner's UID; and by bridge, the owners'
/// UIDs by definition, so that the check of every sync is one lookup.
#[derive(Default)]
struct Held {
    by_definition: HashMap<String, (String, String)>,
    by_bridge: HashMap<String, HashMap<String, String>>,
}

impl Held {
    fn insert(&mut self, key: String, (bridge, owner): (String, String)) {
        self.remove(&key);
        self.by_bridge
            .entry(bridge.clone())
            .or_default()
            .insert(key.clone(), owner.clone());
        self.by_definition.insert(key, (bridge, owner));
    }

    fn remove(&mut self, key: &str) {
        if let Some((bridge, _)) = self.by_definition.remove(key)
            && let Some(owners) = self.by_bridge.get_mut(&bridge)
        {
            owners.remove(key);
            if owners.is_empty() {
                self.by_bridge.remove(&bridge);
            }
        }
    }
}

impl Bridges {
    /// The key, bridge name and owning Network's UID of one of the operator's definitions.
    fn of(nad: &NetworkAttachmentDefinition) -> Option<(String, (String, String))> {
        let config: serde_json::Value = serde_json::from_str(nad.spec.config.as_deref()?).ok()?;
        let bridge = config.get("bridge")?.as_str()?.to_owned();
        let owner = nad
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true))?
            .uid
            .clone();
        Some((key_of(nad), (bridge, owner)))
    }

    /// Follows the definitions' watch (every event, in order).
    pub fn apply(&self, event: &Event<NetworkAttachmentDefinition>) {
        let mut guard = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let (live, listing) = &mut *guard;
        match event {
            Event::Apply(nad) => match Self::of(nad) {
                Some((key, held)) => live.insert(key, held),
                None => live.remove(&key_of(nad)),
            },
            Event::Delete(nad) => live.remove(&key_of(nad)),
            Event::Init => *listing = Some(Held::default()),
            Event::InitApply(nad) => {
                if let (Some(listing), Some((key, held))) = (listing.as_mut(), Self::of(nad)) {
                    listing.insert(key, held);
                }
            }
            Event::InitDone => {
                if let Some(listed) = listing.take() {
                    *live = listed;
                }
            }
        }
    }

    /// The UID of another Network than `uid` whose definition has the bridge `bridge`.
    pub fn held_by_another(&self, bridge: &str, uid: &str) -> Option<String> {
        let guard = self.held.lock().unwrap_or_else(|e| e.into_inner());
        guard
            .0
            .by_bridge
            .get(bridge)?
            .values()
            .find(|owner| *owner != uid)
            .cloned()
    }

    /// [`held_by_another`](Self::held_by_another) among `definitions` (a list of them).
    fn held_by_another_among(
        definitions: &[NetworkAttachmentDefinition],
        bridge: &str,
        uid: &str,
    ) -> Option<String> {
        definitions
            .iter()
            .filter_map(Self::of)
            .map(|(_, (held, owner))| (held, owner))
            .find(|(held, owner)| held == bridge && owner != uid)
            .map(|(_, owner)| owner)
    }
}

/// A definition's key in [`Bridges`]: namespace/name.
fn key_of(nad: &NetworkAttachmentDefinition) -> String {
    format!("{}/{}", nad.namespace().unwrap_or_default(), nad.name_any())
}

/// The Multus backend: the API for writes, the cache of the operator's own
/// NetworkAttachmentDefinitions for reads.
pub struct Multus {
    client: kube::Client,
    /// The namespace the cache follows definitions in; all when `None`.
    watched: Option<String>,
    cache: Store<NetworkAttachmentDefinition>,
    synced: Synced,
    bridges: Bridges,
}

/// How long a sync waits for the definitions' first list before it lists them itself: at start
/// the list is in within a moment, and waiting spares a list for every Network.
const FIRST_LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

impl Multus {
    pub fn new(
        client: kube::Client,
        watched: Option<String>,
        cache: Store<NetworkAttachmentDefinition>,
        synced: Synced,
        bridges: Bridges,
    ) -> Self {
        Self {
            client,
            watched,
            cache,
            synced,
            bridges,
        }
    }

    fn api(&self, namespace: &str) -> Api<NetworkAttachmentDefinition> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Another Network than `uid` whose definition has the bridge `bridge`: from the index once
    /// the definitions' first list is in, else from a list of them. Before that list the index
    /// knows none, and a definition made then could take a name another Network holds.
    async fn bridge_holder(&self, bridge: &str, uid: &str) -> Result<Option<String>, BackendError> {
        if !self.synced.is_synced() {
            let _ = tokio::time::timeout(FIRST_LIST_WAIT, self.synced.wait()).await;
        }
        if self.synced.is_synced() {
            return Ok(self.bridges.held_by_another(bridge, uid));
        }
        // Not listed yet (the CRD may be missing, which the list says).
        let watched = scoped::<NetworkAttachmentDefinition>(&self.client, self.watched.as_deref());
        match watched.list(&ListParams::default().labels(&selector())).await {
            Ok(listed) => Ok(Bridges::held_by_another_among(&listed.items, bridge, uid)),
            Err(e) if is_status(&e, 404) => Err(unavailable()),
            Err(source) => Err(BackendError::request(
                "listing NetworkAttachmentDefinitions",
                source,
            )),
        }
    }

    /// The operator's NetworkAttachmentDefinition of that name: from the cache once its first
    /// list is complete, else from the API. The cache never completes while the CRD is
    /// missing, and the controller must not wait for it then.
    async fn observed(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<NetworkAttachmentDefinition>>, BackendError> {
        if self.synced.is_synced() {
            return Ok(self.cache.get(&ObjectRef::new(name).within(namespace)));
        }
        match self.api(namespace).get_opt(name).await {
            Ok(found) => Ok(found.map(Arc::new)),
            // No such resource: while the API group is unknown the apiserver answers a plain
            // 404 (not a NotFound status, which `get_opt` maps to `None`). Nothing there
            // either way; creating it says whether the CRD is missing.
            Err(e) if is_status(&e, 404) => Ok(None),
            Err(source) => Err(BackendError::request(
                "reading NetworkAttachmentDefinition",
                source,
            )),
        }
    }
}

fn unavailable() -> BackendError {
    BackendError::Unavailable(format!(
        "the {KIND} CRD ({CRD_NAME}) is not installed: install Multus, or at least its CRD"
    ))
}

fn not_owned(name: &str) -> BackendError {
    BackendError::NotOwned(format!(
        "{KIND} {name:?} already exists and is not managed by Network"
    ))
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == code)
}

impl NetworkBackend for Multus {
    async fn ensure(&self, network: &Network, addressing: &Addressing) -> Result<Ensured, BackendError> {
        let namespace = network
            .namespace()
            .ok_or(BackendError::MissingObjectKey("namespace"))?;
        let uid = network.uid().ok_or(BackendError::MissingObjectKey("uid"))?;
        let owner = network
            .controller_owner_ref(&())
            .ok_or(BackendError::MissingObjectKey("name"))?;
        let name = network.name_any();
        let api = self.api(&namespace);
        let bridge = bridge_name(&uid, addressing);
        if let Some(other) = self.bridge_holder(&bridge, &uid).await? {
            return Err(BackendError::BridgeTaken(format!(
                "the bridge name {bridge} is already that of the Network with UID {other}"
            )));
        }
        let desired = desired(network, addressing, owner);
        let ensured = |changed| Ensured {
            changed,
            reference: BackendReference {
                provider: PROVIDER.into(),
                id: name.clone(),
                subnet_id: None,
            },
            description: format!("{KIND} {name:?}"),
        };

        let observed = match self.observed(&namespace, &name).await? {
            Some(cached) => cached,
            // Not among the operator's own: create it. If one of that name exists (someone
            // else's, or ours with its label removed), the create says so and it is read.
            None => match children::create(&api, &desired).await {
                Ok(Some(_)) => return Ok(ensured(true)),
                Ok(None) => Arc::new(api.get(&name).await.map_err(|source| {
                    BackendError::request("reading NetworkAttachmentDefinition", source)
                })?),
                // The namespace exists (the Network is in it), so the resource does not.
                Err(e) if is_status(&e, 404) => return Err(unavailable()),
                Err(source) => {
                    return Err(BackendError::request(
                        "creating NetworkAttachmentDefinition",
                        source,
                    ));
                }
            },
        };
        if !children::is_controlled_by(&*observed, &uid) {
            return Err(not_owned(&name));
        }
        if !needs_apply(&desired, &observed) {
            return Ok(ensured(false));
        }
        // The uid makes the apply conditional on the object checked above: if it was replaced
        // in between by someone else's, the apiserver refuses instead of taking it over.
        let mut patch = desired;
        patch.metadata.uid = observed.metadata.uid.clone();
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(|source| BackendError::request("applying NetworkAttachmentDefinition", source))?;
        Ok(ensured(true))
    }

    async fn remove(&self, network: &Network) -> Result<bool, BackendError> {
        // Without a uid the Network cannot own anything.
        let (Some(namespace), Some(uid)) = (network.namespace(), network.uid()) else {
            return Ok(false);
        };
        let name = network.name_any();
        let Some(observed) = self.observed(&namespace, &name).await? else {
            return Ok(false);
        };
        if !children::is_controlled_by(&*observed, &uid) {
            return Ok(false);
        }
        let Some(observed_uid) = observed.uid() else {
            return Ok(false);
        };
        // Only the object that was checked: never a same-named successor.
        match children::delete(&self.api(&namespace), &name, &observed_uid).await {
            Ok(deleted) => Ok(deleted),
            Err(source) => Err(BackendError::request(
                "deleting NetworkAttachmentDefinition",
                source,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sample_operator_api::NetworkSpec;

    fn network(cidr: &str, gateway: &str) -> (Network, Addressing) {
        let mut network = Network::new(
            "blue",
            NetworkSpec {
                cidr: cidr.into(),
                gateway: gateway.into(),
            },
        );
        network.metadata.namespace = Some("tenant".into());
        network.metadata.uid = Some("uid-1".into());
        let addressing = network.validate().unwrap();
        (network, addressing)
    }

    fn addressing(cidr: &str, gateway: &str) -> Addressing {
        network(cidr, gateway).1
    }

    fn build(cidr: &str, gateway: &str) -> NetworkAttachmentDefinition {
        let (network, addressing) = network(cidr, gateway);
        let owner = network.controller_owner_ref(&()).unwrap();
        desired(&network, &addressing, owner)
    }

    fn config(nad: &NetworkAttachmentDefinition) -> serde_json::Value {
        serde_json::from_str(nad.spec.config.as_deref().unwrap()).unwrap()
    }

    #[test]
    fn builds_a_bridge_with_host_local_ipam_on_the_prefix() {
        let nad = build("192.168.0.1/16", "192.168.0.1");
        assert_eq!(nad.metadata.name.as_deref(), Some("blue"));
        assert_eq!(nad.metadata.namespace.as_deref(), Some("tenant"));
        assert_eq!(
            nad.labels().get(MANAGED_BY_LABEL).map(String::as_str),
            Some(MANAGED_BY)
        );
        let owner = &nad.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("Network", "uid-1", Some(true))
        );
        assert_eq!(
            config(&nad),
            json!({
                "cniVersion": "1.0.0",
                "name": "tenant.uid-1",
                "type": "bridge",
                "bridge": bridge_name("uid-1", &addressing("192.168.0.0/16", "192.168.0.1")),
                "isGateway": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": "192.168.0.0/16", "gateway": "192.168.0.1" }]],
                },
            })
        );
        let wire = serde_json::to_value(&nad).unwrap();
        assert_eq!(wire["apiVersion"], "k8s.cni.cncf.io/v1");
        assert_eq!(wire["kind"], "NetworkAttachmentDefinition");
    }

    #[test]
    fn ipv6_addresses_are_written_canonically() {
        let nad = build("FD00:1::5/64", "FD00:1::1");
        let range = &config(&nad)["ipam"]["ranges"][0][0];
        assert_eq!(range["subnet"], "fd00:1::/64");
        assert_eq!(range["gateway"], "fd00:1::1");
    }

    #[test]
    fn a_bridge_name_is_known_as_its_networks_until_its_definition_goes() {
        let bridges = Bridges::default();
        let nad = build("10.0.0.0/24", "10.0.0.1");
        let bridge = config(&nad)["bridge"].as_str().unwrap().to_owned();
        bridges.apply(&Event::Apply(nad.clone()));
        assert_eq!(bridges.held_by_another(&bridge, "uid-2"), Some("uid-1".into()));
        assert_eq!(bridges.held_by_another(&bridge, "uid-1"), None, "its own");
        // The same answer from a list, before the watch's first one is in.
        let listed = [nad.clone()];
        assert_eq!(
            Bridges::held_by_another_among(&listed, &bridge, "uid-2"),
            Some("uid-1".into())
        );
        assert_eq!(Bridges::held_by_another_among(&listed, &bridge, "uid-1"), None);
        assert_eq!(bridges.held_by_another("son000000000000", "uid-2"), None);
        // Moved to another bridge: the old name is free.
        let moved = build("10.0.1.0/24", "10.0.1.1");
        bridges.apply(&Event::Apply(moved.clone()));
        assert_eq!(bridges.held_by_another(&bridge, "uid-2"), None);
        // A re-list that no longer finds it forgets it; one that finds it knows it again.
        bridges.apply(&Event::Init);
        bridges.apply(&Event::InitApply(nad.clone()));
        bridges.apply(&Event::InitDone);
        assert_eq!(bridges.held_by_another(&bridge, "uid-2"), Some("uid-1".into()));
        bridges.apply(&Event::Delete(nad));
        assert_eq!(bridges.held_by_another(&bridge, "uid-2"), None);
    }

    /// Before the definitions' first list is in, the bridge check lists them itself: a Network
    /// synced as the operator starts cannot take a name another Network holds. After it, the
    /// index answers without a request.
    #[tokio::test(start_paused = true)]
    async fn before_the_first_list_the_bridge_check_lists_the_definitions() {
        use crate::runtime::scenario::ApiServer;
        let older = build("10.0.0.0/24", "10.0.0.1");
        let bridge = config(&older)["bridge"].as_str().unwrap().to_owned();
        let listed = json!({
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinitionList",
            "metadata": { "resourceVersion": "7" },
            "items": [older],
        });
        let server = ApiServer::new(move |sent| {
            sent.is("GET", "/apis/k8s.cni.cncf.io/v1/network-attachment-definitions")
                .then(|| (200, listed.clone()))
        });
        let (synced, mut mark) = Synced::new::<NetworkAttachmentDefinition>();
        let multus = Multus::new(
            server.client.clone(),
            None,
            kube::runtime::reflector::store::Writer::default().as_reader(),
            synced,
            Bridges::default(),
        );
        assert_eq!(
            multus.bridge_holder(&bridge, "uid-2").await.unwrap(),
            Some("uid-1".into())
        );
        assert_eq!(multus.bridge_holder(&bridge, "uid-1").await.unwrap(), None);
        let sent = server.take();
        assert_eq!(sent.len(), 2, "{sent:#?}");
        assert!(
            sent[0].path.contains(&format!(
                "labelSelector={}",
                selector().replace('/', "%2F").replace('=', "%3D")
            )),
            "{sent:#?}"
        );
        // Listed: the index (empty here) answers.
        mark(&Event::InitDone);
        assert_eq!(multus.bridge_holder(&bridge, "uid-2").await.unwrap(), None);
        assert!(server.take().is_empty());
        assert!(server.unexpected().is_empty());
    }

    #[test]
    fn bridge_names_fit_an_interface_name_and_differ_per_network_and_addressing() {
        let a = addressing("10.0.0.0/24", "10.0.0.1");
        let uid = "6a1e6a38-2d7c-4b54-9b8e-1f6f3a0c9d21";
        let bridge = bridge_name(uid, &a);
        assert_eq!(bridge.len(), 15, "{bridge}");
        assert!(bridge.starts_with(BRIDGE_PREFIX), "{bridge}");
        assert!(bridge[3..].chars().all(|c| c.is_ascii_hexdigit()), "{bridge}");
        assert_eq!(bridge, bridge_name(uid, &a), "stable");
        assert_ne!(bridge, bridge_name("another-uid", &a), "one bridge per Network");
        // The CNI bridge plugin refuses a bridge holding another gateway address.
        let moved = addressing("10.0.1.0/24", "10.0.1.1");
        let regateway = addressing("10.0.0.0/24", "10.0.0.254");
        assert_ne!(bridge, bridge_name(uid, &moved));
        assert_ne!(bridge, bridge_name(uid, &regateway));
    }

    #[test]
    fn same_named_networks_of_two_namespaces_have_pools_of_their_own() {
        let a = addressing("10.0.0.0/24", "10.0.0.1");
        let name = |namespace: &str, uid: &str| {
            let config: serde_json::Value = serde_json::from_str(&cni_config(namespace, uid, &a)).unwrap();
            config["name"].as_str().unwrap().to_owned()
        };
        assert_eq!(name("team-a", "uid-a"), "team-a.uid-a");
        assert_ne!(name("team-a", "uid-a"), name("team-b", "uid-b"));
        assert_ne!(name("team-a", "uid-a"), name("team-a", "uid-recreated"));
        // A folder name on the node: short whatever the Network's name.
        assert!(cni_network_name(&"n".repeat(63), "6a1e6a38-2d7c-4b54-9b8e-1f6f3a0c9d21").len() <= 100);
    }

    #[test]
    fn a_matching_definition_needs_no_write_and_others_fields_are_not_drift() {
        let want = build("10.0.0.0/24", "10.0.0.1");
        assert!(!needs_apply(&want, &want));
        let mut have = want.clone();
        have.labels_mut().insert("team".into(), "payments".into());
        have.annotations_mut().insert("note".into(), "hi".into());
        assert!(!needs_apply(&want, &have));
    }

    /// What the cache keeps of a definition is what the checks read: a trimmed copy decides
    /// as the whole one does, and others' labels and annotations are gone.
    #[test]
    fn a_trimmed_definition_keeps_what_the_checks_read_and_nothing_else() {
        let want = build("10.0.0.0/24", "10.0.0.1");
        let mut have = want.clone();
        have.labels_mut().insert("team".into(), "x".repeat(63));
        have.annotations_mut().insert("note".into(), "x".repeat(100_000));
        trim(&mut have);
        assert_eq!(have.labels().keys().collect::<Vec<_>>(), [MANAGED_BY_LABEL]);
        assert!(have.metadata.annotations.is_none());
        assert!(!needs_apply(&want, &have));
        assert!(needs_apply(&build("10.0.1.0/24", "10.0.1.1"), &have));
    }

    #[test]
    fn managed_fields_changed_by_hand_are_drift() {
        let want = build("10.0.0.0/24", "10.0.0.1");
        let edits: [fn(&mut NetworkAttachmentDefinition); 4] = [
            |n| n.spec.config = Some(r#"{"type":"macvlan"}"#.into()),
            |n| n.spec.config = None,
            |n| {
                n.labels_mut().remove(MANAGED_BY_LABEL);
            },
            |n| n.metadata.owner_references = None,
        ];
        for (i, edit) in edits.iter().enumerate() {
            let mut have = want.clone();
            edit(&mut have);
            assert!(needs_apply(&want, &have), "edit {i} went unnoticed");
        }
        // A changed Network is drift too.
        assert!(needs_apply(&build("10.0.1.0/24", "10.0.1.1"), &want));
    }

    #[test]
    fn reads_a_definition_without_spec() {
        let nad: NetworkAttachmentDefinition = serde_json::from_value(json!({
            "apiVersion": "k8s.cni.cncf.io/v1",
            "kind": "NetworkAttachmentDefinition",
            "metadata": { "name": "bare" },
        }))
        .unwrap();
        assert_eq!(nad.spec.config, None);
    }
}
