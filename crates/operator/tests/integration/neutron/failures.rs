//! Neutron failing under the operator: down, frozen under a deposed leader, refusing by
//! policy, a failed resync listing. Each is played by the test's own relay, or, for the policy,
//! by a file the test runs alone with.

use super::*;

#[tokio::test]
async fn while_neutron_is_down_networks_report_it_and_nothing_is_lost() {
    let Scene(client, bed, admin, ns, api) = Scene::new("neutron-down").await;
    let relay = RequestRecorder::start(neutron_address(&bed)).await;
    let clouds = relayed_clouds(&bed, &relay, &ns.name);
    let operator = NeutronOperator::start(&ns.name, source(clouds.clone(), CLOUD)).await;
    for (name, third) in [("a", 1), ("b", 2), ("c", 3)] {
        api.create(
            &PostParams::default(),
            &network(name, &format!("10.64.{third}.0/24"), &format!("10.64.{third}.1")),
        )
        .await
        .unwrap();
    }
    for name in ["a", "b", "c"] {
        wait_reason(&api, name, "Synced").await;
    }
    let b = api.get("b").await.unwrap();

    relay.set(Outage::Down);
    // Meanwhile: a changed, b deleted, d created.
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"gateway": "10.64.1.254"}})),
    )
    .await
    .unwrap();
    api.delete("b", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &network("d", "10.64.4.0/24", "10.64.4.1"))
        .await
        .unwrap();
    let down = wait_reason(&api, "a", "BackendUnavailable").await;
    let message = &down.status.as_ref().unwrap().conditions[0].message;
    assert_tenant_message(message, "cannot be reached", &["neutron", "9696", "5000"]);
    assert!(
        down.status.unwrap().backend.is_some(),
        "the network is still there"
    );
    wait_reason(&api, "d", "BackendUnavailable").await;
    wait_for_event(&client, &ns.name, "a", "BackendUnavailable").await;
    assert!(api.get("b").await.is_ok(), "b waits for Neutron before it goes");

    relay.set(Outage::None);
    let a = wait_reason(&api, "a", "Synced").await;
    let d = wait_reason(&api, "d", "Synced").await;
    testing::wait_for_deletion(&api, "b", TIMEOUT).await.unwrap();
    let (_, subnets) = in_neutron(&admin, &ns.name, &a).await;
    assert_eq!(subnets[0].gateway_ip.as_deref(), Some("10.64.1.254"));
    let (networks, _) = in_neutron(&admin, &ns.name, &b).await;
    assert!(networks.is_empty(), "b is gone from Neutron");
    let (networks, subnets) = in_neutron(&admin, &ns.name, &d).await;
    assert_eq!((networks.len(), subnets.len()), (1, 1));
    // Exactly what the Networks say: a, c and d, nothing more.
    let all = admin
        .list_networks(&[model::cluster_tag(&ns.name)], None)
        .await
        .unwrap();
    assert_eq!(all.len(), 3, "{all:?}");
    finish(&api, operator, ns).await;
    let _ = std::fs::remove_file(clouds);
}

