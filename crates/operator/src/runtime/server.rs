//! The one small HTTP server of the operator: `/metrics`, `/healthz`, `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;

use super::Telemetry;

/// Binds `address` and serves until `shutdown` completes. Returns the bound address (useful
/// with port 0) once listening, and the serving task.
pub async fn serve(
    address: SocketAddr,
    telemetry: Telemetry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Arc::new(telemetry));
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
            tracing::error!(%error, "HTTP server failed");
        }
    });
    Ok((bound, task))
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
