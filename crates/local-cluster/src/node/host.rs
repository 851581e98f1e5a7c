//! What the real node changes on the host (links, iptables chains, cgroups, mounts, host paths,
//! sysctls): recorded by name before `up` changes it, and undone by `down`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::preflight::which;
use super::{GUARD_CHAIN, NodeState, RealNode, run};
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

/// The sysctls the node changes, as `/proc/sys` paths with the value it needs (`None`: one of
/// its processes may set it, and it is only recorded). The kubelet runs with
/// `protectKernelDefaults`, so it checks its six instead of writing them; the bridge plugin
/// turns forwarding on for a gateway bridge. kube-proxy is told to leave conntrack alone.
pub(super) const SYSCTLS: [(&str, Option<&str>); 8] = [
    ("vm/overcommit_memory", Some("1")),
    ("vm/panic_on_oom", Some("0")),
    ("kernel/panic", Some("10")),
    ("kernel/panic_on_oops", Some("1")),
    ("kernel/keys/root_maxkeys", Some("1000000")),
    ("kernel/keys/root_maxbytes", Some("25000000")),
    ("net/ipv4/ip_forward", None),
    ("net/ipv6/conf/all/forwarding", None),
];

fn sysctl_path(key: &str) -> PathBuf {
    Path::new("/proc/sys").join(key)
}

pub(super) fn read_sysctl(key: &str) -> Option<String> {
    std::fs::read_to_string(sysctl_path(key))
        .ok()
        .map(|v| v.trim().to_owned())
}

pub(super) fn write_sysctl(key: &str, value: &str) -> Result<()> {
    let path = sysctl_path(key);
    std::fs::write(&path, format!("{value}\n")).map_err(|e| Error::io(&path, e))
}

/// Sets back every recorded sysctl that differs from its value before `up`.
pub(super) fn restore_sysctls(before: &BTreeMap<String, String>, errors: &mut Vec<String>) {
    for (key, value) in before {
        if read_sysctl(key).as_deref() != Some(value.as_str())
            && let Err(e) = write_sysctl(key, value)
        {
            errors.push(e.to_string());
        }
    }
}

/// The firewall tools the guard is in: the same rules for IPv4 and IPv6.
pub const FIREWALLS: [&str; 2] = ["iptables", "ip6tables"];

/// The guard chain's entry in [`chains`] for each firewall.
pub(super) fn guard_chains() -> impl Iterator<Item = String> {
    FIREWALLS.iter().map(|cmd| format!("{cmd} filter {GUARD_CHAIN}"))
}

/// The guard's rule for one bridge: whatever comes in on it and would leave by another
/// interface is dropped.
pub(super) fn guard_rule(bridge: &str) -> [&str; 7] {
    ["-i", bridge, "!", "-o", bridge, "-j", "DROP"]
}

