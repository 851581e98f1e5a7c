//! Starting the real node's processes, and stopping them and undoing what `up` changed.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::config::Identities;
use super::host::{
    FIREWALLS, HOST_PATHS, SYSCTLS, accounting_objects, chains, guard_chains, guard_rule,
    kill_cgroup_processes, kill_processes_running, leftovers, links, our_cgroups, put_guard_first,
    read_sysctl, remove_accounting, remove_cgroups, remove_chains, restore_sysctls, unmount_under,
    write_sysctl,
};
use super::preflight::{HOLDER_PREFIX, Holder, holder, live_elsewhere, unrecorded, which};
use super::{BRIDGE, BRIDGE_MAC, GUARD_CHAIN, NODE_IP, NODE_NAME, NodeState, RealNode, run};
use crate::error::{Error, Result};
use crate::image;
use crate::kubeconfig::write_kubeconfig;
use crate::pki::{self, Identity, Pki};
use crate::process::Component;
use crate::toolchain::NodeBinaries;
use crate::wait::wait_for;

/// Multus reads NetworkAttachmentDefinitions and Pods, and annotates Pods with their networks.
const MULTUS: Identity = Identity {
    file_stem: "multus",
    user: "sample-operator:multus",
    group: None,
};

/// Clears a real node whose run was killed (none of its processes runs) by its own record, from
/// whichever checkout made it; returns that node's folder, or `None` when there was none. A
/// live node or a bridge with no record is left alone: [`preflight`](super::preflight) names them.
pub fn clear_stale() -> Result<Option<PathBuf>> {
    let Holder::Stale(dir) = holder() else {
        return Ok(None);
    };
    eprintln!(
        "real node: clearing the one {} left behind (none of its processes runs)",
        dir.display()
    );
    RealNode { dir: dir.clone() }.down()?;
    Ok(Some(dir))
}

impl RealNode {
    /// Starts the node's processes beside a running cluster and returns once the Node is Ready.
    /// `server` is the apiserver's loopback URL.
    /// [`preflight`] is the caller's, before the binaries are built.
    pub(crate) async fn up(
        &self,
        pki: &Pki,
        server: &str,
        client: &kube::Client,
        bin: &NodeBinaries,
    ) -> Result<()> {
        let apiserver_port: u16 = server
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| Error::Node(format!("no port in {server}")))?;
        // Its names and addresses are fixed: one real node per machine.
        clear_stale()?;
        match holder() {
            Holder::Live(dir) => return Err(Error::Node(live_elsewhere(&dir))),
            Holder::Unrecorded(dir) => return Err(Error::Node(unrecorded(dir.as_deref()))),
            Holder::Free | Holder::Stale(_) => {}
        }
        if self.state().is_some() {
            return Err(Error::Node(format!(
                "the record of an earlier node in {} remains: its `down` did not finish; run \
                 `cargo xtask cluster down` to finish it (it says what is left)",
                self.dir.display()
            )));
        }
        let chains_before = chains();
        if let Some(chain) = guard_chains().find(|c| chains_before.contains(c)) {
            return Err(Error::Node(format!(
                "the chain `{chain}` exists with no record of the node that made it; remove it by \
                 hand (with the rules that jump to it) before starting a real node"
            )));
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        let _ = std::fs::remove_file(self.cni_bridges_file());
        let mut state = NodeState {
            created_paths: HOST_PATHS
                .iter()
                .map(PathBuf::from)
                .filter(|p| !p.exists())
                .collect(),
            links_before: links()?,
            links_made: [BRIDGE.to_owned()].into(),
            chains_made: guard_chains().collect(),
            chains_before,
            accounting_before: accounting_objects(),
            accounting_made: BTreeSet::new(),
            sysctls_before: SYSCTLS
                .iter()
                .filter_map(|(key, _)| Some((key.to_string(), read_sysctl(key)?)))
                .collect(),
            cgroups_before: our_cgroups(),
            components: Vec::new(),
        };
        // Recorded before anything is made, so that `down` can undo a half-made node.
        self.save(&state)?;
        let result = self
            .start(&mut state, pki, server, apiserver_port, client, bin)
            .await;
        // The chains the kubelet and kube-proxy made while it came up, by name; kube-proxy's
        // later per-Service chains are its own `--cleanup`'s.
        let made: Vec<String> = chains().difference(&state.chains_before).cloned().collect();
        state.chains_made.extend(made);
        state.accounting_made = accounting_objects()
            .difference(&state.accounting_before)
            .cloned()
            .collect();
        self.save(&state)?;
        result
    }

