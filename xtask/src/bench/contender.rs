//! The contenders, how they are built and how they are started.
//!
//! The Go ones come from one pinned module, `bench/go/`, and are cached like the control plane's
//! binaries (under the cache folder, keyed by a fingerprint of the module's sources and the Go
//! version), so only the first benchmark pays for the build. Ours is the release build of the
//! workspace.

use std::hash::Hasher;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use local_cluster::process::{self, free_port};
use local_cluster::toolchain::go_command;
use local_cluster::{Component, paths};

use super::model::Contender;

/// How to tell that a started contender is ready: its caches synced, its workers started.
#[derive(Clone, Copy, Debug)]
pub enum Ready {
    /// `GET /readyz` on this loopback port answers 200.
    Http(u16),
    /// The log, past `from` (it is appended to by every start), has a line with `text`: what
    /// the contender logs once its caches are synced.
    LogLine { text: &'static str, from: u64 },
    /// Nothing to wait for: it has no cache.
    Immediately,
}

/// Paths of the contenders' binaries; `ours` is `None` when no run of ours is wanted.
#[derive(Clone, Debug)]
pub struct Contenders {
    ours: Option<PathBuf>,
    go_bin: PathBuf,
}

impl Contenders {
    /// Builds what `wanted` needs (the Go module always, since the ceiling prepares the memory
    /// scenario).
    pub fn prepare(wanted: &[Contender], operator_binary: Option<&Path>) -> Result<Self> {
        let ours = match operator_binary {
            _ if !wanted.iter().any(|c| c.is_ours()) => None,
            Some(binary) => Some(binary.to_owned()),
            None => {
                println!("== building sample-operator (release)");
                Some(crate::cargo_build::operator("release", true)?)
            }
        };
        Ok(Self {
            ours,
            go_bin: build_go_contenders()?,
        })
    }

    /// Starts `contender` against the cluster of `kubeconfig`, as its users run it, and says
    /// how to tell when it is ready, and for ours, the port of its /metrics.
    pub fn start(
        &self,
        contender: Contender,
        kubeconfig: &Path,
        concurrency: usize,
        logs: &Path,
    ) -> Result<(Component, Ready, Option<u16>)> {
        let invocation = self.invocation(contender, kubeconfig, concurrency)?;
        let name = format!("{contender:?}").to_lowercase();
        let from = std::fs::metadata(logs.join(format!("{name}.log"))).map_or(0, |m| m.len());
        let ready = match contender {
            Contender::Ours
            | Contender::OursStreaming
            | Contender::OursEventsOff
            | Contender::OursThreadPerCore
            | Contender::OursHttp2 => Ready::Http(invocation.probe_port),
            // sample-controller and controller-runtime both log this once WaitForCacheSync has
            // returned, before their workers start.
            Contender::SampleController
            | Contender::SampleControllerTuned
            | Contender::ControllerRuntime
            | Contender::ControllerRuntimeTuned => Ready::LogLine {
                text: "Starting workers",
                from,
            },
            Contender::Ceiling
            | Contender::CeilingOurs
            | Contender::CeilingOursStatus
            | Contender::CeilingOursStatusMerge => Ready::Immediately,
        };
        let metrics = contender.is_ours().then_some(invocation.metrics_port);
        let component = Component::start(&name, &invocation.binary, &invocation.args, logs)?;
        Ok((component, ready, metrics))
    }

