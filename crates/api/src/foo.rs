//! `Foo`: kubernetes/sample-controller's resource, which owns an nginx Deployment. It is served in
//! two groups with one spec and one status: `samplecontroller.k8s.io/v1alpha1` ([`Foo`], the
//! group of kubernetes/sample-controller) and `example.com/v1alpha1` ([`ExampleFoo`], the group
//! the nakamasato/sample-controller tutorial generates its code for). [`FooKind`] is what the
//! two have in common, and what the controller is generic over.

use std::borrow::Cow;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::ApiResource;
use kube::core::object::{HasSpec, HasStatus};
use kube::{CustomResource, CustomResourceExt, KubeSchema, Resource};
use serde::de::DeserializeOwned;
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

/// `Foo` in `example.com/v1alpha1`, as the nakamasato/sample-controller tutorial serves it: the
/// spec and status of [`Foo`] in another group. Written by hand rather than derived, because the
/// derive makes one kind per spec type; its CRD is [`Foo`]'s with the group changed
/// ([`ExampleFoo::crd`]), so the two schemas cannot drift apart.
#[derive(Deserialize, Clone, Debug, PartialEq)]
pub struct ExampleFoo {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: FooSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<FooStatus>,
}

impl ExampleFoo {
    pub const GROUP: &str = "example.com";

    /// A new ExampleFoo named `name`, as the derive's `Foo::new` makes one.
    pub fn new(name: &str, spec: FooSpec) -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..Default::default()
            },
            spec,
            status: None,
        }
    }
}

/// With `apiVersion` and `kind`, which the apiserver requires in every body.
impl Serialize for ExampleFoo {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire<'a> {
            api_version: Cow<'a, str>,
            kind: Cow<'a, str>,
            metadata: &'a ObjectMeta,
            spec: &'a FooSpec,
            #[serde(skip_serializing_if = "Option::is_none")]
            status: Option<&'a FooStatus>,
        }
        Wire {
            api_version: Self::api_version(&()),
            kind: Self::kind(&()),
            metadata: &self.metadata,
            spec: &self.spec,
            status: self.status.as_ref(),
        }
        .serialize(serializer)
    }
}

impl Resource for ExampleFoo {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Foo::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        Self::GROUP.into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        Foo::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Foo::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl HasSpec for ExampleFoo {
    type Spec = FooSpec;
    fn spec(&self) -> &FooSpec {
        &self.spec
    }
    fn spec_mut(&mut self) -> &mut FooSpec {
        &mut self.spec
    }
}

impl HasStatus for ExampleFoo {
    type Status = FooStatus;
    fn status(&self) -> Option<&FooStatus> {
        self.status.as_ref()
    }
    fn status_mut(&mut self) -> &mut Option<FooStatus> {
        &mut self.status
    }
}

impl CustomResourceExt for ExampleFoo {
    /// [`Foo`]'s CRD in the `example.com` group. That group is not under `k8s.io`, so it needs no
    /// API approval annotation, and it gets a short name of its own: `fo` stays with the group
    /// of kubernetes/sample-controller.
    fn crd() -> CustomResourceDefinition {
        let mut crd = Foo::crd();
        crd.metadata.name = Some(Self::crd_name().to_owned());
        crd.metadata.annotations = None;
        crd.spec.group = Self::GROUP.to_owned();
        crd.spec.names.short_names = Some(Self::shortnames().iter().map(|s| (*s).to_owned()).collect());
        crd
    }
    fn crd_name() -> &'static str {
        "foos.example.com"
    }
    fn api_resource() -> ApiResource {
        ApiResource::erase::<Self>(&())
    }
    fn shortnames() -> &'static [&'static str] {
        &["exfoo"]
    }
}

/// A Foo of either group: the same spec, status and behaviour under another `apiVersion`.
pub trait FooKind:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + HasSpec<Spec = FooSpec>
    + HasStatus<Status = FooStatus>
    + CustomResourceExt
    + Clone
    + std::fmt::Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// The checks of the schema, in Rust: a Foo stored before the schema had them (or written
    /// while validation was off) is reported rather than acted on. The message names the field.
    fn validate(&self) -> Result<(), String> {
        validate(self.meta(), self.spec())
    }
}

impl FooKind for Foo {}
impl FooKind for ExampleFoo {}

fn validate(meta: &ObjectMeta, spec: &FooSpec) -> Result<(), String> {
    let name = meta.name.as_deref().unwrap_or_default();
    if name.len() > MAX_NAME_LENGTH {
        return Err(format!(
            "metadata.name: {name:?} is longer than {MAX_NAME_LENGTH} characters, the limit of a label value"
        ));
    }
    if !crate::names::is_dns1123_subdomain(&spec.deployment_name) {
        return Err(format!(
            "spec.deploymentName: {:?} is not a valid Deployment name (lower-case letters, digits, '-' and '.', at most 253 characters)",
            spec.deployment_name
        ));
    }
    if let Some(replicas) = spec.replicas
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
    fn the_example_com_foo_is_the_same_foo_in_another_group() {
        let (foo, example) = (Foo::crd(), ExampleFoo::crd());
        assert_eq!(example.metadata.name.as_deref(), Some("foos.example.com"));
        assert_eq!(example.spec.group, "example.com");
        assert_eq!(example.spec.names.kind, "Foo");
        assert_eq!(example.spec.names.plural, "foos");
        assert_eq!(
            example.spec.versions, foo.spec.versions,
            "one schema for both groups"
        );

        let mut sample = ExampleFoo::new(
            "foo-sample",
            FooSpec {
                deployment_name: "foo-sample".into(),
                replicas: Some(1),
            },
        );
        let json = serde_json::to_value(&sample).unwrap();
        assert_eq!(json["apiVersion"], "example.com/v1alpha1");
        assert_eq!(json["kind"], "Foo");
        assert_eq!(json["spec"]["deploymentName"], "foo-sample");
        assert_eq!(serde_json::from_value::<ExampleFoo>(json).unwrap(), sample);

        sample.spec.replicas = Some(11);
        let err = sample.validate().unwrap_err();
        assert!(err.starts_with("spec.replicas:"), "{err}");
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
