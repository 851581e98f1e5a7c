//! The Network controller on a real cluster: validated networks, conflicts between them, a
//! Multus NetworkAttachmentDefinition for each, and deletion through a finalizer.
//!
//! The NetworkAttachmentDefinition CRD is cluster-wide and one test needs it absent: that test
//! runs alone (`.config/nextest.toml`), and every other installs the CRD if it is missing.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use local_cluster::testing::{self, TestNamespace};
use sample_operator::ControllerName;
use sample_operator::network::backend::multus::{self, NetworkAttachmentDefinition};
use sample_operator_api::Network;
use sample_operator_api::ip::IpFamily;
use serde_json::json;

use crate::support::{
    Operator, assert_quiet_across_resyncs_and_restarts, client_with_crds, config, events_about, network,
    ready_condition, ready_reason, store_despite_schema, wait_for_event,
};

const TIMEOUT: Duration = Duration::from_secs(60);
/// How soon a refused Network recovers once the one it yielded to is gone or moved.
const RECOVERY: Duration = Duration::from_secs(10);
const NETWORK_SAMPLE: &str = include_str!("../../../../samples/network.yaml");
const NAD_CRD: &str = include_str!("../../../../deploy/testing/network-attachment-definition-crd.yaml");
/// Marks the NetworkAttachmentDefinition CRD as the tests' copy: a cluster's own (a real
/// Multus, with `SAMPLE_OPERATOR_TEST_CLUSTER=existing`) is never replaced or deleted.
const TEST_COPY_LABEL: &str = "sample-operator.dev/test";

/// Where most tests start: the CRDs with the attachment-definition CRD, and a namespace of the
/// test's own.
struct Scene {
    client: Client,
    ns: TestNamespace,
}

impl Scene {
    async fn new(namespace_prefix: &str) -> Self {
        let client = client_with_crds().await;
        install_nad_crd(&client).await;
        let ns = TestNamespace::create(&client, namespace_prefix).await;
        Self { client, ns }
    }
}

/// Removes the tests' copy of the NetworkAttachmentDefinition CRD; `false` when the cluster has
/// a CRD of its own (a real Multus), which a test must not delete.
async fn remove_nad_crd(client: &Client) -> bool {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if let Some(crd) = crds.get_opt(multus::CRD_NAME).await.unwrap() {
        if !crd.labels().contains_key(TEST_COPY_LABEL) {
            testing::skipped(
                "network::without_the_crd_networks_report_backend_unavailable_and_recover_once_it_is_installed",
                "the cluster has a NetworkAttachmentDefinition CRD of its own (a real Multus's), which a test must not delete",
            );
            return false;
        }
        // Deleting a CRD deletes every object of it first, then the CRD itself.
        crds.delete(multus::CRD_NAME, &DeleteParams::default())
            .await
            .unwrap();
        testing::wait_for_deletion(&crds, multus::CRD_NAME, TIMEOUT)
            .await
            .unwrap();
    }
    true
}

/// Installs the tests' copy of the CRD, unless the cluster has one of its own.
pub(crate) async fn install_nad_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if let Some(crd) = crds.get_opt(multus::CRD_NAME).await.unwrap()
        && !crd.labels().contains_key(TEST_COPY_LABEL)
    {
        return;
    }
    let crd: CustomResourceDefinition = serde_yaml::from_str(NAD_CRD).unwrap();
    // The label is in the file, so that the demo's copy is known as the project's too.
    assert!(crd.labels().contains_key(TEST_COPY_LABEL), "{NAD_CRD}");
    testing::install_crds(client, &[crd]).await.unwrap();
}

