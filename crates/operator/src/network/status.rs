//! The status a Network should show. Pure: computed from the Network and what reconcile found.

use kube::ResourceExt;
use sample_operator_api::{Addressing, Network, NetworkStatus};

use super::backend::{BackendError, Ensured};
use super::conflicts::Overlap;
use crate::runtime::status::Ready;

// The runtime reads the conditions to tell transitions and to count objects by readiness.
crate::conditions_field!(NetworkStatus);

/// Reasons of the `Ready` condition. Every one but [`SYNCED`](reason::SYNCED) is also the
/// reason of the Warning event sent when a Network enters it.
pub mod reason {
    /// The network is in the backend as the spec says.
    pub const SYNCED: &str = "Synced";
    /// The spec is invalid; or the backend holds an object of the Network's name that the
    /// Network does not own.
    pub use crate::runtime::status::reason::{INVALID_SPEC, RESOURCE_EXISTS};
    /// An older Network of the namespace has an overlapping prefix.
    pub const CIDR_CONFLICT: &str = "CIDRConflict";
    /// The address policy refuses the prefix (a reserved range, or wider or elsewhere than the
    /// cluster admin allows).
    pub const PREFIX_NOT_ALLOWED: &str = "PrefixNotAllowed";
    /// The namespace has as many older Networks as the operator syncs for one namespace.
    pub const NAMESPACE_LIMIT_REACHED: &str = "NamespaceLimitReached";
    /// The backend is not there (for Multus: its CRD is not installed; for Neutron: Keystone
    /// or neutron-server cannot be reached).
    pub const BACKEND_UNAVAILABLE: &str = "BackendUnavailable";
    /// Any other failure of the backend; retried. The other backend reasons
    /// (`BackendAuthFailed`, `BackendQuotaExceeded`, ...) are [`BackendError::reason`]s.
    pub const BACKEND_ERROR: &str = "BackendError";
}

