//! `Network` (`samplecrd.k8s.io/v1`): an IP network that the operator syncs to a network backend.

use std::net::IpAddr;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::Condition;
use crate::ip::{IpFamily, IpPrefix, parse_ip};

/// The spec of a Network, as in the seeds: an IP prefix and a gateway inside it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[kube(
    group = "samplecrd.k8s.io",
    version = "v1",
    kind = "Network",
    plural = "networks",
    namespaced,
    status = "NetworkStatus",
    derive = "PartialEq",
    shortname = "net",
    category = "sample-operator",
    annotation(
        "api-approved.kubernetes.io",
        "unapproved, sample-operator keeps the group of kubernetes/sample-controller for compatibility"
    ),
    doc = "An IP network (prefix and gateway) that the operator syncs to a network backend.",
    printcolumn(name = "CIDR", type_ = "string", json_path = ".spec.cidr"),
    printcolumn(name = "Gateway", type_ = "string", json_path = ".spec.gateway"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].reason",
        priority = 1
    ),
    printcolumn(name = "Family", type_ = "string", json_path = ".status.family", priority = 1),
    printcolumn(
        name = "Backend",
        type_ = "string",
        json_path = ".status.backend.provider",
        priority = 1
    ),
    printcolumn(
        name = "Backend ID",
        type_ = "string",
        json_path = ".status.backend.id",
        priority = 1
    ),
    printcolumn(
        name = "Subnet ID",
        type_ = "string",
        json_path = ".status.backend.subnetId",
        priority = 1
    ),
    printcolumn(
        name = "Usable",
        type_ = "string",
        json_path = ".status.usableAddresses",
        priority = 1
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
// Rules across fields run only once each field is valid on its own, so a bad cidr is reported
// once, on the cidr, and not again as a gateway outside it.
#[x_kube(validation = kube::core::Rule::new(
    "!isCIDR(self.cidr) || !isIP(self.gateway) || \
     (ip(self.gateway).family() == cidr(self.cidr).ip().family() && cidr(self.cidr).containsIP(self.gateway))"
).message("gateway must be an address of the same IP family inside cidr").field_path(".gateway"))]
pub struct NetworkSpec {
    /// The network's IP prefix in CIDR notation, IPv4 (`192.168.0.0/16`) or IPv6 (`fd00::/64`).
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = kube::core::Rule::new("isCIDR(self)")
        .message("cidr must be an IPv4 or IPv6 prefix in CIDR notation, such as 192.168.0.0/16"))]
    pub cidr: String,
    /// The gateway's IP address; it must lie inside `cidr` and be of the same family.
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = kube::core::Rule::new("isIP(self)")
        .message("gateway must be an IPv4 or IPv6 address, such as 192.168.0.1"))]
    pub gateway: String,
}

/// What the operator last observed and did for a Network.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `spec.cidr` in canonical form: the network address, host bits cleared, and the length
    /// (`192.168.0.1/16` is `192.168.0.0/16`). Unset while the spec is invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The address family of the prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<IpFamily>,
    /// How many addresses of the prefix hosts can use, the gateway's included: IPv4 leaves out
    /// the network and broadcast addresses (a /31 has 2, a /32 has 1), IPv6 the Subnet-Router
    /// anycast address (a /127 has 2, a /128 has 1). A decimal string, because an IPv6 prefix
    /// holds up to 2^128 - 1: more than the int64 of a schema integer, and more than the 2^53
    /// that JSON numbers carry exactly in many clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usable_addresses: Option<String>,
    /// Where the network lives in the backend, while it is synced there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendReference>,
    /// Conditions of the Network; `Ready` says whether it is synced to the backend.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = kube::core::ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// A Network's identity in the backend that holds it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackendReference {
    /// The backend: `multus` (a NetworkAttachmentDefinition in the Network's namespace) or
    /// `neutron` (an OpenStack Neutron network with one subnet).
    pub provider: String,
    /// The backend's identifier of the network: for `multus`, the NetworkAttachmentDefinition's
    /// name; for `neutron`, the Neutron network's id.
    pub id: String,
    /// For `neutron`, the id of the network's subnet, which holds the prefix and the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
}

