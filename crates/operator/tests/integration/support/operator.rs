//! The operator under test, one harness in two forms: [`Operator`] runs it in this process
//! (its requests counted, stopped as SIGTERM stops it) and [`OperatorProcess`] runs the built
//! binary as production does (its endpoints, signals and exit codes). Both act as the operator's
//! ServiceAccount, so every test also proves that deploy/operator/rbac.yaml suffices.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use kube::api::PostParams;
use local_cluster::testing;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use sample_operator::runtime::requests::{RequestCounter, RequestCounts};
use sample_operator::{ControllerName, RunConfig};
use sample_operator_api::{Foo, FooSpec};

use super::{config, metric_sum, operator_config};

/// The operator, running in this process on one namespace, with its requests counted.
pub struct Operator {
    pub requests: RequestCounter,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Operator {
    pub async fn start(namespace: &str, controllers: &[ControllerName]) -> Self {
        Self::start_with(config(Some(namespace), controllers)).await
    }

    pub async fn start_with(config: RunConfig) -> Self {
        // As its ServiceAccount: whatever the operator does in a test, deploy/operator/rbac.yaml
        // must allow.
        let as_operator = operator_config(&testing::client().await).await;
        Self::start_as(config, as_operator).await
    }

    /// Runs it with the client configuration `as_operator`, such as one that impersonates
    /// another ServiceAccount.
    pub async fn start_as(config: RunConfig, as_operator: kube::Config) -> Self {
        let requests = RequestCounter::default();
        let client = requests.client(as_operator).expect("operator client");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(sample_operator::run(client, config, async move {
            let _ = stopped.await;
        }));
        Self { requests, stop, task }
    }

    /// Requests sent so far.
    pub fn requests(&self) -> RequestCounts {
        self.requests.snapshot()
    }

    /// Stops it the way SIGTERM does and waits until it has.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("the operator stops within 30s")
            .expect("the operator task does not panic");
    }
}

pub const BINARY: &str = env!("CARGO_BIN_EXE_sample-operator");

/// A running `sample-operator run`, killed when dropped.
pub struct OperatorProcess {
    name: String,
    child: Mutex<Child>,
    /// The port of /metrics.
    pub port: u16,
    /// The port of /healthz and /readyz.
    pub probe_port: u16,
    log: PathBuf,
}

