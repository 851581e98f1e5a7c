//! A real node beside the kwok nodes: containerd, runc, kubelet and kube-proxy on this machine,
//! with a bridge for its Pods and Multus in front of it, so that the operator runs from its
//! image and chart and a Pod gets an interface on a Network.
//!
//! Everything it starts or changes is recorded by exact name in `<cluster>/node/state.json`
//! before it is made, so that `down` removes exactly that and nothing matched by a pattern,
//! even after a failed or interrupted `up`: processes, mounts under the node's folder, cgroups,
//! the node bridge and each Network bridge (a CNI ADD records it in `cni-bridges` before the
//! bridge plugin runs), the iptables chains, the host paths the kubelet and CNI insist on, and
//! the sysctls the kubelet needs and the bridge plugin sets. A `down` that fails keeps the
//! record, so that the next one can finish.
//!
//! Nothing leaves the machine: the Pod bridge has no uplink, Pods get no default route (only
//! one to the service range), forwarding out of the node's bridges is dropped (IPv4 and IPv6,
//! one rule per bridge by its exact name), and image pulls go to a registry mirror that does
//! not exist (`127.0.0.1:1`).
//!
//! By concern: [`lifecycle`] starts and stops it, [`preflight`] says what keeps this machine from
//! running one and who holds it, [`config`] writes the configuration of containerd, the CNI
//! plugins, the kubelet and kube-proxy, and [`host`] reads and undoes what it changed on the host.

mod config;
mod host;
mod lifecycle;
mod preflight;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::image;
use crate::process::{self, Component};
use crate::state_file::StateFile;

pub(crate) use host::mounts_under;
pub use host::{FIREWALLS, HostSnapshot, leftovers};
pub use lifecycle::clear_stale;
pub use preflight::{Holder, holder, preflight, which};

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
/// The Pod bridge's MAC address, set when it is made. A bridge whose address the kernel chose
/// takes the lowest of its ports' addresses, and so changes as Pods' veths come and go; a Pod
/// that cached the old one loses what it sends to its gateway until it asks again (CNI's own
/// `bridge` plugin pins its bridges' addresses for the same reason). Locally administered.
pub const BRIDGE_MAC: &str = "02:53:4f:4e:00:01";
pub const POD_CIDR: &str = "10.88.0.0/16";
/// The filter chain that keeps Pod traffic on the machine.
pub const GUARD_CHAIN: &str = "SAMPLE-OPERATOR-NODE";

/// What `up` recorded, for `down`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeState {
    pub components: Vec<Component>,
    /// Host paths that did not exist before, removed on `down`.
    pub created_paths: Vec<PathBuf>,
    /// The machine's links and iptables chains before `up`: what `down` must leave.
    pub links_before: BTreeSet<String>,
    pub chains_before: BTreeSet<String>,
    /// Links `up` makes, recorded before it makes them (the Network bridges are in
    /// `cni-bridges`, written by the node's CNI `bridge`).
    #[serde(default)]
    pub links_made: BTreeSet<String>,
    /// Chains as `<command> <table> <chain>`: the guard's, recorded before they are made, and
    /// those the kubelet and kube-proxy made while `up` ran.
    #[serde(default)]
    pub chains_made: BTreeSet<String>,
    /// Netfilter accounting objects before `up`, and those made while it ran (kube-proxy's
    /// counters), by name.
    #[serde(default)]
    pub accounting_before: BTreeSet<String>,
    #[serde(default)]
    pub accounting_made: BTreeSet<String>,
    /// The sysctls the node sets or lets its processes set (`/proc/sys` paths), with their
    /// values before `up`, restored by `down`.
    #[serde(default)]
    pub sysctls_before: BTreeMap<String, String>,
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

    fn state_file(&self) -> StateFile<NodeState> {
        StateFile::in_dir(&self.dir, "node state")
    }

    pub fn state(&self) -> Option<NodeState> {
        self.state_file().load()
    }

    fn save(&self, state: &NodeState) -> Result<()> {
        self.state_file().save(state)
    }

    pub fn containerd_socket(&self) -> PathBuf {
        self.dir.join("containerd/containerd.sock")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    /// The Network bridges the node's CNI `bridge` recorded before making them, one a line.
    fn cni_bridges_file(&self) -> PathBuf {
        self.dir.join("cni-bridges")
    }

    /// Every link this node made or may have made, by exact name.
    pub fn links_made(&self, state: &NodeState) -> BTreeSet<String> {
        let recorded = std::fs::read_to_string(self.cni_bridges_file()).unwrap_or_default();
        state
            .links_made
            .iter()
            .cloned()
            .chain(
                recorded
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned),
            )
            .collect()
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
}

/// Runs a host command (`ip`, `iptables`, `ctr`); its failure is the node's.
fn run(cmd: &mut Command) -> Result<String> {
    process::output(cmd).map_err(|e| Error::Node(e.to_string()))
}
