//! Hostile clients the soak holds against broker processes while it measures everyone else:
//! slow bodies, the attack that once took every in-flight slot of a broker for 15 s (issue 18).
//!
//! Each client sends a schedule's headers, declaring a body of [`DECLARED_BODY_BYTES`], and the
//! body's first bytes; then one more byte every [`TRICKLE_EVERY`], never finishing. When the broker
//! answers (a 408 after its body read timeout) or closes, the client connects again at once, so
//! the count attached stays what the workload asked for.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// The body length each slow client declares: well under the body limit, so only time refuses it.
pub const DECLARED_BODY_BYTES: u64 = 1_000;

/// The pause between two bytes of a slow body.
pub const TRICKLE_EVERY: Duration = Duration::from_secs(1);

/// The pause before connecting again when a connect fails.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// What the slow clients of a run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SlowClientsDone {
    /// Clients attached at any one time, over every broker.
    pub clients: u32,
    /// Connections opened, reconnections included.
    pub connections: u64,
    /// The answers the brokers gave them, by status (a close without an answer is 0).
    pub answers: BTreeMap<u16, u64>,
}

/// Slow clients attached to brokers until stopped.
#[derive(Debug)]
pub struct SlowClients {
    done: Arc<Mutex<SlowClientsDone>>,
    tasks: Vec<JoinHandle<()>>,
}

impl SlowClients {
    /// `per_broker` clients on each address (`host:port`).
    pub fn start(addresses: &[String], per_broker: u32) -> SlowClients {
        let done = Arc::new(Mutex::new(SlowClientsDone {
            clients: per_broker * addresses.len() as u32,
            ..SlowClientsDone::default()
        }));
        let tasks = addresses
            .iter()
            .flat_map(|address| (0..per_broker).map(move |_| address.clone()))
            .map(|address| tokio::spawn(slow_client(address, done.clone())))
            .collect();
        SlowClients { done, tasks }
    }

    /// Detaches every client; what they did.
    pub fn stop(self) -> SlowClientsDone {
        for task in &self.tasks {
            task.abort();
        }
        self.done.lock().expect("not poisoned").clone()
    }
}

async fn slow_client(address: String, done: Arc<Mutex<SlowClientsDone>>) {
    let head = format!(
        "POST /api/v1/timers HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {DECLARED_BODY_BYTES}\r\n\r\n{{\"ops\": ["
    );
    loop {
        let Ok(mut stream) = TcpStream::connect(&address).await else {
            tokio::time::sleep(RECONNECT_PAUSE).await;
            continue;
        };
        done.lock().expect("not poisoned").connections += 1;
        let status = hold(&mut stream, head.as_bytes()).await;
        *done
            .lock()
            .expect("not poisoned")
            .answers
            .entry(status)
            .or_default() += 1;
    }
}

/// Sends `head`, then a byte a second, until the broker answers or closes; the answer's status
/// (0 without one).
async fn hold(stream: &mut TcpStream, head: &[u8]) -> u16 {
    if stream.write_all(head).await.is_err() {
        return 0;
    }
    let mut answer = [0u8; 64];
    loop {
        tokio::select! {
            biased;
            read = stream.read(&mut answer) => {
                return match read {
                    Ok(n) if n > 0 => status_of(&answer[..n]),
                    _ => 0,
                };
            }
            () = tokio::time::sleep(TRICKLE_EVERY) => {
                if stream.write_all(b" ").await.is_err() {
                    return 0;
                }
            }
        }
    }
}

/// The status of an HTTP/1.1 answer's first bytes (`HTTP/1.1 408 ...`); 0 when unreadable.
fn status_of(bytes: &[u8]) -> u16 {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_is_read_from_the_answers_first_line() {
        assert_eq!(status_of(b"HTTP/1.1 408 Request Timeout\r\ncontent-"), 408);
        assert_eq!(status_of(b"HTTP/1.1 413"), 413);
        assert_eq!(status_of(b"garbage"), 0);
        assert_eq!(status_of(&[0xff, 0x20, 0x34]), 0);
    }
}
