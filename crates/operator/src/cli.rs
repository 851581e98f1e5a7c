//! The command line: one clap `Args` struct per command, with environment fallbacks.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::{ResourceRequirements, SecurityContext};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::network::BackendConfig;
use crate::network::backend::neutron::NeutronConfig;
use crate::network::backend::neutron::client::CloudSource;
use crate::network::policy::AddressPolicy;
use crate::runtime::events::EventLevel;
use crate::runtime::leader::{LeaseConfig, Outcome};
use crate::runtime::requests::RequestCounter;
use crate::runtime::server::MetricsAccess;
use crate::runtime::server::auth::Authorizer;
use crate::runtime::sharding::layer::Selectors;
use crate::runtime::sharding::membership::ShardConfig;
use crate::runtime::transport::HttpVersion;
use crate::runtime::watch::{InitialList, InitialListChoice};
use crate::runtime::{RuntimeConfig, Supervised, Telemetry};
use crate::{ControllerName, RunConfig, foo};
use sample_operator_api::ip::IpPrefix;

#[derive(Parser, Debug)]
#[command(
    name = "sample-operator",
    version,
    about = "Kubernetes controllers for Network, Foo and MyCustomResource"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the controllers against a cluster.
    Run(Box<RunArgs>),
    /// Print the CustomResourceDefinitions as multi-document YAML: those installed by default,
    /// or with --example-com the Foo of the example.com group.
    Crd {
        /// Print the CRD of the example.com Foo (seed 004's group) instead.
        #[arg(long)]
        example_com: bool,
    },
    /// Run on a node (the chart's node clean-up DaemonSet): remove the bridges and address
    /// pools of the Multus backend's Networks that no longer exist, once no Pod uses them, and
    /// report a Multus without namespaceIsolation.
    NodeCleanup(NodeCleanupArgs),
}

/// The node clean-up's settings: in a Pod on the node, with the host's network, its CNI
/// configuration and host-local's data folder mounted.
#[derive(clap::Args, Debug, Clone)]
pub struct NodeCleanupArgs {
    /// The node's name (the downward API's spec.nodeName), for the Event of a Multus without
    /// namespaceIsolation; unset, it is only logged.
    #[arg(long, env = "SAMPLE_OPERATOR_NODE_NAME")]
    pub node_name: Option<String>,
    /// The node's CNI configuration folder, where Multus' configuration is read.
    #[arg(
        long,
        env = "SAMPLE_OPERATOR_CNI_CONF_DIR",
        default_value = "/etc/cni/net.d",
        value_name = "DIR"
    )]
    pub cni_conf_dir: PathBuf,
    /// host-local's data folder, where the Networks' address pools are (its default); empty
    /// leaves the pools alone.
    #[arg(
        long,
        env = "SAMPLE_OPERATOR_CNI_IPAM_DIR",
        default_value = "/var/lib/cni/networks",
        value_name = "DIR"
    )]
    pub cni_ipam_dir: PathBuf,
    /// How often the node's bridges and pools are looked at, in seconds.
    #[arg(long, env = "SAMPLE_OPERATOR_CLEANUP_INTERVAL_SECONDS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub cleanup_interval_seconds: u64,
    /// How long a bridge or pool must stay unused, seen so in passes this far apart, before
    /// it is removed, in seconds.
    #[arg(long, env = "SAMPLE_OPERATOR_CLEANUP_GRACE_SECONDS", default_value_t = 60)]
    pub cleanup_grace_seconds: u64,
}

impl NodeCleanupArgs {
    pub fn settings(&self) -> crate::node_cleanup::Settings {
        crate::node_cleanup::Settings {
            node_name: self.node_name.clone().filter(|n| !n.is_empty()),
            cni_conf_dir: self.cni_conf_dir.clone(),
            ipam_dir: (!self.cni_ipam_dir.as_os_str().is_empty()).then(|| self.cni_ipam_dir.clone()),
            interval: Duration::from_secs(self.cleanup_interval_seconds),
            grace: Duration::from_secs(self.cleanup_grace_seconds),
        }
    }
}

/// Where the cluster is and how to reach it.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ClusterArgs {
    /// Path to a kubeconfig file; without it, $KUBECONFIG, ~/.kube/config or the in-cluster
    /// service account are tried in that order.
    #[arg(long, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use instead of its current one.
    #[arg(long, env = "SAMPLE_OPERATOR_CONTEXT")]
    pub context: Option<String>,
    /// The API server's URL, overriding the kubeconfig's (the tutorials' --master flag).
    #[arg(long, env = "SAMPLE_OPERATOR_MASTER", value_name = "URL")]
    pub master: Option<String>,
}

