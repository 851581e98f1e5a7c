//! bench/results.json (every run, as measured), and from it bench/RESULTS.md (medians, spreads
//! and ratios) and bench/converged.png.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use super::apiserver::{by_verb, is_write};
use super::chart;
use super::model::{
    Contender, Meta, OperatorBuild, Results, RunResult, RunSpec, Scenario, Spread, capitalised, mib,
};

/// Writes results.json with one run a line: compact, and still a readable diff between runs.
pub fn save(out: &Path, results: &Results) -> Result<()> {
    std::fs::create_dir_all(out)?;
    let runs: Vec<String> = results
        .runs
        .iter()
        .map(serde_json::to_string)
        .collect::<Result<_, _>>()?;
    let text = format!(
        "{{\n\"meta\": {},\n\"runs\": [\n{}\n]}}\n",
        serde_json::to_string_pretty(&results.meta)?,
        runs.join(",\n")
    );
    let path = out.join("results.json");
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

pub fn load(out: &Path) -> Result<Results> {
    let path = out.join("results.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut results: Results = serde_json::from_str(&text)?;
    // Runs from before the concurrency was recorded ran at the benchmark's `--concurrency`.
    for run in &mut results.runs {
        run.concurrency.get_or_insert(results.meta.concurrency);
    }
    Ok(results)
}

/// Writes RESULTS.md and converged.png.
/// `plan` is every run the benchmark's options ask for, to tell what is still missing.
pub fn write(out: &Path, results: &Results, plan: &[RunSpec]) -> Result<()> {
    // The sharded benchmark's section, from its own results file, stays the last.
    let sharded = super::sharded::section(out);
    let mut text = markdown(results, plan);
    if !sharded.is_empty() {
        text = super::sharded::with_section(&text, &sharded);
    }
    std::fs::write(out.join("RESULTS.md"), text)?;
    chart::draw(&out.join("converged.png"), &results.runs)
}

/// The successful runs of one contender in one scenario and size (and, for the ceiling, one
/// concurrency of its sweep).
struct Group<'a> {
    contender: Contender,
    n: usize,
    /// The ceiling's concurrency; `None` for the controllers.
    concurrency: Option<usize>,
    runs: Vec<&'a RunResult>,
}

/// A contender's name in the report, with the ceiling's concurrency (`None` for the controllers).
fn label(contender: Contender, concurrency: Option<usize>) -> String {
    match concurrency {
        Some(c) => format!("{}, {c} at once", contender.label()),
        None => contender.label().to_owned(),
    }
}

impl Group<'_> {
    fn label(&self) -> String {
        label(self.contender, self.concurrency)
    }

    fn spread(&self, value: impl Fn(&RunResult) -> f64) -> Option<Spread> {
        Spread::of(self.runs.iter().map(|r| value(r)))
    }

    fn seconds(&self) -> Option<Spread> {
        self.spread(|r| r.seconds.unwrap_or(0.0))
    }

    /// Restart: the apiserver's own lists of the same objects.
    fn list_seconds(&self) -> Option<Spread> {
        Spread::of(self.runs.iter().filter_map(|r| r.list_seconds))
    }

    fn cpu(&self) -> Option<Spread> {
        self.spread(|r| r.cpu_seconds)
    }

    fn writes(&self) -> Option<Spread> {
        self.spread(|r| {
            by_verb(&r.requests)
                .iter()
                .filter(|(v, _)| is_write(v))
                .map(|(_, n)| n)
                .sum::<u64>() as f64
        })
    }

    /// The etcd writes of the runs that counted them, as a cell: `—` where none did.
    fn etcd_writes(&self) -> String {
        let counted = self
            .runs
            .iter()
            .filter(|r| !r.etcd_writes.is_empty())
            .map(|r| r.etcd_writes.values().sum::<u64>() as f64);
        Spread::of(counted).map_or_else(|| "—".to_owned(), |s| s.show("", 0))
    }

    /// The Events about Foos the runs left, as a cell (with the median of those counted in
    /// summaries, where any were): `—` where none counted them.
    fn events(&self) -> String {
        let counted = self.runs.iter().filter_map(|r| r.events).map(|n| n as f64);
        let Some(events) = Spread::of(counted) else {
            return "—".to_owned();
        };
        let summarised = self
            .runs
            .iter()
            .filter(|r| r.events.is_some())
            .map(|r| r.events_summarised.unwrap_or(0) as f64);
        let mut notes = Vec::new();
        if let Some(s) = Spread::of(summarised).filter(|s| s.median > 0.0) {
            notes.push(format!("{} in summaries", s.show("", 0)));
        }
        let converging = self.runs.iter().filter_map(|r| r.events_while_converging);
        if let Some(s) = Spread::of(converging.map(|n| n as f64)) {
            notes.push(format!("{} while converging", s.show("", 0)));
        }
        match notes.is_empty() {
            true => events.show("", 0),
            false => format!("{} ({})", events.show("", 0), notes.join(", ")),
        }
    }

    /// How long after converging the last Event was written (`+2.0 s`; a negative time is an
    /// Event written before the last Foo converged), as a cell: `none` when no run wrote one.
    fn last_event(&self) -> String {
        match Spread::of(self.last_event_after_converging()) {
            Some(s) => format!("{}{}", if s.median >= 0.0 { "+" } else { "" }, s.show(" s", 1)),
            None if self.runs.iter().any(|r| r.events.is_some()) => "none".into(),
            None => "—".into(),
        }
    }

    /// Per run that wrote an Event, how long after converging the last one appeared.
    fn last_event_after_converging(&self) -> impl Iterator<Item = f64> + '_ {
        self.runs
            .iter()
            .filter_map(|r| Some(r.last_event_seconds? - r.seconds?))
    }

    /// Median etcd writes by operation and resource, as `create deployments 1000 · update foos 1000`.
    fn etcd_writes_by_resource(&self) -> String {
        self.median_requests(|r| r.etcd_writes.clone())
    }

    /// Median requests by verb, as `PATCH 1000 · POST 1000`.
    fn requests(&self) -> String {
        self.median_requests(|r| by_verb(&r.requests))
    }

    /// Median requests by verb and resource, as `PATCH foos/status 1000 · POST deployments 1000`.
    fn requests_by_resource(&self) -> String {
        self.median_requests(|r| r.requests.clone())
    }

    fn median_requests(&self, counts: impl Fn(&RunResult) -> BTreeMap<String, u64>) -> String {
        let per_run: Vec<BTreeMap<String, u64>> = self.runs.iter().map(|r| counts(r)).collect();
        let mut keys: Vec<&String> = per_run.iter().flat_map(|c| c.keys()).collect();
        keys.sort();
        keys.dedup();
        let shown: Vec<String> = keys
            .into_iter()
            .filter_map(|key| {
                let values = per_run.iter().map(|c| *c.get(key).unwrap_or(&0) as f64);
                // A median of 0.5 (one run of two) would show as 0.
                let median = Spread::of(values)?.median.round();
                (median > 0.0).then(|| format!("{key} {median:.0}"))
            })
            .collect();
        if shown.is_empty() {
            "none".into()
        } else {
            shown.join(" · ")
        }
    }
}

/// The groups of one scenario and planned size, in the contenders' usual order; the ceiling,
/// and a contender run at more than one concurrency (`--sweep`), has one for each.
fn groups(runs: &[RunResult], scenario: Scenario, planned_n: usize) -> Vec<Group<'_>> {
    let mut groups = Vec::new();
    for &contender in &Contender::ALL {
        let mine: Vec<&RunResult> = runs
            .iter()
            .filter(|r| {
                r.scenario == Some(scenario) && r.planned_n == planned_n && r.contender == Some(contender)
            })
            .collect();
        let Some(n) = mine.first().map(|r| r.n) else {
            continue;
        };
        let mut concurrencies: Vec<Option<usize>> = mine.iter().map(|r| r.concurrency).collect();
        concurrencies.sort_unstable();
        concurrencies.dedup();
        if contender != Contender::Ceiling && concurrencies.len() < 2 {
            concurrencies = vec![None];
        }
        for concurrency in concurrencies {
            groups.push(Group {
                contender,
                n,
                concurrency,
                runs: mine
                    .iter()
                    .copied()
                    .filter(|r| r.succeeded() && (concurrency.is_none() || r.concurrency == concurrency))
                    .collect(),
            });
        }
    }
    groups
}

/// The ceiling's fastest group (lowest median), which stands for the ceiling.
fn fastest_ceiling<'g, 'a>(groups: &'g [Group<'a>]) -> Option<&'g Group<'a>> {
    fastest(groups, Contender::Ceiling)
}

