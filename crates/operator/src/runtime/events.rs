//! Events, published in the background and after the writes that converge objects.
//!
//! An event is a report, not part of the work: a reconcile queues it and goes on. Users wait
//! for their Deployments and statuses, not for the Events about them, so a task sends the queue
//! while no reconcile runs, and only a trickle while reconciles write, unless the oldest event
//! has waited [`MAX_DELAY`]. Nothing is dropped (client-go's broadcaster drops events once its
//! queue of 1,000 is full):
//! - a repeat of a queued event (same object, type, reason, note and action) is folded into it,
//!   and sent as one events.k8s.io Event whose `series` counts the repeats;
//! - the queue holds at most [`MAX_PENDING`] distinct events, and a reconcile waits for room
//!   only beyond that;
//! - a send that fails for a reason that may pass (no answer, 429, 5xx) is retried.
//!
//! Namespaces take turns: each has its own line, and the publisher sends one event of each
//! namespace with events queued in turn, so one tenant's burst of thousands of events delays
//! another tenant's event by at most one event of each namespace.
//!
//! kube-runtime's `Recorder` folds repeats only through a cache of every event it sent for six
//! minutes, scanned on each publish, which at thousands of objects costs more than the
//! controllers; folding in the queue costs nothing once sent, so this module writes the Event
//! itself, in the form `Recorder` writes it.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as KubeEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::runtime::events::{EventType, Reporter};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::metrics::Metrics;
use super::turns::Turns;

/// Distinct events queued, at most (about 0.5 KiB each).
pub const MAX_PENDING: usize = 65_536;
/// How long an event waits, at most, before it is sent beside the controllers' writes.
pub const MAX_DELAY: Duration = Duration::from_secs(20);
/// Sends at once while no reconcile runs.
const IDLE_CONCURRENCY: usize = 8;
/// Sends at once while reconciles run and no event is overdue.
const BUSY_CONCURRENCY: usize = 1;
/// Sends at once while reconciles run and the oldest event waited [`MAX_DELAY`].
const OVERDUE_CONCURRENCY: usize = 4;
/// How often the publisher looks again at whether reconciles run.
const TICK: Duration = Duration::from_millis(50);
/// Attempts of one send that fails for a reason that may pass.
const ATTEMPTS: u32 = 4;

/// How many events may be sent at once.
fn concurrency(reconciles_running: bool, oldest_waited: Duration) -> usize {
    match (reconciles_running, oldest_waited >= MAX_DELAY) {
        (false, _) => IDLE_CONCURRENCY,
        (true, false) => BUSY_CONCURRENCY,
        (true, true) => OVERDUE_CONCURRENCY,
    }
}

/// Which Events are written, as the admin chooses (`--events`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum EventLevel {
    /// Every Event: transitions, outcomes and warnings.
    #[default]
    All,
    /// Warnings only (a failure, a conflict, an object turned unhealthy): what needs a person.
    Warnings,
    /// None: status conditions, logs and metrics still say everything.
    None,
}

impl EventLevel {
    /// Whether an Event of `type_` is written at this level.
    pub fn writes(self, type_: EventType) -> bool {
        match self {
            EventLevel::All => true,
            EventLevel::Warnings => type_ == EventType::Warning,
            EventLevel::None => false,
        }
    }
}

/// Where controllers queue their events; cheap to clone. The queue closes, and the publisher
/// ends once it has sent what is left, when the last clone is dropped.
#[derive(Clone)]
pub struct Events {
    queue: Arc<Queue>,
    metrics: Arc<Metrics>,
    level: EventLevel,
    _open: Arc<Open>,
}

/// Closes the queue when dropped.
struct Open(Arc<Queue>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.wake.notify_one();
    }
}

/// The task that publishes the queue; see [`Publisher::finish`].
pub struct Publisher {
    task: JoinHandle<()>,
    queue: Arc<Queue>,
}

struct Queue {
    state: Mutex<State>,
    /// The publisher's: something was queued, or the queue closed.
    wake: Notify,
    /// Reconciles waiting for room.
    room: Notify,
}

