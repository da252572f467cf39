//! The invariants, checked outside the model: what the load hosts recorded against what the
//! database ended with.
//!
//! - nothing fires before its `deliver_at`;
//! - every timer fires exactly once;
//! - after the liveness phase (faults healed) nothing is left due;
//! - no live KV row is pruned;
//! - every partition's offsets are 0..N-1, each once;
//! - the run itself ended normally (no host failed, nothing hung).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::state::{Source, Tables, Us};
use crate::world::{RunOutcome, Scheduled};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub passed: bool,
    /// What was counted, and the first offender when it failed.
    pub detail: String,
}

/// How long after its visibility a timer may still be waiting at the end of the run without
/// failing "nothing is left due": one sleep ceiling plus one lease (a broker that died holding
/// it) plus a margin for the fire itself.
fn settle_us(outcome: &RunOutcome) -> Us {
    let config = outcome.spec.config();
    (config.sleep_ms_max + config.lease_ms + 5_000) * 1000
}

/// Every invariant, in the order the report lists them.
pub fn check(outcome: &RunOutcome) -> Vec<Check> {
    let log = outcome.log.lock().expect("not poisoned");
    outcome.db.with(|t| {
        let mut checks = vec![ran_to_the_end(outcome)];
        checks.extend(fire_checks(t, &log.scheduled));
        checks.push(nothing_left_due(t, outcome));
        checks.push(no_live_kv_pruned(t));
        checks.push(dense_offsets(t));
        checks
    })
}

fn ran_to_the_end(outcome: &RunOutcome) -> Check {
    let stopped: Vec<String> = outcome.failure.iter().cloned().collect();
    verdict(
        "ran_to_the_end",
        &stopped,
        format!(
            "ran {} simulated ms",
            (outcome.end_us - crate::time::ORIGIN_US) / 1000
        ),
    )
}

/// `never_early`, `exactly_once` and `all_fired`: each scheduled timer against the messages its
/// fires wrote (a dead-lettered timer need not fire).
fn fire_checks(t: &Tables, scheduled: &[Scheduled]) -> [Check; 3] {
    let mut fired: BTreeMap<&str, Vec<Us>> = BTreeMap::new();
    for message in t.messages.iter().filter(|m| m.source == Source::Fire) {
        fired
            .entry(message.txn.as_str())
            .or_default()
            .push(message.created_at);
    }
    let dead: std::collections::BTreeSet<&str> = t.dlq.iter().map(|d| d.txn.as_str()).collect();

    let mut early = Vec::new();
    let mut duplicated = Vec::new();
    let mut missing = Vec::new();
    for timer in scheduled {
        let times = fired
            .get(timer.txn.as_str())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        if let Some(at) = times.iter().find(|at| **at < timer.deliver_at) {
            early.push(format!(
                "{} fired at {at} µs, due at {} µs",
                timer.txn, timer.deliver_at
            ));
        }
        if times.len() > 1 {
            duplicated.push(format!("{} fired {} times", timer.txn, times.len()));
        }
        if times.is_empty() && !dead.contains(timer.txn.as_str()) {
            missing.push(timer.txn.clone());
        }
    }
    let count = scheduled.len();
    [
        verdict(
            "never_early",
            &early,
            format!("{count} timers, none fired before its deliver_at"),
        ),
        verdict(
            "exactly_once",
            &duplicated,
            format!("{count} timers, none fired twice"),
        ),
        verdict(
            "all_fired",
            &missing,
            format!("{count} timers, every one fired or dead-lettered"),
        ),
    ]
}

