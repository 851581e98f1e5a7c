//! `MyCustomResource` (`poc.test.domain/v1`): the kubebuilder seed's resource, healthy while a
//! Pod of the name it gives exists.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;

/// The spec of a MyCustomResource, as in the kubebuilder seed.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[kube(
    group = "poc.test.domain",
    version = "v1",
    kind = "MyCustomResource",
    plural = "mycustomresources",
    namespaced,
    status = "MyCustomResourceStatus",
    derive = "PartialEq",
    shortname = "mcr",
    category = "sample-operator",
    doc = "A MyCustomResource is Healthy while a Pod named spec.name exists in its namespace.",
    printcolumn(name = "Pod", type_ = "string", json_path = ".spec.name"),
    printcolumn(name = "Healthy", type_ = "boolean", json_path = ".status.Healthy"),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
pub struct MyCustomResourceSpec {
    /// Name of the Pod, in the resource's namespace, whose existence makes it healthy.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Whether the named Pod was found.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct MyCustomResourceStatus {
    /// True while a Pod named `spec.name` exists and is not being deleted. The key is
    /// capitalised as in the seed, so its clients keep working.
    #[serde(rename = "Healthy", default)]
    pub healthy: bool,
    /// The generation of the spec this status describes.
    #[serde(
        rename = "observedGeneration",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_generation: Option<i64>,
    /// Conditions of the resource; `Ready` mirrors `Healthy` with a reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
