//! A real OpenStack identity and network service on loopback, for the Neutron backend's tests
//! and demo: Keystone and neutron-server, installed from PyPI, served by gunicorn.
//!
//! - Each of keystone, neutron and the `openstack` command line lives in a virtualenv of its
//!   own under the cache folder, installed with `pip install --no-deps` from a lock file in
//!   `toolchain/openstack/`, so nothing floats; the lock file's hash names the folder.
//! - `up` makes a fresh Keystone (sqlite, fernet tokens), registers the network service at a
//!   loopback port, makes the `service` project's `neutron` user that neutron-server checks
//!   tokens with, and a project `sample-operator` whose member user has an application
//!   credential. neutron-server runs ML2 with no agents, no message broker and no mechanism
//!   driver: networks and subnets are database records, which is all this backend needs.
//! - `<cluster dir>/clouds.yaml` names three clouds: `sample-operator` (the application
//!   credential), `sample-operator-password` (the same user by password) and `admin`.
//!
//! Everything runs under `<cluster dir>/openstack/`, with the logs in its `logs/` folder.

use std::hash::Hasher;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::http;
use crate::lock::FileLock;
use crate::paths;
use crate::pki::write_private;
use crate::process::{Component, free_port};
use crate::state_file::StateFile;
use crate::wait::wait_for;

/// The region the network endpoint is registered in.
pub const REGION: &str = "RegionOne";
/// How long neutron-server trusts a token it has checked with Keystone (the default is 300 s):
/// a test that revokes a token waits that long, and a check costs a third of a request.
pub const TOKEN_CACHE_SECONDS: u64 = 10;
/// How long Keystone's tokens last: three minutes instead of an hour, so that every test that
/// runs longer sees its clients renew them, and one test runs past one and a half. Not two:
/// keystoneauth (the `openstack` command line, neutron-server's token middleware) takes a
/// token with under 120 s left as expired and authenticates again for every request.
pub const TOKEN_LIFETIME_SECONDS: u64 = 180;
/// The clouds of `clouds.yaml`.
pub const CLOUD: &str = "sample-operator";
pub const PASSWORD_CLOUD: &str = "sample-operator-password";
pub const ADMIN_CLOUD: &str = "admin";
/// The project (and member user) the operator works in.
pub const PROJECT: &str = "sample-operator";

/// The three virtualenvs.
#[derive(Clone, Debug)]
pub struct Venvs {
    pub keystone: PathBuf,
    pub neutron: PathBuf,
    pub openstackclient: PathBuf,
}

/// What `up` recorded, in `<dir>/state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OpenStackState {
    pub keystone_url: String,
    pub neutron_url: String,
    pub components: Vec<Component>,
    /// The `openstack` command of the openstackclient virtualenv.
    pub openstack: PathBuf,
}

/// A handle to the test bed's folder.
#[derive(Clone, Debug)]
pub struct OpenStack {
    /// The cluster folder: `clouds.yaml` goes beside the kubeconfig.
    cluster_dir: PathBuf,
}

impl Default for OpenStack {
    fn default() -> Self {
        Self::new(paths::run_dir())
    }
}

impl OpenStack {
    pub fn new(cluster_dir: PathBuf) -> Self {
        Self { cluster_dir }
    }

    pub fn dir(&self) -> PathBuf {
        self.cluster_dir.join("openstack")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.dir().join("logs")
    }

    /// The clouds.yaml naming [`CLOUD`], [`PASSWORD_CLOUD`] and [`ADMIN_CLOUD`].
    pub fn clouds_yaml(&self) -> PathBuf {
        self.cluster_dir.join("clouds.yaml")
    }

    fn state_file(&self) -> StateFile<OpenStackState> {
        StateFile::in_dir(&self.dir(), "the OpenStack state")
    }

    fn lock(&self) -> Result<FileLock> {
        FileLock::acquire(&self.cluster_dir.join("openstack.lock"))
    }

    pub fn state(&self) -> Option<OpenStackState> {
        self.state_file().load()
    }

    /// Keystone's URL, such as `http://127.0.0.1:40123/v3`; panics when the test bed is not up.
    pub fn keystone_url(&self) -> String {
        self.state().expect("the OpenStack test bed is up").keystone_url
    }

