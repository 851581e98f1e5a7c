//! A Network's life in Neutron: created, changed, repaired after hand edits, and deleted, and
//! what it never touches: a foreign network of the same name, a network a port still uses.

use super::*;

#[tokio::test]
async fn the_seed_network_lives_in_neutron_and_follows_its_gateway_until_deleted() {
    let Scene(client, bed, admin, ns, api) = Scene::new("neutron-seed").await;
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;

    // The seed's own sample, unchanged.
    let sample: Network = serde_yaml::from_str(include_str!("../../../../../samples/network.yaml")).unwrap();
    api.create(&PostParams::default(), &sample).await.unwrap();
    let synced = wait_reason(&api, "example-network", "Synced").await;
    let backend = synced.status.as_ref().unwrap().backend.clone().unwrap();
    assert_eq!(backend.provider, "neutron");
    let subnet_id = backend.subnet_id.clone().expect("the subnet's id in the status");

    // The real openstack command line sees it, named after the Network and tagged as ours.
    let shown = openstack(&bed, &["network", "show", &backend.id, "-f", "json"]).await;
    assert_eq!(shown["name"], format!("{}/example-network", ns.name));
    let tags: Vec<String> = serde_json::from_value(shown["tags"].clone()).unwrap();
    assert!(
        tags.contains(&format!("sample-operator.cluster={}", ns.name)),
        "{tags:?}"
    );
    assert!(
        tags.contains(&format!("sample-operator.network={}", synced.uid().unwrap())),
        "{tags:?}"
    );
    let subnet = openstack(&bed, &["subnet", "show", &subnet_id, "-f", "json"]).await;
    assert_eq!(subnet["cidr"], "192.168.0.0/16");
    assert_eq!(subnet["gateway_ip"], "192.168.0.1");
    assert_eq!(subnet["ip_version"], 4);
    assert_eq!(subnet["network_id"], backend.id.as_str());
    wait_for_event(&client, &ns.name, "example-network", "Synced").await;

    // A new gateway is updated in place: the same subnet.
    api.patch(
        "example-network",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"gateway": "192.168.0.254"}})),
    )
    .await
    .unwrap();
    let updated = wait_reason(&api, "example-network", "Synced").await;
    assert_eq!(
        updated.status.clone().unwrap().backend.unwrap(),
        backend,
        "same network and subnet"
    );
    let (networks, subnets) = in_neutron(&admin, &ns.name, &updated).await;
    assert_eq!(networks.len(), 1);
    assert_eq!(subnets.len(), 1);
    assert_eq!(subnets[0].id, subnet_id);
    assert_eq!(subnets[0].gateway_ip.as_deref(), Some("192.168.0.254"));

    // Deleted: gone from Neutron, then from Kubernetes.
    api.delete("example-network", &DeleteParams::default())
        .await
        .unwrap();
    testing::wait_for_deletion(&api, "example-network", TIMEOUT)
        .await
        .unwrap();
    let (networks, subnets) = in_neutron(&admin, &ns.name, &updated).await;
    assert!(
        networks.is_empty() && subnets.is_empty(),
        "{networks:?} {subnets:?}"
    );
    finish(&api, operator, ns).await;
}

