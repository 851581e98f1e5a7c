//! What the cluster admin chooses for every Foo's Deployment: the image, the container's
//! resources and security context.
//!
//! The defaults keep kubernetes/sample-controller's `nginx:latest` (the seeds' Foos converge
//! unchanged) and make it a better tenant: small requests and a memory limit, no privilege
//! escalation and the runtime's default seccomp profile, which Pod Security `baseline` admits
//! and nginx's official image runs with. A cluster that enforces `restricted` configures an
//! unprivileged image and a context to match (see docs/operating.md).

use k8s_openapi::api::core::v1::{ResourceRequirements, SecurityContext};
use serde_json::json;

/// The Foo controller's settings, shared by both groups of Foo.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The container image, as in kubernetes/sample-controller by default.
    pub image: String,
    pub resources: ResourceRequirements,
    pub security_context: SecurityContext,
}

/// The image when none is configured.
pub const DEFAULT_IMAGE: &str = "nginx:latest";

impl Default for Settings {
    fn default() -> Self {
        Self {
            image: DEFAULT_IMAGE.into(),
            resources: serde_json::from_value(json!({
                "requests": { "cpu": "10m", "memory": "32Mi" },
                "limits": { "memory": "256Mi" },
            }))
            .expect("valid resources"),
            security_context: serde_json::from_value(json!({
                "allowPrivilegeEscalation": false,
                "seccompProfile": { "type": "RuntimeDefault" },
            }))
            .expect("a valid security context"),
        }
    }
}

impl Settings {
    /// A short digest of the resources and security context, carried by each Deployment in
    /// [`SETTINGS_LABEL`]: the operator notices changed settings by it without caching those
    /// fields, and without comparing them after the apiserver has normalized them (`0.5` becomes
    /// `500m`), which would make every Deployment look changed on every reconcile.
    pub fn digest(&self) -> String {
        let canonical = serde_json::to_vec(&json!([self.resources, self.security_context]))
            .expect("serializable settings");
        let mut hasher = fnv::FnvHasher::default();
        std::hash::Hasher::write(&mut hasher, &canonical);
        format!("{:016x}", std::hash::Hasher::finish(&hasher))
    }
}

/// The label with [`Settings::digest`] on every Deployment the Foo controller writes.
pub const SETTINGS_LABEL: &str = "sample-operator.k8s.io/pod-settings";

/// Parses a flag's JSON value into `T`, with the error naming what was wrong.
pub fn parse_json<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|e| format!("{e} in {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_samples_image_with_requests_a_limit_and_no_escalation() {
        let settings = Settings::default();
        assert_eq!(settings.image, "nginx:latest");
        let requests = settings.resources.requests.as_ref().unwrap();
        assert_eq!(requests["memory"].0, "32Mi");
        assert_eq!(settings.resources.limits.as_ref().unwrap()["memory"].0, "256Mi");
        assert_eq!(settings.security_context.allow_privilege_escalation, Some(false));
        assert_eq!(settings.security_context.privileged, None);
        assert_eq!(
            settings.security_context.seccomp_profile.as_ref().unwrap().type_,
            "RuntimeDefault"
        );
    }

    #[test]
    fn the_digest_changes_with_the_resources_or_the_context_and_only_then() {
        let settings = Settings::default();
        assert_eq!(settings.digest(), Settings::default().digest());
        assert_eq!(settings.digest().len(), 16);
        let other_image = Settings {
            image: "nginx:1.29".into(),
            ..Settings::default()
        };
        // The image is compared as it is, not through the digest.
        assert_eq!(other_image.digest(), settings.digest());
        let more_memory = Settings {
            resources: parse_json(r#"{"limits":{"memory":"1Gi"}}"#).unwrap(),
            ..Settings::default()
        };
        assert_ne!(more_memory.digest(), settings.digest());
        let mut non_root = Settings::default();
        non_root.security_context.run_as_non_root = Some(true);
        assert_ne!(non_root.digest(), settings.digest());
    }

    #[test]
    fn a_flag_value_that_is_not_the_type_says_why() {
        let error = parse_json::<ResourceRequirements>(r#"{"limits": "lots"}"#).unwrap_err();
        assert!(error.contains("invalid type"), "{error}");
        assert!(error.contains("lots"), "{error}");
    }
}
