//! Events, published in the background and after the writes that converge objects.
//!
//! An event is a report, not part of the work: a reconcile queues it and goes on. Users wait
//! for their Deployments and statuses, not for the Events about them, so a task sends the queue
//! while no reconcile runs, and only a trickle while reconciles write, unless the oldest event
//! has waited [`MAX_DELAY`]. While objects wait for a reconcile slot (the controllers are
//! behind), only Warnings and transitions are sent: the Normal outcome of a pass ("Synced")
//! waits, and one that waited [`Pace::summarise_after`] is counted in a summary of its namespace
//! instead, one Event per namespace and [`Pace::summary_interval`] that says how many outcomes of
//! which reason, about which kind, it stands for. So a burst of 100,000 objects costs a few
//! Event writes once the controllers are behind, not 100,000, and the last report is written
//! soon after the work is done. Nothing is dropped (client-go's broadcaster drops events once its
//! queue of 1,000 is full):
//! - a repeat of a queued event (same object, type, reason, note and action) is folded into it,
//!   and sent as one events.k8s.io Event whose `series` counts the repeats;
//! - a summarised outcome is counted in its summary's note and in the annotation
//!   [`SUMMARISED_ANNOTATION`], and in `sample_operator_events_total{result="summarised"}`;
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
use serde::de::IgnoredAny;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::metrics::Metrics;
use super::turns::Turns;

/// The metric's result for an outcome counted in a summary.
const SUMMARISED: &str = "summarised";

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
/// Outcomes queued when the publisher is asked to finish beyond which they are summarised at
/// once: more than it can send one by one before a stopping operator goes.
const INDIVIDUAL_AT_CLOSE: usize = 256;
/// Object names a summary names per kind and reason (each up to 253 bytes; a note holds 1 KiB).
const NAMES_IN_SUMMARY: usize = 3;
pub use sample_operator_api::events::{SUMMARISED_ANNOTATION, SUMMARY_REASON};

/// When outcomes are summarised rather than written one by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pace {
    /// A Normal outcome that waited this long is counted in its namespace's summary. Below
    /// [`MAX_DELAY`], so that no outcome is still queued when the pace rises for the overdue.
    pub summarise_after: Duration,
    /// A summary collects outcomes for this long from its first, then is written.
    pub summary_interval: Duration,
}

impl Default for Pace {
    fn default() -> Self {
        Self {
            summarise_after: Duration::from_secs(15),
            summary_interval: Duration::from_secs(5),
        }
    }
}

/// How busy the controllers are, as the publisher sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Load {
    /// No reconcile runs.
    Idle,
    /// Reconciles run, and none waits for a slot.
    Busy,
    /// Objects wait for a reconcile slot: the controllers are behind.
    Behind,
}

impl Load {
    fn of(metrics: &Metrics) -> Self {
        if metrics.work_waiting() > 0 {
            Load::Behind
        } else if metrics.reconciles_running() > 0 {
            Load::Busy
        } else {
            Load::Idle
        }
    }
}

/// How many events may be sent at once, and how many of them may be Normal outcomes (the
/// rest: Warnings, transitions and summaries).
fn concurrency(load: Load, oldest_waited: Duration) -> (usize, usize) {
    let overdue = oldest_waited >= MAX_DELAY;
    let all = match (load, overdue) {
        (Load::Idle, _) => IDLE_CONCURRENCY,
        (_, false) => BUSY_CONCURRENCY,
        (_, true) => OVERDUE_CONCURRENCY,
    };
    (all, if load == Load::Behind { 0 } else { all })
}

/// What an event reports, which decides whether it may be summarised under load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Report {
    /// The outcome of a pass ("Synced"): its object's status says the same, so under load a
    /// Normal one is counted in a summary of its namespace rather than written on the object.
    Outcome,
    /// A change of where the object stands (its Ready reason): always written on the object.
    Transition,
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
    /// Each namespace's queued Warnings and transitions, in the order they were first queued:
    /// the namespaces take turns, one event each, so that one namespace's burst does not hold
    /// back another's event. These go before any outcome.
    urgent: Turns<u64>,
    /// Each namespace's queued Normal outcomes, the same way. An outcome taken into a summary
    /// leaves its number here, skipped when its turn comes.
    outcomes: Turns<u64>,
    /// The queued event each key folds into.
    by_key: HashMap<u64, u64>,
    next: u64,
    /// The events numbered below this were looked at for summarising.
    scanned: u64,
    /// Each namespace's summary being collected.
    summaries: BTreeMap<String, Summary>,
    pace: Pace,
    keys: RandomState,
    closed: bool,
    /// The publisher stopped: queueing more would wait forever.
    gone: bool,
}

