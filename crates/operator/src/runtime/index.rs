//! In-memory indexes kept from a watch stream, so that mapping an event to the objects it
//! concerns is a lookup rather than a scan of every object.
//!
//! An index maps each key to the objects that have it (a Deployment to the uid of the Foo that
//! controls it; a Pod name to the resources that name it). It follows the watcher's events,
//! including re-lists, where the new state replaces the old one as a whole once it is complete.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

type KeyFn<K, Key> = dyn Fn(&K) -> Vec<Key> + Send + Sync;

struct Maps<K: Resource, Key> {
    /// A key has one object or a few, so a list costs less memory than a set.
    by_key: HashMap<Key, Vec<ObjectRef<K>>>,
    keys_of: HashMap<ObjectRef<K>, Vec<Key>>,
}

impl<K: Resource, Key> Default for Maps<K, Key> {
    fn default() -> Self {
        Self {
            by_key: HashMap::new(),
            keys_of: HashMap::new(),
        }
    }
}

impl<K, Key> Maps<K, Key>
where
    K: Resource<DynamicType = ()>,
    Key: Eq + Hash + Clone,
{
    fn insert(&mut self, obj: &K, mut keys: Vec<Key>) {
        let obj_ref = slim_ref(obj);
        self.remove(&obj_ref);
        // A key list collected from a filter starts with room for four.
        keys.shrink_to_fit();
        for key in &keys {
            // Vec's first allocation would hold four.
            let objects = self
                .by_key
                .entry(key.clone())
                .or_insert_with(|| Vec::with_capacity(1));
            if !objects.contains(&obj_ref) {
                objects.push(obj_ref.clone());
            }
        }
        if !keys.is_empty() {
            self.keys_of.insert(obj_ref, keys);
        }
    }

    fn remove(&mut self, obj_ref: &ObjectRef<K>) {
        for key in self.keys_of.remove(obj_ref).unwrap_or_default() {
            if let Some(objects) = self.by_key.get_mut(&key) {
                objects.retain(|o| o != obj_ref);
                if objects.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }
}

/// The object's name and namespace only: `ObjectRef::from_obj` also copies its uid and
/// resourceVersion, which equality ignores and which would cost two more strings for each of
/// the two references kept per object (about 110 bytes per Foo).
fn slim_ref<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectRef<K> {
    let meta = obj.meta();
    let object_ref = ObjectRef::new(meta.name.as_deref().unwrap_or_default());
    match &meta.namespace {
        Some(namespace) => object_ref.within(namespace),
        None => object_ref,
    }
}

/// A shared index; clones see the same state.
pub struct Index<K: Resource, Key> {
    key_fn: Arc<KeyFn<K, Key>>,
    live: Arc<RwLock<Maps<K, Key>>>,
    /// The state being rebuilt during a re-list.
    building: Arc<RwLock<Option<Maps<K, Key>>>>,
}

impl<K: Resource, Key> Clone for Index<K, Key> {
    fn clone(&self) -> Self {
        Self {
            key_fn: self.key_fn.clone(),
            live: self.live.clone(),
            building: self.building.clone(),
        }
    }
}

impl<K, Key> Index<K, Key>
where
    K: Resource<DynamicType = ()>,
    Key: Eq + Hash + Clone,
{
    /// An index of objects by the keys `key_fn` gives them.
    pub fn new(key_fn: impl Fn(&K) -> Vec<Key> + Send + Sync + 'static) -> Self {
        Self {
            key_fn: Arc::new(key_fn),
            live: Arc::default(),
            building: Arc::default(),
        }
    }

    /// Follows one watcher event; call it for every event of the stream, in order.
    pub fn apply(&self, event: &Event<K>) {
        match event {
            Event::Apply(obj) => self
                .live
                .write()
                .expect("index lock")
                .insert(obj, (self.key_fn)(obj)),
            Event::Delete(obj) => self.live.write().expect("index lock").remove(&slim_ref(obj)),
            Event::Init => *self.building.write().expect("index lock") = Some(Maps::default()),
            Event::InitApply(obj) => {
                if let Some(maps) = self.building.write().expect("index lock").as_mut() {
                    maps.insert(obj, (self.key_fn)(obj));
                }
            }
            Event::InitDone => {
                if let Some(maps) = self.building.write().expect("index lock").take() {
                    *self.live.write().expect("index lock") = maps;
                }
            }
        }
    }

    /// The objects that have `key`.
    pub fn get(&self, key: &Key) -> Vec<ObjectRef<K>> {
        self.live
            .read()
            .expect("index lock")
            .by_key
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    /// How many objects are indexed.
    pub fn len(&self) -> usize {
        self.live.read().expect("index lock").keys_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str, key: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.labels = Some([("k".to_owned(), key.to_owned())].into());
        cm
    }

    fn index() -> Index<ConfigMap, String> {
        Index::new(|cm: &ConfigMap| {
            cm.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("k").cloned())
                .into_iter()
                .collect()
        })
    }

    fn names(refs: Vec<ObjectRef<ConfigMap>>) -> Vec<String> {
        let mut names: Vec<_> = refs.into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    #[test]
    fn follows_applies_updates_and_deletes() {
        let index = index();
        index.apply(&Event::Apply(cm("a", "x")));
        index.apply(&Event::Apply(cm("b", "x")));
        assert_eq!(names(index.get(&"x".into())), ["a", "b"]);
        index.apply(&Event::Apply(cm("a", "y")));
        assert_eq!(names(index.get(&"x".into())), ["b"]);
        assert_eq!(names(index.get(&"y".into())), ["a"]);
        index.apply(&Event::Delete(cm("b", "x")));
        assert!(index.get(&"x".into()).is_empty());
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn keeps_names_without_versions_or_spare_room() {
        // Keys from a filter, as the Foo controller's are: collected with room for four.
        let index = Index::new(|cm: &ConfigMap| {
            let labels = cm.metadata.labels.iter().flatten();
            labels
                .filter(|(k, _)| *k == "k")
                .map(|(_, v)| v.clone())
                .collect()
        });
        let mut object = cm("a", "x");
        object.metadata.uid = Some("0b5c6a0e-52a3-4b1c-9a43-0d1b2b43c1aa".into());
        object.metadata.resource_version = Some("42".into());
        index.apply(&Event::Apply(object.clone()));
        let found = index.get(&"x".into());
        assert_eq!(found, [ObjectRef::from_obj(&object)]);
        assert!(found[0].extra.uid.is_none() && found[0].extra.resource_version.is_none());
        let maps = index.live.read().unwrap();
        let keys = &maps.keys_of[&found[0]];
        assert_eq!(keys.capacity(), keys.len());
        drop(maps);
        // An update finds the entry the slim reference made, so the object is indexed once.
        object.metadata.resource_version = Some("43".into());
        index.apply(&Event::Apply(object.clone()));
        assert_eq!(index.len(), 1);
        index.apply(&Event::Delete(object));
        assert!(index.is_empty());
    }

    #[test]
    fn a_relist_replaces_the_state_once_complete() {
        let index = index();
        index.apply(&Event::Apply(cm("gone", "x")));
        index.apply(&Event::Init);
        index.apply(&Event::InitApply(cm("new", "x")));
        // Until the re-list is complete, lookups see the old state.
        assert_eq!(names(index.get(&"x".into())), ["gone"]);
        index.apply(&Event::InitDone);
        assert_eq!(names(index.get(&"x".into())), ["new"]);
    }
}
