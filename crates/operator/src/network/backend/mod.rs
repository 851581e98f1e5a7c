//! Where Networks are materialised, behind a small trait so that more backends can follow.
//!
//! The first backend, [`multus`], keeps each Network as a Multus NetworkAttachmentDefinition in
//! the Network's namespace. An external SDN or IPAM (OpenStack Neutron, which the seeds leave as
//! a "FIX ME") would be the next: it implements the same two operations against its own API
//! and reports its identifiers in [`BackendReference`], which the Network's status keeps.

pub mod multus;

use sample_operator_api::{Addressing, BackendReference, Network};

/// What a backend did to hold a Network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ensured {
    /// Whether anything was written; `false` when the backend already matched.
    pub changed: bool,
    /// The network's identity in the backend, for the status.
    pub reference: BackendReference,
    /// The backend object in words, for messages: `NetworkAttachmentDefinition "blue"`.
    pub description: String,
}

/// A store of networks that Networks are synced to.
///
/// Both operations are idempotent: the controller calls them on every reconcile, again after a
/// failure, and again after a restart that lost track of what was done.
pub trait NetworkBackend: Send + Sync + 'static {
    /// Makes the backend hold `network` with `addressing` (its validated spec): creates the
    /// network, updates it when it differs, or leaves it alone when it matches. Never takes over
    /// an object of the backend that this Network does not own.
    fn ensure(
        &self,
        network: &Network,
        addressing: &Addressing,
    ) -> impl Future<Output = Result<Ensured, BackendError>> + Send;

    /// Removes `network` from the backend. Returns whether something was removed: `false` when
    /// the backend never had it (or is not there at all), which is not an error. Never removes
    /// an object of the backend that this Network does not own.
    fn remove(&self, network: &Network) -> impl Future<Output = Result<bool, BackendError>> + Send;
}

/// What can go wrong in a backend. The reasons are the `Ready` condition's reasons and the
/// labels in logs and metrics.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The backend is not there: for Multus, its CRD is not installed. Retried, since installing
    /// it fixes the Network without any change to it.
    #[error("{0}")]
    Unavailable(String),
    /// The backend has an object of the Network's name that the Network does not own.
    #[error("{0}")]
    NotOwned(String),
    /// The Network lacks what the backend needs to name or own its object.
    #[error("the Network has no {0}")]
    MissingObjectKey(&'static str),
    /// A request to the Kubernetes API failed.
    #[error("{action}: {source}")]
    Request {
        action: &'static str,
        #[source]
        source: kube::Error,
    },
}

impl BackendError {
    /// A short, stable name of the failure: the `Ready` reason, for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            BackendError::Unavailable(_) => "BackendUnavailable",
            BackendError::NotOwned(_) => "ResourceExists",
            BackendError::MissingObjectKey(_) => "MissingObjectKey",
            BackendError::Request { .. } => "BackendError",
        }
    }
}