#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Controllers to run, comma-separated; foo-example (the Foo of the example.com group) runs
    /// only when named, and needs its CRD (deploy/crds/example.com/).
    #[arg(long, env = "SAMPLE_OPERATOR_CONTROLLERS", value_delimiter = ',', default_values_t = ControllerName::defaults(), value_enum)]
    pub controllers: Vec<ControllerName>,
    /// Watch only this namespace; all namespaces when unset.
    #[arg(long, env = "SAMPLE_OPERATOR_NAMESPACE")]
    pub namespace: Option<String>,
    /// Reconciles in flight at once, per controller.
    #[arg(long, env = "SAMPLE_OPERATOR_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Threads that run the controllers (tokio's workers); 0: one per CPU core the process may
    /// use, which with no CPU limit is every core of the node. Two carry thousands of
    /// reconciles, which mostly wait on the API server (docs/benchmark.md#worker-threads).
    #[arg(long, env = "SAMPLE_OPERATOR_WORKER_THREADS", default_value_t = 2, value_parser = clap::value_parser!(u16).range(0..=1024))]
    pub worker_threads: u16,
    /// Also reconcile every object this often, in seconds (0: only on changes).
    #[arg(long, env = "SAMPLE_OPERATOR_RESYNC_SECONDS", default_value_t = 0)]
    pub resync_seconds: u64,
    /// Log filter, such as `info` or `sample_operator=debug,kube=info`.
    #[arg(long, env = "SAMPLE_OPERATOR_LOG", default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(long, env = "SAMPLE_OPERATOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
    /// How each watch fetches its first list: `list` (paged LIST requests, then a watch),
    /// `stream` (one watch that streams the current objects first: Kubernetes' WatchList, on
    /// by default from 1.34), or `auto`: `stream` where the API server serves it, asked once at
    /// start, else `list`.
    #[arg(long, env = "SAMPLE_OPERATOR_INITIAL_LIST", value_enum, default_value_t = InitialListChoice::Auto)]
    pub initial_list: InitialListChoice,
    /// The HTTP version of the connection to the API server: `1.1` (a connection per request
    /// in flight) or `2` (every request multiplexed on one connection, as Go's client-go does;
    /// HTTP/1.1 where the server or a proxy between does not offer HTTP/2): for proxies that
    /// limit connections, at a cost in memory (docs/benchmark.md#http2).
    #[arg(long, env = "SAMPLE_OPERATOR_APISERVER_HTTP", value_enum, default_value_t = HttpVersion::default())]
    pub apiserver_http: HttpVersion,
    /// Which Events to write: `all`, `warnings` (only what needs a person: failures,
    /// conflicts, objects turned unhealthy) or `none`. Status conditions, logs and metrics say
    /// everything either way.
    #[arg(long, env = "SAMPLE_OPERATOR_EVENTS", value_enum, default_value_t = EventLevel::All)]
    pub events: EventLevel,
    /// Address of /metrics. `--http-address`, its name before the probes moved to their own
    /// port, still works, so that existing command lines keep starting.
    #[arg(
        long,
        visible_alias = "http-address",
        env = "SAMPLE_OPERATOR_METRICS_ADDRESS",
        default_value = "0.0.0.0:8080"
    )]
    pub metrics_address: SocketAddr,
    /// Serve /metrics over HTTPS, only to bearers of a token that Kubernetes accepts
    /// (TokenReview) and allows `get` on the non-resource URL /metrics (SubjectAccessReview).
    #[arg(long, env = "SAMPLE_OPERATOR_METRICS_SECURE")]
    pub metrics_secure: bool,
    /// With --metrics-secure: a directory holding tls.crt and tls.key (a mounted
    /// kubernetes.io/tls Secret), read again when they change; a self-signed certificate is
    /// made at start when unset.
    #[arg(
        long,
        env = "SAMPLE_OPERATOR_METRICS_CERT_DIR",
        value_name = "DIR",
        requires = "metrics_secure"
    )]
    pub metrics_cert_dir: Option<PathBuf>,
    /// With --metrics-secure: accept only tokens issued for this audience (a projected
    /// ServiceAccount token with `audience` set), so that a token a scraper holds for the API
    /// server or another service cannot read /metrics; unset, the API server's own audiences.
    #[arg(
        long,
        env = "SAMPLE_OPERATOR_METRICS_TOKEN_AUDIENCE",
        value_name = "AUDIENCE",
        requires = "metrics_secure"
    )]
    pub metrics_token_audience: Option<String>,
    /// Address of /healthz and /readyz, apart from /metrics so that scrapes never delay a
    /// probe.
    #[arg(long, env = "SAMPLE_OPERATOR_PROBE_ADDRESS", default_value = "0.0.0.0:8081")]
    pub probe_address: SocketAddr,
    /// How long in-flight reconciles may take to finish on SIGTERM, in seconds.
    #[arg(long, env = "SAMPLE_OPERATOR_DRAIN_SECONDS", default_value_t = 10)]
    pub drain_seconds: u64,
    #[command(flatten)]
    pub leader_election: LeaderElectionArgs,
    #[command(flatten)]
    pub sharding: ShardingArgs,
    #[command(flatten)]
    pub network_backend: NetworkBackendArgs,
    #[command(flatten)]
    pub address_policy: AddressPolicyArgs,
    #[command(flatten)]
    pub foo_workload: FooWorkloadArgs,
}

/// What every Foo's Deployment runs: the defaults keep the tutorials' `nginx:latest` and are
/// admitted by Pod Security `baseline`.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Foo Deployments")]
pub struct FooWorkloadArgs {
    /// The container image of every Foo's Deployment.
    #[arg(long, env = "SAMPLE_OPERATOR_FOO_IMAGE", default_value = foo::settings::DEFAULT_IMAGE)]
    pub foo_image: String,
    /// The container's resources, as JSON (a Kubernetes ResourceRequirements); default
    /// `{"requests":{"cpu":"10m","memory":"32Mi"},"limits":{"memory":"256Mi"}}`.
    #[arg(long, env = "SAMPLE_OPERATOR_FOO_RESOURCES", value_name = "JSON", value_parser = foo::settings::parse_json::<ResourceRequirements>)]
    pub foo_resources: Option<ResourceRequirements>,
    /// The container's security context, as JSON (a Kubernetes SecurityContext); default
    /// `{"allowPrivilegeEscalation":false,"seccompProfile":{"type":"RuntimeDefault"}}`.
    #[arg(long, env = "SAMPLE_OPERATOR_FOO_SECURITY_CONTEXT", value_name = "JSON", value_parser = foo::settings::parse_json::<SecurityContext>)]
    pub foo_security_context: Option<SecurityContext>,
}

impl FooWorkloadArgs {
    pub fn settings(&self) -> foo::Settings {
        let defaults = foo::Settings::default();
        foo::Settings {
            image: self.foo_image.clone(),
            resources: self.foo_resources.clone().unwrap_or(defaults.resources),
            security_context: self
                .foo_security_context
                .clone()
                .unwrap_or(defaults.security_context),
        }
    }
}

