//! The `Ready` condition shared by every resource's status, following the Kubernetes condition
//! conventions (`type`, `status`, `reason`, `message`, `observedGeneration`,
//! `lastTransitionTime`; a list-map keyed by `type`).

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The condition type every controller maintains.
pub const READY: &str = "Ready";

/// Find a condition by type.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}
