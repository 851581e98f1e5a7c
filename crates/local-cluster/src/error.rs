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

    /// Whether a component died because another program held its port: etcd, kube-apiserver
    /// and the controllers say so in Go's words when they cannot listen, gunicorn (Keystone,
    /// neutron-server) in its own.
    pub fn port_taken(&self) -> bool {
        matches!(self, Error::ComponentDied { tail, .. }
            if tail.contains("bind: address already in use") || tail.contains("Connection in use"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn died(tail: &str) -> Error {
        Error::ComponentDied {
            component: "etcd".into(),
            log: "etcd.log".into(),
            tail: tail.into(),
        }
    }

    #[test]
    fn a_component_that_could_not_bind_its_port_lost_a_race_for_it() {
        // etcd's last line when its client port was taken, as CI saw it.
        let etcd = r#"{"level":"fatal","msg":"discovery failed","error":"listen tcp 127.0.0.1:38967: bind: address already in use"}"#;
        assert!(died(etcd).port_taken());
        let apiserver = "E1130 failed to create listener: failed to listen on 127.0.0.1:6443: \
                         listen tcp 127.0.0.1:6443: bind: address already in use";
        assert!(died(apiserver).port_taken());
        // gunicorn's, before it gives up (Keystone and neutron-server run in it).
        let gunicorn = "[2026-11-30 15:40:01 +0000] [4242] [ERROR] Connection in use: ('127.0.0.1', 43117)\n\
                        [2026-11-30 15:40:01 +0000] [4242] [ERROR] Can't connect to ('127.0.0.1', 43117)";
        assert!(died(gunicorn).port_taken());
    }

    #[test]
    fn other_deaths_and_errors_are_not_a_port_race() {
        assert!(!died("etcdmain: open /etc/etcd/server.crt: no such file or directory").port_taken());
        let timeout = Error::Timeout {
            what: "etcd to answer /health".into(),
            seconds: 30,
            last_seen: "bind: address already in use".into(),
        };
        assert!(
            !timeout.port_taken(),
            "only a component that exited lost its port"
        );
    }
}
