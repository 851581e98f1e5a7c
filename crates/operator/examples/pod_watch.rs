//! A measurement aid, not for production: the MyCustomResource controller with Pods watched
//! either way, so that the memory the metadata-only watch saves can be measured (the ignored
//! test `my_custom_resource::pod_watch_memory` runs it). The operator binary has no such knob.
//!
//! `pod_watch --namespace NS --watch metadata|full`, with the cluster from `KUBECONFIG`.

use clap::Parser;
use sample_operator::cli::{ClusterArgs, kube_config};
use sample_operator::my_custom_resource::PodWatch;
use sample_operator::runtime::RuntimeConfig;
use sample_operator::{ControllerName, RunConfig};

/// The operator's allocator, so that the figures are the operator's.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The namespace whose resources and Pods are watched.
    #[arg(long)]
    namespace: String,
    #[arg(long, value_enum)]
    watch: Watch,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Watch {
    /// Pods as metadata only, as the operator watches them.
    Metadata,
    /// Whole Pods, as the kubebuilder seed's cache keeps them.
    Full,
}

#[tokio::main]
async fn main() -> Result<(), String> {
    let args = Args::parse();
    let client = kube::Client::try_from(kube_config(&args.cluster).await?).map_err(|e| e.to_string())?;
    let mut config = RunConfig {
        runtime: RuntimeConfig {
            namespace: Some(args.namespace),
            ..RuntimeConfig::default()
        },
        controllers: vec![ControllerName::MyCustomResource],
        ..RunConfig::default()
    };
    config.my_custom_resource.pod_watch = match args.watch {
        Watch::Metadata => PodWatch::Metadata,
        Watch::Full => PodWatch::Full,
    };
    sample_operator::run(client, config, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await;
    Ok(())
}
