//! `ClusterAddresses` (`samplecrd.k8s.io/v1`, cluster-scoped): the cluster's own addresses, which
//! the operator keeps for the admission policy that refuses Networks overlapping them. Not a
//! resource of the seeds: the parameters of that policy (its `paramKind`). A ConfigMap would do
//! on paper, but the API server watches a built-in kind given as parameters with an informer
//! that stops for good once the first policy using it is deleted, after which no binding finds
//! its parameters until the API server restarts; for a custom resource it starts an informer of
//! each policy's own.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Per kind of address, the prefixes that hold them, collapsed (written by the operator).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[kube(
    group = "samplecrd.k8s.io",
    version = "v1",
    kind = "ClusterAddresses",
    plural = "clusteraddresses",
    singular = "clusteraddresses",
    annotation(
        "api-approved.kubernetes.io",
        "unapproved, sample-operator keeps the group of kubernetes/sample-controller for compatibility"
    ),
    category = "sample-operator",
    doc = "The cluster's own addresses, which no Network may overlap: kept by sample-operator for its admission policy."
)]
pub struct ClusterAddressesSpec {
    /// The nodes' Pod CIDRs.
    #[serde(default)]
    #[schemars(length(max = 100000), inner(length(max = 43)))]
    pub pods: Vec<String>,
    /// The Service CIDRs.
    #[serde(default)]
    #[schemars(length(max = 100000), inner(length(max = 43)))]
    pub services: Vec<String>,
    /// The nodes' addresses.
    #[serde(default)]
    #[schemars(length(max = 100000), inner(length(max = 43)))]
    pub nodes: Vec<String>,
    /// The API server's addresses.
    #[serde(default, rename = "apiServer")]
    #[schemars(length(max = 100000), inner(length(max = 43)))]
    pub api_server: Vec<String>,
}
