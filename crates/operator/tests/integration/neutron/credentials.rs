//! How the operator authenticates: wrong credentials, a quota, a revoked token, tokens renewed
//! before they expire, `OS_*` variables, and secrets kept out of logs and arguments.

use std::time::SystemTime;

use super::*;

#[tokio::test]
async fn wrong_credentials_then_a_quota_then_a_revoked_token_are_reported_and_recovered() {
    let client = client_with_crds().await;
    let bed = testing::openstack().await;
    let ns = TestNamespace::create(&client, "neutron-auth").await;
    let project = ns.name.clone();
    let dir = std::env::temp_dir().join(&project);
    std::fs::create_dir_all(&dir).unwrap();
    let clouds = own_project(&bed, &project, &dir).await;
    let password = format!("{project}-password");
    // The operator starts with a wrong password.
    write_clouds(&bed, &clouds, &project, "not-the-password").await;
    let api: Api<Network> = ns.api();
    let operator = NeutronOperator::start(&ns.name, source(clouds.clone(), &project)).await;
    api.create(
        &PostParams::default(),
        &network("blue", "10.65.1.0/24", "10.65.1.1"),
    )
    .await
    .unwrap();
    let refused = wait_reason(&api, "blue", "BackendAuthFailed").await;
    let message = &refused.status.as_ref().unwrap().conditions[0].message;
    assert_tenant_message(message, "credentials", &[&project, "clouds.yaml", "Keystone"]);
    let event = wait_for_event(&client, &ns.name, "blue", "BackendAuthFailed").await;
    assert_eq!(event.note.as_ref(), Some(message));

    // Fixed in the file, as a Secret's volume is updated: taken without a restart.
    write_clouds(&bed, &clouds, &project, &password).await;
    wait_reason(&api, "blue", "Synced").await;

    // The project may hold no further network: the next Network reports the quota.
    openstack(&bed, &["quota", "set", "--networks", "1", &project]).await;
    api.create(
        &PostParams::default(),
        &network("green", "10.65.2.0/24", "10.65.2.1"),
    )
    .await
    .unwrap();
    let over = wait_reason(&api, "green", "BackendQuotaExceeded").await;
    let message = &over.status.as_ref().unwrap().conditions[0].message;
    assert_tenant_message(message, "quota is used up", &[&project, "openstack quota"]);
    wait_for_event(&client, &ns.name, "green", "BackendQuotaExceeded").await;
    openstack(&bed, &["quota", "set", "--networks", "10", &project]).await;
    wait_reason(&api, "green", "Synced").await;

    // Disabling the user revokes its tokens; enabled again, the operator's token is still
    // refused (401), and the session authenticates anew without a restart.
    openstack(
        &bed,
        &["user", "set", "--disable", "--domain", "Default", &project],
    )
    .await;
    openstack(
        &bed,
        &["user", "set", "--enable", "--domain", "Default", &project],
    )
    .await;
    // Until then neutron-server would take the token it checked last from its cache.
    tokio::time::sleep(Duration::from_secs(TOKEN_CACHE_SECONDS + 1)).await;
    api.patch(
        "blue",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"gateway": "10.65.1.254"}})),
    )
    .await
    .unwrap();
    wait_reason(&api, "blue", "Synced").await;
    let admin = admin(&bed);
    let (_, subnets) = in_neutron(&admin, &ns.name, &api.get("blue").await.unwrap()).await;
    assert_eq!(subnets[0].gateway_ip.as_deref(), Some("10.65.1.254"));

    finish(&api, operator, ns).await;
    drop_project(&bed, &project).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The built binary, configured as a shell with `OS_*` variables and no clouds.yaml would
