//! The command line: one clap `Args` struct per command, with environment fallbacks.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use kube::Api;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::requests::RequestCounter;
use crate::{ControllerName, RunConfig};

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
    Run(RunArgs),
    /// Print the CustomResourceDefinitions of all resources as multi-document YAML.
    Crd,
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
    /// Controllers to run, comma-separated.
    #[arg(long, env = "SAMPLE_OPERATOR_CONTROLLERS", value_delimiter = ',', default_values_t = ControllerName::ALL.to_vec(), value_enum)]
    pub controllers: Vec<ControllerName>,
    /// Watch only this namespace; all namespaces when unset.
    #[arg(long, env = "SAMPLE_OPERATOR_NAMESPACE")]
    pub namespace: Option<String>,
    /// Reconciles in flight at once, per controller.
    #[arg(long, env = "SAMPLE_OPERATOR_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Also reconcile every object this often, in seconds (0: only on changes).
    #[arg(long, env = "SAMPLE_OPERATOR_RESYNC_SECONDS", default_value_t = 0)]
    pub resync_seconds: u64,
    /// Log filter, such as `info` or `sample_operator=debug,kube=info`.
    #[arg(long, env = "SAMPLE_OPERATOR_LOG", default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(long, env = "SAMPLE_OPERATOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
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
        Command::Crd => print_crds(),
        Command::Run(run) => {
            init_logging(&run);
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(e) => return fail(format!("cannot start the async runtime: {e}")),
            };
            match runtime.block_on(run_operator(run)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(message) => fail(message),
            }
        }
    }
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
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match args.log_format {
        LogFormat::Plain => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
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

async fn run_operator(args: RunArgs) -> Result<(), String> {
    let config = kube_config(&args.cluster).await?;
    let server = config.cluster_url.to_string();
    let counter = RequestCounter::default();
    let client = counter
        .client(config)
        .map_err(|e| format!("cannot build a client for {server}: {e}"))?;
    let run = RunConfig {
        namespace: args.namespace.clone(),
        controllers: args.controllers.clone(),
        concurrency: args.concurrency,
        resync: (args.resync_seconds > 0).then(|| Duration::from_secs(args.resync_seconds)),
        ..RunConfig::default()
    };
    preflight(&client, &run, &server).await?;
    tracing::info!(%server, controllers = ?run.controllers, namespace = run.namespace.as_deref().unwrap_or("(all)"), "starting");
    crate::run(client, run, shutdown_signal()).await;
    tracing::info!("stopped");
    Ok(())
}

/// Checks that the cluster answers and every CRD the controllers need is installed, so a
/// misconfiguration ends with one line instead of watch errors repeated forever.
async fn preflight(client: &kube::Client, run: &RunConfig, server: &str) -> Result<(), String> {
    client
        .apiserver_version()
        .await
        .map_err(|e| format!("cannot reach the API server at {server}: {e}"))?;
    for name in &run.controllers {
        let (kind, result) = match name {
            ControllerName::Foo => ("Foo", probe::<sample_operator_api::Foo>(client, run).await),
        };
        match result {
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

async fn probe<K>(client: &kube::Client, run: &RunConfig) -> Result<(), kube::Error>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug,
{
    let api: Api<K> = match &run.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    api.list_metadata(&ListParams::default().limit(1))
        .await
        .map(|_| ())
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

fn print_crds() -> ExitCode {
    let yaml = match sample_operator_api::crds_yaml() {
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