/// Neutron's names are not unique, and a project may be shared by people and by several
/// clusters: a network of the name ours would have, untagged or tagged for another cluster, is
/// neither a reason to refuse nor touched; ours is made beside it and deleted alone.
#[tokio::test]
async fn a_foreign_network_of_the_same_name_never_blocks_and_is_never_touched() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-foreign").await;
    let name = format!("{}/blue", ns.name);
    // Somebody's network in the operator's project, with the name ours would have, and no
    // tags; and another cluster's, tagged for its own Network of that name.
    let person = openstack_as(&bed, PASSWORD_CLOUD, &["network", "create", &name, "-f", "json"]).await;
    let other_cluster = openstack_as(&bed, PASSWORD_CLOUD, &["network", "create", &name, "-f", "json"]).await;
    let foreign_ids = [
        person["id"].as_str().unwrap().to_owned(),
        other_cluster["id"].as_str().unwrap().to_owned(),
    ];
    let other_tags = [
        format!("{}another-cluster", model::CLUSTER_TAG),
        format!("{}0c0ffee0-0000-4000-8000-000000000000", model::NETWORK_TAG),
    ];
    for tag in &other_tags {
        openstack(&bed, &["network", "set", "--tag", tag, &foreign_ids[1]]).await;
    }
    let before = admin.list_networks(&[], Some(&name)).await.unwrap();
    assert_eq!(before.len(), 2);

    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("blue", "10.61.0.0/24", "10.61.0.1"),
    )
    .await
    .unwrap();
    let synced = wait_reason(&api, "blue", "Synced").await;
    let ours = synced.status.unwrap().backend.unwrap().id;
    assert!(!foreign_ids.contains(&ours), "took {ours}, somebody else's");
    let named = admin.list_networks(&[], Some(&name)).await.unwrap();
    assert_eq!(named.len(), 3, "{named:?}");
    for foreign in &before {
        assert!(named.contains(foreign), "changed: {foreign:?}");
    }

    // Deleting the Network deletes its own network only.
    api.delete("blue", &DeleteParams::default()).await.unwrap();
    testing::wait_for_deletion(&api, "blue", TIMEOUT).await.unwrap();
    assert_eq!(admin.list_networks(&[], Some(&name)).await.unwrap(), before);
    for id in &foreign_ids {
        openstack(&bed, &["network", "delete", id]).await;
    }
    finish(&api, operator, ns).await;
}

#[tokio::test]
async fn hand_edits_and_deletions_are_repaired_and_a_steady_resync_writes_nothing() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-drift").await;
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("blue", "10.62.0.0/24", "10.62.0.1"),
    )
    .await
    .unwrap();
    let synced = wait_reason(&api, "blue", "Synced").await;
    let backend = synced.status.clone().unwrap().backend.unwrap();

    // Steady: several resyncs pass with lists only, no write, and Neutron's revisions stay.
    let (networks, subnets) = in_neutron(&admin, &ns.name, &synced).await;
    let writes = operator.writes();
    let lists = operator.requests(&["GET"]);
    let steady = Instant::now();
    // At least one whole resync, however busy neutron-server is with other tests (a resync
    // comes an interval after the last listing ended), then three intervals more.
    testing::eventually("a resync's two lists", TIMEOUT, async || {
        (operator.requests(&["GET"]) - lists >= 2).then_some(())
    })
    .await;
    tokio::time::sleep(RESYNC * 3).await;
    assert_eq!(operator.writes(), writes, "no write while nothing differs");
    let resync_gets = operator.requests(&["GET"]) - lists;
    // Two lists a resync at most, one resync an interval at most: a read of the Network's own
    // network and subnets in a resync would double that.
    let intervals = steady.elapsed().as_secs() / RESYNC.as_secs() + 1;
    assert!(
        resync_gets <= 2 * intervals,
        "two lists per resync, not a request per Network: {resync_gets} GETs in {intervals} intervals"
    );
    assert_eq!(in_neutron(&admin, &ns.name, &synced).await, (networks, subnets));

    // A gateway edited by hand is set back.
    let subnet_id = backend.subnet_id.clone().unwrap();
    // Neutron takes a gateway only outside the allocation pools: the pool changes with it.
    openstack(
        &bed,
        &[
            "subnet",
            "set",
            "--no-allocation-pool",
            "--allocation-pool",
            "start=10.62.0.2,end=10.62.0.99",
            "--gateway",
            "10.62.0.100",
            &subnet_id,
        ],
    )
    .await;
    testing::eventually("the gateway set back", TIMEOUT, async || {
        let (_, subnets) = in_neutron(&admin, &ns.name, &synced).await;
        (subnets.len() == 1 && subnets[0].gateway_ip.as_deref() == Some("10.62.0.1")).then_some(())
    })
    .await;

    // The subnet deleted by hand is made again, on the same network.
    openstack(&bed, &["subnet", "delete", &subnet_id]).await;
    let new_subnet = testing::eventually("the subnet made again", TIMEOUT, async || {
        let (_, subnets) = in_neutron(&admin, &ns.name, &synced).await;
        (subnets.len() == 1 && subnets[0].id != subnet_id).then(|| subnets[0].clone())
    })
    .await;
    assert_eq!(new_subnet.network_id, backend.id);
    assert_eq!(new_subnet.cidr, "10.62.0.0/24");

    // The network deleted by hand is made again, and the status follows.
    openstack(&bed, &["network", "delete", &backend.id]).await;
    let remade = testing::eventually("the network made again", TIMEOUT, async || {
        let n = api.get("blue").await.ok()?;
        let b = n.status.as_ref()?.backend.clone()?;
        (b.id != backend.id && current_reason(&n) == Some(("True".into(), "Synced".into()))).then_some(b)
    })
    .await;
    let (networks, subnets) = in_neutron(&admin, &ns.name, &synced).await;
    assert_eq!(networks.iter().map(|n| &n.id).collect::<Vec<_>>(), [&remade.id]);
    assert_eq!(
        subnets.iter().map(|s| &s.id).collect::<Vec<_>>(),
        [remade.subnet_id.as_ref().unwrap()]
    );
    finish(&api, operator, ns).await;
}

