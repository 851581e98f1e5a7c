//! IP addresses and prefixes read the way Kubernetes' CEL network library reads them, so that a
//! check in Rust agrees with the schema's `isIP` and `isCIDR` on every input.
//!
//! The CEL functions parse with Go's `net/netip` and then refuse IPv6 zones and IPv4-mapped IPv6
//! addresses. Rust's `std::net` parser agrees with `netip` on the rest: it refuses leading zeros
//! in IPv4 octets (`010.0.0.1`, which other parsers read as octal), zones (`%eth0`), surrounding
//! spaces, and more than four hex digits in an IPv6 group. A prefix may have host bits set
//! (`192.168.0.1/16` passes `isCIDR`); [`IpPrefix`] keeps its canonical form, with them cleared.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The family of an address or prefix, named as in a Service's `ipFamilies`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum IpFamily {
    IPv4,
    IPv6,
}

impl IpFamily {
    pub fn of(addr: IpAddr) -> Self {
        match addr {
            IpAddr::V4(_) => IpFamily::IPv4,
            IpAddr::V6(_) => IpFamily::IPv6,
        }
    }

    /// Bits in an address of this family.
    pub fn bits(self) -> u8 {
        match self {
            IpFamily::IPv4 => 32,
            IpFamily::IPv6 => 128,
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IpFamily::IPv4 => "IPv4",
            IpFamily::IPv6 => "IPv6",
        })
    }
}

/// An address as CEL's `isIP` accepts it. IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`) are
/// refused, as CEL refuses them: they name an IPv4 host in IPv6 clothing, so their family is
/// ambiguous.
pub fn parse_ip(text: &str) -> Option<IpAddr> {
    match text.parse::<IpAddr>().ok()? {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => None,
        addr => Some(addr),
    }
}

/// An IP prefix in canonical form: the network address, host bits cleared, and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpPrefix {
    network: IpAddr,
    len: u8,
}

impl IpPrefix {
    /// A prefix as CEL's `isCIDR` accepts it (an address as [`parse_ip`] accepts it, `/`, and a
    /// length in decimal without sign or leading zero, at most the family's bits), with its
    /// host bits cleared.
    pub fn parse(text: &str) -> Option<Self> {
        let (addr, len) = text.rsplit_once('/')?;
        let addr = parse_ip(addr)?;
        let digits_only = !len.is_empty() && len.bytes().all(|b| b.is_ascii_digit());
        if !digits_only || (len.len() > 1 && len.starts_with('0')) {
            return None;
        }
        let len: u8 = len.parse().ok()?;
        Self::new(addr, len)
    }

    /// The prefix of length `len` that contains `addr`; `None` when `len` exceeds the family's
    /// bits.
    pub fn new(addr: IpAddr, len: u8) -> Option<Self> {
        let family = IpFamily::of(addr);
        if len > family.bits() {
            return None;
        }
        let network = from_bits(family, to_bits(addr) & !host_mask(family, len));
        Some(Self { network, len })
    }

    pub fn family(&self) -> IpFamily {
        IpFamily::of(self.network)
    }

    /// The network address: the first address of the prefix.
    pub fn network(&self) -> IpAddr {
        self.network
    }

    /// The prefix length, in bits.
    pub fn prefix_len(&self) -> u8 {
        self.len
    }

    /// The first and the last address of the prefix as integers (IPv4 in the low 32 bits).
    pub fn range(&self) -> (u128, u128) {
        let first = to_bits(self.network);
        (first, first | host_mask(self.family(), self.len))
    }

    /// Whether `addr` is of this family and inside the prefix.
    pub fn contains(&self, addr: IpAddr) -> bool {
        let (first, last) = self.range();
        IpFamily::of(addr) == self.family() && (first..=last).contains(&to_bits(addr))
    }

    /// Whether the two prefixes share an address. Prefixes are aligned blocks, so they overlap
    /// exactly when one contains the other.
    pub fn overlaps(&self, other: &IpPrefix) -> bool {
        self.contains(other.network) || other.contains(self.network)
    }

    /// The prefix of length `len` (at most this one's) that contains this one.
    pub fn truncate(&self, len: u8) -> IpPrefix {
        Self {
            network: from_bits(
                self.family(),
                to_bits(self.network) & !host_mask(self.family(), len.min(self.len)),
            ),
            len: len.min(self.len),
        }
    }

    /// How many addresses of the prefix hosts can use (the gateway is one of them):
    ///
    /// - IPv4: all but the network and the broadcast address; a /31 has two, both usable on a
    ///   point-to-point link (RFC 3021), and a /32 is the one host.
    /// - IPv6: there is no broadcast, but the first address is the Subnet-Router anycast
    ///   address (RFC 4291, 2.6.1); a /127 has two usable addresses (RFC 6164) and a /128 one.
    ///
    /// The largest, IPv6 `/0`, is 2^128 - 1, which still fits a `u128`.
    pub fn usable_addresses(&self) -> u128 {
        let host_bits = self.family().bits() - self.len;
        let size_minus_one = host_mask(self.family(), self.len);
        match (self.family(), host_bits) {
            (_, 0) => 1,
            (_, 1) => 2,
            // size - 2, written so that it cannot overflow: size - 1 - 1.
            (IpFamily::IPv4, _) => size_minus_one - 1,
            // size - 1.
            (IpFamily::IPv6, _) => size_minus_one,
        }
    }
}

