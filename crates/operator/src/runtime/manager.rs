//! Running controllers: the [`Manager`] starts a set of them on shared handles and stops them
//! together; [`Supervised`] holds such a run in a task of its own, which the command line (no
//! election) and [`leader`](super::leader) election (while the lease is held) both drain on
//! shutdown or abort when another replica may already be writing.
//!
//! Aborting a run stops everything it started, at once: the controllers' tasks (and with them
//! every reconcile and backend request in flight) and the publishing of queued events. A
//! controller whose task ends by itself before shutdown, or panics outside the guarded
//! reconcile, will not come back: the manager marks the process dead on `/healthz` and stops
//! the others, and the process exits for Kubernetes to restart it.

use std::collections::HashMap;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared as SharedFuture};
use kube::Client;
use tokio::sync::{oneshot, watch};
use tokio::task::{Id, JoinHandle, JoinSet};

use super::{RuntimeConfig, Shared, Telemetry, events};

/// Completes when a controller is asked to stop; cheap to clone.
pub type Stopping = SharedFuture<BoxFuture<'static, ()>>;

/// How long a stopping run waits for its queued events to be published.
const EVENTS_AT_SHUTDOWN: Duration = Duration::from_secs(5);

/// The controllers of one run, on one set of [`Shared`] handles. Dropped unfinished (its run
/// aborted), it aborts them.
pub struct Manager {
    shared: Shared,
    publisher: events::Publisher,
    stop: watch::Sender<bool>,
    controllers: JoinSet<()>,
    names: HashMap<Id, &'static str>,
}

impl Manager {
    /// Starts the event publisher; controllers come with [`Manager::start`].
    pub fn new(client: Client, config: RuntimeConfig, telemetry: Telemetry) -> Self {
        let (shared, publisher) = Shared::new(client, config, telemetry);
        Self {
            shared,
            publisher,
            stop: watch::channel(false).0,
            controllers: JoinSet::new(),
            names: HashMap::new(),
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
        let task = self.controllers.spawn(controller);
        self.names.insert(task.id(), name);
    }

    /// Runs the controllers until `shutdown` completes, or until one of them ends by itself;
    /// each then finishes the reconciles it has in flight, and the events they queued are
    /// published. A controller that ended by itself marks the process dead.
    pub async fn run_until(mut self, shutdown: impl Future<Output = ()>) {
        tokio::select! {
            () = shutdown => {}
            Some(ended) = self.controllers.join_next_with_id() => {
                let why = match ended {
                    Ok((id, ())) => format!("controller {} ended", self.name(id)),
                    Err(error) if error.is_panic() => format!("controller {} panicked", self.name(error.id())),
                    Err(error) => format!("controller {} was cancelled", self.name(error.id())),
                };
                tracing::error!(%why, "a controller died: stopping the others");
                self.shared.health.died(why);
            }
        }
        let _ = self.stop.send(true);
        while self.controllers.join_next().await.is_some() {}
        let Self {
            shared, publisher, ..
        } = self;
        let health = shared.health.clone();
        // The publisher ends once every handle to its queue is gone.
        drop(shared);
        publisher.finish(EVENTS_AT_SHUTDOWN).await;
        health.stopped();
    }

    fn name(&self, id: Id) -> &'static str {
        self.names.get(&id).copied().unwrap_or("(unknown)")
    }
}

/// Work in a task of its own, which is asked to stop gracefully with a time limit, or aborted.
pub struct Supervised {
    /// Taken when the work is asked to stop.
    stop: Option<oneshot::Sender<()>>,
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
            stop: Some(stop),
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
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
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

/// Dropped (its owner aborted, say), the work stops at once rather than run on unwatched: a
/// dropped `JoinHandle` alone would leave the task running.
impl Drop for Supervised {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manager whose client points nowhere (its controllers send no request).
    fn manager(telemetry: Telemetry) -> Manager {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        Manager::new(client, RuntimeConfig::default(), telemetry)
    }

    #[tokio::test]
    async fn a_controller_that_panics_marks_the_process_dead_and_stops_the_others() {
        let telemetry = Telemetry::new(Default::default());
        let mut manager = manager(telemetry.clone());
        let (stopped_tx, stopped) = oneshot::channel::<()>();
        manager.start("steady", |_, stopping| {
            async move {
                stopping.await;
                let _ = stopped_tx.send(());
            }
            .boxed()
        });
        manager.start("faulty", |_, _| {
            async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                panic!("injected");
            }
            .boxed()
        });
        let never = std::future::pending::<()>();
        tokio::time::timeout(Duration::from_secs(5), manager.run_until(never))
            .await
            .expect("the run ends without a shutdown");
        stopped.await.expect("the other controller was asked to stop");
        assert_eq!(
            telemetry.health.liveness(),
            Err("controller faulty panicked".into())
        );
    }

    #[tokio::test]
    async fn an_aborted_run_aborts_its_controllers() {
        let (started_tx, started) = oneshot::channel::<()>();
        let (dropped_tx, dropped) = oneshot::channel::<()>();
        let run = Supervised::spawn(|stopped| async move {
            let mut manager = manager(Telemetry::new(Default::default()));
            manager.start("busy", |_, _| {
                async move {
                    // A reconcile in flight, which would ignore a request to stop.
                    let _guard = dropped_tx;
                    let _ = started_tx.send(());
                    std::future::pending::<()>().await;
                }
                .boxed()
            });
            manager.run_until(stopped).await;
        });
        started.await.unwrap();
        run.abort();
        tokio::time::timeout(Duration::from_secs(5), dropped)
            .await
            .expect("the controller's task ended with its run")
            .expect_err("dropped, not completed");
    }

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
