//! The status a MyCustomResource should show. Pure: computed from the resource and what the Pod
//! cache says about its friend.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use sample_operator_api::{MyCustomResource, MyCustomResourceStatus};

use crate::runtime::status::Ready;

// The runtime reads the conditions to tell transitions and to count objects by readiness.
crate::conditions_field!(MyCustomResourceStatus);

/// Reasons of the `Ready` condition.
pub mod reason {
    /// A Pod named `spec.name` exists in the resource's namespace and is not being deleted.
    pub const FRIEND_FOUND: &str = "FriendFound";
    /// No such Pod, or only one that is being deleted.
    pub const FRIEND_MISSING: &str = "FriendMissing";
}

/// What the Pod cache says about the friend Pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Friend {
    /// It exists and is not being deleted.
    Found,
    /// It exists but has a deletion timestamp: it is on its way out (waiting for finalizers or
    /// its grace period), so it no longer counts.
    Terminating,
    /// There is no Pod of that name in the namespace.
    Missing,
}

impl Friend {
    /// Classifies the metadata of the Pod of that name, if there is one.
    pub fn from_metadata(pod: Option<&ObjectMeta>) -> Self {
        match pod {
            None => Friend::Missing,
            Some(meta) if meta.deletion_timestamp.is_some() => Friend::Terminating,
            Some(_) => Friend::Found,
        }
    }
}

pub fn desired(mcr: &MyCustomResource, friend: Friend) -> MyCustomResourceStatus {
    let previous = mcr.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
    let generation = mcr.metadata.generation;
    let pod = &mcr.spec.name;
    let namespace = mcr.namespace().unwrap_or_default();
    let (healthy, reason, message) = match friend {
        Friend::Found => (
            true,
            reason::FRIEND_FOUND,
            format!("Pod {pod:?} exists in namespace {namespace:?}"),
        ),
        Friend::Terminating => (
            false,
            reason::FRIEND_MISSING,
            format!("Pod {pod:?} in namespace {namespace:?} is being deleted"),
        ),
        Friend::Missing => (
            false,
            reason::FRIEND_MISSING,
            format!("No Pod {pod:?} in namespace {namespace:?}"),
        ),
    };
    MyCustomResourceStatus {
        healthy,
        observed_generation: generation,
        conditions: Ready {
            status: healthy,
            reason,
            message,
        }
        .conditions(generation, previous),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::status::status_differs;
    use sample_operator_api::MyCustomResourceSpec;

    fn mcr(pod: &str, generation: i64) -> MyCustomResource {
        let mut mcr =
            MyCustomResource::new("my-custom-resource-01", MyCustomResourceSpec { name: pod.into() });
        mcr.metadata.namespace = Some("default".into());
        mcr.metadata.generation = Some(generation);
        mcr
    }

    fn ready(status: &MyCustomResourceStatus) -> (&str, &str) {
        let c = &status.conditions[0];
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn a_pod_counts_while_it_exists_and_is_not_being_deleted() {
        assert_eq!(Friend::from_metadata(None), Friend::Missing);
        let mut meta = ObjectMeta::default();
        assert_eq!(Friend::from_metadata(Some(&meta)), Friend::Found);
        meta.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        assert_eq!(Friend::from_metadata(Some(&meta)), Friend::Terminating);
    }

    #[test]
    fn healthy_with_a_friend_and_explicitly_unhealthy_without_one() {
        let found = desired(&mcr("funny-joe", 2), Friend::Found);
        assert!(found.healthy);
        assert_eq!(found.observed_generation, Some(2));
        assert_eq!(found.conditions[0].observed_generation, Some(2));
        assert_eq!(ready(&found), ("True", reason::FRIEND_FOUND));
        assert_eq!(
            found.conditions[0].message,
            r#"Pod "funny-joe" exists in namespace "default""#
        );

        for friend in [Friend::Missing, Friend::Terminating] {
            let status = desired(&mcr("funny-joe", 1), friend);
            assert!(!status.healthy);
            assert_eq!(ready(&status), ("False", reason::FRIEND_MISSING));
            // `false` is written, not left out: the seed's clients read the key.
            let json = serde_json::to_value(&status).unwrap();
            assert_eq!(json["Healthy"], serde_json::json!(false));
        }
        let terminating = desired(&mcr("funny-joe", 1), Friend::Terminating);
        assert!(terminating.conditions[0].message.contains("being deleted"));
    }

    #[test]
    fn an_unchanged_status_is_not_rewritten() {
        let mut m = mcr("funny-joe", 1);
        let first = desired(&m, Friend::Missing);
        assert!(status_differs(m.status.as_ref(), &first));
        m.status = Some(first.clone());
        std::thread::sleep(std::time::Duration::from_millis(2));
        let again = desired(&m, Friend::Missing);
        assert!(!status_differs(m.status.as_ref(), &again));
        assert_eq!(
            again.conditions[0].last_transition_time,
            first.conditions[0].last_transition_time
        );
        assert!(status_differs(m.status.as_ref(), &desired(&m, Friend::Found)));
        // Same reason, new message: still a change worth writing.
        assert!(status_differs(
            m.status.as_ref(),
            &desired(&m, Friend::Terminating)
        ));
    }

    #[test]
    fn a_new_generation_is_a_change() {
        let mut m = mcr("funny-joe", 1);
        m.status = Some(desired(&m, Friend::Found));
        m.metadata.generation = Some(2);
        let new = desired(&m, Friend::Found);
        assert!(status_differs(m.status.as_ref(), &new));
        assert_eq!(new.observed_generation, Some(2));
    }
}
