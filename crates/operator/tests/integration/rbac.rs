//! The ClusterRole grants exactly what the controllers use, both ways. Every other test runs the
//! operator as its ServiceAccount, so a missing rule fails somewhere; here the requests of one
//! run through every path a rule exists for are recorded at the client, turned into the
//! (group, resource, verb) the apiserver authorizes, and compared with the ClusterRole's rules:
//! a rule no request needs fails too.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request};
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use local_cluster::testing::{self, TestNamespace};
use sample_operator::ControllerName;
use sample_operator::network::backend::multus::NetworkAttachmentDefinition;
use sample_operator::runtime::server::auth::Authorizer;
use sample_operator_api::{
    ClusterAddresses, ExampleFoo, Foo, MyCustomResource, MyCustomResourceSpec, Network,
};
use serde_json::json;
use tower::{Layer, Service};

use crate::deploy::{ROOT, documents};
use crate::foo::{new_foo, plain_deployment};
use crate::metrics::service_account_token;
use crate::support::{client_with_crds, config, network, operator_config};

const TIMEOUT: Duration = Duration::from_secs(60);

/// What the apiserver authorizes a request as: (API group, resource with its subresource, verb).
type Access = (String, String, String);

/// Records the method and URI of every request a client sends.
#[derive(Clone, Default)]
struct Recorder {
    seen: Arc<Mutex<Vec<(Method, http::Uri)>>>,
}

impl<S> Layer<S> for Recorder {
    type Service = Recorded<S>;

    fn layer(&self, inner: S) -> Recorded<S> {
        Recorded {
            inner,
            recorder: self.clone(),
        }
    }
}

#[derive(Clone)]
struct Recorded<S> {
    inner: S,
    recorder: Recorder,
}

impl<S, B> Service<Request<B>> for Recorded<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> S::Future {
        let seen = (request.method().clone(), request.uri().clone());
        self.recorder.seen.lock().unwrap().push(seen);
        self.inner.call(request)
    }
}

impl Recorder {
    fn client(&self, config: kube::Config) -> Client {
        kube::client::ClientBuilder::try_from(config)
            .unwrap()
            .with_layer(self)
            .build()
    }

    /// What the recorded requests were authorized as; discovery and other non-resource paths
    /// are left out (the ClusterRole grants none).
    fn accesses(&self) -> BTreeSet<Access> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter_map(|(method, uri)| access(method, uri))
            .collect()
    }
}

/// The group, resource and verb of a request, as the apiserver's request info reads them.
fn access(method: &Method, uri: &http::Uri) -> Option<Access> {
    let segments: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let (group, rest) = match segments.as_slice() {
        ["api", _version, rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (*group, rest),
        _ => return None,
    };
    let rest = match rest {
        ["namespaces", _namespace, resource, more @ ..] => [&[*resource][..], more].concat(),
        _ => rest.to_vec(),
    };
    let (resource, named) = match rest.as_slice() {
        [] => return None,
        [resource] => (resource.to_string(), false),
        [resource, _name] => (resource.to_string(), true),
        [resource, _name, subresource, ..] => (format!("{resource}/{subresource}"), true),
    };
    let watching = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    let verb = match (method.as_str(), named) {
        ("GET", true) => "get",
        ("GET", false) if watching => "watch",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => return None,
    };
    Some((group.to_owned(), resource, verb.to_owned()))
}

/// The operator's ClusterRole in deploy/operator/rbac.yaml (the chart's defaults), and the
/// ClusterRole and Roles of the cluster's addresses in rbac-cluster-addresses.yaml, expanded to
/// one access per group, resource and verb. (The leader election's Role is the Lease test's.)
fn granted() -> BTreeSet<Access> {
    let read =
        |file: &str| documents(&std::fs::read_to_string(format!("{ROOT}/deploy/operator/{file}")).unwrap());
    let main = read("rbac.yaml")
        .into_iter()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "sample-operator")
        .expect("the operator's ClusterRole");
    let cluster_addresses: Vec<serde_json::Value> = read("rbac-cluster-addresses.yaml")
        .into_iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
        .collect();
    assert_eq!(
        cluster_addresses.len(),
        2,
        "the cluster's addresses: a ClusterRole and a Role"
    );
    let mut granted = BTreeSet::new();
    for role in std::iter::once(main).chain(cluster_addresses) {
        granted.extend(accesses_of(&role));
    }
    granted
}

