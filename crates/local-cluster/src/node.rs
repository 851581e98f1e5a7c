//! A real node beside the kwok nodes: containerd, runc, kubelet and kube-proxy on this machine,
//! with a bridge for its Pods and Multus in front of it, so that the operator runs from its
//! image and chart and a Pod gets an interface on a Network.
//!
//! Everything it starts or changes is recorded in `<cluster>/node/state.json` before it is
//! made, so that `down` removes exactly that, even after a failed or interrupted `up`:
//! processes, mounts under the node's folder, cgroups, the bridges, iptables chains, the host
//! paths the kubelet and CNI insist on, and `ip_forward`.
//!
//! Nothing leaves the machine: the Pod bridge has no uplink, Pods get no default route (only
//! one to the service range), forwarding out of the node's bridges is dropped, and image pulls
//! go to a registry mirror that does not exist (`127.0.0.1:1`).

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{Error, Result};
use crate::image;
use crate::kubeconfig::write_kubeconfig;
use crate::network::SERVICE_CIDR;
use crate::pki::{self, Identity, Pki};
use crate::process::Component;
use crate::toolchain::NodeBinaries;
use crate::wait::wait_for;

/// The node's name, which its kubelet certificate carries (`system:node:<name>`).
pub const NODE_NAME: &str = "real-node-0";
/// The label on the node and the key of its taint: only Pods that select and tolerate it land
/// there (`sample-operator.local/real-node=true`, `NoSchedule`).
pub const NODE_LABEL: &str = "sample-operator.local/real-node";
/// The Pod bridge, which also holds the node's address; its name marks it as ours.
pub const BRIDGE: &str = "sonode0";
/// The node's InternalIP, on the Pod bridge: the kubelet refuses loopback, and this machine has
/// no dummy interface driver.
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(10, 88, 0, 1);
pub const POD_CIDR: &str = "10.88.0.0/16";
/// The filter chain that keeps Pod traffic on the machine.
const GUARD_CHAIN: &str = "SAMPLE-OPERATOR-NODE";
/// The kubelet's port on the node address.
const KUBELET_PORT: u16 = 10250;
const CNI_VERSION: &str = "1.0.0";
/// Multus reads NetworkAttachmentDefinitions and Pods, and annotates Pods with their networks.
const MULTUS: Identity = Identity {
    file_stem: "multus",
    user: "sample-operator:multus",
    group: None,
};

/// Paths outside the node's folder that the kubelet, containerd's shims, runc or the CNI
/// plugins use whatever they are told. Those that did not exist before `up` are removed by
/// `down`.
const HOST_PATHS: [&str; 6] = [
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/cni",
    "/run/containerd",
    "/var/run/netns",
];

/// What `up` recorded, for `down`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeState {
    pub components: Vec<Component>,
    /// Host paths that did not exist before, removed on `down`.
    pub created_paths: Vec<PathBuf>,
    /// Network links and iptables chains that existed before: everything else matching ours
    /// is removed.
    pub links_before: BTreeSet<String>,
    pub chains_before: BTreeSet<String>,
    pub ip_forward_before: Option<String>,
    /// The kubelet's and containerd's cgroups that existed before, in every controller: the
    /// others are removed.
    pub cgroups_before: BTreeSet<PathBuf>,
}

/// The real node's folder and handles.
#[derive(Clone, Debug)]
pub struct RealNode {
    dir: PathBuf,
}

