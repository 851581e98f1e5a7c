//! The part of a Deployment the Foo controller reads, as it reads it from the apiserver: from
//! its watch, a get or an apply's answer. The controller keeps only a [`Row`] of each (see
//! [`super::table`]); this form lives while one event or answer is handled.
//!
//! A `k8s_openapi` Deployment with one container takes about 4.5 KiB before any of its strings
//! (its structs carry every field of a DeploymentSpec, a PodSpec and a Container), and the
//! controller reads a dozen fields. So Deployments are deserialized straight into this
//! projection, a few hundred bytes, with less parsing; serde skips the unknown fields. Its labels
//! are short sorted lists: a `BTreeMap` allocates a whole node (about 544 bytes) even for one
//! label, and a Deployment has three sets of them (which counted while these were cached: at
//! 10,000 Foos, the memory scenario went from 74 to 56 MiB in one run).
//!
//! [`Row`]: super::table::Row

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::Deserialize;

/// A Deployment as the Foo controller reads it: without its managed fields and annotations
/// (the Deployment controller's revision, `kubectl`'s last applied configuration), which it
/// never reads, and with its labels in `labels`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(from = "Wire")]
pub struct CachedDeployment {
    pub metadata: ObjectMeta,
    /// `metadata.labels`, moved here as it is read: read them here, not through
    /// `Resource::labels`.
    pub labels: Labels,
    pub spec: Option<Spec>,
    pub status: Option<Status>,
}

/// A CachedDeployment as the apiserver sends it.
#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: Metadata,
    spec: Option<Spec>,
    status: Option<Status>,
}

