//! sample-operator: the controllers of the classic Kubernetes controller tutorials, on
//! kube-rs's controller runtime.
//!
//! [`runtime`] holds everything the controllers share (the reconcile loop around kube-runtime's
//! `Controller`, watches and readiness, status writes and events, metrics, health, leader
//! election, the manager that runs them) and knows none of them; each controller module holds
//! only its domain and its [`Descriptor`](runtime::Descriptor): [`foo`] (for both groups of
//! Foo), [`network`] and [`my_custom_resource`]. This file lists the controllers and runs the
//! selected ones until shutdown.

pub mod cli;
#[cfg(test)]
mod doc_tables;
pub mod foo;
pub mod my_custom_resource;
pub mod network;
pub mod node_cleanup;
pub mod runtime;

use futures::future::BoxFuture;
use kube::Client;

use runtime::descriptor::OwnResource;
use runtime::{Manager, RuntimeConfig, Shared, Stopping, Telemetry};

/// Declares the controllers, one line each: the variant names it in `--controllers` (as
/// kebab-case), `(field)` names its settings in [`RunConfig`] when it has any, and the
/// descriptor says the rest.
macro_rules! controllers {
    ($($(#[doc = $doc:literal])* $variant:ident $(($settings:ident))? => $descriptor:path,)*) => {
        /// The controllers this operator runs.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum)]
        pub enum ControllerName {
            $($(#[doc = $doc])* $variant,)*
        }

        impl ControllerName {
            /// The name in `--controllers`, metrics, logs and readiness reports.
            pub fn label(self) -> &'static str {
                match self {
                    $(ControllerName::$variant => $descriptor.name,)*
                }
            }

            /// Whether it runs when `--controllers` is not given.
            pub fn runs_by_default(self) -> bool {
                match self {
                    $(ControllerName::$variant => $descriptor.runs_by_default,)*
                }
            }

            /// The custom resource it reconciles, as the checks before a start see it.
            pub fn resource(self) -> &'static OwnResource {
                match self {
                    $(ControllerName::$variant => &$descriptor.resource,)*
                }
            }

            /// Starts it on `shared` with its settings from `config`; see [`Descriptor::start`](runtime::Descriptor::start).
            fn start(self, shared: &Shared, config: &RunConfig, stopping: Stopping) -> BoxFuture<'static, ()> {
                match self {
                    $(ControllerName::$variant => ($descriptor.start)(shared, settings_of!(config $(, $settings)?), stopping),)*
                }
            }
        }
    };
}

/// A controller's settings in a [`RunConfig`]: the named field, or `()` for none.
macro_rules! settings_of {
    ($config:ident) => {
        &()
    };
    ($config:ident, $field:ident) => {
        &$config.$field
    };
}

controllers! {
    /// Network: syncs networks to a backend, Multus NetworkAttachmentDefinitions or OpenStack
    /// Neutron (the samplecrd tutorials).
    Network(network) => network::DESCRIPTOR,
    /// Foo (samplecontroller.k8s.io): owns an nginx Deployment (kubernetes/sample-controller).
    Foo(foo) => foo::DESCRIPTOR,
    /// Foo (example.com): the same Foo in the group of the nakamasato/sample-controller tutorial.
    FooExample(foo) => foo::EXAMPLE_DESCRIPTOR,
    /// MyCustomResource: healthy while its friend Pod exists (kubebuilder tutorial).
    MyCustomResource(my_custom_resource) => my_custom_resource::DESCRIPTOR,
}

impl ControllerName {
    /// What runs unless `--controllers` says otherwise: the controllers of the CRDs installed by
    /// default.
    pub fn defaults() -> Vec<ControllerName> {
        use clap::ValueEnum;
        ControllerName::value_variants()
            .iter()
            .copied()
            .filter(|c| c.runs_by_default())
            .collect()
    }
}

/// How a run of the operator is configured: what the runtime shares, which controllers run,
/// and each controller's own settings.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub runtime: RuntimeConfig,
    pub controllers: Vec<ControllerName>,
    pub network: network::Settings,
    pub foo: foo::Settings,
    pub my_custom_resource: my_custom_resource::Settings,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            runtime: RuntimeConfig::default(),
            controllers: ControllerName::defaults(),
            network: network::Settings::default(),
            foo: foo::Settings::default(),
            my_custom_resource: my_custom_resource::Settings::default(),
        }
    }
}

/// Runs the configured controllers until `shutdown` completes, or until one of them dies (which
/// marks the process dead: see [`Manager::run_until`]); each then finishes the reconciles it has
/// in flight.
pub async fn run(client: Client, config: RunConfig, shutdown: impl Future<Output = ()> + Send + 'static) {
    run_with(client, config, Telemetry::new(Default::default()), shutdown).await
}

