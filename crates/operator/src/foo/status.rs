//! The status a Foo should show. Pure: computed from the Foo and what was observed.

use sample_operator_api::{FooKind, FooStatus};

use super::deployment::desired_replicas;
use super::table::Row;
use crate::runtime::status::Ready;

// The runtime reads the conditions to tell transitions and to count objects by readiness.
crate::conditions_field!(FooStatus);

/// Reasons of the `Ready` condition.
pub mod reason {
    /// Every desired replica is available.
    pub const AVAILABLE: &str = "Available";
    /// The Deployment is in place and still rolling out or scaling.
    pub const PROGRESSING: &str = "Progressing";
    /// A Deployment of that name exists and this Foo does not control it; or the spec is
    /// invalid.
    pub use crate::runtime::status::reason::{INVALID_SPEC, RESOURCE_EXISTS};
}

/// What reconcile found, which decides the status.
pub enum Observed<'a> {
    /// The Foo's own Deployment.
    Deployment(&'a Row),
    /// The Deployment of that name belongs to someone else.
    Conflict,
    /// The spec is invalid; the message names the field.
    Invalid(&'a str),
}

pub fn desired(foo: &impl FooKind, observed: Observed<'_>) -> FooStatus {
    let previous = foo.status().cloned().unwrap_or_default();
    let generation = foo.meta().generation;
    let name = &foo.spec().deployment_name;
    let (available, ready, reason, message) = match observed {
        Observed::Deployment(deployment) => {
            let available = deployment.available_replicas;
            let want = desired_replicas(foo);
            let message = format!("Deployment {name:?} has {available} of {want} replicas available");
            if available >= want && deployment.rolled_out {
                (available, true, reason::AVAILABLE, message)
            } else {
                (available, false, reason::PROGRESSING, message)
            }
        }
        Observed::Conflict => (
            previous.available_replicas,
            false,
            reason::RESOURCE_EXISTS,
            resource_exists_message(name),
        ),
        Observed::Invalid(message) => (
            previous.available_replicas,
            false,
            reason::INVALID_SPEC,
            message.to_owned(),
        ),
    };
    // While the Deployment is someone else's, its replicas are not ours to report.
    let available = if matches!(reason, reason::RESOURCE_EXISTS) {
        0
    } else {
        available
    };
    FooStatus {
        available_replicas: available,
        observed_generation: generation,
        conditions: Ready {
            status: ready,
            reason,
            message,
        }
        .conditions(generation, &previous.conditions),
    }
}

/// The seed's message, word for word, for events and the condition alike.
pub fn resource_exists_message(name: &str) -> String {
    format!("Resource {name:?} already exists and is not managed by Foo")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::foo::cached::{CachedDeployment, Status};
    use crate::runtime::status::status_differs;
    use sample_operator_api::{Foo, FooSpec};

    fn foo(replicas: i32) -> Foo {
        let mut foo = Foo::new(
            "f",
            FooSpec {
                deployment_name: "web".into(),
                replicas: Some(replicas),
            },
        );
        foo.metadata.generation = Some(4);
        foo
    }

    fn deployment(available: i32, generation: i64, observed: i64) -> Row {
        let mut d = CachedDeployment::default();
        d.metadata.generation = Some(generation);
        d.status = Some(Status {
            available_replicas: Some(available),
            observed_generation: Some(observed),
        });
        Row::of(&d)
    }

    fn ready(status: &FooStatus) -> (&str, &str) {
        let c = &status.conditions[0];
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn available_once_every_replica_is() {
        let s = desired(&foo(3), Observed::Deployment(&deployment(3, 2, 2)));
        assert_eq!((s.available_replicas, s.observed_generation), (3, Some(4)));
        assert_eq!(ready(&s), ("True", reason::AVAILABLE));
    }

    #[test]
    fn progressing_while_replicas_are_missing_or_the_rollout_is_unseen() {
        let s = desired(&foo(3), Observed::Deployment(&deployment(1, 2, 2)));
        assert_eq!(
            (s.available_replicas, ready(&s)),
            (1, ("False", reason::PROGRESSING))
        );
        let s = desired(&foo(3), Observed::Deployment(&deployment(3, 3, 2)));
        assert_eq!(ready(&s), ("False", reason::PROGRESSING));
    }

    #[test]
    fn a_conflict_says_why_in_the_seeds_words() {
        let s = desired(&foo(1), Observed::Conflict);
        assert_eq!(ready(&s), ("False", reason::RESOURCE_EXISTS));
        assert_eq!(
            s.conditions[0].message,
            r#"Resource "web" already exists and is not managed by Foo"#
        );
        assert_eq!(s.available_replicas, 0);
    }

    #[test]
    fn an_unchanged_status_is_not_rewritten() {
        let mut f = foo(1);
        let first = desired(&f, Observed::Deployment(&deployment(1, 1, 1)));
        assert!(status_differs(f.status.as_ref(), &first));
        f.status = Some(first);
        let again = desired(&f, Observed::Deployment(&deployment(1, 1, 1)));
        assert!(!status_differs(f.status.as_ref(), &again));
        let scaled = desired(&f, Observed::Deployment(&deployment(0, 2, 2)));
        assert!(status_differs(f.status.as_ref(), &scaled));
    }
}
