//! `sample_operator_events`: the events the controllers published, or failed to.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{Metrics, register};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    result: &'static str,
}

pub(super) struct Events(Family<EventLabels, Counter>);

impl Events {
    pub(super) fn register(r: &mut Registry) -> Self {
        let events: Family<EventLabels, Counter> = register(
            r,
            "sample_operator_events",
            "Events by result: published or failed",
            Family::default(),
        );
        // Both series from the start, so that a rate over them exists before the first event.
        for result in ["published", "failed"] {
            events.get_or_create(&EventLabels { result }).inc_by(0);
        }
        Self(events)
    }
}

impl Metrics {
    /// Counts an event: `published` or `failed`.
    pub fn event(&self, result: &'static str) {
        self.events.0.get_or_create(&EventLabels { result }).inc();
    }
}