impl fmt::Display for IpPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.len)
    }
}

/// An address as an integer (IPv4 in the low 32 bits).
pub fn to_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(v4) => u128::from(v4.to_bits()),
        IpAddr::V6(v6) => v6.to_bits(),
    }
}

/// The address of `family` whose integer is `bits`.
pub fn from_bits(family: IpFamily, bits: u128) -> IpAddr {
    match family {
        // The IPv4 value lives in the low 32 bits; the truncation keeps exactly those.
        IpFamily::IPv4 => IpAddr::V4(Ipv4Addr::from_bits(bits as u32)),
        IpFamily::IPv6 => IpAddr::V6(Ipv6Addr::from_bits(bits)),
    }
}

/// The host bits of a prefix of length `len`: all ones below the prefix.
fn host_mask(family: IpFamily, len: u8) -> u128 {
    let host_bits = u32::from(family.bits().saturating_sub(len));
    // A shift by 128 overflows; a whole IPv6 /0 is all host bits.
    u128::MAX.checked_shr(128 - host_bits).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefix(text: &str) -> IpPrefix {
        IpPrefix::parse(text).unwrap_or_else(|| panic!("{text} does not parse"))
    }

    #[test]
    fn parses_what_cel_accepts_and_normalises_it() {
        for (text, canonical) in [
            ("192.168.0.0/16", "192.168.0.0/16"),
            ("192.168.0.1/16", "192.168.0.0/16"),
            ("10.1.2.3/31", "10.1.2.2/31"),
            ("10.1.2.3/32", "10.1.2.3/32"),
            ("0.0.0.0/0", "0.0.0.0/0"),
            ("FD00:1::5/64", "fd00:1::/64"),
            ("::/0", "::/0"),
            ("fd00::1/128", "fd00::1/128"),
            ("::1.2.3.4/128", "::102:304/128"),
        ] {
            assert_eq!(prefix(text).to_string(), canonical, "{text}");
        }
    }

    #[test]
    fn refuses_what_cel_refuses() {
        for text in [
            "",
            "192.168.0.0",
            "192.168.0.0/33",
            "fd00::/129",
            "192.168.0.0/08",
            "192.168.0.0/+8",
            "192.168.0.0/-1",
            "192.168.0.0/",
            "010.0.0.0/8",
            " 10.0.0.0/8",
            "10.0.0.0/8 ",
            "fd00::%eth0/64",
            "::ffff:10.0.0.0/104",
            "10.0.0.0/8/8",
            "not-a-cidr",
        ] {
            assert_eq!(IpPrefix::parse(text), None, "{text:?}");
        }
        for text in [
            "10.0.0.01",
            "::ffff:1.2.3.4",
            "fd00::1%eth0",
            "1.2.3",
            "fd00::/64",
        ] {
            assert_eq!(parse_ip(text), None, "{text:?}");
        }
        assert!(parse_ip("fd00::").is_some());
    }

    #[test]
    fn counts_usable_addresses_at_every_size() {
        for (text, usable) in [
            ("192.168.0.0/16", 65_534),
            ("10.0.0.0/24", 254),
            ("10.0.0.0/30", 2),
            ("10.0.0.0/31", 2),
            ("10.0.0.1/32", 1),
            ("0.0.0.0/0", (1u128 << 32) - 2),
            ("fd00::/64", (1u128 << 64) - 1),
            ("fd00::/126", 3),
            ("fd00::/127", 2),
            ("fd00::1/128", 1),
        ] {
            assert_eq!(prefix(text).usable_addresses(), usable, "{text}");
        }
        assert_eq!(prefix("::/0").usable_addresses(), u128::MAX);
        assert_eq!(
            prefix("::/0").usable_addresses().to_string(),
            "340282366920938463463374607431768211455"
        );
    }

    #[test]
    fn containment_and_overlap_respect_the_family() {
        let net = prefix("10.0.0.0/16");
        assert!(net.contains("10.0.255.255".parse().unwrap()));
        assert!(!net.contains("10.1.0.0".parse().unwrap()));
        assert!(
            !net.contains("::a00:1".parse().unwrap()),
            "an IPv6 address is never inside"
        );
        assert!(net.overlaps(&prefix("10.0.3.0/24")));
        assert!(prefix("10.0.3.0/24").overlaps(&net));
        assert!(net.overlaps(&prefix("0.0.0.0/0")));
        assert!(!net.overlaps(&prefix("10.1.0.0/16")));
        assert!(!prefix("::/0").overlaps(&prefix("0.0.0.0/0")));
        assert!(prefix("fd00::/8").overlaps(&prefix("fd00:1::/64")));
        assert_eq!(prefix("10.0.3.0/24").truncate(16), net);
        assert_eq!(prefix("10.0.3.0/24").truncate(30), prefix("10.0.3.0/24"));
        assert_eq!(net.range(), (0x0a00_0000, 0x0a00_ffff));
    }
}
