//! The chart's alerting rules and Grafana dashboard, checked with Prometheus' own tools:
//! `promtool check rules` and `promtool test rules` (deploy/monitoring/alerts.test.yaml), and a
//! real Prometheus (built from its pinned Go module) that scrapes the operator while it works,
//! evaluates the rules and answers every query of the dashboard, over HTTPS with a token of a
//! ServiceAccount bound to the metrics-reader ClusterRole, as the chart's ServiceMonitor scrapes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::PostParams;
use local_cluster::testing::TestNamespace;
use sample_operator_api::{Foo, FooSpec};
use serde::Deserialize;

use crate::chart::render;
use crate::deploy::ROOT;
use crate::foo::plain_deployment;
use crate::metrics::{install_metrics_reader, service_account_token, unbind};
use crate::support::{
    OperatorProcess, client_with_crds, create_foo, eventually, free_port, http_get, operator_kubeconfig,
    scratch_dir, wait_foo_available,
};

/// The job the test's Prometheus gives the operator's target, and the rules select.
const JOB: &str = "sample-operator";
const ALERTS_TEST: &str = "deploy/monitoring/alerts.test.yaml";
const DASHBOARD: &str = "deploy/helm/sample-operator/files/dashboard.json";
const RUNBOOKS: &str = "docs/runbooks.md";

fn promtool_and_prometheus() -> local_cluster::toolchain::Prometheus {
    local_cluster::toolchain::prometheus().expect("prometheus and promtool build")
}

/// The chart's PrometheusRule rendered for the job `JOB`, as a Prometheus rule file.
async fn rule_file() -> serde_json::Value {
    let sets = [
        "metrics.prometheusRule.enabled=true".to_owned(),
        format!("metrics.prometheusRule.selector=job=\"{JOB}\""),
    ];
    let objects = render(&sets).await.expect("the chart renders");
    crate::chart::find(&objects, "PrometheusRule").expect("a PrometheusRule")["spec"].clone()
}

fn write_yaml(path: &Path, value: &serde_json::Value) {
    std::fs::write(path, serde_yaml::to_string(value).unwrap()).unwrap();
}

fn run(command: &mut Command) -> String {
    let output = command.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{command:?} failed:\n{text}");
    text
}

fn alert_names(rules: &serde_json::Value) -> Vec<String> {
    rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .filter_map(|r| r["alert"].as_str().map(str::to_owned))
        .collect()
}

#[derive(Deserialize)]
struct UnitTests {
    tests: Vec<UnitTest>,
}

#[derive(Deserialize)]
struct UnitTest {
    #[serde(default)]
    alert_rule_test: Vec<AlertCase>,
}

#[derive(Deserialize)]
struct AlertCase {
    alertname: String,
    exp_alerts: Vec<serde_yaml::Value>,
}

#[tokio::test]
async fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    let rules = rule_file().await;
    let dir = scratch_dir("promtool");
    write_yaml(&dir.join("rules.yaml"), &rules);
    std::fs::copy(Path::new(ROOT).join(ALERTS_TEST), dir.join("alerts.test.yaml")).unwrap();
    let tools = tokio::task::spawn_blocking(promtool_and_prometheus)
        .await
        .unwrap();
    let check = run(Command::new(&tools.promtool)
        .args(["check", "rules", "--lint=all", "--lint-fatal"])
        .arg(dir.join("rules.yaml")));
    assert!(check.contains("SUCCESS: 6 rules found"), "{check}");
    run(Command::new(&tools.promtool)
        .args(["test", "rules"])
        .arg(dir.join("alerts.test.yaml")));

    // Every alert is tested both ways, and links to a section of the runbooks.
    let tests: UnitTests =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("alerts.test.yaml")).unwrap()).unwrap();
    let cases: Vec<&AlertCase> = tests.tests.iter().flat_map(|t| &t.alert_rule_test).collect();
    let runbooks = std::fs::read_to_string(Path::new(ROOT).join(RUNBOOKS)).unwrap();
    let alerts = alert_names(&rules);
    assert_eq!(alerts.len(), 6, "{alerts:?}");
    for alert in &alerts {
        let of = |fires: bool| {
            cases
                .iter()
                .any(|c| &c.alertname == alert && c.exp_alerts.is_empty() != fires)
        };
        assert!(of(true) && of(false), "{alert}: a case firing and one silent");
        assert!(
            runbooks.contains(&format!("\n## {alert}\n")),
            "{RUNBOOKS} has a section {alert}"
        );
    }
}

