//! `cargo xtask demo` runs from start to end on the local cluster and shows what the README says
//! it shows: each scene waits for what it claims and fails the run when it does not happen, and
//! this test finds in each scene's own output, between its `== ` header and the next, what that
//! scene alone produces.

use std::process::Command;

/// One scene of the demo, and what its own output shows.
struct Scene {
    /// How its header line starts, after `== `. Exactly one header of the run starts so.
    header: &'static str,
    /// Lines the scene prints, in this order, each on a later line than the one before. `…`
    /// separates fragments that the one line holds in this order.
    shows: &'static [&'static str],
    /// Text that appears nowhere in the scene's output.
    hides: &'static [&'static str],
}

/// The scenes of every run, in the order the demo plays them.
const SCENES: &[Scene] = &[
    Scene {
        header: "starting the local cluster",
        shows: &[
            "Kubernetes v…at https://",
            "$ kubectl get nodes",
            "kwok-node-0…Ready",
        ],
        hides: &[],
    },
    Scene {
        header: "installing the CRDs generated from the Rust types",
        shows: &[
            "customresourcedefinition.apiextensions.k8s.io/networks.samplecrd.k8s.io serverside-applied",
            "customresourcedefinition.apiextensions.k8s.io/foos.samplecontroller.k8s.io serverside-applied",
            "customresourcedefinition.apiextensions.k8s.io/mycustomresources.poc.test.domain serverside-applied",
            "customresourcedefinition.apiextensions.k8s.io/foos.example.com serverside-applied",
            "customresourcedefinition.apiextensions.k8s.io/network-attachment-definitions.k8s.cni.cncf.io serverside-applied",
        ],
        hides: &[],
    },
    Scene {
        header: "starting Keystone and neutron-server",
        shows: &["Keystone at http://…/v3, neutron-server at http://"],
        hides: &[],
    },
    Scene {
        header: "building the operator: one static binary, for this host and for its image",
        shows: &["x86_64-unknown-linux-musl/debug/sample-operator"],
        hides: &[],
    },
    Scene {
        header: "starting the operator",
        shows: &[
            "$ sample-operator run…--controllers=network,foo,foo-example,my-custom-resource…--namespace=demo",
        ],
        hides: &[],
    },
    Scene {
        header: "Foo: the seed's example-foo gets an nginx Deployment it owns",
        shows: &[
            "foo.samplecontroller.k8s.io/example-foo created",
            "foo.samplecontroller.k8s.io/example-foo…example-foo…1…1…True…Available",
            "deployment.apps/example-foo…1/1…nginx",
        ],
        hides: &[],
    },
    Scene {
        header: "Foo: scaled from 1 to 3",
        shows: &[
            "foo.samplecontroller.k8s.io/example-foo patched",
            "foo.samplecontroller.k8s.io/example-foo…example-foo…3…3…True",
            "deployment.apps/example-foo…3/3",
        ],
        hides: &[],
    },
    Scene {
        header: "Foo: a Deployment it does not own is left alone",
        shows: &[
            "deployment.apps/someone-elses created",
            "foo.samplecontroller.k8s.io/colliding created",
            "colliding…someone-elses…1…0…False…ResourceExists",
            "Warning…ErrResourceExists…foo/colliding…\"someone-elses\" already exists and is not managed by Foo",
        ],
        hides: &[],
    },
    Scene {
        header: "Foo: deleting it deletes its Deployment",
        shows: &[
            "foo.samplecontroller.k8s.io \"example-foo\" deleted",
            "foo.samplecontroller.k8s.io/colliding",
            "deployment.apps/someone-elses",
        ],
        hides: &[
            "foo.samplecontroller.k8s.io/example-foo",
            "deployment.apps/example-foo",
        ],
    },
    Scene {
        header: "Foo (example.com): seed 004's foo-sample, applied unchanged",
        shows: &[
            "foo.example.com/foo-sample created",
            "foo.example.com/foo-sample…foo-sample…1…1…True",
            "deployment.apps/foo-sample…1/1",
        ],
        hides: &[],
    },
    Scene {
        header: "Foo (example.com): scaled as the seed does, to 2",
        shows: &[
            "foo.example.com/foo-sample patched",
            "foo.example.com/foo-sample…foo-sample…2…2…True",
            "deployment.apps/foo-sample…2/2…nginx",
        ],
        hides: &[],
    },
    Scene {
        header: "Foo (both groups): a samplecontroller.k8s.io Foo asking for the same Deployment is refused",
        shows: &[
            "foo.samplecontroller.k8s.io/rival created",
            "rival…foo-sample…5…0…False…ResourceExists",
            "2 replicas, owned by example.com/v1alpha1",
            "foo.example.com \"foo-sample\" deleted",
        ],
        hides: &[],
    },
    Scene {
        header: "Network: the seed's example-network becomes Ready",
        shows: &[
            "network.samplecrd.k8s.io/example-network created",
            "example-network…192.168.0.0/16…192.168.0.1…True…Synced…multus",
            "\"bridge\": \"son",
            "\"gateway\": \"192.168.0.1\"",
            "\"subnet\": \"192.168.0.0/16\"",
            "\"type\": \"bridge\"",
        ],
        hides: &[],
    },
    Scene {
        header: "Network: an overlapping Network in the same namespace is refused",
        shows: &[
            "network.samplecrd.k8s.io/overlapping created",
            "example-network…192.168.0.0/16…True…Synced",
            "overlapping…192.168.10.0/24…False…CIDRConflict",
            "192.168.10.0/24 overlaps 192.168.0.0/16 of Network \"example-network\", which is older and keeps it",
        ],
        hides: &[],
    },
    Scene {
        header: "Network: deleting the older one cleans it from the backend",
        shows: &[
            "network.samplecrd.k8s.io \"example-network\" deleted",
            "network.samplecrd.k8s.io/overlapping…192.168.10.0/24…True",
            "networkattachmentdefinition.k8s.cni.cncf.io/overlapping",
        ],
        hides: &[
            "network.samplecrd.k8s.io/example-network",
            "networkattachmentdefinition.k8s.cni.cncf.io/example-network",
        ],
    },
    Scene {
        header: "MyCustomResource: the kubebuilder tutorial's flow",
        shows: &[
            "mycustomresource.poc.test.domain/my-custom-resource-01 created",
            "my-custom-resource-01…funny-joe…false",
            "pod/funny-joe created",
            "my-custom-resource-01…funny-joe…true",
            "pod/funny-joe",
            "pod \"funny-joe\" deleted",
            "my-custom-resource-01…funny-joe…false",
        ],
        hides: &[],
    },
    Scene {
        header: "admission refuses invalid objects",
        shows: &[
            "The Foo \"too-many-replicas\" is invalid: spec.replicas: Invalid value: 11",
            "The Network \"gateway-outside\" is invalid: spec.gateway: Invalid value",
        ],
        hides: &[],
    },
    Scene {
        header: "Neutron: a second operator",
        shows: &["$ sample-operator run…--namespace=demo-neutron --network-backend=neutron"],
        hides: &[],
    },
    Scene {
        header: "Neutron: the seed's example-network appears in Neutron, tagged as ours",
        shows: &[
            "network.samplecrd.k8s.io/example-network created",
            "example-network…192.168.0.0/16…192.168.0.1…True…Synced…neutron",
            "| demo-neutron/example-network |…| sample-operator.cluster=…, sample-operator.network=",
            "| cidr…| 192.168.0.0/16 ",
            "| gateway_ip…| 192.168.0.1 ",
        ],
        hides: &[],
    },
    Scene {
        header: "Neutron: a new gateway is updated in place",
        shows: &[
            "network.samplecrd.k8s.io/example-network patched",
            "| cidr…| 192.168.0.0/16 ",
            "| gateway_ip…| 192.168.0.254 ",
        ],
        hides: &["| 192.168.0.1 "],
    },
    Scene {
        header: "Neutron: deleting the Network removes it from Neutron",
        shows: &[
            "network.samplecrd.k8s.io \"example-network\" deleted",
            // Then an empty list.
            "$ openstack network list --name demo-neutron/example-network -c Name -c Subnets",
        ],
        hides: &["| demo-neutron/example-network"],
    },
];

