//! Scenario tests of a reconcile over a scripted API server, as kube-rs's controller-rs tests
//! its own (`fixtures.rs`), without a cluster and in milliseconds.
//!
//! The client's service is a function ([`tower::service_fn`]) rather than tower-test's mock
//! handle: a test answers requests by what they are, not by their order, so that the Events a
//! reconcile queues (sent by their own task, at their own moment) need no place in a script.
//! Every request is recorded; one the test does not answer gets a 500 and is listed by
//! [`ApiServer::unexpected`], which [`ApiServer::finish`] asserts empty. "Writes nothing when
//! nothing changed" is then an assertion on the recorded requests.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use kube::runtime::events::Reporter;
use serde_json::{Value, json};

use super::controller::Context;
use super::events::{Events, Publisher};
use super::metrics::Metrics;
use super::requests::RequestCounter;

/// A request the API server got.
#[derive(Clone, Debug)]
pub struct Sent {
    pub method: String,
    /// The path and query.
    pub path: String,
    pub body: Value,
}

impl Sent {
    pub fn is(&self, method: &str, path: &str) -> bool {
        self.method == method && self.path.split('?').next() == Some(path)
    }

    pub fn is_write(&self) -> bool {
        self.method != "GET"
    }

    /// An Event's reason, for a request that creates one.
    pub fn event_reason(&self) -> Option<&str> {
        (self.method == "POST" && self.path.contains("/apis/events.k8s.io/v1/"))
            .then(|| self.body["reason"].as_str())
            .flatten()
    }
}

/// An answer: the status code and the body.
pub type Answer = (u16, Value);

/// How a test answers: `None` for a request it does not expect.
pub type Answers = dyn Fn(&Sent) -> Option<Answer> + Send + Sync;

/// The scripted API server, and the client that reaches it.
pub struct ApiServer {
    sent: Arc<Mutex<Vec<Sent>>>,
    unexpected: Arc<Mutex<Vec<Sent>>>,
    pub client: Client,
}

impl ApiServer {
    /// Answers every request with `answers`, and every Event with what it was sent.
    pub fn new(answers: impl Fn(&Sent) -> Option<Answer> + Send + Sync + 'static) -> Self {
        let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
        let unexpected: Arc<Mutex<Vec<Sent>>> = Arc::default();
        let answers: Arc<Answers> = Arc::new(answers);
        let (log, refused) = (sent.clone(), unexpected.clone());
        let service = tower::service_fn(move |request: Request<Body>| {
            let (log, refused, answers) = (log.clone(), refused.clone(), answers.clone());
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.unwrap_or_default();
                let request = Sent {
                    method: parts.method.to_string(),
                    path: parts
                        .uri
                        .path_and_query()
                        .map_or_else(String::new, ToString::to_string),
                    body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                };
                log.lock().unwrap().push(request.clone());
                let (code, body) = if request.event_reason().is_some() {
                    (201, request.body.clone())
                } else {
                    answers(&request).unwrap_or_else(|| {
                        refused.lock().unwrap().push(request.clone());
                        (500, status(500, "InternalError", "not in the scenario"))
                    })
                };
                let response = Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(Body::from(serde_json::to_vec(&body).unwrap()))
                    .unwrap();
                Ok::<_, Infallible>(response)
            }
        });
        let client = Client::new(service, "default");
        Self {
            sent,
            unexpected,
            client,
        }
    }

    /// The requests since the last take, and forgets them.
    pub fn take(&self) -> Vec<Sent> {
        std::mem::take(&mut *self.sent.lock().unwrap())
    }

    /// The requests no answer expected.
    pub fn unexpected(&self) -> Vec<Sent> {
        self.unexpected.lock().unwrap().clone()
    }

    /// A reconcile's context on this server: its status writes and Events go here too. The
    /// Events are sent once [`Self::finish`] closes the queue.
    pub fn context<K: super::controller::Object>(&self) -> (Context<K>, Publisher) {
        let metrics = Arc::new(Metrics::new(RequestCounter::default()));
        let reporter = Reporter {
            controller: super::FIELD_MANAGER.into(),
            instance: Some("scenario".into()),
        };
        let (events, publisher) = Events::start(self.client.clone(), reporter, metrics.clone());
        (Context::new(self.client.clone(), events, metrics), publisher)
    }

    /// Ends a scenario: the context's queued Events are sent, then every request since the
    /// last take is returned. Fails on a request the scenario did not expect.
    pub async fn finish<K: kube::Resource>(&self, context: Context<K>, publisher: Publisher) -> Vec<Sent> {
        drop(context);
        publisher.finish(Duration::from_secs(5)).await;
        let unexpected = self.unexpected();
        assert!(
            unexpected.is_empty(),
            "requests not in the scenario: {unexpected:#?}"
        );
        self.take()
    }
}

/// A `Status` of a failed request, as the apiserver sends it.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

/// The object `object` with the status a server-side apply of the status (`patch`) sets, as
/// the apiserver answers it.
pub fn with_status(object: &impl serde::Serialize, patch: &Value) -> Value {
    let mut object = serde_json::to_value(object).unwrap();
    object["status"] = patch["status"].clone();
    object
}

/// The reasons of the Events among `sent`, in order.
pub fn event_reasons(sent: &[Sent]) -> Vec<String> {
    sent.iter()
        .filter_map(|s| s.event_reason().map(str::to_owned))
        .collect()
}
