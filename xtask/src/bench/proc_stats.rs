//! A contender's CPU time and memory, read from `/proc/<pid>/stat` and `/proc/<pid>/status`.
//! Both cover every thread of the process, which matters for Go and for tokio alike.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcStats {
    /// User plus system CPU time since the process started.
    pub cpu_seconds: f64,
    /// Resident memory now (`VmRSS`).
    pub rss_bytes: u64,
    /// The most resident memory the process ever had (`VmHWM`).
    pub peak_rss_bytes: u64,
}

pub fn read(pid: i32) -> Result<ProcStats> {
    let gone = || format!("process {pid} is gone");
    let process = procfs::process::Process::new(pid).with_context(gone)?;
    let stat = process.stat().with_context(gone)?;
    let status = process.status().with_context(gone)?;
    let kib = |value: Option<u64>| value.unwrap_or(0) * 1024;
    Ok(ProcStats {
        cpu_seconds: (stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64,
        rss_bytes: kib(status.vmrss),
        peak_rss_bytes: kib(status.vmhwm),
    })
}

/// Waits until a controller just started has gone idle, which means its caches are synced: a
/// burst's Foos then meet a controller that is ready, in the benchmark and its profile alike.
pub async fn wait_synced(pid: i32) -> Result<()> {
    let two = Duration::from_secs(2);
    wait_quiet(pid, two, two, Duration::from_secs(30)).await?;
    Ok(())
}

/// Waits until the process has used almost no CPU for `quiet` (under 2% of one core), but at
/// least `min` and at most `max` in all: a controller that has synced its caches and worked off
/// its queue goes quiet. Returns how long it waited and whether it went quiet.
pub async fn wait_quiet(pid: i32, min: Duration, quiet: Duration, max: Duration) -> Result<(Duration, bool)> {
    const TICK: Duration = Duration::from_millis(500);
    let start = Instant::now();
    let mut history: Vec<(Instant, f64)> = Vec::new();
    loop {
        let now = Instant::now();
        history.push((now, read(pid)?.cpu_seconds));
        let waited = now.duration_since(start);
        if waited >= min && went_quiet(&history, quiet) {
            return Ok((waited, true));
        }
        if waited >= max {
            return Ok((waited, false));
        }
        tokio::time::sleep(TICK).await;
    }
}

/// Whether the CPU time sampled in `history` (oldest first, the last sample now) grew by less
/// than 2% of one core over the last `quiet`. False until the samples span `quiet`.
fn went_quiet(history: &[(Instant, f64)], quiet: Duration) -> bool {
    let Some(&(now, cpu_now)) = history.last() else {
        return false;
    };
    history
        .iter()
        .rev()
        .find(|(at, _)| now.duration_since(*at) >= quiet)
        .is_some_and(|(_, cpu_then)| cpu_now - cpu_then < 0.02 * quiet.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let stats = read(std::process::id() as i32).unwrap();
        assert!(stats.peak_rss_bytes >= stats.rss_bytes && stats.rss_bytes > 0);
    }

    /// Samples every half second from `cpu`, the cumulative CPU seconds at each.
    fn samples(cpu: &[f64]) -> Vec<(Instant, f64)> {
        let start = Instant::now();
        let tick = Duration::from_millis(500);
        cpu.iter()
            .enumerate()
            .map(|(i, &cpu)| (start + tick * i as u32, cpu))
            .collect()
    }

    #[test]
    fn quiet_means_under_two_percent_of_a_core_over_the_whole_window() {
        let two = Duration::from_secs(2);
        // Idle for 2 s: 0.01 s of CPU is 0.5% of a core.
        assert!(went_quiet(&samples(&[5.0, 5.0, 5.0, 5.0, 5.01]), two));
        // 0.05 s over 2 s is 2.5%: not quiet.
        assert!(!went_quiet(&samples(&[5.0, 5.0, 5.0, 5.0, 5.05]), two));
        // Busy earlier, idle over the last 2 s.
        assert!(went_quiet(&samples(&[1.0, 3.0, 5.0, 5.0, 5.0, 5.0, 5.0]), two));
        // Idle at first, a burst within the last 2 s.
        assert!(!went_quiet(&samples(&[5.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.3]), two));
    }

    #[test]
    fn quiet_needs_samples_spanning_the_window() {
        let two = Duration::from_secs(2);
        assert!(!went_quiet(&[], two));
        // 1.5 s of samples cannot show 2 s of quiet.
        assert!(!went_quiet(&samples(&[5.0, 5.0, 5.0, 5.0]), two));
    }

    #[tokio::test]
    async fn a_sleeping_process_goes_quiet_and_a_spinning_one_does_not() {
        let second = Duration::from_secs(1);
        let mut sleeping = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let (waited, quiet) = wait_quiet(sleeping.id() as i32, second, second, 10 * second)
            .await
            .unwrap();
        sleeping.kill().unwrap();
        sleeping.wait().unwrap();
        assert!(quiet, "sleep(1) used CPU for {waited:?}");
        assert!(waited >= second, "returned before the minimum wait: {waited:?}");

        // A shell's busy loop uses a whole core until it is killed.
        let mut spinning = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        let (waited, quiet) = wait_quiet(spinning.id() as i32, Duration::ZERO, second, 3 * second)
            .await
            .unwrap();
        spinning.kill().unwrap();
        spinning.wait().unwrap();
        assert!(!quiet, "a busy loop was called quiet after {waited:?}");
        assert!(waited >= 3 * second, "gave up before the maximum: {waited:?}");
    }
}
