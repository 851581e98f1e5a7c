//! The process's own figures under the names of Prometheus' process collector, and its peak
//! resident memory.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

pub(super) fn register(r: &mut Registry) {
    r.register_collector(Box::new(ProcessCollector));
}

/// Process figures from /proc, under the names of Prometheus' process collector.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(process) = ProcessStats::read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(process.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            MetricType::Counter,
        )?)?;
        for (name, help, value) in [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                process.resident_bytes as f64,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                process.virtual_bytes as f64,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                process.open_fds as f64,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                process.max_fds as f64,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                process.start_time_seconds,
            ),
            (
                "sample_operator_resident_memory_peak_bytes",
                "Peak resident memory size in bytes since the process started (VmHWM)",
                process.peak_resident_bytes as f64,
            ),
        ] {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, MetricType::Gauge)?)?;
        }
        Ok(())
    }
}

/// What /proc says about this process.
#[derive(Debug, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub peak_resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    pub max_fds: u64,
    pub start_time_seconds: f64,
}

/// The /proc files [`ProcessStats`] is read from.
struct ProcFiles<'a> {
    /// `/proc/self/stat`
    stat: &'a str,
    /// `/proc/self/status`
    status: &'a str,
    /// `/proc/self/limits`
    limits: &'a str,
    /// `/proc/stat`, for the boot time
    system_stat: &'a str,
}

impl ProcessStats {
    pub fn read() -> Option<Self> {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let (stat, status) = (read("/proc/self/stat")?, read("/proc/self/status")?);
        let (limits, system_stat) = (read("/proc/self/limits")?, read("/proc/stat")?);
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100) as f64;
        let files = ProcFiles {
            stat: &stat,
            status: &status,
            limits: &limits,
            system_stat: &system_stat,
        };
        let mut stats = Self::parse(&files, ticks)?;
        stats.open_fds = std::fs::read_dir("/proc/self/fd")
            .map(|d| d.count() as u64)
            .unwrap_or(0);
        Some(stats)
    }

    fn parse(files: &ProcFiles<'_>, ticks_per_second: f64) -> Option<Self> {
        // Fields after the parenthesised command name, which may contain spaces.
        let fields: Vec<&str> = files.stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |n: usize| -> Option<f64> { fields.get(n)?.parse().ok() };
        // utime, stime and starttime are fields 14, 15 and 22 of the whole line: 12, 13 and
        // 20 after the name, counted from 1.
        let (utime, stime, started) = (field(11)?, field(12)?, field(19)?);
        let kib = |key: &str| {
            files
                .status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
                .map(|v| v * 1024)
        };
        let boot_time: f64 = files
            .system_stat
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        // "Max open files  <soft>  <hard>  files": the soft limit is the one that bites.
        let max_fds = files
            .limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|soft| soft.parse().ok())
            .unwrap_or(0);
        Some(Self {
            cpu_seconds: (utime + stime) / ticks_per_second,
            resident_bytes: kib("VmRSS:").unwrap_or(0),
            peak_resident_bytes: kib("VmHWM:").unwrap_or(0),
            virtual_bytes: kib("VmSize:").unwrap_or(0),
            open_fds: 0,
            max_fds,
            start_time_seconds: boot_time + started / ticks_per_second,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    #[test]
    fn parses_proc_files() {
        let files = ProcFiles {
            stat: "1234 (tokio (worker)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 1500 1000 200",
            status: "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nVmSize:\t 4096 kB\n",
            limits: "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\n",
            system_stat: "cpu  1 2 3\nbtime 1700000000\nprocesses 10\n",
        };
        let stats = ProcessStats::parse(&files, 100.0).unwrap();
        assert_eq!(stats.cpu_seconds, 3.0);
        assert_eq!(
            (
                stats.resident_bytes,
                stats.peak_resident_bytes,
                stats.virtual_bytes
            ),
            (1 << 20, 2 << 20, 4 << 20)
        );
        assert_eq!(stats.max_fds, 1024);
        assert_eq!(stats.start_time_seconds, 1_700_000_015.0);
    }

    #[test]
    fn reads_this_process() {
        let stats = ProcessStats::read().unwrap();
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(stats.start_time_seconds <= now && stats.start_time_seconds > now - 3600.0);
        assert!(stats.open_fds > 0 && stats.max_fds >= stats.open_fds);
        assert!(stats.resident_bytes > 0);
    }
}
