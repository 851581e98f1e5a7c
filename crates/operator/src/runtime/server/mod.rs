//! The operator's two small HTTP servers: the probes (`/healthz`, `/readyz`) on one address,
//! `/metrics` on another, so that however hard the metrics port is pressed (scrapers, or anyone
//! who can reach the Pod), a kubelet's probe is answered at once on its own.
//!
//! `/metrics` may be served over HTTPS to scrapers that Kubernetes authenticates and authorizes
//! ([`auth`], with the certificate of [`tls`]), as controller-runtime's metrics server does.
//!
//! Anyone who reaches the Pod can connect, so each server bounds what a connection may cost:
//! the request's headers (and the TLS handshake before them) must arrive within
//! [`HEADER_READ`] (a client that opens connections and sends nothing, or a byte at a time, is
//! closed), a connection lives at most [`CONNECTION_LIFETIME`], at most [`MAX_CONNECTIONS`] are
//! served at once (more wait in the kernel's backlog, costing the process nothing), at most
//! [`PER_PEER_CONNECTIONS`] of them from one address (more are closed as they come, so that one
//! Pod cannot take every slot and starve the kubelet or a scraper), and headers are small. The
//! probes answer one request a connection, as the kubelet sends them. On shutdown, connections
//! get [`SHUTDOWN_GRACE`] to finish; hung ones are then dropped, so a stopping operator never
//! waits on a client.

pub mod auth;
mod per_address;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header::{CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, StatusCode, header::AUTHORIZATION};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::Telemetry;
use auth::{Authorizer, Refusal};

/// How long a client may take to send a request's headers, on a new connection or between
/// the requests of a kept-alive one; over TLS, also how long the handshake may take.
pub const HEADER_READ: Duration = Duration::from_secs(5);
/// How long a connection may stay open, requests and all: Prometheus reconnects.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);
/// Connections served at once, per server. A scraper, a kubelet and an operator at the console
/// need a handful; the rest is headroom.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections served at once from one address: a kubelet, a scraper or a person needs one or
/// two. Another source may hold this many and no more, whatever it opens.
pub const PER_PEER_CONNECTIONS: usize = 16;
/// How long connections may take to finish once the server stops.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// The most a request's headers may take: the endpoints take no body and few headers.
const MAX_HEADERS: usize = 32;
const MAX_BUFFER: usize = 16 * 1024;

/// A bound server: the address it listens on (useful with port 0) and its task, which ends once
/// the server has stopped.
pub type Serving = (SocketAddr, tokio::task::JoinHandle<()>);

/// How `/metrics` is served to its readers.
#[derive(Clone)]
pub enum MetricsAccess {
    /// Plain HTTP, to anyone who reaches the port.
    Open,
    /// HTTPS, to bearers of a token that Kubernetes accepts and allows `get` on `/metrics`.
    Secure {
        tls: Arc<rustls::ServerConfig>,
        authorizer: Arc<Authorizer>,
    },
}

/// Binds `address` and serves `/healthz` and `/readyz` until `shutdown` completes.
pub async fn serve_probes(
    address: SocketAddr,
    telemetry: Telemetry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<Serving> {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Arc::new(telemetry));
    serve(address, app, None, KeepAlive::No, shutdown).await
}

/// Binds `address` and serves `/metrics`, as `access` says, until `shutdown` completes.
pub async fn serve_metrics(
    address: SocketAddr,
    telemetry: Telemetry,
    access: MetricsAccess,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<Serving> {
    let (tls, authorizer) = match access {
        MetricsAccess::Open => (None, None),
        MetricsAccess::Secure { tls, authorizer } => (Some(TlsAcceptor::from(tls)), Some(authorizer)),
    };
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(Arc::new(MetricsState {
            telemetry,
            authorizer,
        }));
    serve(address, app, tls, KeepAlive::Yes, shutdown).await
}

/// Whether a connection may carry more than one request: Prometheus keeps its connection, the
/// kubelet opens one a probe.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeepAlive {
    Yes,
    No,
}