/// [`run`], reporting to `telemetry`.
pub async fn run_with(
    client: Client,
    config: RunConfig,
    telemetry: Telemetry,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let mut manager = Manager::new(client, config.runtime.clone(), telemetry);
    for controller in &config.controllers {
        manager.start(controller.label(), |shared, stopping| {
            injected_panic(controller.label(), controller.start(shared, &config, stopping))
        });
    }
    manager.run_until(shutdown).await;
}

/// What a sharded replica runs on its buckets (see
/// [`run_sharded`](runtime::sharding::membership::run_sharded)): each call starts the
/// controllers of `config` on the buckets given, their watches' selectors sent by the client's
/// layer that `selectors` feeds.
pub fn on_buckets(
    client: Client,
    config: RunConfig,
    telemetry: Telemetry,
    selectors: runtime::sharding::layer::Selectors,
) -> impl FnMut(runtime::sharding::Buckets, BoxFuture<'static, ()>) -> BoxFuture<'static, ()> {
    use futures::FutureExt;
    move |buckets, stopped| {
        // The last run's selectors go with it.
        selectors.clear();
        let mut run = config.clone();
        run.runtime.shard = Some(runtime::sharding::ShardRun {
            buckets,
            selectors: selectors.clone(),
        });
        run_with(client.clone(), run, telemetry.clone(), stopped).boxed()
    }
}

/// Debug builds only, for the process test that a dead controller ends the process: the
/// controller that `SAMPLE_OPERATOR_TEST_PANIC` names panics a second after it started. Release
/// builds, which the image and the benchmark run, have no such switch.
#[cfg(debug_assertions)]
fn injected_panic(name: &'static str, run: BoxFuture<'static, ()>) -> BoxFuture<'static, ()> {
    use futures::FutureExt;
    if std::env::var("SAMPLE_OPERATOR_TEST_PANIC").ok().as_deref() != Some(name) {
        return run;
    }
    async move {
        tokio::select! {
            () = run => {}
            () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {
                panic!("a panic injected into controller {name} (SAMPLE_OPERATOR_TEST_PANIC)")
            }
        }
    }
    .boxed()
}

