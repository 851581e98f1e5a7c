//! Which buckets this replica reconciles, agreed with the other replicas through Leases in the
//! operator's namespace:
//!
//! - each replica renews a member Lease of its own (`<ring>-member-<hash of its identity>`,
//!   labelled with the ring); the live ones (renewed within their duration) are the members;
//! - one more Lease, `<ring>-holders`, holds the holder map in an annotation: which member
//!   holds which buckets. It is changed only by a replace at the resourceVersion read, so two
//!   replicas never both take a bucket;
//! - every replica computes the same [`assign`]ment from the members. It gives up a bucket
//!   assigned to another only after its controllers stopped reconciling it (drained), and
//!   takes one assigned to it only once no live member holds it: the old holder gave it up (its
//!   acknowledgement), or its Lease expired, and then the old holder has stopped by itself, as
//!   a leader does, `grace / 2` before its Lease could expire.
//!
//! A replica whose buckets change restarts its controllers on the new ones (a drain, then a
//! new first list of its share): moves are rare, and a run on fixed buckets keeps the watches
//! and the caches kube-runtime's own.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};

use super::{Buckets, assign};
use crate::runtime::leader::Outcome;
use crate::runtime::{Supervised, Telemetry};

/// The label naming a Lease's ring.
pub const RING_LABEL: &str = "sample-operator.k8s.io/shard-ring";
/// The annotation of the holder map: a JSON object of member Lease name to its buckets.
pub const HOLDERS_ANNOTATION: &str = "sample-operator.k8s.io/shard-holders";

/// Where the Leases are, and how long a member's lasts.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// Names the Leases: replicas of one ring share its buckets.
    pub ring: String,
    pub namespace: String,
    /// How long a member Lease lasts without renewal: the longest a killed replica's buckets
    /// wait for another.
    pub duration: Duration,
    /// A member stops reconciling `grace / 2` before its Lease could expire; also the clock
    /// skew tolerated between replicas.
    pub grace: Duration,
    /// How long a replica waits after seeing the members change, so that replicas starting
    /// together move their buckets once.
    pub settle: Duration,
}

impl ShardConfig {
    pub fn holders_lease(&self) -> String {
        format!("{}-holders", self.ring)
    }

    /// The member Lease of `identity`: a hash of it, since an identity need not be a valid
    /// object name.
    pub fn member_lease(&self, identity: &str) -> String {
        format!("{}-member-{:016x}", self.ring, super::fnv1a(identity))
    }

    fn renew_every(&self) -> Duration {
        (self.duration.saturating_sub(self.grace) / 2).max(Duration::from_secs(1))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("sharding Lease {name}: {source}")]
    Lease {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the holder map in Lease {name} is not valid: {why}")]
    Holders { name: String, why: String },
    #[error("the holder map in Lease {name} changed under each of {attempts} replaces")]
    Contended { name: String, attempts: usize },
}

/// Who holds which buckets.
pub type Holders = BTreeMap<String, Buckets>;

/// What this replica should do, from the members it sees and the holder map.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Assigned to this replica by the current members.
    pub target: Buckets,
    /// Held and still assigned.
    pub keep: Buckets,
    /// Held but assigned to another: to stop reconciling, then give up.
    pub release: Buckets,
    /// Assigned and held by no live member: to take.
    pub acquire: Buckets,
    /// Assigned but still held by another live member, which has yet to give it up.
    pub waiting: Buckets,
    /// Held by no live member at all.
    pub unheld: Buckets,
}

/// The plan of member `me` among the `live` members (`me` among them), given `holders`.
pub fn plan(me: &str, live: &BTreeSet<String>, holders: &Holders) -> Plan {
    let assigned = assign(live.iter().map(String::as_str).chain([me]));
    let target = assigned.get(me).copied().unwrap_or_default();
    let held = holders.get(me).copied().unwrap_or_default();
    let others = holders
        .iter()
        .filter(|(m, _)| m.as_str() != me && live.contains(*m))
        .fold(Buckets::NONE, |all, (_, b)| all.union(*b));
    Plan {
        target,
        keep: held.intersection(target),
        release: held.without(target),
        acquire: target.without(held).without(others),
        waiting: target.without(held).intersection(others),
        unheld: Buckets::ALL.without(others).without(held),
    }
}

