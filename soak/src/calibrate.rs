//! `soak calibrate`: measures the simulation model's costs on this rig and writes them as
//! `sim/calibration/<date>-<rig>.json`, each fitted to the model's formula with the fit's error.
//!
//! What is measured, each through the sweeper's own `PgStore` where the sweeper makes the call:
//! - the connection's round trip (`SELECT 1`);
//! - WAL bandwidth: one writer of 512 KiB statements, three runs of 20, bytes from the WAL
//!   position, less the statements' round trips and flushes;
//! - a commit's flush (a one-row insert's COMMIT) and a small call (a one-row insert);
//! - probe, claim, fire and take on batches of 1 to 400 due timers of 512 B, and of 200 timers of
//!   64 B to 8 KiB, with each call's WAL bytes;
//! - a push of 1, 10 and 50 messages (a one-message push's statement is how long it holds its
//!   partition's lock);
//! - the prune of 0 to 500 expired KV rows, and a rollup step over 10 to 500 tenants.
//!
//! Every time is the server's part: the client's time less the round trip's median. The tables
//! are small: flatness in the backlog is the bench's business (`soak bench --only calls`).

use std::time::Duration;

use queen_harness::Spread;
use queen_harness::calibration::{
    Calibration, Costs, Fit, FitPoint, ParallelDrain, TOAST_PAYLOAD_BYTES, TakePhases, fit_line,
    toast_chunks,
};
use queen_sim::parallel::plain_take;
use queen_sweeper::{
    Admission, ClaimRequest, Config, KV_ALARM_CAP, LaneSizes, PgStore, ProbeRequest,
    ROLLUP_TENANTS_PER_STEP, SegmentResult, ShardOrder, Store, clock, plan_fire_calls,
};
use sqlx::Connection as _;

use crate::bench::cpu;
use crate::db::RunDb;
use crate::error::Error;
use crate::rig::{Rig, source_commit};

const DUE_RANDOM: &str = include_str!("../sql/due_random.sql");

/// The backlog the draining takes move, as the agreement's burst does.
const DRAINING: u32 = 20_000;

/// Connections of the parallel drains, and the repetitions of each.
const PARALLEL: [u32; 4] = [1, 2, 3, 5];
/// The parallel drains' payloads and backlogs: the model's contention is fitted on the small
/// rows; the 8 KiB drains show what large rows add (the agreement's livelock drained 8 KiB rows
/// on 5 brokers at 8 309/s, 0.57x the 14 570/s that one connection's 13.7 ms per 200 implies:
/// reports/agreement/2026-12-05-2c-24g-pg15 and sim/calibration/2026-12-04-2c-24g-pg15.json).
const PARALLEL_LOADS: [(u32, u32); 2] = [(PAYLOAD, DRAINING), (8_192, 6_000)];
const PARALLEL_REPS: usize = 3;

/// Batch sizes of the drain calls.
const ROWS: [u32; 6] = [1, 25, 50, 100, 200, 400];
/// Takes of the bulk lane's sizes (its default batch is 20 000), with their repetitions: the
/// drain calls above stop at 400 rows, and the agreement's burst is one take of up to 20 000.
const TAKE_BULK: [(u32, u32); 2] = [(2_000, 5), (20_000, 3)];
/// Payloads of the 200-row batches that separate the WAL's part from the rows'.
const PAYLOADS: [u32; 3] = [64, 2_048, 8_192];
const PAYLOAD: u32 = 512;
/// Repetitions per size.
const REPS: u32 = 11;
/// Messages per push.
const PUSH_SIZES: [u32; 3] = [1, 10, 50];
/// Expired KV rows per prune.
const PRUNE_SIZES: [u32; 4] = [0, 100, 250, 500];
/// Tenants per rollup step.
const ROLLUP_SIZES: [u32; 3] = [10, 100, 500];
/// 8 KiB rows per statement of the WAL writer: 512 KiB, so the commit's flush is a small part.
const WAL_ROWS: usize = 64;
const WAL_RUNS: usize = 3;
const WAL_STATEMENTS: usize = 20;

/// One timed call: its size, client time (µs) and WAL bytes.
#[derive(Debug, Clone, Copy)]
struct Sample {
    rows: u64,
    payload: u64,
    us: f64,
    wal: f64,
}

/// Every sample of one call.
#[derive(Debug, Default)]
struct Samples(Vec<Sample>);

impl Samples {
    /// The sizes in order of first appearance, with their samples.
    fn groups(&self) -> Vec<((u64, u64), Vec<Sample>)> {
        let mut groups: Vec<((u64, u64), Vec<Sample>)> = Vec::new();
        for s in &self.0 {
            match groups.iter_mut().find(|g| g.0 == (s.rows, s.payload)) {
                Some(g) => g.1.push(*s),
                None => groups.push(((s.rows, s.payload), vec![*s])),
            }
        }
        groups
    }
}