/// Which prefixes Networks may have: tenants create Networks, and with the Multus backend a
/// Network's gateway address and route go onto the nodes.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Network address policy")]
pub struct AddressPolicyArgs {
    /// Prefixes that Networks must lie within, comma-separated (such as 10.0.0.0/8,fd00::/8);
    /// any when unset. Loopback, link-local, multicast and other reserved ranges are refused
    /// whatever this allows.
    #[arg(long, env = "SAMPLE_OPERATOR_NETWORK_ALLOWED_PREFIXES", value_delimiter = ',', value_parser = parse_prefix)]
    pub network_allowed_prefixes: Vec<IpPrefix>,
    /// The shortest IPv4 prefix a Network may have.
    #[arg(long, env = "SAMPLE_OPERATOR_NETWORK_MIN_PREFIX_LENGTH_V4", default_value_t = 16, value_parser = clap::value_parser!(u8).range(0..=32))]
    pub network_min_prefix_length_v4: u8,
    /// The shortest IPv6 prefix a Network may have.
    #[arg(long, env = "SAMPLE_OPERATOR_NETWORK_MIN_PREFIX_LENGTH_V6", default_value_t = 48, value_parser = clap::value_parser!(u8).range(0..=128))]
    pub network_min_prefix_length_v6: u8,
    /// Refuse Networks that overlap the cluster's own addresses: the nodes' Pod CIDRs, the
    /// Service CIDRs, the nodes' addresses and the API server's. Needs list and watch of Nodes,
    /// ServiceCIDRs and the EndpointSlices of `default`; `false` turns it off.
    #[arg(long, env = "SAMPLE_OPERATOR_NETWORK_CLUSTER_ADDRESSES", default_value_t = true, action = clap::ArgAction::Set)]
    pub network_cluster_addresses: bool,
    /// The cluster's Service CIDRs, comma-separated, for clusters without ServiceCIDR objects
    /// (before Kubernetes 1.33); the ServiceCIDR objects are watched when unset.
    #[arg(long, env = "SAMPLE_OPERATOR_NETWORK_SERVICE_CIDRS", value_delimiter = ',', value_parser = parse_prefix)]
    pub network_service_cidrs: Vec<IpPrefix>,
    /// The ClusterAddresses object (samplecrd.k8s.io/v1, cluster-scoped) that the operator
    /// keeps holding the cluster's addresses, as the admission policy's parameters; none is
    /// written when unset.
    #[arg(long, env = "SAMPLE_OPERATOR_NETWORK_ADMISSION_PARAMS", value_name = "NAME")]
    pub network_admission_params: Option<String>,
    /// With the Multus backend, let Networks of different namespaces overlap: only where the
    /// nodes keep namespaces apart (each namespace's Pods on nodes of its own, or a CNI that
    /// separates them), since a node hosting both would route one prefix to two bridges.
    /// Neutron's networks are each their own, and may always overlap across namespaces.
    #[arg(long, env = "SAMPLE_OPERATOR_NETWORK_OVERLAP_ACROSS_NAMESPACES")]
    pub network_overlap_across_namespaces: bool,
    /// The most Networks of one namespace that the operator syncs to the backend (the oldest);
    /// the others get Ready=False, reason NamespaceLimitReached. 0: no limit. With Neutron, so
    /// that one namespace cannot take the project's quota from all.
    #[arg(long, env = "SAMPLE_OPERATOR_NETWORK_MAX_PER_NAMESPACE", default_value_t = 0)]
    pub network_max_per_namespace: usize,
}

impl AddressPolicyArgs {
    pub fn policy(&self) -> AddressPolicy {
        AddressPolicy {
            allowed: self.network_allowed_prefixes.clone(),
            min_prefix_v4: self.network_min_prefix_length_v4,
            min_prefix_v6: self.network_min_prefix_length_v6,
        }
    }
}

impl AddressPolicyArgs {
    pub fn cluster(&self) -> crate::network::cluster::Settings {
        crate::network::cluster::Settings {
            enabled: self.network_cluster_addresses,
            service_cidrs: self.network_service_cidrs.clone(),
            admission_params: self
                .network_admission_params
                .clone()
                .filter(|_| self.network_cluster_addresses),
        }
    }
}

fn parse_prefix(text: &str) -> Result<IpPrefix, String> {
    IpPrefix::parse(text.trim()).ok_or_else(|| format!("{text:?} is not a prefix such as 10.0.0.0/8"))
}

/// Where the Network controller syncs Networks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum NetworkBackendName {
    /// A Multus NetworkAttachmentDefinition per Network.
    Multus,
    /// An OpenStack Neutron network and subnet per Network (the seeds' backend).
    Neutron,
}

/// The Network controller's backend, and for Neutron the cloud, as OpenStack's tools take it.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Network backend")]
pub struct NetworkBackendArgs {
    /// The backend Networks are synced to.
    #[arg(long, env = "SAMPLE_OPERATOR_NETWORK_BACKEND", value_enum, default_value_t = NetworkBackendName::Multus)]
    pub network_backend: NetworkBackendName,
    /// Neutron: the cloud in clouds.yaml (read from OS_CLIENT_CONFIG_FILE, ./clouds.yaml,
    /// ~/.config/openstack/ and /etc/openstack/); without it the OS_* variables describe the
    /// cloud (OS_AUTH_URL, OS_APPLICATION_CREDENTIAL_ID, OS_USERNAME, ...).
    #[arg(long, env = "OS_CLOUD")]
    pub os_cloud: Option<String>,
    /// Neutron: a clouds.yaml to read besides the usual places.
    #[arg(long, env = "OS_CLIENT_CONFIG_FILE", value_name = "PATH")]
    pub os_client_config_file: Option<PathBuf>,
    /// Neutron: the region whose network endpoint the Keystone catalog gives (overrides the
    /// cloud's region_name).
    #[arg(long, env = "OS_REGION_NAME")]
    pub os_region_name: Option<String>,
    /// Neutron: the endpoint interface (public, internal or admin; overrides the cloud's).
    #[arg(long, env = "OS_INTERFACE")]
    pub os_interface: Option<String>,
    /// Neutron: the cluster's identity in the tags of what the operator creates, so that
    /// clusters can share a project; the kube-system namespace's UID when unset.
    #[arg(long, env = "SAMPLE_OPERATOR_CLUSTER_ID")]
    pub cluster_id: Option<String>,
    /// Neutron: a former identity of this cluster (a rebuilt cluster's old kube-system UID, or
    /// an earlier --cluster-id), whose networks the Networks of the same namespace and name
    /// take over, retagged instead of created again; repeat for several. Only for a cluster
    /// that no longer runs: its networks become this cluster's.
    #[arg(
        long,
        env = "SAMPLE_OPERATOR_ADOPT_CLUSTER_IDS",
        value_delimiter = ',',
        value_name = "ID"
    )]
    pub adopt_cluster_id: Vec<String>,
    /// Neutron: how often to list Neutron and repair what differs from the Networks, in
    /// seconds (also after every Network change).
    #[arg(long, env = "SAMPLE_OPERATOR_NEUTRON_RESYNC_SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub neutron_resync_seconds: u64,
    /// Neutron: create subnets with DHCP enabled (off: Neutron's DHCP agent would take an
    /// address of each subnet and answer on it). Subnets created before keep theirs.
    #[arg(long, env = "SAMPLE_OPERATOR_NEUTRON_DHCP")]
    pub neutron_dhcp: bool,
}