    /// The command line that runs `contender` as [`Contenders::start`] does, for a caller that
    /// starts it under another program (`cargo xtask bench-profile`, under perf).
    pub fn invocation(
        &self,
        contender: Contender,
        kubeconfig: &Path,
        concurrency: usize,
    ) -> Result<Invocation> {
        let kubeconfig = kubeconfig.display().to_string();
        let probe_port = free_port()?;
        let metrics_port = free_port()?;
        let (binary, mut args) = match contender {
            Contender::Ours
            | Contender::OursStreaming
            | Contender::OursEventsOff
            | Contender::OursThreadPerCore
            | Contender::OursHttp2 => (
                self.ours
                    .clone()
                    .context("our operator was not prepared: it is not among --contenders")?,
                vec![
                    "run".into(),
                    "--kubeconfig".into(),
                    kubeconfig,
                    // The peers run a Foo controller only; so does ours here. Its probes and
                    // metrics servers (defaults) go on ports nothing else holds.
                    "--controllers=foo".into(),
                    format!("--probe-address=127.0.0.1:{probe_port}"),
                    format!("--metrics-address=127.0.0.1:{metrics_port}"),
                    // The peers' Deployments have a bare nginx container: so do ours here,
                    // so that all write and store objects of one size.
                    "--foo-resources={}".into(),
                    "--foo-security-context={}".into(),
                ],
            ),
            Contender::SampleController => (
                self.go_bin.join("sample-controller"),
                vec![format!("-kubeconfig={kubeconfig}")],
            ),
            Contender::ControllerRuntime => (
                self.go_bin.join("controller-runtime-foo"),
                vec![
                    format!("-kubeconfig={kubeconfig}"),
                    // Its metrics server stays on (a default), on a port nothing else holds.
                    format!("-metrics-bind-address=127.0.0.1:{}", free_port()?),
                ],
            ),
            Contender::SampleControllerTuned => (
                self.go_bin.join("sample-controller-tuned"),
                vec![
                    format!("-kubeconfig={kubeconfig}"),
                    format!("-workers={concurrency}"),
                    // client-go reads a negative QPS as no client-side rate limit, which is
                    // how controller-runtime and our operator run.
                    "-qps=-1".into(),
                ],
            ),
            Contender::ControllerRuntimeTuned => (
                self.go_bin.join("controller-runtime-foo"),
                vec![
                    format!("-kubeconfig={kubeconfig}"),
                    format!("-metrics-bind-address=127.0.0.1:{}", free_port()?),
                    format!("-max-concurrent-reconciles={concurrency}"),
                    "-strip-managed-fields".into(),
                    "-deployment-selector=app.kubernetes.io/managed-by=controller-runtime-foo".into(),
                ],
            ),
            Contender::Ceiling
            | Contender::CeilingOurs
            | Contender::CeilingOursStatus
            | Contender::CeilingOursStatusMerge => (
                self.go_bin.join("ceiling"),
                vec![
                    format!("-kubeconfig={kubeconfig}"),
                    format!("-concurrency={concurrency}"),
                ],
            ),
        };
        match contender {
            Contender::Ours => args.push("--initial-list=list".into()),
            Contender::OursStreaming => args.push("--initial-list=stream".into()),
            Contender::OursEventsOff => args.extend(["--initial-list=list".into(), "--events=none".into()]),
            Contender::OursThreadPerCore => {
                args.extend(["--initial-list=list".into(), "--worker-threads=0".into()])
            }
            Contender::OursHttp2 => args.extend(["--initial-list=list".into(), "--apiserver-http=2".into()]),
            Contender::CeilingOurs => args.push("-ours".into()),
            Contender::CeilingOursStatus => args.push("-ours-status".into()),
            Contender::CeilingOursStatusMerge => args.push("-ours-status-merge".into()),
            _ => {}
        }
        Ok(Invocation {
            binary,
            args,
            probe_port,
            metrics_port,
        })
    }
}

/// A contender's command line, and the ports of ours' probes and /metrics in it.
pub struct Invocation {
    pub binary: PathBuf,
    pub args: Vec<String>,
    pub probe_port: u16,
    pub metrics_port: u16,
}

/// The Go module's folder.
fn go_module() -> PathBuf {
    paths::repo_root().join("bench/go")
}

/// sample-controller hardcodes 2 workers and keeps client-go's default rate limit (5 requests a
/// second, bursts of 10), with no flag for either. Its tuned build is a copy of its module with
/// these lines of main.go swapped, (line, replacement), and a file of flags added. (`go build
/// -overlay` would leave no copy, but refuses to replace files in the module cache.)
const SAMPLE_CONTROLLER_TUNING: [(&str, &str); 2] = [
    ("controller.Run(ctx, 2)", "controller.Run(ctx, benchWorkers)"),
    (
        "kubeClient, err := kubernetes.NewForConfig(cfg)",
        "cfg.QPS, cfg.Burst = float32(benchQPS), benchBurst\n\tkubeClient, err := kubernetes.NewForConfig(cfg)",
    ),
];

/// The flags the tuned sample-controller gets, as one more file of its `main` package.
const SAMPLE_CONTROLLER_TUNING_FLAGS: &str = r#"package main

import "flag"

// Added by the benchmark's tuned build: the numbers its users change in main.go.
var (
	benchWorkers int
	benchQPS     float64
	benchBurst   int
)

func init() {
	flag.IntVar(&benchWorkers, "workers", 2, "Workers processing the queue (sample-controller: 2).")
	flag.Float64Var(&benchQPS, "qps", 5, "Client-side requests per second; negative: no limit (client-go: 5).")
	flag.IntVar(&benchBurst, "burst", 10, "Client-side burst (client-go: 10).")
}
"#;

/// Copies sample-controller's module (at the version bench/go requires) into `dir`, tuned, to
/// be built there with its own go.mod and go.sum.
fn tuned_sample_controller_source(module: &Path, dir: &Path) -> Result<()> {
    let download = go_output(module, &["mod", "download", "-json", "k8s.io/sample-controller"])?;
    let info: serde_json::Value = serde_json::from_str(&download)?;
    let source = PathBuf::from(info["Dir"].as_str().context("no Dir from go mod download")?);
    copy_tree(&source, dir)?;
    let mut main = std::fs::read_to_string(source.join("main.go"))?;
    for (line, replacement) in SAMPLE_CONTROLLER_TUNING {
        if main.matches(line).count() != 1 {
            bail!("sample-controller's main.go no longer has `{line}` once: update the tuning");
        }
        main = main.replace(line, replacement);
    }
    std::fs::write(dir.join("main.go"), main)?;
    std::fs::write(dir.join("bench_tuning.go"), SAMPLE_CONTROLLER_TUNING_FLAGS)?;
    Ok(())
}

/// Copies a folder's files (writable: the module cache's are read-only).
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::write(&target, std::fs::read(entry.path())?)?;
        }
    }
    Ok(())
}

