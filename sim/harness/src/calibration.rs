//! A calibration of the simulation's model of PostgreSQL: the model's costs as `soak calibrate`
//! measured them on one rig, with the fits they came from and how well each fit the
//! measurements. The soak writes it; the simulation reads it (the newest committed one is built
//! into `sim`, `--calibration FILE` picks another).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::Spread;
use crate::error::Error;

/// Simulated microseconds.
pub type Us = u64;

/// What the model's statements cost, in simulated time and WAL bytes. Each statement's time is
/// the server's part of a call (the client's time less the connection's round trip). A call
/// that writes rows (claim, fire, take, push, a schedule's commit) also sends its bytes through
/// the model's one WAL and waits for their flush, on top of its own time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Costs {
    /// One probe (it reads, it writes nothing).
    pub probe_us: Us,
    /// A claim: fixed part and per leased row; its WAL is `claim_wal_bytes_per_row` a row.
    pub claim_base_us: Us,
    pub claim_row_us: Us,
    /// A fire: fixed part (finding and locking its rows) and per row (appending and deleting
    /// them, under its partitions' locks); its WAL is each row's payload plus
    /// `row_overhead_bytes`.
    pub fire_base_us: Us,
    pub fire_row_us: Us,
    /// A take: fixed part (the pick) and per row (the append and the delete, under its
    /// partitions' locks); its WAL as the fire's.
    pub take_base_us: Us,
    pub take_row_us: Us,
    /// Of a take's time per row, the part before its first message is written (the pick, the
    /// rows read again and numbered) and the part that writes them (the insert, each message
    /// stamped with `clock_timestamp()` as it goes): the slopes of the first stamp's and the
    /// stamps' span against the rows, from the takes' own messages. The rest of `take_row_us`
    /// (the delete) comes after the last stamp. 0 in files written before 2026-12-07 (evening):
    /// the whole row cost is then the append's, as the model had it.
    #[serde(default)]
    pub take_pick_row_us: Us,
    #[serde(default)]
    pub take_insert_row_us: Us,
    /// The small calls, their commit included: a fail, a DLQ, a KV put, a rollup step, a
    /// schedule's apply.
    pub small_call_us: Us,
    /// A push's statement before its WAL; it holds its partition's lock for this and the WAL.
    pub push_base_us: Us,
    /// The prune, per deleted row, on top of a small call.
    pub prune_row_us: Us,
    /// WAL bandwidth: bytes per simulated second through the one WAL writer. Since 2026-12-07
    /// (night) the one at which the model drains the calibration's large-row parallel drains closest to
    /// the rig (a sustained drain's, below the WAL runs' bursts); before, the lesser of the runs'
    /// and the best large-row drain's WAL rate.
    pub wal_bytes_per_s: u64,
    /// A commit's WAL flush. Flushes are one at a time, and one flush makes durable every commit
    /// written before it began (group commit): a commit waits for the flush under way, then for
    /// one that covers it.
    pub flush_us: Us,
    /// WAL bytes a pushed or fired row writes beyond its payload.
    pub row_overhead_bytes: u64,
    /// WAL bytes a claim writes per row it leases (a new row version and its index entry).
    pub claim_wal_bytes_per_row: u64,
    /// WAL bytes each out-of-line chunk of a large payload adds beyond its bytes (its tuple
    /// and its TOAST index entry; [`toast_chunks`]): a fired 8 KiB row wrote 9 498 B of WAL at
    /// 9da0521, 990 B over payload plus row overhead, in 5 chunks. 0 in files written before
    /// 2026-12-07 (evening).
    #[serde(default)]
    pub toast_chunk_wal_bytes: u64,
    /// The server's cores: at most this many statements spend their time at once; the others
    /// wait their turn (WAL writes and flushes are not CPU and do not take one).
    pub cores: u32,
    /// What each other statement wanting the CPU adds to a statement's time, per mille: with
    /// n statements on or waiting for the cores, each takes `1 + n-1 × this / 1000` times its
    /// cost. Fitted from the parallel drains (the calibration measured at 48b79a3: 2
    /// connections drained 1.43× as fast as one, 3 only 1.24× and 5 1.06×: 300); 0 in files
    /// written before 2026-12-05.
    #[serde(default)]
    pub contention_permille: u32,
}