/// Every field of an `ObjectMeta` but the two the controller drops, managed fields and annotations,
/// which serde then skips without building them: the managed fields are more than half a
/// Deployment's metadata as sent, each entry a tree of JSON maps.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metadata {
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    #[serde(default)]
    labels: Labels,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<Wire> for CachedDeployment {
    fn from(wire: Wire) -> Self {
        let m = wire.metadata;
        Self {
            metadata: ObjectMeta {
                creation_timestamp: m.creation_timestamp,
                deletion_grace_period_seconds: m.deletion_grace_period_seconds,
                deletion_timestamp: m.deletion_timestamp,
                finalizers: m.finalizers,
                generate_name: m.generate_name,
                generation: m.generation,
                name: m.name,
                namespace: m.namespace,
                owner_references: m.owner_references,
                resource_version: m.resource_version,
                self_link: m.self_link,
                uid: m.uid,
                annotations: None,
                labels: None,
                managed_fields: None,
            },
            labels: m.labels,
            spec: wire.spec,
            status: wire.status,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Spec {
    pub replicas: Option<i32>,
    #[serde(default)]
    pub selector: Selector,
    #[serde(default)]
    pub template: Template,
}

/// The pod template: its labels and its containers' names and images.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Template {
    #[serde(default)]
    pub metadata: TemplateMetadata,
    #[serde(default)]
    pub spec: PodSpec,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct TemplateMetadata {
    #[serde(default)]
    pub labels: Labels,
}

/// Labels as a list sorted by key (see the module docs).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Labels(pub Box<[(String, String)]>);

impl Labels {
    pub fn get(&self, key: &str) -> Option<&String> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

impl From<Option<BTreeMap<String, String>>> for Labels {
    fn from(map: Option<BTreeMap<String, String>>) -> Self {
        Labels(map.unwrap_or_default().into_iter().collect())
    }
}

impl<'de> Deserialize<'de> for Labels {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Option::<BTreeMap<String, String>>::deserialize(d)?.into())
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    #[serde(default)]
    pub match_labels: Labels,
    pub match_expressions:
        Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement>>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct PodSpec {
    #[serde(default)]
    pub containers: Vec<Container>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Container {
    pub name: String,
    pub image: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub observed_generation: Option<i64>,
    pub available_replicas: Option<i32>,
}

/// The same resource as a Deployment: `Api<CachedDeployment>` reads apps/v1 deployments.
impl Resource for CachedDeployment {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Deployment::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        Deployment::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        Deployment::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        Deployment::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// For tests, which build Deployments as objects: the controller reads them as JSON ([`Wire`]),
/// and this conversion keeps the same fields.
#[cfg(test)]
impl From<Deployment> for CachedDeployment {
    fn from(d: Deployment) -> Self {
        let spec = d.spec.map(|s| Spec {
            replicas: s.replicas,
            selector: Selector {
                match_labels: s.selector.match_labels.into(),
                match_expressions: s.selector.match_expressions,
            },
            template: Template {
                metadata: TemplateMetadata {
                    labels: s.template.metadata.and_then(|m| m.labels).into(),
                },
                spec: PodSpec {
                    containers: s
                        .template
                        .spec
                        .map(|p| p.containers)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|c| Container {
                            name: c.name,
                            image: c.image,
                        })
                        .collect(),
                },
            },
        });
        let status = d.status.map(|s| Status {
            observed_generation: s.observed_generation,
            available_replicas: s.available_replicas,
        });
        let mut metadata = d.metadata;
        metadata.managed_fields = None;
        metadata.annotations = None;
        Self {
            labels: metadata.labels.take().into(),
            metadata,
            spec,
            status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment_json() -> serde_json::Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "ns", "generation": 2,
                "labels": { "app.kubernetes.io/managed-by": "sample-operator" },
                "annotations": { "deployment.kubernetes.io/revision": "1" },
                "managedFields": [{ "manager": "sample-operator", "operation": "Apply" }],
                "ownerReferences": [{ "apiVersion": "samplecontroller.k8s.io/v1alpha1", "kind": "Foo",
                    "name": "example-foo", "uid": "uid-1", "controller": true }],
            },
            "spec": {
                "replicas": 3,
                "selector": { "matchLabels": { "app": "nginx" } },
                "strategy": { "type": "RollingUpdate" },
                "template": {
                    "metadata": { "labels": { "app": "nginx" } },
                    "spec": {
                        "containers": [{ "name": "nginx", "image": "nginx:latest",
                            "imagePullPolicy": "Always", "terminationMessagePath": "/dev/termination-log" }],
                        "restartPolicy": "Always",
                    },
                },
            },
            "status": { "observedGeneration": 2, "availableReplicas": 1, "replicas": 3,
                "conditions": [{ "type": "Available", "status": "False" }] },
        })
    }

    #[test]
    fn reads_what_the_controller_needs_from_a_deployment() {
        let read: CachedDeployment = serde_json::from_value(deployment_json()).unwrap();
        let full: Deployment = serde_json::from_value(deployment_json()).unwrap();
        // Straight from the apiserver's JSON, or converted from a full Deployment: the same.
        assert_eq!(read, CachedDeployment::from(full));

        let spec = read.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3));
        assert_eq!(
            spec.template.spec.containers[0].image.as_deref(),
            Some("nginx:latest")
        );
        assert_eq!(read.status.as_ref().unwrap().available_replicas, Some(1));
        assert_eq!(read.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-1");
        assert_eq!(read.metadata.managed_fields, None);
        assert_eq!(read.metadata.annotations, None);
        assert_eq!(read.metadata.labels, None);
        assert_eq!(
            read.labels.get("app.kubernetes.io/managed-by").unwrap(),
            "sample-operator"
        );
        assert_eq!(spec.selector.match_labels.get("app").unwrap(), "nginx");
        assert_eq!(spec.template.metadata.labels.get("app").unwrap(), "nginx");
    }

    #[test]
    fn every_metadata_field_but_managed_fields_and_annotations_is_kept() {
        let mut json = deployment_json();
        json["metadata"]["uid"] = "d-1".into();
        json["metadata"]["resourceVersion"] = "42".into();
        json["metadata"]["creationTimestamp"] = "2026-12-07T10:00:00Z".into();
        json["metadata"]["deletionTimestamp"] = "2026-12-07T10:05:00Z".into();
        json["metadata"]["deletionGracePeriodSeconds"] = 0.into();
        json["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
        json["metadata"]["generateName"] = "web-".into();
        json["metadata"]["selfLink"] = "/apis/apps/v1/namespaces/ns/deployments/web".into();
        let read: CachedDeployment = serde_json::from_value(json.clone()).unwrap();
        let full: Deployment = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(read, CachedDeployment::from(full));
        assert_eq!(read.metadata.uid.as_deref(), Some("d-1"));
        assert_eq!(
            read.metadata.finalizers.as_deref(),
            Some(&["foregroundDeletion".to_owned()][..])
        );
        assert!(read.metadata.deletion_timestamp.is_some());

        // Skipped unread: a shape that `ObjectMeta` refuses does not matter here.
        json["metadata"]["managedFields"] = "not a list".into();
        json["metadata"]["annotations"] = 7.into();
        assert!(serde_json::from_value::<Deployment>(json.clone()).is_err());
        let skipped: CachedDeployment = serde_json::from_value(json).unwrap();
        assert_eq!(skipped, read);
    }

    #[test]
    fn addresses_the_deployments_resource() {
        let url = <CachedDeployment as Resource>::url_path(&(), Some("ns"));
        assert_eq!(url, "/apis/apps/v1/namespaces/ns/deployments");
    }
}