#[tokio::test]
async fn the_rules_select_the_monitors_job_and_link_runbooks_when_told_where() {
    for (sets, selector) in [
        (
            vec![
                "metrics.serviceMonitor.enabled=true",
                "metrics.certSecret=metrics-tls",
            ],
            r#"up{job="sample-operator-metrics",namespace="sample-operator"}"#,
        ),
        (
            vec![
                "metrics.podMonitor.enabled=true",
                "metrics.podMonitor.tokenSecret.name=metrics-scraper",
                "metrics.certSecret=metrics-tls",
            ],
            r#"up{job="sample-operator/sample-operator",namespace="sample-operator"}"#,
        ),
    ] {
        let mut all = vec!["metrics.prometheusRule.enabled=true"];
        all.extend(sets);
        all.push(
            "metrics.prometheusRule.runbookURL=https://git.example.com/ops/sample-operator/docs/runbooks.md",
        );
        let all: Vec<String> = all.into_iter().map(str::to_owned).collect();
        let objects = render(&all).await.unwrap();
        let rule = crate::chart::find(&objects, "PrometheusRule").unwrap();
        let down = &rule["spec"]["groups"][0]["rules"][0];
        assert_eq!(down["alert"], "SampleOperatorDown");
        assert!(
            down["expr"].as_str().unwrap().contains(selector),
            "{selector} in {down}"
        );
        assert_eq!(
            down["annotations"]["runbook_url"],
            "https://git.example.com/ops/sample-operator/docs/runbooks.md#sampleoperatordown"
        );
    }
}

/// The metric families docs/operating.md's table lists (the table a unit test holds to /metrics).
fn documented_families() -> BTreeSet<String> {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("docs/operating.md")).unwrap();
    let table = readme
        .split("<!-- metrics-table")
        .nth(1)
        .expect("the metrics table of docs/operating.md");
    table
        .lines()
        .skip(3)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('`').nth(1).map(str::to_owned))
        .collect()
}

/// Every PromQL expression of the dashboard: its panels' targets and its variables' queries.
fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap();
            let name = format!("{title} / {}", target["legendFormat"].as_str().unwrap_or(""));
            queries.push((name, target["expr"].as_str().unwrap().to_owned()));
        }
    }
    queries
}

#[test]
fn the_dashboard_is_well_formed_and_queries_only_exported_metrics() {
    let text = std::fs::read_to_string(Path::new(ROOT).join(DASHBOARD)).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(dashboard["uid"], "sample-operator");
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(variables, ["datasource", "job", "controller"]);

    let families = documented_families();
    assert!(families.contains("controller_runtime_reconcile_total"));
    let mut ids = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap();
        assert!(ids.insert(panel["id"].as_i64().unwrap()), "{title}: a unique id");
        for key in ["h", "w", "x", "y"] {
            assert!(panel["gridPos"][key].is_i64(), "{title}: gridPos.{key}");
        }
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}");
        assert!(
            panel["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{title}"
        );
        let targets = panel["targets"].as_array().unwrap();
        let refs: BTreeSet<&str> = targets.iter().map(|t| t["refId"].as_str().unwrap()).collect();
        assert_eq!(refs.len(), targets.len(), "{title}: unique refIds");
    }
    for (name, expr) in dashboard_queries(&dashboard) {
        for family in metric_names(&expr) {
            let base = ["_bucket", "_count", "_sum"]
                .iter()
                .find_map(|s| family.strip_suffix(s))
                .unwrap_or(&family);
            assert!(
                family == "up" || families.contains(&family) || families.contains(base),
                "{name}: {family} is not a metric docs/operating.md lists"
            );
        }
        assert!(expr.contains("job=~\"$job\""), "{name}: selects $job");
    }
}

