//! Events, published in the background so that a reconcile never waits for one.
//!
//! An event is a report, not part of the work: a reconcile queues it and goes on, and a task
//! publishes the queue through kube-rs's [`Recorder`] (events.k8s.io), as client-go's
//! broadcaster does for Go controllers. Failures are logged and counted, never retried into a
//! reconcile. The queue is bounded: when the apiserver falls that far behind, reconciles wait
//! for room rather than drop events (client-go drops them) or let memory grow.
//!
//! The controllers publish on transitions only, so a repeat of the same event within minutes is
//! rare. That is why each event gets a fresh `Recorder`: a long-lived one keeps every event it
//! sent for six minutes to fold repeats into a series, and scans that whole cache on every
//! publish, which at thousands of objects costs more memory and CPU than the controllers.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::metrics::Metrics;

/// Events waiting to be published, at most. client-go's broadcaster keeps 1,000.
const QUEUE: usize = 4096;
/// Events being published at once.
const CONCURRENCY: usize = 4;

/// Where controllers queue their events; cheap to clone.
#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<(Event, ObjectReference)>,
}

/// The task that publishes the queue; see [`Publisher::finish`].
pub struct Publisher(JoinHandle<()>);

impl Events {
    /// Starts the publishing task.
    pub fn start(client: Client, reporter: Reporter, metrics: Arc<Metrics>) -> (Self, Publisher) {
        let (queue, queued) = mpsc::channel::<(Event, ObjectReference)>(QUEUE);
        let queued = futures::stream::unfold(queued, |mut rx| async { rx.recv().await.map(|e| (e, rx)) });
        let task = tokio::spawn(
            queued.for_each_concurrent(CONCURRENCY, move |(event, regarding)| {
                let recorder = Recorder::new(client.clone(), reporter.clone());
                let metrics = metrics.clone();
                async move {
                    match recorder.publish(&event, &regarding).await {
                        Ok(()) => metrics.event("published"),
                        Err(error) => {
                            metrics.event("failed");
                            tracing::warn!(%error, reason = event.reason, "could not publish event");
                        }
                    }
                }
            }),
        );
        (Self { queue }, Publisher(task))
    }

    /// Queues an event about `regarding`; waits only while the queue is full.
    pub async fn publish(
        &self,
        regarding: ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
        action: &str,
    ) {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        };
        // Fails only once the publishing task is gone, when the run is over.
        if self.queue.send((event, regarding)).await.is_err() {
            tracing::debug!(reason, "run stopped: event not published");
        }
    }
}

impl Drop for Publisher {
    /// A run that is aborted (a lost lease) drops its publisher unfinished: its queued events
    /// are not sent, by a process that may no longer act for the cluster.
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Publisher {
    /// Once every [`Events`] handle is dropped, waits up to `timeout` for the queued events to
    /// be published, so that a stopping operator does not lose its last reports.
    pub async fn finish(mut self, timeout: Duration) {
        if tokio::time::timeout(timeout, &mut self.0).await.is_err() {
            tracing::warn!("events still queued at shutdown were not published");
        }
    }
}
