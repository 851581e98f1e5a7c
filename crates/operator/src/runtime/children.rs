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

/// Creates `desired` through `api`, which addresses the same resource and says how the answer is
/// read: a projection of it (a `CachedDeployment`) when the caller keeps only a few fields, as
/// decoding the whole object costs more than the create's other work in this process. `None`
/// when an object of that name exists already (someone else's, or ours that lost its label),
/// for the caller to read and check.
pub async fn create<R>(api: &Api<R>, desired: &impl Serialize) -> kube::Result<Option<R>>
where
    R: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match super::create_reading::<R, R>(api, &params, desired).await {
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
    use kube::core::PartialObjectMeta;

    #[tokio::test]
    async fn a_create_sends_the_whole_object_and_reads_the_answer_as_the_api_says() {
        use crate::runtime::scenario::{ApiServer, status};
        let server = ApiServer::new(|sent| {
            let name = sent.body["metadata"]["name"].as_str()?;
            (sent.is("POST", "/api/v1/namespaces/ns/configmaps")
                && sent.path.contains("fieldManager=sample-operator"))
            .then(|| match name {
                "taken" => (
                    409,
                    status(409, "AlreadyExists", "configmaps \"taken\" already exists"),
                ),
                _ => (201, sent.body.clone()),
            })
        });
        // Read back as a projection, as `CachedDeployment` is of a Deployment.
        let api: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(server.client.clone(), "ns");
        let mut desired = ConfigMap::default();
        desired.metadata.name = Some("web".into());
        desired.data = Some([("k".to_owned(), "v".to_owned())].into());

        let created = create(&api, &desired).await.unwrap().expect("created");
        assert_eq!(created.metadata.name.as_deref(), Some("web"));
        let sent = server.take();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].body["data"]["k"], "v", "the whole desired object is sent");

        desired.metadata.name = Some("taken".into());
        assert!(
            create(&api, &desired).await.unwrap().is_none(),
            "409 is someone else's"
        );
        assert!(server.unexpected().is_empty());
    }

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
