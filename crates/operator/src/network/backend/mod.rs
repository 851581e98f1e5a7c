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

/// A Network's namespace may belong to a tenant who must not read the infrastructure: its
/// status and events show what happened and what to do, with a reference to the operator's log
/// line that has the details. Neutron's failures all name something of the cloud (Keystone's
/// URL, the cloud, whole error chains); Multus's name objects of the Network's own namespace,
/// but a failed request to the Kubernetes API carries the client's error chain.
impl NetworkBackend for Backend {
    async fn ensure(&self, network: &Network, addressing: &Addressing) -> Result<Ensured, BackendError> {
        match self {
            Backend::Multus(multus) => multus.ensure(network, addressing).await,
            Backend::Neutron(neutron) => neutron.ensure(network, addressing).await,
        }
        .map_err(|error| self.for_tenants(error, network))
    }

    async fn remove(&self, network: &Network) -> Result<bool, BackendError> {
        match self {
            Backend::Multus(multus) => multus.remove(network).await,
            Backend::Neutron(neutron) => neutron.remove(network).await,
        }
        .map_err(|error| self.for_tenants(error, network))
    }
}

impl Backend {
    /// `error` as the Network's namespace may read it; a redacted one is logged whole under its
    /// reference first.
    fn for_tenants(&self, error: BackendError, network: &Network) -> BackendError {
        let backend = match self {
            // Multus' own messages name only the Network's namespace, but for the requests'
            // error chains and the Network that holds a bridge, which may be another tenant's.
            Backend::Multus(_)
                if !matches!(error, BackendError::Request { .. } | BackendError::BridgeTaken(_)) =>
            {
                return error;
            }
            Backend::Multus(_) => "Multus",
            Backend::Neutron(_) => "Neutron",
        };
        redact_and_log(backend, error, network)
    }
}

