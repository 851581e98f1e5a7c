//! The Foo reconcile over a scripted API server ([`crate::runtime::scenario`]): what it writes,
//! and what it leaves alone, decided without a cluster.

use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Resource;
use kube::runtime::controller::Action;
use kube::runtime::watcher::Event;
use sample_operator_api::{Foo, FooSpec};
use serde_json::{Value, json};

use super::cached::CachedDeployment;
use super::table::{DeploymentTable, Row};
use super::{Error, FooReconciler, Settings, deployment, status};
use crate::runtime::scenario::{ApiServer, Sent, event_reasons, status as failure, with_status};
use crate::runtime::{ReconcileError, Reconciler};

const NAMESPACE: &str = "team";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/team/deployments";
const STATUS: &str = "/apis/samplecontroller.k8s.io/v1alpha1/namespaces/team/foos/web/status";

/// The Foo `web`, as the apiserver sends it: named, with a uid and a generation.
fn foo(deployment_name: &str, replicas: i32) -> Foo {
    let mut foo = Foo::new(
        "web",
        FooSpec {
            deployment_name: deployment_name.into(),
            replicas: Some(replicas),
        },
    );
    let meta = foo.meta_mut();
    meta.namespace = Some(NAMESPACE.into());
    meta.uid = Some("foo-uid".into());
    meta.resource_version = Some("10".into());
    meta.generation = Some(1);
    foo
}

fn reconciler(table: &DeploymentTable) -> FooReconciler<Foo> {
    FooReconciler {
        deployments: table.clone(),
        settings: Arc::new(Settings::default()),
        kind: PhantomData,
    }
}

/// What the apiserver makes of a created object: `sent`, with a uid and a version.
fn created(sent: &Value, uid: &str) -> Value {
    let mut object = sent.clone();
    object["metadata"]["uid"] = uid.into();
    object["metadata"]["resourceVersion"] = "1".into();
    object
}

/// The Foo as its status write left it, as the next event would bring it.
fn after_status_write(foo: &Foo, sent: &[Sent]) -> Foo {
    let write = sent
        .iter()
        .find(|s| s.is("PATCH", STATUS))
        .expect("a status write");
    serde_json::from_value(with_status(foo, &write.body)).unwrap()
}

/// Answers a server-side apply of the Foo's status with the Foo it makes.
fn status_write(foo: &Foo, sent: &Sent) -> Option<(u16, Value)> {
    sent.is("PATCH", STATUS)
        .then(|| (200, with_status(foo, &sent.body)))
}

fn writes(sent: &[Sent]) -> Vec<String> {
    sent.iter()
        .filter(|s| s.is_write() && s.event_reason().is_none())
        .map(|s| format!("{} {}", s.method, s.path.split('?').next().unwrap_or_default()))
        .collect()
}

/// One reconcile of `foo` over `api`: its result, and every request it sent (its Events too).
async fn reconcile(
    api: &ApiServer,
    table: &DeploymentTable,
    foo: &Foo,
) -> (Result<Action, Error>, Vec<Sent>) {
    let (ctx, events) = api.context::<Foo>();
    let result = reconciler(table).reconcile(Arc::new(foo.clone()), &ctx).await;
    (result, api.finish(ctx, events).await)
}

#[tokio::test]
async fn a_new_foo_gets_its_deployment_a_status_and_one_event_then_nothing_more() {
    let foo = foo("web", 2);
    let table = DeploymentTable::default();
    let answering = foo.clone();
    let api = ApiServer::new(move |sent| {
        if sent.is("POST", DEPLOYMENTS) {
            return Some((201, created(&sent.body, "deployment-uid")));
        }
        status_write(&answering, sent)
    });

    let (result, sent) = reconcile(&api, &table, &foo).await;
    let action = result.unwrap();
    assert_eq!(action, Action::await_change());
    assert_eq!(
        writes(&sent),
        [format!("POST {DEPLOYMENTS}"), format!("PATCH {STATUS}")]
    );
    assert_eq!(event_reasons(&sent), ["Synced"]);
    let created = &sent[0].body;
    assert_eq!(created["metadata"]["name"], "web");
    assert_eq!(created["spec"]["replicas"], 2);
    assert_eq!(created["metadata"]["ownerReferences"][0]["uid"], "foo-uid");
    assert_eq!(created["metadata"]["ownerReferences"][0]["controller"], true);

    // The watch brings the Deployment and the Foo with its status: nothing to write or say,
    // and the Deployment's event, the object the create answered with, does not even ask.
    let deployment: Deployment = serde_json::from_value(json!(created_from(&sent))).unwrap();
    assert!(
        !table.apply(&Event::Apply(CachedDeployment::from(deployment.clone()))),
        "the create's own event triggers no reconcile"
    );
    let settled = after_status_write(&foo, &sent);
    let (result, sent) = reconcile(&api, &table, &settled).await;
    result.unwrap();
    assert!(sent.is_empty(), "a converged Foo sends nothing: {sent:#?}");

    // Its next version, with a replica available, does.
    let mut available = deployment;
    available.metadata.resource_version = Some("2".into());
    available.status = Some(k8s_openapi::api::apps::v1::DeploymentStatus {
        available_replicas: Some(1),
        ..Default::default()
    });
    assert!(table.apply(&Event::Apply(CachedDeployment::from(available))));
}

