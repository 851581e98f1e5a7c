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
//!
//! By concern: [`lifecycle`] starts and stops it, [`preflight`] says what keeps this machine from
//! running one and who holds it, [`config`] writes the configuration of containerd, the CNI
//! plugins, the kubelet and kube-proxy, and [`host`] reads and undoes what it changed on the host.

mod config;
mod host;
mod lifecycle;
mod preflight;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::image;
use crate::process::{self, Component};
use crate::state_file::StateFile;

pub use host::leftovers;
pub(crate) use host::mounts_under;
pub use preflight::{Holder, holder, preflight};

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
