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

impl ProcessStats {
    /// This process's figures, through procfs; `None` where /proc cannot be read.
    pub fn read() -> Option<Self> {
        let me = procfs::process::Process::myself().ok()?;
        let stat = me.stat().ok()?;
        let status = me.status().ok()?;
        let ticks_per_second = procfs::ticks_per_second() as f64;
        let boot_time = procfs::boot_time_secs().ok()? as f64;
        // The soft limit is the one that bites.
        let max_fds = match me.limits().ok()?.max_open_files.soft_limit {
            procfs::process::LimitValue::Value(limit) => limit,
            procfs::process::LimitValue::Unlimited => u64::MAX,
        };
        let kib = |value: Option<u64>| value.unwrap_or(0) * 1024;
        Some(Self {
            cpu_seconds: (stat.utime + stat.stime) as f64 / ticks_per_second,
            resident_bytes: kib(status.vmrss),
            peak_resident_bytes: kib(status.vmhwm),
            virtual_bytes: kib(status.vmsize),
            open_fds: me.fd_count().unwrap_or(0) as u64,
            max_fds,
            start_time_seconds: boot_time + stat.starttime as f64 / ticks_per_second,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

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
