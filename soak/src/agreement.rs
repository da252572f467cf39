//! `soak agreement`: the same scenarios, with the same parameters, in the calibrated simulation
//! and on this rig, side by side. One [`Workload`] describes each case; [`spec`] turns it into
//! the simulation's [`RunSpec`], so the two sides cannot drift apart in what they run.
//!
//! Tolerances (issue 16): drain rate and lateness p50 within ±25%, p99 within ±50%, stale
//! segments and polling calls per second within ±50%; the same verdict on every expectation
//! (the naive drain goes stale and the shipped ones do not; the floor spins and the band does
//! not); the lease at which the naive drain stops going stale within a factor of 2.
//! `soak agreement --check DIR` reruns the simulation side against the rig numbers stored in
//! DIR, without a database, and fails when a row that agreed no longer does.

use std::path::Path;

use queen_harness::{Knobs, LineChart, Spread};
use queen_sim::analysis;
use queen_sim::calibration;
use queen_sim::model::server::Costs;
use queen_sim::model::state::Source;
use queen_sim::time::ORIGIN_US;
use queen_sim::world::{self, Burst, Fault, FaultKind, KvLoad, PushLoad, RunSpec, TimerLoad};
use queen_sweeper::knob;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::run::{CpuSplit, Run, RunResult, Workload};

/// Seeds of the simulation side; each metric's simulated value is their median.
pub const SEEDS: [u64; 3] = [1, 2, 3];
/// The lease of the livelock cases, and the leases the naive drain is swept over.
const LIVELOCK_LEASE_MS: u64 = 2_000;
const LEASE_SWEEP_MS: [u64; 3] = [500, 2_000, 8_000];
/// The lease of the crash cases: the killed broker's claims wait for it on the leased path.
const CRASH_LEASE_MS: u64 = 4_000;
/// Each simulated seed crashes its broker this much later than the one before. A crash's cost
/// depends on where in its claim-fire cycle (about 60 ms here) the broker is: crashed at the
/// rig's offset and 20 ms later, the simulated broker had sent both fires of its last claim
/// and stranded nothing (the last overdue timer fired 822 and 801 ms after the crash); 40 ms
/// later it held a claimed batch, whose last timer fired 4 007 ms after it, as the rig's did
/// 4 031 ms after its kill (reports/agreement/2026-12-05-2c-24g-pg15, rig at 6df6cd1, sim at
/// 7f4c41b). Seeds 1-3 crash 0, 20 and 40 ms in.
const CRASH_PHASE_STEP_MS: u64 = 20;

/// One scenario: what it shows, and the load both sides run.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    pub what: &'static str,
    pub workload: Workload,
}

/// The agreement suite's cases, in the order they run.
pub fn cases() -> Vec<Case> {
    let mut out = vec![
        Case {
            name: "steady".into(),
            what: "200 timers/s due 0-2 s ahead, 3 brokers, 4 pushers",
            workload: steady(),
        },
        Case {
            name: "burst".into(),
            what: "20 000 timers due at one instant in one queue, 3 brokers",
            workload: burst(),
        },
    ];
    for (name, floor) in [("spin-floor", true), ("spin-band", false)] {
        let mut w = quiet(name, 20);
        w.brokers = 5;
        w.timers_per_s = 20;
        w.naive_floor_after_empty_claim = floor;
        out.push(Case {
            name: name.into(),
            what: if floor {
                "5 brokers, 20 timers/s, the naive floor after an empty claim"
            } else {
                "5 brokers, 20 timers/s, the shipped band after an empty claim"
            },
            workload: w,
        });
    }
    for (form, take, naive) in [("take", 1, false), ("leased", 0, false)] {
        out.push(Case {
            name: format!("livelock-{form}"),
            what: "12 000 timers of 8 KiB (incompressible) due at one instant, 5 brokers, pushes, 2 s lease: a shipped drain",
            workload: livelock(LIVELOCK_LEASE_MS, take, naive),
        });
    }
    for lease in LEASE_SWEEP_MS {
        out.push(Case {
            name: format!("livelock-naive-{lease}ms"),
            what: "12 000 timers of 8 KiB (incompressible) due at one instant, 5 brokers, pushes: the naive drain",
            workload: livelock(lease, 0, true),
        });
    }
    for (form, take) in [("take", 1), ("leased", 0)] {
        out.push(Case {
            name: format!("crash-{form}"),
            what: "12 000 timers of 8 KiB (incompressible) due at one instant, 3 broker processes, 4 s lease; broker 1 is killed (SIGKILL) 0.5 s after the instant, mid-drain",
            workload: crash(take),
        });
    }
    out
}

fn quiet(label: &str, seconds: u64) -> Workload {
    let mut w = Workload::quiet(label, seconds);
    w.drain_limit_s = 30;
    // The simulation sends every payload byte through its WAL; so must the rig.
    w.incompressible_payloads = true;
    w
}

fn steady() -> Workload {
    let mut w = quiet("agreement steady", 30);
    w.timers_per_s = 200;
    w.timer_delay_ms = (0, 2_000);
    (w.tenants, w.queues, w.partitions) = (2, 4, 8);
    w.pushers = 4;
    w.pushes_per_s_each = 25;
    w.push_batch = 10;
    w.push_payload_bytes = 512;
    w
}

fn burst() -> Workload {
    let mut w = quiet("agreement burst", 20);
    (w.tenants, w.queues, w.partitions) = (1, 1, 8);
    // One burst on the first tick: 500/s × 40 s, due 10 s later.
    w.timers_per_s = 500;
    w.burst_every_s = Some(40);
    w.timer_delay_ms = (10_000, 10_000);
    w
}

fn livelock(lease_ms: u64, take: u64, naive: bool) -> Workload {
    let mut w = quiet("agreement livelock", 30);
    w.brokers = 5;
    w.drain_limit_s = 60;
    w.knobs = Knobs::new()
        .with(knob::LEASE_MS, lease_ms)
        .with(knob::STATEMENT_TIMEOUT_MS, (lease_ms / 2).min(5_000))
        .with(knob::FIRE_TAKE, take);
    w.naive_claim_then_fire = naive;
    // Scheduled on a connection of the soak's own (5 s statement timeout): through the brokers,
    // a 1 000-timer call of 8 KiB ran past a 500 ms lease's 250 ms statement timeout and the
    // burst was refused (2026-12-04).
    w.schedule_without_wake = true;
    (w.tenants, w.queues, w.partitions) = (1, 1, 8);
    // 12 000 timers of 8 KiB on the first tick (400/s × 30 s), due 10 s later: scheduling them
    // on one connection took the rig about 5 s, and with 3 s of lead they were due over 1.9 s
    // where the simulation's were due at once (2026-12-04, commit d295648).
    w.timers_per_s = 400;
    w.burst_every_s = Some(30);
    w.timer_delay_ms = (10_000, 10_000);
    w.payload_bytes = 8_192;
    w.pushers = 8;
    w.pushes_per_s_each = 40;
    w.push_batch = 10;
    w.push_payload_bytes = 2_048;
    w
}

/// A broker killed in the middle of a burst's drain: its claims (leased path) wait for their
/// lease, its open take (take path) rolls back when its connection drops.
fn crash(take: u64) -> Workload {
    let mut w = livelock(CRASH_LEASE_MS, take, false);
    w.label = "agreement crash".into();
    w.brokers = 3;
    w.pushers = 0;
    // A process, so that it can be killed; the burst is due 10.5 s after the first tick, and the
    // sampler (whole seconds) kills broker 1 at 11 s: mid-drain on both sides (the drains took
    // 0.9-2 s at 7e9c580). The simulation crashes broker-1 at the same offset.
    w.timer_delay_ms = (10_500, 10_500);
    w.broker_processes = true;
    w.kill_one_at_s = Some(11);
    w
}

