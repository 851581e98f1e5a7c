//! Leader election on a `coordination.k8s.io` Lease, with kube-lease-manager.
//!
//! Replicas compete for one Lease; only the holder runs the controllers. A holder that loses
//! the lease stops its controllers at once (aborted, not drained: another replica may already be
//! writing) and the process ends, to come back as a standby. On SIGTERM the holder drains its
//! reconciles, then releases the lease, so a standby takes over without waiting for expiry.
//!
//! A holder that cannot renew (the apiserver unreachable for it, its RBAC on Leases revoked) is
//! not told so by kube-lease-manager, which logs the error and keeps retrying while still saying
//! "leader". So the holder keeps its own deadline, as client-go's `RenewDeadline` does: from the
//! last renewal it saw land (in a watch of the Lease), the lease is valid for `duration`; the
//! holder stops its controllers `grace / 2` before that, and a standby takes over only after it.

use std::hash::{BuildHasher, RandomState};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::watch_object;
use kube::{Api, Client};
use kube_lease_manager::LeaseManagerBuilder;

use super::{Supervised, Telemetry};

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
    /// No renewal landed in time: another replica may take the lease at any moment.
    RenewalsFailed,
    /// The controllers ended by themselves (one died, see [`Health::liveness`]); the lease was
    /// released for a standby to take over.
    ///
    /// [`Health::liveness`]: super::health::Health::liveness
    ControllersEnded,
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

/// The field manager of this replica's writes to the Lease. kube-lease-manager takes a free
/// Lease with a server-side apply and relies on the apiserver's conflict between two managers
/// to let only one claimant win: replicas sharing one manager would all "win" and lead at once.
/// The apiserver takes at most 128 characters, so a long identity keeps its end, which holds
/// the random part.
pub fn lease_field_manager(identity: &str) -> String {
    let prefix = format!("{}-lease-", super::FIELD_MANAGER);
    let room = 128 - prefix.len();
    let skip = identity.chars().count().saturating_sub(room);
    prefix + &identity.chars().skip(skip).collect::<String>()
}