/// The scenes on a machine that runs a real node.
const REAL_NODE_SCENES: &[Scene] = &[
    Scene {
        header: "the real node: the operator's image",
        shows: &[
            "sample-operator:… sha256:…MiB)",
            "imported into the real node's containerd",
        ],
        hides: &[],
    },
    Scene {
        header: "the real node: the chart installs the operator there",
        shows: &[
            "STATUS: deployed",
            // The chart's two replicas, both on the real node.
            "demo-sample-operator-…1/1…Running…real-node-0",
            "demo-sample-operator-…1/1…Running…real-node-0",
            "demo-sample-operator…demo-sample-operator-",
        ],
        hides: &[],
    },
    Scene {
        header: "the real node: a Pod attached to a Network gets net1 in its prefix",
        shows: &[
            "network.samplecrd.k8s.io/lab",
            "pod/attached created",
            "attached…1/1…Running…real-node-0",
            "net1…UP",
            "inet 10.99.0.…/24…scope global net1",
        ],
        hides: &[],
    },
];

/// The scene instead on a machine that cannot.
const NO_REAL_NODE_SCENE: Scene = Scene {
    header: "no real-node scene",
    shows: &["  - "],
    hides: &[],
};

const DONE: Scene = Scene {
    header: "done.",
    shows: &[
        "export KUBECONFIG=…kubeconfig",
        "x86_64-unknown-linux-musl/debug/sample-operator run",
    ],
    hides: &[],
};

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
    let mut expected: Vec<&Scene> = SCENES.iter().collect();
    if local_cluster::node::preflight(local_cluster::LocalCluster::default().dir()).is_empty() {
        expected.extend(REAL_NODE_SCENES);
    } else {
        expected.push(&NO_REAL_NODE_SCENE);
    }
    expected.push(&DONE);
    let problems = check(&stdout, &expected);
    assert!(
        problems.is_empty(),
        "the demo's scenes did not show what they claim:\n  - {}\n\nThe demo's output:\n{stdout}",
        problems.join("\n  - ")
    );
}

