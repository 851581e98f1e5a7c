//! Integration tests against a real apiserver: the local cluster (started on demand) or, with
//! `SAMPLE_OPERATOR_TEST_CLUSTER=existing`, the current kubeconfig context.
//!
//! One test binary holds every suite, so the workspace links it once.

mod api;
mod chart;
mod cluster;
mod deploy;
mod events;
mod foo;
mod guide;
mod leader;
mod metrics;
mod monitoring;
mod my_custom_resource;
mod network;
mod neutron;
mod process;
mod rbac;
mod real_node;
mod sharding;
mod support;
mod switching;
mod transport;
