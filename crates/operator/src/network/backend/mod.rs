//! Where Networks are materialised, behind a small trait: [`multus`] keeps each Network as a
//! Multus NetworkAttachmentDefinition in the Network's namespace; [`neutron`] as an OpenStack
//! Neutron network with a subnet (the seeds' own backend, their "FIX ME"). Each reports its
//! identifiers in [`BackendReference`], which the Network's status keeps.

pub mod multus;
pub mod neutron;

use std::sync::Arc;

use sample_operator_api::{Addressing, BackendReference, Network};

use multus::Multus;
use neutron::Neutron;

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

/// The backend a run of the Network controller syncs to, as `--network-backend` chose it: one
/// reconciler type, whichever it is.
pub enum Backend {
    Multus(Multus),
    Neutron(Neutron),
}

impl NetworkBackend for Backend {
    async fn ensure(&self, network: &Network, addressing: &Addressing) -> Result<Ensured, BackendError> {
        match self {
            Backend::Multus(multus) => multus.ensure(network, addressing).await,
            Backend::Neutron(neutron) => neutron.ensure(network, addressing).await,
        }
    }

    async fn remove(&self, network: &Network) -> Result<bool, BackendError> {
        match self {
            Backend::Multus(multus) => multus.remove(network).await,
            Backend::Neutron(neutron) => neutron.remove(network).await,
        }
    }
}

/// What can go wrong in a backend. The reasons are the `Ready` condition's reasons and the
/// labels in logs and metrics; the messages say what to do.
#[derive(Clone, Debug, thiserror::Error)]
pub enum BackendError {
    /// The backend is not there: for Multus, its CRD is not installed. Retried, since
    /// installing it fixes the Network without any change to it.
    #[error("{0}")]
    Unavailable(String),
    /// The backend cannot be reached now (for Neutron: Keystone or neutron-server down or
    /// unreachable); what it holds is still there. Retried.
    #[error("{0}")]
    Unreachable(String),
    /// The backend refused our credentials, or the right to act.
    #[error("{0}")]
    AuthFailed(String),
    /// The backend's configuration cannot be read or names nothing usable.
    #[error("{0}")]
    Misconfigured(String),
    /// The backend's quota for the project is used up.
    #[error("{0}")]
    QuotaExceeded(String),
    /// A concurrent change, or an object in use (HTTP 409 or 412).
    #[error("{0}")]
    Conflict(String),
    /// The backend has an object of the Network's name that the Network does not own.
    #[error("{0}")]
    NotOwned(String),
    /// An object the backend was asked about is not there (a backend handles it where gone is
    /// fine, as in deletes).
    #[error("{0}")]
    NotFound(String),
    /// The Network lacks what the backend needs to name or own its object.
    #[error("the Network has no {0}")]
    MissingObjectKey(&'static str),
    /// A request to the Kubernetes API failed.
    #[error("{action}: {source}")]
    Request {
        action: &'static str,
        #[source]
        source: Arc<kube::Error>,
    },
    /// Any other failure of the backend, such as an HTTP 500.
    #[error("{0}")]
    Failed(String),
}

impl BackendError {
    /// A short, stable name of the failure: the `Ready` reason, for logs and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            BackendError::Unavailable(_) | BackendError::Unreachable(_) => "BackendUnavailable",
            BackendError::AuthFailed(_) => "BackendAuthFailed",
            BackendError::Misconfigured(_) => "BackendMisconfigured",
            BackendError::QuotaExceeded(_) => "BackendQuotaExceeded",
            BackendError::Conflict(_) => "BackendConflict",
            BackendError::NotOwned(_) => "ResourceExists",
            BackendError::MissingObjectKey(_)
            | BackendError::NotFound(_)
            | BackendError::Request { .. }
            | BackendError::Failed(_) => "BackendError",
        }
    }

    /// Whether the failure says the backend's object is not there (as far as we know): the
    /// status then drops its reference. Other failures say nothing of what the backend holds.
    pub fn forgets_reference(&self) -> bool {
        matches!(self, BackendError::NotOwned(_) | BackendError::Unavailable(_))
    }

    /// A Kubernetes API failure while `action`.
    pub fn request(action: &'static str, source: kube::Error) -> Self {
        BackendError::Request {
            action,
            source: Arc::new(source),
        }
    }
}
