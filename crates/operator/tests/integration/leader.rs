//! Leader gating when the holder's renewals fail: the holder stops writing before its lease
//! expires, so the standby that takes over never writes beside it.

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use local_cluster::testing::{self, TestNamespace};
use sample_operator::ControllerName;
use sample_operator::runtime::leader::{self, LeaseConfig, Outcome};
use sample_operator::runtime::{Telemetry, requests::RequestCounter};
use sample_operator_api::Foo;

use crate::foo::{new_foo, scale, wait_available};
use crate::support::{client_with_crds, config, operator_config};

pub(crate) const LEASE: &str = "renewal-test";

/// The writes a client sent (method, path, when), Lease renewals included.
#[derive(Clone, Default)]
pub(crate) struct WriteLog(Arc<Mutex<Vec<(String, String, SystemTime)>>>);

impl WriteLog {
    /// Writes to anything but Leases: what the controllers sent.
    pub(crate) fn controller_writes(&self) -> Vec<(String, String, SystemTime)> {
        let log = self.0.lock().unwrap();
        log.iter()
            .filter(|(_, path, _)| !path.contains("/leases"))
            .cloned()
            .collect()
    }
}

impl<S> tower::Layer<S> for WriteLog {
    type Service = Logged<S>;
    fn layer(&self, inner: S) -> Logged<S> {
        Logged {
            inner,
            log: self.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Logged<S> {
    inner: S,
    log: WriteLog,
}

impl<S, B> tower::Service<http::Request<B>> for Logged<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.method() != http::Method::GET {
            self.log.0.lock().unwrap().push((
                request.method().to_string(),
                request.uri().path().to_owned(),
                SystemTime::now(),
            ));
        }
        self.inner.call(request)
    }
}

/// The group whose RoleBinding lets a replica use Leases in `namespace`.
fn replica_group(namespace: &str, replica: &str) -> String {
    format!("sample-operator-test:{namespace}:{replica}")
}

/// A client acting as the operator's ServiceAccount and as a member of its replica's group.
pub(crate) async fn replica_client(
    admin: &Client,
    namespace: &str,
    replica: &str,
    log: Option<&WriteLog>,
) -> Client {
    let mut config = operator_config(admin).await;
    config
        .auth_info
        .impersonate_groups
        .get_or_insert_with(Vec::new)
        .push(replica_group(namespace, replica));
    match log {
        Some(log) => kube::client::ClientBuilder::try_from(config)
            .unwrap()
            .with_layer(log)
            .build(),
        None => RequestCounter::default().client(config).unwrap(),
    }
}

/// Lets each replica's group use Leases in `namespace`, with one RoleBinding per replica.
pub(crate) async fn grant_leases(admin: &Client, namespace: &str, replicas: &[&str]) {
    let mut manifest = String::from(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: leases\nrules:\n  - apiGroups: [coordination.k8s.io]\n    resources: [leases]\n    verbs: [get, list, watch, create, patch, update]\n",
    );
    for replica in replicas {
        manifest.push_str(&format!(
            "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: leases-{replica}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: leases\nsubjects:\n  - apiGroup: rbac.authorization.k8s.io\n    kind: Group\n    name: {group}\n",
            group = replica_group(namespace, replica)
        ));
    }
    testing::create_manifest(admin, namespace, &manifest)
        .await
        .expect("lease RBAC");
}

/// Starts a leader-elected run of the Foo controller as `replica`.
fn start_replica(
    client: Client,
    namespace: &str,
    replica: &str,
    lease: LeaseConfig,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<Outcome, leader::Error>>,
) {
    start_elected(
        client,
        config(Some(namespace), &[ControllerName::Foo]),
        replica,
        lease,
    )
}

/// Starts a leader-elected run of `config` as `replica`.
pub(crate) fn start_elected(
    client: Client,
    mut config: sample_operator::RunConfig,
    replica: &str,
    lease: LeaseConfig,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<Outcome, leader::Error>>,
) {
    config.runtime.instance = replica.to_owned();
    let telemetry = Telemetry::new(RequestCounter::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn({
        let (client, telemetry, replica) = (client.clone(), telemetry.clone(), replica.to_owned());
        async move {
            leader::run_elected(
                client.clone(),
                &replica,
                telemetry.clone(),
                lease,
                Duration::from_secs(5),
                async move {
                    let _ = stopped.await;
                },
                move |stopped| sample_operator::run_with(client, config, telemetry, stopped),
            )
            .await
        }
    });
    (stop, task)
}

/// Revokes replica a's Lease RBAC and waits until replica b holds the Lease. Returns a's last
/// renewal seen and when b acquired the Lease.
pub(crate) async fn depose_a(admin: &Client, namespace: &str, a_identity: &str) -> (SystemTime, SystemTime) {
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), namespace);
    bindings
        .delete("leases-a", &DeleteParams::default())
        .await
        .unwrap();
    let leases: Api<Lease> = Api::namespaced(admin.clone(), namespace);
    let mut a_last_renewal = SystemTime::UNIX_EPOCH;
    let started = std::time::Instant::now();
    loop {
        match holder(&leases).await {
            Some((identity, acquired, _)) if identity.starts_with("b_") => {
                return (a_last_renewal, acquired);
            }
            Some((identity, _, renewed)) if identity == a_identity => a_last_renewal = renewed,
            _ => {}
        }
        assert!(started.elapsed() < Duration::from_secs(60), "b did not take over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The Lease of a test that deposes its holder, lasting as long as by default: with a shorter
/// grace, renewals that land late on a busy machine let it expire before the test deposes a.
pub(crate) fn deposable_lease(namespace: &str) -> LeaseConfig {
    LeaseConfig {
        name: LEASE.into(),
        namespace: namespace.to_owned(),
        duration: Duration::from_secs(15),
        grace: Duration::from_secs(5),
    }
}

/// How a replica's run ended, within 30 seconds.
pub(crate) async fn outcome_of(run: tokio::task::JoinHandle<Result<Outcome, leader::Error>>) -> Outcome {
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the replica stops")
        .unwrap()
        .unwrap()
}

/// The Lease's holder, and when it was acquired and last renewed.
pub(crate) async fn holder(leases: &Api<Lease>) -> Option<(String, SystemTime, SystemTime)> {
    let spec = leases.get_opt(LEASE).await.ok()??.spec?;
    Some((
        spec.holder_identity?,
        SystemTime::from(spec.acquire_time?.0),
        SystemTime::from(spec.renew_time?.0),
    ))
}

#[tokio::test]
async fn a_holder_that_cannot_renew_stops_writing_before_the_standby_takes_over() {
    let admin = client_with_crds().await;
    let ns = TestNamespace::create(&admin, "leader-renewal").await;
    grant_leases(&admin, &ns.name, &["a", "b"]).await;
    let lease = deposable_lease(&ns.name);
    let foos = ns.api::<Foo>();
    for i in 0..3 {
        foos.create(
            &PostParams::default(),
            &new_foo::<Foo>(&format!("churn-{i}"), &format!("churn-{i}"), Some(1)),
        )
        .await
        .unwrap();
    }

    // Replica a leads; b stands by.
    let a_writes = WriteLog::default();
    let a_client = replica_client(&admin, &ns.name, "a", Some(&a_writes)).await;
    let (_stop_a, a) = start_replica(a_client, &ns.name, "a", lease.clone());
    for i in 0..3 {
        wait_available(&foos, &format!("churn-{i}"), 1).await;
    }
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns.name);
    let (a_identity, _, _) = holder(&leases).await.expect("a holds the lease");
    assert!(a_identity.starts_with("a_"), "{a_identity}");
    let b_client = replica_client(&admin, &ns.name, "b", None).await;
    let (stop_b, b) = start_replica(b_client, &ns.name, "b", lease.clone());

    // Work keeps coming, so a leader that went on reconciling would go on writing.
    let churn = tokio::spawn({
        let foos = foos.clone();
        async move {
            for round in 0.. {
                let replicas = 1 + (round / 3) % 3;
                let _ = scale(&foos, &format!("churn-{}", round % 3), replicas).await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !a_writes.controller_writes().is_empty(),
        "a did not even write as the leader"
    );

    let (a_last_renewal, b_acquired) = depose_a(&admin, &ns.name, &a_identity).await;
    // Give a late writer time to show itself while the work goes on.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let a_expired = a_last_renewal + lease.duration;
    let late: Vec<_> = a_writes
        .controller_writes()
        .into_iter()
        .filter(|(_, _, at)| *at >= b_acquired || *at >= a_expired)
        .collect();
    assert!(
        late.is_empty(),
        "the old holder wrote after its lease expired or the standby took over: {late:?}"
    );

    assert_eq!(outcome_of(a).await, Outcome::RenewalsFailed);

    // The standby now does the work.
    churn.abort();
    let _ = churn.await;
    let last = foos.get("churn-0").await.unwrap();
    let want = last.spec.replicas.unwrap_or(1);
    wait_available(&foos, last.name_any().as_str(), want).await;
    let _ = stop_b.send(());
    assert_eq!(outcome_of(b).await, Outcome::Stopped);
}

/// kube-lease-manager claims a free Lease with a server-side apply and counts on the apiserver's
/// field-manager conflict to let one claimant win. Two replicas that started together once both
/// led (in CI) while they shared one field manager: here b's claim, made the way its lease
/// manager makes it, must be refused while a holds the Lease.
#[tokio::test]
async fn a_replicas_claim_on_a_lease_another_holds_is_refused() {
    let admin = client_with_crds().await;
    let ns = TestNamespace::create(&admin, "leader-claim").await;
    grant_leases(&admin, &ns.name, &["a", "b"]).await;
    let lease = LeaseConfig {
        name: LEASE.into(),
        namespace: ns.name.clone(),
        duration: Duration::from_secs(30),
        grace: Duration::from_secs(5),
    };
    let a_client = replica_client(&admin, &ns.name, "a", None).await;
    let (stop_a, a) = start_replica(a_client, &ns.name, "a", lease.clone());
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns.name);
    let a_identity = testing::eventually("a takes the lease", Duration::from_secs(30), async || {
        holder(&leases).await.map(|(identity, _, _)| identity)
    })
    .await;

    let b_identity = leader::identity("b");
    let b_leases: Api<Lease> = Api::namespaced(replica_client(&admin, &ns.name, "b", None).await, &ns.name);
    let claim = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "spec": {
            "holderIdentity": b_identity,
            "leaseDurationSeconds": 30,
        },
    });
    let params = PatchParams {
        field_manager: Some(leader::lease_field_manager(&b_identity)),
        ..Default::default()
    };
    match b_leases.patch(LEASE, &params, &Patch::Apply(&claim)).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 409, "{e:?}"),
        other => panic!("b's claim was not refused as a conflict: {other:?}"),
    }
    assert_eq!(holder(&leases).await.map(|h| h.0), Some(a_identity));

    let _ = stop_a.send(());
    assert_eq!(outcome_of(a).await, Outcome::Stopped);
}
