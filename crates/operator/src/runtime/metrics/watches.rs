//! The watches' health: re-lists after the first list, and errors (each retried with backoff);
//! and what they bring: the objects received.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::{Metrics, register};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: &'static str,
}

pub(super) struct Watches {
    watch_restarts: Family<ResourceLabels, Counter>,
    watch_errors: Family<ResourceLabels, Counter>,
    watch_events: Family<ResourceLabels, Counter>,
}

impl Watches {
    pub(super) fn register(r: &mut Registry) -> Self {
        Self {
            watch_restarts: register(
                r,
                "sample_operator_watch_restarts",
                "Re-lists of a watched resource after its first list",
                Family::default(),
            ),
            watch_errors: register(
                r,
                "sample_operator_watch_errors",
                "Errors of a watch, each followed by a retry with backoff",
                Family::default(),
            ),
            watch_events: register(
                r,
                "sample_operator_watch_events",
                "Objects a watch received (in lists and as changes), before any filter of this process: what the API server sent and this process decoded",
                Family::default(),
            ),
        }
    }
}

impl Metrics {
    /// A callback for `.inspect(...)` on a watcher stream that counts its re-lists (every list
    /// after the first) and errors under `resource`.
    pub fn watch_observer<K>(
        self: &Arc<Self>,
        resource: &'static str,
    ) -> impl FnMut(&Result<kube::runtime::watcher::Event<K>, kube::runtime::watcher::Error>) + Send + 'static
    {
        // Both series from the start, at zero, so that a rate over them is 0 rather than empty.
        let labels = ResourceLabels { resource };
        self.watches.watch_restarts.get_or_create(&labels).inc_by(0);
        self.watches.watch_errors.get_or_create(&labels).inc_by(0);
        let received = self.watches.watch_events.get_or_create(&labels).clone();
        let metrics = self.clone();
        let mut listed = false;
        move |event| match event {
            Ok(kube::runtime::watcher::Event::Init) => {
                if listed {
                    metrics.watch_restarted(resource);
                }
                listed = true;
            }
            Ok(kube::runtime::watcher::Event::InitDone) => {}
            Ok(_) => {
                received.inc();
            }
            Err(_) => metrics.watch_failed(resource),
        }
    }

    pub fn watch_restarted(&self, resource: &'static str) {
        self.watches
            .watch_restarts
            .get_or_create(&ResourceLabels { resource })
            .inc();
    }

    pub fn watch_failed(&self, resource: &'static str) {
        self.watches
            .watch_errors
            .get_or_create(&ResourceLabels { resource })
            .inc();
    }
}
