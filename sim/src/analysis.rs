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
