//! Which prefixes a Network may have, beyond what the schema checks. A tenant with rights only
//! in their own namespace creates Networks, and with the Multus backend the first Pod attached
//! puts the Network's gateway address and route on its node: without a policy, a tenant could
//! have a node answer for the loopback range, the link-local range (where clouds serve their
//! metadata), a multicast range or the whole address space. Pure: the Network controller checks
//! every Network against it before anything reaches a backend.

use std::fmt;

use sample_operator_api::ip::{IpFamily, IpPrefix};

/// The cluster admin's rules: where Networks may be, and how wide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddressPolicy {
    /// The prefixes Networks must lie within; any (but the reserved ones) when empty.
    pub allowed: Vec<IpPrefix>,
    /// The shortest IPv4 prefix length allowed: a /8 holds 16 million addresses.
    pub min_prefix_v4: u8,
    /// The shortest IPv6 prefix length allowed.
    pub min_prefix_v6: u8,
}

impl Default for AddressPolicy {
    /// No IPv4 prefix wider than a /16, no IPv6 prefix wider than a /48, anywhere but the
    /// reserved ranges.
    fn default() -> Self {
        Self {
            allowed: Vec::new(),
            min_prefix_v4: 16,
            min_prefix_v6: 48,
        }
    }
}

/// The ranges no Network may touch, whatever the policy allows, and why. The admission policy
/// has the same list (deploy/helm/sample-operator/files/network-address-policy-checks.yaml; a
/// test holds the two to be one).
const RESERVED: [(&str, &str); 13] = [
    ("0.0.0.0/8", "\"this network\" (RFC 1122)"),
    ("127.0.0.0/8", "loopback"),
    (
        "169.254.0.0/16",
        "link-local, where clouds serve instance metadata",
    ),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved, with the broadcast address"),
    // Clouds' own addresses outside link-local, which a node reaches as it does the metadata.
    (
        "168.63.129.16/32",
        "Azure's platform address (metadata, DNS, health probes)",
    ),
    ("100.100.100.200/32", "Alibaba Cloud's instance metadata"),
    ("::/128", "the unspecified address"),
    ("::1/128", "loopback"),
    ("fe80::/10", "link-local"),
    ("ff00::/8", "multicast"),
    ("fd00:ec2::254/128", "AWS's IPv6 instance metadata"),
    ("fd00:ec2::253/128", "AWS's IPv6 DNS resolver"),
];

impl AddressPolicy {
    /// `Ok` when a Network may have `prefix`, else why not, naming the field and the rule.
    pub fn check(&self, prefix: &IpPrefix) -> Result<(), String> {
        let shortest = match prefix.family() {
            IpFamily::IPv4 => self.min_prefix_v4,
            IpFamily::IPv6 => self.min_prefix_v6,
        };
        if prefix.prefix_len() < shortest {
            return Err(format!(
                "spec.cidr: {prefix} is wider than the policy allows: {} prefixes must be /{shortest} or longer",
                prefix.family()
            ));
        }
        for (reserved, what) in RESERVED {
            let reserved = IpPrefix::parse(reserved).expect("a valid reserved prefix");
            if reserved.overlaps(prefix) {
                return Err(format!(
                    "spec.cidr: {prefix} overlaps {reserved} ({what}), which no Network may use"
                ));
            }
        }
        let within = |allowed: &IpPrefix| {
            allowed.prefix_len() <= prefix.prefix_len() && allowed.contains(prefix.network())
        };
        if !self.allowed.is_empty() && !self.allowed.iter().any(within) {
            return Err(format!(
                "spec.cidr: {prefix} is outside the prefixes the policy allows ({})",
                Prefixes(&self.allowed)
            ));
        }
        Ok(())
    }
}

/// A list of prefixes, comma-separated.
struct Prefixes<'a>(&'a [IpPrefix]);

