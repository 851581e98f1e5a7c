//! A TCP relay in front of neutron-server or Keystone that one test's operator reaches them
//! through. It notes each HTTP request line as it leaves the client (with its `If-Match` header,
//! if any), so that a request counts even while the server answers nothing, and it plays what
//! the test needs of the server for that operator alone: down, frozen, cutting or holding chosen
//! requests, or tokens that expire sooner. The shared test bed keeps serving every other test.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use super::TIMEOUT;

/// An outage of the server, as the relay's client sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Outage {
    /// Requests pass.
    #[default]
    None,
    /// Gone, as a stopped server is: the port refuses connections and open ones are closed.
    Down,
    /// Connected but answering nothing, as a stopped (SIGSTOP) process: each request waits at
    /// the relay until the outage ends, then goes on.
    Frozen,
}

/// What the relay does to the requests whose line a rule picks, and to the answers.
#[derive(Clone, Copy, Default)]
struct Rules {
    /// Cut the connection instead of passing the request on, as a network failure would.
    refuse: Option<fn(&str) -> bool>,
    /// Hold the first such request until the test releases it.
    hold: Option<fn(&str) -> bool>,
    /// Keystone's tokens, as the client reads them, expire this long after they pass.
    token_lifetime: Option<Duration>,
}

#[derive(Default)]
struct Hold {
    used: AtomicBool,
    reached: Notify,
    released: Notify,
}

type Seen = Arc<Mutex<Vec<(SystemTime, String)>>>;

pub struct RequestRecorder {
    pub port: u16,
    seen: Seen,
    hold: Arc<Hold>,
    outage: watch::Sender<Outage>,
    task: tokio::task::JoinHandle<()>,
}

impl RequestRecorder {
    /// A relay that passes everything on.
    pub async fn start(upstream: SocketAddr) -> Self {
        Self::relaying(upstream, Rules::default()).await
    }

    /// A relay that cuts the connection instead of passing on a request whose line `refuse`
    /// picks.
    pub async fn refusing(upstream: SocketAddr, refuse: fn(&str) -> bool) -> Self {
        let rules = Rules {
            refuse: Some(refuse),
            ..Rules::default()
        };
        Self::relaying(upstream, rules).await
    }

    /// A relay that holds the first request whose line `pick` picks until [`Self::release`];
    /// [`Self::held`] waits for it.
    pub async fn holding(upstream: SocketAddr, pick: fn(&str) -> bool) -> Self {
        let rules = Rules {
            hold: Some(pick),
            ..Rules::default()
        };
        Self::relaying(upstream, rules).await
    }

    /// A relay in front of Keystone whose tokens, as the client reads their `expires_at`,
    /// expire `lifetime` after they are issued. The answer keeps its length, so no header
    /// changes; Keystone itself still accepts the token for its own lifetime.
    pub async fn with_token_lifetime(upstream: SocketAddr, lifetime: Duration) -> Self {
        let rules = Rules {
            token_lifetime: Some(lifetime),
            ..Rules::default()
        };
        Self::relaying(upstream, rules).await
    }

    async fn relaying(upstream: SocketAddr, rules: Rules) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Seen = Arc::default();
        let hold = Arc::new(Hold::default());
        let (outage, watching) = watch::channel(Outage::None);
        let (log, held) = (seen.clone(), hold.clone());
        let task = tokio::spawn(async move {
            let mut listener = Some(listener);
            let mut state = watching.clone();
            loop {
                let Some(open) = &listener else {
                    // Down: nothing listens until the outage ends.
                    if state.changed().await.is_err() {
                        return;
                    }
                    if *state.borrow_and_update() != Outage::Down {
                        listener = Some(listen(port));
                    }
                    continue;
                };
                tokio::select! {
                    accepted = open.accept() => {
                        let Ok((client, _)) = accepted else { return };
                        let (log, hold, state) = (log.clone(), held.clone(), watching.clone());
                        tokio::spawn(connection(client, upstream, rules, log, hold, state));
                    }
                    changed = state.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        if *state.borrow_and_update() == Outage::Down {
                            listener = None;
                        }
                    }
                }
            }
        });
        Self {
            port,
            seen,
            hold,
            outage,
            task,
        }
    }

    /// Starts or ends an outage.
    pub fn set(&self, outage: Outage) {
        self.outage.send_replace(outage);
    }

    /// Waits until the request to hold has reached the relay.
    pub async fn held(&self) {
        tokio::time::timeout(TIMEOUT, self.hold.reached.notified())
            .await
            .expect("the request to hold arrives");
    }

    /// Passes the held request on.
    pub fn release(&self) {
        self.hold.released.notify_one();
    }

    /// The requests seen at or after `when`.
    pub fn since(&self, when: SystemTime) -> Vec<String> {
        self.timed_since(when).into_iter().map(|(_, line)| line).collect()
    }

    /// [`Self::since`], each request with when it reached the relay.
    pub fn timed_since(&self, when: SystemTime) -> Vec<(SystemTime, String)> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|(at, _)| *at >= when).cloned().collect()
    }
}

