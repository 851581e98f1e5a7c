//! `Foo` (`samplecontroller.k8s.io/v1alpha1`): kubernetes/sample-controller's resource, which owns
//! an nginx Deployment.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;

/// The spec of a Foo, as in kubernetes/sample-controller.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[kube(
    group = "samplecontroller.k8s.io",
    version = "v1alpha1",
    kind = "Foo",
    plural = "foos",
    namespaced,
    status = "FooStatus",
    derive = "PartialEq",
    shortname = "fo",
    category = "sample-operator",
    annotation(
        "api-approved.kubernetes.io",
        "unapproved, sample-operator keeps the group of kubernetes/sample-controller for compatibility"
    ),
    doc = "A Foo owns an nginx Deployment named spec.deploymentName and keeps its replica count.",
    printcolumn(name = "Deployment", type_ = "string", json_path = ".spec.deploymentName"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(
        name = "Available",
        type_ = "integer",
        json_path = ".status.availableReplicas"
    ),
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
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = kube::core::Rule::new("self.metadata.name.size() <= 63")
        .message("metadata.name must be at most 63 characters: the Deployment's labels carry it")
)]
#[serde(rename_all = "camelCase")]
pub struct FooSpec {
    /// Name of the Deployment the Foo owns, in the Foo's namespace; a valid Deployment name
    /// (a DNS-1123 subdomain).
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub deployment_name: String,
    /// Desired number of nginx replicas, 1 to 10; the Deployment's default (1) when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub replicas: Option<i32>,
}

/// What the operator last observed of a Foo's Deployment.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FooStatus {
    /// Available replicas of the owned Deployment.
    #[serde(default)]
    pub available_replicas: i32,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Conditions of the Foo; `Ready` says whether its Deployment is in place and available.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// Longest Foo name: the name is a label value on the Deployment's pods.
pub const MAX_NAME_LENGTH: usize = 63;
/// Bounds of `spec.replicas`.
pub const REPLICAS: std::ops::RangeInclusive<i32> = 1..=10;

impl Foo {
    /// The checks of the schema, in Rust: a Foo stored before the schema had them (or written
    /// while validation was off) is reported rather than acted on. The message names the field.
    pub fn validate(&self) -> Result<(), String> {
        let name = self.metadata.name.as_deref().unwrap_or_default();
        if name.len() > MAX_NAME_LENGTH {
            return Err(format!(
                "metadata.name: {name:?} is longer than {MAX_NAME_LENGTH} characters, the limit of a label value"
            ));
        }
        if !crate::names::is_dns1123_subdomain(&self.spec.deployment_name) {
            return Err(format!(
                "spec.deploymentName: {:?} is not a valid Deployment name (lower-case letters, digits, '-' and '.', at most 253 characters)",
                self.spec.deployment_name
            ));
        }
        if let Some(replicas) = self.spec.replicas
            && !REPLICAS.contains(&replicas)
        {
            return Err(format!(
                "spec.replicas: {replicas} is out of range, it must be from {} to {}",
                REPLICAS.start(),
                REPLICAS.end()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn foo(name: &str, deployment_name: &str, replicas: Option<i32>) -> Foo {
        let mut foo = Foo::new(
            name,
            FooSpec {
                deployment_name: deployment_name.into(),
                replicas,
            },
        );
        foo.metadata.namespace = Some("default".into());
        foo
    }

    #[test]
    fn accepts_what_the_schema_accepts() {
        assert_eq!(foo("example-foo", "example-foo", Some(1)).validate(), Ok(()));
        assert_eq!(foo("a", "web.v2", None).validate(), Ok(()));
        assert_eq!(foo("a", "b", Some(10)).validate(), Ok(()));
    }

    #[test]
    fn names_the_field_that_is_wrong() {
        let err = foo("a", "Not_A_Name", Some(1)).validate().unwrap_err();
        assert!(err.starts_with("spec.deploymentName:"), "{err}");
        for replicas in [0, 11, -1] {
            let err = foo("a", "b", Some(replicas)).validate().unwrap_err();
            assert!(err.starts_with("spec.replicas:"), "{err}");
        }
        let err = foo(&"x".repeat(64), "b", Some(1)).validate().unwrap_err();
        assert!(err.starts_with("metadata.name:"), "{err}");
    }
}
