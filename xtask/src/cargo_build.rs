//! Builds of our operator that the commands run: the demo's and the image's (dev or release),
//! the benchmark's (release).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};
use local_cluster::{paths, process};

/// Cargo's target folder: `CARGO_TARGET_DIR`, or `target/` at the repository root.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| paths::repo_root().join("target"))
}

/// `cargo build --locked -p sample-operator` in `profile` (`dev` or `release`), returning the
/// binary's path. `quiet` hides cargo's progress, for commands whose own output is the point.
pub fn operator(profile: &str, quiet: bool) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--locked", "-p", "sample-operator", "--profile", profile])
        .current_dir(paths::repo_root());
    if quiet {
        cmd.arg("--quiet");
    }
    process::run(&mut cmd).with_context(|| format!("building sample-operator ({profile})"))?;
    let folder = if profile == "dev" { "debug" } else { profile };
    Ok(target_dir().join(folder).join("sample-operator"))
}