impl Drop for RequestRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Listens on `port` again after an outage: the address may still have connections of the
/// last listener in TIME_WAIT.
fn listen(port: u16) -> TcpListener {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket
        .bind(SocketAddr::from(([127, 0, 0, 1], port)))
        .unwrap_or_else(|e| panic!("the relay listens on port {port} again: {e}"));
    socket.listen(64).unwrap()
}

/// One client connection, relayed until either side closes it or the server goes down.
async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    rules: Rules,
    log: Seen,
    hold: Arc<Hold>,
    mut state: watch::Receiver<Outage>,
) {
    let mut outage = state.clone();
    tokio::select! {
        () = relay(client, upstream, rules, log, hold, &mut state) => {}
        // Dropping the relay closes both sides, as a stopped server's connections close.
        _ = outage.wait_for(|o| *o == Outage::Down) => {}
    }
}

async fn relay(
    client: TcpStream,
    upstream: SocketAddr,
    rules: Rules,
    log: Seen,
    hold: Arc<Hold>,
    state: &mut watch::Receiver<Outage>,
) {
    let (mut from_client, mut to_client) = client.into_split();
    // The server is connected once a request is let through: neutron-server's one worker would
    // wait on an open connection that sends nothing.
    let (server_tx, server_rx) = tokio::sync::oneshot::channel();
    let mut server_tx = Some(server_tx);
    let mut to_server = None;
    let up = async {
        let (mut buffer, mut pending) = (vec![0u8; 16 * 1024], String::new());
        // This connection's request being read, as an index into the log.
        let mut current: Option<usize> = None;
        'relay: while let Ok(n @ 1..) = from_client.read(&mut buffer).await {
            pending.push_str(&String::from_utf8_lossy(&buffer[..n]));
            // Lines end in CRLF; a line cut by the read waits for its end.
            while let Some(end) = pending.find("\r\n") {
                let line: String = pending.drain(..end + 2).collect();
                let line = line.trim_end();
                if line.to_ascii_lowercase().starts_with("if-match:")
                    && let Some(index) = current
                {
                    log.lock().unwrap()[index].1 += &format!(" | {line}");
                }
                if !line.ends_with(" HTTP/1.1") {
                    continue;
                }
                if rules.refuse.is_some_and(|refuse| refuse(line)) {
                    break 'relay;
                }
                if rules.hold.is_some_and(|pick| pick(line)) && !hold.used.swap(true, Ordering::SeqCst) {
                    hold.reached.notify_one();
                    hold.released.notified().await;
                }
                let now = SystemTime::now();
                {
                    let mut log = log.lock().unwrap();
                    log.push((now, line.to_owned()));
                    current = Some(log.len() - 1);
                }
                // Sent, and frozen on its way: it waits here until the outage ends.
                if state.wait_for(|o| *o != Outage::Frozen).await.is_err() {
                    break 'relay;
                }
            }
            if to_server.is_none() {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    break;
                };
                let (from_server, writer) = server.into_split();
                to_server = Some(writer);
                let _ = server_tx.take().map(|tx| tx.send(from_server));
            }
            let writer = to_server.as_mut().expect("connected");
            if writer.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
        if let Some(mut writer) = to_server {
            let _ = writer.shutdown().await;
        }
        drop(server_tx);
    };
    let down = async {
        if let Ok(mut from_server) = server_rx.await {
            match rules.token_lifetime {
                None => {
                    let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
                }
                Some(lifetime) => {
                    let (mut buffer, mut carried) = (vec![0u8; 16 * 1024], Vec::new());
                    while let Ok(n @ 1..) = from_server.read(&mut buffer).await {
                        carried.extend_from_slice(&buffer[..n]);
                        let keep = shorten_expiry(&mut carried, lifetime);
                        let ready = carried.len() - keep;
                        if to_client.write_all(&carried[..ready]).await.is_err() {
                            break;
                        }
                        carried.drain(..ready);
                    }
                    let _ = to_client.write_all(&carried).await;
                }
            }
        }
        let _ = to_client.shutdown().await;
    };
    tokio::join!(up, down);
}