    async fn start(
        &self,
        state: &mut NodeState,
        pki: &Pki,
        server: &str,
        apiserver_port: u16,
        client: &kube::Client,
        bin: &NodeBinaries,
    ) -> Result<()> {
        self.network()?;
        // The kubelet runs with `protectKernelDefaults`: it refuses to start unless these hold,
        // and never writes them itself; `down` sets back what they were.
        for (key, value) in SYSCTLS {
            if let Some(value) = value
                && read_sysctl(key).as_deref() != Some(value)
            {
                write_sysctl(key, value)?;
            }
        }
        let ids = self.identities(pki, server)?;
        let logs = self.logs_dir();

        let containerd_config = self.write_containerd_config(bin)?;
        let containerd = Component::start_with_env(
            "containerd",
            &bin.containerd,
            &["--config".into(), containerd_config.display().to_string()],
            &[(
                "PATH".into(),
                format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin.shim_dir.display()),
            )],
            &logs,
        )?;
        state.components.push(containerd);
        self.save(state)?;
        let socket = self.containerd_socket();
        wait_for(
            "containerd to listen",
            Duration::from_secs(30),
            &state.components,
            // Connecting, not the file: a killed containerd leaves its socket behind.
            || async {
                Ok(std::os::unix::net::UnixStream::connect(&socket)
                    .is_ok()
                    .then_some(()))
            },
        )
        .await?;
        // Every Pod's sandbox runs the pause image, so it is there before the kubelet is.
        let busybox = image::busybox_rootfs()?;
        for image in [image::pause_image(&busybox)?, image::busybox_image(&busybox)?] {
            self.import_image(&bin.ctr, &image)?;
        }

        self.write_cni_config(bin, &ids.multus_kubeconfig)?;
        apply_multus_rbac(client).await?;

        let kubelet = Component::start("kubelet", &bin.kubelet, &self.kubelet_args(pki, &ids)?, &logs)?;
        state.components.push(kubelet);
        self.save(state)?;

        let proxy = Component::start(
            "kube-proxy",
            &bin.kube_proxy,
            &[
                "--config".into(),
                self.write_kube_proxy_config(&ids.kube_proxy_kubeconfig)?
                    .display()
                    .to_string(),
            ],
            &logs,
        )?;
        state.components.push(proxy);
        self.save(state)?;

        // Pods reach the apiserver as the `kubernetes` Service (10.0.0.1:443): kube-proxy
        // sends that to the endpoint below, the node address at the apiserver's port, where
        // socat relays to the apiserver on loopback, which stays off every other interface.
        let socat =
            which("socat").ok_or_else(|| Error::Preflight(vec!["`socat`: install Debian's socat".into()]))?;
        let forwarder = Component::start(
            "apiserver-forwarder",
            &socat,
            &[
                format!("TCP-LISTEN:{apiserver_port},bind={NODE_IP},reuseaddr,fork"),
                format!("TCP:127.0.0.1:{apiserver_port}"),
            ],
            &logs,
        )?;
        state.components.push(forwarder);
        self.save(state)?;
        publish_apiserver_endpoint(client, apiserver_port).await?;

