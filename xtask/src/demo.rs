//! `cargo xtask demo`: the operator at work on the seeds' samples, on the local cluster.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};
use local_cluster::node::NODE_LABEL;
use local_cluster::openstack::{self, OpenStack};
use local_cluster::{LocalCluster, paths, process, toolchain};

/// Where the demo's objects live; recreated on every run so the demo can be repeated.
const NAMESPACE: &str = "demo";
/// Where the Networks of the second operator, the one with the Neutron backend, live.
const NEUTRON_NAMESPACE: &str = "demo-neutron";
/// The `Ready` condition's reason and status, as kubectl jsonpaths.
const READY_REASON: &str = r#".status.conditions[?(@.type=="Ready")].reason"#;
const READY_STATUS: &str = r#".status.conditions[?(@.type=="Ready")].status"#;

struct Demo {
    kubectl: PathBuf,
    kubeconfig: PathBuf,
    root: PathBuf,
}

impl Demo {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.env("KUBECONFIG", &self.kubeconfig).args(args);
        cmd
    }

    /// Runs kubectl, echoing the command line as a user would type it.
    fn show(&self, args: &[&str]) -> Result<()> {
        println!("\n$ kubectl {}", args.join(" "));
        Ok(process::run(&mut self.command(args))?)
    }

    /// Runs kubectl quietly, failing with its error output.
    fn quiet(&self, args: &[&str]) -> Result<String> {
        Ok(process::output(&mut self.command(args))?)
    }

    /// Shows a command that is expected to fail, with its error.
    fn show_refusal(&self, args: &[&str]) -> Result<()> {
        println!("\n$ kubectl {}", args.join(" "));
        let output = self.command(args).output()?;
        if output.status.success() {
            bail!("kubectl {} was expected to be refused", args.join(" "));
        }
        print!("{}", String::from_utf8_lossy(&output.stderr));
        Ok(())
    }

    /// Waits until `jsonpath` of `resource` equals `value`, as `kubectl wait` does.
    fn wait(&self, resource: &str, jsonpath: &str, value: &str) -> Result<()> {
        self.wait_in(NAMESPACE, resource, jsonpath, value)
    }

    fn wait_in(&self, namespace: &str, resource: &str, jsonpath: &str, value: &str) -> Result<()> {
        let condition = format!("--for=jsonpath={{{jsonpath}}}={value}");
        self.quiet(&["wait", "-n", namespace, resource, &condition, "--timeout=90s"])
            .with_context(|| format!("waiting for {resource} {jsonpath}={value}"))?;
        Ok(())
    }

    fn sample(&self, name: &str) -> String {
        self.root.join("samples").join(name).display().to_string()
    }
}