async fn serve(
    address: SocketAddr,
    app: Router,
    tls: Option<TlsAcceptor>,
    keep_alive: KeepAlive,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<Serving> {
    let listener = TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(accept(listener, app, tls, keep_alive, shutdown));
    Ok((bound, task))
}

/// Accepts connections while there is room, until `shutdown`; then lets the open ones finish
/// within [`SHUTDOWN_GRACE`].
async fn accept(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsAcceptor>,
    keep_alive: KeepAlive,
    shutdown: impl Future<Output = ()>,
) {
    let room = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let peers = per_address::PerAddress::new(PER_PEER_CONNECTIONS);
    let graceful = GracefulShutdown::new();
    // Dropped at the end, which aborts the connections still open.
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = room.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let (stream, slot, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match peers.try_take(peer.ip()) {
                    Some(slot) => (stream, slot, peer.ip()),
                    // Over its share: closed at once, and its permit goes to the next.
                    None => continue,
                },
                Err(error) => {
                    // Out of file descriptors, say: wait instead of spinning.
                    tracing::warn!(%error, "HTTP server: accepting a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Handlers learn where the request came from.
        let app = app.clone().layer(axum::Extension(Peer(peer)));
        let watcher = graceful.watcher();
        let tls = tls.clone();
        connections.spawn(async move {
            // Closed by the client, by the header timeout, or at the end of its lifetime.
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, async move {
                match tls {
                    None => serve_connection(stream, app, keep_alive, watcher).await,
                    Some(tls) => {
                        // A client that never finishes its handshake is closed like one that
                        // never sends its headers.
                        if let Ok(Ok(stream)) = tokio::time::timeout(HEADER_READ, tls.accept(stream)).await {
                            serve_connection(stream, app, keep_alive, watcher).await;
                        }
                    }
                }
            })
            .await;
            drop(slot);
            drop(permit);
        });
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("HTTP server: connections still open at shutdown were dropped");
    }
}

async fn serve_connection<S>(stream: S, app: Router, keep_alive: KeepAlive, watcher: Watcher)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .keep_alive(keep_alive == KeepAlive::Yes)
        .header_read_timeout(HEADER_READ)
        .max_headers(MAX_HEADERS)
        .max_buf_size(MAX_BUFFER)
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    let _ = watcher.watch(connection).await;
}

/// The address a request came from.
#[derive(Clone, Copy)]
struct Peer(std::net::IpAddr);

struct MetricsState {
    telemetry: Telemetry,
    /// Who may read, when served securely.
    authorizer: Option<Arc<Authorizer>>,
}

async fn metrics(
    State(state): State<Arc<MetricsState>>,
    axum::Extension(Peer(peer)): axum::Extension<Peer>,
    headers: HeaderMap,
) -> Response {
    if let Some(authorizer) = &state.authorizer {
        match authorizer.check(peer, headers.get(AUTHORIZATION)).await {
            Ok(()) => {}
            Err(Refusal::Unauthenticated) => {
                return (
                    StatusCode::UNAUTHORIZED,
                    [(WWW_AUTHENTICATE, "Bearer")],
                    "Unauthorized: a bearer token that Kubernetes accepts is needed\n",
                )
                    .into_response();
            }
            Err(Refusal::Forbidden) => {
                return (
                    StatusCode::FORBIDDEN,
                    "Forbidden: the token's user may not get /metrics (bind it to the metrics-reader ClusterRole)\n",
                )
                    .into_response();
            }
            Err(Refusal::Unavailable(_)) => {
                return (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "cannot review the token with the API server now\n",
                )
                    .into_response();
            }
        }
    }
    // prometheus-client writes OpenMetrics (counters' families named without `_total`, a
    // closing `# EOF`): labelled as such, Prometheus reads the types right.
    (
        [(
            CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.telemetry.metrics.render(),
    )
        .into_response()
}

async fn healthz(State(telemetry): State<Arc<Telemetry>>) -> impl IntoResponse {
    match telemetry.health.liveness() {
        Ok(()) => (StatusCode::OK, "ok".to_owned()),
        Err(why) => (StatusCode::INTERNAL_SERVER_ERROR, format!("not alive: {why}")),
    }
}

async fn readyz(State(telemetry): State<Arc<Telemetry>>) -> impl IntoResponse {
    match telemetry.health.readiness() {
        Ok(()) => (StatusCode::OK, "ok".to_owned()),
        Err(unsynced) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready, waiting for: {}", unsynced.join(", ")),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::future::BoxFuture;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    const LOOPBACK: &str = "127.0.0.1:0";

    async fn get(address: SocketAddr, path: &str) -> String {
        let stream = TcpStream::connect(address).await.unwrap();
        exchange(stream, path, None).await
    }

    /// A connection to `address` from the loopback address `source` (any of 127.0.0.0/8): a
    /// client on another address than the tests' own 127.0.0.1.
    async fn connect_from(source: [u8; 4], address: SocketAddr) -> std::io::Result<TcpStream> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from((source, 0)))?;
        socket.connect(address).await
    }

    /// Whether the server has closed `stream` (an end of stream or a reset).
    fn closed(stream: &TcpStream) -> bool {
        let mut buf = [0u8; 64];
        match stream.try_read(&mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    }

    async fn exchange(
        mut stream: impl AsyncRead + AsyncWrite + Unpin,
        path: &str,
        token: Option<&str>,
    ) -> String {
        // The user a test names, in a token shaped as the API server's.
        let authorization = token
            .map(|t| format!("Authorization: Bearer {}\r\n", auth::test_tokens::jwt(t, None)))
            .unwrap_or_default();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n{authorization}Connection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        // A TLS peer that closes without close_notify is an error here, after the response.
        let _ = stream.read_to_end(&mut response).await;
        String::from_utf8_lossy(&response).into_owned()
    }

    /// A server's stop switch and task.
    struct Running {
        address: SocketAddr,
        stop: tokio::sync::oneshot::Sender<()>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Running {
        async fn stop(self) {
            let _ = self.stop.send(());
            tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(1), self.task)
                .await
                .expect("the server stops within its grace")
                .unwrap();
        }
    }

    fn switch() -> (
        tokio::sync::oneshot::Sender<()>,
        impl Future<Output = ()> + Send + 'static,
    ) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        (stop, async move {
            let _ = stopped.await;
        })
    }

    async fn probes(telemetry: Telemetry) -> Running {
        let (stop, stopped) = switch();
        let (address, task) = serve_probes(LOOPBACK.parse().unwrap(), telemetry, stopped)
            .await
            .unwrap();
        Running { address, stop, task }
    }

    async fn metrics(telemetry: Telemetry, access: MetricsAccess) -> Running {
        let (stop, stopped) = switch();
        let (address, task) = serve_metrics(LOOPBACK.parse().unwrap(), telemetry, access, stopped)
            .await
            .unwrap();
        Running { address, stop, task }
    }

    /// Allows the token `reader`, forbids `stranger`, refuses any other.
    struct Reviews;

    impl auth::Reviewer for Reviews {
        fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<auth::Decision, String>> {
            Box::pin(async move {
                Ok(match auth::test_tokens::subject(token).as_str() {
                    "reader" => auth::Decision::Allowed,
                    "stranger" => auth::Decision::Forbidden,
                    _ => auth::Decision::Unauthenticated,
                })
            })
        }
    }

    /// Secure access with a certificate for `localhost` written to a directory, and a client
    /// that trusts that certificate only.
    fn secure(name: &str) -> (MetricsAccess, tokio_rustls::TlsConnector) {
        let dir = std::env::temp_dir().join(format!("metrics-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(dir.join(tls::CERT_FILE), generated.cert.pem()).unwrap();
        std::fs::write(dir.join(tls::KEY_FILE), generated.signing_key.serialize_pem()).unwrap();
        let access = MetricsAccess::Secure {
            tls: tls::server_config(Some(&dir)).unwrap(),
            authorizer: Arc::new(Authorizer::new(Reviews)),
        };
        let _ = std::fs::remove_dir_all(&dir);
        let mut roots = rustls::RootCertStore::empty();
        roots.add(generated.cert.der().clone()).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        (access, tokio_rustls::TlsConnector::from(Arc::new(client)))
    }

    async fn get_tls(
        connector: &tokio_rustls::TlsConnector,
        address: SocketAddr,
        token: Option<&str>,
    ) -> String {
        let tcp = TcpStream::connect(address).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let stream = connector.connect(name, tcp).await.expect("the TLS handshake");
        exchange(stream, "/metrics", token).await
    }

    #[tokio::test]
    async fn healthz_fails_once_a_controller_died() {
        let telemetry = Telemetry::new(Default::default());
        let server = probes(telemetry.clone()).await;
        assert!(get(server.address, "/healthz").await.starts_with("HTTP/1.1 200"));
        telemetry.health.died("controller foo panicked".into());
        let answer = get(server.address, "/healthz").await;
        assert!(answer.starts_with("HTTP/1.1 500"), "{answer}");
        assert!(answer.contains("not alive: controller foo panicked"), "{answer}");
        server.stop().await;
    }

    #[tokio::test]
    async fn each_port_serves_its_own_paths() {
        let telemetry = Telemetry::new(Default::default());
        let probes = probes(telemetry.clone()).await;
        let metrics = metrics(telemetry, MetricsAccess::Open).await;
        assert!(get(probes.address, "/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(get(probes.address, "/metrics").await.starts_with("HTTP/1.1 404"));
        let scraped = get(metrics.address, "/metrics").await;
        assert!(
            scraped.starts_with("HTTP/1.1 200") && scraped.contains("# EOF"),
            "{scraped}"
        );
        assert!(get(metrics.address, "/healthz").await.starts_with("HTTP/1.1 404"));
        probes.stop().await;
        metrics.stop().await;
    }

    #[tokio::test]
    async fn secure_metrics_need_tls_and_a_token_allowed_to_read_them() {
        let (access, connector) = secure("auth");
        let server = metrics(Telemetry::new(Default::default()), access).await;
        let without = get_tls(&connector, server.address, None).await;
        assert!(without.starts_with("HTTP/1.1 401"), "{without}");
        assert!(without.contains("www-authenticate: Bearer"), "{without}");
        let forged = get_tls(&connector, server.address, Some("forged")).await;
        assert!(forged.starts_with("HTTP/1.1 401"), "{forged}");
        let stranger = get_tls(&connector, server.address, Some("stranger")).await;
        assert!(stranger.starts_with("HTTP/1.1 403"), "{stranger}");
        let reader = get_tls(&connector, server.address, Some("reader")).await;
        assert!(
            reader.starts_with("HTTP/1.1 200") && reader.contains("# EOF"),
            "{reader}"
        );
        // Plain HTTP gets no answer, let alone the metrics.
        let plain = get(server.address, "/metrics").await;
        assert!(!plain.contains("# EOF"), "{plain}");
        server.stop().await;
    }

    #[tokio::test]
    async fn probes_answer_at_once_while_the_metrics_port_is_full_and_idle_connections_close() {
        let telemetry = Telemetry::new(Default::default());
        let probes = probes(telemetry.clone()).await;
        let (access, connector) = secure("idle");
        let metrics = metrics(telemetry, access).await;
        // Every connection slot of the metrics port taken by clients that never even start
        // their TLS handshake, and more waiting in the backlog.
        // From many addresses, since each holds at most its share.
        let mut idle = Vec::new();
        for i in 0..MAX_CONNECTIONS + 50 {
            let source = [127, 0, 1, (i / PER_PEER_CONNECTIONS) as u8];
            idle.push(connect_from(source, metrics.address).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        for _ in 0..5 {
            let probe = tokio::time::timeout(Duration::from_secs(1), get(probes.address, "/healthz"))
                .await
                .expect("a probe is answered while the metrics port is full");
            assert!(probe.starts_with("HTTP/1.1 200"), "{probe}");
        }
        // The check can fail: the full metrics port does not answer meanwhile.
        let scrape = tokio::time::timeout(
            Duration::from_millis(500),
            get_tls(&connector, metrics.address, Some("reader")),
        )
        .await;
        assert!(scrape.is_err(), "the metrics port was not full");

        // The handshake timeout closes them, and the port serves again.
        tokio::time::sleep(HEADER_READ + Duration::from_secs(2)).await;
        for stream in &mut idle[..MAX_CONNECTIONS] {
            let mut buf = [0u8; 256];
            // Closed by the server: end of stream, or a reset.
            let read = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await;
            assert!(
                matches!(read, Ok(Ok(_)) | Ok(Err(_))),
                "an idle connection is still open after the handshake timeout"
            );
        }
        drop(idle);
        let scrape = tokio::time::timeout(
            Duration::from_secs(2),
            get_tls(&connector, metrics.address, Some("reader")),
        )
        .await
        .expect("the metrics port serves again");
        assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
        probes.stop().await;
        metrics.stop().await;
    }

    #[tokio::test]
    async fn idle_probe_connections_are_closed_by_the_header_timeout() {
        let server = probes(Telemetry::new(Default::default())).await;
        let mut idle = Vec::new();
        for i in 0..150 {
            let source = [127, 0, 1, (i / PER_PEER_CONNECTIONS) as u8];
            idle.push(connect_from(source, server.address).await.unwrap());
        }
        let probe = tokio::time::timeout(Duration::from_secs(1), get(server.address, "/healthz"))
            .await
            .expect("a probe is answered beside 150 idle connections");
        assert!(probe.starts_with("HTTP/1.1 200"), "{probe}");
        tokio::time::sleep(HEADER_READ + Duration::from_secs(2)).await;
        for stream in &mut idle {
            let mut buf = [0u8; 256];
            let read = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await;
            assert!(
                matches!(read, Ok(Ok(_)) | Ok(Err(_))),
                "an idle connection is still open after the header timeout"
            );
        }
        server.stop().await;
    }

    /// One source holding a thousand connections on the probe port, and opening again each one
    /// the server closes, gets its share of the slots and no more: a probe from another address
    /// is answered within a second, every second for 30 s. (Without the share it fills every
    /// slot and the backlog, and the probe waits behind it.)
    #[tokio::test]
    async fn probes_are_answered_every_second_while_another_source_holds_a_thousand_connections() {
        let server = probes(Telemetry::new(Default::default())).await;
        let address = server.address;
        let source = [127, 0, 0, 2];
        let mut held = Vec::new();
        for _ in 0..1000 {
            held.push(connect_from(source, address).await.ok());
        }
        let holder = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                for slot in held.iter_mut() {
                    if slot.as_ref().is_none_or(closed) {
                        *slot = connect_from(source, address).await.ok();
                    }
                }
            }
        });
        for second in 0..30 {
            let started = tokio::time::Instant::now();
            let probe = tokio::time::timeout(Duration::from_secs(1), get(address, "/healthz"))
                .await
                .unwrap_or_else(|_| panic!("no answer within a second, {second} s in"));
            assert!(probe.starts_with("HTTP/1.1 200"), "{probe}");
            tokio::time::sleep_until(started + Duration::from_secs(1)).await;
        }
        holder.abort();
        server.stop().await;
    }

    #[tokio::test]
    async fn a_probe_connection_answers_one_request() {
        let server = probes(Telemetry::new(Default::default())).await;
        let mut stream = TcpStream::connect(server.address).await.unwrap();
        // Two requests, the first asking to keep the connection.
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut response = Vec::new();
        tokio::time::timeout(Duration::from_secs(2), stream.read_to_end(&mut response))
            .await
            .expect("the server closes the connection after its answer")
            .unwrap();
        let response = String::from_utf8_lossy(&response);
        assert_eq!(response.matches("HTTP/1.1 200").count(), 1, "{response}");
        server.stop().await;
    }

    #[tokio::test]
    async fn shutdown_does_not_wait_for_a_hung_client() {
        let server = metrics(Telemetry::new(Default::default()), MetricsAccess::Open).await;
        // Half a request, never finished.
        let mut hung = TcpStream::connect(server.address).await.unwrap();
        hung.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = std::time::Instant::now();
        server.stop().await;
        assert!(
            started.elapsed() < HEADER_READ,
            "it did not wait for the header timeout"
        );
    }
}