/// A payload over this many bytes is stored out of line (its row passes PostgreSQL's
/// `TOAST_TUPLE_THRESHOLD`, 2 032 B, once its other columns are counted), the payloads here
/// being incompressible.
pub const TOAST_PAYLOAD_BYTES: u64 = 1_900;
/// The bytes of one out-of-line chunk (`TOAST_MAX_CHUNK_SIZE` with 8 KiB pages).
pub const TOAST_CHUNK_BYTES: u64 = 1_996;

/// The out-of-line chunks a payload of `bytes` is stored in: none below the threshold.
pub fn toast_chunks(bytes: u64) -> u64 {
    if bytes > TOAST_PAYLOAD_BYTES {
        bytes.div_ceil(TOAST_CHUNK_BYTES)
    } else {
        0
    }
}

impl Costs {
    /// WAL bytes of one written row (a pushed or fired message, a scheduled timer) with a
    /// payload of `payload` bytes.
    pub fn row_wal_bytes(&self, payload: u64) -> u64 {
        payload + self.row_overhead_bytes + toast_chunks(payload) * self.toast_chunk_wal_bytes
    }
}

/// One call's fit: the model's formula against the medians measured at each size.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    /// probe, claim, fire, take, push, prune or rollup.
    pub call: String,
    /// The model's formula for it, in words (`base + row × n + WAL(bytes)`).
    pub formula: String,
    pub points: Vec<FitPoint>,
    /// The largest |predicted − measured| / measured over the points, in percent.
    pub max_error_pct: f64,
}

/// One size of one call: what was measured (server time, µs) and what the fitted model says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FitPoint {
    pub rows: u64,
    /// Payload bytes per row.
    pub payload_bytes: u64,
    /// Server time per call, µs: the client's time less the round trip's median.
    pub measured_us: Spread,
    pub predicted_us: f64,
    /// WAL bytes per call, median.
    pub wal_bytes: f64,
}

/// A rig's calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// `YYYY-MM-DD`.
    pub measured_on: String,
    /// The commit the soak was built from (`(dirty)` when the tree differed).
    pub commit: String,
    /// `2c-24g-pg15`.
    pub rig_label: String,
    /// The machine and the server's settings.
    pub rig: String,
    pub costs: Costs,
    pub fits: Vec<Fit>,
    /// `SELECT 1` on an open connection, client side, µs.
    pub round_trip_us: Spread,
    /// A one-row insert's COMMIT, server side, µs: the flush.
    pub commit_us: Spread,
    /// A one-row insert in its own transaction, server side, µs: a small call.
    pub small_write_us: Spread,
    /// A one-message push's statement, server side, µs: how long it holds its partition's lock.
    pub push_lock_hold_us: Spread,
    /// WAL written by concurrent writers of large rows: bytes per second, one value per run.
    pub wal_bytes_per_s_runs: Vec<f64>,
    /// A backlog drained by takes on 1, 2, 3 and 5 connections at once: what statements side by
    /// side cost each other (`costs.contention_permille` is fitted on it). Empty in files
    /// written before 2026-12-05.
    #[serde(default)]
    pub parallel_drain: Vec<ParallelDrain>,
    /// Where a take's time goes, by size (512 B rows): before its first message's stamp, over
    /// its stamps, after its last one. Empty in files written before 2026-12-07 (evening).
    #[serde(default)]
    pub take_phases: Vec<TakePhases>,
    /// The commit whose `soak calibrate --refit` last recomputed, from this file's stored
    /// measurements, the costs fitted by running the model (the WAL bandwidth, the model's
    /// drains); None when `soak calibrate` wrote them as it measured.
    #[serde(default)]
    pub refitted_at: Option<String>,
}

/// One take size's phases, µs, medians over its repetitions: from the call's start (less half
/// the round trip) to its first message's `created_at`, from the first to the last, and from
/// the last to the call's end (less half the round trip). The client's and the server's clocks
/// are one (the rig's server is on loopback).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TakePhases {
    pub rows: u64,
    pub before_first_us: f64,
    pub stamps_us: f64,
    pub after_last_us: f64,
}

fn default_parallel_payload() -> u32 {
    512
}