impl RealNode {
    pub fn new(cluster_dir: &Path) -> Self {
        Self {
            dir: cluster_dir.join("node"),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn state_file(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    pub fn state(&self) -> Option<NodeState> {
        let text = std::fs::read_to_string(self.state_file()).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn save(&self, state: &NodeState) -> Result<()> {
        let path = self.state_file();
        let text = serde_json::to_string_pretty(state).map_err(|e| Error::Encode {
            what: "node state".into(),
            message: e.to_string(),
        })?;
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))
    }

    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd/containerd.sock")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// Whether the node's processes all run.
    pub fn is_running(&self) -> bool {
        self.state()
            .is_some_and(|s| !s.components.is_empty() && s.components.iter().all(Component::is_running))
    }

    /// Imports an OCI layout tar into the node's containerd, in the namespace the CRI uses.
    pub fn import_image(&self, ctr: &Path, image: &image::Image) -> Result<()> {
        let path = self
            .dir
            .join("images")
            .join(format!("{}.tar", image.digest.trim_start_matches("sha256:")));
        std::fs::create_dir_all(path.parent().expect("a parent")).map_err(|e| Error::io(&path, e))?;
        std::fs::write(&path, &image.tar).map_err(|e| Error::io(&path, e))?;
        let sock = self.containerd_socket();
        run(Command::new(ctr)
            .arg("--address")
            .arg(&sock)
            .args(["-n", "k8s.io", "images", "import", "--local"])
            .arg(&path))?;
        let _ = std::fs::remove_file(&path);
        Ok(())
    }

    /// Starts the node's processes beside a running cluster and returns once the Node is Ready.
    /// `server` is the apiserver's loopback URL.
    /// [`preflight`] is the caller's, before the binaries are built.
    pub(crate) async fn up(
        &self,
        pki: &Pki,
        server: &str,
        client: &kube::Client,
        bin: &NodeBinaries,
    ) -> Result<()> {
        let apiserver_port: u16 = server
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| Error::Node(format!("no port in {server}")))?;
        // Its names and addresses are fixed: one real node per machine.
        match holder() {
            Holder::Free => {}
            Holder::Stale(dir) => {
                eprintln!(
                    "real node: clearing the one {} left behind (none of its processes runs)",
                    dir.display()
                );
                RealNode { dir }.down()?;
            }
            Holder::Live(dir) => return Err(Error::Node(live_elsewhere(&dir))),
            Holder::Unrecorded(dir) => return Err(Error::Node(unrecorded(dir.as_deref()))),
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        let mut state = NodeState {
            created_paths: HOST_PATHS
                .iter()
                .map(PathBuf::from)
                .filter(|p| !p.exists())
                .collect(),
            links_before: links()?,
            chains_before: chains(),
            ip_forward_before: std::fs::read_to_string(IP_FORWARD)
                .ok()
                .map(|s| s.trim().to_owned()),
            cgroups_before: our_cgroups(),
            components: Vec::new(),
        };
        // Recorded before anything is made, so that `down` can undo a half-made node.
        self.save(&state)?;
        let result = self
            .start(&mut state, pki, server, apiserver_port, client, bin)
            .await;
        self.save(&state)?;
        result
    }

    async fn start(
        &self,
        state: &mut NodeState,
        pki: &Pki,
        server: &str,
        apiserver_port: u16,
        client: &kube::Client,
        bin: &NodeBinaries,
    ) -> Result<()> {
        self.network()?;
        let ids = self.identities(pki, server)?;
        let logs = self.logs_dir();

        let containerd_config = self.write_containerd_config(bin)?;
        let containerd = Component::start_with_env(
            "containerd",
            &bin.containerd,
            &["--config".into(), containerd_config.display().to_string()],
            &[(
                "PATH".into(),
                format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.shim_dir.display()),
            )],
            &logs,
        )?;
        state.components.push(containerd);
        self.save(state)?;
        let socket = self.containerd_socket();
        wait_for(
            "containerd to listen",
            Duration::from_secs(30),
            &state.components,
            // Connecting, not the file: a killed containerd leaves its socket behind.
            || async {
                Ok(std::os::unix::net::UnixStream::connect(&socket)
                    .is_ok()
                    .then_some(()))
            },
        )
        .await?;
        // Every Pod's sandbox runs the pause image, so it is there before the kubelet is.
        let busybox = image::busybox_rootfs()?;
        for image in [image::pause_image(&busybox)?, image::busybox_image(&busybox)?] {
            self.import_image(&bin.ctr, &image)?;
        }

        self.write_cni_config(&bin.cni_dir, &ids.multus_kubeconfig)?;
        apply_multus_rbac(client).await?;

        let kubelet = Component::start("kubelet", &bin.kubelet, &self.kubelet_args(pki, &ids)?, &logs)?;
        state.components.push(kubelet);
        self.save(state)?;

        let proxy = Component::start(
            "kube-proxy",
            &bin.kube_proxy,
            &[
                "--config".into(),
                self.write_kube_proxy_config(&ids.kube_proxy_kubeconfig)?
                    .display()
                    .to_string(),
            ],
            &logs,
        )?;
        state.components.push(proxy);
        self.save(state)?;

        // Pods reach the apiserver as the `kubernetes` Service (10.0.0.1:443): kube-proxy
        // sends that to the endpoint below, the node address at the apiserver's port, where
        // socat relays to the apiserver on loopback, which stays off every other interface.
        let socat =
            which("socat").ok_or_else(|| Error::Preflight(vec!["`socat`: install Debian's socat".into()]))?;
        let forwarder = Component::start(
            "apiserver-forwarder",
            &socat,
            &[
                format!("TCP-LISTEN:{apiserver_port},bind={NODE_IP},reuseaddr,fork"),
                format!("TCP:127.0.0.1:{apiserver_port}"),
            ],
            &logs,
        )?;
        state.components.push(forwarder);
        self.save(state)?;
        publish_apiserver_endpoint(client, apiserver_port).await?;

        // kube-proxy puts its jumps at the top of FORWARD when it first syncs; the guard goes
        // above them after that, so that nothing it accepts can leave through the host.
        wait_for(
            "kube-proxy's first sync",
            Duration::from_secs(60),
            &state.components,
            || async {
                let rules =
                    run(Command::new("iptables").args(["-S", "FORWARD"])).map_err(|e| e.to_string())?;
                Ok(rules.contains("KUBE-FORWARD").then_some(()))
            },
        )
        .await?;
        put_guard_first()?;

        let nodes: Api<Node> = Api::all(client.clone());
        wait_for(
            "the real node to be Ready",
            Duration::from_secs(120),
            &state.components,
            || async {
                match nodes.get_opt(NODE_NAME).await {
                    Ok(Some(node)) if is_ready(&node) => Ok(Some(())),
                    Ok(Some(_)) => Err(format!("{NODE_NAME} registered, not Ready yet")),
                    Ok(None) => Err(format!("{NODE_NAME} not registered yet")),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await
    }

    /// The Pod bridge with the node address (new: `up` has cleared or refused an existing one),
    /// and the guard that drops whatever would be forwarded out of the node's bridges.
    fn network(&self) -> Result<()> {
        run(Command::new("ip").args(["link", "add", BRIDGE, "type", "bridge"]))?;
        // The bridge names its node's folder, so that another checkout can find the record of
        // a node whose run was killed, and clear it.
        let dir = std::fs::canonicalize(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        run(Command::new("ip")
            .args(["link", "set", "dev", BRIDGE, "alias"])
            .arg(format!("{HOLDER_PREFIX}{}", dir.display())))?;
        run(Command::new("ip").args(["addr", "add", &format!("{NODE_IP}/16"), "dev", BRIDGE]))?;
        run(Command::new("ip").args(["link", "set", BRIDGE, "up"]))?;
        // A chain left by a `down` that failed is emptied and used again.
        let _ = Command::new("iptables").args(["-N", GUARD_CHAIN]).output();
        run(Command::new("iptables").args(["-F", GUARD_CHAIN]))?;
        for iface in [BRIDGE, "br-+"] {
            run(Command::new("iptables").args([
                "-A",
                GUARD_CHAIN,
                "-i",
                iface,
                "!",
                "-o",
                iface,
                "-j",
                "DROP",
            ]))?;
        }
        put_guard_first()
    }

    /// Certificates and kubeconfigs of the kubelet, kube-proxy and Multus.
    fn identities(&self, pki: &Pki, server: &str) -> Result<Identities> {
        let kubeconfig = |id: &Identity| -> Result<PathBuf> {
            pki.add_client(id)?;
            let path = self.dir.join(format!("{}.kubeconfig", id.file_stem));
            write_kubeconfig(&path, server, pki, id)?;
            Ok(path)
        };
        let (serving_cert, serving_key) =
            pki.add_serving("kubelet-serving", NODE_NAME, IpAddr::V4(NODE_IP))?;
        Ok(Identities {
            kubelet_kubeconfig: kubeconfig(&pki::KUBELET)?,
            kube_proxy_kubeconfig: kubeconfig(&pki::KUBE_PROXY)?,
            multus_kubeconfig: kubeconfig(&MULTUS)?,
            serving_cert,
            serving_key,
        })
    }

    fn write_containerd_config(&self, bin: &NodeBinaries) -> Result<PathBuf> {
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

    fn write_cni_config(&self, cni_bin: &Path, multus_kubeconfig: &Path) -> Result<()> {
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

    fn kubelet_args(&self, pki: &Pki, ids: &Identities) -> Result<Vec<String>> {
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

    fn write_kube_proxy_config(&self, kubeconfig: &Path) -> Result<PathBuf> {
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

    /// Stops everything `up` started and undoes what it changed; safe to run twice and after a
    /// failed `up`. Errors are collected, not stopped at, so that one stuck step does not
    /// leave the rest behind.
    pub fn down(&self) -> Result<()> {
        let Some(state) = self.state() else {
            return Ok(());
        };
        let mut errors = Vec::new();
        // The kubelet first, so that it restarts nothing; then every container process.
        for c in state.components.iter().rev().filter(|c| c.name == "kubelet") {
            c.stop(Duration::from_secs(10));
        }
        kill_cgroup_processes(&state.cgroups_before);
        for c in state.components.iter().rev() {
            c.stop(Duration::from_secs(10));
        }
        // containerd's shims outlive it; they are ours when they run our shim binary.
        if let Some(containerd) = state.components.iter().find(|c| c.name == "containerd") {
            let shim = containerd.binary.with_file_name("containerd-shim-runc-v2");
            kill_processes_running(&shim);
        }
        if let Some(proxy) = state.components.iter().find(|c| c.name == "kube-proxy") {
            // kube-proxy's own cleanup of its rules; the rest goes below by chain name.
            let _ = Command::new(&proxy.binary).arg("--cleanup").output();
        }
        if let Err(e) = unmount_under(&self.dir) {
            errors.push(e.to_string());
        }
        for path in &state.created_paths {
            if let Err(e) = unmount_under(path) {
                errors.push(e.to_string());
            }
        }
        remove_cgroups(&state.cgroups_before, &mut errors);
        for link in links().unwrap_or_default() {
            if is_our_link(&link)
                && !state.links_before.contains(&link)
                && let Err(e) = run(Command::new("ip").args(["link", "delete", &link]))
            {
                errors.push(e.to_string());
            }
        }
        remove_chains(&state.chains_before, &mut errors);
        if let Some(before) = &state.ip_forward_before
            && let Err(e) = std::fs::write(IP_FORWARD, format!("{before}\n"))
        {
            errors.push(format!("{IP_FORWARD}: {e}"));
        }
        for path in &state.created_paths {
            if path.exists()
                && let Err(e) = std::fs::remove_dir_all(path)
            {
                errors.push(format!("{}: {e}", path.display()));
            }
        }
        let left = leftovers(&state, &self.dir);
        errors.extend(left);
        if errors.is_empty() {
            let _ = std::fs::remove_file(self.state_file());
            Ok(())
        } else {
            Err(Error::Node(format!(
                "stopping left these behind:\n  {}",
                errors.join("\n  ")
            )))
        }
    }
}

struct Identities {
    kubelet_kubeconfig: PathBuf,
    kube_proxy_kubeconfig: PathBuf,
    multus_kubeconfig: PathBuf,
    serving_cert: PathBuf,
    serving_key: PathBuf,
}

const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// Makes the jump to the guard the first rule of FORWARD, and the only jump to it.
fn put_guard_first() -> Result<()> {
    while Command::new("iptables")
        .args(["-D", "FORWARD", "-j", GUARD_CHAIN])
        .output()
        .is_ok_and(|o| o.status.success())
    {}
    run(Command::new("iptables").args(["-I", "FORWARD", "1", "-j", GUARD_CHAIN]))?;
    Ok(())
}

/// The start of the node bridge's alias; the node's folder follows.
const HOLDER_PREFIX: &str = "sample-operator real node: ";

/// Who holds this machine's one real node, by the node bridge.
#[derive(Debug, PartialEq, Eq)]
pub enum Holder {
    /// No node bridge.
    Free,
    /// A node none of whose processes runs (its run was killed): its record can clear it.
    Stale(PathBuf),
    /// A node with processes running, from this folder.
    Live(PathBuf),
    /// A bridge with no record to clear it by: made by an older version, or its folder is gone.
    Unrecorded(Option<PathBuf>),
}

pub fn holder() -> Holder {
    let link = Path::new("/sys/class/net").join(BRIDGE);
    if !link.exists() {
        return Holder::Free;
    }
    let alias = std::fs::read_to_string(link.join("ifalias")).unwrap_or_default();
    judge_holder(&alias, |dir| {
        RealNode { dir: dir.to_owned() }
            .state()
            .map(|state| state.components.iter().any(Component::is_running))
    })
}

/// The holder named by a node bridge's `alias`; `running` says whether a node folder's record
/// has a process running (`None`: no record).
fn judge_holder(alias: &str, running: impl Fn(&Path) -> Option<bool>) -> Holder {
    let Some(dir) = alias
        .trim_end_matches('\n')
        .strip_prefix(HOLDER_PREFIX)
        .map(PathBuf::from)
    else {
        return Holder::Unrecorded(None);
    };
    match running(&dir) {
        Some(true) => Holder::Live(dir),
        Some(false) => Holder::Stale(dir),
        None => Holder::Unrecorded(Some(dir)),
    }
}

fn live_elsewhere(dir: &Path) -> String {
    format!(
        "another real node runs on this machine, from {}: stop it with `cargo xtask cluster down` \
         in that checkout (one node per machine: its bridge, address and ports are fixed)",
        dir.display()
    )
}

fn unrecorded(dir: Option<&Path>) -> String {
    let whose = match dir {
        Some(dir) => format!("made by {}, whose record is gone", dir.display()),
        None => "with no record of who made it".to_owned(),
    };
    format!(
        "the bridge {BRIDGE} exists, {whose}: nothing here can tell what else that node left; \
         remove it by hand (`ip link delete {BRIDGE}`, the `{GUARD_CHAIN}` and KUBE-* iptables \
         chains, mounts under its folder)"
    )
}

/// What keeps this machine from running a real node for the cluster in `cluster_dir`, each
/// with what to do; empty when nothing.
pub fn preflight(cluster_dir: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    let own = std::fs::canonicalize(cluster_dir.join("node")).ok();
    match holder() {
        Holder::Live(dir) if Some(&dir) != own.as_ref() => missing.push(live_elsewhere(&dir)),
        Holder::Unrecorded(dir) => missing.push(unrecorded(dir.as_deref())),
        // A stale node is cleared by `up`.
        _ => {}
    }
    if !nix::unistd::geteuid().is_root() {
        missing.push("root: containerd, the kubelet and the CNI plugins make namespaces, mounts, cgroups and links (run as root)".into());
    }
    let cgroup = Path::new("/sys/fs/cgroup");
    let v2 = cgroup.join("cgroup.controllers");
    let controllers = if v2.is_file() {
        std::fs::read_to_string(&v2).unwrap_or_default()
    } else {
        ["cpu", "memory", "pids", "cpuset"]
            .iter()
            .filter(|c| cgroup.join(c).is_dir())
            .copied()
            .collect::<Vec<_>>()
            .join(" ")
    };
    for controller in ["cpu", "memory", "pids"] {
        if !controllers.split_whitespace().any(|c| c == controller) {
            missing.push(format!("the {controller} cgroup controller under /sys/fs/cgroup"));
        }
    }
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !filesystems.contains("overlay") {
        missing.push("overlayfs in the kernel (containerd's snapshotter)".into());
    }
    for (tool, package) in [
        ("ip", "iproute2"),
        ("iptables", "iptables"),
        ("ip6tables", "iptables"),
        ("socat", "socat"),
        ("busybox", "busybox-static"),
        ("ldd", "libc-bin"),
    ] {
        if which(tool).is_none() {
            missing.push(format!("`{tool}`: install Debian's {package}"));
        }
    }
    if !Path::new("/proc/sys/net/bridge").exists() && !Path::new("/sys/module/bridge").exists() {
        missing.push("the bridge driver in the kernel (CNI's bridge plugin)".into());
    }
    missing
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["/usr/sbin".into(), "/sbin".into(), "/bin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .map_err(|e| Error::Node(format!("running {cmd:?}: {e}")))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Node(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
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

/// The apiserver runs with `--endpoint-reconciler-type=none` (a loopback address is no valid
/// endpoint), so the `kubernetes` Service gets its endpoint here: the node address, where the
/// forwarder listens.
async fn publish_apiserver_endpoint(client: &kube::Client, port: u16) -> Result<()> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes-real-node",
            "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": "local-cluster.sample-operator.local",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{ "addresses": [NODE_IP.to_string()], "conditions": { "ready": true } }],
        "ports": [{ "name": "https", "port": port, "protocol": "TCP" }],
    });
    slices
        .patch(
            "kubernetes-real-node",
            &PatchParams::apply("local-cluster").force(),
            &Patch::Apply(slice),
        )
        .await?;
    Ok(())
}

async fn apply_multus_rbac(client: &kube::Client) -> Result<()> {
    let params = PatchParams::apply("local-cluster").force();
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": { "name": "sample-operator:multus" },
        "rules": [
            { "apiGroups": ["k8s.cni.cncf.io"], "resources": ["network-attachment-definitions"], "verbs": ["get", "list", "watch"] },
            { "apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get", "update", "patch"] },
            { "apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"] },
        ],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": { "name": "sample-operator:multus" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "sample-operator:multus" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": MULTUS.user }],
    });
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    roles
        .patch("sample-operator:multus", &params, &Patch::Apply(role))
        .await?;
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    bindings
        .patch("sample-operator:multus", &params, &Patch::Apply(binding))
        .await?;
    Ok(())
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The names of the machine's network links.
fn links() -> Result<BTreeSet<String>> {
    let dir = Path::new("/sys/class/net");
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    Ok(entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect())
}

/// The node bridge, and the Network bridges the Multus backend names `br-` and 12 hex digits.
fn is_our_link(name: &str) -> bool {
    name == BRIDGE
        || name
            .strip_prefix("br-")
            .is_some_and(|h| h.len() == 12 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// iptables chains as `<command> <table> <chain>`, for the tables the kubelet and kube-proxy
/// write.
fn chains() -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for cmd in ["iptables", "ip6tables"] {
        for table in ["filter", "nat", "mangle"] {
            let Ok(out) = Command::new(cmd).args(["-t", table, "-S"]).output() else {
                continue;
            };
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if let Some(chain) = line.strip_prefix("-N ") {
                    all.insert(format!("{cmd} {table} {chain}"));
                }
            }
        }
    }
    all
}

/// Ours: the guard, and the kubelet's and kube-proxy's `KUBE-` chains.
fn is_our_chain(chain: &str) -> bool {
    chain == GUARD_CHAIN || chain.starts_with("KUBE-")
}

/// Removes the chains that are ours and were not there before: first every rule that jumps to
/// them, then their rules, then the chains.
fn remove_chains(before: &BTreeSet<String>, errors: &mut Vec<String>) {
    let new: Vec<String> = chains()
        .into_iter()
        .filter(|c| !before.contains(c))
        .filter(|c| c.rsplit(' ').next().is_some_and(is_our_chain))
        .collect();
    for entry in &new {
        let mut words = entry.splitn(3, ' ');
        let (Some(cmd), Some(table), Some(chain)) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        let Ok(out) = Command::new(cmd).args(["-t", table, "-S"]).output() else {
            continue;
        };
        for rule in String::from_utf8_lossy(&out.stdout).lines() {
            if rule.starts_with("-A ") && rule.split_whitespace().any(|w| w == chain) {
                let args: Vec<&str> = rule.split_whitespace().skip(1).collect();
                let _ = Command::new(cmd).args(["-t", table, "-D"]).args(&args).output();
            }
        }
        let _ = Command::new(cmd).args(["-t", table, "-F", chain]).output();
    }
    for entry in &new {
        let mut words = entry.splitn(3, ' ');
        let (Some(cmd), Some(table), Some(chain)) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        if let Err(e) = run(Command::new(cmd).args(["-t", table, "-X", chain])) {
            errors.push(e.to_string());
        }
    }
}

/// The cgroup folders the kubelet (`kubepods`) and containerd (`k8s.io`) make, in every
/// controller's hierarchy.
fn our_cgroups() -> BTreeSet<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut all = BTreeSet::new();
    let mut hierarchies = vec![root.to_owned()];
    if let Ok(entries) = std::fs::read_dir(root) {
        hierarchies.extend(
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.is_dir()),
        );
    }
    for hierarchy in hierarchies {
        for name in ["kubepods", "kubepods.slice", "k8s.io"] {
            let path = hierarchy.join(name);
            if path.is_dir() {
                all.insert(path);
            }
        }
    }
    all
}