#[tokio::test]
async fn a_new_prefix_is_a_new_subnet_on_the_same_network() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-prefix").await;
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    // Host bits in the spec: Neutron keeps 10.63.1.0/24, and that is no drift.
    api.create(
        &PostParams::default(),
        &network("blue", "10.63.1.7/24", "10.63.1.1"),
    )
    .await
    .unwrap();
    let first = wait_reason(&api, "blue", "Synced").await;
    let before = first.status.clone().unwrap().backend.unwrap();
    let writes = operator.writes();
    tokio::time::sleep(RESYNC * 2).await;
    assert_eq!(operator.writes(), writes, "host bits are not drift");

    api.patch(
        "blue",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"cidr": "10.63.2.0/24", "gateway": "10.63.2.1"}})),
    )
    .await
    .unwrap();
    let moved = wait_reason(&api, "blue", "Synced").await;
    let after = moved.status.clone().unwrap().backend.unwrap();
    assert_eq!(after.id, before.id, "the same network");
    assert_ne!(after.subnet_id, before.subnet_id, "a new subnet");
    let (_, subnets) = in_neutron(&admin, &ns.name, &moved).await;
    assert_eq!(subnets.len(), 1, "the old subnet is gone: {subnets:?}");
    assert_eq!(subnets[0].cidr, "10.63.2.0/24");
    assert_eq!(subnets[0].gateway_ip.as_deref(), Some("10.63.2.1"));
    finish(&api, operator, ns).await;
}