const EXPIRES_AT: &[u8] = b"\"expires_at\":";

/// Sets each complete `"expires_at": "<time>"` in `bytes` to `lifetime` from now, in Keystone's
/// format and at the same length; returns how many bytes at the end may be the start of one
/// still cut by the read, to keep for the next (the rest of an answer always follows them).
fn shorten_expiry(bytes: &mut [u8], lifetime: Duration) -> usize {
    let mut from = 0;
    while let Some(at) = find(&bytes[from..], EXPIRES_AT).map(|i| i + from) {
        let rest = &bytes[at + EXPIRES_AT.len()..];
        let spaces = rest.iter().take_while(|b| **b == b' ').count();
        let value_start = at + EXPIRES_AT.len() + spaces + 1;
        let Some(len) = bytes
            .get(value_start..)
            .and_then(|v| v.iter().position(|b| *b == b'"'))
        else {
            return bytes.len() - at;
        };
        let old = std::str::from_utf8(&bytes[value_start..value_start + len]).unwrap_or_default();
        let new = expiry_like(old, lifetime);
        assert_eq!(new.len(), old.len(), "{old} rewritten as {new}");
        bytes[value_start..value_start + len].copy_from_slice(new.as_bytes());
        from = value_start + len;
    }
    // A cut `"expires_at":` at the very end.
    (1..EXPIRES_AT.len())
        .rev()
        .find(|&k| k <= bytes.len() && bytes.ends_with(&EXPIRES_AT[..k]))
        .unwrap_or(0)
}

/// `lifetime` from now, written as `old` is (Keystone writes microseconds: `…T18:40:00.000000Z`).
fn expiry_like(old: &str, lifetime: Duration) -> String {
    let at = chrono::Utc::now() + chrono::TimeDelta::from_std(lifetime).unwrap();
    let decimals = old
        .split_once('.')
        .map_or(0, |(_, fraction)| fraction.trim_end_matches('Z').len());
    let mut text = at.format("%Y-%m-%dT%H:%M:%S").to_string();
    if decimals > 0 {
        let fraction = format!("{:09}", at.timestamp_subsec_nanos());
        text += &format!(".{}", &fraction[..decimals.min(9)]);
    }
    if old.ends_with('Z') {
        text.push('Z');
    }
    text
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn token_expiry_is_rewritten_in_place_also_across_reads() {
    let lifetime = Duration::from_secs(36);
    let answer = br#"{"token": {"methods": ["application_credential"], "expires_at": "2030-01-01T00:00:00.000000Z", "issued_at": "2029-12-31T23:57:00.000000Z"}}"#;
    let mut whole = answer.to_vec();
    assert_eq!(shorten_expiry(&mut whole, lifetime), 0);
    assert_eq!(whole.len(), answer.len());
    let text = String::from_utf8(whole.clone()).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let expires: chrono::DateTime<chrono::Utc> =
        value["token"]["expires_at"].as_str().unwrap().parse().unwrap();
    let left = expires - chrono::Utc::now();
    assert!((30..=36).contains(&left.num_seconds()), "{text}");
    assert_eq!(value["token"]["issued_at"], "2029-12-31T23:57:00.000000Z");
    // Cut inside the key, and inside the value: the cut part is kept for the next read.
    for cut in [55, 60, 70] {
        let mut first = answer[..cut].to_vec();
        let keep = shorten_expiry(&mut first, lifetime);
        assert!(keep > 0, "cut at {cut}: {}", String::from_utf8_lossy(&first));
        let mut next = first[first.len() - keep..].to_vec();
        next.extend_from_slice(&answer[cut..]);
        assert_eq!(shorten_expiry(&mut next, lifetime), 0);
        assert!(
            !String::from_utf8_lossy(&next).contains("2030-01-01"),
            "cut at {cut}"
        );
    }
}
