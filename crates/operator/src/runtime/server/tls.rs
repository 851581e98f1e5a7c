//! The certificate `/metrics` is served with over HTTPS: from `tls.crt` and `tls.key` in a
//! directory (a mounted `kubernetes.io/tls` Secret, such as cert-manager writes), read again
//! when they change, or else a self-signed one made at start, as controller-runtime does when it
//! is given none.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The file names of a `kubernetes.io/tls` Secret.
pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";
/// How often the files are looked at for a change (a renewed Secret reaches the Pod's volume
/// within a minute or so anyway).
const RECHECK: Duration = Duration::from_secs(10);

/// A TLS server configuration for HTTP/1.1: with the certificate in `cert_dir`, or a
/// self-signed one for `localhost` when `None`.
pub fn server_config(cert_dir: Option<&Path>) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let resolver: Arc<dyn ResolvesServerCert> = match cert_dir {
        Some(dir) => Arc::new(CertificateFiles::load(dir, provider.clone())?),
        None => Arc::new(Fixed(Arc::new(self_signed(&provider)?))),
    };
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A self-signed certificate and its key, made now (the key never leaves the process).
fn self_signed(provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .map_err(|e| format!("cannot make a self-signed certificate: {e}"))?;
    let key = PrivateKeyDer::try_from(generated.signing_key.serialize_der())
        .map_err(|e| format!("the self-signed certificate's key: {e}"))?;
    CertifiedKey::from_der(vec![generated.cert.der().clone()], key, provider)
        .map_err(|e| format!("the self-signed certificate: {e}"))
}

#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The certificate of a directory, read again when its files change; a renewal that cannot be
/// read (half written, say) keeps the previous one and is logged.
#[derive(Debug)]
struct CertificateFiles {
    dir: PathBuf,
    provider: Arc<CryptoProvider>,
    /// How often the files are looked at: [`RECHECK`].
    recheck: Duration,
    state: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    modified: (Option<SystemTime>, Option<SystemTime>),
    checked: Instant,
}

impl CertificateFiles {
    fn load(dir: &Path, provider: Arc<CryptoProvider>) -> Result<Self, String> {
        let modified = modified(dir);
        let key = Arc::new(read(dir, &provider)?);
        Ok(Self {
            dir: dir.to_owned(),
            provider,
            recheck: RECHECK,
            state: Mutex::new(Loaded {
                key,
                modified,
                checked: Instant::now(),
            }),
        })
    }
}

impl CertificateFiles {
    /// The certificate to serve now: the files' again if they changed.
    fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.checked.elapsed() >= self.recheck {
            state.checked = Instant::now();
            let modified = modified(&self.dir);
            if modified != state.modified {
                match read(&self.dir, &self.provider) {
                    Ok(key) => {
                        tracing::info!(dir = %self.dir.display(), "metrics: serving the renewed certificate");
                        state.key = Arc::new(key);
                        state.modified = modified;
                    }
                    Err(error) => {
                        tracing::warn!(%error, "metrics: keeping the previous certificate");
                    }
                }
            }
        }
        state.key.clone()
    }
}

impl ResolvesServerCert for CertificateFiles {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn modified(dir: &Path) -> (Option<SystemTime>, Option<SystemTime>) {
    let of = |file| std::fs::metadata(dir.join(file)).and_then(|m| m.modified()).ok();
    (of(CERT_FILE), of(KEY_FILE))
}

fn read(dir: &Path, provider: &CryptoProvider) -> Result<CertifiedKey, String> {
    let cert_path = dir.join(CERT_FILE);
    let key_path = dir.join(KEY_FILE);
    let cert_pem =
        std::fs::read(&cert_path).map_err(|e| format!("cannot read {}: {e}", cert_path.display()))?;
    let key_pem = std::fs::read(&key_path).map_err(|e| format!("cannot read {}: {e}", key_path.display()))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{}: {e}", cert_path.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate", cert_path.display()));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| format!("{}: {e}", key_path.display()))?;
    CertifiedKey::from_der(chain, key, provider)
        .map_err(|e| format!("{} and {}: {e}", cert_path.display(), key_path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_without_the_files_is_refused_naming_the_file() {
        let dir = std::env::temp_dir().join(format!("metrics-tls-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let error = server_config(Some(&dir)).unwrap_err();
        assert!(error.contains("tls.crt"), "{error}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_renewed_certificate_is_served_and_a_broken_renewal_is_not() {
        let dir = std::env::temp_dir().join(format!("metrics-tls-renewed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str| {
            let generated = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
            std::fs::write(dir.join(CERT_FILE), generated.cert.pem()).unwrap();
            std::fs::write(dir.join(KEY_FILE), generated.signing_key.serialize_pem()).unwrap();
            generated.cert.der().clone()
        };
        let first = write("first");
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut files = CertificateFiles::load(&dir, provider).unwrap();
        files.recheck = Duration::ZERO;
        assert_eq!(files.current().cert[0], first);
        // Modification times are compared: make sure the renewal's differ.
        std::thread::sleep(Duration::from_millis(20));
        let second = write("second");
        assert_eq!(files.current().cert[0], second, "the renewal is served");
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(dir.join(KEY_FILE), "half written").unwrap();
        assert_eq!(files.current().cert[0], second, "a broken renewal is not");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_certificate_and_key_that_do_not_match_are_refused() {
        let dir = std::env::temp_dir().join(format!("metrics-tls-mismatch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let one = rcgen::generate_simple_self_signed(vec!["a".to_owned()]).unwrap();
        let other = rcgen::generate_simple_self_signed(vec!["b".to_owned()]).unwrap();
        std::fs::write(dir.join(CERT_FILE), one.cert.pem()).unwrap();
        std::fs::write(dir.join(KEY_FILE), other.signing_key.serialize_pem()).unwrap();
        assert!(server_config(Some(&dir)).is_err());
        std::fs::write(dir.join(KEY_FILE), one.signing_key.serialize_pem()).unwrap();
        assert!(server_config(Some(&dir)).is_ok());
        let _ = std::fs::remove_dir_all(dir);
    }
}
