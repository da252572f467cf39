//! Numbers from one run: lateness, fired and stale counts, queries by kind and broker, and the
//! same over time. All from database-side times (simulated), so the same seed gives the same
//! numbers.

use std::collections::BTreeMap;

use queen_harness::Spread;
use queen_harness::spread::{round1, serialize_short};
use serde::Serialize;

use crate::model::state::{Source, Us};
use crate::time::ORIGIN_US;
use crate::world::RunOutcome;

/// One bucket of the time series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bucket {
    pub start_s: f64,
    pub fired: u64,
    /// Timers due by the bucket's end and not fired by then: the backlog a stall leaves behind.
    pub overdue: u64,
    pub stale_segments: u64,
    #[serde(serialize_with = "serialize_short")]
    pub lateness_ms: Spread,
    pub probe_claim_per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunNumbers {
    pub label: String,
    pub simulated_s: f64,
    pub scheduled: u64,
    pub fired: u64,
    pub dead_lettered: u64,
    pub fired_segments: u64,
    pub stale_segments: u64,
    pub stale_timers: u64,
    #[serde(serialize_with = "serialize_short")]
    pub lateness_ms: Spread,
    #[serde(serialize_with = "serialize_short")]
    pub push_latency_ms: Spread,
    pub pushes: u64,
    pub wal_mib: f64,
    pub queries: BTreeMap<String, u64>,
    pub queries_by_broker: BTreeMap<String, BTreeMap<String, u64>>,
    pub series: Vec<Bucket>,
}

/// Summarises a run, bucketing the series by `bucket_s` seconds.
pub fn numbers(label: &str, outcome: &RunOutcome, bucket_s: u64) -> RunNumbers {
    let log = outcome.log.lock().expect("not poisoned");
    let due: BTreeMap<&str, Us> = log
        .scheduled
        .iter()
        .map(|s| (s.txn.as_str(), s.deliver_at))
        .collect();
    outcome.db.with(|t| {
        let late: Vec<(Us, f64)> = t
            .messages
            .iter()
            .filter(|m| m.source == Source::Fire)
            .filter_map(|m| {
                due.get(m.txn.as_str()).map(|d| {
                    (
                        m.created_at,
                        m.created_at.saturating_sub(*d) as f64 / 1000.0,
                    )
                })
            })
            .collect();
        let mut queries: BTreeMap<String, u64> = BTreeMap::new();
        let mut by_broker: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for q in &t.queries {
            *queries.entry(q.kind.to_owned()).or_default() += 1;
            if q.host.starts_with("broker-") {
                *by_broker
                    .entry(q.host.clone())
                    .or_default()
                    .entry(q.kind.to_owned())
                    .or_default() += 1;
            }
        }
        let bucket_us = bucket_s.max(1) * 1_000_000;
        let buckets = ((outcome.end_us - ORIGIN_US) / bucket_us + 1) as usize;
        let mut series: Vec<Bucket> = (0..buckets)
            .map(|i| Bucket {
                start_s: (i as u64 * bucket_s) as f64,
                fired: 0,
                overdue: 0,
                stale_segments: 0,
                lateness_ms: Spread::default(),
                probe_claim_per_s: 0.0,
            })
            .collect();
        let mut late_by_bucket: Vec<Vec<f64>> = vec![Vec::new(); buckets];
        for (at, ms) in &late {
            let i = ((*at - ORIGIN_US) / bucket_us) as usize;
            series[i].fired += 1;
            late_by_bucket[i].push(*ms);
        }
        for (i, values) in late_by_bucket.into_iter().enumerate() {
            series[i].lateness_ms = Spread::of_values(values);
        }
        count_overdue(&mut series, &log.scheduled, &t.messages, bucket_us);
        for segment in t.segments.iter().filter(|s| !s.fired) {
            series[((segment.at - ORIGIN_US) / bucket_us) as usize].stale_segments += 1;
        }
        for q in t
            .queries
            .iter()
            .filter(|q| q.host.starts_with("broker-") && is_polling_call(q.kind))
        {
            series[((q.at - ORIGIN_US) / bucket_us) as usize].probe_claim_per_s +=
                1.0 / bucket_s.max(1) as f64;
        }
        RunNumbers {
            label: label.to_owned(),
            simulated_s: (outcome.end_us - ORIGIN_US) as f64 / 1e6,
            scheduled: log.scheduled.len() as u64,
            fired: late.len() as u64,
            dead_lettered: t.dlq.len() as u64,
            fired_segments: t.segments.iter().filter(|s| s.fired).count() as u64,
            stale_segments: t.segments.iter().filter(|s| !s.fired).count() as u64,
            stale_timers: t
                .segments
                .iter()
                .filter(|s| !s.fired)
                .map(|s| u64::from(s.timers))
                .sum(),
            lateness_ms: Spread::of_values(late.iter().map(|(_, ms)| *ms).collect()),
            push_latency_ms: Spread::of_values(
                log.push_latency_us
                    .iter()
                    .map(|us| *us as f64 / 1000.0)
                    .collect(),
            ),
            pushes: log.pushes,
            wal_mib: round1(t.wal_bytes as f64 / (1024.0 * 1024.0)),
            queries,
            queries_by_broker: by_broker,
            series,
        }
    })
}

