//! `/metrics` served securely by the operator binary (`--metrics-secure`): over HTTPS, to
//! bearers of a token that the real API server accepts and allows `get` on `/metrics`, with the
//! operator acting as its ServiceAccount (so deploy/operator/rbac.yaml must let it review
//! tokens); and the probes, on their own port, answered at once while the metrics port is full.

use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use local_cluster::testing::{self, TestNamespace};

use crate::support::{
    OperatorProcess, client_with_crds, http_get, metric_sum, operator_kubeconfig, scratch_dir,
};

/// The ClusterRole of deploy/operator/metrics-reader.yaml.
pub(crate) const METRICS_READER: &str = "sample-operator-metrics-reader";

/// Installs the metrics-reader ClusterRole of the plain manifests.
pub(crate) async fn install_metrics_reader(client: &Client) {
    testing::apply_manifest(
        client,
        include_str!("../../../../deploy/operator/metrics-reader.yaml"),
    )
    .await
    .expect("the metrics-reader ClusterRole applies");
}

/// A ServiceAccount `name` in `namespace` and a token of it from the TokenRequest API; when
/// `reader`, bound to the metrics-reader ClusterRole by a ClusterRoleBinding of the same name
/// as the namespace, to delete with [`unbind`].
pub(crate) async fn service_account_token(
    client: &Client,
    namespace: &str,
    name: &str,
    reader: bool,
) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let account: ServiceAccount = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
    }))
    .unwrap();
    accounts.create(&PostParams::default(), &account).await.unwrap();
    if reader {
        let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": METRICS_READER},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }))
        .unwrap();
        Api::<ClusterRoleBinding>::all(client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
    }
    token_for(client, namespace, name, None).await
}

/// A token of the ServiceAccount `namespace/name` from the TokenRequest API, issued for
/// `audience` (`None`: the API server's own).
async fn token_for(client: &Client, namespace: &str, name: &str, audience: Option<&str>) -> String {
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            audiences: audience.map(|a| vec![a.to_owned()]),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .expect("a token from the TokenRequest API")
        .status
        .and_then(|s| s.token)
        .expect("the token")
}

/// Deletes the ClusterRoleBinding of [`service_account_token`].
pub(crate) async fn unbind(client: &Client, namespace: &str) {
    let _ = Api::<ClusterRoleBinding>::all(client.clone())
        .delete(namespace, &DeleteParams::default())
        .await;
}

/// `GET /metrics` over HTTPS on loopback `port`, with `token` as bearer, not verifying the
/// self-signed certificate (as the chart's ServiceMonitor does without a certificate Secret):
/// the status and body.
async fn get_metrics(port: u16, token: Option<&str>) -> (u16, String) {
    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse().unwrap());
    config.accept_invalid_certs = true;
    let client = Client::try_from(config).unwrap();
    let mut request = http::Request::get("/metrics");
    if let Some(token) = token {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
    }
    let response = client
        .send(request.body(kube::client::Body::empty()).unwrap())
        .await
        .expect("an answer over HTTPS");
    let status = response.status().as_u16();
    let body = response.into_body().collect_bytes().await.unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The operator binary serving `/metrics` securely for the Foos of `ns`, acting as its
/// ServiceAccount, with `extra` arguments; ready. Returns it and its scratch folder, removed
/// when dropped after a pass.
async fn secure_operator(
    client: &Client,
    ns: &TestNamespace,
    label: &str,
    extra: &[&str],
) -> (OperatorProcess, crate::support::operator::ScratchDir) {
    let dir = scratch_dir(&ns.name);
    let kubeconfig = operator_kubeconfig(client, &dir).await;
    install_metrics_reader(client).await;
    let kubeconfig_arg = format!("--kubeconfig={}", kubeconfig.display());
    let namespace_arg = format!("--namespace={}", ns.name);
    let mut args = vec![
        kubeconfig_arg.as_str(),
        namespace_arg.as_str(),
        "--controllers=foo",
        "--metrics-secure",
    ];
    args.extend_from_slice(extra);
    let operator = OperatorProcess::spawn(label, &dir, &args);
    operator.wait_ready().await;
    (operator, dir)
}

