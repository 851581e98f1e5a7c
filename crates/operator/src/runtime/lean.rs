//! Reading a controller's own objects without the metadata it never keeps: [`Lean`] decodes an
//! object as its type does, except that serde skips the managed fields, annotations and labels
//! of its `metadata` unparsed, where `ObjectMeta` would build them only for
//! [`strip_unread_metadata`] to drop them. The managed fields are the most of it: each entry a
//! tree of JSON maps, more than half the bytes of a Foo once its status is written (what this
//! saves: docs/benchmark.md, "where the time goes").
//!
//! The object's type keeps its own `Deserialize`: `Lean` wraps the deserializer it is given,
//! renaming those three keys of `metadata` to one no field answers to, which `ObjectMeta` (as
//! any derived struct that does not deny unknown fields) skips with `IgnoredAny`.
//!
//! [`strip_unread_metadata`]: super::watch::strip_unread_metadata

use std::borrow::Cow;
use std::fmt;

use kube::Resource;
use kube::api::ObjectMeta;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::forward_to_deserialize_any;

/// The keys of `metadata` that [`strip_unread_metadata`](super::watch::strip_unread_metadata)
/// clears, and that [`Lean`] skips.
pub const UNREAD: [&str; 3] = ["managedFields", "annotations", "labels"];

/// What an unread key is renamed to: no field of any object has this name.
const SKIPPED: &str = "\u{0}unread";

/// `K` as read without its unread metadata; the same resource as `K` for an [`kube::Api`].
#[derive(Clone, Debug)]
pub struct Lean<K>(pub K);

impl<'de, K: de::Deserialize<'de>> de::Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::deserialize(Wrapped {
            de: deserializer,
            level: Level::Object,
        })
        .map(Lean)
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Lean<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

/// Where a map being read is: the object, whose key `metadata` is spotted, or its metadata,
/// whose unread keys are renamed.
#[derive(Clone, Copy)]
enum Level {
    Object,
    Metadata,
}

/// The deserializer of a map at `level`. Only the calls a struct's `Deserialize` makes, and an
/// option's, are passed on as they are; the rest go through `deserialize_any`, which is what
/// they mean for a map.
struct Wrapped<D> {
    de: D,
    level: Level,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Wrapped<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.de.deserialize_any(LevelVisitor {
            inner: visitor,
            level: self.level,
        })
    }
    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.de.deserialize_map(LevelVisitor {
            inner: visitor,
            level: self.level,
        })
    }
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de.deserialize_struct(
            name,
            fields,
            LevelVisitor {
                inner: visitor,
                level: self.level,
            },
        )
    }
    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.de.deserialize_option(LevelVisitor {
            inner: visitor,
            level: self.level,
        })
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct newtype_struct seq tuple tuple_struct enum identifier ignored_any
    }
}

/// The visitor of a map at `level`, which hands the inner visitor its fields through
/// [`Fields`].
struct LevelVisitor<V> {
    inner: V,
    level: Level,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for LevelVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(Fields {
            map,
            level: self.level,
            metadata_next: false,
        })
    }
    // An optional map.
    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Wrapped {
            de: deserializer,
            level: self.level,
        })
    }
    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }
    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }
}

/// The fields of a map at `level`: the object's value after the key `metadata` is read at the
/// metadata's level.
struct Fields<A> {
    map: A,
    level: Level,
    metadata_next: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Fields<A> {
    type Error = A::Error;

    fn next_key_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, A::Error> {
        let mode = match self.level {
            Level::Object => KeyMode::Spot(&mut self.metadata_next),
            Level::Metadata => KeyMode::Rename,
        };
        self.map.next_key_seed(Key { seed, mode })
    }
    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        if std::mem::take(&mut self.metadata_next) {
            self.map.next_value_seed(Metadata(seed))
        } else {
            self.map.next_value_seed(seed)
        }
    }
    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// The value of `metadata`.
struct Metadata<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Metadata<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Wrapped {
            de: deserializer,
            level: Level::Metadata,
        })
    }
}

/// What a key is looked at for: the object's, to spot `metadata`; the metadata's, to rename
/// the unread ones.
enum KeyMode<'a> {
    Spot(&'a mut bool),
    Rename,
}

impl KeyMode<'_> {
    fn see(&mut self, key: &str) -> Option<&'static str> {
        match self {
            KeyMode::Spot(metadata) => {
                **metadata = key == "metadata";
                None
            }
            KeyMode::Rename => UNREAD.contains(&key).then_some(SKIPPED),
        }
    }
}

struct Key<'a, S> {
    seed: S,
    mode: KeyMode<'a>,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Key<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(KeyDe {
            de: deserializer,
            mode: self.mode,
        })
    }
}

/// A key: read as it is asked for, its string seen on the way.
struct KeyDe<'a, D> {
    de: D,
    mode: KeyMode<'a>,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for KeyDe<'_, D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.de.deserialize_any(KeyVisitor {
            inner: visitor,
            mode: self.mode,
        })
    }
    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.de.deserialize_identifier(KeyVisitor {
            inner: visitor,
            mode: self.mode,
        })
    }
    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.de.deserialize_str(KeyVisitor {
            inner: visitor,
            mode: self.mode,
        })
    }
    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.de.deserialize_string(KeyVisitor {
            inner: visitor,
            mode: self.mode,
        })
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map struct enum ignored_any
    }
}