impl NetworkBackendArgs {
    /// The backend's configuration; for Neutron, the cloud's configuration is read once now so
    /// that a missing or wrong one ends the start with one line.
    pub async fn config(&self, client: &kube::Client) -> Result<BackendConfig, String> {
        if self.network_backend == NetworkBackendName::Multus {
            return Ok(BackendConfig::Multus);
        }
        let source = CloudSource {
            cloud: self.os_cloud.clone(),
            config_file: self.os_client_config_file.clone(),
            region: self.os_region_name.clone(),
            interface: self.os_interface.clone(),
        };
        source
            .load()
            .map_err(|e| format!("--network-backend neutron: {e}"))?;
        let cluster_id = match &self.cluster_id {
            Some(id) => id.clone(),
            None => default_cluster_id(client).await.ok_or(
                "--network-backend neutron: cannot read the kube-system namespace's UID to identify the cluster; give --cluster-id",
            )?,
        };
        crate::network::backend::neutron::model::validate_cluster_id(&cluster_id)
            .map_err(|e| format!("--cluster-id: {e}"))?;
        for old in &self.adopt_cluster_id {
            crate::network::backend::neutron::model::validate_cluster_id(old)
                .map_err(|e| format!("--adopt-cluster-id: {e}"))?;
            if *old == cluster_id {
                return Err(format!(
                    "--adopt-cluster-id {old:?} is this cluster's own id: give the former one"
                ));
            }
        }
        Ok(BackendConfig::Neutron(NeutronConfig {
            source,
            cluster_id,
            adopt_cluster_ids: self.adopt_cluster_id.clone(),
            resync: Duration::from_secs(self.neutron_resync_seconds),
            dhcp: self.neutron_dhcp,
        }))
    }
}

/// The cluster's identity in Neutron's tags when `--cluster-id` is not given: the kube-system
/// namespace's UID, which lives as long as the cluster.
pub async fn default_cluster_id(client: &kube::Client) -> Option<String> {
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
    namespaces.get("kube-system").await.ok()?.metadata.uid
}

/// Leader election among replicas.
#[derive(clap::Args, Debug, Clone)]
pub struct LeaderElectionArgs {
    /// Run the controllers only while holding a Lease, so that several replicas can run.
    #[arg(long, env = "SAMPLE_OPERATOR_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Namespace of the Lease; by default the operator's own (POD_NAMESPACE, or the service
    /// account's when in a cluster), else `default`.
    #[arg(long, env = "SAMPLE_OPERATOR_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the Lease.
    #[arg(
        long,
        env = "SAMPLE_OPERATOR_LEADER_ELECTION_NAME",
        default_value = "sample-operator"
    )]
    pub leader_election_name: String,
    /// Seconds a Lease lasts without renewal: the longest a crashed leader delays a standby.
    #[arg(long, env = "SAMPLE_OPERATOR_LEASE_DURATION_SECONDS", default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// Seconds before expiry that the holder renews the Lease.
    #[arg(long, env = "SAMPLE_OPERATOR_LEASE_GRACE_SECONDS", default_value_t = 5)]
    pub lease_grace_seconds: u64,
}

impl LeaderElectionArgs {
    /// The grace period must fit in the Lease: the holder renews that long before it expires.
    fn check(&self) -> Result<(), String> {
        if self.lease_grace_seconds == 0 || self.lease_grace_seconds >= self.lease_duration_seconds {
            return Err(format!(
                "--lease-grace-seconds ({}) must be at least 1 and less than --lease-duration-seconds ({}): the holder renews that long before the Lease expires",
                self.lease_grace_seconds, self.lease_duration_seconds
            ));
        }
        Ok(())
    }

    fn namespace(&self) -> String {
        self.leader_election_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .or_else(|| {
                std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                    .ok()
                    .map(|ns| ns.trim().to_owned())
            })
            .filter(|ns| !ns.is_empty())
            .unwrap_or_else(|| "default".into())
    }
}

/// Sharding among replicas.
#[derive(clap::Args, Debug, Clone)]
pub struct ShardingArgs {
    /// Split the objects among the replicas instead of electing one: each replica holds a
    /// member Lease (in the leader election's namespace, for the same duration) and reconciles
    /// the objects hashing into its share of 64 buckets, sent to the API server as KEP-5866's
    /// shardSelector. Foos and Networks are split by UID, MyCustomResources and their Pods by
    /// namespace.
    #[arg(long, env = "SAMPLE_OPERATOR_SHARDING", conflicts_with = "leader_elect")]
    pub sharding: bool,
    /// Names the sharding Leases (`NAME-holders`, `NAME-member-…`): replicas with one name
    /// share the buckets.
    #[arg(
        long,
        env = "SAMPLE_OPERATOR_SHARDING_NAME",
        default_value = "sample-operator-shards"
    )]
    pub sharding_name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::Crd { example_com } => print_crds(example_com),
        Command::NodeCleanup(args) => {
            // One watch and a sweep now and then, on every node of a DaemonSet: one worker, not
            // one per core of each node.
            let runtime = match async_runtime(1) {
                Ok(runtime) => runtime,
                Err(e) => return fail(format!("cannot start the async runtime: {e}")),
            };
            match runtime.block_on(run_node_cleanup(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(message) => fail(message),
            }
        }
        Command::Run(run) => {
            let runtime = match async_runtime(run.worker_threads) {
                Ok(runtime) => runtime,
                Err(e) => return fail(format!("cannot start the async runtime: {e}")),
            };
            match runtime.block_on(run_operator(*run)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(message) => fail(message),
            }
        }
    }
}

