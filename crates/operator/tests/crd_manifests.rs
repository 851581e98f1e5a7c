//! The CRD manifests under `deploy/` are generated from the Rust types; this fails when someone
//! changes a type and forgets to regenerate them (or edits the YAML by hand).

use std::process::Command;

/// Each committed manifest, and the arguments of `sample-operator` that print it.
const MANIFESTS: [(&str, &[&str]); 4] = [
    ("deploy/crds/crds.yaml", &["crd"]),
    ("deploy/helm/sample-operator/crds/crds.yaml", &["crd"]),
    ("deploy/crds/example.com/foos.yaml", &["crd", "--example-com"]),
    (
        "deploy/helm/sample-operator/files/foos.example.com.yaml",
        &["crd", "--example-com"],
    ),
];

fn committed(path: &str) -> String {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    std::fs::read_to_string(format!("{root}/{path}")).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn committed_crds_match_what_the_types_generate() {
    for (path, args) in MANIFESTS {
        let output = Command::new(env!("CARGO_BIN_EXE_sample-operator"))
            .args(args)
            .output()
            .expect("run sample-operator crd");
        assert!(
            output.status.success(),
            "sample-operator crd failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let generated = String::from_utf8(output.stdout).expect("UTF-8 YAML");
        assert!(
            generated == committed(path),
            "{path} is stale; regenerate the CRD manifests with\n  cargo xtask crds"
        );
    }
}

#[test]
fn every_crd_document_names_its_group() {
    let default = committed("deploy/crds/crds.yaml");
    for name in [
        "networks.samplecrd.k8s.io",
        "foos.samplecontroller.k8s.io",
        "mycustomresources.poc.test.domain",
    ] {
        assert!(default.contains(&format!("name: {name}")), "{name} missing");
    }
    assert!(
        !default.contains("name: foos.example.com"),
        "installed only when asked for"
    );
    let example_com = committed("deploy/crds/example.com/foos.yaml");
    assert!(example_com.contains("name: foos.example.com"));
}
