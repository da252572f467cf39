//! Host `db`: serves the model over simulated TCP, with time where PostgreSQL spends it.
//!
//! Faithful where the phenomena live:
//! - a statement sees committed rows; an in-flight transaction's row locks make a claim skip those
//!   rows and a fire find them busy;
//! - claim tokens and leases live on the database's clock;
//! - a fire holds its timer-row locks while it waits, first come first served, for the partition
//!   locks pushes hold, and every commit writes its bytes through one WAL of finite bandwidth, so
//!   a big fire under push load is slow: the condition of the livelock;
//! - a KV put inside an open transaction holds its row's lock, its new version invisible, until
//!   the commit or the rollback; another put waits for it, and the prune skips the row
//!   (`SKIP LOCKED`) while its committed version, expired, still counts as unpruned.
//!
//! Simplifications (each one checked not to matter for what the simulation claims):
//! - statements cost simulated times measured on a rig ([`Costs`], from `soak calibrate`), spent
//!   on one of the rig's cores (at most `cores` at once); the brokers' own CPU is not modelled;
//! - a take's and a fire's fixed cost comes before their partition locks and their per-row cost
//!   (the append and the delete) under them: the split is assumed, not measured;
//! - the WAL is one FIFO writer and one flusher with group commit; the flush has one cost
//!   whatever it carries. The small calls (fail, DLQ, prune, rollup, KV put) fold their commit
//!   into their own cost instead of waiting for the flusher;
//! - a claim's EvalPlanQual side effect (PostgreSQL keeps the lock on a row it rechecked and
//!   rejected) is not modelled; the fire's polling for busy rows is;
//! - the database never fails or restarts; faults are on brokers and links;
//! - a statement whose client went away still runs to completion (the ambiguous commit);
//! - queues/partitions need no provisioning locks;
//! - KV puts keep no version counter, check no quota and write no WAL;
//! - load hosts describe large payloads by their size (`{"simBytes": N}`) instead of carrying
//!   them over the simulated wire; the WAL is charged their full size.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use queen_sweeper::{
    Destination, FailRow, FireCall, ProbeRequest, SegmentOutcome, SegmentResult, Switch, TimerRef,
};
use uuid::Uuid;

use super::ops::{self, RowState, SqlError, Staged};
use super::state::{KvKey, KvRow, Source, Tables, TimerKey, Us};
use crate::rng::Rng;
use crate::time::now_us;
use crate::wire::{DB_PORT, Request, Response, read_frame, write_frame};

/// What statements cost: measured on a rig by `soak calibrate` (see [`crate::calibration`]).
pub use queen_harness::calibration::Costs;

/// The modelled database: tables plus the locks that queue (partition rows, the WAL).
#[derive(Debug)]
pub struct Db {
    pub tables: Mutex<Tables>,
    partition_locks: Mutex<BTreeMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    wal: tokio::sync::Mutex<()>,
    /// The WAL position the last flush made durable; held while a flush runs.
    flushed: tokio::sync::Mutex<u64>,
    /// The server's cores: a statement spends its time holding one.
    cores: tokio::sync::Semaphore,
    /// Statements on or waiting for a core now (they stretch each other's time).
    cpu_demand: std::sync::atomic::AtomicU64,
    /// Draws that round a sub-millisecond time to a whole tick (see [`Db::spend`]).
    rounding: Mutex<Rng>,
    pub costs: Costs,
}

/// One statement counted in the CPU demand while it lives (also when its task is dropped).
struct Demand<'a>(&'a std::sync::atomic::AtomicU64);