/// A role's rules, one access per group, resource and verb.
fn accesses_of(role: &serde_json::Value) -> BTreeSet<Access> {
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                for verb in strings(&rule["verbs"]) {
                    granted.insert((group.clone(), resource.clone(), verb));
                }
            }
        }
    }
    granted
}

#[test]
fn requests_are_read_as_the_apiserver_authorizes_them() {
    let read = |method: Method, uri: &str| access(&method, &uri.parse().unwrap());
    let access = |g: &str, r: &str, v: &str| Some((g.to_owned(), r.to_owned(), v.to_owned()));
    assert_eq!(
        read(
            Method::GET,
            "/api/v1/namespaces/a/pods?watch=true&resourceVersion=1"
        ),
        access("", "pods", "watch")
    );
    assert_eq!(
        read(Method::GET, "/api/v1/namespaces/kube-system"),
        access("", "namespaces", "get")
    );
    assert_eq!(
        read(Method::GET, "/apis/apps/v1/namespaces/a/deployments?limit=500"),
        access("apps", "deployments", "list")
    );
    assert_eq!(
        read(
            Method::PATCH,
            "/apis/samplecontroller.k8s.io/v1alpha1/namespaces/a/foos/x/status"
        ),
        access("samplecontroller.k8s.io", "foos/status", "patch")
    );
    assert_eq!(
        read(Method::POST, "/apis/authentication.k8s.io/v1/tokenreviews"),
        access("authentication.k8s.io", "tokenreviews", "create")
    );
    assert_eq!(read(Method::GET, "/version"), None);
    assert_eq!(read(Method::GET, "/apis/apps/v1"), None);
}

