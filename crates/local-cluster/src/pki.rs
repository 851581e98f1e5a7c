//! Certificates of the local cluster: the cluster CA, which signs the apiserver's serving
//! certificate and every component's client certificate, an etcd CA of its own, which signs
//! etcd's certificates and its two clients' (the apiserver and the tooling), and the
//! service-account signing key.
//!
//! The cluster CA's key is kept beside its certificate, so that a node added later gets
//! identities of its own. The etcd CA's key is not kept: nothing joins etcd later, and no
//! identity of the cluster CA (a kubelet's, an administrator's) is one etcd trusts, as with
//! kubeadm's separate etcd CA.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::error::{Error, Result};

/// A client identity: the common name is the user, the organisation its group. (rcgen keeps
/// one value per attribute type, so one group is all a certificate here carries.)
pub struct Identity {
    pub file_stem: &'static str,
    pub user: &'static str,
    pub group: Option<&'static str>,
}

/// `system:masters` is bound to cluster-admin by the bootstrap RBAC policy.
pub const ADMIN: Identity = Identity {
    file_stem: "admin",
    user: "kubernetes-admin",
    group: Some("system:masters"),
};
/// The bootstrap policy binds these users to the controller-manager's and scheduler's roles.
pub const CONTROLLER_MANAGER: Identity = Identity {
    file_stem: "controller-manager",
    user: "system:kube-controller-manager",
    group: None,
};
pub const SCHEDULER: Identity = Identity {
    file_stem: "scheduler",
    user: "system:kube-scheduler",
    group: None,
};
/// kwok writes node and pod status for every node, which no narrower bootstrap role allows.
pub const KWOK: Identity = Identity {
    file_stem: "kwok",
    user: "kwok",
    group: Some("system:masters"),
};

/// The apiserver's identity towards kubelets (logs, exec, port-forward); the kubelet's webhook
/// authorizer asks the apiserver whether this user may, and `system:masters` may.
pub const APISERVER_KUBELET_CLIENT: Identity = Identity {
    file_stem: "apiserver-kubelet-client",
    user: "kube-apiserver-kubelet-client",
    group: Some("system:masters"),
};
/// The real node's kubelet: the Node authorizer and NodeRestriction know it by this name and
/// group, and let it touch only its own Node and the Pods bound to it.
pub const KUBELET: Identity = Identity {
    file_stem: "kubelet",
    user: "system:node:real-node-0",
    group: Some("system:nodes"),
};
/// The bootstrap policy binds `system:node-proxier` to this user.
pub const KUBE_PROXY: Identity = Identity {
    file_stem: "kube-proxy",
    user: "system:kube-proxy",
    group: None,
};

/// The apiserver's identity towards etcd, which requires a client certificate from the etcd
/// CA. No group: to the apiserver itself it is a user without any grant.
pub const APISERVER_ETCD_CLIENT: Identity = Identity {
    file_stem: "apiserver-etcd-client",
    user: "kube-apiserver-etcd-client",
    group: None,
};
/// The tooling's identity towards etcd: its health check, and the tests that check that etcd
/// refuses anyone without a certificate.
pub const ETCD_HEALTHCHECK_CLIENT: Identity = Identity {
    file_stem: "etcd-healthcheck-client",
    user: "etcd-healthcheck-client",
    group: None,
};

/// Paths of the generated files.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    fn ca_key(&self) -> PathBuf {
        self.dir.join("ca.key")
    }
    pub fn serving_cert(&self) -> PathBuf {
        self.dir.join("apiserver.crt")
    }
    pub fn serving_key(&self) -> PathBuf {
        self.dir.join("apiserver.key")
    }
    /// The CA etcd trusts, and that its clients check it by.
    pub fn etcd_ca_cert(&self) -> PathBuf {
        self.dir.join("etcd-ca.crt")
    }
    /// etcd's certificate towards its clients, for 127.0.0.1 and localhost.
    pub fn etcd_server_cert(&self) -> PathBuf {
        self.dir.join("etcd-server.crt")
    }
    pub fn etcd_server_key(&self) -> PathBuf {
        self.dir.join("etcd-server.key")
    }
    /// etcd's certificate towards its peers (serving and client), for 127.0.0.1 and localhost.
    pub fn etcd_peer_cert(&self) -> PathBuf {
        self.dir.join("etcd-peer.crt")
    }
    pub fn etcd_peer_key(&self) -> PathBuf {
        self.dir.join("etcd-peer.key")
    }
    pub fn service_account_key(&self) -> PathBuf {
        self.dir.join("service-account.key")
    }
    pub fn service_account_pub(&self) -> PathBuf {
        self.dir.join("service-account.pub")
    }
    pub fn client_cert(&self, id: &Identity) -> PathBuf {
        self.dir.join(format!("{}.crt", id.file_stem))
    }
    pub fn client_key(&self, id: &Identity) -> PathBuf {
        self.dir.join(format!("{}.key", id.file_stem))
    }
}

