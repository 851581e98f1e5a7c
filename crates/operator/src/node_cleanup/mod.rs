//! The node clean-up (`sample-operator node-cleanup`), run on each node by the chart's
//! optional DaemonSet: it removes the bridges and host-local address pools of the Multus
//! backend's Networks that no longer exist (or whose prefix changed, which gives them a new
//! bridge) once no Pod uses them, and checks at its start that the node's Multus keeps
//! namespaces apart.
//!
//! What it may remove is decided in [`plan`], from three things only: the links of the node
//! (a bridge whose name is exactly in the operator's name space, of kind bridge, with no port,
//! so no Pod's veth), the host-local folders (named `<namespace>.<uid>`, holding no address
//! lease), and the operator's NetworkAttachmentDefinitions (watched cluster-wide, selected by
//! the operator's label): whatever one of them names is kept. Nothing is decided before the
//! watch's first complete list, and something is removed only after it has stayed unused for
//! the grace period, across passes. Deleting a bridge takes its addresses and their connected
//! routes with it.

pub mod isolation;
pub mod links;
pub mod plan;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, reflector, watcher};

use crate::network::backend::multus::{self, NetworkAttachmentDefinition};
use isolation::Isolation;
use plan::{Held, Pending, PoolFolder};

/// What the clean-up needs to know about its node.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The node's name, for the Event of a Multus without isolation; none: logged only.
    pub node_name: Option<String>,
    /// The node's CNI configuration folder, where Multus' configuration is read.
    pub cni_conf_dir: PathBuf,
    /// host-local's data folder of the operator's Networks (their IPAM sets none, so the
    /// plugin's default, `/var/lib/cni/networks`); none: pools are left alone.
    pub ipam_dir: Option<PathBuf>,
    /// How often the node is looked at.
    pub interval: Duration,
    /// How long something must stay unused before it is removed.
    pub grace: Duration,
}

/// The reason of the Warning Event on the Node when Multus does not isolate namespaces.
pub const ISOLATION_OFF: &str = "MultusNamespaceIsolationOff";

/// Runs until SIGTERM or SIGINT; an error only when it cannot start.
pub async fn run(client: kube::Client, settings: Settings) -> Result<(), String> {
    report_isolation(&client, &settings).await;
    let handle = links::connect().map_err(|e| format!("cannot open a netlink socket: {e}"))?;

    // The operator's definitions, cluster-wide, trimmed to what says which bridges and pools
    // are still held.
    let definitions: Api<NetworkAttachmentDefinition> = Api::all(client);
    let config = watcher::Config::default().labels(&multus::selector());
    let (store, writer) = reflector::store();
    let stream = watcher(definitions, config)
        .default_backoff()
        .modify(plan::trim)
        .reflect(writer)
        .for_each(|event| async move {
            if let Err(e) = event {
                tracing::warn!(error = %e, "watching NetworkAttachmentDefinitions");
            }
        });
    let watch = tokio::spawn(stream);

    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot wait for SIGTERM: {e}"))?;
    let listed = async {
        // Nothing is decided before the first complete list; a watch that ended first (it
        // does not, but an empty store would hold nothing) ends the clean-up instead.
        if store.wait_until_ready().await.is_err() {
            return;
        }
        tracing::info!(
            "NetworkAttachmentDefinitions listed; looking at the node every {:?}",
            settings.interval
        );
        let mut bridges = Pending::default();
        let mut pools = Pending::default();
        let mut tick = tokio::time::interval(settings.interval);
        loop {
            tick.tick().await;
            let held = Held::of(store.state().iter().map(|nad| nad.as_ref()));
            pass(&handle, &settings, &held, &mut bridges, &mut pools).await;
        }
    };
    tokio::select! {
        // The loop never ends: only a watch that ended before its first list returns.
        () = listed => {
            return Err("the watch of NetworkAttachmentDefinitions ended before its first list: nothing removed".into());
        }
        _ = terminate.recv() => tracing::info!("SIGTERM: stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
    }
    watch.abort();
    Ok(())
}

/// One look at the node: removes what has been unused for the grace period.
async fn pass(
    handle: &rtnetlink::Handle,
    settings: &Settings,
    held: &Held,
    bridges: &mut Pending<(u32, String)>,
    pools: &mut Pending<String>,
) {
    let now = Instant::now();
    match links::list(handle).await {
        Ok(links) => {
            for (index, name) in bridges.due(plan::unused_bridges(&links, held), now, settings.grace) {
                match links::delete_unused_bridge(handle, index, &name).await {
                    Ok(true) => {
                        tracing::info!(bridge = %name, "deleted the bridge of a Network that no longer exists")
                    }
                    Ok(false) => tracing::debug!(bridge = %name, "in use again or gone: kept"),
                    Err(e) => tracing::warn!(bridge = %name, error = %e, "cannot delete the bridge"),
                }
                bridges.forget(&(index, name));
            }
        }
        Err(e) => tracing::warn!(error = %e, "cannot list the node's links"),
    }
    let Some(dir) = &settings.ipam_dir else { return };
    match pool_folders(dir) {
        Ok(folders) => {
            for name in pools.due(plan::unused_pools(&folders, held), now, settings.grace) {
                match remove_pool(&dir.join(&name)) {
                    Ok(()) => {
                        tracing::info!(pool = %name, "removed the address pool of a Network that no longer exists")
                    }
                    Err(e) => tracing::warn!(pool = %name, error = %e, "cannot remove the address pool"),
                }
                pools.forget(&name);
            }
        }
        Err(e) => tracing::debug!(dir = %dir.display(), error = %e, "no address pools to look at"),
    }
}

/// The folders in host-local's data folder, with their files' names.
fn pool_folders(dir: &Path) -> std::io::Result<Vec<PoolFolder>> {
    let mut folders = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let Ok(files) = std::fs::read_dir(entry.path()) else {
            continue;
        };
        let files = files
            .filter_map(|f| f.ok())
            .map(|f| f.file_name().to_string_lossy().into_owned())
            .collect();
        folders.push(PoolFolder {
            name: entry.file_name().to_string_lossy().into_owned(),
            files,
        });
    }
    Ok(folders)
}

