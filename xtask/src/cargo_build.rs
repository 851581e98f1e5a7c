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

/// The target the image's static binary is built for: named explicitly so that RUSTFLAGS reach
/// the operator and its libraries but not build scripts and proc macros, which cargo then builds
/// for the host without them (a proc macro cannot be static). Its output has a folder of its own.
pub const STATIC_TARGET: &str = "x86_64-unknown-linux-gnu";

/// The operator linked statically (glibc's `crt-static`), for the image: it loads no library,
/// so the image holds nothing of this host's packages. Paths of this checkout and of cargo's
/// registry are remapped, so that they are not written into the binary.
pub fn operator_static(profile: &str, quiet: bool) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = paths::repo_root();
    let mut flags = vec![
        "-C target-feature=+crt-static".to_owned(),
        format!("--remap-path-prefix={}=/src", root.display()),
    ];
    if let Some(home) = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
    {
        flags.push(format!("--remap-path-prefix={}=/cargo", home.display()));
    }
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--locked",
        "-p",
        "sample-operator",
        "--profile",
        profile,
        "--target",
        STATIC_TARGET,
    ])
    .env("RUSTFLAGS", flags.join(" "))
    .current_dir(&root);
    if quiet {
        cmd.arg("--quiet");
    }
    process::run(&mut cmd).with_context(|| format!("building the static sample-operator ({profile})"))?;
    let folder = if profile == "dev" { "debug" } else { profile };
    Ok(target_dir()
        .join(STATIC_TARGET)
        .join(folder)
        .join("sample-operator"))
}