/// Neutron refuses to delete a network that ports still use (409 `NetworkInUse`): the deleted
/// Network stays, says why, and goes once the port is gone; the port is never touched.
#[tokio::test]
async fn a_network_in_use_is_not_deleted_until_its_ports_are_gone() {
    let Scene(client, bed, admin, ns, api) = Scene::new("neutron-in-use").await;
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("busy", "10.67.0.0/24", "10.67.0.1"),
    )
    .await
    .unwrap();
    let synced = wait_reason(&api, "busy", "Synced").await;
    let network_id = synced.status.clone().unwrap().backend.unwrap().id;
    // Somebody's port on our network, as a VM's would be.
    let port = openstack_as(
        &bed,
        PASSWORD_CLOUD,
        &["port", "create", "--network", &network_id, &ns.name, "-f", "json"],
    )
    .await;
    let port_id = port["id"].as_str().unwrap().to_owned();

    api.delete("busy", &DeleteParams::default()).await.unwrap();
    let refused = wait_reason(&api, "busy", "BackendConflict").await;
    let message = &refused.status.as_ref().unwrap().conditions[0].message;
    assert_tenant_message(message, "in use", &[&port_id]);
    let event = wait_for_event(&client, &ns.name, "busy", "BackendConflict").await;
    assert_eq!(event.note.as_ref(), Some(message));
    let (networks, _) = in_neutron(&admin, &ns.name, &synced).await;
    assert_eq!(networks.len(), 1, "the network stays while the port uses it");

    openstack_as(&bed, PASSWORD_CLOUD, &["port", "delete", &port_id]).await;
    testing::wait_for_deletion(&api, "busy", TIMEOUT).await.unwrap();
    assert_eq!(in_neutron(&admin, &ns.name, &synced).await, (vec![], vec![]));
    finish(&api, operator, ns).await;
}

/// A network whose tag request failed after its create carries only the operator's marker: it
/// is still the Network's, and deleting the Network deletes it. The tag requests are cut on the
/// way, as a network failure would, so the network stays half made.
#[tokio::test]
async fn a_half_made_network_is_found_and_removed_with_its_network() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-half").await;
    let recorder = RequestRecorder::refusing(neutron_address(&bed), |line| {
        line.starts_with("PUT ") && line.contains("/tags")
    })
    .await;
    let clouds = relayed_clouds(&bed, &recorder, &ns.name);
    let operator = NeutronOperator::start(&ns.name, source(clouds.clone(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("half", "10.67.1.0/24", "10.67.1.1"),
    )
    .await
    .unwrap();
    let name = format!("{}/half", ns.name);
    let half = testing::eventually("the network created, its tags refused", TIMEOUT, async || {
        let named = admin.list_networks(&[], Some(&name)).await.ok()?;
        named.into_iter().next()
    })
    .await;
    assert!(half.tags.is_empty(), "{half:?}");
    assert!(
        half.description
            .as_deref()
            .is_some_and(|d| d.starts_with("Managed by sample-operator")),
        "{half:?}"
    );

    api.delete("half", &DeleteParams::default()).await.unwrap();
    testing::wait_for_deletion(&api, "half", TIMEOUT).await.unwrap();
    let left = admin.list_networks(&[], Some(&name)).await.unwrap();
    assert!(left.is_empty(), "the half-made network was left behind: {left:?}");
    let _ = std::fs::remove_file(&clouds);
    finish(&api, operator, ns).await;
}

/// An IPv6 Network is an IPv6 subnet with its gateway, the gateway kept out of the address pools;
/// a new gateway is set on the same subnet and the pools move with it, as for IPv4.
#[tokio::test]
async fn an_ipv6_network_is_an_ipv6_subnet_whose_gateway_moves_in_place() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-ipv6").await;
    let operator = NeutronOperator::start(&ns.name, source(bed.clouds_yaml(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("six", "fd00:66:1::/64", "fd00:66:1::1"),
    )
    .await
    .unwrap();
    let synced = wait_reason(&api, "six", "Synced").await;
    let backend = synced.status.clone().unwrap().backend.unwrap();
    let subnet_id = backend.subnet_id.clone().expect("the subnet's id");
    let shown = openstack(&bed, &["subnet", "show", &subnet_id, "-f", "json"]).await;
    assert_eq!(shown["ip_version"], 6);
    assert_eq!(shown["cidr"], "fd00:66:1::/64");
    assert_eq!(shown["gateway_ip"], "fd00:66:1::1");
    let outside_pools = |subnet: &NeutronSubnet, gateway: &str| {
        let at = |a: &str| u128::from(a.parse::<std::net::Ipv6Addr>().unwrap());
        !subnet.allocation_pools.is_empty()
            && subnet
                .allocation_pools
                .iter()
                .all(|p| !(at(&p.start)..=at(&p.end)).contains(&at(gateway)))
    };
    let (_, subnets) = in_neutron(&admin, &ns.name, &synced).await;
    assert!(outside_pools(&subnets[0], "fd00:66:1::1"), "{subnets:?}");

    api.patch(
        "six",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"gateway": "fd00:66:1::fe"}})),
    )
    .await
    .unwrap();
    let moved = wait_reason(&api, "six", "Synced").await;
    assert_eq!(
        moved.status.clone().unwrap().backend.unwrap(),
        backend,
        "same network and subnet"
    );
    let (networks, subnets) = in_neutron(&admin, &ns.name, &moved).await;
    assert_eq!((networks.len(), subnets.len()), (1, 1));
    assert_eq!(subnets[0].gateway_ip.as_deref(), Some("fd00:66:1::fe"));
    assert!(outside_pools(&subnets[0], "fd00:66:1::fe"), "{subnets:?}");
    finish(&api, operator, ns).await;
}

