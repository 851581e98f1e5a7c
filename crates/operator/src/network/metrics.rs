//! The Network controller's own metric: requests to an external network backend.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::runtime::metrics::Metrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendRequestLabels {
    backend: &'static str,
    method: &'static str,
    resource: &'static str,
    result: &'static str,
}

/// `sample_operator_backend_requests_total`; cheap to clone.
#[derive(Clone, Debug)]
pub struct BackendRequests(Family<BackendRequestLabels, Counter>);

impl BackendRequests {
    /// The family in `metrics`, registered there on first use.
    pub fn new(metrics: &Metrics) -> Self {
        Self(metrics.family(
            "sample_operator_backend_requests",
            "Requests to an external network backend (Neutron, Keystone) by method, resource and result: ok or the failure's reason",
        ))
    }

    /// Counts a request to `backend`; `result` is `ok` or the failure's reason.
    pub fn count(
        &self,
        backend: &'static str,
        method: &'static str,
        resource: &'static str,
        result: &'static str,
    ) {
        self.0
            .get_or_create(&BackendRequestLabels {
                backend,
                method,
                resource,
                result,
            })
            .inc();
    }
}