/// An attachment definition of someone else's, of that name: a macvlan configuration, labelled
/// as another team's.
pub(crate) fn foreign_definition(name: &str) -> NetworkAttachmentDefinition {
    serde_json::from_value(json!({
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": { "name": name, "labels": { "team": "someone-else" } },
        "spec": { "config": format!(r#"{{"cniVersion":"1.0.0","name":"{name}","type":"macvlan"}}"#) },
    }))
    .unwrap()
}

fn message(network: &Network) -> String {
    ready_condition(network)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

fn observed_current(network: &Network) -> bool {
    network.status.as_ref().and_then(|s| s.observed_generation) == network.metadata.generation
}

/// Waits until the Network is Ready (synced) for its current generation.
pub(crate) async fn wait_synced(networks: &Api<Network>, name: &str, timeout: Duration) -> Network {
    testing::wait_for(networks, name, "Ready and Synced", timeout, |n| {
        ready_reason(n) == Some(("True".into(), "Synced".into())) && observed_current(n)
    })
    .await
    .unwrap()
}

/// Waits until the Network is not Ready for `reason`, for its current generation.
async fn wait_refused(networks: &Api<Network>, name: &str, reason: &str, timeout: Duration) -> Network {
    testing::wait_for(networks, name, reason, timeout, |n| {
        ready_reason(n) == Some(("False".into(), reason.into())) && observed_current(n)
    })
    .await
    .unwrap()
}

fn config_of(nad: &NetworkAttachmentDefinition) -> serde_json::Value {
    serde_json::from_str(nad.spec.config.as_deref().unwrap_or("null")).unwrap()
}

fn subnet_of(nad: &NetworkAttachmentDefinition) -> String {
    config_of(nad)["ipam"]["ranges"][0][0]["subnet"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

pub(crate) async fn set_cidr(networks: &Api<Network>, name: &str, cidr: &str, gateway: &str) {
    let patch = json!({ "spec": { "cidr": cidr, "gateway": gateway } });
    networks
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn the_seeds_network_is_synced_to_an_owned_attachment_definition() {
    let Scene { client, ns } = Scene::new("net-basic").await;
    let operator = Operator::start(&ns.name, &[ControllerName::Network]).await;
    testing::create_manifest(&client, &ns.name, NETWORK_SAMPLE)
        .await
        .unwrap();
    let networks = ns.api::<Network>();

    let n = wait_synced(&networks, "example-network", TIMEOUT).await;
    let status = n.status.clone().unwrap();
    assert_eq!(status.prefix.as_deref(), Some("192.168.0.0/16"));
    assert_eq!(status.family, Some(IpFamily::IPv4));
    assert_eq!(status.usable_addresses.as_deref(), Some("65534"));
    let backend = status.backend.unwrap();
    assert_eq!(
        (backend.provider.as_str(), backend.id.as_str()),
        ("multus", "example-network")
    );
    assert_eq!(
        message(&n),
        r#"192.168.0.0/16 is synced to NetworkAttachmentDefinition "example-network""#
    );
    assert_eq!(n.finalizers(), [sample_operator::network::FINALIZER]);

    let nad = ns
        .api::<NetworkAttachmentDefinition>()
        .get("example-network")
        .await
        .unwrap();
    let owner = &nad.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("Network", n.uid().unwrap().as_str(), Some(true))
    );
    assert_eq!(
        nad.labels().get(multus::MANAGED_BY_LABEL).map(String::as_str),
        Some(multus::MANAGED_BY)
    );
    assert_eq!(
        config_of(&nad),
        json!({
            "cniVersion": "1.0.0",
            "name": format!("{}.{}", ns.name, n.uid().unwrap()),
            "type": "bridge",
            "bridge": multus::bridge_name(&n.uid().unwrap(), &n.validate().unwrap()),
            "isGateway": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{ "subnet": "192.168.0.0/16", "gateway": "192.168.0.1" }]],
            },
        })
    );

    let synced = wait_for_event(&client, &ns.name, "example-network", "Synced").await;
    assert_eq!(synced.note.as_deref(), Some("Network synced successfully"));
    assert_eq!(synced.type_.as_deref(), Some("Normal"));
    assert_eq!(synced.reporting_controller.as_deref(), Some("sample-operator"));
    operator.stop().await;
}

#[tokio::test]
async fn ipv6_and_the_smallest_prefixes_report_their_canonical_form_and_size() {
    let Scene { client: _, ns } = Scene::new("net-families").await;
    // An admin's policy that lets an IPv6 Network be as wide as a /8.
    let mut config = config(Some(&ns.name), &[ControllerName::Network]);
    config.network.policy.min_prefix_v6 = 8;
    let operator = Operator::start_with(config).await;
    let networks = ns.api::<Network>();
    let cases = [
        // name, cidr, gateway, prefix, family, usable addresses
        (
            "v6",
            "FD00:10::7/64",
            "fd00:10::1",
            "fd00:10::/64",
            IpFamily::IPv6,
            "18446744073709551615",
        ),
        (
            "v6-wide",
            "fc00::/8",
            "fc00::1",
            "fc00::/8",
            IpFamily::IPv6,
            "1329227995784915872903807060280344575",
        ),
        (
            "v6-p2p",
            "fd00:20::/127",
            "fd00:20::1",
            "fd00:20::/127",
            IpFamily::IPv6,
            "2",
        ),
        (
            "v4-host-bits",
            "10.1.2.3/24",
            "10.1.2.1",
            "10.1.2.0/24",
            IpFamily::IPv4,
            "254",
        ),
        (
            "v4-p2p",
            "10.9.8.7/31",
            "10.9.8.6",
            "10.9.8.6/31",
            IpFamily::IPv4,
            "2",
        ),
        (
            "v4-host",
            "10.9.9.9/32",
            "10.9.9.9",
            "10.9.9.9/32",
            IpFamily::IPv4,
            "1",
        ),
    ];
    for (name, cidr, gateway, ..) in cases {
        networks
            .create(&PostParams::default(), &network(name, cidr, gateway))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let nads = ns.api::<NetworkAttachmentDefinition>();
    for (name, _, gateway, prefix, family, usable) in cases {
        let status = wait_synced(&networks, name, TIMEOUT).await.status.unwrap();
        assert_eq!(status.prefix.as_deref(), Some(prefix), "{name}");
        assert_eq!(status.family, Some(family), "{name}");
        assert_eq!(status.usable_addresses.as_deref(), Some(usable), "{name}");
        let nad = nads.get(name).await.unwrap();
        assert_eq!(subnet_of(&nad), prefix, "{name}");
        assert_eq!(
            config_of(&nad)["ipam"]["ranges"][0][0]["gateway"],
            gateway,
            "{name}"
        );
    }
    operator.stop().await;
}

#[tokio::test]
async fn the_newer_of_two_overlapping_networks_is_refused_until_the_older_is_deleted() {
    let Scene { client, ns } = Scene::new("net-conflict").await;
    let operator = Operator::start(&ns.name, &[ControllerName::Network]).await;
    let networks = ns.api::<Network>();
    let nads = ns.api::<NetworkAttachmentDefinition>();
    networks
        .create(
            &PostParams::default(),
            &network("first", "10.10.0.0/16", "10.10.0.1"),
        )
        .await
        .unwrap();
    wait_synced(&networks, "first", TIMEOUT).await;
    // Inside the first one, and the very same prefix: both overlap. Created in this order and
    // so named, "second" is older than "third" by creation time or, within the same second,
    // by name.
    for (name, cidr, gateway) in [
        ("second", "10.10.5.0/24", "10.10.5.1"),
        ("third", "10.10.0.0/16", "10.10.0.1"),
    ] {
        networks
            .create(&PostParams::default(), &network(name, cidr, gateway))
            .await
            .unwrap();
    }

    let second = wait_refused(&networks, "second", "CIDRConflict", TIMEOUT).await;
    let expected = r#"10.10.5.0/24 overlaps 10.10.0.0/16 of Network "first", which is older and keeps it"#;
    assert_eq!(message(&second), expected);
    let status = second.status.unwrap();
    assert_eq!(status.prefix.as_deref(), Some("10.10.5.0/24"));
    assert_eq!(status.backend, None);
    let event = wait_for_event(&client, &ns.name, "second", "CIDRConflict").await;
    assert_eq!(
        (event.type_.as_deref(), event.note.as_deref()),
        (Some("Warning"), Some(expected))
    );
    let third = wait_refused(&networks, "third", "CIDRConflict", TIMEOUT).await;
    assert!(
        message(&third).contains(r#"of Network "first""#),
        "{}",
        message(&third)
    );
    assert!(nads.get_opt("second").await.unwrap().is_none());
    assert!(nads.get_opt("third").await.unwrap().is_none());
    wait_synced(&networks, "first", TIMEOUT).await;

    networks.delete("first", &DeleteParams::default()).await.unwrap();
    // Both recover from "first" by themselves, without a change to them; of the two, which
    // overlap each other, the older keeps the prefix.
    let start = Instant::now();
    wait_synced(&networks, "second", RECOVERY).await;
    eprintln!("recovered {:?} after the deletion", start.elapsed());
    let third = testing::wait_for(&networks, "third", "yielding to second", RECOVERY, |n| {
        message(n).contains(r#"of Network "second""#)
    })
    .await
    .unwrap();
    assert_eq!(
        ready_reason(&third),
        Some(("False".into(), "CIDRConflict".into()))
    );
    testing::wait_for_deletion(&networks, "first", TIMEOUT)
        .await
        .unwrap();
    testing::wait_for_deletion(&nads, "first", TIMEOUT).await.unwrap();
    assert_eq!(subnet_of(&nads.get("second").await.unwrap()), "10.10.5.0/24");
    assert!(nads.get_opt("third").await.unwrap().is_none());
    operator.stop().await;
}

#[tokio::test]
async fn a_conflict_follows_changes_of_either_network() {
    let Scene { client: _, ns } = Scene::new("net-move").await;
    let operator = Operator::start(&ns.name, &[ControllerName::Network]).await;
    let networks = ns.api::<Network>();
    let nads = ns.api::<NetworkAttachmentDefinition>();
    // Named in the order of creation: within the same second, the name decides.
    networks
        .create(
            &PostParams::default(),
            &network("first", "10.20.0.0/16", "10.20.0.1"),
        )
        .await
        .unwrap();
    wait_synced(&networks, "first", TIMEOUT).await;
    networks
        .create(
            &PostParams::default(),
            &network("second", "10.20.1.0/24", "10.20.1.1"),
        )
        .await
        .unwrap();
    wait_refused(&networks, "second", "CIDRConflict", TIMEOUT).await;

    // The first one moves away: the second one recovers without a change of its own, and the
    // first one's definition follows its new prefix.
    set_cidr(&networks, "first", "10.30.0.0/16", "10.30.0.1").await;
    wait_synced(&networks, "second", RECOVERY).await;
    let moved = wait_synced(&networks, "first", TIMEOUT).await;
    assert_eq!(moved.status.unwrap().prefix.as_deref(), Some("10.30.0.0/16"));
    let nad = testing::wait_for(&nads, "first", "the new prefix", TIMEOUT, |nad| {
        subnet_of(nad) == "10.30.0.0/16"
    })
    .await
    .unwrap();
    assert_eq!(config_of(&nad)["ipam"]["ranges"][0][0]["gateway"], "10.30.0.1");
    assert!(nads.get_opt("second").await.unwrap().is_some());

    // The second one moves into the first one's prefix: refused again, and out of the backend.
    set_cidr(&networks, "second", "10.30.2.0/24", "10.30.2.1").await;
    let refused = wait_refused(&networks, "second", "CIDRConflict", TIMEOUT).await;
    assert!(
        message(&refused).contains(r#"Network "first""#),
        "{}",
        message(&refused)
    );
    testing::wait_for_deletion(&nads, "second", TIMEOUT)
        .await
        .unwrap();
    // And moving back out, it is synced once more.
    set_cidr(&networks, "second", "10.40.0.0/24", "10.40.0.1").await;
    wait_synced(&networks, "second", TIMEOUT).await;
    operator.stop().await;
}

/// Networks the default address policy refuses, one per rule: name, cidr, gateway, and what
/// the refusal says.
const REFUSED_BY_DEFAULT: [(&str, &str, &str, &str); 6] = [
    (
        "everything",
        "0.0.0.0/0",
        "0.0.0.1",
        "IPv4 prefixes must be /16 or longer",
    ),
    ("loopback", "127.0.0.0/16", "127.0.0.1", "(loopback)"),
    (
        "metadata",
        "169.254.169.0/24",
        "169.254.169.1",
        "instance metadata",
    ),
    ("multicast", "239.1.0.0/16", "239.1.0.1", "(multicast)"),
    (
        "azure",
        "168.63.129.0/24",
        "168.63.129.1",
        "Azure's platform address",
    ),
    (
        "aws-v6",
        "fd00:ec2::/64",
        "fd00:ec2::1",
        "AWS's IPv6 instance metadata",
    ),
];

/// The admission policy shipped in deploy/operator (and the chart), bound to this test's
/// namespace only (the tests share the cluster): `kubectl apply` of a Network outside the
/// policy is refused with a message naming the rule, and an allowed one is admitted; a second
/// policy with allowed prefixes refuses a Network elsewhere.
#[tokio::test]
async fn the_admission_policy_refuses_networks_outside_the_address_policy() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    let Scene { client, ns } = Scene::new("net-admission").await;
    let manifests = crate::deploy::documents(include_str!(
        "../../../../deploy/operator/network-address-policy.yaml"
    ));
    // Policies of this run's own, bound to its namespace; the second allows 10.0.0.0/8 only.
    let install = |name: String, allowed: Option<&'static str>| {
        let (client, manifests, namespace) = (client.clone(), manifests.clone(), ns.name.clone());
        async move {
            for mut object in manifests {
                object["metadata"]["name"] = name.clone().into();
                if object["kind"] == "ValidatingAdmissionPolicy" {
                    for variable in object["spec"]["variables"].as_array_mut().unwrap() {
                        if let Some(allowed) = allowed
                            && variable["name"] == "allowed"
                        {
                            variable["expression"] = allowed.into();
                        }
                    }
                } else {
                    object["spec"]["policyName"] = name.clone().into();
                    object["spec"]["matchResources"] = json!({
                        "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": namespace } }
                    });
                }
                testing::apply_manifest(&client, &serde_yaml::to_string(&object).unwrap())
                    .await
                    .unwrap_or_else(|e| panic!("{object}: {e}"));
            }
        }
    };
    // The shipped rules with any prefix allowed (the manifests allow the seeds' 192.168.0.0/16).
    let shipped = format!("network-addresses-{}", ns.name);
    install(shipped.clone(), Some("[]")).await;
    let networks = ns.api::<Network>();
    // The API server picks a policy up within a few seconds of its creation.
    let refusal = |name: &'static str, cidr: &'static str, gateway: &'static str| {
        let networks = networks.clone();
        async move {
            let start = Instant::now();
            loop {
                match networks
                    .create(&PostParams::default(), &network(name, cidr, gateway))
                    .await
                {
                    Err(kube::Error::Api(status)) => return status.message,
                    Ok(_) if start.elapsed() < TIMEOUT => {
                        networks.delete(name, &DeleteParams::default()).await.unwrap();
                        testing::wait_for_deletion(&networks, name, TIMEOUT)
                            .await
                            .unwrap();
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    other => panic!("{name} ({cidr}) was not refused: {other:?}"),
                }
            }
        }
    };
    let wide_v6 = [(
        "wide-v6",
        "fc00::/8",
        "fc00::1",
        "IPv6 prefixes must be /48 or longer",
    )];
    for (name, cidr, gateway, rule) in REFUSED_BY_DEFAULT.into_iter().chain(wide_v6) {
        let message = refusal(name, cidr, gateway).await;
        assert!(message.contains("spec.cidr: "), "{name}: {message}");
        assert!(message.contains(rule), "{name}: {message}");
    }
    networks
        .create(
            &PostParams::default(),
            &network("allowed", "10.61.0.0/16", "10.61.0.1"),
        )
        .await
        .expect("an allowed Network is admitted");
    networks
        .create(
            &PostParams::default(),
            &network("before", "192.168.8.0/24", "192.168.8.1"),
        )
        .await
        .expect("admitted before the policy narrows");

    let confined = format!("network-addresses-10-{}", ns.name);
    install(confined.clone(), Some("['10.0.0.0/8']")).await;
    let message = refusal("elsewhere", "192.168.7.0/24", "192.168.7.1").await;
    assert!(
        message.contains("outside the prefixes the policy allows (10.0.0.0/8)"),
        "{message}"
    );
    // A Network admitted before the policy narrowed stays one its owner may label and delete
    // (a finalizer goes by an UPDATE): only a new prefix is checked.
    let label = json!({ "metadata": { "labels": { "team": "a" } } });
    networks
        .patch("before", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("a change that keeps the prefix is admitted");
    let moved = json!({ "spec": { "cidr": "192.168.9.0/24", "gateway": "192.168.9.1" } });
    let refused = networks
        .patch("before", &PatchParams::default(), &Patch::Merge(&moved))
        .await
        .expect_err("a new prefix outside the policy");
    assert!(
        refused
            .to_string()
            .contains("outside the prefixes the policy allows"),
        "{refused}"
    );
    networks.delete("before", &DeleteParams::default()).await.unwrap();

    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    for name in [shipped, confined] {
        bindings.delete(&name, &DeleteParams::default()).await.unwrap();
        policies.delete(&name, &DeleteParams::default()).await.unwrap();
    }
}

/// Two tenants' namespaces, and one Network controller across all namespaces, so that one
/// index sees both; it selects this test's Networks by a label (`label` puts it on one) and
/// leaves everyone else's alone.
struct TwoTenants {
    a: TestNamespace,
    b: TestNamespace,
    operator: Operator,
    label: Box<dyn Fn(Network) -> Network>,
}

impl TwoTenants {
    async fn start(prefix: &str, overlap_across_namespaces: bool) -> Self {
        const LABEL: &str = "sample-operator.dev/network-test";
        let client = client_with_crds().await;
        install_nad_crd(&client).await;
        let a = TestNamespace::create(&client, &format!("{prefix}-a")).await;
        let b = TestNamespace::create(&client, &format!("{prefix}-b")).await;
        let mut config = config(None, &[ControllerName::Network]);
        config.network.label_selector = Some(format!("{LABEL}={}", a.name));
        config.network.overlap_across_namespaces = overlap_across_namespaces;
        let operator = Operator::start_as(config, testing::config().await).await;
        let value = a.name.clone();
        let label = Box::new(move |mut network: Network| {
            network.labels_mut().insert(LABEL.into(), value.clone());
            network
        });
        Self {
            a,
            b,
            operator,
            label,
        }
    }
}

/// Where the admin says nodes keep namespaces apart (`--network-overlap-across-namespaces`),
/// each namespace has its own prefixes.
#[tokio::test]
async fn networks_in_different_namespaces_may_overlap_where_nodes_keep_them_apart() {
    let TwoTenants {
        a: tenant_a,
        b: tenant_b,
        operator,
        label,
    } = TwoTenants::start("net-tenant", true).await;
    let labelled = |name: &str, cidr: &str, gateway: &str| label(network(name, cidr, gateway));

    // The oldest of all, in tenant b.
    let b = tenant_b.api::<Network>();
    b.create(
        &PostParams::default(),
        &labelled("shared", "10.50.0.0/16", "10.50.0.1"),
    )
    .await
    .unwrap();
    wait_synced(&b, "shared", TIMEOUT).await;
    let a = tenant_a.api::<Network>();
    a.create(
        &PostParams::default(),
        &labelled("shared", "10.50.0.0/16", "10.50.0.1"),
    )
    .await
    .unwrap();
    // Named to sort after "shared": were both created within the same second, the name decides.
    a.create(
        &PostParams::default(),
        &labelled("tardy", "10.50.1.0/24", "10.50.1.1"),
    )
    .await
    .unwrap();

    wait_synced(&a, "shared", TIMEOUT).await;
    let refused = wait_refused(&a, "tardy", "CIDRConflict", TIMEOUT).await;
    // It yields to its own tenant's Network, not to the older one of the other tenant.
    assert!(
        message(&refused).contains(r#"of Network "shared""#),
        "{}",
        message(&refused)
    );
    let mut pools = Vec::new();
    for tenant in [&tenant_a, &tenant_b] {
        let nad = tenant
            .api::<NetworkAttachmentDefinition>()
            .get("shared")
            .await
            .unwrap();
        assert_eq!(subnet_of(&nad), "10.50.0.0/16");
        let config = config_of(&nad);
        pools.push((config["name"].clone(), config["bridge"].clone()));
    }
    // Same-named Networks of two tenants: each its own IPAM pool and bridge on the nodes.
    assert_ne!(
        pools[0].0, pools[1].0,
        "CNI network names (IPAM pools): {pools:?}"
    );
    assert_ne!(pools[0].1, pools[1].1, "bridges: {pools:?}");
    wait_synced(&b, "shared", TIMEOUT).await;

    operator.stop().await;
}

/// With the Multus backend and the defaults, a node that hosts Pods of two namespaces' Networks
/// routes both, so their prefixes may not overlap: the newer is refused, told only that an older
/// Network of another namespace keeps the prefix, and synced once that one is gone.
#[tokio::test]
async fn with_multus_networks_of_different_namespaces_may_not_overlap() {
    let TwoTenants {
        a: tenant_a,
        b: tenant_b,
        operator,
        label,
    } = TwoTenants::start("net-apart", false).await;
    let labelled = |name: &str, cidr: &str, gateway: &str| label(network(name, cidr, gateway));
    // Created within one second, the two tie on age and the namespace decides: the older is
    // in tenant a, whose name sorts first.
    let (older, newer) = (tenant_a.api::<Network>(), tenant_b.api::<Network>());
    older
        .create(
            &PostParams::default(),
            &labelled("theirs", "10.51.0.0/16", "10.51.0.1"),
        )
        .await
        .unwrap();
    wait_synced(&older, "theirs", TIMEOUT).await;
    newer
        .create(
            &PostParams::default(),
            &labelled("mine", "10.51.7.0/24", "10.51.7.1"),
        )
        .await
        .unwrap();
    let refused = wait_refused(&newer, "mine", "CIDRConflict", TIMEOUT).await;
    assert_eq!(
        message(&refused),
        "10.51.7.0/24 overlaps an older Network of another namespace, which keeps it: the nodes route every namespace's Networks, so their prefixes may not overlap"
    );
    assert!(
        tenant_b
            .api::<NetworkAttachmentDefinition>()
            .get_opt("mine")
            .await
            .unwrap()
            .is_none()
    );
    older.delete("theirs", &DeleteParams::default()).await.unwrap();
    wait_synced(&newer, "mine", RECOVERY).await;
    operator.stop().await;
}

#[tokio::test]
async fn hand_edits_of_the_attachment_definition_are_reverted() {
    let Scene { client: _, ns } = Scene::new("net-drift").await;
    let operator = Operator::start(&ns.name, &[ControllerName::Network]).await;
    let networks = ns.api::<Network>();
    networks
        .create(
            &PostParams::default(),
            &network("kept", "10.60.0.0/24", "10.60.0.1"),
        )
        .await
        .unwrap();
    wait_synced(&networks, "kept", TIMEOUT).await;
    let nads = ns.api::<NetworkAttachmentDefinition>();
    let original = nads.get("kept").await.unwrap();

    let edit = json!({
        "metadata": { "annotations": { "team": "payments" } },
        "spec": { "config": r#"{"cniVersion":"1.0.0","name":"kept","type":"macvlan"}"# },
    });
    nads.patch("kept", &PatchParams::default(), &Patch::Merge(&edit))
        .await
        .unwrap();
    let restored = testing::wait_for(&nads, "kept", "config restored", TIMEOUT, |nad| {
        nad.spec.config == original.spec.config
    })
    .await
    .unwrap();
    assert_eq!(
        restored.annotations().get("team").map(String::as_str),
        Some("payments"),
        "a field the operator does not manage was removed"
    );

    // Without its label it falls out of the operator's watch; the operator notices all the same.
    let unlabel = json!({ "metadata": { "labels": { multus::MANAGED_BY_LABEL: null } } });
    nads.patch("kept", &PatchParams::default(), &Patch::Merge(&unlabel))
        .await
        .unwrap();
    testing::wait_for(&nads, "kept", "label restored", TIMEOUT, |nad| {
        nad.labels().get(multus::MANAGED_BY_LABEL).map(String::as_str) == Some(multus::MANAGED_BY)
    })
    .await
    .unwrap();

    // Deleted by hand: created again.
    nads.delete("kept", &DeleteParams::default()).await.unwrap();
    testing::wait_for(&nads, "kept", "created again", TIMEOUT, |nad| {
        nad.uid() != original.uid() && nad.spec.config == original.spec.config
    })
    .await
    .unwrap();
    wait_synced(&networks, "kept", TIMEOUT).await;
    operator.stop().await;
}

#[tokio::test]
async fn an_attachment_definition_the_network_does_not_own_is_never_taken_or_deleted() {
    let Scene { client, ns } = Scene::new("net-foreign").await;
    let nads = ns.api::<NetworkAttachmentDefinition>();
    let foreign = foreign_definition("taken");
    let foreign = nads.create(&PostParams::default(), &foreign).await.unwrap();
    let operator = Operator::start(&ns.name, &[ControllerName::Network]).await;
    let networks = ns.api::<Network>();
    networks
        .create(
            &PostParams::default(),
            &network("taken", "10.70.0.0/24", "10.70.0.1"),
        )
        .await
        .unwrap();

    let n = wait_refused(&networks, "taken", "ResourceExists", TIMEOUT).await;
    let expected = r#"NetworkAttachmentDefinition "taken" already exists and is not managed by Network"#;
    assert_eq!(message(&n), expected);
    let event = wait_for_event(&client, &ns.name, "taken", "ResourceExists").await;
    assert_eq!(
        (event.type_.as_deref(), event.note.as_deref()),
        (Some("Warning"), Some(expected))
    );

    // Retries went by (the backoff starts in milliseconds), and the definition is untouched.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let unchanged = |nad: &NetworkAttachmentDefinition| {
        let managers: Vec<_> = nad
            .managed_fields()
            .iter()
            .filter_map(|m| m.manager.clone())
            .collect();
        nad.resource_version() == foreign.resource_version()
            && nad.owner_references().is_empty()
            && !managers.iter().any(|m| m == "sample-operator")
    };
    assert!(unchanged(&nads.get("taken").await.unwrap()));

    // Deleting the Network leaves it alone too.
    networks.delete("taken", &DeleteParams::default()).await.unwrap();
    testing::wait_for_deletion(&networks, "taken", TIMEOUT)
        .await
        .unwrap();
    let after = nads.get("taken").await.unwrap();
    assert_eq!(after.uid(), foreign.uid());
    assert!(unchanged(&after));
    operator.stop().await;
}

/// A Network blocked by a definition it does not own backs off (retries cost little however
/// many are blocked), and takes the name as soon as that definition goes: the foreign
/// definitions are watched, so no retry has to come round first.
#[tokio::test]
async fn a_conflict_backs_off_and_ends_as_soon_as_the_foreign_definition_goes() {
    let Scene { client: _, ns } = Scene::new("net-conflict-ends").await;
    let nads = ns.api::<NetworkAttachmentDefinition>();
    let foreign = foreign_definition("blocking");
    nads.create(&PostParams::default(), &foreign).await.unwrap();
    let operator = Operator::start(&ns.name, &[ControllerName::Network]).await;
    let networks = ns.api::<Network>();
    networks
        .create(
            &PostParams::default(),
            &network("blocking", "10.71.0.0/24", "10.71.0.1"),
        )
        .await
        .unwrap();
    wait_refused(&networks, "blocking", "ResourceExists", TIMEOUT).await;
    crate::support::assert_conflict_backs_off_and_ends_at_once(
        &operator,
        "Network",
        async {
            nads.delete("blocking", &DeleteParams::background())
                .await
                .unwrap();
        },
        async {
            testing::wait_for(&nads, "blocking", "the Network's own", TIMEOUT, |nad| {
                nad.owner_references().iter().any(|o| o.name == "blocking")
            })
            .await
            .unwrap();
        },
    )
    .await;
    wait_synced(&networks, "blocking", TIMEOUT).await;
    operator.stop().await;
}

/// Runs alone (`.config/nextest.toml`): the CRD it deletes is every other Network test's.
#[tokio::test]
async fn without_the_crd_networks_report_backend_unavailable_and_recover_once_it_is_installed() {
    let client = client_with_crds().await;
    if !remove_nad_crd(&client).await {
        return;
    }
    let ns = TestNamespace::create(&client, "net-no-backend").await;
    let operator = Operator::start(&ns.name, &[ControllerName::Network]).await;
    let networks = ns.api::<Network>();
    for (name, cidr, gateway) in [
        ("waiting", "10.80.0.0/24", "10.80.0.1"),
        ("short-lived", "10.81.0.0/24", "10.81.0.1"),
    ] {
        networks
            .create(&PostParams::default(), &network(name, cidr, gateway))
            .await
            .unwrap();
    }

    let n = wait_refused(&networks, "waiting", "BackendUnavailable", TIMEOUT).await;
    assert!(
        message(&n).contains(multus::CRD_NAME),
        "the message names the missing CRD: {}",
        message(&n)
    );
    let status = n.status.unwrap();
    assert_eq!(status.prefix.as_deref(), Some("10.80.0.0/24"));
    assert_eq!(status.backend, None);
    let event = wait_for_event(&client, &ns.name, "waiting", "BackendUnavailable").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));

    // A Network deleted while the backend is missing goes: there is nothing to clean up.
    wait_refused(&networks, "short-lived", "BackendUnavailable", TIMEOUT).await;
    networks
        .delete("short-lived", &DeleteParams::default())
        .await
        .unwrap();
    testing::wait_for_deletion(&networks, "short-lived", TIMEOUT)
        .await
        .unwrap();

    // Installing the CRD is noticed without any change to the Network.
    install_nad_crd(&client).await;
    let start = Instant::now();
    wait_synced(&networks, "waiting", Duration::from_secs(30)).await;
    eprintln!("recovered {:?} after the CRD was installed", start.elapsed());
    let nad = ns
        .api::<NetworkAttachmentDefinition>()
        .get("waiting")
        .await
        .unwrap();
    assert_eq!(subnet_of(&nad), "10.80.0.0/24");
    wait_for_event(&client, &ns.name, "waiting", "Synced").await;
    operator.stop().await;
}

#[tokio::test]
async fn a_network_deleted_while_the_operator_is_down_is_cleaned_up_when_it_returns() {
    let Scene { client: _, ns } = Scene::new("net-offline-delete").await;
    let operator = Operator::start(&ns.name, &[ControllerName::Network]).await;
    let networks = ns.api::<Network>();
    let nads = ns.api::<NetworkAttachmentDefinition>();
    for (name, cidr, gateway) in [
        ("gone", "10.90.0.0/24", "10.90.0.1"),
        ("lost", "10.91.0.0/24", "10.91.0.1"),
    ] {
        networks
            .create(&PostParams::default(), &network(name, cidr, gateway))
            .await
            .unwrap();
    }
    wait_synced(&networks, "gone", TIMEOUT).await;
    wait_synced(&networks, "lost", TIMEOUT).await;
    operator.stop().await;

    for name in ["gone", "lost"] {
        networks.delete(name, &DeleteParams::default()).await.unwrap();
    }
    // "lost" also vanishes from the backend behind the operator's back.
    nads.delete("lost", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The finalizer holds both Networks, and so the owned definition stays too.
    for name in ["gone", "lost"] {
        let n = networks.get(name).await.unwrap();
        assert!(n.metadata.deletion_timestamp.is_some(), "{name}");
        assert_eq!(n.finalizers(), [sample_operator::network::FINALIZER], "{name}");
    }
    assert!(nads.get_opt("gone").await.unwrap().is_some());

    let restarted = Operator::start(&ns.name, &[ControllerName::Network]).await;
    for name in ["gone", "lost"] {
        testing::wait_for_deletion(&networks, name, TIMEOUT)
            .await
            .unwrap();
    }
    testing::wait_for_deletion(&nads, "gone", TIMEOUT).await.unwrap();
    restarted.stop().await;
}

#[tokio::test]
async fn a_network_that_slipped_past_admission_is_reported_and_not_retried() {
    let Scene { client, ns } = Scene::new("net-invalid").await;
    // Stored as if before the schema had its CEL rules.
    let stale = network("stale", "192.168.0.0/16", "10.0.0.1");
    store_despite_schema(&client, &ns.name, &stale, |spec| {
        spec.x_kubernetes_validations = None;
        for field in spec.properties.as_mut().unwrap().values_mut() {
            field.x_kubernetes_validations = None;
        }
    })
    .await;
    let operator = Operator::start(&ns.name, &[ControllerName::Network]).await;
    let networks = ns.api::<Network>();

    let n = wait_refused(&networks, "stale", "InvalidSpec", TIMEOUT).await;
    assert_eq!(
        message(&n),
        r#"spec.gateway: "10.0.0.1" is not an IPv4 address inside cidr 192.168.0.0/16"#
    );
    assert_eq!(n.status.as_ref().unwrap().prefix, None);
    let event = wait_for_event(&client, &ns.name, "stale", "InvalidSpec").await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let nads = ns.api::<NetworkAttachmentDefinition>();
    assert!(
        nads.get_opt("stale").await.unwrap().is_none(),
        "an invalid Network got a definition"
    );

    // It waits for a change instead of retrying.
    let before = operator.requests();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(operator.requests().since(&before).writes(), 0);
    assert_eq!(events_about(&client, &ns.name, "stale").await.len(), 1);

    // A fix is picked up at once.
    set_cidr(&networks, "stale", "192.168.0.0/16", "192.168.0.1").await;
    wait_synced(&networks, "stale", TIMEOUT).await;
    assert!(nads.get_opt("stale").await.unwrap().is_some());
    operator.stop().await;
}

#[tokio::test]
async fn steady_state_sends_no_writes_across_resyncs_and_restarts() {
    let Scene { client: _, ns } = Scene::new("net-steady").await;
    let mut config = config(Some(&ns.name), &[ControllerName::Network]);
    config.runtime.resync = Some(Duration::from_secs(1));
    let operator = Operator::start_with(config.clone()).await;
    let networks = ns.api::<Network>();
    let mut expected = BTreeMap::new();
    for i in 0..10 {
        let name = format!("steady-{i}");
        networks
            .create(
                &PostParams::default(),
                &network(&name, &format!("10.100.{i}.0/24"), &format!("10.100.{i}.1")),
            )
            .await
            .unwrap();
        expected.insert(name, "Synced");
    }
    // A refused one too: refusing it must not write either.
    networks
        .create(
            &PostParams::default(),
            &network("steady-refused", "10.100.0.0/16", "10.100.0.1"),
        )
        .await
        .unwrap();
    for name in expected.keys() {
        wait_synced(&networks, name, TIMEOUT).await;
    }
    wait_refused(&networks, "steady-refused", "CIDRConflict", TIMEOUT).await;
    let restarts = [config.runtime.initial_list];
    assert_quiet_across_resyncs_and_restarts(operator, &config, &restarts, async |_| {}).await;
}

/// A Node of this test's own, holding a Pod CIDR and an address: never scheduled to (it is
/// unschedulable and tainted) and not one kwok plays (no annotation), so it only exists.
async fn create_fake_node(client: &Client, name: &str, pod_cidr: &str, address: &str) {
    use k8s_openapi::api::core::v1::Node;
    let nodes: Api<Node> = Api::all(client.clone());
    let _ = nodes.delete(name, &DeleteParams::default()).await;
    testing::wait_for_deletion(&nodes, name, TIMEOUT).await.unwrap();
    let node: Node = serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "podCIDR": pod_cidr,
            "podCIDRs": [pod_cidr],
            "unschedulable": true,
            "taints": [{ "key": "sample-operator.dev/test", "effect": "NoSchedule" }],
        },
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let status = json!({ "status": { "addresses": [
        { "type": "InternalIP", "address": address },
        { "type": "Hostname", "address": name },
    ] } });
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// The cluster's own addresses: a Network around a node's Pod CIDR, the Service CIDR or a
/// node's address is refused by the operator with a reason that names the kind of address and
/// not the address, and at admission from the parameters the operator keeps; a Network the
/// operator refuses can still be labelled and deleted; and when the node goes, its Networks are
/// synced and admitted without a change of their own.
#[tokio::test]
async fn networks_around_the_clusters_own_addresses_are_refused_by_the_operator_and_at_admission() {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use k8s_openapi::api::core::v1::Node;
    let Scene { client, ns } = Scene::new("net-cluster").await;
    // One name for every run, so that a run that failed before deleting it cleans up first.
    let node = "sample-operator-test-cluster-addresses";
    // The local cluster's Service CIDR is 10.0.0.0/24 (a ServiceCIDR object the API server
    // keeps); the node's Pod CIDR and address are this test's.
    create_fake_node(&client, node, "10.57.0.0/24", "10.58.0.5").await;

    // The shipped policy, bound to this namespace and to its own parameters.
    let policy_name = format!("cluster-addresses-{}", ns.name);
    let params = format!("test-{}", ns.name);
    for mut object in crate::deploy::documents(include_str!(
        "../../../../deploy/operator/network-cluster-address-policy.yaml"
    )) {
        object["metadata"]["name"] = policy_name.clone().into();
        if object["kind"] == "ValidatingAdmissionPolicyBinding" {
            object["spec"]["policyName"] = policy_name.clone().into();
            object["spec"]["paramRef"]["name"] = params.clone().into();
            object["spec"]["matchResources"] = json!({
                "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": ns.name } }
            });
        }
        testing::apply_manifest(&client, &serde_yaml::to_string(&object).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{object}: {e}"));
    }

    // Admitted while the parameters are missing (before the operator's first start).
    let networks = ns.api::<Network>();
    let post = PostParams::default();
    for (name, cidr, gateway) in [
        ("pods", "10.57.0.8/29", "10.57.0.9"),
        ("services", "10.0.0.8/29", "10.0.0.9"),
        ("node", "10.58.0.0/29", "10.58.0.1"),
        ("free", "10.59.0.0/29", "10.59.0.1"),
    ] {
        networks
            .create(&post, &network(name, cidr, gateway))
            .await
            .unwrap();
    }

    let mut run = config(Some(&ns.name), &[ControllerName::Network]);
    run.network.cluster = sample_operator::network::cluster::Settings {
        enabled: true,
        service_cidrs: Vec::new(),
        admission_params: Some(params.clone()),
    };
    // As the admin: the operator's ServiceAccount may write only the manifests' parameters
    // (the RBAC test checks that one).
    let operator = Operator::start_as(run, testing::config().await).await;
    for (name, cidr, kind) in [
        ("pods", "10.57.0.8/29", "the cluster's Pod addresses"),
        ("services", "10.0.0.8/29", "the cluster's Service addresses"),
        ("node", "10.58.0.0/29", "a node's address"),
    ] {
        let refused = wait_refused(&networks, name, "PrefixNotAllowed", TIMEOUT).await;
        assert_eq!(
            message(&refused),
            format!("spec.cidr: {cidr} overlaps {kind}, which no Network may use")
        );
    }
    wait_synced(&networks, "free", TIMEOUT).await;
    let nads = ns.api::<NetworkAttachmentDefinition>();
    for refused in ["pods", "services", "node"] {
        assert!(
            nads.get_opt(refused).await.unwrap().is_none(),
            "{refused} reached the backend"
        );
    }

    // At admission, once the operator has written the parameters and the API server read them.
    let admitted = |name: &'static str, cidr: &'static str, gateway: &'static str| {
        let networks = networks.clone();
        async move {
            networks
                .create(&PostParams::default(), &network(name, cidr, gateway))
                .await
        }
    };
    for (name, cidr, gateway, kind) in [
        (
            "pods-2",
            "10.57.0.16/29",
            "10.57.0.17",
            "the cluster's Pod addresses",
        ),
        (
            "services-2",
            "10.0.0.16/29",
            "10.0.0.17",
            "the cluster's Service addresses",
        ),
        ("node-2", "10.58.0.4/30", "10.58.0.6", "a node's address"),
    ] {
        let start = Instant::now();
        let message = loop {
            match admitted(name, cidr, gateway).await {
                Err(kube::Error::Api(status)) => break status.message,
                Ok(_) if start.elapsed() < TIMEOUT => {
                    networks.delete(name, &DeleteParams::default()).await.unwrap();
                    testing::wait_for_deletion(&networks, name, TIMEOUT)
                        .await
                        .unwrap();
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                other => panic!("{name} ({cidr}) was not refused at admission: {other:?}"),
            }
        };
        assert!(
            message.contains(&format!(
                "spec.cidr: {cidr} overlaps {kind}, which no Network may use"
            )),
            "{name}: {message}"
        );
    }

    // A refused Network stays an object its owner may label (its prefix unchanged).
    let label = json!({ "metadata": { "labels": { "team": "a" } } });
    networks
        .patch("node", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("a change that keeps the prefix is admitted");

    // The node goes: its Networks are synced, and admitted, without a change of their own.
    let nodes: Api<Node> = Api::all(client.clone());
    nodes.delete(node, &DeleteParams::default()).await.unwrap();
    wait_synced(&networks, "pods", RECOVERY + Duration::from_secs(5)).await;
    wait_synced(&networks, "node", RECOVERY + Duration::from_secs(5)).await;
    wait_refused(&networks, "services", "PrefixNotAllowed", TIMEOUT).await;
    let start = Instant::now();
    while let Err(error) = admitted("pods-2", "10.57.0.16/29", "10.57.0.17").await {
        assert!(start.elapsed() < TIMEOUT, "pods-2 is still refused: {error}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // And a refused Network is deleted as any other: its finalizer goes by an UPDATE the policy
    // lets through.
    networks
        .delete("services", &DeleteParams::default())
        .await
        .unwrap();
    testing::wait_for_deletion(&networks, "services", TIMEOUT)
        .await
        .unwrap();

    operator.stop().await;
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    bindings
        .delete(&policy_name, &DeleteParams::default())
        .await
        .unwrap();
    policies
        .delete(&policy_name, &DeleteParams::default())
        .await
        .unwrap();
    let params_api: Api<sample_operator_api::ClusterAddresses> = Api::all(client.clone());
    params_api
        .delete(&params, &DeleteParams::default())
        .await
        .unwrap();
}

/// Two Networks never share a bridge on the nodes: a bridge name is 48 bits of a hash, so the
/// operator refuses a Network whose bridge name is already another Network's. No two real
/// Networks collide, so a definition of the operator's (by its label) made by hand, owned by
/// an older Network, holds the name the newer one would get.
#[tokio::test]
async fn a_network_whose_bridge_name_is_taken_is_refused() {
    let Scene { client, ns } = Scene::new("net-bridge").await;
    let networks = ns.api::<Network>();
    let post = PostParams::default();
    let older = networks
        .create(&post, &network("older", "10.65.0.0/24", "10.65.0.1"))
        .await
        .unwrap();
    let newer = networks
        .create(&post, &network("newer", "10.65.1.0/24", "10.65.1.1"))
        .await
        .unwrap();
    // Before the operator runs: the newer one's bridge name, held by the older one.
    let bridge = multus::bridge_name(&newer.uid().unwrap(), &newer.validate().unwrap());
    let holder = json!({
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": "older-by-hand",
            "labels": { multus::MANAGED_BY_LABEL: multus::MANAGED_BY },
            "ownerReferences": [{
                "apiVersion": "samplecrd.k8s.io/v1", "kind": "Network", "name": "older",
                "uid": older.uid().unwrap(), "controller": true,
            }],
        },
        "spec": { "config": json!({ "cniVersion": "1.0.0", "type": "bridge", "bridge": bridge }).to_string() },
    });
    testing::create_manifest(&client, &ns.name, &serde_yaml::to_string(&holder).unwrap())
        .await
        .unwrap();

    let operator = Operator::start(&ns.name, &[ControllerName::Network]).await;
    wait_synced(&networks, "older", TIMEOUT).await;
    let refused = wait_refused(&networks, "newer", "BridgeTaken", TIMEOUT).await;
    assert!(
        message(&refused).starts_with("the name of this Network's bridge on the nodes is another Network's"),
        "{}",
        message(&refused)
    );
    let nads = ns.api::<NetworkAttachmentDefinition>();
    assert!(nads.get_opt("newer").await.unwrap().is_none());
    // The holder goes: the name is free, and the newer Network is synced at its next retry.
    nads.delete("older-by-hand", &DeleteParams::default())
        .await
        .unwrap();
    wait_synced(&networks, "newer", Duration::from_secs(45)).await;
    operator.stop().await;
}
