//! The Deployment a Foo wants, and whether an observed one matches it. Pure functions: no
//! client, so they are tested with plain fixtures.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, OwnerReference};
use kube::ResourceExt;

use super::cached::CachedDeployment;
use super::settings::{SETTINGS_LABEL, Settings};
use super::table::Row;
use crate::runtime::sharding::{BUCKET_LABEL, bucket_label};
use sample_operator_api::FooKind;
use serde_json::json;

/// On every Deployment the operator creates; its watch selects on it, so the cache holds only
/// the operator's own Deployments however many others the cluster has.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "sample-operator";
/// Replicas when `spec.replicas` is unset: the Deployment default, made explicit so that the
/// operator always owns the field.
pub const DEFAULT_REPLICAS: i32 = 1;

/// The labels of the selector and the pod template, as in kubernetes/sample-controller.
pub fn selector_labels(foo: &impl FooKind) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app".to_owned(), "nginx".to_owned()),
        ("controller".to_owned(), foo.name_any()),
    ])
}

pub fn desired_replicas(foo: &impl FooKind) -> i32 {
    foo.spec().replicas.unwrap_or(DEFAULT_REPLICAS)
}

/// The whole Deployment the Foo wants, to be server-side applied: every field in it is one the
/// operator manages, and nothing else. The owner reference names the Foo's own group; the
/// image, resources and security context are the admin's [`Settings`].
pub fn desired(foo: &impl FooKind, settings: &Settings) -> Deployment {
    let owner = foo
        .controller_owner_ref(&())
        .expect("a Foo from the apiserver has a name and uid");
    let labels = selector_labels(foo);
    let mut container = json!({ "name": "nginx", "image": settings.image });
    // Empty settings leave the fields unset, as kubernetes/sample-controller's template does:
    // an empty security context would still be a change to that template, and roll every
    // Deployment taken over from it.
    if settings.resources != Default::default() {
        container["resources"] = json!(settings.resources);
    }
    if settings.security_context != Default::default() {
        container["securityContext"] = json!(settings.security_context);
    }
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": foo.spec().deployment_name,
            "namespace": foo.namespace(),
            "labels": {
                MANAGED_BY_LABEL: MANAGED_BY,
                SETTINGS_LABEL: settings.digest(),
                // The Deployment follows its Foo to the replica that holds the Foo's bucket.
                BUCKET_LABEL: bucket_label(&foo.uid().unwrap_or_default()),
            },
            "ownerReferences": [owner],
        },
        "spec": {
            "replicas": desired_replicas(foo),
            "selector": { "matchLabels": labels },
            "template": {
                "metadata": { "labels": labels },
                "spec": { "containers": [container] },
            },
        },
    }))
    .expect("a valid Deployment")
}

/// The label keys the operator sets on the Deployment, and on its pod template: in those maps,
/// the only entries it manages (others' labels are left alone, and are no drift).
const MANAGED_LABELS: [&str; 3] = [MANAGED_BY_LABEL, SETTINGS_LABEL, BUCKET_LABEL];
const TEMPLATE_LABELS: [&str; 2] = ["app", "controller"];

/// The fields of a Deployment the operator manages, borrowed from a desired or an observed one,
/// so that both are digested alike.
#[derive(Hash)]
struct Managed<'a> {
    /// There is at most one controller reference, and the desired reference is one: the
    /// observed references contain it exactly when their controller reference is it.
    controller: Option<Reference<'a>>,
    labels: [Option<&'a str>; 3],
    replicas: Option<i32>,
    selector: Vec<(&'a str, &'a str)>,
    selector_expressions: Vec<(&'a str, &'a str, &'a [String])>,
    template_labels: [Option<&'a str>; 2],
    /// The image of the container named nginx; other containers are someone else's.
    image: Option<&'a str>,
}

impl Managed<'_> {
    /// Equal digests mean equal fields, but for one chance in 2^64: a digest is what the
    /// controller keeps of each observed Deployment (see `table.rs`), not the fields. Stable
    /// within the process, which is all it is compared in.
    fn digest(&self) -> u64 {
        let mut hasher = std::hash::DefaultHasher::new();
        self.hash(&mut hasher);
        hasher.finish()
    }
}

/// Every field of an owner reference.
#[derive(Hash)]
struct Reference<'a> {
    api_version: &'a str,
    kind: &'a str,
    name: &'a str,
    uid: &'a str,
    controller: Option<bool>,
    block_owner_deletion: Option<bool>,
}