/// Every folder under `root`, deepest first.
fn subdirs_deepest_first(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(root) {
        for entry in entries.filter_map(|e| e.ok()) {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(subdirs_deepest_first(&path));
            }
        }
    }
    out.push(root.to_owned());
    out
}

fn kill_cgroup_processes(before: &BTreeSet<PathBuf>) {
    for cgroup in our_cgroups().difference(before) {
        for dir in subdirs_deepest_first(cgroup) {
            for file in ["cgroup.procs", "tasks"] {
                let Ok(text) = std::fs::read_to_string(dir.join(file)) else {
                    continue;
                };
                for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
    }
    std::thread::sleep(Duration::from_millis(300));
}

fn remove_cgroups(before: &BTreeSet<PathBuf>, errors: &mut Vec<String>) {
    for cgroup in our_cgroups().difference(before) {
        for dir in subdirs_deepest_first(cgroup) {
            // A cgroup goes once its processes have; give the killed ones a moment.
            let mut result = std::fs::remove_dir(&dir);
            for _ in 0..20 {
                if result.is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
                result = std::fs::remove_dir(&dir);
            }
            if let Err(e) = result
                && dir.exists()
            {
                errors.push(format!("cgroup {}: {e}", dir.display()));
            }
        }
    }
}

/// Kills the processes whose executable is `binary`.
fn kill_processes_running(binary: &Path) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(exe) = std::fs::read_link(entry.path().join("exe")) {
            let exe = PathBuf::from(exe.to_string_lossy().trim_end_matches(" (deleted)"));
            if exe == binary {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// Mount points at or under `root`, from /proc/self/mountinfo (octal escapes decoded).
pub(crate) fn mounts_under(root: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = text
        .lines()
        .filter_map(|line| line.split_whitespace().nth(4))
        .map(|p| PathBuf::from(unescape_mountinfo(p)))
        .filter(|p| p.starts_with(root))
        .collect();
    found.sort();
    found.dedup();
    found
}

fn unescape_mountinfo(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && let Ok(code) = u8::from_str_radix(&path[i + 1..i + 4], 8)
        {
            out.push(code);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Unmounts everything at or under `root`, deepest first, lazily (a mount still in use goes
/// when its last user does).
fn unmount_under(root: &Path) -> Result<()> {
    // A mount may hide another at the same point: go round until none is left.
    for _ in 0..10 {
        let mut mounts = mounts_under(root);
        if mounts.is_empty() {
            return Ok(());
        }
        mounts.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for mount in mounts {
            let _ = nix::mount::umount2(&mount, nix::mount::MntFlags::MNT_DETACH);
        }
    }
    let left = mounts_under(root);
    if left.is_empty() {
        Ok(())
    } else {
        Err(Error::Node(format!("still mounted: {left:?}")))
    }
}

/// What `down` should have removed and did not: the test of `down` asks for none.
pub fn leftovers(state: &NodeState, node_dir: &Path) -> Vec<String> {
    let mut left = Vec::new();
    for c in &state.components {
        if c.is_running() {
            left.push(format!("process {} (pid {})", c.name, c.pid));
        }
    }
    for mount in mounts_under(node_dir) {
        left.push(format!("mount {}", mount.display()));
    }
    for link in links().unwrap_or_default() {
        if is_our_link(&link) && !state.links_before.contains(&link) {
            left.push(format!("link {link}"));
        }
    }
    for chain in chains() {
        if !state.chains_before.contains(&chain) && chain.rsplit(' ').next().is_some_and(is_our_chain) {
            left.push(format!("chain {chain}"));
        }
    }
    for cgroup in our_cgroups().difference(&state.cgroups_before) {
        left.push(format!("cgroup {}", cgroup.display()));
    }
    for path in &state.created_paths {
        if path.exists() {
            left.push(format!("path {}", path.display()));
        }
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_node_bridge_and_network_bridges_are_ours() {
        assert!(is_our_link(BRIDGE));
        assert!(is_our_link("br-0123456789ab"));
        assert!(!is_our_link("br-0123456789"));
        assert!(!is_our_link("br-lan"));
        assert!(!is_our_link("eth0"));
        assert!(!is_our_link("docker0"));
    }

    #[test]
    fn the_bridge_alias_names_the_holder() {
        let dir = Path::new("/src/other/.cluster/node");
        let alias = format!("{HOLDER_PREFIX}{}\n", dir.display());
        assert_eq!(judge_holder(&alias, |_| Some(true)), Holder::Live(dir.into()));
        assert_eq!(judge_holder(&alias, |_| Some(false)), Holder::Stale(dir.into()));
        assert_eq!(
            judge_holder(&alias, |_| None),
            Holder::Unrecorded(Some(dir.into()))
        );
        // An older version's bridge has no alias.
        assert_eq!(judge_holder("", |_| Some(false)), Holder::Unrecorded(None));
        assert_eq!(judge_holder("\n", |_| Some(false)), Holder::Unrecorded(None));
        // The record asked about is the alias's folder, spaces and all.
        let spaced = format!("{HOLDER_PREFIX}/a b/.cluster/node\n");
        assert_eq!(
            judge_holder(&spaced, |d| (d == Path::new("/a b/.cluster/node"))
                .then_some(false)),
            Holder::Stale("/a b/.cluster/node".into())
        );
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo(r"/a\040b/c"), "/a b/c");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
    }

    #[test]
    fn the_pod_network_routes_only_to_services() {
        let net = cluster_network(Path::new("/x/ipam"));
        assert_eq!(net["ipMasq"], false);
        assert_eq!(net["ipam"]["routes"], json!([{ "dst": SERVICE_CIDR }]));
        assert_eq!(net["bridge"], BRIDGE);
    }
}