/// Removes a pool's bookkeeping files, then the folder: anything else in it (a lease made since
/// it was looked at) makes the last step fail and keeps the folder.
fn remove_pool(folder: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(folder)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if (name == "lock" || name.starts_with("last_reserved_ip.")) && entry.file_type()?.is_file() {
            std::fs::remove_file(entry.path())?;
        }
    }
    std::fs::remove_dir(folder)
}

/// Logs what the node's CNI configuration says of Multus' namespace isolation; when it is
/// off, an error and a Warning Event on the Node, which `kubectl describe node` shows.
async fn report_isolation(client: &kube::Client, settings: &Settings) {
    let isolation = isolation::check(&settings.cni_conf_dir);
    let file = match &isolation {
        Isolation::On { file } => {
            tracing::info!(file = %file.display(), "Multus keeps namespaces apart (namespaceIsolation: true)");
            return;
        }
        Isolation::Thick { file } => {
            tracing::warn!(file = %file.display(), "Multus' thick plugin: check namespaceIsolation in its daemon's configuration, which this agent does not read");
            return;
        }
        Isolation::NotMultus { file, kind } => {
            tracing::warn!(file = %file.display(), plugin = %kind, "the node's network is not Multus: the operator's Networks are not attached here");
            return;
        }
        Isolation::Unreadable { reason } => {
            tracing::warn!(%reason, "cannot read the node's CNI configuration: Multus' namespaceIsolation is not checked");
            return;
        }
        Isolation::Off { file } => file,
    };
    let note = format!(
        "Multus in {} does not set namespaceIsolation: true: a Pod may name another namespace's Network and join its bridge",
        file.display()
    );
    tracing::error!(file = %file.display(), "{note}");
    let Some(node) = &settings.node_name else { return };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "sample-operator-node-cleanup".into(),
            instance: Some(node.clone()),
        },
    );
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.clone()),
        // As the kubelet records its Node's events, so that `kubectl describe node` finds it.
        uid: Some(node.clone()),
        ..Default::default()
    };
    let event = Event {
        type_: EventType::Warning,
        reason: ISOLATION_OFF.into(),
        note: Some(note),
        action: "CheckMultus".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &reference).await {
        tracing::warn!(error = %e, "cannot record the Event of Multus' namespace isolation");
    }
}
