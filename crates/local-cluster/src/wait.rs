//! Waiting for the processes the local cluster, the real node and the OpenStack test bed start.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::process::Component;

/// Polls `check` every 250 ms until it returns `Ok(Some(value))`, failing early with the log
/// tail of any component that died, or after `timeout` with the last thing `check` reported.
pub(crate) async fn wait_for<T, F, Fut>(
    what: &str,
    timeout: Duration,
    components: &[Component],
    mut check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<Option<T>, String>>,
{
    let start = Instant::now();
    let mut last_seen = String::from("nothing yet");
    loop {
        for component in components {
            component.check()?;
        }
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(seen) => last_seen = seen,
        }
        if start.elapsed() > timeout {
            return Err(Error::Timeout {
                what: what.into(),
                seconds: timeout.as_secs(),
                last_seen,
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