/// A loopback port for a process a test starts, free now and not handed out before by this
/// test process. It is taken below the kernel's ephemeral range: a port from `bind(0)` is freed
/// before the process binds it, and meanwhile any outgoing connection on the machine may take
/// it as its local port, which ends the process with "cannot listen". Each test runs in a
/// process of its own (nextest), so each starts at a place of the range its process id picks,
/// far from the others'.
pub fn free_port() -> u16 {
    static NEXT: std::sync::LazyLock<AtomicU32> =
        std::sync::LazyLock::new(|| AtomicU32::new(std::process::id().wrapping_mul(61)));
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768);
    const SPAN: u32 = 8192;
    if ephemeral_start > 1024 + SPAN {
        let base = ephemeral_start - SPAN;
        for _ in 0..SPAN {
            let port = (base + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN) as u16;
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl OperatorProcess {
    pub fn spawn(name: &str, dir: &Path, args: &[&str]) -> Self {
        Self::spawn_with_env(name, dir, args, &[])
    }

    pub fn spawn_with_env(name: &str, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_with(name, dir, args, |command| {
            command.envs(env.iter().copied());
        })
    }

    /// `sample-operator run` with `args`, its endpoints on ports of its own, its output in
    /// `<dir>/<name>.log`, and whatever else `configure` sets on the command.
    pub fn spawn_with(name: &str, dir: &Path, args: &[&str], configure: impl FnOnce(&mut Command)) -> Self {
        let (port, probe_port) = (free_port(), free_port());
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let mut command = Command::new(BINARY);
        command
            .arg("run")
            .args(args)
            .arg(format!("--metrics-address=127.0.0.1:{port}"))
            .arg(format!("--probe-address=127.0.0.1:{probe_port}"))
            .env("POD_NAME", name)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        configure(&mut command);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {BINARY}: {e}"));
        Self {
            name: name.to_owned(),
            child: Mutex::new(child),
            port,
            probe_port,
            log,
        }
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.lock().unwrap().id() as i32)
    }

    /// How it ended, or `None` while it runs.
    pub fn exited(&self) -> Option<ExitStatus> {
        self.child.lock().unwrap().try_wait().unwrap()
    }

    /// Waits until `/readyz` answers 200; ends the test, with the log, when the process exits
    /// first or is not ready within a minute (a start on a busy machine, not its speed, is what
    /// this waits for).
    pub async fn wait_ready(&self) {
        until("ready", Duration::from_secs(60), &[self], || {
            self.get("/readyz").is_some_and(|r| r.0 == 200)
        })
        .await;
    }

    /// A GET of /metrics on its port, or of a probe on the probes' port.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let port = if path == "/metrics" {
            self.port
        } else {
            self.probe_port
        };
        http_get(port, path)
    }

    /// The sum of the series of `family` with these labels; `None` when /metrics fails.
    pub fn metric(&self, family: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let (_, body) = self.get("/metrics")?;
        Some(metric_sum(&body, family, labels))
    }

    pub fn is_leader(&self) -> bool {
        self.metric("leader_election_master_status", &[]) == Some(1.0)
    }

    /// Requests that can change something, whatever the response.
    pub fn writes(&self) -> f64 {
        ["POST", "PUT", "PATCH", "DELETE"]
            .iter()
            .map(|m| {
                self.metric("rest_client_requests_total", &[("method", m)])
                    .unwrap_or(0.0)
            })
            .sum()
    }

    pub fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).unwrap();
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return status;
            }
            assert!(
                start.elapsed() < timeout,
                "did not exit within {timeout:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A GET on loopback: status and body, `None` without an answer within 5 seconds.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let url = format!("http://127.0.0.1:{port}{path}");
    let response = local_cluster::http::get(&url, Duration::from_secs(5)).ok()?;
    Some((response.status, response.body))
}

/// [`testing::poll`] for a condition on running `processes`: a process that exits meanwhile
/// ends the wait at once, and either failure shows their logs, which say why. How long the
/// condition took to hold.
pub async fn until(
    what: &str,
    timeout: Duration,
    processes: &[&OperatorProcess],
    mut check: impl FnMut() -> bool,
) -> Duration {
    let logs = || {
        processes
            .iter()
            .map(|p| format!("\n--- log of {} ---\n{}", p.name, p.log()))
            .collect::<String>()
    };
    let start = Instant::now();
    let held = testing::poll(timeout, async || {
        for process in processes {
            if let Some(status) = process.exited() {
                panic!("{} exited ({status}) before: {what}{}", process.name, logs());
            }
        }
        check().then_some(())
    })
    .await;
    assert!(held.is_some(), "not within {timeout:?}: {what}{}", logs());
    start.elapsed()
}

/// [`testing::eventually`] for a condition that needs no waiting of its own to check.
pub async fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    testing::eventually(what, timeout, async || check().then_some(())).await
}

/// A folder of one test's own for its logs and files, removed when the test passes; kept,
/// named on stderr, when it fails, as [`TestNamespace`](local_cluster::testing::TestNamespace)
/// keeps its namespace.
pub fn scratch_dir(name: &str) -> ScratchDir {
    let dir = std::env::temp_dir().join(format!("sample-operator-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    ScratchDir(dir)
}

pub struct ScratchDir(PathBuf);

impl std::ops::Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the test failed: {} is kept for inspection", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

pub async fn wait_foo_available(foos: &kube::Api<Foo>, name: &str) {
    testing::wait_for(foos, name, "available", Duration::from_secs(60), |f| {
        f.status.as_ref().is_some_and(|s| s.available_replicas == 1)
    })
    .await
    .unwrap();
}

pub async fn create_foo(foos: &kube::Api<Foo>, name: &str) {
    let foo = Foo::new(
        name,
        FooSpec {
            deployment_name: name.into(),
            replicas: Some(1),
        },
    );
    foos.create(&PostParams::default(), &foo).await.unwrap();
}