/// Every path a rule is there for, once: Foos of both groups created, scaled, moved to another
/// Deployment and blocked by a Deployment they do not own; Networks created, changed, deleted
/// and blocked by a definition they do not own; a MyCustomResource; Events; the reviews of a
/// scraper's token; the cluster's identity for Neutron.
#[tokio::test]
async fn the_cluster_role_grants_exactly_what_the_controllers_use() {
    let client = client_with_crds().await;
    crate::network::install_nad_crd(&client).await;
    let ns = TestNamespace::create(&client, "rbac-exact").await;
    let recorder = Recorder::default();
    let as_operator = recorder.client(operator_config(&client).await);

    // Someone else's Deployment and definition, which a Foo and a Network then name.
    ns.api::<Deployment>()
        .create(&PostParams::default(), &plain_deployment("taken"))
        .await
        .unwrap();
    ns.api::<NetworkAttachmentDefinition>()
        .create(
            &PostParams::default(),
            &crate::network::foreign_definition("taken"),
        )
        .await
        .unwrap();

    // An earlier run's parameters gone, so that this run's write creates them; on the local
    // cluster only: on an existing one they may be a real install's.
    let params: kube::Api<ClusterAddresses> = kube::Api::all(client.clone());
    if !testing::uses_existing_cluster() {
        let _ = params.delete("sample-operator", &DeleteParams::default()).await;
        testing::wait_for_deletion(&params, "sample-operator", TIMEOUT)
            .await
            .unwrap();
    }

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controllers = [
        ControllerName::Foo,
        ControllerName::FooExample,
        ControllerName::Network,
        ControllerName::MyCustomResource,
    ];
    // The Network controller also follows the cluster's addresses and keeps the admission
    // policy's parameters, in the object the manifests name.
    let mut run = config(Some(&ns.name), &controllers);
    run.network.cluster = sample_operator::network::cluster::Settings {
        enabled: true,
        service_cidrs: Vec::new(),
        admission_params: Some("sample-operator".into()),
    };
    let operator = tokio::spawn(sample_operator::run(as_operator.clone(), run, async move {
        let _ = stopped.await;
    }));

    let post = PostParams::default();
    let foos = ns.api::<Foo>();
    foos.create(&post, &new_foo("blocked", "taken", Some(1)))
        .await
        .unwrap();
    foos.create(&post, &new_foo("web", "web-1", Some(1)))
        .await
        .unwrap();
    ns.api::<ExampleFoo>()
        .create(&post, &new_foo("example", "example-1", Some(1)))
        .await
        .unwrap();
    let networks = ns.api::<Network>();
    networks
        .create(&post, &network("taken", "10.71.0.0/24", "10.71.0.1"))
        .await
        .unwrap();
    networks
        .create(&post, &network("lan", "10.72.0.0/24", "10.72.0.1"))
        .await
        .unwrap();
    ns.api::<MyCustomResource>()
        .create(
            &post,
            &MyCustomResource::new(
                "friend",
                MyCustomResourceSpec {
                    name: "nobody".into(),
                },
            ),
        )
        .await
        .unwrap();

    // The Deployment and the definition created, then changed, then the first moved and the
    // second deleted.
    let deployments = ns.api::<Deployment>();
    testing::wait_for(&deployments, "web-1", "created", TIMEOUT, |_| true)
        .await
        .unwrap();
    crate::foo::scale(&foos, "web", 2).await;
    testing::wait_for(&deployments, "web-1", "scaled", TIMEOUT, |d| {
        d.spec.as_ref().and_then(|s| s.replicas) == Some(2)
    })
    .await
    .unwrap();
    let nads = ns.api::<NetworkAttachmentDefinition>();
    testing::wait_for(&nads, "lan", "created", TIMEOUT, |_| true)
        .await
        .unwrap();
    let gateway = json!({ "spec": { "gateway": "10.72.0.254" } });
    networks
        .patch("lan", &PatchParams::default(), &Patch::Merge(&gateway))
        .await
        .unwrap();
    testing::wait_for(&nads, "lan", "with the new gateway", TIMEOUT, |n| {
        n.spec
            .config
            .as_deref()
            .is_some_and(|c| c.contains("10.72.0.254"))
    })
    .await
    .unwrap();
    let rename = json!({ "spec": { "deploymentName": "web-2" } });
    foos.patch("web", &PatchParams::default(), &Patch::Merge(&rename))
        .await
        .unwrap();
    testing::wait_for_deletion(&deployments, "web-1", TIMEOUT)
        .await
        .unwrap();
    networks.delete("lan", &DeleteParams::default()).await.unwrap();
    testing::wait_for_deletion(&networks, "lan", TIMEOUT)
        .await
        .unwrap();
    // Both refusals reported, which follows the read of what blocks them.
    for (blocked, reason) in [("blocked", "ErrResourceExists"), ("taken", "ResourceExists")] {
        crate::support::wait_for_event(&client, &ns.name, blocked, reason).await;
    }

    // The parameters written (by the manifests' name: a patch creates the object).
    testing::wait_for(&params, "sample-operator", "written", TIMEOUT, |p| {
        !p.spec.services.is_empty()
    })
    .await
    .unwrap();

    // What the binary does besides the controllers: review a scraper's token, and read the
    // cluster's identity for Neutron's tags.
    let token = service_account_token(&client, &ns.name, "scraper", false).await;
    let header = http::HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
    let refused = Authorizer::kubernetes(as_operator.clone(), None)
        .check([127, 0, 0, 1].into(), Some(&header))
        .await;
    assert!(refused.is_err(), "a scraper without the grant is refused");
    assert!(
        sample_operator::cli::default_cluster_id(&as_operator)
            .await
            .is_some(),
        "the kube-system namespace's UID"
    );

    let _ = stop.send(());
    tokio::time::timeout(TIMEOUT, operator).await.unwrap().unwrap();
    let mut used = recorder.accesses();
    // The parameters did not exist: the operator's apply created them, which the apiserver
    // authorizes as a create (by name) besides the patch the client sent.
    let params_access = |verb: &str| {
        (
            "samplecrd.k8s.io".to_owned(),
            "clusteraddresses".to_owned(),
            verb.to_owned(),
        )
    };
    assert!(used.contains(&params_access("patch")));
    used.insert(params_access("create"));
    let granted = granted();
    let unused: Vec<&Access> = granted.difference(&used).collect();
    let ungranted: Vec<&Access> = used.difference(&granted).collect();
    assert!(
        unused.is_empty() && ungranted.is_empty(),
        "the ClusterRole grants what no request needed: {unused:?}\nrequests it does not grant: {ungranted:?}"
    );
}
