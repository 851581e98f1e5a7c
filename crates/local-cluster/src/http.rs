//! The tooling's HTTP GETs: health and readiness of the processes it starts, all on loopback;
//! plain HTTP, or HTTPS with a CA and a client certificate of the cluster's (etcd). Blocking on
//! purpose: the polls of `wait_for` call it from async code, where reqwest's blocking client
//! would panic.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};

use crate::error::{Error, Result};

/// What a server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// How an `https://` GET checks the server and who it says it is: the server's certificate must
/// chain to `ca`; `client`, a certificate and its key (PEM files), is presented when asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tls {
    pub ca: PathBuf,
    pub client: Option<ClientFiles>,
}

/// A client certificate and its private key, as PEM files.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `GET url`, giving up after `timeout` in all: a server that accepts but never answers (a
/// process still starting, a gunicorn with no live worker) must not hang the caller. Any status
/// is an answer; only a failure to get one is an error. An `https://` URL trusts no server
/// here: see [`get_with`].
pub fn get(url: &str, timeout: Duration) -> Result<Response> {
    get_with(url, timeout, None)
}

/// [`get`], with `tls` for an `https://` URL; without it such a URL fails (no CA is trusted).
pub fn get_with(url: &str, timeout: Duration, tls: Option<&Tls>) -> Result<Response> {
    let failed = |e: ureq::Error| Error::Http {
        url: url.to_owned(),
        message: e.to_string(),
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        // Loopback only: a proxy from the environment must not see these requests.
        .proxy(None)
        .tls_config(tls_config(tls)?)
        .build()
        .into();
    let mut response = agent.get(url).call().map_err(failed)?;
    Ok(Response {
        status: response.status().as_u16(),
        body: response.body_mut().read_to_string().map_err(failed)?,
    })
}

/// rustls with the aws-lc-rs provider (kube's), trusting only `tls`'s CA, or nothing.
fn tls_config(tls: Option<&Tls>) -> Result<TlsConfig> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = Vec::new();
    let mut client = None;
    if let Some(tls) = tls {
        for item in ureq::tls::parse_pem(&read(&tls.ca)?) {
            if let Ok(PemItem::Certificate(cert)) = item {
                roots.push(cert);
            }
        }
        if roots.is_empty() {
            return Err(pem_error(&tls.ca, "no certificate"));
        }
        if let Some(files) = &tls.client {
            let cert = Certificate::from_pem(&read(&files.cert)?)
                .map_err(|_| pem_error(&files.cert, "no certificate"))?;
            // The key's error names its file only, never what the file holds.
            let key = PrivateKey::from_pem(&read(&files.key)?)
                .map_err(|_| pem_error(&files.key, "no private key"))?;
            client = Some(ClientCert::new_with_certs(&[cert], key));
        }
    }
    Ok(TlsConfig::builder()
        .unversioned_rustls_crypto_provider(provider)
        .root_certs(RootCerts::new_with_certs(&roots))
        .client_cert(client)
        .build())
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(path, e))
}

fn pem_error(path: &Path, what: &str) -> Error {
    Error::io(
        path,
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{what} in PEM form")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn any_status_is_an_answer_and_nothing_listening_is_an_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request).unwrap();
            stream
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 8\r\n\r\nnot yet\n")
                .unwrap();
        });
        let answer = get(&format!("http://127.0.0.1:{port}/readyz"), Duration::from_secs(5)).unwrap();
        assert_eq!((answer.status, answer.body.as_str()), (503, "not yet\n"));
        server.join().unwrap();
        assert!(get(&format!("http://127.0.0.1:{port}/"), Duration::from_secs(5)).is_err());
    }

    #[test]
    fn https_without_a_ca_fails_rather_than_trusting_anything() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || drop(listener.accept().unwrap()));
        let answer = get(&format!("https://127.0.0.1:{port}/"), Duration::from_secs(5));
        assert!(answer.is_err(), "{answer:?}");
        server.join().unwrap();
    }
}