/// configure it: first with an application credential, then with a token.
#[tokio::test]
async fn the_binary_takes_its_cloud_from_os_variables_with_a_credential_or_a_token() {
    let Scene(client, bed, admin, ns, api) = Scene::new("neutron-env").await;
    let dir = std::env::temp_dir().join(&ns.name);
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = crate::support::operator_kubeconfig(&client, &dir).await;
    let credential = openstack_as(
        &bed,
        PASSWORD_CLOUD,
        &["application", "credential", "create", &ns.name, "-f", "json"],
    )
    .await;
    let token = openstack_as(&bed, PASSWORD_CLOUD, &["token", "issue", "-f", "json"]).await;

    let namespace_arg = format!("--namespace={}", ns.name);
    let cluster_id_arg = format!("--cluster-id={}", ns.name);
    let kubeconfig_arg = format!("--kubeconfig={}", kubeconfig.display());
    let args = [
        "--controllers=network",
        namespace_arg.as_str(),
        cluster_id_arg.as_str(),
        kubeconfig_arg.as_str(),
        "--network-backend=neutron",
    ];
    let run = |auth: Vec<(&str, String)>| {
        OperatorProcess::spawn_with("operator", &dir, &args, |command| {
            command
                .env_remove("OS_CLOUD")
                .env_remove("OS_CLIENT_CONFIG_FILE")
                .env("OS_AUTH_URL", bed.keystone_url())
                .envs(auth)
                .current_dir(&dir);
        })
    };
    let log = || std::fs::read_to_string(dir.join("operator.log")).unwrap_or_default();

    let operator = run(vec![
        ("OS_AUTH_TYPE", "v3applicationcredential".into()),
        (
            "OS_APPLICATION_CREDENTIAL_ID",
            credential["ID"].as_str().unwrap().into(),
        ),
        (
            "OS_APPLICATION_CREDENTIAL_SECRET",
            credential["Secret"].as_str().unwrap().into(),
        ),
    ]);
    api.create(
        &PostParams::default(),
        &network("by-credential", "10.66.1.0/24", "10.66.1.1"),
    )
    .await
    .unwrap();
    let expected = ("True".to_owned(), "Synced".to_owned());
    let what = "by-credential synced";
    let synced = testing::wait_for(&api, "by-credential", what, TIMEOUT, |n| {
        current_reason(n).as_ref() == Some(&expected)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\noperator log:\n{}", log()));
    assert_eq!(in_neutron(&admin, &ns.name, &synced).await.0.len(), 1);
    drop(operator);

    let operator = run(vec![
        ("OS_AUTH_TYPE", "v3token".into()),
        ("OS_TOKEN", token["id"].as_str().unwrap().into()),
        ("OS_PROJECT_ID", token["project_id"].as_str().unwrap().into()),
    ]);
    api.create(
        &PostParams::default(),
        &network("by-token", "10.66.2.0/24", "10.66.2.1"),
    )
    .await
    .unwrap();
    let what = "by-token synced";
    let synced = testing::wait_for(&api, "by-token", what, TIMEOUT, |n| {
        current_reason(n).as_ref() == Some(&expected)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\noperator log:\n{}", log()));
    assert_eq!(in_neutron(&admin, &ns.name, &synced).await.0.len(), 1);
    // The token's operator deletes both from Neutron.
    api.delete_collection(&DeleteParams::default(), &Default::default())
        .await
        .unwrap();
    for name in ["by-credential", "by-token"] {
        testing::wait_for_deletion(&api, name, TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{e}\noperator log:\n{}", log()));
    }
    let left = admin
        .list_networks(&[model::cluster_tag(&ns.name)], None)
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    drop(operator);
    openstack_as(
        &bed,
        PASSWORD_CLOUD,
        &["application", "credential", "delete", &ns.name],
    )
    .await;
    let _ = std::fs::remove_dir_all(dir);
}

/// The test bed keeps its secrets private: its configuration files and clouds.yaml are its
/// owner's alone (in a folder that is too), and neither the application credential's secret nor
/// a password is in its logs or in any running process's arguments.
#[tokio::test]
async fn the_test_beds_secrets_are_private_files_never_logs_or_arguments() {
    use std::os::unix::fs::PermissionsExt;

    let bed = testing::openstack().await;
    let mode = |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&bed.dir()), 0o700, "{}", bed.dir().display());
    for file in [
        bed.clouds_yaml(),
        bed.dir().join("keystone.conf"),
        bed.dir().join("neutron.conf"),
    ] {
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    let clouds: Value = serde_yaml::from_str(&std::fs::read_to_string(bed.clouds_yaml()).unwrap()).unwrap();
    let mut secrets = vec![
        clouds["clouds"][CLOUD]["auth"]["application_credential_secret"].clone(),
        clouds["clouds"][PASSWORD_CLOUD]["auth"]["password"].clone(),
        clouds["clouds"][ADMIN_CLOUD]["auth"]["password"].clone(),
    ]
    .into_iter()
    .map(|s| s.as_str().expect("a secret in clouds.yaml").to_owned())
    .collect::<Vec<_>>();
    let neutron_conf = std::fs::read_to_string(bed.dir().join("neutron.conf")).unwrap();
    let neutron_password = neutron_conf
        .lines()
        .find_map(|l| l.strip_prefix("password = "))
        .expect("neutron-server's password");
    secrets.push(neutron_password.to_owned());
    for entry in std::fs::read_dir(bed.logs_dir()).unwrap() {
        let path = entry.unwrap().path();
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        for secret in &secrets {
            assert!(!text.contains(secret.as_str()), "a secret in {}", path.display());
        }
    }
    for process in procfs::process::all_processes().unwrap().flatten() {
        let Ok(arguments) = process.cmdline() else {
            continue;
        };
        let arguments = arguments.join(" ");
        for secret in &secrets {
            assert!(
                !arguments.contains(secret.as_str()),
                "a secret in the arguments of process {}",
                process.pid
            );
        }
    }
}

/// Tokens that expire 36 s after they are issued, as the operator reads them from its relay in
/// front of Keystone (the test bed's own [`TOKEN_LIFETIME_SECONDS`] with `cargo xtask test
/// --scale`): an operator running past one and a half of their lifetimes (listing Neutron every
/// few seconds, and syncing a Network at the end) renews each token before it expires, on its
/// own: no restart, no failed request or reconcile, each token replaced before it expired and
/// no more tokens than renewals need, timed as they leave for Keystone.
#[tokio::test]
async fn tokens_are_renewed_before_they_expire_without_a_failed_request() {
    let Scene(_, bed, _, ns, api) = Scene::new("neutron-tokens").await;
    let keystone_url = bed.keystone_url();
    let keystone_address = keystone_url
        .trim_start_matches("http://")
        .trim_end_matches("/v3")
        .parse()
        .unwrap();
    let lifetime = Duration::from_secs(testing::sized(36, TOKEN_LIFETIME_SECONDS));
    let keystone = if lifetime.as_secs() < TOKEN_LIFETIME_SECONDS {
        RequestRecorder::with_token_lifetime(keystone_address, lifetime).await
    } else {
        RequestRecorder::start(keystone_address).await
    };
    let mut clouds: Value =
        serde_yaml::from_str(&std::fs::read_to_string(bed.clouds_yaml()).unwrap()).unwrap();
    clouds["clouds"][CLOUD]["auth"]["auth_url"] = format!("http://127.0.0.1:{}/v3", keystone.port).into();
    let clouds_file = std::env::temp_dir().join(format!("{}-clouds.yaml", ns.name));
    testing::write_private(&clouds_file, &serde_yaml::to_string(&clouds).unwrap()).unwrap();

    let started = std::time::SystemTime::now();
    let operator = NeutronOperator::start(&ns.name, source(clouds_file.clone(), CLOUD)).await;
    api.create(
        &PostParams::default(),
        &network("early", "10.71.1.0/24", "10.71.1.1"),
    )
    .await
    .unwrap();
    wait_reason(&api, "early", "Synced").await;
    tokio::time::sleep(lifetime * 3 / 2 + Duration::from_secs(15)).await;
    api.create(
        &PostParams::default(),
        &network("late", "10.71.2.0/24", "10.71.2.1"),
    )
    .await
    .unwrap();
    wait_reason(&api, "late", "Synced").await;
    let elapsed = started.elapsed().unwrap();

    let issued: Vec<SystemTime> = keystone
        .timed_since(started)
        .into_iter()
        .filter(|(_, line)| line.starts_with("POST /v3/auth/tokens"))
        .map(|(at, _)| at)
        .collect();
    let tokens = issued.len();
    // Each token replaced before it expired, and the last one still valid at the end (the
    // operator asks Neutron every few seconds until then): no gap of a lifetime, however late
    // the first came on a busy machine. And no more tokens than renewals need: one to start,
    // then one each time three quarters of a lifetime have passed.
    let ended = SystemTime::now();
    let gaps: Vec<Duration> = issued
        .iter()
        .chain(std::iter::once(&ended))
        .collect::<Vec<_>>()
        .windows(2)
        .map(|pair| pair[1].duration_since(*pair[0]).unwrap_or_default())
        .collect();
    assert!(
        !issued.is_empty() && gaps.iter().all(|gap| *gap < lifetime),
        "a token lived past its {lifetime:?}: {tokens} tokens, then the end, apart by {gaps:?}"
    );
    let at_most = (elapsed.as_secs_f64() / (lifetime.as_secs_f64() * 0.75)) as usize + 1;
    eprintln!("neutron: {tokens} tokens in {elapsed:.0?} of {lifetime:?} tokens");
    assert!(
        tokens <= at_most,
        "{tokens} tokens in {elapsed:?}: at most {at_most}"
    );
    let metrics = operator.telemetry.metrics.render();
    let requests = metric_sum(&metrics, BACKEND_REQUESTS, &[]);
    let ok = metric_sum(&metrics, BACKEND_REQUESTS, &[("result", "ok")]);
    assert!(requests > 20.0, "the operator kept asking Neutron: {requests}");
    assert_eq!(requests, ok, "every request succeeded:\n{metrics}");
    let errors = metric_sum(
        &metrics,
        "controller_runtime_reconcile_total",
        &[("result", "error")],
    );
    assert_eq!(errors, 0.0, "no reconcile failed");
    finish(&api, operator, ns).await;
    let _ = std::fs::remove_file(clouds_file);
}