pub async fn run(cluster: &LocalCluster) -> Result<()> {
    println!("== starting the local cluster (the first run builds Kubernetes from Go modules)");
    // With root and the kernel features it needs, a real node too, for the last scene.
    let problems = local_cluster::node::preflight(cluster.dir());
    let options = local_cluster::UpOptions {
        real_node: problems.is_empty(),
        ..Default::default()
    };
    let state = cluster.up_with(options).await?;
    println!("Kubernetes {} at {}", state.kubernetes_version, state.server);
    let demo = Demo {
        kubectl: toolchain::ensure()?.kubectl,
        kubeconfig: cluster.kubeconfig(),
        root: paths::repo_root(),
    };
    demo.show(&["get", "nodes"])?;

    println!("\n== installing the CRDs generated from the Rust types");
    let crds = demo.root.join("deploy/crds").display().to_string();
    demo.show(&["apply", "--server-side", "--force-conflicts", "-f", &crds])?;
    // Seed 004's group too, which a cluster installs only when it uses it (see docs/controllers.md).
    let example_com = demo.root.join("deploy/crds/example.com").display().to_string();
    demo.show(&["apply", "--server-side", "--force-conflicts", "-f", &example_com])?;
    // Multus is not installed here: its NetworkAttachmentDefinition CRD stands in for it, so the
    // Network controller's backend has somewhere to write.
    let multus = demo
        .root
        .join("deploy/testing/network-attachment-definition-crd.yaml")
        .display()
        .to_string();
    demo.show(&["apply", "--server-side", "--force-conflicts", "-f", &multus])?;
    demo.quiet(&[
        "wait",
        "--for=condition=Established",
        "crd",
        "--all",
        "--timeout=60s",
    ])?;
    println!(
        "\n== starting Keystone and neutron-server from PyPI for the Neutron backend (the first \
         run installs them into virtualenvs, a few minutes)"
    );
    let bed = OpenStack::new(cluster.dir().to_owned());
    let state = bed.up().await?;
    println!(
        "Keystone at {}, neutron-server at {}",
        state.keystone_url, state.neutron_url
    );
    println!(
        "\n== building the operator: one static binary, for this host and for its image (the first \
         build compiles its dependencies for {}, a few minutes)",
        crate::cargo_build::STATIC_TARGET
    );
    let binary = crate::cargo_build::operator_static("dev", false)?;
    println!("{}", binary.display());
    println!(
        "\n== starting the operator (logs in {})",
        cluster.logs_dir().join("sample-operator.log").display()
    );
    println!("$ sample-operator {}", operator_args().join(" "));
    let mut operator = start_operator(cluster, &binary, &operator_args(), "sample-operator.log")?;
    // The Networks of an earlier run keep their finalizers until an operator of their backend
    // lets them go: both run while the namespaces are deleted.
    let mut leftover = start_operator(
        cluster,
        &binary,
        &neutron_operator_args(&bed),
        "sample-operator-neutron.log",
    )?;
    for namespace in [NAMESPACE, NEUTRON_NAMESPACE] {
        let _ = demo.quiet(&[
            "delete",
            "namespace",
            namespace,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=120s",
        ]);
    }
    stop_operator(&mut leftover);
    demo.quiet(&["create", "namespace", NAMESPACE])?;
    let result = scenes(&demo);
    stop_operator(&mut operator);
    result?;
    neutron_scene(&demo, cluster, &binary, &bed)?;
    if problems.is_empty() {
        real_node_scene(&demo, cluster)?;
    } else {
        println!(
            "\n== no real-node scene: this machine cannot run a real node:\n  - {}",
            problems.join("\n  - ")
        );
    }

    println!("\n== done. The cluster keeps running; `cargo xtask cluster down` stops it.");
    println!("Run the operator yourself with:");
    println!("  export KUBECONFIG={}", cluster.kubeconfig().display());
    println!("  {} run", binary.display());
    Ok(())
}

/// Where the chart installs the operator on the real node, and its Network and Pod live.
const REAL_NAMESPACE: &str = "demo-real-node";

