//! The operator's connection to a real apiserver: with `--apiserver-http=2` every request in
//! flight shares one connection, as client-go's do; with `1.1` each holds its own, as kube-rs
//! connects. Each test in a process of its own (nextest's way), so that the sockets counted are
//! only its client's. And its streamed lists start from the cluster's current state.

use std::collections::HashSet;

use futures::future::join_all;
use http::Version;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use procfs::process::{FDTarget, Process};
use sample_operator::runtime::requests::RequestCounter;
use sample_operator::runtime::sharding::layer::Selectors;
use sample_operator::runtime::transport::HttpVersion;

/// This process's established TCP connections to `port`.
fn connections_to(port: u16) -> usize {
    let sockets: HashSet<u64> = Process::myself()
        .unwrap()
        .fd()
        .unwrap()
        .filter_map(|fd| match fd.ok().map(|fd| fd.target) {
            Some(FDTarget::Socket(inode)) => Some(inode),
            _ => None,
        })
        .collect();
    let mut entries = procfs::net::tcp().unwrap();
    entries.extend(procfs::net::tcp6().unwrap_or_default());
    entries
        .iter()
        .filter(|e| {
            e.remote_address.port() == port
                && e.state == procfs::net::TcpState::Established
                && sockets.contains(&e.inode)
        })
        .count()
}

/// `lists` lists at once and a watch left open, on a client speaking `version`: the HTTP
/// version of the answers and the connections the client then holds to the apiserver.
async fn requests_at_once(version: HttpVersion, lists: usize) -> (Version, usize) {
    let config = local_cluster::testing::config().await;
    let port = config.cluster_url.port_u16().unwrap_or(443);
    let client = RequestCounter::default()
        .client_with(config, &Selectors::default(), version)
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let watch = namespaces
        .watch(&kube::api::WatchParams::default().timeout(60), "0")
        .await
        .expect("a watch of namespaces");
    let one = ListParams::default().limit(1);
    let lists = join_all((0..lists).map(|_| namespaces.list(&one))).await;
    assert!(
        lists.iter().all(Result::is_ok),
        "{:?}",
        lists.iter().find(|l| l.is_err())
    );
    let answer = client
        .send(
            http::Request::get("/version")
                .body(kube::client::Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let connections = connections_to(port);
    drop(watch);
    (answer.version(), connections)
}

#[tokio::test]
async fn http2_multiplexes_every_request_on_one_connection() {
    // More at once than the 100 streams kube-apiserver allows on a connection (since the
    // HTTP/2 rapid-reset fix of 2023): the rest wait for a stream, none fails.
    let (version, connections) = requests_at_once(HttpVersion::Http2, 150).await;
    assert_eq!(version, Version::HTTP_2);
    assert_eq!(connections, 1, "HTTP/2 opened {connections} connections");
}

#[tokio::test]
async fn http1_holds_a_connection_per_request_in_flight() {
    let (version, connections) = requests_at_once(HttpVersion::Http1, 32).await;
    assert_eq!(version, Version::HTTP_11);
    // The watch holds one, and the 32 lists at once more than that.
    assert!(connections > 2, "HTTP/1.1 held only {connections} connections");
}

/// A streamed list through the operator's client holds every write acknowledged before it: a
/// ConfigMap changed just before each of 500 streamed lists of it is found changed in every one.
/// kube-runtime asks for any state (`resourceVersion=0`), which this apiserver streams from its
/// watch cache as it is; the client's layer (`runtime/consistent_streams.rs`) makes it a
/// consistent read. Without the layer 6 to 11 of the 500 streams missed the write, in each of
/// four runs (the layer removed by hand on 2026-12-07).
#[tokio::test]
async fn a_streamed_list_holds_every_write_acknowledged_before_it() {
    use futures::TryStreamExt;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams, PostParams, WatchEvent, WatchParams};
    use local_cluster::testing::TestNamespace;

    let config = local_cluster::testing::config().await;
    let client = RequestCounter::default().client(config).unwrap();
    let ns = TestNamespace::create(&client, "streamed-list").await;
    let configmaps = ns.api::<ConfigMap>();
    let mut probe = ConfigMap::default();
    probe.metadata.name = Some("probe".into());
    configmaps.create(&PostParams::default(), &probe).await.unwrap();
    let streamed = WatchParams::streaming_lists()
        .fields("metadata.name=probe")
        .timeout(30);
    let mut missed = Vec::new();
    for round in 0..500 {
        let written = round.to_string();
        let patch = serde_json::json!({ "data": { "round": written } });
        configmaps
            .patch("probe", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        // The form kube-runtime's watcher sends to start a streamed list.
        let mut events = std::pin::pin!(configmaps.watch(&streamed, "0").await.unwrap());
        let mut seen = None;
        while let Some(event) = events.try_next().await.unwrap() {
            match event {
                WatchEvent::Added(cm) => seen = cm.data.and_then(|d| d.get("round").cloned()),
                WatchEvent::Bookmark(mark)
                    if mark
                        .metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .is_some_and(|v| v == "true") =>
                {
                    break;
                }
                WatchEvent::Bookmark(_) => {}
                other => panic!("round {round}: {other:?} before the initial events ended"),
            }
        }
        if seen.as_deref() != Some(written.as_str()) {
            missed.push((round, seen));
        }
    }
    assert!(
        missed.is_empty(),
        "streams older than the write before them (round, seen): {missed:?}"
    );
}
