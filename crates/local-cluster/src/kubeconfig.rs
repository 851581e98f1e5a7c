//! The kubeconfigs of the control plane's components, the real node's and the admin's.

use std::path::Path;

use crate::error::Result;
use crate::pki::{Identity, Pki};

/// A kubeconfig at `path` for `id`, with the certificate files `pki` holds for it.
pub(crate) fn write_kubeconfig(path: &Path, server: &str, pki: &Pki, id: &Identity) -> Result<()> {
    let text = kubeconfig_yaml(server, &pki.ca_cert(), &pki.client_cert(id), &pki.client_key(id));
    // It names the key's file only, but is the cluster's admin access all the same.
    crate::pki::write_private(path, &text)
}

fn kubeconfig_yaml(server: &str, ca: &Path, cert: &Path, key: &Path) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: sample-operator-local
  cluster:
    server: {server}
    certificate-authority: {ca}
contexts:
- name: sample-operator-local
  context:
    cluster: sample-operator-local
    user: sample-operator-local
    namespace: default
current-context: sample-operator-local
users:
- name: sample-operator-local
  user:
    client-certificate: {cert}
    client-key: {key}
",
        ca = ca.display(),
        cert = cert.display(),
        key = key.display(),
    )
}
