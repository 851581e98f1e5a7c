//! Our own writes that the controller's cache has not seen yet.
//!
//! A reconcile reads its object from the cache, which learns of a write only when the write's
//! watch event arrives. A reconcile that starts in between (a Foo queued again by a change of
//! its Deployment while it was writing its status, which runs as soon as that reconcile
//! returns, or a resync) would find the status from before the write and write the same new one
//! again. So the object each write returned is kept until the watch brings a newer version, and
//! reconciles start from it while the cache still has a version the write replaced. A reconcile
//! that started from our write may write again before the watch brings the first: the second
//! write replaced the first, and the first replaced the cached version, so both versions are
//! kept as replaced (a loaded API server's watch can be several writes behind).

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

/// By object: our last write of it that the cache has not seen.
type Writes<K> = HashMap<ObjectRef<K>, Written<K>>;

struct Written<K> {
    /// The resourceVersions our unseen writes replaced, oldest first: the cached version the
    /// first of them started from, then each write's own but the last.
    replaced: Vec<String>,
    /// What the last write returned.
    object: Arc<K>,
}

impl<K> Written<K> {
    /// Whether `version` is older than our last write: one it replaced, directly or not.
    fn has_replaced(&self, version: Option<&String>) -> bool {
        version.is_some_and(|version| self.replaced.contains(version))
    }
}

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
            Some(written) if written.has_replaced(cached.meta().resource_version.as_ref()) => {
                written.object.clone()
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
        let mut writes = self.writes.lock().expect("not poisoned");
        let key = ObjectRef::from_obj(&written);
        let object = Arc::new(written);
        match writes.get_mut(&key) {
            // Over our own last write, still unseen: the versions it replaced stay older.
            Some(last) if last.object.meta().resource_version.as_ref() == Some(&version) => {
                last.replaced.push(version);
                last.object = object;
            }
            _ => {
                writes.insert(
                    key,
                    Written {
                        replaced: vec![version],
                        object,
                    },
                );
            }
        }
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
                .is_some_and(|written| !written.has_replaced(obj.meta().resource_version.as_ref()))
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

    fn version(object: &ConfigMap) -> Option<&str> {
        object.metadata.resource_version.as_deref()
    }

    #[test]
    fn a_second_write_before_the_watch_brings_the_first_starts_later_reconciles_from_the_second() {
        let writes = OwnWrites::default();
        let cached = object("1", "old");
        writes.record(&cached, object("2", "first"));
        // A reconcile started from the first write, and wrote again.
        let first = writes.latest(Arc::new(cached.clone()));
        writes.record(&first, object("3", "second"));

        // The cache at the version before both, or at the first write's: the second is newer.
        for seen in [&cached, &object("2", "first")] {
            assert_eq!(version(&writes.latest(Arc::new(seen.clone()))), Some("3"));
        }
        // The watch brings the first write: the second is still to come.
        writes.observe(&Event::Apply(object("2", "first")));
        assert_eq!(writes.len(), 1);
        assert_eq!(version(&writes.latest(Arc::new(object("2", "first")))), Some("3"));
        // Then the second: nothing in flight.
        writes.observe(&Event::Apply(object("3", "second")));
        assert_eq!(writes.len(), 0);
    }

    #[test]
    fn a_write_over_a_version_that_is_not_our_last_starts_afresh() {
        let writes = OwnWrites::default();
        writes.record(&object("1", "old"), object("2", "ours"));
        // Someone else's version 5 was read and written over: version 1 is not ours to skip.
        writes.record(&object("5", "theirs"), object("6", "ours again"));
        assert_eq!(
            version(&writes.latest(Arc::new(object("5", "theirs")))),
            Some("6")
        );
        assert_eq!(version(&writes.latest(Arc::new(object("1", "old")))), Some("1"));
        assert_eq!(writes.len(), 0);
    }
}
