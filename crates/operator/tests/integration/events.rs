//! The background event publisher (`sample_operator::runtime::events`) on the apiserver.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use kube::Resource;
use kube::api::{ListParams, PostParams};
use kube::runtime::events::{EventType, Reporter};
use local_cluster::testing::TestNamespace;
use sample_operator::runtime::events::{Events, Pace, Report, SUMMARISED_ANNOTATION, SUMMARY_REASON};
use sample_operator::runtime::metrics::Metrics;
use sample_operator::runtime::requests::RequestCounter;
use serde_json::json;

use crate::support::client_with_crds;

/// A stopping operator publishes the events it has queued before it goes: once the last
/// `Events` handle is dropped, `Publisher::finish` waits for the queue to drain. Queueing takes
/// no request, so when `finish` returns early or the task is cut short, events are missing.
#[tokio::test]
async fn queued_events_are_published_before_the_run_ends() {
    const QUEUED: usize = 100;
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "events").await;
    let config_map: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "regarded" } })).unwrap();
    let config_map = ns
        .api::<ConfigMap>()
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();
    let reporter = Reporter {
        controller: "sample-operator-events-test".into(),
        instance: None,
    };
    let metrics = Arc::new(Metrics::new(RequestCounter::default()));
    let (events, publisher) = Events::start(client.clone(), reporter, metrics);

    for i in 0..QUEUED {
        let regarding = config_map.object_ref(&());
        events
            .publish(
                regarding,
                EventType::Normal,
                Report::Outcome,
                "Queued",
                format!("event {i}"),
                "Test",
            )
            .await;
    }
    drop(events);
    publisher.finish(Duration::from_secs(60)).await;

    let published = ns.api::<Event>().list(&ListParams::default()).await.unwrap();
    let mut notes: Vec<String> = published.items.into_iter().filter_map(|e| e.note).collect();
    notes.sort_by_key(|note| note.trim_start_matches("event ").parse::<usize>().ok());
    let expected: Vec<String> = (0..QUEUED).map(|i| format!("event {i}")).collect();
    assert_eq!(notes, expected, "every queued event is published, once");
}

/// Repeats queued before the first is sent become one events.k8s.io Event with a `series`,
/// which the apiserver's validation accepts on create; other events stay apart.
#[tokio::test]
async fn repeats_are_written_as_one_event_series() {
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "event-series").await;
    let config_map: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "regarded" } })).unwrap();
    let config_map = ns
        .api::<ConfigMap>()
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();
    let reporter = Reporter {
        controller: "sample-operator-events-test".into(),
        instance: Some("replica-0".into()),
    };
    let metrics = Arc::new(Metrics::new(RequestCounter::default()));
    let (events, publisher) = Events::start(client.clone(), reporter, metrics.clone());
    // Nothing is sent before this (single-threaded) test yields.
    for _ in 0..3 {
        events
            .publish(
                config_map.object_ref(&()),
                EventType::Warning,
                Report::Outcome,
                "Failed",
                "it failed".into(),
                "Sync",
            )
            .await;
    }
    events
        .publish(
            config_map.object_ref(&()),
            EventType::Normal,
            Report::Outcome,
            "Synced",
            "it worked".into(),
            "Sync",
        )
        .await;
    drop(events);
    publisher.finish(Duration::from_secs(60)).await;

    let mut published: Vec<_> = ns
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.type_.unwrap_or_default(),
                e.series.map(|s| s.count),
                e.regarding.and_then(|r| r.name),
                e.reporting_instance.unwrap_or_default(),
            )
        })
        .collect();
    published.sort();
    assert_eq!(
        published,
        [
            (
                "Failed".into(),
                "Warning".into(),
                Some(3),
                Some("regarded".into()),
                "replica-0".into()
            ),
            (
                "Synced".into(),
                "Normal".into(),
                None,
                Some("regarded".into()),
                "replica-0".into()
            ),
        ]
    );
    let text = metrics.render();
    assert!(
        text.contains(r#"sample_operator_events_total{result="folded"} 2"#),
        "{text}"
    );
}

/// While the controllers are behind, Normal outcomes wait, and those that waited too long are
/// counted in one summary Event of their namespace: the apiserver takes it (about the
/// Namespace, kept in it), its annotation says how many outcomes it stands for, and Warnings
/// are still written on their objects.
#[tokio::test]
async fn outcomes_that_waited_too_long_are_written_as_one_summary_of_their_namespace() {
    const OUTCOMES: usize = 50;
    let client = client_with_crds().await;
    let ns = TestNamespace::create(&client, "event-summary").await;
    let reporter = Reporter {
        controller: "sample-operator-events-test".into(),
        instance: Some("replica-0".into()),
    };
    let metrics = Arc::new(Metrics::new(RequestCounter::default()));
    // Objects wait for a reconcile slot.
    metrics.set_queue_depth("foo", 10);
    let pace = Pace {
        summarise_after: Duration::from_millis(300),
        summary_interval: Duration::from_millis(200),
    };
    let (events, publisher) = Events::start_with(client.clone(), reporter, metrics.clone(), pace);
    let about = |name: String| ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        namespace: Some(ns.name.clone()),
        name: Some(name),
        ..Default::default()
    };
    for i in 0..OUTCOMES {
        events
            .publish(
                about(format!("regarded-{i}")),
                EventType::Normal,
                Report::Outcome,
                "Synced",
                "it worked".into(),
                "Sync",
            )
            .await;
    }
    events
        .publish(
            about("failing".into()),
            EventType::Warning,
            Report::Outcome,
            "Failed",
            "it failed".into(),
            "Sync",
        )
        .await;
    let api = ns.api::<Event>();
    let written = || async {
        let mut events = api.list(&ListParams::default()).await.unwrap().items;
        events.sort_by_key(|e| e.reason.clone());
        events
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while written().await.len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "{:?}", written().await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    metrics.set_queue_depth("foo", 0);
    drop(events);
    publisher.finish(Duration::from_secs(60)).await;

    let written = written().await;
    let seen: Vec<_> = written
        .iter()
        .map(|e| {
            let regarding = e.regarding.clone().unwrap_or_default();
            (
                e.reason.clone().unwrap_or_default(),
                regarding.kind.unwrap_or_default(),
                regarding.name.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (SUMMARY_REASON.into(), "Namespace".into(), ns.name.clone()),
            ("Failed".into(), "ConfigMap".into(), "failing".into()),
        ]
    );
    let summary = &written[0];
    assert_eq!(
        summary
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SUMMARISED_ANNOTATION)),
        Some(&OUTCOMES.to_string())
    );
    let note = summary.note.as_deref().unwrap_or_default();
    assert!(
        note.contains("Synced on 50 ConfigMaps: regarded-0, regarded-1, regarded-2 and 47 more"),
        "{note}"
    );
    let text = metrics.render();
    for line in [
        r#"sample_operator_events_total{result="summarised"} 50"#,
        r#"sample_operator_events_total{result="summary"} 1"#,
        r#"sample_operator_events_total{result="published"} 1"#,
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
}
