//! The Network controller's own metrics: requests to an external network backend, and the
//! Neutron networks of other cluster ids in the project.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    cluster_id: String,
}

/// `sample_operator_neutron_other_cluster_networks`: Neutron networks of the project tagged by
/// this operator's kind for another cluster id (another cluster sharing the project, or this
/// one before a rebuild); cheap to clone.
#[derive(Clone, Debug)]
pub struct OtherClusterNetworks(Family<ClusterLabels, Gauge>);

impl OtherClusterNetworks {
    pub fn new(metrics: &Metrics) -> Self {
        Self(metrics.family(
            "sample_operator_neutron_other_cluster_networks",
            "Neutron networks in the project tagged for another cluster id, by that id, counted every tenth resync: another cluster's, or this cluster's before a rebuild (see --adopt-cluster-id)",
        ))
    }

    /// Forgets every count, before they are counted again.
    pub fn clear(&self) {
        self.0.clear();
    }

    pub fn set(&self, cluster_id: &str, networks: usize) {
        self.0
            .get_or_create(&ClusterLabels {
                cluster_id: cluster_id.to_owned(),
            })
            .set(i64::try_from(networks).unwrap_or(i64::MAX));
    }
}
