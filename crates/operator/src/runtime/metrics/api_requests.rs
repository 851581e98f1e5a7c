//! client-go's `rest_client_requests_total`: the operator's requests to the API server, as
//! [`RequestCounter`] counted them.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::Registry;

use crate::runtime::requests::RequestCounter;

pub(super) fn register(r: &mut Registry, requests: RequestCounter) {
    r.register_collector(Box::new(ApiRequests(requests)));
}

/// The operator's requests to the API server: client-go's `rest_client_requests_total`.
#[derive(Debug)]
struct ApiRequests(RequestCounter);

impl Collector for ApiRequests {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host",
            None,
            MetricType::Counter,
        )?;
        for (key, value) in self.0.series() {
            let labels = [
                ("code", key.code.as_str()),
                ("host", key.host.as_str()),
                ("method", key.method.as_str()),
            ];
            ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::Metrics;
    use super::*;

    #[test]
    fn requests_are_encoded_by_code_host_and_method() {
        let requests = RequestCounter::default();
        let metrics = Metrics::new(requests.clone());
        requests.count("127.0.0.1:6443", &http::Method::PATCH, "409".into());
        requests.count("127.0.0.1:6443", &http::Method::PATCH, "409".into());
        requests.count(
            "127.0.0.1:6443",
            &http::Method::GET,
            crate::runtime::requests::NO_RESPONSE.into(),
        );
        let text = metrics.render();
        for line in [
            r#"rest_client_requests_total{code="409",host="127.0.0.1:6443",method="PATCH"} 2"#,
            r#"rest_client_requests_total{code="<error>",host="127.0.0.1:6443",method="GET"} 1"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