/// A person edits the subnet while the operator's update of it is on its way: Neutron refuses
/// the update (412: it was conditional on the revision the operator read), the operator reads
/// the subnet again and sends the update again, and the person's edit stays. Tags go one at a
/// time, never as a whole list.
#[tokio::test]
async fn a_concurrent_edit_refuses_the_conditional_update_which_reads_again_and_keeps_the_edit() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-if-match").await;
    let recorder = RequestRecorder::holding(neutron_address(&bed), |line| {
        line.starts_with("PUT /v2.0/subnets/") && !line.contains("/tags")
    })
    .await;
    let clouds = relayed_clouds(&bed, &recorder, &ns.name);
    let operator = NeutronOperator::start(&ns.name, source(clouds, CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("edited", "10.69.1.0/24", "10.69.1.1"),
    )
    .await
    .unwrap();
    let synced = wait_reason(&api, "edited", "Synced").await;
    let reference = synced.status.unwrap().backend.unwrap();
    let (network_id, subnet_id) = (reference.id, reference.subnet_id.unwrap());
    let sent = recorder.since(std::time::UNIX_EPOCH);
    let tag_puts: Vec<&String> = sent
        .iter()
        .filter(|l| l.starts_with("PUT ") && l.contains("/tags"))
        .collect();
    assert_eq!(tag_puts.len(), 4, "two tags on each of two objects: {tag_puts:?}");
    assert!(
        tag_puts.iter().all(|l| l.contains("/tags/sample-operator.")),
        "one tag a request, never the list replaced: {tag_puts:?}"
    );

    api.patch(
        "edited",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"gateway": "10.69.1.254"}})),
    )
    .await
    .unwrap();
    recorder.held().await;
    openstack(
        &bed,
        &["subnet", "set", "--description", "edited by hand", &subnet_id],
    )
    .await;
    recorder.release();
    let subnet = testing::eventually("the gateway moved", TIMEOUT, async || {
        let subnets = admin.list_subnets_on(&network_id).await.unwrap();
        let subnet = subnets.into_iter().find(|s| s.id == subnet_id)?;
        (subnet.gateway_ip.as_deref() == Some("10.69.1.254")).then_some(subnet)
    })
    .await;
    assert_eq!(
        subnet.description.as_deref(),
        Some("edited by hand"),
        "the person's edit stays"
    );
    wait_reason(&api, "edited", "Synced").await;
    let updates: Vec<String> = recorder
        .since(std::time::UNIX_EPOCH)
        .into_iter()
        .filter(|l| l.starts_with(&format!("PUT /v2.0/subnets/{subnet_id}")) && !l.contains("/tags"))
        .collect();
    assert_eq!(updates.len(), 2, "refused once, then sent again: {updates:?}");
    let revision = |line: &str| -> i64 {
        let (_, number) = line
            .to_ascii_lowercase()
            .split_once("if-match: revision_number=")
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .unwrap_or_else(|| panic!("not conditional: {line}"));
        number.trim().parse().unwrap()
    };
    assert!(
        revision(&updates[1]) > revision(&updates[0]),
        "the second update is conditional on the revision read again: {updates:?}"
    );
    let log = std::fs::read_to_string(bed.logs_dir().join("neutron-server.log")).unwrap();
    assert!(
        log.contains(&format!("\"PUT /v2.0/subnets/{subnet_id}? HTTP/1.1\" 412")),
        "neutron-server refused the first update as stale"
    );
    finish(&api, operator, ns).await;
}

