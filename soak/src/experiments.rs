//! One experiment per setting the seed lists as unmeasured: a small sweep that shows the symptom
//! the setting guards against and the value where it appears or disappears. Every sweep includes
//! the shipped value, so a dated block is only ever written for a number that was measured.

use serde::{Deserialize, Serialize};

use crate::rig::Rig;
use crate::run::{Run, RunResult, Workload};
use queen_sweeper::knob;

/// A setting and what one sweep of it found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Finding {
    /// The marker's name in `sql/` (`QUEEN_SWEEPER_LEASE_MS`, `log_timers fillfactor`, ...).
    pub setting: String,
    pub shipped: u64,
    /// The symptom the setting guards against.
    pub symptom: String,
    /// The numbers, per value, in words.
    pub observed: String,
    /// Where the symptom appears or disappears, when the sweep found the edge.
    pub threshold: Option<u64>,
    /// Whether the shipped value is on the safe side of the edge.
    pub shipped_ok: bool,
    /// The workload every point ran.
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
    pub points: Vec<Point>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    pub value: u64,
    pub metric: f64,
    pub result: Option<RunResult>,
}

/// From (value, metric) pairs and the shipped value: the edge of the symptom, and whether the
/// shipped value is on the safe side.
type Judge = fn(&[(u64, f64)], u64) -> (Option<u64>, bool);

/// A sweep: the values, the workload per value, the metric and how to read it.
/// One number read off a run.
type Metric = fn(&RunResult) -> f64;

struct Sweep {
    setting: &'static str,
    shipped: u64,
    values: Vec<u64>,
    symptom: &'static str,
    metric_name: &'static str,
    workload: Box<dyn Fn(u64) -> Workload>,
    metric: Metric,
    /// A second number reported beside the metric (what the symptom trades against).
    secondary: Option<(&'static str, Metric)>,
    /// From the (value, metric) pairs: the threshold and whether the shipped value is safe.
    judge: Judge,
}

/// Seconds each point of a sweep runs.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    pub seconds: u64,
}

const LEASE: &str = "QUEEN_SWEEPER_LEASE_MS";
const STATEMENT_TIMEOUT: &str = "QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS";