/// Logs `error` whole under its reference, and returns what the Network's namespace may read.
fn redact_and_log(backend: &str, error: BackendError, network: &Network) -> BackendError {
    use kube::ResourceExt;
    let reference = error.reference(network.uid().as_deref().unwrap_or_default());
    tracing::warn!(
        reference,
        reason = error.reason(),
        detail = %error,
        "{backend} backend failure; the Network's status shows its reference"
    );
    error.redacted(&reference)
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
    /// The backend refused our credentials.
    #[error("{0}")]
    AuthFailed(String),
    /// The backend knows us and refuses this action (its policy): no new login helps.
    #[error("{0}")]
    Forbidden(String),
    /// The backend's configuration cannot be read or names nothing usable.
    #[error("{0}")]
    Misconfigured(String),
    /// The backend's quota for the project is used up.
    #[error("{0}")]
    QuotaExceeded(String),
    /// A concurrent change, or an object in use (HTTP 409).
    #[error("{0}")]
    Conflict(String),
    /// A conditional write refused because the object changed since it was read (HTTP 412):
    /// read again and retried.
    #[error("{0}")]
    Changed(String),
    /// The backend has an object of the Network's name that the Network does not own.
    #[error("{0}")]
    NotOwned(String),
    /// The name of the Network's bridge on the nodes is another Network's (Multus).
    #[error("{0}")]
    BridgeTaken(String),
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
            BackendError::Forbidden(_) => "BackendForbidden",
            BackendError::Misconfigured(_) => "BackendMisconfigured",
            BackendError::QuotaExceeded(_) => "BackendQuotaExceeded",
            BackendError::Conflict(_) | BackendError::Changed(_) => "BackendConflict",
            BackendError::NotOwned(_) => "ResourceExists",
            BackendError::BridgeTaken(_) => "BridgeTaken",
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

    /// The failure as a tenant may read it in the Network's status and events: what happened
    /// and what to do, with `reference` to find the details in the operator's log, and none of
    /// the infrastructure (URLs, clouds, other tenants' objects, error chains). The same reason,
    /// so that retries and metrics are as before.
    pub fn redacted(&self, reference: &str) -> BackendError {
        let text = |what: &str| format!("{what} (reference {reference} in the operator's log)");
        match self {
            BackendError::Unavailable(_) => BackendError::Unavailable(text(
                "the network backend is not available; the operator retries, and syncs the Network once it is",
            )),
            BackendError::Unreachable(_) => BackendError::Unreachable(text(
                "the network backend cannot be reached; the operator retries, and syncs the Network once it answers",
            )),
            BackendError::AuthFailed(_) => BackendError::AuthFailed(text(
                "the network backend refused the operator's credentials or rights; the cluster admin must fix them, and the operator retries",
            )),
            BackendError::Forbidden(_) => BackendError::Forbidden(text(
                "the network backend's policy does not let the operator do this; the cluster admin must allow it, and the operator retries",
            )),
            BackendError::Misconfigured(_) => BackendError::Misconfigured(text(
                "the operator's network backend settings are wrong; the cluster admin must fix them, and the operator retries",
            )),
            BackendError::QuotaExceeded(_) => BackendError::QuotaExceeded(text(
                "the network backend's quota is used up; delete Networks you no longer need, or ask the cluster admin to raise it",
            )),
            BackendError::Conflict(_) | BackendError::Changed(_) => BackendError::Conflict(text(
                "the network is in use or was changed at the same time; the operator retries (a deleted Network goes once nothing uses it)",
            )),
            BackendError::NotOwned(_) => BackendError::NotOwned(text(
                "the network backend has a network of this name that this Network does not own, and leaves it alone; rename the Network, or ask the cluster admin",
            )),
            BackendError::BridgeTaken(_) => BackendError::BridgeTaken(text(
                "the name of this Network's bridge on the nodes is another Network's; change the prefix or the gateway, or create the Network anew (a new one gets another name)",
            )),
            BackendError::NotFound(_) => {
                BackendError::NotFound(text("the network backend failed; the operator retries"))
            }
            BackendError::Failed(_) => {
                BackendError::Failed(text("the network backend failed; the operator retries"))
            }
            BackendError::Request { .. } => BackendError::Failed(text(
                "the operator's request to the Kubernetes API failed; the operator retries",
            )),
            // Names nothing outside the Network.
            BackendError::MissingObjectKey(_) => self.clone(),
        }
    }

    /// A short reference that ties a Network's reported failure to the operator's log lines
    /// about it: the same for every retry of one failure (so that retries leave the status
    /// alone), another for another Network or reason.
    pub fn reference(&self, network_uid: &str) -> String {
        let mut hasher = fnv::FnvHasher::default();
        std::hash::Hasher::write(&mut hasher, network_uid.as_bytes());
        std::hash::Hasher::write(&mut hasher, self.reason().as_bytes());
        format!("{:08x}", std::hash::Hasher::finish(&hasher) as u32)
    }

    /// A Kubernetes API failure while `action`.
    pub fn request(action: &'static str, source: kube::Error) -> Self {
        BackendError::Request {
            action,
            source: Arc::new(source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each failure as a backend reports it, with infrastructure details in it.
    fn detailed() -> Vec<BackendError> {
        let secret = "https://keystone.internal:5000/v3 cloud prod-east network 0b7e-other-tenant";
        vec![
            BackendError::Unavailable(secret.into()),
            BackendError::Unreachable(secret.into()),
            BackendError::AuthFailed(secret.into()),
            BackendError::Forbidden(secret.into()),
            BackendError::Misconfigured(secret.into()),
            BackendError::QuotaExceeded(secret.into()),
            BackendError::Conflict(secret.into()),
            BackendError::Changed(secret.into()),
            BackendError::NotOwned(secret.into()),
            BackendError::BridgeTaken(secret.into()),
            BackendError::NotFound(secret.into()),
            BackendError::Failed(secret.into()),
        ]
    }

    #[test]
    fn redacted_failures_keep_their_reason_and_name_no_infrastructure() {
        for error in detailed() {
            let reference = error.reference("uid-1");
            let redacted = error.redacted(&reference);
            let text = redacted.to_string();
            assert_eq!(redacted.reason(), error.reason(), "{text}");
            assert_eq!(redacted.forgets_reference(), error.forgets_reference(), "{text}");
            assert!(
                text.contains(&format!("(reference {reference} in the operator's log)")),
                "{text}"
            );
            for detail in ["keystone", "prod-east", "0b7e", "https"] {
                assert!(!text.contains(detail), "{text}");
            }
        }
    }

    /// A log sink for one test's subscriber.
    #[derive(Clone, Default)]
    struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_tenant_reads_a_reference_and_the_log_has_the_details_under_it() {
        let mut network = Network::new(
            "blue",
            sample_operator_api::NetworkSpec {
                cidr: "10.1.0.0/24".into(),
                gateway: "10.1.0.1".into(),
            },
        );
        network.metadata.uid = Some("uid-1".into());
        let detail = "listing networks: error sending request for url (http://127.0.0.1:9696/v2.0/networks)";
        let log = Captured::default();
        let sink = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .finish();
        let shown = tracing::subscriber::with_default(subscriber, || {
            redact_and_log("Neutron", BackendError::Unreachable(detail.into()), &network)
        });
        let shown = shown.to_string();
        let log = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        let reference = BackendError::Unreachable(String::new()).reference("uid-1");
        assert!(shown.contains(&reference) && !shown.contains("9696"), "{shown}");
        let line = log.lines().find(|l| l.contains(&reference)).expect(&log);
        assert!(
            line.contains(detail) && line.contains("BackendUnavailable"),
            "{line}"
        );
    }

    #[test]
    fn a_failed_kubernetes_request_is_redacted_and_keeps_its_reason() {
        let failed = BackendError::request(
            "applying NetworkAttachmentDefinition",
            kube::Error::Api(
                kube::core::Status::failure("connection refused to https://10.96.0.1:443", "InternalError")
                    .with_code(500)
                    .boxed(),
            ),
        );
        let redacted = failed.redacted("0badcafe");
        assert_eq!(redacted.reason(), failed.reason());
        assert!(!redacted.to_string().contains("10.96.0.1"), "{redacted}");
    }

    #[test]
    fn a_reference_is_the_same_for_every_retry_of_a_failure_and_differs_otherwise() {
        let down = BackendError::Unreachable("connection refused".into());
        let reference = down.reference("uid-1");
        assert_eq!(reference.len(), 8);
        // Another attempt, whose error text differs: the status is left as it is.
        assert_eq!(
            BackendError::Unreachable("timed out".into()).reference("uid-1"),
            reference
        );
        assert_ne!(down.reference("uid-2"), reference);
        assert_ne!(
            BackendError::QuotaExceeded(String::new()).reference("uid-1"),
            reference
        );
    }
}
