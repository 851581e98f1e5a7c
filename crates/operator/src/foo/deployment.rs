//! The Deployment a Foo wants, and whether an observed one matches it. Pure functions: no
//! client, so they are tested with plain fixtures.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use kube::ResourceExt;

use super::cached::{CachedDeployment, Labels};
use super::settings::{SETTINGS_LABEL, Settings};
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
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": foo.spec().deployment_name,
            "namespace": foo.namespace(),
            "labels": { MANAGED_BY_LABEL: MANAGED_BY, SETTINGS_LABEL: settings.digest() },
            "ownerReferences": [owner],
        },
        "spec": {
            "replicas": desired_replicas(foo),
            "selector": { "matchLabels": labels },
            "template": {
                "metadata": { "labels": labels },
                "spec": { "containers": [{
                    "name": "nginx",
                    "image": settings.image,
                    "resources": settings.resources,
                    "securityContext": settings.security_context,
                }] },
            },
        },
    }))
    .expect("a valid Deployment")
}

/// Whether `observed` differs from `desired` in any field the operator manages. Fields others
/// manage (an added annotation, another container) do not count: they are left alone. The
/// resources and security context count through the settings' digest label: a change of the
/// settings is seen, an edit of those fields by hand is not (see [`Settings::digest`]).
pub fn needs_apply(desired: &Deployment, observed: &CachedDeployment) -> bool {
    let contains_all = |have: &Labels, want: Option<&BTreeMap<String, String>>| {
        want.into_iter().flatten().all(|(k, v)| have.get(k) == Some(v))
    };
    let (Some(want), Some(have)) = (desired.spec.as_ref(), observed.spec.as_ref()) else {
        return true;
    };
    let want_image = want
        .template
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "nginx"))
        .and_then(|c| c.image.as_ref());
    let have_image = have
        .template
        .spec
        .containers
        .iter()
        .find(|c| c.name == "nginx")
        .and_then(|c| c.image.as_ref());
    let want_template_labels = want.template.metadata.as_ref().and_then(|m| m.labels.as_ref());
    let owner_missing = desired
        .owner_references()
        .iter()
        .any(|o| !observed.owner_references().contains(o));

    owner_missing
        || !contains_all(&observed.labels, desired.metadata.labels.as_ref())
        || want.replicas != have.replicas
        || want.selector != have.selector.to_label_selector()
        || !contains_all(&have.template.metadata.labels, want_template_labels)
        || want_image != have_image
}

#[cfg(test)]
mod tests {
    use super::*;
    use sample_operator_api::{ExampleFoo, Foo, FooSpec};

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
        assert!(!needs_apply(&want, &want.clone().into()));
    }

    #[test]
    fn fields_others_own_are_not_drift() {
        let want = desired_default(&foo(Some(2)));
        let mut have = want.clone();
        have.annotations_mut().insert("team".into(), "payments".into());
        have.labels_mut().insert("extra".into(), "yes".into());
        let pod = have.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
        pod.containers.push(k8s_openapi::api::core::v1::Container {
            name: "sidecar".into(),
            ..Default::default()
        });
        assert!(!needs_apply(&want, &have.into()));
    }

    #[test]
    fn managed_fields_changed_by_hand_are_drift() {
        let want = desired_default(&foo(Some(2)));
        let edits: [fn(&mut Deployment); 5] = [
            |d| d.spec.as_mut().unwrap().replicas = Some(5),
            |d| {
                d.spec
                    .as_mut()
                    .unwrap()
                    .template
                    .spec
                    .as_mut()
                    .unwrap()
                    .containers[0]
                    .image = Some("nginx:1.0".into())
            },
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
        ];
        for (i, edit) in edits.iter().enumerate() {
            let mut have = want.clone();
            edit(&mut have);
            assert!(needs_apply(&want, &have.into()), "edit {i} went unnoticed");
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

    #[test]
    fn changed_settings_are_applied_to_existing_deployments() {
        let before = desired_default(&foo(Some(2)));
        let mut settings = Settings::default();
        settings.security_context.run_as_non_root = Some(true);
        assert!(needs_apply(
            &desired(&foo(Some(2)), &settings),
            &before.clone().into()
        ));
        settings = Settings {
            image: "nginx:1.29".into(),
            ..Settings::default()
        };
        assert!(needs_apply(&desired(&foo(Some(2)), &settings), &before.into()));
    }
}
