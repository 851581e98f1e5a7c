//! Where the time of `cargo xtask test` went: each phase, the tests by suite, and the slowest
//! tests, printed at its end whether it passed or not.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::nextest::{self, Timed};

#[derive(Default)]
pub struct Phases {
    done: Vec<(String, Duration, bool)>,
}

impl Phases {
    /// Runs `phase`, recording how long it took and whether it failed.
    pub fn time<T, E>(&mut self, name: &str, phase: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
        let started = Instant::now();
        let result = phase();
        self.done
            .push((name.to_owned(), started.elapsed(), result.is_ok()));
        result
    }

    /// The phases, then the tests of `junit` (nextest's report, when the run got that far) by
    /// suite and the ten slowest.
    pub fn print(&self, junit: &Path) {
        println!("== where the time went");
        let total: Duration = self.done.iter().map(|(_, took, _)| *took).sum();
        for (name, took, ok) in &self.done {
            let failed = if *ok { "" } else { "  (failed)" };
            println!("  {:<40} {:>8}{failed}", name, seconds(*took));
        }
        println!("  {:<40} {:>8}", "all of the above", seconds(total));
        let Ok(tests) = nextest::slowest(junit) else {
            return;
        };
        // A report left by an earlier run is not this run's.
        let fresh = std::fs::metadata(junit)
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().unwrap_or_default() < total + Duration::from_secs(60));
        if tests.is_empty() || !fresh {
            return;
        }
        println!("  tests by suite (time in tests, added up; they run several at once):");
        for (suite, (count, took)) in by_suite(&tests) {
            println!("    {suite:<38} {:>8}  {count} tests", seconds(took));
        }
        println!("  the ten slowest tests:");
        for test in tests.iter().take(10) {
            println!("    {:>8}  {}", seconds(test.time), test.name);
        }
        // The run's count in one plain line, last, whatever ran before it.
        let failed = tests.iter().filter(|t| t.failed).count();
        println!("tests: {} passed, {failed} failed", tests.len() - failed);
    }
}

/// The tests added up by suite: the binary, and for the integration tests their module.
fn by_suite(tests: &[Timed]) -> BTreeMap<String, (usize, Duration)> {
    let mut suites = BTreeMap::<String, (usize, Duration)>::new();
    for test in tests {
        let (binary, name) = test.name.split_once(' ').unwrap_or((&test.name, ""));
        let suite = match name.split_once("::") {
            Some((module, _)) if binary.ends_with("::integration") => format!("{binary} {module}"),
            _ => binary.to_owned(),
        };
        let entry = suites.entry(suite).or_default();
        entry.0 += 1;
        entry.1 += test.time;
    }
    suites
}

fn seconds(took: Duration) -> String {
    format!("{:.0} s", took.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integration_tests_are_added_up_by_module_and_others_by_binary() {
        let timed = |name: &str, secs| Timed {
            name: name.into(),
            time: Duration::from_secs(secs),
            failed: false,
        };
        let tests = [
            timed("sample-operator::integration neutron::a", 30),
            timed("sample-operator::integration neutron::b", 12),
            timed("sample-operator::integration foo::c", 5),
            timed("sample-operator foo::table::tests::d", 1),
            timed("sample-operator foo::table::tests::e", 1),
        ];
        let suites = by_suite(&tests);
        assert_eq!(
            suites.into_iter().collect::<Vec<_>>(),
            [
                ("sample-operator".to_owned(), (2, Duration::from_secs(2))),
                (
                    "sample-operator::integration foo".to_owned(),
                    (1, Duration::from_secs(5))
                ),
                (
                    "sample-operator::integration neutron".to_owned(),
                    (2, Duration::from_secs(42))
                ),
            ]
        );
    }
}
