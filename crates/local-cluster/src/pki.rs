//! Certificates of the local cluster: one CA that signs the apiserver's serving certificate and
//! every component's client certificate, plus the service-account signing key.

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

/// Paths of the generated files.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
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
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "sample-operator local cluster CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    write(&pki.ca_cert(), &ca_cert.pem())?;
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
    write(&pki.serving_key(), &serving_key.serialize_pem())?;

    for id in clients {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, id.user);
        if let Some(group) = id.group {
            params.distinguished_name.push(DnType::OrganizationName, group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &issuer)?;
        write(&pki.client_cert(id), &cert.pem())?;
        write(&pki.client_key(id), &key.serialize_pem())?;
    }

    // ECDSA P-256: the apiserver signs service-account tokens with ES256.
    let sa_key = KeyPair::generate()?;
    write(&pki.service_account_key(), &sa_key.serialize_pem())?;
    write(&pki.service_account_pub(), &sa_key.public_key_pem())?;
    Ok(pki)
}

fn write(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents).map_err(|e| Error::io(path, e))
}