/// The holder map after `me` gave up `release` and took `acquire` where no live member holds it
/// now; the entries of members that are not live go, their buckets free. Returns the buckets
/// `me` holds then.
pub fn handover(
    holders: &Holders,
    me: &str,
    live: &BTreeSet<String>,
    release: Buckets,
    acquire: Buckets,
) -> (Holders, Buckets) {
    let mut next: Holders = holders
        .iter()
        .filter(|(m, b)| (m.as_str() == me || live.contains(*m)) && !b.is_empty())
        .map(|(m, b)| (m.clone(), *b))
        .collect();
    let others = next
        .iter()
        .filter(|(m, _)| m.as_str() != me)
        .fold(Buckets::NONE, |all, (_, b)| all.union(*b));
    let mine = next
        .get(me)
        .copied()
        .unwrap_or_default()
        .without(release)
        .union(acquire.without(others));
    if mine.is_empty() {
        next.remove(me);
    } else {
        next.insert(me.to_owned(), mine);
    }
    (next, mine)
}

fn parse_holders(lease: &Lease) -> Result<Holders, String> {
    let Some(text) = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(HOLDERS_ANNOTATION))
    else {
        return Ok(Holders::new());
    };
    let raw: BTreeMap<String, String> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    raw.into_iter().map(|(m, b)| Ok((m, b.parse()?))).collect()
}

fn write_holders(lease: &mut Lease, holders: &Holders) {
    let raw: BTreeMap<&String, String> = holders.iter().map(|(m, b)| (m, b.to_string())).collect();
    lease.metadata.annotations.get_or_insert_default().insert(
        HOLDERS_ANNOTATION.into(),
        serde_json::to_string(&raw).expect("a map of strings"),
    );
}

/// Whether a member Lease was renewed within its duration, by this replica's clock.
fn live_until(lease: &Lease) -> Option<SystemTime> {
    let spec = lease.spec.as_ref()?;
    let renewed = SystemTime::from(spec.renew_time.as_ref()?.0);
    let duration = Duration::from_secs(u64::try_from(spec.lease_duration_seconds?).ok()?);
    Some(renewed + duration)
}

/// The Leases of one ring, as this replica talks to them.
#[derive(Clone)]
struct Ring {
    api: Api<Lease>,
    config: ShardConfig,
    identity: String,
    me: String,
}

/// The members and the holder map at one moment.
struct Seen {
    live: BTreeSet<String>,
    /// When the first live member other than this one expires, unless renewed.
    next_expiry: Option<SystemTime>,
    holders: Holders,
}

impl Ring {
    fn lease_error(&self, name: &str) -> impl FnOnce(kube::Error) -> Error {
        let name = name.to_owned();
        move |source| Error::Lease { name, source }
    }

