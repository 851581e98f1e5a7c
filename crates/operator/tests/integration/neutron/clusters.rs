//! Networks of one Neutron project shared by clusters: a rebuilt cluster adopting its old
//! networks, and a second cluster id beside the first.

use super::*;

/// A rebuilt cluster (a new cluster id, new Network UIDs) started with --adopt-cluster-id
/// takes over the networks of the old id by namespace and name, retagging them without
/// creating anything; a network of the old id that no Network claims is reported, not touched.
#[tokio::test]
async fn a_rebuilt_cluster_adopts_its_old_networks_without_creating_them_again() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-adopt").await;
    let (old_id, new_id) = (format!("{}-old", ns.name), format!("{}-new", ns.name));
    let old =
        NeutronOperator::start_with(&ns.name, settings(source(bed.clouds_yaml(), CLOUD), &old_id)).await;
    for (name, third) in [("kept", 1), ("orphan", 2)] {
        api.create(
            &PostParams::default(),
            &network(name, &format!("10.70.{third}.0/24"), &format!("10.70.{third}.1")),
        )
        .await
        .unwrap();
    }
    let mut before = Vec::new();
    for name in ["kept", "orphan"] {
        before.push(
            wait_reason(&api, name, "Synced")
                .await
                .status
                .unwrap()
                .backend
                .unwrap(),
        );
    }
    old.stop().await;
    // The old cluster is gone: its Networks with it, their Neutron networks left behind.
    for name in ["kept", "orphan"] {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
        api.delete(name, &DeleteParams::default()).await.unwrap();
        testing::wait_for_deletion(&api, name, TIMEOUT).await.unwrap();
    }
    let old_networks = admin
        .list_networks(&[model::cluster_tag(&old_id)], None)
        .await
        .unwrap();
    let orphan_before = old_networks
        .iter()
        .find(|n| n.id == before[1].id)
        .unwrap()
        .clone();
    api.create(
        &PostParams::default(),
        &network("kept", "10.70.1.0/24", "10.70.1.1"),
    )
    .await
    .unwrap();

    let new = NeutronOperator::start_with(
        &ns.name,
        NeutronConfig {
            adopt_cluster_ids: vec![old_id.clone()],
            ..settings(source(bed.clouds_yaml(), CLOUD), &new_id)
        },
    )
    .await;
    let adopted = wait_reason(&api, "kept", "Synced").await;
    let reference = adopted.status.as_ref().unwrap().backend.clone().unwrap();
    assert_eq!(reference.id, before[0].id, "the same network, not a new one");
    assert_eq!(reference.subnet_id, before[0].subnet_id, "the same subnet");
    assert_eq!(
        new.requests(&["POST"]) - backend_requests_of(&new.telemetry.metrics.render(), "tokens"),
        0,
        "nothing created"
    );
    let (networks, subnets) = in_neutron(&admin, &new_id, &adopted).await;
    assert_eq!(networks.len(), 1);
    assert_eq!(subnets.len(), 1);
    for tags in [&networks[0].tags, &subnets[0].tags] {
        assert!(
            !tags.iter().any(|t| t.contains(&old_id)),
            "the old cluster's tags are gone: {tags:?}"
        );
        assert_eq!(tags.len(), 2, "{tags:?}");
    }
    // The orphan: reported by its old id, left as it was.
    new.wait_for_other_cluster_networks(&old_id, 1).await;
    let orphan = admin
        .list_networks(&[model::cluster_tag(&old_id)], None)
        .await
        .unwrap();
    assert_eq!(orphan, [orphan_before], "the orphan is untouched");

    finish(&api, new, ns).await;
    admin.delete_network(&before[1].id).await.unwrap();
}

/// Two clusters sharing the project, with different ids, on one Network object (the first
/// cluster's operator stopped, the second's taking over): the second makes a network of its own
/// beside the first's, which it neither touches nor deletes, and reports under the first's id.
#[tokio::test]
async fn a_second_cluster_id_on_the_same_network_makes_its_own_and_leaves_the_firsts() {
    let Scene(_, bed, admin, ns, api) = Scene::new("neutron-two-ids").await;
    let (first_id, second_id) = (format!("{}-a", ns.name), format!("{}-b", ns.name));
    let first =
        NeutronOperator::start_with(&ns.name, settings(source(bed.clouds_yaml(), CLOUD), &first_id)).await;
    api.create(
        &PostParams::default(),
        &network("shared", "10.72.1.0/24", "10.72.1.1"),
    )
    .await
    .unwrap();
    let firsts = wait_reason(&api, "shared", "Synced")
        .await
        .status
        .unwrap()
        .backend
        .unwrap()
        .id;
    first.stop().await;
    let before = admin
        .list_networks(&[model::cluster_tag(&first_id)], None)
        .await
        .unwrap();
    assert_eq!(before.len(), 1);

    let second =
        NeutronOperator::start_with(&ns.name, settings(source(bed.clouds_yaml(), CLOUD), &second_id)).await;
    let taken = testing::wait_for(&api, "shared", "a network of the second cluster", TIMEOUT, |n| {
        n.status
            .as_ref()
            .and_then(|s| s.backend.as_ref())
            .is_some_and(|b| b.id != firsts)
    })
    .await
    .unwrap();
    let seconds = taken.status.unwrap().backend.unwrap().id;
    let named = admin
        .list_networks(&[], Some(&format!("{}/shared", ns.name)))
        .await
        .unwrap();
    assert_eq!(named.len(), 2, "one network each: {named:?}");
    assert!(named.iter().any(|n| n.id == seconds));
    second.wait_for_other_cluster_networks(&first_id, 1).await;

    // Deleting the Network deletes the second cluster's network only.
    finish(&api, second, ns).await;
    let after = admin
        .list_networks(&[model::cluster_tag(&first_id)], None)
        .await
        .unwrap();
    assert_eq!(after, before, "the first cluster's network is untouched");
    assert!(
        admin
            .list_networks(&[model::cluster_tag(&second_id)], None)
            .await
            .unwrap()
            .is_empty()
    );
    admin.delete_network(&firsts).await.unwrap();
}
