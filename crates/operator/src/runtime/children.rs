//! The objects a controller owns (a Foo's Deployment, a Network's attachment definition): how
//! ownership is told, and the writes that must never touch an object the controller does not
//! own, even one that replaced its own under the same name a moment ago.

use kube::api::{Api, DeleteParams, PostParams, Preconditions, PropagationPolicy};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::FIELD_MANAGER;

/// Whether `child` has a controller owner reference to the object with `uid`.
pub fn is_controlled_by(child: &impl Resource, uid: &str) -> bool {
    child
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// Creates `desired`; `None` when an object of that name exists already (someone else's, or
/// ours that lost its label), for the caller to read and check.
pub async fn create<K>(api: &Api<K>, desired: &K) -> kube::Result<Option<K>>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.create(&params, desired).await {
        Ok(created) => Ok(Some(created)),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes exactly the object `name` with `uid`, in the background; false when it is gone
/// already or a same-named successor replaced it, which is left alone.
pub async fn delete<K>(api: &Api<K>, name: &str, uid: &str) -> kube::Result<bool>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    #[test]
    fn only_a_controller_reference_makes_an_owner() {
        let reference = |uid: &str, controller| OwnerReference {
            uid: uid.into(),
            controller,
            ..Default::default()
        };
        let mut child = ConfigMap::default();
        child.metadata.owner_references =
            Some(vec![reference("uid-1", Some(true)), reference("uid-2", None)]);
        assert!(is_controlled_by(&child, "uid-1"));
        assert!(!is_controlled_by(&child, "uid-2"), "an owner, not the controller");
        assert!(!is_controlled_by(&child, "uid-3"));
    }
}