/// What one rig run delivered, as its delivery checks read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Delivered {
    duplicates: i64,
    never_fired: i64,
    fired_early: i64,
}

impl Delivered {
    fn of(r: &RunResult) -> Delivered {
        Delivered {
            duplicates: r.duplicates,
            never_fired: r.never_fired,
            fired_early: r.fired_early,
        }
    }
}

/// The delivery checks of one rig run: a duplicate or an early fire fails the suite in every
/// case. A timer still due at the drain limit fails it too, except under the naive drain, whose
/// livelock is exactly that (on 2026-12-07, at a 500 ms lease, 2 410 of 12 000 were still due
/// after 60 s): there it is the symptom the case exists to show, returned as a note for the log
/// and the report.
fn delivery(w: &Workload, d: Delivered) -> Result<Option<String>, String> {
    if d.duplicates != 0 || d.fired_early != 0 || (d.never_fired != 0 && !w.naive_claim_then_fire) {
        return Err(format!(
            "{} duplicated, {} never fired, {} fired early",
            d.duplicates, d.never_fired, d.fired_early
        ));
    }
    Ok((d.never_fired != 0).then(|| {
        format!(
            "{} timers still due at the {} s drain limit: the naive drain's livelock, recorded (0 duplicated, 0 fired early)",
            d.never_fired, w.drain_limit_s
        )
    }))
}

/// The simulation's run of `w` on `seed` with `costs`.
///
/// `rig_kill_after_due_ms`: where in the burst the rig's kill landed. The simulation kills at
/// the same offset (plus its seed's phase), so a crash case compares one instant, not the rig's
/// scheduling delay: the rig's 11 s kill landed 333 ms after a burst the sim had due at 500 ms
/// (report at 6df6cd1), and the sim counted fewer overdue timers for its later kill.
pub fn spec(w: &Workload, seed: u64, costs: Costs, rig_kill_after_due_ms: Option<f64>) -> RunSpec {
    let mut s = RunSpec::new(seed, costs);
    s.brokers = w.brokers;
    s.safety_ms = w.seconds * 1000;
    s.liveness_ms = w.drain_limit_s * 1000;
    s.knobs = w.knobs.clone();
    s.naive_drain = w.naive_claim_then_fire;
    s.floor_after_empty_claim = w.naive_floor_after_empty_claim;
    match w.burst_every_s {
        Some(every) => {
            s.bursts = vec![Burst {
                // The rig's first tick comes once the brokers are up; the sim's a second in.
                at_ms: 1_000,
                count: w.timers_per_s * every as u32,
                delay_ms: w.timer_delay_ms.0,
                payload_bytes: u64::from(w.payload_bytes),
                tenant: "t0".into(),
                broker: 1,
            }];
        }
        None if w.timers_per_s > 0 => {
            s.timers = Some(TimerLoad {
                per_s: w.timers_per_s,
                // The rig schedules once per 10 ms tick.
                batch: (w.timers_per_s / 100).max(1),
                delay_ms: w.timer_delay_ms,
                payload_bytes: (u64::from(w.payload_bytes), u64::from(w.payload_bytes)),
                tenants: w.tenants,
                queues: w.queues,
                partitions: w.partitions,
            });
        }
        None => {}
    }
    if w.pushers > 0 {
        s.pushes = Some(PushLoad {
            pushers: w.pushers,
            per_s_each: w.pushes_per_s_each,
            messages_per_push: w.push_batch,
            payload_bytes: u64::from(w.push_payload_bytes),
        });
    }
    if let Some(kill_s) = w.kill_one_at_s {
        // The rig's seconds count from its first tick; a burst's first tick is the sim's 1 s.
        let first_tick_ms = if w.burst_every_s.is_some() { 1_000 } else { 0 };
        let phase_ms = (seed.saturating_sub(1) % 3) * CRASH_PHASE_STEP_MS;
        let nominal_ms = first_tick_ms + kill_s * 1000;
        let at_ms = match (rig_kill_after_due_ms, s.bursts.first()) {
            (Some(after), Some(burst)) => {
                burst.at_ms + burst.delay_ms + after.max(0.0).round() as u64
            }
            _ => nominal_ms,
        };
        s.faults.push(Fault {
            at_ms: at_ms + phase_ms,
            kind: FaultKind::Crash { broker: 1 },
        });
    }
    if w.kv_per_s > 0 {
        s.kv = Some(KvLoad {
            per_s: w.kv_per_s,
            ttl_ms: w.kv_ttl_ms,
            keys: w.kv_keys,
            // The rig's KV load has no writers holding puts open.
            wire_writers: 0,
            held_ms: (0, 0),
        });
    }
    s
}

/// One side's numbers of one case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub fired: u64,
    /// Timers fired per second from the first fire to the last.
    pub drain_per_s: f64,
    pub lateness_ms: Spread,
    pub stale_segments: u64,
    /// Probe, claim and take calls per second per broker during the load.
    pub polling_per_s_per_broker: f64,
    /// From the earliest promised instant to the latest, ms: how "at once" a burst was due.
    #[serde(default)]
    pub due_width_ms: f64,
    /// Schedule calls that failed (their timers are missing from every number).
    #[serde(default)]
    pub schedule_failures: u64,
    /// Timers fired in each second of the run, for the plot.
    pub fired_by_second: Vec<(f64, f64)>,
    /// What the kill cost, in a crash case.
    #[serde(default)]
    pub kill: Option<KillSide>,
    /// The rig's cores busy from the first fire to the last (the simulation's are not
    /// measured: its clients spend no CPU).
    #[serde(default)]
    pub cpu_while_firing: Option<CpuSplit>,
    /// The rig's disk bytes written per WAL byte over the seconds it fired in (the heap's
    /// writeback shares the disk with the WAL).
    #[serde(default)]
    pub disk_bytes_per_wal_byte: Option<f64>,
    /// Timers still due at the drain limit (the naive drain's livelock; 0 everywhere else, or
    /// the run fails its delivery checks).
    #[serde(default)]
    pub unfired: u64,
}

/// What a broker's kill cost on one side: the timers due at or before it that fired after it
/// (the killed broker's, and whatever was due and not yet fired by the others).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillSide {
    /// The kill, ms after the earliest promised instant (where in the burst it landed).
    pub after_due_ms: f64,
    pub overdue: u64,
    /// Their lateness (fire minus due), ms.
    pub lateness_ms: Spread,
    /// From the kill to the last of them firing, ms.
    pub last_fired_after_ms: f64,
}

impl KillSide {
    /// From the simulation: `at_us` is the crash on the database's clock.
    fn of_sim(outcome: &world::RunOutcome, at_us: u64) -> KillSide {
        let log = outcome.log.lock().expect("not poisoned");
        let due: std::collections::HashMap<&str, u64> = log
            .scheduled
            .iter()
            .map(|s| (s.txn.as_str(), s.deliver_at))
            .collect();
        let first_due = due.values().copied().min().unwrap_or(at_us);
        let overdue: Vec<(u64, u64)> = outcome.db.with(|t| {
            t.messages
                .iter()
                .filter(|m| m.source == Source::Fire && m.created_at > at_us)
                .filter_map(|m| {
                    let d = *due.get(m.txn.as_str())?;
                    (d <= at_us).then_some((d, m.created_at))
                })
                .collect()
        });
        let last = overdue
            .iter()
            .map(|(_, fired)| *fired)
            .max()
            .unwrap_or(at_us);
        KillSide {
            after_due_ms: (at_us as f64 - first_due as f64) / 1000.0,
            overdue: overdue.len() as u64,
            lateness_ms: Spread::of_values(
                overdue
                    .iter()
                    .map(|(d, fired)| (fired - d) as f64 / 1000.0)
                    .collect(),
            ),
            last_fired_after_ms: ((last - at_us) as f64 / 1000.0).round(),
        }
    }
}