impl<'a> Demand<'a> {
    fn enter(count: &'a std::sync::atomic::AtomicU64) -> Demand<'a> {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Demand(count)
    }
}

impl Drop for Demand<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Polls for a row that is ours but locked this instant: 1+2+4+8+16+32 ms, as the SQL does.
const FIRE_BUSY_RETRIES: u32 = 6;
/// The longest a schedule waits for a row lock before it gives up (lock_timeout). Not measured.
const APPLY_LOCK_WAIT: Duration = Duration::from_secs(10);
/// Unpruned rows counted at most (the SQL's default cap).
const UNPRUNED_CAP: u64 = 10_000;
/// The label of the rounding's random stream, apart from the brokers' and the loads'.
const ROUNDING_STREAM: u64 = 7_000;

impl Db {
    /// A database with `costs`; `seed` drives the rounding of its sub-millisecond times.
    pub fn new(costs: Costs, seed: u64) -> Arc<Db> {
        Arc::new(Db {
            tables: Mutex::new(Tables::default()),
            partition_locks: Mutex::new(BTreeMap::new()),
            wal: tokio::sync::Mutex::new(()),
            flushed: tokio::sync::Mutex::new(0),
            cores: tokio::sync::Semaphore::new(costs.cores.max(1) as usize),
            cpu_demand: std::sync::atomic::AtomicU64::new(0),
            rounding: Mutex::new(Rng::new(seed).fork(ROUNDING_STREAM)),
            costs,
        })
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut Tables) -> R) -> R {
        f(&mut self.tables.lock().expect("the model is never poisoned"))
    }

    pub(crate) fn partition_lock(&self, id: u64) -> Arc<tokio::sync::Mutex<()>> {
        self.partition_locks
            .lock()
            .expect("not poisoned")
            .entry(id)
            .or_default()
            .clone()
    }

    /// Spends `micros` of a statement's time on one of the server's cores, waiting (first come,
    /// first served) while every core is busy. The time stretches with the other statements
    /// wanting the CPU when the core is granted (`costs.contention_permille` each): the rig's
    /// throughput falls past its core count, where a plain semaphore would keep it flat.
    pub(crate) async fn cpu(&self, micros: Us) {
        let _demand = Demand::enter(&self.cpu_demand);
        let _core = self
            .cores
            .acquire()
            .await
            .expect("the cores are never closed");
        let others = self
            .cpu_demand
            .load(std::sync::atomic::Ordering::SeqCst)
            .saturating_sub(1);
        let stretch = 1000 + others * u64::from(self.costs.contention_permille);
        self.spend(micros.saturating_mul(stretch) / 1000).await;
    }