#[tokio::test]
async fn secure_metrics_answer_only_tokens_allowed_to_read_them_and_probes_stay_apart() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "metrics-auth").await;
    let (operator, _dir) = secure_operator(&client, &ns, "secure", &[]).await;

    let stranger = service_account_token(&client, &ns.name, "stranger", false).await;
    let reader = service_account_token(&client, &ns.name, "prometheus", true).await;

    let (status, body) = get_metrics(operator.port, None).await;
    assert_eq!(status, 401, "no token: {body}");
    let (status, body) = get_metrics(operator.port, Some("not-a-token")).await;
    assert_eq!(status, 401, "a forged token: {body}");
    let (status, body) = get_metrics(operator.port, Some(&stranger)).await;
    assert_eq!(status, 403, "a ServiceAccount without the binding: {body}");
    // RBAC takes a moment to reach the authorizer's cache after the binding is created.
    let mut answer = (0, String::new());
    testing::poll(Duration::from_secs(30), async || {
        answer = get_metrics(operator.port, Some(&reader)).await;
        (answer.0 == 200).then_some(())
    })
    .await;
    let (status, body) = answer;
    assert_eq!(status, 200, "a metrics reader: {body}");
    assert!(
        body.contains("controller_runtime_reconcile_total") && body.ends_with("# EOF\n"),
        "{body}"
    );
    // The reviews went through the operator's own client, counted like its other requests.
    let reviews = metric_sum(
        &body,
        "rest_client_requests_total",
        &[("method", "POST"), ("code", "201")],
    );
    assert!(reviews >= 2.0, "TokenReviews and SubjectAccessReviews: {reviews}");
    // Plain HTTP gets no metrics.
    assert!(
        http_get(operator.port, "/metrics").is_none_or(|(_, body)| !body.contains("# EOF")),
        "metrics over plain HTTP"
    );

    // The metrics port full of connections that never even start their handshake, from
    // enough addresses that their share per address does not stop them: the probes, on their
    // own port, are answered at once.
    let mut idle = Vec::new();
    for i in 0..300 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(std::net::SocketAddr::from(([127, 0, 2, (i / 16) as u8], 0)))
            .unwrap();
        idle.push(
            socket
                .connect(std::net::SocketAddr::from(([127, 0, 0, 1], operator.port)))
                .await
                .unwrap(),
        );
    }
    for path in ["/healthz", "/readyz"] {
        let asked = Instant::now();
        let answer = http_get(operator.probe_port, path);
        assert_eq!(answer.map(|a| a.0), Some(200), "{path}");
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "{path} took {:?}",
            asked.elapsed()
        );
    }
    drop(idle);

    unbind(&client, &ns.name).await;
    drop(operator);
}

#[tokio::test]
async fn with_an_audience_only_tokens_issued_for_it_read_the_metrics() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "metrics-audience").await;
    let (operator, _dir) = secure_operator(
        &client,
        &ns,
        "audience",
        &["--metrics-token-audience=sample-operator-metrics"],
    )
    .await;

    // One reader, three tokens: for the API server (what a Pod mounts by default), for
    // another service, and for the operator's metrics.
    let for_the_api_server = service_account_token(&client, &ns.name, "prometheus", true).await;
    let for_another = token_for(&client, &ns.name, "prometheus", Some("vault")).await;
    let for_us = token_for(&client, &ns.name, "prometheus", Some("sample-operator-metrics")).await;
    let mut answer = (0, String::new());
    testing::poll(Duration::from_secs(30), async || {
        answer = get_metrics(operator.port, Some(&for_us)).await;
        (answer.0 == 200).then_some(())
    })
    .await;
    assert_eq!(answer.0, 200, "a token for the metrics' audience: {}", answer.1);
    for (token, what) in [
        (&for_the_api_server, "the API server"),
        (&for_another, "another service"),
    ] {
        let (status, body) = get_metrics(operator.port, Some(token)).await;
        assert_eq!(status, 401, "a token for {what}: {body}");
    }

    unbind(&client, &ns.name).await;
    drop(operator);
}
