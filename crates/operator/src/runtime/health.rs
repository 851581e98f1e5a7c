//! What `/healthz` and `/readyz` report.
//!
//! Alive means the process serves requests and none of its controllers has died: a controller
//! whose task ended or panicked outside the guarded reconcile will not come back, so the
//! process says so on `/healthz` (and exits), for Kubernetes to restart it. Ready means the
//! controllers' caches are synced; a standby that waits for the leader lease runs no
//! controllers and is ready too, so a rollout is not held up by the replica that is, by design,
//! idle.

use std::collections::BTreeSet;
use std::sync::Mutex;

#[derive(Debug, Default)]
pub struct Health {
    /// Controllers started whose caches are not synced yet.
    unsynced: Mutex<BTreeSet<&'static str>>,
    /// Why the process is no longer alive: the controller that died, and how.
    dead: Mutex<Option<String>>,
}

impl Health {
    /// Controllers are starting: each stays unready until [`Health::synced`].
    pub fn starting(&self, controllers: impl IntoIterator<Item = &'static str>) {
        self.unsynced.lock().expect("health lock").extend(controllers);
    }

    /// The caches of `controller` have their first full list.
    pub fn synced(&self, controller: &'static str) {
        self.unsynced.lock().expect("health lock").remove(controller);
    }

    /// Controllers stopped (standby again, or shutting down): nothing to wait for.
    pub fn stopped(&self) {
        self.unsynced.lock().expect("health lock").clear();
    }

    /// A controller died: the process is no longer alive, whatever happens next.
    pub fn died(&self, why: String) {
        self.dead.lock().expect("health lock").get_or_insert(why);
    }

    /// `Ok` while alive, else why not.
    pub fn liveness(&self) -> Result<(), String> {
        match &*self.dead.lock().expect("health lock") {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    /// `Ok` when ready, else the controllers still syncing.
    pub fn readiness(&self) -> Result<(), Vec<&'static str>> {
        let unsynced = self.unsynced.lock().expect("health lock");
        if unsynced.is_empty() {
            Ok(())
        } else {
            Err(unsynced.iter().copied().collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_every_started_controller_synced() {
        let health = Health::default();
        assert_eq!(health.readiness(), Ok(()), "a standby is ready");
        health.starting(["foo", "network"]);
        assert_eq!(health.readiness(), Err(vec!["foo", "network"]));
        health.synced("foo");
        assert_eq!(health.readiness(), Err(vec!["network"]));
        health.synced("network");
        assert_eq!(health.readiness(), Ok(()));
    }

    #[test]
    fn a_death_is_kept_and_the_first_cause_told() {
        let health = Health::default();
        assert_eq!(health.liveness(), Ok(()));
        health.died("controller foo panicked".into());
        health.died("controller network ended".into());
        health.stopped();
        assert_eq!(health.liveness(), Err("controller foo panicked".into()));
    }
}