fn sweeps(scale: Scale) -> Vec<Sweep> {
    let s = scale.seconds;
    vec![
        Sweep {
            setting: LEASE,
            shipped: knob::LEASE_MS.default,
            values: vec![100, 200, 500, 1_000, 4_000, 30_000],
            symptom: "a fire that outlives its lease under push load: segments come back stale or fires time out",
            metric_name: "stale segments + failed calls",
            workload: Box::new(move |lease| {
                let mut w = Workload::quiet("lease", s);
                w.backlog = 20_000;
                w.payload_bytes = 4_096;
                w.pushers = 4;
                w.pushes_per_s_each = 100;
                w.push_batch = 20;
                w.push_payload_bytes = 1_024;
                w.knob(LEASE, lease)
                    .knob(STATEMENT_TIMEOUT, (lease / 2).min(5_000))
            }),
            metric: |r| (r.counters.stale_segments + r.counters.failures) as f64,
            secondary: None,
            judge: smallest_with_zero,
        },
        Sweep {
            setting: "QUEEN_SWEEPER_CLAIM_BATCH",
            shipped: knob::CLAIM_BATCH.default,
            values: vec![10, 50, 200, 800, 2_000],
            symptom: "small claims pay a round trip for a few rows: a backlog drains slowly",
            metric_name: "drain rate (timers/s, one broker)",
            workload: Box::new(move |batch| {
                let mut w = Workload::quiet("claim batch", s);
                w.brokers = 1;
                w.backlog = 40_000;
                w.knob("QUEEN_SWEEPER_CLAIM_BATCH", batch)
            }),
            metric: RunResult::busy_fired_per_s,
            secondary: None,
            judge: smallest_within_10_percent_of_best,
        },
        Sweep {
            setting: "QUEEN_SWEEPER_CYCLE_MAX_ROWS",
            shipped: knob::CYCLE_MAX_ROWS.default,
            values: vec![200, 1_000, 5_000, 20_000],
            symptom: "a short pass re-probes and sleeps the floor between passes: a backlog drains slowly",
            metric_name: "drain rate (timers/s, one broker)",
            workload: Box::new(move |rows| {
                let mut w = Workload::quiet("cycle rows", s);
                w.brokers = 1;
                w.backlog = 40_000;
                w.knob(
                    "QUEEN_SWEEPER_CLAIM_BATCH",
                    rows.min(knob::CLAIM_BATCH.default),
                )
                .knob("QUEEN_SWEEPER_CYCLE_MAX_ROWS", rows)
            }),
            metric: RunResult::busy_fired_per_s,
            secondary: None,
            judge: smallest_within_10_percent_of_best,
        },
        Sweep {
            setting: "QUEEN_SWEEPER_MAX_FIRE_BYTES",
            shipped: knob::MAX_FIRE_BYTES.default,
            values: vec![
                0,
                256 * 1024,
                1024 * 1024,
                8 * 1024 * 1024,
                64 * 1024 * 1024,
            ],
            symptom: "one big fire transaction holds partition locks and the WAL while pushes wait: push p99 degrades",
            metric_name: "push p99 (ms) while a 64 KiB-payload backlog fires; value 0 = no sweeper",
            workload: Box::new(move |bytes| {
                let mut w = Workload::quiet("fire bytes", s);
                w.brokers = u32::from(bytes > 0);
                w.backlog = 3_000;
                w.payload_bytes = 64 * 1024;
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
            metric: |r| r.push_latency_ms.p99,
            secondary: Some(("drain rate (timers/s)", RunResult::busy_fired_per_s)),
            judge: largest_within_double_of_baseline,
        },
        Sweep {
            setting: "QUEEN_SWEEPER_MAX_SLEEP_MS",
            shipped: knob::MAX_SLEEP_MS.default,
            values: vec![250, 1_000, 4_000],
            symptom: "a timer committed where no local wake reaches (another broker) waits up to the ceiling",
            metric_name: "lateness p99 (ms) of timers scheduled with no wake",
            workload: Box::new(move |ceiling| {
                let mut w = Workload::quiet("sleep ceiling", s);
                w.brokers = 2;
                w.timers_per_s = 20;
                w.timer_delay_ms = (0, 3_000);
                w.schedule_without_wake = true;
                w.knob("QUEEN_SWEEPER_MAX_SLEEP_MS", ceiling)
            }),
            metric: |r| r.lateness_ms.p99,
            secondary: None,
            judge: |points, shipped| {
                (
                    None,
                    points
                        .iter()
                        .any(|(v, m)| *v == shipped && *m <= shipped as f64 * 1.2),
                )
            },
        },
        Sweep {
            setting: "QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS",
            shipped: knob::EMPTY_CLAIM_MIN_MS.default,
            values: vec![5, 25, 100],
            symptom: "after an empty claim, coming back at once is a spin: the probe says work is due, the claim takes nothing, and the loop asks again while another transaction holds the rows",
            metric_name: "probe + claim calls/s, all brokers, with one due row held locked",
            workload: Box::new(move |low| {
                let mut w = Workload::quiet("empty-claim band", s);
                w.brokers = 5;
                // Claims commit per batch here, so a burst is shared by every broker and an
                // empty claim needs a due row that someone else holds locked: without one, the
                // first run of this sweep (2026-12-02) found no spin (17.5 calls/s at 5 ms,
                // 17.3 at 100 ms).
                w.hold_due_locked = 1;
                w.timers_per_s = 300;
                w.burst_every_s = Some(1);
                w.timer_delay_ms = (1_500, 1_500);
                w.payload_bytes = 8_192;
                w.pushers = 2;
                w.pushes_per_s_each = 50;
                w.push_batch = 20;
                w.knob("QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS", low)
                    .knob("QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS", (low * 8).max(low))
            }),
            metric: |r| {
                r.series.iter().map(|s| s.probe_claim_per_s).sum::<f64>()
                    / r.series.len().max(1) as f64
            },
            secondary: Some(("lateness p99 (ms) of the bursts", |r| r.lateness_ms.p99)),
            judge: smallest_halving_the_floor,
        },
        Sweep {
            setting: "QUEEN_SWEEPER_MIN_SLEEP_MS",
            shipped: knob::MIN_SLEEP_MS.default,
            values: vec![1, 5, 50, 200],
            symptom: "a floor too long leaves due work waiting between passes; a shorter one probes more for nothing",
            metric_name: "drain rate (timers/s, one broker, shipped pass budget)",
            workload: Box::new(move |floor| {
                let mut w = Workload::quiet("floor", s);
                w.brokers = 1;
                w.backlog = 40_000;
                w.knob("QUEEN_SWEEPER_MIN_SLEEP_MS", floor)
                    .knob("QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS", floor.max(25))
            }),
            metric: RunResult::busy_fired_per_s,
            secondary: Some(("probes/s", |r| {
                r.queries_per_s_per_broker
                    .get("probe")
                    .copied()
                    .unwrap_or(0.0)
            })),
            judge: largest_within_10_percent_of_best,
        },
        Sweep {
            setting: "QUEEN_KV_EXPIRE_EVERY_MS",
            shipped: knob::KV_EXPIRE_EVERY_MS.default,
            values: vec![250, 1_000, 4_000, 16_000],
            symptom: "a prune slower than the expiry rate: expired-but-present rows grow without bound (reads stay correct; the heap grows for good)",
            metric_name: "growth of expired-not-pruned (rows/s, second half of the run), prune batch 50",
            workload: Box::new(move |every| {
                let mut w = Workload::quiet("prune cadence", s);
                w.brokers = 1;
                w.kv_per_s = 400;
                w.kv_ttl_ms = (100, 300);
                w.kv_keys = 1_000_000;
                w.knob("QUEEN_KV_EXPIRE_BATCH", 50)
                    .knob("QUEEN_KV_EXPIRE_EVERY_MS", every)
            }),
            metric: RunResult::expired_not_pruned_growth,
            secondary: None,
            judge: largest_with_no_growth,
        },
        Sweep {
            setting: "QUEEN_KV_EXPIRE_BATCH",
            shipped: knob::KV_EXPIRE_BATCH.default,
            values: vec![1, 5, 50, 1_000],
            symptom: "a prune budget smaller than the expiry rate: expired-but-present rows grow without bound",
            metric_name: "growth of expired-not-pruned (rows/s, second half of the run)",
            workload: Box::new(move |batch| {
                let mut w = Workload::quiet("prune batch", s);
                w.brokers = 1;
                w.kv_per_s = 400;
                w.kv_ttl_ms = (100, 300);
                w.kv_keys = 1_000_000;
                w.knob("QUEEN_KV_EXPIRE_BATCH", batch)
            }),
            metric: RunResult::expired_not_pruned_growth,
            secondary: None,
            judge: smallest_with_no_growth,
        },
        Sweep {
            setting: "log_timers fillfactor",
            shipped: 100,
            values: vec![100, 90, 70],
            symptom: "free space per page that claims cannot use: a claim rewrites visible_at, which is indexed, so it is never a HOT update",
            metric_name: "log_timers heap + index bytes at the end",
            workload: Box::new(move |fillfactor| {
                let mut w = Workload::quiet("fillfactor", s);
                w.brokers = 2;
                w.timers_per_s = 300;
                w.timer_delay_ms = (0, 2_000);
                w.fillfactor = Some(fillfactor as u32);
                w
            }),
            metric: |r| (r.sizes_end.timers_bytes + r.sizes_end.timers_index_bytes) as f64,
            secondary: None,
            judge: |points, shipped| {
                let best = points.iter().map(|(_, m)| *m).fold(f64::INFINITY, f64::min);
                (
                    None,
                    points
                        .iter()
                        .any(|(v, m)| *v == shipped && *m <= best * 1.25),
                )
            },
        },
    ]
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
        findings.push(usage_cost(run).await?);
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
    let total: usize = sweeps.iter().map(|s| s.values.len()).sum();
    let mut done = 0;
    for sweep in sweeps {
        let mut points = Vec::new();
        for &value in &sweep.values {
            done += 1;
            eprintln!(
                "soak: experiment {} = {value} ({done}/{total})",
                sweep.setting
            );
            let mut workload = (sweep.workload)(value);
            workload.label = format!("{} = {value}", sweep.setting);
            let label = format!("exp_{done}");
            let result = run.execute(&workload, &label).await?;
            points.push(Point {
                value,
                metric: (sweep.metric)(&result),
                result: Some(result),
            });
        }
        findings.push(judge(&sweep, points));
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

fn judge(sweep: &Sweep, points: Vec<Point>) -> Finding {
    let pairs: Vec<(u64, f64)> = points.iter().map(|p| (p.value, p.metric)).collect();
    let (threshold, shipped_ok) = (sweep.judge)(&pairs, sweep.shipped);
    let observed = points
        .iter()
        .map(|p| match (sweep.secondary, p.result.as_ref()) {
            (Some((_, second)), Some(result)) => {
                format!(
                    "{}: {} ({})",
                    p.value,
                    round(p.metric),
                    round(second(result))
                )
            }
            _ => format!("{}: {}", p.value, round(p.metric)),
        })
        .collect::<Vec<_>>()
        .join("; ");
    let metric_name = match sweep.secondary {
        Some((name, _)) => format!("{} ({name} in brackets)", sweep.metric_name),
        None => sweep.metric_name.to_owned(),
    };
    Finding {
        setting: sweep.setting.to_owned(),
        shipped: sweep.shipped,
        symptom: sweep.symptom.to_owned(),
        observed: format!("{metric_name} per value: {observed}"),
        threshold,
        shipped_ok,
        // The conditions of the shipped value's run: what the block's number was measured under.
        load: points
            .iter()
            .find(|p| p.value == sweep.shipped)
            .or(points.first())
            .and_then(|p| p.result.as_ref())
            .map(|r| r.workload.describe())
            .unwrap_or_default(),
        measured_shipped: pairs.iter().any(|(v, _)| *v == sweep.shipped),
        measured_on: String::new(),
        rig: String::new(),
        commit: String::new(),
        points,
    }
}

fn round(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// The smallest value with a zero metric (the symptom gone); safe if the shipped value is at or
/// above it.
fn smallest_with_zero(points: &[(u64, f64)], shipped: u64) -> (Option<u64>, bool) {
    let edge = points
        .iter()
        .filter(|(_, m)| *m == 0.0)
        .map(|(v, _)| *v)
        .min();
    (
        edge,
        edge.is_some_and(|e| shipped >= e)
            && points.iter().any(|(v, m)| *v == shipped && *m == 0.0),
    )
}

fn smallest_within_10_percent_of_best(points: &[(u64, f64)], shipped: u64) -> (Option<u64>, bool) {
    let best = points.iter().map(|(_, m)| *m).fold(0.0, f64::max);
    let edge = points
        .iter()
        .filter(|(_, m)| *m >= best * 0.9)
        .map(|(v, _)| *v)
        .min();
    (
        edge,
        points
            .iter()
            .any(|(v, m)| *v == shipped && *m >= best * 0.9),
    )
}

fn largest_within_10_percent_of_best(points: &[(u64, f64)], shipped: u64) -> (Option<u64>, bool) {
    let best = points.iter().map(|(_, m)| *m).fold(0.0, f64::max);
    let edge = points
        .iter()
        .filter(|(_, m)| *m >= best * 0.9)
        .map(|(v, _)| *v)
        .max();
    (
        edge,
        points
            .iter()
            .any(|(v, m)| *v == shipped && *m >= best * 0.9),
    )
}

/// Value 0 is the baseline (no sweeper): the largest value whose metric stays within twice it.
fn largest_within_double_of_baseline(points: &[(u64, f64)], shipped: u64) -> (Option<u64>, bool) {
    let baseline = points
        .iter()
        .find(|(v, _)| *v == 0)
        .map_or(0.0, |(_, m)| *m)
        .max(0.1);
    let edge = points
        .iter()
        .filter(|(v, m)| *v > 0 && *m <= baseline * 2.0)
        .map(|(v, _)| *v)
        .max();
    (
        edge,
        points
            .iter()
            .any(|(v, m)| *v == shipped && *m <= baseline * 2.0),
    )
}

/// The first value is the floor, where the symptom is a spin; the edge is the smallest value
/// that at least halves the floor's calls. Judged against the floor, not against the best value:
/// a wider band always means fewer calls, and what it costs is lateness (the secondary metric),
/// so "as few calls as the widest band" would push the band up without bound.
fn smallest_halving_the_floor(points: &[(u64, f64)], shipped: u64) -> (Option<u64>, bool) {
    let Some(&(floor, floor_calls)) = points.iter().min_by_key(|(v, _)| *v) else {
        return (None, false);
    };
    let halved = |m: f64| m <= floor_calls / 2.0;
    let edge = points
        .iter()
        .filter(|(v, m)| *v > floor && halved(*m))
        .map(|(v, _)| *v)
        .min();
    (
        edge,
        points
            .iter()
            .any(|(v, m)| *v == shipped && *v > floor && halved(*m)),
    )
}

/// No growth: under one row per second over the second half.
const NO_GROWTH: f64 = 1.0;

fn largest_with_no_growth(points: &[(u64, f64)], shipped: u64) -> (Option<u64>, bool) {
    let edge = points
        .iter()
        .filter(|(_, m)| *m < NO_GROWTH)
        .map(|(v, _)| *v)
        .max();
    (
        edge,
        points.iter().any(|(v, m)| *v == shipped && *m < NO_GROWTH),
    )
}

fn smallest_with_no_growth(points: &[(u64, f64)], shipped: u64) -> (Option<u64>, bool) {
    let edge = points
        .iter()
        .filter(|(_, m)| *m < NO_GROWTH)
        .map(|(v, _)| *v)
        .min();
    (
        edge,
        points.iter().any(|(v, m)| *v == shipped && *m < NO_GROWTH),
    )
}

const USAGE: &str = "QUEEN_KV_USAGE_EVERY_MS";
/// The rollup may use at most this share of one connection's time at its cadence.
const USAGE_DUTY: f64 = 0.01;

/// The usage rollup's cost tracks space, not work: one full rollup is timed over tables of
/// growing size (KV rows over 1 000 tenants, a fifth as many timers); the cadence at which it
/// would use 1% of one connection follows.
async fn usage_cost(run: &Run<'_>) -> Result<Finding, String> {
    let sizes = [10_000u64, 100_000, 400_000];
    let mut points = Vec::new();
    for (i, rows) in sizes.iter().enumerate() {
        eprintln!("soak: experiment {USAGE}: one rollup over {rows} KV rows");
        let db = crate::db::RunDb::create(run.server_url, &format!("usage_{i}")).await?;
        sqlx::query(
            "INSERT INTO queen.kv (tenant_id, namespace, key, value, expires_at, created_at, updated_at)
             SELECT 't' || (i % 1000), 'ns', 'k' || i, '{\"v\": 1}', NULL, now(), now() FROM generate_series(1, $1) AS i",
        )
        .bind(*rows as i64)
        .execute(&db.pool)
        .await
        .map_err(|e| e.to_string())?;
        db.backlog((*rows / 5) as u32, 86_400_000, 256, (1_000, 4, 8), "usage")
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
        points.push(Point {
            value: *rows,
            metric: (ms * 10.0).round() / 10.0,
            result: None,
        });
    }
    let largest = points.last().map_or(0.0, |p| p.metric);
    let cadence = (largest / USAGE_DUTY).ceil() as u64;
    let shipped = 300_000;
    let observed = points
        .iter()
        .map(|p| format!("{} rows: {} ms", p.value, round(p.metric)))
        .collect::<Vec<_>>()
        .join("; ");
    Ok(Finding {
        setting: USAGE.to_owned(),
        shipped,
        symptom: "the rollup's cost tracks the tables' size: run too often, it takes a connection's time from the fire".to_owned(),
        observed: format!("one full rollup (1 000 tenants) took {observed}; at 1% of one connection the cadence must be at least {cadence} ms for the largest"),
        threshold: Some(cadence),
        shipped_ok: shipped >= cadence,
        load: "1 000 tenants, KV rows as listed, a fifth as many pending timers".to_owned(),
        measured_shipped: true,
        measured_on: String::new(),
        rig: String::new(),
        commit: String::new(),
        points,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sweep_builds_a_valid_workload_at_every_value() {
        for sweep in sweeps(Scale { seconds: 1 }) {
            for value in &sweep.values {
                let workload = (sweep.workload)(*value);
                if let Err(e) = workload.config() {
                    panic!("{} = {value}: {e}", sweep.setting);
                }
            }
        }
    }

    #[test]
    fn the_empty_claim_edge_is_the_smallest_band_that_halves_the_floor_spin() {
        // 2026-12-03's run: 5 ms is the floor (292 calls/s), 25 ms cuts it to 84, 100 ms to 25.
        let points = [(5, 292.0), (25, 83.7), (100, 25.1)];
        assert_eq!(smallest_halving_the_floor(&points, 25), (Some(25), true));
        // No value halves the spin: no edge, and the shipped value is not safe.
        let flat = [(5, 17.5), (25, 17.4), (100, 17.3)];
        assert_eq!(smallest_halving_the_floor(&flat, 25), (None, false));
        // The floor itself is never its own edge.
        assert_eq!(smallest_halving_the_floor(&[(5, 0.0)], 5), (None, false));
    }

    #[test]
    fn the_lease_edge_is_the_smallest_lease_without_the_symptom() {
        let points = [(200, 14.0), (500, 3.0), (1_000, 0.0), (30_000, 0.0)];
        assert_eq!(smallest_with_zero(&points, 30_000), (Some(1_000), true));
        assert_eq!(smallest_with_zero(&points, 500), (Some(1_000), false));
    }

    #[test]
    fn a_throughput_plateau_is_found_within_ten_percent() {
        let points = [(10, 300.0), (50, 2_000.0), (200, 2_300.0), (800, 2_350.0)];
        assert_eq!(
            smallest_within_10_percent_of_best(&points, 200),
            (Some(200), true)
        );
        assert_eq!(
            smallest_within_10_percent_of_best(&points, 10),
            (Some(200), false)
        );
    }

    #[test]
    fn push_latency_is_judged_against_the_run_without_a_sweeper() {
        let points = [
            (0, 4.0),
            (262_144, 5.0),
            (8_388_608, 7.9),
            (67_108_864, 30.0),
        ];
        assert_eq!(
            largest_within_double_of_baseline(&points, 8_388_608),
            (Some(8_388_608), true)
        );
        assert!(!largest_within_double_of_baseline(&points, 67_108_864).1);
    }

    #[test]
    fn prune_growth_edges_point_the_right_way() {
        let cadence = [(250, 0.0), (1_000, 0.2), (4_000, 40.0), (16_000, 150.0)];
        assert_eq!(largest_with_no_growth(&cadence, 1_000), (Some(1_000), true));
        let batch = [(1, 300.0), (5, 90.0), (50, 0.0), (1_000, 0.0)];
        assert_eq!(smallest_with_no_growth(&batch, 1_000), (Some(50), true));
    }
}
