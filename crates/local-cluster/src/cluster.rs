//! Starting, inspecting and stopping the local control plane.
//!
//! `up` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok as local
//! processes on free loopback ports, writes an admin kubeconfig to `<run dir>/kubeconfig`,
//! registers a few fake nodes that kwok keeps Ready and returns once the apiserver is ready and
//! the nodes are Ready; `up_with` can start etcd and kube-apiserver alone. `down` stops exactly
//! the processes `up` recorded.
//!
//! etcd serves HTTPS only and answers only clients with a certificate from its own CA (the
//! apiserver's, and the tooling's for its health check): whoever can write to etcd can run a
//! privileged Pod, so neither a local user without the keys (0600) nor any identity of the
//! cluster CA may reach it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, ListParams, PostParams};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::kubeconfig::write_kubeconfig;
use crate::lock::FileLock;
use crate::network::SERVICE_CIDR;
use crate::paths;
use crate::pki::{self, Pki};
use crate::process::{Component, free_port};
use crate::state_file::StateFile;
use crate::toolchain::{self, Binaries};
use crate::wait::wait_for;

/// How many fake nodes `up` registers.
pub const NODES: usize = 3;
/// How long `up` waits for a cluster whose processes all run to answer `/readyz` before it
/// starts a new one in its place.
const REUSE_PATIENCE: Duration = Duration::from_secs(90);

/// The annotation that marks the nodes kwok plays.
const FAKE_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// What `up` recorded about the running cluster, kept in `<run dir>/state.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub server: String,
    pub kubernetes_version: String,
    /// `None` in a state recorded by a version whose etcd served plain HTTP to anyone: `up`
    /// starts such a cluster anew rather than reuse it, as it does one whose etcd trusted the
    /// cluster CA (see [`Etcd::has_own_ca`]).
    #[serde(default)]
    pub etcd: Option<Etcd>,
    pub components: Vec<Component>,
}

/// How the tooling reaches etcd: its client URL (`https://127.0.0.1:<port>`), the CA that signed
/// its certificate and the tooling's client certificate, without which etcd answers nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Etcd {
    pub url: String,
    pub tls: crate::http::Tls,
}

impl Etcd {
    fn new(pki: &Pki, port: u16) -> Self {
        Self {
            url: format!("https://127.0.0.1:{port}"),
            tls: crate::http::Tls {
                ca: pki.etcd_ca_cert(),
                client: Some(crate::http::ClientFiles {
                    cert: pki.client_cert(&pki::ETCD_HEALTHCHECK_CLIENT),
                    key: pki.client_key(&pki::ETCD_HEALTHCHECK_CLIENT),
                }),
            },
        }
    }

    /// Whether etcd trusts a CA of its own: an older version's trusted the cluster CA.
    fn has_own_ca(&self) -> bool {
        self.tls.ca.file_name().is_some_and(|name| name == "etcd-ca.crt")
    }

    /// etcd's client port.
    pub fn port(&self) -> Option<u16> {
        self.url.rsplit_once(':')?.1.parse().ok()
    }
}

/// What [`LocalCluster::up_with`] starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpOptions<'a> {
    /// Only etcd and kube-apiserver: no controller-manager, scheduler, kwok or nodes, so nothing
    /// else uses the CPU while a benchmark measures a controller against the apiserver. Pods are
    /// never scheduled, and neither garbage collection nor namespace deletion happens.
    pub apiserver_only: bool,
    /// Sized for hundreds of thousands of objects (the benchmark's 100,000 Foos and as many
    /// Deployments): etcd may grow to 8 GiB instead of 2, and the apiserver takes twice the
    /// default requests in flight.
    pub large: bool,
    /// A real node beside the kwok nodes (containerd, runc, kubelet, kube-proxy, Multus): see
    /// [`crate::node`]. Needs root; a running cluster without one gets it added.
    pub real_node: bool,
    /// Leave the apiserver's `ShardedListAndWatch` feature gate (KEP-5866, alpha) off, as on
    /// clusters that have not turned it on: a `shardSelector` is then ignored, and a sharded
    /// operator must filter on its own side.
    pub without_sharded_lists: bool,
    /// Start etcd on a copy of this data folder, which [`LocalCluster::down_keeping_etcd`] kept,
    /// instead of an empty one: what it holds is in the cluster from the start, as after a
    /// restart. A benchmark creates its objects once and starts every run from them.
    pub etcd_data: Option<&'a Path>,
    /// Serve the apiserver's `/debug/pprof` (off otherwise, as recommended for production): the
    /// benchmark's profile reads the apiserver's own CPU profile there, since the binary built
    /// here has no symbol table for perf.
    pub profiling: bool,
}

