//! Addresses that the control plane and the real node agree on.

/// Service addresses; the apiserver's certificate names the first one, and the real node's Pods
/// get a route to them (and to nothing else).
pub(crate) const SERVICE_CIDR: &str = "10.0.0.0/24";
