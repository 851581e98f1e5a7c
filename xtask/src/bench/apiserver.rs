//! What the benchmark does to the apiserver itself: install the CRDs, create the Foos, count
//! requests from `/metrics`, and empty and delete a run's namespace.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use local_cluster::{LocalCluster, State, UpOptions, paths, process, toolchain};

use super::proc_stats;
use super::tracker::Tracker;
use serde_json::json;

/// A run's starting point on a cluster started for it: a fresh etcd and kube-apiserver (only
/// they, sized for the benchmark, with the other [`UpOptions`] as given: `ShardedListAndWatch`
/// unless `without_sharded_lists`), the CRDs, `n` Foos in `namespace` with a [`Tracker`]
/// following them, and the apiserver quiet again after their creates (or, started from
/// [`keep_foos`]' data in `etcd_data`, after its start).
pub struct Backlog {
    pub state: State,
    pub apiserver_pid: i32,
    pub client: Client,
    pub tracker: Tracker,
}

pub async fn backlog(
    cluster: &LocalCluster,
    namespace: &str,
    n: usize,
    options: UpOptions<'_>,
) -> Result<Backlog> {
    let kept = options.etcd_data;
    let state = cluster
        .up_with(UpOptions {
            apiserver_only: true,
            large: true,
            ..options
        })
        .await?;
    let kubectl = toolchain::ensure()?.kubectl;
    install_crds(&kubectl, &cluster.kubeconfig())?;
    let apiserver_pid = state
        .components
        .iter()
        .find(|c| c.name == "kube-apiserver")
        .context("no kube-apiserver in the benchmark cluster's record")?
        .pid;
    let client = cluster.client().await?;
    if kept.is_none() {
        create_namespace(&client, namespace).await?;
    }
    let tracker = Tracker::start(&client, namespace).await?;
    if kept.is_none() && n > 0 {
        println!("   creating {n} Foos");
        create_foos(&client, namespace, n).await?;
    }
    tracker.wait_foos(n).await?;
    // The creates' own load on the apiserver (or its start's) passes before the contender
    // starts.
    proc_stats::wait_quiet(
        apiserver_pid,
        Duration::from_secs(2),
        Duration::from_secs(2),
        Duration::from_secs(60),
    )
    .await?;
    Ok(Backlog {
        state,
        apiserver_pid,
        client,
        tracker,
    })
}

/// Creates `n` Foos in `namespace` on a fresh cluster and stops it, keeping its etcd data as
/// `to`, for [`backlog`] to start runs from: at 100,000 Foos the creates take 6 to 8 minutes on
/// the benchmark's machine (2026-11-30), and every run then starts from the same objects.
pub async fn keep_foos(cluster: &LocalCluster, namespace: &str, n: usize, to: &Path) -> Result<()> {
    let Backlog { tracker, .. } = backlog(cluster, namespace, n, UpOptions::default()).await?;
    drop(tracker);
    cluster
        .down_keeping_etcd(to)
        .with_context(|| format!("keeping the etcd data of {n} Foos"))
}

/// Foos created at once by the benchmark: enough to keep the apiserver busy, which is what
/// "as fast as the API server takes them" asks for.
const CREATE_CONCURRENCY: usize = 32;

pub fn foo_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "samplecontroller.k8s.io",
        "v1alpha1",
        "Foo",
    ))
}

pub fn foos(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &foo_resource())
}

/// Applies deploy/crds/crds.yaml (our CRDs, which every contender shares) with the kubectl
/// built here, and waits until they are Established.
pub fn install_crds(kubectl: &Path, kubeconfig: &Path) -> Result<()> {
    let crds = paths::repo_root().join("deploy/crds/crds.yaml");
    let crds = crds.display().to_string();
    for args in [
        vec!["apply", "--server-side", "--force-conflicts", "-f", &crds],
        vec![
            "wait",
            "--for=condition=Established",
            "-f",
            &crds,
            "--timeout=60s",
        ],
    ] {
        process::output(Command::new(kubectl).args(&args).env("KUBECONFIG", kubeconfig))?;
    }
    Ok(())
}

