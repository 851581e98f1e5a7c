//! Errors of the local cluster, each saying what to look at.

use std::path::{Path, PathBuf};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("building {component}: {message}")]
    Toolchain { component: String, message: String },

    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },

    #[error("generating certificates: {0}")]
    Pki(#[from] rcgen::Error),

    #[error("{component} exited; last lines of {log}:\n{tail}")]
    ComponentDied {
        component: String,
        log: PathBuf,
        tail: String,
    },

    #[error("timed out after {seconds}s waiting for {what}; last seen: {last_seen}")]
    Timeout {
        what: String,
        seconds: u64,
        last_seen: String,
    },

    #[error("restarting {component}: {message}")]
    Restart { component: String, message: String },

    #[error("no local cluster is running (start one with `cargo xtask cluster up`)")]
    NotRunning,

    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),

    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),

    #[error("container image: {0}")]
    Image(String),

    #[error("a real node cannot run on this machine:\n  - {}", .0.join("\n  - "))]
    Preflight(Vec<String>),

    #[error("real node: {0}")]
    Node(String),

    #[error("GET {url}: {message}")]
    Http { url: String, message: String },

    #[error("encoding {what}: {message}")]
    Encode { what: String, message: String },
}

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_owned(),
            source,
        }
    }
}
