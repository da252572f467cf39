//! Hostile clients the soak holds against broker processes while it measures everyone else.
//!
//! [`SlowClients`]: slow bodies, the attack that once took every in-flight slot of a broker for
//! 15 s (issue 18). Each client sends a schedule's headers, declaring a body of [`DECLARED_BODY_BYTES`], and the
//! body's first bytes; then one more byte every [`TRICKLE_EVERY`], never finishing. When the broker
//! answers (a 408 after its body read timeout) or closes, the client connects again at once, so
//! the count attached stays what the workload asked for.
//!
//! [`BadInputs`]: the API's bad-input table ([`queen_testdb::hostile`]) sent round after round,
//! each row to the next broker, every answer judged against the refusal the row documents.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use queen_testdb::hostile::{Answered, bad_input_table, exchange};

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

/// How long one bad-input request may take before it counts as unanswered.
const BAD_INPUT_LIMIT: Duration = Duration::from_secs(5);

/// The pause between two rounds of the table.
const BAD_INPUT_PAUSE: Duration = Duration::from_millis(500);

/// Answers off the documented shape kept in the result, the first ones.
const WRONG_KEPT: usize = 10;

/// What the brokers answered to the bad-input table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BadInputDone {
    /// Rows in the table, and whole rounds of it sent.
    pub rows: u64,
    pub rounds: u64,
    pub requests: u64,
    /// Answered with the status, code and message the row documents.
    pub as_documented: u64,
    /// Answered 5xx.
    pub server_errors: u64,
    /// No answer within 5 s.
    pub unanswered: u64,
    /// The first answers off their row, in words.
    pub wrong: Vec<String>,
}

/// The bad-input table sent to brokers until stopped (or `rounds` are done).
#[derive(Debug)]
pub struct BadInputs {
    stop: Arc<AtomicBool>,
    task: JoinHandle<BadInputDone>,
}

impl BadInputs {
    pub fn start(addresses: &[String], rounds: u32) -> BadInputs {
        let stop = Arc::new(AtomicBool::new(false));
        let (addresses, stopped) = (addresses.to_vec(), stop.clone());
        let task = tokio::spawn(async move {
            let table = bad_input_table();
            let mut done = BadInputDone {
                rows: table.len() as u64,
                ..BadInputDone::default()
            };
            let mut turn = 0;
            'rounds: for _ in 0..rounds {
                for row in &table {
                    if stopped.load(Ordering::Acquire) || addresses.is_empty() {
                        break 'rounds;
                    }
                    let address = &addresses[turn % addresses.len()];
                    turn += 1;
                    let answer = exchange(address, &row.request, BAD_INPUT_LIMIT).await;
                    let answered = Answered::of(&answer);
                    done.requests += 1;
                    match answered.status {
                        0 => done.unanswered += 1,
                        500.. => done.server_errors += 1,
                        _ => {}
                    }
                    if answered.as_documented(row) {
                        done.as_documented += 1;
                    } else if done.wrong.len() < WRONG_KEPT {
                        done.wrong.push(format!(
                            "{}: {} {:?} from {address}, want {} {}",
                            row.what, answered.status, answered.code, row.status, row.code
                        ));
                    }
                }
                done.rounds += 1;
                tokio::time::sleep(BAD_INPUT_PAUSE).await;
            }
            done
        });
        BadInputs { stop, task }
    }

    /// Stops after the request in flight; what the brokers answered.
    pub async fn stop(self) -> BadInputDone {
        self.stop.store(true, Ordering::Release);
        self.task.await.unwrap_or_default()
    }
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
