//! A contender's CPU time and memory, read from `/proc/<pid>/stat` and `/proc/<pid>/status`.
//! Both cover every thread of the process, which matters for Go and for tokio alike.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::unistd::{SysconfVar, sysconf};

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
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("process {pid} is gone"))?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("process {pid} is gone"))?;
    let ticks = cpu_ticks(&stat).context("unexpected /proc/<pid>/stat")?;
    Ok(ProcStats {
        cpu_seconds: ticks as f64 / ticks_per_second(),
        rss_bytes: status_kib(&status, "VmRSS").unwrap_or(0) * 1024,
        peak_rss_bytes: status_kib(&status, "VmHWM").unwrap_or(0) * 1024,
    })
}

fn ticks_per_second() -> f64 {
    match sysconf(SysconfVar::CLK_TCK) {
        Ok(Some(ticks)) if ticks > 0 => ticks as f64,
        _ => 100.0,
    }
}

/// utime + stime, the 14th and 15th fields; counted after the parenthesised command name, which
/// may itself hold spaces.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// A `Key:   1234 kB` line of `/proc/<pid>/status`.
fn status_kib(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let value = line.strip_prefix(key)?.strip_prefix(':')?;
        value.split_whitespace().next()?.parse().ok()
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
    fn cpu_ticks_are_counted_after_a_command_name_with_spaces() {
        let stat = "42 (my (odd) name) S 1 42 42 0 -1 4194304 100 0 0 0 250 70 0 0 20 0 8 0 100 0 0";
        assert_eq!(cpu_ticks(stat), Some(320));
    }

    #[test]
    fn status_lines_give_kibibytes() {
        let status = "Name:\tx\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(status_kib(status, "VmHWM"), Some(20480));
        assert_eq!(status_kib(status, "VmRSS"), Some(10240));
        assert_eq!(status_kib(status, "VmSwap"), None);
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let stats = read(std::process::id() as i32).unwrap();
        assert!(stats.peak_rss_bytes >= stats.rss_bytes && stats.rss_bytes > 0);
    }
}