/// The metric names in a PromQL expression: identifiers followed by `{`.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut current = String::new();
    for c in expr.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            current.push(c);
        } else {
            if c == '{' && !current.is_empty() {
                names.push(current.clone());
            }
            current.clear();
        }
    }
    names
}

/// A Prometheus scraping one target every second over HTTPS (not verifying its self-signed
/// certificate, as the chart's ServiceMonitor does without a certificate Secret) with the bearer
/// token in `token_file`, with the chart's rules; killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
}

impl Prometheus {
    fn start(
        prometheus: &Path,
        dir: &Path,
        target_port: u16,
        token_file: &Path,
        rules: &serde_json::Value,
    ) -> Self {
        write_yaml(&dir.join("rules.yaml"), rules);
        let config = serde_json::json!({
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "rule_files": ["rules.yaml"],
            "scrape_configs": [{
                "job_name": JOB,
                "scheme": "https",
                "tls_config": {"insecure_skip_verify": true},
                "authorization": {"credentials_file": token_file},
                "static_configs": [{"targets": [format!("127.0.0.1:{target_port}")]}],
            }],
        });
        write_yaml(&dir.join("prometheus.yaml"), &config);
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
        let child = Command::new(prometheus)
            .current_dir(dir)
            .arg("--config.file=prometheus.yaml")
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Self { child, port }
    }

