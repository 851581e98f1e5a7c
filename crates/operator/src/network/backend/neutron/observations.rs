//! The backend's memory of Neutron: the last listing of everything tagged with the cluster's
//! identity, grouped by Network, and which Networks may still use it (see the module docs of
//! [`neutron`](super)).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use super::BackendError;
use super::client::Session;
use super::model::{self, Desired, NeutronNetwork, NeutronSubnet, Observed, Owner};

/// The last listing of Neutron, and which Networks may still use it.
#[derive(Default)]
pub(super) struct Observations {
    state: Mutex<ListingState>,
    /// Becomes true once the first listing was tried, so that the first reconciles after a
    /// start wait for it instead of asking Neutron one Network at a time.
    first_listing: tokio::sync::watch::Sender<bool>,
}

#[derive(Default)]
struct ListingState {
    /// Listings started so far; a listing is known by its number.
    started: u64,
    /// The number of the stored listing (0: none).
    listing: u64,
    networks: HashMap<String, Vec<NeutronNetwork>>,
    subnets: HashMap<String, Vec<NeutronSubnet>>,
    /// Per Network UID, the listing it last used or the listings started when it last wrote:
    /// a listing not newer than this is no news for it.
    seen: HashMap<String, u64>,
    /// Per Network UID, what it last synced and the ids it got: while the Network still wants
    /// that and no listing is news to it, Neutron holds it (drift is found by the next
    /// listing), so a reconcile asks nothing.
    synced: HashMap<String, (Desired, Ids)>,
}

/// A Network's network id and subnet id in Neutron.
pub(super) type Ids = (String, Option<String>);

impl Observations {
    pub(super) async fn wait_for_first_listing(&self) {
        let mut listed = self.first_listing.subscribe();
        // The listing has timeouts of its own; this bounds the wait should it never be polled.
        let _ = tokio::time::timeout(Duration::from_secs(60), listed.wait_for(|done| *done)).await;
    }

    /// Lists every network and subnet of the cluster and keeps them, grouped by Network.
    /// Returns whether the listing succeeded.
    pub(super) async fn list(&self, session: &Session, cluster_tag: &str) -> bool {
        let number = {
            let mut state = self.state.lock().expect("listing state");
            state.started += 1;
            state.started
        };
        let tags = [cluster_tag.to_owned()];
        let listed = async {
            let networks = session.list_networks(&tags, None).await?;
            let subnets = session.list_subnets(&tags).await?;
            Ok::<_, BackendError>((networks, subnets))
        }
        .await;
        let listed = match listed {
            Ok((networks, subnets)) => {
                let mut state = self.state.lock().expect("listing state");
                state.listing = number;
                state.networks = group(networks, |n| &n.tags);
                state.subnets = group(subnets, |s| &s.tags);
                tracing::debug!(networks = state.networks.len(), "listed Neutron");
                true
            }
            Err(error) => {
                tracing::warn!(%error, "listing Neutron for the resync");
                false
            }
        };
        self.first_listing.send_replace(true);
        listed
    }

    /// This Network's part of the last listing, if it is news to it.
    pub(super) fn take(&self, owner: &Owner, uid: &str) -> Option<Observed> {
        let mut state = self.state.lock().expect("listing state");
        let listing = state.listing;
        if listing == 0 || state.seen.get(uid).is_some_and(|seen| *seen >= listing) {
            return None;
        }
        state.seen.insert(uid.to_owned(), listing);
        let networks = state.networks.get(uid).map(Vec::as_slice).unwrap_or_default();
        let subnets = state.subnets.get(uid).map(Vec::as_slice).unwrap_or_default();
        Some(Observed::pick(owner, networks, subnets))
    }

    /// Marks a write for this Network: listings started before it ended are no news to it.
    /// What it synced before is forgotten until [`Self::synced`] says it again.
    pub(super) fn wrote(&self, uid: &str) {
        let mut state = self.state.lock().expect("listing state");
        let started = state.started;
        state.seen.insert(uid.to_owned(), started);
        state.synced.remove(uid);
    }

    /// Notes that Neutron says what `desired` says, with these ids.
    pub(super) fn synced(&self, uid: &str, desired: &Desired, ids: &Ids) {
        let mut state = self.state.lock().expect("listing state");
        state
            .synced
            .insert(uid.to_owned(), (desired.clone(), ids.clone()));
    }

    /// The ids of this Network's objects, if it last synced `desired` (and nothing has
    /// been learnt since).
    pub(super) fn unchanged(&self, uid: &str, desired: &Desired) -> Option<Ids> {
        let state = self.state.lock().expect("listing state");
        let (synced, ids) = state.synced.get(uid)?;
        (synced == desired).then(|| ids.clone())
    }

    pub(super) fn forget(&self, uid: &str) {
        let mut state = self.state.lock().expect("listing state");
        state.seen.remove(uid);
        state.synced.remove(uid);
    }
}

/// Groups listed objects by the Network UID in their tags.
fn group<T>(items: Vec<T>, tags: impl Fn(&T) -> &Vec<String>) -> HashMap<String, Vec<T>> {
    let mut grouped: HashMap<String, Vec<T>> = HashMap::new();
    for item in items {
        if let Some(uid) = model::network_uid(tags(&item)) {
            grouped.entry(uid.to_owned()).or_default().push(item);
        }
    }
    grouped
}