    /// The real `openstack` command line as the admin, with `args`; for tests and the demo.
    /// Panics when the test bed is not up.
    pub fn openstack(&self, args: &[&str]) -> Command {
        self.openstack_as(ADMIN_CLOUD, args)
    }

    /// The `openstack` command line as `cloud` of the test bed's clouds.yaml.
    pub fn openstack_as(&self, cloud: &str, args: &[&str]) -> Command {
        let state = self.state().expect("the OpenStack test bed is up");
        let mut command = Command::new(state.openstack);
        command
            .env("OS_CLIENT_CONFIG_FILE", self.clouds_yaml())
            .env("OS_CLOUD", cloud)
            .args(args);
        command
    }

    /// Whether Keystone and neutron-server run and answer.
    pub fn is_healthy(&self) -> bool {
        let Some(state) = self.state() else {
            return false;
        };
        state.components.iter().all(Component::is_running)
            && http_status(&state.keystone_url, "").is_ok_and(|s| s == 200)
            && http_status(&state.neutron_url, "/").is_ok_and(|s| s == 200)
    }

    /// Starts Keystone and neutron-server, or returns at once when they already run here.
    /// Installs the virtualenvs first when they are not cached (a few minutes, once).
    pub async fn up(&self) -> Result<OpenStackState> {
        let venvs = tokio::task::spawn_blocking(ensure_venvs)
            .await
            .map_err(|e| Error::Toolchain {
                component: "openstack".into(),
                message: e.to_string(),
            })??;
        let _lock = self.lock()?;
        if self.is_healthy()
            && let Some(state) = self.state()
        {
            return Ok(state);
        }
        // A port picked free can be taken before its server binds it: then everything is
        // started again on other ports, as the cluster's `up` does.
        crate::process::on_free_ports(async || {
            self.stop_recorded();
            let dir = self.dir();
            if dir.exists() {
                std::fs::remove_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            }
            std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
            // Its databases, keys and configuration hold the test bed's secrets: its owner's alone.
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| Error::io(&dir, e))?;
            let mut started = Vec::new();
            let result = self.start(&venvs, &mut started).await;
            if result.is_err() {
                for component in started.iter().rev() {
                    component.stop(Duration::from_secs(10));
                }
            }
            result
        })
        .await
    }

    async fn start(&self, venvs: &Venvs, started: &mut Vec<Component>) -> Result<OpenStackState> {
        let dir = self.dir();
        let logs = self.logs_dir();
        let keystone_port = free_port()?;
        let neutron_port = free_port()?;
        let keystone_url = format!("http://127.0.0.1:{keystone_port}/v3");
        let neutron_url = format!("http://127.0.0.1:{neutron_port}");
        let secrets = Secrets::new()?;
        let begun = Instant::now();

        eprintln!("openstack: setting up Keystone");
        let keystone_conf = write_keystone_config(&dir)?;
        let manage = venvs.keystone.join("bin/keystone-manage");
        let user = current_user();
        let config = format!("--config-file={}", keystone_conf.display());
        for args in [
            vec![config.clone(), "db_sync".into()],
            vec![
                config.clone(),
                "fernet_setup".into(),
                format!("--keystone-user={user}"),
                format!("--keystone-group={user}"),
            ],
            vec![
                config.clone(),
                "credential_setup".into(),
                format!("--keystone-user={user}"),
                format!("--keystone-group={user}"),
            ],
            // The password comes in OS_BOOTSTRAP_PASSWORD (below), not among the arguments,
            // which every local user can read.
            vec![
                config.clone(),
                "bootstrap".into(),
                format!("--bootstrap-admin-url={keystone_url}"),
                format!("--bootstrap-public-url={keystone_url}"),
                format!("--bootstrap-internal-url={keystone_url}"),
                format!("--bootstrap-region-id={REGION}"),
            ],
        ] {
            let mut command = Command::new(&manage);
            command.args(&args).env("OS_BOOTSTRAP_PASSWORD", &secrets.admin);
            run_with_input(
                command,
                "",
                &logs.join("keystone-manage.log"),
                "keystone-manage",
                Output::Log,
            )?;
        }
        write_entry(
            &dir.join("keystone_wsgi.py"),
            "KEYSTONE",
            &dir,
            "keystone.conf",
            "keystone.wsgi.api",
        )?;
        let keystone = Component::start(
            "keystone",
            &venvs.keystone.join("bin/python"),
            &gunicorn_args(&dir, keystone_port, "keystone_wsgi"),
            &logs,
        )?;
        started.push(keystone);
        wait_for(
            "Keystone to answer",
            Duration::from_secs(120),
            started,
            || async { ready(&keystone_url, "") },
        )
        .await?;

        let mut clouds = Clouds::new(&keystone_url);
        clouds.password(ADMIN_CLOUD, "admin", &secrets.admin, "admin");
        clouds.write(&self.clouds_yaml())?;
        eprintln!("openstack: registering the network service, project {PROJECT:?} and its user");
        let script = format!(
            "project create --domain Default service\n\
             user create --domain Default --project service --password {neutron_password} neutron\n\
             role add --project service --user neutron admin\n\
             service create --name neutron network\n\
             endpoint create --region {REGION} network public {neutron_url}\n\
             endpoint create --region {REGION} network internal {neutron_url}\n\
             endpoint create --region {REGION} network admin {neutron_url}\n\
             project create --domain Default {PROJECT}\n\
             user create --domain Default --project {PROJECT} --password {member_password} {PROJECT}\n\
             role add --project {PROJECT} --user {PROJECT} member\n",
            neutron_password = secrets.neutron,
            member_password = secrets.member,
        );
        let openstack = venvs.openstackclient.join("bin/openstack");
        // One process reads every command: the command line takes seconds to start.
        let log = logs.join("openstack-setup.log");
        let mut batch = Command::new(&openstack);
        batch
            .env("OS_CLIENT_CONFIG_FILE", self.clouds_yaml())
            .env("OS_CLOUD", ADMIN_CLOUD);
        // Its interactive mode exits 1 whatever happened and only logs a failed command, so
        // the outcome is checked by reading the catalog back, and (below) by the member
        // creating its application credential.
        run_with_input(batch, &script, &log, "the openstack command line", Output::Log).or_else(
            |e| match e {
                Error::Toolchain { .. } => Ok(String::new()),
                e => Err(e),
            },
        )?;
        let mut endpoints = Command::new(&openstack);
        endpoints
            .env("OS_CLIENT_CONFIG_FILE", self.clouds_yaml())
            .env("OS_CLOUD", ADMIN_CLOUD)
            .args([
                "endpoint",
                "list",
                "--service",
                "network",
                "-f",
                "value",
                "-c",
                "URL",
            ]);
        let listed = run_with_input(endpoints, "", &log, "the openstack command line", Output::Log)?;
        if listed.lines().filter(|l| l.trim() == neutron_url).count() != 3 {
            return Err(Error::Toolchain {
                component: "openstack".into(),
                message: format!(
                    "registering the network service failed: the catalog lists {listed:?}; see {}",
                    log.display()
                ),
            });
        }
        clouds.password(PASSWORD_CLOUD, PROJECT, &secrets.member, PROJECT);
        clouds.write(&self.clouds_yaml())?;
        let mut create = Command::new(&openstack);
        create
            .env("OS_CLIENT_CONFIG_FILE", self.clouds_yaml())
            .env("OS_CLOUD", PASSWORD_CLOUD)
            .args(["application", "credential", "create", PROJECT, "-f", "json"]);
        let credential = run_with_input(create, "", &log, "the openstack command line", Output::Secret)?;
        let credential: serde_json::Value =
            serde_json::from_str(&credential).map_err(|e| Error::Toolchain {
                component: "openstack".into(),
                message: format!("the application credential is not JSON: {e}"),
            })?;
        let (Some(id), Some(secret)) = (credential["ID"].as_str(), credential["Secret"].as_str()) else {
            return Err(Error::Toolchain {
                component: "openstack".into(),
                message: format!("no ID and Secret in the application credential: {credential}"),
            });
        };
        clouds.application_credential(CLOUD, id, secret);
        clouds.write(&self.clouds_yaml())?;

        eprintln!("openstack: setting up neutron-server");
        write_neutron_config(&dir, &venvs.neutron, &keystone_url, &secrets.neutron)?;
        let database = format!("sqlite:///{}", dir.join("neutron.db").display());
        // `neutron-db-manage upgrade` has MySQL-only migrations; the tables come from the
        // models instead, as Neutron's own unit tests make them.
        run(
            &venvs.neutron.join("bin/python"),
            &[
                "-c".into(),
                "import sys\nfrom sqlalchemy import create_engine\nfrom neutron.db.migration.models import head\n\
                 head.get_metadata().create_all(create_engine(sys.argv[1]))"
                    .into(),
                database,
            ],
            &logs.join("neutron-db.log"),
        )?;
        write_entry(
            &dir.join("neutron_wsgi.py"),
            "NEUTRON",
            &dir,
            "neutron.conf;ml2_conf.ini",
            "neutron.wsgi.api",
        )?;
        let neutron = Component::start(
            "neutron-server",
            &venvs.neutron.join("bin/python"),
            &gunicorn_args(&dir, neutron_port, "neutron_wsgi"),
            &logs,
        )?;
        started.push(neutron);
        let state = OpenStackState {
            keystone_url,
            neutron_url,
            components: started.clone(),
            openstack,
        };
        self.state_file().save(&state)?;
        self.wait_for_neutron(&state).await?;
        // Neutron's default quota, 100 networks, is less than the tests create at once; the
        // quota tests make projects of their own with small quotas.
        let log = logs.join("openstack-setup.log");
        let quota = self.openstack(&["quota", "set", "--networks", "-1", "--subnets", "-1", PROJECT]);
        tokio::task::spawn_blocking(move || {
            run_with_input(quota, "", &log, "the openstack command line", Output::Log)
        })
        .await
        .map_err(|e| Error::Toolchain {
            component: "openstack".into(),
            message: e.to_string(),
        })??;
        eprintln!(
            "openstack: Keystone and neutron-server ready in {:.0}s",
            begun.elapsed().as_secs_f64()
        );
        Ok(state)
    }

    /// Waits until neutron-server answers, then sends one authenticated list through the
    /// command line: the first request after a start loads the policies and the token
    /// middleware, and takes seconds.
    async fn wait_for_neutron(&self, state: &OpenStackState) -> Result<()> {
        wait_for(
            "neutron-server to answer",
            Duration::from_secs(120),
            &state.components,
            || async { ready(&state.neutron_url, "/") },
        )
        .await?;
        let log = self.logs_dir().join("openstack-setup.log");
        // A name nothing has: the answer is short however many networks the project holds.
        let list = self.openstack_as(
            CLOUD,
            &[
                "network",
                "list",
                "--name",
                "sample-operator-readiness",
                "-f",
                "json",
            ],
        );
        tokio::task::spawn_blocking(move || {
            run_with_input(list, "", &log, "the openstack command line", Output::Log)
        })
        .await
        .map_err(|e| Error::Toolchain {
            component: "openstack".into(),
            message: e.to_string(),
        })??;
        Ok(())
    }

    /// Stops neutron-server, as an outage would; Keystone keeps running.
    pub async fn stop_neutron(&self) -> Result<()> {
        let state = self.state().ok_or(Error::NotRunning)?;
        for c in state.components.iter().filter(|c| c.name == "neutron-server") {
            c.stop(Duration::from_secs(10));
        }
        Ok(())
    }

    /// Starts neutron-server again on its port (the one Keystone's catalog names), and waits
    /// until it answers.
    pub async fn start_neutron(&self) -> Result<()> {
        let mut state = self.state().ok_or(Error::NotRunning)?;
        let position = state
            .components
            .iter()
            .position(|c| c.name == "neutron-server")
            .ok_or(Error::NotRunning)?;
        let old = state.components[position].clone();
        old.stop(Duration::from_secs(10));
        state.components[position] = Component::start(&old.name, &old.binary, &old.args, &self.logs_dir())?;
        self.state_file().save(&state)?;
        self.wait_for_neutron(&state).await
    }

    /// Stops Keystone and neutron-server and removes their folder and clouds.yaml. Safe when
    /// nothing runs.
    pub fn down(&self) -> Result<()> {
        let _lock = self.lock()?;
        self.stop_recorded();
        for path in [self.dir(), self.clouds_yaml()] {
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            match removed {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(&path, e)),
                _ => {}
            }
        }
        Ok(())
    }

    fn stop_recorded(&self) {
        if let Some(state) = self.state() {
            for component in state.components.iter().rev() {
                component.stop(Duration::from_secs(10));
            }
        }
    }
}