/// The Deployment the scenario's create made, as the apiserver would send it.
fn created_from(sent: &[Sent]) -> Value {
    let create = sent.iter().find(|s| s.is("POST", DEPLOYMENTS)).unwrap();
    created(&create.body, "deployment-uid")
}

/// `someone-elses`, a Deployment of another owner, as the apiserver sends it.
fn foreign_deployment() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "someone-elses", "namespace": NAMESPACE, "uid": "foreign-uid", "resourceVersion": "5" },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "theirs" } },
                  "template": { "metadata": { "labels": { "app": "theirs" } },
                                "spec": { "containers": [{ "name": "app", "image": "theirs:1" }] } } },
    })
}

/// The apiserver's refusal of a create of `someone-elses`, which exists.
fn already_exists() -> (u16, Value) {
    let message = "deployments.apps \"someone-elses\" already exists";
    (409, failure(409, "AlreadyExists", message))
}

#[tokio::test]
async fn a_deployment_the_foo_does_not_own_is_reported_once_and_never_written() {
    let foo = foo("someone-elses", 1);
    let foreign = foreign_deployment();
    let table = DeploymentTable::default();
    let answering = foo.clone();
    let api = ApiServer::new(move |sent| {
        if sent.is("POST", DEPLOYMENTS) {
            return Some(already_exists());
        }
        if sent.is("GET", &format!("{DEPLOYMENTS}/someone-elses")) {
            return Some((200, foreign.clone()));
        }
        status_write(&answering, sent)
    });

    let (result, sent) = reconcile(&api, &table, &foo).await;
    let error = result.unwrap_err();
    assert!(
        matches!(error, Error::ResourceExists(ref name) if name == "someone-elses"),
        "{error}"
    );
    assert!(!error.is_terminal(), "retried: the Deployment may go");
    assert_eq!(
        writes(&sent),
        [format!("POST {DEPLOYMENTS}"), format!("PATCH {STATUS}")]
    );
    assert_eq!(event_reasons(&sent), ["ErrResourceExists"]);
    let condition = &sent[2].body["status"]["conditions"][0];
    assert_eq!(condition["reason"], status::reason::RESOURCE_EXISTS);
    assert_eq!(condition["status"], "False");

    // Retried while it is still in the way: the create is refused again, and the status and
    // the Warning stand as they are.
    let reported = after_status_write(&foo, &sent);
    let (result, sent) = reconcile(&api, &table, &reported).await;
    let error = result.unwrap_err();
    assert!(matches!(error, Error::ResourceExists(_)), "{error}");
    assert_eq!(writes(&sent), [format!("POST {DEPLOYMENTS}")], "no new status");
    assert!(event_reasons(&sent).is_empty(), "no new event: {sent:#?}");
}

