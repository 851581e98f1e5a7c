//! The configuration files of the real node's containerd, CNI plugins, kubelet and kube-proxy.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::{BRIDGE, NODE_IP, NODE_LABEL, NODE_NAME, POD_CIDR, RealNode};
use crate::error::{Error, Result};
use crate::image;
use crate::network::SERVICE_CIDR;
use crate::pki::Pki;
use crate::toolchain::NodeBinaries;

/// The kubelet's port on the node address.
const KUBELET_PORT: u16 = 10250;
const CNI_VERSION: &str = "1.0.0";

pub(super) struct Identities {
    pub(super) kubelet_kubeconfig: PathBuf,
    pub(super) kube_proxy_kubeconfig: PathBuf,
    pub(super) multus_kubeconfig: PathBuf,
    pub(super) serving_cert: PathBuf,
    pub(super) serving_key: PathBuf,
}

impl RealNode {
    pub(super) fn write_containerd_config(&self, bin: &NodeBinaries) -> Result<PathBuf> {
        let root = self.dir.join("containerd");
        let certs = root.join("certs.d/_default");
        std::fs::create_dir_all(&certs).map_err(|e| Error::io(&certs, e))?;
        // Every registry resolves to a port nothing listens on: no image is ever pulled.
        write(&certs.join("hosts.toml"), "server = \"http://127.0.0.1:1\"\n")?;
        let text = containerd_config(&root, bin, &self.dir.join("cni"));
        let path = root.join("config.toml");
        write(&path, &text)?;
        Ok(path)
    }

    pub(super) fn write_cni_config(&self, cni_bin: &Path, multus_kubeconfig: &Path) -> Result<()> {
        let cni = self.dir.join("cni");
        for sub in ["net.d", "cluster", "multus", "ipam"] {
            let d = cni.join(sub);
            std::fs::create_dir_all(&d).map_err(|e| Error::io(&d, e))?;
        }
        // The cluster network as a single-plugin `.conf`: Multus rebuilds a `.conflist`'s
        // delegates from typed structs on delete and loses the IPAM ranges, so Pods would hang
        // in Terminating.
        let cluster_conf = cni.join("cluster/sonode.conf");
        write(
            &cluster_conf,
            &serde_json::to_string_pretty(&cluster_network(&cni.join("ipam"))).unwrap_or_default(),
        )?;
        let multus = json!({
            "cniVersion": CNI_VERSION,
            "name": "multus-cni-network",
            "type": "multus",
            "kubeconfig": multus_kubeconfig,
            "clusterNetwork": cluster_conf,
            "binDir": cni_bin,
            "cniDir": cni.join("multus"),
            "logFile": self.logs_dir().join("multus.log"),
            "logLevel": "verbose",
        });
        write(
            &cni.join("net.d/00-multus.conf"),
            &serde_json::to_string_pretty(&multus).unwrap_or_default(),
        )
    }

    pub(super) fn kubelet_args(&self, pki: &Pki, ids: &Identities) -> Result<Vec<String>> {
        let resolv = self.dir.join("resolv.conf");
        // Nothing on a Pod looks a name up outside: its resolver is loopback.
        write(&resolv, "nameserver 127.0.0.1\n")?;
        let config = kubelet_config(
            pki,
            ids,
            &self.containerd_socket(),
            &resolv,
            &self.dir.join("pod-logs"),
        );
        let path = self.dir.join("kubelet.yaml");
        write(&path, &config)?;
        Ok(vec![
            format!("--config={}", path.display()),
            format!("--kubeconfig={}", ids.kubelet_kubeconfig.display()),
            format!("--hostname-override={NODE_NAME}"),
            format!("--node-ip={NODE_IP}"),
            format!("--root-dir={}", self.dir.join("kubelet").display()),
            format!("--cert-dir={}", self.dir.join("kubelet-pki").display()),
            format!("--node-labels={NODE_LABEL}=true"),
            "--v=1".into(),
        ])
    }

