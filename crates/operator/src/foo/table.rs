//! The operator's Deployments as the Foo controller remembers them: one small row each, not the
//! objects.
//!
//! Reconcile reads four things of a Deployment: its uid (to write to exactly that object), the
//! uid of its controller (to touch only its own), whether the fields the operator manages match
//! what the Foo wants, and how available it is. A cache of the objects themselves (kube's
//! reflector store of [`CachedDeployment`]s, and an index beside it) held about 1.6 KiB per Foo
//! in the heap profile in bench/README.md: an `ObjectMeta` each, the strings of its labels, owner
//! references and selector, and store keys. A [`Row`] keeps the managed fields as a digest
//! ([`deployment::observed_digest`]) and the rest as two strings and two numbers; names are kept
//! per namespace, so a namespace's name is stored once.
//!
//! The table follows the Deployment watch's events in order (re-lists included, where the new
//! rows replace the old ones once complete), before they trigger reconciles.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use kube::ResourceExt;
use kube::runtime::watcher::Event;

use super::cached::CachedDeployment;
use super::deployment;

/// What reconcile reads of one Deployment.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub uid: Box<str>,
    /// The uid of the object with its controller owner reference (a Foo's, when ours).
    pub controller: Option<Arc<str>>,
    /// [`deployment::observed_digest`]: compared with the desired Deployment's.
    pub managed: u64,
    pub available_replicas: i32,
    /// Whether the Deployment controller has seen the latest spec.
    pub rolled_out: bool,
}

impl Row {
    pub fn of(deployment: &CachedDeployment) -> Self {
        let observed_generation = deployment.status.as_ref().and_then(|s| s.observed_generation);
        Self {
            uid: deployment.uid().unwrap_or_default().into(),
            controller: deployment
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true))
                .map(|o| o.uid.as_str().into()),
            managed: deployment::observed_digest(deployment),
            available_replicas: deployment
                .status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0),
            rolled_out: observed_generation.is_some()
                && observed_generation >= deployment.metadata.generation,
        }
    }

    /// Whether the object with `uid` is this Deployment's controller.
    pub fn is_controlled_by(&self, uid: &str) -> bool {
        self.controller.as_deref() == Some(uid)
    }
}

#[derive(Default)]
struct Rows {
    /// Rows by namespace, then name.
    rows: HashMap<Box<str>, HashMap<Box<str>, Row>>,
    /// Names by the uid of their controller (the Deployments a Foo left behind after a rename);
    /// the key is shared with the rows' `controller`.
    by_controller: HashMap<Arc<str>, Box<[Box<str>]>>,
}

impl Rows {
    fn insert(&mut self, deployment: &CachedDeployment) {
        let (Some(namespace), Some(name)) = (deployment.namespace(), deployment.metadata.name.as_deref())
        else {
            return;
        };
        self.remove(&namespace, name);
        let mut row = Row::of(deployment);
        if let Some(controller) = row.controller.take() {
            let entry = self.by_controller.entry(controller);
            row.controller = Some(entry.key().clone());
            let names = entry.or_default();
            // Rarely more than one: rebuilt rather than grown, so that it has no spare room.
            *names = names.iter().cloned().chain([name.into()]).collect();
        }
        let names = match self.rows.get_mut(namespace.as_str()) {
            Some(names) => names,
            None => self.rows.entry(namespace.into()).or_default(),
        };
        names.insert(name.into(), row);
    }

    fn remove(&mut self, namespace: &str, name: &str) {
        let Some(names) = self.rows.get_mut(namespace) else {
            return;
        };
        let Some(row) = names.remove(name) else {
            return;
        };
        if names.is_empty() {
            self.rows.remove(namespace);
        }
        let Some(controller) = row.controller else {
            return;
        };
        if let Some(names) = self.by_controller.get_mut(&controller) {
            // One occurrence: a Deployment of the same name in another namespace may claim the
            // same controller.
            let mut kept: Vec<Box<str>> = names.to_vec();
            if let Some(at) = kept.iter().position(|n| &**n == name) {
                kept.remove(at);
            }
            if kept.is_empty() {
                self.by_controller.remove(&controller);
            } else {
                *names = kept.into_boxed_slice();
            }
        }
    }
}

