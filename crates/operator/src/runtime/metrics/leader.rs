//! `leader_election_master_status`, as client-go's leader election exports it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{Metrics, register};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

pub(super) struct Leader(Family<LeaseLabels, Gauge>);

impl Leader {
    pub(super) fn register(r: &mut Registry) -> Self {
        Self(register(
            r,
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master (always 1 when running without leader election); 'name' is the lease",
            Family::default(),
        ))
    }
}

impl Metrics {
    /// Whether this instance holds the lease `name`.
    pub fn set_leader(&self, name: &str, leader: bool) {
        self.leader
            .0
            .get_or_create(&LeaseLabels {
                name: name.to_owned(),
            })
            .set(i64::from(leader));
    }
}