fn controller_of(references: &[OwnerReference]) -> Option<Reference<'_>> {
    references
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| Reference {
            api_version: &o.api_version,
            kind: &o.kind,
            name: &o.name,
            uid: &o.uid,
            controller: o.controller,
            block_owner_deletion: o.block_owner_deletion,
        })
}

fn expressions(selector: Option<&[LabelSelectorRequirement]>) -> Vec<(&str, &str, &[String])> {
    selector
        .unwrap_or_default()
        .iter()
        .map(|e| {
            (
                e.key.as_str(),
                e.operator.as_str(),
                e.values.as_deref().unwrap_or_default(),
            )
        })
        .collect()
}

/// The digest of the managed fields of the Deployment a Foo wants.
pub fn desired_digest(desired: &Deployment) -> u64 {
    let spec = desired.spec.as_ref();
    let labels = desired.metadata.labels.as_ref();
    let template_labels = spec
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.as_ref());
    Managed {
        controller: controller_of(desired.owner_references()),
        labels: MANAGED_LABELS.map(|key| labels.and_then(|l| l.get(key)).map(String::as_str)),
        replicas: spec.and_then(|s| s.replicas),
        selector: spec
            .and_then(|s| s.selector.match_labels.as_ref())
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        selector_expressions: expressions(spec.and_then(|s| s.selector.match_expressions.as_deref())),
        template_labels: TEMPLATE_LABELS
            .map(|key| template_labels.and_then(|l| l.get(key)).map(String::as_str)),
        image: spec
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|p| p.containers.iter().find(|c| c.name == "nginx"))
            .and_then(|c| c.image.as_deref()),
    }
    .digest()
}

/// The digest of the managed fields of an observed Deployment.
pub fn observed_digest(observed: &CachedDeployment) -> u64 {
    let spec = observed.spec.as_ref();
    Managed {
        controller: controller_of(observed.owner_references()),
        labels: MANAGED_LABELS.map(|key| observed.labels.get(key).map(String::as_str)),
        replicas: spec.and_then(|s| s.replicas),
        selector: spec
            .map(|s| s.selector.match_labels.0.iter())
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect(),
        selector_expressions: expressions(spec.and_then(|s| s.selector.match_expressions.as_deref())),
        template_labels: match spec {
            Some(s) => TEMPLATE_LABELS.map(|key| s.template.metadata.labels.get(key).map(String::as_str)),
            None => [None; 2],
        },
        image: spec
            .and_then(|s| s.template.spec.containers.iter().find(|c| c.name == "nginx"))
            .and_then(|c| c.image.as_deref()),
    }
    .digest()
}

/// Whether `observed` differs from `desired` in any field the operator manages. Fields others
/// manage (an added label or annotation, another container) do not count: they are left alone.
/// The resources and security context count through the settings' digest label: a change of the
/// settings is seen, an edit of those fields by hand is not (see [`Settings::digest`]).
pub fn needs_apply(desired: &Deployment, observed: &Row) -> bool {
    desired_digest(desired) != observed.managed
}

#[cfg(test)]
mod tests {
    use super::*;
    use sample_operator_api::{ExampleFoo, Foo, FooSpec};

    /// What the table keeps of `deployment` once the apiserver sends it.
    fn observed(deployment: Deployment) -> Row {
        Row::of(&deployment.into())
    }

    fn desired_default(foo: &Foo) -> Deployment {
        desired(foo, &Settings::default())
    }