/// Installs whatever virtualenv is missing from the cache; returns their folders. Progress goes
/// to stderr, since the first install takes minutes.
pub fn ensure_venvs() -> Result<Venvs> {
    let _lock = FileLock::acquire(&paths::cache_dir().join("build.lock"))?;
    Ok(Venvs {
        keystone: ensure_venv("keystone")?,
        neutron: ensure_venv("neutron")?,
        openstackclient: ensure_venv("openstackclient")?,
    })
}

/// The virtualenv of `toolchain/openstack/<name>.txt`, in a folder named by a hash of that lock
/// file and of the Python version, so that a change to either installs anew.
fn ensure_venv(name: &str) -> Result<PathBuf> {
    let lock_file = paths::toolchain_dir()
        .join("openstack")
        .join(format!("{name}.txt"));
    let requirements = std::fs::read(&lock_file).map_err(|e| Error::io(&lock_file, e))?;
    let python = python_version()?;
    let mut key = requirements;
    key.extend_from_slice(python.as_bytes());
    let venv = paths::cache_dir()
        .join("venv")
        .join(format!("{name}-{:016x}", fnv1a(&key)));
    let done = venv.join(".installed");
    if done.exists() {
        return Ok(venv);
    }
    if venv.exists() {
        // A broken earlier attempt.
        std::fs::remove_dir_all(&venv).map_err(|e| Error::io(&venv, e))?;
    }
    let log = paths::cache_dir().join("venv").join(format!("{name}.log"));
    eprintln!(
        "installing {name} from PyPI into {} (the first install takes a minute or two; log: {})",
        venv.display(),
        log.display()
    );
    let started = Instant::now();
    std::fs::create_dir_all(&venv).map_err(|e| Error::io(&venv, e))?;
    run(
        Path::new("python3"),
        &["-m".into(), "venv".into(), venv.display().to_string()],
        &log,
    )?;
    run(
        &venv.join("bin/pip"),
        &[
            "install".into(),
            "--quiet".into(),
            "--disable-pip-version-check".into(),
            "--no-deps".into(),
            "--requirement".into(),
            lock_file.display().to_string(),
        ],
        &log,
    )?;
    std::fs::write(&done, python).map_err(|e| Error::io(&done, e))?;
    eprintln!("  {name}: installed in {:.0}s", started.elapsed().as_secs_f64());
    Ok(venv)
}