/// The demo's output cut at its header lines, those starting with `== `: each header, without
/// `== `, and the lines after it up to the next. Lines before the first header are no scene's.
fn cut_into_scenes(stdout: &str) -> Vec<(&str, Vec<&str>)> {
    let mut scenes: Vec<(&str, Vec<&str>)> = Vec::new();
    for line in stdout.lines() {
        if let Some(header) = line.strip_prefix("== ") {
            scenes.push((header, Vec::new()));
        } else if let Some((_, lines)) = scenes.last_mut() {
            lines.push(line);
        }
    }
    scenes
}

/// What is wrong with `stdout` against `expected`, a sentence each: a scene missing or
/// repeated, a header no scene expects, and each line a scene does not show or text it shows
/// but should not.
fn check(stdout: &str, expected: &[&Scene]) -> Vec<String> {
    let scenes = cut_into_scenes(stdout);
    let mut problems = Vec::new();
    for (header, _) in &scenes {
        if !expected.iter().any(|scene| header.starts_with(scene.header)) {
            problems.push(format!(
                "the demo played a scene the test does not know: \"== {header}\""
            ));
        }
    }
    for scene in expected {
        let played: Vec<_> = scenes
            .iter()
            .filter(|(header, _)| header.starts_with(scene.header))
            .collect();
        let [(_, lines)] = played.as_slice() else {
            problems.push(format!(
                "scene \"== {}\": the demo played it {} times, not once",
                scene.header,
                played.len()
            ));
            continue;
        };
        let mut from = 0;
        for shown in scene.shows {
            match lines[from..].iter().position(|line| line_shows(line, shown)) {
                Some(at) => from += at + 1,
                None => problems.push(format!(
                    "scene \"== {}\" does not show {shown:?}{}",
                    scene.header,
                    if from > 0 {
                        " after what it showed before"
                    } else {
                        ""
                    }
                )),
            }
        }
        for hidden in scene.hides {
            if let Some(line) = lines.iter().find(|line| line.contains(hidden)) {
                problems.push(format!(
                    "scene \"== {}\" shows {hidden:?}, which it must not: {line:?}",
                    scene.header
                ));
            }
        }
    }
    problems
}

