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
        let text = containerd_config(&root, bin, &self.cni_bin_dir(), &self.dir.join("cni"));
        let path = root.join("config.toml");
        write(&path, &text)?;
        Ok(path)
    }

    /// The node's own CNI plugin folder: the built plugins, but `bridge` is a script that
    /// records the bridge an ADD may make and adds its guard rule before the plugin runs.
    pub(super) fn cni_bin_dir(&self) -> PathBuf {
        self.dir.join("cni/bin")
    }

    fn write_cni_bin(&self, bin: &NodeBinaries) -> Result<()> {
        let dir = self.cni_bin_dir();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let entries = std::fs::read_dir(&bin.cni_dir).map_err(|e| Error::io(&bin.cni_dir, e))?;
        for entry in entries.filter_map(|e| e.ok()) {
            let name = entry.file_name();
            let link = dir.join(&name);
            if name == "bridge" || link.symlink_metadata().is_ok() {
                continue;
            }
            std::os::unix::fs::symlink(entry.path(), &link).map_err(|e| Error::io(&link, e))?;
        }
        let tool = |name: &str| {
            super::preflight::which(name).ok_or_else(|| Error::Node(format!("`{name}` is not installed")))
        };
        let script = bridge_recorder(
            &bin.cni_dir.join("bridge"),
            &self.cni_bridges_file(),
            &tool("iptables")?,
            &tool("ip6tables")?,
        );
        let path = dir.join("bridge");
        write(&path, &script)?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| Error::io(&path, e))
    }

    pub(super) fn write_cni_config(&self, bin: &NodeBinaries, multus_kubeconfig: &Path) -> Result<()> {
        self.write_cni_bin(bin)?;
        let cni_bin = self.cni_bin_dir();
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
            // A Pod may name only its own namespace's attachment definitions: without it, a
            // tenant's Pod could join another tenant's Network (`other/network`), its bridge
            // and its address pool. A prerequisite of the operator's Multus backend.
            "namespaceIsolation": true,
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
# The host's conntrack settings stay as they are: zero leaves each one alone.
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
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

/// The node's CNI `bridge`: on ADD it records the bridge the plugin may make (by its exact
/// name, once, under a lock) and guards it in both firewalls, then hands the configuration to
/// the real plugin. The name is read with sed: the delegate configuration is one JSON object,
/// and `"bridge":` occurs in it once (`"type":"bridge"` is followed by a comma, not a colon).
fn bridge_recorder(real: &Path, record: &Path, iptables: &Path, ip6tables: &Path) -> String {
    format!(
        r#"#!/bin/sh
# Written by sample-operator's local cluster: records and guards the bridge, then runs the plugin.
set -eu
conf=$(cat)
if [ "${{CNI_COMMAND:-}}" = ADD ]; then
  name=$(printf '%s' "$conf" | tr -d '\n' | sed -n 's/.*"bridge"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
  name=${{name:-cni0}}
  exec 9>>'{record}.lock'
  flock 9
  grep -qxF -- "$name" '{record}' 2>/dev/null || printf '%s\n' "$name" >>'{record}'
  for tool in '{iptables}' '{ip6tables}'; do
    "$tool" -C {chain} -i "$name" ! -o "$name" -j DROP 2>/dev/null ||
      "$tool" -A {chain} -i "$name" ! -o "$name" -j DROP
  done
  exec 9>&-
fi
printf '%s' "$conf" | '{real}'
"#,
        record = record.display(),
        iptables = iptables.display(),
        ip6tables = ip6tables.display(),
        chain = super::GUARD_CHAIN,
        real = real.display(),
    )
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

fn containerd_config(root: &Path, bin: &NodeBinaries, cni_bin: &Path, cni: &Path) -> String {
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
        cni_bin = cni_bin.display(),
        cni = cni.display(),
    )
}

fn kubelet_config(pki: &Pki, ids: &Identities, socket: &Path, resolv: &Path, pod_logs: &Path) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# The tooling sets the kernel values the kubelet needs (and sets them back on `down`); the
# kubelet checks them and changes none.
protectKernelDefaults: true
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

    /// The recorder run as the CNI runtime runs it, with a stand-in plugin (`cat`) and
    /// firewall (a script that logs its arguments and knows no rule).
    #[test]
    fn the_bridge_recorder_records_and_guards_a_bridge_once_and_passes_the_configuration_on() {
        let dir = std::env::temp_dir().join(format!("bridge-recorder-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("firewall.log");
        let firewall = dir.join("firewall");
        std::fs::write(
            &firewall,
            format!(
                "#!/bin/sh\necho \"$0 $*\" >>'{}'\n[ \"$1\" != -C ]\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&firewall, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let record = dir.join("cni-bridges");
        let script = dir.join("bridge");
        write(
            &script,
            &bridge_recorder(Path::new("/bin/cat"), &record, &firewall, &firewall),
        )
        .unwrap();
        let conf =
            r#"{"cniVersion":"1.0.0","name":"lab","type":"bridge","bridge":"br-0123456789ab","ipam":{}}"#;
        let invoke = |command: &str| {
            let mut child = std::process::Command::new("/bin/sh")
                .arg(&script)
                .env("CNI_COMMAND", command)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            std::io::Write::write_all(&mut child.stdin.take().unwrap(), conf.as_bytes()).unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success());
            String::from_utf8(out.stdout).unwrap()
        };
        assert_eq!(invoke("ADD"), conf);
        assert_eq!(invoke("ADD"), conf);
        assert_eq!(invoke("DEL"), conf);
        assert_eq!(std::fs::read_to_string(&record).unwrap(), "br-0123456789ab\n");
        let calls = std::fs::read_to_string(&log).unwrap();
        let rule = "-i br-0123456789ab ! -o br-0123456789ab -j DROP";
        assert_eq!(
            calls.matches(&format!("-A SAMPLE-OPERATOR-NODE {rule}")).count(),
            4,
            "two firewalls, two ADDs: {calls}"
        );
        assert_eq!(
            calls.lines().count(),
            8,
            "a check before each append, none on DEL: {calls}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_pod_network_routes_only_to_services() {
        let net = cluster_network(Path::new("/x/ipam"));
        assert_eq!(net["ipMasq"], false);
        assert_eq!(net["ipam"]["routes"], json!([{ "dst": SERVICE_CIDR }]));
        assert_eq!(net["bridge"], BRIDGE);
    }
}
