//! The real node's promise to the host, checked at the end of `cargo xtask test`: after `down`
//! the host is as it was before `up` (sysctls, links, firewall rules, mounts), and what others
//! made while the node ran (a Docker-like bridge, a foreign `KUBE-` chain with a rule jumping to
//! it) is neither guarded nor removed.

use std::process::Command;

use anyhow::{Context, Result, bail};
use local_cluster::node::{FIREWALLS, GUARD_CHAIN};
use local_cluster::process;

/// Named as Docker names a user-defined network's bridge.
const FOREIGN_BRIDGE: &str = "br-f0e1d2c3b4a5";
/// A chain with kube-proxy's prefix that no kube-proxy of ours made.
const FOREIGN_CHAIN: &str = "KUBE-FOREIGN-CHECK";

fn run(cmd: &mut Command) -> Result<String> {
    Ok(process::output(cmd)?)
}

/// Objects of someone else's, made while the node runs.
pub struct Foreign;

impl Foreign {
    pub fn make() -> Result<Self> {
        run(Command::new("ip").args(["link", "add", FOREIGN_BRIDGE, "type", "bridge"]))
            .context("making the Docker-like bridge")?;
        let foreign = Foreign;
        for cmd in FIREWALLS {
            run(Command::new(cmd).args(["-N", FOREIGN_CHAIN]))?;
            run(Command::new(cmd).args(["-A", "FORWARD", "-i", FOREIGN_BRIDGE, "-j", FOREIGN_CHAIN]))?;
        }
        Ok(foreign)
    }

    /// The node's guard names only the node's own bridges: no wildcard, not the foreign one.
    pub fn check_not_guarded() -> Result<()> {
        for cmd in FIREWALLS {
            let rules = run(Command::new(cmd).args(["-S", GUARD_CHAIN]))?;
            if rules.contains(FOREIGN_BRIDGE) || rules.contains('+') {
                bail!("{cmd}: the guard matches more than the node's bridges:\n{rules}");
            }
        }
        Ok(())
    }

    /// Whether everything survived the node's `down`; removes it either way.
    pub fn check_survived_and_remove(self) -> Result<()> {
        let mut missing = Vec::new();
        if !std::path::Path::new("/sys/class/net")
            .join(FOREIGN_BRIDGE)
            .exists()
        {
            missing.push(format!("link {FOREIGN_BRIDGE}"));
        }
        for cmd in FIREWALLS {
            let forward = run(Command::new(cmd).args(["-S", "FORWARD"])).unwrap_or_default();
            if !forward.contains(&format!("-j {FOREIGN_CHAIN}")) {
                missing.push(format!("{cmd} rule FORWARD -j {FOREIGN_CHAIN}"));
            }
            if run(Command::new(cmd).args(["-S", FOREIGN_CHAIN])).is_err() {
                missing.push(format!("{cmd} chain {FOREIGN_CHAIN}"));
            }
        }
        drop(self);
        if missing.is_empty() {
            Ok(())
        } else {
            bail!(
                "the node's down removed what it did not make: {}",
                missing.join(", ")
            )
        }
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        for cmd in FIREWALLS {
            let _ = Command::new(cmd)
                .args(["-D", "FORWARD", "-i", FOREIGN_BRIDGE, "-j", FOREIGN_CHAIN])
                .output();
            let _ = Command::new(cmd).args(["-X", FOREIGN_CHAIN]).output();
        }
        let _ = Command::new("ip")
            .args(["link", "delete", FOREIGN_BRIDGE])
            .output();
    }
}