#[cfg(not(debug_assertions))]
fn injected_panic(_: &'static str, run: BoxFuture<'static, ()>) -> BoxFuture<'static, ()> {
    run
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;
    use runtime::metrics::{Metrics, Outcome};
    use std::sync::Arc;

    #[test]
    fn each_controller_is_named_alike_on_the_command_line_and_in_its_descriptor() {
        for controller in ControllerName::value_variants() {
            let value = controller.to_possible_value().expect("listed");
            assert_eq!(value.get_name(), controller.label());
        }
    }

    #[test]
    fn the_example_com_foo_runs_only_when_asked_for() {
        assert_eq!(
            ControllerName::defaults(),
            [
                ControllerName::Network,
                ControllerName::Foo,
                ControllerName::MyCustomResource
            ]
        );
    }

    /// Every test the README's security table names is a test of this repository.
    #[test]
    fn the_readmes_security_table_names_tests_that_exist() {
        let rows = crate::doc_tables::rows(include_str!("../../../README.md"), "security-table");
        assert!(rows.len() >= 10, "{rows:?}");
        let mut sources = String::new();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        // The tests of every crate of the workspace.
        let mut folders = vec![
            root.join("src"),
            root.join("tests"),
            root.join("../api/src"),
            root.join("../local-cluster/src"),
            root.join("../../xtask"),
        ];
        while let Some(folder) = folders.pop() {
            for entry in std::fs::read_dir(&folder).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    folders.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    sources.push_str(&std::fs::read_to_string(&path).unwrap());
                }
            }
        }
        for row in rows {
            let tests = row.last().expect("a test column");
            let names: Vec<&str> = tests.split('`').skip(1).step_by(2).collect();
            assert!(!names.is_empty(), "no test named in {row:?}");
            for name in names {
                assert!(
                    sources.contains(&format!("fn {name}(")) || sources.contains(&format!("fn {name}<")),
                    "the README names a test that does not exist: {name}"
                );
            }
        }
    }

    /// The `Ready` reasons a source file declares in its `pub mod reason { … }`: its own
    /// constants, and those it re-exports from the runtime's.
    fn declared_reasons(source: &str) -> Vec<String> {
        let shared = include_str!("runtime/status.rs");
        let constant = |source: &str, name: &str| -> Option<String> {
            let line = source
                .lines()
                .find(|l| l.trim_start().starts_with(&format!("pub const {name}: &str = ")))?;
            Some(line.split('"').nth(1)?.to_owned())
        };
        let block = source
            .split_once("pub mod reason {")
            .expect("a `pub mod reason` block")
            .1
            .split_once("\n}")
            .unwrap()
            .0;
        let mut reasons = Vec::new();
        for line in block.lines().map(str::trim) {
            if let Some(rest) = line.strip_prefix("pub const ") {
                reasons.push(rest.split('"').nth(1).unwrap().to_owned());
            } else if let Some(rest) = line.strip_prefix("pub use crate::runtime::status::reason::") {
                for name in rest.trim_matches(|c| "{};".contains(c)).split(',').map(str::trim) {
                    reasons.push(constant(shared, name).unwrap_or_else(|| panic!("runtime reason {name}")));
                }
            }
        }
        reasons
    }

    #[test]
    fn the_runbooks_explain_every_ready_reason_and_nothing_else() {
        let mut declared = std::collections::BTreeSet::new();
        for (kind, source) in [
            ("Foo", include_str!("foo/status.rs")),
            ("Network", include_str!("network/status.rs")),
            ("MyCustomResource", include_str!("my_custom_resource/status.rs")),
        ] {
            for reason in declared_reasons(source) {
                declared.insert((kind.to_owned(), reason));
            }
        }
        // A Network's backend failures carry the reason BackendError::reason gives them.
        let backend = include_str!("network/backend/mod.rs");
        let reason_fn = backend
            .split_once("pub fn reason(&self) -> &'static str {")
            .expect("BackendError::reason")
            .1
            .split_once("\n    }")
            .unwrap()
            .0;
        for reason in reason_fn.split('"').skip(1).step_by(2) {
            declared.insert(("Network".to_owned(), reason.to_owned()));
        }
        let documented: std::collections::BTreeSet<(String, String)> =
            crate::doc_tables::rows(include_str!("../../../docs/runbooks.md"), "reasons-table")
                .into_iter()
                .map(|cells| (cells[0].clone(), cells[1].trim_matches('`').to_owned()))
                .collect();
        let undocumented: Vec<_> = declared.difference(&documented).collect();
        let stale: Vec<_> = documented.difference(&declared).collect();
        assert!(
            undocumented.is_empty() && stale.is_empty(),
            "reasons missing from docs/runbooks.md's table: {undocumented:?}\nrows naming no reason: {stale:?}"
        );
    }

    /// The table of metrics in docs/operating.md, as (name, type) pairs.
    fn documented_metrics() -> Vec<(String, String)> {
        crate::doc_tables::rows(include_str!("../../../docs/operating.md"), "metrics-table")
            .into_iter()
            .map(|cells| (cells[0].trim_matches('`').to_owned(), cells[1].clone()))
            .collect()
    }

    #[test]
    fn the_documentation_lists_every_exported_metric_and_nothing_else() {
        // Families with labels appear with their first series: give each one, the controllers'
        // own too.
        let metrics = Arc::new(Metrics::new(Default::default()));
        metrics.controller_started("foo", 1);
        metrics.reconcile("foo").finish(Outcome::Success);
        metrics.reconcile("foo").finish(Outcome::Panic);
        metrics.set_awaiting_retry("foo", 0);
        metrics.set_leader("sample-operator", true);
        metrics.set_shards(3, 21, 21, 0);
        metrics.set_shard_filtering("foos", runtime::metrics::Filtering::Server);
        metrics.shard_event_filtered("foos");
        metrics.shard_handover(1, 0);
        metrics.watch_restarted("foos");
        metrics.watch_failed("foos");
        // A watch's observer starts its series, the objects received among them.
        let _ = metrics.watch_observer::<k8s_openapi::api::core::v1::ConfigMap>("foos");
        network::metrics::BackendRequests::new(&metrics).count("neutron", "GET", "networks", "ok");
        network::metrics::OtherClusterNetworks::new(&metrics).set("another", 1);
        let text = metrics.render();
        let mut exported: Vec<(String, String)> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .map(|line| {
                let (name, type_) = line.split_once(' ').unwrap();
                // OpenMetrics names a counter's family without the `_total` of its samples.
                let name = match type_ {
                    "counter" => format!("{name}_total"),
                    _ => name.to_owned(),
                };
                (name, type_.to_owned())
            })
            .collect();
        exported.sort();
        let mut documented = documented_metrics();
        documented.sort();
        assert_eq!(
            exported, documented,
            "/metrics (left) and the table in docs/operating.md (right) differ"
        );
    }
}
