//! The local control plane does what the controllers rely on: scheduling, Pods that run, and
//! Deployments that become available.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::PostParams;
use local_cluster::testing::{self, TestNamespace};
use serde_json::json;

use crate::support::ClusterOfItsOwn;

#[tokio::test]
async fn a_deployment_of_three_replicas_becomes_available() {
    let client = testing::client().await;
    let ns = TestNamespace::create(&client, "deployment").await;
    let deployments = ns.api::<Deployment>();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 3,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "nginx", "image": "nginx:latest" }] },
            },
        },
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    // controller-manager creates the ReplicaSet and Pods, the scheduler binds them to the fake
    // nodes and kwok reports them Running and Ready.
    testing::wait_for(
        &deployments,
        "web",
        "3 available replicas",
        Duration::from_secs(60),
        |d| d.status.as_ref().and_then(|s| s.available_replicas) == Some(3),
    )
    .await
    .unwrap();
}

/// The local cluster's access is its owner's: the kubeconfigs and private keys are 0600, so
/// another local user can neither read the keys nor edit what they point at.
#[tokio::test]
async fn the_local_clusters_kubeconfigs_and_keys_are_private() {
    use std::os::unix::fs::PermissionsExt;

    if testing::uses_existing_cluster() {
        testing::skipped(
            "cluster::the_local_clusters_kubeconfigs_and_keys_are_private",
            "an existing cluster's files are not this project's",
        );
        return;
    }
    testing::client().await;
    let cluster = local_cluster::LocalCluster::default();
    let mut private = Vec::new();
    for folder in [cluster.dir().to_owned(), cluster.dir().join("pki")] {
        for entry in std::fs::read_dir(folder).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".key") || name.ends_with("kubeconfig") {
                private.push(path);
            }
        }
    }
    assert!(private.contains(&cluster.kubeconfig()), "{private:?}");
    assert!(private.len() > 6, "{private:?}");
    for path in private {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", path.display());
    }
}