/// Makes the jump to the guard the first rule of FORWARD, and the only jump to it.
pub(super) fn put_guard_first() -> Result<()> {
    for cmd in FIREWALLS {
        while run(Command::new(cmd).args(["-D", "FORWARD", "-j", GUARD_CHAIN])).is_ok() {}
        run(Command::new(cmd).args(["-I", "FORWARD", "1", "-j", GUARD_CHAIN]))?;
    }
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

/// iptables chains as `<command> <table> <chain>`, for the tables the kubelet and kube-proxy
/// write.
pub(super) fn chains() -> BTreeSet<String> {
    let mut all = BTreeSet::new();
    for cmd in FIREWALLS {
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

/// The netfilter accounting objects (kube-proxy makes two for its metrics), by name. Only
/// Debian's `nfacct` lists them here: without it the set is empty, and they are neither
/// recorded nor removed.
pub(super) fn accounting_objects() -> BTreeSet<String> {
    let Some(tool) = which("nfacct") else {
        return BTreeSet::new();
    };
    let Ok(out) = Command::new(tool).arg("list").output() else {
        return BTreeSet::new();
    };
    parse_accounting(&String::from_utf8_lossy(&out.stdout))
}

/// Names from `nfacct list`'s `{ pkts = …, bytes = … } = <name>;` lines.
fn parse_accounting(list: &str) -> BTreeSet<String> {
    list.lines()
        .filter_map(|line| line.rsplit_once("} = "))
        .map(|(_, name)| name.trim().trim_end_matches(';').to_owned())
        .collect()
}

/// Deletes the accounting objects in `made` that exist now and did not before `up`; once the
/// rules that count into them are gone.
pub(super) fn remove_accounting(
    made: &BTreeSet<String>,
    before: &BTreeSet<String>,
    errors: &mut Vec<String>,
) {
    let present = accounting_objects();
    for name in made
        .iter()
        .filter(|n| present.contains(*n) && !before.contains(*n))
    {
        if let Some(tool) = which("nfacct")
            && let Err(e) = run(Command::new(tool).args(["delete", name]))
        {
            errors.push(e.to_string());
        }
    }
}

/// kube-proxy's per-Service chains, made after `up` and removed by `kube-proxy --cleanup`:
/// named here only to report any it left.
fn is_kube_proxy_service_chain(chain: &str) -> bool {
    ["KUBE-SVC-", "KUBE-SVL-", "KUBE-SEP-", "KUBE-EXT-", "KUBE-FW-"]
        .iter()
        .any(|prefix| chain.starts_with(prefix))
}

/// Removes the chains in `made` that exist now and did not before `up`: first every rule that
/// jumps to one of them, then their rules, then the chains.
pub(super) fn remove_chains(made: &BTreeSet<String>, before: &BTreeSet<String>, errors: &mut Vec<String>) {
    let present = chains();
    let ours: Vec<(&str, &str, &str)> = made
        .iter()
        .filter(|c| present.contains(*c) && !before.contains(*c))
        .filter_map(|entry| {
            let mut words = entry.splitn(3, ' ');
            Some((words.next()?, words.next()?, words.next()?))
        })
        .collect();
    for (cmd, table, chain) in &ours {
        let Ok(out) = Command::new(cmd).args(["-t", table, "-S"]).output() else {
            continue;
        };
        for rule in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(args) = jump_to(rule, chain) {
                let _ = Command::new(cmd).args(["-t", table, "-D"]).args(&args).output();
            }
        }
        let _ = Command::new(cmd).args(["-t", table, "-F", chain]).output();
    }
    for (cmd, table, chain) in &ours {
        if let Err(e) = run(Command::new(cmd).args(["-t", table, "-X", chain])) {
            errors.push(e.to_string());
        }
    }
}

/// The arguments that delete `rule`, a line of `iptables -S`, when it jumps (or goes) to
/// `chain`: its words after `-A`, split as the shell would, since iptables quotes a comment with
/// spaces (kube-proxy's jumps all carry one) and escapes quotes in it.
fn jump_to(rule: &str, chain: &str) -> Option<Vec<String>> {
    let args = shlex::split(rule.strip_prefix("-A ")?)?;
    let target = args
        .windows(2)
        .find(|pair| pair[0] == "-j" || pair[0] == "-g")
        .map(|pair| pair[1].as_str());
    (target == Some(chain)).then_some(args)
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
pub fn leftovers(state: &NodeState, node: &RealNode) -> Vec<String> {
    let mut left = Vec::new();
    for c in &state.components {
        if c.is_running() {
            left.push(format!("process {} (pid {})", c.name, c.pid));
        }
    }
    for mount in mounts_under(node.dir()) {
        left.push(format!("mount {}", mount.display()));
    }
    let made = node.links_made(state);
    for link in links().unwrap_or_default() {
        if made.contains(&link) && !state.links_before.contains(&link) {
            left.push(format!("link {link}"));
        }
    }
    for chain in chains() {
        let ours = state.chains_made.contains(&chain)
            || chain.rsplit(' ').next().is_some_and(is_kube_proxy_service_chain);
        if ours && !state.chains_before.contains(&chain) {
            left.push(format!("chain {chain}"));
        }
    }
    let accounting = accounting_objects();
    for name in state.accounting_made.difference(&state.accounting_before) {
        if accounting.contains(name) {
            left.push(format!("netfilter accounting object {name}"));
        }
    }
    for (key, value) in &state.sysctls_before {
        let now = read_sysctl(key);
        if now.as_deref() != Some(value.as_str()) {
            left.push(format!("sysctl {key} = {now:?}, was {value}"));
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

/// What the host looks like where a real node could change it: every writable sysctl, the
/// links, both firewalls' rules and chains in every table, and the mounts. Taken before `up`
/// and after `down`, the two must be equal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostSnapshot {
    pub sysctls: BTreeMap<String, String>,
    pub links: BTreeSet<String>,
    /// `<command> <table>` → its `-S` lines (chains, policies and rules, no counters).
    pub firewall: BTreeMap<String, Vec<String>>,
    /// Mount point, root, type and source of each mount (ids left out: they change).
    pub mounts: BTreeSet<String>,
    /// Netfilter accounting objects, where `nfacct` can list them.
    pub accounting: BTreeSet<String>,
}

/// Sysctls that change by themselves: the last pid, and the TCP Fast Open key, which the kernel
/// generates the first time any program on the host uses Fast Open (a fresh machine's first
/// run met it) and which, being a key, stays out of the check's messages too.
const VOLATILE_SYSCTLS: [&str; 2] = ["kernel/ns_last_pid", "net/ipv4/tcp_fastopen_key"];

impl HostSnapshot {
    pub fn take() -> Result<Self> {
        let mut sysctls = BTreeMap::new();
        collect_sysctls(Path::new("/proc/sys"), &mut sysctls);
        for key in VOLATILE_SYSCTLS {
            sysctls.remove(key);
        }
        let mut firewall = BTreeMap::new();
        for cmd in FIREWALLS {
            for table in ["filter", "nat", "mangle", "raw"] {
                let out = run(Command::new(cmd).args(["-t", table, "-S"]))?;
                firewall.insert(format!("{cmd} {table}"), out.lines().map(str::to_owned).collect());
            }
        }
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| Error::io(Path::new("/proc/self/mountinfo"), e))?;
        let mounts = mountinfo
            .lines()
            .filter_map(|line| {
                let fields: Vec<&str> = line.split_whitespace().collect();
                let dash = fields.iter().position(|f| *f == "-")?;
                Some(format!(
                    "{} (root {}, {} from {})",
                    fields.get(4)?,
                    fields.get(3)?,
                    fields.get(dash + 1)?,
                    fields.get(dash + 2)?
                ))
            })
            .collect();
        Ok(Self {
            sysctls,
            links: links()?,
            firewall,
            mounts,
            accounting: accounting_objects(),
        })
    }

    /// How `after` differs from this snapshot, one line a difference; empty when equal.
    pub fn differences(&self, after: &Self) -> Vec<String> {
        let mut out = Vec::new();
        for (key, before) in &self.sysctls {
            match after.sysctls.get(key) {
                Some(now) if now == before => {}
                now => out.push(format!("sysctl {key}: {before:?} before, {now:?} after")),
            }
        }
        for key in after.sysctls.keys().filter(|k| !self.sysctls.contains_key(*k)) {
            out.push(format!("sysctl {key}: new"));
        }
        set_differences("link", &self.links, &after.links, &mut out);
        set_differences("mount", &self.mounts, &after.mounts, &mut out);
        set_differences("accounting object", &self.accounting, &after.accounting, &mut out);
        for (table, before) in &self.firewall {
            let now = after.firewall.get(table).cloned().unwrap_or_default();
            if &now != before {
                let before_set: BTreeSet<String> = before.iter().cloned().collect();
                let now_set: BTreeSet<String> = now.iter().cloned().collect();
                set_differences(table, &before_set, &now_set, &mut out);
                if before_set == now_set {
                    out.push(format!("{table}: the same rules in another order"));
                }
            }
        }
        out
    }
}

fn set_differences(what: &str, before: &BTreeSet<String>, after: &BTreeSet<String>, out: &mut Vec<String>) {
    for gone in before.difference(after) {
        out.push(format!("{what} gone: {gone}"));
    }
    for new in after.difference(before) {
        out.push(format!("{what} new: {new}"));
    }
}

/// The writable sysctls under `dir`, keyed by their path under /proc/sys.
fn collect_sysctls(dir: &Path, out: &mut BTreeMap<String, String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            collect_sysctls(&path, out);
            continue;
        }
        let writable = entry
            .metadata()
            .is_ok_and(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o200 != 0);
        if let (true, Ok(value), Ok(key)) = (
            writable,
            std::fs::read_to_string(&path),
            path.strip_prefix("/proc/sys"),
        ) {
            out.insert(key.display().to_string(), value.trim().to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jump_is_deleted_by_its_words_with_its_quoted_comment_whole() {
        // As `iptables -S` printed kube-proxy's jumps on this project's machine.
        let rule = r#"-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL"#;
        assert_eq!(
            jump_to(rule, "KUBE-PROXY-FIREWALL").unwrap(),
            [
                "INPUT",
                "-m",
                "conntrack",
                "--ctstate",
                "NEW",
                "-m",
                "comment",
                "--comment",
                "kubernetes load balancer firewall",
                "-j",
                "KUBE-PROXY-FIREWALL"
            ]
        );
        // Only a jump to that chain, not one naming it elsewhere, nor a chain's own rules.
        assert_eq!(jump_to(rule, "KUBE-SERVICES"), None);
        let named = r#"-A FORWARD -m comment --comment "-j KUBE-FORWARD" -j ACCEPT"#;
        assert_eq!(jump_to(named, "KUBE-FORWARD"), None);
        assert_eq!(jump_to("-N KUBE-FORWARD", "KUBE-FORWARD"), None);
        let goto = jump_to("-A FORWARD -i br0 -g KUBE-FORWARD", "KUBE-FORWARD").unwrap();
        assert_eq!(goto, ["FORWARD", "-i", "br0", "-g", "KUBE-FORWARD"]);
        // iptables escapes a quote inside a quoted comment.
        let quoted = r#"-A FORWARD -m comment --comment "say \"hi\"" -j KUBE-FORWARD"#;
        assert_eq!(jump_to(quoted, "KUBE-FORWARD").unwrap()[4], r#"say "hi""#);
    }

    /// The fallback of `down` when kube-proxy's own cleanup did not run (it was stopped before
    /// it made its nat chains): a jump with a comment, to a chain the node made, is deleted and
    /// the chain with it. Works on two chains of its own, which no built-in chain jumps to.
    #[test]
    fn a_chain_the_node_made_goes_with_the_commented_jumps_to_it() {
        const TEST: &str = "a_chain_the_node_made_goes_with_the_commented_jumps_to_it";
        if !nix::unistd::geteuid().is_root() || which("iptables").is_none() {
            crate::testing::skipped(TEST, "changing the firewall needs root and iptables");
            return;
        }
        let (from, to) = (
            format!("SOTEST-{}-FROM", std::process::id()),
            format!("SOTEST-{}-TO", std::process::id()),
        );
        let iptables = |args: &[&str]| run(Command::new("iptables").args(["-t", "filter"]).args(args));
        iptables(&["-N", &from]).unwrap();
        iptables(&["-N", &to]).unwrap();
        let comment = r#"a "quoted" comment"#;
        iptables(&["-A", &from, "-m", "comment", "--comment", comment, "-j", &to]).unwrap();
        let mut errors = Vec::new();
        remove_chains(
            &[format!("iptables filter {to}")].into(),
            &BTreeSet::new(),
            &mut errors,
        );
        let left = Command::new("iptables")
            .args(["-t", "filter", "-S", &from])
            .output();
        let _ = iptables(&["-F", &from]);
        let _ = iptables(&["-X", &from]);
        let _ = iptables(&["-X", &to]);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(!chains().contains(&format!("iptables filter {to}")));
        assert_eq!(
            String::from_utf8_lossy(&left.unwrap().stdout).trim(),
            format!("-N {from}")
        );
    }

    #[test]
    fn only_kube_proxys_service_chains_are_reported_by_their_prefix() {
        assert!(is_kube_proxy_service_chain("KUBE-SVC-ABCDEF"));
        assert!(is_kube_proxy_service_chain("KUBE-SEP-ABCDEF"));
        assert!(!is_kube_proxy_service_chain("KUBE-FOREIGN"));
        assert!(!is_kube_proxy_service_chain("KUBE-SERVICES"));
    }

    #[test]
    fn snapshots_name_each_difference() {
        let before = HostSnapshot {
            sysctls: [("net/ipv4/ip_forward".to_owned(), "0".to_owned())].into(),
            links: ["eth0".to_owned()].into(),
            firewall: [("iptables filter".to_owned(), vec!["-P FORWARD ACCEPT".to_owned()])].into(),
            mounts: ["/ (root /, ext4 from /dev/vda)".to_owned()].into(),
            accounting: BTreeSet::new(),
        };
        assert!(before.differences(&before.clone()).is_empty());
        let mut after = before.clone();
        after.sysctls.insert("net/ipv4/ip_forward".into(), "1".into());
        after.links.insert("sonode0".into());
        after
            .firewall
            .get_mut("iptables filter")
            .unwrap()
            .push("-N KUBE-FORWARD".into());
        assert_eq!(
            before.differences(&after),
            vec![
                r#"sysctl net/ipv4/ip_forward: "0" before, Some("1") after"#.to_owned(),
                "link new: sonode0".to_owned(),
                "iptables filter new: -N KUBE-FORWARD".to_owned(),
            ]
        );
    }

    #[test]
    fn accounting_objects_are_named_as_nfacct_lists_them() {
        let list = "{ pkts = 00000000000000000000, bytes = 00000000000000000000 } = ct_state_invalid_dropped_pkts;\n\
                    { pkts = 00000000000000000012, bytes = 00000000000000000960 } = localhost_nps_accepted_pkts;\n";
        assert_eq!(
            parse_accounting(list),
            ["ct_state_invalid_dropped_pkts", "localhost_nps_accepted_pkts"]
                .map(String::from)
                .into()
        );
        assert!(parse_accounting("").is_empty());
    }

    #[test]
    fn mountinfo_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo(r"/a\040b/c"), "/a b/c");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
    }
}
