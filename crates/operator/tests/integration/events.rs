//! The background event publisher (`sample_operator::runtime::events`) on the apiserver.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::Resource;
use kube::api::{ListParams, PostParams};
use kube::runtime::events::{EventType, Reporter};
use local_cluster::testing::TestNamespace;
use sample_operator::runtime::events::Events;
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
