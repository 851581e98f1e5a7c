//! cargo-nextest, the runner of `cargo xtask test`: built from crates.io at a pinned version into
//! the tool cache (no prebuilt binary can be downloaded here), and its JUnit report read back for
//! the slowest tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use local_cluster::{paths, process};

/// The pinned release; `.config/nextest.toml` uses test priorities, which need 0.9.91 or newer.
pub const VERSION: &str = "0.9.151";

/// The cargo-nextest binary, built the first time (a few minutes; cargo shows its progress) and
/// then taken from `~/.cache/sample-operator/bin/cargo-nextest-<version>/`.
pub fn ensure() -> Result<PathBuf> {
    let root = paths::cache_dir()
        .join("bin")
        .join(format!("cargo-nextest-{VERSION}"));
    let binary = root.join("bin").join("cargo-nextest");
    if binary.is_file() {
        return Ok(binary);
    }
    println!("building cargo-nextest {VERSION} from crates.io (the first time only: a few minutes)");
    let started = Instant::now();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // A folder of its own for the build, so that a failed build leaves no half tool behind and
    // the workspace's target folder is not touched; the self-update feature is left out.
    let build = root.with_extension("build");
    let _ = std::fs::remove_dir_all(&build);
    process::run(
        Command::new(cargo)
            .args(["install", "--locked", "cargo-nextest", "--version", VERSION])
            .args(["--no-default-features", "--features", "default-no-update"])
            .arg("--root")
            .arg(&build)
            .arg("--target-dir")
            .arg(build.join("target"))
            .env_remove("CARGO_TARGET_DIR")
            // Built apart from this workspace: its RUSTFLAGS or profile are not cargo-nextest's.
            .env_remove("RUSTFLAGS"),
    )
    .context("building cargo-nextest")?;
    let _ = std::fs::remove_dir_all(build.join("target"));
    std::fs::rename(&build, &root)
        .with_context(|| format!("moving {} to {}", build.display(), root.display()))?;
    println!("cargo-nextest {VERSION} built in {:.0?}", started.elapsed());
    Ok(binary)
}

/// One test's time and outcome, as nextest's JUnit report gives them.
#[derive(Debug, PartialEq)]
pub struct Timed {
    pub name: String,
    pub time: Duration,
    pub failed: bool,
}

/// The tests of a nextest JUnit report (`<testcase name=".." classname=".." time="..">`), each
/// named `binary test`, slowest first.
pub fn slowest(junit: &Path) -> Result<Vec<Timed>> {
    let text = std::fs::read_to_string(junit).with_context(|| format!("reading {}", junit.display()))?;
    Ok(parse_junit(&text))
}

fn parse_junit(text: &str) -> Vec<Timed> {
    let mut tests: Vec<Timed> = text
        .split("<testcase ")
        .skip(1)
        .filter_map(|case| {
            // With the space before its first attribute, each is found as ` name="`.
            let tag = format!(" {}", &case[..case.find('>')?]);
            let attribute = |name: &str| {
                let key = format!(" {name}=\"");
                let value = &tag[tag.find(&key)? + key.len()..];
                Some(unescape(&value[..value.find('"')?]))
            };
            let seconds: f64 = attribute("time")?.parse().ok()?;
            // What the test case holds, up to the next one: a failure or an error element.
            let body = case.split("</testcase>").next().unwrap_or(case);
            Some(Timed {
                name: format!("{} {}", attribute("classname")?, attribute("name")?),
                time: Duration::from_secs_f64(seconds),
                failed: body.contains("<failure") || body.contains("<error"),
            })
        })
        .collect();
    tests.sort_by_key(|t| std::cmp::Reverse(t.time));
    tests
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_junit_report_gives_each_test_its_time_slowest_first() {
        let report = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="3" failures="0" errors="0" time="12.5">
    <testsuite name="sample-operator::integration" tests="2" disabled="0" errors="0" failures="0">
        <testcase name="neutron::a &amp; b" classname="sample-operator::integration" timestamp="2026-11-28T19:00:00Z" time="3.250">
        </testcase>
        <testcase name="foo::quick" classname="sample-operator::integration" timestamp="2026-11-28T19:00:00Z" time="0.500">
            <failure type="test failure with exit code 101">thread panicked</failure>
        </testcase>
    </testsuite>
    <testsuite name="xtask::demo" tests="1">
        <testcase name="the_demo_runs_every_scene" classname="xtask::demo" time="9.000">
            <system-out>a &lt;line&gt;</system-out>
        </testcase>
    </testsuite>
</testsuites>"#;
        let tests = parse_junit(report);
        let names: Vec<&str> = tests.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "xtask::demo the_demo_runs_every_scene",
                "sample-operator::integration neutron::a & b",
                "sample-operator::integration foo::quick",
            ]
        );
        assert_eq!(tests[1].time, Duration::from_millis(3250));
        let failed: Vec<bool> = tests.iter().map(|t| t.failed).collect();
        assert_eq!(failed, [false, false, true]);
    }
}
