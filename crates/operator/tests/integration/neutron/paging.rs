//! More Networks than neutron-server's pages hold, counted in its own access log.

use super::*;

/// More Networks than two of neutron-server's pages hold (it answers at most
/// [`PAGE_LIMIT`](local_cluster::openstack::PAGE_LIMIT) items a list): they converge with the
/// writes each needs, a resync pages through all of them with lists only, a restart over them
/// writes nothing, and each goes with one delete. Counted in neutron-server's own access log.
/// 120 Networks (three pages) by default, 1,000 with `cargo xtask test --scale`.
#[tokio::test]
async fn networks_beyond_a_page_converge_resync_by_listing_and_restart_without_writes() {
    let n: usize = testing::sized(120, 1000);
    // Pages of one listing of the cluster's n networks (or subnets): a full last page is
    // followed by an empty one.
    let pages = n / PAGE_LIMIT + 1;
    // Long enough for a listing of all their pages, short enough for the waits below.
    let resync = Duration::from_secs(testing::sized(10, 20));
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-paged").await;
    for i in 0..n {
        let (hi, lo) = (i / 256, i % 256);
        api.create(
            &PostParams::default(),
            &network(
                &format!("n{i}"),
                &format!("10.{}.{lo}.0/24", 100 + hi),
                &format!("10.{}.{lo}.1", 100 + hi),
            ),
        )
        .await
        .unwrap();
    }
    let mut log = AccessLog::from_now(&bed, &ns.name);
    let started = Instant::now();
    let neutron = NeutronConfig {
        resync,
        ..settings(source(bed.clouds_yaml(), CLOUD), &ns.name)
    };
    let operator = NeutronOperator::start_with(&ns.name, neutron.clone()).await;
    while_progressing(&format!("{n} Networks synced"), || async {
        let networks = api.list(&Default::default()).await.unwrap().items;
        let (synced, rest): (Vec<_>, Vec<_>) = networks
            .into_iter()
            .partition(|n| current_reason(n) == Some(("True".into(), "Synced".into())));
        Progress {
            done: synced.len(),
            total: n,
            rest: reasons(&rest),
        }
    })
    .await;
    let converged = started.elapsed();
    let sent = log.take();
    let count = |method: &str, prefix: &str| {
        sent.iter()
            .filter(|r| r.method == method && r.target.starts_with(prefix) && !r.target.contains("/tags/"))
            .count()
    };
    let tag_puts = sent
        .iter()
        .filter(|r| r.method == "PUT" && r.target.contains("/tags/"))
        .count();
    let (lists, report, per_network) =
        sent.iter()
            .filter(|r| r.method == "GET")
            .fold((0, 0, 0), |(l, rep, p), r| match r.kind(&ns.name) {
                Kind::Listing => (l + 1, rep, p),
                Kind::Report => (l, rep + 1, p),
                Kind::PerNetwork => (l, rep, p + 1),
            });
    eprintln!(
        "neutron: {n} Networks converged in {converged:.1?}: {} requests in neutron-server's log, {} writes, {lists} listing pages, {report} for other cluster ids, {per_network} GETs of one Network",
        sent.len(),
        sent.iter().filter(|r| r.method != "GET").count(),
    );
    // Every request succeeded, but where a page of a listing outlasted the token: the session
    // is renewed before a listing only while the token outlives twice the last listing, and
    // on a loaded neutron-server one listing can take three times the one before (seen at the
    // full size, 1,000 Networks: 55 s after 19 s). The refused listing is sent again on a new
    // session, so it costs a 401 and loses nothing.
    let failed: Vec<_> = sent.iter().filter(|r| r.status >= 300).collect();
    assert!(
        failed
            .iter()
            .all(|r| r.status == 401 && r.kind(&ns.name) == Kind::Listing),
        "every request succeeded or was a listing's page that outlasted its token: {failed:?}"
    );
    // The writes a Network needs, and no more: Neutron takes no tags in a create, so each
    // object is created, then tagged twice.
    assert_eq!(count("POST", "/v2.0/networks"), n);
    assert_eq!(count("POST", "/v2.0/subnets"), n);
    assert_eq!(tag_puts, 4 * n);
    assert_eq!(
        sent.iter().filter(|r| r.method != "GET").count(),
        6 * n,
        "nothing else is written"
    );
    // Before a create, one look by name; nothing after it, since a Network that wants what it
    // synced asks nothing until the next listing. A few more only where an attempt failed.
    assert!(
        per_network <= n + n / 10,
        "{per_network} GETs of one Network for {n} creates"
    );
    let listed = admin
        .list_networks(&[model::cluster_tag(&ns.name)], None)
        .await
        .unwrap();
    assert_eq!(listed.len(), n, "the SDK follows every page");

    // A steady resync over them: one paged list per kind, and no write.
    // On a loaded machine the reconciles after the last status writes may still be asking:
    // first a resync interval with nothing but listings.
    let quiet = Instant::now();
    loop {
        tokio::time::sleep(resync + Duration::from_secs(1)).await;
        let window = log.take();
        if window
            .iter()
            .all(|r| r.method == "GET" && r.kind(&ns.name) != Kind::PerNetwork)
        {
            break;
        }
        assert!(
            quiet.elapsed() < Duration::from_secs(300),
            "no quiet resync: {window:?}"
        );
    }
    tokio::time::sleep(resync * 2).await;
    let window = log.take();
    let listing_pages = window
        .iter()
        .filter(|r| r.kind(&ns.name) == Kind::Listing)
        .count();
    eprintln!(
        "neutron: {:?} of steady resyncs over {n} Networks sent {} requests ({listing_pages} listing pages)",
        resync * 2,
        window.len()
    );
    assert!(
        window.iter().all(|r| r.method == "GET"),
        "a steady resync writes nothing"
    );
    assert!(
        window.iter().all(|r| r.kind(&ns.name) != Kind::PerNetwork),
        "no Network asks on its own: {window:?}"
    );
    assert!(
        (2 * pages..=3 * 2 * pages).contains(&listing_pages),
        "{listing_pages} pages: one to three resyncs of two paged lists of {pages} pages each"
    );

    // Restarted: every Network is reconciled again, and nothing is written.
    operator.stop().await;
    let restarted = Instant::now();
    let operator = NeutronOperator::start_with(&ns.name, neutron).await;
    while_progressing("the restarted operator reconciled every Network", || async {
        let metrics = operator.telemetry.metrics.render();
        let reconciles = |labels: &[(&str, &str)]| {
            metric_sum(&metrics, "controller_runtime_reconcile_total", labels) as usize
        };
        let errors = reconciles(&[("result", "error")]);
        Progress {
            done: reconciles(&[("controller", "network")]).saturating_sub(errors),
            total: n,
            rest: format!("{errors} reconciles ended in an error"),
        }
    })
    .await;
    let reconciled = restarted.elapsed();
    let window = log.take();
    eprintln!(
        "neutron: the restart over {n} Networks reconciled them in {reconciled:.1?} with {} requests to neutron-server",
        window.len()
    );
    assert!(
        window.iter().all(|r| r.method == "GET"),
        "a restart over converged Networks writes nothing"
    );
    assert!(
        window
            .iter()
            .filter(|r| r.kind(&ns.name) == Kind::PerNetwork)
            .count()
            <= n / 10,
        "the restart reconciles from the listing, not Network by Network"
    );
    let deleting = Instant::now();
    let cluster_id = ns.name.clone();
    // Reconciles of the Networks while they go: a Network's delete may be reconciled more than
    // once (a resync comes due, or its finalizer's removal is refused), each time reading what
    // is left of it; the reads are bounded by those reconciles, not by one machine's timing.
    let telemetry = operator.telemetry.clone();
    let reconciles = || {
        let metrics = telemetry.metrics.render();
        metric_sum(
            &metrics,
            "controller_runtime_reconcile_total",
            &[("controller", "network")],
        ) as usize
    };
    let reconciled_before = reconciles();
    finish(&api, operator, ns).await;
    let removals = reconciles() - reconciled_before;
    let window = log.take();
    let deletes = window.iter().filter(|r| r.method == "DELETE").count();
    let per_network = window
        .iter()
        .filter(|r| r.method == "GET" && r.kind(&cluster_id) == Kind::PerNetwork)
        .count();
    eprintln!(
        "neutron: {n} Networks deleted in {:.1?} by {removals} reconciles: {deletes} deletes, {per_network} GETs of one Network",
        deleting.elapsed()
    );
    // Each goes with one delete (its subnet with it) after at most three reads: by its marker,
    // by its tags, and the subnets on its network; a reconcile that repeats the delete reads
    // again and finds the network gone.
    assert!(
        window.iter().all(|r| r.method == "GET" || r.method == "DELETE"),
        "deleting writes nothing else"
    );
    let deleted = |r: &&Logged| r.method == "DELETE" && r.target.starts_with("/v2.0/networks/");
    assert_eq!(
        window.iter().filter(deleted).filter(|r| r.status == 204).count(),
        n,
        "each network deleted once"
    );
    assert!(
        !window
            .iter()
            .any(|r| r.method == "DELETE" && r.target.starts_with("/v2.0/subnets/")),
        "no subnet deleted on its own"
    );
    assert!(removals >= n, "{removals} reconciles removed {n} Networks");
    assert!(
        deletes <= removals,
        "{deletes} deletes in {removals} reconciles of {n} Networks going"
    );
    assert!(
        per_network <= 3 * removals,
        "{per_network} GETs of one Network in {removals} reconciles of {n} Networks going"
    );
}