/// A namespace at its limit (`--network-max-per-namespace`) cannot take the project's quota
/// from the others: its newest Network is told so and holds nothing in Neutron, another
/// namespace still gets its Network, and the deletion of an older one lets the newest in. And
/// subnets come without DHCP.
#[tokio::test]
async fn a_namespace_at_its_limit_is_told_so_and_another_namespace_still_gets_its_network() {
    let Scene(client, bed, admin, ns, api) = Scene::new("neutron-limit").await;
    let other = TestNamespace::create(&client, "neutron-limit-b").await;
    // One operator across both namespaces, on this test's Networks (by label).
    const LABEL: &str = "sample-operator.dev/network-test";
    let mut run = config(None, &[ControllerName::Network]);
    run.network.label_selector = Some(format!("{LABEL}={}", ns.name));
    run.network.max_per_namespace = Some(1);
    run.network.backend = BackendConfig::Neutron(settings(source(bed.clouds_yaml(), CLOUD), &ns.name));
    let operator = NeutronOperator::run(run).await;
    let labelled = |name: &str, cidr: &str, gateway: &str| {
        let mut n = network(name, cidr, gateway);
        n.labels_mut().insert(LABEL.into(), ns.name.clone());
        n
    };

    api.create(
        &PostParams::default(),
        &labelled("first", "10.64.0.0/24", "10.64.0.1"),
    )
    .await
    .unwrap();
    let first = wait_reason(&api, "first", "Synced").await;
    api.create(
        &PostParams::default(),
        &labelled("second", "10.64.1.0/24", "10.64.1.1"),
    )
    .await
    .unwrap();
    let second = wait_reason(&api, "second", "NamespaceLimitReached").await;
    let message = &crate::support::ready_condition(&second).unwrap().message;
    assert!(
        message
            .starts_with("the namespace has 1 older Networks, the most the operator syncs for one namespace"),
        "{message}"
    );
    assert_eq!(
        in_neutron(&admin, &ns.name, &second).await.0.len(),
        0,
        "nothing in Neutron"
    );
    let theirs_api: Api<Network> = other.api();
    theirs_api
        .create(
            &PostParams::default(),
            &labelled("theirs", "10.64.2.0/24", "10.64.2.1"),
        )
        .await
        .unwrap();
    wait_reason(&theirs_api, "theirs", "Synced").await;

    // Without DHCP: Neutron's DHCP agent takes no address of the subnet.
    let subnet_id = first
        .status
        .as_ref()
        .unwrap()
        .backend
        .as_ref()
        .unwrap()
        .subnet_id
        .clone()
        .unwrap();
    let subnet = openstack(&bed, &["subnet", "show", &subnet_id, "-f", "json"]).await;
    assert_eq!(subnet["enable_dhcp"], false, "{subnet}");

    api.delete("first", &DeleteParams::default()).await.unwrap();
    wait_reason(&api, "second", "Synced").await;

    theirs_api
        .delete("theirs", &DeleteParams::default())
        .await
        .unwrap();
    testing::wait_for_deletion(&theirs_api, "theirs", TIMEOUT)
        .await
        .unwrap();
    finish(&api, operator, ns).await;
}