/// The multi-threaded runtime with `worker_threads` workers, or tokio's default (one per core
/// it may use, or `TOKIO_WORKER_THREADS`) for 0.
fn async_runtime(worker_threads: u16) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if worker_threads > 0 {
        builder.worker_threads(usize::from(worker_threads));
    }
    builder.enable_all().build()
}

/// One clear line on stderr, no backtrace.
fn fail(message: String) -> ExitCode {
    eprintln!("sample-operator: {message}");
    ExitCode::FAILURE
}

fn init_logging(args: &RunArgs) {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log_level).unwrap_or_else(|e| {
        eprintln!(
            "sample-operator: ignoring invalid --log-level {:?}: {e}",
            args.log_level
        );
        tracing_subscriber::EnvFilter::new("info")
    });
    // Colour codes only for a person at a terminal: in a file or a log collector they are noise.
    let ansi = std::io::stderr().is_terminal();
    // `init` also passes on what libraries log through the `log` crate.
    tracing_subscriber::util::SubscriberInitExt::init(log_subscriber(
        filter,
        args.log_format,
        ansi,
        std::io::stderr,
    ));
}

/// kube-runtime's span around each reconcile: ours (`reconcile`, with the controller and the
/// object) says the same. The reason in theirs is `unknown` for every reconcile our fair queue
/// starts, since it hands kube-runtime bare object references, and a retry's is in our own
/// "reconcile failed" line. Without it each line names its object once.
const KUBE_RUNTIME_RECONCILE_SPAN: (&str, &str) = ("kube_runtime::controller", "reconciling object");

fn log_subscriber<W>(
    filter: tracing_subscriber::EnvFilter,
    format: LogFormat,
    ansi: bool,
    writer: W,
) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::{FilterExt, filter_fn};
    use tracing_subscriber::layer::SubscriberExt;
    let not_theirs =
        filter_fn(|meta| !(meta.is_span() && (meta.target(), meta.name()) == KUBE_RUNTIME_RECONCILE_SPAN));
    let layer = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(writer);
    let layer = match format {
        LogFormat::Plain => layer.boxed(),
        LogFormat::Json => layer.json().flatten_event(true).boxed(),
    };
    tracing_subscriber::registry().with(layer.with_filter(filter.and(not_theirs)))
}

/// The client configuration from the flags, or a message saying what to do.
pub async fn kube_config(args: &ClusterArgs) -> Result<kube::Config, String> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let mut config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| format!("cannot read kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| format!("kubeconfig: {e}"))?,
        None => kube::Config::infer().await.map_err(|e| {
            format!("no cluster configured ({e}); pass --kubeconfig, set KUBECONFIG, or run in a cluster")
        })?,
    };
    if let Some(master) = &args.master {
        config.cluster_url = master
            .parse()
            .map_err(|e| format!("--master {master:?} is not a URL: {e}"))?;
    }
    Ok(config)
}

async fn run_node_cleanup(args: NodeCleanupArgs) -> Result<(), String> {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::stderr)
        .try_init();
    let config = kube_config(&ClusterArgs::default()).await?;
    let server = config.cluster_url.to_string();
    let client =
        kube::Client::try_from(config).map_err(|e| format!("cannot build a client for {server}: {e}"))?;
    crate::node_cleanup::run(client, args.settings()).await
}