/// Whether `line` holds the `…`-separated fragments of `pattern`, in order.
fn line_shows(line: &str, pattern: &str) -> bool {
    let mut rest = line;
    pattern.split('…').all(|fragment| match rest.find(fragment) {
        Some(at) => {
            rest = &rest[at + fragment.len()..];
            true
        }
        None => false,
    })
}

/// A run of three scenes, as the demo prints them.
const SYNTHETIC: &str = "\
cargo's progress, before any scene
== one: the first scene
$ kubectl get things
thing-a   Ready   1/1
thing-b   Ready   2/2

== two: == is no header unless it starts the line
x == y
== three: empty
";

#[test]
fn the_output_is_cut_at_each_header_and_nowhere_else() {
    let scenes = cut_into_scenes(SYNTHETIC);
    let headers: Vec<&str> = scenes.iter().map(|(header, _)| *header).collect();
    assert_eq!(
        headers,
        [
            "one: the first scene",
            "two: == is no header unless it starts the line",
            "three: empty"
        ]
    );
    assert_eq!(
        scenes[0].1,
        [
            "$ kubectl get things",
            "thing-a   Ready   1/1",
            "thing-b   Ready   2/2",
            ""
        ]
    );
    assert_eq!(scenes[1].1, ["x == y"]);
    assert!(scenes[2].1.is_empty());
}

#[test]
fn a_scene_is_checked_by_its_own_lines_only() {
    const ONE: Scene = Scene {
        header: "one:",
        shows: &["$ kubectl get things", "thing-a…1/1", "thing-b…2/2"],
        hides: &["thing-c"],
    };
    const TWO: Scene = Scene {
        header: "two:",
        shows: &["x == y"],
        hides: &[],
    };
    const THREE: Scene = Scene {
        header: "three:",
        shows: &[],
        hides: &[],
    };
    let expected = [&ONE, &TWO, &THREE];
    assert_eq!(check(SYNTHETIC, &expected), Vec::<String>::new());

    // A scene missing is named, even when its lines are printed elsewhere.
    let without_two = SYNTHETIC.replace("== two: == is no header unless it starts the line\n", "");
    assert_eq!(
        check(&without_two, &expected),
        ["scene \"== two:\": the demo played it 0 times, not once"]
    );
    // What another scene shows does not count for this one.
    let expected_in_three = Scene {
        header: "three:",
        shows: &["thing-a"],
        hides: &["thing-b"],
    };
    assert_eq!(
        check(SYNTHETIC, &[&ONE, &TWO, &expected_in_three]),
        ["scene \"== three:\" does not show \"thing-a\""]
    );
    // Out of order, on the wrong line, hidden text shown, a scene repeated, one unknown.
    let one = |shows, hides| Scene {
        header: "one:",
        shows,
        hides,
    };
    assert_eq!(
        check(SYNTHETIC, &[&one(&["thing-b", "thing-a"], &[]), &TWO, &THREE]),
        ["scene \"== one:\" does not show \"thing-a\" after what it showed before"]
    );
    assert_eq!(
        check(SYNTHETIC, &[&one(&["thing-a…2/2"], &[]), &TWO, &THREE]),
        ["scene \"== one:\" does not show \"thing-a…2/2\""]
    );
    assert_eq!(
        check(SYNTHETIC, &[&one(&[], &["thing-b"]), &TWO, &THREE]),
        ["scene \"== one:\" shows \"thing-b\", which it must not: \"thing-b   Ready   2/2\""]
    );
    let repeated = format!("{SYNTHETIC}== one: again\n== four\n");
    assert_eq!(
        check(&repeated, &expected),
        [
            "the demo played a scene the test does not know: \"== four\"",
            "scene \"== one:\": the demo played it 2 times, not once"
        ]
    );
}
