//! One experiment per setting the seed lists as unmeasured. Each measures both sides of its
//! setting's trade-off (the symptom a small value shows and the one a large value shows), every
//! point at least three times, and the default follows from the measurements by the decision
//! rule written once in `sql/001_log_schema.sql` ([`decide`]). Every sweep includes the shipped
//! value, so a dated block is only ever written for a number that was measured.

use serde::{Deserialize, Serialize};

use crate::faults::TUNED_AUTOVACUUM;
use crate::rig::Rig;
use crate::run::{Autovacuum, IDEMPOTENCY_WINDOW, Keyed, Run, RunResult, Workload};
use queen_sweeper::knob;

/// A setting and what its sweep found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finding {
    /// The marker's name in `sql/` (`QUEEN_SWEEPER_LEASE_MS`, `log_timers fillfactor`, ...).
    pub setting: String,
    pub shipped: u64,
    /// The symptom the setting guards against (the first side's).
    pub symptom: String,
    /// The numbers, per side and value, in words.
    pub observed: String,
    /// The first side's edge: where its symptom appears or disappears.
    pub threshold: Option<u64>,
    /// Whether the shipped value is on the safe side of every side's symptom.
    pub shipped_ok: bool,
    /// The workload every point of the first side ran.
    pub load: String,
    /// The shipped value itself was measured (only then is a dated block written).
    pub measured_shipped: bool,
    /// The day (YYYY-MM-DD) and the rig this finding was measured on, stamped when its run
    /// ends; a finding kept from an earlier run by `--only` keeps its own.
    #[serde(default)]
    pub measured_on: String,
    #[serde(default)]
    pub rig: String,
    /// The commit the soak was built from (`(dirty)` when the tree differed); empty in findings
    /// written before 2026-12-05.
    #[serde(default)]
    pub commit: String,
    /// The first side's points; the run kept per point is the median repetition's.
    pub points: Vec<Point>,
    /// The setting's unit (`ms`, `rows`, `bytes`, `%`).
    #[serde(default)]
    pub unit: String,
    /// Runs per point.
    #[serde(default)]
    pub reps: u32,
    /// Every side of the trade-off, the first one first (empty before 2026-12-05).
    #[serde(default)]
    pub sides: Vec<Side>,
    /// The value the decision rule gives, or why it gives none.
    #[serde(default)]
    pub decision: Option<Decision>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    pub value: u64,
    /// The median over the repetitions.
    pub metric: f64,
    /// Every repetition's number, in run order.
    #[serde(default)]
    pub runs: Vec<f64>,
    pub result: Option<RunResult>,
}

impl Point {
    fn of(value: u64, runs: Vec<f64>, result: Option<RunResult>) -> Point {
        Point {
            value,
            metric: median(&runs),
            runs,
            result,
        }
    }

    /// The smallest and the largest repetition (the median when there are none).
    pub fn range(&self) -> (f64, f64) {
        if self.runs.is_empty() {
            return (self.metric, self.metric);
        }
        let lo = self.runs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = self.runs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    }

    fn overlaps(&self, other: &Point) -> bool {
        let (a, b) = (self.range(), other.range());
        a.0 <= b.1 && b.0 <= a.1
    }
}

fn median(runs: &[f64]) -> f64 {
    let mut sorted = runs.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Where a side's symptom lies relative to its edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Toward {
    /// Small values show the symptom: the edge is the smallest safe value.
    Below,
    /// Large values show it: the edge is the largest safe value.
    Above,
    /// No edge is sought (a cost that only has to stay acceptable at the shipped value).
    Nowhere,
}

/// When a point is safe, read off the medians of a side.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Criterion {
    /// The symptom is any count above zero (stale segments, failed calls).
    Zero,
    /// Under this number (growth of expired rows, rows/s).
    Under(f64),
    /// A rate at least this share of the best median of the sweep.
    NearBest(f64),
    /// A cost at most this many times the smallest median of the sweep.
    NearLeast(f64),
    /// At most this many times the median of value 0 (the run without a sweeper).
    VsBaseline(f64),
    /// At most this many times the median of the smallest value above 0: the cost of doing the
    /// work at all in the smallest measured steps, against which a bigger step's added cost is
    /// judged. Value 0 (the run without a sweeper) is shown for reference and never safe.
    VsSmallestStep(f64),
    /// At most this share of the smallest value's median, and not the smallest value itself
    /// (the floor that spins).
    UnderFloor(f64),
    /// At most the value itself times the factor, plus the slack: a lateness the setting is
    /// meant to bound (the sleep ceiling, the lease), or a span the value must cover (a retry
    /// horizon under a key's window).
    WithinValue { factor: f64, slack: f64 },
    /// Recorded for the block, never judged: a cost an operator sizes for (a table's bytes),
    /// with no symptom of its own on this rig.
    Recorded,
}

impl Criterion {
    /// Per point (in value order): whether its median is safe.
    pub fn safe(self, points: &[Point]) -> Vec<bool> {
        let medians = || points.iter().map(|p| p.metric);
        let best = medians().fold(f64::NEG_INFINITY, f64::max);
        let least = medians().fold(f64::INFINITY, f64::min);
        let smallest = points.iter().min_by_key(|p| p.value);
        points
            .iter()
            .map(|p| match self {
                Criterion::Zero => p.metric == 0.0,
                Criterion::Under(limit) => p.metric < limit,
                Criterion::NearBest(share) => p.metric >= best * share,
                Criterion::NearLeast(factor) => p.metric <= least.max(1e-9) * factor,
                Criterion::VsBaseline(factor) => {
                    let baseline = points
                        .iter()
                        .find(|b| b.value == 0)
                        .map_or(0.0, |b| b.metric)
                        .max(0.1);
                    p.value > 0 && p.metric <= baseline * factor
                }
                Criterion::VsSmallestStep(factor) => {
                    let step = points
                        .iter()
                        .filter(|b| b.value > 0)
                        .min_by_key(|b| b.value)
                        .map_or(0.0, |b| b.metric)
                        .max(0.1);
                    p.value > 0 && p.metric <= step * factor
                }
                Criterion::UnderFloor(share) => smallest
                    .is_some_and(|floor| p.value > floor.value && p.metric <= floor.metric * share),
                Criterion::WithinValue { factor, slack } => {
                    p.metric <= p.value as f64 * factor + slack
                }
                Criterion::Recorded => true,
            })
            .collect()
    }

    /// The criterion in words, for the report and the block.
    pub fn words(self) -> String {
        match self {
            Criterion::Zero => "safe at 0".to_owned(),
            Criterion::Under(limit) => format!("safe under {limit}"),
            Criterion::NearBest(share) => {
                format!("safe within {:.0}% of the best", (1.0 - share) * 100.0)
            }
            Criterion::NearLeast(factor) => format!("safe within {factor}× of the least"),
            Criterion::VsBaseline(factor) => {
                format!("safe within {factor}× of the run without a sweeper")
            }
            Criterion::VsSmallestStep(factor) => {
                format!("safe within {factor}× of the smallest value above 0")
            }
            Criterion::UnderFloor(share) => {
                format!("safe at most {:.0}% of the smallest value's", share * 100.0)
            }
            Criterion::WithinValue { factor, slack } => {
                format!("safe within {factor}× the value + {slack}")
            }
            Criterion::Recorded => "recorded, not judged".to_owned(),
        }
    }
}

/// What one side of a sweep measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Side {
    /// What is measured, with its unit.
    pub metric_name: String,
    pub symptom: String,
    pub symptom_at: Toward,
    pub criterion: Criterion,
    /// The workload of this side's runs.
    pub load: String,
    /// Per value: the repetitions (no runs kept; the first side's are in the finding).
    pub points: Vec<Point>,
    /// Per point: safe by the criterion.
    pub safe: Vec<bool>,
    pub edge: Option<u64>,
    /// The edge's range clears its neighbour's on the symptom side: a measured edge, not noise.
    pub edge_resolved: bool,
    /// Non-monotonic runs of medians, an edge the sweep did not bracket, and the like.
    pub flags: Vec<String>,
}

impl Side {
    /// Whether `value` was measured here and found safe (None: not measured).
    pub fn safe_at(&self, value: u64) -> Option<bool> {
        self.points
            .iter()
            .position(|p| p.value == value)
            .map(|i| self.safe[i])
    }

    /// The side in words: its metric per value (median and range), its edge and flags.
    pub fn words(&self) -> String {
        let values = self
            .points
            .iter()
            .map(|p| {
                let (lo, hi) = p.range();
                if p.runs.len() > 1 {
                    format!(
                        "{}: {} [{}–{}]",
                        p.value,
                        round(p.metric),
                        round(lo),
                        round(hi)
                    )
                } else {
                    format!("{}: {}", p.value, round(p.metric))
                }
            })
            .collect::<Vec<_>>()
            .join("; ");
        let edge = match (self.edge, self.symptom_at) {
            (_, Toward::Nowhere) => String::new(),
            (Some(e), _) if self.edge_resolved => format!(" Edge {e}."),
            (Some(e), _) => format!(
                " Edge {e}, not resolved (its range overlaps the next point's, or nothing beyond it showed the symptom)."
            ),
            (None, _) => " No value was safe.".to_owned(),
        };
        let flags = if self.flags.is_empty() {
            String::new()
        } else {
            format!(" FLAGGED: {}.", self.flags.join("; "))
        };
        format!(
            "{} ({}), median [min–max] per value: {values}.{edge}{flags}",
            self.metric_name,
            self.criterion.words()
        )
    }
}

