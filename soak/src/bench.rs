//! `soak bench`: the sweeper against the physical limit, side by side in one run.
//!
//! - The limit: the same timers moved into the log by one set-based statement per batch
//!   (`soak/sql/move_batch.sql`) on one connection, with the same payloads. The sweeper's drain
//!   rate with 1, 2 and 4 brokers must reach 70% of it.
//! - The probe's p99 from 0 to 1 000 000 pending timers: 64 index seeks, not a scan.
//! - The sweeper process's peak resident memory while a million-timer backlog drains.
//! - Idle cost: calls per second per broker with nothing due.

use serde::{Deserialize, Serialize};
use sqlx::Connection;

use crate::db::{MOVE_BATCH, RunDb};
use crate::run::{Run, Workload};
use queen_harness::Spread;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bench {
    /// The day it was measured (the directory's name is the day of the first run written there).
    #[serde(default)]
    pub measured_on: String,
    pub backlog: u32,
    pub payload_bytes: u32,
    /// Rows per statement of the limit: the shipped claim batch.
    #[serde(default)]
    pub limit_batch: u32,
    /// The mean of every measurement of the limit.
    pub limit_per_s: f64,
    /// Each measurement of the limit, in order: before the first sweeper run and after each
    /// (their spread is the rig's drift during the run).
    #[serde(default)]
    pub limit_runs_per_s: Vec<f64>,
    /// (brokers, the mean of the limit measured just before and just after that run): what its
    /// share is taken of. Empty in benches from before the limit bracketed each run.
    #[serde(default)]
    pub limit_around_per_s: Vec<(u32, f64)>,
    /// (brokers, drain rate, share of the limit around the run).
    pub sweeper_per_s: Vec<(u32, f64, f64)>,
    /// (pending timers, probe latency).
    pub probe_ms: Vec<(u64, Spread)>,
    /// (pending due timers, the broker process's peak RSS in KiB), if the binary was there.
    pub peak_rss_kib: Vec<(u64, u64)>,
    /// Calls per second of one idle broker, by kind.
    pub idle_calls_per_s: std::collections::BTreeMap<String, f64>,
}

/// Timers in each drain measurement.
const BACKLOG: u32 = 200_000;
const PAYLOAD: u32 = 512;
const SPREAD: (u32, u32, u32) = (3, 4, 8);
/// Rows per statement of the limit: the sweeper's shipped claim batch, so both pay the same
/// number of round trips and commits.
const LIMIT_BATCH: u32 = queen_sweeper::knob::CLAIM_BATCH.default as u32;
/// Probe calls per pending level.
const PROBES: u32 = 300;

pub async fn run(run: &Run<'_>, seconds: u64, date: &str) -> Result<Bench, String> {
    // The limit is measured before and after every sweeper run, and each run is judged against
    // the mean of the two around it: this rig's speed drifts (up to 1.8x within one bench), and
    // one limit before all runs and one after left every share skewed by that drift.
    let mut limits = vec![limit(run).await?];
    eprintln!("soak: bench: physical limit {:.0} timers/s", limits[0]);
    let mut sweeper_per_s = Vec::new();
    let mut brackets = Vec::new();
    for brokers in [1u32, 2, 4] {
        let mut w = Workload::quiet(&format!("bench {brokers} broker(s)"), seconds);
        w.brokers = brokers;
        w.backlog = BACKLOG;
        w.payload_bytes = PAYLOAD;
        (w.tenants, w.queues, w.partitions) = SPREAD;
        let result = run.execute(&w, &format!("bench_{brokers}")).await?;
        let rate = result.busy_fired_per_s();
        let after = limit(run).await?;
        let bracket = (limits[limits.len() - 1] + after) / 2.0;
        limits.push(after);
        let share = (rate / bracket * 1000.0).round() / 10.0;
        eprintln!(
            "soak: bench: {brokers} broker(s) {rate:.0} timers/s, limit after {after:.0}: {share}% of the {bracket:.0} around it"
        );
        sweeper_per_s.push((brokers, rate, share));
        brackets.push((brokers, bracket.round()));
    }
    let limit_per_s = limits.iter().sum::<f64>() / limits.len() as f64;
    let probe_ms = probe_latency(run).await?;
    let peak_rss_kib = peak_rss(run, seconds).await?;
    let idle = run
        .execute(
            &Workload::quiet("idle broker", seconds.min(30)),
            "bench_idle",
        )
        .await?;
    Ok(Bench {
        measured_on: date.to_owned(),
        backlog: BACKLOG,
        payload_bytes: PAYLOAD,
        limit_batch: LIMIT_BATCH,
        limit_per_s: (limit_per_s * 10.0).round() / 10.0,
        limit_runs_per_s: limits.iter().map(|l| l.round()).collect(),
        limit_around_per_s: brackets,
        sweeper_per_s,
        probe_ms,
        peak_rss_kib,
        idle_calls_per_s: idle.queries_per_s_per_broker,
    })
}

