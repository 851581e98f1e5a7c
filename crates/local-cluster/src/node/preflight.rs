//! What keeps this machine from running a real node, and who holds the one it may run.

use std::path::{Path, PathBuf};

use super::{BRIDGE, GUARD_CHAIN, RealNode};
use crate::process::Component;

/// The start of the node bridge's alias; the node's folder follows.
pub(super) const HOLDER_PREFIX: &str = "sample-operator real node: ";

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

pub(super) fn live_elsewhere(dir: &Path) -> String {
    format!(
        "another real node runs on this machine, from {}: stop it with `cargo xtask cluster down` \
         in that checkout (one node per machine: its bridge, address and ports are fixed)",
        dir.display()
    )
}

pub(super) fn unrecorded(dir: Option<&Path>) -> String {
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
        ("flock", "util-linux"),
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

/// Where `tool` is: on `PATH`, or in the sbin folders a user's `PATH` may lack.
pub fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain(["/usr/sbin".into(), "/sbin".into(), "/bin".into()])
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