pub async fn create_namespace(client: &Client, name: &str) -> Result<()> {
    let namespace: Namespace = serde_json::from_value(json!({ "metadata": { "name": name } }))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// The name of the `index`th Foo; its Deployment has the same name, which lets the tracker match
/// the two without reading specs.
pub fn foo_name(index: usize) -> String {
    format!("foo-{index:05}")
}

/// Creates Foos `0..n` in `namespace`, [`CREATE_CONCURRENCY`] at a time, all with one replica.
pub async fn create_foos(client: &Client, namespace: &str, n: usize) -> Result<()> {
    let api = foos(client, namespace);
    futures::stream::iter(0..n)
        .map(|index| {
            let api = api.clone();
            async move {
                let name = foo_name(index);
                let foo = DynamicObject::new(&name, &foo_resource())
                    .data(json!({ "spec": { "deploymentName": name, "replicas": 1 } }));
                api.create(&PostParams::default(), &foo)
                    .await
                    .with_context(|| format!("creating Foo {name}"))
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .try_for_each(|_| async { Ok(()) })
        .await
}

/// How long the apiserver takes to list the Foos and the Deployments of `namespace`, both at
/// once and in pages of 500, as a Foo controller's first lists go: the floor of any restart.
/// The pages are read as text and only their continue token is parsed, so that the time is the
/// apiserver's and the transfer's, not this client's decoding.
pub async fn time_lists(client: &Client, namespace: &str) -> Result<Duration> {
    let start = Instant::now();
    let (a, b) = futures::join!(
        list_pages(
            client,
            format!("/apis/samplecontroller.k8s.io/v1alpha1/namespaces/{namespace}/foos")
        ),
        list_pages(
            client,
            format!("/apis/apps/v1/namespaces/{namespace}/deployments")
        )
    );
    a?;
    b?;
    Ok(start.elapsed())
}

/// Reads every page of the list at `path`; returns how many pages there were.
async fn list_pages(client: &Client, path: String) -> Result<usize> {
    #[derive(serde::Deserialize)]
    struct Page {
        metadata: PageMeta,
    }
    #[derive(serde::Deserialize)]
    struct PageMeta {
        #[serde(rename = "continue", default)]
        token: Option<String>,
    }
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut uri = format!("{path}?limit=500");
        if let Some(token) = &token {
            uri.push_str("&continue=");
            uri.push_str(token);
        }
        let request = http::Request::get(uri).body(Vec::new())?;
        let text = client.request_text(request).await?;
        pages += 1;
        let page: Page = serde_json::from_str(&text)?;
        match page.metadata.token {
            Some(next) if !next.is_empty() => token = Some(next),
            _ => return Ok(pages),
        }
    }
}

/// Deletes every object of `api`. A collection of 100,000 takes the apiserver longer than its
/// one-minute request timeout, which ends the request part of the way through: so it asks again
/// until none is left.
async fn delete_all<K>(api: &Api<K>, what: &str) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for attempt in 1..=20 {
        if let Err(e) = api
            .delete_collection(&DeleteParams::background(), &ListParams::default())
            .await
        {
            println!("   deleting {what} (attempt {attempt}): {e}; going on");
        }
        if api
            .list_metadata(&ListParams::default().limit(1))
            .await?
            .items
            .is_empty()
        {
            return Ok(());
        }
    }
    bail!("{what} are still there after 20 deletions of the collection")
}

/// Empties and deletes `namespace`, and waits until it is gone.
///
/// This cluster has no controller-manager, so no namespace controller deletes a namespace's
/// contents or removes its `kubernetes` finalizer, and no garbage collector follows owner
/// references. The benchmark does their work for the kinds a run creates (Foos, Deployments,
/// Events), then finalizes the namespace itself. A Foo finalizer left by a stopped contender is
/// removed, since nothing would ever remove it.
pub async fn delete_namespace(client: &Client, namespace: &str) -> Result<()> {
    let background = DeleteParams::background();
    let everything = ListParams::default();
    let foos = foos(client, namespace);
    delete_all(&foos, "Foos").await?;
    for foo in foos.list_metadata(&everything).await? {
        if !foo.finalizers().is_empty() {
            let patch = Patch::Merge(json!({ "metadata": { "finalizers": null } }));
            foos.patch(&foo.name_any(), &PatchParams::default(), &patch)
                .await?;
        }
    }
    delete_all(
        &Api::<Deployment>::namespaced(client.clone(), namespace),
        "Deployments",
    )
    .await?;
    delete_all(&Api::<Event>::namespaced(client.clone(), namespace), "Events").await?;

    let namespaces = Api::<Namespace>::all(client.clone());
    namespaces.delete(namespace, &background).await?;
    let finalized: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": namespace }, "spec": { "finalizers": [] } }))?;
    namespaces
        .replace_subresource("finalize", namespace, &PostParams::default(), &finalized)
        .await
        .with_context(|| format!("finalizing namespace {namespace}"))?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while namespaces.get_opt(namespace).await?.is_some() {
        if Instant::now() > deadline {
            bail!("namespace {namespace} is still there after two minutes");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// `apiserver_request_total`, summed over response codes (and scopes and versions), keyed by
/// verb and by `resource` or `resource/subresource`. Only the resources a Foo controller uses
/// are kept: the apiserver's own background requests would otherwise show up as writes in every
/// run. Leases are left out for that reason too (the apiserver renews its identity Lease every
/// 10 s, and the metric has no namespace or user to tell it apart); no contender runs leader
/// election by default.
///
/// Beside them, the writes the apiserver sent to etcd (`etcd_requests_total`, operations
/// create, update and delete), keyed by operation and resource: an update that changes nothing
/// is a request but no etcd write, and a status write is an update of its object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestCounts {
    pub requests: BTreeMap<(String, String), f64>,
    pub etcd_writes: BTreeMap<(String, String), f64>,
}

/// Resources a Foo controller reads or writes, as the metric names them.
const COUNTED_RESOURCES: &[&str] = &[
    "foos",
    "foos/status",
    "deployments",
    "deployments/status",
    "replicasets",
    "pods",
    "events",
];

/// The etcd operations that write.
const ETCD_WRITES: &[&str] = &["create", "update", "delete"];

impl RequestCounts {
    pub async fn scrape(client: &Client) -> Result<Self> {
        let request = http::Request::get("/metrics").body(Vec::new())?;
        let text = client
            .request_text(request)
            .await
            .context("reading the apiserver's /metrics")?;
        Ok(Self::parse(&text))
    }

    fn parse(text: &str) -> Self {
        let mut counts = Self::default();
        for line in text.lines() {
            let (map, key) = if let Some(rest) = line.strip_prefix("apiserver_request_total{") {
                let Some((labels, _)) = rest.rsplit_once("} ") else {
                    continue;
                };
                let label = |name: &str| label_value(labels, name).unwrap_or_default();
                let resource = match label("subresource") {
                    "" => label("resource").to_owned(),
                    sub => format!("{}/{sub}", label("resource")),
                };
                (&mut counts.requests, (label("verb").to_owned(), resource))
            } else if let Some(rest) = line.strip_prefix("etcd_requests_total{") {
                let Some((labels, _)) = rest.rsplit_once("} ") else {
                    continue;
                };
                let label = |name: &str| label_value(labels, name).unwrap_or_default();
                if !ETCD_WRITES.contains(&label("operation")) {
                    continue;
                }
                (
                    &mut counts.etcd_writes,
                    (label("operation").to_owned(), label("resource").to_owned()),
                )
            } else {
                continue;
            };
            if !COUNTED_RESOURCES.contains(&key.1.as_str()) {
                continue;
            }
            let value: f64 = line
                .rsplit_once("} ")
                .and_then(|(_, v)| v.trim().parse().ok())
                .unwrap_or(0.0);
            *map.entry(key).or_insert(0.0) += value;
        }
        counts
    }

    /// The requests made between `before` and `self`, keyed `VERB resource`, without zero
    /// entries.
    pub fn since(&self, before: &RequestCounts) -> BTreeMap<String, u64> {
        deltas(&self.requests, &before.requests)
    }

    /// The etcd writes between `before` and `self`, keyed `operation resource`.
    pub fn etcd_writes_since(&self, before: &RequestCounts) -> BTreeMap<String, u64> {
        deltas(&self.etcd_writes, &before.etcd_writes)
    }
}

fn deltas(
    after: &BTreeMap<(String, String), f64>,
    before: &BTreeMap<(String, String), f64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|((verb, resource), after)| {
            let earlier = before
                .get(&(verb.clone(), resource.clone()))
                .copied()
                .unwrap_or(0.0);
            (
                format!("{verb} {resource}"),
                (after - earlier).round().max(0.0) as u64,
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The value of `name="..."` in a Prometheus label set (the values here hold no quotes).
fn label_value<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        let (key, value) = pair.split_once('=')?;
        (key == name).then(|| value.trim_matches('"'))
    })
}

/// Requests by verb only, from `verb resource` keys.
pub fn by_verb(requests: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut verbs = BTreeMap::new();
    for (key, n) in requests {
        let verb = key.split_whitespace().next().unwrap_or(key).to_owned();
        *verbs.entry(verb).or_insert(0) += n;
    }
    verbs
}

/// Whether a verb changes state.
pub fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "POST" | "PUT" | "PATCH" | "DELETE" | "DELETECOLLECTION" | "APPLY"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="POST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="samplecontroller.k8s.io",resource="foos",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 5
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="flowcontrol.apiserver.k8s.io",resource="flowschemas",scope="resource",subresource="",verb="PUT",version="v1"} 9
# HELP etcd_requests_total [ALPHA] Etcd request counts for each operation and object type.
etcd_requests_total{group="apps",operation="create",resource="deployments"} 7
etcd_requests_total{group="apps",operation="get",resource="deployments"} 30
etcd_requests_total{group="samplecontroller.k8s.io",operation="update",resource="foos"} 4
etcd_requests_total{group="coordination.k8s.io",operation="update",resource="leases"} 12
"#;

    #[test]
    fn counts_are_summed_over_codes_and_kept_for_controller_resources_only() {
        let counts = RequestCounts::parse(METRICS);
        assert_eq!(counts.requests.len(), 2);
        assert_eq!(counts.requests[&("POST".into(), "deployments".into())], 8.0);
        assert_eq!(counts.requests[&("PATCH".into(), "foos/status".into())], 5.0);
    }

    #[test]
    fn etcd_writes_are_kept_by_operation_for_controller_resources_only() {
        let counts = RequestCounts::parse(METRICS);
        assert_eq!(
            counts.etcd_writes,
            BTreeMap::from([
                (("create".into(), "deployments".into()), 7.0),
                (("update".into(), "foos".into()), 4.0),
            ])
        );
        let mut after = counts.clone();
        *after
            .etcd_writes
            .get_mut(&("update".into(), "foos".into()))
            .unwrap() += 2.0;
        assert_eq!(
            after.etcd_writes_since(&counts),
            BTreeMap::from([("update foos".to_string(), 2)])
        );
    }

    #[test]
    fn deltas_drop_unchanged_entries_and_group_by_verb() {
        let before = RequestCounts::parse(METRICS);
        let mut after = before.clone();
        *after
            .requests
            .get_mut(&("POST".into(), "deployments".into()))
            .unwrap() += 3.0;
        let delta = after.since(&before);
        assert_eq!(delta, BTreeMap::from([("POST deployments".to_string(), 3)]));
        assert_eq!(by_verb(&delta), BTreeMap::from([("POST".to_string(), 3)]));
        assert!(is_write("PATCH") && !is_write("WATCH"));
    }
}