        // kube-proxy puts its jumps at the top of FORWARD when it first syncs, in each family
        // it runs (IPv6 too, where the kernel has it); the guard goes above them after that, so
        // that nothing it accepts can leave through the host. The wait lasts until that sync
        // has ended, marked by its rules restore (KUBE-MARK-MASQ's rule): the chains it makes
        // before then, such as its copy of the kubelet's KUBE-FIREWALL, which its `--cleanup`
        // leaves, are then all in the record of what `up` made, for `down` to remove.
        let families: Vec<&str> = if std::path::Path::new("/proc/net/if_inet6").exists() {
            FIREWALLS.to_vec()
        } else {
            vec!["iptables"]
        };
        wait_for(
            "kube-proxy's first sync",
            Duration::from_secs(60),
            &state.components,
            || async {
                for cmd in &families {
                    let forward =
                        run(Command::new(cmd).args(["-S", "FORWARD"])).map_err(|e| e.to_string())?;
                    let nat = run(Command::new(cmd).args(["-t", "nat", "-S"])).map_err(|e| e.to_string())?;
                    if !forward.contains("KUBE-FORWARD") || !nat.contains("-A KUBE-MARK-MASQ ") {
                        return Ok(None);
                    }
                }
                Ok(Some(()))
            },
        )
        .await?;
        put_guard_first()?;