    /// Lets `micros` of simulated time pass. The timer (and the simulation's tick) counts whole
    /// milliseconds and would round every sub-millisecond statement up to one, five times the
    /// rig's 0.2 ms probe: so the remainder is rounded up with the probability of its size, and
    /// the mean time spent is `micros`.
    pub(crate) async fn spend(&self, micros: Us) {
        let whole_ms = micros / 1000;
        let remainder = micros % 1000;
        let round_up = remainder > 0
            && self.rounding.lock().expect("not poisoned").next_u64() % 1000 < remainder;
        let ms = whole_ms + u64::from(round_up);
        if ms > 0 {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
    }

    /// Writes `bytes` through the one WAL and waits for their flush, as a commit does: waits
    /// for the writers before it, takes bytes / bandwidth, then waits for a flush that covers
    /// its position.
    pub(crate) async fn write_wal(&self, bytes: u64) {
        let position = {
            let _wal = self.wal.lock().await;
            let micros = bytes.saturating_mul(1_000_000) / self.costs.wal_bytes_per_s.max(1);
            self.spend(micros).await;
            self.with(|t| {
                t.wal_bytes += bytes;
                t.wal_bytes
            })
        };
        self.flush(position).await;
    }

    /// Group commit: one flush at a time, each making durable everything written before it
    /// began. A commit whose position an earlier flush covered returns without its own.
    async fn flush(&self, position: u64) {
        let mut flushed = self.flushed.lock().await;
        if *flushed >= position {
            return;
        }
        let target = self.with(|t| t.wal_bytes);
        self.spend(self.costs.flush_us).await;
        *flushed = target;
    }
}

/// The db host: accepts connections and serves each on its own task.
pub async fn serve(db: Arc<Db>) -> turmoil::Result {
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", DB_PORT)).await?;
    loop {
        let (stream, peer) = listener.accept().await?;
        let host = turmoil::reverse_lookup(peer.ip()).unwrap_or_else(|| peer.ip().to_string());
        tokio::spawn(serve_connection(db.clone(), stream, host));
    }
}

/// An open transaction of one connection: the schedule seam's, or the transaction wire's.
#[derive(Debug)]
struct OpenTxn {
    txn: u64,
    staged: Vec<Staged>,
}

async fn serve_connection(db: Arc<Db>, mut stream: turmoil::net::TcpStream, host: String) {
    let mut open: Option<OpenTxn> = None;
    while let Ok(request) = read_frame::<_, Request>(&mut stream).await {
        db.with(|t| t.record_query(now_us(), &host, request.kind()));
        let response = execute(&db, &host, request, &mut open).await;
        if write_frame(&mut stream, &response).await.is_err() {
            break;
        }
    }
    // The client is gone: an open transaction rolls back.
    if let Some(open) = open {
        db.with(|t| t.release_locks(open.txn));
    }
}

fn error(e: SqlError) -> Response {
    Response::Error {
        sqlstate: Some(e.sqlstate.to_owned()),
        message: e.message,
    }
}

/// Runs one request: each statement kind is its own function, which charges its simulated cost.
async fn execute(db: &Db, host: &str, request: Request, open: &mut Option<OpenTxn>) -> Response {
    match request {
        Request::Probe(request) => probe(db, &request).await,
        Request::Claim {
            shards,
            lease_ms,
            max_rows,
            per_tenant,
            fair_tenants,
            fair_after,
        } => {
            let limits = ClaimLimits {
                lease_ms,
                max_rows,
                per_tenant,
                fair_tenants,
            };
            claim(db, &shards, limits, fair_after.as_deref()).await
        }
        Request::Take(request) => super::take::take(db, host, &request).await,
        Request::Fire { call } => fire(db, host, &call).await,
        Request::Fail {
            rows,
            error: message,
            transient,
            max_attempts,
        } => fail(db, &rows, &message, transient, max_attempts).await,
        Request::Dlq { rows } => dlq(db, &rows).await,
        Request::KvExpire { shards, max_rows } => kv_expire(db, &shards, max_rows).await,
        Request::Usage { after, max_tenants } => usage(db, after.as_deref(), max_tenants).await,
        Request::ReadSwitches => Response::Switches(db.with(|t| t.switches())),
        Request::WriteSwitch { switch, enabled } => write_switch(db, switch, enabled),
        Request::Apply {
            tenant,
            ops: timer_ops,
        } => apply(db, &tenant, &timer_ops, open).await,
        Request::Begin => {
            begin(db, open);
            Response::Done
        }
        Request::Commit => commit(db, open.take()).await,
        Request::Rollback => rollback(db, open.take()),
        Request::Push {
            tenant,
            queue,
            partition,
            count,
            payload_bytes,
            txn_prefix,
        } => {
            let destination = Destination {
                tenant,
                queue,
                partition,
            };
            push(db, host, &destination, count, payload_bytes, &txn_prefix).await
        }
        Request::KvPut {
            tenant,
            namespace,
            key,
            ttl_ms,
            bytes,
        } => {
            let key = KvKey {
                tenant,
                namespace,
                key,
            };
            kv_put(db, key, ttl_ms, bytes, open).await
        }
    }
}

async fn probe(db: &Db, probe: &ProbeRequest) -> Response {
    db.cpu(db.costs.probe_us).await;
    let shards = probe.shards.as_slice();
    Response::Probe(db.with(|t| ops::probe(t, shards, now_us(), probe.due_cap, probe.kv_cap)))
}

/// The bounds of one claim, as the broker sent them.
#[derive(Debug, Clone, Copy)]
struct ClaimLimits {
    lease_ms: u64,
    max_rows: u32,
    per_tenant: u32,
    fair_tenants: u32,
}

/// CLAIM: the fairness round first, then the shards' due rows up to `max_rows`; the claim keeps
/// its row locks until its WAL write commits.
async fn claim(db: &Db, shards: &[u8], limits: ClaimLimits, fair_after: Option<&str>) -> Response {
    let c = db.costs;
    let now = now_us();
    let (txn, picked, fair_next) = db.with(|t| {
        let txn = t.new_txn();
        let (mut picked, fair_next) = ops::claim_fair(
            t,
            txn,
            now,
            (shards, limits.max_rows, 0),
            limits.fair_tenants.min(limits.max_rows),
            fair_after,
        );
        let remaining = limits.max_rows - picked.len() as u32;
        if remaining > 0 {
            let more = ops::claim_lock(
                t,
                txn,
                shards,
                (0, now),
                remaining,
                limits.per_tenant,
                &picked,
            );
            picked.extend(more);
        }
        (txn, picked, fair_next)
    });
    db.cpu(c.claim_base_us + c.claim_row_us * picked.len() as Us)
        .await;
    if !picked.is_empty() {
        // The claim rewrites each row it takes; its commit waits for the WAL like any
        // other, and keeps its row locks meanwhile.
        db.write_wal(picked.len() as u64 * c.claim_wal_bytes_per_row)
            .await;
    }
    let rows = db.with(|t| ops::claim_commit(t, txn, picked, now, limits.lease_ms * 1000));
    let fair_next = if rows.is_empty() { None } else { fair_next };
    Response::Claimed { rows, fair_next }
}

async fn fail(
    db: &Db,
    rows: &[FailRow],
    message: &str,
    transient: bool,
    max_attempts: u32,
) -> Response {
    db.cpu(db.costs.small_call_us).await;
    Response::Failed(db.with(|t| {
        let txn = t.new_txn();
        ops::fail(t, txn, rows, message, transient, max_attempts, now_us())
    }))
}

async fn dlq(db: &Db, rows: &[TimerRef]) -> Response {
    db.cpu(db.costs.small_call_us).await;
    Response::Count(db.with(|t| {
        let txn = t.new_txn();
        ops::dlq(t, txn, rows)
    }))
}

async fn kv_expire(db: &Db, shards: &[u8], max_rows: u32) -> Response {
    let c = db.costs;
    let step = db.with(|t| ops::kv_expire_step(t, shards, now_us(), max_rows, UNPRUNED_CAP));
    db.cpu(c.small_call_us + c.prune_row_us * step.deleted)
        .await;
    Response::Expire(step)
}

async fn usage(db: &Db, after: Option<&str>, max_tenants: u32) -> Response {
    db.cpu(db.costs.small_call_us).await;
    Response::Usage(db.with(|t| ops::usage_step(t, after, now_us(), max_tenants)))
}

fn write_switch(db: &Db, switch: Switch, enabled: bool) -> Response {
    db.with(|t| {
        let mut states = t.switches();
        match switch {
            Switch::Schedule => states.schedule_enabled = enabled,
            Switch::Fire => states.fire_enabled = enabled,
        }
        t.switches = Some(states);
    });
    Response::Done
}

/// COMMIT of the connection's schedule transaction, if one is open: new and changed timer rows
/// go through the WAL like any other write, then become visible.
async fn commit(db: &Db, open: Option<OpenTxn>) -> Response {
    let Some(txn) = open else {
        return Response::Done;
    };
    let c = db.costs;
    let bytes: u64 = txn
        .staged
        .iter()
        .map(|change| match change {
            Staged::Put(_, row) => c.row_wal_bytes(row.payload_bytes),
            Staged::Delete(_) => c.row_overhead_bytes,
        })
        .sum();
    db.write_wal(bytes).await;
    db.with(|t| ops::apply_commit(t, txn.txn, txn.staged));
    Response::Done
}

/// ROLLBACK of the connection's schedule transaction, if one is open: its row locks go.
fn rollback(db: &Db, open: Option<OpenTxn>) -> Response {
    if let Some(txn) = open {
        db.with(|t| t.release_locks(txn.txn));
    }
    Response::Done
}

/// KV PUT: inside the connection's open transaction when there is one (the new version waits
/// for its commit, under the row's lock), else committed at once. Waits, like the put's
/// `ON CONFLICT DO UPDATE`, while another transaction holds the row.
async fn kv_put(
    db: &Db,
    key: KvKey,
    ttl_ms: Option<u64>,
    bytes: u64,
    open: &mut Option<OpenTxn>,
) -> Response {
    db.cpu(db.costs.small_call_us).await;
    let txn = open.as_ref().map(|open| open.txn);
    let polls = APPLY_LOCK_WAIT.as_millis() as u32;
    for _ in 0..polls {
        let now = now_us();
        let row = KvRow {
            expires_at: ttl_ms.map(|ms| now + ms * 1000),
            bytes,
        };
        if db.with(|t| ops::kv_put(t, txn, key.clone(), row)).is_ok() {
            return Response::Done;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    if let Some(open) = open.take() {
        db.with(|t| t.release_locks(open.txn));
    }
    Response::Error {
        sqlstate: Some("55P03".into()),
        message: "lock timeout waiting for a kv row".into(),
    }
}

/// BEGIN: opens a transaction on the connection, if none is open; the statements after it join
/// it until COMMIT or ROLLBACK. (An apply opens one itself.)
fn begin(db: &Db, open: &mut Option<OpenTxn>) {
    if open.is_none() {
        *open = Some(OpenTxn {
            txn: db.with(Tables::new_txn),
            staged: Vec::new(),
        });
    }
}

async fn apply(
    db: &Db,
    tenant: &str,
    timer_ops: &[queen_sweeper::TimerOp],
    open: &mut Option<OpenTxn>,
) -> Response {
    let txn = match open {
        Some(txn) => txn.txn,
        None => {
            let txn = db.with(Tables::new_txn);
            *open = Some(OpenTxn {
                txn,
                staged: Vec::new(),
            });
            txn
        }
    };
    let polls = APPLY_LOCK_WAIT.as_millis() as u32;
    for _ in 0..polls {
        let staged = &mut open.as_mut().expect("opened above").staged;
        let outcome = db.with(|t| ops::apply(t, txn, tenant, timer_ops, now_us(), staged));
        match outcome {
            Ok(Ok(results)) => {
                db.cpu(db.costs.small_call_us).await;
                return Response::Applied(results);
            }
            Ok(Err(e)) => {
                // The statement raised: the transaction is aborted and rolls back.
                db.with(|t| t.release_locks(txn));
                *open = None;
                return error(e);
            }
            // A row another transaction holds: wait for it, like FOR UPDATE.
            Err(_busy) => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
    db.with(|t| t.release_locks(txn));
    *open = None;
    Response::Error {
        sqlstate: Some("55P03".into()),
        message: "lock timeout waiting for a timer row".into(),
    }
}

async fn push(
    db: &Db,
    host: &str,
    destination: &Destination,
    count: u32,
    payload_bytes: u64,
    txn_prefix: &str,
) -> Response {
    let id = db.with(|t| t.partition_id(destination));
    let lock = db.partition_lock(id);
    let _partition = lock.lock().await;
    db.cpu(db.costs.push_base_us).await;
    db.write_wal(u64::from(count) * db.costs.row_wal_bytes(payload_bytes))
        .await;
    let now = now_us();
    let first_offset = db.with(|t| {
        let base = t.messages.len();
        let entries = (0..count)
            .map(|i| {
                (
                    format!("{txn_prefix}-{}", base + i as usize),
                    Uuid::from_u128(((base + i as usize) as u128) << 64 | 1),
                )
            })
            .collect();
        t.append(destination, entries, now, Source::Push, host)
    });
    Response::Pushed { first_offset }
}

/// FIRE: lock held rows (polling busy ones), decide segments, queue for partition locks in id
/// order, write the WAL, commit.
async fn fire(db: &Db, host: &str, call: &FireCall) -> Response {
    if let Err(e) = ops::fire_check(call) {
        return error(e);
    }
    let c = db.costs;
    let rows = ops::fire_rows(call);
    let txn = db.with(Tables::new_txn);
    let states = lock_fire_rows(db, txn, &rows).await;
    // A segment is live when this fire holds every one of its rows; any other is stale.
    let live: Vec<bool> = states
        .iter()
        .map(|s| s.iter().all(|x| *x == RowState::Held))
        .collect();
    let live_rows: usize = rows
        .iter()
        .zip(&live)
        .filter(|(_, l)| **l)
        .map(|(r, _)| r.len())
        .sum();
    // Finding and locking the rows, then appending and deleting them under the partitions'
    // locks, which a push waits for.
    db.cpu(c.fire_base_us).await;
    let guards = lock_partitions(db, call, &live).await;
    db.cpu(c.fire_row_us * rows.iter().map(Vec::len).sum::<usize>() as Us)
        .await;
    if live_rows > 0 {
        db.write_wal(fire_wal_bytes(db, call, &rows, &live)).await;
    }
    let outcomes = db.with(|t| {
        let outcomes = commit_fire(t, host, call, &rows, &states, &live);
        t.release_locks(txn);
        outcomes
    });
    drop(guards);
    Response::Fired(outcomes)
}

/// Locks the fire's rows, polling the busy ones with a doubling sleep up to
/// [`FIRE_BUSY_RETRIES`] times; returns each segment's row states.
async fn lock_fire_rows(db: &Db, txn: u64, rows: &[Vec<(TimerKey, Uuid)>]) -> Vec<Vec<RowState>> {
    let mut states: Vec<Vec<RowState>> =
        rows.iter().map(|r| vec![RowState::Lost; r.len()]).collect();
    for attempt in 0..=FIRE_BUSY_RETRIES {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(1 << (attempt - 1))).await;
        }
        db.with(|t| {
            for (segment, states) in rows.iter().zip(states.iter_mut()) {
                ops::fire_lock(t, txn, segment, states);
            }
        });
        if !states.iter().flatten().any(|s| *s == RowState::Busy) {
            break;
        }
    }
    states
}

/// Takes the partition locks of the live segments, ascending id, first come first served.
async fn lock_partitions(
    db: &Db,
    call: &FireCall,
    live: &[bool],
) -> Vec<tokio::sync::OwnedMutexGuard<()>> {
    let mut ids: Vec<u64> = db.with(|t| {
        call.segments
            .iter()
            .zip(live)
            .filter(|(_, l)| **l)
            .map(|(s, _)| t.partition_id(&s.destination))
            .collect()
    });
    ids.sort_unstable();
    ids.dedup();
    let mut guards = Vec::with_capacity(ids.len());
    for id in ids {
        guards.push(db.partition_lock(id).lock_owned().await);
    }
    guards
}

/// The WAL a fire writes: its live segments' timer keys, and each live row's payload with its
/// overhead.
fn fire_wal_bytes(db: &Db, call: &FireCall, rows: &[Vec<(TimerKey, Uuid)>], live: &[bool]) -> u64 {
    let key_bytes = call
        .segments
        .iter()
        .zip(live)
        .filter(|(_, l)| **l)
        .flat_map(|(s, _)| s.timers.iter().map(|h| h.timer_key.len() as u64))
        .sum::<u64>();
    let row_bytes = db.with(|t| {
        rows.iter()
            .zip(live)
            .filter(|(_, l)| **l)
            .flat_map(|(r, _)| r.iter())
            .map(|(key, _)| {
                db.costs
                    .row_wal_bytes(t.timers.get(key).map_or(0, |row| row.payload_bytes))
            })
            .sum::<u64>()
    });
    key_bytes + row_bytes
}

/// Commits a fire: each live segment appends its messages, each stale one releases the rows this
/// fire held; every segment is recorded as an event and answered with its outcome.
fn commit_fire(
    t: &mut Tables,
    host: &str,
    call: &FireCall,
    rows: &[Vec<(TimerKey, Uuid)>],
    states: &[Vec<RowState>],
    live: &[bool],
) -> Vec<SegmentOutcome> {
    let now = now_us();
    let mut outcomes = Vec::with_capacity(rows.len());
    for (i, segment) in call.segments.iter().enumerate() {
        let timers = segment.timers.len() as u32;
        let result = if live[i] {
            let first_offset =
                ops::fire_commit_segment(t, &segment.destination, &rows[i], now, host);
            SegmentResult::Fired { first_offset }
        } else {
            ops::release_stale(t, &rows[i], &states[i], now);
            SegmentResult::Stale
        };
        t.segments.push(super::state::SegmentEvent {
            at: now,
            host: host.to_owned(),
            fired: live[i],
            timers,
        });
        outcomes.push(SegmentOutcome {
            segment: i,
            result,
            timers,
        });
    }
    outcomes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(cores: u32, contention_permille: u32) -> Arc<Db> {
        Db::new(
            Costs {
                cores,
                contention_permille,
                ..crate::calibration::builtin().costs
            },
            1,
        )
    }

    /// Simulated µs each of `n` statements of 10 ms, started together, took (the stretched times
    /// here are whole milliseconds, so no rounding draw moves them).
    async fn together(db: &Arc<Db>, n: usize) -> Vec<u128> {
        let start = queen_sweeper::clock::tokio_now();
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let db = db.clone();
                tokio::spawn(async move {
                    db.cpu(10_000).await;
                    start.elapsed().as_micros()
                })
            })
            .collect();
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.expect("no panic"));
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn a_statement_is_stretched_by_the_others_wanting_a_core_when_it_gets_one() {
        let db = db(2, 500);
        assert_eq!(together(&db, 1).await, [10_000]);
        // The first is granted a core alone; the second sees it: 1.5×.
        assert_eq!(together(&db, 2).await, [10_000, 15_000]);
        // The third waits for the first's core and then sees the second: 1.5×, from 10 ms.
        assert_eq!(together(&db, 3).await, [10_000, 15_000, 25_000]);
        // Without contention, the cores alone: two side by side, the third after the first.
        assert_eq!(together(&self::db(2, 0), 3).await, [10_000, 10_000, 20_000]);
        assert_eq!(db.cpu_demand.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    /// Simulated µs `n` spends of `micros`, one after another, took.
    async fn spent(db: &Db, n: u32, micros: Us) -> u128 {
        let start = queen_sweeper::clock::tokio_now();
        for _ in 0..n {
            db.spend(micros).await;
        }
        start.elapsed().as_micros()
    }

    #[tokio::test(start_paused = true)]
    async fn sub_millisecond_times_are_rounded_up_with_the_probability_of_their_size() {
        let db = db(2, 0);
        // Whole milliseconds are exact, and nothing takes no time.
        assert_eq!(spent(&db, 10, 2_000).await, 20_000);
        assert_eq!(spent(&db, 10, 0).await, 0);
        // 2 000 statements of 0.25 ms: about 500 ms, not the 2 000 ms of always rounding up
        // (nor 0 of always rounding down). The binomial's sd is about 19 ms.
        let quarter = spent(&db, 2_000, 250).await;
        assert!((420_000..=580_000).contains(&quarter), "{quarter} µs");
        // 1.7 ms: one or two ticks, 1.7 on average.
        let mixed = spent(&db, 1_000, 1_700).await;
        assert!((1_620_000..=1_780_000).contains(&mixed), "{mixed} µs");
    }
}