/// No timer row is still visible and due more than [`settle_us`] before the run's end.
fn nothing_left_due(t: &Tables, outcome: &RunOutcome) -> Check {
    let settle = settle_us(outcome);
    let stuck: Vec<String> = t
        .timers
        .iter()
        .filter(|(_, row)| {
            row.visible_at() + settle <= outcome.end_us && row.deliver_at + settle <= outcome.end_us
        })
        .map(|(key, row)| {
            format!(
                "{}/{}/{} visible at {} µs",
                key.tenant,
                key.queue,
                key.key,
                row.visible_at()
            )
        })
        .collect();
    verdict(
        "nothing_left_due",
        &stuck,
        format!(
            "no timer visible for more than {} ms at the end",
            settle / 1000
        ),
    )
}

/// No prune removed a row that was live when it did: judged by the row's newest version, so a
/// row an open transaction's put was re-writing with a later expiry counts as live (the real
/// prune skips such a row; one that ignored the lock would lose the put).
fn no_live_kv_pruned(t: &Tables) -> Check {
    let live_pruned: Vec<String> = t
        .pruned
        .iter()
        .filter(|p| {
            p.expires_at
                .is_none_or(|expires_at| expires_at > p.pruned_at)
        })
        .map(|p| {
            let expiry = p.expires_at.map_or_else(
                || "never expiring".to_owned(),
                |e| format!("expiring at {e} µs"),
            );
            format!("{} {expiry}, pruned at {} µs", p.key.key, p.pruned_at)
        })
        .collect();
    verdict(
        "no_live_kv_pruned",
        &live_pruned,
        format!(
            "{} rows pruned, all expired; {} expired rows skipped under an open transaction's lock",
            t.pruned.len(),
            t.kv_skipped_locked
        ),
    )
}

fn dense_offsets(t: &Tables) -> Check {
    let mut offsets: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for message in &t.messages {
        offsets
            .entry(message.partition_id)
            .or_default()
            .push(message.offset);
    }
    let gaps: Vec<String> = offsets
        .iter()
        .filter_map(|(id, list)| {
            let mut sorted = list.clone();
            sorted.sort_unstable();
            let dense = sorted.iter().enumerate().all(|(i, o)| *o == i as u64);
            (!dense).then(|| format!("partition {id} offsets are not 0..{}", sorted.len()))
        })
        .collect();
    verdict(
        "dense_offsets",
        &gaps,
        format!("{} partitions, offsets 0..N-1 each", offsets.len()),
    )
}

