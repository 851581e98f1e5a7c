//! In-memory indexes kept from a watch stream, so that mapping an event to the objects it
//! concerns is a lookup rather than a scan of every object.
//!
//! An index maps each key to the objects that have it (a Deployment to the uid of the Foo that
//! controls it; a Pod name to the resources that name it). It follows the watcher's events,
//! including re-lists, where the new state replaces the old one as a whole once it is complete.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher::Event;

type KeyFn<K, Key> = dyn Fn(&K) -> Vec<Key> + Send + Sync;

/// An object's namespace and name: 32 bytes, where an `ObjectRef` takes 96 and copies the uid
/// and resourceVersion too (which its equality ignores). Two are kept per object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Name {
    namespace: Option<Box<str>>,
    name: Box<str>,
}

impl Name {
    fn of<K: Resource>(obj: &K) -> Self {
        let meta = obj.meta();
        Self {
            namespace: meta.namespace.as_deref().map(Into::into),
            name: meta.name.as_deref().unwrap_or_default().into(),
        }
    }

    fn to_ref<K: Resource<DynamicType = ()>>(&self) -> ObjectRef<K> {
        let object_ref = ObjectRef::new(&self.name);
        match &self.namespace {
            Some(namespace) => object_ref.within(namespace),
            None => object_ref,
        }
    }
}

/// The objects that have one key. A key has one object or a few, so a list costs less memory
/// than a set; beyond [`FEW`] it is a set, so that adding or removing one of many objects that
/// share a key (a thousand resources naming one Pod) costs the same as one of a few.
#[derive(Debug)]
enum Members {
    Few(Vec<Name>),
    Many(HashSet<Name>),
}

/// The most objects of one key kept as a list.
const FEW: usize = 16;

impl Members {
    fn one(name: Name) -> Self {
        // Room for one: Vec's first push would make room for four.
        Members::Few(vec![name])
    }

    fn add(&mut self, name: Name) {
        match self {
            Members::Few(names) if names.contains(&name) => {}
            Members::Few(names) if names.len() < FEW => names.push(name),
            Members::Few(names) => {
                let mut set: HashSet<Name> = names.drain(..).collect();
                set.insert(name);
                *self = Members::Many(set);
            }
            Members::Many(set) => {
                set.insert(name);
            }
        }
    }

    fn remove(&mut self, name: &Name) {
        match self {
            Members::Few(names) => names.retain(|n| n != name),
            Members::Many(set) => {
                set.remove(name);
            }
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Members::Few(names) => names.is_empty(),
            Members::Many(set) => set.is_empty(),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = &Name> + '_> {
        match self {
            Members::Few(names) => Box::new(names.iter()),
            Members::Many(set) => Box::new(set.iter()),
        }
    }
}

struct Maps<Key> {
    by_key: HashMap<Key, Members>,
    keys_of: HashMap<Name, Box<[Key]>>,
}

impl<Key> Default for Maps<Key> {
    fn default() -> Self {
        Self {
            by_key: HashMap::new(),
            keys_of: HashMap::new(),
        }
    }
}

impl<Key: Eq + Hash + Clone> Maps<Key> {
    fn insert(&mut self, name: Name, keys: Vec<Key>) {
        // Most events of an indexed object (its status written) leave its keys as they were.
        if self.keys_of.get(&name).is_some_and(|old| **old == *keys) {
            return;
        }
        self.remove(&name);
        for key in &keys {
            match self.by_key.get_mut(key) {
                Some(members) => members.add(name.clone()),
                None => {
                    self.by_key.insert(key.clone(), Members::one(name.clone()));
                }
            }
        }
        if !keys.is_empty() {
            // Without the spare room a list collected from a filter starts with.
            self.keys_of.insert(name, keys.into_boxed_slice());
        }
    }

    fn remove(&mut self, name: &Name) {
        for key in self.keys_of.remove(name).unwrap_or_default() {
            if let Some(members) = self.by_key.get_mut(&key) {
                members.remove(name);
                if members.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }
}

/// A shared index; clones see the same state.
pub struct Index<K: Resource, Key> {
    key_fn: Arc<KeyFn<K, Key>>,
    live: Arc<RwLock<Maps<Key>>>,
    /// The state being rebuilt during a re-list.
    building: Arc<RwLock<Option<Maps<Key>>>>,
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
                .insert(Name::of(obj), (self.key_fn)(obj)),
            Event::Delete(obj) => self.live.write().expect("index lock").remove(&Name::of(obj)),
            Event::Init => *self.building.write().expect("index lock") = Some(Maps::default()),
            Event::InitApply(obj) => {
                if let Some(maps) = self.building.write().expect("index lock").as_mut() {
                    maps.insert(Name::of(obj), (self.key_fn)(obj));
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
            .map(|members| members.iter().map(Name::to_ref).collect())
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
        let name = Name::of(&object);
        assert_eq!(maps.keys_of[&name].len(), 1);
        assert!(matches!(&maps.by_key[&"x".to_owned()], Members::Few(names) if names.capacity() == 1));
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

    #[test]
    fn many_objects_of_one_key_are_kept_in_a_set_and_found_all() {
        let index = index();
        for i in 0..10_000 {
            index.apply(&Event::Apply(cm(&format!("o{i}"), "one-pod")));
        }
        assert!(matches!(
            &index.live.read().unwrap().by_key[&"one-pod".to_owned()],
            Members::Many(set) if set.len() == 10_000
        ));
        // An update that keeps the keys, a move to another key, a deletion.
        index.apply(&Event::Apply(cm("o1", "one-pod")));
        index.apply(&Event::Apply(cm("o2", "other")));
        index.apply(&Event::Delete(cm("o3", "one-pod")));
        assert_eq!(index.get(&"one-pod".into()).len(), 9_998);
        assert_eq!(names(index.get(&"other".into())), ["o2"]);
        assert_eq!(index.len(), 9_999);
    }
}
