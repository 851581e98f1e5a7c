//! Certificates of the local cluster: one CA that signs the apiserver's serving certificate and
//! every component's client certificate, plus the service-account signing key. The CA's key is
//! kept beside its certificate, so that a node added later gets identities of its own.

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

/// Generates a fresh CA, serving certificate, client certificates and service-account key.
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

    for id in clients {
        issue_client(&pki, &issuer, id)?;
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
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "sample-operator local cluster CA");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
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
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec![name.to_owned()])?;
        params.subject_alt_names.push(SanType::IpAddress(ip));
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.issuer()?)?;
        let (cert_path, key_path) = (
            self.dir.join(format!("{file_stem}.crt")),
            self.dir.join(format!("{file_stem}.key")),
        );
        write(&cert_path, &cert.pem())?;
        write_private(&key_path, &key.serialize_pem())?;
        Ok((cert_path, key_path))
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
}