/// Measures and fits, printing each step.
pub async fn measure(server_url: &str, rig: &Rig, date: &str) -> Result<Calibration, Error> {
    let db = RunDb::create(server_url, "calibrate").await?;
    sqlx::raw_sql(
        "CREATE TABLE soak_scratch (id bigserial PRIMARY KEY, body bytea);
         ALTER TABLE soak_scratch ALTER COLUMN body SET STORAGE EXTERNAL;",
    )
    .execute(&db.pool)
    .await
    .map_err(Error::db("cannot create the scratch table"))?;
    let round_trip = round_trip(&db).await?;
    let rtt = round_trip.p50;
    eprintln!("soak: calibrate: round trip p50 {rtt:.0} µs");
    // The WAL runs first: they also bring the storage to the state sustained writing leaves it
    // in (on this rig's virtual disk a flush costs about 0.1 ms rested and 3.6 ms after a
    // burst of writes), which is the state a soak runs in.
    let wal = wal_runs(&db).await?;
    let (commit, small_write) = commit_latency(&db, rtt).await?;
    let flush = commit.p50;
    eprintln!(
        "soak: calibrate: flush (a commit) p50 {flush:.0} µs, a one-row insert p50 {:.0} µs",
        small_write.p50
    );
    let wal_runs: Vec<f64> = wal
        .iter()
        .map(|(bytes, seconds)| {
            let writing = seconds - WAL_STATEMENTS as f64 * (rtt + flush) / 1e6;
            (bytes / writing.max(1e-6)).round()
        })
        .collect();
    let burst_wal_bps = median(&wal_runs);
    eprintln!(
        "soak: calibrate: WAL {:.1} MiB/s beyond the flush",
        burst_wal_bps / 1024.0 / 1024.0
    );
    let drain = drain_samples(&db).await?;
    let parallel = parallel_drains(&db).await?;
    let wal_bps = calls_wal_bps(burst_wal_bps, &parallel);
    eprintln!(
        "soak: calibrate: the calls' fits take the WAL at {:.1} MiB/s (the WAL runs' {:.1}, or less where the large rows' drains sustained less)",
        wal_bps / 1024.0 / 1024.0,
        burst_wal_bps / 1024.0 / 1024.0
    );
    let push = push_samples(&db).await?;
    let kv = kv_samples(&db).await?;
    db.drop_now().await?;

    let measured = Measured {
        rtt,
        wal_bps,
        flush_us: flush,
        small_write_us: small_write.p50,
        cores: u32::try_from(rig.cores).unwrap_or(u32::MAX),
    };
    let (mut costs, fits) = fit(&measured, &drain, &push, &kv);
    costs.contention_permille = contention_permille(&parallel, measured.cores);
    let push_lock_hold_us = Spread::of_values(
        push.0
            .iter()
            .filter(|s| s.rows == 1)
            .map(|s| (s.us - rtt).max(0.0))
            .collect(),
    );
    let calibration = Calibration {
        measured_on: date.to_owned(),
        commit: source_commit(),
        rig_label: rig.label(),
        rig: rig.describe(),
        costs,
        fits,
        round_trip_us: round_trip,
        commit_us: commit,
        small_write_us: small_write,
        push_lock_hold_us,
        wal_bytes_per_s_runs: wal_runs,
        parallel_drain: parallel,
        take_phases: take_phases(&drain, rtt),
        refitted_at: None,
    };
    let calibration = tokio::task::spawn_blocking(move || {
        let mut c = calibration;
        fit_to_drains(&mut c).map(|()| c)
    })
    .await
    .map_err(|e| Error::Message(format!("calibrate: the model's drains panicked: {e}")))??;
    eprintln!(
        "soak: calibrate: the model's WAL, fitted on the large rows' drains: {:.1} MiB/s",
        calibration.costs.wal_bytes_per_s as f64 / 1024.0 / 1024.0
    );
    Ok(calibration)
}

/// Evaluations of the model per parallel drain when its WAL bandwidth is fitted.
const FIT_STEPS: u32 = 16;
/// The seed of the model's parallel drains (it only draws the rounding of sub-millisecond times).
const MODEL_DRAIN_SEED: u64 = 1;

/// The costs only the model's own runs can fit, from `c`'s stored measurements, then the model's
/// rate beside each parallel drain. The WAL bandwidth is the one at which the model, draining the
/// calibration's own large-row backlogs on 1, 2, 3 and 5 connections (`queen_sim::parallel`),
/// comes closest to the rig (least squares of the log of model over rig), between a twentieth of
/// the WAL runs' and the runs'. Before, it was the lesser of the runs' and the best large-row
/// drain's WAL rate (213.8 MiB/s at cf4679e), at which this model (run at 8dad0f0 on that file's
/// costs) drained the rig's 12 954 timers/s on one connection at 15 345, and the agreement's five
/// takers ran 1.38x as fast as the rig (reports/agreement at 1b1b7b3). A drain is not a WAL run: it writes its WAL while its statements, its flushes and the
/// dead rows it leaves take their time, which the row costs, fitted on isolated calls, do not
/// hold. The small rows' drains are not fitted: the model drains them up to 1.8x as fast as the
/// rig on 3 and 5 connections, and neither a larger CPU contention nor a cost per locked row a
/// pick passes, each fitted on them by running the model, kept the agreement's broker cases
/// (`agreement --resim` probes, not committed: about 1 000‰ gave 34 of 49 rows on the 19:58
/// sitting's rig numbers, against 44; 4 µs a passed row, 4cbc233, gave 38 on the 22:48 one's,
/// against 43).
pub fn fit_to_drains(c: &mut Calibration) -> Result<(), Error> {
    let large: Vec<ParallelDrain> = c
        .parallel_drain
        .iter()
        .filter(|p| u64::from(p.payload_bytes) > TOAST_PAYLOAD_BYTES && p.timers_per_s > 0.0)
        .copied()
        .collect();
    if !large.is_empty() {
        let ceiling = median(&c.wal_bytes_per_s_runs).max(c.costs.wal_bytes_per_s as f64);
        let costs = c.costs;
        let at = |log_bps: f64| Costs {
            wal_bytes_per_s: log_bps.exp().round() as u64,
            ..costs
        };
        let (lo, hi) = ((ceiling / 20.0).ln(), ceiling.ln());
        let best = golden_min(lo, hi, FIT_STEPS, |x| miss(at(x), &large))?;
        c.costs.wal_bytes_per_s = (best.exp() / 1e5).round() as u64 * 100_000;
    }
    for d in &mut c.parallel_drain {
        d.model_timers_per_s = Some(model_drain(c.costs, d)?.round());
    }
    Ok(())
}

/// How far the model at `costs` drains `drains` from the rig: the sum of the squared logs of
/// model over rig.
fn miss(costs: Costs, drains: &[ParallelDrain]) -> Result<f64, Error> {
    drains.iter().try_fold(0.0, |sum, d| {
        Ok(sum + (model_drain(costs, d)? / d.timers_per_s).ln().powi(2))
    })
}

/// The backlog a parallel drain of `payload`-byte rows moved (the files store the payload only).
fn parallel_backlog(payload: u32) -> u32 {
    PARALLEL_LOADS
        .iter()
        .find(|(p, _)| *p == payload)
        .map_or(DRAINING, |(_, backlog)| *backlog)
}

/// Timers per second the model drains `drain`'s backlog at, with `costs`.
fn model_drain(costs: Costs, drain: &ParallelDrain) -> Result<f64, Error> {
    let spec = queen_sim::parallel::DrainSpec {
        connections: drain.connections,
        payload_bytes: u64::from(drain.payload_bytes),
        backlog: parallel_backlog(drain.payload_bytes),
    };
    queen_sim::parallel::timers_per_s(costs, spec, MODEL_DRAIN_SEED).map_err(Error::Message)
}

/// The x in [lo, hi] where `f` is least, by golden-section search in `steps` steps (for an `f`
/// with one minimum there; on a flat stretch, a point of it).
fn golden_min(
    lo: f64,
    hi: f64,
    steps: u32,
    mut f: impl FnMut(f64) -> Result<f64, Error>,
) -> Result<f64, Error> {
    let ratio = (5f64.sqrt() - 1.0) / 2.0;
    let (mut a, mut b) = (lo, hi);
    let (mut x1, mut x2) = (b - ratio * (b - a), a + ratio * (b - a));
    let (mut f1, mut f2) = (f(x1)?, f(x2)?);
    for _ in 0..steps {
        if f1 <= f2 {
            b = x2;
            (x2, f2) = (x1, f1);
            x1 = b - ratio * (b - a);
            f1 = f(x1)?;
        } else {
            a = x1;
            (x1, f1) = (x2, f2);
            x2 = a + ratio * (b - a);
            f2 = f(x2)?;
        }
    }
    Ok((a + b) / 2.0)
}