    /// Creates or renews this replica's member Lease.
    async fn renew(&self) -> Result<(), Error> {
        let now = k8s_openapi::jiff::Timestamp::now();
        let lease = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": { "name": self.me, "labels": { RING_LABEL: self.config.ring } },
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.config.duration.as_secs(),
                "renewTime": MicroTime(now),
            },
        });
        let params = PatchParams::apply(&crate::runtime::leader::lease_field_manager(&self.identity)).force();
        self.api
            .patch(&self.me, &params, &Patch::Apply(lease))
            .await
            .map_err(self.lease_error(&self.me))?;
        Ok(())
    }

    async fn leave(&self) {
        if let Err(e) = self.api.delete(&self.me, &Default::default()).await {
            tracing::warn!(error = %crate::runtime::error_chain(&e), lease = %self.me, "could not delete this replica's member Lease; it expires by itself");
        }
    }

    /// The members and the holder map, read now.
    async fn see(&self) -> Result<Seen, Error> {
        let selector = format!("{RING_LABEL}={}", self.config.ring);
        let leases = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(self.lease_error(&self.config.holders_lease()))?;
        let now = SystemTime::now();
        let holders_name = self.config.holders_lease();
        let mut seen = Seen {
            live: BTreeSet::from([self.me.clone()]),
            next_expiry: None,
            holders: Holders::new(),
        };
        for lease in &leases.items {
            let name = lease.metadata.name.clone().unwrap_or_default();
            if name == holders_name {
                seen.holders = parse_holders(lease).map_err(|why| Error::Holders {
                    name: holders_name.clone(),
                    why,
                })?;
            } else if let Some(until) = live_until(lease).filter(|until| *until > now) {
                if name != self.me {
                    seen.next_expiry = Some(seen.next_expiry.map_or(until, |t| t.min(until)));
                }
                seen.live.insert(name);
            }
        }
        Ok(seen)
    }

    /// Changes the holder map as `change` says, at the version read: retried on a conflict
    /// with another replica's change, `change` then seeing the map that won, and the members
    /// live once it was read. (Members are read after the map: a member renews its Lease
    /// before it first writes the map, so every member in the map read is among them unless
    /// it left or expired since. Read before, a member that joined meanwhile would look gone.)
    async fn change_holders(
        &self,
        mut change: impl FnMut(&Holders, &BTreeSet<String>) -> Holders,
    ) -> Result<Holders, Error> {
        let name = self.config.holders_lease();
        // Conflicts come from other replicas' moves, a few at a time; more means something
        // else keeps writing the Lease, and the next step tries again.
        for _ in 0..CHANGE_ATTEMPTS {
            let current = match self.api.get_opt(&name).await.map_err(self.lease_error(&name))? {
                Some(lease) => lease,
                None => {
                    let mut lease = Lease::default();
                    lease.metadata.name = Some(name.clone());
                    lease.metadata.labels = Some([(RING_LABEL.to_owned(), self.config.ring.clone())].into());
                    match self.api.create(&PostParams::default(), &lease).await {
                        Ok(created) => created,
                        Err(kube::Error::Api(s)) if s.code == 409 => continue,
                        Err(e) => return Err(self.lease_error(&name)(e)),
                    }
                }
            };
            let holders = parse_holders(&current).map_err(|why| Error::Holders {
                name: name.clone(),
                why,
            })?;
            let live = self.see().await?.live;
            let next = change(&holders, &live);
            if next == holders {
                return Ok(next);
            }
            let mut lease = current;
            write_holders(&mut lease, &next);
            match self.api.replace(&name, &PostParams::default(), &lease).await {
                Ok(_) => return Ok(next),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(self.lease_error(&name)(e)),
            }
        }
        Err(Error::Contended {
            name,
            attempts: CHANGE_ATTEMPTS,
        })
    }
}

/// Replaces of the holder map tried before a step gives up on a conflict.
const CHANGE_ATTEMPTS: usize = 16;