async fn run_operator(args: RunArgs) -> Result<(), String> {
    // Options that cannot work end the start before anything else is done.
    args.leader_election.check()?;
    // The probes come first: a kubelet probes as soon as the container starts, and a refused
    // connection reads as a crash where "not ready yet, checking the cluster" is true. /metrics
    // follows once there is a client, with which the secure one reviews its scrapers' tokens.
    let requests = RequestCounter::default();
    let telemetry = Telemetry::new(requests.clone());
    telemetry.health.starting([STARTUP_CHECKS]);
    let (stop_http, http_stopped) = tokio::sync::watch::channel(());
    let stopped = |mut receiver: tokio::sync::watch::Receiver<()>| async move {
        let _ = receiver.changed().await;
    };
    let (probe_address, probes) = crate::runtime::server::serve_probes(
        args.probe_address,
        telemetry.clone(),
        stopped(http_stopped.clone()),
    )
    .await
    .map_err(|e| format!("cannot listen on {} (--probe-address): {e}", args.probe_address))?;
    // Read now, so that a wrong directory ends the start before the cluster is even asked.
    let metrics_tls = if args.metrics_secure {
        let tls = crate::runtime::server::tls::server_config(args.metrics_cert_dir.as_deref())
            .map_err(|e| format!("--metrics-secure: {e}"))?;
        Some(tls)
    } else {
        None
    };

    let config = kube_config(&args.cluster).await?;
    let server = config.cluster_url.to_string();
    // The selectors a sharded replica sends; empty (and the layer idle) otherwise.
    let selectors = Selectors::default();
    let client = requests
        .client_with(config, &selectors, args.apiserver_http)
        .map_err(|e| format!("cannot build a client for {server}: {e}"))?;
    let runtime = RuntimeConfig {
        namespace: args.namespace.clone(),
        concurrency: args.concurrency,
        resync: (args.resync_seconds > 0).then(|| Duration::from_secs(args.resync_seconds)),
        events: args.events,
        ..RuntimeConfig::default()
    };
    preflight(&client, &args.controllers, runtime.namespace.as_deref(), &server).await?;
    let runtime = RuntimeConfig {
        initial_list: initial_list(&client, &args.controllers, &runtime, args.initial_list, &server).await?,
        ..runtime
    };
    let mut run = RunConfig {
        runtime,
        controllers: args.controllers.clone(),
        ..RunConfig::default()
    };
    run.network.backend = args.network_backend.config(&client).await?;
    run.network.policy = args.address_policy.policy();
    run.network.cluster = args.address_policy.cluster();
    run.network.overlap_across_namespaces = args.address_policy.network_overlap_across_namespaces;
    run.network.max_per_namespace = (args.address_policy.network_max_per_namespace > 0)
        .then_some(args.address_policy.network_max_per_namespace);
    run.foo = args.foo_workload.settings();
    let access = match metrics_tls {
        Some(tls) => MetricsAccess::Secure {
            tls,
            authorizer: Arc::new(Authorizer::kubernetes(
                client.clone(),
                args.metrics_token_audience.clone(),
            )),
        },
        None => MetricsAccess::Open,
    };
    let (metrics_address, metrics) = crate::runtime::server::serve_metrics(
        args.metrics_address,
        telemetry.clone(),
        access,
        stopped(http_stopped),
    )
    .await
    .map_err(|e| {
        format!(
            "cannot listen on {} (--metrics-address): {e}",
            args.metrics_address
        )
    })?;
    // Logging starts once the cluster is known to be usable: until then, a failure is reported
    // as the one line of `fail`, not interleaved with the client's own error logs.
    init_logging(&args);
    telemetry.health.synced(STARTUP_CHECKS);
    tracing::info!(%server, %metrics_address, metrics_secure = args.metrics_secure, %probe_address, controllers = ?run.controllers, initial_list = ?run.runtime.initial_list, namespace = run.runtime.namespace.as_deref().unwrap_or("(all)"), "starting; serving /metrics, /healthz and /readyz");

    let drain = Duration::from_secs(args.drain_seconds);
    let instance = run.runtime.instance.clone();
    let client_for_lease = client.clone();
    let telemetry_health = telemetry.health.clone();
    let outcome = if args.sharding.sharding {
        let election = &args.leader_election;
        let config = ShardConfig {
            ring: args.sharding.sharding_name.clone(),
            namespace: election.namespace(),
            duration: Duration::from_secs(election.lease_duration_seconds),
            grace: Duration::from_secs(election.lease_grace_seconds),
            settle: SHARDING_SETTLE,
        };
        let identity = crate::runtime::leader::identity(&instance);
        let on_buckets = crate::on_buckets(client, run, telemetry.clone(), selectors);
        crate::runtime::sharding::membership::run_sharded(
            client_for_lease,
            &identity,
            telemetry,
            config,
            drain,
            shutdown_signal(),
            on_buckets,
        )
        .await
        .map_err(|e| e.to_string())?
    } else {
        run_single(client, client_for_lease, run, &args, &instance, telemetry, drain).await?
    };
    let _ = stop_http.send(());
    let _ = tokio::join!(probes, metrics);
    match outcome {
        Outcome::Stopped => {
            tracing::info!("stopped");
            Ok(())
        }
        Outcome::LostLease if args.sharding.sharding => Err(
            "another replica holds buckets this one was reconciling; exiting so that this replica restarts and joins again".into(),
        ),
        Outcome::LostLease => {
            Err("lost the leader lease; exiting so that this replica restarts as a standby".into())
        }
        Outcome::RenewalsFailed if args.sharding.sharding => Err(
            "could not renew this replica's sharding Lease before it expired (is the API server reachable, may this replica update Leases?); exiting so that this replica restarts and joins again".into(),
        ),
        Outcome::RenewalsFailed => Err(
            "could not renew the leader lease before it expired (is the API server reachable, may this replica update Leases?); exiting so that this replica restarts as a standby".into(),
        ),
        Outcome::ControllersEnded => Err(format!(
            "{}; exiting so that Kubernetes restarts the operator",
            telemetry_health.liveness().err().unwrap_or_else(|| "the controllers ended".into())
        )),
    }
}

/// How long a sharded replica waits after the members change before moving buckets.
const SHARDING_SETTLE: Duration = Duration::from_secs(1);

/// The controllers on one replica: elected among replicas, or alone.
async fn run_single(
    client: kube::Client,
    client_for_lease: kube::Client,
    run: RunConfig,
    args: &RunArgs,
    instance: &str,
    telemetry: Telemetry,
    drain: Duration,
) -> Result<Outcome, String> {
    let controllers = {
        let telemetry = telemetry.clone();
        move |stopped| crate::run_with(client, run, telemetry, stopped)
    };
    Ok(if args.leader_election.leader_elect {
        let election = &args.leader_election;
        let lease = LeaseConfig {
            name: election.leader_election_name.clone(),
            namespace: election.namespace(),
            duration: Duration::from_secs(election.lease_duration_seconds),
            grace: Duration::from_secs(election.lease_grace_seconds),
        };
        crate::runtime::leader::run_elected(
            client_for_lease,
            instance,
            telemetry,
            lease,
            drain,
            shutdown_signal(),
            controllers,
        )
        .await
        .map_err(|e| e.to_string())?
    } else {
        // Without election this instance is the one running the controllers, as a leader is.
        telemetry
            .metrics
            .set_leader(&args.leader_election.leader_election_name, true);
        let mut controllers = Supervised::spawn(controllers);
        let outcome = tokio::select! {
            _ = shutdown_signal() => Outcome::Stopped,
            _ = controllers.ended() => Outcome::ControllersEnded,
        };
        controllers.drain(drain).await;
        outcome
    })
}

/// What `/readyz` names until the cluster has been checked and the backend configured.
const STARTUP_CHECKS: &str = "startup checks";

/// Checks that the cluster answers and every CRD the controllers need is installed, so a
/// misconfiguration ends with one line instead of watch errors repeated forever.
async fn preflight(
    client: &kube::Client,
    controllers: &[ControllerName],
    namespace: Option<&str>,
    server: &str,
) -> Result<(), String> {
    client.apiserver_version().await.map_err(|e| {
        format!(
            "cannot reach the API server at {server}: {}",
            crate::runtime::error_chain(&e)
        )
    })?;
    for controller in controllers {
        let resource = controller.resource();
        let kind = (resource.crd_name)();
        match (resource.probe)(client.clone(), namespace.map(str::to_owned)).await {
            Ok(()) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {
                return Err(format!(
                    "the {kind} CRD is not installed in the cluster at {server}; install it with: kubectl apply --server-side -f deploy/crds/"
                ));
            }
            Err(e) => return Err(format!("cannot list {kind} objects at {server}: {e}")),
        }
    }
    Ok(())
}