/// Fills each bucket's `overdue`: a timer counts from the bucket it falls due in to the bucket
/// before the one it fires in (to the end of the run if it never fires).
fn count_overdue(
    series: &mut [Bucket],
    scheduled: &[crate::world::Scheduled],
    messages: &[crate::model::state::Message],
    bucket_us: Us,
) {
    let fired_at: BTreeMap<&str, Us> = messages
        .iter()
        .filter(|m| m.source == Source::Fire)
        .map(|m| (m.txn.as_str(), m.created_at))
        .collect();
    let bucket_of = |at: Us| (at.saturating_sub(ORIGIN_US) / bucket_us) as usize;
    // +1 where a timer becomes overdue, -1 where it stops; a running sum gives each bucket.
    let mut change = vec![0i64; series.len() + 1];
    for timer in scheduled {
        let from = bucket_of(timer.deliver_at).min(series.len());
        let to = fired_at
            .get(timer.txn.as_str())
            .map_or(series.len(), |at| bucket_of(*at).min(series.len()));
        if from < to {
            change[from] += 1;
            change[to] -= 1;
        }
    }
    let mut overdue = 0i64;
    for (bucket, delta) in series.iter_mut().zip(change) {
        overdue += delta;
        bucket.overdue = u64::try_from(overdue).expect("a running count of overdue timers");
    }
}

/// The longest run of consecutive buckets, while at least `backlog` timers are overdue, in
/// which fewer than `fired_per_s` timers a second fire: how long a drain stalls with work due.
/// Answered in seconds.
pub fn longest_stall_s(series: &[Bucket], backlog: u64, fired_per_s: f64) -> f64 {
    let width_s = bucket_width_s(series);
    let (mut longest, mut current) = (0usize, 0usize);
    for bucket in series {
        let stalled = bucket.overdue >= backlog && (bucket.fired as f64) < fired_per_s * width_s;
        current = if stalled { current + 1 } else { 0 };
        longest = longest.max(current);
    }
    longest as f64 * width_s
}

/// The width of a series' buckets in seconds (one second when it has a single bucket).
pub fn bucket_width_s(series: &[Bucket]) -> f64 {
    match series {
        [first, second, ..] => second.start_s - first.start_s,
        _ => 1.0,
    }
}

/// The calls a broker repeats while it looks for work: the probe and the call that picks due
/// rows, the claim (leased path) or the take (the default). The spin is counted over these.
pub fn is_polling_call(kind: &str) -> bool {
    matches!(kind, "probe" | "claim" | "take")
}

/// The polling calls ([`is_polling_call`]) of a run per simulated second, all brokers.
pub fn polling_per_s(numbers: &RunNumbers) -> f64 {
    let calls: u64 = numbers
        .queries
        .iter()
        .filter(|(kind, _)| is_polling_call(kind))
        .map(|(_, n)| n)
        .sum();
    calls as f64 / numbers.simulated_s.max(1e-9)
}