fn python_version() -> Result<String> {
    let output = Command::new("python3")
        .arg("--version")
        .output()
        .map_err(|e| Error::Toolchain {
            component: "openstack".into(),
            message: format!("python3 is needed for Keystone and neutron-server: {e}"),
        })?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// FNV-1a: stable across Rust releases, unlike the standard library's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = fnv::FnvHasher::default();
    hash.write(bytes);
    hash.finish()
}

/// Runs a setup command to its end, its output appended to `log`; fails with the log's tail.
fn run(program: &Path, args: &[String], log: &Path) -> Result<()> {
    let mut command = Command::new(program);
    command.args(args);
    run_with_input(command, "", log, &program.display().to_string(), Output::Log).map(drop)
}

/// Whether a command's output may go to its log: not when it holds a secret.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Output {
    Log,
    Secret,
}

/// Runs `command` with `input` on its stdin; returns its stdout, and appends its stderr (and
/// stdout, unless it is [`Output::Secret`]) to `log`.
fn run_with_input(
    mut command: Command,
    input: &str,
    log: &Path,
    what: &str,
    logged: Output,
) -> Result<String> {
    if let Some(parent) = log.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::Toolchain {
            component: "openstack".into(),
            message: format!("starting {what}: {e}"),
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input.as_bytes());
    }
    let output = child.wait_with_output().map_err(|e| Error::io(log, e))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let mut file = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| Error::io(log, e))?;
    let shown = match logged {
        Output::Log => stdout.as_str(),
        Output::Secret => "(its output holds a secret: not logged)\n",
    };
    // The program and its arguments, not the environment, which may carry a secret.
    let line = std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| format!("{part:?}"))
        .collect::<Vec<_>>()
        .join(" ");
    let _ = writeln!(file, "$ {line}\n{shown}{stderr}");
    if !output.status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
        return Err(Error::Toolchain {
            component: "openstack".into(),
            message: format!(
                "{what} failed ({}); see {}:\n{}",
                output.status,
                log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ),
        });
    }
    Ok(stdout)
}

