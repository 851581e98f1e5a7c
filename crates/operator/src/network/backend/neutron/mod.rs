//! The Neutron backend: each Network is an OpenStack Neutron network with one subnet, the
//! seeds' own backend (their "FIX ME").
//!
//! - [`model`] (pure) names and tags the objects, and plans the writes that make Neutron say
//!   what the Network says; ownership is by tags, never by name.
//! - [`client`] is the SDK session and the requests.
//! - This module observes what Neutron holds and carries the plan out.
//!
//! **Observing cheaply.** Every resync interval (and once at start) the backend lists every
//! network and every subnet tagged with the cluster's identity: two paged lists, however many
//! Networks there are. Then every Network is reconciled against that listing, so a steady
//! resync sends no further request and no write, and drift (a network deleted by hand, a
//! gateway edited) is repaired. A listing is used once per Network. A later reconcile of a
//! Network that still wants what it last synced asks nothing (the next listing will show any
//! drift); one whose spec changed, or whose last attempt failed, asks Neutron afresh about that
//! one Network (by its tags), since the listing may predate what it needs to know.

pub mod client;
pub mod model;
mod observations;

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use kube::ResourceExt;
use sample_operator_api::ip::IpPrefix;
use sample_operator_api::{Addressing, BackendReference, Network};

use super::{BackendError, Ensured, NetworkBackend};
use crate::network::metrics::OtherClusterNetworks;
use client::{CloudSource, Session, Tagged};
use model::{Desired, NeutronNetwork, NeutronSubnet, Observed, Owner, Retag, Step};
use observations::Observations;

/// `status.backend.provider` of Networks this backend holds.
pub const PROVIDER: &str = "neutron";

/// How the Neutron backend is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NeutronConfig {
    pub source: CloudSource,
    /// Tags everything this operator creates, with the Network's UID, so that several clusters
    /// can share one OpenStack project.
    pub cluster_id: String,
    /// Former identities of this cluster (`--adopt-cluster-id`): their networks are taken over
    /// by the Networks of the same namespace and name, retagged without being created again.
    pub adopt_cluster_ids: Vec<String>,
    /// How often Neutron is listed and compared with every Network.
    pub resync: Duration,
    /// Create subnets with DHCP (`--neutron-dhcp`). Off by default: a Network describes
    /// addresses, and Neutron's DHCP agent would take one of each and serve the subnet from it.
    pub dhcp: bool,
}

/// The backend; cheap to share between reconciles.
pub struct Neutron {
    session: Arc<Session>,
    cluster_id: String,
    adopt_cluster_ids: Vec<String>,
    dhcp: bool,
    observations: Arc<Observations>,
    _listing: ListingTask,
}

/// The task that lists Neutron, which ends with the backend: a run that is aborted (a deposed
/// leader) sends Neutron no further request, not even a listing.
struct ListingTask(tokio::task::JoinHandle<()>);

impl Drop for ListingTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How many resync listings apart the project's networks of other cluster ids are counted.
const OTHERS_EVERY: u64 = 10;

/// The first wait after a failed resync listing, doubled at each failure.
const LISTING_RETRY: Duration = Duration::from_secs(1);