/// Builds sample-controller (as is and tuned), controller-runtime-foo and ceiling into the cache
/// unless the same sources were built before, and returns their folder.
fn build_go_contenders() -> Result<PathBuf> {
    let module = go_module();
    let go_version = go_output(&module, &["env", "GOVERSION"])?;
    let dest = paths::cache_dir()
        .join("bin")
        .join(format!("bench-go-{:016x}", fingerprint(&module, &go_version)?));
    let binaries = [
        "sample-controller",
        "sample-controller-tuned",
        "controller-runtime-foo",
        "ceiling",
    ];
    if binaries.iter().all(|b| dest.join(b).is_file()) {
        return Ok(dest);
    }
    println!("== building the Go contenders (a minute or two the first time)");
    let staging = dest.with_extension("partial");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)?;
    process::run(
        go_command(&module)
            .args(["build", "-trimpath", "-o"])
            // A trailing slash makes `go build -o` write every binary into the folder.
            .arg(format!("{}/", staging.display()))
            .args([
                "k8s.io/sample-controller",
                "./cmd/controller-runtime-foo",
                "./cmd/ceiling",
            ]),
    )
    .context("building the Go contenders; Go 1.26 or newer is needed")?;
    let tuned = staging.join("sample-controller-tuned-src");
    tuned_sample_controller_source(&module, &tuned)?;
    process::run(
        go_command(&tuned)
            .args(["build", "-trimpath", "-o"])
            .arg(staging.join("sample-controller-tuned"))
            .arg("."),
    )
    .context("building the tuned sample-controller")?;
    std::fs::remove_dir_all(&tuned)?;
    let _ = std::fs::remove_dir_all(&dest);
    std::fs::rename(&staging, &dest)?;
    Ok(dest)
}

fn go_output(dir: &Path, args: &[&str]) -> Result<String> {
    Ok(process::output(go_command(dir).args(args))?.trim().to_owned())
}

/// FNV-1a over the module's go.mod, go.sum and Go sources (in path order) and the Go version:
/// stable across Rust releases, unlike `DefaultHasher`.
fn fingerprint(module: &Path, go_version: &str) -> Result<u64> {
    let mut files = vec![module.join("go.mod"), module.join("go.sum")];
    collect_go_files(&module.join("cmd"), &mut files)?;
    files.sort();
    let mut hash = fnv::FnvHasher::default();
    hash.write(go_version.as_bytes());
    for (line, replacement) in SAMPLE_CONTROLLER_TUNING {
        hash.write(line.as_bytes());
        hash.write(replacement.as_bytes());
    }
    hash.write(SAMPLE_CONTROLLER_TUNING_FLAGS.as_bytes());
    for file in files {
        hash.write(
            file.strip_prefix(module)
                .unwrap_or(&file)
                .to_string_lossy()
                .as_bytes(),
        );
        hash.write(&std::fs::read(&file).with_context(|| format!("reading {}", file.display()))?);
    }
    Ok(hash.finish())
}

fn collect_go_files(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect_go_files(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "go") {
            files.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_follows_the_sources() {
        let a = fingerprint(&go_module(), "go1.26.8").unwrap();
        assert_eq!(a, fingerprint(&go_module(), "go1.26.8").unwrap());
        assert_ne!(a, fingerprint(&go_module(), "go1.27.0").unwrap());
    }

    /// Each of ours' variants is started with flags the operator has: the options table of
    /// docs/operating.md lists exactly its flags (the operator's own tests check that).
    #[test]
    fn ours_variants_pass_flags_the_operator_has() {
        let operating = std::fs::read_to_string(paths::repo_root().join("docs/operating.md")).unwrap();
        let contenders = Contenders {
            ours: Some("sample-operator".into()),
            go_bin: "go-bin".into(),
        };
        let mut extra = std::collections::BTreeSet::new();
        for contender in Contender::ALL.into_iter().filter(|c| c.is_ours()) {
            let invocation = contenders
                .invocation(contender, Path::new("kubeconfig"), 128)
                .unwrap();
            for arg in invocation.args.iter().filter(|a| a.starts_with("--")) {
                let flag = arg.split('=').next().unwrap();
                assert!(
                    operating.contains(&format!("| `{flag}` |")),
                    "{contender:?} passes {flag}, which the operator does not have"
                );
                extra.insert(arg.clone());
            }
        }
        // The variants differ by these, which must then reach the command line.
        for arg in [
            "--initial-list=stream",
            "--events=none",
            "--worker-threads=0",
            "--apiserver-http=2",
        ] {
            assert!(extra.contains(arg), "no variant of ours passes {arg}");
        }
    }
}
