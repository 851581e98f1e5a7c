//! `Network` (`samplecrd.k8s.io/v1`): an IP network that the operator syncs to a network backend.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;

/// The spec of a Network, as in the seeds: an IP prefix and a gateway inside it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[kube(
    group = "samplecrd.k8s.io",
    version = "v1",
    kind = "Network",
    plural = "networks",
    namespaced,
    status = "NetworkStatus",
    derive = "PartialEq",
    shortname = "net",
    category = "sample-operator",
    annotation(
        "api-approved.kubernetes.io",
        "unapproved, sample-operator keeps the group of kubernetes/sample-controller for compatibility"
    ),
    doc = "An IP network (prefix and gateway) that the operator syncs to a network backend.",
    printcolumn(name = "CIDR", type_ = "string", json_path = ".spec.cidr"),
    printcolumn(name = "Gateway", type_ = "string", json_path = ".spec.gateway"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
// Rules across fields run only once each field is valid on its own, so a bad cidr is reported
// once, on the cidr, and not again as a gateway outside it.
#[x_kube(validation = kube::core::Rule::new(
    "!isCIDR(self.cidr) || !isIP(self.gateway) || \
     (ip(self.gateway).family() == cidr(self.cidr).ip().family() && cidr(self.cidr).containsIP(self.gateway))"
).message("gateway must be an address of the same IP family inside cidr").field_path(".gateway"))]
pub struct NetworkSpec {
    /// The network's IP prefix in CIDR notation, IPv4 (`192.168.0.0/16`) or IPv6 (`fd00::/64`).
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = kube::core::Rule::new("isCIDR(self)")
        .message("cidr must be an IPv4 or IPv6 prefix in CIDR notation, such as 192.168.0.0/16"))]
    pub cidr: String,
    /// The gateway's IP address; it must lie inside `cidr` and be of the same family.
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = kube::core::Rule::new("isIP(self)")
        .message("gateway must be an IPv4 or IPv6 address, such as 192.168.0.1"))]
    pub gateway: String,
}

/// What the operator last observed and did for a Network.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions of the Network; `Ready` says whether it is synced to the backend.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
