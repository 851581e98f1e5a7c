//! Status conditions that follow the Kubernetes conventions, and when a status is worth writing.
//! [`Context::update_status`](super::Context::update_status) writes them.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

pub use sample_operator_api::conditions::READY;

/// `Ready` reasons that mean the same in every controller.
pub mod reason {
    /// The spec breaks a rule of the schema (stored before the rule existed).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// An object the controller would own exists under that name, and it does not own it.
    pub const RESOURCE_EXISTS: &str = "ResourceExists";
}

/// A status with conditions, which the runtime reads to tell transitions and compares without
/// their timestamps.
pub trait Conditions {
    fn conditions(&self) -> &[Condition];
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
}

/// Implements [`Conditions`] for a status type whose conditions are its `conditions` field:
/// `sample_operator::conditions_field!(FooStatus);`, next to the controller that writes that
/// status.
#[macro_export]
macro_rules! conditions_field {
    ($status:ty) => {
        impl $crate::runtime::status::Conditions for $status {
            fn conditions(&self) -> &[$crate::runtime::status::Condition] {
                &self.conditions
            }
            fn conditions_mut(&mut self) -> &mut Vec<$crate::runtime::status::Condition> {
                &mut self.conditions
            }
        }
    };
}

/// The `Ready` condition for a new status, given the conditions of the current one:
/// `lastTransitionTime` moves only when `status` changes, so rewriting the same state does not
/// look like a transition.
pub fn ready(
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    previous: &[Condition],
) -> Condition {
    let status = if status { "True" } else { "False" };
    let last_transition_time = sample_operator_api::conditions::find(previous, READY)
        .filter(|c| c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(Timestamp::now()));
    Condition {
        type_: READY.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// What a status's `Ready` condition says.
pub struct Ready<'a> {
    pub status: bool,
    pub reason: &'a str,
    pub message: String,
}

impl Ready<'_> {
    /// The conditions of a new status of an object at `generation` whose current status has
    /// `previous` conditions: `Ready`, as [`ready`] builds it.
    pub fn conditions(self, generation: Option<i64>, previous: &[Condition]) -> Vec<Condition> {
        vec![ready(
            self.status,
            self.reason,
            self.message,
            generation,
            previous,
        )]
    }
}

/// Whether writing status `new` over `current` would change anything. Conditions compare
/// without their `lastTransitionTime`, which [`ready`] carries over anyway: a status that says
/// the same thing is not rewritten.
pub fn status_differs<S: Conditions + Clone + PartialEq>(current: Option<&S>, new: &S) -> bool {
    let Some(current) = current else { return true };
    let strip = |status: &S| {
        let mut status = status.clone();
        for c in status.conditions_mut().iter_mut() {
            c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
        }
        status
    };
    strip(current) != strip(new)
}

/// The reason of the `Ready` condition, if there is one.
pub fn ready_reason(conditions: &[Condition]) -> Option<&str> {
    sample_operator_api::conditions::find(conditions, READY).map(|c| c.reason.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_transition_time_while_the_status_holds() {
        let first = ready(false, "Progressing", "0/1".into(), Some(1), &[]);
        let second = ready(
            false,
            "Progressing",
            "still 0/1".into(),
            Some(2),
            std::slice::from_ref(&first),
        );
        assert_eq!(second.last_transition_time, first.last_transition_time);
        assert_eq!(second.observed_generation, Some(2));
        std::thread::sleep(std::time::Duration::from_millis(2));
        let third = ready(
            true,
            "Available",
            "1/1".into(),
            Some(2),
            std::slice::from_ref(&second),
        );
        assert_ne!(third.last_transition_time, second.last_transition_time);
        assert_eq!(third.status, "True");
    }
}