/// The table, shared: clones see the same rows.
#[derive(Clone, Default)]
pub struct DeploymentTable {
    live: Arc<RwLock<Rows>>,
    /// The rows being rebuilt during a re-list.
    building: Arc<Mutex<Option<Rows>>>,
}

impl DeploymentTable {
    /// Follows one watcher event; call it for every event of the stream, in order.
    pub fn apply(&self, event: &Event<CachedDeployment>) {
        match event {
            Event::Apply(d) => self.live.write().expect("table lock").insert(d),
            Event::Delete(d) => {
                let (namespace, name) = (d.namespace().unwrap_or_default(), d.name_any());
                self.live.write().expect("table lock").remove(&namespace, &name);
            }
            Event::Init => *self.building.lock().expect("table lock") = Some(Rows::default()),
            Event::InitApply(d) => {
                if let Some(rows) = self.building.lock().expect("table lock").as_mut() {
                    rows.insert(d);
                }
            }
            Event::InitDone => {
                if let Some(rows) = self.building.lock().expect("table lock").take() {
                    *self.live.write().expect("table lock") = rows;
                }
            }
        }
    }

    /// The row of the Deployment `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Row> {
        let live = self.live.read().expect("table lock");
        live.rows.get(namespace)?.get(name).cloned()
    }

    /// The Deployments in `namespace` whose controller is the object with `uid`, by name.
    pub fn controlled_by(&self, namespace: &str, uid: &str) -> Vec<(Box<str>, Row)> {
        let live = self.live.read().expect("table lock");
        let (Some(names), Some(rows)) = (live.by_controller.get(uid), live.rows.get(namespace)) else {
            return Vec::new();
        };
        // A name twice: one claimed from another namespace too.
        let names: BTreeSet<&Box<str>> = names.iter().collect();
        names
            .into_iter()
            .filter_map(|name| rows.get(name).map(|row| (name.clone(), row.clone())))
            .filter(|(_, row)| row.is_controlled_by(uid))
            .collect()
    }

    /// How many Deployments the table holds.
    pub fn len(&self) -> usize {
        let live = self.live.read().expect("table lock");
        live.rows.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::foo::cached::Status;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn deployment(namespace: &str, name: &str, controller: Option<&str>) -> CachedDeployment {
        let mut d = CachedDeployment::default();
        d.metadata.namespace = Some(namespace.into());
        d.metadata.name = Some(name.into());
        d.metadata.uid = Some(format!("uid-of-{namespace}-{name}"));
        d.metadata.owner_references = controller.map(|uid| {
            vec![
                OwnerReference {
                    uid: "someone-else".into(),
                    ..Default::default()
                },
                OwnerReference {
                    uid: uid.into(),
                    controller: Some(true),
                    ..Default::default()
                },
            ]
        });
        d
    }

    fn names(rows: Vec<(Box<str>, Row)>) -> Vec<String> {
        let mut names: Vec<_> = rows.into_iter().map(|(name, _)| name.into()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_row_has_what_reconcile_reads() {
        let mut d = deployment("ns", "web", Some("foo-1"));
        d.metadata.generation = Some(3);
        d.status = Some(Status {
            observed_generation: Some(2),
            available_replicas: Some(2),
        });
        let row = Row::of(&d);
        assert_eq!(&*row.uid, "uid-of-ns-web");
        assert!(row.is_controlled_by("foo-1"));
        assert!(
            !row.is_controlled_by("someone-else"),
            "an owner, not the controller"
        );
        assert_eq!((row.available_replicas, row.rolled_out), (2, false));
        assert_eq!(row.managed, deployment::observed_digest(&d));
        d.status.as_mut().unwrap().observed_generation = Some(3);
        assert!(Row::of(&d).rolled_out);
        d.status = None;
        assert_eq!(
            (Row::of(&d).available_replicas, Row::of(&d).rolled_out),
            (0, false)
        );
    }

    #[test]
    fn follows_applies_updates_and_deletes() {
        let table = DeploymentTable::default();
        table.apply(&Event::Apply(deployment("ns", "web", Some("foo-1"))));
        table.apply(&Event::Apply(deployment("ns", "old-web", Some("foo-1"))));
        table.apply(&Event::Apply(deployment("ns", "db", Some("foo-2"))));
        table.apply(&Event::Apply(deployment("other", "web", Some("foo-3"))));
        assert_eq!(table.len(), 4);
        assert_eq!(names(table.controlled_by("ns", "foo-1")), ["old-web", "web"]);
        assert!(table.get("other", "web").unwrap().is_controlled_by("foo-3"));

        // Taken over by another controller: no longer foo-1's.
        table.apply(&Event::Apply(deployment("ns", "old-web", Some("foo-2"))));
        assert_eq!(names(table.controlled_by("ns", "foo-1")), ["web"]);
        assert_eq!(names(table.controlled_by("ns", "foo-2")), ["db", "old-web"]);
        assert_eq!(table.len(), 4);

        table.apply(&Event::Delete(deployment("ns", "web", Some("foo-1"))));
        assert!(table.get("ns", "web").is_none());
        assert!(table.controlled_by("ns", "foo-1").is_empty());
        assert!(!table.live.read().unwrap().by_controller.contains_key("foo-1"));
        assert_eq!(table.len(), 3);
        for (namespace, name, controller) in [
            ("ns", "old-web", "foo-2"),
            ("ns", "db", "foo-2"),
            ("other", "web", "foo-3"),
        ] {
            table.apply(&Event::Delete(deployment(namespace, name, Some(controller))));
        }
        assert!(table.is_empty());
        let live = table.live.read().unwrap();
        assert!(
            live.rows.is_empty() && live.by_controller.is_empty(),
            "nothing left behind"
        );
    }

    #[test]
    fn a_controller_uid_claimed_in_another_namespace_finds_only_its_own() {
        let table = DeploymentTable::default();
        table.apply(&Event::Apply(deployment("ns", "web", Some("foo-1"))));
        // Someone else's Deployment claiming foo-1 as controller in another namespace.
        table.apply(&Event::Apply(deployment("elsewhere", "web", Some("foo-1"))));
        table.apply(&Event::Apply(deployment("elsewhere", "db", Some("foo-1"))));
        assert_eq!(names(table.controlled_by("ns", "foo-1")), ["web"]);
        table.apply(&Event::Delete(deployment("elsewhere", "web", Some("foo-1"))));
        assert_eq!(names(table.controlled_by("ns", "foo-1")), ["web"]);
        // A Deployment without a controller is kept, and controlled by nobody.
        table.apply(&Event::Apply(deployment("ns", "loose", None)));
        assert_eq!(table.get("ns", "loose").unwrap().controller, None);
    }

    #[test]
    fn rows_share_their_controllers_uid_with_the_index() {
        let table = DeploymentTable::default();
        table.apply(&Event::Apply(deployment("ns", "web", Some("foo-1"))));
        table.apply(&Event::Apply(deployment("ns", "old-web", Some("foo-1"))));
        let live = table.live.read().unwrap();
        let (key, names) = live.by_controller.get_key_value("foo-1").unwrap();
        for name in ["web", "old-web"] {
            let row = &live.rows["ns"][name];
            assert!(Arc::ptr_eq(row.controller.as_ref().unwrap(), key), "{name}");
        }
        assert_eq!(names.len(), 2);
    }

    #[test]
    fn a_relist_replaces_the_rows_once_complete() {
        let table = DeploymentTable::default();
        table.apply(&Event::Apply(deployment("ns", "gone", Some("foo-1"))));
        table.apply(&Event::Init);
        table.apply(&Event::InitApply(deployment("ns", "new", Some("foo-1"))));
        // Until the re-list is complete, lookups see the old rows.
        assert!(table.get("ns", "gone").is_some());
        assert!(table.get("ns", "new").is_none());
        table.apply(&Event::InitDone);
        assert!(table.get("ns", "gone").is_none());
        assert_eq!(names(table.controlled_by("ns", "foo-1")), ["new"]);
        assert_eq!(table.len(), 1);
    }
}