    pub(super) fn write_kube_proxy_config(&self, kubeconfig: &Path) -> Result<PathBuf> {
        let text = format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
hostnameOverride: {NODE_NAME}
mode: iptables
clusterCIDR: {POD_CIDR}
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:{healthz}
metricsBindAddress: 127.0.0.1:{metrics}
nodePortAddresses: [\"{NODE_IP}/32\"]
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
",
            kubeconfig = kubeconfig.display(),
            healthz = crate::process::free_port()?,
            metrics = crate::process::free_port()?,
        );
        let path = self.dir.join("kube-proxy.yaml");
        write(&path, &text)?;
        Ok(path)
    }
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

/// The Pod network: the node bridge holding the gateway, host-local addresses kept in the
/// node's folder, and a route to the service range only.
fn cluster_network(ipam_dir: &Path) -> serde_json::Value {
    json!({
        "cniVersion": CNI_VERSION,
        "name": "sample-operator-node",
        "type": "bridge",
        "bridge": BRIDGE,
        "isGateway": true,
        "ipMasq": false,
        "ipam": {
            "type": "host-local",
            "dataDir": ipam_dir,
            "ranges": [[{ "subnet": POD_CIDR, "gateway": NODE_IP.to_string() }]],
            "routes": [{ "dst": SERVICE_CIDR }],
        },
    })
}

fn containerd_config(root: &Path, bin: &NodeBinaries, cni: &Path) -> String {
    format!(
        r#"version = 3
root = '{root}/root'
state = '{root}/state'
# No drop-in folder from the host.
imports = []

[grpc]
  address = '{root}/containerd.sock'
[ttrpc]
  address = '{root}/containerd.sock.ttrpc'

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = '{pause}'
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = '{root}/certs.d'

[plugins.'io.containerd.cri.v1.runtime']
  # Root here cannot lower oom_score_adj, which runc would otherwise try for every sandbox.
  restrict_oom_score_adj = true
  # Pod network namespaces under the state folder, not /var/run/netns.
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = '{runc}'
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['{cni_bin}']
    conf_dir = '{cni}/net.d'

[plugins.'io.containerd.transfer.v1.local']
  config_path = '{root}/certs.d'

[plugins.'io.containerd.nri.v1.nri']
  disable = true
"#,
        root = root.display(),
        pause = image::PAUSE,
        runc = bin.runc.display(),
        cni_bin = bin.cni_dir.display(),
        cni = cni.display(),
    )
}

fn kubelet_config(pki: &Pki, ids: &Identities, socket: &Path, resolv: &Path, pod_logs: &Path) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine has cgroup v1 and no systemd as PID 1.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://{socket}
address: {NODE_IP}
port: {KUBELET_PORT}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
tlsCertFile: {serving_cert}
tlsPrivateKeyFile: {serving_key}
# Callers prove who they are with a certificate of the cluster CA (the apiserver's kubelet
# client) or a token, and the apiserver decides what they may.
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {ca}
authorization:
  mode: Webhook
resolvConf: {resolv}
podLogsDir: {pod_logs}
registerWithTaints:
- key: {NODE_LABEL}
  effect: NoSchedule
# Root here cannot lower oom_score_adj.
oomScoreAdj: 0
staticPodPath: ''
imageGCHighThresholdPercent: 100
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
",
        socket = socket.display(),
        serving_cert = ids.serving_cert.display(),
        serving_key = ids.serving_key.display(),
        ca = pki.ca_cert().display(),
        resolv = resolv.display(),
        pod_logs = pod_logs.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_network_routes_only_to_services() {
        let net = cluster_network(Path::new("/x/ipam"));
        assert_eq!(net["ipMasq"], false);
        assert_eq!(net["ipam"]["routes"], json!([{ "dst": SERVICE_CIDR }]));
        assert_eq!(net["bridge"], BRIDGE);
    }
}