/// One parallel drain: `connections` taking batches of 200 until the backlog is gone.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ParallelDrain {
    pub connections: u32,
    /// The timers' payload, bytes (512 in files written before the 8 KiB drains were added).
    #[serde(default = "default_parallel_payload")]
    pub payload_bytes: u32,
    /// Timers moved per second, median over the repetitions.
    pub timers_per_s: f64,
    /// Its speed over one connection's.
    pub speedup: f64,
    /// Disk bytes written per WAL byte during the drain, median over the repetitions (None in
    /// files written before 2026-12-05, or where `/proc/diskstats` could not be read). Not in
    /// the model: it measures the heap's writeback of earlier steps as much as this drain's
    /// (2.2-2.3 here at 512 B, where the agreement's drains saw 1.05-1.15).
    #[serde(default)]
    pub disk_bytes_per_wal_byte: Option<f64>,
    /// WAL bytes written per second over the drain, median over the repetitions (None in files
    /// written before 2026-12-07, evening): what the WAL sustains while rows are drained, as
    /// against the WAL runs' bursts.
    #[serde(default)]
    pub wal_bytes_per_s: Option<f64>,
    /// Timers per second the model drains the same backlog at, with this file's costs
    /// (`queen_sim::parallel`, seed 1): the model judged on the calibration's own experiment.
    /// None in files written before 2026-12-07 (night).
    #[serde(default)]
    pub model_timers_per_s: Option<f64>,
}

impl Calibration {
    /// Reads a calibration file.
    pub fn load(path: &Path) -> Result<Calibration, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        Calibration::parse(&text).map_err(|source| Error::Parse {
            path: path.to_owned(),
            source,
        })
    }

    pub fn parse(text: &str) -> Result<Calibration, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// One line naming it: where, when and from which commit.
    pub fn describe(&self) -> String {
        let refit = self.refitted_at.as_ref().map_or_else(String::new, |at| {
            format!(", its model-run fits refitted at {at}")
        });
        format!(
            "{} measured {} at {} ({}){refit}",
            self.rig_label, self.measured_on, self.commit, self.rig
        )
    }
}

/// The least-squares line `y = a + b·x` through `points`; `b` is 0 when every x is the same.
pub fn fit_line(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    if points.is_empty() {
        return (0.0, 0.0);
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    if sxx == 0.0 {
        return (mean_y, 0.0);
    }
    let b = sxy / sxx;
    (mean_y - b * mean_x, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refitted_calibration_says_at_which_commit() {
        let mut c = Calibration::parse(include_str!(
            "../../calibration/2026-12-05-2c-24g-pg15.json"
        ))
        .expect("parses");
        assert!(!c.describe().contains("refitted"), "{}", c.describe());
        c.refitted_at = Some("abc1234".into());
        assert!(
            c.describe().ends_with("refitted at abc1234"),
            "{}",
            c.describe()
        );
    }

    #[test]
    fn a_large_payloads_row_writes_its_chunks_overhead_and_a_small_ones_none() {
        assert_eq!(toast_chunks(512), 0);
        assert_eq!(toast_chunks(1_900), 0);
        assert_eq!(toast_chunks(2_048), 2);
        assert_eq!(toast_chunks(8_192), 5);
        let mut c = Calibration::parse(include_str!(
            "../../calibration/2026-12-05-2c-24g-pg15.json"
        ))
        .expect("parses")
        .costs;
        (c.row_overhead_bytes, c.toast_chunk_wal_bytes) = (316, 200);
        assert_eq!(c.row_wal_bytes(512), 828);
        assert_eq!(c.row_wal_bytes(8_192), 8_192 + 316 + 5 * 200);
    }

    #[test]
    fn a_line_is_fitted_exactly_and_a_constant_has_no_slope() {
        let (a, b) = fit_line(&[(1.0, 12.0), (2.0, 14.0), (4.0, 18.0)]);
        assert!((a - 10.0).abs() < 1e-9 && (b - 2.0).abs() < 1e-9, "{a} {b}");
        assert_eq!(fit_line(&[(3.0, 5.0), (3.0, 7.0)]), (6.0, 0.0));
        assert_eq!(fit_line(&[]), (0.0, 0.0));
    }

    #[test]
    fn noise_pulls_the_line_through_the_middle() {
        let (a, b) = fit_line(&[(0.0, 9.0), (0.0, 11.0), (10.0, 29.0), (10.0, 31.0)]);
        assert!((a - 10.0).abs() < 1e-9 && (b - 2.0).abs() < 1e-9, "{a} {b}");
    }
}
