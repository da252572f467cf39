//! `soak bench`: the sweeper against the physical limit, side by side in one run.
//!
//! - The limit ([`limit`]): the same timers moved into the log by one set-based statement per
//!   batch, on 1, 2 and 4 connections at once (disjoint partitions), each measured just before
//!   and just after the sweeper run it is compared with. Issue 15's targets: 1 broker at 65% of
//!   the one-connection limit, 2 and 4 brokers at 80% of the limit at their own connection count.
//! - PostgreSQL CPU per fired timer, against the limit's ([`cpu`]).
//! - Each drain call's time from 0 to 1M pending rows, in one queue and spread ([`calls`]).
//! - Lateness against the steady rate with the rig's own stall beside it, a 20 000-timer burst in
//!   one queue, a SIGKILLed broker ([`load`]).
//! - The sweeper process's peak resident memory while a million-timer backlog drains.
//! - Idle cost: calls per second per broker with nothing due.

pub mod calls;
pub mod cpu;
pub mod limit;
pub mod load;
pub mod report;

use serde::{Deserialize, Serialize};

use crate::run::{KillEffect, Run, Workload};
use queen_harness::Spread;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bench {
    /// The day it was measured (the directory's name is the day of the first run written there).
    #[serde(default)]
    pub measured_on: String,
    /// The commit the bench was built from (`(dirty)` when the tree differed from it).
    #[serde(default)]
    pub commit: String,
    pub backlog: u32,
    pub payload_bytes: u32,
    /// Rows per statement of the limit: the shipped claim batch.
    #[serde(default)]
    pub limit_batch: u32,
    /// Whose CPU the `/proc` samples summed.
    #[serde(default)]
    pub cpu_scope: String,
    /// Every measurement of the limit, in order.
    #[serde(default)]
    pub limits: Vec<limit::LimitRun>,
    /// The sweeper's drain runs, each beside the limits measured around it.
    #[serde(default)]
    pub drains: Vec<DrainPoint>,
    /// Each call's time against the backlog.
    #[serde(default)]
    pub calls: Vec<calls::CallTime>,
    /// Lateness against the steady rate.
    #[serde(default)]
    pub curve: Vec<load::CurvePoint>,
    #[serde(default)]
    pub bursts: Vec<load::BurstRun>,
    #[serde(default)]
    pub kill: Option<KillEffect>,
    /// Idle brokers in the idle run.
    #[serde(default)]
    pub idle_brokers: u32,
    /// (pending due timers, the broker process's peak RSS in KiB), if the binary was there.
    pub peak_rss_kib: Vec<(u64, u64)>,
    /// Calls per second of one idle broker, by kind.
    pub idle_calls_per_s: std::collections::BTreeMap<String, f64>,
    // Benches from before 2026-12-04 (one-connection limit only; probe timings only).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub limit_per_s: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limit_runs_per_s: Vec<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limit_around_per_s: Vec<(u32, f64)>,
    /// (brokers, drain rate, share of the limit around the run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sweeper_per_s: Vec<(u32, f64, f64)>,
    /// (pending timers, probe latency).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probe_ms: Vec<(u64, Spread)>,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// One sweeper drain beside its limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrainPoint {
    pub brokers: u32,
    /// Timers fired per second from the first fire to the last.
    pub per_s: f64,
    /// The mean of the limits on `brokers` connections measured just before and just after.
    pub limit_same_per_s: f64,
    /// The mean of the one-connection limits measured in the bench.
    pub limit_one_per_s: f64,
    /// PostgreSQL CPU per fired timer, µs, over the fire window.
    pub cpu_us_per_timer: Option<f64>,
    /// The mean of the same-connection limits' CPU per timer, µs.
    pub limit_cpu_us_per_timer: Option<f64>,
}

impl DrainPoint {
    /// Percent of the limit at the same connection count.
    pub fn share_same(&self) -> f64 {
        percent(self.per_s, self.limit_same_per_s)
    }

    /// Percent of the one-connection limit.
    pub fn share_one(&self) -> f64 {
        percent(self.per_s, self.limit_one_per_s)
    }