/// Runs `work` on this replica's buckets while it is a member of the ring, until `shutdown`
/// completes: `work` gets the buckets to reconcile and a future that completes when it should
/// stop; it is started again whenever the buckets change. `drain` bounds how long a stopping
/// run may take to finish its reconciles. On shutdown this replica gives up its buckets and its
/// Lease, for the others to take them at once.
///
/// Renewals run in a task of their own, so that a drain never delays one; everything else
/// here, a drain included, gives way to the deadline of the last renewal that landed.
pub async fn run_sharded<F>(
    client: Client,
    identity: &str,
    telemetry: Telemetry,
    config: ShardConfig,
    drain: Duration,
    shutdown: impl Future<Output = ()> + Send + 'static,
    mut work: impl FnMut(Buckets, BoxFuture<'static, ()>) -> F,
) -> Result<Outcome, Error>
where
    F: Future<Output = ()> + Send + 'static,
{
    let ring = Ring {
        api: Api::namespaced(client, &config.namespace),
        me: config.member_lease(identity),
        identity: identity.to_owned(),
        config: config.clone(),
    };
    tracing::info!(ring = %config.ring, member = %ring.me, %identity, "joining the sharded replicas");
    let mut shutdown = std::pin::pin!(shutdown.fuse());
    let first = loop {
        let sent = SystemTime::now();
        match ring.renew().await {
            Ok(()) => break sent,
            Err(e) => {
                tracing::warn!(error = %crate::runtime::error_chain(&e), "could not create this replica's member Lease; retrying");
                tokio::select! {
                    _ = &mut shutdown => return Ok(Outcome::Stopped),
                    () = tokio::time::sleep(config.renew_every()) => {}
                }
            }
        }
    };
    // The last renewal known to have landed; the controllers stop `grace / 2` before it could
    // expire.
    let (renewed_tx, renewed) = tokio::sync::watch::channel(first);
    let _renewals = AbortOnDrop(tokio::spawn(renewals(ring.clone(), renewed_tx)));
    let valid_for = config.duration.saturating_sub(config.grace / 2);
    let mut next_expiry: Option<SystemTime> = None;
    let mut run: Option<Supervised> = None;
    let mut held = Buckets::NONE;
    // Only a change of the members or the holder map wakes the replica; renewals do not.
    let selector = format!("{RING_LABEL}={}", config.ring);
    let mut changes = std::pin::pin!(membership_changes(
        watcher::watcher(ring.api.clone(), watcher::Config::default().labels(&selector)).default_backoff(),
        config.holders_lease(),
    ));
    // Replicas started together (a fresh install, a scale-out) see one another before the first
    // assignment: the first to join would otherwise take every bucket and list every object,
    // only to hand most of them over a moment later, at the memory of an unsharded replica.
    tokio::select! {
        _ = &mut shutdown => {
            ring.leave().await;
            return Ok(Outcome::Stopped);
        }
        () = tokio::time::sleep(config.settle) => {}
    }
    // Each turn reads the ring and moves buckets, then waits for a reason to look again.
    let outcome = loop {
        let stepped = tokio::select! {
            stepped = step(&ring, &telemetry, &mut run, &mut held, drain, &mut work) => stepped,
            // (A run being drained is dropped with the step, and so aborted.)
            () = fenced(renewed.clone(), valid_for) => break Outcome::RenewalsFailed,
        };
        match stepped {
            Ok(expiry) => next_expiry = expiry,
            Err(StepError::Lost(lost)) => {
                tracing::error!(%lost, "another replica holds buckets this one was reconciling: stopped the controllers");
                break Outcome::LostLease;
            }
            Err(StepError::Api(e)) => {
                tracing::warn!(error = %crate::runtime::error_chain(&e), "could not read or change the shard holders; trying again");
            }
        }
        // Look again when a member could expire, and every renewal period in any case.
        let look_again = next_expiry
            .map(|t| t.duration_since(SystemTime::now()).unwrap_or_default() + Duration::from_millis(50))
            .unwrap_or(config.renew_every())
            .min(config.renew_every());
        tokio::select! {
            _ = &mut shutdown => {
                if let Some(run) = run.take() {
                    tokio::select! {
                        () = run.drain(drain) => {}
                        () = fenced(renewed.clone(), valid_for) => break Outcome::RenewalsFailed,
                    }
                }
                break Outcome::Stopped;
            }
            () = async { match run.as_mut() { Some(run) => run.ended().await, None => std::future::pending().await } } => {
                break Outcome::ControllersEnded;
            }
            Some(()) = changes.next() => {
                // Replicas started together join within moments: move buckets once.
                tokio::select! {
                    () = tokio::time::sleep(config.settle) => {}
                    () = fenced(renewed.clone(), valid_for) => break Outcome::RenewalsFailed,
                }
            }
            () = tokio::time::sleep(look_again) => {}
            () = fenced(renewed.clone(), valid_for) => break Outcome::RenewalsFailed,
        }
    };
    // Aborted, not drained: from now on another replica may take these buckets.
    drop(run);
    telemetry.metrics.set_shards(0, 0, 0, 0);
    match outcome {
        Outcome::RenewalsFailed => {
            tracing::error!(member = %ring.me, "could not renew this replica's member Lease in time: stopped the controllers");
            // Giving the buckets up would write from a state that may be stale by now: the
            // Lease expires, and the others take them then.
            return Ok(outcome);
        }
        Outcome::LostLease => {}
        _ => {
            // Give the buckets up (their holder says so: no need to wait for expiry).
            let me = ring.me.clone();
            if let Err(e) = ring
                .change_holders(|holders, _| {
                    let mut next = holders.clone();
                    next.remove(&me);
                    next
                })
                .await
            {
                tracing::warn!(error = %crate::runtime::error_chain(&e), "could not give up this replica's buckets; they move once its Lease expires");
            }
        }
    }
    ring.leave().await;
    Ok(outcome)
}

/// Renews this replica's member Lease every renewal period, telling `renewed` when each
/// renewal was sent that landed.
async fn renewals(ring: Ring, renewed: tokio::sync::watch::Sender<SystemTime>) {
    let every = ring.config.renew_every();
    loop {
        tokio::time::sleep(every).await;
        let sent = SystemTime::now();
        match tokio::time::timeout(every, ring.renew()).await {
            Ok(Ok(())) => {
                renewed.send_replace(sent);
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %crate::runtime::error_chain(&e), "could not renew this replica's member Lease");
            }
            Err(_) => tracing::warn!(
                ?every,
                "a renewal of this replica's member Lease took longer than the renewal period"
            ),
        }
    }
}