/// A deposed leader stops writing to Neutron as it stops writing to the apiserver: with
/// neutron-server frozen for both replicas (each reaches it through a relay of its own that
/// holds every request) while the leader creates a network, its Lease RBAC revoked, and the
/// standby taking over, no request of the old holder reaches Neutron (timed as it leaves its
/// relay) or the apiserver after its lease could have expired, whether its own in-flight request
/// answers late or its resync comes due.
#[tokio::test]
async fn a_deposed_leader_sends_nothing_to_neutron_after_its_lease_could_have_expired() {
    use crate::leader::{
        WriteLog, deposable_lease, depose_a, grant_leases, holder, outcome_of, replica_client, start_elected,
    };
    use k8s_openapi::api::coordination::v1::Lease;
    use sample_operator::runtime::leader::Outcome;

    let Scene(admin_client, bed, neutron_admin, ns, api) = Scene::new("neutron-deposed").await;
    grant_leases(&admin_client, &ns.name, &["a", "b"]).await;
    let lease = deposable_lease(&ns.name);
    let recorder = RequestRecorder::start(neutron_address(&bed)).await;
    let b_relay = RequestRecorder::start(neutron_address(&bed)).await;
    // Each replica's cloud reaches Neutron through a relay of its own: a's records what a sends.
    let relayed_file = relayed_clouds(&bed, &recorder, &format!("{}-a", ns.name));
    let b_file = relayed_clouds(&bed, &b_relay, &format!("{}-b", ns.name));
    let replica_config = |clouds: PathBuf| {
        let mut run = config(Some(&ns.name), &[ControllerName::Network]);
        run.network.backend = BackendConfig::Neutron(settings(source(clouds, CLOUD), &ns.name));
        run
    };

    let a_writes = WriteLog::default();
    let a_client = replica_client(&admin_client, &ns.name, "a", Some(&a_writes)).await;
    let (_stop_a, a) = start_elected(a_client, replica_config(relayed_file.clone()), "a", lease.clone());
    api.create(
        &PostParams::default(),
        &network("warm", "10.66.1.0/24", "10.66.1.1"),
    )
    .await
    .unwrap();
    wait_reason(&api, "warm", "Synced").await;
    assert!(
        !recorder.since(std::time::UNIX_EPOCH).is_empty(),
        "replica a reached Neutron through the recorder"
    );
    let leases: Api<Lease> = Api::namespaced(admin_client.clone(), &ns.name);
    let (a_identity, _, _) = holder(&leases).await.expect("a holds the lease");
    let b_client = replica_client(&admin_client, &ns.name, "b", None).await;
    let (stop_b, b) = start_elected(b_client, replica_config(b_file.clone()), "b", lease.clone());

    // Frozen, then a Network that a starts to create: its request hangs.
    recorder.set(Outage::Frozen);
    b_relay.set(Outage::Frozen);
    let froze_at = std::time::SystemTime::now();
    api.create(
        &PostParams::default(),
        &network("frozen", "10.66.2.0/24", "10.66.2.1"),
    )
    .await
    .unwrap();
    while_progressing("a's request to the frozen Neutron", || async {
        Progress {
            done: usize::from(!recorder.since(froze_at).is_empty()),
            total: 1,
            rest: "no request yet".into(),
        }
    })
    .await;

    // Replica a may no longer renew; b takes over once the lease expires.
    let (a_last_renewal, _) = depose_a(&admin_client, &ns.name, &a_identity).await;
    let a_expired = a_last_renewal + lease.duration;

    // Neutron answers again: whatever a still had in flight would now get its answer.
    recorder.set(Outage::None);
    b_relay.set(Outage::None);
    wait_reason(&api, "frozen", "Synced").await;
    // A resync of a's would have come due by now, twice.
    tokio::time::sleep(RESYNC * 2 + Duration::from_secs(1)).await;
    let late = recorder.since(a_expired);
    assert!(
        late.is_empty(),
        "the old holder reached Neutron after its lease could have expired: {late:?}"
    );
    let late: Vec<_> = a_writes
        .controller_writes()
        .into_iter()
        .filter(|(_, _, at)| *at >= a_expired)
        .collect();
    assert!(
        late.is_empty(),
        "the old holder wrote to the apiserver after its lease could have expired: {late:?}"
    );
    assert_eq!(outcome_of(a).await, Outcome::RenewalsFailed);
    let _ = stop_b.send(());
    assert_eq!(outcome_of(b).await, Outcome::Stopped);
    let _ = std::fs::remove_file(&relayed_file);
    let _ = std::fs::remove_file(&b_file);
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    let frozen_name = format!("{}/frozen", ns.name);
    finish(&api, operator, ns).await;
    // a's create, sent before its deadline, was answered after the freeze: b found it by its
    // marker and took it, so nothing of the Network is left.
    let left = neutron_admin
        .list_networks(&[], Some(&frozen_name))
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
}

/// A policy file of neutron-server's, in force while this lives (oslo.policy reads it again when
/// it changes); removed when dropped, so that a failing test leaves the test bed as it was.
struct NeutronPolicy(PathBuf);

impl NeutronPolicy {
    fn refusing(bed: &local_cluster::openstack::OpenStack, action: &str) -> Self {
        let path = bed.dir().join("policy.yaml");
        std::fs::write(&path, format!("\"{action}\": \"!\"\n")).unwrap();
        Self(path)
    }
}