/// The way every watch fetches its first list: `choice`, with `auto` asked of the API server
/// on the first controller's resource (the one kind the operator may surely watch).
async fn initial_list(
    client: &kube::Client,
    controllers: &[ControllerName],
    runtime: &RuntimeConfig,
    choice: InitialListChoice,
    server: &str,
) -> Result<InitialList, String> {
    let first = controllers.first().copied().unwrap_or(ControllerName::Foo);
    let streams_lists = first.resource().streams_lists;
    let namespace = runtime.namespace.clone();
    choice
        .resolve(|| streams_lists(client.clone(), namespace))
        .await
        .map_err(|e| format!("cannot ask {server} whether it streams lists: {e}"))
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}

fn print_crds(example_com: bool) -> ExitCode {
    let crds = if example_com {
        sample_operator_api::example_com_crds()
    } else {
        sample_operator_api::crds()
    };
    let yaml = match sample_operator_api::crds_yaml(&crds) {
        Ok(yaml) => yaml,
        Err(e) => return fail(format!("cannot serialise the CRDs: {e}")),
    };
    match std::io::stdout().lock().write_all(yaml.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        // A closed pipe (`| head`) is not worth a panic.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => fail(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log writer into memory.
    #[derive(Clone, Default)]
    struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A line logged in a reconcile run by kube-runtime's applier (as every controller's
    /// reconciles are) names the object in our span only: kube-runtime's own span around it
    /// is left out, in both formats. Read from kube-runtime itself, so a rename of its span
    /// fails here rather than bringing it back unnoticed.
    #[tokio::test]
    async fn kube_runtimes_reconcile_span_is_left_out_of_the_logs() {
        use futures::StreamExt;
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::controller::{Action, Config};
        use kube::runtime::reflector::ObjectRef;
        use kube::runtime::watcher::Event;

        for format in [LogFormat::Plain, LogFormat::Json] {
            let captured = Captured::default();
            let writer = {
                let captured = captured.clone();
                move || captured.clone()
            };
            let subscriber =
                log_subscriber(tracing_subscriber::EnvFilter::new("info"), format, false, writer);
            let _default = tracing::subscriber::set_default(subscriber);
            let (store, mut cache) = kube::runtime::reflector::store::<ConfigMap>();
            let mut object = ConfigMap::default();
            object.metadata.name = Some("a".into());
            object.metadata.namespace = Some("ns".into());
            // The applier starts once its store has its first list.
            for event in [Event::Init, Event::InitApply(object.clone()), Event::InitDone] {
                cache.apply_watcher_event(&event);
            }
            let reconciles = kube::runtime::applier(
                |object: Arc<ConfigMap>, _: Arc<()>| {
                    let span = tracing::info_span!("reconcile", controller = "test", object = "ns/a");
                    let _entered = span.enter();
                    tracing::info!(name = object.metadata.name.as_deref(), "reconciled");
                    std::future::ready(Ok::<_, std::io::Error>(Action::await_change()))
                },
                |_, _, _| Action::await_change(),
                Arc::new(()),
                store,
                futures::stream::iter([Ok::<_, std::convert::Infallible>(ObjectRef::from_obj(&object))])
                    .chain(futures::stream::pending()),
                Config::default(),
            );
            let first =
                tokio::time::timeout(Duration::from_secs(10), std::pin::pin!(reconciles).next()).await;
            assert!(first.is_ok_and(|result| result.is_some_and(|result| result.is_ok())));
            let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
            assert!(text.contains("reconciled") && text.contains("ns/a"), "{text}");
            assert!(
                !text.contains(KUBE_RUNTIME_RECONCILE_SPAN.1) && !text.contains("object.ref"),
                "{format:?}: {text}"
            );
            assert!(
                !text.contains('\u{1b}'),
                "no colour codes when asked for none: {text}"
            );
        }
    }

    /// The rows of the options table in docs/operating.md, as (first cell, environment cell,
    /// default cell).
    fn documented_options() -> Vec<(String, String, String)> {
        crate::doc_tables::rows(include_str!("../../../docs/operating.md"), "options-table")
            .into_iter()
            .map(|cells| (cells[0].clone(), cells[1].clone(), cells[2].clone()))
            .collect()
    }

    #[test]
    fn a_lease_grace_period_must_fit_in_the_lease() {
        assert_eq!(run_args(&[]).unwrap().leader_election.check(), Ok(()));
        for (grace, duration) in [("0", "15"), ("15", "15"), ("20", "15")] {
            let args = run_args(&[
                "--lease-grace-seconds",
                grace,
                "--lease-duration-seconds",
                duration,
            ])
            .unwrap();
            let error = args.leader_election.check().unwrap_err();
            assert!(error.contains("--lease-grace-seconds"), "{error}");
        }
        let relaxed = run_args(&["--lease-grace-seconds", "10", "--lease-duration-seconds", "30"]).unwrap();
        assert_eq!(relaxed.leader_election.check(), Ok(()));
    }

    #[test]
    fn the_options_table_documents_every_flag_with_its_variable_and_default_and_nothing_else() {
        let command = <Args as clap::CommandFactory>::command();
        let mut flags = std::collections::BTreeMap::new();
        for sub in command.get_subcommands() {
            for arg in sub.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if matches!(long, "help" | "version") {
                    continue;
                }
                let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
                let default = if arg.get_action().takes_values() {
                    let values: Vec<String> = arg
                        .get_default_values()
                        .iter()
                        .map(|v| v.to_string_lossy().into_owned())
                        .collect();
                    values.join(",")
                } else {
                    "false".to_owned() // a switch
                };
                let previous = flags.insert(format!("--{long}"), (env, default));
                assert!(
                    previous.is_none(),
                    "--{long} is in two commands: give it two rows"
                );
            }
        }
        let mut rows = std::collections::BTreeSet::new();
        for (first, env_cell, default_cell) in documented_options() {
            let flag = first.split('`').nth(1).unwrap_or_default().to_owned();
            let (env, default) = flags
                .get(&flag)
                .unwrap_or_else(|| panic!("docs/operating.md documents {first}, which is no flag"));
            match env {
                Some(env) => assert_eq!(env_cell, format!("`{env}`"), "{flag}'s variable"),
                None => assert_eq!(env_cell, "none", "{flag} has no variable"),
            }
            if default.is_empty() {
                assert!(
                    default_cell.starts_with("none"),
                    "{flag} has no default: say what happens without it, after \"none: \""
                );
            } else {
                assert!(
                    default_cell.starts_with(&format!("`{default}`")),
                    "{flag}'s default is `{default}`, the table says {default_cell}"
                );
            }
            assert!(rows.insert(flag.clone()), "{flag} has two rows");
        }
        let undocumented: Vec<&String> = flags.keys().filter(|f| !rows.contains(*f)).collect();
        assert!(
            undocumented.is_empty(),
            "flags missing from the options table of docs/operating.md: {undocumented:?}"
        );
    }

    fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let argv = ["sample-operator", "run"].iter().chain(args);
        match Args::try_parse_from(argv)?.command {
            Command::Run(run) => Ok(*run),
            Command::Crd { .. } | Command::NodeCleanup(_) => unreachable!("run was given"),
        }
    }

    #[test]
    fn the_runtime_has_the_worker_threads_asked_for_and_two_by_default() {
        assert_eq!(run_args(&[]).unwrap().worker_threads, 2);
        assert!(run_args(&["--worker-threads", "1025"]).is_err());
        for asked in [1, 3] {
            let runtime = async_runtime(asked).unwrap();
            assert_eq!(runtime.metrics().num_workers(), usize::from(asked));
        }
        // 0 leaves the count to tokio: one per core this process may use.
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
            assert_eq!(async_runtime(0).unwrap().metrics().num_workers(), cores);
        }
    }

    #[test]
    fn the_apiserver_connection_is_http1_unless_http2_is_asked_for() {
        assert_eq!(run_args(&[]).unwrap().apiserver_http, HttpVersion::Http1);
        let asked = run_args(&["--apiserver-http", "2"]).unwrap();
        assert_eq!(asked.apiserver_http, HttpVersion::Http2);
        assert_eq!(
            run_args(&["--apiserver-http=1.1"]).unwrap().apiserver_http,
            HttpVersion::Http1
        );
        assert!(run_args(&["--apiserver-http", "3"]).is_err());
    }

    #[test]
    fn probes_and_metrics_have_their_own_addresses_and_metrics_are_open_by_default() {
        let defaults = run_args(&[]).unwrap();
        assert_eq!(defaults.metrics_address, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(defaults.probe_address, "0.0.0.0:8081".parse().unwrap());
        assert!(!defaults.metrics_secure);
        let secure = run_args(&["--metrics-secure", "--metrics-cert-dir", "/tls"]).unwrap();
        assert!(secure.metrics_secure);
        assert_eq!(secure.metrics_cert_dir, Some(PathBuf::from("/tls")));
        // A certificate for plain HTTP is a mistake worth a refusal.
        assert!(run_args(&["--metrics-cert-dir", "/tls"]).is_err());
        // The old name of the metrics address still starts the operator.
        let old = run_args(&["--http-address", "127.0.0.1:9090"]).unwrap();
        assert_eq!(old.metrics_address, "127.0.0.1:9090".parse().unwrap());
    }

    #[test]
    fn the_address_policy_comes_from_flags_with_safe_defaults() {
        let defaults = run_args(&[]).unwrap().address_policy.policy();
        assert_eq!(defaults, AddressPolicy::default());
        let policy = run_args(&[
            "--network-allowed-prefixes",
            "10.0.0.0/8, fd00::/8",
            "--network-min-prefix-length-v4",
            "8",
        ])
        .unwrap()
        .address_policy
        .policy();
        assert_eq!(
            policy.allowed,
            [
                IpPrefix::parse("10.0.0.0/8").unwrap(),
                IpPrefix::parse("fd00::/8").unwrap()
            ]
        );
        assert_eq!((policy.min_prefix_v4, policy.min_prefix_v6), (8, 48));
        let error = run_args(&["--network-allowed-prefixes", "10.0.0.0"]).unwrap_err();
        assert!(error.to_string().contains("is not a prefix"), "{error}");
        assert!(run_args(&["--network-min-prefix-length-v4", "33"]).is_err());
    }

    #[test]
    fn the_foo_deployments_settings_come_from_flags_with_the_defaults_documented() {
        assert_eq!(
            run_args(&[]).unwrap().foo_workload.settings(),
            foo::Settings::default()
        );
        let settings = run_args(&[
            "--foo-image",
            "nginxinc/nginx-unprivileged:1.29",
            "--foo-security-context",
            r#"{"runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}}"#,
        ])
        .unwrap()
        .foo_workload
        .settings();
        assert_eq!(settings.image, "nginxinc/nginx-unprivileged:1.29");
        assert_eq!(settings.security_context.run_as_non_root, Some(true));
        assert_eq!(settings.resources, foo::Settings::default().resources);
        // The help text quotes the defaults: keep them the same.
        let run = <Args as clap::CommandFactory>::command();
        let run = run.find_subcommand("run").unwrap();
        let documented = |flag: &str| {
            let arg = run.get_arguments().find(|a| a.get_long() == Some(flag)).unwrap();
            let help = arg.get_help().unwrap().to_string();
            help.split_once('`')
                .unwrap()
                .1
                .rsplit_once('`')
                .unwrap()
                .0
                .to_owned()
        };
        let defaults = foo::Settings::default();
        assert_eq!(
            foo::settings::parse_json::<ResourceRequirements>(&documented("foo-resources")).unwrap(),
            defaults.resources
        );
        assert_eq!(
            foo::settings::parse_json::<SecurityContext>(&documented("foo-security-context")).unwrap(),
            defaults.security_context
        );
        let error = run_args(&["--foo-resources", "{\"limits\": 3}"]).unwrap_err();
        assert!(error.to_string().contains("--foo-resources"), "{error}");
    }
}