impl Side {
    fn of_rig(r: &RunResult) -> Side {
        let load: Vec<_> = r
            .series
            .iter()
            .filter(|s| s.t_s < r.workload.seconds)
            .collect();
        let polling = load.iter().map(|s| s.probe_claim_per_s).sum::<f64>()
            / load.len().max(1) as f64
            / f64::from(r.workload.brokers.max(1));
        // Counted in the database (a message per timer, by the drain limit), not by the
        // brokers' counters: the naive drain's form counts nothing, so its drain read 0.
        let fired = r.lateness_ms.count;
        Side {
            fired,
            drain_per_s: round1(fired as f64 / r.fire_span_s.max(1e-3)),
            lateness_ms: r.lateness_ms,
            stale_segments: r.counters.stale_segments,
            polling_per_s_per_broker: round1(polling),
            due_width_ms: r
                .due_window_epoch_s
                .map_or(0.0, |(a, b)| ((b - a) * 1000.0).round()),
            schedule_failures: r.schedule_failures,
            fired_by_second: r
                .series
                .iter()
                .map(|s| (s.t_s as f64, s.fired_per_s))
                .collect(),
            kill: r.kill.as_ref().map(|k| KillSide {
                after_due_ms: r.due_window_epoch_s.map_or(0.0, |(first, _)| {
                    ((r.start_epoch_s + k.at_s - first) * 1000.0).round()
                }),
                overdue: k.overdue_at_kill,
                lateness_ms: k.lateness_ms,
                last_fired_after_ms: k.last_fired_after_kill_ms,
            }),
            cpu_while_firing: r.cpu_while_firing,
            disk_bytes_per_wal_byte: disk_per_wal(&r.series),
            unfired: u64::try_from(r.never_fired).unwrap_or(0),
        }
    }

    fn of_sim(spec: &RunSpec) -> Side {
        let outcome = world::run(spec);
        let numbers = analysis::numbers("agreement", &outcome, 1);
        let (first, last) = outcome.db.with(|t| {
            let fires = t.messages.iter().filter(|m| m.source == Source::Fire);
            fires.fold((u64::MAX, 0), |(a, b), m| {
                (a.min(m.created_at), b.max(m.created_at))
            })
        });
        let span_s = last.saturating_sub(first) as f64 / 1e6;
        let (due_first, due_last, failures, scheduled) = {
            let log = outcome.log.lock().expect("not poisoned");
            let (a, b) = log.scheduled.iter().fold((u64::MAX, 0), |(a, b), s| {
                (a.min(s.deliver_at), b.max(s.deliver_at))
            });
            (a, b, log.schedule_failures, log.scheduled.len() as u64)
        };
        let load_s = spec.safety_ms / 1000;
        let load: Vec<_> = numbers
            .series
            .iter()
            .filter(|b| b.start_s < load_s as f64)
            .collect();
        let polling = load.iter().map(|b| b.probe_claim_per_s).sum::<f64>()
            / load.len().max(1) as f64
            / f64::from(spec.brokers.max(1));
        Side {
            fired: numbers.fired,
            drain_per_s: round1(numbers.fired as f64 / span_s.max(1e-3)),
            lateness_ms: numbers.lateness_ms,
            stale_segments: numbers.stale_segments,
            polling_per_s_per_broker: round1(polling),
            due_width_ms: (due_last.saturating_sub(due_first) as f64 / 1000.0).round(),
            schedule_failures: failures,
            fired_by_second: numbers
                .series
                .iter()
                .map(|b| (b.start_s, b.fired as f64))
                .collect(),
            kill: spec.faults.iter().find_map(|f| match f.kind {
                FaultKind::Crash { .. } => {
                    Some(KillSide::of_sim(&outcome, ORIGIN_US + f.at_ms * 1000))
                }
                _ => None,
            }),
            cpu_while_firing: None,
            disk_bytes_per_wal_byte: None,
            unfired: scheduled.saturating_sub(numbers.fired),
        }
    }
}

/// Disk bytes per WAL byte over the seconds that fired anything; None without disk counts or
/// WAL.
fn disk_per_wal(series: &[crate::run::Sample]) -> Option<f64> {
    let firing = series.iter().filter(|s| s.fired_per_s > 0.0);
    let (disk, wal) = firing.fold((0.0, 0.0), |(d, w), s| {
        (d + s.disk_bytes_per_s, w + s.wal_bytes_per_s)
    });
    (disk > 0.0 && wal > 0.0).then(|| (disk / wal * 100.0).round() / 100.0)
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// One metric of one case, sim beside rig.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub metric: String,
    pub sim: f64,
    pub rig: f64,
    /// sim / rig (1 when both are 0).
    pub ratio: f64,
    /// Allowed relative difference (0.25: ±25%).
    pub tolerance: f64,
    pub within: bool,
    /// The rig's lowest and highest value over its repetitions, when it ran several.
    #[serde(default)]
    pub rig_range: Option<(f64, f64)>,
}

impl Row {
    fn new(metric: &str, sim: f64, rig: f64, tolerance: f64) -> Row {
        let ratio = if sim == rig { 1.0 } else { sim / rig.max(1e-9) };
        let within = sim == rig || (sim - rig).abs() <= tolerance * rig.abs();
        Row {
            metric: metric.into(),
            sim: round1(sim),
            rig: round1(rig),
            ratio: (ratio * 100.0).round() / 100.0,
            tolerance,
            within,
            rig_range: None,
        }
    }
}

/// One case's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    pub name: String,
    pub what: String,
    pub workload: Workload,
    /// The rig's repetition with the median drain rate (its plot, its CPU and disk lines).
    pub rig: Side,
    /// Every repetition on the rig; empty in reports written before 2026-12-05's `--reps`
    /// (their one run is `rig`).
    #[serde(default)]
    pub rig_reps: Vec<Side>,
    /// One per seed of [`SEEDS`].
    pub sim: Vec<Side>,
    pub rows: Vec<Row>,
}

impl CaseResult {
    /// The rig's repetitions (the one run, in reports from before repetitions).
    pub fn rig_sides(&self) -> &[Side] {
        if self.rig_reps.is_empty() {
            std::slice::from_ref(&self.rig)
        } else {
            &self.rig_reps
        }
    }
}

/// The repetition whose drain rate is the median (the lower middle of an even count).
fn median_rep(reps: &[Side]) -> Option<&Side> {
    let mut order: Vec<&Side> = reps.iter().collect();
    order.sort_by(|a, b| a.drain_per_s.total_cmp(&b.drain_per_s));
    order.get(order.len().saturating_sub(1) / 2).copied()
}

/// The median of `f` over the simulation's seeds.
fn sim_median(sim: &[Side], f: impl Fn(&Side) -> f64) -> f64 {
    Spread::of_values(sim.iter().map(f).collect()).p50
}

