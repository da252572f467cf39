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

use crate::model::state::{Source, Us};
use crate::world::Outcome;

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
fn settle_us(outcome: &Outcome) -> Us {
    let config = outcome.world.config();
    (config.sleep_ms_max + config.lease_ms + 5_000) * 1000
}

pub fn check(outcome: &Outcome) -> Vec<Check> {
    let log = outcome.log.lock().expect("not poisoned");
    outcome.db.with(|t| {
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
        for timer in &log.scheduled {
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
        let settle = settle_us(outcome);
        let stuck: Vec<String> = t
            .timers
            .iter()
            .filter(|(_, row)| {
                row.visible_at() + settle <= outcome.end_us
                    && row.deliver_at + settle <= outcome.end_us
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
        let live_pruned: Vec<String> = t
            .pruned
            .iter()
            .filter(|p| p.expires_at > p.pruned_at)
            .map(|p| {
                format!(
                    "{} expired at {} µs, pruned at {} µs",
                    p.key.key, p.expires_at, p.pruned_at
                )
            })
            .collect();
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

        let scheduled = log.scheduled.len();
        let stopped: Vec<String> = outcome.failure.iter().cloned().collect();
        vec![
            verdict(
                "ran_to_the_end",
                &stopped,
                format!("ran {} simulated ms", outcome.end_us / 1000),
            ),
            verdict(
                "never_early",
                &early,
                format!("{scheduled} timers, none fired before its deliver_at"),
            ),
            verdict(
                "exactly_once",
                &duplicated,
                format!("{scheduled} timers, none fired twice"),
            ),
            verdict(
                "all_fired",
                &missing,
                format!("{scheduled} timers, every one fired or dead-lettered"),
            ),
            verdict(
                "nothing_left_due",
                &stuck,
                format!(
                    "no timer visible for more than {} ms at the end",
                    settle / 1000
                ),
            ),
            verdict(
                "no_live_kv_pruned",
                &live_pruned,
                format!("{} rows pruned, all expired", t.pruned.len()),
            ),
            verdict(
                "dense_offsets",
                &gaps,
                format!("{} partitions, offsets 0..N-1 each", offsets.len()),
            ),
        ]
    })
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