/// Generates a fresh cluster CA with the apiserver's serving certificate and the client
/// certificates of `clients`, a fresh etcd CA with etcd's serving and peer certificates and
/// its two clients' certificates, and the service-account key.
pub fn generate(dir: &Path, clients: &[&Identity]) -> Result<Pki> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let pki = Pki { dir: dir.to_owned() };

    let ca_key = KeyPair::generate()?;
    let ca_params = ca_params()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    write(&pki.ca_cert(), &ca_cert.pem())?;
    write_private(&pki.ca_key(), &ca_key.serialize_pem())?;
    let issuer = Issuer::new(ca_params, ca_key);

    let serving_key = KeyPair::generate()?;
    let mut serving = CertificateParams::new(vec![
        "localhost".to_owned(),
        "kubernetes".to_owned(),
        "kubernetes.default".to_owned(),
        "kubernetes.default.svc".to_owned(),
        "kubernetes.default.svc.cluster.local".to_owned(),
    ])?;
    serving
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    // The first address of the service range, which the `kubernetes` Service gets.
    serving
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
    serving
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = serving.signed_by(&serving_key, &issuer)?;
    write(&pki.serving_cert(), &cert.pem())?;
    write_private(&pki.serving_key(), &serving_key.serialize_pem())?;

    let loopback = || {
        (
            vec!["localhost".to_owned()],
            vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
        )
    };
    for id in clients {
        issue_client(&pki, &issuer, id)?;
    }

    // The etcd CA's key lives only here, in memory.
    let etcd_ca_key = KeyPair::generate()?;
    let etcd_ca_params = named_ca_params("sample-operator local cluster etcd CA")?;
    write(
        &pki.etcd_ca_cert(),
        &etcd_ca_params.self_signed(&etcd_ca_key)?.pem(),
    )?;
    let etcd_issuer = Issuer::new(etcd_ca_params, etcd_ca_key);
    let (names, ips) = loopback();
    issue_serving(&pki, &etcd_issuer, "etcd-server", "etcd", names, ips, false)?;
    let (names, ips) = loopback();
    issue_serving(&pki, &etcd_issuer, "etcd-peer", "etcd", names, ips, true)?;
    for id in [&APISERVER_ETCD_CLIENT, &ETCD_HEALTHCHECK_CLIENT] {
        issue_client(&pki, &etcd_issuer, id)?;
    }

    // ECDSA P-256: the apiserver signs service-account tokens with ES256.
    let sa_key = KeyPair::generate()?;
    write_private(&pki.service_account_key(), &sa_key.serialize_pem())?;
    write(&pki.service_account_pub(), &sa_key.public_key_pem())?;
    Ok(pki)
}

/// The CA's subject and usages; the same every time, so that an issuer rebuilt from the saved
/// key names the CA exactly as its certificate does.
fn ca_params() -> Result<CertificateParams> {
    named_ca_params("sample-operator local cluster CA")
}

fn named_ca_params(common_name: &str) -> Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

/// A serving certificate `<file_stem>.crt` and `.key` for `names` and `ips`; with `client_too`
/// also good as a client certificate (etcd's peers are both).
fn issue_serving(
    pki: &Pki,
    issuer: &Issuer<'_, KeyPair>,
    file_stem: &str,
    common_name: &str,
    names: Vec<String>,
    ips: Vec<IpAddr>,
    client_too: bool,
) -> Result<(PathBuf, PathBuf)> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(names)?;
    params
        .subject_alt_names
        .extend(ips.into_iter().map(SanType::IpAddress));
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    if client_too {
        params
            .extended_key_usages
            .push(ExtendedKeyUsagePurpose::ClientAuth);
    }
    let cert = params.signed_by(&key, issuer)?;
    let (cert_path, key_path) = (
        pki.dir.join(format!("{file_stem}.crt")),
        pki.dir.join(format!("{file_stem}.key")),
    );
    write(&cert_path, &cert.pem())?;
    write_private(&key_path, &key.serialize_pem())?;
    Ok((cert_path, key_path))
}

fn issue_client(pki: &Pki, issuer: &Issuer<'_, KeyPair>, id: &Identity) -> Result<()> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, id.user);
    if let Some(group) = id.group {
        params.distinguished_name.push(DnType::OrganizationName, group);
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, issuer)?;
    write(&pki.client_cert(id), &cert.pem())?;
    write_private(&pki.client_key(id), &key.serialize_pem())
}

