//! Running controllers: the [`Manager`] starts a set of them on shared handles and stops them
//! together; [`Supervised`] holds such a run in a task of its own, which the command line (no
//! election) and [`leader`](super::leader) election (while the lease is held) both drain on
//! shutdown or abort when another replica may already be writing.

use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared as SharedFuture};
use kube::Client;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::{RuntimeConfig, Shared, Telemetry, events};

/// Completes when a controller is asked to stop; cheap to clone.
pub type Stopping = SharedFuture<BoxFuture<'static, ()>>;

/// How long a stopping run waits for its queued events to be published.
const EVENTS_AT_SHUTDOWN: Duration = Duration::from_secs(5);

/// The controllers of one run, on one set of [`Shared`] handles.
pub struct Manager {
    shared: Shared,
    publisher: events::Publisher,
    stop: watch::Sender<bool>,
    controllers: Vec<JoinHandle<()>>,
}

impl Manager {
    /// Starts the event publisher; controllers come with [`Manager::start`].
    pub fn new(client: Client, config: RuntimeConfig, telemetry: Telemetry) -> Self {
        let (shared, publisher) = Shared::new(client, config, telemetry);
        Self {
            shared,
            publisher,
            stop: watch::channel(false).0,
            controllers: Vec::new(),
        }
    }

    /// Starts the controller `name`: `start` builds it from the shared handles and a future that
    /// completes when the manager stops. It is unready (`/readyz`) until its caches sync.
    pub fn start(
        &mut self,
        name: &'static str,
        start: impl FnOnce(&Shared, Stopping) -> BoxFuture<'static, ()>,
    ) {
        self.shared.health.starting([name]);
        let mut stopped = self.stop.subscribe();
        let stopping = async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
        .boxed()
        .shared();
        let controller = start(&self.shared, stopping);
        self.controllers.push(tokio::spawn(controller));
    }

    /// Runs the controllers until `shutdown` completes; each then finishes the reconciles it
    /// has in flight, and the events they queued are published.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) {
        shutdown.await;
        let _ = self.stop.send(true);
        for controller in self.controllers {
            let _ = controller.await;
        }
        let health = self.shared.health.clone();
        // The publisher ends once every handle to its queue is gone.
        drop(self.shared);
        self.publisher.finish(EVENTS_AT_SHUTDOWN).await;
        health.stopped();
    }
}

/// Work in a task of its own, which is asked to stop gracefully with a time limit, or aborted.
pub struct Supervised {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    ended: bool,
}

impl Supervised {
    /// Spawns `work`, handing it a future that completes when it is asked to stop.
    pub fn spawn<F>(work: impl FnOnce(BoxFuture<'static, ()>) -> F) -> Self
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(work(
            async move {
                let _ = stopped.await;
            }
            .boxed(),
        ));
        Self {
            stop,
            task,
            ended: false,
        }
    }

    /// Completes when the work ends by itself.
    pub async fn ended(&mut self) {
        if !self.ended {
            let _ = (&mut self.task).await;
            self.ended = true;
        }
    }

    /// Asks the work to stop and waits up to `drain` for it; aborts whatever still runs then.
    pub async fn drain(mut self, drain: Duration) {
        let _ = self.stop.send(());
        if self.ended {
            return;
        }
        if tokio::time::timeout(drain, &mut self.task).await.is_err() {
            tracing::warn!(
                ?drain,
                "reconciles still running after the drain timeout: aborting them"
            );
            self.task.abort();
        }
    }

    /// Stops the work at once, wherever it is: when someone else may already be writing.
    pub fn abort(self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drain_waits_for_work_that_stops_and_aborts_work_that_does_not() {
        let (done_tx, done) = oneshot::channel::<()>();
        let polite = Supervised::spawn(|stopped| async move {
            stopped.await;
            let _ = done_tx.send(());
        });
        polite.drain(Duration::from_secs(5)).await;
        done.await.expect("the work finished after being asked to stop");

        let (dropped_tx, dropped) = oneshot::channel::<()>();
        let stubborn = Supervised::spawn(|_stopped| async move {
            // Dropped with the task when it is aborted: the receiver then sees a closed channel.
            let _guard = dropped_tx;
            std::future::pending::<()>().await;
        });
        stubborn.drain(Duration::from_millis(50)).await;
        assert!(dropped.await.is_err(), "the work was aborted");
    }

    #[tokio::test]
    async fn ended_completes_when_the_work_ends_by_itself_and_drain_then_returns_at_once() {
        let mut work = Supervised::spawn(|_stopped| async {});
        tokio::time::timeout(Duration::from_secs(5), work.ended())
            .await
            .expect("ends");
        work.ended().await;
        tokio::time::timeout(Duration::from_secs(1), work.drain(Duration::from_secs(60)))
            .await
            .expect("nothing left to drain");
    }
}
