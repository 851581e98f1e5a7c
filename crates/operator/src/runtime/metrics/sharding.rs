//! `sample_operator_shard_*`: this replica's place among the sharded replicas.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Metrics, register};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FilteringLabels {
    resource: String,
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: &'static str,
}

pub(super) struct Sharding {
    members: Gauge,
    buckets: Family<StateLabels, Gauge>,
    filtering: Family<FilteringLabels, Gauge>,
    filtered: Family<ResourceLabels, Counter>,
    handovers: Family<DirectionLabels, Counter>,
}

impl Sharding {
    pub(super) fn register(r: &mut Registry) -> Self {
        Self {
            members: register(
                r,
                "sample_operator_shard_members",
                "Sharded replicas whose Lease is live, as this replica last saw them (0 without --sharding)",
                Gauge::default(),
            ),
            buckets: register(
                r,
                "sample_operator_shard_buckets",
                "Hash buckets (64 in all): 'held' by this replica and reconciled by it, 'assigned' to it by the current members, 'unheld' by any live replica (objects nobody reconciles)",
                Family::default(),
            ),
            filtering: register(
                r,
                "sample_operator_shard_filtering",
                "1 for how a sharded watch of 'resource' is filtered: 'server' (the API server applies the shardSelector) or 'client' (it ignored it; this replica drops the other replicas' objects itself)",
                Family::default(),
            ),
            filtered: register(
                r,
                "sample_operator_shard_filtered_events",
                "Watch events of other replicas' objects dropped by this replica: the API server sent them, ignoring the shardSelector",
                Family::default(),
            ),
            handovers: register(
                r,
                "sample_operator_shard_handovers",
                "Buckets this replica 'acquired' or 'released' after the members changed",
                Family::default(),
            ),
        }
    }
}

/// Which server-side filtering a sharded watch got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filtering {
    Server,
    Client,
}

impl Metrics {
    /// The members, and this replica's buckets in each state.
    pub fn set_shards(&self, members: usize, held: u32, assigned: u32, unheld: u32) {
        let sharding = &self.sharding;
        sharding.members.set(members as i64);
        for (state, n) in [("held", held), ("assigned", assigned), ("unheld", unheld)] {
            sharding
                .buckets
                .get_or_create(&StateLabels { state })
                .set(i64::from(n));
        }
    }

    pub fn set_shard_filtering(&self, resource: &str, filtering: Filtering) {
        for (mode, on) in [
            ("server", filtering == Filtering::Server),
            ("client", filtering == Filtering::Client),
        ] {
            self.sharding
                .filtering
                .get_or_create(&FilteringLabels {
                    resource: resource.to_owned(),
                    mode,
                })
                .set(i64::from(on));
        }
    }

    pub fn shard_event_filtered(&self, resource: &str) {
        self.sharding
            .filtered
            .get_or_create(&ResourceLabels {
                resource: resource.to_owned(),
            })
            .inc();
    }

    pub fn shard_handover(&self, acquired: u32, released: u32) {
        for (direction, n) in [("acquired", acquired), ("released", released)] {
            self.sharding
                .handovers
                .get_or_create(&DirectionLabels { direction })
                .inc_by(u64::from(n));
        }
    }
}