/// What reconcile found, which decides the status.
pub enum Observed<'a> {
    /// The spec is invalid; the message names the field.
    Invalid(&'a str),
    /// The address policy refuses the prefix; the message says which rule.
    NotAllowed(&'a str),
    /// The prefix overlaps that of an older Network, which keeps it.
    Conflict(&'a Addressing, &'a Overlap),
    /// The namespace has this many older Networks, its limit.
    OverLimit(&'a Addressing, usize),
    /// The backend holds the network.
    Synced(&'a Addressing, &'a Ensured),
    /// The backend failed.
    BackendFailed(&'a Addressing, &'a BackendError),
}

/// Whether the status says the backend holds nothing of the Network: it was refused (invalid,
/// outside the policy, or in conflict), which is recorded after its release from the backend,
/// and has not been synced since.
pub fn released(network: &Network) -> bool {
    network.status.as_ref().is_some_and(|status| {
        status.backend.is_none()
            && matches!(
                crate::runtime::status::ready_reason(&status.conditions),
                Some(
                    reason::INVALID_SPEC
                        | reason::PREFIX_NOT_ALLOWED
                        | reason::CIDR_CONFLICT
                        | reason::NAMESPACE_LIMIT_REACHED
                )
            )
    })
}

pub fn desired(network: &Network, observed: Observed<'_>) -> NetworkStatus {
    let previous = network.status.clone().unwrap_or_default();
    let generation = network.metadata.generation;
    let (addressing, backend, ready, reason, message) = match observed {
        Observed::Invalid(message) => (None, None, false, reason::INVALID_SPEC, message.to_owned()),
        Observed::NotAllowed(message) => (None, None, false, reason::PREFIX_NOT_ALLOWED, message.to_owned()),
        Observed::Conflict(addressing, overlap) => (
            Some(addressing),
            None,
            false,
            reason::CIDR_CONFLICT,
            conflict_message(network, addressing, overlap),
        ),
        Observed::OverLimit(addressing, limit) => (
            Some(addressing),
            None,
            false,
            reason::NAMESPACE_LIMIT_REACHED,
            format!(
                "the namespace has {limit} older Networks, the most the operator syncs for one namespace: delete one, or ask the cluster admin for more (--network-max-per-namespace)"
            ),
        ),
        Observed::Synced(addressing, ensured) => (
            Some(addressing),
            Some(ensured.reference.clone()),
            true,
            reason::SYNCED,
            format!("{} is synced to {}", addressing.prefix, ensured.description),
        ),
        Observed::BackendFailed(addressing, error) => {
            // A failed request says nothing about what the backend holds: keep what was last
            // known, unless the failure says it is not ours.
            let backend = (!error.forgets_reference())
                .then(|| previous.backend.clone())
                .flatten();
            (
                Some(addressing),
                backend,
                false,
                error.reason(),
                error.to_string(),
            )
        }
    };
    NetworkStatus {
        observed_generation: generation,
        prefix: addressing.map(|a| a.prefix.to_string()),
        family: addressing.map(|a| a.prefix.family()),
        usable_addresses: addressing.map(|a| a.prefix.usable_addresses().to_string()),
        backend,
        conditions: Ready {
            status: ready,
            reason,
            message,
        }
        .conditions(generation, &previous.conditions),
    }
}

/// The message of a conflict, naming the Network that keeps the prefix.
pub fn conflict_message(network: &Network, addressing: &Addressing, overlap: &Overlap) -> String {
    if network.namespace().unwrap_or_default() == overlap.namespace {
        return format!(
            "{} overlaps {} of Network {:?}, which is older and keeps it",
            addressing.prefix, overlap.prefix, overlap.name
        );
    }
    // Another tenant's Network: neither its name nor its prefix is this tenant's to learn.
    format!(
        "{} overlaps an older Network of another namespace, which keeps it: the nodes route every namespace's Networks, so their prefixes may not overlap",
        addressing.prefix
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::status::status_differs;
    use sample_operator_api::ip::{IpFamily, IpPrefix};
    use sample_operator_api::{BackendReference, NetworkSpec};

    fn network(cidr: &str, gateway: &str) -> Network {
        let mut n = Network::new(
            "blue",
            NetworkSpec {
                cidr: cidr.into(),
                gateway: gateway.into(),
            },
        );
        n.metadata.generation = Some(3);
        n
    }

    fn synced(changed: bool) -> Ensured {
        Ensured {
            changed,
            reference: BackendReference {
                provider: "multus".into(),
                id: "blue".into(),
                subnet_id: None,
            },
            description: r#"NetworkAttachmentDefinition "blue""#.into(),
        }
    }

    fn ready(status: &NetworkStatus) -> (&str, &str) {
        let c = &status.conditions[0];
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn a_synced_network_shows_its_prefix_family_size_and_backend() {
        let n = network("192.168.0.1/16", "192.168.0.1");
        let addressing = n.validate().unwrap();
        let s = desired(&n, Observed::Synced(&addressing, &synced(true)));
        assert_eq!(ready(&s), ("True", reason::SYNCED));
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(s.conditions[0].observed_generation, Some(3));
        assert_eq!(s.prefix.as_deref(), Some("192.168.0.0/16"));
        assert_eq!(s.family, Some(IpFamily::IPv4));
        assert_eq!(s.usable_addresses.as_deref(), Some("65534"));
        assert_eq!(s.backend.as_ref().map(|b| b.id.as_str()), Some("blue"));
        assert_eq!(
            s.conditions[0].message,
            r#"192.168.0.0/16 is synced to NetworkAttachmentDefinition "blue""#
        );

        let v6 = network("fd00::/64", "fd00::1");
        let addressing = v6.validate().unwrap();
        let s = desired(&v6, Observed::Synced(&addressing, &synced(false)));
        assert_eq!(s.family, Some(IpFamily::IPv6));
        assert_eq!(s.usable_addresses.as_deref(), Some("18446744073709551615"));
    }

    #[test]
    fn a_conflict_names_the_network_that_keeps_the_prefix() {
        let n = network("10.0.1.0/24", "10.0.1.1");
        let addressing = n.validate().unwrap();
        let overlap = Overlap {
            namespace: n.namespace().unwrap_or_default(),
            name: "older".into(),
            prefix: IpPrefix::parse("10.0.0.0/16").unwrap(),
        };
        let s = desired(&n, Observed::Conflict(&addressing, &overlap));
        assert_eq!(ready(&s), ("False", reason::CIDR_CONFLICT));
        assert_eq!(
            s.conditions[0].message,
            r#"10.0.1.0/24 overlaps 10.0.0.0/16 of Network "older", which is older and keeps it"#
        );
        assert_eq!(s.prefix.as_deref(), Some("10.0.1.0/24"));
        // Another namespace's Network is neither named nor placed.
        let theirs = Overlap {
            namespace: "someone-else".into(),
            ..overlap.clone()
        };
        let s = desired(&n, Observed::Conflict(&addressing, &theirs));
        assert_eq!(ready(&s), ("False", reason::CIDR_CONFLICT));
        let message = &s.conditions[0].message;
        assert!(
            message.starts_with("10.0.1.0/24 overlaps an older Network of another namespace"),
            "{message}"
        );
        assert!(
            !message.contains("older\"") && !message.contains("10.0.0.0/16"),
            "{message}"
        );
        assert_eq!(s.backend, None, "a refused network is not in the backend");
    }

    #[test]
    fn an_invalid_spec_shows_no_addressing() {
        let n = network("10.0.0.0/33", "10.0.0.1");
        let s = desired(&n, Observed::Invalid("spec.cidr: bad"));
        assert_eq!(ready(&s), ("False", reason::INVALID_SPEC));
        assert_eq!(s.conditions[0].message, "spec.cidr: bad");
        assert_eq!((s.prefix, s.family, s.usable_addresses), (None, None, None));
    }

    #[test]
    fn backend_failures_have_their_reason_and_keep_the_backend_only_when_unknown() {
        let mut n = network("10.0.0.0/24", "10.0.0.1");
        let addressing = n.validate().unwrap();
        n.status = Some(desired(&n, Observed::Synced(&addressing, &synced(true))));
        let unavailable = BackendError::Unavailable("no CRD".into());
        let s = desired(&n, Observed::BackendFailed(&addressing, &unavailable));
        assert_eq!(ready(&s), ("False", reason::BACKEND_UNAVAILABLE));
        assert_eq!(s.conditions[0].message, "no CRD");
        assert_eq!(s.backend, None);
        let taken = BackendError::NotOwned("taken".into());
        let s = desired(&n, Observed::BackendFailed(&addressing, &taken));
        assert_eq!(ready(&s), ("False", reason::RESOURCE_EXISTS));
        let failed = BackendError::MissingObjectKey("uid");
        let s = desired(&n, Observed::BackendFailed(&addressing, &failed));
        assert_eq!(ready(&s), ("False", reason::BACKEND_ERROR));
        assert!(s.backend.is_some(), "the last known place is kept");
    }

    #[test]
    fn an_unchanged_status_is_not_rewritten() {
        let mut n = network("10.0.0.0/24", "10.0.0.1");
        let addressing = n.validate().unwrap();
        let first = desired(&n, Observed::Synced(&addressing, &synced(true)));
        assert!(status_differs(n.status.as_ref(), &first));
        n.status = Some(first);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let again = desired(&n, Observed::Synced(&addressing, &synced(false)));
        assert!(!status_differs(n.status.as_ref(), &again));
        n.metadata.generation = Some(4);
        let next = desired(&n, Observed::Synced(&addressing, &synced(false)));
        assert!(
            status_differs(n.status.as_ref(), &next),
            "a new generation is news"
        );
        assert_eq!(
            crate::runtime::status::ready_reason(&n.status.as_ref().unwrap().conditions),
            Some(reason::SYNCED)
        );
    }
}