/// Normal outcomes of one namespace counted instead of written.
#[derive(Debug)]
struct Summary {
    opened: Instant,
    first: Timestamp,
    last: Timestamp,
    events: u64,
    /// By kind and reason.
    groups: BTreeMap<(String, String), Group>,
}

#[derive(Debug, Default)]
struct Group {
    events: u64,
    objects: u64,
    names: Vec<String>,
}

impl Summary {
    fn new(opened: Instant, at: Timestamp) -> Self {
        Self {
            opened,
            first: at,
            last: at,
            events: 0,
            groups: BTreeMap::new(),
        }
    }

    fn count(&mut self, event: Pending) {
        let events = u64::try_from(event.count).unwrap_or(1);
        self.events += events;
        self.first = self.first.min(event.first);
        self.last = self.last.max(event.last);
        let kind = event.regarding.kind.unwrap_or_default();
        let group = self.groups.entry((kind, event.reason)).or_default();
        group.events += events;
        group.objects += 1;
        if group.names.len() < NAMES_IN_SUMMARY
            && let Some(name) = event.regarding.name
            && !group.names.contains(&name)
        {
            group.names.push(name);
        }
    }

    /// The Event that stands for the counted outcomes, about the namespace they were in.
    fn into_event(self, namespace: &str) -> Pending {
        let groups: Vec<String> = self
            .groups
            .iter()
            .map(|((kind, reason), group)| {
                let repeats = if group.events == group.objects {
                    String::new()
                } else {
                    format!(" ({} times)", group.events)
                };
                let more = group.objects - group.names.len() as u64;
                let names = match more {
                    0 => group.names.join(", "),
                    more => format!("{} and {more} more", group.names.join(", ")),
                };
                format!("{reason}{repeats} on {} {kind}s: {names}", group.objects)
            })
            .collect();
        let note = format!(
            "{} Normal events were counted here rather than written one by one, while the \
             operator was behind: {}. Each object's status says where it stands.",
            self.events,
            groups.join("; ")
        );
        Pending {
            key: 0,
            regarding: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Namespace".into()),
                name: Some(namespace.into()),
                // The Event is kept in the namespace, where its tenants read it; the apiserver
                // takes an Event only in the namespace its object names.
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            type_: EventType::Normal,
            report: Report::Outcome,
            reason: SUMMARY_REASON.into(),
            note: truncate(note, 1024),
            action: "Summarise".into(),
            count: 1,
            first: self.first,
            last: self.last,
            queued: Instant::now(),
            stands_for: self.events,
        }
    }
}

/// `text` cut to at most `max` bytes, on a character boundary (the apiserver refuses a longer
/// note).
fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// One queued event and its repeats.
#[derive(Debug)]
struct Pending {
    key: u64,
    regarding: ObjectReference,
    type_: EventType,
    report: Report,
    reason: String,
    note: String,
    action: String,
    count: i32,
    first: Timestamp,
    last: Timestamp,
    queued: Instant,
    /// A summary's: how many Normal events it stands for (0 for any other event).
    stands_for: u64,
}

impl Pending {
    /// Whether `other` repeats this event: the same object (at any version), type, reason, note
    /// and action.
    fn repeated_by(&self, other: &Pending) -> bool {
        let (a, b) = (&self.regarding, &other.regarding);
        (&a.uid, &a.namespace, &a.name, &a.kind, &a.api_version)
            == (&b.uid, &b.namespace, &b.name, &b.kind, &b.api_version)
            && (self.type_, self.report) == (other.type_, other.report)
            && (&self.reason, &self.note, &self.action) == (&other.reason, &other.note, &other.action)
    }

    fn key(&self, keys: &RandomState) -> u64 {
        let mut h = keys.build_hasher();
        let r = &self.regarding;
        (&r.uid, &r.namespace, &r.name, &r.kind, &r.api_version).hash(&mut h);
        (self.type_, self.report, &self.reason, &self.note, &self.action).hash(&mut h);
        h.finish()
    }

    /// Whether, under load, it may be counted in a summary rather than written: a Normal
    /// outcome about an object in a namespace.
    fn summarisable(&self) -> bool {
        self.type_ == EventType::Normal
            && self.report == Report::Outcome
            && self.stands_for == 0
            && self.regarding.namespace.as_deref().is_some_and(|n| !n.is_empty())
    }

