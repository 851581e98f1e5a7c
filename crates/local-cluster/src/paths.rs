//! Where the local cluster keeps its binaries and its running state.

use std::path::PathBuf;

/// The repository root, where `toolchain/` holds the Go wrapper modules.
pub fn repo_root() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

/// The Go wrapper modules that pin and build each component.
pub fn toolchain_dir() -> PathBuf {
    repo_root().join("toolchain")
}

/// Built binaries, keyed by component version. Kept outside `target/` so that `cargo clean`
/// does not throw away a build that takes minutes. `SAMPLE_OPERATOR_CACHE` overrides it.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SAMPLE_OPERATOR_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("sample-operator")
}

/// The running cluster's folder: certificates, kubeconfigs, etcd data, logs and pids.
/// `SAMPLE_OPERATOR_CLUSTER_DIR` overrides the default `.cluster/` at the repository root.
pub fn run_dir() -> PathBuf {
    match std::env::var_os("SAMPLE_OPERATOR_CLUSTER_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => repo_root().join(".cluster"),
    }
}