    /// `GET /api/v1/<path>?<params>`: the response's `data`, or Prometheus' error.
    fn api(&self, path: &str, params: &[(&str, &str)]) -> Result<serde_json::Value, String> {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(params)
            .finish();
        let (_, body) =
            http_get(self.port, &format!("/api/v1/{path}?{query}")).ok_or_else(|| "no answer".to_owned())?;
        let response: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("{e}: {body}"))?;
        if response["status"] == "success" {
            Ok(response["data"].clone())
        } else {
            Err(body)
        }
    }

    /// The result of an instant query.
    fn query(&self, expr: &str) -> Result<Vec<serde_json::Value>, String> {
        let data = self.api("query", &[("query", expr)])?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// The state (`pending` or `firing`) of each active alert, by name; `None` when
    /// Prometheus does not answer, so that no answer never passes for "no alert".
    fn alerts(&self) -> Option<BTreeMap<String, String>> {
        let data = self.api("alerts", &[]).ok()?;
        let alerts = data["alerts"].as_array()?.iter().map(|a| {
            (
                a["labels"]["alertname"].as_str().unwrap().to_owned(),
                a["state"].as_str().unwrap().to_owned(),
            )
        });
        Some(alerts.collect())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Dashboard queries that may rightly return nothing in this test, and why.
const EMPTY_HERE: [(&str, &str); 4] = [
    (
        "sample_operator_backend_requests_total",
        "only the Neutron backend calls out, and this operator runs the Foo controller alone",
    ),
    // The sharding row's: this operator is elected, not sharded. The sharding tests read
    // these families from sharded replicas (`sharding::sharded_replicas_split_…`).
    ("sample_operator_shard_buckets", "this operator is not sharded"),
    ("sample_operator_shard_filter", "this operator is not sharded"),
    (
        "sample_operator_shard_handovers_total",
        "this operator is not sharded",
    ),
];

#[tokio::test]
async fn a_real_prometheus_scrapes_the_operator_evaluates_the_alerts_and_answers_the_dashboard() {
    let tools = tokio::task::spawn_blocking(promtool_and_prometheus)
        .await
        .unwrap();
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "prometheus").await;
    let dir = scratch_dir(&ns.name);
    let kubeconfig = operator_kubeconfig(&client, &dir).await;
    let kubeconfig_arg = format!("--kubeconfig={}", kubeconfig.display());
    let namespace_arg = format!("--namespace={}", ns.name);
    let mut operator = Some(OperatorProcess::spawn(
        "scraped",
        &dir,
        &[
            &kubeconfig_arg,
            &namespace_arg,
            "--controllers=foo",
            "--metrics-secure",
        ],
    ));
    let operator_port = operator.as_ref().unwrap().port;
    install_metrics_reader(&client).await;
    let token = service_account_token(&client, &ns.name, "prometheus", true).await;
    let token_file = dir.join("token");
    std::fs::write(&token_file, token).unwrap();
    let rules = rule_file().await;
    let prometheus = Prometheus::start(&tools.prometheus, &dir, operator_port, &token_file, &rules);
    let up = || {
        prometheus
            .query(&format!("up{{job=\"{JOB}\"}} == 1"))
            .is_ok_and(|r| r.len() == 1)
    };
    eventually("Prometheus scrapes the operator", Duration::from_secs(60), up).await;

    // A healthy operator with a Ready Foo: every rule evaluates, and no alert is even pending.
    let foos = ns.api::<Foo>();
    create_foo(&foos, "scraped").await;
    wait_foo_available(&foos, "scraped").await;
    eventually(
        "the rules evaluate without error",
        Duration::from_secs(30),
        || {
            let Ok(data) = prometheus.api("rules", &[]) else {
                return false;
            };
            let rules: Vec<&serde_json::Value> = data["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|g| g["rules"].as_array().unwrap())
                .collect();
            rules.len() == 6 && rules.iter().all(|r| r["health"] == "ok")
        },
    )
    .await;
    eventually(
        "no alert with a healthy operator",
        Duration::from_secs(30),
        || prometheus.alerts().is_some_and(|a| a.is_empty()),
    )
    .await;

    // A Foo whose Deployment name is taken fails every reconcile: the error and not-Ready
    // alerts start their wait.
    ns.api::<Deployment>()
        .create(&PostParams::default(), &plain_deployment("taken"))
        .await
        .unwrap();
    let refused = Foo::new(
        "refused",
        FooSpec {
            deployment_name: "taken".into(),
            replicas: Some(1),
        },
    );
    foos.create(&PostParams::default(), &refused).await.unwrap();
    eventually(
        "errors and a Foo not Ready alert",
        Duration::from_secs(60),
        || {
            let alerts = prometheus.alerts().unwrap_or_default();
            alerts.contains_key("SampleOperatorReconcileErrors")
                && alerts.contains_key("SampleOperatorObjectsNotReady")
        },
    )
    .await;

    // Every dashboard query answers; all but the few listed return series.
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(ROOT).join(DASHBOARD)).unwrap()).unwrap();
    let concrete = |expr: &str| {
        expr.replace("$job", JOB)
            .replace("$controller", ".*")
            .replace("$__rate_interval", "30s")
    };
    // A series born a moment ago (the refused Foo's error reason) needs two scrapes before a
    // rate over it has a value: ask again for a while before calling a query empty.
    let mut missing = Vec::new();
    for _ in 0..30 {
        missing.clear();
        for (name, expr) in dashboard_queries(&dashboard) {
            let result = prometheus
                .query(&concrete(&expr))
                .unwrap_or_else(|e| panic!("{name}: {expr} fails: {e}"));
            let may_be_empty = EMPTY_HERE.iter().any(|(family, _)| expr.contains(family));
            if result.is_empty() && !may_be_empty {
                missing.push(format!("{name}: {expr}"));
            }
        }
        if missing.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        missing.is_empty(),
        "queries without data:\n{}",
        missing.join("\n")
    );
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        let Some(query) = variable["query"]["query"].as_str() else {
            continue;
        };
        // label_values(<selector>, <label>): the values Grafana would offer.
        let inner = query
            .strip_prefix("label_values(")
            .and_then(|q| q.strip_suffix(')'))
            .unwrap();
        let (selector, label) = inner.rsplit_once(", ").unwrap();
        let values = prometheus
            .api(
                &format!("label/{label}/values"),
                &[("match[]", &concrete(selector))],
            )
            .unwrap();
        assert!(
            values.as_array().is_some_and(|v| !v.is_empty()),
            "{query}: {values}"
        );
    }

    // The operator gone: only the alert for that starts, not the one for a missing leader.
    drop(operator.take());
    eventually("the operator-down alert", Duration::from_secs(30), || {
        prometheus
            .alerts()
            .is_some_and(|a| a.contains_key("SampleOperatorDown"))
    })
    .await;
    let alerts = prometheus.alerts().expect("Prometheus answers");
    assert!(!alerts.contains_key("SampleOperatorNoLeader"), "{alerts:?}");

    drop(prometheus);
    unbind(&client, &ns.name).await;
}
