//! Publishing events without letting a failed event fail a reconcile.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

/// Publishes an event through events.k8s.io (repeats fold into a series). An event is a
/// report, not part of the work: failing to write one is logged and otherwise ignored.
pub async fn publish(
    recorder: &Recorder,
    regarding: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
    action: &str,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: action.to_owned(),
        secondary: None,
    };
    if let Err(error) = recorder.publish(&event, regarding).await {
        tracing::warn!(%error, reason, "could not publish event");
    }
}