/// The WAL bandwidth the calls' fits take a call's WAL at: the WAL runs' (statements of large
/// rows, each followed by its flush), or what the large rows' parallel drains wrote if that is
/// less (the model's own bandwidth is fitted afterwards on the drains, [`fit_to_drains`]).
fn calls_wal_bps(burst: f64, parallel: &[ParallelDrain]) -> f64 {
    let sustained = parallel
        .iter()
        .filter(|p| u64::from(p.payload_bytes) > TOAST_PAYLOAD_BYTES)
        .filter_map(|p| p.wal_bytes_per_s)
        .fold(0.0, f64::max);
    if sustained > 0.0 {
        burst.min(sustained)
    } else {
        burst
    }
}

/// The contention the parallel drains show, per mille: with n connections and c cores, a
/// statement that takes t alone takes t × (1 + a × (n-1)), so n connections move min(n, c) /
/// (1 + a × (n-1)) times one's rows. Each drain of 2 or more connections gives an a; the median
/// is the model's. On this rig: 1.43× at 2, 1.24× at 3, 1.06× at 5 connections, a = 0.30
/// (sim/calibration/2026-12-05-2c-24g-pg15.json, measured at 48b79a3).
fn contention_permille(parallel: &[ParallelDrain], cores: u32) -> u32 {
    let each: Vec<f64> = parallel
        .iter()
        .filter(|p| p.connections >= 2 && p.speedup > 0.0 && p.payload_bytes == PAYLOAD)
        .map(|p| {
            let ideal = f64::from(p.connections.min(cores.max(1)));
            ((ideal / p.speedup - 1.0) / f64::from(p.connections - 1)).max(0.0)
        })
        .collect();
    if each.is_empty() {
        return 0;
    }
    (median(&each) * 1000.0).round() as u32
}

/// A backlog of [`DRAINING`] due timers drained by takes of 200 on 1, 2, 3 and 5 connections at
/// once (each from its own starting shard, as brokers do), [`PARALLEL_REPS`] times each.
async fn parallel_drains(db: &RunDb) -> Result<Vec<ParallelDrain>, Error> {
    let mut out: Vec<ParallelDrain> = Vec::new();
    for (payload, backlog) in PARALLEL_LOADS {
        let mut one = None;
        for connections in PARALLEL {
            let (mut rates, mut disk, mut wal) = (Vec::new(), Vec::new(), Vec::new());
            for rep in 0..PARALLEL_REPS {
                let prefix = format!("par{connections}p{payload}r{rep}");
                let drained = parallel_drain(db, connections, (payload, backlog), &prefix).await?;
                rates.push(drained.timers_per_s);
                disk.extend(drained.disk_bytes_per_wal_byte);
                wal.push(drained.wal_bytes_per_s);
            }
            let timers_per_s = median(&rates).round();
            let disk_bytes_per_wal_byte =
                (!disk.is_empty()).then(|| (median(&disk) * 100.0).round() / 100.0);
            let base = *one.get_or_insert(timers_per_s);
            let speedup = (timers_per_s / f64::max(base, 1.0) * 100.0).round() / 100.0;
            eprintln!(
                "soak: calibrate: {backlog} due of {payload} B drained on {connections} connection(s): {timers_per_s:.0} timers/s ({speedup}× one), WAL {:.1} MiB/s, disk bytes per WAL byte {disk_bytes_per_wal_byte:?}",
                median(&wal) / 1024.0 / 1024.0
            );
            out.push(ParallelDrain {
                connections,
                payload_bytes: payload,
                timers_per_s,
                speedup,
                disk_bytes_per_wal_byte,
                wal_bytes_per_s: Some(median(&wal).round()),
                model_timers_per_s: None,
            });
        }
    }
    Ok(out)
}

/// What one parallel drain moved and wrote, per second of it.
struct Drained {
    timers_per_s: f64,
    wal_bytes_per_s: f64,
    /// None when the disks cannot be read.
    disk_bytes_per_wal_byte: Option<f64>,
}

