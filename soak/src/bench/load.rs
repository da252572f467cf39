//! The bench under load: lateness against the steady rate, with the rig's own stall measured
//! beside it; a burst of 20 000 timers due at one instant in one queue; a broker SIGKILLed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use queen_harness::Spread;
use queen_sweeper::clock;
use serde::{Deserialize, Serialize};
use sqlx::Connection;

use crate::db::RunDb;
use crate::run::{KillEffect, Run, RunResult, Workload, per_second};

/// The steady rates of the latency-throughput curve, timers/s.
pub const RATES: [u32; 5] = [200, 500, 1_000, 2_000, 5_000];
/// The lateness target of the steady load, ms: a second above it is a spike.
pub const SPIKE_MS: f64 = 30.0;
/// How often the stall probe commits a bare one-row insert.
const STALL_EVERY: Duration = Duration::from_millis(20);

/// One point of the curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    pub target_per_s: u32,
    /// Timers fired per second over the run.
    pub fired_per_s: f64,
    pub lateness_ms: Spread,
    /// The commit of a bare one-row insert on its own connection, every 20 ms, at the same time.
    pub commit_ms: Spread,
    /// Seconds whose lateness p99 was over [`SPIKE_MS`].
    pub spike_seconds: u32,
    /// Of those, the seconds in which the bare insert's commit p99 was over [`SPIKE_MS`] too:
    /// the rig stalled, not only the sweeper.
    pub spike_seconds_rig_stalled: u32,
    /// (second, lateness p99 ms, bare commit p99 ms), for the plot.
    pub per_second: Vec<(u64, f64, f64)>,
    pub duplicates: i64,
    pub never_fired: i64,
}

/// One burst of 20 000 timers due at one instant in one queue of one tenant, 3 brokers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BurstRun {
    pub timers: u64,
    /// From the first to the last fire, s.
    pub drain_s: f64,
    /// The last timer's lateness, ms: from the instant all were due to the last fire.
    pub lateness_max_ms: f64,
    /// From the earliest promised delivery to the latest, ms (the burst's own width).
    #[serde(default)]
    pub due_width_ms: f64,
    /// From the earliest promised delivery to the last fire, s.
    #[serde(default)]
    pub due_to_last_fire_s: f64,
}

pub async fn curve(run: &Run<'_>, seconds: u64) -> Result<Vec<CurvePoint>, String> {
    let mut out = Vec::new();
    for rate in RATES {
        let mut w = Workload::canonical(seconds);
        w.label = format!("bench curve {rate}/s");
        w.timers_per_s = rate;
        let stall = StallProbe::start(run).await?;
        let result = run.execute(&w, &format!("bench_curve_{rate}")).await?;
        let commits = stall.stop().await?;
        let point = curve_point(rate, &result, &commits);
        eprintln!(
            "soak: bench: {rate}/s: fired {:.0}/s, lateness p50 {} p99 {} max {} ms; bare commit p50 {} p99 {} ms; {} spike second(s), {} with the rig stalled",
            point.fired_per_s,
            point.lateness_ms.p50,
            point.lateness_ms.p99,
            point.lateness_ms.max,
            point.commit_ms.p50,
            point.commit_ms.p99,
            point.spike_seconds,
            point.spike_seconds_rig_stalled
        );
        out.push(point);
    }
    Ok(out)
}

fn curve_point(rate: u32, result: &RunResult, commits: &[(f64, f64)]) -> CurvePoint {
    // A commit counts in the run's second it started in; those before the run's start only in
    // the whole.
    let start = result.start_epoch_s;
    let (overall, mut by_second) = per_second(commits.iter().map(|(at, ms)| {
        let second = if *at >= start {
            (at - start) as u64
        } else {
            u64::MAX
        };
        (second, *ms)
    }));
    by_second.remove(&u64::MAX);
    let per_second: Vec<(u64, f64, f64)> = result
        .series
        .iter()
        .map(|s| {
            let commit = by_second
                .get(&s.t_s)
                .map_or(0.0, |h| Spread::of(h, 1000.0).p99);
            (s.t_s, s.lateness_p99_ms, commit)
        })
        .collect();
    let spikes: Vec<&(u64, f64, f64)> = per_second.iter().filter(|p| p.1 > SPIKE_MS).collect();
    CurvePoint {
        target_per_s: rate,
        fired_per_s: result.fired_per_s,
        lateness_ms: result.lateness_ms,
        commit_ms: Spread::of(&overall, 1000.0),
        spike_seconds: spikes.len() as u32,
        spike_seconds_rig_stalled: spikes.iter().filter(|p| p.2 > SPIKE_MS).count() as u32,
        per_second,
        duplicates: result.duplicates,
        never_fired: result.never_fired,
    }
}

/// A bare one-row insert committed every 20 ms on a connection and a database of its own: the
/// rig's own stall (WAL flush, checkpoint, CPU), measured at the same moments as the lateness.
struct StallProbe {
    db: RunDb,
    stop: Arc<Mutex<bool>>,
    task: tokio::task::JoinHandle<Result<Vec<(f64, f64)>, String>>,
}