    fn foo(replicas: Option<i32>) -> Foo {
        let mut foo = Foo::new(
            "example-foo",
            FooSpec {
                deployment_name: "web".into(),
                replicas,
            },
        );
        foo.metadata.namespace = Some("ns".into());
        foo.metadata.uid = Some("uid-1".into());
        foo
    }

    #[test]
    fn builds_the_deployment_of_kubernetes_sample_controller() {
        let d = desired_default(&foo(Some(3)));
        assert_eq!(d.metadata.name.as_deref(), Some("web"));
        assert_eq!(d.metadata.namespace.as_deref(), Some("ns"));
        let spec = d.spec.as_ref().unwrap();
        assert_eq!(spec.replicas, Some(3));
        let labels = BTreeMap::from([
            ("app".into(), "nginx".into()),
            ("controller".into(), "example-foo".into()),
        ]);
        assert_eq!(spec.selector.match_labels.as_ref(), Some(&labels));
        assert_eq!(
            spec.template.metadata.as_ref().unwrap().labels.as_ref(),
            Some(&labels)
        );
        let containers = &spec.template.spec.as_ref().unwrap().containers;
        assert_eq!(containers.len(), 1);
        assert_eq!(containers[0].name, "nginx");
        assert_eq!(containers[0].image.as_deref(), Some("nginx:latest"));
        let owner = &d.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("Foo", "uid-1", Some(true))
        );
    }

    #[test]
    fn the_owner_reference_names_the_group_of_the_foo() {
        let mut example = ExampleFoo::new(
            "example-foo",
            FooSpec {
                deployment_name: "web".into(),
                replicas: Some(3),
            },
        );
        example.metadata.namespace = Some("ns".into());
        example.metadata.uid = Some("uid-2".into());
        let d = desired(&example, &Settings::default());
        let owner = &d.owner_references()[0];
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.uid.as_str()
            ),
            ("example.com/v1alpha1", "Foo", "uid-2")
        );
        assert_eq!(
            desired_default(&foo(Some(3))).owner_references()[0].api_version,
            "samplecontroller.k8s.io/v1alpha1"
        );
        // Otherwise the same Deployment.
        assert_eq!(d.spec, desired_default(&foo(Some(3))).spec);
    }

    #[test]
    fn unset_replicas_means_one() {
        assert_eq!(desired_default(&foo(None)).spec.unwrap().replicas, Some(1));
    }

    #[test]
    fn a_matching_deployment_needs_no_write() {
        let want = desired_default(&foo(Some(2)));
        assert!(!needs_apply(&want, &observed(want.clone())));
    }

    #[test]
    fn fields_others_own_are_not_drift() {
        let want = desired_default(&foo(Some(2)));
        let mut have = want.clone();
        have.annotations_mut().insert("team".into(), "payments".into());
        have.labels_mut().insert("extra".into(), "yes".into());
        let template = &mut have.spec.as_mut().unwrap().template;
        let labels = template.metadata.as_mut().unwrap().labels.as_mut().unwrap();
        labels.insert("version".into(), "2".into());
        // Another container, ahead of ours.
        let pod = template.spec.as_mut().unwrap();
        pod.containers.insert(
            0,
            k8s_openapi::api::core::v1::Container {
                name: "sidecar".into(),
                ..Default::default()
            },
        );
        // Another owner, not a controller, ahead of ours.
        have.metadata.owner_references.as_mut().unwrap().insert(
            0,
            OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "team".into(),
                uid: "uid-9".into(),
                ..Default::default()
            },
        );
        assert!(!needs_apply(&want, &observed(have)));
    }

    #[test]
    fn the_digest_covers_every_label_the_operator_sets() {
        // A label set but not digested would never be put back.
        let d = desired_default(&foo(Some(2)));
        let keys: Vec<_> = d.labels().keys().map(String::as_str).collect();
        assert_eq!(keys, MANAGED_LABELS);
        let spec = d.spec.unwrap();
        let template: Vec<_> = spec
            .template
            .metadata
            .unwrap()
            .labels
            .unwrap()
            .into_keys()
            .collect();
        assert_eq!(template, TEMPLATE_LABELS);
        let selector: Vec<_> = spec.selector.match_labels.unwrap().into_keys().collect();
        assert_eq!(selector, TEMPLATE_LABELS);
    }

    fn nginx(d: &mut Deployment) -> &mut k8s_openapi::api::core::v1::Container {
        let pod = d.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
        &mut pod.containers[0]
    }

    #[test]
    fn managed_fields_changed_by_hand_are_drift() {
        let want = desired_default(&foo(Some(2)));
        let edits: [fn(&mut Deployment); 10] = [
            |d| d.spec.as_mut().unwrap().replicas = Some(5),
            |d| nginx(d).image = Some("nginx:1.0".into()),
            |d| {
                d.labels_mut().remove(MANAGED_BY_LABEL);
            },
            |d| {
                d.spec
                    .as_mut()
                    .unwrap()
                    .template
                    .metadata
                    .as_mut()
                    .unwrap()
                    .labels
                    .as_mut()
                    .unwrap()
                    .remove("app");
            },
            |d| d.metadata.owner_references = None,
            |d| d.metadata.owner_references.as_mut().unwrap()[0].controller = None,
            |d| d.metadata.owner_references.as_mut().unwrap()[0].name = "another-foo".into(),
            |d| {
                d.labels_mut().insert(SETTINGS_LABEL.into(), "edited".into());
            },
            |d| {
                let selector = &mut d.spec.as_mut().unwrap().selector;
                selector
                    .match_labels
                    .as_mut()
                    .unwrap()
                    .insert("tier".into(), "web".into());
            },
            |d| nginx(d).name = "web".into(),
        ];
        for (i, edit) in edits.iter().enumerate() {
            let mut have = want.clone();
            edit(&mut have);
            assert!(needs_apply(&want, &observed(have)), "edit {i} went unnoticed");
        }
    }

    #[test]
    fn the_container_has_the_configured_image_resources_and_context() {
        let settings = Settings {
            image: "registry.example/nginx-unprivileged:1.29".into(),
            resources: crate::foo::settings::parse_json(r#"{"requests":{"cpu":"50m"}}"#).unwrap(),
            security_context: crate::foo::settings::parse_json(r#"{"runAsNonRoot":true}"#).unwrap(),
        };
        let d = desired(&foo(Some(1)), &settings);
        let container = &d.spec.unwrap().template.spec.unwrap().containers[0];
        assert_eq!(container.image.as_deref(), Some(settings.image.as_str()));
        assert_eq!(container.resources.as_ref(), Some(&settings.resources));
        assert_eq!(
            container.security_context.as_ref(),
            Some(&settings.security_context)
        );
        assert_eq!(d.metadata.labels.unwrap()[SETTINGS_LABEL], settings.digest());
    }

    /// kubernetes/sample-controller's template, field for field, when the settings are empty:
    /// taking over its Deployments then changes nothing that rolls them.
    #[test]
    fn empty_settings_give_the_tutorials_template() {
        let settings = Settings {
            resources: Default::default(),
            security_context: Default::default(),
            ..Settings::default()
        };
        let d = serde_json::to_value(desired(&foo(Some(1)), &settings)).unwrap();
        assert_eq!(
            d["spec"]["template"],
            json!({
                "metadata": { "labels": { "app": "nginx", "controller": "example-foo" } },
                "spec": { "containers": [{ "name": "nginx", "image": "nginx:latest" }] },
            })
        );
    }

    #[test]
    fn changed_settings_are_applied_to_existing_deployments() {
        let before = desired_default(&foo(Some(2)));
        let mut settings = Settings::default();
        settings.security_context.run_as_non_root = Some(true);
        assert!(needs_apply(
            &desired(&foo(Some(2)), &settings),
            &observed(before.clone())
        ));
        settings = Settings {
            image: "nginx:1.29".into(),
            ..Settings::default()
        };
        assert!(needs_apply(&desired(&foo(Some(2)), &settings), &observed(before)));
    }
}
