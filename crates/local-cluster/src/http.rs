//! The tooling's HTTP GETs: health and readiness of the processes it starts, all on loopback
//! and plain HTTP. Blocking on purpose: the polls of `wait_for` call it from async code, where
//! reqwest's blocking client would panic.

use std::time::Duration;

use crate::error::{Error, Result};

/// What a server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// `GET url`, giving up after `timeout` in all: a server that accepts but never answers (a
/// process still starting, a gunicorn with no live worker) must not hang the caller. Any status
/// is an answer; only a failure to get one is an error.
pub fn get(url: &str, timeout: Duration) -> Result<Response> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        // Loopback only: a proxy from the environment must not see these requests.
        .proxy(None)
        .build()
        .into();
    let failed = |e: ureq::Error| Error::Http {
        url: url.to_owned(),
        message: e.to_string(),
    };
    let mut response = agent.get(url).call().map_err(failed)?;
    Ok(Response {
        status: response.status().as_u16(),
        body: response.body_mut().read_to_string().map_err(failed)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn any_status_is_an_answer_and_nothing_listening_is_an_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request).unwrap();
            stream
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 8\r\n\r\nnot yet\n")
                .unwrap();
        });
        let answer = get(&format!("http://127.0.0.1:{port}/readyz"), Duration::from_secs(5)).unwrap();
        assert_eq!((answer.status, answer.body.as_str()), (503, "not yet\n"));
        server.join().unwrap();
        assert!(get(&format!("http://127.0.0.1:{port}/"), Duration::from_secs(5)).is_err());
    }
}
