//! The component processes: started detached with their output in a log file, recorded by pid,
//! and stopped by that pid only if it still runs the binary we started. Also the one way the
//! tooling runs a short command and checks it ([`output`], [`run`]).

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::error::{Error, Result};

/// A started component, as recorded in the cluster's state.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Component {
    pub name: String,
    pub pid: i32,
    pub binary: PathBuf,
    pub log: PathBuf,
    /// What it was started with, so that it can be restarted the same way.
    #[serde(default)]
    pub args: Vec<String>,
    /// Environment variables set on top of ours.
    #[serde(default)]
    pub env: Vec<(String, String)>,
}

impl Component {
    /// Starts `binary` with `args`, its stdout and stderr appended to `<log_dir>/<name>.log`.
    pub fn start(name: &str, binary: &Path, args: &[String], log_dir: &Path) -> Result<Self> {
        Self::start_with_env(name, binary, args, &[], log_dir)
    }

    /// [`start`](Self::start) with extra environment variables.
    pub fn start_with_env(
        name: &str,
        binary: &Path,
        args: &[String],
        env: &[(String, String)],
        log_dir: &Path,
    ) -> Result<Self> {
        std::fs::create_dir_all(log_dir).map_err(|e| Error::io(log_dir, e))?;
        let log = log_dir.join(format!("{name}.log"));
        let out = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| Error::io(&log, e))?;
        let err = out.try_clone().map_err(|e| Error::io(&log, e))?;
        let child = Command::new(binary)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own process group: a Ctrl-C meant for `cargo xtask` or a test run does not
            // reach the cluster, which outlives the command that started it.
            .process_group(0)
            .spawn()
            .map_err(|e| Error::io(binary, e))?;
        Ok(Self {
            name: name.to_owned(),
            pid: child.id() as i32,
            binary: binary.to_owned(),
            log,
            args: args.to_vec(),
            env: env.to_vec(),
        })
    }

    /// Whether the process still runs our binary: a dead process, a zombie, or a pid reused by
    /// another program all count as not running.
    pub fn is_running(&self) -> bool {
        let Ok(process) = procfs::process::Process::new(self.pid) else {
            return false;
        };
        // A zombie has exited; so has a process whose stat is gone or unreadable.
        if !process.stat().is_ok_and(|stat| !matches!(stat.state, 'Z' | 'X')) {
            return false;
        }
        // A virtualenv's `bin/python` is a link: the process runs what it points to.
        let resolved = std::fs::canonicalize(&self.binary).unwrap_or_else(|_| self.binary.clone());
        executable(&process).is_some_and(|exe| exe == self.binary || exe == resolved)
    }

    /// Fails with the tail of the log when the process is gone.
    pub fn check(&self) -> Result<()> {
        if self.is_running() {
            Ok(())
        } else {
            Err(Error::ComponentDied {
                component: self.name.clone(),
                log: self.log.clone(),
                tail: self.log_tail(30),
            })
        }
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub fn stop(&self, grace: Duration) {
        if !self.is_running() {
            return;
        }
        self.signal_until_gone(grace);
        reap(self.pid);
    }

    fn signal_until_gone(&self, grace: Duration) {
        let pid = Pid::from_raw(self.pid);
        let _ = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.is_running() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = kill(pid, Signal::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.is_running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The last `lines` lines of the component's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

/// The program `process` runs, as it was started: a binary replaced since (a rebuild) is still
/// the one it runs.
pub(crate) fn executable(process: &procfs::process::Process) -> Option<PathBuf> {
    let exe = process.exe().ok()?;
    Some(PathBuf::from(
        exe.to_string_lossy().trim_end_matches(" (deleted)"),
    ))
}

/// A free TCP port on loopback. The listener is closed before the component binds, so another
/// program (a parallel test's component, say) can take it first; the cluster's and the test
/// bed's `up` then start again on other ports.
pub fn free_port() -> Result<u16> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io(Path::new("127.0.0.1:0"), e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::io(Path::new("127.0.0.1:0"), e))?
        .port();
    Ok(port)
}

/// How many times [`on_free_ports`] starts something whose component found its port taken.
pub const PORT_ATTEMPTS: u32 = 3;

/// Runs `start` (which picks its ports with [`free_port`] and stops what it started when it
/// fails) again while a component died because its port was taken between the pick and its
/// bind, up to [`PORT_ATTEMPTS`] times in all.
pub(crate) async fn on_free_ports<T>(mut start: impl AsyncFnMut() -> Result<T>) -> Result<T> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match start().await {
            Err(e) if e.port_taken() && attempt < PORT_ATTEMPTS => {
                tracing::warn!(error = %e, attempt, "a port was taken before its component bound it; starting again on other ports");
            }
            result => return result,
        }
    }
}

