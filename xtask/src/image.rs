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

/// Builds (or takes) the binary, writes the image and imports it; returns it.
pub fn run(cluster: &LocalCluster, args: &ImageArgs) -> Result<image::Image> {
    let binary = match &args.binary {
        Some(b) => b.clone(),
        None => crate::cargo_build::operator_static(&args.profile, false)?,
    };
    let version = chart_app_version()?;
    let out = crate::cargo_build::target_dir().join("image");
    std::fs::create_dir_all(&out)?;
    let binary = strip_debug_info(&binary, &out)?;
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

/// A copy without debug information (a dev build's is most of its 480 MB); the symbols stay,
/// so that a panic's backtrace still names functions. binutils' output is deterministic.
fn strip_debug_info(binary: &Path, out: &Path) -> Result<PathBuf> {
    let stripped = out.join("sample-operator");
    process::run(
        Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(&stripped)
            .arg(binary),
    )
    .context("stripping the operator's debug information (Debian's binutils)")?;
    Ok(stripped)
}