/// Recomputes the decision of every finding that carries its sides (after a change of the rule;
/// the measurements stay as they were). The usage rollup's finding is decided where it is
/// measured and is kept.
pub fn redecide(findings: &mut [Finding]) {
    for f in findings.iter_mut().filter(|f| f.setting != USAGE) {
        if f.sides.is_empty() {
            continue;
        }
        let values: Vec<u64> = f.points.iter().map(|p| p.value).collect();
        let setting = f.setting.clone();
        f.decision = Some(decide(f.shipped, &values, &f.sides, |v| {
            valid_default(&setting, v)
        }));
    }
}

/// The value the decision rule gives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// None: no measured value satisfies the rule (`reason` says which side refused).
    pub value: Option<u64>,
    pub reason: String,
}

/// One number read off a run.
type Metric = fn(&RunResult) -> f64;

/// The workload of a sweep (or of a side with its own) at a value.
type MakeWorkload = dyn Fn(u64) -> Workload;

/// One side of a sweep, as code.
struct SideSpec {
    symptom: &'static str,
    metric_name: &'static str,
    /// None: read off the first side's runs (the same workload measures both numbers), or off
    /// `runs_of_side`'s.
    workload: Option<Box<MakeWorkload>>,
    /// Without a workload of its own: the side (1-based) whose runs this side reads.
    runs_of_side: Option<usize>,
    /// The values this side runs (None: all of the sweep's).
    values: Option<Vec<u64>>,
    metric: Metric,
    criterion: Criterion,
    symptom_at: Toward,
}

/// A sweep: the values and the sides; the first side's workload is the sweep's.
struct Sweep {
    setting: &'static str,
    shipped: u64,
    unit: &'static str,
    values: Vec<u64>,
    workload: Box<MakeWorkload>,
    sides: Vec<SideSpec>,
}

/// Seconds each point of a sweep runs, and how many times.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    pub seconds: u64,
    pub reps: u32,
}

const LEASE: &str = "QUEEN_SWEEPER_LEASE_MS";
const STATEMENT_TIMEOUT: &str = "QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS";
const EMPTY_MIN: &str = "QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS";
const EMPTY_MAX: &str = "QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS";

fn p99(r: &RunResult) -> f64 {
    r.lateness_ms.p99
}

fn stream_p99(r: &RunResult) -> f64 {
    r.stream_lateness_ms.as_ref().map_or(0.0, |s| s.p99)
}

/// Seconds of load of the autovacuum sweep: the threshold's cycle (a vacuum every 5-65 s at
/// 500 fires/s) must fit in a run several times.
const AUTOVACUUM_SECONDS: u64 = 60;

/// The most dead rows `queen.log_timers` held in any sampled second of the run.
fn peak_dead_timer_rows(r: &RunResult) -> f64 {
    r.series
        .iter()
        .map(|s| s.timers_dead_rows)
        .max()
        .unwrap_or(0) as f64
}

fn push_p99(r: &RunResult) -> f64 {
    r.push_latency_ms.p99
}

fn schedule_p99(r: &RunResult) -> f64 {
    r.schedule_latency_ms.p99
}

/// How long a keyed call's outcome stayed unknown to its client, in seconds (a window's unit):
/// the longer of the longest retried call (first send to the answer of a retry) and the crash
/// to every broker's `/healthz` saying ready again (no retry is answered sooner, and whether a
/// call failed and was retried, or waited inside the broker, is a matter of timing: one crash in
/// six of the first trial failed no call). A call whose retries ran out counts as the whole
/// retry budget.
fn unknown_outcome_s(r: &RunResult) -> f64 {
    let ready_again = r.healthz.as_ref().and_then(|h| h.ready_again_after_ms);
    unknown_for_s(r.keyed.as_ref(), ready_again)
}

/// [`unknown_outcome_s`] of a run's keyed calls and its `/healthz` ready-again time (ms).
fn unknown_for_s(keyed: Option<&crate::run::KeyedCalls>, ready_again_ms: Option<f64>) -> f64 {
    let budget = crate::run::KEYED_RETRY_FOR.as_secs_f64() * 1000.0;
    let ms = match keyed {
        Some(k) if k.abandoned == 0 => k.longest_retry_ms.max(ready_again_ms.unwrap_or(0.0)),
        _ => budget,
    };
    (ms / 10.0).round() / 100.0
}

fn key_table_mib(r: &RunResult) -> f64 {
    r.keyed.as_ref().map_or(0.0, |k| {
        (k.table_bytes as f64 / 1_048_576.0 * 10.0).round() / 10.0
    })
}

fn probes_per_s(r: &RunResult) -> f64 {
    r.queries_per_s_per_broker
        .get("probe")
        .copied()
        .unwrap_or(0.0)
}

fn probe_claim_per_s(r: &RunResult) -> f64 {
    r.series.iter().map(|s| s.probe_claim_per_s).sum::<f64>() / r.series.len().max(1) as f64
}

/// The lateness of the latest timer due before the kill that fired after it: what the crash
/// cost (0: the kill found none, which the report's runs show).
fn crash_latest(r: &RunResult) -> f64 {
    r.kill.as_ref().map_or(0.0, |k| k.lateness_ms.max)
}

/// Read off the same runs as the first side.
fn same_runs(
    symptom: &'static str,
    metric_name: &'static str,
    metric: Metric,
    criterion: Criterion,
    symptom_at: Toward,
) -> SideSpec {
    SideSpec {
        symptom,
        metric_name,
        workload: None,
        runs_of_side: None,
        values: None,
        metric,
        criterion,
        symptom_at,
    }
}

/// A backlog of one tenant with a small tenant's stream beside it: the drain rate of the
/// backlog, and how late the small tenant's timers are behind it.
fn backlog_with_small_tenant(label: &str, s: u64) -> Workload {
    let mut w = Workload::quiet(label, s);
    w.brokers = 1;
    w.backlog = 40_000;
    (w.tenants, w.queues, w.partitions) = (1, 4, 8);
    w.timers_per_s = 20;
    w.timer_delay_ms = (0, 500);
    w.stream_tenant_offset = 1;
    w
}

/// The leased path (`QUEEN_SWEEPER_FIRE_TAKE=0`, the one that still takes a lease) at `lease`.
fn leased(w: Workload, lease: u64) -> Workload {
    w.knob(LEASE, lease)
        .knob(STATEMENT_TIMEOUT, (lease / 2).min(5_000))
        .knob("QUEEN_SWEEPER_FIRE_TAKE", 0)
}