impl UpOptions<'_> {
    /// Whether a cluster that `up` recorded was started with these options, by a version whose
    /// etcd requires client certificates of its own CA. One asked to start from kept data never
    /// is: a running cluster holds whatever happened since.
    fn started(&self, state: &State) -> bool {
        let has_controller_manager = state
            .components
            .iter()
            .any(|c| c.name == "kube-controller-manager");
        let sharded_lists = state
            .components
            .iter()
            .filter(|c| c.name == "kube-apiserver")
            .any(|c| c.args.iter().any(|a| a == SHARDED_LISTS_GATE));
        let profiling = state
            .components
            .iter()
            .filter(|c| c.name == "kube-apiserver")
            .any(|c| c.args.iter().any(|a| a == "--profiling=true"));
        self.etcd_data.is_none()
            && state.etcd.as_ref().is_some_and(Etcd::has_own_ca)
            && has_controller_manager != self.apiserver_only
            && sharded_lists != self.without_sharded_lists
            && profiling == self.profiling
    }
}

/// A handle to the local cluster's folder.
#[derive(Clone, Debug)]
pub struct LocalCluster {
    dir: PathBuf,
}

impl Default for LocalCluster {
    fn default() -> Self {
        Self::new(paths::run_dir())
    }
}

impl LocalCluster {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The admin kubeconfig (user `kubernetes-admin`, group `system:masters`).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    fn state_file(&self) -> StateFile<State> {
        StateFile::in_dir(&self.dir, "state")
    }

    fn lock(&self) -> Result<FileLock> {
        FileLock::acquire(&self.dir.with_extension("lock"))
    }

    /// The recorded state, if a cluster was started here.
    pub fn state(&self) -> Option<State> {
        self.state_file().load()
    }

