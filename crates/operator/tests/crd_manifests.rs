//! The CRD manifests under `deploy/crds/` are generated from the Rust types; this fails when
//! someone changes a type and forgets to regenerate them (or edits the YAML by hand).

use std::process::Command;

#[test]
fn committed_crds_match_what_the_types_generate() {
    let output = Command::new(env!("CARGO_BIN_EXE_sample-operator"))
        .arg("crd")
        .output()
        .expect("run sample-operator crd");
    assert!(
        output.status.success(),
        "sample-operator crd failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let generated = String::from_utf8(output.stdout).expect("UTF-8 YAML");
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/crds/crds.yaml");
    let committed = std::fs::read_to_string(path).expect("deploy/crds/crds.yaml exists");
    assert!(
        generated == committed,
        "deploy/crds/crds.yaml is stale; regenerate it with\n  cargo run -p sample-operator -- crd > deploy/crds/crds.yaml"
    );
}

#[test]
fn every_crd_document_names_its_group() {
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/crds/crds.yaml"
    ))
    .unwrap();
    for name in [
        "networks.samplecrd.k8s.io",
        "foos.samplecontroller.k8s.io",
        "mycustomresources.poc.test.domain",
    ] {
        assert!(committed.contains(&format!("name: {name}")), "{name} missing");
    }
}

#[test]
fn the_helm_chart_ships_the_same_crds() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let plain = std::fs::read_to_string(format!("{root}/deploy/crds/crds.yaml")).unwrap();
    let chart =
        std::fs::read_to_string(format!("{root}/deploy/helm/sample-operator/crds/crds.yaml")).unwrap();
    assert!(
        plain == chart,
        "deploy/helm/sample-operator/crds/crds.yaml is stale; copy deploy/crds/crds.yaml over it"
    );
}