impl Neutron {
    /// The backend and the stream of its resyncs: each item comes after a listing that
    /// succeeded, and asks for every Network to be reconciled (`Controller::reconcile_all_on`).
    pub fn new(
        config: NeutronConfig,
        metrics: Arc<crate::runtime::metrics::Metrics>,
    ) -> (Self, impl Stream<Item = ()> + Send + Sync + 'static) {
        let session = Arc::new(Session::for_cluster(
            config.source,
            metrics.clone(),
            Some(&config.cluster_id),
        ));
        let observations = Arc::new(Observations::default());
        let cluster_tag = model::cluster_tag(&config.cluster_id);
        let (resync_tx, resyncs) = futures::channel::mpsc::unbounded();
        // A task of its own: the stream a controller polls must be Sync, the SDK's futures are
        // not.
        let others = OtherClusterNetworks::new(&metrics);
        let listing = tokio::spawn({
            let (session, observations) = (session.clone(), observations.clone());
            let cluster_id = config.cluster_id.clone();
            async move {
                let mut retry = LISTING_RETRY;
                // Other cluster ids are counted after the second listing (the Networks have
                // been reconciled once, so what was to be adopted is), then every
                // OTHERS_EVERY listings: a list of the whole project, so not at every resync.
                let mut listings: u64 = 0;
                loop {
                    if observations.list(&session, &cluster_tag).await {
                        retry = LISTING_RETRY;
                        listings += 1;
                        if listings >= 2
                            && (listings - 2).is_multiple_of(OTHERS_EVERY)
                            && !report_other_clusters(&session, &cluster_id, &others).await
                        {
                            // Try again at the next listing.
                            listings -= 1;
                        }
                        if resync_tx.unbounded_send(()).is_err() {
                            break;
                        }
                        tokio::time::sleep(config.resync).await;
                    } else {
                        // Neutron is struggling: a resync now would have every Network ask it
                        // on its own, a request or two each. The listing alone is retried,
                        // backing off up to the resync interval.
                        tokio::time::sleep(retry).await;
                        retry = (retry * 2).min(config.resync.max(LISTING_RETRY));
                    }
                }
            }
        });
        let backend = Self {
            session,
            cluster_id: config.cluster_id,
            adopt_cluster_ids: config.adopt_cluster_ids,
            dhcp: config.dhcp,
            observations,
            _listing: ListingTask(listing),
        };
        (backend, resyncs)
    }

    fn owner(&self, network: &Network) -> Result<(Owner, String), BackendError> {
        let uid = network.uid().ok_or(BackendError::MissingObjectKey("uid"))?;
        let owner = Owner::new(&self.cluster_id, &uid).adopting(&self.adopt_cluster_ids);
        Ok((owner, uid))
    }

    /// What Neutron holds of this Network: from the last listing when it is news to this
    /// Network; else nothing to learn if the Network wants what it last synced; else asked now.
    async fn observe(&self, owner: &Owner, uid: &str, desired: &Desired) -> Result<Look, BackendError> {
        self.observations.wait_for_first_listing().await;
        if let Some(observed) = self.observations.take(owner, uid) {
            return Ok(Look::Listed(observed));
        }
        if let Some(ids) = self.observations.unchanged(uid, desired) {
            return Ok(Look::Unchanged(ids));
        }
        Ok(Look::Asked(self.ask(owner, Vec::new()).await?))
    }

    /// Asks Neutron about this one Network: its networks by tags (and `also`, found by name),
    /// then every subnet on the network it claims, tagged or only marked.
    async fn ask(&self, owner: &Owner, also: Vec<NeutronNetwork>) -> Result<Observed, BackendError> {
        let mut networks = self.session.list_networks(&owner.tags(), None).await?;
        for network in also {
            if !networks.iter().any(|n| n.id == network.id) {
                networks.push(network);
            }
        }
        self.with_subnets(owner, networks).await
    }

    /// The Network's view of `networks`, with the subnets on the one it claims.
    async fn with_subnets(
        &self,
        owner: &Owner,
        networks: Vec<NeutronNetwork>,
    ) -> Result<Observed, BackendError> {
        let observed = Observed::pick(owner, &networks, &[]);
        let Some(network) = &observed.network else {
            return Ok(observed);
        };
        let subnets = self.session.list_subnets_on(&network.id).await?;
        Ok(Observed::pick(owner, &networks, &subnets))
    }

    /// Before creating a network: one of that name that is ours but untagged (an attempt
    /// stopped before it tagged, or whose answer was lost) carries our marker, and is taken;
    /// one tagged for a cluster id this cluster adopts is taken too. Any other of that name is
    /// somebody else's (a person's, or another cluster's in the same project): Neutron's names
    /// are not unique, so it neither blocks ours nor is touched, and ours is created beside
    /// it. The Network's tagged networks are known already (none, or no create was planned):
    /// asked just now, or in a listing that started after this Network's last write.
    async fn claim_by_name(&self, owner: &Owner, desired: &Desired) -> Result<Observed, BackendError> {
        let named: Vec<NeutronNetwork> = self
            .session
            .list_networks(&[], Some(&desired.name))
            .await?
            .into_iter()
            .filter(|n| owner.claims(&n.tags, n.description.as_deref()))
            .collect();
        self.with_subnets(owner, named).await
    }
}