/// Probe and claim-or-take calls per second of each broker within [from, to) simulated
/// microseconds.
pub fn probe_claim_rate(outcome: &RunOutcome, from: Us, to: Us) -> BTreeMap<String, f64> {
    let seconds = (to.saturating_sub(from) as f64 / 1e6).max(1e-6);
    outcome.db.with(|t| {
        let mut rates: BTreeMap<String, f64> = BTreeMap::new();
        for q in t
            .queries
            .iter()
            .filter(|q| q.at >= from && q.at < to && q.host.starts_with("broker-"))
        {
            if is_polling_call(q.kind) {
                *rates.entry(q.host.clone()).or_default() += 1.0;
            }
        }
        rates.values_mut().for_each(|n| *n = round1(*n / seconds));
        rates
    })
}

/// Which broker fired the most timers in [from, to), and how many each fired.
pub fn fired_by_broker(outcome: &RunOutcome, from: Us, to: Us) -> BTreeMap<String, u64> {
    outcome.db.with(|t| {
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        for s in t
            .segments
            .iter()
            .filter(|s| s.fired && s.at >= from && s.at < to)
        {
            *counts.entry(s.host.clone()).or_default() += u64::from(s.timers);
        }
        counts
    })
}

/// When the last timer scheduled at or before `until` fired.
pub fn last_fire_of(outcome: &RunOutcome, prefix: &str) -> Option<Us> {
    outcome.db.with(|t| {
        t.messages
            .iter()
            .filter(|m| m.txn.starts_with(prefix))
            .map(|m| m.created_at)
            .max()
    })
}

/// Each fired message whose txn starts with `prefix`: (txn, fired at, lateness ms, the broker
/// that fired it).
pub fn fires_of(outcome: &RunOutcome, prefix: &str) -> Vec<(String, Us, f64, String)> {
    let log = outcome.log.lock().expect("not poisoned");
    let due: BTreeMap<&str, Us> = log
        .scheduled
        .iter()
        .map(|s| (s.txn.as_str(), s.deliver_at))
        .collect();
    outcome.db.with(|t| {
        t.messages
            .iter()
            .filter(|m| m.source == Source::Fire && m.txn.starts_with(prefix))
            .filter_map(|m| {
                let deliver_at = due.get(m.txn.as_str())?;
                let late = round1(m.created_at.saturating_sub(*deliver_at) as f64 / 1000.0);
                Some((m.txn.clone(), m.created_at, late, m.by.clone()))
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(start_s: f64, fired: u64, overdue: u64) -> Bucket {
        Bucket {
            start_s,
            fired,
            overdue,
            stale_segments: 0,
            lateness_ms: Spread::default(),
            probe_claim_per_s: 0.0,
        }
    }

    #[test]
    fn a_stall_counts_only_seconds_with_work_due_and_too_few_fires() {
        // (fired, overdue) per second: a 3 s stall, broken by a busy second, then 2 s with
        // nothing due (not a stall), then 1 s of stall.
        let shape = [
            (0, 5_000),
            (50, 5_000),
            (99, 1_000),
            (100, 5_000),
            (0, 999),
            (0, 0),
            (10, 2_000),
        ];
        let series: Vec<Bucket> = shape
            .iter()
            .enumerate()
            .map(|(i, (fired, overdue))| second(i as f64, *fired, *overdue))
            .collect();
        assert_eq!(longest_stall_s(&series, 1_000, 100.0), 3.0);
        assert_eq!(longest_stall_s(&series, 1_000, 101.0), 4.0);
    }

    #[test]
    fn a_stall_in_wide_buckets_is_measured_in_seconds_at_the_same_rate() {
        let series = vec![second(0.0, 999, 5_000), second(10.0, 1_000, 5_000)];
        assert_eq!(longest_stall_s(&series, 1, 100.0), 10.0);
    }
}