/// Completes once the last renewal that landed (`renewed`) is older than `valid_for`: from then
/// on, this replica's Lease may expire before it knows.
async fn fenced(mut renewed: tokio::sync::watch::Receiver<SystemTime>, valid_for: Duration) {
    loop {
        let deadline = *renewed.borrow_and_update() + valid_for;
        let Ok(left) = deadline.duration_since(SystemTime::now()) else {
            return;
        };
        tokio::select! {
            () = tokio::time::sleep(left) => {}
            changed = renewed.changed() => {
                if changed.is_err() {
                    // No renewal will come.
                    tokio::time::sleep(left).await;
                    return;
                }
            }
        }
    }
}

/// A task that ends with its handle.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

enum StepError {
    /// The holder map gives buckets this replica reconciles to another.
    Lost(Buckets),
    Api(Error),
}

impl From<Error> for StepError {
    fn from(e: Error) -> Self {
        StepError::Api(e)
    }
}

/// Reads the ring and moves buckets as the plan says; returns when the next member expires.
async fn step<F>(
    ring: &Ring,
    telemetry: &Telemetry,
    run: &mut Option<Supervised>,
    held: &mut Buckets,
    drain: Duration,
    work: &mut impl FnMut(Buckets, BoxFuture<'static, ()>) -> F,
) -> Result<Option<SystemTime>, StepError>
where
    F: Future<Output = ()> + Send + 'static,
{
    let seen = ring.see().await?;
    let mine = seen.holders.get(&ring.me).copied().unwrap_or_default();
    let lost = held.without(mine);
    if !lost.is_empty() {
        return Err(StepError::Lost(lost));
    }
    let plan = plan(&ring.me, &seen.live, &seen.holders);
    if !plan.release.is_empty() || !plan.acquire.is_empty() {
        if !plan.release.is_empty()
            && let Some(stopping) = run.take()
        {
            // Reconciles of the buckets given up end before the holder map says so.
            stopping.drain(drain).await;
        }
        let me = ring.me.clone();
        let mut now_held = *held;
        ring.change_holders(|holders, live| {
            let (next, mine) = handover(holders, &me, live, plan.release, plan.acquire);
            now_held = mine;
            next
        })
        .await?;
        let acquired = now_held.without(*held);
        let released = held.without(now_held);
        if now_held != *held {
            if let Some(stopping) = run.take() {
                stopping.drain(drain).await;
            }
            *held = now_held;
            telemetry.metrics.shard_handover(acquired.len(), released.len());
            tracing::info!(
                member = %ring.me,
                held = %held,
                acquired = %acquired,
                released = %released,
                waiting = %plan.waiting,
                members = seen.live.len(),
                "shard buckets changed"
            );
        }
    }
    // The controllers on the buckets held: after a change, or when none run yet.
    if run.is_none() && !held.is_empty() {
        let buckets = *held;
        *run = Some(Supervised::spawn(|stop| work(buckets, stop)));
    }
    telemetry.metrics.set_shards(
        seen.live.len(),
        held.len(),
        plan.target.len(),
        plan.unheld.without(*held).len(),
    );
    Ok(seen.next_expiry)
}

/// A `()` for each change of the ring's members (a Lease added or removed) or of its holder
/// map; a renewal, which changes neither, passes by.
fn membership_changes(
    events: impl futures::Stream<Item = Result<Event<Lease>, watcher::Error>>,
    holders: String,
) -> impl futures::Stream<Item = ()> {
    let mut seen: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut relisted: Option<BTreeMap<String, Option<String>>> = None;
    events.filter_map(move |event| {
        let fingerprint = |lease: &Lease| {
            let name = lease.metadata.name.clone().unwrap_or_default();
            let map = (name == holders)
                .then(|| {
                    lease
                        .metadata
                        .annotations
                        .as_ref()?
                        .get(HOLDERS_ANNOTATION)
                        .cloned()
                })
                .flatten();
            (name, map)
        };
        let changed = match event {
            Ok(Event::Apply(lease)) => {
                let (name, map) = fingerprint(&lease);
                seen.insert(name, map.clone()) != Some(map)
            }
            Ok(Event::Delete(lease)) => seen.remove(&fingerprint(&lease).0).is_some(),
            Ok(Event::Init) => {
                relisted = Some(BTreeMap::new());
                false
            }
            Ok(Event::InitApply(lease)) => {
                let (name, map) = fingerprint(&lease);
                relisted.get_or_insert_default().insert(name, map);
                false
            }
            Ok(Event::InitDone) => {
                let now = relisted.take().unwrap_or_default();
                let changed = now != seen;
                seen = now;
                changed
            }
            Err(_) => false,
        };
        std::future::ready(changed.then_some(()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    /// Every member plans and moves, in turn, until none has anything left to do; no bucket
    /// is ever held twice. Returns the rounds it took.
    fn settle(holders: &mut Holders, members: &BTreeSet<String>) -> usize {
        for round in 1..=10 {
            let mut moved = false;
            for me in members {
                let plan = plan(me, members, holders);
                if plan.release.is_empty() && plan.acquire.is_empty() {
                    continue;
                }
                moved = true;
                let (next, mine) = handover(holders, me, members, plan.release, plan.acquire);
                assert_eq!(mine, plan.keep.union(plan.acquire));
                next.values().fold(Buckets::NONE, |u, b| {
                    assert!(u.intersection(*b).is_empty(), "a bucket held twice: {next:?}");
                    u.union(*b)
                });
                *holders = next;
            }
            if !moved {
                return round;
            }
        }
        panic!("the members never settled: {holders:?}");
    }

    #[test]
    fn a_newcomer_waits_for_its_buckets_until_their_holders_give_them_up() {
        let mut holders: Holders = assign(["a", "b"]).into_iter().collect();
        let members = live(&["a", "b", "c"]);
        let c = plan("c", &members, &holders);
        assert!(c.acquire.is_empty(), "all held by live members: {c:?}");
        assert_eq!(c.waiting, c.target);
        assert!(!c.target.is_empty());
        // a gives up only what is no longer its own.
        let a = plan("a", &members, &holders);
        assert_eq!(a.keep.union(a.release), holders["a"]);
        assert!(a.release.intersection(assign(["a", "b", "c"])["a"]).is_empty());
        assert!(settle(&mut holders, &members) <= 3);
        assert_eq!(holders, assign(["a", "b", "c"]));
    }

    #[test]
    fn a_member_leaving_or_expiring_leaves_every_bucket_held_once() {
        let mut holders = Holders::new();
        let three = live(&["a", "b", "c"]);
        settle(&mut holders, &three);
        assert_eq!(holders, assign(["a", "b", "c"]));
        // c stops: it gave its buckets up; or its Lease expired: it is no longer live.
        let two = live(&["a", "b"]);
        settle(&mut holders, &two);
        assert_eq!(holders, assign(["a", "b"]));
    }

    #[test]
    fn the_buckets_of_an_expired_member_are_taken_and_its_entry_goes() {
        let holders: Holders = assign(["a", "b", "c"]).into_iter().collect();
        // c's Lease expired: it is not live, so its holdings are void.
        let members = live(&["a", "b"]);
        let a = plan("a", &members, &holders);
        assert!(!a.acquire.is_empty());
        assert!(a.waiting.intersection(holders["c"]).is_empty(), "{a:?}");
        let (next, _) = handover(&holders, "a", &members, a.release, a.acquire);
        assert!(!next.contains_key("c"));
    }

    #[test]
    fn a_bucket_taken_meanwhile_by_a_live_member_is_not_taken_again() {
        // a planned to take bucket 0 from an empty map; b got it first.
        let holders: Holders = [("b".to_owned(), Buckets::NONE.with(0))].into();
        let (next, a_holds) = handover(
            &holders,
            "a",
            &live(&["a", "b"]),
            Buckets::NONE,
            Buckets::NONE.with(0).with(1),
        );
        assert_eq!(a_holds, Buckets::NONE.with(1));
        assert_eq!(next["b"], Buckets::NONE.with(0));
    }

    #[test]
    fn the_holder_map_is_read_as_it_is_written() {
        let holders: Holders = [("m-1".to_owned(), "0-5,9".parse().unwrap())].into();
        let mut lease = Lease::default();
        write_holders(&mut lease, &holders);
        assert_eq!(
            lease.metadata.annotations.as_ref().unwrap()[HOLDERS_ANNOTATION],
            r#"{"m-1":"0-5,9"}"#
        );
        assert_eq!(parse_holders(&lease).unwrap(), holders);
        lease
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(HOLDERS_ANNOTATION.into(), r#"{"m-1":"0-99"}"#.into());
        assert!(parse_holders(&lease).is_err());
    }

    #[tokio::test]
    async fn renewals_wake_no_one_and_members_and_holder_changes_do() {
        let lease = |name: &str, renew: i64, map: Option<&str>| {
            let mut lease = Lease::default();
            lease.metadata.name = Some(name.into());
            lease.spec = Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                lease_duration_seconds: Some(renew as i32),
                ..Default::default()
            });
            if let Some(map) = map {
                lease.metadata.annotations = Some([(HOLDERS_ANNOTATION.to_owned(), map.to_owned())].into());
            }
            lease
        };
        let events = vec![
            Ok(Event::Init),
            Ok(Event::InitApply(lease("m-a", 1, None))),
            Ok(Event::InitApply(lease("h", 1, Some("{}")))),
            Ok(Event::InitDone),
            // A renewal of a member already seen.
            Ok(Event::Apply(lease("m-a", 2, None))),
            // A new member.
            Ok(Event::Apply(lease("m-b", 1, None))),
            // The holder map changes.
            Ok(Event::Apply(lease("h", 2, Some(r#"{"m-a":"0"}"#)))),
            // A member leaves.
            Ok(Event::Delete(lease("m-b", 1, None))),
            // A re-list that finds what was seen.
            Ok(Event::Init),
            Ok(Event::InitApply(lease("m-a", 3, None))),
            Ok(Event::InitApply(lease("h", 3, Some(r#"{"m-a":"0"}"#)))),
            Ok(Event::InitDone),
        ];
        let woken: Vec<()> = membership_changes(futures::stream::iter(events), "h".into())
            .collect()
            .await;
        // The first list, the new member, the map, the leaving member.
        assert_eq!(woken.len(), 4);
    }
}
