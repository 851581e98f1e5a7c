//! The one small HTTP server of the operator: `/metrics`, `/healthz`, `/readyz`.
//!
//! Anything that reaches the Pod can connect, so the server bounds what a connection may cost:
//! the request's headers must arrive within [`HEADER_READ`] (a client that opens connections
//! and sends nothing, or a byte at a time, is closed), a connection lives at most
//! [`CONNECTION_LIFETIME`], at most [`MAX_CONNECTIONS`] are served at once (more wait in the
//! kernel's backlog, costing the process nothing), and headers are small. On shutdown,
//! connections get [`SHUTDOWN_GRACE`] to finish; hung ones are then dropped, so a stopping
//! operator never waits on a client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::Telemetry;

/// How long a client may take to send a request's headers, on a new connection or between
/// the requests of a kept-alive one.
pub const HEADER_READ: Duration = Duration::from_secs(5);
/// How long a connection may stay open, requests and all: Prometheus reconnects.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(120);
/// Connections served at once. A scraper, a kubelet and an operator at the console need a
/// handful; the rest is headroom.
pub const MAX_CONNECTIONS: usize = 256;
/// How long connections may take to finish once the server stops.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// The most a request's headers may take: the endpoints take no body and few headers.
const MAX_HEADERS: usize = 32;
const MAX_BUFFER: usize = 16 * 1024;

/// Binds `address` and serves until `shutdown` completes. Returns the bound address (useful
/// with port 0) once listening, and the serving task.
pub async fn serve(
    address: SocketAddr,
    telemetry: Telemetry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Arc::new(telemetry));
    let task = tokio::spawn(accept(listener, app, shutdown));
    Ok((bound, task))
}

/// Accepts connections while there is room, until `shutdown`; then lets the open ones finish
/// within [`SHUTDOWN_GRACE`].
async fn accept(listener: TcpListener, app: Router, shutdown: impl Future<Output = ()>) {
    let room = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    // Dropped at the end, which aborts the connections still open.
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = room.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors, say: wait instead of spinning.
                    tracing::warn!(%error, "HTTP server: accepting a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ)
            .max_headers(MAX_HEADERS)
            .max_buf_size(MAX_BUFFER)
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            // Closed by the client, by the header timeout, or at the end of its lifetime.
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, connection).await;
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

async fn metrics(State(telemetry): State<Arc<Telemetry>>) -> impl IntoResponse {
    // prometheus-client writes OpenMetrics (counters' families named without `_total`, a
    // closing `# EOF`): labelled as such, Prometheus reads the types right.
    (
        [(
            CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        telemetry.metrics.render(),
    )
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn get(address: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    /// A server on a free loopback port, its stop switch and its task.
    async fn started() -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        started_with(Telemetry::new(Default::default())).await
    }

    async fn started_with(
        telemetry: Telemetry,
    ) -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (address, server) = serve("127.0.0.1:0".parse().unwrap(), telemetry, async move {
            let _ = stopped.await;
        })
        .await
        .unwrap();
        (address, stop, server)
    }

    #[tokio::test]
    async fn healthz_fails_once_a_controller_died() {
        let telemetry = Telemetry::new(Default::default());
        let (address, stop, server) = started_with(telemetry.clone()).await;
        assert!(get(address, "/healthz").await.starts_with("HTTP/1.1 200"));
        telemetry.health.died("controller foo panicked".into());
        let answer = get(address, "/healthz").await;
        assert!(answer.starts_with("HTTP/1.1 500"), "{answer}");
        assert!(answer.contains("not alive: controller foo panicked"), "{answer}");
        let _ = stop.send(());
        server.await.unwrap();
    }

    #[tokio::test]
    async fn idle_connections_are_closed_by_the_header_timeout_while_probes_answer() {
        let (address, stop, server) = started().await;
        let mut idle = Vec::new();
        for _ in 0..150 {
            idle.push(TcpStream::connect(address).await.unwrap());
        }
        let probe = tokio::time::timeout(Duration::from_secs(1), get(address, "/healthz"))
            .await
            .expect("a probe is answered beside 150 idle connections");
        assert!(probe.starts_with("HTTP/1.1 200"), "{probe}");

        tokio::time::sleep(HEADER_READ + Duration::from_secs(2)).await;
        for stream in &mut idle {
            let mut buf = [0u8; 256];
            // Closed by the server: end of stream, or a reset.
            let read = tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await;
            assert!(
                matches!(read, Ok(Ok(_)) | Ok(Err(_))),
                "an idle connection is still open after the header timeout"
            );
        }
        let _ = stop.send(());
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn shutdown_does_not_wait_for_a_hung_client() {
        let (address, stop, server) = started().await;
        // Half a request, never finished.
        let mut hung = TcpStream::connect(address).await.unwrap();
        hung.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = std::time::Instant::now();
        let _ = stop.send(());
        tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(1), server)
            .await
            .expect("the server stops within its grace")
            .unwrap();
        assert!(
            started.elapsed() < HEADER_READ,
            "it did not wait for the header timeout"
        );
    }
}
