//! The work queue, shared fairly between namespaces.
//!
//! kube-runtime's scheduler runs ready reconciles in the order they were asked for, so one
//! tenant's burst of 10,000 objects would run before another tenant's one object, asked for a
//! moment later. Triggers wait here instead: one first-in-first-out line per namespace, and
//! the namespaces take turns, one object each. An object goes on to kube-runtime only when the
//! controller has room for it (its concurrency), so kube-runtime's own queue never holds more
//! than what runs next, and an object of a namespace with nothing else waiting starts after at
//! most one object of each other namespace with work waiting.
//!
//! As client-go's workqueue does, an object waits here once however often it is triggered, and
//! one triggered while it is handed over or running waits until that run ends, then runs once
//! more: a run reads the cache when it starts, so one run after the last trigger is enough.

use std::collections::HashSet;
use std::sync::Mutex;

use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::Notify;

use super::turns::Turns;

/// A fair queue of the objects of one controller; see the module docs.
pub struct FairQueue<K: Resource<DynamicType = ()>> {
    state: Mutex<State<K>>,
    /// The consumer's: an object waits and there may be room.
    ready: Notify,
    /// Objects handed over or running at once, at most.
    room: usize,
}

struct State<K: Resource<DynamicType = ()>> {
    /// Each namespace's line (cluster-scoped objects share the line of ""), taking turns.
    lines: Turns<ObjectRef<K>>,
    /// Every object in a line, to queue each once.
    waiting: HashSet<ObjectRef<K>>,
    /// Handed to kube-runtime and not started yet.
    handed: HashSet<ObjectRef<K>>,
    running: HashSet<ObjectRef<K>>,
    /// Triggered while handed over or running: queued again when that run ends.
    again: HashSet<ObjectRef<K>>,
}

impl<K: Resource<DynamicType = ()>> Default for State<K> {
    fn default() -> Self {
        Self {
            lines: Turns::default(),
            waiting: HashSet::new(),
            handed: HashSet::new(),
            running: HashSet::new(),
            again: HashSet::new(),
        }
    }
}

impl<K: Resource<DynamicType = ()>> State<K> {
    /// Whether `object` was not waiting already.
    fn enqueue(&mut self, object: ObjectRef<K>) -> bool {
        if !self.waiting.insert(object.clone()) {
            return false;
        }
        let namespace = object.namespace.clone().unwrap_or_default();
        self.lines.push(&namespace, object);
        true
    }

    /// The first object of the namespace whose turn it is.
    fn dequeue(&mut self) -> Option<ObjectRef<K>> {
        let object = self.lines.pop()?;
        self.waiting.remove(&object);
        Some(object)
    }

    /// A run of `object` ended, or will not happen: it waits again if it was triggered since.
    fn ended(&mut self, object: &ObjectRef<K>) {
        if self.again.remove(object) {
            self.enqueue(object.clone());
        }
    }
}