        let nodes: Api<Node> = Api::all(client.clone());
        wait_for(
            "the real node to be Ready",
            Duration::from_secs(120),
            &state.components,
            || async {
                match nodes.get_opt(NODE_NAME).await {
                    Ok(Some(node)) if is_ready(&node) => Ok(Some(())),
                    Ok(Some(_)) => Err(format!("{NODE_NAME} registered, not Ready yet")),
                    Ok(None) => Err(format!("{NODE_NAME} not registered yet")),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await
    }

    /// The Pod bridge with the node address (new: `up` has cleared or refused an existing one),
    /// and the guard that drops whatever would be forwarded out of the node's bridges.
    fn network(&self) -> Result<()> {
        run(Command::new("ip").args(["link", "add", BRIDGE, "address", BRIDGE_MAC, "type", "bridge"]))?;
        // The bridge names its node's folder, so that another checkout can find the record of
        // a node whose run was killed, and clear it.
        let dir = std::fs::canonicalize(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        run(Command::new("ip")
            .args(["link", "set", "dev", BRIDGE, "alias"])
            .arg(format!("{HOLDER_PREFIX}{}", dir.display())))?;
        run(Command::new("ip").args(["addr", "add", &format!("{NODE_IP}/16"), "dev", BRIDGE]))?;
        run(Command::new("ip").args(["link", "set", BRIDGE, "up"]))?;
        // The guard names its bridges exactly: this one here, each Network bridge as the node's
        // CNI `bridge` is about to make it.
        for cmd in FIREWALLS {
            run(Command::new(cmd).args(["-N", GUARD_CHAIN]))?;
            run(Command::new(cmd)
                .args(["-A", GUARD_CHAIN])
                .args(guard_rule(BRIDGE)))?;
        }
        put_guard_first()
    }

    /// Certificates and kubeconfigs of the kubelet, kube-proxy and Multus.
    fn identities(&self, pki: &Pki, server: &str) -> Result<Identities> {
        let kubeconfig = |id: &Identity| -> Result<PathBuf> {
            pki.add_client(id)?;
            let path = self.dir.join(format!("{}.kubeconfig", id.file_stem));
            write_kubeconfig(&path, server, pki, id)?;
            Ok(path)
        };
        let (serving_cert, serving_key) =
            pki.add_serving("kubelet-serving", NODE_NAME, IpAddr::V4(NODE_IP))?;
        Ok(Identities {
            kubelet_kubeconfig: kubeconfig(&pki::KUBELET)?,
            kube_proxy_kubeconfig: kubeconfig(&pki::KUBE_PROXY)?,
            multus_kubeconfig: kubeconfig(&MULTUS)?,
            serving_cert,
            serving_key,
        })
    }

    /// Stops everything `up` started and undoes what it changed; safe to run twice and after a
    /// failed `up`. Errors are collected, not stopped at, so that one stuck step does not
    /// leave the rest behind.
    pub fn down(&self) -> Result<()> {
        let Some(state) = self.state() else {
            return Ok(());
        };
        let mut errors = Vec::new();
        // The kubelet first, so that it restarts nothing; then every container process.
        for c in state.components.iter().rev().filter(|c| c.name == "kubelet") {
            c.stop(Duration::from_secs(10));
        }
        kill_cgroup_processes(&state.cgroups_before);
        for c in state.components.iter().rev() {
            c.stop(Duration::from_secs(10));
        }
        // containerd's shims outlive it; they are ours when they run our shim binary.
        if let Some(containerd) = state.components.iter().find(|c| c.name == "containerd") {
            let shim = containerd.binary.with_file_name("containerd-shim-runc-v2");
            kill_processes_running(&shim);
        }
        // kube-proxy's own cleanup of its rules and per-Service chains, when its chains are
        // ours (made while `up` ran); the rest goes below by exact name.
        if let Some(proxy) = state.components.iter().find(|c| c.name == "kube-proxy")
            && state.chains_made.contains("iptables nat KUBE-SERVICES")
        {
            let _ = Command::new(&proxy.binary).arg("--cleanup").output();
        }
        if let Err(e) = unmount_under(&self.dir) {
            errors.push(e.to_string());
        }
        for path in &state.created_paths {
            if let Err(e) = unmount_under(path) {
                errors.push(e.to_string());
            }
        }
        remove_cgroups(&state.cgroups_before, &mut errors);
        let present = links().unwrap_or_default();
        for link in self.links_made(&state) {
            if present.contains(&link)
                && !state.links_before.contains(&link)
                && let Err(e) = run(Command::new("ip").args(["link", "delete", &link]))
            {
                errors.push(e.to_string());
            }
        }
        remove_chains(&state.chains_made, &state.chains_before, &mut errors);
        remove_accounting(&state.accounting_made, &state.accounting_before, &mut errors);
        restore_sysctls(&state.sysctls_before, &mut errors);
        for path in &state.created_paths {
            if path.exists()
                && let Err(e) = std::fs::remove_dir_all(path)
            {
                errors.push(format!("{}: {e}", path.display()));
            }
        }
        let left = leftovers(&state, self);
        errors.extend(left);
        if errors.is_empty() {
            self.state_file().remove();
            Ok(())
        } else {
            Err(Error::Node(format!(
                "stopping left these behind:\n  {}",
                errors.join("\n  ")
            )))
        }
    }
}

/// The apiserver runs with `--endpoint-reconciler-type=none` (a loopback address is no valid
/// endpoint), so the `kubernetes` Service gets its endpoint here: the node address, where the
/// forwarder listens.
async fn publish_apiserver_endpoint(client: &kube::Client, port: u16) -> Result<()> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let slice = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes-real-node",
            "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": "local-cluster.sample-operator.local",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{ "addresses": [NODE_IP.to_string()], "conditions": { "ready": true } }],
        "ports": [{ "name": "https", "port": port, "protocol": "TCP" }],
    });
    slices
        .patch(
            "kubernetes-real-node",
            &PatchParams::apply("local-cluster").force(),
            &Patch::Apply(slice),
        )
        .await?;
    Ok(())
}

async fn apply_multus_rbac(client: &kube::Client) -> Result<()> {
    let params = PatchParams::apply("local-cluster").force();
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": { "name": "sample-operator:multus" },
        "rules": [
            { "apiGroups": ["k8s.cni.cncf.io"], "resources": ["network-attachment-definitions"], "verbs": ["get", "list", "watch"] },
            { "apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get", "update", "patch"] },
            { "apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"] },
        ],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": { "name": "sample-operator:multus" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "sample-operator:multus" },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": MULTUS.user }],
    });
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    roles
        .patch("sample-operator:multus", &params, &Patch::Apply(role))
        .await?;
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    bindings
        .patch("sample-operator:multus", &params, &Patch::Apply(binding))
        .await?;
    Ok(())
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