/// The rows of a case: the metrics its scenario is about.
/// The table of one case: each metric's median over the simulation's seeds against its median
/// over the rig's repetitions (with their range when there are several).
fn rows(name: &str, rigs: &[Side], sim: &[Side]) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut push = |metric: &str, f: &dyn Fn(&Side) -> f64, tolerance: f64| {
        let mut row = Row::new(metric, sim_median(sim, f), sim_median(rigs, f), tolerance);
        if rigs.len() > 1 {
            let values: Vec<f64> = rigs.iter().map(f).collect();
            row.rig_range = Some((
                values.iter().copied().fold(f64::INFINITY, f64::min),
                values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ));
        }
        rows.push(row);
    };
    if name.starts_with("crash") {
        let kill = |f: fn(&KillSide) -> f64| move |x: &Side| x.kill.as_ref().map_or(0.0, f);
        push(
            "timers due before the kill, fired after it",
            &kill(|k| k.overdue as f64),
            0.5,
        );
        push("their lateness p50, ms", &kill(|k| k.lateness_ms.p50), 0.25);
        push("their lateness p99, ms", &kill(|k| k.lateness_ms.p99), 0.5);
        push(
            "the last of them, ms after the kill",
            &kill(|k| k.last_fired_after_ms),
            0.5,
        );
        return rows;
    }
    if name.starts_with("livelock-naive") {
        // The naive drain's livelock is timers left due; its drain rate and lateness are then
        // those of the few that fired.
        push(
            "timers still due at the drain limit",
            &|x| x.unfired as f64,
            0.25,
        );
    }
    if !name.starts_with("spin") {
        if name != "steady" {
            push("drain rate, timers/s", &|x| x.drain_per_s, 0.25);
        }
        push("lateness p50, ms", &|x| x.lateness_ms.p50, 0.25);
        push("lateness p99, ms", &|x| x.lateness_ms.p99, 0.5);
    }
    push("stale segments", &|x| x.stale_segments as f64, 0.5);
    push(
        "probe+claim+take calls/s per broker",
        &|x| x.polling_per_s_per_broker,
        0.5,
    );
    rows
}

/// The suite's verdicts, each decided on either side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub expectation: String,
    pub sim: bool,
    pub rig: bool,
}

/// The whole agreement run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    pub measured_on: String,
    pub commit: String,
    pub rig: String,
    /// The calibration the simulation side ran on.
    pub calibration: String,
    /// The commit the simulation side was last run at, when it differs from the rig's
    /// (`--resim`): the rig numbers stand while the cases' workloads are unchanged.
    #[serde(default)]
    pub sim_commit: Option<String>,
    pub cases: Vec<CaseResult>,
    pub verdicts: Vec<Verdict>,
    /// The sweeper's knob defaults at the rig's commit: a case's workload names only the knobs
    /// it sets, so `--check` and `--resim` run the simulation with these for the rest, and a
    /// default changed since (by `apply-blocks`) does not move the sim away from the rig it is
    /// compared with.
    #[serde(default)]
    pub defaults: std::collections::BTreeMap<String, u64>,
    /// The shortest swept lease at which the naive drain had no stale segment, per side (None:
    /// stale at every swept lease).
    pub naive_clean_lease_ms: (Option<u64>, Option<u64>),
}

/// Runs the simulation side of `w` on every seed, on a thread of its own (turmoil builds its
/// own runtime, which cannot nest in this one).
/// A crash case is killed at the rig's kill instant (the median over its repetitions).
fn simulate(w: &Workload, costs: Costs, rigs: &[Side]) -> Result<Vec<Side>, Error> {
    let w = w.clone();
    let instants: Vec<f64> = rigs
        .iter()
        .filter_map(|r| r.kill.as_ref().map(|k| k.after_due_ms))
        .collect();
    let kill = (!instants.is_empty()).then(|| Spread::of_values(instants).p50);
    std::thread::spawn(move || {
        SEEDS
            .iter()
            .map(|seed| Side::of_sim(&spec(&w, *seed, costs, kill)))
            .collect()
    })
    .join()
    .map_err(|_| Error::Message("the simulation side panicked".into()))
}

/// Runs every case on the rig and in the simulation.
/// `only`: the names of the cases to run (empty: every case); an unknown name is an error.
/// `reps_each`: the rig runs each case this many times (at least once); its rows are medians.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    run: &Run<'_>,
    commit: &str,
    rig: &str,
    date: &str,
    only: &[String],
    model: &Model,
    reps_each: u32,
) -> Result<Agreement, Error> {
    let reps_each = reps_each.max(1);
    let costs = model.costs;
    let mut cases_out = Vec::new();
    let all = selected(cases(), only)?;
    if run.sweeper_binary.is_none()
        && let Some(case) = all.iter().find(|c| c.workload.broker_processes)
    {
        return Err(Error::Message(format!(
            "agreement: the case {} kills a broker process and needs the queen-sweeper binary next to soak (cargo build --release -p queen-broker)",
            case.name
        )));
    }
    for (i, case) in all.iter().enumerate() {
        eprintln!(
            "soak: agreement: [{}/{}] {}: {}",
            i + 1,
            all.len(),
            case.name,
            case.what
        );
        let mut reps = Vec::new();
        for rep in 1..=reps_each {
            if reps_each > 1 {
                eprintln!(
                    "soak: agreement: {}: repetition {rep} of {reps_each}",
                    case.name
                );
            }
            let result = run
                .execute(
                    &case.workload,
                    &format!("agree_{}", case.name.replace('-', "_")),
                )
                .await?;
            if let Some(note) = delivery(&case.workload, Delivered::of(&result))
                .map_err(|why| Error::Message(format!("agreement {}: {why}", case.name)))?
            {
                eprintln!("soak: agreement: {}: {note}", case.name);
            }
            reps.push(Side::of_rig(&result));
        }
        let rig_side = median_rep(&reps).expect("at least one repetition").clone();
        if let Some(ratio) = rig_side.disk_bytes_per_wal_byte {
            eprintln!(
                "soak: agreement: {}: rig disk bytes per WAL byte while firing: {ratio}",
                case.name
            );
        }
        if let Some(cpu) = &rig_side.cpu_while_firing {
            eprintln!(
                "soak: agreement: {}: rig cores busy while firing ({} s): server {}, the rest {}",
                case.name,
                cpu.seconds,
                cpu.server_cores,
                cpu.other_cores()
            );
        }
        let sim = simulate(&case.workload, costs, &reps)?;
        let rows = rows(&case.name, &reps, &sim);
        for row in &rows {
            eprintln!(
                "soak: agreement: {}: {}: sim {} rig {} ({}×){}",
                case.name,
                row.metric,
                row.sim,
                row.rig,
                row.ratio,
                if row.within { "" } else { " OUTSIDE" }
            );
        }
        cases_out.push(CaseResult {
            name: case.name.clone(),
            what: case.what.into(),
            workload: case.workload.clone(),
            rig: rig_side,
            rig_reps: reps,
            sim,
            rows,
        });
    }
    let (verdicts, naive_clean_lease_ms) = verdicts(&cases_out);
    Ok(Agreement {
        measured_on: date.into(),
        commit: commit.into(),
        rig: rig.into(),
        calibration: model.name.clone(),
        cases: cases_out,
        verdicts,
        naive_clean_lease_ms,
        sim_commit: None,
        defaults: current_defaults(),
    })
}

/// Every knob's default in this build.
fn current_defaults() -> std::collections::BTreeMap<String, u64> {
    knob::ALL
        .iter()
        .map(|k| (k.var.to_owned(), k.default))
        .collect()
}

/// Knobs that turn on a behaviour added after some stored reports were measured, with the value
/// that turns it off: a stored run whose defaults lack the knob ran the code before it.
const ADDED_WITH_OFF_VALUE: &[(&str, u64)] = &[("QUEEN_SWEEPER_BULK_BATCH", 0)];