struct KeyVisitor<'a, V> {
    inner: V,
    mode: KeyMode<'a>,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for KeyVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }
    fn visit_str<E: de::Error>(mut self, key: &str) -> Result<V::Value, E> {
        match self.mode.see(key) {
            Some(renamed) => self.inner.visit_str(renamed),
            None => self.inner.visit_str(key),
        }
    }
    fn visit_borrowed_str<E: de::Error>(mut self, key: &'de str) -> Result<V::Value, E> {
        match self.mode.see(key) {
            Some(renamed) => self.inner.visit_borrowed_str(renamed),
            None => self.inner.visit_borrowed_str(key),
        }
    }
    fn visit_string<E: de::Error>(mut self, key: String) -> Result<V::Value, E> {
        match self.mode.see(&key) {
            Some(renamed) => self.inner.visit_str(renamed),
            None => self.inner.visit_string(key),
        }
    }
    // Keys of other forms are no field names: passed on as they are.
    fn visit_bytes<E: de::Error>(self, key: &[u8]) -> Result<V::Value, E> {
        self.inner.visit_bytes(key)
    }
    fn visit_borrowed_bytes<E: de::Error>(self, key: &'de [u8]) -> Result<V::Value, E> {
        self.inner.visit_borrowed_bytes(key)
    }
    fn visit_u64<E: de::Error>(self, key: u64) -> Result<V::Value, E> {
        self.inner.visit_u64(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::watch::strip_unread_metadata;
    use kube::api::WatchEvent;
    use sample_operator_api::Foo;
    use serde_json::json;

    fn foo_json() -> serde_json::Value {
        json!({
            "apiVersion": "samplecontroller.k8s.io/v1alpha1",
            "kind": "Foo",
            "metadata": {
                "name": "f", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                "generation": 2, "creationTimestamp": "2026-12-07T10:00:00Z",
                "finalizers": ["x/y"],
                "labels": { "app": "a" },
                "annotations": { "kubectl.kubernetes.io/last-applied-configuration": "{}" },
                "managedFields": [{ "manager": "sample-operator", "operation": "Apply",
                    "fieldsType": "FieldsV1", "fieldsV1": { "f:status": { "f:availableReplicas": {} } } }],
                "ownerReferences": [{ "apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u-0" }],
            },
            // Keys named like the unread ones, outside `metadata`, are read.
            "spec": { "deploymentName": "labels", "replicas": 3 },
            "status": { "availableReplicas": 1, "observedGeneration": 2, "conditions": [] },
        })
    }

    #[test]
    fn reads_what_the_type_reads_less_the_metadata_that_is_stripped() {
        let mut stripped: Foo = serde_json::from_value(foo_json()).unwrap();
        strip_unread_metadata(&mut stripped);
        let text = foo_json().to_string();
        let Lean(lean) = serde_json::from_str::<Lean<Foo>>(&text).unwrap();
        assert_eq!(
            serde_json::to_value(&lean).unwrap(),
            serde_json::to_value(&stripped).unwrap()
        );
        assert_eq!(lean.metadata.finalizers.as_deref(), Some(&["x/y".to_owned()][..]));
        assert_eq!(lean.spec.deployment_name, "labels");

        // Skipped, not parsed: shapes that `ObjectMeta` refuses make no difference.
        let mut odd = foo_json();
        odd["metadata"]["managedFields"] = "not a list".into();
        odd["metadata"]["annotations"] = json!([1, 2]);
        odd["metadata"]["labels"] = 7.into();
        assert!(serde_json::from_value::<Foo>(odd.clone()).is_err());
        let Lean(odd) = serde_json::from_str::<Lean<Foo>>(&odd.to_string()).unwrap();
        assert_eq!(
            serde_json::to_value(&odd).unwrap(),
            serde_json::to_value(&stripped).unwrap()
        );
    }

    #[test]
    fn reads_watch_events_in_either_order_of_their_fields_and_values_decoded_twice() {
        // The apiserver sends `type` first; with `object` first serde buffers the object,
        // and reads it from its buffer.
        for event in [
            format!(r#"{{"type":"MODIFIED","object":{}}}"#, foo_json()),
            format!(r#"{{"object":{},"type":"MODIFIED"}}"#, foo_json()),
        ] {
            let Ok(WatchEvent::Modified(Lean(foo))) = serde_json::from_str::<WatchEvent<Lean<Foo>>>(&event)
            else {
                panic!("not read: {event}");
            };
            assert_eq!(foo.metadata.managed_fields, None);
            assert_eq!(foo.metadata.annotations, None);
            assert_eq!(foo.metadata.labels, None);
            assert_eq!(foo.metadata.uid.as_deref(), Some("u-1"));
        }
        // From a `serde_json::Value`, whose keys are owned strings.
        let Lean(foo) = serde_json::from_value::<Lean<Foo>>(foo_json()).unwrap();
        assert_eq!(foo.metadata.managed_fields, None);
        assert_eq!(foo.metadata.name.as_deref(), Some("f"));
    }

    #[test]
    fn reads_an_optional_metadata_too() {
        #[derive(serde::Deserialize)]
        struct Optional {
            metadata: Option<ObjectMeta>,
        }
        let read = |json: serde_json::Value| {
            serde_json::from_str::<Lean<Optional>>(&json.to_string()).map(|Lean(o)| o.metadata)
        };
        let metadata = read(json!({ "metadata": { "name": "n", "managedFields": "not a list" } }))
            .unwrap()
            .unwrap();
        assert_eq!(
            (metadata.name.as_deref(), metadata.managed_fields),
            (Some("n"), None)
        );
        assert_eq!(read(json!({ "metadata": null })).unwrap(), None);
    }

    #[test]
    fn is_the_same_resource() {
        assert_eq!(
            <Lean<Foo> as Resource>::url_path(&(), Some("ns")),
            <Foo as Resource>::url_path(&(), Some("ns"))
        );
    }
}