fn sweeps(scale: Scale) -> Vec<Sweep> {
    let s = scale.seconds;
    vec![
        Sweep {
            setting: LEASE,
            shipped: knob::LEASE_MS.default,
            unit: "ms",
            values: vec![100, 200, 500, 2_000, 8_000, 10_000, 30_000],
            workload: Box::new(move |lease| {
                let mut w = Workload::quiet("lease", s);
                w.brokers = 3;
                w.backlog = 20_000;
                w.payload_bytes = 4_096;
                w.pushers = 4;
                w.pushes_per_s_each = 100;
                w.push_batch = 20;
                w.push_payload_bytes = 1_024;
                leased(w, lease)
            }),
            sides: vec![
                same_runs(
                    "on the leased path, a fire that outlives its lease under push load: segments come back stale or fires time out",
                    "stale segments + failed calls",
                    |r| (r.counters.stale_segments + r.counters.failures) as f64,
                    Criterion::Zero,
                    Toward::Below,
                ),
                SideSpec {
                    symptom: "a crashed broker's claimed timers wait out its lease",
                    metric_name: "lateness (ms) of the latest timer due before a SIGKILL mid-drain and fired after it",
                    workload: Some(Box::new(|lease| {
                        let mut w = Workload::quiet("lease crash", 15);
                        w.brokers = 3;
                        w.broker_processes = true;
                        // 12 000 timers of 8 KiB due 10.5 s in; broker 1 is killed at 11 s,
                        // mid-drain (the agreement's crash case; 7 500 drained in about 1.5 s
                        // here, and one kill in four found the broker between claims).
                        w.schedule_without_wake = true;
                        (w.tenants, w.queues, w.partitions) = (1, 1, 8);
                        w.timers_per_s = 800;
                        w.burst_every_s = Some(15);
                        w.timer_delay_ms = (10_500, 10_500);
                        w.payload_bytes = 8_192;
                        w.kill_one_at_s = Some(11);
                        w.drain_limit_s = lease / 1000 + 20;
                        leased(w, lease)
                    })),
                    runs_of_side: None,
                    values: Some(vec![2_000, 8_000, 10_000, 30_000]),
                    metric: crash_latest,
                    criterion: Criterion::WithinValue {
                        factor: 1.0,
                        slack: 5_000.0,
                    },
                    symptom_at: Toward::Above,
                },
            ],
        },
        Sweep {
            setting: "QUEEN_SWEEPER_CLAIM_BATCH",
            shipped: knob::CLAIM_BATCH.default,
            unit: "rows",
            values: vec![50, 200, 800, 2_000, 5_000],
            workload: Box::new(move |batch| {
                backlog_with_small_tenant("claim batch", s).knob("QUEEN_SWEEPER_CLAIM_BATCH", batch)
            }),
            sides: vec![
                same_runs(
                    "small claims pay a round trip for a few rows: a backlog drains slowly",
                    "drain rate of the backlog (timers/s, one broker)",
                    RunResult::backlog_fired_per_s,
                    Criterion::NearBest(0.9),
                    Toward::Below,
                ),
                same_runs(
                    "big claims make a small tenant's timers wait behind a big tenant's backlog",
                    "lateness p99 (ms) of a small tenant's 20 timers/s behind a 40 000-timer backlog",
                    stream_p99,
                    Criterion::NearLeast(2.0),
                    Toward::Above,
                ),
            ],
        },
        Sweep {
            setting: "QUEEN_SWEEPER_BULK_BATCH",
            shipped: knob::BULK_BATCH.default,
            unit: "rows",
            // 0 turns the bulk lane off: the pass's takes of CLAIM_BATCH rows alone.
            values: vec![0, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000],
            workload: Box::new(move |rows| {
                let mut w = backlog_with_small_tenant("bulk batch", s);
                // Pushes into the backlog's own partitions: a bulk take locks them while it runs.
                w.pushers = 4;
                w.pushes_per_s_each = 50;
                w.push_batch = 5;
                w.push_payload_bytes = 512;
                w.knob("QUEEN_SWEEPER_BULK_BATCH", rows)
            }),
            sides: vec![
                same_runs(
                    "without the bulk lane, or with small bulk takes, every take pays its fixed cost for a few rows: a backlog drains slowly",
                    "drain rate of the backlog (timers/s, one broker, CLAIM_BATCH 200)",
                    RunResult::backlog_fired_per_s,
                    Criterion::NearBest(0.9),
                    Toward::Below,
                ),
                same_runs(
                    "a big bulk take holds the locks of the backlog's partitions while pushes into them wait",
                    "push p99 (ms) into the backlog's partitions, 4 pushers × 50/s",
                    push_p99,
                    Criterion::NearLeast(2.0),
                    Toward::Above,
                ),
                same_runs(
                    "a big bulk take takes the server's time from the pass's small takes: a small tenant's timers wait",
                    "lateness p99 (ms) of a small tenant's 20 timers/s behind a 40 000-timer backlog",
                    stream_p99,
                    Criterion::NearLeast(2.0),
                    Toward::Above,
                ),
            ],
        },
        Sweep {
            setting: "QUEEN_SWEEPER_CYCLE_MAX_ROWS",
            shipped: knob::CYCLE_MAX_ROWS.default,
            unit: "rows",
            values: vec![200, 1_000, 5_000, 20_000, 60_000],
            workload: Box::new(move |rows| {
                backlog_with_small_tenant("cycle rows", s)
                    .knob(
                        "QUEEN_SWEEPER_CLAIM_BATCH",
                        rows.min(knob::CLAIM_BATCH.default),
                    )
                    .knob("QUEEN_SWEEPER_CYCLE_MAX_ROWS", rows)
            }),
            sides: vec![
                same_runs(
                    "a short pass re-probes and sleeps the floor between passes: a backlog drains slowly",
                    "drain rate of the backlog (timers/s, one broker)",
                    RunResult::backlog_fired_per_s,
                    Criterion::NearBest(0.9),
                    Toward::Below,
                ),
                same_runs(
                    "a long pass does not look up from the backlog: a small tenant's timers wait",
                    "lateness p99 (ms) of a small tenant's 20 timers/s behind a 40 000-timer backlog",
                    stream_p99,
                    Criterion::NearLeast(2.0),
                    Toward::Above,
                ),
            ],
        },
        Sweep {
            setting: "QUEEN_SWEEPER_MAX_FIRE_BYTES",
            shipped: knob::MAX_FIRE_BYTES.default,
            unit: "bytes",
            // The backlog, 1 000 payloads of 256 KiB (the API's largest), is 250 MiB: the bulk
            // lane's takes (BULK_BATCH rows) hold all of it, so every value here binds. Until
            // 2026-12-07 its payloads were 64 KiB of one repeated character (TOAST compressed
            // them; run at d7e48d1), and until the run after 084692f a push was timed from when
            // it was sent, so a pusher stalled 300 ms recorded one slow push and the stall
            // hardly reached the p99 (8 MiB read 46 ms and 64 MiB 6.5 ms while the seconds of
            // the drain read 165-338 ms; run at 084692f).
            values: vec![
                0,
                1024 * 1024,
                4 * 1024 * 1024,
                8 * 1024 * 1024,
                16 * 1024 * 1024,
                32 * 1024 * 1024,
                64 * 1024 * 1024,
            ],
            workload: Box::new(move |bytes| {
                let mut w = Workload::quiet("fire bytes", s);
                w.brokers = u32::from(bytes > 0);
                w.backlog = 1_000;
                w.payload_bytes = 256 * 1024;
                w.incompressible_payloads = true;
                w.partitions = 2;
                w.pushers = 4;
                w.pushes_per_s_each = 50;
                w.push_batch = 5;
                w.push_payload_bytes = 1_024;
                if bytes > 0 {
                    w.knob("QUEEN_SWEEPER_MAX_FIRE_BYTES", bytes)
                } else {
                    w
                }
            }),
            sides: vec![
                same_runs(
                    "one big fire transaction holds partition locks and the WAL while pushes wait: push p99 degrades",
                    "push p99 (ms, from each push's scheduled start) while a backlog of 256 KiB incompressible payloads fires; value 0 = no sweeper, shown, not judged",
                    push_p99,
                    Criterion::VsSmallestStep(2.0),
                    Toward::Above,
                ),
                same_runs(
                    "small fires pay a commit per few timers: a backlog of big payloads drains slowly",
                    "drain rate (timers/s) of the backlog of 256 KiB incompressible payloads",
                    RunResult::backlog_fired_per_s,
                    Criterion::NearBest(0.8),
                    Toward::Below,
                ),
            ],
        },
        Sweep {
            setting: "QUEEN_SWEEPER_MAX_SLEEP_MS",
            shipped: knob::MAX_SLEEP_MS.default,
            unit: "ms",
            values: vec![250, 1_000, 4_000],
            workload: Box::new(move |ceiling| {
                let mut w = Workload::quiet("sleep ceiling", s);
                w.brokers = 2;
                w.timers_per_s = 20;
                w.timer_delay_ms = (0, 3_000);
                w.schedule_without_wake = true;
                w.knob("QUEEN_SWEEPER_MAX_SLEEP_MS", ceiling)
            }),
            sides: vec![
                same_runs(
                    "a timer committed where no local wake reaches (another broker) waits up to the ceiling",
                    "lateness p99 (ms) of timers scheduled with no wake",
                    p99,
                    Criterion::WithinValue {
                        factor: 1.2,
                        slack: 0.0,
                    },
                    Toward::Nowhere,
                ),
                same_runs(
                    "a short ceiling probes an idle database for nothing",
                    "probes/s per broker at 20 timers/s",
                    probes_per_s,
                    Criterion::NearLeast(4.0),
                    Toward::Below,
                ),
            ],
        },
        Sweep {
            setting: EMPTY_MIN,
            shipped: knob::EMPTY_CLAIM_MIN_MS.default,
            unit: "ms",
            values: vec![5, 10, 15, 25, 100],
            workload: Box::new(move |low| {
                empty_claim_load("empty-claim band", s)
                    .knob(EMPTY_MIN, low)
                    .knob(EMPTY_MAX, (low * 8).max(low))
            }),
            sides: vec![
                same_runs(
                    "after an empty claim, coming back at once is a spin: the probe says work is due, the claim takes nothing, and the loop asks again while another transaction holds the rows",
                    "probe + claim calls/s, all brokers, with one due row held locked (the band's top at 8× its bottom)",
                    probe_claim_per_s,
                    Criterion::UnderFloor(0.5),
                    Toward::Below,
                ),
                same_runs(
                    "a long sleep after an empty claim leaves the next burst waiting",
                    "lateness p99 (ms) of the bursts",
                    p99,
                    Criterion::NearLeast(2.0),
                    Toward::Above,
                ),
            ],
        },
        Sweep {
            setting: EMPTY_MAX,
            shipped: knob::EMPTY_CLAIM_MAX_MS.default,
            unit: "ms",
            // 50, 100 and 400 added 2026-12-07: at 25/200/800 (run B, 5826b07) 25 spun and 200
            // made the bursts late, with nothing measured between them (decision: none).
            values: vec![25, 50, 100, 200, 400, 800],
            workload: Box::new(move |high| {
                empty_claim_load("empty-claim band top", s)
                    .knob(EMPTY_MIN, knob::EMPTY_CLAIM_MIN_MS.default)
                    .knob(EMPTY_MAX, high.max(knob::EMPTY_CLAIM_MIN_MS.default))
            }),
            sides: vec![
                same_runs(
                    "a narrow band keeps the brokers that found nothing in step: they probe and claim together",
                    "probe + claim calls/s, all brokers, with one due row held locked (the band's bottom at the shipped minimum)",
                    probe_claim_per_s,
                    Criterion::UnderFloor(0.5),
                    Toward::Below,
                ),
                same_runs(
                    "a wide band leaves the next burst waiting",
                    "lateness p99 (ms) of the bursts",
                    p99,
                    Criterion::NearLeast(2.0),
                    Toward::Above,
                ),
            ],
        },
        Sweep {
            setting: "QUEEN_SWEEPER_MIN_SLEEP_MS",
            shipped: knob::MIN_SLEEP_MS.default,
            unit: "ms",
            values: vec![1, 5, 50, 200],
            workload: Box::new(move |floor| {
                let mut w = Workload::quiet("floor", s);
                w.brokers = 1;
                w.backlog = 40_000;
                w.knob("QUEEN_SWEEPER_MIN_SLEEP_MS", floor)
                    .knob(EMPTY_MIN, floor.max(25))
            }),
            sides: vec![
                same_runs(
                    "a floor too long leaves due work waiting between passes",
                    "drain rate (timers/s, one broker, shipped pass budget)",
                    RunResult::backlog_fired_per_s,
                    Criterion::NearBest(0.9),
                    Toward::Above,
                ),
                SideSpec {
                    symptom: "a floor too short probes again at once after a pass that left work: under a steady stream, more probes for the same timers",
                    metric_name: "probes/s per broker, 3 brokers, 600 timers/s due within 0-200 ms",
                    workload: Some(Box::new(move |floor| {
                        let mut w = Workload::quiet("floor, probes", s);
                        w.brokers = 3;
                        w.timers_per_s = 600;
                        w.timer_delay_ms = (0, 200);
                        w.knob("QUEEN_SWEEPER_MIN_SLEEP_MS", floor)
                            .knob(EMPTY_MIN, floor.max(25))
                    })),
                    runs_of_side: None,
                    values: None,
                    metric: probes_per_s,
                    criterion: Criterion::NearLeast(2.0),
                    symptom_at: Toward::Below,
                },
            ],
        },
        Sweep {
            setting: "QUEEN_KV_EXPIRE_EVERY_MS",
            shipped: knob::KV_EXPIRE_EVERY_MS.default,
            unit: "ms",
            values: vec![250, 1_000, 4_000, 16_000],
            workload: Box::new(move |every| {
                kv_churn("prune cadence", s)
                    .knob("QUEEN_KV_EXPIRE_BATCH", 50)
                    .knob("QUEEN_KV_EXPIRE_EVERY_MS", every)
            }),
            sides: vec![
                same_runs(
                    "a prune slower than the expiry rate: expired-but-present rows grow without bound (reads stay correct; the heap grows for good)",
                    "growth of expired-not-pruned (rows/s, second half of the run), prune batch 50",
                    RunResult::expired_not_pruned_growth,
                    Criterion::Under(1.0),
                    Toward::Above,
                ),
                same_runs(
                    "a prune run too often takes the partitions' neighbours' time: pushes wait",
                    "push p99 (ms), 2 pushers × 50/s",
                    push_p99,
                    Criterion::NearLeast(2.0),
                    Toward::Below,
                ),
            ],
        },
        Sweep {
            setting: "QUEEN_KV_EXPIRE_BATCH",
            shipped: knob::KV_EXPIRE_BATCH.default,
            unit: "rows",
            values: vec![5, 50, 1_000, 10_000],
            workload: Box::new(move |batch| {
                kv_churn("prune batch", s).knob("QUEEN_KV_EXPIRE_BATCH", batch)
            }),
            sides: vec![
                same_runs(
                    "a prune budget smaller than the expiry rate: expired-but-present rows grow without bound",
                    "growth of expired-not-pruned (rows/s, second half of the run)",
                    RunResult::expired_not_pruned_growth,
                    Criterion::Under(1.0),
                    Toward::Below,
                ),
                same_runs(
                    "a big delete holds the WAL and the pages pushes need: push p99 degrades",
                    "push p99 (ms), 2 pushers × 50/s",
                    push_p99,
                    Criterion::NearLeast(2.0),
                    Toward::Above,
                ),
            ],
        },
        Sweep {
            setting: "log_timers fillfactor",
            shipped: 100,
            unit: "%",
            values: vec![100, 90, 70],
            workload: Box::new(move |fillfactor| {
                let mut w = Workload::quiet("fillfactor", s);
                w.brokers = 2;
                w.timers_per_s = 300;
                w.timer_delay_ms = (0, 2_000);
                w.fillfactor = Some(fillfactor as u32);
                w
            }),
            sides: vec![same_runs(
                "free space per page that claims cannot use: a claim rewrites visible_at, which is indexed, so it is never a HOT update",
                "log_timers heap + index bytes at the end",
                |r| (r.sizes_end.timers_bytes + r.sizes_end.timers_index_bytes) as f64,
                Criterion::NearLeast(1.25),
                Toward::Nowhere,
            )],
        },
        Sweep {
            setting: "log_timers autovacuum_vacuum_threshold",
            shipped: u64::from(TUNED_AUTOVACUUM.vacuum_threshold),
            unit: "dead rows",
            // With the launcher every 5 s, 500 fires/s leave 2 500 dead rows between two looks:
            // 500 and 2 000 vacuum at every look, 8 000 about every 16 s, 32 000 about once a
            // minute (so once or never in a run).
            values: vec![500, 2_000, 8_000, 32_000],
            workload: Box::new(move |threshold| {
                let mut w = Workload::quiet("autovacuum threshold", s.max(AUTOVACUUM_SECONDS));
                w.brokers = 3;
                w.timers_per_s = 500;
                w.timer_delay_ms = (0, 2_000);
                w.autovacuum = Some(Autovacuum {
                    vacuum_threshold: u32::try_from(threshold).unwrap_or(u32::MAX),
                    ..TUNED_AUTOVACUUM
                });
                w
            }),
            sides: vec![
                same_runs(
                    "dead timer rows pile up between vacuums, and the probe and the pick walk them",
                    "dead rows in queen.log_timers, the most in any second (500 timers/s, 3 brokers, autovacuum_naptime 5 s)",
                    peak_dead_timer_rows,
                    Criterion::NearLeast(2.0),
                    Toward::Above,
                ),
                same_runs(
                    "a vacuum run more often than the dead rows call for pays its fixed cost again: WAL and writes taken from the fire",
                    "WAL bytes/s of the run",
                    |r| r.wal_bytes_per_s,
                    Criterion::NearLeast(1.25),
                    Toward::Below,
                ),
                same_runs(
                    "what the fire's users see of either",
                    "lateness p99 (ms) of the timers",
                    p99,
                    Criterion::NearLeast(2.0),
                    Toward::Nowhere,
                ),
                same_runs(
                    "the table's size, which the dead rows hold",
                    "queen.log_timers heap + index bytes at the end",
                    |r| (r.sizes_end.timers_bytes + r.sizes_end.timers_index_bytes) as f64,
                    Criterion::Recorded,
                    Toward::Nowhere,
                ),
            ],
        },
        Sweep {
            setting: IDEMPOTENCY_WINDOW,
            shipped: api_default(IDEMPOTENCY_WINDOW),
            unit: "s",
            values: vec![1, 10, 60, 600, 3_600, 14_400],
            workload: Box::new(move |window| {
                // The crash of the faults suite, under keyed calls: a backlog written just before
                // (seconds of WAL to replay), the server crashed 2 s into its drain, every call
                // that fails retried with its key until it is answered.
                let mut w = keyed_calls("idempotency, crash", s.min(10), window, false);
                w.backlog = 100_000;
                (w.tenants, w.queues, w.partitions) = (1, 4, 8);
                w.crash_server_at_s = Some(2);
                w
            }),
            sides: vec![
                same_runs(
                    "a key that expires before its call's retry: a schedule whose reply was lost (its work committed) is scheduled again and fires twice",
                    "the longest a keyed call's outcome stayed unknown (s): a failed call's first send to its retry's answer, or the crash to /healthz ready again, whichever is longer; the server crashed under 100 keyed calls/s",
                    unknown_outcome_s,
                    Criterion::WithinValue {
                        factor: 1.0,
                        slack: 0.0,
                    },
                    Toward::Below,
                ),
                SideSpec {
                    symptom: "a long window keeps a key per call for the whole window: the table, and the schedule call that reads and trims it, grow",
                    metric_name: "keyed schedule p99 (ms), the key table holding a full window of 100 keyed calls/s",
                    workload: Some(Box::new(move |window| {
                        keyed_calls("idempotency, a full window", s, window, true)
                    })),
                    runs_of_side: None,
                    values: None,
                    metric: schedule_p99,
                    criterion: Criterion::NearLeast(2.0),
                    symptom_at: Toward::Above,
                },
                SideSpec {
                    symptom: "the key table's size, which the operator provisions",
                    metric_name: "queen.api_idempotency bytes at the end (MiB: heap, indexes, TOAST)",
                    workload: None,
                    runs_of_side: Some(2),
                    values: None,
                    metric: key_table_mib,
                    criterion: Criterion::Recorded,
                    symptom_at: Toward::Nowhere,
                },
            ],
        },
    ]
}