impl Pki {
    /// The CA of a cluster generated earlier, from its saved key.
    fn issuer(&self) -> Result<Issuer<'static, KeyPair>> {
        let pem = std::fs::read_to_string(self.ca_key()).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::Node(
                "this cluster was started by a version that did not keep its CA key; restart it: \
                 `cargo xtask cluster down && cargo xtask cluster up --real-node`"
                    .into(),
            ),
            _ => Error::io(&self.ca_key(), e),
        })?;
        Ok(Issuer::new(ca_params()?, KeyPair::from_pem(&pem)?))
    }

    /// A client certificate for `id`, signed by the saved CA.
    pub fn add_client(&self, id: &Identity) -> Result<()> {
        issue_client(self, &self.issuer()?, id)
    }

    /// A serving certificate for `name` at `ip`, signed by the saved CA; written as
    /// `<file_stem>.crt` and `.key`.
    pub fn add_serving(&self, file_stem: &str, name: &str, ip: IpAddr) -> Result<(PathBuf, PathBuf)> {
        issue_serving(
            self,
            &self.issuer()?,
            file_stem,
            name,
            vec![name.to_owned()],
            vec![ip],
            false,
        )
    }
}

/// Writes a file readable by its owner only (private keys, configurations with secrets), also
/// when it existed before with a wider mode.
pub fn write_private(path: &Path, contents: &str) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::io::Write::write_all(&mut file, contents.as_bytes()))
        .map_err(|e| Error::io(path, e))
}

fn write(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents).map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_ca_signs_certificates_added_later() {
        let dir = std::env::temp_dir().join(format!("pki-test-{}", std::process::id()));
        let pki = generate(&dir, &[&ADMIN]).unwrap();
        pki.add_client(&KUBELET).unwrap();
        let (cert, _) = pki
            .add_serving(
                "kubelet-serving",
                "real-node-0",
                IpAddr::V4(Ipv4Addr::new(10, 88, 0, 1)),
            )
            .unwrap();
        for path in [pki.client_cert(&KUBELET), cert] {
            // openssl (Debian's, always there beside libssl) is the independent check.
            let out = std::process::Command::new("openssl")
                .args(["verify", "-CAfile"])
                .arg(pki.ca_cert())
                .arg(&path)
                .output()
                .expect("openssl runs");
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stdout)
            );
        }
        let mode =
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(pki.ca_key()).unwrap().permissions());
        assert_eq!(mode & 0o777, 0o600);
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn openssl(args: &[&str], path: &Path) -> String {
        let out = std::process::Command::new("openssl")
            .args(args)
            .arg(path)
            .output()
            .expect("openssl runs");
        assert!(
            out.status.success(),
            "openssl {args:?} {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn etcd_gets_loopback_certificates_and_its_clients_certificates_of_their_own_ca() {
        let dir = std::env::temp_dir().join(format!("pki-etcd-test-{}", std::process::id()));
        let pki = generate(&dir, &[&ADMIN]).unwrap();
        let etcd_ca = pki.etcd_ca_cert();
        let etcd_ca = etcd_ca.to_str().unwrap();
        let cluster_ca = pki.ca_cert();
        for (path, purposes) in [
            (pki.etcd_server_cert(), &["sslserver"][..]),
            (pki.etcd_peer_cert(), &["sslserver", "sslclient"][..]),
            (pki.client_cert(&APISERVER_ETCD_CLIENT), &["sslclient"][..]),
            (pki.client_cert(&ETCD_HEALTHCHECK_CLIENT), &["sslclient"][..]),
        ] {
            for purpose in purposes {
                openssl(&["verify", "-CAfile", etcd_ca, "-purpose", purpose], &path);
            }
            // Not the cluster CA's: a certificate of that one is no way into etcd.
            let out = std::process::Command::new("openssl")
                .args(["verify", "-CAfile"])
                .arg(&cluster_ca)
                .arg(&path)
                .output()
                .unwrap();
            assert!(!out.status.success(), "{} is the cluster CA's", path.display());
        }
        let admin = std::process::Command::new("openssl")
            .args(["verify", "-CAfile", etcd_ca])
            .arg(pki.client_cert(&ADMIN))
            .output()
            .unwrap();
        assert!(
            !admin.status.success(),
            "the admin's certificate is the etcd CA's"
        );
        // Its key is nowhere: only the two CAs' certificates and the cluster CA's key are here.
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains("ca."))
            .collect();
        let mut names = names;
        names.sort();
        assert_eq!(names, ["ca.crt", "ca.key", "etcd-ca.crt"]);
        for path in [pki.etcd_server_cert(), pki.etcd_peer_cert()] {
            let names = openssl(&["x509", "-noout", "-ext", "subjectAltName", "-in"], &path);
            assert!(
                names.contains("DNS:localhost") && names.contains("IP Address:127.0.0.1"),
                "{names}"
            );
        }
        let subject = openssl(
            &["x509", "-noout", "-subject", "-in"],
            &pki.client_cert(&APISERVER_ETCD_CLIENT),
        );
        assert!(subject.contains("CN = kube-apiserver-etcd-client"), "{subject}");
        for key in [
            pki.etcd_server_key(),
            pki.etcd_peer_key(),
            pki.client_key(&APISERVER_ETCD_CLIENT),
            pki.client_key(&ETCD_HEALTHCHECK_CLIENT),
        ] {
            let mode =
                std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions());
            assert_eq!(mode & 0o777, 0o600, "{}", key.display());
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