fn verdict(name: &'static str, offenders: &[String], ok: String) -> Check {
    if offenders.is_empty() {
        Check {
            name,
            passed: true,
            detail: ok,
        }
    } else {
        let first: Vec<String> = offenders.iter().take(3).cloned().collect();
        Check {
            name,
            passed: false,
            detail: format!("{} offenders, first: {}", offenders.len(), first.join("; ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use queen_sweeper::Destination;
    use uuid::Uuid;

    use super::*;
    use crate::model::ops;
    use crate::model::server::Db;
    use crate::model::state::{KvKey, KvRow, Pruned};
    use crate::time::ORIGIN_US;
    use crate::world::{LoadLog, RunSpec, Scheduled};

    /// A finished run with one timer due at +1 s, fired as `fires` says.
    fn outcome(fires: &[Us]) -> RunOutcome {
        let db = Db::new(crate::calibration::builtin().costs, 1);
        let destination = Destination {
            tenant: "t".into(),
            queue: "q".into(),
            partition: "p".into(),
        };
        db.with(|t| {
            for at in fires {
                t.append(
                    &destination,
                    vec![("tx".into(), Uuid::nil())],
                    *at,
                    Source::Fire,
                    "broker-1",
                );
            }
        });
        let log = LoadLog {
            scheduled: vec![Scheduled {
                txn: "tx".into(),
                deliver_at: ORIGIN_US + 1_000_000,
                scheduled_at: ORIGIN_US,
                broker: 1,
            }],
            ..LoadLog::default()
        };
        RunOutcome {
            spec: RunSpec::new(1, crate::calibration::builtin().costs),
            db,
            log: Arc::new(Mutex::new(log)),
            end_us: ORIGIN_US + 120_000_000,
            wall: Duration::ZERO,
            failure: None,
        }
    }

    fn failed(outcome: &RunOutcome) -> Vec<&'static str> {
        check(outcome)
            .into_iter()
            .filter(|c| !c.passed)
            .map(|c| c.name)
            .collect()
    }

    #[test]
    fn a_timer_fired_once_on_time_passes_every_check() {
        assert!(failed(&outcome(&[ORIGIN_US + 1_000_500])).is_empty());
    }

    #[test]
    fn an_early_fire_fails_never_early() {
        assert_eq!(failed(&outcome(&[ORIGIN_US + 999_999])), ["never_early"]);
    }

    #[test]
    fn a_second_fire_fails_exactly_once() {
        assert_eq!(
            failed(&outcome(&[ORIGIN_US + 1_000_000, ORIGIN_US + 1_200_000])),
            ["exactly_once"]
        );
    }

    #[test]
    fn a_timer_never_fired_fails_all_fired() {
        assert_eq!(failed(&outcome(&[])), ["all_fired"]);
    }

    #[test]
    fn a_pruned_live_row_and_a_stuck_timer_and_a_stopped_run_are_caught() {
        let mut run = outcome(&[ORIGIN_US + 1_000_000]);
        run.db.with(|t| {
            t.pruned.push(Pruned {
                key: KvKey {
                    tenant: "t".into(),
                    namespace: "n".into(),
                    key: "k".into(),
                },
                expires_at: Some(ORIGIN_US + 5_000_000),
                pruned_at: ORIGIN_US + 4_999_999,
            });
            let key = crate::model::state::TimerKey {
                tenant: "t".into(),
                queue: "q".into(),
                key: "stuck".into(),
            };
            t.insert_timer(
                key,
                crate::model::state::TimerRow {
                    partition: "p".into(),
                    deliver_at: ORIGIN_US + 1_000_000,
                    txn: "other".into(),
                    message_id: Uuid::nil(),
                    payload_bytes: 1,
                    attempts: 0,
                    last_error: None,
                    claimed_until: None,
                    token: None,
                },
            );
        });
        run.failure = Some("a host failed".into());
        assert_eq!(
            failed(&run),
            ["ran_to_the_end", "nothing_left_due", "no_live_kv_pruned"]
        );
    }

    fn kv_key(key: &str) -> KvKey {
        KvKey {
            tenant: "t".into(),
            namespace: "ns".into(),
            key: key.into(),
        }
    }

    /// The instant the prunes below run at.
    const PRUNE_AT: Us = ORIGIN_US + 2_000_000;

    /// A finished run whose KV table holds, at [`PRUNE_AT`], `free` and `held`, both committed
    /// with an expiry 1 s before, `held` re-put with a 60 s TTL by a transaction still open (the
    /// transaction wire's put, not yet committed), and `forever`, which never expires. Returns
    /// the run and the open transaction.
    fn kv_run() -> (RunOutcome, u64) {
        let run = outcome(&[ORIGIN_US + 1_000_000]);
        let txn = run.db.with(|t| {
            let expired = Some(PRUNE_AT - 1_000_000);
            for (key, expires_at) in [("free", expired), ("held", expired), ("forever", None)] {
                let row = KvRow {
                    expires_at,
                    bytes: 8,
                };
                ops::kv_put(t, None, kv_key(key), row).expect("no lock yet");
            }
            let txn = t.new_txn();
            let re_put = KvRow {
                expires_at: Some(PRUNE_AT + 60_000_000),
                bytes: 8,
            };
            ops::kv_put(t, Some(txn), kv_key("held"), re_put).expect("nobody else holds it");
            txn
        });
        (run, txn)
    }

    fn all_shards() -> Vec<u8> {
        (0..64).collect()
    }

    /// The prune without `SKIP LOCKED`: deletes every expired candidate, held or not.
    fn prune_ignoring_locks(t: &mut Tables, now: Us) {
        for key in ops::kv_expired_candidates(t, &all_shards(), now, 1000) {
            t.prune_kv(&key, now);
        }
    }

    /// The prune without its expiry test: deletes every unheld row.
    fn prune_ignoring_expiry(t: &mut Tables, now: Us) {
        let keys: Vec<KvKey> = t.kv.keys().cloned().collect();
        for key in keys {
            if !t.kv_locked_by_other(&key, 0) {
                t.prune_kv(&key, now);
            }
        }
    }

    fn no_live_kv_pruned_of(run: &RunOutcome) -> Check {
        check(run)
            .into_iter()
            .find(|c| c.name == "no_live_kv_pruned")
            .expect("always checked")
    }

    #[test]
    fn the_real_prune_skips_a_row_an_open_put_holds_and_passes_no_live_kv_pruned() {
        let (run, txn) = kv_run();
        let step = run
            .db
            .with(|t| ops::kv_expire_step(t, &all_shards(), PRUNE_AT, 1000, 10_000));
        assert_eq!(
            (step.deleted, step.done, step.unpruned),
            (1, true, 1),
            "free is pruned; held is skipped and its expired committed version still counts"
        );
        assert!(failed(&run).is_empty(), "{:?}", check(&run));
        assert!(
            no_live_kv_pruned_of(&run)
                .detail
                .contains("1 rows pruned, all expired; 1 expired rows skipped"),
            "{:?}",
            no_live_kv_pruned_of(&run)
        );
        run.db.with(|t| {
            t.commit_kv(txn);
            assert_eq!(
                t.kv.get(&kv_key("held")).map(|row| row.expires_at),
                Some(Some(PRUNE_AT + 60_000_000)),
                "the put's commit installs its version"
            );
        });
    }

    #[test]
    fn a_prune_that_ignores_locks_fails_no_live_kv_pruned() {
        let (run, txn) = kv_run();
        run.db.with(|t| prune_ignoring_locks(t, PRUNE_AT));
        assert_eq!(failed(&run), ["no_live_kv_pruned"]);
        let detail = no_live_kv_pruned_of(&run).detail;
        assert!(
            detail.starts_with("1 offenders, first: held expiring at"),
            "{detail}"
        );
        run.db.with(|t| {
            t.commit_kv(txn);
            assert!(
                !t.kv.contains_key(&kv_key("held")),
                "the put committed and its row is gone: the write the lock protected is lost"
            );
        });
    }

    #[test]
    fn a_prune_that_ignores_expiry_fails_no_live_kv_pruned() {
        let (run, _txn) = kv_run();
        run.db.with(|t| prune_ignoring_expiry(t, PRUNE_AT));
        assert_eq!(failed(&run), ["no_live_kv_pruned"]);
        let detail = no_live_kv_pruned_of(&run).detail;
        assert!(
            detail.starts_with("1 offenders, first: forever never expiring"),
            "{detail}"
        );
    }

    #[test]
    fn a_row_pruned_one_microsecond_before_its_expiry_is_caught_and_at_it_is_not() {
        let run = outcome(&[ORIGIN_US + 1_000_000]);
        run.db.with(|t| {
            for (key, expires_at) in [("before", PRUNE_AT + 1), ("at", PRUNE_AT)] {
                let row = KvRow {
                    expires_at: Some(expires_at),
                    bytes: 8,
                };
                ops::kv_put(t, None, kv_key(key), row).expect("no lock");
            }
            prune_ignoring_expiry(t, PRUNE_AT);
        });
        let detail = no_live_kv_pruned_of(&run).detail;
        assert!(
            detail.starts_with("1 offenders, first: before expiring at"),
            "{detail}"
        );
    }

    #[test]
    fn a_gap_in_a_partitions_offsets_is_caught() {
        let run = outcome(&[ORIGIN_US + 1_000_000]);
        run.db.with(|t| t.messages[0].offset = 1);
        assert_eq!(failed(&run), ["dense_offsets"]);
    }
}
