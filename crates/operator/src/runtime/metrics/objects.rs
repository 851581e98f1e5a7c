//! `sample_operator_objects`: each controller's objects by their `Ready` condition, counted
//! from its cache at each scrape.

use std::sync::{Arc, Mutex, MutexGuard};

use kube::Resource;
use kube::core::object::HasStatus;
use kube::runtime::reflector::Store;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::Metrics;
use crate::runtime::sharding::Ownership;
use crate::runtime::status::{Conditions, READY};

/// The family: the caches it counts, read at each scrape.
pub(super) struct Objects(Arc<Readiness>);

impl Objects {
    pub(super) fn register(r: &mut Registry) -> Self {
        let readiness = Arc::new(Readiness::default());
        r.register_collector(Box::new(ReadinessCollector(readiness.clone())));
        Self(readiness)
    }
}

impl Metrics {
    /// Counts the objects in `store` by their `Ready` condition at each scrape, as
    /// `sample_operator_objects{controller, ready}`: those `owned` gives this replica when a
    /// sharded controller caches more than it reconciles, so that the replicas' counts add up.
    /// A controller started again in the same process (a sharded replica whose buckets
    /// changed) replaces its former cache: its series stay one each, and the former cache is
    /// let go.
    pub fn observe_readiness<K>(&self, controller: &'static str, store: Store<K>, owned: Option<Ownership>)
    where
        K: Resource<DynamicType = ()> + HasStatus + Clone + Send + Sync + 'static,
        K::Status: Conditions,
    {
        let count = move || {
            let mut counts = ReadyCounts::default();
            for object in store.state() {
                if owned.is_some_and(|o| !o.owns(&*object)) {
                    continue;
                }
                let ready = object
                    .status()
                    .and_then(|s| sample_operator_api::conditions::find(s.conditions(), READY))
                    .map(|c| c.status.as_str());
                match ready {
                    Some("True") => counts.ready += 1,
                    Some("False") => counts.not_ready += 1,
                    _ => counts.unknown += 1,
                }
            }
            counts
        };
        let mut counted = self.objects.0.lock();
        counted.retain(|(name, _)| *name != controller);
        counted.push((controller, Box::new(count)));
    }
}

/// Objects of a controller by their `Ready` condition.
#[derive(Debug, Default)]
struct ReadyCounts {
    ready: u64,
    not_ready: u64,
    unknown: u64,
}

type CountReady = Box<dyn Fn() -> ReadyCounts + Send + Sync>;

#[derive(Default)]
struct Readiness(Mutex<Vec<(&'static str, CountReady)>>);

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Readiness")
    }
}

impl Readiness {
    fn lock(&self) -> MutexGuard<'_, Vec<(&'static str, CountReady)>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[derive(Debug)]
struct ReadinessCollector(Arc<Readiness>);

impl Collector for ReadinessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows: Vec<(&'static str, ReadyCounts)> = self
            .0
            .lock()
            .iter()
            .map(|(controller, count)| (*controller, count()))
            .collect();
        let mut family = encoder.encode_descriptor(
            "sample_operator_objects",
            "Objects of each controller's kind by the status of their Ready condition (Unknown: no status yet)",
            None,
            MetricType::Gauge,
        )?;
        for (controller, counts) in rows {
            for (ready, value) in [
                ("True", counts.ready),
                ("False", counts.not_ready),
                ("Unknown", counts.unknown),
            ] {
                let labels = [("controller", controller), ("ready", ready)];
                ConstGauge::new(value as i64).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::requests::RequestCounter;

    #[tokio::test]
    async fn counts_objects_by_their_ready_condition() {
        use kube::runtime::reflector::store;
        use kube::runtime::watcher::Event;
        use sample_operator_api::{Foo, FooSpec, FooStatus};

        let (reader, mut writer) = store::<Foo>();
        let foo = |name: &str, ready: Option<&str>| {
            let spec = FooSpec {
                deployment_name: name.into(),
                replicas: None,
            };
            let mut foo = Foo::new(name, spec);
            foo.metadata.namespace = Some("default".into());
            foo.status = ready.map(|status| FooStatus {
                conditions: vec![crate::runtime::status::ready(
                    status == "True",
                    "Reason",
                    String::new(),
                    None,
                    &[],
                )],
                ..FooStatus::default()
            });
            foo
        };
        for object in [
            foo("a", Some("True")),
            foo("b", Some("True")),
            foo("c", Some("False")),
            foo("d", None),
        ] {
            writer.apply_watcher_event(&Event::Apply(object));
        }
        let metrics = Metrics::new(RequestCounter::default());
        // A first run's cache, replaced by the next run's, as a sharded replica's are.
        metrics.observe_readiness("foo", store::<Foo>().0, None);
        metrics.observe_readiness("foo", reader.clone(), None);
        let text = metrics.render();
        for line in [
            r#"sample_operator_objects{controller="foo",ready="True"} 2"#,
            r#"sample_operator_objects{controller="foo",ready="False"} 1"#,
            r#"sample_operator_objects{controller="foo",ready="Unknown"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        // One series each: a scrape with two of one name and labels is refused whole.
        assert_eq!(text.matches("sample_operator_objects{").count(), 3, "{text}");
        // A sharded replica that caches every object counts those it owns: here none.
        let none = crate::runtime::sharding::Ownership {
            key: crate::runtime::sharding::Key::Namespace,
            buckets: crate::runtime::sharding::Buckets::ALL.without(
                crate::runtime::sharding::Buckets::NONE.with(crate::runtime::sharding::bucket_of(
                    crate::runtime::sharding::fnv1a("default"),
                )),
            ),
        };
        metrics.observe_readiness("foo", reader, Some(none));
        let text = metrics.render();
        assert!(
            text.contains(r#"sample_operator_objects{controller="foo",ready="True"} 0"#),
            "{text}"
        );
    }
}
