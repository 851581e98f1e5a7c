//! How the operator's client talks to the apiserver: HTTP/1.1, as kube-rs builds its client, or
//! HTTP/2, as client-go does.
//!
//! kube-rs speaks HTTP/1.1 only (kube-rs/kube#1923: its exec and attach upgrades need it), so
//! every request in flight holds a TLS connection of its own: at 128 reconciles at once, some
//! 128 connections, each answer a wake-up of its own. The operator makes no upgrade request, so
//! it can multiplex everything on one connection, as Go controllers do. The stack below is
//! kube-rs's own (`ClientBuilder::try_from`, kube 5.0), for either version, with these changes:
//! Nagle's algorithm is off on the connection (`TCP_NODELAY`, as Go's dialer sets it under
//! client-go); for HTTP/2 the TLS connector offers `h2` by ALPN and the connection is pinged
//! after 30 s without a read so that a dead one is found (client-go's health check, which a
//! single shared connection needs); and kube-rs's tracing layer, a debug span per request, is
//! left out (the operator's request metrics and its reconcile logs say what it would).
//!
//! Why Nagle's algorithm off: hyper's connector leaves it on, and a request that leaves in two
//! writes then waits for the apiserver to acknowledge the first, which Linux delays by up to
//! 40 ms when it has nothing to send back. An HTTP/2 request with a body is two writes (its
//! HEADERS and DATA frames), and so is the first request on a new connection (the TLS
//! handshake's last message, then the request). On the local cluster on 2026-12-07 a PATCH of a
//! ConfigMap from the debug build, each on a new HTTP/1.1 connection or all on one HTTP/2
//! connection, took 47 to 61 ms with it on, 7 to 16 ms (the handshake included) with it off.
//!
//! HTTP/1.1 stays the default: against kube-apiserver HTTP/2 was no faster and held more memory
//! (docs/benchmark.md#http2); it is there for proxies that limit a client's connections.

use std::time::Duration;

use http::{Request, Response};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::Config;
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody};
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt as _};

/// The service under a client: kube-rs's own, which it does not name outside its crate.
pub type ClientService = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// The HTTP version of the operator's connection to the apiserver (`--apiserver-http`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum HttpVersion {
    /// HTTP/1.1: a connection per request in flight, as kube-rs connects.
    #[default]
    #[value(name = "1.1")]
    Http1,
    /// HTTP/2 when the apiserver offers it (every kube-apiserver does), else HTTP/1.1: every
    /// request multiplexed on one connection, as client-go connects.
    #[value(name = "2")]
    Http2,
}

/// client-go's HTTP/2 health check: a PING after this long without a frame read...
const PING_INTERVAL: Duration = Duration::from_secs(30);
/// ...and the connection closed when its answer takes longer than this.
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// A client builder for `config` speaking `version`, to which the caller adds its layers.
pub fn client_builder(config: Config, version: HttpVersion) -> kube::Result<ClientBuilder<ClientService>> {
    if config.proxy_url.is_some() {
        // A kubeconfig's proxy-url is kube-rs's to handle: with its proxy features off, as
        // here, it refuses it with an error naming the feature.
        return ClientBuilder::try_from(config);
    }
    // As kube-rs's builder does: its TLS configuration takes the process's default provider.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let tls = config.rustls_client_config()?;
    let mut https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name
            .clone()
            .try_into()
            .map_err(|e| kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e)))?;
        https = https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let https = match version {
        HttpVersion::Http1 => https.enable_http1().wrap_connector(http),
        HttpVersion::Http2 => https.enable_http1().enable_http2().wrap_connector(http),
    };
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let mut client = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
    client.timer(TokioTimer::new());
    if version == HttpVersion::Http2 {
        client
            .http2_keep_alive_interval(PING_INTERVAL)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true);
    }
    let client: hyper_util::client::legacy::Client<_, Body> = client.build(connector);

    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client)
        .map_response(|response| {
            response
                .map(|body| Box::new(http_body_util::BodyExt::map_err(body, BoxError::from)) as Box<DynBody>)
        })
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Version;
    use hyper_util::rt::TokioIo;

    /// An HTTPS server that speaks HTTP/1.1 only (the operator's own /metrics configuration,
    /// which offers no `h2`), answering every request with `{}`.
    async fn http1_only_server() -> u16 {
        let tls = tokio_rustls::TlsAcceptor::from(crate::runtime::server::tls::server_config(None).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let tls = tls.clone();
                tokio::spawn(async move {
                    let Ok(stream) = tls.accept(stream).await else {
                        return;
                    };
                    let answer = hyper::service::service_fn(|_| async {
                        Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
                            hyper::body::Bytes::from_static(b"{}"),
                        )))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), answer)
                        .await;
                });
            }
        });
        port
    }

    /// A client speaking `version` to the server on `port`, once it has an answer, and the
    /// answer's HTTP version.
    async fn connected(version: HttpVersion, port: u16) -> (kube::Client, Version) {
        let mut config = Config::new(format!("https://127.0.0.1:{port}").parse().unwrap());
        config.accept_invalid_certs = true;
        let client = client_builder(config, version).unwrap().build();
        let response = client
            .send(http::Request::get("/version").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        (client, response.version())
    }

    async fn version_spoken(version: HttpVersion, port: u16) -> Version {
        connected(version, port).await.1
    }

    /// Whether Nagle's algorithm is off on each of this process's connections to `port`.
    fn nodelay_of_connections_to(port: u16) -> Vec<bool> {
        use procfs::process::{FDTarget, Process};
        let mut entries = procfs::net::tcp().unwrap();
        entries.extend(procfs::net::tcp6().unwrap_or_default());
        let inodes: Vec<u64> = entries
            .iter()
            .filter(|e| e.remote_address.port() == port && e.state == procfs::net::TcpState::Established)
            .map(|e| e.inode)
            .collect();
        Process::myself()
            .unwrap()
            .fd()
            .unwrap()
            .filter_map(|fd| fd.ok())
            .filter(|fd| matches!(fd.target, FDTarget::Socket(inode) if inodes.contains(&inode)))
            .map(|fd| {
                let mut on: libc::c_int = 0;
                let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
                // SAFETY: a socket of this process, an int-sized option and its length.
                let rc = unsafe {
                    libc::getsockopt(
                        fd.fd,
                        libc::IPPROTO_TCP,
                        libc::TCP_NODELAY,
                        (&raw mut on).cast(),
                        &raw mut len,
                    )
                };
                assert_eq!(rc, 0, "getsockopt: {}", std::io::Error::last_os_error());
                on != 0
            })
            .collect()
    }

    #[tokio::test]
    async fn every_connection_to_the_apiserver_has_nagles_algorithm_off() {
        for version in [HttpVersion::Http1, HttpVersion::Http2] {
            let port = http1_only_server().await;
            // The client, and so its connection, stays alive while its socket is read.
            let (_client, _) = connected(version, port).await;
            assert_eq!(nodelay_of_connections_to(port), [true], "{version:?}");
        }
    }

    #[tokio::test]
    async fn http2_falls_back_to_http1_where_the_server_offers_only_that() {
        let port = http1_only_server().await;
        assert_eq!(version_spoken(HttpVersion::Http2, port).await, Version::HTTP_11);
        assert_eq!(version_spoken(HttpVersion::Http1, port).await, Version::HTTP_11);
    }
}