/// neutron-server's own access log (gunicorn's), read for the requests of one operator: those
/// whose `User-Agent` names its cluster.
struct AccessLog {
    path: PathBuf,
    agent: String,
    from: u64,
}

/// One request of the access log.
#[derive(Debug)]
struct Logged {
    method: String,
    target: String,
    status: u16,
}

/// What a GET of the operator's is for.
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    /// A page of the resync's listing of the cluster's networks or subnets.
    Listing,
    /// A page of the project's networks, read for other cluster ids.
    Report,
    /// About one Network.
    PerNetwork,
}

impl Logged {
    fn kind(&self, cluster_id: &str) -> Kind {
        let cluster = format!("tags=sample-operator.cluster%3D{cluster_id}");
        let (path, query) = self.target.split_once('?').unwrap_or((&self.target, ""));
        let of_one = query.contains("sample-operator.network")
            || query.contains("name=")
            || query.contains("network_id=");
        if matches!(path, "/v2.0/networks" | "/v2.0/subnets") && query.contains(&cluster) && !of_one {
            Kind::Listing
        } else if path == "/v2.0/networks"
            && !query.contains("tags=")
            && !of_one
            && !query.contains("description=")
        {
            Kind::Report
        } else {
            Kind::PerNetwork
        }
    }
}