/// Counts and names the networks of the project tagged for other cluster ids: another cluster
/// sharing the project, or this cluster before a rebuild, whose networks are then orphans
/// until adopted (`--adopt-cluster-id`) or deleted. One listing of the project's networks;
/// returns whether it succeeded.
async fn report_other_clusters(session: &Session, cluster_id: &str, gauge: &OtherClusterNetworks) -> bool {
    let networks = match session.list_networks(&[], None).await {
        Ok(networks) => networks,
        Err(error) => {
            tracing::warn!(%error, "listing the project's networks for other cluster ids; tried again after the next listing");
            return false;
        }
    };
    let mut by_cluster: std::collections::BTreeMap<&str, Vec<&NeutronNetwork>> = Default::default();
    for network in &networks {
        if let Some(id) = model::tagged_cluster_id(&network.tags)
            && id != cluster_id
        {
            by_cluster.entry(id).or_default().push(network);
        }
    }
    gauge.clear();
    for (id, networks) in by_cluster {
        gauge.set(id, networks.len());
        let named: Vec<String> = networks
            .iter()
            .take(20)
            .map(|n| format!("{} ({})", n.name, n.id))
            .collect();
        tracing::info!(
            other_cluster_id = id,
            networks = networks.len(),
            first = ?named,
            "Neutron networks of this project are tagged for another cluster id: another cluster's, left alone; if this cluster was rebuilt from that id, start with --adopt-cluster-id to take them over"
        );
    }
    true
}

/// How a reconcile learnt what Neutron holds of its Network.
enum Look {
    /// From the last listing, news to this Network.
    Listed(Observed),
    /// Asked just now.
    Asked(Observed),
    /// Nothing to learn: the Network wants what it last synced, with these ids.
    Unchanged(observations::Ids),
}

fn ensured(desired: &Desired, (network_id, subnet_id): observations::Ids, changed: bool) -> Ensured {
    Ensured {
        changed,
        description: format!("Neutron network {:?} ({network_id})", desired.name),
        reference: BackendReference {
            provider: PROVIDER.into(),
            id: network_id,
            subnet_id,
        },
    }
}

impl NetworkBackend for Neutron {
    async fn ensure(&self, network: &Network, addressing: &Addressing) -> Result<Ensured, BackendError> {
        let namespace = network
            .namespace()
            .ok_or(BackendError::MissingObjectKey("namespace"))?;
        let (owner, uid) = self.owner(network)?;
        let desired = Desired::new(&namespace, &network.name_any(), addressing, &owner);
        let (mut observed, fresh) = match self.observe(&owner, &uid, &desired).await? {
            Look::Listed(observed) => (observed, false),
            Look::Asked(observed) => (observed, true),
            Look::Unchanged(ids) => return Ok(ensured(&desired, ids, false)),
        };
        let mut steps = model::plan(&desired, &observed);
        // Creates are decided on a fresh look: the listing shows only tagged objects, and an
        // object of ours may be untagged.
        if steps.contains(&Step::CreateNetwork) {
            observed = self.claim_by_name(&owner, &desired).await?;
            steps = model::plan(&desired, &observed);
        } else if !fresh && steps.contains(&Step::CreateSubnet) {
            observed = self.ask(&owner, Vec::new()).await?;
            steps = model::plan(&desired, &observed);
        }
        let mut result = self.carry_out(&desired, &observed, &steps).await;
        if let Err(BackendError::Changed(message)) = &result {
            // Somebody changed an object between our read and our conditional write: read it
            // again and plan again, once. What they changed outside the fields a Network owns
            // stays (no write sends it); an owned field they changed is set back, as any drift.
            tracing::info!(network = %desired.name, %message, "changed in Neutron while the operator updated it; reading it again");
            self.observations.wrote(&uid);
            observed = self.ask(&owner, Vec::new()).await?;
            steps = model::plan(&desired, &observed);
            tracing::info!(network = %desired.name, ?steps, "planned again after the concurrent change");
            result = self.carry_out(&desired, &observed, &steps).await;
        }
        if !steps.is_empty() {
            // Even a failed attempt may have written: the next reconcile asks afresh.
            self.observations.wrote(&uid);
        }
        let ids = result?;
        self.observations.synced(&uid, &desired, &ids);
        Ok(ensured(&desired, ids, !steps.is_empty()))
    }

