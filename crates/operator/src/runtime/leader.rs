//! Leader election on a `coordination.k8s.io` Lease, with kube-lease-manager.
//!
//! Replicas compete for one Lease; only the holder runs the controllers. A holder that loses
//! the lease stops its controllers at once (aborted, not drained: another replica may already be
//! writing) and the process ends, to come back as a standby. On SIGTERM the holder drains its
//! reconciles, then releases the lease, so a standby takes over without waiting for expiry.

use std::hash::{BuildHasher, RandomState};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::watcher::watch_object;
use kube::{Api, Client};
use kube_lease_manager::LeaseManagerBuilder;

use crate::{RunConfig, Telemetry};

/// Where the lease is and how long it lasts.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    /// How long a lease lasts without renewal: the longest a crashed leader blocks a standby.
    pub duration: Duration,
    /// How long before expiry the holder renews; also the clock skew tolerated between replicas.
    pub grace: Duration,
}

/// How an elected run ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Shutdown was asked for; the lease (if held) was released.
    Stopped,
    /// Another replica took the lease while this one held it.
    LostLease,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("leader election on Lease {namespace}/{name}: {source}")]
    Lease {
        name: String,
        namespace: String,
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
}

/// A unique identity among replicas: the instance name with a random suffix, since two
/// processes on one host (or a restarted pod of the same name) share the instance name.
pub fn identity(instance: &str) -> String {
    let random = RandomState::new().hash_one(std::process::id());
    format!("{instance}_{:08x}", random as u32)
}

/// Waits for the lease, then runs the controllers while holding it, until `shutdown`
/// completes or the lease is lost. `drain` bounds how long in-flight reconciles may take to
/// finish on shutdown.
pub async fn run_elected(
    client: Client,
    config: RunConfig,
    telemetry: Telemetry,
    lease: LeaseConfig,
    drain: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Outcome, Error> {
    let identity = identity(&config.instance);
    telemetry.metrics.set_leader(false);
    tracing::info!(lease = %format!("{}/{}", lease.namespace, lease.name), %identity, "waiting for the leader lease");
    let mut shutdown = std::pin::pin!(shutdown);
    let Some((mut is_leader, lease_task)) = acquire(&client, &lease, &identity, &mut shutdown).await? else {
        return Ok(Outcome::Stopped);
    };

    tracing::info!(%identity, "acquired the leader lease: starting controllers");
    telemetry.metrics.set_leader(true);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let health = telemetry.health.clone();
    let metrics = telemetry.metrics.clone();
    let mut controllers = tokio::spawn(crate::run_with(client, config, telemetry, async move {
        let _ = stopped.await;
    }));

    let outcome = tokio::select! {
        _ = &mut shutdown => {
            let _ = stop.send(());
            if tokio::time::timeout(drain, &mut controllers).await.is_err() {
                tracing::warn!(?drain, "reconciles still running after the drain timeout: aborting them");
                controllers.abort();
            }
            Outcome::Stopped
        }
        _ = is_leader.wait_for(|leader| !*leader) => {
            // Someone else may be writing already: stop now, without draining.
            controllers.abort();
            tracing::error!(%identity, "lost the leader lease: stopped the controllers");
            Outcome::LostLease
        }
    };
    health.stopped();
    metrics.set_leader(false);
    release(is_leader, lease_task).await;
    Ok(outcome)
}

type LeaseTask = tokio::task::JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>;

/// Waits as a standby until this replica holds the lease; `None` when shutdown came first.
///
/// kube-lease-manager lets a standby sleep until the lease it saw last expires, so on its own
/// a lease released by a leader that stopped gracefully is taken over only a lease duration
/// later. Watching the Lease too, the standby notices the release and competes again at once.
async fn acquire(
    client: &Client,
    lease: &LeaseConfig,
    identity: &str,
    shutdown: &mut std::pin::Pin<&mut (impl Future<Output = ()> + Send)>,
) -> Result<Option<(tokio::sync::watch::Receiver<bool>, LeaseTask)>, Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &lease.namespace);
    let mut lease_events = std::pin::pin!(watch_object(leases, &lease.name));
    let mut last_holder: Option<String> = None;
    loop {
        let manager = LeaseManagerBuilder::new(client.clone(), &lease.name)
            .with_namespace(&lease.namespace)
            .with_identity(identity)
            .with_duration(lease.duration.as_secs().max(1))
            .with_grace(lease.grace.as_secs().max(1))
            .with_field_manager(format!("{}-lease", crate::FIELD_MANAGER))
            .build()
            .await
            .map_err(|source| Error::Lease {
                name: lease.name.clone(),
                namespace: lease.namespace.clone(),
                source,
            })?;
        let (mut is_leader, lease_task) = manager.watch().await;
        let retry = loop {
            if *is_leader.borrow_and_update() {
                return Ok(Some((is_leader, lease_task)));
            }
            tokio::select! {
                _ = &mut *shutdown => {
                    release(is_leader, lease_task).await;
                    return Ok(None);
                }
                changed = is_leader.changed() => {
                    if changed.is_err() {
                        // The manager's task ended (it logged why): start another shortly.
                        break Duration::from_secs(1);
                    }
                }
                Some(event) = lease_events.next() => {
                    let holder = match event {
                        Ok(Some(l)) => l.spec.and_then(|s| s.holder_identity).filter(|h| !h.is_empty()),
                        _ => continue,
                    };
                    let released = last_holder.is_some() && holder.is_none();
                    last_holder = holder;
                    if released {
                        tracing::info!("the leader released the lease: competing for it now");
                        break Duration::ZERO;
                    }
                }
            }
        };
        drop(is_leader);
        let _ = tokio::time::timeout(Duration::from_secs(5), lease_task).await;
        tokio::time::sleep(retry).await;
    }
}

/// Closing the channel makes the lease task release the lease (if held) and end.
async fn release(is_leader: tokio::sync::watch::Receiver<bool>, lease_task: LeaseTask) {
    drop(is_leader);
    match tokio::time::timeout(Duration::from_secs(5), lease_task).await {
        Ok(Ok(Ok(_))) => tracing::info!("released the leader lease"),
        Ok(Ok(Err(error))) => tracing::warn!(%error, "could not release the leader lease"),
        Ok(Err(error)) => tracing::warn!(%error, "lease task failed"),
        Err(_) => tracing::warn!("timed out releasing the leader lease"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_of_one_instance_differ_between_processes_and_calls() {
        let a = identity("pod-a");
        assert!(a.starts_with("pod-a_"), "{a}");
        // RandomState is seeded per instance, so two calls differ too (with overwhelming odds).
        assert_ne!(a, identity("pod-a"));
    }
}