impl AccessLog {
    /// The operator of `cluster_id`'s requests from now on.
    fn from_now(bed: &local_cluster::openstack::OpenStack, cluster_id: &str) -> Self {
        let path = bed.logs_dir().join("neutron-server.log");
        let from = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        Self {
            path,
            agent: format!("cluster/{cluster_id}\""),
            from,
        }
    }

    /// The requests logged since the last take.
    fn take(&mut self) -> Vec<Logged> {
        use std::io::{Read, Seek};
        let mut file = std::fs::File::open(&self.path).unwrap();
        file.seek(std::io::SeekFrom::Start(self.from)).unwrap();
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        // A line still being written waits for the next take.
        let complete = text.rfind('\n').map_or(0, |end| end + 1);
        self.from += complete as u64;
        text[..complete]
            .lines()
            .filter(|line| line.ends_with(&self.agent))
            .filter_map(|line| {
                // host - - [time] "METHOD target HTTP/1.1" status size "referer" "agent"
                let mut quoted = line.split('"');
                let request = quoted.nth(1)?;
                let status = quoted.next()?.split_whitespace().next()?.parse().ok()?;
                let mut request = request.split_whitespace();
                Some(Logged {
                    method: request.next()?.to_owned(),
                    target: request.next()?.to_owned(),
                    status,
                })
            })
            .collect()
    }
}