impl StallProbe {
    async fn start(run: &Run<'_>) -> Result<StallProbe, String> {
        let db = RunDb::create(run.server_url, "bench_stall").await?;
        sqlx::query(
            "CREATE TABLE stall (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())",
        )
        .execute(&db.pool)
        .await
        .map_err(|e| e.to_string())?;
        let mut session = sqlx::PgConnection::connect(&db.url)
            .await
            .map_err(|e| e.to_string())?;
        let stop = Arc::new(Mutex::new(false));
        let stopped = Arc::clone(&stop);
        let task = tokio::spawn(async move {
            let mut out = Vec::new();
            // Bounded: an hour of probes at most; a bench point is minutes.
            for _ in 0..(3_600_000 / STALL_EVERY.as_millis() as u64) {
                if *stopped.lock().expect("not poisoned") {
                    break;
                }
                let at = clock::wall_since_epoch().as_secs_f64();
                let started = clock::monotonic_now();
                sqlx::query("INSERT INTO stall DEFAULT VALUES")
                    .execute(&mut session)
                    .await
                    .map_err(|e| format!("the stall probe's insert failed: {e}"))?;
                let ms = (clock::monotonic_now() - started).as_secs_f64() * 1000.0;
                out.push((at, ms));
                tokio::time::sleep(
                    STALL_EVERY.saturating_sub(Duration::from_secs_f64(ms / 1000.0)),
                )
                .await;
            }
            let _ = session.close().await;
            Ok(out)
        });
        Ok(StallProbe { db, stop, task })
    }

    /// (epoch seconds of the insert's start, its commit latency in ms), every probe.
    async fn stop(self) -> Result<Vec<(f64, f64)>, String> {
        *self.stop.lock().expect("not poisoned") = true;
        let commits = self.task.await.map_err(|e| e.to_string())??;
        self.db.drop_now().await?;
        Ok(commits)
    }
}

/// Timers in one burst.
const BURST: u64 = 20_000;

/// Three bursts, each on a fresh database: 20 000 timers for one tenant and one queue (8
/// partitions), all due at one instant, 3 brokers.
pub async fn bursts(run: &Run<'_>) -> Result<Vec<BurstRun>, String> {
    let mut out = Vec::new();
    for i in 1..=3 {
        let mut w = Workload::quiet(&format!("bench burst {i}"), 20);
        w.brokers = 3;
        (w.tenants, w.queues, w.partitions) = (1, 1, 8);
        // One burst at the first tick (every 40 s, in a 20 s run): 500/s × 40 s, scheduled in
        // calls of 1 000 aimed at one instant 10 s ahead (scheduling 20 000 took 3-4 s here).
        w.timers_per_s = 500;
        w.burst_every_s = Some(40);
        w.timer_delay_ms = (10_000, 10_000);
        w.payload_bytes = 512;
        let result = run.execute(&w, &format!("bench_burst_{i}")).await?;
        if result.duplicates != 0 || result.never_fired != 0 || result.fired_early != 0 {
            return Err(format!(
                "burst {i}: {} duplicated, {} never fired, {} fired early",
                result.duplicates, result.never_fired, result.fired_early
            ));
        }
        if result.counters.fired != BURST {
            return Err(format!(
                "burst {i}: {} of {BURST} timers fired ({} schedule call(s) failed: {})",
                result.counters.fired,
                result.schedule_failures,
                result.first_schedule_error.as_deref().unwrap_or("none")
            ));
        }
        let burst = BurstRun {
            timers: result.counters.fired,
            drain_s: (result.fire_span_s * 1000.0).round() / 1000.0,
            lateness_max_ms: result.lateness_ms.max,
            due_width_ms: result
                .due_window_epoch_s
                .map_or(0.0, |(a, b)| ((b - a) * 1000.0).round()),
            due_to_last_fire_s: result
                .due_window_epoch_s
                .zip(result.fire_window_epoch_s)
                .map_or(0.0, |((due, _), (_, last))| {
                    ((last - due) * 1000.0).round() / 1000.0
                }),
        };
        eprintln!(
            "soak: bench: burst {i}: {} timers due within {} ms, drained in {:.3} s (first fire to last), {:.3} s from the first due instant to the last fire, the last {} ms late",
            burst.timers,
            burst.due_width_ms,
            burst.drain_s,
            burst.due_to_last_fire_s,
            burst.lateness_max_ms
        );
        out.push(burst);
    }
    Ok(out)
}

/// Three broker processes at the canonical load with 2 000 timers/s (so that a broker is likely
/// inside a take when the signal lands), one SIGKILLed 10 s in, shipped knobs (the default
/// lease): how long the timers due before the kill waited after it.
pub async fn kill(run: &Run<'_>, seconds: u64) -> Result<Option<KillEffect>, String> {
    if run.sweeper_binary.is_none() {
        eprintln!("soak: bench: no queen-sweeper binary next to soak; the kill run is skipped");
        return Ok(None);
    }
    let mut w = Workload::canonical(seconds.max(20));
    w.label = "a broker SIGKILLed".into();
    w.timers_per_s = 2_000;
    w.broker_processes = true;
    w.kill_one_at_s = Some(10);
    w.drain_limit_s = 60;
    let result = run.execute(&w, "bench_kill").await?;
    if result.duplicates != 0 || result.never_fired != 0 || result.fired_early != 0 {
        return Err(format!(
            "the kill run: {} duplicated, {} never fired, {} fired early",
            result.duplicates, result.never_fired, result.fired_early
        ));
    }
    eprintln!("soak: bench: {}", crate::report::headline(&result));
    Ok(result.kill)
}