    /// The sweeper's CPU per timer over the limit's.
    pub fn cpu_ratio(&self) -> Option<f64> {
        self.cpu_us_per_timer
            .zip(self.limit_cpu_us_per_timer)
            .map(|(s, l)| (s / l.max(1e-9) * 100.0).round() / 100.0)
    }
}

fn percent(part: f64, whole: f64) -> f64 {
    (part / whole.max(1e-9) * 1000.0).round() / 10.0
}

/// Timers in each drain measurement.
pub const BACKLOG: u32 = 200_000;
pub const PAYLOAD: u32 = 512;
pub const SPREAD: (u32, u32, u32) = (3, 4, 8);
/// Rows per statement of the limit: the sweeper's shipped claim batch, so both pay the same
/// number of round trips and commits.
pub const LIMIT_BATCH: u32 = queen_sweeper::knob::CLAIM_BATCH.default as u32;
/// The broker counts of the drain runs.
const BROKERS: [u32; 3] = [1, 2, 4];

/// The bench's parts, each of which can be run alone (`soak bench --only PART`) and merged into
/// the bench already in the report directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// The drains with 1, 2 and 4 brokers against the limit, and the CPU per timer.
    Drains,
    /// Each call's time from 0 to 1M pending rows.
    Calls,
    /// Lateness against the steady rate.
    Curve,
    /// 20 000 timers due at one instant in one queue.
    Bursts,
    /// A broker process SIGKILLed.
    Kill,
    /// The broker process's peak RSS.
    Rss,
    /// Idle brokers' calls per second.
    Idle,
}

impl Part {
    pub const ALL: [Part; 7] = [
        Part::Drains,
        Part::Calls,
        Part::Curve,
        Part::Bursts,
        Part::Kill,
        Part::Rss,
        Part::Idle,
    ];
}

impl Bench {
    /// A bench with nothing measured yet.
    pub fn empty(date: &str) -> Bench {
        Bench {
            measured_on: date.to_owned(),
            commit: String::new(),
            backlog: BACKLOG,
            payload_bytes: PAYLOAD,
            limit_batch: LIMIT_BATCH,
            cpu_scope: String::new(),
            limits: Vec::new(),
            drains: Vec::new(),
            calls: Vec::new(),
            curve: Vec::new(),
            bursts: Vec::new(),
            kill: None,
            idle_brokers: 0,
            peak_rss_kib: Vec::new(),
            idle_calls_per_s: Default::default(),
            limit_per_s: 0.0,
            limit_runs_per_s: Vec::new(),
            limit_around_per_s: Vec::new(),
            sweeper_per_s: Vec::new(),
            probe_ms: Vec::new(),
        }
    }
}

/// Runs `parts` into `bench` (a fresh one, or the bench of an earlier run whose other parts are
/// kept). A bench holding parts of different commits says so in its `commit`.
pub async fn run(
    run: &Run<'_>,
    seconds: u64,
    date: &str,
    parts: &[Part],
    mut bench: Bench,
) -> Result<Bench, String> {
    let commit = crate::rig::source_commit();
    eprintln!("soak: bench at commit {commit}: {parts:?}");
    bench.commit = if bench.commit.is_empty() || bench.commit == commit || parts == Part::ALL {
        commit
    } else {
        format!("{commit} for {parts:?}, {} for the rest", bench.commit)
    };
    bench.measured_on = date.to_owned();
    for part in parts {
        match part {
            Part::Drains => {
                let (limits, drains, scope) = drains(run, seconds).await?;
                (bench.limits, bench.drains, bench.cpu_scope) = (limits, drains, scope);
                // The old one-connection fields describe an older bench; they go with it.
                bench.limit_per_s = 0.0;
                bench.limit_runs_per_s.clear();
                bench.limit_around_per_s.clear();
                bench.sweeper_per_s.clear();
            }
            Part::Calls => {
                bench.calls = calls::measure(run).await?;
                bench.probe_ms.clear();
            }
            Part::Curve => bench.curve = load::curve(run, seconds.clamp(30, 120)).await?,
            Part::Bursts => bench.bursts = load::bursts(run).await?,
            Part::Kill => bench.kill = load::kill(run, seconds.clamp(20, 60)).await?,
            Part::Rss => bench.peak_rss_kib = peak_rss(run, seconds).await?,
            Part::Idle => {
                bench.idle_brokers = 3;
                let mut idle = Workload::quiet("idle brokers", seconds.min(30));
                idle.brokers = bench.idle_brokers;
                bench.idle_calls_per_s = run
                    .execute(&idle, "bench_idle")
                    .await?
                    .queries_per_s_per_broker;
            }
        }
    }
    Ok(bench)
}