/// Waits for the lease, then runs `work` (the controllers) while holding it, until `shutdown`
/// completes or the lease is lost. `work` gets a future that completes when it should stop;
/// `drain` bounds how long it may then take to finish its reconciles in flight. `instance`
/// names this replica (see [`identity`]).
pub async fn run_elected<F>(
    client: Client,
    instance: &str,
    telemetry: Telemetry,
    lease: LeaseConfig,
    drain: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
    work: impl FnOnce(futures::future::BoxFuture<'static, ()>) -> F,
) -> Result<Outcome, Error>
where
    F: Future<Output = ()> + Send + 'static,
{
    let identity = identity(instance);
    telemetry.metrics.set_leader(&lease.name, false);
    tracing::info!(lease = %format!("{}/{}", lease.namespace, lease.name), %identity, "waiting for the leader lease");
    let mut shutdown = std::pin::pin!(shutdown);
    let Some((mut is_leader, lease_task)) = acquire(&client, &lease, &identity, &mut shutdown).await? else {
        return Ok(Outcome::Stopped);
    };

    tracing::info!(%identity, "acquired the leader lease: starting controllers");
    telemetry.metrics.set_leader(&lease.name, true);
    let renewals_stop = renewals_stop(client, lease.clone(), identity.clone());
    let mut controllers = Supervised::spawn(work);

    let outcome = tokio::select! {
        _ = &mut shutdown => {
            controllers.drain(drain).await;
            Outcome::Stopped
        }
        // (The guard `wait_for` returns is not Send: drop it inside.)
        () = async { drop(is_leader.wait_for(|leader| !*leader).await) } => {
            // Someone else may be writing already: stop now, without draining.
            controllers.abort();
            tracing::error!(%identity, "lost the leader lease: stopped the controllers");
            Outcome::LostLease
        }
        () = renewals_stop => {
            // Before the lease expires, so that no standby writes while we still do.
            controllers.abort();
            tracing::error!(%identity, "could not renew the leader lease in time: stopped the controllers");
            Outcome::RenewalsFailed
        }
        () = controllers.ended() => Outcome::ControllersEnded,
    };
    telemetry.health.stopped();
    telemetry.metrics.set_leader(&lease.name, false);
    if outcome == Outcome::RenewalsFailed {
        // Releasing would patch the Lease from a state that may be stale by now: let it expire.
        drop(is_leader);
        lease_task.abort();
    } else {
        release(is_leader, lease_task).await;
    }
    Ok(outcome)
}

/// Completes when this holder can no longer be sure it holds the lease: its last renewal seen
/// to land (or the acquisition, just before this is called) is older than `duration - grace/2`.
/// The renewal is due `grace` before expiry, so a healthy holder sees it with `grace/2` to
/// spare.
async fn renewals_stop(client: Client, lease: LeaseConfig, identity: String) {
    let valid_for = lease.duration.saturating_sub(lease.grace / 2);
    let mut deadline = SystemTime::now() + valid_for;
    let leases: Api<Lease> = Api::namespaced(client, &lease.namespace);
    // Backoff: while renewals fail, so does this watch, and it must not retry in a hot loop.
    let mut renewals = std::pin::pin!(watch_object(leases, &lease.name).default_backoff());
    loop {
        let left = deadline.duration_since(SystemTime::now()).unwrap_or_default();
        tokio::select! {
            () = tokio::time::sleep(left) => {
                if SystemTime::now() >= deadline {
                    return;
                }
            }
            Some(event) = renewals.next() => {
                if let Some(renewed) = event.ok().flatten().and_then(|l| renewed_by(l, &identity)) {
                    deadline = deadline.max(renewed + valid_for);
                }
            }
        }
    }
}

/// When `lease` was last renewed, if `identity` holds it. kube-lease-manager writes the renew
/// time from this process's clock, so it compares with this clock without skew.
fn renewed_by(lease: Lease, identity: &str) -> Option<SystemTime> {
    let spec = lease.spec?;
    (spec.holder_identity.as_deref() == Some(identity))
        .then_some(spec.renew_time?)
        .map(|t| SystemTime::from(t.0))
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
    let mut lease_events = std::pin::pin!(watch_object(leases, &lease.name).default_backoff());
    // `None` until the watch's first event: the holder last seen.
    let mut last_holder: Option<Option<String>> = None;
    loop {
        let manager = LeaseManagerBuilder::new(client.clone(), &lease.name)
            .with_namespace(&lease.namespace)
            .with_identity(identity)
            .with_duration(lease.duration.as_secs().max(1))
            .with_grace(lease.grace.as_secs().max(1))
            .with_field_manager(lease_field_manager(identity))
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
                    // Free: released since we last looked, or already free when first seen
                    // (the release may land before the watch's first event; the manager,
                    // started while the lease was held, would wait for it to expire).
                    let released = holder.is_none() && last_holder.as_ref().is_none_or(Option::is_some);
                    last_holder = Some(holder);
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
    fn only_our_own_renewals_count() {
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let renewed = k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let lease = |holder: &str| Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                renew_time: Some(MicroTime(renewed)),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(renewed_by(lease("me"), "me"), Some(SystemTime::from(renewed)));
        assert_eq!(renewed_by(lease("other"), "me"), None);
        assert_eq!(renewed_by(Lease::default(), "me"), None);
    }

    #[test]
    fn identities_of_one_instance_differ_between_processes_and_calls() {
        let a = identity("pod-a");
        assert!(a.starts_with("pod-a_"), "{a}");
        // RandomState is seeded per instance, so two calls differ too (with overwhelming odds).
        assert_ne!(a, identity("pod-a"));
    }

    #[test]
    fn each_identity_has_its_own_lease_field_manager_within_the_apiservers_limit() {
        let (a, b) = (identity("pod"), identity("pod"));
        assert_ne!(lease_field_manager(&a), lease_field_manager(&b));
        assert_eq!(lease_field_manager(&a), format!("sample-operator-lease-{a}"));
        let long = identity(&"p".repeat(253));
        let manager = lease_field_manager(&long);
        assert_eq!(manager.len(), 128);
        assert!(manager.ends_with(&long[long.len() - 9..]), "{manager}");
    }
}