/// `w` with the knobs it leaves unset pinned at `defaults` where they differ from this build's
/// (the stored run's defaults, for a report measured before a default changed), and a knob of
/// [`ADDED_WITH_OFF_VALUE`] that the stored defaults do not name at its off value.
fn pinned(w: &Workload, defaults: &std::collections::BTreeMap<String, u64>) -> Workload {
    let mut w = w.clone();
    for k in knob::ALL {
        let set = w.knobs.iter().any(|(var, _)| var == k.var);
        let added_since = (!defaults.is_empty())
            .then(|| ADDED_WITH_OFF_VALUE.iter().find(|(var, _)| *var == k.var))
            .flatten()
            .filter(|_| !defaults.contains_key(k.var));
        match (defaults.get(k.var), added_since) {
            (Some(&then), _) if !set && then != k.default => {
                w.knobs = w.knobs.clone().with_var(k.var, then);
            }
            (None, Some(&(_, off))) if !set => {
                w.knobs = w.knobs.clone().with_var(k.var, off);
            }
            _ => {}
        }
    }
    w
}

/// The cases named in `only`, in their usual order (all of them when `only` is empty).
fn selected(all: Vec<Case>, only: &[String]) -> Result<Vec<Case>, Error> {
    if let Some(unknown) = only.iter().find(|n| !all.iter().any(|c| &c.name == *n)) {
        let names: Vec<_> = all.iter().map(|c| c.name.as_str()).collect();
        return Err(Error::Message(format!(
            "agreement: no case named {unknown}; the cases are {}",
            names.join(", ")
        )));
    }
    Ok(all
        .into_iter()
        .filter(|c| only.is_empty() || only.contains(&c.name))
        .collect())
}

/// The calibration the simulation side runs on, with its name for the report.
#[derive(Debug, Clone)]
pub struct Model {
    pub name: String,
    pub costs: Costs,
}

impl Model {
    /// The newest committed calibration, built into `sim`.
    pub fn builtin() -> Model {
        Model {
            name: format!(
                "sim/calibration/{} ({})",
                calibration::BUILTIN_NAME,
                calibration::builtin().describe()
            ),
            costs: calibration::builtin().costs,
        }
    }

    /// A calibration file (`--calibration FILE`): another rig's, or a variant of the model.
    pub fn from_file(path: &Path) -> Result<Model, Error> {
        let c = queen_harness::Calibration::load(path)
            .map_err(|e| Error::Message(format!("{}: {e}", path.display())))?;
        Ok(Model {
            name: format!("{} ({})", path.display(), c.describe()),
            costs: c.costs,
        })
    }
}

/// The expectations each side decides, and the lease edge of the naive drain.
fn verdicts(cases: &[CaseResult]) -> (Vec<Verdict>, (Option<u64>, Option<u64>)) {
    let find = |name: &str| cases.iter().find(|c| c.name == name);
    let stale = |c: &CaseResult| {
        (
            sim_median(&c.sim, |s| s.stale_segments as f64) > 0.0,
            sim_median(c.rig_sides(), |s| s.stale_segments as f64) > 0.0,
        )
    };
    let mut out = Vec::new();
    if let Some(naive) = find(&format!("livelock-naive-{LIVELOCK_LEASE_MS}ms")) {
        let (sim, rig) = stale(naive);
        out.push(Verdict {
            expectation: "the naive drain goes stale at a 2 s lease".into(),
            sim,
            rig,
        });
    }
    for form in ["take", "leased"] {
        if let Some(c) = find(&format!("livelock-{form}")) {
            let (sim, rig) = stale(c);
            out.push(Verdict {
                expectation: format!("the {form} drain has no stale segment at a 2 s lease"),
                sim: !sim,
                rig: !rig,
            });
        }
    }
    if let (Some(floor), Some(band)) = (find("spin-floor"), find("spin-band")) {
        let spins = |f: &dyn Fn(&CaseResult) -> f64| f(floor) > 2.0 * f(band);
        out.push(Verdict {
            expectation:
                "the floor after an empty claim polls more than twice as often as the band".into(),
            sim: spins(&|c| sim_median(&c.sim, |s| s.polling_per_s_per_broker)),
            rig: spins(&|c| sim_median(c.rig_sides(), |s| s.polling_per_s_per_broker)),
        });
    }
    let last_after_kill = |c: &CaseResult| {
        let of = |x: &Side| x.kill.as_ref().map_or(0.0, |k| k.last_fired_after_ms);
        (sim_median(&c.sim, of), sim_median(c.rig_sides(), of))
    };
    let lease = CRASH_LEASE_MS as f64;
    if let Some(c) = find("crash-take") {
        let (sim, rig) = last_after_kill(c);
        out.push(Verdict {
            expectation: "on the take path, a killed broker's timers fire before its lease would have run out".into(),
            sim: sim < lease,
            rig: rig < lease,
        });
    }
    if let Some(c) = find("crash-leased") {
        // Whether the broker held claimed rows when it died depends on the kill's phase: each
        // side strands claims if any of its phases (sim) or repetitions (rig) does.
        let stranded = |x: &Side| {
            x.kill
                .as_ref()
                .is_some_and(|k| k.last_fired_after_ms >= lease / 2.0)
        };
        out.push(Verdict {
            expectation: "on the leased path, a broker killed while it holds claimed rows leaves them for the lease (the last fires at least half a lease after the kill, in any of the sim's crash phases or the rig's repetitions)".into(),
            sim: c.sim.iter().any(stranded),
            rig: c.rig_sides().iter().any(stranded),
        });
    }
    let edge = |side: &dyn Fn(&CaseResult) -> bool| {
        LEASE_SWEEP_MS
            .iter()
            .copied()
            .find(|lease| find(&format!("livelock-naive-{lease}ms")).is_some_and(|c| !side(c)))
    };
    let edges = (edge(&|c| stale(c).0), edge(&|c| stale(c).1));
    (out, edges)
}

/// The report: a table per case, the verdicts, the lease edge, a plot per case.
pub fn write_report(dir: &Path, a: &Agreement) -> Result<(), Error> {
    crate::report::write_json(dir, "agreement.json", a)?;
    let mut md = format!(
        "# Agreement: the calibrated simulation against the rig\n\nMeasured {} at commit {} on {}.\nSimulation{}: calibration {}; seeds {:?}, each simulated value the median over them.\nTolerances: drain rate and lateness p50 ±25%, p99 ±50%, stale segments and calls/s ±50%.\n\n",
        a.measured_on,
        a.commit,
        a.rig,
        a.sim_commit.as_ref().map_or(String::new(), |c| format!(
            " (rerun at commit {c} by `soak agreement --resim`)"
        )),
        a.calibration,
        SEEDS
    );
    let (rows, within): (usize, usize) = a.cases.iter().fold((0, 0), |(n, w), c| {
        (
            n + c.rows.len(),
            w + c.rows.iter().filter(|r| r.within).count(),
        )
    });
    md += &format!("**{within} of {rows} rows within tolerance.**\n\n");
    for c in &a.cases {
        md += &case_section(dir, c)?;
    }
    md += "## Verdicts\n\n| expectation | sim | rig | same |\n|---|---|---|---|\n";
    for v in &a.verdicts {
        md += &format!(
            "| {} | {} | {} | {} |\n",
            v.expectation,
            v.sim,
            v.rig,
            if v.sim == v.rig { "yes" } else { "**no**" }
        );
    }
    let lease = |l: Option<u64>| {
        l.map_or("stale at every swept lease".to_owned(), |l| {
            format!("{l} ms")
        })
    };
    let within_2 = match a.naive_clean_lease_ms {
        (Some(s), Some(r)) => s <= 2 * r && r <= 2 * s,
        (None, None) => true,
        _ => false,
    };
    md += &format!(
        "\nThe shortest swept lease ({:?} ms) at which the naive drain had no stale segment: sim {}, rig {}; within a factor of 2: {}.\n",
        LEASE_SWEEP_MS,
        lease(a.naive_clean_lease_ms.0),
        lease(a.naive_clean_lease_ms.1),
        if within_2 { "yes" } else { "**no**" }
    );
    crate::report::write_file(&dir.join("report.md"), &md)
}

