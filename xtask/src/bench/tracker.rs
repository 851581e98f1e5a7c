//! Watches a run's namespace and counts converged Foos: a Foo is converged once its status is
//! written and its Deployment exists. Watches, not polls: a watch that is open before the
//! request counters are read and still open after adds nothing to them (the apiserver counts a
//! request when it ends), so the benchmark's observation stays out of the contenders' numbers.
//! A third watch counts the Events about Foos and notes when the last one was written, and a
//! fourth the Foo outcomes our operator counted in summaries of the namespace instead.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::Client;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use local_cluster::Component;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::apiserver;

/// What the watches have seen so far.
#[derive(Debug, Default)]
struct Progress {
    foos: HashSet<String>,
    with_status: HashSet<String>,
    deployments: HashSet<String>,
    converged: usize,
    /// (when, converged Foos) at every change.
    timeline: Vec<(Instant, usize)>,
    /// Events about Foos, by name.
    events: HashSet<String>,
    /// When an Event about a Foo was last seen for the first time. Updates of one already seen
    /// do not count: a controller that records an Event on every resync (sample-controller)
    /// bumps their counts every 30 s for as long as it runs, and those are later syncs, not the
    /// convergence's Events arriving late.
    last_event: Option<Instant>,
    /// Our operator's summaries of the namespace, by name: how many Events each stands for.
    summaries: HashMap<String, u64>,
}

impl Progress {
    fn saw_foo(&mut self, name: &str, has_status: bool) {
        self.foos.insert(name.to_owned());
        if has_status && self.with_status.insert(name.to_owned()) && self.deployments.contains(name) {
            self.converged_one();
        }
    }

    fn saw_deployment(&mut self, name: &str) {
        if self.deployments.insert(name.to_owned()) && self.with_status.contains(name) {
            self.converged_one();
        }
    }

    fn saw_event(&mut self, name: &str, at: Instant) {
        if self.events.insert(name.to_owned()) {
            self.last_event = Some(at);
        }
    }

    fn saw_summary(&mut self, name: &str, stands_for: u64, at: Instant) {
        if self.summaries.insert(name.to_owned(), stands_for).is_none() {
            self.last_event = Some(at);
        }
    }

    /// Events written about Foos, and the outcomes counted in summaries.
    fn events(&self) -> EventsWritten {
        EventsWritten {
            about_foos: self.events.len() as u64,
            summarised: self.summaries.values().sum(),
            last: self.last_event,
        }
    }

    fn converged_one(&mut self) {
        self.converged += 1;
        self.timeline.push((Instant::now(), self.converged));
    }
}

const TIMELINE_POINTS: usize = 500;

/// What the Event watches saw.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EventsWritten {
    /// Events about Foos (a series counts once).
    pub about_foos: u64,
    /// Foo outcomes counted in summaries of the namespace (ours only).
    pub summarised: u64,
    /// When the last Event about a Foo or summary first appeared.
    pub last: Option<Instant>,
}

/// How waiting for convergence ended.
#[derive(Debug)]
pub enum Outcome {
    Converged(Duration),
    TimedOut,
    /// The contender exited; the tail of its log.
    Died(String),
}

pub struct Tracker {
    progress: Arc<Mutex<Progress>>,
    /// Foos seen and Foos converged, sent on every change.
    counts: watch::Receiver<(usize, usize)>,
    tasks: Vec<JoinHandle<()>>,
}