/// One drain of `backlog` due timers of `payload` bytes by `connections` takers at once, each
/// from its own starting shard as brokers are.
async fn parallel_drain(
    db: &RunDb,
    connections: u32,
    (payload, backlog): (u32, u32),
    prefix: &str,
) -> Result<Drained, Error> {
    due(db, backlog, payload, prefix).await?;
    let (lsn_before, disk_before) = (db.wal_lsn().await?, cpu::disk_bytes_written());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(connections)
        .connect(&db.url)
        .await
        .map_err(Error::db("cannot connect the parallel drain"))?;
    let started = clock::monotonic_now();
    let mut takers = tokio::task::JoinSet::new();
    for i in 0..connections {
        let store = PgStore::from_pool(pool.clone(), Duration::from_secs(60));
        takers.spawn(
            async move { take_until_empty(&store, queen_sim::parallel::first_shard(i)).await },
        );
    }
    let mut moved = 0;
    while let Some(joined) = takers.join_next().await {
        moved += joined.map_err(|e| Error::Message(format!("a taker panicked: {e}")))??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let wal = (db.wal_lsn().await? - lsn_before) as f64;
    let disk = disk_before
        .zip(cpu::disk_bytes_written())
        .map(|(before, after)| after.saturating_sub(before) as f64);
    pool.close().await;
    if moved != u64::from(backlog) {
        return Err(Error::Message(format!(
            "calibrate: the parallel drain moved {moved} of {backlog}"
        )));
    }
    Ok(Drained {
        timers_per_s: moved as f64 / seconds.max(1e-6),
        wal_bytes_per_s: wal / seconds.max(1e-6),
        disk_bytes_per_wal_byte: disk.filter(|_| wal > 0.0).map(|d| d / wal),
    })
}

/// Takes batches of 200 until a take comes back short; answers the timers moved.
async fn take_until_empty(store: &PgStore, first_shard: u8) -> Result<u64, Error> {
    queen_sim::parallel::take_until_empty(store, first_shard)
        .await
        .map_err(sweeper_error("take"))
}

/// What every fit needs from the first measurements.
struct Measured {
    rtt: f64,
    wal_bps: f64,
    flush_us: f64,
    small_write_us: f64,
    /// The rig's cores.
    cores: u32,
}

/// The drain calls' samples: (probe, claim, fire, take).
struct DrainSamples {
    probe: Samples,
    claim: Samples,
    fire: Samples,
    take: Samples,
    /// Takes of a batch while a backlog of [`DRAINING`] due timers in one queue drains.
    take_draining: Samples,
    /// Each 512 B take's phases: (rows, [before its first stamp, over its stamps, after its
    /// last], µs, the round trip not yet taken off).
    take_phases: Vec<(u64, [f64; 3])>,
}

/// The KV sub-clocks' samples: (prune, rollup).
struct KvSamples {
    prune: Samples,
    rollup: Samples,
}

fn median(values: &[f64]) -> f64 {
    Spread::of_values(values.to_vec()).p50
}

fn elapsed_us(since: std::time::Instant) -> f64 {
    (clock::monotonic_now() - since).as_secs_f64() * 1e6
}

async fn round_trip(db: &RunDb) -> Result<Spread, Error> {
    let mut connection = db.pool.acquire().await.map_err(Error::db("round trip"))?;
    let mut values = Vec::new();
    for _ in 0..300 {
        let started = clock::monotonic_now();
        sqlx::query("SELECT 1")
            .execute(&mut *connection)
            .await
            .map_err(Error::db("round trip"))?;
        values.push(elapsed_us(started));
    }
    Ok(Spread::of_values(values))
}

/// A one-row insert's COMMIT (the flush), and a one-row insert in a transaction of its own (a
/// small call), both server side.
async fn commit_latency(db: &RunDb, rtt: f64) -> Result<(Spread, Spread), Error> {
    let mut connection = db.pool.acquire().await.map_err(Error::db("commit"))?;
    let (mut commits, mut writes) = (Vec::new(), Vec::new());
    for _ in 0..200 {
        let mut tx = connection.begin().await.map_err(Error::db("commit"))?;
        sqlx::query("INSERT INTO soak_scratch (body) VALUES ('\\x00')")
            .execute(&mut *tx)
            .await
            .map_err(Error::db("commit"))?;
        let started = clock::monotonic_now();
        tx.commit().await.map_err(Error::db("commit"))?;
        commits.push((elapsed_us(started) - rtt).max(0.0));
        let started = clock::monotonic_now();
        sqlx::query("INSERT INTO soak_scratch (body) VALUES ('\\x00')")
            .execute(&mut *connection)
            .await
            .map_err(Error::db("small write"))?;
        writes.push((elapsed_us(started) - rtt).max(0.0));
    }
    Ok((Spread::of_values(commits), Spread::of_values(writes)))
}

/// One writer's statements of 64 rows of 8 KiB: (WAL bytes, seconds), one per run. The bytes
/// do not compress, so the WAL carries all of them.
async fn wal_runs(db: &RunDb) -> Result<Vec<(f64, f64)>, Error> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let rows: Vec<Vec<u8>> = (0..WAL_ROWS)
        .map(|_| {
            (0..8_192)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect()
        })
        .collect();
    let mut connection = db.pool.acquire().await.map_err(Error::db("WAL writer"))?;
    let mut runs = Vec::new();
    for _ in 0..WAL_RUNS {
        let (mut bytes, mut seconds) = (0.0, 0.0);
        for _ in 0..WAL_STATEMENTS {
            let before = db.wal_lsn().await?;
            let started = clock::monotonic_now();
            sqlx::query("INSERT INTO soak_scratch (body) SELECT unnest($1::bytea[])")
                .bind(&rows)
                .execute(&mut *connection)
                .await
                .map_err(Error::db("WAL writer"))?;
            seconds += (clock::monotonic_now() - started).as_secs_f64();
            bytes += (db.wal_lsn().await? - before) as f64;
        }
        runs.push((bytes, seconds));
        sqlx::query("TRUNCATE soak_scratch")
            .execute(&db.pool)
            .await
            .map_err(Error::db("cannot empty the scratch table"))?;
    }
    Ok(runs)
}

/// Times `call` and the WAL it writes.
async fn timed<T, F>(db: &RunDb, call: F) -> Result<(T, f64, f64), Error>
where
    F: std::future::Future<Output = Result<T, Error>>,
{
    let before = db.wal_lsn().await?;
    let started = clock::monotonic_now();
    let out = call.await?;
    let us = elapsed_us(started);
    let wal = (db.wal_lsn().await? - before) as f64;
    Ok((out, us, wal))
}

fn sweeper_error(what: &'static str) -> impl FnOnce(queen_sweeper::Error) -> Error {
    move |e| Error::Message(format!("calibrate: the {what} failed: {e}"))
}

async fn drain_samples(db: &RunDb) -> Result<DrainSamples, Error> {
    let store = PgStore::from_pool(db.pool.clone(), Duration::from_secs(60));
    let admission = Admission::new(LaneSizes::default());
    let mut out = DrainSamples {
        probe: Samples::default(),
        claim: Samples::default(),
        fire: Samples::default(),
        take: Samples::default(),
        take_draining: Samples::default(),
        take_phases: Vec::new(),
    };
    let sizes = ROWS
        .iter()
        .map(|&n| (n, PAYLOAD))
        .chain(PAYLOADS.iter().map(|&p| (200, p)));
    for (rows, payload) in sizes {
        eprintln!("soak: calibrate: drain calls, {rows} rows of {payload} B");
        for rep in 0..REPS {
            let prefix = format!("c{rows}p{payload}r{rep}");
            due(db, rows, payload, &format!("{prefix}c")).await?;
            leased_once(db, &store, &admission, (rows, payload), &mut out).await?;
            take_once(db, &store, &admission, (rows, payload, &prefix), &mut out).await?;
        }
    }
    for (rows, reps) in TAKE_BULK {
        eprintln!("soak: calibrate: takes of {rows} rows of {PAYLOAD} B");
        for rep in 0..reps {
            let prefix = format!("bulk{rows}r{rep}");
            take_once(db, &store, &admission, (rows, PAYLOAD, &prefix), &mut out).await?;
        }
    }
    eprintln!("soak: calibrate: takes of 200 while {DRAINING} due timers drain");
    due(db, DRAINING, PAYLOAD, "drain").await?;
    loop {
        let slot = admission.maintenance().await;
        let request = plain_take(0, 200);
        let (taken, us, wal) = timed(db, async {
            store
                .take(&slot, &request)
                .await
                .map_err(sweeper_error("take"))
        })
        .await?;
        if taken.timers() < 200 {
            break;
        }
        out.take_draining.0.push(sample(200, PAYLOAD, us, wal));
    }
    Ok(out)
}