/// One case's section of the report: what ran, its rows, its plot (written beside it).
fn case_section(dir: &Path, c: &CaseResult) -> Result<String, Error> {
    let mut md = String::new();
    let rigs = c.rig_sides();
    md += &format!(
        "## {}\n\n{}. Rig ({} run(s), the rows their medians): {:?} fired, due within {:?} ms, {} failed schedule call(s); sim: {:?} fired by seed, due within {:?} ms.\n\n",
        c.name,
        c.what,
        rigs.len(),
        rigs.iter().map(|s| s.fired).collect::<Vec<_>>(),
        rigs.iter().map(|s| s.due_width_ms).collect::<Vec<_>>(),
        rigs.iter().map(|s| s.schedule_failures).sum::<u64>(),
        c.sim.iter().map(|s| s.fired).collect::<Vec<_>>(),
        c.sim.iter().map(|s| s.due_width_ms).collect::<Vec<_>>()
    );
    if c.rig.kill.is_some() {
        md += &format!(
            "The kill landed {:?} ms after the instant on the rig, {:?} ms in the sim.\n\n",
            rigs.iter()
                .map(|s| s.kill.as_ref().map_or(0.0, |k| k.after_due_ms))
                .collect::<Vec<_>>(),
            c.sim
                .iter()
                .map(|s| s.kill.as_ref().map_or(0.0, |k| k.after_due_ms))
                .collect::<Vec<_>>()
        );
    }
    if rigs.iter().chain(&c.sim).any(|s| s.unfired > 0) {
        md += &format!(
            "Still due at the {} s drain limit: rig {:?} by run, sim {:?} by seed (the naive drain's livelock; its drain and lateness rows count only what fired by the limit).\n\n",
            c.workload.drain_limit_s,
            rigs.iter().map(|s| s.unfired).collect::<Vec<_>>(),
            c.sim.iter().map(|s| s.unfired).collect::<Vec<_>>()
        );
    }
    let disk: Vec<f64> = rigs
        .iter()
        .filter_map(|s| s.disk_bytes_per_wal_byte)
        .collect();
    if !disk.is_empty() {
        md += &format!(
            "Rig disk bytes written per WAL byte over the seconds that fired, by run: {disk:?}.\n\n"
        );
    }
    let cpu: Vec<String> = rigs
        .iter()
        .filter_map(|s| s.cpu_while_firing.as_ref())
        .map(|c| {
            format!(
                "{} and {} over {} s",
                c.server_cores,
                c.other_cores(),
                c.seconds
            )
        })
        .collect();
    if !cpu.is_empty() {
        md += &format!(
            "Rig cores busy from the first fire to the last, the server's and everything else's (brokers, load), by run: {}.\n\n",
            cpu.join("; ")
        );
    }
    md += "| metric | sim | rig | rig min-max | sim/rig | tolerance | |\n|---|---:|---:|---:|---:|---:|---|\n";
    for r in &c.rows {
        md += &format!(
            "| {} | {} | {} | {} | {} | ±{:.0}% | {} |\n",
            r.metric,
            r.sim,
            r.rig,
            r.rig_range.map_or_else(
                || "–".to_owned(),
                |(lo, hi)| format!("{} – {}", round1(lo), round1(hi))
            ),
            if r.rig == 0.0 && r.sim != 0.0 {
                "n/a".to_owned()
            } else {
                r.ratio.to_string()
            },
            r.tolerance * 100.0,
            if r.within { "within" } else { "**outside**" }
        );
    }
    let plot = format!("{}-fired.svg", c.name);
    LineChart {
        title: &format!("{}: timers fired per second", c.name),
        x_label: "seconds since the start of the run",
        y_label: "timers fired per second",
    }
    .write_svg(
        &dir.join(&plot),
        &[
            ("rig".into(), c.rig.fired_by_second.clone()),
            (
                format!("sim, seed {}", SEEDS[0]),
                c.sim
                    .first()
                    .map(|s| s.fired_by_second.clone())
                    .unwrap_or_default(),
            ),
        ],
    )
    .map_err(|e| Error::Message(format!("cannot draw {plot}: {e}")))?;
    md += &format!("\n![{}]({plot})\n\n", c.name);
    Ok(md)
}

/// Reads DIR/agreement.json.
fn load(dir: &Path) -> Result<Agreement, Error> {
    let text =
        std::fs::read_to_string(dir.join("agreement.json")).map_err(|source| Error::Read {
            path: dir.join("agreement.json"),
            source,
        })?;
    serde_json::from_str(&text)
        .map_err(|e| Error::Message(format!("{}: not an agreement report: {e}", dir.display())))
}

/// `--check`: the simulation side again, on `model`, against the stored rig numbers. Returns
/// the rows that agreed in the stored run and no longer do.
pub fn check(dir: &Path, model: &Model) -> Result<Vec<String>, Error> {
    let stored = load(dir)?;
    let costs = model.costs;
    let mut broken = Vec::new();
    for case in &stored.cases {
        let sim = simulate(
            &pinned(&case.workload, &stored.defaults),
            costs,
            case.rig_sides(),
        )?;
        for (now, then) in rows(&case.name, case.rig_sides(), &sim)
            .iter()
            .zip(&case.rows)
        {
            println!(
                "{}: {}: sim {} (stored {}), rig {}{}",
                case.name,
                now.metric,
                now.sim,
                then.sim,
                now.rig,
                if now.within { "" } else { ", outside" }
            );
            if then.within && !now.within {
                broken.push(format!("{}: {}", case.name, now.metric));
            }
        }
    }
    Ok(broken)
}