impl Tracker {
    /// Starts watching Foos and Deployments in `namespace` and returns once both watches have
    /// listed what is there.
    pub async fn start(client: &Client, namespace: &str) -> Result<Self> {
        let progress = Arc::new(Mutex::new(Progress::default()));
        let (sender, counts) = watch::channel((0, 0));
        let sender = Arc::new(sender);
        let (foos_ready, deployments_ready) =
            (tokio::sync::oneshot::channel(), tokio::sync::oneshot::channel());

        let foos = watcher::watcher(apiserver::foos(client, namespace), watcher::Config::default());
        let foo_task = follow(
            foos,
            progress.clone(),
            sender.clone(),
            foos_ready.0,
            |progress, foo| {
                let has_status = foo.data.get("status").is_some_and(|s| !s.is_null());
                progress.saw_foo(&kube::ResourceExt::name_any(&foo), has_status);
            },
        );
        // Names are all the tracker needs, so Deployments are watched as metadata only.
        let deployments = kube::Api::<PartialObjectMeta<Deployment>>::namespaced(client.clone(), namespace);
        let deployments = watcher::watcher(deployments, watcher::Config::default());
        let deployment_task = follow(
            deployments,
            progress.clone(),
            sender.clone(),
            deployments_ready.0,
            |progress, d| {
                progress.saw_deployment(&kube::ResourceExt::name_any(&d));
            },
        );
        // Both event APIs store the same objects; core/v1's field selector picks those about Foos.
        let events_ready = tokio::sync::oneshot::channel();
        let events = kube::Api::<PartialObjectMeta<CoreEvent>>::namespaced(client.clone(), namespace);
        let events = watcher::watcher(
            events,
            watcher::Config::default().fields("involvedObject.kind=Foo"),
        );
        let event_task = follow(
            events,
            progress.clone(),
            sender.clone(),
            events_ready.0,
            |progress, e| {
                progress.saw_event(&kube::ResourceExt::name_any(&e), Instant::now());
            },
        );
        let summaries_ready = tokio::sync::oneshot::channel();
        let summaries = kube::Api::<PartialObjectMeta<CoreEvent>>::namespaced(client.clone(), namespace);
        let summaries = watcher::watcher(
            summaries,
            watcher::Config::default().fields(&format!(
                "involvedObject.kind=Namespace,reason={}",
                sample_operator_api::events::SUMMARY_REASON
            )),
        );
        let summary_task = follow(
            summaries,
            progress.clone(),
            sender,
            summaries_ready.0,
            |progress, e| {
                let stands_for = e
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(sample_operator_api::events::SUMMARISED_ANNOTATION))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                progress.saw_summary(&kube::ResourceExt::name_any(&e), stands_for, Instant::now());
            },
        );
        let tracker = Self {
            progress,
            counts,
            tasks: vec![
                tokio::spawn(foo_task),
                tokio::spawn(deployment_task),
                tokio::spawn(event_task),
                tokio::spawn(summary_task),
            ],
        };
        for ready in [
            foos_ready.1,
            deployments_ready.1,
            events_ready.1,
            summaries_ready.1,
        ] {
            tokio::time::timeout(Duration::from_secs(60), ready)
                .await
                .context("the watches did not list the namespace within a minute")?
                .context("a watch ended")?;
        }
        Ok(tracker)
    }

    /// Waits until `n` Foos exist.
    pub async fn wait_foos(&self, n: usize) -> Result<()> {
        let mut counts = self.counts.clone();
        tokio::time::timeout(Duration::from_secs(600), counts.wait_for(|(foos, _)| *foos >= n))
            .await
            .with_context(|| format!("{n} Foos did not show up"))??;
        Ok(())
    }

    /// Waits until `n` Foos are converged, measuring from `start`; gives up at `timeout` or when
    /// any process of the contender (one, or each sharded replica) exits.
    pub async fn wait_converged(
        &self,
        n: usize,
        start: Instant,
        timeout: Duration,
        contender: &[&Component],
    ) -> Outcome {
        let mut counts = self.counts.clone();
        let deadline = start + timeout;
        loop {
            if self.converged() >= n {
                // The moment the last Foo converged, not when this loop noticed it.
                let last = self
                    .progress
                    .lock()
                    .expect("progress lock")
                    .timeline
                    .last()
                    .map(|(at, _)| *at);
                return Outcome::Converged(
                    last.unwrap_or_else(Instant::now).saturating_duration_since(start),
                );
            }
            if let Some(gone) = contender.iter().find(|c| !c.is_running()) {
                return Outcome::Died(gone.log_tail(20));
            }
            if Instant::now() >= deadline {
                return Outcome::TimedOut;
            }
            // Woken by progress, or every second to look at the contender and the clock.
            let _ = tokio::time::timeout(Duration::from_secs(1), counts.changed()).await;
        }
    }

    pub fn converged(&self) -> usize {
        self.counts.borrow().1
    }

    /// Waits until no new Event about a Foo or summary appeared for `quiet` (at most `max`),
    /// then returns what was written.
    pub async fn wait_events_written(&self, quiet: Duration, max: Duration) -> EventsWritten {
        let give_up = Instant::now() + max;
        loop {
            let written = self.progress.lock().expect("progress lock").events();
            let now = Instant::now();
            if now >= give_up
                || written
                    .last
                    .is_none_or(|at| now.saturating_duration_since(at) >= quiet)
            {
                return written;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Converged Foos over time, in milliseconds-rounded seconds since `start`, from 0 at
    /// `start`; at most about [`TIMELINE_POINTS`], which is plenty for a chart and keeps
    /// results.json small at large N.
    pub fn timeline(&self, start: Instant) -> Vec<(f64, usize)> {
        let progress = self.progress.lock().expect("progress lock");
        let mut points = vec![(0.0, 0)];
        for (at, converged) in &progress.timeline {
            if let Some(since) = at.checked_duration_since(start) {
                points.push(((since.as_secs_f64() * 1000.0).round() / 1000.0, *converged));
            }
        }
        thin(&points, TIMELINE_POINTS)
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Feeds one watch into `progress`, reporting on `ready` once the initial list is in.
async fn follow<K, S>(
    stream: S,
    progress: Arc<Mutex<Progress>>,
    sender: Arc<watch::Sender<(usize, usize)>>,
    ready: tokio::sync::oneshot::Sender<()>,
    record: impl Fn(&mut Progress, K),
) where
    S: Stream<Item = Result<Event<K>, watcher::Error>> + Send,
{
    let mut ready = Some(ready);
    let mut stream = std::pin::pin!(stream.default_backoff());
    while let Some(event) = stream.next().await {
        let object = match event {
            Ok(Event::Apply(object) | Event::InitApply(object)) => object,
            Ok(Event::InitDone) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(());
                }
                continue;
            }
            // Runs never delete objects while they are watched; a watch error is retried.
            Ok(Event::Init | Event::Delete(_)) | Err(_) => continue,
        };
        let mut progress = progress.lock().expect("progress lock");
        record(&mut progress, object);
        sender.send_replace((progress.foos.len(), progress.converged));
    }
}

/// At most about `limit` points, keeping the first and the last.
fn thin(points: &[(f64, usize)], limit: usize) -> Vec<(f64, usize)> {
    let step = points.len().div_ceil(limit).max(1);
    let mut thinned: Vec<(f64, usize)> = points.iter().step_by(step).copied().collect();
    if let Some(last) = points.last()
        && thinned.last() != Some(last)
    {
        thinned.push(*last);
    }
    thinned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_foo_converges_once_it_has_status_and_its_deployment_whichever_comes_first() {
        let mut progress = Progress::default();
        progress.saw_foo("a", false);
        progress.saw_deployment("a");
        assert_eq!(progress.converged, 0);
        progress.saw_foo("a", true);
        assert_eq!(progress.converged, 1);
        progress.saw_foo("b", true);
        assert_eq!(progress.converged, 1);
        progress.saw_deployment("b");
        // Seeing the same objects again (an update, a relist) counts nothing twice.
        progress.saw_foo("a", true);
        progress.saw_deployment("b");
        assert_eq!(
            (progress.converged, progress.foos.len(), progress.timeline.len()),
            (2, 2, 2)
        );
    }

    #[test]
    fn events_are_counted_once_each_and_the_last_new_one_noted() {
        let mut progress = Progress::default();
        let start = Instant::now();
        progress.saw_event("a.1", start);
        progress.saw_event("b.1", start + Duration::from_secs(1));
        // An Event updated (a resync's repeat, a series growing): counted once, and not a
        // later arrival of the Events the run waits for.
        progress.saw_event("a.1", start + Duration::from_secs(2));
        assert_eq!(progress.events.len(), 2);
        assert_eq!(progress.last_event, Some(start + Duration::from_secs(1)));
    }

    #[test]
    fn thinning_keeps_the_ends() {
        let points: Vec<(f64, usize)> = (0..1001).map(|i| (i as f64, i)).collect();
        let thinned = thin(&points, 100);
        assert!(thinned.len() <= 102);
        assert_eq!(thinned.first(), Some(&(0.0, 0)));
        assert_eq!(thinned.last(), Some(&(1000.0, 1000)));
    }
}