    /// The Event to create: a series when repeats were folded in. `at` makes the name unique
    /// per object, as client-go and kube-runtime name theirs.
    fn to_event(&self, reporter: &Reporter, at: Timestamp) -> KubeEvent {
        let object = self.regarding.name.as_deref().unwrap_or(&reporter.controller);
        KubeEvent {
            metadata: ObjectMeta {
                name: Some(format!("{object}.{:x}", at.as_nanosecond())),
                namespace: self.regarding.namespace.clone(),
                annotations: (self.stands_for > 0)
                    .then(|| [(SUMMARISED_ANNOTATION.to_owned(), self.stands_for.to_string())].into()),
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
        let lines = if event.summarisable() {
            &mut self.outcomes
        } else {
            &mut self.urgent
        };
        lines.push(event.regarding.namespace.as_deref().unwrap_or_default(), seq);
        self.pending.insert(seq, event);
        Added::New
    }

    /// The first queued Warning or transition of the namespace whose turn it is, or when there
    /// is none and `outcomes`, the first outcome.
    fn take(&mut self, outcomes: bool) -> Option<Pending> {
        if let Some(seq) = self.urgent.pop() {
            return self.remove(seq);
        }
        while outcomes && let Some(seq) = self.outcomes.pop() {
            if let Some(event) = self.remove(seq) {
                return Some(event);
            }
        }
        None
    }

    fn remove(&mut self, seq: u64) -> Option<Pending> {
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

    /// Counts in their namespace's summary the outcomes that waited [`Pace::summarise_after`],
    /// and once the queue is closed with more than [`INDIVIDUAL_AT_CLOSE`] of them, all of
    /// them. Returns how many.
    fn summarise(&mut self, now: Instant) -> u64 {
        let outcomes = || self.pending.values().filter(|e| e.summarisable()).count();
        let all = self.closed && outcomes() > INDIVIDUAL_AT_CLOSE;
        let due: Vec<u64> = self
            .pending
            .range(self.scanned..)
            .take_while(|(_, e)| all || now.saturating_duration_since(e.queued) >= self.pace.summarise_after)
            .map(|(seq, _)| *seq)
            .collect();
        let mut summarised = 0;
        for seq in due {
            self.scanned = seq + 1;
            if !self.pending[&seq].summarisable() {
                continue;
            }
            let event = self.remove(seq).expect("listed above");
            let namespace = event.regarding.namespace.clone().unwrap_or_default();
            self.summaries
                .entry(namespace)
                .or_insert_with(|| Summary::new(now, event.first))
                .count(event);
            summarised += 1;
        }
        summarised
    }

    /// A summary collected for [`Pace::summary_interval`] (or any, once the queue is closed),
    /// as the Event to write.
    fn due_summary(&mut self, now: Instant) -> Option<Pending> {
        let (namespace, _) = self.summaries.iter().find(|(_, s)| {
            self.closed || now.saturating_duration_since(s.opened) >= self.pace.summary_interval
        })?;
        let namespace = namespace.clone();
        let summary = self.summaries.remove(&namespace)?;
        Some(summary.into_event(&namespace))
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
        Self::start_with(client, reporter, metrics, Pace::default())
    }

    /// Starts the publishing task, summarising at `pace` (tests shorten it).
    pub fn start_with(
        client: Client,
        reporter: Reporter,
        metrics: Arc<Metrics>,
        pace: Pace,
    ) -> (Self, Publisher) {
        let queue = Arc::new(Queue {
            state: Mutex::new(State {
                pace,
                ..State::default()
            }),
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
        report: Report,
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
            report,
            reason: reason.to_owned(),
            note,
            action: action.to_owned(),
            count: 1,
            first: now,
            last: now,
            queued: Instant::now(),
            stands_for: 0,
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

/// Sends the queue until it is closed and empty, as many at once as [`concurrency`] allows,
/// summarising the outcomes that waited too long.
async fn publish_queue(queue: Arc<Queue>, client: Client, reporter: Reporter, metrics: Arc<Metrics>) {
    let mut sending = FuturesUnordered::new();
    loop {
        let now = Instant::now();
        let (depth, closed) = {
            let mut state = queue.lock();
            let summarised = state.summarise(now);
            metrics.events(SUMMARISED, summarised);
            let (limit, outcomes) = concurrency(Load::of(&metrics), state.oldest_waited(now));
            let mut taken = summarised > 0;
            // A summary is due at most once per namespace and interval: one may go even while
            // nothing else may.
            while sending.len() < limit.max(1) {
                let next = match state.due_summary(now) {
                    Some(summary) => summary,
                    None if sending.len() < limit => {
                        let Some(event) = state.take(sending.len() < outcomes) else {
                            break;
                        };
                        event
                    }
                    None => break,
                };
                sending.push(send(client.clone(), &reporter, next, &metrics));
                taken = true;
            }
            metrics.set_event_queue(state.pending.len(), state.oldest_waited(now));
            if taken {
                queue.room.notify_waiters();
            }
            (state.pending.len() + state.summaries.len(), state.closed)
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
    let params = PostParams::default();
    let mut attempt = 0;
    loop {
        attempt += 1;
        // The created Event is of no use here: its JSON is checked, nothing of it built.
        let sent = event.to_event(reporter, Timestamp::now());
        let error = match super::create_reading::<_, IgnoredAny>(&api, &params, &sent).await {
            Ok(_) if event.stands_for > 0 => return metrics.event("summary"),
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
            report: Report::Outcome,
            reason: "Synced".into(),
            note: note.into(),
            action: "Sync".into(),
            count: 1,
            first: now,
            last: now,
            queued: Instant::now(),
            stands_for: 0,
        }
    }

    #[test]
    fn events_wait_for_running_reconciles_unless_overdue() {
        let all = |n| (n, n);
        assert_eq!(concurrency(Load::Idle, Duration::ZERO), all(IDLE_CONCURRENCY));
        assert_eq!(concurrency(Load::Idle, MAX_DELAY * 2), all(IDLE_CONCURRENCY));
        assert_eq!(concurrency(Load::Busy, MAX_DELAY / 2), all(BUSY_CONCURRENCY));
        assert_eq!(concurrency(Load::Busy, MAX_DELAY), all(OVERDUE_CONCURRENCY));
        const { assert!(BUSY_CONCURRENCY < OVERDUE_CONCURRENCY && OVERDUE_CONCURRENCY < IDLE_CONCURRENCY) };
    }

    #[test]
    fn while_the_controllers_are_behind_outcomes_wait_and_warnings_and_transitions_go() {
        assert_eq!(concurrency(Load::Behind, Duration::ZERO), (BUSY_CONCURRENCY, 0));
        assert_eq!(concurrency(Load::Behind, MAX_DELAY), (OVERDUE_CONCURRENCY, 0));
        let mut state = State::default();
        state.add(pending("outcome", "1", "synced"));
        let mut warning = pending("warning", "1", "failed");
        warning.type_ = EventType::Warning;
        state.add(warning);
        let mut transition = pending("transition", "1", "healthy");
        transition.report = Report::Transition;
        state.add(transition);
        let name = |e: Option<Pending>| e.and_then(|e| e.regarding.name);
        // Warnings and transitions first, queued later though they were; outcomes only when
        // they may go.
        assert_eq!(name(state.take(false)).as_deref(), Some("warning"));
        assert_eq!(name(state.take(false)).as_deref(), Some("transition"));
        assert_eq!(name(state.take(false)), None);
        assert_eq!(name(state.take(true)).as_deref(), Some("outcome"));
    }

    #[test]
    fn outcomes_that_waited_too_long_are_counted_in_one_summary_per_namespace() {
        let start = Instant::now();
        let pace = Pace::default();
        let mut state = State {
            pace,
            ..State::default()
        };
        let in_namespace = |namespace: &str, name: &str| {
            let mut event = pending(name, "1", "synced");
            event.regarding.namespace = Some(namespace.into());
            event.queued = start;
            event
        };
        for i in 0..5 {
            state.add(in_namespace("a", &format!("foo-{i}")));
        }
        // A repeat, folded: one outcome standing for two events.
        state.add(in_namespace("a", "foo-0"));
        state.add(in_namespace("b", "foo-0"));
        let mut warning = in_namespace("a", "foo-9");
        warning.type_ = EventType::Warning;
        state.add(warning);
        let mut transition = in_namespace("a", "foo-8");
        transition.report = Report::Transition;
        state.add(transition);
        let mut young = in_namespace("a", "foo-7");
        young.queued = start + pace.summarise_after;
        state.add(young);

        assert_eq!(state.summarise(start + pace.summarise_after / 2), 0);
        let now = start + pace.summarise_after;
        assert_eq!(state.summarise(now), 6);
        // Looked at once: nothing more until more have waited.
        assert_eq!(state.summarise(now), 0);
        assert!(
            state.due_summary(now).is_none(),
            "collected for an interval first"
        );
        let later = now + pace.summary_interval;
        let summaries: Vec<Pending> = std::iter::from_fn(|| state.due_summary(later)).collect();
        let seen: Vec<_> = summaries
            .iter()
            .map(|s| {
                let r = &s.regarding;
                (
                    r.kind.as_deref(),
                    r.name.as_deref(),
                    r.namespace.as_deref(),
                    s.stands_for,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (Some("Namespace"), Some("a"), Some("a"), 6),
                (Some("Namespace"), Some("b"), Some("b"), 1),
            ]
        );
        assert_eq!(
            summaries[0].note,
            "6 Normal events were counted here rather than written one by one, while the \
             operator was behind: Synced (6 times) on 5 Foos: foo-0, foo-1, foo-2 and 2 more. \
             Each object's status says where it stands."
        );
        assert!(!summaries[0].summarisable(), "a summary is never summarised");
        let event = summaries[0].to_event(&reporter(), Timestamp::now());
        assert_eq!(event.metadata.annotations.unwrap()[SUMMARISED_ANNOTATION], "6");
        // Left: the Warning, the transition and the outcome that has not waited long enough.
        let left: Vec<_> = std::iter::from_fn(|| state.take(true))
            .map(|e| e.regarding.name.unwrap())
            .collect();
        assert_eq!(left, ["foo-9", "foo-8", "foo-7"]);
    }

    #[test]
    fn a_closing_queue_summarises_its_outcomes_only_when_too_many_to_send() {
        for (queued, summarised) in [
            (INDIVIDUAL_AT_CLOSE, 0),
            (INDIVIDUAL_AT_CLOSE + 1, INDIVIDUAL_AT_CLOSE + 1),
        ] {
            let mut state = State::default();
            for i in 0..queued {
                state.add(pending(&i.to_string(), "1", "n"));
            }
            let now = Instant::now();
            assert_eq!(state.summarise(now), 0, "not yet closed");
            state.closed = true;
            assert_eq!(state.summarise(now) as usize, summarised);
            // Once closed, a summary is due at once.
            assert_eq!(state.due_summary(now).is_some(), summarised > 0);
        }
    }

    #[test]
    fn a_long_note_is_cut_on_a_character_boundary() {
        let cut = truncate("é".repeat(600), 1024);
        assert!(cut.len() <= 1024 && cut.ends_with('…'), "{}", cut.len());
        assert_eq!(truncate("short".into(), 1024), "short");
    }

    #[test]
    fn repeats_fold_into_the_queued_event_and_the_order_is_kept() {
        let mut state = State::default();
        assert!(matches!(state.add(pending("a", "1", "synced")), Added::New));
        assert!(matches!(state.add(pending("b", "1", "synced")), Added::New));
        // The same event about a newer version of `a` folds; another note does not.
        assert!(matches!(state.add(pending("a", "2", "synced")), Added::Folded));
        assert!(matches!(state.add(pending("a", "3", "other")), Added::New));
        let first = state.take(true).unwrap();
        assert_eq!(first.regarding.name.as_deref(), Some("a"));
        assert_eq!(first.count, 2);
        assert_eq!(first.regarding.resource_version.as_deref(), Some("2"));
        // Once taken, a repeat is a new event.
        assert!(matches!(state.add(pending("a", "4", "synced")), Added::New));
        let rest: Vec<_> = std::iter::from_fn(|| state.take(true))
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
                    .publish(
                        regarding("a", "1"),
                        type_,
                        Report::Outcome,
                        reason,
                        "note".into(),
                        "Sync",
                    )
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
        let sent: Vec<String> = std::iter::from_fn(|| state.take(true))
            .take(5)
            .map(|e| e.regarding.name.unwrap())
            .collect();
        assert_eq!(sent, ["b0", "q0", "b1", "q1", "b2"]);
        assert_eq!(std::iter::from_fn(|| state.take(true)).count(), 10_000 - 3);
        assert!(state.outcomes.is_empty());
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
                    Report::Outcome,
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
    async fn the_answer_to_a_create_is_not_read_as_an_event() {
        let requests = Arc::new(AtomicUsize::new(0));
        let sent = requests.clone();
        // No eventTime, no metadata: what an Event could not be decoded from.
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            sent.fetch_add(1, Ordering::SeqCst);
            let status = if request.uri().path() == "/apis/events.k8s.io/v1/namespaces/ns/events" {
                201
            } else {
                404
            };
            async move {
                http::Response::builder()
                    .status(status)
                    .body(kube::client::Body::from(br#"{"kind":"Event","note":7}"#.to_vec()))
            }
        });
        let metrics = Arc::new(Metrics::new(Default::default()));
        let (events, publisher) = Events::start(Client::new(service, "default"), reporter(), metrics.clone());
        queue(&events, 0..1).await;
        drop(events);
        publisher.finish(Duration::from_secs(10)).await;
        assert_eq!(requests.load(Ordering::SeqCst), 1);
        let text = metrics.render();
        assert!(
            text.contains(r#"sample_operator_events_total{result="published"} 1"#),
            "{text}"
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