/// `contender`'s fastest group (lowest median), which stands for it where it was swept.
fn fastest<'g, 'a>(groups: &'g [Group<'a>], contender: Contender) -> Option<&'g Group<'a>> {
    groups
        .iter()
        .filter(|g| g.contender == contender)
        .filter_map(|g| Some((g, g.seconds()?.median)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(g, _)| g)
}

/// `value` of `group` over `value` of `reference`, per Foo when their N differ (a capped
/// contender), marked with †.
fn ratio<'a>(
    group: &Group<'a>,
    reference: Option<&Group<'a>>,
    value: impl Fn(&Group<'a>) -> Option<Spread>,
) -> String {
    let Some(reference) = reference else {
        return "–".into();
    };
    let (Some(mine), Some(theirs)) = (value(group), value(reference)) else {
        return "–".into();
    };
    if theirs.median == 0.0 {
        return "–".into();
    }
    if group.n == reference.n {
        format!("{:.2}", mine.median / theirs.median)
    } else {
        let per_foo = (mine.median / group.n as f64) / (theirs.median / reference.n as f64);
        format!("{per_foo:.2}†")
    }
}

/// `contender`'s group with runs: where it was swept, its fastest.
fn find(groups: &[Group<'_>], contender: Contender) -> Option<usize> {
    let fastest = fastest(groups, contender);
    groups.iter().position(|g| {
        g.contender == contender && !g.runs.is_empty() && fastest.is_none_or(|f| std::ptr::eq(f, g))
    })
}

/// A table row saying `group` has no result, followed by `empty` empty cells.
fn no_result_row(md: &mut String, group: &Group<'_>, empty: usize) {
    let cells = " |".repeat(empty);
    let _ = writeln!(md, "| {} | {} | no result |{cells}", group.label(), group.n);
}

/// The requests of each contender by resource, folded away under a table.
fn resource_details(md: &mut String, groups: &[Group<'_>]) {
    md.push_str(
        "<details><summary>Requests and etcd writes by resource</summary>\n\n| Contender | Requests | etcd writes |\n|---|---|---|\n",
    );
    for group in groups.iter().filter(|g| !g.runs.is_empty()) {
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            group.label(),
            group.requests_by_resource(),
            group.etcd_writes_by_resource()
        );
    }
    md.push_str("\n</details>\n\n");
}

/// The sizes that were run for a scenario, smallest first.
fn sizes(runs: &[RunResult], scenario: Scenario) -> Vec<usize> {
    let mut sizes: Vec<usize> = runs
        .iter()
        .filter(|r| r.scenario == Some(scenario))
        .map(|r| r.planned_n)
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

fn markdown(results: &Results, plan: &[RunSpec]) -> String {
    let runs = &results.runs;
    let mut md = String::from("# Benchmark: our Foo controller and its Go peers\n\n");
    md.push_str(
        "Generated by `cargo xtask bench` (issue 7); every run is in `results.json` beside this file, \
         and `cargo xtask bench --report-only` renders this page again from it. Medians of the runs, \
         with the smallest and largest value in brackets. Ratios in the tables compare medians: below 1 \
         means less than the reference; the aims compare runs of the same repeat.\n\n![Converged Foos over time](converged.png)\n\n",
    );
    for scenario in [Scenario::Backlog, Scenario::Burst] {
        for n in sizes(runs, scenario) {
            timed_table(&mut md, &groups(runs, scenario, n), scenario, n);
        }
    }
    for n in sizes(runs, Scenario::Steady) {
        steady_table(
            &mut md,
            &groups(runs, Scenario::Steady, n),
            n,
            results.meta.steady_window_seconds,
        );
    }
    for n in sizes(runs, Scenario::Memory) {
        memory_table(&mut md, &groups(runs, Scenario::Memory, n), n);
    }
    for n in sizes(runs, Scenario::Restart) {
        restart_table(&mut md, &groups(runs, Scenario::Restart, n), n);
    }
    targets(&mut md, runs);
    notes(&mut md, results, plan);
    md
}

fn timed_table(md: &mut String, groups: &[Group<'_>], scenario: Scenario, n: usize) {
    let what = match scenario {
        Scenario::Backlog => "The Foos exist before the controller starts; time from its start",
        _ => "The controller idles, then the Foos are created at once; time from the first create",
    };
    let _ = writeln!(
        md,
        "## {}, N = {n}\n\n{what} until every Foo has its Deployment and its status. Events: the \
         Events about Foos left in the apiserver (one per Foo synced, unless some were dropped; a \
         series counts once), with the outcomes ours counted in summaries of the namespace \
         (shown apart), and how many of ours' were written one by one before the last Foo \
         converged (read from its /metrics); Last Event: when the last of them first appeared, after the last \
         Foo converged (an update of one already there, such as a resync's repeat, is a later \
         sync, not a late Event).\n",
        capitalised(scenario)
    );
    md.push_str(
        "| Contender | Foos | Converged in | × ours | × ceiling | Events | Last Event | CPU | × ours | Peak RSS | × ours | etcd writes | Requests |\n",
    );
    md.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
    let ours = find(groups, Contender::Ours).map(|i| &groups[i]);
    let ceiling = fastest_ceiling(groups);
    let sweep_of =
        |contender| -> Vec<&Group<'_>> { groups.iter().filter(|g| g.contender == contender).collect() };
    // A swept contender's row is its fastest concurrency (the first, when none has a result).
    let row_of = |contender| fastest(groups, contender).or(sweep_of(contender).first().copied());
    let shown = groups
        .iter()
        .filter(|g| row_of(g.contender).is_some_and(|row| std::ptr::eq(row, *g)));
    for group in shown {
        let sweep = sweep_of(group.contender);
        let Some(seconds) = group.seconds() else {
            no_result_row(md, group, 10);
            continue;
        };
        let cpu = group.cpu().expect("runs");
        let peak = group.spread(|r| mib(r.peak_rss_bytes)).expect("runs");
        let label = match group.concurrency {
            Some(c) if sweep.len() > 1 => {
                format!("{}, fastest of its sweep: {c} at once", group.contender.label())
            }
            _ => group.label(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            label,
            group.n,
            seconds.show(" s", 1),
            ratio(group, ours, Group::seconds),
            ratio(group, ceiling, Group::seconds),
            group.events(),
            group.last_event(),
            cpu.show(" s", 2),
            ratio(group, ours, Group::cpu),
            peak.show(" MiB", 0),
            ratio(group, ours, |g| g.spread(|r| r.peak_rss_bytes as f64)),
            group.etcd_writes(),
            group.requests(),
        );
    }
    md.push('\n');
    faster_than_the_ceiling(md, groups, ceiling);
    for contender in Contender::ALL {
        sweep_details(md, &sweep_of(contender));
    }
    resource_details(md, groups);
}

/// A contender faster than the ceiling beyond both spreads (its slowest run faster than the
/// ceiling's fastest) means the ceiling is no bound: said under the table. A capped contender
/// is compared per Foo, as its ratios are.
fn faster_than_the_ceiling(md: &mut String, groups: &[Group<'_>], ceiling: Option<&Group<'_>>) {
    let Some((ceiling, bound)) = ceiling.and_then(|c| Some((c, c.seconds()?))) else {
        return;
    };
    for group in groups.iter().filter(|g| g.contender != Contender::Ceiling) {
        if let Some(seconds) = group.seconds()
            && seconds.max / (group.n as f64) < bound.min / (ceiling.n as f64)
        {
            let _ = writeln!(
                md,
                "**{} converged faster than the ceiling** ({} against {}): the ceiling is no bound \
                 here, and the ratios to it say nothing.\n",
                group.label(),
                seconds.show(" s", 1),
                bound.show(" s", 1)
            );
        }
    }
}

/// A swept contender (the ceiling, or any under `--sweep`) at each concurrency it ran at,
/// folded away under a table.
fn sweep_details(md: &mut String, sweep: &[&Group<'_>]) {
    let Some(first) = sweep.first().filter(|_| sweep.len() > 1) else {
        return;
    };
    let who = match first.contender {
        Contender::Ceiling => "The ceiling".to_owned(),
        other => other.label().to_owned(),
    };
    let _ = write!(
        md,
        "<details><summary>{who} at each concurrency</summary>\n\n| At once | Converged in | CPU |\n|--:|--:|--:|\n"
    );
    for group in sweep {
        let (seconds, cpu) = match (group.seconds(), group.cpu()) {
            (Some(seconds), Some(cpu)) => (seconds.show(" s", 1), cpu.show(" s", 2)),
            _ => ("no result".to_owned(), String::new()),
        };
        let _ = writeln!(
            md,
            "| {} | {seconds} | {cpu} |",
            group
                .concurrency
                .map_or_else(|| "–".to_owned(), |c| c.to_string())
        );
    }
    md.push_str("\n</details>\n\n");
}

fn steady_table(md: &mut String, groups: &[Group<'_>], n: usize, window: u64) {
    let _ = writeln!(
        md,
        "## Steady state, N = {n}\n\nRequests and CPU time in a {} window that begins once the controller has \
         converged and gone idle. A converged controller has nothing to write.\n",
        human_duration(window)
    );
    md.push_str(
        "| Contender | Foos | Writes | Writes/min | etcd writes | CPU | RSS | Requests |\n|---|--:|--:|--:|--:|--:|--:|---|\n",
    );
    for group in groups {
        let Some(writes) = group.writes() else {
            no_result_row(md, group, 5);
            continue;
        };
        let per_minute = writes.median / (window.max(1) as f64 / 60.0);
        let _ = writeln!(
            md,
            "| {} | {} | {} | {per_minute:.0} | {} | {} | {} | {} |",
            group.label(),
            group.n,
            writes.show("", 0),
            group.etcd_writes(),
            group.cpu().expect("runs").show(" s", 2),
            group.spread(|r| mib(r.rss_bytes)).expect("runs").show(" MiB", 0),
            group.requests(),
        );
    }
    md.push('\n');
    resource_details(md, groups);
}

fn memory_table(md: &mut String, groups: &[Group<'_>], n: usize) {
    let _ = writeln!(
        md,
        "## Memory, N = {n}\n\nThe controller converges {n} Foos (a backlog) and its memory is read once it is \
         idle, or two minutes after converging; CPU and requests are counted from its start. sample-controller \
         starts on Foos the ceiling converged instead, since its rate limit (about 5 Foos a second) would make \
         converging them take about {} minutes.\n",
        n.div_ceil(5 * 60)
    );
    md.push_str(
        "| Contender | Foos | RSS when idle | × ours | RSS per Foo | Peak RSS | × ours | CPU | Idle after | Requests |\n",
    );
    md.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
    let ours = find(groups, Contender::Ours).map(|i| &groups[i]);
    for group in groups {
        let Some(rss) = group.spread(|r| mib(r.rss_bytes)) else {
            no_result_row(md, group, 7);
            continue;
        };
        let per_foo = rss.median * 1024.0 / group.n.max(1) as f64;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {per_foo:.1} KiB | {} | {} | {} | {} | {} |",
            group.label(),
            group.n,
            rss.show(" MiB", 0),
            ratio(group, ours, |g| g.spread(|r| r.rss_bytes as f64)),
            group
                .spread(|r| mib(r.peak_rss_bytes))
                .expect("runs")
                .show(" MiB", 0),
            ratio(group, ours, |g| g.spread(|r| r.peak_rss_bytes as f64)),
            group.cpu().expect("runs").show(" s", 2),
            group.seconds().expect("runs").show(" s", 0),
            group.requests(),
        );
    }
    md.push('\n');
    resource_details(md, groups);
}

fn restart_table(md: &mut String, groups: &[Group<'_>], n: usize) {
    let _ = writeln!(
        md,
        "## Restart, N = {n}\n\nThe controller converges {n} Foos, is stopped, and is started again over them: \
         time from its start until it is ready (its caches synced: `/readyz` for ours, the log line that \
         follows `WaitForCacheSync` for the Go peers), against the time the apiserver takes to list the same \
         Foos and Deployments in pages of 500; its peak memory (the first lists) against its memory once \
         idle; and the requests it sends, of which none needs to be a write.\n"
    );
    md.push_str(
        "| Contender | Foos | Ready in | × the lists | Peak RSS | Idle RSS | Peak ÷ idle | Writes | Requests |\n",
    );
    md.push_str("|---|--:|--:|--:|--:|--:|--:|--:|---|\n");
    for group in groups {
        let Some(ready) = group.seconds() else {
            no_result_row(md, group, 6);
            continue;
        };
        let over_lists = group
            .list_seconds()
            .filter(|l| l.median > 0.0)
            .map_or("–".into(), |l| format!("{:.2}", ready.median / l.median));
        let peak = group.spread(|r| mib(r.peak_rss_bytes)).expect("runs");
        let idle = group.spread(|r| mib(r.rss_bytes)).expect("runs");
        let _ = writeln!(
            md,
            "| {} | {} | {} | {over_lists} | {} | {} | {:.2} | {} | {} |",
            group.label(),
            group.n,
            ready.show(" s", 2),
            peak.show(" MiB", 0),
            idle.show(" MiB", 0),
            peak.median / idle.median.max(1.0),
            group.writes().expect("runs").show("", 0),
            group.requests(),
        );
    }
    md.push('\n');
    resource_details(md, groups);
}

/// The issues' aims, checked against the medians (every Event written: against the fewest run).
fn targets(md: &mut String, runs: &[RunResult]) {
    md.push_str("## Against the aims (issues 7, 16 and 34)\n\n");
    let mut lines = Vec::new();
    for scenario in [Scenario::Backlog, Scenario::Burst] {
        for n in sizes(runs, scenario) {
            let groups = groups(runs, scenario, n);
            lines.extend(status_write_cost(&groups, scenario, n));
            let Some(ours) = find(&groups, Contender::Ours).map(|i| &groups[i]) else {
                continue;
            };
            // Runs are compared within their repeat: repeats may be taken hours or machines apart.
            let ceilings = groups.iter().filter(|g| g.contender == Contender::Ceiling);
            // At its best: the concurrency ours compares worst against.
            if let Some(r) = ceilings
                .filter_map(|c| same_repeat_ratio(ours, c))
                .max_by(f64::total_cmp)
            {
                lines.push(aim(
                    &format!("{scenario}, N = {n}: converges within 1.05× the ceiling at its best, of the same repeat (median)"),
                    &format!("{r:.2}"),
                    1.05,
                ));
            }
            // The same work on both sides, repeat by repeat: ours with Events off against the
            // two-write ceiling (at its best, and at ours' concurrency), ours against the ceiling
            // doing ours' three writes.
            let events_off = find(&groups, Contender::OursEventsOff).map(|i| &groups[i]);
            let equal = groups.iter().find(|g| {
                g.contender == Contender::Ceiling
                    && g.concurrency.is_some()
                    && g.concurrency == events_off.and_then(|o| o.runs.first()?.concurrency)
            });
            for (mine, theirs, what) in [
                (
                    events_off,
                    fastest_ceiling(&groups),
                    "Events off, within 1.05× the two-write ceiling",
                ),
                (
                    events_off,
                    equal,
                    "Events off, within 1.05× the two-write ceiling at equal concurrency",
                ),
                (
                    events_off,
                    find(&groups, Contender::CeilingOursStatus).map(|i| &groups[i]),
                    "Events off, within 1.05× the ceiling doing ours' writes without the Event",
                ),
                (
                    Some(ours),
                    find(&groups, Contender::CeilingOurs).map(|i| &groups[i]),
                    "within 1.05× the three-write ceiling",
                ),
            ] {
                if let (Some(mine), Some(theirs)) = (mine, theirs)
                    && let Some(r) = same_repeat_ratio(mine, theirs)
                {
                    lines.push(aim(
                        &format!("{scenario}, N = {n}: {what} of the same repeat (median)"),
                        &format!("{r:.2}"),
                        1.05,
                    ));
                }
            }
            if let Some(line) = ahead_of_every_tuned_peer(ours, &groups) {
                lines.push(format!("- {scenario}, N = {n}: {line}"));
            }
            if let Some(fewest) = ours.runs.iter().filter_map(|r| r.events).min() {
                let met = if fewest >= ours.n as u64 { "met" } else { "not met" };
                lines.push(format!(
                    "- {scenario}, N = {n}: every Event written or counted in a summary: **{met}** ({fewest} of {} in its \
                     fewest run)",
                    ours.n
                ));
            }
            if let Some(after) = Spread::of(ours.last_event_after_converging()) {
                lines.push(aim(
                    &format!("{scenario}, N = {n}: the last Event within 30 s of converging"),
                    &format!("{:.1} s", after.median),
                    30.0,
                ));
            }
            // Against the most frugal Go peer: the highest of ours' ratios to each (†: per Foo against
            // a capped run).
            let go_peers = Contender::ALL.into_iter().filter(|&c| c.is_go_peer());
            if let Some((r, mark)) = go_peers
                .filter_map(|c| find(&groups, c).map(|i| &groups[i]))
                .filter_map(|peer| {
                    let r = same_repeat_ratio_of(ours, peer, |r| Some(r.cpu_seconds))?;
                    Some((r, if peer.n == ours.n { "" } else { "†" }))
                })
                .max_by(|a, b| a.0.total_cmp(&b.0))
            {
                lines.push(aim(
                    &format!(
                        "{scenario}, N = {n}: CPU at most half the most frugal Go peer's, per Foo of the same repeat (median)"
                    ),
                    &format!("{r:.2}{mark}"),
                    0.5,
                ));
            }
        }
    }
    for n in sizes(runs, Scenario::Memory) {
        let groups = groups(runs, Scenario::Memory, n);
        let Some(ours) = find(&groups, Contender::Ours).map(|i| &groups[i]) else {
            continue;
        };
        let peak = |g: &Group| g.spread(|r| r.peak_rss_bytes as f64);
        if let Some(best) = best_peer(&groups, Contender::is_go_peer, peak) {
            let r = ratio(ours, Some(best), peak);
            lines.push(aim(
                &format!("memory, N = {n}: peak RSS at most half the best Go peer's"),
                &r,
                0.5,
            ));
        }
        if let Some(rss) = ours.spread(|r| r.rss_bytes as f64) {
            let per_foo = rss.median / 1024.0 / n.max(1) as f64;
            lines.push(aim(
                &format!("memory, N = {n}: at most 2.5 KiB resident per Foo"),
                &format!("{per_foo:.2}"),
                2.5,
            ));
        }
    }
    for n in sizes(runs, Scenario::Restart) {
        let groups = groups(runs, Scenario::Restart, n);
        for contender in [Contender::Ours, Contender::OursStreaming] {
            let Some(group) = find(&groups, contender).map(|i| &groups[i]) else {
                continue;
            };
            let label = contender.label();
            let ready = group.seconds().expect("runs").median;
            if let Some(lists) = group.list_seconds() {
                lines.push(aim(
                    &format!("restart, N = {n}, {label}: ready within 1.2× the apiserver's lists"),
                    &format!("{:.2}", ready / lists.median),
                    1.2,
                ));
            }
            let peak = group.spread(|r| r.peak_rss_bytes as f64).expect("runs").median;
            let idle = group.spread(|r| r.rss_bytes as f64).expect("runs").median;
            lines.push(aim(
                &format!("restart, N = {n}, {label}: peak memory at most 1.2× idle"),
                &format!("{:.2}", peak / idle.max(1.0)),
                1.2,
            ));
            if let Some(writes) = group.writes() {
                let met = if writes.max == 0.0 { "met" } else { "not met" };
                lines.push(format!(
                    "- restart, N = {n}, {label}: zero writes: **{met}** ({:.0} at most)",
                    writes.max
                ));
            }
        }
    }
    for n in sizes(runs, Scenario::Steady) {
        let groups = groups(runs, Scenario::Steady, n);
        if let Some(writes) = find(&groups, Contender::Ours).and_then(|i| groups[i].writes()) {
            let met = if writes.max == 0.0 { "met" } else { "not met" };
            lines.push(format!(
                "- steady state, N = {n}: zero writes: **{met}** ({:.0} at most)",
                writes.max
            ));
        }
    }
    if lines.is_empty() {
        md.push_str("Not measured: no run of our operator has a result.\n\n");
    } else {
        md.push_str(&(lines.join("\n") + "\n\n"));
    }
}

/// The median, over the repeats both ran, of `mine`'s time over `theirs'` in the same repeat:
/// repeats spread more than contenders differ within one, so only these pairs compare like
/// with like.
fn same_repeat_ratio(mine: &Group<'_>, theirs: &Group<'_>) -> Option<f64> {
    same_repeat_ratio_of(mine, theirs, |r| r.seconds)
}

/// [`same_repeat_ratio`] of any `value`.
fn same_repeat_ratio_of(
    mine: &Group<'_>,
    theirs: &Group<'_>,
    value: impl Fn(&RunResult) -> Option<f64>,
) -> Option<f64> {
    Spread::of(same_repeat_ratios(mine, theirs, value)).map(|s| s.median)
}

/// `mine`'s `value` over `theirs'` in each repeat both ran, per Foo when their N differ (a
/// capped contender).
fn same_repeat_ratios(
    mine: &Group<'_>,
    theirs: &Group<'_>,
    value: impl Fn(&RunResult) -> Option<f64>,
) -> Vec<f64> {
    mine.runs
        .iter()
        .filter_map(|m| {
            let t = theirs.runs.iter().find(|t| t.repeat == m.repeat)?;
            let (mv, tv) = (value(m)?, value(t)?);
            (tv > 0.0).then(|| (mv / m.n.max(1) as f64) / (tv / t.n.max(1) as f64))
        })
        .collect()
}

/// Not aims but their cause: what ours' status by server-side apply costs against the same
/// status (its condition included) by merge patch, and what that costs against the two-write
/// ceiling's plain status at equal concurrency, each of the same repeat (median).
fn status_write_cost(groups: &[Group<'_>], scenario: Scenario, n: usize) -> Vec<String> {
    let group = |c| find(groups, c).map(|i| &groups[i]);
    let Some(merged) = group(Contender::CeilingOursStatusMerge) else {
        return Vec::new();
    };
    let concurrency = merged.runs.first().and_then(|r| r.concurrency);
    let plain = groups.iter().find(|g| {
        g.contender == Contender::Ceiling
            && concurrency.is_some()
            && g.runs.first().and_then(|r| r.concurrency) == concurrency
    });
    let mut lines = Vec::new();
    let mut line = |mine, theirs, what: &str| {
        if let Some(r) = same_repeat_ratio(mine, theirs) {
            lines.push(format!(
                "- {scenario}, N = {n}: {what}, of the same repeat (median): {r:.2} (a cause, not an aim)"
            ));
        }
    };
    if let Some(applied) = group(Contender::CeilingOursStatus) {
        line(
            applied,
            merged,
            "ours' status by server-side apply over the same status by merge patch",
        );
    }
    if let Some(plain) = plain {
        line(
            merged,
            plain,
            "ours' status by merge patch over the two-write ceiling's plain status at equal concurrency",
        );
    }
    lines
}

/// Whether ours converged ahead of every tuned peer, each at its fastest: by the median of the
/// same repeat's ratios, and in at least two of every three repeats. `None` without a tuned peer.
fn ahead_of_every_tuned_peer(ours: &Group<'_>, groups: &[Group<'_>]) -> Option<String> {
    // Ahead, as shown: a ratio that rounds to 1.00 is a tie.
    let ahead = |r: f64| r < 0.995;
    let mut met = true;
    let mut each = Vec::new();
    for peer in Contender::ALL.into_iter().filter(|c| c.is_tuned_peer()) {
        let Some(theirs) = fastest(groups, peer) else {
            continue;
        };
        let ratios = same_repeat_ratios(ours, theirs, |r| r.seconds);
        let Some(median) = Spread::of(ratios.iter().copied()).map(|s| s.median) else {
            continue;
        };
        let won = ratios.iter().filter(|&&r| ahead(r)).count();
        met &= ahead(median) && won * 3 >= ratios.len() * 2;
        each.push(format!(
            "{median:.2} against {}, ahead in {won} of {}",
            peer.label(),
            ratios.len()
        ));
    }
    (!each.is_empty()).then(|| {
        format!(
            "converges ahead of every tuned peer, of the same repeat (median, and in two of three repeats): **{}** ({})",
            if met { "met" } else { "not met" },
            each.join("; ")
        )
    })
}

fn aim(what: &str, ratio: &str, limit: f64) -> String {
    match ratio.trim_end_matches('†').trim_end_matches(" s").parse::<f64>() {
        Ok(value) if value <= limit => format!("- {what}: **met** ({ratio})"),
        Ok(_) => format!("- {what}: **not met** ({ratio})"),
        Err(_) => format!("- {what}: not measured"),
    }
}

/// Of the contenders `which` picks, the one with the lowest median of `value` per Foo.
fn best_peer<'a, 'b>(
    groups: &'a [Group<'b>],
    which: impl Fn(Contender) -> bool,
    value: impl Fn(&Group<'b>) -> Option<Spread>,
) -> Option<&'a Group<'b>> {
    groups
        .iter()
        .filter(|g| which(g.contender))
        .filter_map(|g| value(g).map(|s| (g, s.median / g.n as f64)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(g, _)| g)
}

/// Which binaries of ours were measured, when the results recorded them.
fn builds_note(meta: &Meta) -> Option<String> {
    (!meta.operator_builds.is_empty()).then(|| {
        format!(
            "- Our operator's binary, by the start of its SHA-256: {}.",
            OperatorBuild::describe(&meta.operator_builds)
        )
    })
}

/// Which contenders ran at a concurrency of their own (`--concurrency-of`) instead of the one
/// the tuned peers' note gives; `None` when none did.
fn concurrency_of_note(meta: &Meta) -> Option<String> {
    if meta.concurrency_of.is_empty() {
        return None;
    }
    let each: Vec<String> = meta
        .concurrency_of
        .iter()
        .map(|(contender, n)| format!("{} at {n}", contender.label()))
        .collect();
    Some(format!(
        "- **Each at its own concurrency** (`--concurrency-of {}`), in every scenario, in place of {}: {}.",
        super::model::concurrency_of_text(&meta.concurrency_of),
        meta.concurrency,
        each.join(", ")
    ))
}

/// How the ceiling was run: at one concurrency, or swept with its fastest taken per row.
fn ceiling_note(meta: &Meta) -> String {
    match meta.ceiling_concurrencies.as_slice() {
        [] => format!("the ceiling writes {} Foos at a time", meta.concurrency),
        [one] => format!("the ceiling writes {one} Foos at a time"),
        several => {
            let list: Vec<String> = several.iter().map(usize::to_string).collect();
            format!(
                "the ceiling runs at each of {} Foos at a time, as often as the others, and each row \
                 takes its fastest concurrency (by median)",
                list.join(", ")
            )
        }
    }
}

fn notes(md: &mut String, results: &Results, plan: &[RunSpec]) {
    let meta = &results.meta;
    let _ = writeln!(
        md,
        "## How these numbers were taken\n\n\
         - {date}, on {machine}. Kubernetes {k8s} (etcd and kube-apiserver only: no controller-manager, \
         scheduler or kwok, so no Pods and `availableReplicas` stays 0), {go}. {repeats} run(s) per contender in \
         the backlog and burst at each size, alternating between contenders (one for the steady state, memory \
         and restart). Each run has a fresh namespace, deleted after it{fresh}.\n\
         - Our operator runs as `sample-operator run --kubeconfig PATH --controllers=foo --initial-list=list` (release \
         build; the peers run a Foo controller only, and list before they watch), with `--foo-resources={{}} \
         --foo-security-context={{}}` so that its Deployments have a bare container like the peers', every other \
         setting at its default; \"ours, streaming lists\" with `--initial-list=stream` instead; sample-controller as \
         `sample-controller -kubeconfig PATH` with its defaults, controller-runtime-foo with controller-runtime's \
         defaults (one reconcile at a time, no client-side rate limit). Tuned, as their users run them: \
         sample-controller with {conc} workers and no client-side rate limit (`-workers={conc} -qps=-1`, flags \
         patched into its main.go at build time), controller-runtime-foo with `MaxConcurrentReconciles` {conc}, \
         managedFields stripped from its cache and only its own Deployments cached (a label selector); \
         {ceiling}.\n\
         - **Cap:** sample-controller (untuned) keeps client-go's default client-side rate limit (5 requests/s, burst 10, \
         for each of its two clients), which holds it to about 5 Foos a second (one status update each), so its \
         timed runs use at most {cap} Foos. Ratios marked † compare per Foo (time or CPU divided by N) for that \
         reason.\n\
         - Converged: the Foo's status is written and its Deployment exists. CPU: user + system time of the \
         contender's process (`/proc/<pid>/stat`); peak RSS: `VmHWM` of `/proc/<pid>/status`. In the backlog and \
         burst, CPU and requests are read once the contender has gone quiet after converging (at most 20 s \
         later), so that they include trailing work such as events published in the background.\n\
         - Requests: deltas of the apiserver's `apiserver_request_total` on the resources a Foo controller uses \
         (foos, deployments, replicasets, pods, events; not leases, which the apiserver itself renews). The \
         benchmark watches rather than polls, so its own requests are not in them, and the burst's own Foo \
         creates are subtracted. A watch is counted when it ends, so the open watches of a running controller \
         are not in them either.",
        date = meta.date,
        machine = meta.machine,
        k8s = meta.kubernetes_version,
        go = meta.go_version,
        repeats = meta.repeats,
        fresh = match meta.fresh_cluster_from {
            0 => String::new(),
            n => format!(
                "; a run of {n} Foos or more starts on an etcd and kube-apiserver started for it instead"
            ),
        },
        conc = meta.concurrency,
        ceiling = ceiling_note(meta),
        cap = meta.rate_limited_cap,
    );
    if meta.other_cluster_running {
        md.push_str(
            "- The test cluster (`.cluster/`, with controller-manager, scheduler and kwok) was running beside \
             the benchmark's and shared the cores.\n",
        );
    }
    if let Some(note) = concurrency_of_note(meta) {
        let _ = writeln!(md, "{note}");
    }
    match meta.commits.as_slice() {
        [] => {}
        [one] => {
            let _ = writeln!(md, "- Our operator at commit `{one}`.");
        }
        several => {
            let list: Vec<String> = several.iter().map(|c| format!("`{c}`")).collect();
            let _ = writeln!(
                md,
                "- Taken in sittings (`--resume`), with the repository at these {} commits (our operator built \
                 from each): {}.",
                several.len(),
                list.join(", ")
            );
        }
    }
    if let Some(note) = builds_note(meta) {
        let _ = writeln!(md, "{note}");
    }
    if let Some(note) = machines_note(results) {
        let _ = writeln!(md, "{note}");
    }
    if let Some(missing) = missing_runs(results, plan) {
        md.push_str("\nNot all runs are in yet (`cargo xtask bench --resume` takes the rest):\n\n");
        md.push_str(&missing);
    }
    if let Some(remarks) = remarks(&results.runs, &results.meta) {
        md.push_str("\nRuns with a remark (runs without a result are left out of the tables):\n\n");
        md.push_str(&remarks);
    }
}

/// Which blocks each machine took, when a sitting resumed on another machine; `None` when all
/// ran on one.
fn machines_note(results: &Results) -> Option<String> {
    let mut taken: BTreeMap<&str, BTreeMap<(Scenario, usize), Vec<usize>>> = BTreeMap::new();
    for run in results.runs.iter().filter(|r| r.succeeded()) {
        let Some(block) = run.block() else { continue };
        let repeats = taken
            .entry(run.machine(&results.meta))
            .or_default()
            .entry((block.scenario, block.planned_n))
            .or_default();
        if !repeats.contains(&(block.repeat + 1)) {
            repeats.push(block.repeat + 1);
        }
    }
    if taken.len() < 2 {
        return None;
    }
    let each: Vec<String> = taken
        .iter()
        .map(|(machine, blocks)| {
            let rows: Vec<String> = blocks
                .iter()
                .map(|((scenario, n), repeats)| {
                    let repeats: Vec<String> = repeats.iter().map(usize::to_string).collect();
                    format!("{scenario} N = {n} (repeat {})", repeats.join(", "))
                })
                .collect();
            format!("  - {machine}: {}", rows.join(", "))
        })
        .collect();
    Some(format!(
        "- **Taken on {} machines** (a sitting resumed on another): every repeat of a scenario and size ran whole \
         on one, and the aims compare contenders within a repeat only; the tables' medians mix the machines.\n{}",
        taken.len(),
        each.join("\n")
    ))
}

/// For each planned scenario and size with runs still missing, how many each contender has.
fn missing_runs(results: &Results, plan: &[RunSpec]) -> Option<String> {
    let mut planned: BTreeMap<(Scenario, usize), BTreeMap<Contender, (usize, usize)>> = BTreeMap::new();
    for spec in plan {
        let done = results.runs.iter().any(|r| r.succeeded() && r.is_of(spec));
        let counts = planned
            .entry((spec.scenario, spec.planned_n))
            .or_default()
            .entry(spec.contender)
            .or_default();
        counts.0 += usize::from(done);
        counts.1 += 1;
    }
    let total = plan.len();
    let done: usize = planned.values().flat_map(|c| c.values()).map(|c| c.0).sum();
    let lines: Vec<String> = planned
        .into_iter()
        .filter(|(_, contenders)| contenders.values().any(|(done, of)| done < of))
        .map(|((scenario, n), contenders)| {
            let each: Vec<String> = contenders
                .iter()
                .map(|(contender, (done, of))| format!("{} {done} of {of}", contender.label()))
                .collect();
            format!("- {scenario}, N = {n}: {}\n", each.join(", "))
        })
        .collect();
    (!lines.is_empty()).then(|| format!("{done} of {total} planned runs so far.\n\n{}", lines.concat()))
}

/// A run whose machine reference took this much longer than the median one is remarked. The
/// median, not the fastest: within one quiet sitting the reference moves by about this much, so a
/// threshold above the fastest marks whole sittings rather than the runs on a slow machine.
const SLOW_MACHINE: f64 = 1.15;

/// The first line of each run's note, whether it began on a busy apiserver, and whether the
/// machine ran slow (against the usual of the machine that took it: a sitting may go on on
/// another), once for the repeats that share it.
fn remarks(runs: &[RunResult], meta: &Meta) -> Option<String> {
    let mut repeats: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let usual_on = |machine: &str| {
        Spread::of(
            runs.iter()
                .filter(|run| run.machine(meta) == machine)
                .filter_map(|run| run.machine_seconds),
        )
        .map(|s| s.median)
    };
    for run in runs {
        let usual = usual_on(run.machine(meta));
        let slow = run.machine_seconds.zip(usual).and_then(|(seconds, usual)| {
            (seconds > usual * SLOW_MACHINE).then(|| {
                format!(
                    "began with the machine {:.0}% slower than usual in these results (its \
                     reference workload took {seconds:.2} s, the median of the runs on its \
                     machine {usual:.2} s)",
                    (seconds / usual - 1.0) * 100.0
                )
            })
        });
        let busy = run.fresh_start.filter(|start| !start.quiet).map(|start| {
            format!(
                "began on a fresh kube-apiserver still busy after a {:.0} s wait ({:.0}% of a core)",
                start.waited_seconds,
                start.cpu_share * 100.0
            )
        });
        let note = run
            .note
            .as_ref()
            .map(|note| note.lines().next().unwrap_or_default().to_owned());
        // The runs of a swept contender at each concurrency are runs of their own.
        let who = run.contender.map_or_else(String::new, |contender| {
            let swept = contender == Contender::Ceiling
                || runs.iter().any(|other| {
                    other.contender == run.contender
                        && other.scenario == run.scenario
                        && other.concurrency != run.concurrency
                });
            label(contender, run.concurrency.filter(|_| swept))
        });
        for remark in [note, busy, slow].into_iter().flatten() {
            let what = format!(
                "{who} {}, N = {}: {remark}",
                run.scenario.map(|s| s.to_string()).unwrap_or_default(),
                run.planned_n,
            );
            repeats.entry(what).or_default().push(run.repeat + 1);
        }
    }
    let lines: Vec<String> = repeats
        .iter()
        .map(|(what, repeats)| {
            let repeats: Vec<String> = repeats.iter().map(usize::to_string).collect();
            format!("- {what} (repeat {})\n", repeats.join(", "))
        })
        .collect();
    (!lines.is_empty()).then(|| lines.concat())
}

fn human_duration(seconds: u64) -> String {
    if seconds.is_multiple_of(60) {
        format!("{}-minute", seconds / 60)
    } else {
        format!("{seconds}-second")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::model::FreshStart;
    use crate::bench::model::Meta;

    /// RESULTS.md of `runs` alone.
    fn report_of(runs: Vec<RunResult>) -> String {
        markdown(
            &Results {
                meta: Meta::default(),
                runs,
            },
            &[],
        )
    }

    fn run(contender: Contender, n: usize, seconds: f64, cpu: f64) -> RunResult {
        RunResult {
            scenario: Some(Scenario::Backlog),
            contender: Some(contender),
            planned_n: 1000,
            n,
            seconds: Some(seconds),
            cpu_seconds: cpu,
            peak_rss_bytes: 64 << 20,
            requests: BTreeMap::from([
                ("POST deployments".into(), n as u64),
                ("PATCH foos/status".into(), n as u64),
            ]),
            concurrency: Some(16),
            ..Default::default()
        }
    }

    /// A run of `contender` at 1,000 Foos in one repeat, at one concurrency.
    fn at_repeat(contender: Contender, repeat: usize, seconds: f64, concurrency: usize) -> RunResult {
        RunResult {
            repeat,
            concurrency: Some(concurrency),
            ..run(contender, 1000, seconds, 1.0)
        }
    }

    #[test]
    fn results_are_saved_one_run_a_line_and_load_again() {
        let dir = std::env::temp_dir().join(format!("bench-results-{}", std::process::id()));
        let results = Results {
            meta: Meta::default(),
            runs: vec![
                run(Contender::Ours, 10, 1.0, 0.1),
                run(Contender::Ceiling, 10, 0.5, 0.1),
            ],
        };
        save(&dir, &results).unwrap();
        let text = std::fs::read_to_string(dir.join("results.json")).unwrap();
        assert_eq!(text.lines().filter(|l| l.starts_with("{\"scenario\"")).count(), 2);
        let loaded = load(&dir).unwrap();
        assert_eq!(loaded.runs.len(), 2);
        assert_eq!(loaded.runs[1].seconds, Some(0.5));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn resuming_rewrites_a_recorded_sitting_byte_for_byte() {
        // `--resume` loads and saves results.json around every run; a float that does not survive
        // that (such as v4's 0.025999999999999978, one digit off when parsed inexactly) would be
        // rewritten each time.
        let sitting = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/sittings/2026-11-30-v4");
        let recorded = std::fs::read_to_string(sitting.join("results.json")).unwrap();
        let dir = std::env::temp_dir().join(format!("bench-resume-{}", std::process::id()));
        save(&dir, &load(&sitting).unwrap()).unwrap();
        let rewritten = std::fs::read_to_string(dir.join("results.json")).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        let differing = recorded.lines().zip(rewritten.lines()).find(|(a, b)| a != b);
        assert_eq!(differing, None, "a line of results.json changed on a rewrite");
        assert!(
            recorded == rewritten,
            "results.json lost or gained lines on a rewrite"
        );
    }

    #[test]
    fn a_remark_shared_by_repeats_is_listed_once() {
        let noted = |repeat| RunResult {
            repeat,
            note: Some("timed out with 5 of 10 converged\nmore".into()),
            ..run(Contender::Ours, 10, 1.0, 0.1)
        };
        let text = remarks(
            &[noted(0), noted(2), run(Contender::Ceiling, 10, 1.0, 0.1)],
            &Meta::default(),
        )
        .unwrap();
        assert_eq!(
            text,
            "- sample-operator (ours) backlog, N = 1000: timed out with 5 of 10 converged (repeat 1, 3)\n"
        );
    }

    #[test]
    fn a_run_that_began_on_a_busy_apiserver_is_remarked() {
        let started = |repeat, quiet| RunResult {
            repeat,
            fresh_start: Some(FreshStart {
                waited_seconds: 60.4,
                quiet,
                cpu_share: 0.171,
            }),
            ..run(Contender::Ours, 10, 1.0, 0.1)
        };
        let text = remarks(
            &[started(0, false), started(1, true), started(2, false)],
            &Meta::default(),
        )
        .unwrap();
        assert_eq!(
            text,
            "- sample-operator (ours) backlog, N = 1000: began on a fresh kube-apiserver still busy \
             after a 60 s wait (17% of a core) (repeat 1, 3)\n"
        );
        assert_eq!(remarks(&[started(1, true)], &Meta::default()), None);
    }

    #[test]
    fn a_run_on_a_slow_machine_is_remarked() {
        let timed = |repeat, seconds| RunResult {
            repeat,
            machine_seconds: Some(seconds),
            ..run(Contender::Ours, 10, 1.0, 0.1)
        };
        let text = remarks(&[timed(0, 0.5), timed(1, 0.57), timed(2, 0.8)], &Meta::default()).unwrap();
        assert_eq!(
            text,
            "- sample-operator (ours) backlog, N = 1000: began with the machine 40% slower than \
             usual in these results (its reference workload took 0.80 s, the median of the runs \
             on its machine 0.57 s) (repeat 3)\n"
        );
        // Slower than the fastest, but as usual: a sitting on a slower machine is not remarked.
        assert_eq!(
            remarks(&[timed(0, 0.5), timed(1, 0.6), timed(2, 0.6)], &Meta::default()),
            None
        );
        // The ceiling's concurrencies are told apart.
        let ceiling = |concurrency| RunResult {
            contender: Some(Contender::Ceiling),
            concurrency: Some(concurrency),
            ..timed(1, 0.8)
        };
        let text = remarks(
            &[timed(0, 0.5), timed(2, 0.5), ceiling(8), ceiling(16)],
            &Meta::default(),
        )
        .unwrap();
        assert!(
            text.contains("ceiling (plain client), 8 at once backlog"),
            "{text}"
        );
        assert!(
            text.contains("ceiling (plain client), 16 at once backlog"),
            "{text}"
        );
        // Runs from before the reference was timed are not compared.
        let untimed = run(Contender::Ours, 10, 1.0, 0.1);
        assert_eq!(remarks(&[timed(0, 0.5), untimed], &Meta::default()), None);
        // A sitting that went on on a slower machine: each run against its own machine's usual.
        let on = |machine: &str, run: RunResult| RunResult {
            machine: Some(machine.into()),
            ..run
        };
        let two = [
            on("A", timed(0, 0.5)),
            on("A", timed(1, 0.5)),
            on("A", timed(1, 0.5)),
            on("B", timed(2, 0.8)),
            on("B", timed(2, 0.8)),
            on("B", timed(2, 1.0)),
        ];
        let text = remarks(&two, &Meta::default()).unwrap();
        assert!(
            text.contains("took 1.00 s, the median of the runs on its machine 0.80 s"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1, "{text}");
    }

    #[test]
    fn runs_still_missing_are_listed() {
        let spec = |contender, repeat| RunSpec {
            scenario: Scenario::Backlog,
            contender,
            planned_n: 1000,
            n: 1000,
            repeat,
            concurrency: 16,
        };
        let plan = [
            spec(Contender::Ours, 0),
            spec(Contender::Ceiling, 0),
            spec(Contender::Ours, 1),
            spec(Contender::Ceiling, 1),
        ];
        let ran = |contender, repeat| RunResult {
            repeat,
            ..run(contender, 1000, 1.0, 0.1)
        };
        let failed = RunResult {
            seconds: None,
            ..ran(Contender::Ceiling, 1)
        };
        let results = Results {
            meta: Meta::default(),
            runs: vec![
                ran(Contender::Ours, 0),
                ran(Contender::Ours, 1),
                ran(Contender::Ceiling, 0),
                failed,
            ],
        };
        assert_eq!(
            missing_runs(&results, &plan).unwrap(),
            "3 of 4 planned runs so far.\n\n\
             - backlog, N = 1000: sample-operator (ours) 2 of 2, ceiling (plain client) 1 of 2\n"
        );
        let done = Results {
            runs: vec![ran(Contender::Ceiling, 1)],
            ..results
        };
        assert_eq!(missing_runs(&done, &plan[3..]), None);
    }

    #[test]
    fn ratios_compare_per_foo_when_a_contender_was_capped() {
        let runs = vec![
            run(Contender::Ours, 1000, 10.0, 4.0),
            run(Contender::Ceiling, 1000, 8.0, 2.0),
            run(Contender::SampleController, 300, 150.0, 3.0),
        ];
        let groups = groups(&runs, Scenario::Backlog, 1000);
        let ours = &groups[find(&groups, Contender::Ours).unwrap()];
        let ceiling = &groups[find(&groups, Contender::Ceiling).unwrap()];
        let sample = &groups[find(&groups, Contender::SampleController).unwrap()];
        assert_eq!(ratio(ours, Some(ceiling), Group::seconds), "1.25");
        // 150 s for 300 Foos is 0.5 s a Foo, against 0.01 s a Foo for ours.
        assert_eq!(ratio(sample, Some(ours), Group::seconds), "50.00†");
        assert_eq!(ours.requests(), "PATCH 1000 · POST 1000");
        // The CPU aim too: 4 s for 1000 Foos against 3 s for 300.
        let md = report_of(runs.clone());
        assert!(
            md.contains("CPU at most half the most frugal Go peer's, per Foo of the same repeat (median): **met** (0.40†)"),
            "{md}"
        );
    }

    #[test]
    fn a_capped_contender_is_flagged_only_when_faster_per_foo() {
        let capped = |seconds| RunResult {
            planned_n: 100_000,
            ..run(Contender::SampleController, 1000, seconds, 1.0)
        };
        let ceiling = RunResult {
            planned_n: 100_000,
            concurrency: Some(128),
            ..run(Contender::Ceiling, 100_000, 241.0, 1.0)
        };
        let flagged = |seconds| {
            let results = Results {
                meta: Meta::default(),
                runs: vec![capped(seconds), ceiling.clone()],
            };
            markdown(&results, &[]).contains("**sample-controller (Go) converged faster than the ceiling**")
        };
        assert!(
            !flagged(198.0),
            "1,000 Foos in 198 s is slower per Foo than 100,000 in 241 s"
        );
        assert!(flagged(2.0));
    }

    #[test]
    fn the_ceiling_row_is_its_fastest_concurrency_and_a_faster_contender_is_flagged() {
        let at = |concurrency, seconds| RunResult {
            concurrency: Some(concurrency),
            ..run(Contender::Ceiling, 1000, seconds, 1.0)
        };
        let results = Results {
            meta: Meta::default(),
            runs: vec![
                run(Contender::Ours, 1000, 10.0, 1.0),
                run(Contender::ControllerRuntimeTuned, 1000, 6.0, 1.0),
                at(16, 12.0),
                at(64, 8.0),
                at(128, 9.0),
            ],
        };
        let md = markdown(&results, &[]);
        assert!(
            md.contains(
                "| ceiling (plain client), fastest of its sweep: 64 at once | 1000 | 8.0 s | 0.80 | 1.00 |"
            ),
            "{md}"
        );
        assert!(
            !md.contains("| ceiling (plain client), fastest of its sweep: 16"),
            "{md}"
        );
        assert!(
            md.contains("| sample-operator (ours) | 1000 | 10.0 s | 1.00 | 1.25 |"),
            "{md}"
        );
        assert!(
            md.contains("| 16 | 12.0 s |") && md.contains("| 128 | 9.0 s |"),
            "{md}"
        );
        assert!(
            md.contains(
                "**controller-runtime tuned (Go) converged faster than the ceiling** (6.0 s against 8.0 s)"
            ),
            "{md}"
        );
        assert!(!md.contains("**sample-operator (ours) converged faster"), "{md}");
        assert!(
            md.contains("converges within 1.05× the ceiling at its best, of the same repeat (median): **not met** (1.25)"),
            "{md}"
        );
    }

    #[test]
    fn a_swept_contender_stands_at_its_fastest_concurrency() {
        let at = |contender, concurrency, seconds| RunResult {
            concurrency: Some(concurrency),
            ..run(contender, 1000, seconds, 1.0)
        };
        let md = report_of(vec![
            at(Contender::Ours, 16, 10.0),
            at(Contender::Ours, 64, 8.0),
            at(Contender::ControllerRuntimeTuned, 16, 9.0),
            at(Contender::ControllerRuntimeTuned, 64, 7.0),
            at(Contender::Ceiling, 16, 6.0),
        ]);
        for line in [
            "| sample-operator (ours), fastest of its sweep: 64 at once | 1000 | 8.0 s | 1.00 | 1.33 |",
            "| controller-runtime tuned (Go), fastest of its sweep: 64 at once | 1000 | 7.0 s | 0.88 |",
            "<details><summary>sample-operator (ours) at each concurrency</summary>",
            "| 16 | 10.0 s |",
            "- backlog, N = 1000: converges ahead of every tuned peer, of the same repeat (median, and in two of three \
             repeats): **not met** (1.14 against controller-runtime tuned (Go), ahead in 0 of 1)",
        ] {
            assert!(md.contains(line), "{line}\n{md}");
        }
        assert!(
            !md.contains("| sample-operator (ours), 16 at once | 1000 | 10.0 s"),
            "{md}"
        );
    }

    #[test]
    fn the_events_each_contender_left_and_its_last_one_are_shown() {
        let with_events = |contender, events, last: Option<f64>| RunResult {
            events: Some(events),
            last_event_seconds: last,
            ..run(contender, 1000, 10.0, 1.0)
        };
        let results = Results {
            meta: Meta::default(),
            runs: vec![
                with_events(Contender::Ours, 1000, Some(12.5)),
                RunResult {
                    events_summarised: Some(900),
                    events_while_converging: Some(40),
                    ..with_events(Contender::OursStreaming, 1000, Some(11.0))
                },
                with_events(Contender::SampleControllerTuned, 140, Some(9.0)),
                with_events(Contender::ControllerRuntimeTuned, 0, None),
                // From before Events were counted.
                run(Contender::Ceiling, 1000, 8.0, 1.0),
            ],
        };
        let md = markdown(&results, &[]);
        for row in [
            "| sample-operator (ours) | 1000 | 10.0 s | 1.00 | 1.25 | 1000 | +2.5 s |",
            "| 1000 (900 in summaries, 40 while converging) | +1.0 s |",
            "| sample-controller tuned (Go) | 1000 | 10.0 s | 1.00 | 1.25 | 140 | -1.0 s |",
            "| controller-runtime tuned (Go) | 1000 | 10.0 s | 1.00 | 1.25 | 0 | none |",
            "| ceiling (plain client), 16 at once | 1000 | 8.0 s | 0.80 | 1.00 | — | — |",
        ] {
            assert!(md.contains(row), "{row}\n{md}");
        }
    }

    #[test]
    fn the_report_checks_the_event_aims() {
        let ours = |repeat, events, last| RunResult {
            repeat,
            events: Some(events),
            last_event_seconds: Some(last),
            ..run(Contender::Ours, 1000, 10.0, 1.0)
        };
        let report = report_of;
        // Every Event in every run, the last 2.5, 40 and 10 s after converging: the median counts.
        let md = report(vec![
            ours(0, 1000, 12.5),
            ours(1, 1000, 50.0),
            ours(2, 1000, 20.0),
        ]);
        for line in [
            "- backlog, N = 1000: every Event written or counted in a summary: **met** (1000 of 1000 in its fewest run)",
            "- backlog, N = 1000: the last Event within 30 s of converging: **met** (10.0 s)",
        ] {
            assert!(md.contains(line), "{line}\n{md}");
        }
        // One Event missing in one run is a miss.
        let md = report(vec![ours(0, 1000, 12.5), ours(1, 999, 45.0), ours(2, 1000, 50.0)]);
        for line in [
            "- backlog, N = 1000: every Event written or counted in a summary: **not met** (999 of 1000 in its fewest run)",
            "- backlog, N = 1000: the last Event within 30 s of converging: **not met** (35.0 s)",
        ] {
            assert!(md.contains(line), "{line}\n{md}");
        }
    }

    #[test]
    fn the_same_work_is_compared_repeat_by_repeat() {
        let md = report_of(vec![
            // Repeat 1 is slow for everyone: only the ratios within a repeat count.
            at_repeat(Contender::OursEventsOff, 0, 10.0, 16),
            at_repeat(Contender::OursEventsOff, 1, 20.0, 16),
            at_repeat(Contender::Ceiling, 0, 10.0, 16),
            at_repeat(Contender::Ceiling, 1, 30.0, 16),
            at_repeat(Contender::Ceiling, 0, 9.0, 64),
            at_repeat(Contender::Ceiling, 1, 18.0, 64),
            at_repeat(Contender::Ours, 0, 12.0, 16),
            at_repeat(Contender::Ours, 1, 22.0, 16),
            at_repeat(Contender::CeilingOurs, 0, 11.0, 16),
            at_repeat(Contender::CeilingOurs, 1, 21.0, 16),
            at_repeat(Contender::CeilingOursStatus, 0, 10.0, 16),
            at_repeat(Contender::CeilingOursStatus, 1, 19.0, 16),
        ]);
        for line in [
            // 10/9 and 20/18.
            "- backlog, N = 1000: Events off, within 1.05× the two-write ceiling of the same repeat (median): **not met** (1.11)",
            // 10/10 and 20/30 (the medians' ratio, 15/20, would be 0.75).
            "- backlog, N = 1000: Events off, within 1.05× the two-write ceiling at equal concurrency of the same repeat (median): **met** (0.83)",
            // 10/10 and 20/19.
            "- backlog, N = 1000: Events off, within 1.05× the ceiling doing ours' writes without the Event of the same repeat (median): **met** (1.03)",
            // 12/11 and 22/21.
            "- backlog, N = 1000: within 1.05× the three-write ceiling of the same repeat (median): **not met** (1.07)",
        ] {
            assert!(md.contains(line), "{line}\n{md}");
        }
    }

    #[test]
    fn the_status_writes_cost_is_split_repeat_by_repeat() {
        let md = report_of(vec![
            at_repeat(Contender::Ceiling, 0, 10.0, 128),
            at_repeat(Contender::Ceiling, 1, 20.0, 128),
            at_repeat(Contender::Ceiling, 0, 8.0, 16),
            at_repeat(Contender::CeilingOursStatusMerge, 0, 11.0, 128),
            at_repeat(Contender::CeilingOursStatusMerge, 1, 24.0, 128),
            at_repeat(Contender::CeilingOursStatus, 0, 13.2, 128),
            at_repeat(Contender::CeilingOursStatus, 1, 24.0, 128),
        ]);
        for line in [
            // 13.2/11 and 24/24.
            "- backlog, N = 1000: ours' status by server-side apply over the same status by merge patch, of the same repeat (median): 1.10 (a cause, not an aim)",
            // 11/10 and 24/20, against the ceiling at 128, not at 16.
            "- backlog, N = 1000: ours' status by merge patch over the two-write ceiling's plain status at equal concurrency, of the same repeat (median): 1.15 (a cause, not an aim)",
        ] {
            assert!(md.contains(line), "{line}\n{md}");
        }
        // Without the merge patch's runs, neither line.
        let md = report_of(vec![
            at_repeat(Contender::Ceiling, 0, 10.0, 128),
            at_repeat(Contender::CeilingOursStatus, 0, 13.2, 128),
        ]);
        assert!(!md.contains("a cause, not an aim"), "{md}");
    }

    #[test]
    fn ahead_of_a_tuned_peer_means_the_median_and_two_of_three_repeats() {
        let at = |contender, repeat, seconds| RunResult {
            repeat,
            ..run(contender, 1000, seconds, 1.0)
        };
        let ahead = |ours: [f64; 4]| {
            let mut runs = Vec::new();
            for (repeat, seconds) in ours.into_iter().enumerate() {
                // The peer is slower every repeat but the last: only the ratios count.
                runs.push(at(Contender::Ours, repeat, seconds));
                runs.push(at(
                    Contender::SampleControllerTuned,
                    repeat,
                    10.0 * (repeat + 1) as f64,
                ));
            }
            report_of(runs)
        };
        // 0.9, 0.9, 0.93, 1.0: the median is ahead, and three of four repeats are.
        let md = ahead([9.0, 18.0, 28.0, 40.0]);
        assert!(
            md.contains("**met** (0.92 against sample-controller tuned (Go), ahead in 3 of 4)"),
            "{md}"
        );
        // 0.9, 0.9, 1.0, 1.0: ahead by the median, but in two of four repeats only.
        let md = ahead([9.0, 18.0, 30.0, 40.0]);
        assert!(
            md.contains("**not met** (0.95 against sample-controller tuned (Go), ahead in 2 of 4)"),
            "{md}"
        );
    }

    #[test]
    fn the_notes_say_which_machine_took_which_repeats() {
        let on = |machine: Option<&str>, repeat, n| RunResult {
            repeat,
            planned_n: n,
            machine: machine.map(str::to_owned),
            ..run(Contender::Ours, n, 1.0, 1.0)
        };
        let mut results = Results {
            meta: Meta {
                machine: "Intel".into(),
                ..Meta::default()
            },
            runs: vec![on(None, 0, 1000), on(Some("Intel"), 0, 10000)],
        };
        assert_eq!(machines_note(&results), None);
        results.runs.push(on(Some("AMD"), 1, 1000));
        results.runs.push(on(Some("AMD"), 2, 1000));
        assert_eq!(
            machines_note(&results).unwrap(),
            "- **Taken on 2 machines** (a sitting resumed on another): every repeat of a scenario and size ran whole \
             on one, and the aims compare contenders within a repeat only; the tables' medians mix the machines.\n  \
             - AMD: backlog N = 1000 (repeat 2, 3)\n  - Intel: backlog N = 1000 (repeat 1), backlog N = 10000 (repeat 1)"
        );
    }

    #[test]
    fn the_notes_say_how_the_ceiling_ran() {
        let swept = Meta {
            concurrency: 16,
            ceiling_concurrencies: vec![8, 16, 128],
            ..Default::default()
        };
        assert_eq!(
            ceiling_note(&swept),
            "the ceiling runs at each of 8, 16, 128 Foos at a time, as often as the others, and each row \
             takes its fastest concurrency (by median)"
        );
        // Results from before the sweep ran it at the tuned peers' concurrency.
        let single = Meta {
            concurrency: 16,
            ..Default::default()
        };
        assert_eq!(ceiling_note(&single), "the ceiling writes 16 Foos at a time");
    }

    #[test]
    fn the_notes_name_each_contender_run_at_a_concurrency_of_its_own() {
        let meta = Meta {
            concurrency: 16,
            concurrency_of: [(Contender::Ours, 128), (Contender::ControllerRuntimeTuned, 16)].into(),
            ..Default::default()
        };
        assert_eq!(
            concurrency_of_note(&meta).unwrap(),
            "- **Each at its own concurrency** (`--concurrency-of ours=128,controller-runtime-tuned=16`), in every \
             scenario, in place of 16: sample-operator (ours) at 128, controller-runtime tuned (Go) at 16."
        );
        assert_eq!(concurrency_of_note(&Meta::default()), None);
    }

    #[test]
    fn the_notes_name_each_binary_of_ours_measured() {
        assert_eq!(builds_note(&Meta::default()), None);
        let meta = Meta {
            operator_builds: vec![
                OperatorBuild {
                    sha256: "0123456789abcdef".into(),
                    source: "the image's build of e7ed945".into(),
                },
                OperatorBuild {
                    sha256: "fedcba9876543210".into(),
                    source: "given: /tmp/sample-operator".into(),
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            builds_note(&meta).unwrap(),
            "- Our operator's binary, by the start of its SHA-256: `0123456789abcdef` (the image's build of \
             e7ed945); `fedcba9876543210` (given: /tmp/sample-operator)."
        );
    }

    #[test]
    fn the_report_checks_the_aims_and_names_the_cap() {
        let results = Results {
            meta: Meta {
                rate_limited_cap: 300,
                ..Default::default()
            },
            runs: vec![
                run(Contender::Ours, 1000, 10.0, 1.0),
                run(Contender::Ceiling, 1000, 9.0, 1.0),
                run(Contender::ControllerRuntime, 1000, 20.0, 4.0),
                run(Contender::SampleControllerTuned, 1000, 10.0, 4.0),
            ],
        };
        let md = markdown(&results, &[]);
        assert!(md.contains("## Backlog, N = 1000"), "{md}");
        // A tie with the best tuned peer is not ahead of it.
        assert!(
            md.contains(
                "converges ahead of every tuned peer, of the same repeat (median, and in two of three repeats): \
                 **not met** (1.00 against sample-controller tuned (Go), ahead in 0 of 1)"
            ),
            "{md}"
        );
        assert!(
            md.contains("converges within 1.05× the ceiling at its best, of the same repeat (median): **not met** (1.11)"),
            "{md}"
        );
        assert!(
            md.contains("CPU at most half the most frugal Go peer's, per Foo of the same repeat (median): **met** (0.25)"),
            "{md}"
        );
        assert!(md.contains("at most 300 Foos"), "{md}");
    }
}
