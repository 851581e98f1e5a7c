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
//! rows replace the old ones once complete), before they trigger reconciles. It also tells which
//! events need one: since reconcile reads nothing of a Deployment but its row, an event that
//! leaves the row as it was changes nothing a reconcile would do (the Deployment controller's
//! updates of conditions and counters other than `availableReplicas`), and neither does the
//! event of a Deployment the controller created, carrying the very object the create answered
//! with, which the reconcile that created it has already used.

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
    /// The row of the Deployment `name` in `namespace`.
    fn get(&self, namespace: &str, name: &str) -> Option<&Row> {
        self.rows.get(namespace)?.get(name)
    }

    fn insert(&mut self, namespace: &str, name: &str, mut row: Row) {
        self.remove(namespace, name);
        if let Some(controller) = row.controller.take() {
            let entry = self.by_controller.entry(controller);
            row.controller = Some(entry.key().clone());
            let names = entry.or_default();
            // Rarely more than one: rebuilt rather than grown, so that it has no spare room.
            *names = names.iter().cloned().chain([name.into()]).collect();
        }
        let names = match self.rows.get_mut(namespace) {
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

/// The rows in use, and the creations not yet reported, under one lock: a creation is
/// recorded only while its event has not come, or it would wait for one that never does.
#[derive(Default)]
struct Live {
    rows: Rows,
    /// The resourceVersions of the Deployments the controller created, by namespace, then
    /// name, until the watch reports them (or another version, or their deletion), or until a
    /// re-list completes, which may not have them: what is left is forgotten then, at the cost
    /// of a reconcile that finds nothing to do.
    created: HashMap<Box<str>, HashMap<Box<str>, Box<str>>>,
}

/// The table, shared: clones see the same rows.
#[derive(Clone, Default)]
pub struct DeploymentTable {
    live: Arc<RwLock<Live>>,
    /// The rows being rebuilt during a re-list.
    building: Arc<Mutex<Option<Rows>>>,
}

impl DeploymentTable {
    /// Follows one watcher event; call it for every event of the stream, in order. Returns
    /// whether the event's Deployment needs its Foo reconciled: deleted, or its row changed by
    /// anyone but the create that made it.
    pub fn apply(&self, event: &Event<CachedDeployment>) -> bool {
        match event {
            Event::Apply(d) => {
                let Some((namespace, name)) = key(d) else {
                    return true;
                };
                let mut live = self.live.write().expect("table lock");
                let (row, needed) = live.follow(namespace, name, d);
                live.rows.insert(namespace, name, row);
                needed
            }
            Event::Delete(d) => {
                if let Some((namespace, name)) = key(d) {
                    let mut live = self.live.write().expect("table lock");
                    live.take_created(namespace, name);
                    live.rows.remove(namespace, name);
                }
                true
            }
            Event::Init => {
                *self.building.lock().expect("table lock") = Some(Rows::default());
                false
            }
            Event::InitApply(d) => {
                let Some((namespace, name)) = key(d) else {
                    return true;
                };
                // Compared with the rows in use, which the re-list replaces once complete.
                let (row, needed) = self.live.write().expect("table lock").follow(namespace, name, d);
                if let Some(rows) = self.building.lock().expect("table lock").as_mut() {
                    rows.insert(namespace, name, row);
                }
                needed
            }
            Event::InitDone => {
                if let Some(rows) = self.building.lock().expect("table lock").take() {
                    let mut live = self.live.write().expect("table lock");
                    live.rows = rows;
                    live.created.clear();
                }
                false
            }
        }
    }

    /// Records a Deployment the controller has just created, as the create answered: its
    /// watch event then triggers nothing, unless the watch has already reported it.
    pub fn record_created(&self, created: &CachedDeployment) {
        let (Some((namespace, name)), Some(version)) =
            (key(created), created.metadata.resource_version.as_deref())
        else {
            return;
        };
        let mut live = self.live.write().expect("table lock");
        if live.rows.get(namespace, name).is_none() {
            let names = live.created.entry(namespace.into()).or_default();
            names.insert(name.into(), version.into());
        }
    }

    /// The row of the Deployment `name` in `namespace`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Row> {
        let live = self.live.read().expect("table lock");
        live.rows.get(namespace, name).cloned()
    }

    /// The Deployments in `namespace` whose controller is the object with `uid`, by name.
    pub fn controlled_by(&self, namespace: &str, uid: &str) -> Vec<(Box<str>, Row)> {
        let live = &self.live.read().expect("table lock").rows;
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
        live.rows.rows.values().map(HashMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Live {
    /// The row of `d`, and whether its event needs a reconcile: not the creation recorded
    /// for its name, and a row unlike the one in use.
    fn follow(&mut self, namespace: &str, name: &str, d: &CachedDeployment) -> (Row, bool) {
        let row = Row::of(d);
        let created = self.take_created(namespace, name);
        let ours = created.is_some() && created.as_deref() == d.metadata.resource_version.as_deref();
        let changed = self.rows.get(namespace, name) != Some(&row);
        (row, changed && !ours)
    }

    /// Forgets the creation recorded for `name` in `namespace`, returning its resourceVersion.
    fn take_created(&mut self, namespace: &str, name: &str) -> Option<Box<str>> {
        let names = self.created.get_mut(namespace)?;
        let version = names.remove(name);
        if names.is_empty() {
            self.created.remove(namespace);
        }
        version
    }
}

/// A Deployment's namespace and name.
fn key(d: &CachedDeployment) -> Option<(&str, &str)> {
    Some((d.metadata.namespace.as_deref()?, d.metadata.name.as_deref()?))
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
        assert!(
            !table
                .live
                .read()
                .unwrap()
                .rows
                .by_controller
                .contains_key("foo-1")
        );
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
        let live = &live.rows;
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
        let live = &live.rows;
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

    fn version(mut d: CachedDeployment, resource_version: &str) -> CachedDeployment {
        d.metadata.resource_version = Some(resource_version.into());
        d
    }

    fn available(mut d: CachedDeployment, replicas: i32) -> CachedDeployment {
        d.status = Some(Status {
            observed_generation: None,
            available_replicas: Some(replicas),
        });
        d
    }

    fn waiting_creations(table: &DeploymentTable) -> usize {
        let live = table.live.read().unwrap();
        live.created.values().map(HashMap::len).sum()
    }

    #[test]
    fn only_a_changed_row_or_a_deletion_needs_a_reconcile() {
        let table = DeploymentTable::default();
        let web = deployment("ns", "web", Some("foo-1"));
        assert!(table.apply(&Event::Apply(version(web.clone(), "1"))), "new");
        // A version that changes nothing the row keeps (the Deployment controller's conditions).
        assert!(!table.apply(&Event::Apply(version(web.clone(), "2"))));
        assert!(table.apply(&Event::Apply(version(available(web.clone(), 1), "3"))));
        assert!(table.apply(&Event::Delete(version(available(web.clone(), 1), "4"))));
        assert!(table.apply(&Event::Apply(version(web.clone(), "5"))), "back");

        // A re-list compares with the rows in use: only what changed meanwhile asks.
        assert!(!table.apply(&Event::Init));
        assert!(!table.apply(&Event::InitApply(version(web.clone(), "5"))));
        let db = deployment("ns", "db", Some("foo-2"));
        assert!(table.apply(&Event::InitApply(version(db, "6"))));
        assert!(!table.apply(&Event::InitDone));
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn the_event_of_a_deployment_the_controller_created_needs_no_reconcile() {
        let table = DeploymentTable::default();
        let web = deployment("ns", "web", Some("foo-1"));
        table.record_created(&version(web.clone(), "7"));
        assert_eq!(waiting_creations(&table), 1);
        assert!(!table.apply(&Event::Apply(version(web.clone(), "7"))));
        assert_eq!(waiting_creations(&table), 0, "forgotten once reported");
        assert!(table.apply(&Event::Apply(version(available(web.clone(), 1), "8"))));

        // Changed before its event came (a re-list that missed the created version): the
        // version the watch brings is not the one created, so it asks.
        let db = deployment("ns", "db", Some("foo-2"));
        table.record_created(&version(db.clone(), "9"));
        assert!(table.apply(&Event::Apply(version(available(db.clone(), 1), "10"))));
        assert_eq!(waiting_creations(&table), 0);
        // Another namespace's Deployment of the same name is another Deployment.
        table.record_created(&version(deployment("other", "web", Some("foo-3")), "11"));
        assert!(table.apply(&Event::Apply(version(web, "11"))));
        assert_eq!(waiting_creations(&table), 1);
    }

    #[test]
    fn a_creation_waits_for_no_event_that_cannot_come() {
        let table = DeploymentTable::default();
        // Reported before the create's answer got back: nothing waits for it.
        let web = version(deployment("ns", "web", Some("foo-1")), "3");
        assert!(table.apply(&Event::Apply(web.clone())));
        table.record_created(&web);
        assert_eq!(waiting_creations(&table), 0);

        // Deleted: forgotten.
        let db = version(deployment("ns", "db", Some("foo-2")), "4");
        table.record_created(&db);
        assert!(table.apply(&Event::Delete(db.clone())));
        assert_eq!(waiting_creations(&table), 0);

        // A re-list may not have it (created and deleted while the watch was away): forgotten
        // once the re-list completes, and an event of it then asks.
        table.record_created(&db);
        table.apply(&Event::Init);
        table.apply(&Event::InitDone);
        assert_eq!(waiting_creations(&table), 0);
        assert!(table.apply(&Event::Apply(db)));
    }
}