/// The operator as its users run it: its image (written here without Docker) installed by its
/// chart onto the real node, leading and standing by; then a Pod on that node attached to a
/// Network by Multus, through the attachment definition the in-cluster operator wrote.
fn real_node_scene(demo: &Demo, cluster: &LocalCluster) -> Result<()> {
    println!(
        "\n== the real node: the operator's image, built without Docker and imported into its containerd"
    );
    let image = crate::image::run(
        cluster,
        &crate::image::ImageArgs {
            profile: "dev".into(),
            binary: None,
            no_import: false,
            compare_elsewhere: false,
        },
    )?;
    println!(
        "\n== the real node: the chart installs the operator there (built from Go modules the first time: helm)"
    );
    let helm = toolchain::helm()?;
    let chart = demo
        .root
        .join("deploy/helm/sample-operator")
        .display()
        .to_string();
    let node_selector = format!(r#"nodeSelector={{"{NODE_LABEL}":"true"}}"#);
    let tolerations =
        format!(r#"tolerations=[{{"key":"{NODE_LABEL}","operator":"Exists","effect":"NoSchedule"}}]"#);
    let args = [
        "upgrade",
        "--install",
        "demo",
        &chart,
        "--namespace",
        REAL_NAMESPACE,
        "--create-namespace",
        "--set",
        "image.pullPolicy=Never",
        // By digest, as in production: a new image is a new Pod template, so a rollout.
        "--set",
        &format!("image.digest={}", image.digest),
        "--set",
        &format!("watchNamespace={REAL_NAMESPACE}"),
        "--set-json",
        &node_selector,
        "--set-json",
        &tolerations,
        // The prefixes tenants may use: the chart asks for them (the demo's Network is in it).
        "--set",
        "networkAddressPolicy.allowedPrefixes={10.99.0.0/16}",
        "--wait",
        "--timeout=180s",
    ];
    println!("\n$ helm {}", args.join(" "));
    process::run(Command::new(&helm).args(args).env("KUBECONFIG", &demo.kubeconfig))?;
    // Pods of an earlier run's image go once the new ones are Ready.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let operator_pods = |output| {
        [
            "get",
            "pods",
            "-n",
            REAL_NAMESPACE,
            "-l",
            "app.kubernetes.io/instance=demo",
            "-o",
            output,
        ]
    };
    while demo.quiet(&operator_pods("name"))?.lines().count() > 2 {
        if std::time::Instant::now() > deadline {
            bail!("the operator's old Pods did not go within 90 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    demo.show(&operator_pods("wide"))?;
    demo.show(&["get", "lease", "-n", REAL_NAMESPACE, "demo-sample-operator"])?;

    println!("\n== the real node: a Pod attached to a Network gets net1 in its prefix");
    // An earlier run's Pod, whose interface came from then.
    demo.quiet(&[
        "delete",
        "pod",
        "-n",
        REAL_NAMESPACE,
        "attached",
        "--ignore-not-found",
        "--wait=true",
    ])?;
    let network = String::from(
        "apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: lab\nspec:\n  cidr: 10.99.0.0/24\n  gateway: 10.99.0.1\n",
    );
    apply_stdin_in(demo, REAL_NAMESPACE, &network)?;
    demo.wait_in(REAL_NAMESPACE, "network/lab", READY_STATUS, "True")?;
    let pod = format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: attached
  annotations:
    k8s.v1.cni.cncf.io/networks: lab
spec:
  nodeSelector:
    {NODE_LABEL}: \"true\"
  tolerations:
  - {{key: {NODE_LABEL}, operator: Exists, effect: NoSchedule}}
  terminationGracePeriodSeconds: 5
  containers:
  - name: sh
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [/bin/sh, -c, \"trap 'exit 0' TERM; while true; do sleep 1; done\"]
",
        BUSYBOX = local_cluster::image::BUSYBOX,
    );
    apply_stdin_in(demo, REAL_NAMESPACE, &pod)?;
    demo.quiet(&[
        "wait",
        "-n",
        REAL_NAMESPACE,
        "--for=condition=Ready",
        "pod/attached",
        "--timeout=90s",
    ])?;
    demo.show(&["get", "pod", "-n", REAL_NAMESPACE, "attached", "-o", "wide"])?;
    demo.show(&[
        "exec",
        "-n",
        REAL_NAMESPACE,
        "attached",
        "--",
        "ip",
        "-4",
        "addr",
        "show",
        "net1",
    ])?;
    Ok(())
}

fn scenes(demo: &Demo) -> Result<()> {
    foo_scene(demo)?;
    example_foo_scene(demo)?;
    network_scene(demo)?;
    my_custom_resource_scene(demo)?;
    println!("\n== admission refuses invalid objects, naming the field");
    demo.show_refusal(&[
        "apply",
        "-n",
        NAMESPACE,
        "-f",
        &demo.sample("invalid/foo-replicas-11.yaml"),
    ])?;
    demo.show_refusal(&[
        "apply",
        "-n",
        NAMESPACE,
        "-f",
        &demo.sample("invalid/network-gateway-outside.yaml"),
    ])?;
    Ok(())
}

/// Seed 004's Foo, in its `example.com` group, through the same controller code.
fn example_foo_scene(demo: &Demo) -> Result<()> {
    const FOO: &str = "foos.example.com/foo-sample";
    println!("\n== Foo (example.com): seed 004's foo-sample, applied unchanged");
    demo.show(&["apply", "-n", NAMESPACE, "-f", &demo.sample("example-foo.yaml")])?;
    demo.wait(FOO, ".status.availableReplicas", "1")?;
    demo.show(&["get", "-n", NAMESPACE, FOO, "deployment/foo-sample"])?;
    println!("\n== Foo (example.com): scaled as the seed does, to 2");
    demo.show(&[
        "patch",
        "-n",
        NAMESPACE,
        "foos.example.com",
        "foo-sample",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas": 2}}"#,
    ])?;
    demo.wait(FOO, ".status.availableReplicas", "2")?;
    demo.show(&["get", "-n", NAMESPACE, FOO, "deployment/foo-sample", "-o", "wide"])?;

    println!(
        "\n== Foo (both groups): a samplecontroller.k8s.io Foo asking for the same Deployment is refused"
    );
    let rival = "apiVersion: samplecontroller.k8s.io/v1alpha1\nkind: Foo\nmetadata:\n  name: rival\nspec:\n  deploymentName: foo-sample\n  replicas: 5\n";
    apply_stdin(demo, rival)?;
    demo.wait(
        "foos.samplecontroller.k8s.io/rival",
        READY_REASON,
        "ResourceExists",
    )?;
    demo.show(&[
        "get",
        "-n",
        NAMESPACE,
        "foos.samplecontroller.k8s.io/rival",
        "-o",
        "wide",
    ])?;
    demo.show(&[
        "get",
        "-n",
        NAMESPACE,
        "deployment/foo-sample",
        "-o",
        "jsonpath={.spec.replicas} replicas, owned by {.metadata.ownerReferences[0].apiVersion}{\"\\n\"}",
    ])?;
    demo.quiet(&["delete", "-n", NAMESPACE, "foos.samplecontroller.k8s.io", "rival"])?;
    demo.show(&[
        "delete",
        "-n",
        NAMESPACE,
        "-f",
        &demo.sample("example-foo.yaml"),
        "--wait=true",
    ])?;
    Ok(())
}

fn foo_scene(demo: &Demo) -> Result<()> {
    println!("\n== Foo: the seed's example-foo gets an nginx Deployment it owns");
    demo.show(&["apply", "-n", NAMESPACE, "-f", &demo.sample("foo.yaml")])?;
    demo.wait(
        "foos.samplecontroller.k8s.io/example-foo",
        ".status.availableReplicas",
        "1",
    )?;
    demo.show(&[
        "get",
        "-n",
        NAMESPACE,
        "foos.samplecontroller.k8s.io,deployments",
        "-o",
        "wide",
    ])?;

    println!("\n== Foo: scaled from 1 to 3, availableReplicas follows");
    demo.show(&[
        "patch",
        "-n",
        NAMESPACE,
        "foos.samplecontroller.k8s.io",
        "example-foo",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":3}}"#,
    ])?;
    demo.wait(
        "foos.samplecontroller.k8s.io/example-foo",
        ".status.availableReplicas",
        "3",
    )?;
    demo.show(&[
        "get",
        "-n",
        NAMESPACE,
        "foos.samplecontroller.k8s.io/example-foo",
        "deployment/example-foo",
    ])?;

    println!("\n== Foo: a Deployment it does not own is left alone");
    demo.show(&[
        "create",
        "deployment",
        "-n",
        NAMESPACE,
        "someone-elses",
        "--image=nginx:1.27",
    ])?;
    let colliding = "apiVersion: samplecontroller.k8s.io/v1alpha1\nkind: Foo\nmetadata:\n  name: colliding\nspec:\n  deploymentName: someone-elses\n  replicas: 1\n";
    apply_stdin(demo, colliding)?;
    demo.wait(
        "foos.samplecontroller.k8s.io/colliding",
        READY_REASON,
        "ResourceExists",
    )?;
    demo.show(&[
        "get",
        "-n",
        NAMESPACE,
        "foos.samplecontroller.k8s.io/colliding",
        "-o",
        "wide",
    ])?;
    demo.show(&[
        "get",
        "events.events.k8s.io",
        "-n",
        NAMESPACE,
        "--field-selector=regarding.name=colliding",
    ])?;

    println!(
        "\n== Foo: deleting it deletes its Deployment (the garbage collector follows the owner reference)"
    );
    demo.show(&[
        "delete",
        "-n",
        NAMESPACE,
        "foos.samplecontroller.k8s.io",
        "example-foo",
        "--wait=true",
    ])?;
    demo.quiet(&[
        "wait",
        "-n",
        NAMESPACE,
        "--for=delete",
        "deployment/example-foo",
        "--timeout=60s",
    ])?;
    // Both kinds, so kubectl names each row with its kind: the Foo and its Deployment are gone,
    // the colliding Foo and the Deployment it did not own are left.
    demo.show(&["get", "-n", NAMESPACE, "foos.samplecontroller.k8s.io,deployments"])?;
    Ok(())
}

fn network_scene(demo: &Demo) -> Result<()> {
    println!("\n== Network: the seed's example-network becomes Ready, with its attachment definition");
    demo.show(&["apply", "-n", NAMESPACE, "-f", &demo.sample("network.yaml")])?;
    demo.wait("network/example-network", READY_STATUS, "True")?;
    demo.show(&["get", "-n", NAMESPACE, "network/example-network", "-o", "wide"])?;
    demo.show(&[
        "get",
        "-n",
        NAMESPACE,
        "network-attachment-definitions",
        "example-network",
        "-o",
        "jsonpath={.spec.config}",
    ])?;
    println!();

    println!("\n== Network: an overlapping Network in the same namespace is refused");
    let overlapping = "apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: overlapping\nspec:\n  cidr: 192.168.10.0/24\n  gateway: 192.168.10.1\n";
    apply_stdin(demo, overlapping)?;
    demo.wait("network/overlapping", READY_REASON, "CIDRConflict")?;
    demo.show(&["get", "-n", NAMESPACE, "networks", "-o", "wide"])?;
    demo.show(&[
        "get",
        "-n",
        NAMESPACE,
        "network/overlapping",
        "-o",
        r#"jsonpath={.status.conditions[?(@.type=="Ready")].message}"#,
    ])?;
    println!();

    println!("\n== Network: deleting the older one cleans it from the backend, and the newer recovers");
    demo.show(&[
        "delete",
        "-n",
        NAMESPACE,
        "network",
        "example-network",
        "--wait=true",
    ])?;
    demo.wait("network/overlapping", READY_STATUS, "True")?;
    demo.show(&["get", "-n", NAMESPACE, "networks,network-attachment-definitions"])?;
    Ok(())
}

/// The seeds' own backend: a second operator, with `--network-backend neutron`, for the
/// Networks of its namespace, against the test bed's Keystone and neutron-server, looked at
/// with the real `openstack` command line.
fn neutron_scene(demo: &Demo, cluster: &LocalCluster, binary: &Path, bed: &OpenStack) -> Result<()> {
    println!(
        "\n== Neutron: a second operator, for the Networks of namespace {NEUTRON_NAMESPACE} (logs in {})",
        cluster.logs_dir().join("sample-operator-neutron.log").display()
    );
    let args = neutron_operator_args(bed);
    println!("$ sample-operator {}", args.join(" "));
    demo.quiet(&["create", "namespace", NEUTRON_NAMESPACE])?;
    let mut operator = start_operator(cluster, binary, &args, "sample-operator-neutron.log")?;
    let result = neutron_steps(demo, bed);
    stop_operator(&mut operator);
    result
}

fn neutron_steps(demo: &Demo, bed: &OpenStack) -> Result<()> {
    let network = "network/example-network";
    println!("\n== Neutron: the seed's example-network appears in Neutron, tagged as ours");
    demo.show(&[
        "apply",
        "-n",
        NEUTRON_NAMESPACE,
        "-f",
        &demo.sample("network.yaml"),
    ])?;
    demo.wait_in(NEUTRON_NAMESPACE, network, READY_STATUS, "True")?;
    demo.show(&["get", "-n", NEUTRON_NAMESPACE, network, "-o", "wide"])?;
    let name = format!("{NEUTRON_NAMESPACE}/example-network");
    let subnet_show = [
        "subnet",
        "show",
        &name,
        "-c",
        "cidr",
        "-c",
        "gateway_ip",
        "-c",
        "allocation_pools",
    ];
    // By its name: the project may hold other networks (other clusters', other tests').
    show_openstack(
        bed,
        &[
            "network", "list", "--name", &name, "--long", "-c", "Name", "-c", "Subnets", "-c", "Tags",
        ],
    )?;
    show_openstack(bed, &subnet_show)?;

    println!("\n== Neutron: a new gateway is updated in place");
    demo.show(&[
        "patch",
        "-n",
        NEUTRON_NAMESPACE,
        network,
        "--type=merge",
        "-p",
        r#"{"spec":{"gateway":"192.168.0.254"}}"#,
    ])?;
    demo.wait_in(NEUTRON_NAMESPACE, network, ".status.observedGeneration", "2")?;
    demo.wait_in(NEUTRON_NAMESPACE, network, READY_STATUS, "True")?;
    show_openstack(bed, &subnet_show)?;

    println!("\n== Neutron: deleting the Network removes it from Neutron, then from Kubernetes");
    demo.show(&["delete", "-n", NEUTRON_NAMESPACE, network, "--wait=true"])?;
    show_openstack(
        bed,
        &["network", "list", "--name", &name, "-c", "Name", "-c", "Subnets"],
    )?;
    Ok(())
}

/// Runs the `openstack` command line as the operator's cloud, echoing it as a user would type it.
fn show_openstack(bed: &OpenStack, args: &[&str]) -> Result<()> {
    println!("\n$ openstack {}", args.join(" "));
    let shown = process::output(&mut bed.openstack_as(openstack::CLOUD, args))?;
    // An empty table prints nothing at all, or an empty line.
    print!(
        "{}",
        if shown.trim().is_empty() {
            "(nothing)\n".into()
        } else {
            shown
        }
    );
    Ok(())
}

fn my_custom_resource_scene(demo: &Demo) -> Result<()> {
    println!("\n== MyCustomResource: the kubebuilder tutorial's flow");
    demo.show(&[
        "apply",
        "-n",
        NAMESPACE,
        "-f",
        &demo.sample("my-custom-resource.yaml"),
    ])?;
    demo.wait(
        "mycustomresource/my-custom-resource-01",
        ".status.Healthy",
        "false",
    )?;
    demo.show(&["get", "-n", NAMESPACE, "mycustomresources"])?;
    println!("\nA Pod named as my-custom-resource-01's spec.name appears:");
    demo.show(&[
        "run",
        "-n",
        NAMESPACE,
        "funny-joe",
        "--image=ubuntu:latest",
        "--command",
        "--",
        "sleep",
        "infinity",
    ])?;
    demo.wait(
        "mycustomresource/my-custom-resource-01",
        ".status.Healthy",
        "true",
    )?;
    demo.show(&["get", "-n", NAMESPACE, "mycustomresources,pods"])?;
    println!("\nThe Pod goes away:");
    demo.show(&["delete", "-n", NAMESPACE, "pod", "funny-joe", "--wait=true"])?;
    demo.wait(
        "mycustomresource/my-custom-resource-01",
        ".status.Healthy",
        "false",
    )?;
    demo.show(&["get", "-n", NAMESPACE, "mycustomresources"])?;
    Ok(())
}

fn apply_stdin(demo: &Demo, yaml: &str) -> Result<()> {
    apply_stdin_in(demo, NAMESPACE, yaml)
}

fn apply_stdin_in(demo: &Demo, namespace: &str, yaml: &str) -> Result<()> {
    use std::io::Write;
    println!("\n$ kubectl apply -n {namespace} -f - <<EOF\n{yaml}EOF");
    let mut child = demo
        .command(&["apply", "-n", namespace, "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()?;
    child.stdin.take().context("stdin")?.write_all(yaml.as_bytes())?;
    if !child.wait()?.success() {
        bail!("kubectl apply failed");
    }
    Ok(())
}

/// The first operator: every controller, the Multus backend, the demo's namespace.
fn operator_args() -> Vec<String> {
    vec![
        "run".into(),
        "--metrics-address=127.0.0.1:0".into(),
        "--probe-address=127.0.0.1:0".into(),
        "--controllers=network,foo,foo-example,my-custom-resource".into(),
        format!("--namespace={NAMESPACE}"),
    ]
}

/// The second: Networks only, to Neutron, in their own namespace.
fn neutron_operator_args(bed: &OpenStack) -> Vec<String> {
    vec![
        "run".into(),
        "--metrics-address=127.0.0.1:0".into(),
        "--probe-address=127.0.0.1:0".into(),
        "--controllers=network".into(),
        format!("--namespace={NEUTRON_NAMESPACE}"),
        "--network-backend=neutron".into(),
        format!("--os-cloud={}", openstack::CLOUD),
        format!("--os-client-config-file={}", bed.clouds_yaml().display()),
    ]
}

/// Starts the operator's `binary` against the local cluster, logging to the cluster's logs.
fn start_operator(cluster: &LocalCluster, binary: &Path, args: &[String], log: &str) -> Result<Child> {
    let log = std::fs::File::create(cluster.logs_dir().join(log))?;
    let child = Command::new(binary)
        .args(args)
        .arg(format!("--kubeconfig={}", cluster.kubeconfig().display()))
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting the operator")?;
    Ok(child)
}

/// SIGTERM, as Kubernetes would stop it: in-flight reconciles finish, then it exits.
fn stop_operator(child: &mut Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
}
