//! Kubernetes name rules, checked in Rust for objects that got past admission.

/// A DNS-1123 subdomain, the rule for most object names (Deployments among them): at most 253
/// characters of dot-separated labels, each of lower-case alphanumerics and '-', starting and
/// ending with an alphanumeric.
pub fn is_dns1123_subdomain(name: &str) -> bool {
    !name.is_empty() && name.len() <= 253 && name.split('.').all(is_label)
}

fn is_label(label: &str) -> bool {
    let bytes = label.as_bytes();
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|b| alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdomains() {
        for ok in ["a", "example-foo", "web.v2", "0abc", &"a".repeat(253)] {
            assert!(is_dns1123_subdomain(ok), "{ok}");
        }
        for bad in ["", "A", "-a", "a-", "a..b", ".a", "a_b", "a b", &"a".repeat(254)] {
            assert!(!is_dns1123_subdomain(bad), "{bad}");
        }
    }
}
