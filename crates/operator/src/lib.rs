//! sample-operator: the controllers of the classic Kubernetes controller tutorials, on
//! kube-rs's controller runtime.

pub mod cli;