impl Drop for NeutronPolicy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A 403 is Neutron's policy refusing one action, not a failed login: the Network reports
/// `BackendForbidden`, retries with backoff on the same session (no new token per refusal), and
/// syncs once the policy allows the action.
/// Runs alone (`.config/nextest.toml`): the policy file is neutron-server's, for every test.
#[tokio::test]
async fn a_policy_refusal_is_forbidden_without_a_new_login_and_recovers_when_allowed() {
    let Scene(client, bed, _, ns, api) = Scene::new("neutron-policy").await;
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("warm", "10.68.1.0/24", "10.68.1.1"),
    )
    .await
    .unwrap();
    wait_reason(&api, "warm", "Synced").await;

    let policy = NeutronPolicy::refusing(&bed, "create_subnet");
    api.create(
        &PostParams::default(),
        &network("refused", "10.68.2.0/24", "10.68.2.1"),
    )
    .await
    .unwrap();
    let refused = wait_reason(&api, "refused", "BackendForbidden").await;
    let message = &refused.status.as_ref().unwrap().conditions[0].message;
    assert_tenant_message(message, "policy does not let the operator", &["create_subnet"]);
    wait_for_event(&client, &ns.name, "refused", "BackendForbidden").await;
    let metrics = || operator.telemetry.metrics.render();
    let tokens = backend_requests_of(&metrics(), "tokens");
    let forbidden = || metric_sum(&metrics(), BACKEND_REQUESTS, &[("result", "BackendForbidden")]);
    let first = forbidden();
    testing::eventually("another refusal, retried with backoff", TIMEOUT, async || {
        (forbidden() > first).then_some(())
    })
    .await;
    assert_eq!(
        backend_requests_of(&metrics(), "tokens"),
        tokens,
        "a refusal made the operator log in again"
    );

    drop(policy);
    wait_reason(&api, "refused", "Synced").await;
    finish(&api, operator, ns).await;
}

/// A failed resync listing is retried alone, with backoff: while neutron-server is down and no
/// Network changes, the outage costs a few listings, not a request per Network per resync.
#[tokio::test]
async fn a_failed_resync_listing_does_not_fan_out_to_every_network() {
    let Scene(_, bed, _, ns, api) = Scene::new("neutron-listing").await;
    let relay = RequestRecorder::start(neutron_address(&bed)).await;
    let clouds = relayed_clouds(&bed, &relay, &ns.name);
    let operator = NeutronOperator::start(&ns.name, source(clouds.clone(), CLOUD)).await;
    const NETWORKS: usize = 20;
    for i in 0..NETWORKS {
        api.create(
            &PostParams::default(),
            &network(
                &format!("n{i}"),
                &format!("10.69.{i}.0/24"),
                &format!("10.69.{i}.1"),
            ),
        )
        .await
        .unwrap();
    }
    for i in 0..NETWORKS {
        wait_reason(&api, &format!("n{i}"), "Synced").await;
    }
    // Until a listing newer than their writes was used, the Networks ask Neutron themselves
    // after a resync; from then on a resync costs the listing only.
    tokio::time::sleep(RESYNC * 2 + Duration::from_secs(1)).await;

    relay.set(Outage::Down);
    let all = ["GET", "POST", "PUT", "DELETE"];
    let before = operator.requests(&all);
    tokio::time::sleep(RESYNC * 4).await;
    let during = operator.requests(&all) - before;
    eprintln!("{during} requests to Neutron in four resync intervals of an outage");
    assert!(
        during <= 10,
        "{during} requests in four resync intervals of an outage, with {NETWORKS} Networks"
    );

    relay.set(Outage::None);
    let resumed = operator.requests(&["GET"]);
    testing::eventually("the resync listing again", TIMEOUT, async || {
        (operator.requests(&["GET"]) >= resumed + 2).then_some(())
    })
    .await;
    for i in 0..NETWORKS {
        wait_reason(&api, &format!("n{i}"), "Synced").await;
    }
    finish(&api, operator, ns).await;
    let _ = std::fs::remove_file(clouds);
}