/// One take of `rows` due timers of `payload` bytes (inserted first, with keys `prefix`t-…):
/// its time and WAL, and where its messages' stamps fall in it.
async fn take_once(
    db: &RunDb,
    store: &PgStore,
    admission: &Admission,
    (rows, payload, prefix): (u32, u32, &str),
    out: &mut DrainSamples,
) -> Result<(), Error> {
    let keys = format!("{prefix}t");
    due(db, rows, payload, &keys).await?;
    let slot = admission.maintenance().await;
    let request = plain_take(0, rows);
    let ((taken, sent_s), us, wal) = timed(db, async {
        let sent_s = clock::wall_since_epoch().as_secs_f64();
        let taken = store
            .take(&slot, &request)
            .await
            .map_err(sweeper_error("take"))?;
        Ok((taken, sent_s))
    })
    .await?;
    if taken.timers() != u64::from(rows) {
        return Err(Error::Message(format!(
            "calibrate: the take moved {} of {rows}",
            taken.timers()
        )));
    }
    out.take.0.push(sample(rows, payload, us, wal));
    if payload == PAYLOAD {
        let (first, last): (f64, f64) = sqlx::query_as(
            "SELECT extract(epoch FROM min(created_at))::float8, extract(epoch FROM max(created_at))::float8
             FROM queen.log_messages WHERE starts_with(txn, $1)",
        )
        .bind(format!("{keys}-"))
        .fetch_one(&db.pool)
        .await
        .map_err(Error::db("cannot read a take's stamps"))?;
        let before = (first - sent_s) * 1e6;
        let stamps = (last - first) * 1e6;
        out.take_phases
            .push((u64::from(rows), [before, stamps, us - before - stamps]));
    }
    Ok(())
}

/// `rows` due timers with incompressible payloads.
async fn due(db: &RunDb, rows: u32, payload: u32, prefix: &str) -> Result<(), Error> {
    sqlx::query(DUE_RANDOM)
        .bind(i64::from(rows))
        .bind(i32::try_from(payload).unwrap_or(i32::MAX))
        .bind(prefix)
        .execute(&db.pool)
        .await
        .map(|_| ())
        .map_err(Error::db("cannot insert due timers"))
}

fn sample(rows: u32, payload: u32, us: f64, wal: f64) -> Sample {
    Sample {
        rows: u64::from(rows),
        payload: u64::from(payload),
        us,
        wal,
    }
}

/// One probe, one claim of the batch, and one fire of all of it.
async fn leased_once(
    db: &RunDb,
    store: &PgStore,
    admission: &Admission,
    (rows, payload): (u32, u32),
    out: &mut DrainSamples,
) -> Result<(), Error> {
    let config = Config::default();
    let slot = admission.maintenance().await;
    let shards = ShardOrder::starting_at(0);
    let probe = ProbeRequest {
        shards: shards.clone(),
        due_cap: config.due_cap,
        kv_cap: KV_ALARM_CAP,
    };
    let (_, us, wal) = timed(db, async {
        store
            .probe(&slot, &probe)
            .await
            .map_err(sweeper_error("probe"))
    })
    .await?;
    out.probe.0.push(sample(rows, payload, us, wal));
    let claim = ClaimRequest::rows(shards, Duration::from_millis(config.lease_ms), rows);
    let (claimed, us, wal) = timed(db, async {
        store
            .claim(&slot, &claim)
            .await
            .map_err(sweeper_error("claim"))
    })
    .await?;
    if claimed.rows.len() != rows as usize {
        return Err(Error::Message(format!(
            "calibrate: the claim took {} of {rows}",
            claimed.rows.len()
        )));
    }
    out.claim.0.push(sample(rows, payload, us, wal));
    // One fire for the whole batch: the model charges one fire call per batch.
    let calls = plan_fire_calls(&claimed.rows, u64::MAX / 2);
    for call in calls {
        let (outcomes, us, wal) = timed(db, async {
            store
                .fire(&slot, &call)
                .await
                .map_err(sweeper_error("fire"))
        })
        .await?;
        if let Some(o) = outcomes
            .iter()
            .find(|o| !matches!(o.result, SegmentResult::Fired { .. }))
        {
            return Err(Error::Message(format!(
                "calibrate: a fire segment came back {:?}",
                o.result
            )));
        }
        out.fire.0.push(sample(rows, payload, us, wal));
    }
    Ok(())
}

/// Pushes of 1, 10 and 50 messages of 512 B into one partition, on one connection.
async fn push_samples(db: &RunDb) -> Result<Samples, Error> {
    let mut connection = sqlx::PgConnection::connect(&db.url)
        .await
        .map_err(Error::db("push"))?;
    let mut out = Samples::default();
    for count in PUSH_SIZES {
        eprintln!("soak: calibrate: pushes of {count} messages");
        let payloads: Vec<Vec<u8>> = (0..count).map(|_| vec![b'p'; PAYLOAD as usize]).collect();
        for _ in 0..REPS * 3 {
            let before = db.wal_lsn().await?;
            let started = clock::monotonic_now();
            sqlx::query(
                "SELECT count(*) FROM queen.log_push_v1('t0', 'q0', 'p0', $1, NULL, now())",
            )
            .bind(&payloads)
            .execute(&mut connection)
            .await
            .map_err(Error::db("push"))?;
            let us = elapsed_us(started);
            let wal = (db.wal_lsn().await? - before) as f64;
            out.0.push(sample(count, PAYLOAD, us, wal));
        }
    }
    Ok(out)
}

/// The prune over expired KV rows, and a rollup step over tenants with one row each.
async fn kv_samples(db: &RunDb) -> Result<KvSamples, Error> {
    let store = PgStore::from_pool(db.pool.clone(), Duration::from_secs(60));
    let admission = Admission::new(LaneSizes::default());
    let mut out = KvSamples {
        prune: Samples::default(),
        rollup: Samples::default(),
    };
    for (size, count) in PRUNE_SIZES.iter().enumerate() {
        eprintln!("soak: calibrate: prunes of {count} expired rows");
        for rep in 0..REPS {
            kv_rows(db, *count, &format!("x{size}r{rep}"), true, 1).await?;
            let slot = admission.maintenance().await;
            let shards = ShardOrder::starting_at(0);
            let (step, us, wal) = timed(db, async {
                store
                    .kv_expire_step(&slot, &shards, count.max(&1) * 2)
                    .await
                    .map_err(sweeper_error("prune"))
            })
            .await?;
            if step.deleted != u64::from(*count) {
                return Err(Error::Message(format!(
                    "calibrate: the prune deleted {} of {count}",
                    step.deleted
                )));
            }
            out.prune.0.push(sample(*count, 16, us, wal));
        }
    }
    let mut total_tenants = 0;
    for tenants in ROLLUP_SIZES {
        let fresh = tenants - total_tenants;
        kv_rows(db, fresh, &format!("u{tenants}"), false, fresh).await?;
        total_tenants = tenants;
        eprintln!("soak: calibrate: rollup steps over {tenants} tenants");
        for _ in 0..REPS {
            let slot = admission.maintenance().await;
            let (_, us, wal) = timed(db, async {
                store
                    .usage_step(&slot, None, ROLLUP_TENANTS_PER_STEP)
                    .await
                    .map_err(sweeper_error("rollup"))
            })
            .await?;
            out.rollup.0.push(sample(tenants, 16, us, wal));
        }
    }
    Ok(out)
}

