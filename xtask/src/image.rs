//! `cargo xtask image`: the operator's image from a static cargo build, without Docker. It is
//! the one definition of the image: the tests run it, and users build and push it (docs/operating.md).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use local_cluster::{LocalCluster, image, paths, process, toolchain};

#[derive(clap::Args)]
pub struct ImageArgs {
    /// The cargo profile the binary is built with.
    #[arg(long, default_value = "release")]
    pub profile: String,
    /// Use this binary instead of building one; it must be statically linked.
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// Only write the tar; do not import it into the real node.
    #[arg(long)]
    pub no_import: bool,
    /// Build the binary again (dev) from a copy of the checkout in another folder, into another
    /// target folder (kept in the tool cache), and require the same bytes.
    #[arg(long, conflicts_with = "binary")]
    pub compare_elsewhere: bool,
}

/// The tag the chart's Pods ask for when `image.tag` is empty: its appVersion.
pub fn chart_app_version() -> Result<String> {
    let path = paths::repo_root().join("deploy/helm/sample-operator/Chart.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("appVersion:"))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .with_context(|| format!("no appVersion in {}", path.display()))
}

/// The image's folder: its tar and the binary it holds.
pub fn out_dir() -> PathBuf {
    crate::cargo_build::target_dir().join("image")
}

/// Builds (or takes) the binary, writes the image and imports it; returns it.
pub fn run(cluster: &LocalCluster, args: &ImageArgs) -> Result<image::Image> {
    let binary = match &args.binary {
        Some(b) => b.clone(),
        None => crate::cargo_build::operator_static(&args.profile, false)?,
    };
    let version = chart_app_version()?;
    let out = out_dir();
    std::fs::create_dir_all(&out)?;
    let binary = strip_debug_info(&binary, &out)?;
    if args.binary.is_none() {
        // Our own build must not depend on where it ran: no folder of this machine in it.
        let bytes = std::fs::read(&binary)?;
        let folders =
            crate::cargo_build::build_paths(&paths::repo_root(), &crate::cargo_build::target_dir())?;
        let found = paths_in(&bytes, folders.iter().map(|(p, _)| p.as_path()));
        anyhow::ensure!(
            found.is_empty(),
            "the image's binary holds paths of this machine ({}): the build's path remapping misses them",
            found.join(", ")
        );
        anyhow::ensure!(
            !links_glibc(&bytes),
            "the image's binary has glibc linked in, a copy of this host's libc6-dev: it must be built for {}",
            crate::cargo_build::STATIC_TARGET
        );
    }
    if args.compare_elsewhere {
        println!("building the binary again from a copy of the checkout elsewhere");
        check_built_elsewhere(&binary, &args.profile)?;
        println!("  the same bytes: the binary depends on the source, not on where it was built");
    }
    let image = image::operator_image(&binary, &version)?;
    let path = out.join(format!("sample-operator-{version}.oci.tar"));
    std::fs::write(&path, &image.tar)?;
    println!("{} {} ({} MiB)", image.name, image.digest, image.tar.len() >> 20);
    println!("  written to {}", path.display());
    let node = cluster.node();
    if !args.no_import && node.is_running() {
        let bin = toolchain::node()?;
        node.import_image(&bin.ctr, &image)?;
        println!("  imported into the real node's containerd");
    }
    Ok(image)
}

/// Where [`run`] leaves the image's binary, stripped, in the image's folder `out`.
pub fn stripped_binary(out: &Path) -> PathBuf {
    out.join("sample-operator")
}

/// A copy without debug information (a quarter of a dev build's 110 MB); the symbols stay,
/// so that a panic's backtrace still names functions. binutils' output is deterministic. The
/// linker's build id goes too: it hashes the debug information, which may still name a folder
/// that a library's build script resolved through a symbolic link.
fn strip_debug_info(binary: &Path, out: &Path) -> Result<PathBuf> {
    let stripped = stripped_binary(out);
    process::run(
        Command::new("strip")
            .arg("--strip-debug")
            .arg("--remove-section=.note.gnu.build-id")
            .arg("-o")
            .arg(&stripped)
            .arg(binary),
    )
    .context("stripping the operator's debug information (Debian's binutils)")?;
    Ok(stripped)
}

/// Builds the image's binary again in `profile` from a copy of this checkout in another folder,
/// into another target folder, and requires the same bytes as `first`, the stripped binary
/// built from here: what the image holds depends on the source, not on where it was built. The
/// copy holds the files git tracks or would track, as they are in the working tree. Its target
/// folder stays in the tool cache (`~/.cache/sample-operator/elsewhere/target`): the
/// dependencies built there the first time are as much built elsewhere the next time, which
/// then compiles only the workspace's crates again, from the new copy.
pub fn check_built_elsewhere(first: &Path, profile: &str) -> Result<()> {
    let root = paths::repo_root();
    let scratch = paths::cache_dir().join("elsewhere");
    let (copy, target) = (scratch.join("checkout"), scratch.join("target"));
    let _ = std::fs::remove_dir_all(&copy);
    let result = (|| {
        let listed = process::output(
            Command::new("git")
                .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
                .current_dir(&root),
        )
        .context("listing the checkout's files")?;
        for file in listed.split('\0').filter(|f| !f.is_empty()) {
            let from = root.join(file);
            // Deleted in the working tree, still in git's index.
            if !from.is_file() {
                continue;
            }
            let to = copy.join(file);
            std::fs::create_dir_all(to.parent().expect("a file in a folder"))?;
            std::fs::copy(&from, &to).with_context(|| format!("copying {file}"))?;
        }
        let built = crate::cargo_build::operator_static_at(&copy, &target, profile, true)?;
        let stripped = strip_debug_info(&built, &copy)?;
        let (a, b) = (std::fs::read(first)?, std::fs::read(&stripped)?);
        let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count() + a.len().abs_diff(b.len());
        anyhow::ensure!(
            differing == 0,
            "the operator built in {} differs from the one built here in {differing} bytes",
            copy.display()
        );
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&copy);
    result
}

/// Whether a static binary has glibc in it: its start-up code reads the `GLIBC_TUNABLES`
/// variable, a name musl's never holds.
fn links_glibc(bytes: &[u8]) -> bool {
    memchr::memmem::find(bytes, b"GLIBC_TUNABLES").is_some()
}

/// Which of `paths` occur in `bytes`.
fn paths_in<'a>(bytes: &[u8], paths: impl IntoIterator<Item = &'a Path>) -> Vec<String> {
    paths
        .into_iter()
        .map(|p| p.display().to_string())
        .filter(|p| memchr::memmem::find(bytes, p.as_bytes()).is_some())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_in_names_the_folders_a_binary_holds() {
        let bytes = b"\0/cargo/registry/src/x.c\0/root/.cargo/registry/src/aws-lc/cbb.c\0";
        let paths = [Path::new("/root/.cargo"), Path::new("/work/main")];
        assert_eq!(paths_in(bytes, paths), ["/root/.cargo"]);
        assert!(paths_in(b"/cargo/registry/src/x.c", paths).is_empty());
    }

    #[test]
    fn links_glibc_tells_debians_static_busybox_from_a_musl_binary() {
        assert!(!links_glibc(b"\0../src_musl/crt\0"));
        // Debian's busybox-static, glibc linked in: the real node's test images use it.
        match std::fs::read("/bin/busybox") {
            Ok(busybox) => assert!(links_glibc(&busybox)),
            Err(e) => local_cluster::testing::skipped(
                "image::tests::links_glibc_tells_debians_static_busybox_from_a_musl_binary",
                &format!("/bin/busybox: {e}: install Debian's busybox-static"),
            ),
        }
    }
}