impl<K: Resource<DynamicType = ()>> FairQueue<K> {
    /// A queue that hands over at most `room` objects at once (0: no limit), as kube-runtime's
    /// concurrency of the same value runs them.
    pub fn new(room: u16) -> Self {
        Self {
            state: Mutex::default(),
            ready: Notify::new(),
            room: if room == 0 { usize::MAX } else { usize::from(room) },
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks for a reconcile of `object`; whether that adds one (it was neither waiting nor
    /// about to start, nor asked for again already while it runs).
    pub fn push(&self, object: ObjectRef<K>) -> bool {
        let mut state = self.lock();
        if state.handed.contains(&object) {
            // Not started yet: its run will read the cache as it is then.
            return false;
        }
        if state.running.contains(&object) {
            return state.again.insert(object);
        }
        let added = state.enqueue(object);
        drop(state);
        self.ready.notify_one();
        added
    }

    /// The next object to hand to kube-runtime, once one waits and there is room.
    pub async fn next(&self) -> ObjectRef<K> {
        loop {
            let ready = self.ready.notified();
            {
                let mut state = self.lock();
                if state.handed.len() + state.running.len() < self.room
                    && let Some(object) = state.dequeue()
                {
                    state.handed.insert(object.clone());
                    return object;
                }
            }
            ready.await;
        }
    }

    /// A reconcile of `object` starts: handed over by this queue, or a retry kube-runtime
    /// scheduled itself.
    pub fn started(&self, object: &ObjectRef<K>) {
        let mut state = self.lock();
        state.handed.remove(object);
        state.running.insert(object.clone());
    }

    /// The reconcile of `object` ended.
    pub fn finished(&self, object: &ObjectRef<K>) {
        let mut state = self.lock();
        state.running.remove(object);
        state.ended(object);
        drop(state);
        self.ready.notify_one();
    }

    /// kube-runtime dropped `object` unreconciled: it was gone from the cache by its turn.
    pub fn dropped(&self, object: &ObjectRef<K>) {
        let mut state = self.lock();
        if state.handed.remove(object) {
            state.ended(object);
            drop(state);
            self.ready.notify_one();
        }
    }

    /// Objects waiting in the lines.
    pub fn depth(&self) -> usize {
        self.lock().waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::time::Duration;

    fn object(namespace: &str, name: &str) -> ObjectRef<ConfigMap> {
        ObjectRef::new(name).within(namespace)
    }

    fn name(object: &ObjectRef<ConfigMap>) -> String {
        format!(
            "{}/{}",
            object.namespace.as_deref().unwrap_or_default(),
            object.name
        )
    }

    /// Hands over and finishes objects one at a time, as a controller of concurrency 1 would.
    async fn run_one_at_a_time(queue: &FairQueue<ConfigMap>, count: usize) -> Vec<String> {
        let mut order = Vec::new();
        for _ in 0..count {
            let next = tokio::time::timeout(Duration::from_secs(1), queue.next())
                .await
                .expect("an object waits");
            queue.started(&next);
            queue.finished(&next);
            order.push(name(&next));
        }
        order
    }

    #[tokio::test]
    async fn a_namespace_with_one_object_waits_for_one_turn_of_each_other_namespace() {
        let queue = FairQueue::new(1);
        for i in 0..10_000 {
            queue.push(object("burst", &format!("b{i}")));
        }
        for i in 0..100 {
            queue.push(object("steady", &format!("s{i}")));
        }
        queue.push(object("single", "one"));
        let order = run_one_at_a_time(&queue, 6).await;
        // Each line in turn; each in the order it was asked for.
        assert_eq!(
            order,
            [
                "burst/b0",
                "steady/s0",
                "single/one",
                "burst/b1",
                "steady/s1",
                "burst/b2"
            ]
        );
        assert_eq!(queue.depth(), 10_000 + 100 + 1 - 6);
    }

    #[tokio::test]
    async fn an_object_waits_once_and_runs_again_when_triggered_while_it_runs() {
        let queue = FairQueue::new(2);
        let added: Vec<bool> = (0..3).map(|_| queue.push(object("ns", "a"))).collect();
        assert_eq!(added, [true, false, false], "queued once");
        queue.push(object("ns", "b"));
        assert_eq!(queue.depth(), 2);
        let a = queue.next().await;
        assert_eq!(name(&a), "ns/a");
        // Handed over and not started: the coming run will see the change.
        queue.push(object("ns", "a"));
        assert_eq!(queue.depth(), 1);
        queue.started(&a);
        // Running: one more run once this one ends, not two at once.
        assert!(queue.push(object("ns", "a")));
        assert!(!queue.push(object("ns", "a")));
        assert_eq!(queue.depth(), 1);
        let b = queue.next().await;
        assert_eq!(name(&b), "ns/b");
        queue.finished(&a);
        assert_eq!(queue.depth(), 1);
        queue.started(&b);
        queue.finished(&b);
        assert_eq!(run_one_at_a_time(&queue, 1).await, ["ns/a"]);
        assert_eq!(queue.depth(), 0);
    }

    #[tokio::test]
    async fn no_more_is_handed_over_than_the_controller_has_room_for() {
        let queue = FairQueue::new(2);
        for i in 0..5 {
            queue.push(object("ns", &format!("o{i}")));
        }
        let (first, second) = (queue.next().await, queue.next().await);
        // Two handed over, none started: no room for a third.
        let third = tokio::time::timeout(Duration::from_millis(50), queue.next()).await;
        assert!(third.is_err(), "a third was handed over");
        // A retry kube-runtime runs by itself takes room too, until it ends.
        queue.started(&first);
        queue.started(&object("other", "retry"));
        queue.finished(&first);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), queue.next())
                .await
                .is_err()
        );
        queue.finished(&object("other", "retry"));
        let third = tokio::time::timeout(Duration::from_secs(1), queue.next())
            .await
            .unwrap();
        assert_eq!(name(&third), "ns/o2");
        // One dropped unreconciled (gone from the cache) frees its room.
        queue.dropped(&second);
        let fourth = tokio::time::timeout(Duration::from_secs(1), queue.next())
            .await
            .unwrap();
        assert_eq!(name(&fourth), "ns/o3");
    }
}
