//! What the real node changes on the host (links, iptables chains, cgroups, mounts, host paths,
//! `ip_forward`): read before `up`, and undone by `down`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{BRIDGE, GUARD_CHAIN, NodeState, run};
use crate::error::{Error, Result};
use crate::process::executable;

/// Paths outside the node's folder that the kubelet, containerd's shims, runc or the CNI
/// plugins use whatever they are told. Those that did not exist before `up` are removed by
/// `down`.
pub(super) const HOST_PATHS: [&str; 6] = [
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/cni",
    "/run/containerd",
    "/var/run/netns",
];

pub(super) const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// Makes the jump to the guard the first rule of FORWARD, and the only jump to it.
pub(super) fn put_guard_first() -> Result<()> {
    while run(Command::new("iptables").args(["-D", "FORWARD", "-j", GUARD_CHAIN])).is_ok() {}
    run(Command::new("iptables").args(["-I", "FORWARD", "1", "-j", GUARD_CHAIN]))?;
    Ok(())
}

/// The names of the machine's network links.
pub(super) fn links() -> Result<BTreeSet<String>> {
    let dir = Path::new("/sys/class/net");
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    Ok(entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect())
}

/// The node bridge, and the Network bridges the Multus backend names `br-` and 12 hex digits.
pub(super) fn is_our_link(name: &str) -> bool {
    name == BRIDGE
        || name
            .strip_prefix("br-")
            .is_some_and(|h| h.len() == 12 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// iptables chains as `<command> <table> <chain>`, for the tables the kubelet and kube-proxy
/// write.
pub(super) fn chains() -> BTreeSet<String> {
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
pub(super) fn remove_chains(before: &BTreeSet<String>, errors: &mut Vec<String>) {
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
pub(super) fn our_cgroups() -> BTreeSet<PathBuf> {
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

pub(super) fn kill_cgroup_processes(before: &BTreeSet<PathBuf>) {
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

pub(super) fn remove_cgroups(before: &BTreeSet<PathBuf>, errors: &mut Vec<String>) {
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
pub(super) fn kill_processes_running(binary: &Path) {
    let Ok(processes) = procfs::process::all_processes() else {
        return;
    };
    for process in processes.filter_map(|p| p.ok()) {
        if executable(&process).is_some_and(|exe| exe == binary) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(process.pid),
                nix::sys::signal::Signal::SIGKILL,
            );
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
pub(super) fn unmount_under(root: &Path) -> Result<()> {
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
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo(r"/a\040b/c"), "/a b/c");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
    }
}