    /// The client configuration of the admin kubeconfig.
    pub async fn config(&self) -> Result<kube::Config> {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.kubeconfig())?;
        Ok(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?)
    }

    /// A client with the admin kubeconfig.
    pub async fn client(&self) -> Result<kube::Client> {
        Ok(kube::Client::try_from(self.config().await?)?)
    }

    /// Whether every process of `state` runs and the apiserver answers `/readyz` within
    /// `patience`: a loaded machine's apiserver may miss one `/readyz`, and a cluster whose
    /// processes all run is not wiped for that (the tests' own `up` would take the real node,
    /// the test bed and every other test's objects with it).
    async fn answers_within(&self, state: &State, patience: Duration) -> bool {
        let deadline = std::time::Instant::now() + patience;
        let Ok(client) = self.client().await else {
            return false;
        };
        loop {
            if !state.components.iter().all(Component::is_running) {
                return false;
            }
            match readyz(&client).await {
                Ok(()) => return true,
                Err(e) if std::time::Instant::now() >= deadline => {
                    tracing::warn!(error = %e, "the running cluster does not answer /readyz");
                    return false;
                }
                Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
            }
        }
    }

    /// Whether every recorded process runs and the apiserver answers `/readyz`.
    pub async fn is_healthy(&self) -> bool {
        let Some(state) = self.state() else { return false };
        if !state.components.iter().all(Component::is_running) {
            return false;
        }
        match self.client().await {
            Ok(client) => readyz(&client).await.is_ok(),
            Err(_) => false,
        }
    }

    /// Starts the cluster, or returns at once when a healthy one already runs here. Builds the
    /// binaries first when they are not cached.
    pub async fn up(&self) -> Result<State> {
        self.up_with(UpOptions::default()).await
    }

    /// [`up`](Self::up) with options. A healthy cluster that was started with other options, or
    /// by a version whose etcd took clients without certificates, is stopped and started anew.
    pub async fn up_with(&self, options: UpOptions<'_>) -> Result<State> {
        self.up_picking_ports(options, &mut free_port).await
    }

    /// [`up_with`](Self::up_with), taking each component's port from `pick` (a free one in
    /// `up_with`). A port is free when picked but the component binds it later, so another
    /// program can take it in between: then the cluster is started again on ports picked anew,
    /// up to [`PORT_ATTEMPTS`](crate::process::PORT_ATTEMPTS) times. A test picks a taken port to see that happen.
    #[doc(hidden)]
    pub async fn up_picking_ports(
        &self,
        options: UpOptions<'_>,
        pick: &mut (dyn FnMut() -> Result<u16> + Send),
    ) -> Result<State> {
        let binaries = tokio::task::spawn_blocking(toolchain::ensure)
            .await
            .map_err(|e| Error::Toolchain {
                component: "toolchain".into(),
                message: e.to_string(),
            })??;
        let node_binaries = if options.real_node {
            let problems = crate::node::preflight(&self.dir);
            if !problems.is_empty() {
                return Err(Error::Preflight(problems));
            }
            Some(
                tokio::task::spawn_blocking(toolchain::node)
                    .await
                    .map_err(|e| Error::Toolchain {
                        component: "toolchain".into(),
                        message: e.to_string(),
                    })??,
            )
        } else {
            None
        };
        let _lock = self.lock()?;
        if let Some(state) = self.state().filter(|state| options.started(state))
            && self.answers_within(&state, REUSE_PATIENCE).await
        {
            if let Some(bin) = &node_binaries
                && !self.node().is_running()
            {
                self.add_node(&state, bin).await?;
            }
            return Ok(state);
        }
        crate::process::on_free_ports(async || {
            // Whatever is left of an earlier cluster (a crash, a reboot, the attempt before) is
            // stopped and wiped.
            self.wipe()?;
            std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;

            let mut started = Vec::new();
            let mut result = self.start(&binaries, options, pick, &mut started).await;
            if let (Ok(state), Some(bin)) = (&result, &node_binaries) {
                result = self.add_node(state, bin).await.map(|()| state.clone());
            }
            if result.is_err() {
                if let Err(e) = self.node().down() {
                    tracing::warn!(error = %e, "stopping the real node");
                }
                for component in started.iter().rev() {
                    component.stop(Duration::from_secs(5));
                }
            }
            result
        })
        .await
    }

    /// The real node's handle (whether or not one runs).
    pub fn node(&self) -> crate::node::RealNode {
        crate::node::RealNode::new(&self.dir)
    }

    /// The cluster's certificates; the CA key among them signs a real node's identities.
    fn pki(&self) -> Pki {
        Pki {
            dir: self.dir.join("pki"),
        }
    }

    async fn add_node(&self, state: &State, bin: &toolchain::NodeBinaries) -> Result<()> {
        let client = self.client().await?;
        let node = self.node();
        if let Err(e) = node.down() {
            tracing::warn!(error = %e, "clearing an earlier real node");
        }
        node.up(&self.pki(), &state.server, &client, bin).await
    }

    /// Stops the real node, the OpenStack test bed and the recorded processes, and removes
    /// the folder; refuses to remove it while anything is still mounted under it (a Pod's
    /// host path mount would take host files with it).
    fn wipe(&self) -> Result<()> {
        let node = self.node().down();
        self.stop_openstack();
        self.stop_recorded();
        // The node's record is what the next `down` finishes from: the folder stays with it.
        if let Err(e) = node {
            return Err(Error::Node(format!(
                "{e}\nThe cluster's folder {} is kept with the node's record: run `cargo xtask \
                 cluster down` again once that is dealt with",
                self.dir.display()
            )));
        }
        if self.dir.exists() {
            if let Some(mount) = crate::node::mounts_under(&self.dir).first() {
                return Err(Error::Node(format!(
                    "{} is still mounted; unmount it before removing {}",
                    mount.display(),
                    self.dir.display()
                )));
            }
            std::fs::remove_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        }
        Ok(())
    }

    async fn start(
        &self,
        bin: &Binaries,
        options: UpOptions<'_>,
        pick: &mut (dyn FnMut() -> Result<u16> + Send),
        started: &mut Vec<Component>,
    ) -> Result<State> {
        // A new CA and every certificate each time: `up` starts in a folder it has just wiped,
        // so no older cluster's PKI (one without etcd's certificates, say) is ever reused.
        let pki = pki::generate(
            &self.dir.join("pki"),
            &[
                &pki::ADMIN,
                &pki::CONTROLLER_MANAGER,
                &pki::SCHEDULER,
                &pki::KWOK,
                &pki::APISERVER_KUBELET_CLIENT,
            ],
        )?;
        let logs = self.logs_dir();
        let etcd_port = pick()?;
        let etcd_peer_port = pick()?;
        let apiserver_port = pick()?;
        let server = format!("https://127.0.0.1:{apiserver_port}");
        let etcd_access = Etcd::new(&pki, etcd_port);
        let record = |started: &mut Vec<Component>, c: Component| -> Result<()> {
            started.push(c);
            self.state_file().save(&State {
                server: server.clone(),
                kubernetes_version: bin.kubernetes_version.clone(),
                etcd: Some(etcd_access.clone()),
                components: started.clone(),
            })
        };

        if let Some(kept) = options.etcd_data {
            copy_etcd_data(kept, &self.dir.join("etcd"))?;
        }
        let etcd = Component::start(
            "etcd",
            &bin.etcd,
            &etcd_args(
                &pki,
                &self.dir.join("etcd"),
                etcd_port,
                etcd_peer_port,
                options.large,
            ),
            &logs,
        )?;
        record(started, etcd.clone())?;
        wait_for(
            "etcd to answer /health",
            Duration::from_secs(30),
            started,
            || async { etcd_health(&etcd_access) },
        )
        .await?;

        let apiserver = Component::start(
            "kube-apiserver",
            &bin.kube_apiserver,
            &apiserver_args(&pki, &self.dir, etcd_port, apiserver_port, &options),
            &logs,
        )?;
        record(started, apiserver)?;
        write_kubeconfig(&self.kubeconfig(), &server, &pki, &pki::ADMIN)?;
        let client = self.client().await?;
        wait_for(
            "kube-apiserver to answer /readyz",
            Duration::from_secs(120),
            started,
            || async { readyz(&client).await.map(Some) },
        )
        .await?;
        if options.apiserver_only {
            return self.state().ok_or(Error::NotRunning);
        }

        for (name, id, binary) in [
            (
                "kube-controller-manager",
                &pki::CONTROLLER_MANAGER,
                &bin.kube_controller_manager,
            ),
            ("kube-scheduler", &pki::SCHEDULER, &bin.kube_scheduler),
        ] {
            let kubeconfig = self.dir.join(format!("{}.kubeconfig", id.file_stem));
            write_kubeconfig(&kubeconfig, &server, &pki, id)?;
            let args = if name == "kube-controller-manager" {
                controller_manager_args(&pki, &kubeconfig, &self.dir, pick()?)
            } else {
                scheduler_args(&kubeconfig, &self.dir, pick()?)
            };
            record(started, Component::start(name, binary, &args, &logs)?)?;
        }

        let kwok_kubeconfig = self.dir.join("kwok.kubeconfig");
        write_kubeconfig(&kwok_kubeconfig, &server, &pki, &pki::KWOK)?;
        let stages = self.dir.join("kwok-stages.yaml");
        write_kwok_stages(&bin.kwok_module_dir, &stages)?;
        let kwok_args = vec![
            format!("--kubeconfig={}", kwok_kubeconfig.display()),
            format!("--config={}", stages.display()),
            // Only the fake nodes: a real node beside them runs its own kubelet.
            format!("--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake"),
            "--node-lease-duration-seconds=40".into(),
            format!("--server-address=127.0.0.1:{}", pick()?),
        ];
        record(started, Component::start("kwok", &bin.kwok, &kwok_args, &logs)?)?;

        register_nodes(&client).await?;
        wait_for(
            "the fake nodes to be Ready",
            Duration::from_secs(90),
            started,
            || async { nodes_ready(&client).await },
        )
        .await?;
        // The controller-manager's service-account controller creates `default` in every
        // namespace; Pods cannot be admitted without it.
        wait_for(
            "kube-controller-manager to create the default ServiceAccount",
            Duration::from_secs(90),
            started,
            || async {
                let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
                match sa.get_opt("default").await {
                    Ok(Some(_)) => Ok(Some(())),
                    Ok(None) => Err("no ServiceAccount default/default yet".to_string()),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await?;
        self.state().ok_or(Error::NotRunning)
    }

    /// Stops one component and starts it again with the same arguments, as an outage would;
    /// for the kube-apiserver, waits until it is ready again. For tests of reconnection.
    pub async fn restart(&self, name: &str) -> Result<()> {
        // Held until the component answers again, so that an `up` meanwhile (another test
        // process's) waits instead of finding a process stopped and wiping the cluster.
        let _lock = self.lock()?;
        let mut state = self.state().ok_or(Error::NotRunning)?;
        let position = state
            .components
            .iter()
            .position(|c| c.name == name)
            .ok_or(Error::NotRunning)?;
        let old = state.components[position].clone();
        if old.args.is_empty() {
            return Err(Error::Restart {
                component: name.into(),
                message: "this cluster was started by an older version that did not record arguments; \
                          restart it with `cargo xtask cluster down && cargo xtask cluster up`"
                    .into(),
            });
        }
        old.stop(Duration::from_secs(10));
        let new = Component::start_with_env(&old.name, &old.binary, &old.args, &old.env, &self.logs_dir())?;
        state.components[position] = new;
        self.state_file().save(&state)?;
        if name == "kube-apiserver" {
            let client = self.client().await?;
            wait_for(
                "kube-apiserver to answer /readyz again",
                Duration::from_secs(120),
                &state.components,
                || async { readyz(&client).await.map(Some) },
            )
            .await?;
        }
        Ok(())
    }

    /// Stops every recorded process (in reverse start order) and removes the run folder.
    /// Stopping a cluster that is not running is not an error.
    pub fn down(&self) -> Result<()> {
        let _lock = self.lock()?;
        self.wipe()
    }

    /// [`LocalCluster::down`], keeping etcd's data folder as `to` (replacing what was there) for
    /// [`UpOptions::etcd_data`]. etcd is stopped first, as `down` stops it (SIGTERM, then
    /// SIGKILL after 10 s; etcd recovers from either), so the folder is whole.
    pub fn down_keeping_etcd(&self, to: &Path) -> Result<()> {
        let _lock = self.lock()?;
        self.stop_recorded();
        let data = self.dir.join("etcd");
        if !data.is_dir() {
            return Err(Error::NotRunning);
        }
        if to.exists() {
            std::fs::remove_dir_all(to).map_err(|e| Error::io(to, e))?;
        }
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
        }
        if std::fs::rename(&data, to).is_err() {
            // Another file system: a copy does it.
            copy_etcd_data(&data, to)?;
        }
        self.wipe()
    }

    /// The OpenStack test bed lives in this folder too: it goes with the cluster.
    fn stop_openstack(&self) {
        if let Err(e) = crate::openstack::OpenStack::new(self.dir.clone()).down() {
            tracing::warn!(error = %e, "stopping the OpenStack test bed");
        }
    }

    fn stop_recorded(&self) {
        if let Some(state) = self.state() {
            for component in state.components.iter().rev() {
                component.stop(Duration::from_secs(10));
            }
        }
    }
}

/// Copies etcd's data folder `from` to `to`, folders readable by their owner only, as etcd
/// requires of its own.
fn copy_etcd_data(from: &Path, to: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(to)
        .map_err(|e| Error::io(to, e))?;
    for entry in std::fs::read_dir(from).map_err(|e| Error::io(from, e))? {
        let entry = entry.map_err(|e| Error::io(from, e))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type().map_err(|e| Error::io(&source, e))?.is_dir() {
            copy_etcd_data(&source, &target)?;
        } else {
            std::fs::copy(&source, &target).map_err(|e| Error::io(&source, e))?;
        }
    }
    Ok(())
}

/// etcd on loopback, HTTPS only: clients (the apiserver, the health check) and peers (none, in
/// a cluster of one member, but the port is open) must present a certificate from the etcd CA.
/// Only paths reach the arguments, never a key.
fn etcd_args(pki: &Pki, data_dir: &Path, port: u16, peer_port: u16, large: bool) -> Vec<String> {
    let client = format!("https://127.0.0.1:{port}");
    let peer = format!("https://127.0.0.1:{peer_port}");
    let quota = if large { 8u64 << 30 } else { 2u64 << 30 };
    let ca = pki.etcd_ca_cert();
    vec![
        format!("--quota-backend-bytes={quota}"),
        "--name=local".into(),
        format!("--data-dir={}", data_dir.display()),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--cert-file={}", pki.etcd_server_cert().display()),
        format!("--key-file={}", pki.etcd_server_key().display()),
        "--client-cert-auth=true".into(),
        format!("--trusted-ca-file={}", ca.display()),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=local={peer}"),
        format!("--peer-cert-file={}", pki.etcd_peer_cert().display()),
        format!("--peer-key-file={}", pki.etcd_peer_key().display()),
        "--peer-client-cert-auth=true".into(),
        format!("--peer-trusted-ca-file={}", ca.display()),
        // A throwaway cluster: durability is not worth an fsync per write.
        "--unsafe-no-fsync=true".into(),
        "--auto-compaction-mode=periodic".into(),
        "--auto-compaction-retention=5m".into(),
        "--log-level=warn".into(),
    ]
}

fn etcd_health(etcd: &Etcd) -> std::result::Result<Option<()>, String> {
    let url = format!("{}/health", etcd.url);
    let body = crate::http::get_with(&url, Duration::from_secs(2), Some(&etcd.tls))
        .map_err(|e| e.to_string())?
        .body;
    if body.contains("\"health\":\"true\"") {
        Ok(Some(()))
    } else {
        Err(body)
    }
}

/// KEP-5866's server-side sharded list and watch, alpha in Kubernetes 1.36: what a sharded
/// operator's watches ask for.
const SHARDED_LISTS_GATE: &str = "--feature-gates=ShardedListAndWatch=true";

fn apiserver_args(pki: &Pki, dir: &Path, etcd_port: u16, port: u16, options: &UpOptions) -> Vec<String> {
    let (inflight, mutating) = if options.large { (800, 400) } else { (400, 200) };
    let mut args = apiserver_base_args(pki, dir, etcd_port, port, inflight, mutating);
    if !options.without_sharded_lists {
        args.push(SHARDED_LISTS_GATE.into());
    }
    args.push(format!("--profiling={}", options.profiling));
    args
}

fn apiserver_base_args(
    pki: &Pki,
    dir: &Path,
    etcd_port: u16,
    port: u16,
    inflight: u32,
    mutating: u32,
) -> Vec<String> {
    vec![
        format!("--max-requests-inflight={inflight}"),
        format!("--max-mutating-requests-inflight={mutating}"),
        format!("--etcd-servers=https://127.0.0.1:{etcd_port}"),
        format!("--etcd-cafile={}", pki.etcd_ca_cert().display()),
        format!(
            "--etcd-certfile={}",
            pki.client_cert(&pki::APISERVER_ETCD_CLIENT).display()
        ),
        format!(
            "--etcd-keyfile={}",
            pki.client_key(&pki::APISERVER_ETCD_CLIENT).display()
        ),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", dir.join("apiserver").display()),
        format!("--tls-cert-file={}", pki.serving_cert().display()),
        format!("--tls-private-key-file={}", pki.serving_key().display()),
        format!("--client-ca-file={}", pki.ca_cert().display()),
        "--authorization-mode=Node,RBAC".into(),
        // A kubelet may change only its own Node and the Pods bound to it.
        "--enable-admission-plugins=NodeRestriction".into(),
        // How the apiserver reaches a real node's kubelet: by its InternalIP (no name lookup),
        // with a client certificate the kubelet's webhook authorizer accepts, checking the
        // kubelet's serving certificate against the cluster CA.
        "--kubelet-preferred-address-types=InternalIP".into(),
        format!(
            "--kubelet-client-certificate={}",
            pki.client_cert(&pki::APISERVER_KUBELET_CLIENT).display()
        ),
        format!(
            "--kubelet-client-key={}",
            pki.client_key(&pki::APISERVER_KUBELET_CLIENT).display()
        ),
        format!("--kubelet-certificate-authority={}", pki.ca_cert().display()),
        "--anonymous-auth=false".into(),
        format!(
            "--service-account-key-file={}",
            pki.service_account_pub().display()
        ),
        format!(
            "--service-account-signing-key-file={}",
            pki.service_account_key().display()
        ),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--allow-privileged=true".into(),
        // Loopback addresses are not valid endpoints, so the `kubernetes` Service gets none.
        "--endpoint-reconciler-type=none".into(),
        "--v=1".into(),
    ]
}

fn controller_manager_args(pki: &Pki, kubeconfig: &Path, dir: &Path, port: u16) -> Vec<String> {
    let kubeconfig = kubeconfig.display();
    vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", dir.join("controller-manager").display()),
        format!("--root-ca-file={}", pki.ca_cert().display()),
        format!(
            "--service-account-private-key-file={}",
            pki.service_account_key().display()
        ),
        "--use-service-account-credentials=true".into(),
        "--leader-elect=false".into(),
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".into(),
        "--v=1".into(),
    ]
}

