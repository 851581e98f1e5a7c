//! `sample_operator_events`: the events the controllers published, failed to publish, or folded
//! into the series of one still queued; and the queue's depth and the age of its oldest event.

use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Metrics, register};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    result: &'static str,
}

pub(super) struct Events {
    results: Family<EventLabels, Counter>,
    depth: Gauge,
    oldest: Gauge<f64, AtomicU64>,
}

impl Events {
    pub(super) fn register(r: &mut Registry) -> Self {
        let results: Family<EventLabels, Counter> = register(
            r,
            "sample_operator_events",
            "Events by result: published, failed, folded (a repeat counted in the series of one queued), skipped (not written at the chosen level), summarised (an outcome counted in a summary), or summary (a summary written)",
            Family::default(),
        );
        // Every series from the start, so that a rate over them exists before the first event.
        for result in ["published", "failed", "folded", "summarised", "summary"] {
            results.get_or_create(&EventLabels { result }).inc_by(0);
        }
        Self {
            results,
            depth: register(
                r,
                "sample_operator_event_queue_depth",
                "Events queued and not yet sent (repeats folded into one)",
                Gauge::default(),
            ),
            oldest: register(
                r,
                "sample_operator_event_queue_oldest_seconds",
                "How long the oldest queued event has waited",
                Gauge::default(),
            ),
        }
    }
}

impl Metrics {
    /// Counts an event: `published`, `failed`, `folded`, `skipped`, `summarised` or `summary`.
    pub fn event(&self, result: &'static str) {
        self.events(result, 1);
    }

    /// Counts `n` events of one result.
    pub fn events(&self, result: &'static str, n: u64) {
        self.events
            .results
            .get_or_create(&EventLabels { result })
            .inc_by(n);
    }

    /// The event queue as it is now.
    pub fn set_event_queue(&self, depth: usize, oldest: Duration) {
        self.events.depth.set(depth as i64);
        self.events.oldest.set(oldest.as_secs_f64());
    }
}