#[derive(Default)]
struct State {
    /// In the order they were first queued.
    pending: BTreeMap<u64, Pending>,
    /// Each namespace's queued events, in the order they were first queued: the namespaces
    /// take turns, one event each, so that one namespace's burst does not hold back another's
    /// event.
    lines: Turns<u64>,
    /// The queued event each key folds into.
    by_key: HashMap<u64, u64>,
    next: u64,
    keys: RandomState,
    closed: bool,
    /// The publisher stopped: queueing more would wait forever.
    gone: bool,
}

/// One queued event and its repeats.
#[derive(Debug)]
struct Pending {
    key: u64,
    regarding: ObjectReference,
    type_: EventType,
    reason: String,
    note: String,
    action: String,
    count: i32,
    first: Timestamp,
    last: Timestamp,
    queued: Instant,
}

impl Pending {
    /// Whether `other` repeats this event: the same object (at any version), type, reason, note
    /// and action.
    fn repeated_by(&self, other: &Pending) -> bool {
        let (a, b) = (&self.regarding, &other.regarding);
        (&a.uid, &a.namespace, &a.name, &a.kind, &a.api_version)
            == (&b.uid, &b.namespace, &b.name, &b.kind, &b.api_version)
            && self.type_ == other.type_
            && (&self.reason, &self.note, &self.action) == (&other.reason, &other.note, &other.action)
    }

    fn key(&self, keys: &RandomState) -> u64 {
        let mut h = keys.build_hasher();
        let r = &self.regarding;
        (&r.uid, &r.namespace, &r.name, &r.kind, &r.api_version).hash(&mut h);
        (self.type_, &self.reason, &self.note, &self.action).hash(&mut h);
        h.finish()
    }

    /// The Event to create: a series when repeats were folded in. `at` makes the name unique
    /// per object, as client-go and kube-runtime name theirs.
    fn to_event(&self, reporter: &Reporter, at: Timestamp) -> KubeEvent {
        let object = self.regarding.name.as_deref().unwrap_or(&reporter.controller);
        KubeEvent {
            metadata: ObjectMeta {
                name: Some(format!("{object}.{:x}", at.as_nanosecond())),
                namespace: self.regarding.namespace.clone(),
                ..Default::default()
            },
            event_time: Some(MicroTime(self.first)),
            series: (self.count > 1).then_some(EventSeries {
                count: self.count,
                last_observed_time: MicroTime(self.last),
            }),
            regarding: Some(self.regarding.clone()),
            type_: Some(
                match self.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            reason: Some(self.reason.clone()),
            note: Some(self.note.clone()),
            action: Some(self.action.clone()),
            reporting_controller: Some(reporter.controller.clone()),
            reporting_instance: Some(
                reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| reporter.controller.clone()),
            ),
            ..Default::default()
        }
    }
}

/// What [`State::add`] did.
enum Added {
    New,
    Folded,
    Full(Box<Pending>),
}

impl State {
    fn add(&mut self, mut event: Pending) -> Added {
        event.key = event.key(&self.keys);
        if let Some(queued) = self
            .by_key
            .get(&event.key)
            .and_then(|seq| self.pending.get_mut(seq))
            && queued.repeated_by(&event)
        {
            queued.count = queued.count.saturating_add(1);
            queued.last = event.last;
            // The latest version of the object, as a fresh event would name.
            queued.regarding = event.regarding;
            return Added::Folded;
        }
        if self.pending.len() >= MAX_PENDING {
            return Added::Full(Box::new(event));
        }
        let seq = self.next;
        self.next += 1;
        // (A different event with the same key, however unlikely, is queued apart, unfolded.)
        self.by_key.insert(event.key, seq);
        self.lines
            .push(event.regarding.namespace.as_deref().unwrap_or_default(), seq);
        self.pending.insert(seq, event);
        Added::New
    }

    /// The first queued event of the namespace whose turn it is.
    fn take(&mut self) -> Option<Pending> {
        let seq = self.lines.pop()?;
        let event = self.pending.remove(&seq)?;
        if self.by_key.get(&event.key) == Some(&seq) {
            self.by_key.remove(&event.key);
        }
        if self.pending.is_empty() {
            // After a burst, give back the index's room rather than hold it while idle.
            self.by_key.shrink_to(1024);
        }
        Some(event)
    }

