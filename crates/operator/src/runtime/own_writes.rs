//! Our own writes that the controller's cache has not seen yet.
//!
//! A reconcile reads its object from the cache, which learns of a write only when the write's
//! watch event arrives. A reconcile that starts in between (the Foo whose Deployment was just
//! created is queued again by that Deployment's watch event, and runs as soon as the first
//! reconcile returns) would find the status from before the write and write the same new one
//! again. So the object each write returned is kept until the watch brings a newer version, and
//! reconciles start from it while the cache still has the version the write replaced.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::FIELD_MANAGER;
use super::lean::Lean;

/// By object: the resourceVersion a write replaced, and the object it returned.
type Writes<K> = HashMap<ObjectRef<K>, (String, Arc<K>)>;

/// Shared; clones see the same writes.
pub struct OwnWrites<K: Resource> {
    writes: Arc<Mutex<Writes<K>>>,
}

impl<K: Resource> Clone for OwnWrites<K> {
    fn clone(&self) -> Self {
        Self {
            writes: self.writes.clone(),
        }
    }
}

impl<K: Resource> Default for OwnWrites<K> {
    fn default() -> Self {
        Self {
            writes: Arc::default(),
        }
    }
}

impl<K> OwnWrites<K>
where
    K: Resource<DynamicType = ()>,
{
    /// The newest version of `cached` that we know: the object our last write returned while
    /// the cache still shows the version that write replaced, else `cached` itself.
    pub fn latest(&self, cached: Arc<K>) -> Arc<K> {
        let mut writes = self.writes.lock().expect("not poisoned");
        let key = ObjectRef::from_obj(&*cached);
        match writes.get(&key) {
            Some((replaced, written)) if cached.meta().resource_version.as_ref() == Some(replaced) => {
                written.clone()
            }
            // The cache has caught up, or someone else changed the object since.
            Some(_) => {
                writes.remove(&key);
                cached
            }
            None => cached,
        }
    }

    /// Server-side applies `status` as the status of `obj` (the operator owns every status
    /// field) and remembers the object the write returned, read as the cache keeps objects.
    pub async fn write_status(&self, api: &Api<Lean<K>>, obj: &K, status: &impl Serialize) -> kube::Result<()>
    where
        K: Clone + DeserializeOwned + std::fmt::Debug,
    {
        let patch = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": status,
        });
        let Lean(written) = api
            .patch_status(
                &obj.name_any(),
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
        self.record(obj, written);
        Ok(())
    }

    /// Remembers that a write over `replaced` returned `written`.
    pub fn record(&self, replaced: &K, written: K) {
        let Some(version) = replaced.meta().resource_version.clone() else {
            return;
        };
        self.writes
            .lock()
            .expect("not poisoned")
            .insert(ObjectRef::from_obj(&written), (version, Arc::new(written)));
    }

    /// Keeps the writes of the objects `keep` says to: the others are gone (deleted while the
    /// watch was away, which then delivers no deletion).
    pub fn retain(&self, mut keep: impl FnMut(&ObjectRef<K>) -> bool) {
        self.writes
            .lock()
            .expect("not poisoned")
            .retain(|key, _| keep(key));
    }

    /// Forgets the writes the watch has now delivered (or made moot by a deletion), so that the
    /// map holds only writes in flight.
    pub fn observe(&self, event: &Event<K>) {
        let seen = |writes: &mut Writes<K>, obj: &K| {
            let key = ObjectRef::from_obj(obj);
            if writes
                .get(&key)
                .is_some_and(|(replaced, _)| obj.meta().resource_version.as_ref() != Some(replaced))
            {
                writes.remove(&key);
            }
        };
        let mut writes = self.writes.lock().expect("not poisoned");
        // Almost every event finds nothing in flight: skip building its key.
        if writes.is_empty() {
            return;
        }
        match event {
            Event::Apply(obj) | Event::InitApply(obj) => seen(&mut writes, obj),
            Event::Delete(obj) => {
                writes.remove(&ObjectRef::from_obj(obj));
            }
            Event::Init | Event::InitDone => {}
        }
    }

    /// Writes not yet seen by the watch.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.writes.lock().expect("not poisoned").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn object(version: &str, data: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("cm".into());
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.resource_version = Some(version.into());
        cm.data = Some([("k".to_owned(), data.to_owned())].into());
        cm
    }

    #[test]
    fn a_reconcile_before_the_watch_event_starts_from_our_write() {
        let writes = OwnWrites::default();
        let before = object("1", "old");
        writes.record(&before, object("2", "new"));

        // The cache still has version 1: the write is newer.
        assert_eq!(
            writes
                .latest(Arc::new(before.clone()))
                .metadata
                .resource_version
                .as_deref(),
            Some("2")
        );
        // The watch delivers version 2: the cache is current again and the write is forgotten.
        writes.observe(&Event::Apply(object("2", "new")));
        assert_eq!(writes.len(), 0);
        assert_eq!(
            writes.latest(Arc::new(object("2", "new"))).data,
            object("2", "new").data
        );
    }

    #[test]
    fn someone_elses_newer_change_wins() {
        let writes = OwnWrites::default();
        writes.record(&object("1", "old"), object("2", "ours"));
        let theirs = writes.latest(Arc::new(object("3", "theirs")));
        assert_eq!(theirs.metadata.resource_version.as_deref(), Some("3"));
        assert_eq!(writes.len(), 0);
    }

    #[test]
    fn a_deletion_forgets_the_write() {
        let writes = OwnWrites::default();
        writes.record(&object("1", "old"), object("2", "new"));
        writes.observe(&Event::Delete(object("1", "old")));
        assert_eq!(writes.len(), 0);
    }

    #[test]
    fn a_watch_event_of_the_replaced_version_keeps_the_write() {
        let writes = OwnWrites::default();
        writes.record(&object("1", "old"), object("2", "new"));
        writes.observe(&Event::InitApply(object("1", "old")));
        assert_eq!(writes.len(), 1);
    }
}