/// `count` KV rows over `tenants` tenants, expired a minute ago or never expiring.
async fn kv_rows(
    db: &RunDb,
    count: u32,
    prefix: &str,
    expired: bool,
    tenants: u32,
) -> Result<(), Error> {
    sqlx::query(
        "INSERT INTO queen.kv (tenant_id, namespace, key, value, expires_at, created_at, updated_at)
         SELECT $3 || 't' || (i % $2), 'ns', $3 || 'k' || i, '{\"v\": 1}',
                CASE WHEN $4 THEN now() - interval '1 minute' END, now(), now()
         FROM generate_series(1, $1) AS i",
    )
    .bind(i64::from(count))
    .bind(i64::from(tenants.max(1)))
    .bind(prefix)
    .bind(expired)
    .execute(&db.pool)
    .await
    .map(|_| ())
    .map_err(Error::db("cannot insert KV rows"))
}

/// The model's costs from the samples, and each call's fit.
fn fit(m: &Measured, drain: &DrainSamples, push: &Samples, kv: &KvSamples) -> (Costs, Vec<Fit>) {
    let server = |s: &Sample| (s.us - m.rtt).max(0.0);
    // A write's WAL: its bytes at the bandwidth, then its flush.
    let wal_us = |bytes: f64| {
        if bytes > 0.0 {
            bytes / m.wal_bps.max(1.0) * 1e6 + m.flush_us
        } else {
            0.0
        }
    };
    // Bytes a fired row writes beyond its payload: from the 512 B batches of 50 rows or more.
    let per_row_extra = |samples: &Samples| {
        let values: Vec<f64> = samples
            .0
            .iter()
            .filter(|s| s.payload == u64::from(PAYLOAD) && s.rows >= 50)
            .map(|s| s.wal / s.rows as f64 - s.payload as f64)
            .collect();
        median(&values).max(0.0)
    };
    let row_overhead = ((per_row_extra(&drain.fire) + per_row_extra(&drain.take)) / 2.0).round();
    // What each out-of-line chunk adds: the fired rows of the large payloads, beyond their bytes
    // and the row overhead.
    let per_chunk: Vec<f64> = drain
        .fire
        .0
        .iter()
        .chain(&drain.take.0)
        .filter(|s| toast_chunks(s.payload) > 0 && s.rows > 0)
        .map(|s| {
            (s.wal / s.rows as f64 - s.payload as f64 - row_overhead)
                / toast_chunks(s.payload) as f64
        })
        .collect();
    let toast_chunk_wal = if per_chunk.is_empty() {
        0
    } else {
        median(&per_chunk).max(0.0).round() as u64
    };
    // The rows' part of a call: its server time less its WAL's time, fitted on the 512 B batches.
    // The line goes through each size's median, so one slow repetition (a checkpoint, another
    // process's burst of writes) does not pull it, and it weighs each size's error relative to
    // its time, so the 20 000-row takes do not set the base of the 1-row ones (fitted by least
    // squares at 1877925, the take's base came out at 22 µs against 1 206 measured: -86%).
    let line = |samples: &Samples| {
        let points: Vec<(f64, f64)> = samples
            .groups()
            .into_iter()
            .filter(|((_, payload), _)| *payload == u64::from(PAYLOAD))
            .map(|((rows, _), group)| {
                let rest: Vec<f64> = group.iter().map(|s| server(s) - wal_us(s.wal)).collect();
                (rows as f64, median(&rest))
            })
            .collect();
        let (a, b) = fit_line_relative(&points);
        (a.max(0.0).round() as u64, b.max(0.0).round() as u64)
    };
    let (claim_base, claim_row) = line(&drain.claim);
    // A claim rewrites its rows, payload included while it is stored inline: the 512 B batches
    // (a payload over about 2 KiB is TOASTed and the claim's new version does not carry it).
    let claim_wal = fit_line(
        &drain
            .claim
            .0
            .iter()
            .filter(|s| s.payload == u64::from(PAYLOAD))
            .map(|s| (s.rows as f64, s.wal))
            .collect::<Vec<_>>(),
    )
    .1
    .max(0.0)
    .round() as u64;
    let (fire_base, fire_row) = line(&drain.fire);
    let (take_base, take_row) = line(&drain.take);
    let phases = take_phases(drain, m.rtt);
    let slope = |f: fn(&TakePhases) -> f64| {
        let points: Vec<(f64, f64)> = phases.iter().map(|p| (p.rows as f64, f(p))).collect();
        fit_line(&points).1.max(0.0).round() as u64
    };
    let (take_pick_row, take_insert_row) = (slope(|p| p.before_first_us), slope(|p| p.stamps_us));
    let push_base = median(
        &push
            .0
            .iter()
            .filter(|s| s.rows == 1)
            .map(|s| server(s) - wal_us(s.wal))
            .collect::<Vec<_>>(),
    )
    .max(0.0)
    .round() as u64;
    let small_call = m.small_write_us.round() as u64;
    let prune_row = fit_line(
        &kv.prune
            .0
            .iter()
            .map(|s| (s.rows as f64, server(s) - small_call as f64))
            .collect::<Vec<_>>(),
    )
    .1
    .max(0.0)
    .round() as u64;
    let costs = Costs {
        probe_us: median(&drain.probe.0.iter().map(server).collect::<Vec<_>>()).round() as u64,
        claim_base_us: claim_base,
        claim_row_us: claim_row,
        fire_base_us: fire_base,
        fire_row_us: fire_row,
        take_base_us: take_base,
        take_row_us: take_row,
        take_pick_row_us: take_pick_row,
        take_insert_row_us: take_insert_row,
        small_call_us: small_call,
        push_base_us: push_base,
        prune_row_us: prune_row,
        wal_bytes_per_s: m.wal_bps.round() as u64,
        flush_us: m.flush_us.round() as u64,
        row_overhead_bytes: row_overhead as u64,
        toast_chunk_wal_bytes: toast_chunk_wal,
        claim_wal_bytes_per_row: claim_wal,
        cores: m.cores,
        contention_permille: 0,
    };
    let c = costs;
    let model_wal = |rows: u64, payload: u64| wal_us((rows * c.row_wal_bytes(payload)) as f64);
    let fits = vec![
        fit_of("probe", "probe", &drain.probe, m.rtt, |_, _| {
            c.probe_us as f64
        }),
        fit_of(
            "claim",
            "base + row × n + WAL(claim bytes × n) + flush",
            &drain.claim,
            m.rtt,
            |n, _| {
                (c.claim_base_us + c.claim_row_us * n) as f64
                    + wal_us((n * c.claim_wal_bytes_per_row) as f64)
            },
        ),
        fit_of(
            "fire",
            "base + row × n + WAL(n × row bytes) + flush",
            &drain.fire,
            m.rtt,
            |n, p| (c.fire_base_us + c.fire_row_us * n) as f64 + model_wal(n, p),
        ),
        fit_of(
            "take",
            "base + row × n + WAL(n × row bytes) + flush",
            &drain.take,
            m.rtt,
            |n, p| (c.take_base_us + c.take_row_us * n) as f64 + model_wal(n, p),
        ),
        fit_of(
            "take, 20 000 draining",
            "as the take",
            &drain.take_draining,
            m.rtt,
            |n, p| (c.take_base_us + c.take_row_us * n) as f64 + model_wal(n, p),
        ),
        fit_of(
            "push",
            "base + WAL(n × row bytes) + flush",
            push,
            m.rtt,
            |n, p| c.push_base_us as f64 + model_wal(n, p),
        ),
        fit_of(
            "prune",
            "small call + row × n",
            &kv.prune,
            m.rtt,
            |n, _| (c.small_call_us + c.prune_row_us * n) as f64,
        ),
        fit_of("rollup", "small call", &kv.rollup, m.rtt, |_, _| {
            c.small_call_us as f64
        }),
    ];
    (costs, fits)
}