/// The default of an API knob, from the API's config.rs the soak was built with.
///
/// # Panics
/// When `var` has no readable `Knob` there (a test reads every one).
fn api_default(var: &str) -> u64 {
    match crate::blocks::api_knob(crate::blocks::API_CONFIG, var) {
        Some(knob) => knob.default,
        None => panic!("{var}: no Knob of that name in sweeper/broker/src/api/config.rs"),
    }
}

/// 500 timers/s due within 2 s, scheduled by 3 broker processes in 100 keyed calls/s of 5, under
/// the idempotency window `window` (seconds); `backfill`: the key table starts as a full window
/// of these calls leaves it.
fn keyed_calls(label: &str, s: u64, window: u64, backfill: bool) -> Workload {
    let mut w = Workload::quiet(label, s);
    w.brokers = 3;
    w.broker_processes = true;
    w.timers_per_s = 500;
    w.timer_delay_ms = (0, 2_000);
    w.drain_limit_s = 120;
    w.keyed = Some(Keyed {
        window_s: window,
        backfill,
    });
    w
}

/// 5 brokers, a burst of 300 timers every second, and one due row held locked: every probe
/// sees work and every claim finds none (the empty claim the band answers).
fn empty_claim_load(label: &str, s: u64) -> Workload {
    let mut w = Workload::quiet(label, s);
    w.brokers = 5;
    // Claims commit per batch here, so a burst is shared by every broker and an empty claim
    // needs a due row that someone else holds locked: without one, the first run of this sweep
    // (2026-12-02) found no spin (17.5 calls/s at 5 ms, 17.3 at 100 ms).
    w.hold_due_locked = 1;
    w.timers_per_s = 300;
    w.burst_every_s = Some(1);
    w.timer_delay_ms = (1_500, 1_500);
    w.payload_bytes = 8_192;
    w.pushers = 2;
    w.pushes_per_s_each = 50;
    w.push_batch = 20;
    w
}