    fn oldest_waited(&self, now: Instant) -> Duration {
        self.pending
            .first_key_value()
            .map(|(_, e)| now.saturating_duration_since(e.queued))
            .unwrap_or_default()
    }
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Events {
    /// Starts the publishing task.
    pub fn start(client: Client, reporter: Reporter, metrics: Arc<Metrics>) -> (Self, Publisher) {
        let queue = Arc::new(Queue {
            state: Mutex::default(),
            wake: Notify::new(),
            room: Notify::new(),
        });
        let task = tokio::spawn(publish_queue(queue.clone(), client, reporter, metrics.clone()));
        let events = Self {
            queue: queue.clone(),
            metrics,
            level: EventLevel::All,
            _open: Arc::new(Open(queue.clone())),
        };
        (events, Publisher { task, queue })
    }

    /// Writes only the Events `level` asks for; the others are counted (`skipped`), not queued.
    #[must_use]
    pub fn with_level(self, level: EventLevel) -> Self {
        Self { level, ..self }
    }

    /// Queues an event about `regarding`; waits only while [`MAX_PENDING`] distinct events are
    /// queued.
    pub async fn publish(
        &self,
        regarding: ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
        action: &str,
    ) {
        if !self.level.writes(type_) {
            return self.metrics.event("skipped");
        }
        let now = Timestamp::now();
        let mut event = Some(Pending {
            key: 0,
            regarding,
            type_,
            reason: reason.to_owned(),
            note,
            action: action.to_owned(),
            count: 1,
            first: now,
            last: now,
            queued: Instant::now(),
        });
        loop {
            let room = self.queue.room.notified();
            let mut room = std::pin::pin!(room);
            // Registered before looking, so that room made after the look wakes this wait.
            room.as_mut().enable();
            let added = {
                let mut state = self.queue.lock();
                if state.gone {
                    tracing::debug!(reason, "run stopped: event not published");
                    return;
                }
                state.add(event.take().expect("put back when full"))
            };
            match added {
                Added::New => return self.queue.wake.notify_one(),
                Added::Folded => return self.metrics.event("folded"),
                Added::Full(back) => {
                    event = Some(*back);
                    room.await;
                }
            }
        }
    }
}

impl Drop for Publisher {
    /// A run that is aborted (a lost lease) drops its publisher unfinished: its queued events
    /// are not sent, by a process that may no longer act for the cluster.
    fn drop(&mut self) {
        self.task.abort();
        self.queue.lock().gone = true;
        self.queue.room.notify_waiters();
    }
}

impl Publisher {
    /// Once every [`Events`] handle is dropped, waits up to `timeout` for the queued events to
    /// be published, so that a stopping operator does not lose its last reports.
    pub async fn finish(mut self, timeout: Duration) {
        if tokio::time::timeout(timeout, &mut self.task).await.is_err() {
            tracing::warn!("events still queued at shutdown were not published");
        }
    }
}

/// Sends the queue until it is closed and empty, as many at once as [`concurrency`] allows.
async fn publish_queue(queue: Arc<Queue>, client: Client, reporter: Reporter, metrics: Arc<Metrics>) {
    let mut sending = FuturesUnordered::new();
    loop {
        let now = Instant::now();
        let (depth, closed) = {
            let mut state = queue.lock();
            let limit = concurrency(metrics.reconciles_running() > 0, state.oldest_waited(now));
            let mut taken = false;
            while sending.len() < limit {
                let Some(event) = state.take() else { break };
                sending.push(send(client.clone(), &reporter, event, &metrics));
                taken = true;
            }
            metrics.set_event_queue(state.pending.len(), state.oldest_waited(now));
            if taken {
                queue.room.notify_waiters();
            }
            (state.pending.len(), state.closed)
        };
        if closed && depth == 0 && sending.is_empty() {
            return;
        }
        tokio::select! {
            Some(()) = sending.next(), if !sending.is_empty() => {}
            () = queue.wake.notified() => {}
            // Whether reconciles run, and how long the oldest waited, change with time.
            () = tokio::time::sleep(TICK), if depth > 0 => {}
        }
    }
}

/// Creates the Event, retrying what may pass: no answer, 429, 5xx, or a name taken.
async fn send(client: Client, reporter: &Reporter, event: Pending, metrics: &Metrics) {
    let namespace = event.regarding.namespace.as_deref().unwrap_or("default");
    let api: Api<KubeEvent> = Api::namespaced(client, namespace);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let error = match api
            .create(
                &PostParams::default(),
                &event.to_event(reporter, Timestamp::now()),
            )
            .await
        {
            Ok(_) => return metrics.event("published"),
            Err(error) => error,
        };
        let may_pass = match &error {
            kube::Error::Api(status) => {
                status.code == 429 || status.code >= 500 || status.is_already_exists()
            }
            kube::Error::HyperError(_) | kube::Error::Service(_) => true,
            _ => false,
        };
        if !may_pass || attempt == ATTEMPTS {
            metrics.event("failed");
            return tracing::warn!(%error, reason = event.reason, attempt, "could not publish event");
        }
        tokio::time::sleep(Duration::from_millis(500) * 2u32.pow(attempt - 1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn regarding(name: &str, version: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("samplecontroller.k8s.io/v1alpha1".into()),
            kind: Some("Foo".into()),
            namespace: Some("ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some(version.into()),
            ..Default::default()
        }
    }

    fn pending(name: &str, version: &str, note: &str) -> Pending {
        let now = Timestamp::now();
        Pending {
            key: 0,
            regarding: regarding(name, version),
            type_: EventType::Normal,
            reason: "Synced".into(),
            note: note.into(),
            action: "Sync".into(),
            count: 1,
            first: now,
            last: now,
            queued: Instant::now(),
        }
    }

    #[test]
    fn events_wait_for_running_reconciles_unless_overdue() {
        assert_eq!(concurrency(false, Duration::ZERO), IDLE_CONCURRENCY);
        assert_eq!(concurrency(false, MAX_DELAY * 2), IDLE_CONCURRENCY);
        assert_eq!(concurrency(true, MAX_DELAY / 2), BUSY_CONCURRENCY);
        assert_eq!(concurrency(true, MAX_DELAY), OVERDUE_CONCURRENCY);
        const { assert!(BUSY_CONCURRENCY < OVERDUE_CONCURRENCY && OVERDUE_CONCURRENCY < IDLE_CONCURRENCY) };
    }

    #[test]
    fn repeats_fold_into_the_queued_event_and_the_order_is_kept() {
        let mut state = State::default();
        assert!(matches!(state.add(pending("a", "1", "synced")), Added::New));
        assert!(matches!(state.add(pending("b", "1", "synced")), Added::New));
        // The same event about a newer version of `a` folds; another note does not.
        assert!(matches!(state.add(pending("a", "2", "synced")), Added::Folded));
        assert!(matches!(state.add(pending("a", "3", "other")), Added::New));
        let first = state.take().unwrap();
        assert_eq!(first.regarding.name.as_deref(), Some("a"));
        assert_eq!(first.count, 2);
        assert_eq!(first.regarding.resource_version.as_deref(), Some("2"));
        // Once taken, a repeat is a new event.
        assert!(matches!(state.add(pending("a", "4", "synced")), Added::New));
        let rest: Vec<_> = std::iter::from_fn(|| state.take())
            .map(|e| (e.regarding.name.unwrap(), e.note, e.count))
            .collect();
        assert_eq!(
            rest,
            [
                ("b".into(), "synced".into(), 1),
                ("a".into(), "other".into(), 1),
                ("a".into(), "synced".into(), 1)
            ]
        );
        assert!(state.by_key.is_empty());
    }

    #[tokio::test]
    async fn the_level_decides_which_events_are_written() {
        use EventType::{Normal, Warning};
        assert!(EventLevel::All.writes(Normal) && EventLevel::All.writes(Warning));
        assert!(!EventLevel::Warnings.writes(Normal) && EventLevel::Warnings.writes(Warning));
        assert!(!EventLevel::None.writes(Normal) && !EventLevel::None.writes(Warning));
        // What is not written is counted, and never queued.
        for (level, skipped) in [
            (EventLevel::All, 0),
            (EventLevel::Warnings, 1),
            (EventLevel::None, 2),
        ] {
            let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
            let metrics = Arc::new(Metrics::new(Default::default()));
            let reporter = Reporter {
                controller: "test".into(),
                instance: None,
            };
            let (events, _publisher) =
                Events::start(Client::try_from(config).unwrap(), reporter, metrics.clone());
            let events = events.with_level(level);
            for (type_, reason) in [(Normal, "Synced"), (Warning, "Failed")] {
                events
                    .publish(regarding("a", "1"), type_, reason, "note".into(), "Sync")
                    .await;
            }
            let text = metrics.render();
            let line = format!("sample_operator_events_total{{result=\"skipped\"}} {skipped}");
            assert_eq!(text.contains(&line), skipped > 0, "{level:?}: {text}");
        }
    }

    #[test]
    fn namespaces_take_turns_so_a_burst_does_not_hold_back_another_namespaces_event() {
        let in_namespace = |namespace: &str, name: &str| {
            let mut event = pending(name, "1", "synced");
            event.regarding.namespace = Some(namespace.into());
            event
        };
        let mut state = State::default();
        for i in 0..10_000 {
            state.add(in_namespace("burst", &format!("b{i}")));
        }
        state.add(in_namespace("quiet", "q0"));
        state.add(in_namespace("quiet", "q1"));
        let sent: Vec<String> = std::iter::from_fn(|| state.take())
            .take(5)
            .map(|e| e.regarding.name.unwrap())
            .collect();
        assert_eq!(sent, ["b0", "q0", "b1", "q1", "b2"]);
        assert_eq!(std::iter::from_fn(|| state.take()).count(), 10_000 - 3);
        assert!(state.lines.is_empty());
    }

    #[test]
    fn a_full_queue_hands_a_new_event_back_but_still_folds_repeats() {
        let mut state = State::default();
        for i in 0..MAX_PENDING {
            assert!(matches!(state.add(pending(&i.to_string(), "1", "n")), Added::New));
        }
        assert!(
            matches!(state.add(pending("one more", "1", "n")), Added::Full(e) if e.regarding.name.as_deref() == Some("one more"))
        );
        assert!(matches!(state.add(pending("7", "2", "n")), Added::Folded));
    }

    #[test]
    fn an_event_with_repeats_is_a_series_from_its_first_to_its_last() {
        let reporter = Reporter {
            controller: "sample-operator".into(),
            instance: Some("pod-0".into()),
        };
        let mut event = pending("a", "1", "synced");
        let at = Timestamp::from_second(1_800_000_000).unwrap();
        let single = event.to_event(&reporter, at);
        assert_eq!(single.series, None);
        assert_eq!(
            single.metadata.name.as_deref(),
            Some(format!("a.{:x}", at.as_nanosecond()).as_str())
        );
        assert_eq!(single.reporting_instance.as_deref(), Some("pod-0"));
        event.count = 3;
        event.last = at;
        let series = event.to_event(&reporter, at).series.unwrap();
        assert_eq!((series.count, series.last_observed_time.0), (3, at));
    }

    /// An apiserver that answers each create after `delay`, with `status` for the first
    /// `failing` requests, recording how many were in flight at most and the series counts.
    #[derive(Clone, Default)]
    struct Apiserver {
        in_flight: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        requests: Arc<AtomicUsize>,
        counts: Arc<Mutex<Vec<i32>>>,
    }

    impl Apiserver {
        fn client(&self, delay: Duration, failing: usize, status: u16) -> Client {
            let this = self.clone();
            let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
                let this = this.clone();
                async move {
                    let n = this.requests.fetch_add(1, Ordering::SeqCst);
                    let now = this.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    this.most.fetch_max(now, Ordering::SeqCst);
                    let body = request.into_body().collect_bytes().await.unwrap();
                    tokio::time::sleep(delay).await;
                    this.in_flight.fetch_sub(1, Ordering::SeqCst);
                    let code = if n < failing { status } else { 201 };
                    if code == 201 {
                        let event: KubeEvent = serde_json::from_slice(&body).unwrap();
                        this.counts
                            .lock()
                            .unwrap()
                            .push(event.series.map_or(1, |s| s.count));
                    }
                    let body = if code == 201 {
                        body.to_vec()
                    } else {
                        format!(r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no","reason":"x","code":{code}}}"#).into_bytes()
                    };
                    http::Response::builder()
                        .status(code)
                        .body(kube::client::Body::from(body))
                }
            });
            Client::new(service, "default")
        }
    }

    fn reporter() -> Reporter {
        Reporter {
            controller: "test".into(),
            instance: None,
        }
    }

    async fn queue(events: &Events, names: std::ops::Range<usize>) {
        for i in names {
            events
                .publish(
                    regarding(&i.to_string(), "1"),
                    EventType::Normal,
                    "Synced",
                    "n".into(),
                    "Sync",
                )
                .await;
        }
    }

    #[tokio::test]
    async fn one_event_at_a_time_while_reconciles_run_and_all_at_once_after() {
        let apiserver = Apiserver::default();
        let metrics = Arc::new(Metrics::new(Default::default()));
        let (events, publisher) = Events::start(
            apiserver.client(Duration::from_millis(20), 0, 201),
            reporter(),
            metrics.clone(),
        );
        let reconcile = metrics.reconcile("foo");
        queue(&events, 0..20).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(apiserver.most.load(Ordering::SeqCst), BUSY_CONCURRENCY);
        let sent_while_busy = apiserver.requests.load(Ordering::SeqCst);
        assert!(sent_while_busy < 20, "{sent_while_busy}");
        assert!(metrics.render().contains("sample_operator_event_queue_depth "));

        reconcile.finish(crate::runtime::metrics::Outcome::Success);
        queue(&events, 20..60).await;
        drop(events);
        publisher.finish(Duration::from_secs(10)).await;
        assert_eq!(apiserver.most.load(Ordering::SeqCst), IDLE_CONCURRENCY);
        assert_eq!(apiserver.counts.lock().unwrap().len(), 60);
        assert!(
            metrics
                .render()
                .contains(r#"sample_operator_events_total{result="published"} 60"#)
        );
        assert!(metrics.render().contains("sample_operator_event_queue_depth 0"));
    }

    #[tokio::test]
    async fn repeats_queued_before_the_send_go_as_one_series() {
        let apiserver = Apiserver::default();
        let metrics = Arc::new(Metrics::new(Default::default()));
        let (events, publisher) = Events::start(
            apiserver.client(Duration::ZERO, 0, 201),
            reporter(),
            metrics.clone(),
        );
        // On this single-threaded runtime nothing is sent before the test yields.
        for _ in 0..5 {
            queue(&events, 0..1).await;
        }
        queue(&events, 1..2).await;
        drop(events);
        publisher.finish(Duration::from_secs(10)).await;
        assert_eq!(*apiserver.counts.lock().unwrap(), [5, 1]);
        let text = metrics.render();
        assert!(
            text.contains(r#"sample_operator_events_total{result="folded"} 4"#),
            "{text}"
        );
        assert!(
            text.contains(r#"sample_operator_events_total{result="published"} 2"#),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_send_that_may_pass_is_retried_and_a_refusal_is_not() {
        let apiserver = Apiserver::default();
        let metrics = Arc::new(Metrics::new(Default::default()));
        let (events, publisher) = Events::start(
            apiserver.client(Duration::ZERO, 2, 503),
            reporter(),
            metrics.clone(),
        );
        queue(&events, 0..1).await;
        drop(events);
        publisher.finish(Duration::from_secs(10)).await;
        assert_eq!(apiserver.requests.load(Ordering::SeqCst), 3);
        assert!(
            metrics
                .render()
                .contains(r#"sample_operator_events_total{result="published"} 1"#)
        );

        let apiserver = Apiserver::default();
        let (events, publisher) = Events::start(
            apiserver.client(Duration::ZERO, 9, 403),
            reporter(),
            metrics.clone(),
        );
        queue(&events, 0..1).await;
        drop(events);
        publisher.finish(Duration::from_secs(10)).await;
        assert_eq!(apiserver.requests.load(Ordering::SeqCst), 1);
        assert!(
            metrics
                .render()
                .contains(r#"sample_operator_events_total{result="failed"} 1"#)
        );
    }

    #[tokio::test]
    async fn a_dropped_publisher_lets_queueing_return() {
        let metrics = Arc::new(Metrics::new(Default::default()));
        let (events, publisher) = Events::start(
            Apiserver::default().client(Duration::ZERO, 0, 201),
            reporter(),
            metrics,
        );
        drop(publisher);
        // Would wait for room forever if the queue still took events.
        tokio::time::timeout(Duration::from_secs(5), queue(&events, 0..MAX_PENDING + 1))
            .await
            .unwrap();
    }
}