/// The drain runs with 1, 2 and 4 brokers, each bracketed by the limit on as many connections
/// (this rig's speed drifts, up to 1.8x within one bench, so each run is judged against the
/// limit measured around it), and the one-connection limit at the start and the end.
async fn drains(
    run: &Run<'_>,
    seconds: u64,
) -> Result<(Vec<limit::LimitRun>, Vec<DrainPoint>, String), String> {
    let mut limits = vec![limit::measure(run, 1).await?];
    eprintln!(
        "soak: bench: limit on 1 connection {:.0} timers/s",
        limits[0].per_s
    );
    let mut drains = Vec::new();
    let scope = cpu_scope(run).await?;
    for brokers in BROKERS {
        let before = if brokers == 1 {
            limits[0]
        } else {
            limit::measure(run, brokers).await?
        };
        if brokers != 1 {
            limits.push(before);
        }
        let mut w = Workload::quiet(&format!("bench {brokers} broker(s)"), seconds);
        w.brokers = brokers;
        w.backlog = BACKLOG;
        w.payload_bytes = PAYLOAD;
        (w.tenants, w.queues, w.partitions) = SPREAD;
        let trace = cpu::Trace::start(scope);
        let result = run.execute(&w, &format!("bench_{brokers}")).await?;
        let samples = trace.stop();
        let after = limit::measure(run, brokers).await?;
        limits.push(after);
        let cpu_us_per_timer = result.fire_window_epoch_s.and_then(|(from, to)| {
            cpu::used_between(&samples, from, to)
                .map(|used| (used / result.counters.fired.max(1) as f64 * 1e7).round() / 10.0)
        });
        let mean_cpu = |a: Option<f64>, b: Option<f64>| {
            a.zip(b).map(|(a, b)| ((a + b) / 2.0 * 10.0).round() / 10.0)
        };
        let point = DrainPoint {
            brokers,
            per_s: result.busy_fired_per_s(),
            limit_same_per_s: ((before.per_s + after.per_s) / 2.0).round(),
            limit_one_per_s: 0.0,
            cpu_us_per_timer,
            limit_cpu_us_per_timer: mean_cpu(before.cpu_us_per_timer, after.cpu_us_per_timer),
        };
        eprintln!(
            "soak: bench: {brokers} broker(s) {:.0} timers/s, {}% of the {:.0} limit on {brokers} connection(s) around it; CPU {:?} µs/timer against the limit's {:?}",
            point.per_s,
            point.share_same(),
            point.limit_same_per_s,
            point.cpu_us_per_timer,
            point.limit_cpu_us_per_timer
        );
        drains.push(point);
    }
    let last_one = limit::measure(run, 1).await?;
    limits.push(last_one);
    let ones: Vec<f64> = limits
        .iter()
        .filter(|l| l.connections == 1)
        .map(|l| l.per_s)
        .collect();
    let one = (ones.iter().sum::<f64>() / ones.len() as f64).round();
    for point in &mut drains {
        point.limit_one_per_s = one;
    }
    Ok((limits, drains, scope.describe()))
}

/// Where the server's processes are, found through a connection of a scratch database.
async fn cpu_scope(run: &Run<'_>) -> Result<cpu::Scope, String> {
    let db = crate::db::RunDb::create(run.server_url, "bench_cpu_scope").await?;
    let scope = cpu::Scope::locate(&db.pool).await;
    db.drop_now().await?;
    Ok(scope)
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
