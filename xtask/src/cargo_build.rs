//! Builds of our operator that the commands run: the static one the demo runs on this host and
//! the image holds (dev or release), the benchmark's (release, for this host).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use local_cluster::{paths, process};

/// Cargo's target folder: `CARGO_TARGET_DIR`, or `target/` at the repository root.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| paths::repo_root().join("target"))
}

fn rustc() -> String {
    std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into())
}

/// The Rust toolchain's folder, where rustup puts its components and targets.
fn sysroot() -> Result<PathBuf> {
    let out = process::output(Command::new(rustc()).args(["--print", "sysroot"]))
        .context("asking rustc for its sysroot")?;
    Ok(PathBuf::from(out.trim()))
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

/// The folders of this machine a build of the checkout `root` into `target` reads from or
/// writes to, with what the image's build writes in their place: the checkout, cargo's home, the
/// standard library's source where rustup installed it (`rust-src`, which rustc would otherwise
/// name in panic locations instead of its usual `/rustc/<commit>`) and the target folder. The
/// last match wins in rustc and in gcc, so the target folder (often inside the checkout) comes
/// after the checkout.
pub fn build_paths(root: &Path, target: &Path) -> Result<Vec<(PathBuf, String)>> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let version =
        process::output(Command::new(rustc()).arg("-vV")).context("asking rustc for its version")?;
    let commit = version
        .lines()
        .find_map(|l| l.strip_prefix("commit-hash: "))
        .context("no commit-hash in rustc -vV")?;
    let mut paths = vec![(root.to_owned(), "/src".to_owned())];
    paths.extend(home.map(|home| (home, "/cargo".to_owned())));
    paths.push((
        sysroot()?.join("lib/rustlib/src/rust"),
        format!("/rustc/{commit}"),
    ));
    paths.push((target.to_owned(), "/target".to_owned()));
    Ok(paths)
}

/// The target the image's static binary is built for: musl, whose resolver reads `/etc/hosts`
/// and `/etc/resolv.conf` itself (no NSS modules to load), and whose libc, start files and
/// unwinder come with the Rust toolchain's target rather than from this host's packages. Named
/// explicitly, RUSTFLAGS reach the operator and its libraries but not build scripts and proc
/// macros, which cargo then builds for the host without them. Its output has a folder of its own.
pub const STATIC_TARGET: &str = "x86_64-unknown-linux-musl";

/// The C compiler the `cc` crate looks for to compile aws-lc's, ring's and jemalloc's C for
/// [`STATIC_TARGET`]: Debian's musl-tools wraps gcc with musl's headers.
pub const STATIC_C_COMPILER: &str = "x86_64-linux-musl-gcc";

/// The operator linked statically against musl, for the image: it loads no library, and links
/// none of this host's (libc, start files and unwinder come from the Rust toolchain's musl
/// target). Paths of this checkout, of cargo's registry and of the target folder are remapped,
/// in Rust and in the C the libraries compile (aws-lc's `__FILE__`s), so that the binary does
/// not depend on where they are.
pub fn operator_static(profile: &str, quiet: bool) -> Result<PathBuf> {
    operator_static_at(&paths::repo_root(), &target_dir(), profile, quiet)
}

/// [`operator_static`] of the checkout `root` into the target folder `target`.
pub fn operator_static_at(root: &Path, target: &Path, profile: &str, quiet: bool) -> Result<PathBuf> {
    check_static_toolchain()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // Both are musl's defaults with rustc's own linker driver; said here so that a linker
    // setting elsewhere cannot swap in a host libc.
    let mut flags = vec![
        "-C target-feature=+crt-static".to_owned(),
        "-C link-self-contained=yes".to_owned(),
    ];
    let mut c_flags = Vec::new();
    for (path, to) in &build_paths(root, target)? {
        flags.push(format!("--remap-path-prefix={}={to}", path.display()));
        c_flags.push(format!("-ffile-prefix-map={}={to}", path.display()));
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
    .env(
        format!("CC_{}", STATIC_TARGET.replace('-', "_")),
        STATIC_C_COMPILER,
    )
    // The cc crate adds these to the C flags of this target only.
    .env(
        format!("CFLAGS_{}", STATIC_TARGET.replace('-', "_")),
        c_flags.join(" "),
    )
    .env("CARGO_TARGET_DIR", target)
    // An incremental build's code depends on the builds before it, a fresh one's only on the
    // source: the image is built afresh (the dev profile is incremental by default).
    .env("CARGO_INCREMENTAL", "0")
    .current_dir(root);
    if quiet {
        cmd.arg("--quiet");
    }
    process::run(&mut cmd).with_context(|| format!("building the static sample-operator ({profile})"))?;
    let folder = if profile == "dev" { "debug" } else { profile };
    Ok(target.join(STATIC_TARGET).join(folder).join("sample-operator"))
}

/// The static build's two needs this machine may lack, each with what installs it, before cargo
/// fails on them with less to go on.
fn check_static_toolchain() -> Result<()> {
    let std = sysroot()?.join("lib/rustlib").join(STATIC_TARGET);
    anyhow::ensure!(
        std.is_dir(),
        "the image's binary is built for {STATIC_TARGET}, which this Rust toolchain lacks ({} is missing): \
         run `rustup target add {STATIC_TARGET}`",
        std.display()
    );
    anyhow::ensure!(
        local_cluster::node::which(STATIC_C_COMPILER).is_some(),
        "the image's binary is built for {STATIC_TARGET}, and its C parts (aws-lc, ring, jemalloc) \
         need a musl C compiler, {STATIC_C_COMPILER}, which is not on PATH: install Debian's musl-tools"
    );
    Ok(())
}