/// Whoever can write to etcd can run a privileged Pod, so etcd answers only clients with a
/// certificate from its own CA: plain HTTP, HTTPS without a certificate, HTTPS with a
/// certificate of another CA and the cluster administrator's certificate (the cluster CA's)
/// are refused, and the tooling's certificate gets `/health`. Its keys reach etcd as paths to
/// private files, never in its arguments.
#[tokio::test]
async fn etcd_answers_only_clients_with_a_certificate_of_its_own_ca() {
    use local_cluster::http::{ClientFiles, Response, Tls, get_with};
    use std::os::unix::fs::PermissionsExt;

    if testing::uses_existing_cluster() {
        testing::skipped(
            "cluster::etcd_answers_only_clients_with_a_certificate_of_its_own_ca",
            "an existing cluster's etcd is not this project's",
        );
        return;
    }
    testing::client().await;
    let cluster = local_cluster::LocalCluster::default();
    let state = cluster.state().expect("the local cluster's state");
    let etcd = state.etcd.clone().expect("the state records how to reach etcd");
    let port = etcd.port().expect("etcd's port in its URL");
    assert_eq!(etcd.url, format!("https://127.0.0.1:{port}"));

    // A client certificate that etcd has no reason to trust: self-signed, not the cluster CA's.
    let foreign = rcgen::generate_simple_self_signed(vec!["intruder".to_owned()]).unwrap();
    let dir = std::env::temp_dir().join(format!("etcd-intruder-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let intruder = ClientFiles {
        cert: dir.join("intruder.crt"),
        key: dir.join("intruder.key"),
    };
    std::fs::write(&intruder.cert, foreign.cert.pem()).unwrap();
    testing::write_private(&intruder.key, &foreign.signing_key.serialize_pem()).unwrap();

    // The cluster CA's strongest identity: the administrator, in system:masters.
    let admin = ClientFiles {
        cert: cluster.dir().join("pki/admin.crt"),
        key: cluster.dir().join("pki/admin.key"),
    };
    assert!(admin.key.is_file(), "{}", admin.key.display());

    let health = format!("https://127.0.0.1:{port}/health");
    let tls = etcd.tls.clone();
    let [plain, anonymous, foreign, admin, trusted] = tokio::task::spawn_blocking(move || {
        let timeout = Duration::from_secs(5);
        let with_client = |client| Tls {
            ca: tls.ca.clone(),
            client,
        };
        [
            get_with(&format!("http://127.0.0.1:{port}/health"), timeout, None),
            get_with(&health, timeout, Some(&with_client(None))),
            get_with(&health, timeout, Some(&with_client(Some(intruder)))),
            get_with(&health, timeout, Some(&with_client(Some(admin)))),
            get_with(&health, timeout, Some(&tls)),
        ]
    })
    .await
    .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();

    // Refused: no answer at all, or an error status (Go answers plain HTTP on a TLS port with
    // 400 "Client sent an HTTP request to an HTTPS server") that tells nothing of etcd.
    let refused = |answer: &local_cluster::Result<Response>| match answer {
        Err(_) => true,
        Ok(response) => response.status >= 400 && !response.body.contains("health"),
    };
    assert!(refused(&plain), "plain HTTP: {plain:?}");
    assert!(refused(&anonymous), "HTTPS without a certificate: {anonymous:?}");
    assert!(refused(&foreign), "HTTPS with a foreign certificate: {foreign:?}");
    assert!(
        refused(&admin),
        "HTTPS with the cluster CA's admin certificate: {admin:?}"
    );
    let trusted = trusted.expect("etcd answers its own CA's client certificate");
    assert_eq!(trusted.status, 200, "{trusted:?}");
    assert!(trusted.body.contains("\"health\":\"true\""), "{trusted:?}");

    // The keys are files of their owner's alone, named in the arguments, never in them.
    let client = etcd.tls.client.expect("the tooling's client certificate");
    let mode = std::fs::metadata(&client.key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", client.key.display());
    for component in &state.components {
        let args = component.args.join(" ");
        assert!(!args.contains("PRIVATE KEY"), "{}: {args}", component.name);
        if component.name == "etcd" {
            for flag in ["--client-cert-auth=true", "--peer-client-cert-auth=true"] {
                assert!(component.args.iter().any(|a| a == flag), "{flag} not in {args}");
            }
            for flag in ["--key-file=", "--peer-key-file="] {
                let key = component
                    .args
                    .iter()
                    .find_map(|a| a.strip_prefix(flag))
                    .unwrap_or_else(|| panic!("{flag} not in {args}"));
                let mode = std::fs::metadata(key).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{key}");
            }
        }
        let log = std::fs::read_to_string(&component.log).unwrap_or_default();
        assert!(!log.contains("PRIVATE KEY"), "{}", component.log.display());
    }
}

/// The sharded benchmark creates each size's Foos once and starts every run from them: a
/// cluster started from the etcd data another one kept holds what that one held, and what a
/// run adds stays out of the kept data, so the next run starts from the same objects.
#[tokio::test]
async fn a_cluster_started_from_kept_etcd_data_holds_what_the_first_one_held() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;
    use local_cluster::UpOptions;

    let Some(own) = ClusterOfItsOwn::new(
        "cluster::a_cluster_started_from_kept_etcd_data_holds_what_the_first_one_held",
        "kept-etcd",
    ) else {
        return;
    };
    let cluster = &own.cluster;
    let kept = own.dir.join("kept-etcd");
    let options = UpOptions {
        apiserver_only: true,
        ..UpOptions::default()
    };
    let config_map = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({ "metadata": { "name": name }, "data": { "made": "before" } })).unwrap()
    };

    cluster.up_with(options).await.unwrap();
    let config_maps = Api::<ConfigMap>::namespaced(cluster.client().await.unwrap(), "default");
    config_maps
        .create(&PostParams::default(), &config_map("kept"))
        .await
        .unwrap();
    cluster.down_keeping_etcd(&kept).unwrap();
    assert!(!cluster.dir().exists(), "the cluster's folder is removed");

    for run in 0..2 {
        cluster
            .up_with(UpOptions {
                etcd_data: Some(&kept),
                ..options
            })
            .await
            .unwrap();
        let config_maps = Api::<ConfigMap>::namespaced(cluster.client().await.unwrap(), "default");
        let held = config_maps.get("kept").await.unwrap();
        assert_eq!(held.data.unwrap()["made"], "before", "run {run}");
        assert!(
            config_maps.get_opt("added").await.unwrap().is_none(),
            "run {run} found what the run before it added"
        );
        config_maps
            .create(&PostParams::default(), &config_map("added"))
            .await
            .unwrap();
        cluster.down().unwrap();
    }
}

#[tokio::test]
async fn a_cluster_whose_port_was_taken_before_etcd_bound_it_starts_on_other_ports() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::Api;
    use local_cluster::UpOptions;

    let Some(own) = ClusterOfItsOwn::new(
        "cluster::a_cluster_whose_port_was_taken_before_etcd_bound_it_starts_on_other_ports",
        "port-race",
    ) else {
        return;
    };
    // What another program does between our picking a free port and etcd binding it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_port = taken.local_addr().unwrap().port();
    let mut picked = Vec::new();
    let mut pick = || -> local_cluster::Result<u16> {
        let port = if picked.is_empty() {
            taken_port
        } else {
            local_cluster::process::free_port()?
        };
        picked.push(port);
        Ok(port)
    };

    let state = own
        .cluster
        .up_picking_ports(
            UpOptions {
                apiserver_only: true,
                ..UpOptions::default()
            },
            &mut pick,
        )
        .await
        .expect("a second attempt on other ports");

    let etcd_port = state.etcd.as_ref().and_then(|etcd| etcd.port());
    assert!(
        etcd_port.is_some_and(|port| port != taken_port),
        "etcd listens on {etcd_port:?}, not on the taken {taken_port}"
    );
    assert_eq!(
        picked.len(),
        6,
        "three ports for each of two attempts: {picked:?}"
    );
    let namespaces: Api<Namespace> = Api::all(own.cluster.client().await.unwrap());
    namespaces.get("default").await.expect("the apiserver answers");
    drop(taken);
}
