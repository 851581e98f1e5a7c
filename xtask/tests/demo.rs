//! `cargo xtask demo` runs from start to end on the local cluster and shows what the README says
//! it shows: each scene waits for what it claims and fails the run when it does not happen.

use std::process::Command;

#[test]
fn the_demo_runs_every_scene() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("demo")
        .current_dir(&root)
        .output()
        .expect("the demo starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the demo failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for shown in [
        // The Foo's Deployment, the Network's attachment definition, the Pod's friend.
        "deployment.apps/example-foo",
        "\"type\": \"bridge\"",
        "my-custom-resource-01",
        // The seed's Network in Neutron, through the real openstack command line, with the
        // gateway it was changed to.
        "| demo-neutron/example-network |",
        "| gateway_ip       | 192.168.0.254",
        "== done.",
    ] {
        assert!(
            stdout.contains(shown),
            "the demo did not show {shown:?}:\n{stdout}"
        );
    }
    // The real-node scene, where this machine can run one: the chart's Pods and a Pod's net1
    // in the Network's prefix.
    if local_cluster::node::preflight(local_cluster::LocalCluster::default().dir()).is_empty() {
        for shown in ["demo-sample-operator-", "real-node-0", "inet 10.99.0."] {
            assert!(
                stdout.contains(shown),
                "the demo's real-node scene did not show {shown:?}:\n{stdout}"
            );
        }
    } else {
        assert!(stdout.contains("== no real-node scene"), "{stdout}");
    }
}
