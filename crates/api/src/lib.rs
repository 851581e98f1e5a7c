//! API types of sample-operator's custom resources.
//!
//! The group, version, kind, plural and field names of each type match the seed tutorials
//! exactly, so manifests written for those controllers apply unchanged. Each type carries its
//! own schema (validation, CEL rules, printer columns, short names, status subresource); the CRD
//! manifests under `deploy/crds/` are generated from these types by [`crds_yaml`].

// Several `printcolumn(...)` entries repeat keys such as `type_`, which clippy mistakes for
// duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod cluster_addresses;
pub mod conditions;
pub mod events;
pub mod foo;
pub mod ip;
pub mod my_custom_resource;
pub mod names;
pub mod network;

pub use cluster_addresses::{ClusterAddresses, ClusterAddressesSpec};
pub use foo::{ExampleFoo, Foo, FooKind, FooSpec, FooStatus};
pub use my_custom_resource::{MyCustomResource, MyCustomResourceSpec, MyCustomResourceStatus};
pub use network::{Addressing, BackendReference, Network, NetworkSpec, NetworkStatus};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Groups under `k8s.io` and `kubernetes.io` are protected: a stock apiserver accepts a CRD in
/// them only when it carries this annotation. A value starting with `unapproved` is accepted and
/// marks the CRD as not reviewed by Kubernetes API reviewers, which is the truth for the seeds'
/// groups (`samplecrd.k8s.io`, `samplecontroller.k8s.io`).
pub const API_APPROVAL_ANNOTATION: &str = "api-approved.kubernetes.io";
/// The value we give [`API_APPROVAL_ANNOTATION`]; `kube(annotation(...))` takes literals, so the
/// derives repeat it and a unit test checks they agree.
pub const API_APPROVAL_VALUE: &str =
    "unapproved, sample-operator keeps the group of kubernetes/sample-controller for compatibility";

/// The CRDs installed by default, in a stable order: the seeds' resources, then the parameters
/// of the Networks' admission policy.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        Network::crd(),
        Foo::crd(),
        MyCustomResource::crd(),
        ClusterAddresses::crd(),
    ]
}

/// The CRD of the `example.com` Foo, installed only by those who use that group: with both Foo
/// CRDs installed, `kubectl get foos` names one of them (`example.com`, first in discovery's
/// order), so users of kubernetes/sample-controller's group would have to spell out
/// `foos.samplecontroller.k8s.io`.
pub fn example_com_crds() -> Vec<CustomResourceDefinition> {
    vec![ExampleFoo::crd()]
}

const GENERATED_HEADER: &str = "# Generated from the Rust types in crates/api by `sample-operator crd`; do not edit.\n# Regenerate: cargo xtask crds\n";

/// `crds` as one multi-document YAML stream: what `sample-operator crd` prints and what is
/// committed under `deploy/crds/`.
pub fn crds_yaml(crds: &[CustomResourceDefinition]) -> Result<String, serde_yaml::Error> {
    let mut out = String::from(GENERATED_HEADER);
    for crd in crds {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_groups_carry_the_approval_annotation() {
        for crd in crds().into_iter().chain(example_com_crds()) {
            let group = &crd.spec.group;
            let protected = group.ends_with(".k8s.io") || group.ends_with(".kubernetes.io");
            let annotation = crd
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(API_APPROVAL_ANNOTATION));
            if protected {
                assert_eq!(
                    annotation.map(String::as_str),
                    Some(API_APPROVAL_VALUE),
                    "{group}"
                );
            } else {
                assert_eq!(annotation, None, "{group} is not protected");
            }
        }
    }

    #[test]
    fn every_crd_has_a_status_subresource_short_names_and_columns() {
        for crd in crds().into_iter().chain(example_com_crds()) {
            let name = crd.metadata.name.clone().unwrap_or_default();
            // Parameters the operator writes whole: no status, nothing a user lists.
            if name == "clusteraddresses.samplecrd.k8s.io" {
                continue;
            }
            let version = &crd.spec.versions[0];
            let subresources = version.subresources.as_ref().expect("subresources");
            assert!(subresources.status.is_some(), "{name} has no status subresource");
            assert!(
                crd.spec.names.short_names.as_ref().is_some_and(|s| !s.is_empty()),
                "{name}"
            );
            assert!(
                version
                    .additional_printer_columns
                    .as_ref()
                    .is_some_and(|c| c.len() >= 3),
                "{name} shows too few columns"
            );
        }
    }
}

#[cfg(test)]
mod bounded {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;

    /// The paths under `schema` of strings without a maximum length, lists without a maximum
    /// number of items, and maps without a maximum number of properties.
    fn unbounded(schema: &JSONSchemaProps, path: &str, out: &mut Vec<String>) {
        match schema.type_.as_deref() {
            Some("string") if schema.max_length.is_none() && schema.enum_.is_none() => {
                out.push(path.to_owned())
            }
            Some("array") if schema.max_items.is_none() => out.push(path.to_owned()),
            Some("object") if schema.additional_properties.is_some() && schema.max_properties.is_none() => {
                out.push(path.to_owned())
            }
            _ => {}
        }
        for (name, property) in schema.properties.iter().flatten() {
            unbounded(property, &format!("{path}.{name}"), out);
        }
        if let Some(items) = &schema.items
            && let k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(items) = items
        {
            unbounded(items, &format!("{path}[]"), out);
        }
    }

    /// What a tenant writes into a spec is what the operator caches of each object (the watch
    /// drops labels, annotations and managed fields): every field of it is bounded, so one
    /// object's cost to the operator is too.
    #[test]
    fn every_field_a_tenant_writes_into_a_spec_is_bounded() {
        for crd in crds().into_iter().chain(example_com_crds()) {
            let name = crd.metadata.name.clone().unwrap_or_default();
            for version in &crd.spec.versions {
                let schema = version
                    .schema
                    .as_ref()
                    .and_then(|s| s.open_api_v3_schema.as_ref())
                    .unwrap();
                let spec = &schema.properties.as_ref().unwrap()["spec"];
                let mut found = Vec::new();
                unbounded(spec, "spec", &mut found);
                assert!(found.is_empty(), "{name}: unbounded {found:?}");
            }
        }
    }
}
