//! `/healthz` of every broker process, polled through a run with a fault: how long each answer
//! took (issue 18's target: within 1 s, always, through an outage) and how long the brokers said
//! "not ready".

use std::sync::{Arc, Mutex};
use std::time::Duration;

use queen_harness::Spread;
use queen_sweeper::clock;
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;

/// The pause between two polls of one broker.
pub const POLL_EVERY: Duration = Duration::from_millis(100);

/// How long a poll waits for its answer; past it the poll counts as unanswered, at this
/// latency (far over the target, so the verdict is the same).
pub const POLL_LIMIT: Duration = Duration::from_secs(5);

/// `/healthz` must always answer within this (issue 18).
pub const TARGET_MS: f64 = 1_000.0;

/// One poll: when it was sent (epoch seconds), to which broker, what came back (0: no answer),
/// and how long it took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Poll {
    pub at_epoch_s: f64,
    pub broker: usize,
    pub status: u16,
    pub latency_ms: f64,
}

/// What the polls of a run found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HealthPolls {
    pub polls: u64,
    /// Answers other than 200 (503 while the database is down), and polls with no answer.
    pub not_ready: u64,
    pub unanswered: u64,
    /// Every poll's latency (the unanswered at [`POLL_LIMIT`]).
    pub latency_ms: Spread,
    /// Polls answered (or given up) after more than [`TARGET_MS`].
    pub over_target: u64,
    /// From the fault to the first poll, of the broker that recovered last, that answered 200
    /// after its last "not ready"; `None` without a fault or when no broker ever said not ready.
    pub ready_again_after_ms: Option<f64>,
}

impl HealthPolls {
    /// The summary of `polls` around a fault at `fault_epoch_s`. Pure.
    pub fn of(polls: &[Poll], fault_epoch_s: Option<f64>) -> HealthPolls {
        let not_ready = polls.iter().filter(|p| p.status != 200).count() as u64;
        let ready_again_after_ms = fault_epoch_s.and_then(|fault| {
            let brokers = polls.iter().map(|p| p.broker).max().map_or(0, |b| b + 1);
            let mut latest: Option<f64> = None;
            for broker in 0..brokers {
                let after: Vec<&Poll> = polls
                    .iter()
                    .filter(|p| p.broker == broker && p.at_epoch_s >= fault)
                    .collect();
                let Some(last_bad) = after.iter().rposition(|p| p.status != 200) else {
                    continue;
                };
                // A broker still not ready at the end never came back: no instant to report.
                let back = after[last_bad + 1..].first()?;
                let back = back.at_epoch_s + back.latency_ms / 1000.0;
                latest = Some(latest.map_or(back, |l: f64| l.max(back)));
            }
            latest.map(|at| ((at - fault) * 1000.0).round())
        });
        HealthPolls {
            polls: polls.len() as u64,
            not_ready,
            unanswered: polls.iter().filter(|p| p.status == 0).count() as u64,
            latency_ms: Spread::of_values(polls.iter().map(|p| p.latency_ms).collect()),
            over_target: polls.iter().filter(|p| p.latency_ms > TARGET_MS).count() as u64,
            ready_again_after_ms,
        }
    }
}

/// Polls the `/healthz` of every address until stopped.
#[derive(Debug)]
pub struct Poller {
    polls: Arc<Mutex<Vec<Poll>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Poller {
    /// One task per broker address (`host:port`).
    pub fn start(addresses: Vec<String>) -> Poller {
        let polls = Arc::new(Mutex::new(Vec::new()));
        // Idle connections are dropped before the broker's advertised `Keep-Alive` time.
        let client = reqwest::Client::builder()
            .timeout(POLL_LIMIT)
            .pool_idle_timeout(Duration::from_secs(1))
            .build()
            .expect("a plain HTTP client builds");
        let tasks = addresses
            .into_iter()
            .enumerate()
            .map(|(broker, address)| {
                let (polls, client) = (polls.clone(), client.clone());
                tokio::spawn(async move {
                    let url = format!("http://{address}/healthz");
                    loop {
                        let at_epoch_s = clock::wall_since_epoch().as_secs_f64();
                        let sent = clock::monotonic_now();
                        let status = match client.get(&url).send().await {
                            Ok(response) => response.status().as_u16(),
                            Err(_) => 0,
                        };
                        let latency_ms = sent.elapsed().as_secs_f64() * 1000.0;
                        polls.lock().expect("not poisoned").push(Poll {
                            at_epoch_s,
                            broker,
                            status,
                            latency_ms,
                        });
                        tokio::time::sleep(POLL_EVERY).await;
                    }
                })
            })
            .collect();
        Poller { polls, tasks }
    }

    /// Stops polling; every poll so far.
    pub fn stop(self) -> Vec<Poll> {
        for task in &self.tasks {
            task.abort();
        }
        std::mem::take(&mut *self.polls.lock().expect("not poisoned"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(at_epoch_s: f64, broker: usize, status: u16, latency_ms: f64) -> Poll {
        Poll {
            at_epoch_s,
            broker,
            status,
            latency_ms,
        }
    }

    #[test]
    fn the_broker_that_recovers_last_sets_the_ready_again_instant() {
        let polls = [
            poll(99.9, 0, 200, 2.0),
            poll(100.1, 0, 503, 800.0),
            poll(101.0, 0, 503, 1.0),
            poll(101.5, 0, 200, 5.0),
            poll(100.2, 1, 0, 5000.0),
            poll(105.3, 1, 503, 1.0),
            poll(105.4, 1, 200, 20.0),
            poll(105.5, 1, 200, 2.0),
        ];
        let found = HealthPolls::of(&polls, Some(100.0));
        assert_eq!(found.polls, 8);
        assert_eq!((found.not_ready, found.unanswered), (4, 1));
        assert_eq!(found.over_target, 1);
        assert_eq!(found.latency_ms.max, 5000.0);
        assert_eq!(found.ready_again_after_ms, Some(5420.0));
    }

    #[test]
    fn a_broker_never_ready_again_or_never_down_gives_no_instant() {
        let still_down = [poll(100.5, 0, 503, 1.0)];
        assert_eq!(
            HealthPolls::of(&still_down, Some(100.0)).ready_again_after_ms,
            None
        );
        let never_down = [poll(100.5, 0, 200, 1.0)];
        assert_eq!(
            HealthPolls::of(&never_down, Some(100.0)).ready_again_after_ms,
            None
        );
        assert_eq!(HealthPolls::of(&[], None).latency_ms.count, 0);
    }
}