/// A command that could not be started or did not succeed, with what it wrote to stderr.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("running {command}: {source}")]
    Start { command: String, source: std::io::Error },
    #[error("{command} failed{}", failure(*.status, .stderr))]
    Failed {
        command: String,
        status: ExitStatus,
        stderr: String,
    },
}

/// The stderr when there is one (it says why), else the exit status.
fn failure(status: ExitStatus, stderr: &str) -> String {
    if stderr.is_empty() {
        format!(" ({status})")
    } else {
        format!(": {stderr}")
    }
}

/// Runs `cmd` with its output captured and returns its stdout; fails with its stderr.
pub fn output(cmd: &mut Command) -> std::result::Result<String, CommandError> {
    let out = cmd.output().map_err(|source| CommandError::Start {
        command: format!("{cmd:?}"),
        source,
    })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(CommandError::Failed {
            command: format!("{cmd:?}"),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// Runs `cmd` with our stdout and stderr, for commands whose progress the user watches (their
/// errors are then already on the terminal); fails with the exit status.
pub fn run(cmd: &mut Command) -> std::result::Result<(), CommandError> {
    let status = cmd.status().map_err(|source| CommandError::Start {
        command: format!("{cmd:?}"),
        source,
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(CommandError::Failed {
            command: format!("{cmd:?}"),
            status,
            stderr: String::new(),
        })
    }
}

/// Collects the exit status of a component this process started and has just stopped, so that
/// it does not stay a zombie while a long-lived command runs on (the benchmark starts hundreds of
/// contenders, and clusters). A process that is not our child answers at once (ECHILD); ours is
/// waited for briefly, since it may be between losing its executable and becoming a zombie.
fn reap(pid: i32) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while let Ok(WaitStatus::StillAlive) = waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
        if Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_runs_only_while_it_runs_our_binary() {
        let me = |binary: PathBuf| Component {
            name: "test".into(),
            pid: std::process::id() as i32,
            binary,
            log: PathBuf::new(),
            args: Vec::new(),
            env: Vec::new(),
        };
        assert!(me(std::env::current_exe().unwrap()).is_running());
        assert!(!me(PathBuf::from("/bin/true")).is_running());
        let mut exited = Command::new("true").spawn().unwrap();
        let pid = exited.id() as i32;
        exited.wait().unwrap();
        assert!(
            !Component {
                pid,
                ..me(PathBuf::from("/bin/true"))
            }
            .is_running()
        );
    }

    #[test]
    fn a_stopped_component_leaves_no_zombie_behind() {
        let logs = std::env::temp_dir().join(format!("component-test-{}", std::process::id()));
        let sleep = crate::node::which("sleep").expect("coreutils' sleep");
        let component = Component::start("sleep", &sleep, &["30".into()], &logs).unwrap();
        std::fs::remove_dir_all(&logs).unwrap();
        assert!(component.is_running());
        component.stop(Duration::from_secs(5));
        // Reaped: the pid is gone from /proc, not left as a zombie until this process exits.
        assert!(
            procfs::process::Process::new(component.pid).is_err(),
            "{} is still in /proc",
            component.pid
        );
    }

    #[test]
    fn a_failed_command_says_what_it_wrote_to_stderr() {
        let ok = output(Command::new("sh").args(["-c", "echo out; echo err >&2"])).unwrap();
        assert_eq!(ok, "out\n");
        let failed = output(Command::new("sh").args(["-c", "echo out; echo why >&2; exit 3"]))
            .unwrap_err()
            .to_string();
        assert!(failed.ends_with("failed: why"), "{failed}");
        let quiet = run(Command::new("sh").args(["-c", "exit 3"]))
            .unwrap_err()
            .to_string();
        assert!(quiet.ends_with("failed (exit status: 3)"), "{quiet}");
        assert!(matches!(
            output(&mut Command::new("/nonexistent/command")),
            Err(CommandError::Start { .. })
        ));
    }
}