/// The line `a + b × x` that minimises the squared errors relative to each `y` (weighted least
/// squares, weights 1/y²); points with `y` ≤ 0 are left out.
fn fit_line_relative(points: &[(f64, f64)]) -> (f64, f64) {
    let (mut s, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, y) in points.iter().filter(|p| p.1 > 0.0) {
        let w = 1.0 / (y * y);
        s += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
    }
    let det = s * sxx - sx * sx;
    if s == 0.0 || det.abs() < f64::EPSILON * s * sxx.max(1.0) {
        return fit_line(points);
    }
    let b = (s * sxy - sx * sy) / det;
    ((sy - b * sx) / s, b)
}

/// Each take size's phases, medians over its repetitions, half the round trip taken off each
/// end.
fn take_phases(drain: &DrainSamples, rtt: f64) -> Vec<TakePhases> {
    let mut sizes: Vec<u64> = drain.take_phases.iter().map(|(rows, _)| *rows).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .into_iter()
        .map(|rows| {
            let of = |i: usize| {
                let values: Vec<f64> = drain
                    .take_phases
                    .iter()
                    .filter(|(n, _)| *n == rows)
                    .map(|(_, phases)| phases[i])
                    .collect();
                (median(&values) * 10.0).round() / 10.0
            };
            TakePhases {
                rows,
                before_first_us: (of(0) - rtt / 2.0).max(0.0),
                stamps_us: of(1),
                after_last_us: (of(2) - rtt / 2.0).max(0.0),
            }
        })
        .collect()
}

/// One call's points against `predict(rows, payload)`.
fn fit_of(
    call: &str,
    formula: &str,
    samples: &Samples,
    rtt: f64,
    predict: impl Fn(u64, u64) -> f64,
) -> Fit {
    let points: Vec<FitPoint> = samples
        .groups()
        .into_iter()
        .map(|((rows, payload), group)| FitPoint {
            rows,
            payload_bytes: payload,
            measured_us: Spread::of_values(group.iter().map(|s| (s.us - rtt).max(0.0)).collect()),
            predicted_us: (predict(rows, payload) * 10.0).round() / 10.0,
            wal_bytes: median(&group.iter().map(|s| s.wal).collect::<Vec<_>>()),
        })
        .collect();
    let max_error_pct = points
        .iter()
        .map(|p| ((p.predicted_us - p.measured_us.p50) / p.measured_us.p50.max(1.0)).abs() * 100.0)
        .fold(0.0, f64::max);
    Fit {
        call: call.to_owned(),
        formula: formula.to_owned(),
        points,
        max_error_pct: (max_error_pct * 10.0).round() / 10.0,
    }
}

