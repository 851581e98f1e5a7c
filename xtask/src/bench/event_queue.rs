//! Our operator's Event queue over a run, read from its /metrics every quarter of a second: how deep it
//! was and how long its oldest Event had waited, and how many Events it had written and
//! summarised by then. So "Events written during convergence" is measured, not estimated.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// How often /metrics is read.
const EVERY: Duration = Duration::from_millis(250);
/// Samples kept in results.json, at most (thinned evenly, the last kept).
const POINTS: usize = 500;

/// The queue at one moment, `seconds` after the run's start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub seconds: f64,
    pub depth: u64,
    pub oldest_seconds: f64,
    /// Events written one by one so far.
    pub published: u64,
    /// Outcomes counted in summaries so far.
    pub summarised: u64,
}

impl Sample {
    /// The sample in a /metrics text, or `None` when the Event metrics are not in it.
    fn parse(text: &str, seconds: f64) -> Option<Self> {
        let value = |name: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        Some(Self {
            seconds,
            depth: value("sample_operator_event_queue_depth")? as u64,
            oldest_seconds: value("sample_operator_event_queue_oldest_seconds")?,
            published: value(r#"sample_operator_events_total{result="published"}"#)? as u64,
            summarised: value(r#"sample_operator_events_total{result="summarised"}"#).unwrap_or(0.0) as u64,
        })
    }
}

/// Reads ours' /metrics on a thread of its own until [`Sampler::finish`], or until dropped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Vec<Sample>>>,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl Sampler {
    pub fn start(metrics_port: u16, start: Instant) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let url = format!("http://127.0.0.1:{metrics_port}/metrics");
            let mut samples = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                // Blocking on purpose, on this thread: the run's async tasks go on meanwhile.
                if let Ok(answer) = local_cluster::http::get(&url, Duration::from_secs(2))
                    && let Some(sample) = Sample::parse(&answer.body, start.elapsed().as_secs_f64())
                {
                    samples.push(sample);
                }
                std::thread::sleep(EVERY);
            }
            samples
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops reading and returns the samples, thinned to about [`POINTS`].
    pub fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        let samples = self
            .thread
            .take()
            .and_then(|thread| thread.join().ok())
            .unwrap_or_default();
        let step = samples.len().div_ceil(POINTS).max(1);
        let mut thinned: Vec<Sample> = samples.iter().step_by(step).copied().collect();
        if let Some(last) = samples.last()
            && thinned.last() != Some(last)
        {
            thinned.push(*last);
        }
        thinned
    }
}

/// Of the Events ours wrote one by one, how many were written by `converged` seconds: the
/// count at the last sample before it.
pub fn published_by(samples: &[Sample], converged: f64) -> Option<u64> {
    samples
        .iter()
        .take_while(|s| s.seconds <= converged)
        .last()
        .map(|s| s.published)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_read_from_the_metrics_text() {
        let text = "# HELP x\n\
            sample_operator_event_queue_depth 42\n\
            sample_operator_event_queue_oldest_seconds 3.5\n\
            sample_operator_events_total{result=\"published\"} 1000\n\
            sample_operator_events_total{result=\"summarised\"} 7\n";
        assert_eq!(
            Sample::parse(text, 1.5),
            Some(Sample {
                seconds: 1.5,
                depth: 42,
                oldest_seconds: 3.5,
                published: 1000,
                summarised: 7,
            })
        );
        assert_eq!(Sample::parse("sample_operator_event_queue_depth 1\n", 0.0), None);
    }

    #[test]
    fn the_events_written_by_convergence_are_those_of_the_last_sample_before_it() {
        let at = |seconds, published| Sample {
            seconds,
            published,
            ..Default::default()
        };
        let samples = [at(0.5, 0), at(1.0, 10), at(1.5, 40), at(2.0, 90)];
        assert_eq!(published_by(&samples, 1.7), Some(40));
        assert_eq!(published_by(&samples, 0.1), None);
    }
}
