//! The `Ready` condition shared by every resource's status, following the Kubernetes condition
//! conventions (`type`, `status`, `reason`, `message`, `observedGeneration`,
//! `lastTransitionTime`; a list-map keyed by `type`).

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// The condition type every controller maintains.
pub const READY: &str = "Ready";

/// Deserializes a list of conditions without spare capacity. Controllers cache every object of
/// their kind, and serde grows a list of one condition to room for four: about 450 bytes unused
/// per cached object.
pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Condition>, D::Error> {
    let mut conditions = <Vec<Condition> as serde::Deserialize>::deserialize(d)?;
    conditions.shrink_to_fit();
    Ok(conditions)
}

/// Find a condition by type.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use crate::FooStatus;
    use serde_json::json;

    #[test]
    fn conditions_are_read_without_spare_room() {
        let status: FooStatus = serde_json::from_value(json!({
            "availableReplicas": 1,
            "conditions": [{ "type": "Ready", "status": "True", "reason": "Available", "message": "",
                "lastTransitionTime": "2026-11-25T10:00:00Z" }],
        }))
        .unwrap();
        assert_eq!(status.conditions.len(), 1);
        assert_eq!(status.conditions.capacity(), 1);

        let without: FooStatus = serde_json::from_value(json!({ "availableReplicas": 0 })).unwrap();
        assert!(without.conditions.is_empty());
    }
}