fn current_user() -> String {
    Command::new("id")
        .arg("-un")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "root".into())
}

/// Passwords made for this test bed, never written anywhere but its own folder.
struct Secrets {
    admin: String,
    neutron: String,
    member: String,
}

impl Secrets {
    fn new() -> Result<Self> {
        let path = Path::new("/dev/urandom");
        let mut bytes = [0u8; 48];
        std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut bytes))
            .map_err(|e| Error::io(path, e))?;
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        Ok(Self {
            admin: hex(&bytes[..16]),
            neutron: hex(&bytes[16..32]),
            member: hex(&bytes[32..]),
        })
    }
}

/// A gunicorn serving `module:application` on loopback with one worker and one thread: with
/// sqlite, parallel requests get "database is locked".
fn gunicorn_args(dir: &Path, port: u16, module: &str) -> Vec<String> {
    vec![
        "-m".into(),
        "gunicorn".into(),
        format!("--chdir={}", dir.display()),
        format!("--bind=127.0.0.1:{port}"),
        "--workers=1".into(),
        "--threads=1".into(),
        // The first request after a start loads much; do not kill the worker for it.
        "--timeout=120".into(),
        "--graceful-timeout=5".into(),
        "--access-logfile=-".into(),
        "--error-logfile=-".into(),
        format!("{module}:application"),
    ]
}