    async fn remove(&self, network: &Network) -> Result<bool, BackendError> {
        let (owner, uid) = self.owner(network)?;
        // By its tags, and by its marker: a network whose tag request failed after its create
        // carries only the marker, and must not be left behind.
        let marked = self.session.list_marked_networks(&owner.marker()).await?;
        let observed = self.ask(&owner, marked).await?;
        let mut removed = false;
        for id in observed
            .network
            .iter()
            .map(|n| &n.id)
            .chain(&observed.surplus_networks)
        {
            removed |= self.session.delete_network(id).await?;
        }
        self.observations.forget(&uid);
        Ok(removed)
    }
}

impl Neutron {
    /// Sends the planned writes in order; returns the network's and the subnet's ids.
    async fn carry_out(
        &self,
        desired: &Desired,
        observed: &Observed,
        steps: &[Step],
    ) -> Result<(String, Option<String>), BackendError> {
        let mut network_id = observed.network.as_ref().map(|n| n.id.clone());
        let same_prefix = |s: &&NeutronSubnet| IpPrefix::parse(&s.cidr) == Some(desired.prefix);
        let mut subnet_id = observed.subnets.iter().find(same_prefix).map(|s| s.id.clone());
        for step in steps {
            match step {
                Step::CreateNetwork => {
                    let created = self.session.create_network(desired).await?;
                    tracing::info!(id = %created.id, name = %desired.name, "created the Neutron network");
                    let retag = desired.owner.retag(&created.tags);
                    self.retag(Tagged::Network, &created.id, &retag).await?;
                    subnet_id = Some(self.create_subnet(&created.id, desired).await?);
                    network_id = Some(created.id);
                }
                Step::TagNetwork { id } => {
                    let existing = observed.network.as_ref().map(|n| n.tags.as_slice());
                    let retag = desired.owner.retag(existing.unwrap_or_default());
                    self.retag(Tagged::Network, id, &retag).await?;
                }
                Step::RenameNetwork { id } => {
                    let revision = observed.network.as_ref().and_then(|n| n.revision_number);
                    self.session.rename_network(id, &desired.name, revision).await?
                }
                Step::CreateSubnet => {
                    let id = network_id
                        .as_deref()
                        .ok_or(BackendError::MissingObjectKey("network id"))?;
                    subnet_id = Some(self.create_subnet(id, desired).await?);
                }
                Step::TagSubnet { id } => {
                    let existing = observed.subnets.iter().find(|s| &s.id == id);
                    let existing = existing.map(|s| s.tags.as_slice()).unwrap_or_default();
                    self.retag(Tagged::Subnet, id, &desired.owner.retag(existing))
                        .await?;
                }
                Step::UpdateSubnet { id, pools } => {
                    let revision = observed
                        .subnets
                        .iter()
                        .find(|s| &s.id == id)
                        .and_then(|s| s.revision_number);
                    self.session
                        .update_subnet(id, desired, pools.as_deref(), revision)
                        .await?
                }
                Step::DeleteSubnet { id } => {
                    self.session.delete_subnet(id).await?;
                }
                Step::DeleteNetwork { id } => {
                    self.session.delete_network(id).await?;
                }
            }
        }
        let network_id = network_id.ok_or(BackendError::MissingObjectKey("network id"))?;
        Ok((network_id, subnet_id))
    }

    /// Creates the subnet and tags it; returns its id.
    async fn create_subnet(&self, network_id: &str, desired: &Desired) -> Result<String, BackendError> {
        let created = self.session.create_subnet(network_id, desired, self.dhcp).await?;
        self.retag(Tagged::Subnet, &created.id, &desired.owner.retag(&created.tags))
            .await?;
        Ok(created.id)
    }

    /// Adds and removes an object's tags, one request each, ours first: an object interrupted
    /// half-way is already ours.
    async fn retag(&self, object: Tagged, id: &str, retag: &Retag) -> Result<(), BackendError> {
        for tag in &retag.add {
            self.session.add_tag(object, id, tag).await?;
        }
        for tag in &retag.remove {
            self.session.remove_tag(object, id, tag).await?;
        }
        Ok(())
    }
}
