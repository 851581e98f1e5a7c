//! Per-object exponential backoff that resets on success.
//!
//! kube-runtime's `error_policy` is told about failures only, so it cannot reset a backoff by
//! itself; the reconcile wrapper calls [`Backoff::reset`] after every success.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

/// Delays of `base * 2^failures`, capped at `max`.
#[derive(Debug)]
pub struct Backoff<Key> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<Key, u32>>,
}

impl<Key: Eq + Hash> Backoff<Key> {
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::default(),
        }
    }

    /// Records a failure of `key` and returns how long to wait before the next attempt.
    pub fn next_delay(&self, key: Key) -> Duration {
        let mut failures = self.failures.lock().expect("backoff lock");
        let n = failures.entry(key).or_insert(0);
        let delay = self.base.saturating_mul(2u32.saturating_pow(*n)).min(self.max);
        *n = n.saturating_add(1);
        delay
    }

    /// How many objects have failed since their last success.
    pub fn len(&self) -> usize {
        self.failures.lock().expect("backoff lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets the failures of `key`, after a success or when the object is gone.
    pub fn reset(&self, key: &Key) {
        self.failures.lock().expect("backoff lock").remove(key);
    }

    /// Keeps the failures of the keys `keep` says to: the others' objects are gone.
    pub fn retain(&self, mut keep: impl FnMut(&Key) -> bool) {
        self.failures
            .lock()
            .expect("backoff lock")
            .retain(|key, _| keep(key));
    }
}

impl<Key: Eq + Hash> Default for Backoff<Key> {
    /// From 250 ms, doubling up to five minutes.
    fn default() -> Self {
        Self::new(Duration::from_millis(250), Duration::from_secs(300))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets_on_success() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let delays: Vec<_> = (0..6).map(|_| backoff.next_delay("a").as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff.next_delay("b").as_millis(), 100, "keys are independent");
        backoff.reset(&"a");
        assert_eq!(backoff.next_delay("a").as_millis(), 100);
    }

    #[test]
    fn retain_forgets_the_others() {
        let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        backoff.next_delay("gone");
        backoff.next_delay("here");
        backoff.retain(|key| *key == "here");
        assert_eq!(backoff.len(), 1);
        assert_eq!(
            backoff.next_delay("here").as_millis(),
            200,
            "its failures are kept"
        );
    }

    #[test]
    fn survives_many_failures() {
        let backoff = Backoff::new(Duration::from_millis(1), Duration::from_secs(60));
        for _ in 0..100 {
            assert!(backoff.next_delay(1) <= Duration::from_secs(60));
        }
    }
}