/// The calibration as markdown: the costs, then each call's fit, point by point.
pub fn summary(c: &Calibration) -> String {
    let k = c.costs;
    let mut out = format!(
        "Calibration {} (round trip p50 {:.0} µs, flush p50 {:.0} µs, the model's WAL {:.1} MiB/s, fitted on the large rows' parallel drains; the WAL runs' median {:.1} MiB/s)\n\n",
        c.describe(),
        c.round_trip_us.p50,
        c.commit_us.p50,
        k.wal_bytes_per_s as f64 / 1024.0 / 1024.0,
        median(&c.wal_bytes_per_s_runs) / 1024.0 / 1024.0,
    );
    out += &format!(
        "| cost | value |\n|---|---|\n| probe | {} µs |\n| claim | {} + {} × n µs, {} WAL B/row |\n| fire | {} + {} × n µs |\n| take | {} + {} × n µs |\n| push | {} µs + WAL |\n| small call | {} µs |\n| prune | {} µs/row |\n| row overhead | {} B |\n\n",
        k.probe_us,
        k.claim_base_us,
        k.claim_row_us,
        k.claim_wal_bytes_per_row,
        k.fire_base_us,
        k.fire_row_us,
        k.take_base_us,
        k.take_row_us,
        k.push_base_us,
        k.small_call_us,
        k.prune_row_us,
        k.row_overhead_bytes
    );
    if !c.take_phases.is_empty() {
        out += &format!(
            "A take's phases ({PAYLOAD} B rows; per row, fitted: {} µs before its first message, {} µs a message over the stamps):\n\n| rows | before the first stamp, µs | over the stamps, µs | after the last, µs |\n|---:|---:|---:|---:|\n",
            k.take_pick_row_us, k.take_insert_row_us
        );
        for p in &c.take_phases {
            out += &format!(
                "| {} | {:.0} | {:.0} | {:.0} |\n",
                p.rows, p.before_first_us, p.stamps_us, p.after_last_us
            );
        }
        out += "\n";
    }
    if !c.parallel_drain.is_empty() {
        out += &format!(
            "Due timers drained by takes of 200 on several connections at once, and the same drain in the model at these costs (`queen_sim::parallel`; {} cores, each other statement wanting one stretches a statement by {}‰, fitted on the {PAYLOAD} B drains by formula; the WAL bandwidth fitted on the large rows' drains by running the model; the disk's bytes per WAL byte are a diagnostic, not in the model):\n\n| payload B | connections | timers/s | over one | model timers/s | model / rig | WAL MiB/s | disk B per WAL B |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            k.cores, k.contention_permille
        );
        for p in &c.parallel_drain {
            let (model, ratio) = p.model_timers_per_s.map_or_else(
                || ("–".to_owned(), "–".to_owned()),
                |m| {
                    (
                        format!("{m:.0}"),
                        format!("{:.2}", m / p.timers_per_s.max(1.0)),
                    )
                },
            );
            out += &format!(
                "| {} | {} | {:.0} | {:.2}× | {model} | {ratio} | {} | {} |\n",
                p.payload_bytes,
                p.connections,
                p.timers_per_s,
                p.speedup,
                p.wal_bytes_per_s
                    .map_or_else(|| "–".to_owned(), |w| format!("{:.1}", w / 1024.0 / 1024.0)),
                p.disk_bytes_per_wal_byte
                    .map_or_else(|| "–".to_owned(), |r| r.to_string())
            );
        }
        out += "\n";
    }
    out += "| call | formula | n | payload B | measured µs: p50 (p90, max) | model µs | error | WAL B |\n|---|---|---:|---:|---|---:|---:|---:|\n";
    for fit in &c.fits {
        for p in &fit.points {
            let error = (p.predicted_us - p.measured_us.p50) / p.measured_us.p50.max(1.0) * 100.0;
            out += &format!(
                "| {} | {} | {} | {} | {:.0} ({:.0}, {:.0}) | {:.0} | {error:+.0}% | {:.0} |\n",
                fit.call,
                fit.formula,
                p.rows,
                p.payload_bytes,
                p.measured_us.p50,
                p.measured_us.p90,
                p.measured_us.max,
                p.predicted_us,
                p.wal_bytes
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(connections: u32, speedup: f64) -> ParallelDrain {
        ParallelDrain {
            connections,
            payload_bytes: PAYLOAD,
            timers_per_s: 1000.0 * speedup,
            speedup,
            disk_bytes_per_wal_byte: None,
            wal_bytes_per_s: None,
            model_timers_per_s: None,
        }
    }

    #[test]
    fn the_calls_wal_is_the_runs_unless_the_large_rows_best_drain_sustained_less() {
        let large = |connections, mb: f64| ParallelDrain {
            payload_bytes: 8_192,
            wal_bytes_per_s: Some(mb * 1e6),
            ..drain(connections, 1.0)
        };
        let small = ParallelDrain {
            wal_bytes_per_s: Some(50e6),
            ..drain(1, 1.0)
        };
        // The best large drain (190), not the one-connection one (124) nor the small rows'.
        let drains = [large(1, 124.0), large(2, 190.0), large(5, 180.0), small];
        assert_eq!(calls_wal_bps(245e6, &drains), 190e6);
        assert_eq!(calls_wal_bps(150e6, &drains), 150e6);
        // Files without the drains' WAL: the runs'.
        assert_eq!(calls_wal_bps(245e6, &[drain(1, 1.0)]), 245e6);
    }

    #[test]
    fn the_wal_fit_finds_the_bandwidth_the_drains_were_made_at() {
        // Drains the model itself ran at 150 MB/s: the fit, started from the committed file's
        // bandwidth, must find 150 again, and put each drain's model rate beside it.
        let mut c = queen_sim::calibration::builtin().clone();
        let planted = Costs {
            wal_bytes_per_s: 150_000_000,
            ..c.costs
        };
        for d in &mut c.parallel_drain {
            d.timers_per_s = model_drain(planted, d).unwrap();
            d.model_timers_per_s = None;
        }
        assert!(c.parallel_drain.iter().any(|d| d.payload_bytes > 1_900));
        fit_to_drains(&mut c).unwrap();
        let found = c.costs.wal_bytes_per_s as f64;
        assert!((found / 150e6 - 1.0).abs() < 0.03, "{found}");
        for d in &c.parallel_drain {
            let model = d.model_timers_per_s.unwrap();
            assert!((model / d.timers_per_s - 1.0).abs() < 0.05, "{d:?}");
        }
    }

    #[test]
    fn golden_section_finds_the_least_point_of_a_valley() {
        let x = golden_min(0.0, 10.0, 40, |x| Ok((x - 3.7_f64).powi(2))).unwrap();
        assert!((x - 3.7).abs() < 1e-3, "{x}");
        // At an edge when the valley lies beyond it.
        let edge = golden_min(0.0, 10.0, 40, |x| Ok(-x)).unwrap();
        assert!(edge > 9.99, "{edge}");
    }

    #[test]
    fn the_relative_fit_keeps_the_small_sizes_within_a_few_percent_where_least_squares_does_not() {
        // A take's rows' part (server time less WAL) as measured at 1877925, rounded.
        let points = [
            (1.0, 1_150.0),
            (25.0, 1_500.0),
            (50.0, 2_000.0),
            (100.0, 2_400.0),
            (200.0, 3_000.0),
            (400.0, 4_500.0),
            (2_000.0, 19_300.0),
            (20_000.0, 241_000.0),
        ];
        let error = |(a, b): (f64, f64), (x, y): (f64, f64)| ((a + b * x - y) / y).abs();
        let relative = fit_line_relative(&points);
        let plain = fit_line(&points);
        assert!(error(plain, points[0]) > 0.5, "{plain:?}");
        for p in points {
            assert!(error(relative, p) < 0.2, "{relative:?} at {p:?}");
        }
        // On a straight line both are exact.
        let line = [(1.0, 12.0), (10.0, 30.0), (100.0, 210.0)];
        let (a, b) = fit_line_relative(&line);
        assert!((a - 10.0).abs() < 1e-6 && (b - 2.0).abs() < 1e-9, "{a} {b}");
    }

    #[test]
    fn the_contention_is_the_median_stretch_that_explains_each_parallel_drain() {
        // 2 cores, a = 0.2: 2 / 1.2, 2 / 1.4, 2 / 1.8.
        let rig = [
            drain(1, 1.0),
            drain(2, 1.667),
            drain(3, 1.429),
            drain(5, 1.111),
        ];
        assert_eq!(contention_permille(&rig, 2), 200);
        // Perfect scaling up to the cores and flat after: no contention.
        let flat = [drain(1, 1.0), drain(2, 2.0), drain(4, 2.0)];
        assert_eq!(contention_permille(&flat, 2), 0);
        assert_eq!(
            contention_permille(&[drain(1, 1.0)], 2),
            0,
            "nothing to fit"
        );
    }

    #[test]
    fn only_the_small_rows_drains_of_two_or_more_connections_that_moved_rows_are_fitted() {
        let big = |connections, speedup| ParallelDrain {
            payload_bytes: 8_192,
            ..drain(connections, speedup)
        };
        let one_point = [drain(1, 1.0), drain(2, 1.667)];
        assert_eq!(contention_permille(&one_point, 2), 200);
        let with_big_rows = [drain(2, 1.667), big(3, 0.5), big(5, 0.5)];
        assert_eq!(contention_permille(&with_big_rows, 2), 200);
        let with_failed = [drain(2, 1.667), drain(3, 0.0), drain(5, 0.0)];
        assert_eq!(contention_permille(&with_failed, 2), 200);
    }
}
