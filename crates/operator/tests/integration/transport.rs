//! The operator's connection to a real apiserver: with `--apiserver-http=2` every request in
//! flight shares one connection, as client-go's do; with `1.1` each holds its own, as kube-rs
//! connects. Each test in a process of its own (nextest's way), so that the sockets counted are
//! only its client's.

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