/// The limit: set-based batches of [`LIMIT_BATCH`] on one connection until the backlog is gone.
async fn limit(run: &Run<'_>) -> Result<f64, String> {
    let db = RunDb::create(run.server_url, "bench_limit").await?;
    db.backlog(BACKLOG, -1, PAYLOAD, SPREAD, "limit").await?;
    // The sweeper's runs start on analysed tables (run.rs); so does the limit.
    sqlx::query("ANALYZE")
        .execute(&db.pool)
        .await
        .map_err(|e| e.to_string())?;
    for t in 0..SPREAD.0 {
        for q in 0..SPREAD.1 {
            for p in 0..SPREAD.2 {
                sqlx::query("SELECT queen.log_partition_ensure_v1($1, $2, $3)")
                    .bind(format!("t{t}"))
                    .bind(format!("q{q}"))
                    .bind(format!("p{p}"))
                    .execute(&db.pool)
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    let mut connection = sqlx::PgConnection::connect(&db.url)
        .await
        .map_err(|e| e.to_string())?;
    let started = queen_sweeper::clock::monotonic_now();
    let mut moved = 0i64;
    let mut cursor = "(0,0)".to_owned();
    for _ in 0..BACKLOG {
        let (n, last): (i64, Option<String>) = sqlx::query_as(MOVE_BATCH)
            .bind(i64::from(LIMIT_BATCH))
            .bind(&cursor)
            .fetch_one(&mut connection)
            .await
            .map_err(|e| e.to_string())?;
        match last {
            Some(last) if n > 0 => cursor = last,
            _ => break,
        }
        moved += n;
    }
    let seconds = (queen_sweeper::clock::monotonic_now() - started).as_secs_f64();
    let _ = connection.close().await;
    db.drop_now().await?;
    if moved != i64::from(BACKLOG) {
        return Err(format!("the limit run moved {moved} of {BACKLOG} timers"));
    }
    Ok(moved as f64 / seconds.max(1e-9))
}

/// The probe's latency at 0, 10k, 100k and 1M pending (future) timers.
async fn probe_latency(run: &Run<'_>) -> Result<Vec<(u64, Spread)>, String> {
    let db = RunDb::create(run.server_url, "bench_probe").await?;
    let mut connection = sqlx::PgConnection::connect(&db.url)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut pending = 0u64;
    for level in [0u64, 10_000, 100_000, 1_000_000] {
        if level > pending {
            db.backlog(
                (level - pending) as u32,
                7 * 24 * 3_600_000,
                64,
                SPREAD,
                &format!("p{level}"),
            )
            .await?;
            sqlx::query("VACUUM ANALYZE queen.log_timers")
                .execute(&db.pool)
                .await
                .map_err(|e| e.to_string())?;
            // The insert of a level sets off a checkpoint; without waiting for it here, its
            // writes landed in the probes' p99 on two cores (11-14 ms at 100k and 1M in one bench,
            // 1.3-1.5 ms by hand on the same tables). Needs superuser or pg_checkpoint.
            if let Err(e) = sqlx::query("CHECKPOINT").execute(&db.pool).await {
                eprintln!(
                    "soak: bench: CHECKPOINT before the probes at {level} failed ({e}); the p99 may include its writes"
                );
            }
            pending = level;
        }
        let mut histogram =
            hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
        for _ in 0..PROBES {
            let before = queen_sweeper::clock::monotonic_now();
            sqlx::query(
                "SELECT queen.log_timers_due_v1(ARRAY(SELECT generate_series(0, 63)), now(), 2000)",
            )
            .execute(&mut connection)
            .await
            .map_err(|e| e.to_string())?;
            histogram.saturating_record(
                ((queen_sweeper::clock::monotonic_now() - before).as_micros() as u64).max(1),
            );
        }
        let spread = Spread::of(&histogram, 1000.0);
        eprintln!(
            "soak: bench: probe at {level} pending: p50 {} ms p99 {} ms",
            spread.p50, spread.p99
        );
        out.push((level, spread));
    }
    let _ = connection.close().await;
    db.drop_now().await?;
    Ok(out)
}

/// The broker process's peak RSS with no backlog and while a million due timers drain.
async fn peak_rss(run: &Run<'_>, seconds: u64) -> Result<Vec<(u64, u64)>, String> {
    if run.sweeper_binary.is_none() {
        eprintln!("soak: bench: no queen-sweeper binary next to soak; peak RSS not measured");
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for backlog in [0u32, 1_000_000] {
        let mut w = Workload::quiet(&format!("rss with {backlog} due"), seconds);
        w.brokers = 1;
        w.broker_processes = true;
        w.backlog = backlog;
        w.payload_bytes = 64;
        w.drain_limit_s = 0;
        let result = run.execute(&w, &format!("bench_rss_{backlog}")).await?;
        let peak = result.broker_peak_rss_kib.unwrap_or(0);
        eprintln!(
            "soak: bench: peak RSS with {backlog} due: {} MiB",
            peak / 1024
        );
        out.push((u64::from(backlog), peak));
    }
    Ok(out)
}