/// One broker, 400 KV puts/s that expire within 100-300 ms, and pushes beside them.
fn kv_churn(label: &str, s: u64) -> Workload {
    let mut w = Workload::quiet(label, s);
    w.brokers = 1;
    w.kv_per_s = 400;
    w.kv_ttl_ms = (100, 300);
    w.kv_keys = 1_000_000;
    w.pushers = 2;
    w.pushes_per_s_each = 50;
    w.push_batch = 10;
    w
}

/// Runs every sweep (or those whose setting contains `only`), printing progress. Each finding
/// leaves stamped with the day (YYYY-MM-DD) and the rig it was measured on, so a later `--only`
/// run that keeps it cannot re-date it.
pub async fn run_all(
    run: &Run<'_>,
    scale: Scale,
    only: Option<&str>,
    (measured_on, rig): (&str, &Rig),
) -> Result<Vec<Finding>, String> {
    let mut findings = Vec::new();
    if only.is_none_or(|o| USAGE.contains(o)) {
        findings.push(usage_cost(run, scale.reps).await?);
    }
    let all = sweeps(scale);
    let names: Vec<&str> = std::iter::once(USAGE)
        .chain(all.iter().map(|s| s.setting))
        .collect();
    let sweeps: Vec<Sweep> = all
        .into_iter()
        .filter(|s| only.is_none_or(|o| s.setting.contains(o)))
        .collect();
    if let Some(o) = only
        && findings.is_empty()
        && sweeps.is_empty()
    {
        return Err(format!(
            "--only {o:?} matches no setting; the settings are: {}",
            names.join(", ")
        ));
    }
    let reps = scale.reps.max(1);
    let total: usize = sweeps.iter().map(|s| runs_of(s) * reps as usize).sum();
    let mut progress = Progress { done: 0, total };
    for sweep in sweeps {
        findings.push(run_sweep(run, &sweep, reps, &mut progress).await?);
    }
    let rig = rig.describe();
    let commit = crate::rig::source_commit();
    for f in &mut findings {
        f.measured_on = measured_on.to_owned();
        f.rig.clone_from(&rig);
        f.commit.clone_from(&commit);
    }
    Ok(findings)
}

/// Runs one repetition of a sweep takes.
fn runs_of(sweep: &Sweep) -> usize {
    sweep.values.len()
        + sweep
            .sides
            .iter()
            .filter(|side| side.workload.is_some())
            .map(|side| side.values.as_ref().map_or(sweep.values.len(), Vec::len))
            .sum::<usize>()
}

struct Progress {
    done: usize,
    total: usize,
}

/// Every run of one sweep, repetition by repetition (so a drift of the rig over the sweep falls
/// on every value alike), then its sides and the decision.
async fn run_sweep(
    run: &Run<'_>,
    sweep: &Sweep,
    reps: u32,
    progress: &mut Progress,
) -> Result<Finding, String> {
    // Per workload (0: the sweep's, then each side with its own): per value, the runs.
    let mut workloads: Vec<(&MakeWorkload, Vec<u64>)> =
        vec![(sweep.workload.as_ref(), sweep.values.clone())];
    for side in &sweep.sides {
        if let Some(w) = &side.workload {
            let values = side.values.clone().unwrap_or_else(|| sweep.values.clone());
            workloads.push((w.as_ref(), values));
        }
    }
    let mut results: Vec<Vec<Vec<RunResult>>> = workloads
        .iter()
        .map(|(_, values)| values.iter().map(|_| Vec::new()).collect())
        .collect();
    for rep in 0..reps {
        for (w, (workload, values)) in workloads.iter().enumerate() {
            for (i, &value) in values.iter().enumerate() {
                progress.done += 1;
                eprintln!(
                    "soak: experiment {} = {value}, workload {}, repetition {}/{reps} ({}/{})",
                    sweep.setting,
                    w + 1,
                    rep + 1,
                    progress.done,
                    progress.total
                );
                let mut workload = workload(value);
                workload.label = format!("{} = {value}", sweep.setting);
                let label = format!("exp_{}", progress.done);
                results[w][i].push(run.execute(&workload, &label).await?);
            }
        }
    }
    // Per side: the index of the workload whose runs it reads.
    let mut of_side: Vec<usize> = Vec::new();
    let mut own = 0;
    for spec in &sweep.sides {
        of_side.push(match (&spec.workload, spec.runs_of_side) {
            (Some(_), _) => {
                own += 1;
                own
            }
            (None, Some(side)) => of_side[side - 1],
            (None, None) => 0,
        });
    }
    let mut sides = Vec::new();
    for (spec, &w) in sweep.sides.iter().zip(&of_side) {
        let (workload, values) = &workloads[w];
        let points: Vec<Point> = values
            .iter()
            .zip(&results[w])
            .map(|(&value, runs)| Point::of(value, runs.iter().map(spec.metric).collect(), None))
            .collect();
        let load = load_without(sweep.setting, workload, values);
        sides.push(judge_side(spec, load, points));
    }
    // The first side's points keep the median repetition's run, for the over-time plots.
    let first = &sweep.sides[0];
    let points: Vec<Point> = sweep
        .values
        .iter()
        .zip(std::mem::take(&mut results[0]))
        .map(|(&value, runs)| {
            let metrics: Vec<f64> = runs.iter().map(first.metric).collect();
            let kept = median_index(&metrics).and_then(|i| runs.into_iter().nth(i));
            Point::of(value, metrics, kept)
        })
        .collect();
    Ok(finding(sweep, reps, points, sides))
}

