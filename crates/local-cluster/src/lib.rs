//! A real Kubernetes control plane on loopback, built from Go modules.
//!
//! This machine has no container engine and downloads nothing but packages, so instead of kind
//! or a cloud cluster the project builds kube-apiserver, kube-controller-manager,
//! kube-scheduler, kubectl, etcd and kwok from pinned Go wrapper modules (`toolchain/`) and runs
//! them as plain processes. kwok plays the kubelet: it keeps fake nodes Ready and turns scheduled
//! Pods Running, so Deployments become available and garbage collection really cascades.
//!
//! [`openstack`] runs a real Keystone and neutron-server beside it, for the Neutron backend.
//! [`LocalCluster`] starts and stops it; [`testing`] gives integration tests a client, a
//! namespace of their own and a wait helper.

mod cluster;
mod error;
pub mod http;
pub mod image;
mod kubeconfig;
mod lock;
pub mod manifests;
mod network;
pub mod node;
pub mod openstack;
pub mod paths;
mod pki;
pub mod process;
mod state_file;
pub mod testing;
pub mod toolchain;
mod wait;

pub use cluster::{Etcd, LocalCluster, NODES, State, UpOptions};
pub use error::{Error, Result};
pub use process::Component;