impl fmt::Display for Prefixes<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, prefix) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{prefix}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(policy: &AddressPolicy, cidr: &str) -> Result<(), String> {
        policy.check(&IpPrefix::parse(cidr).unwrap())
    }

    #[test]
    fn the_default_refuses_reserved_ranges_and_wide_prefixes() {
        let policy = AddressPolicy::default();
        for (cidr, says) in [
            (
                "0.0.0.0/0",
                "wider than the policy allows: IPv4 prefixes must be /16",
            ),
            ("10.0.0.0/8", "/16 or longer"),
            ("127.0.0.0/16", "loopback"),
            ("169.254.169.0/24", "instance metadata"),
            ("224.0.0.0/24", "multicast"),
            ("255.255.255.255/32", "broadcast"),
            ("0.0.0.0/16", "this network"),
            ("::/0", "IPv6 prefixes must be /48"),
            ("::1/128", "loopback"),
            ("fe80::/64", "link-local"),
            ("ff02::/64", "multicast"),
            ("fd00::/32", "/48 or longer"),
            ("168.63.128.0/23", "Azure"),
            ("100.100.100.192/28", "Alibaba"),
            ("fd00:ec2::200/120", "IPv6 instance metadata"),
            ("fd00:ec2::252/126", "AWS"),
        ] {
            let error = check(&policy, cidr).expect_err(cidr);
            assert!(error.starts_with("spec.cidr: "), "{error}");
            assert!(error.contains(says), "{cidr}: {error}");
        }
        for cidr in [
            "10.1.0.0/16",
            "192.168.0.0/24",
            "10.9.9.9/32",
            "fd00:10::/64",
            "2001:db8::/48",
        ] {
            assert_eq!(check(&policy, cidr), Ok(()), "{cidr}");
        }
    }

    #[test]
    fn allowed_prefixes_confine_networks_and_lengths_can_be_relaxed() {
        let policy = AddressPolicy {
            allowed: vec![
                IpPrefix::parse("10.0.0.0/8").unwrap(),
                IpPrefix::parse("fd00::/8").unwrap(),
            ],
            min_prefix_v4: 8,
            min_prefix_v6: 8,
        };
        assert_eq!(check(&policy, "10.0.0.0/8"), Ok(()));
        assert_eq!(check(&policy, "10.20.0.0/16"), Ok(()));
        assert_eq!(check(&policy, "fd12::/16"), Ok(()));
        // The widest allowed holds AWS's IPv6 metadata address, reserved whatever is allowed.
        assert!(check(&policy, "fd00::/8").unwrap_err().contains("AWS"));
        let outside = check(&policy, "192.168.0.0/24").unwrap_err();
        assert!(
            outside.contains("outside the prefixes the policy allows (10.0.0.0/8, fd00::/8)"),
            "{outside}"
        );
        // Containing an allowed prefix is not lying within it, whatever the lengths allow.
        let any_length = AddressPolicy {
            min_prefix_v4: 0,
            min_prefix_v6: 0,
            ..policy.clone()
        };
        assert!(check(&any_length, "8.0.0.0/5").unwrap_err().contains("outside"));
        // Reserved stays reserved, whatever is allowed.
        let everything = AddressPolicy {
            allowed: vec![IpPrefix::parse("0.0.0.0/0").unwrap()],
            min_prefix_v4: 0,
            min_prefix_v6: 0,
        };
        assert!(
            check(&everything, "127.0.0.0/8")
                .unwrap_err()
                .contains("loopback")
        );
        assert!(
            check(&everything, "0.0.0.0/0")
                .unwrap_err()
                .contains("no Network may use")
        );
    }

    /// The admission policy refuses the same reserved ranges, for the same reasons.
    #[test]
    fn the_admission_policy_reserves_the_same_ranges() {
        let checks =
            include_str!("../../../../deploy/helm/sample-operator/files/network-address-policy-checks.yaml");
        let list = checks
            .split_once("- name: reserved")
            .unwrap()
            .1
            .split_once("].filter(")
            .unwrap()
            .0;
        let admission: Vec<(String, String)> = list
            .lines()
            .filter_map(|line| {
                let row = line
                    .trim()
                    .trim_end_matches(',')
                    .strip_prefix('[')?
                    .strip_suffix(']')?;
                let (prefix, what) = row.split_once(", ")?;
                let unquote = |s: &str| {
                    let quote = s.chars().next()?;
                    Some(s.strip_prefix(quote)?.strip_suffix(quote)?.to_owned())
                };
                Some((unquote(prefix)?, unquote(what)?))
            })
            .collect();
        let operator: Vec<(String, String)> = RESERVED
            .iter()
            .map(|(prefix, what)| ((*prefix).to_owned(), (*what).to_owned()))
            .collect();
        assert_eq!(admission, operator);
    }
}
