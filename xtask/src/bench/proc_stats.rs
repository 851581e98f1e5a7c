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
        let window_start = history
            .iter()
            .rev()
            .find(|(at, _)| now.duration_since(*at) >= quiet);
        if let Some((_, cpu_then)) = window_start {
            let used = history.last().map_or(0.0, |(_, cpu)| cpu - cpu_then);
            if now.duration_since(start) >= min && used < 0.02 * quiet.as_secs_f64() {
                return Ok((now.duration_since(start), true));
            }
        }
        if now.duration_since(start) >= max {
            return Ok((now.duration_since(start), false));
        }
        tokio::time::sleep(TICK).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let stats = read(std::process::id() as i32).unwrap();
        assert!(stats.peak_rss_bytes >= stats.rss_bytes && stats.rss_bytes > 0);
    }
}