/// `--resim`: reruns the simulation side of the stored report at this commit, on `model`, and
/// rewrites the report; the rig side is kept as measured. Refuses a report whose cases'
/// workloads are no longer the ones this build would run.
pub fn resim(dir: &Path, commit: &str, model: &Model) -> Result<Agreement, Error> {
    let mut a = load(dir)?;
    let current = cases();
    let costs = model.costs;
    for case in &mut a.cases {
        let now = current
            .iter()
            .find(|c| c.name == case.name)
            .ok_or_else(|| {
                Error::Message(format!(
                    "{}: the case {} no longer exists",
                    dir.display(),
                    case.name
                ))
            })?;
        if now.workload != case.workload {
            return Err(Error::Message(format!(
                "{}: the case {} runs another workload now; its rig side must be measured again (soak agreement)",
                dir.display(),
                case.name
            )));
        }
        eprintln!("soak: agreement --resim: {}", case.name);
        case.sim = simulate(
            &pinned(&case.workload, &a.defaults),
            costs,
            case.rig_sides(),
        )?;
        case.rows = rows(&case.name, case.rig_sides(), &case.sim);
    }
    let (verdicts, edges) = verdicts(&a.cases);
    a.verdicts = verdicts;
    a.naive_clean_lease_ms = edges;
    a.calibration = model.name.clone();
    a.sim_commit = Some(commit.to_owned());
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_naive_drain_may_leave_timers_due_at_the_limit_and_nothing_excuses_a_duplicate() {
        let shipped = cases()
            .into_iter()
            .find(|c| c.name == "livelock-take")
            .unwrap();
        let naive = cases()
            .into_iter()
            .find(|c| c.name == "livelock-naive-500ms")
            .unwrap();
        let clean = Delivered {
            duplicates: 0,
            never_fired: 0,
            fired_early: 0,
        };
        let stuck = Delivered {
            never_fired: 2_410,
            ..clean
        };
        assert_eq!(delivery(&shipped.workload, clean), Ok(None));
        assert_eq!(delivery(&naive.workload, clean), Ok(None));
        let note = delivery(&naive.workload, stuck).unwrap().unwrap();
        assert!(
            note.starts_with("2410 timers still due at the 60 s"),
            "{note}"
        );
        assert!(delivery(&shipped.workload, stuck).is_err());
        for broken in [
            Delivered {
                duplicates: 1,
                ..clean
            },
            Delivered {
                fired_early: 1,
                ..clean
            },
            Delivered {
                duplicates: 1,
                ..stuck
            },
        ] {
            assert!(delivery(&naive.workload, broken).is_err(), "{broken:?}");
            assert!(delivery(&shipped.workload, broken).is_err(), "{broken:?}");
        }
    }

    #[test]
    fn every_case_runs_in_the_sim_what_it_runs_on_the_rig() {
        let costs = calibration::builtin().costs;
        for case in cases() {
            let w = &case.workload;
            let s = spec(w, 1, costs, None);
            assert_eq!(s.brokers, w.brokers, "{}", case.name);
            assert_eq!(s.safety_ms, w.seconds * 1000, "{}", case.name);
            assert_eq!(s.knobs, w.knobs, "{}", case.name);
            assert_eq!(s.naive_drain, w.naive_claim_then_fire, "{}", case.name);
            assert_eq!(
                s.floor_after_empty_claim, w.naive_floor_after_empty_claim,
                "{}",
                case.name
            );
            let timers: u64 = match (&s.timers, s.bursts.as_slice()) {
                (None, [b]) => {
                    assert_eq!(b.delay_ms, w.timer_delay_ms.0, "{}", case.name);
                    u64::from(b.count)
                }
                (Some(t), []) => u64::from(t.per_s) * w.seconds,
                other => panic!("{}: timers {other:?}", case.name),
            };
            let rig_timers = match w.burst_every_s {
                Some(every) => u64::from(w.timers_per_s) * every,
                None => u64::from(w.timers_per_s) * w.seconds,
            };
            assert_eq!(timers, rig_timers, "{}", case.name);
            let pushes = s.pushes.as_ref().map_or(0, |p| p.pushers * p.per_s_each);
            assert_eq!(pushes, w.pushers * w.pushes_per_s_each, "{}", case.name);
            let crashes = s
                .faults
                .iter()
                .filter(|f| matches!(f.kind, FaultKind::Crash { broker: 1 }))
                .count();
            assert_eq!(
                crashes,
                usize::from(w.kill_one_at_s.is_some()),
                "{}",
                case.name
            );
            assert!(
                !case.name.starts_with("crash") || w.broker_processes,
                "{}: only a process can be killed",
                case.name
            );
        }
    }

    #[test]
    fn only_picks_cases_by_name_and_refuses_an_unknown_one() {
        let names = |only: &[&str]| -> Result<Vec<String>, Error> {
            let only: Vec<String> = only.iter().map(|s| (*s).to_owned()).collect();
            Ok(selected(cases(), &only)?
                .into_iter()
                .map(|c| c.name)
                .collect())
        };
        assert_eq!(names(&[]).expect("all").len(), cases().len());
        assert_eq!(
            names(&["crash-take", "steady"]).expect("two"),
            ["steady", "crash-take"]
        );
        let err = names(&["steady", "stedy"]).expect_err("a typo");
        assert!(err.to_string().contains("no case named stedy"), "{err}");
    }

    #[test]
    fn each_seed_crashes_at_another_phase_of_the_claim_fire_cycle() {
        let costs = calibration::builtin().costs;
        let w = crash(0);
        let at = |seed| spec(&w, seed, costs, None).faults[0].at_ms;
        assert_eq!(at(1), 1_000 + 11_000);
        assert_eq!((at(2) - at(1), at(3) - at(1)), (20, 40));
        // At the rig's kill, 333 ms after the burst's instant (1 s + 10.5 s in the sim).
        let at_rig = |seed| spec(&w, seed, costs, Some(333.4)).faults[0].at_ms;
        assert_eq!(at_rig(1), 1_000 + 10_500 + 333);
        assert_eq!((at_rig(2) - at_rig(1), at_rig(3) - at_rig(1)), (20, 40));
    }

    #[test]
    fn a_stored_run_is_simulated_with_the_defaults_it_ran_with() {
        let w = Workload::quiet("q", 1).knob("QUEEN_SWEEPER_LEASE_MS", 4_000);
        let mut then = current_defaults();
        then.insert(
            "QUEEN_SWEEPER_MIN_SLEEP_MS".into(),
            knob::MIN_SLEEP_MS.default + 4,
        );
        then.insert("QUEEN_SWEEPER_LEASE_MS".into(), 9_000);
        let p = pinned(&w, &then);
        let knobs: Vec<(&str, u64)> = p.knobs.iter().collect();
        assert!(knobs.contains(&("QUEEN_SWEEPER_MIN_SLEEP_MS", knob::MIN_SLEEP_MS.default + 4)));
        // A knob the case sets is the case's; a default unchanged is not written.
        assert!(knobs.contains(&("QUEEN_SWEEPER_LEASE_MS", 4_000)));
        assert_eq!(knobs.len(), 2, "{knobs:?}");
        assert_eq!(pinned(&w, &Default::default()), w);
        // A run from before the bulk lane (its defaults do not name the knob) ran without it.
        then.remove("QUEEN_SWEEPER_BULK_BATCH");
        let p = pinned(&w, &then);
        assert!(
            p.knobs
                .iter()
                .any(|kv| kv == ("QUEEN_SWEEPER_BULK_BATCH", 0)),
            "{:?}",
            p.knobs
        );
    }

    /// What `resim` answers for a report holding one case, `name`, measured with `workload`.
    fn resim_of(name: &str, workload: Workload) -> Result<Agreement, Error> {
        let dir = std::env::temp_dir().join(format!("queen-resim-{}-{name}", std::process::id()));
        let stored = Agreement {
            measured_on: "2026-12-05".into(),
            commit: "abc1234".into(),
            rig: "rig".into(),
            calibration: "cal".into(),
            sim_commit: None,
            defaults: Default::default(),
            cases: vec![CaseResult {
                name: name.into(),
                what: name.into(),
                workload,
                rig: side(0, 0.0),
                rig_reps: Vec::new(),
                sim: Vec::new(),
                rows: Vec::new(),
            }],
            verdicts: Vec::new(),
            naive_clean_lease_ms: (None, None),
        };
        crate::report::write_json(&dir, "agreement.json", &stored).expect("written");
        let answer = resim(&dir, "def5678", &Model::builtin());
        let _ = std::fs::remove_dir_all(&dir);
        answer
    }

    #[test]
    fn resim_refuses_a_case_whose_workload_is_no_longer_the_one_measured() {
        let mut workload = steady();
        workload.timers_per_s += 1;
        let refused = resim_of("steady", workload).expect_err("a changed workload is refused");
        assert!(
            refused.to_string().contains("runs another workload now"),
            "{refused}"
        );
        let refused = resim_of("gone", steady()).expect_err("an unknown case is refused");
        assert!(
            refused.to_string().contains("no longer exists"),
            "{refused}"
        );
    }

    #[test]
    fn verdicts_are_strict_at_their_edges() {
        let lease = CRASH_LEASE_MS as f64;
        let cases = vec![
            case("spin-floor", side(0, 40.0), side(0, 41.0)),
            case("spin-band", side(0, 20.0), side(0, 20.0)),
            case(
                "crash-take",
                killed(1, 1.0, lease - 1.0),
                killed(1, 1.0, lease),
            ),
            case(
                "crash-leased",
                killed(1, 1.0, lease / 2.0 - 1.0),
                killed(1, 1.0, lease / 2.0),
            ),
        ];
        let (verdicts, _) = verdicts(&cases);
        let of = |text: &str| verdict_on(&verdicts, text);
        assert_eq!(
            of("twice as often"),
            (true, false),
            "exactly twice is not more"
        );
        assert_eq!(
            of("take path"),
            (false, true),
            "at the lease is not before it"
        );
        assert_eq!(of("leased path"), (true, false), "half a lease counts");
        // The other side at the lease.
        let cases = vec![case(
            "crash-take",
            killed(1, 1.0, lease),
            killed(1, 1.0, lease - 1.0),
        )];
        let (other_side, _) = super::verdicts(&cases);
        assert_eq!(verdict_on(&other_side, "take path"), (true, false));
    }

    #[test]
    fn a_row_is_within_its_tolerance_of_the_rig_and_zero_agrees_only_with_zero() {
        assert!(Row::new("x", 125.0, 100.0, 0.25).within);
        assert!(!Row::new("x", 126.0, 100.0, 0.25).within);
        assert!(Row::new("x", 75.0, 100.0, 0.25).within);
        assert!(!Row::new("x", 74.0, 100.0, 0.25).within);
        assert!(Row::new("x", 0.0, 0.0, 0.5).within);
        assert!(!Row::new("x", 1.0, 0.0, 0.5).within);
        assert!(!Row::new("x", 0.0, 3.0, 0.5).within);
        assert_eq!(Row::new("x", 150.0, 100.0, 0.5).ratio, 1.5);
    }

    fn side(stale: u64, polling: f64) -> Side {
        Side {
            fired: 1,
            drain_per_s: 1.0,
            lateness_ms: Spread::default(),
            stale_segments: stale,
            polling_per_s_per_broker: polling,
            due_width_ms: 0.0,
            schedule_failures: 0,
            fired_by_second: Vec::new(),
            kill: None,
            cpu_while_firing: None,
            disk_bytes_per_wal_byte: None,
            unfired: 0,
        }
    }

    fn case(name: &str, rig: Side, sim: Side) -> CaseResult {
        CaseResult {
            name: name.into(),
            what: String::new(),
            workload: Workload::quiet(name, 1),
            rig,
            rig_reps: Vec::new(),
            sim: vec![sim.clone(), sim.clone(), sim],
            rows: Vec::new(),
        }
    }

    #[test]
    fn the_rig_s_rows_are_medians_of_its_runs_with_their_range_and_a_verdict_reads_every_run() {
        let run = |drain: f64, stale: u64| Side {
            drain_per_s: drain,
            ..side(stale, 1.0)
        };
        let reps = vec![run(9_000.0, 0), run(6_000.0, 4), run(7_000.0, 56)];
        assert_eq!(median_rep(&reps).map(|s| s.drain_per_s), Some(7_000.0));
        let r = rows("livelock-take", &reps, &[run(7_500.0, 0)]);
        let drain = r
            .iter()
            .find(|r| r.metric.starts_with("drain"))
            .expect("drain row");
        assert_eq!(
            (drain.rig, drain.rig_range),
            (7_000.0, Some((6_000.0, 9_000.0)))
        );
        assert!(drain.within, "7 500 is within 25% of the median 7 000");
        let stale = r
            .iter()
            .find(|r| r.metric == "stale segments")
            .expect("stale row");
        assert_eq!((stale.rig, stale.rig_range), (4.0, Some((0.0, 56.0))));
        // One run: no range.
        let one = rows("livelock-take", &reps[..1], &[run(7_500.0, 0)]);
        assert!(one.iter().all(|r| r.rig_range.is_none()));

        // A stranded claim in any rig run decides the leased crash verdict on the rig side.
        let mut c = case(
            "crash-leased",
            killed(10, 5.0, 900.0),
            killed(10, 5.0, 3_000.0),
        );
        c.rig_reps = vec![
            killed(10, 5.0, 900.0),
            killed(10, 5.0, 3_990.0),
            killed(10, 5.0, 1_100.0),
        ];
        let (any_run, _) = verdicts(&[c.clone()]);
        assert_eq!(
            verdict_on(&any_run, "leaves them for the lease"),
            (true, true)
        );
        c.rig_reps.truncate(1);
        let (one_run, _) = verdicts(&[c]);
        assert_eq!(
            verdict_on(&one_run, "leaves them for the lease"),
            (true, false)
        );
    }

    #[test]
    fn verdicts_are_decided_on_each_side_and_the_lease_edge_is_the_first_clean_lease() {
        let cases = vec![
            case("livelock-naive-500ms", side(7, 0.0), side(9, 0.0)),
            case("livelock-naive-2000ms", side(0, 0.0), side(2, 0.0)),
            case("livelock-naive-8000ms", side(0, 0.0), side(0, 0.0)),
            case("livelock-take", side(0, 0.0), side(0, 0.0)),
            case("livelock-leased", side(1, 0.0), side(0, 0.0)),
            case("spin-floor", side(0, 30.0), side(0, 90.0)),
            case("spin-band", side(0, 20.0), side(0, 10.0)),
        ];
        let (verdicts, edge) = verdicts(&cases);
        let of = |text: &str| verdict_on(&verdicts, text);
        assert_eq!(of("naive drain goes stale"), (true, false));
        assert_eq!(of("take drain"), (true, true));
        assert_eq!(of("leased drain"), (true, false));
        assert_eq!(of("twice as often"), (true, false));
        assert_eq!(edge, (Some(8_000), Some(2_000)));
    }

    /// (sim, rig) of the verdict whose expectation contains `text`.
    fn verdict_on(verdicts: &[Verdict], text: &str) -> (bool, bool) {
        let v = verdicts
            .iter()
            .find(|v| v.expectation.contains(text))
            .unwrap_or_else(|| panic!("no verdict on {text}"));
        (v.sim, v.rig)
    }

    fn killed(overdue: u64, p50: f64, last: f64) -> Side {
        let mut s = side(0, 0.0);
        s.kill = Some(KillSide {
            after_due_ms: 1000.0,
            overdue,
            lateness_ms: Spread {
                p50,
                p99: 2.0 * p50,
                ..Spread::default()
            },
            last_fired_after_ms: last,
        });
        s
    }

    #[test]
    fn a_crash_case_compares_the_timers_the_kill_delayed_and_its_verdicts_read_the_last_fire() {
        let rig = killed(200, 1000.0, 3_000.0);
        let r = rows(
            "crash-leased",
            std::slice::from_ref(&rig),
            &vec![killed(250, 1300.0, 4_400.0); 3],
        );
        let named: Vec<(&str, bool)> = r.iter().map(|r| (r.metric.as_str(), r.within)).collect();
        assert_eq!(
            named,
            [
                ("timers due before the kill, fired after it", true),
                ("their lateness p50, ms", false),
                ("their lateness p99, ms", true),
                ("the last of them, ms after the kill", true),
            ]
        );
        let cases = vec![
            case(
                "crash-take",
                killed(10, 5.0, 300.0),
                killed(10, 5.0, 4_500.0),
            ),
            case(
                "crash-leased",
                killed(10, 5.0, 1_900.0),
                killed(10, 5.0, 2_100.0),
            ),
        ];
        let (verdicts, _) = verdicts(&cases);
        let of = |text: &str| verdict_on(&verdicts, text);
        assert_eq!(of("take path"), (false, true));
        assert_eq!(of("leased path"), (true, false));
    }
}