fn scheduler_args(kubeconfig: &Path, dir: &Path, port: u16) -> Vec<String> {
    let kubeconfig = kubeconfig.display();
    vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--authentication-kubeconfig={kubeconfig}"),
        format!("--authorization-kubeconfig={kubeconfig}"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", dir.join("scheduler").display()),
        "--leader-elect=false".into(),
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics".into(),
        "--v=1".into(),
    ]
}

/// Since v0.8.0 kwok has no built-in stages; its module ships them. Nodes are initialised and
/// kept Ready with a lease, Pods become Ready at once, Job Pods complete, and deleted Pods go.
fn write_kwok_stages(kwok_module: &Path, dest: &Path) -> Result<()> {
    let stage_dir = kwok_module.join("kustomize/stage");
    let mut all = String::new();
    for file in [
        "node/fast/node-initialize.yaml",
        "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
        "pod/fast/pod-ready.yaml",
        "pod/fast/pod-complete.yaml",
        "pod/fast/pod-delete.yaml",
    ] {
        let path = stage_dir.join(file);
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        all.push_str("---\n");
        all.push_str(&text);
        all.push('\n');
    }
    std::fs::write(dest, all).map_err(|e| Error::io(dest, e))
}

async fn readyz(client: &kube::Client) -> std::result::Result<(), String> {
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    match client.request_text(request).await {
        Ok(body) if body.trim() == "ok" => Ok(()),
        Ok(body) => Err(body),
        Err(e) => Err(e.to_string()),
    }
}

