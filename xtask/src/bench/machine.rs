//! How fast the machine is running at the moment: a fixed workload timed before each run. This
//! machine is a shared VM whose speed drifts by tens of percent over hours (the sixth sitting ran
//! every contender 28-91% slower than the first); a run's reference says how much of a
//! difference between runs of different sittings is the machine's.

use std::hint::black_box;
use std::time::Instant;

/// Words in the workload's table: 64 MiB, beyond the caches, so that the reference feels memory
/// as well as the core (as the apiserver and the contenders do).
const WORDS: usize = 8 << 20;
/// Steps of one timing: about a third of a second in xtask's unoptimised build here.
const STEPS: u64 = 1 << 21;
/// Timings taken; their median is the reference.
const TIMINGS: usize = 3;

/// The median seconds of [`TIMINGS`] timings of the workload: a single thread walking a 64 MiB
/// table at pseudo-random places. Blocks for about a second.
pub fn reference_seconds() -> f64 {
    let mut table = table();
    let mut seconds: Vec<f64> = (0..TIMINGS)
        .map(|_| {
            let start = Instant::now();
            black_box(workload(&mut table));
            start.elapsed().as_secs_f64()
        })
        .collect();
    seconds.sort_by(f64::total_cmp);
    seconds[TIMINGS / 2]
}

/// The workload's table, written in full here, so that no timing pays for its pages' first
/// touch (a zeroed allocation would map them lazily).
fn table() -> Vec<u64> {
    vec![1; WORDS]
}

/// Walks `table` with xorshift64 fed by what it reads (the same walk every time), adding to
/// what it finds; returns the last value, so that the work cannot be left out.
fn workload(table: &mut [u64]) -> u64 {
    let mask = table.len() - 1;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..STEPS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = (x as usize) & mask;
        let seen = table[at];
        table[at] = seen.wrapping_add(x);
        // The next place depends on what was read, so that each step waits for memory; never
        // zero, where xorshift would stay.
        x = x.wrapping_add(seen) | 1;
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workload_is_the_same_work_every_time() {
        let (mut a, mut b) = (table(), table());
        assert_eq!(workload(&mut a), workload(&mut b));
        assert_eq!(a, b);
        let touched = a.iter().filter(|&&w| w != 1).count();
        assert!(
            touched > STEPS as usize / 2,
            "its steps spread over the table: {touched}"
        );
    }
}