/// The WSGI entry module: Keystone's and Neutron's applications parse `sys.argv` with
/// oslo.config when imported, and would refuse gunicorn's own arguments; their configuration
/// files are named by environment variables.
fn write_entry(path: &Path, service: &str, dir: &Path, files: &str, module: &str) -> Result<()> {
    let text = format!(
        "import os\nimport sys\n\nsys.argv[1:] = []\n\
         os.environ[\"OS_{service}_CONFIG_DIR\"] = {dir:?}\n\
         os.environ[\"OS_{service}_CONFIG_FILES\"] = {files:?}\n\n\
         from {module} import application  # noqa: E402,F401\n",
        dir = dir.display().to_string(),
    );
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

fn write_keystone_config(dir: &Path) -> Result<PathBuf> {
    let keys = dir.join("fernet-keys");
    let credentials = dir.join("credential-keys");
    for folder in [&keys, &credentials] {
        std::fs::create_dir_all(folder).map_err(|e| Error::io(folder, e))?;
    }
    let text = format!(
        "[database]\nconnection = sqlite:///{db}\n\n\
         [token]\nprovider = fernet\nexpiration = {TOKEN_LIFETIME_SECONDS}\n\n\
         [fernet_tokens]\nkey_repository = {keys}\n\n\
         [fernet_receipts]\nkey_repository = {keys}\n\n\
         [credential]\nkey_repository = {credentials}\n",
        db = dir.join("keystone.db").display(),
        keys = keys.display(),
        credentials = credentials.display(),
    );
    let path = dir.join("keystone.conf");
    write_private(&path, &text)?;
    Ok(path)
}

/// The most items neutron-server answers a list with: small, so that every test that lists
/// more pages through the answer as a large cloud makes a client do.
pub const PAGE_LIMIT: usize = 50;

fn write_neutron_config(dir: &Path, venv: &Path, keystone_url: &str, password: &str) -> Result<()> {
    let state = dir.join("neutron-state");
    let locks = dir.join("neutron-locks");
    for folder in [&state, &locks] {
        std::fs::create_dir_all(folder).map_err(|e| Error::io(folder, e))?;
    }
    let keystone = keystone_url.trim_end_matches("/v3");
    // No agents and no message broker: Neutron keeps networks and subnets in its database,
    // which is what the operator manages.
    let neutron = format!(
        "[DEFAULT]\ncore_plugin = ml2\nservice_plugins =\nauth_strategy = keystone\n\
         transport_url = fake://\n\
         notify_nova_on_port_status_changes = false\nnotify_nova_on_port_data_changes = false\n\
         dhcp_agent_notification = false\napi_paste_config = {paste}\nstate_path = {state}\n\
         pagination_max_limit = {PAGE_LIMIT}\n\n\
         [database]\nconnection = sqlite:///{db}\n\n\
         [oslo_concurrency]\nlock_path = {locks}\n\n\
         [keystone_authtoken]\nwww_authenticate_uri = {keystone}\nauth_url = {keystone}\n\
         auth_type = password\nusername = neutron\npassword = {password}\nproject_name = service\n\
         user_domain_name = Default\nproject_domain_name = Default\n\
         token_cache_time = {TOKEN_CACHE_SECONDS}\n",
        paste = venv.join("etc/neutron/api-paste.ini").display(),
        state = state.display(),
        db = dir.join("neutron.db").display(),
        locks = locks.display(),
    );
    let ml2 = "[ml2]\ntype_drivers = local,flat,vlan,vxlan\ntenant_network_types = local\n\
               mechanism_drivers =\nextension_drivers =\n";
    for (name, text) in [("neutron.conf", neutron.as_str()), ("ml2_conf.ini", ml2)] {
        write_private(&dir.join(name), text)?;
    }
    Ok(())
}

/// The clouds.yaml being written, one cloud at a time.
struct Clouds {
    auth_url: String,
    clouds: serde_json::Map<String, serde_json::Value>,
}

impl Clouds {
    fn new(auth_url: &str) -> Self {
        Self {
            auth_url: auth_url.to_owned(),
            clouds: Default::default(),
        }
    }

    fn password(&mut self, cloud: &str, user: &str, password: &str, project: &str) {
        self.add(
            cloud,
            "password",
            serde_json::json!({
                "auth_url": self.auth_url,
                "username": user,
                "password": password,
                "project_name": project,
                "user_domain_name": "Default",
                "project_domain_name": "Default",
            }),
        );
    }

    fn application_credential(&mut self, cloud: &str, id: &str, secret: &str) {
        self.add(
            cloud,
            "v3applicationcredential",
            serde_json::json!({
                "auth_url": self.auth_url,
                "application_credential_id": id,
                "application_credential_secret": secret,
            }),
        );
    }

    fn add(&mut self, cloud: &str, auth_type: &str, auth: serde_json::Value) {
        self.clouds.insert(
            cloud.to_owned(),
            serde_json::json!({
                "auth_type": auth_type,
                "auth": auth,
                "region_name": REGION,
                "interface": "public",
                "identity_api_version": 3,
            }),
        );
    }

    fn write(&self, path: &Path) -> Result<()> {
        let yaml = serde_yaml::to_string(&serde_json::json!({ "clouds": self.clouds })).map_err(|e| {
            Error::Encode {
                what: "clouds.yaml".into(),
                message: e.to_string(),
            }
        })?;
        write_private(path, &yaml)
    }
}

fn ready(url: &str, path: &str) -> std::result::Result<Option<()>, String> {
    match http_status(url, path)? {
        200 => Ok(Some(())),
        status => Err(format!("HTTP {status}")),
    }
}

/// The status of a `GET` of `path` under `url` on loopback.
fn http_status(url: &str, path: &str) -> std::result::Result<u16, String> {
    let rest = url.strip_prefix("http://").ok_or("not an http URL")?;
    let (authority, base) = rest.split_once('/').unwrap_or((rest, ""));
    let target = format!("/{base}{path}").replace("//", "/");
    let answer = http::get(&format!("http://{authority}{target}"), Duration::from_secs(5));
    Ok(answer.map_err(|e| e.to_string())?.status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_venv_key_is_stable() {
        // The cache folder's name must not change with the Rust release.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