/// Fake nodes: no taints, so workloads without tolerations (an nginx Deployment) schedule.
fn fake_node(name: &str) -> Node {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": { FAKE_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0" },
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "spec": {},
    }))
    .expect("a valid Node")
}

async fn register_nodes(client: &kube::Client) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    for i in 0..NODES {
        let name = format!("kwok-node-{i}");
        match nodes.create(&PostParams::default(), &fake_node(&name)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

async fn nodes_ready(client: &kube::Client) -> std::result::Result<Option<()>, String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    let ready = list
        .items
        .iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count();
    if ready >= NODES {
        Ok(Some(()))
    } else {
        Err(format!("{ready} of {NODES} nodes Ready"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_of(names: &[&str]) -> State {
        State {
            server: "https://127.0.0.1:6443".into(),
            kubernetes_version: "v1.36.3".into(),
            etcd: Some(Etcd::new(
                &Pki {
                    dir: "/tmp/pki".into(),
                },
                2379,
            )),
            components: names
                .iter()
                .map(|name| Component {
                    name: (*name).into(),
                    pid: 1,
                    binary: PathBuf::from(name),
                    log: PathBuf::from(format!("{name}.log")),
                    args: if *name == "kube-apiserver" {
                        vec![SHARDED_LISTS_GATE.into()]
                    } else {
                        Vec::new()
                    },
                    env: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_large_cluster_gets_more_etcd_and_more_requests_in_flight() {
        let pki = Pki {
            dir: "/tmp/pki".into(),
        };
        let etcd = |large| etcd_args(&pki, Path::new("/tmp/etcd"), 1, 2, large);
        assert!(etcd(false).contains(&"--quota-backend-bytes=2147483648".to_owned()));
        assert!(etcd(true).contains(&"--quota-backend-bytes=8589934592".to_owned()));
        let apiserver = apiserver_args(
            &pki,
            Path::new("/tmp"),
            1,
            2,
            &UpOptions {
                large: true,
                ..Default::default()
            },
        );
        assert!(apiserver.contains(&"--max-requests-inflight=800".to_owned()));
        assert!(apiserver.contains(&"--max-mutating-requests-inflight=400".to_owned()));
    }

    #[test]
    fn the_apiserver_serves_its_profiles_only_when_asked() {
        let pki = Pki {
            dir: "/tmp/pki".into(),
        };
        let profiling = |on| {
            apiserver_args(
                &pki,
                Path::new("/tmp"),
                1,
                2,
                &UpOptions {
                    profiling: on,
                    ..Default::default()
                },
            )
            .into_iter()
            .filter(|a| a.starts_with("--profiling"))
            .collect::<Vec<_>>()
        };
        assert_eq!(profiling(false), ["--profiling=false"]);
        assert_eq!(profiling(true), ["--profiling=true"]);
    }

    #[test]
    fn etcd_serves_only_https_to_clients_and_peers_with_a_certificate_of_its_own_ca() {
        let pki = Pki {
            dir: "/tmp/pki".into(),
        };
        let etcd = etcd_args(&pki, Path::new("/tmp/etcd"), 2379, 2380, false);
        for arg in [
            "--listen-client-urls=https://127.0.0.1:2379",
            "--advertise-client-urls=https://127.0.0.1:2379",
            "--cert-file=/tmp/pki/etcd-server.crt",
            "--key-file=/tmp/pki/etcd-server.key",
            "--client-cert-auth=true",
            "--trusted-ca-file=/tmp/pki/etcd-ca.crt",
            "--listen-peer-urls=https://127.0.0.1:2380",
            "--peer-cert-file=/tmp/pki/etcd-peer.crt",
            "--peer-key-file=/tmp/pki/etcd-peer.key",
            "--peer-client-cert-auth=true",
            "--peer-trusted-ca-file=/tmp/pki/etcd-ca.crt",
        ] {
            assert!(etcd.contains(&arg.to_owned()), "{arg} not in {etcd:?}");
        }
        assert!(!etcd.iter().any(|a| a.contains("http://")), "{etcd:?}");
        // A flag that would let etcd accept any certificate, or none, is not there.
        assert!(
            !etcd
                .iter()
                .any(|a| a.starts_with("--auto-tls") || a.starts_with("--peer-auto-tls")),
            "{etcd:?}"
        );

        let apiserver = apiserver_args(&pki, Path::new("/tmp"), 2379, 6443, &UpOptions::default());
        for arg in [
            "--etcd-servers=https://127.0.0.1:2379",
            "--etcd-cafile=/tmp/pki/etcd-ca.crt",
            "--etcd-certfile=/tmp/pki/apiserver-etcd-client.crt",
            "--etcd-keyfile=/tmp/pki/apiserver-etcd-client.key",
        ] {
            assert!(apiserver.contains(&arg.to_owned()), "{arg} not in {apiserver:?}");
        }
        assert!(!apiserver.iter().any(|a| a.contains("http://")), "{apiserver:?}");

        let access = Etcd::new(&pki, 2379);
        assert_eq!(
            (access.url.as_str(), access.port()),
            ("https://127.0.0.1:2379", Some(2379))
        );
        let client = access.tls.client.expect("a client certificate");
        assert_eq!(
            (client.cert, client.key),
            (
                PathBuf::from("/tmp/pki/etcd-healthcheck-client.crt"),
                PathBuf::from("/tmp/pki/etcd-healthcheck-client.key")
            )
        );
    }

    /// A cluster recorded before etcd required client certificates has no `etcd` in its state;
    /// `up` must not reuse it, whatever its options.
    #[test]
    fn a_cluster_whose_etcd_took_anyone_is_not_reused() {
        let old: State = serde_json::from_value(serde_json::json!({
            "server": "https://127.0.0.1:6443",
            "kubernetes_version": "v1.36.3",
            "components": [],
        }))
        .unwrap();
        assert!(old.etcd.is_none());
        let mut full = state_of(&["etcd", "kube-apiserver", "kube-controller-manager"]);
        assert!(UpOptions::default().started(&full));
        full.etcd = None;
        assert!(!UpOptions::default().started(&full));
        // Nor one whose etcd trusted the cluster CA.
        let mut shared_ca = state_of(&["etcd", "kube-apiserver", "kube-controller-manager"]);
        shared_ca.etcd.as_mut().unwrap().tls.ca = "/tmp/pki/ca.crt".into();
        assert!(!UpOptions::default().started(&shared_ca));
    }

    #[test]
    fn a_running_cluster_is_reused_only_when_started_with_the_same_options() {
        let full = state_of(&[
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        ]);
        let apiserver_only = state_of(&["etcd", "kube-apiserver"]);
        let only = UpOptions {
            apiserver_only: true,
            ..UpOptions::default()
        };
        assert!(UpOptions::default().started(&full));
        assert!(!UpOptions::default().started(&apiserver_only));
        assert!(only.started(&apiserver_only));
        assert!(!only.started(&full));
        // Nor one started with the other setting of the sharded lists' gate.
        let without = UpOptions {
            without_sharded_lists: true,
            ..UpOptions::default()
        };
        assert!(!without.started(&full));
        let mut gate_off = full.clone();
        gate_off.components[1].args.clear();
        assert!(without.started(&gate_off));
        assert!(!UpOptions::default().started(&gate_off));
        // Nor one that serves its profiles, or does not, against what is asked.
        let profiling = UpOptions {
            profiling: true,
            ..UpOptions::default()
        };
        assert!(!profiling.started(&full));
        let mut profiled = full.clone();
        profiled.components[1].args.push("--profiling=true".into());
        assert!(profiling.started(&profiled));
        assert!(!UpOptions::default().started(&profiled));
    }
}