/// What a valid spec means: the prefix in canonical form and the gateway inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addressing {
    pub prefix: IpPrefix,
    pub gateway: IpAddr,
}

/// Longest `spec.cidr` and `spec.gateway`, as the schema has it.
pub const MAX_FIELD_LENGTH: usize = 64;

impl Network {
    /// The checks of the schema, in Rust: a Network stored before the schema had them (or
    /// written while validation was off) is reported rather than acted on. The message names
    /// the field. A valid spec comes back parsed.
    pub fn validate(&self) -> Result<Addressing, String> {
        let NetworkSpec { cidr, gateway } = &self.spec;
        for (field, value) in [("spec.cidr", cidr), ("spec.gateway", gateway)] {
            let length = value.chars().count();
            if !(1..=MAX_FIELD_LENGTH).contains(&length) {
                return Err(format!(
                    "{field}: must be from 1 to {MAX_FIELD_LENGTH} characters long, it has {length}"
                ));
            }
        }
        let prefix = IpPrefix::parse(cidr).ok_or_else(|| {
            format!(
                "spec.cidr: {cidr:?} is not an IPv4 or IPv6 prefix in CIDR notation, such as 192.168.0.0/16"
            )
        })?;
        let gateway_ip = parse_ip(gateway).ok_or_else(|| {
            format!("spec.gateway: {gateway:?} is not an IPv4 or IPv6 address, such as 192.168.0.1")
        })?;
        if !prefix.contains(gateway_ip) {
            return Err(format!(
                "spec.gateway: {gateway:?} is not an {} address inside cidr {prefix}",
                prefix.family()
            ));
        }
        Ok(Addressing {
            prefix,
            gateway: gateway_ip,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn network(cidr: &str, gateway: &str) -> Network {
        Network::new(
            "n",
            NetworkSpec {
                cidr: cidr.into(),
                gateway: gateway.into(),
            },
        )
    }

    #[test]
    fn accepts_what_the_schema_accepts() {
        for (cidr, gateway, prefix) in [
            ("192.168.0.0/16", "192.168.0.1", "192.168.0.0/16"),
            ("192.168.0.1/16", "192.168.0.1", "192.168.0.0/16"),
            ("10.0.0.0/8", "10.255.255.255", "10.0.0.0/8"),
            ("fd00::/64", "fd00::", "fd00::/64"),
            ("FD00:1::/64", "fd00:1::1", "fd00:1::/64"),
            ("0.0.0.0/0", "1.2.3.4", "0.0.0.0/0"),
        ] {
            let addressing = network(cidr, gateway)
                .validate()
                .unwrap_or_else(|e| panic!("{cidr} {gateway}: {e}"));
            assert_eq!(addressing.prefix.to_string(), prefix);
            assert_eq!(addressing.gateway, gateway.parse::<IpAddr>().unwrap());
        }
    }

    #[test]
    fn names_the_field_that_is_wrong() {
        for (cidr, gateway, field) in [
            ("192.168.0.0/33", "192.168.0.1", "spec.cidr:"),
            ("192.168.0.0", "192.168.0.1", "spec.cidr:"),
            ("", "192.168.0.1", "spec.cidr:"),
            (&"1".repeat(65), "192.168.0.1", "spec.cidr:"),
            // A bad cidr is reported on the cidr, not again as a gateway outside it.
            ("192.168.0.0/33", "10.0.0.1", "spec.cidr:"),
            ("192.168.0.0/16", "10.0.0.1", "spec.gateway:"),
            ("192.168.0.0/16", "not-an-ip", "spec.gateway:"),
            ("fd00::/64", "192.168.0.1", "spec.gateway:"),
            ("192.168.0.0/16", "::ffff:192.168.0.1", "spec.gateway:"),
        ] {
            let err = network(cidr, gateway).validate().unwrap_err();
            assert!(err.starts_with(field), "{cidr} {gateway}: {err}");
        }
        let err = network("fd00::/64", "192.168.0.1").validate().unwrap_err();
        assert_eq!(
            err,
            r#"spec.gateway: "192.168.0.1" is not an IPv6 address inside cidr fd00::/64"#
        );
    }
}