/// A side's workload in words, without the swept setting's own value (a block's value may be
/// another than the one whose run is described).
fn load_without(setting: &str, workload: &dyn Fn(u64) -> Workload, values: &[u64]) -> String {
    let Some(&value) = values.first() else {
        return String::new();
    };
    let described = workload(value).describe();
    let swept = format!("{setting}={value}");
    described
        .split(", ")
        .map(|part| {
            part.split(' ')
                .filter(|word| *word != swept)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The index of the median of `values` (the lower one of an even count).
fn median_index(values: &[f64]) -> Option<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|a, b| values[*a].total_cmp(&values[*b]));
    order.get(values.len().saturating_sub(1) / 2).copied()
}

/// A side's safety per point, its edge, whether the edge is resolved, and its flags.
fn judge_side(spec: &SideSpec, load: String, points: Vec<Point>) -> Side {
    let safe = spec.criterion.safe(&points);
    let (edge, edge_resolved, mut flags) = edge_of(&points, &safe, spec.symptom_at);
    flags.extend(non_monotonic(&points));
    Side {
        metric_name: spec.metric_name.to_owned(),
        symptom: spec.symptom.to_owned(),
        symptom_at: spec.symptom_at,
        criterion: spec.criterion,
        load,
        points,
        safe,
        edge,
        edge_resolved,
        flags,
    }
}

/// The edge (the smallest safe value when the symptom lies below, the largest when above),
/// whether it is resolved (its range clears the neighbour's on the symptom side, and that
/// neighbour shows the symptom), and a flag when the sweep never showed the symptom.
fn edge_of(points: &[Point], safe: &[bool], toward: Toward) -> (Option<u64>, bool, Vec<String>) {
    let order: Vec<usize> = match toward {
        Toward::Nowhere => return (None, false, Vec::new()),
        Toward::Below => (0..points.len()).collect(),
        Toward::Above => (0..points.len()).rev().collect(),
    };
    // Walk from the symptom's side: the edge is the first safe point.
    let Some(at) = order.iter().position(|&i| safe[i]) else {
        return (None, false, Vec::new());
    };
    let edge = &points[order[at]];
    if at == 0 {
        return (
            Some(edge.value),
            false,
            vec![format!(
                "the symptom did not appear at {}, the sweep's end: the edge is there or beyond",
                edge.value
            )],
        );
    }
    let neighbour = &points[order[at - 1]];
    let mut flags = Vec::new();
    let resolved = !edge.overlaps(neighbour);
    if !resolved {
        flags.push(format!(
            "the edge {} overlaps its neighbour {} (ranges {:?} and {:?})",
            edge.value,
            neighbour.value,
            rounded(edge.range()),
            rounded(neighbour.range())
        ));
    }
    (Some(edge.value), resolved, flags)
}

fn rounded((a, b): (f64, f64)) -> (f64, f64) {
    ((a * 10.0).round() / 10.0, (b * 10.0).round() / 10.0)
}

/// A flag when the medians go up and then down (or down and then up) by more than the spread:
/// consecutive points whose ranges do not overlap count as a move.
fn non_monotonic(points: &[Point]) -> Option<String> {
    let moves: Vec<(usize, f64)> = points
        .windows(2)
        .enumerate()
        .filter(|(_, pair)| !pair[0].overlaps(&pair[1]))
        .map(|(i, pair)| (i, (pair[1].metric - pair[0].metric).signum()))
        .collect();
    let first = moves.first()?;
    let turn = moves.iter().find(|(_, sign)| *sign != first.1)?;
    let (a, b) = (&points[first.0], &points[first.0 + 1]);
    let (c, d) = (&points[turn.0], &points[turn.0 + 1]);
    Some(format!(
        "non-monotonic: {} → {} moves {} → {}, then {} → {} moves {} → {}",
        a.value,
        b.value,
        round(a.metric),
        round(b.metric),
        c.value,
        d.value,
        round(c.metric),
        round(d.metric)
    ))
}

/// Whether `value` may be the default of `setting` with every other knob at its default (a
/// setting that is not a knob of the sweeper's, such as a fillfactor, has no such constraint).
pub fn valid_default(setting: &str, value: u64) -> Result<(), String> {
    if let Some(api) = crate::blocks::api_knob(crate::blocks::API_CONFIG, setting) {
        return api.accepts(setting, value);
    }
    if !knob::ALL.iter().any(|k| k.var == setting) {
        return Ok(());
    }
    queen_sweeper::Config::from_vars([(setting.to_owned(), value.to_string())])
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn finding(sweep: &Sweep, reps: u32, points: Vec<Point>, sides: Vec<Side>) -> Finding {
    let decision = decide(sweep.shipped, &sweep.values, &sides, |v| {
        valid_default(sweep.setting, v)
    });
    let shipped_ok = sides.iter().all(|s| s.safe_at(sweep.shipped) == Some(true));
    let observed = sides
        .iter()
        .enumerate()
        .map(|(i, side)| format!("({}) {}", i + 1, side.words()))
        .collect::<Vec<_>>()
        .join(" ");
    Finding {
        setting: sweep.setting.to_owned(),
        shipped: sweep.shipped,
        symptom: sides
            .iter()
            .map(|s| s.symptom.as_str())
            .collect::<Vec<_>>()
            .join("; against it: "),
        observed,
        threshold: sides[0].edge,
        shipped_ok,
        load: sides[0].load.clone(),
        measured_shipped: sweep.values.contains(&sweep.shipped),
        measured_on: String::new(),
        rig: String::new(),
        commit: String::new(),
        points,
        unit: sweep.unit.to_owned(),
        reps,
        sides,
        decision: Some(decision),
    }
}

/// THE DECISION RULE (written out in `sql/001_log_schema.sql`; this is its only code).
///
/// 1. The first side names the symptom the setting exists for. Its edge is where the symptom
///    stops, read off the medians of at least three runs.
/// 2. The margin: when the edge is resolved (its min-max range clears the range of its neighbour
///    on the symptom side), the edge itself; otherwise one measured step further into the safe
///    side.
/// 3. Least change: the value in force stays when it lies at or beyond that point and every
///    side finds it safe (a default moves only when a measurement demands it). Otherwise, from
///    that point further into the safe side, the first measured value that every side measured
///    and found safe and that `valid` accepts (the other knobs' constraints). A first side with
///    no edge sought keeps the shipped value, if it is safe on every side.
/// 4. No such value: no decision, and the reason names the side that refused.
pub fn decide(
    shipped: u64,
    values: &[u64],
    sides: &[Side],
    valid: impl Fn(u64) -> Result<(), String>,
) -> Decision {
    let refuse = |reason: String| Decision {
        value: None,
        reason,
    };
    let Some(first) = sides.first() else {
        return refuse("no side was measured".to_owned());
    };
    let acceptable = |value: u64| -> Result<(), String> {
        for (i, side) in sides.iter().enumerate() {
            match side.safe_at(value) {
                Some(true) => {}
                Some(false) => {
                    return Err(format!(
                        "{value} shows side {}'s symptom ({})",
                        i + 1,
                        side.metric_name
                    ));
                }
                None => {
                    return Err(format!(
                        "side {} ({}) did not measure {value}",
                        i + 1,
                        side.metric_name
                    ));
                }
            }
        }
        valid(value)
    };
    let toward = first.symptom_at;
    let Some(edge) = first.edge.filter(|_| toward != Toward::Nowhere) else {
        if toward != Toward::Nowhere {
            return refuse(format!(
                "no measured value is safe on side 1 ({})",
                first.metric_name
            ));
        }
        return match acceptable(shipped) {
            Ok(()) => Decision {
                value: Some(shipped),
                reason: "no edge is sought on side 1; the shipped value is safe on every side"
                    .to_owned(),
            },
            Err(why) => refuse(why),
        };
    };
    let mut ordered: Vec<u64> = values.to_vec();
    ordered.sort_unstable();
    if toward == Toward::Above {
        ordered.reverse();
    }
    let Some(at) = ordered.iter().position(|v| *v == edge) else {
        return refuse(format!("the edge {edge} is not a value of the sweep"));
    };
    // The bound of what the knob accepts: no step beyond the edge can exist, so the edge is
    // the margin whether or not it is resolved.
    let beyond = match toward {
        Toward::Above => edge.checked_sub(1),
        _ => edge.checked_add(1),
    };
    let at_bound = at + 1 == ordered.len() && beyond.is_none_or(|b| valid(b).is_err());
    let start = if first.edge_resolved || at_bound {
        at
    } else {
        at + 1
    };
    let margin = if first.edge_resolved {
        format!("the edge {edge} is resolved")
    } else if at_bound {
        format!(
            "the edge {edge} is not resolved, but it is the bound of what the config accepts: nothing lies beyond it"
        )
    } else {
        format!("the edge {edge} is not resolved: one step beyond it")
    };
    // Least change: the value in force stays where the margin already puts it.
    if ordered
        .iter()
        .position(|v| *v == shipped)
        .is_some_and(|i| i >= start)
        && acceptable(shipped).is_ok()
    {
        return Decision {
            value: Some(shipped),
            reason: format!(
                "{margin}; the value in force lies beyond it and is safe on every side"
            ),
        };
    }
    let mut refusals = Vec::new();
    for &value in ordered.iter().skip(start) {
        match acceptable(value) {
            Ok(()) => {
                return Decision {
                    value: Some(value),
                    reason: if refusals.is_empty() {
                        margin
                    } else {
                        format!("{margin}; passed over: {}", refusals.join("; "))
                    },
                };
            }
            Err(why) => refusals.push(why),
        }
    }
    if refusals.is_empty() {
        refusals.push("the sweep measured nothing beyond it".to_owned());
    }
    refuse(format!("{margin}; {}", refusals.join("; ")))
}

fn round(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

const USAGE: &str = "QUEEN_KV_USAGE_EVERY_MS";
/// The rollup may use at most this share of one connection's time at its cadence.
const USAGE_DUTY: f64 = 0.01;

/// The usage rollup's cost tracks space, not work: one full rollup is timed over tables of
/// growing size (KV rows over 1 000 tenants, a fifth as many timers), `reps` times each; the
/// cadence at which the largest would use 1% of one connection follows, and the shipped
/// cadence's share of a connection is that rollup's time over it.
async fn usage_cost(run: &Run<'_>, reps: u32) -> Result<Finding, String> {
    let sizes = [10_000u64, 100_000, 400_000];
    let mut points = Vec::new();
    for (i, rows) in sizes.iter().enumerate() {
        let mut runs = Vec::new();
        for rep in 0..reps.max(1) {
            eprintln!(
                "soak: experiment {USAGE}: one rollup over {rows} KV rows, repetition {}/{reps}",
                rep + 1
            );
            runs.push(one_rollup_ms(run, *rows, &format!("usage_{i}_{rep}")).await?);
        }
        points.push(Point::of(*rows, runs, None));
    }
    let shipped = knob::KV_USAGE_EVERY_MS.default;
    let largest = points.last().map_or(0.0, |p| p.range().1);
    let cadence = (largest / USAGE_DUTY).ceil() as u64;
    let share = largest / shipped as f64;
    // A rollup is safe when the shipped cadence gives it at most 1% of one connection.
    let criterion = Criterion::Under(shipped as f64 * USAGE_DUTY);
    let side = Side {
        metric_name: "one full rollup's time (ms) by KV rows".to_owned(),
        symptom: "the rollup's cost tracks the tables' size: run too often, it takes a connection's time from the fire".to_owned(),
        symptom_at: Toward::Nowhere,
        criterion,
        load: "1 000 tenants, KV rows as listed, a fifth as many pending timers".to_owned(),
        safe: criterion.safe(&points),
        points: points.clone(),
        edge: None,
        edge_resolved: false,
        flags: non_monotonic(&points).into_iter().collect(),
    };
    let ok = shipped >= cadence;
    Ok(Finding {
        setting: USAGE.to_owned(),
        shipped,
        symptom: side.symptom.clone(),
        observed: format!(
            "{} At 1% of one connection the cadence must be at least {cadence} ms for the slowest rollup of the largest table; at the shipped {shipped} ms it uses {:.3}% of one connection. The other side (how stale the usage figures may be) is the cadence itself, not a measurement.",
            side.words(),
            share * 100.0
        ),
        threshold: Some(cadence),
        shipped_ok: ok,
        load: side.load.clone(),
        measured_shipped: true,
        measured_on: String::new(),
        rig: String::new(),
        commit: String::new(),
        points,
        unit: "ms".to_owned(),
        reps,
        sides: vec![side],
        decision: Some(Decision {
            value: ok.then_some(shipped),
            reason: if ok {
                format!("the shipped cadence is above the 1% cadence {cadence} ms")
            } else {
                format!("the shipped cadence is below the 1% cadence {cadence} ms")
            },
        }),
    })
}

/// One full rollup over `rows` KV rows in a fresh database, ms.
async fn one_rollup_ms(run: &Run<'_>, rows: u64, label: &str) -> Result<f64, String> {
    let db = crate::db::RunDb::create(run.server_url, label).await?;
    sqlx::query(
        "INSERT INTO queen.kv (tenant_id, namespace, key, value, expires_at, created_at, updated_at)
         SELECT 't' || (i % 1000), 'ns', 'k' || i, '{\"v\": 1}', NULL, now(), now() FROM generate_series(1, $1) AS i",
    )
    .bind(rows as i64)
    .execute(&db.pool)
    .await
    .map_err(|e| e.to_string())?;
    db.backlog((rows / 5) as u32, 86_400_000, 256, (1_000, 4, 8), "usage")
        .await?;
    sqlx::query("ANALYZE")
        .execute(&db.pool)
        .await
        .map_err(|e| e.to_string())?;
    let started = queen_sweeper::clock::monotonic_now();
    let mut after: Option<String> = None;
    for _ in 0..10_000 {
        let step: serde_json::Value =
            sqlx::query_scalar("SELECT queen.kv_usage_step_v1($1, now(), 500)")
                .bind(after.clone())
                .fetch_one(&db.pool)
                .await
                .map_err(|e| e.to_string())?;
        if step["done"].as_bool().unwrap_or(true) {
            break;
        }
        after = step["lastTenant"].as_str().map(str::to_owned);
    }
    let ms = (queen_sweeper::clock::monotonic_now() - started).as_secs_f64() * 1000.0;
    db.drop_now().await?;
    Ok((ms * 10.0).round() / 10.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn points(pairs: &[(u64, &[f64])]) -> Vec<Point> {
        pairs
            .iter()
            .map(|(v, runs)| Point::of(*v, runs.to_vec(), None))
            .collect()
    }

    fn side(pairs: &[(u64, &[f64])], criterion: Criterion, toward: Toward) -> Side {
        let spec = same_runs("s", "m", |_| 0.0, criterion, toward);
        judge_side(&spec, String::new(), points(pairs))
    }

    #[test]
    fn every_sweep_builds_a_valid_workload_at_every_value_of_every_side() {
        for sweep in sweeps(Scale {
            seconds: 1,
            reps: 1,
        }) {
            for value in &sweep.values {
                if let Err(e) = (sweep.workload)(*value).config() {
                    panic!("{} = {value}: {e}", sweep.setting);
                }
            }
            for (i, side) in sweep.sides.iter().enumerate() {
                if let Some(of) = side.runs_of_side {
                    assert!(
                        of >= 1 && of - 1 < i && sweep.sides[of - 1].workload.is_some(),
                        "{}: side {} reads the runs of side {of}, which must come before it and run a workload of its own",
                        sweep.setting,
                        i + 1
                    );
                    assert!(side.workload.is_none() && side.values.is_none());
                }
                let values = side.values.clone().unwrap_or_else(|| sweep.values.clone());
                assert!(
                    values.contains(&sweep.shipped),
                    "{}: a side that does not run the shipped value cannot judge it",
                    sweep.setting
                );
                if let Some(workload) = &side.workload {
                    for value in values {
                        if let Err(e) = workload(value).config() {
                            panic!("{} = {value} ({}): {e}", sweep.setting, side.metric_name);
                        }
                    }
                }
            }
            assert!(sweep.values.contains(&sweep.shipped), "{}", sweep.setting);
        }
    }

    #[test]
    fn an_outcome_stays_unknown_for_the_longer_of_the_retry_and_the_recovery() {
        let mut keyed = crate::run::KeyedCalls {
            retried: 3,
            longest_retry_ms: 1_173.46,
            ..Default::default()
        };
        assert_eq!(unknown_for_s(Some(&keyed), None), 1.17, "the retry alone");
        assert_eq!(
            unknown_for_s(Some(&keyed), Some(2_450.0)),
            2.45,
            "the recovery, longer than any retry"
        );
        keyed.abandoned = 1;
        assert_eq!(
            unknown_for_s(Some(&keyed), Some(2_450.0)),
            60.0,
            "a call never answered counts the whole budget"
        );
        assert_eq!(
            unknown_for_s(None, None),
            60.0,
            "no keyed calls prove nothing"
        );
    }

    #[test]
    fn a_point_is_the_median_of_its_runs_and_keeps_their_range() {
        let p = Point::of(5, vec![9.0, 1.0, 4.0], None);
        assert_eq!((p.metric, p.range()), (4.0, (1.0, 9.0)));
        assert_eq!(Point::of(5, vec![2.0, 4.0], None).metric, 3.0);
        assert_eq!(median_index(&[9.0, 1.0, 4.0]), Some(2));
        assert_eq!(median_index(&[]), None);
    }

    #[test]
    fn the_criteria_read_the_medians() {
        let drain = points(&[(10, &[300.0]), (200, &[2_100.0]), (800, &[2_300.0])]);
        assert_eq!(
            Criterion::NearBest(0.9).safe(&drain),
            vec![false, true, true]
        );
        let stale = points(&[(500, &[3.0, 0.0, 5.0]), (2_000, &[0.0, 0.0, 1.0])]);
        assert_eq!(Criterion::Zero.safe(&stale), vec![false, true]);
        let spin = points(&[(5, &[292.0]), (25, &[146.0]), (100, &[25.0])]);
        assert_eq!(
            Criterion::UnderFloor(0.5).safe(&spin),
            vec![false, true, true]
        );
        let push = points(&[(0, &[4.0]), (1, &[7.9]), (2, &[30.0])]);
        assert_eq!(
            Criterion::VsBaseline(2.0).safe(&push),
            vec![false, true, false],
            "the baseline itself is not a sweeper setting"
        );
        let stall = points(&[(0, &[4.0]), (1, &[12.0]), (8, &[23.0]), (32, &[170.0])]);
        assert_eq!(
            Criterion::VsSmallestStep(2.0).safe(&stall),
            vec![false, true, true, false],
            "judged against the smallest step, not against the run without a sweeper"
        );
        let late = points(&[(250, &[41.0]), (1_000, &[1_300.0])]);
        let within = Criterion::WithinValue {
            factor: 1.2,
            slack: 0.0,
        };
        assert_eq!(within.safe(&late), vec![true, false]);
        let cost = points(&[(1, &[10.0]), (5, &[21.0])]);
        assert_eq!(Criterion::NearLeast(2.0).safe(&cost), vec![true, false]);
    }

    #[test]
    fn an_edge_counts_only_when_its_range_clears_its_neighbours() {
        let clear = side(
            &[
                (500, &[3.0, 5.0, 9.0]),
                (2_000, &[0.0, 0.0, 0.0]),
                (8_000, &[0.0]),
            ],
            Criterion::Zero,
            Toward::Below,
        );
        assert_eq!((clear.edge, clear.edge_resolved), (Some(2_000), true));
        // Its median is safe, but one run of the edge overlaps the neighbour's range.
        let noisy = side(
            &[(500, &[0.0, 2.0, 3.0]), (2_000, &[0.0, 0.0, 1.0])],
            Criterion::Zero,
            Toward::Below,
        );
        assert_eq!((noisy.edge, noisy.edge_resolved), (Some(2_000), false));
        assert!(noisy.flags[0].contains("overlaps"), "{:?}", noisy.flags);
        // Safe everywhere: the sweep did not bracket the edge.
        let never = side(
            &[(500, &[0.0]), (2_000, &[0.0])],
            Criterion::Zero,
            Toward::Below,
        );
        assert_eq!((never.edge, never.edge_resolved), (Some(500), false));
        assert!(
            never.flags[0].contains("did not appear"),
            "{:?}",
            never.flags
        );
        // Above: the largest safe value, its neighbour the next one up.
        let above = side(
            &[
                (250, &[0.0]),
                (1_000, &[0.0, 0.1]),
                (4_000, &[200.0, 220.0]),
            ],
            Criterion::Under(1.0),
            Toward::Above,
        );
        assert_eq!((above.edge, above.edge_resolved), (Some(1_000), true));
        let none = side(&[(1, &[5.0])], Criterion::Zero, Toward::Below);
        assert_eq!(none.edge, None);
    }

    #[test]
    fn a_rise_then_a_fall_beyond_the_spread_is_flagged_and_noise_is_not() {
        // 2026-12-02's fire bytes, had they been three runs each: 16.7 ms at 8 MiB, 8.0 at 64.
        let bumpy = points(&[
            (1, &[4.4, 4.6, 4.8]),
            (8, &[15.0, 16.7, 18.0]),
            (64, &[7.5, 8.0, 8.6]),
        ]);
        let flag = non_monotonic(&bumpy).expect("flagged");
        assert!(flag.contains("8 → 64"), "{flag}");
        let noise = points(&[(1, &[4.0, 6.0]), (8, &[5.5, 7.0]), (64, &[4.5, 6.5])]);
        assert_eq!(non_monotonic(&noise), None);
        let rising = points(&[(1, &[1.0]), (8, &[2.0]), (64, &[3.0])]);
        assert_eq!(non_monotonic(&rising), None);
    }

    fn ok(_: u64) -> Result<(), String> {
        Ok(())
    }

    /// Stale at 500 in every run, clean from 2 000: a resolved edge at 2 000.
    fn stale_until_2000() -> Side {
        side(
            &[
                (500, &[4.0, 5.0]),
                (2_000, &[0.0, 0.0]),
                (8_000, &[0.0, 0.0]),
            ],
            Criterion::Zero,
            Toward::Below,
        )
    }

    #[test]
    fn the_decision_takes_a_resolved_edge_and_steps_past_an_unresolved_one() {
        let values = [500, 2_000, 8_000];
        let resolved = stale_until_2000();
        let d = decide(500, &values, std::slice::from_ref(&resolved), ok);
        assert_eq!(d.value, Some(2_000), "{}", d.reason);
        let unresolved = side(
            &[
                (500, &[0.0, 0.0, 2.0]),
                (2_000, &[0.0, 0.0]),
                (8_000, &[0.0]),
            ],
            Criterion::Zero,
            Toward::Below,
        );
        let d = decide(500, &values, std::slice::from_ref(&unresolved), ok);
        assert_eq!(
            d.value,
            Some(2_000),
            "the edge 500 is unresolved: {}",
            d.reason
        );
        assert!(d.reason.contains("one step beyond"), "{}", d.reason);
    }

    #[test]
    fn an_unresolved_edge_at_the_bound_the_config_accepts_is_its_own_margin() {
        // The floor's sweep at 7e0936e: the drain within 10% of the best only at 1 ms, the
        // smallest floor the config accepts, and 5 ms overlapping it.
        let values = [1, 5, 50, 200];
        let drain = side(
            &[
                (1, &[16_548.0, 17_337.0, 18_568.0]),
                (5, &[13_619.0, 15_414.0, 21_370.0]),
                (50, &[10_795.0, 13_128.0, 16_862.0]),
                (200, &[8_928.0, 10_933.0, 10_979.0]),
            ],
            Criterion::NearBest(0.9),
            Toward::Above,
        );
        assert_eq!((drain.edge, drain.edge_resolved), (Some(1), false));
        let floor_from_1 = |v: u64| {
            if v >= 1 {
                Ok(())
            } else {
                Err("below the knob's range".to_owned())
            }
        };
        let d = decide(1, &values, std::slice::from_ref(&drain), floor_from_1);
        assert_eq!(d.value, Some(1), "{}", d.reason);
        assert!(d.reason.contains("bound"), "{}", d.reason);
        // Where the config accepts a value beyond, the unresolved edge still needs its step.
        let d = decide(1, &values, std::slice::from_ref(&drain), ok);
        assert_eq!(d.value, None, "{}", d.reason);
    }

    #[test]
    fn the_decision_passes_over_values_another_side_or_the_config_refuses() {
        let values = [500, 2_000, 8_000, 30_000];
        let stale = side(
            &[
                (500, &[5.0, 6.0]),
                (2_000, &[0.0, 0.0]),
                (8_000, &[0.0, 0.0]),
                (30_000, &[0.0, 0.0]),
            ],
            Criterion::Zero,
            Toward::Below,
        );
        let crash = side(
            &[
                (2_000, &[2_500.0]),
                (8_000, &[8_300.0]),
                (30_000, &[40_000.0]),
            ],
            Criterion::WithinValue {
                factor: 1.0,
                slack: 5_000.0,
            },
            Toward::Above,
        );
        let sides = [stale.clone(), crash.clone()];
        let d = decide(30_000, &values, &sides, ok);
        assert_eq!(d.value, Some(2_000), "{}", d.reason);
        // The config refuses leases under twice the statement timeout (5 000 ms).
        let d = decide(30_000, &values, &sides, |v| valid_default(LEASE, v));
        assert_eq!(d.value, None, "8 000 is invalid and 30 000 crashes late");
        assert!(
            d.reason.contains("QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS"),
            "{}",
            d.reason
        );
        assert!(d.reason.contains("30000 shows side 2"), "{}", d.reason);
        // A value the other side did not run cannot be chosen.
        let d = decide(500, &[500, 2_000, 30_000], &[stale, crash], ok);
        assert_eq!(d.value, Some(2_000));
    }

    #[test]
    fn a_value_in_force_beyond_the_margin_and_safe_everywhere_stays() {
        let values = [500, 2_000, 8_000];
        let resolved = stale_until_2000();
        let d = decide(8_000, &values, std::slice::from_ref(&resolved), ok);
        assert_eq!(d.value, Some(8_000), "{}", d.reason);
        assert!(
            d.reason.contains("value in force lies beyond"),
            "{}",
            d.reason
        );
    }

    #[test]
    fn a_side_without_an_edge_keeps_the_shipped_value_only_if_it_is_safe() {
        let sizes = side(
            &[(100, &[10.0]), (70, &[14.0])],
            Criterion::NearLeast(1.25),
            Toward::Nowhere,
        );
        assert_eq!(
            decide(100, &[100, 70], std::slice::from_ref(&sizes), ok).value,
            Some(100)
        );
        assert_eq!(decide(70, &[100, 70], &[sizes], ok).value, None);
    }

    #[test]
    fn a_sides_load_leaves_out_the_swept_value() {
        let workload = |batch| {
            backlog_with_small_tenant("claim batch", 1)
                .knob("QUEEN_SWEEPER_CLAIM_BATCH", batch)
                .knob("QUEEN_SWEEPER_MAX_SLEEP_MS", 900)
        };
        let load = load_without("QUEEN_SWEEPER_CLAIM_BATCH", &workload, &[50, 200]);
        assert!(!load.contains("CLAIM_BATCH"), "{load}");
        assert!(load.ends_with("QUEEN_SWEEPER_MAX_SLEEP_MS=900"), "{load}");
        let only = |batch| Workload::quiet("q", 1).knob("QUEEN_SWEEPER_CLAIM_BATCH", batch);
        assert_eq!(
            load_without("QUEEN_SWEEPER_CLAIM_BATCH", &only, &[50]),
            "3 brokers"
        );
    }

    #[test]
    fn a_knobs_default_is_valid_only_with_the_other_defaults() {
        assert_eq!(valid_default("QUEEN_SWEEPER_CLAIM_BATCH", 800), Ok(()));
        assert!(valid_default(LEASE, 2_000).is_err());
        assert!(valid_default("QUEEN_SWEEPER_CLAIM_BATCH", 0).is_err());
        assert_eq!(valid_default("log_timers fillfactor", 70), Ok(()));
    }
}