#[tokio::test]
async fn an_invalid_spec_is_reported_once_and_waits_for_a_change() {
    let foo = foo("web", 11);
    let table = DeploymentTable::default();
    let answering = foo.clone();
    let api = ApiServer::new(move |sent| status_write(&answering, sent));

    let (result, sent) = reconcile(&api, &table, &foo).await;
    let error = result.unwrap_err();
    assert!(error.is_terminal(), "{error}");
    assert_eq!(
        writes(&sent),
        [format!("PATCH {STATUS}")],
        "no Deployment for an invalid spec"
    );
    assert_eq!(event_reasons(&sent), ["InvalidSpec"]);
    let condition = &sent[0].body["status"]["conditions"][0];
    assert_eq!(condition["reason"], status::reason::INVALID_SPEC);
    assert!(
        condition["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("spec.replicas:")),
        "{condition}"
    );

    let reported = after_status_write(&foo, &sent);
    let (result, sent) = reconcile(&api, &table, &reported).await;
    let error = result.unwrap_err();
    assert!(error.is_terminal());
    assert!(sent.is_empty(), "reported already: {sent:#?}");
}

#[tokio::test]
async fn a_renamed_deployment_is_removed_exactly_and_a_foreign_one_is_left() {
    // The Foo asks for `web`; it also controls `old`, its name before. `other` is another
    // Foo's, in the same namespace.
    let foo = foo("web", 1);
    let table = DeploymentTable::default();
    let owned = |name: &str, uid: &str, owner: &str| {
        let mut deployment = deployment::desired(&foo, &Settings::default());
        deployment.metadata.name = Some(name.into());
        deployment.metadata.uid = Some(uid.into());
        deployment.metadata.resource_version = Some("3".into());
        deployment.metadata.owner_references.as_mut().unwrap()[0].uid = owner.into();
        deployment
    };
    for deployment in [
        owned("web", "web-uid", "foo-uid"),
        owned("old", "old-uid", "foo-uid"),
        owned("other", "other-uid", "another-foo-uid"),
    ] {
        table.apply(&Event::Apply(CachedDeployment::from(deployment)));
    }
    let row: Row = table.get(NAMESPACE, "web").unwrap();
    let mut foo = foo.clone();
    foo.status = Some(status::desired(&foo, status::Observed::Deployment(&row)));
    let api = ApiServer::new(|sent| {
        sent.is("DELETE", &format!("{DEPLOYMENTS}/old")).then(|| {
            (
                200,
                json!({ "kind": "Status", "apiVersion": "v1", "status": "Success" }),
            )
        })
    });

    let (result, sent) = reconcile(&api, &table, &foo).await;
    result.unwrap();
    assert_eq!(writes(&sent), [format!("DELETE {DEPLOYMENTS}/old")]);
    let delete = &sent[0].body;
    assert_eq!(
        delete["preconditions"]["uid"], "old-uid",
        "exactly the one it controls"
    );
    assert_eq!(event_reasons(&sent), ["Synced"]);
}

/// The runtime's retries of a Foo whose Deployment name another owner holds, on tokio's paused
/// clock: reported once, then retried ever more rarely (the default backoff, from 250 ms
/// doubling), each retry one refused create and nothing else; once the other Deployment is gone
/// (at 20 s here, with no watch to say so), the first retry after that takes the name. On the
/// cluster, the watch takes it at once instead (`foo::a_conflict_backs_off_and_ends_as_soon_as_
/// the_foreign_deployment_goes`).
#[tokio::test(start_paused = true)]
async fn a_conflict_is_retried_ever_more_rarely_with_one_create_each_and_reported_once() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    let foo = foo("someone-elses", 1);
    let foreign = foreign_deployment();
    let blocked = Arc::new(AtomicBool::new(true));
    let answering = (foo.clone(), blocked.clone());
    let api = ApiServer::new(move |sent| {
        let (foo, blocked) = &answering;
        if sent.is("POST", DEPLOYMENTS) {
            if !blocked.load(Ordering::SeqCst) {
                return Some((201, created(&sent.body, "deployment-uid")));
            }
            return Some(already_exists());
        }
        if sent.is("GET", &format!("{DEPLOYMENTS}/someone-elses")) {
            return blocked.load(Ordering::SeqCst).then(|| (200, foreign.clone()));
        }
        status_write(foo, sent)
    });
    let gone_at = Duration::from_secs(20);

    let (retries, events) = crate::runtime::controller::retries(
        &api,
        reconciler(&DeploymentTable::default()),
        foo,
        Duration::from_secs(60),
        |at| blocked.store(at < gone_at, Ordering::SeqCst),
    )
    .await;

    let times: Vec<u128> = retries.iter().map(|r| r.at.as_millis()).collect();
    assert_eq!(
        times,
        [0, 250, 750, 1_750, 3_750, 7_750, 15_750, 31_750],
        "from 250 ms, doubling"
    );
    let (first, rest) = retries.split_first().unwrap();
    assert_eq!(
        writes(&first.sent),
        [format!("POST {DEPLOYMENTS}"), format!("PATCH {STATUS}")],
        "the first conflict is reported"
    );
    let (blocked_retries, after) = rest.split_at(rest.len() - 1);
    for retry in blocked_retries {
        assert_eq!(
            writes(&retry.sent),
            [format!("POST {DEPLOYMENTS}")],
            "a retry at {:?} only tries the create again",
            retry.at
        );
        assert!(!retry.succeeded);
    }
    // The cluster test's bound: blocked for 16 s, at most two writes in the next 4 s.
    let late: usize = retries
        .iter()
        .filter(|r| (16_000..20_000).contains(&r.at.as_millis()))
        .map(|r| writes(&r.sent).len())
        .sum();
    assert!(late <= 2, "{late} writes between 16 and 20 s");
    let taken = &after[0];
    assert!(taken.at >= gone_at && taken.succeeded, "taken at {:?}", taken.at);
    assert_eq!(
        writes(&taken.sent),
        [format!("POST {DEPLOYMENTS}"), format!("PATCH {STATUS}")]
    );
    assert_eq!(
        events,
        ["ErrResourceExists", "Synced"],
        "one Event per transition"
    );
}
