//! The turmoil world of one run: host `db` (the model), hosts `broker-1..N` (the real sweeper
//! cycle over [`SimStore`]), load hosts, and the faults the run injects.
//!
//! A run has two phases: safety (load and faults) and liveness (load stopped, faults healed).
//! The checkers run on what the load hosts recorded and what the database ended with.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use queen_harness::Knobs;
use queen_sweeper::Config;
use queen_sweeper::Destination;
use queen_sweeper::Sweeper;
use queen_sweeper::clock;
use queen_sweeper::{Seam, TimerOp};
use serde::Serialize;

use crate::client::SimStore;
use crate::model::ops::described_payload;
use crate::model::server::{Costs, Db, serve};
use crate::model::state::Us;
use crate::naive::NaiveForms;
use crate::rng::Rng;
use crate::time::{EPOCH_UNIX_S, ORIGIN_US, elapsed_us, now_us, parse_us, us};
use crate::wire::{
    DB_PORT, Request, Response, SEAM_PORT, ScheduleRequest, ScheduleResponse, read_frame,
    write_frame,
};

/// A steady timer load, scheduled through the brokers' seams.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimerLoad {
    pub per_s: u32,
    /// Timers per schedule call.
    pub batch: u32,
    pub delay_ms: (u64, u64),
    pub payload_bytes: (u64, u64),
    pub tenants: u32,
    pub queues: u32,
    pub partitions: u32,
}

/// Many timers scheduled at one instant through one broker.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Burst {
    pub at_ms: u64,
    pub count: u32,
    pub delay_ms: u64,
    pub payload_bytes: u64,
    pub tenant: String,
    /// Which broker's seam receives it (1-based).
    pub broker: u32,
}

/// Producers pushing to the partitions the timers fire into.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PushLoad {
    pub pushers: u32,
    pub per_s_each: u32,
    pub messages_per_push: u32,
    pub payload_bytes: u64,
}

/// KV writes with TTLs, for the prune.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvLoad {
    pub per_s: u32,
    pub ttl_ms: (u64, u64),
    pub keys: u32,
    /// Writers of the transaction wire, on the same keys: each puts a key inside a transaction it
    /// holds open for `held_ms`, so the prune meets expired rows under a put's lock.
    pub wire_writers: u32,
    pub held_ms: (u64, u64),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum FaultKind {
    /// The broker's process dies: tasks gone, connections broken.
    Crash {
        broker: u32,
    },
    /// A crashed broker starts again.
    Restart {
        broker: u32,
    },
    /// The broker is cut from the database (both directions).
    Cut {
        broker: u32,
    },
    Heal {
        broker: u32,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub at_ms: u64,
    pub kind: FaultKind,
}

/// Everything that defines a run. With the same seed, the same run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSpec {
    pub seed: u64,
    pub brokers: u32,
    pub safety_ms: u64,
    pub liveness_ms: u64,
    /// Sweeper knobs (`QUEEN_SWEEPER_*`, `QUEEN_KV_*`) for every broker.
    pub knobs: Knobs,
    pub naive_drain: bool,
    pub floor_after_empty_claim: bool,
    pub costs: Costs,
    pub link_latency_ms: (u64, u64),
    pub timers: Option<TimerLoad>,
    pub bursts: Vec<Burst>,
    pub pushes: Option<PushLoad>,
    pub kv: Option<KvLoad>,
    pub faults: Vec<Fault>,
    /// Timers already in the table when the run starts (a backlog), written straight into the
    /// model and recorded as scheduled.
    pub backlogs: Vec<Backlog>,
}

/// `count` timers of `tenant`, all due at `due_at_ms` of the run, there from the start.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Backlog {
    pub tenant: String,
    pub count: u32,
    pub due_at_ms: u64,
    pub payload_bytes: u64,
}

impl RunSpec {
    pub fn new(seed: u64, costs: Costs) -> RunSpec {
        RunSpec {
            seed,
            brokers: 3,
            safety_ms: 30_000,
            liveness_ms: 15_000,
            knobs: Knobs::new(),
            naive_drain: false,
            floor_after_empty_claim: false,
            costs,
            link_latency_ms: (0, 1),
            timers: None,
            bursts: Vec::new(),
            pushes: None,
            kv: None,
            faults: Vec::new(),
            backlogs: Vec::new(),
        }
    }

    pub fn config(&self) -> Config {
        self.knobs
            .config()
            .unwrap_or_else(|e| panic!("scenario knobs are invalid: {e}"))
    }
}

/// A timer a load host scheduled and the database accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Scheduled {
    pub txn: String,
    pub deliver_at: Us,
    pub scheduled_at: Us,
    pub broker: u32,
}

/// What the load hosts recorded.
#[derive(Debug, Default)]
pub struct LoadLog {
    pub scheduled: Vec<Scheduled>,
    pub schedule_failures: u64,
    pub pushes: u64,
    pub push_latency_us: Vec<Us>,
    pub kv_puts: u64,
}

/// The end state of a run, for checkers and reports.
#[derive(Debug)]
pub struct RunOutcome {
    pub spec: RunSpec,
    pub db: Arc<Db>,
    pub log: Arc<Mutex<LoadLog>>,
    /// The database's clock at the end (see [`crate::time::ORIGIN_US`]).
    pub end_us: Us,
    pub wall: Duration,
    /// Why the run stopped early, if it did (a host returned an error or the run overran).
    pub failure: Option<String>,
}

fn broker_name(i: u32) -> String {
    format!("broker-{i}")
}

/// Runs the world to its end.
pub fn run(spec: &RunSpec) -> RunOutcome {
    let wall_start = clock::monotonic_now();
    let total = Duration::from_millis(spec.safety_ms + spec.liveness_ms);
    let db = Db::new(spec.costs, spec.seed);
    let log = Arc::new(Mutex::new(LoadLog::default()));
    let mut sim = turmoil::Builder::new()
        .rng_seed(spec.seed)
        .epoch(SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_UNIX_S as u64))
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::from_millis(spec.link_latency_ms.0))
        .max_message_latency(Duration::from_millis(spec.link_latency_ms.1))
        .simulation_duration(total + Duration::from_secs(60))
        .tcp_capacity(1 << 16)
        .build();

    preload(&db, &log, &spec.backlogs);
    let served = db.clone();
    sim.host("db", move || serve(served.clone()));
    let root = Rng::new(spec.seed);
    for i in 1..=spec.brokers {
        let spec = spec.clone();
        let jitter_seed = root.fork(1000 + u64::from(i)).next_u64();
        sim.host(broker_name(i), move || broker(spec.clone(), i, jitter_seed));
    }
    add_load(&mut sim, spec, &root, &log, total);

    let mut faults = spec.faults.clone();
    faults.sort_by_key(|f| f.at_ms);
    let mut next_fault = 0;
    let mut healed = false;
    let mut failure = None;
    loop {
        let elapsed_ms = sim.elapsed().as_millis() as u64;
        while next_fault < faults.len() && faults[next_fault].at_ms <= elapsed_ms {
            inject(&mut sim, &faults[next_fault].kind);
            next_fault += 1;
        }
        if !healed && elapsed_ms >= spec.safety_ms {
            heal_all(&mut sim, spec);
            healed = true;
        }
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                failure = Some(format!(
                    "the simulation stopped at {} ms: {e}",
                    sim.elapsed().as_millis()
                ));
                break;
            }
        }
    }
    let end_us = ORIGIN_US + us(sim.elapsed());
    RunOutcome {
        spec: spec.clone(),
        db,
        log,
        end_us,
        wall: clock::monotonic_now() - wall_start,
        failure,
    }
}

/// Writes the backlogs into the model before the run starts.
pub(crate) fn preload(db: &Db, log: &Mutex<LoadLog>, backlogs: &[Backlog]) {
    let mut log = log.lock().expect("not poisoned");
    db.with(|t| {
        for (n, backlog) in backlogs.iter().enumerate() {
            let due = ORIGIN_US + backlog.due_at_ms * 1000;
            for i in 0..backlog.count {
                let txn = format!("pre{n}-{i}");
                let key = crate::model::state::TimerKey {
                    tenant: backlog.tenant.clone(),
                    queue: format!("queue-{}", i % 4),
                    key: txn.clone(),
                };
                let message_id = uuid::Uuid::from_u128(
                    (u128::from(n as u32) << 64) | u128::from(i) | (1 << 127),
                );
                t.insert_timer(
                    key,
                    crate::model::state::TimerRow {
                        partition: format!("p{}", i % 8),
                        deliver_at: due,
                        txn: txn.clone(),
                        message_id,
                        payload_bytes: backlog.payload_bytes,
                        attempts: 0,
                        last_error: None,
                        claimed_until: None,
                        token: None,
                    },
                );
                log.scheduled.push(Scheduled {
                    txn,
                    deliver_at: due,
                    scheduled_at: ORIGIN_US,
                    broker: 0,
                });
            }
        }
    });
}

fn inject(sim: &mut turmoil::Sim<'_>, fault: &FaultKind) {
    match *fault {
        FaultKind::Crash { broker } => sim.crash(broker_name(broker)),
        FaultKind::Restart { broker } => {
            if !sim.is_host_running(broker_name(broker)) {
                sim.bounce(broker_name(broker));
            }
        }
        FaultKind::Cut { broker } => sim.partition(broker_name(broker), "db"),
        FaultKind::Heal { broker } => sim.repair(broker_name(broker), "db"),
    }
}

/// Liveness phase: every link repaired, every crashed broker started again.
fn heal_all(sim: &mut turmoil::Sim<'_>, spec: &RunSpec) {
    for i in 1..=spec.brokers {
        sim.repair(broker_name(i), "db");
        if !sim.is_host_running(broker_name(i)) {
            sim.bounce(broker_name(i));
        }
    }
}

/// A broker: the real sweeper cycle, plus its schedule seam listening for load hosts.
async fn broker(spec: RunSpec, index: u32, jitter_seed: u64) -> turmoil::Result {
    let config = spec.config();
    let store = Arc::new(SimStore::new("db", config.statement_timeout()));
    let mut rng = Rng::new(jitter_seed);
    let sweeper = Sweeper::with_jitter(
        store.clone(),
        config,
        broker_name(index),
        Box::new(move || rng.unit()),
    );
    let sweeper = sweeper.with_form(NaiveForms {
        claim_then_fire: spec.naive_drain,
        floor_after_empty_claim: spec.floor_after_empty_claim,
    });
    tokio::spawn(seam_server(sweeper.seam(), store));
    sweeper.run().await;
    Ok(())
}

/// The broker's schedule seam, as its HTTP handler would run it: open a transaction, apply,
/// commit, then ring the local wake.
async fn seam_server(seam: Seam, store: Arc<SimStore>) -> std::io::Result<()> {
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", SEAM_PORT)).await?;
    loop {
        let (mut stream, _) = listener.accept().await?;
        let seam = seam.clone();
        let store = store.clone();
        tokio::spawn(async move {
            while let Ok(request) = read_frame::<_, ScheduleRequest>(&mut stream).await {
                let response = schedule_through_seam(&seam, &store, request).await;
                if write_frame(&mut stream, &response).await.is_err() {
                    break;
                }
            }
        });
    }
}

async fn schedule_through_seam(
    seam: &Seam,
    store: &SimStore,
    request: ScheduleRequest,
) -> ScheduleResponse {
    let attempt = async {
        let mut tx = seam.begin(store.begin().await?);
        let results = tx
            .apply(&request.tenant, &request.ops, clock::tokio_now())
            .await?;
        let woke = tx.commit().await?;
        Ok::<_, queen_sweeper::Error>(ScheduleResponse::Applied { results, woke })
    };
    attempt.await.unwrap_or_else(|e| ScheduleResponse::Failed {
        message: e.to_string(),
    })
}

/// One host runs every load generator as its own task (a host per generator would cost a
/// turmoil step each, every simulated millisecond), and ends the run after the two phases.
fn add_load(
    sim: &mut turmoil::Sim<'_>,
    spec: &RunSpec,
    root: &Rng,
    log: &Arc<Mutex<LoadLog>>,
    total: Duration,
) {
    let (spec, root, log) = (spec.clone(), root.clone(), log.clone());
    sim.client("load", async move {
        let mut tasks = Vec::new();
        if let Some(load) = spec.timers.clone() {
            tasks.push(tokio::spawn(scheduler(
                spec.clone(),
                load,
                root.fork(1),
                log.clone(),
            )));
        }
        if !spec.bursts.is_empty() {
            tasks.push(tokio::spawn(burster(spec.clone(), log.clone())));
        }
        if let Some(load) = spec.pushes.clone() {
            for p in 0..load.pushers {
                let rng = root.fork(100 + u64::from(p));
                tasks.push(tokio::spawn(pusher(
                    spec.clone(),
                    load.clone(),
                    p,
                    rng,
                    log.clone(),
                )));
            }
        }
        if let Some(load) = spec.kv.clone() {
            for w in 0..load.wire_writers {
                tasks.push(tokio::spawn(kv_wire_writer(
                    spec.clone(),
                    load.clone(),
                    root.fork(200 + u64::from(w)),
                    log.clone(),
                )));
            }
            tasks.push(tokio::spawn(kv_writer(
                spec.clone(),
                load,
                root.fork(2),
                log.clone(),
            )));
        }
        for task in tasks {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(format!("a load generator failed: {e}").into()),
                Err(e) => return Err(format!("a load generator panicked: {e}").into()),
            }
        }
        let elapsed = Duration::from_micros(elapsed_us());
        if total > elapsed {
            tokio::time::sleep(total - elapsed).await;
        }
        Ok(())
    });
}

/// Destinations shared by timers and pushes, so fires and pushes contend for partitions.
fn destination(tenant: u32, queue: u32, partition: u32) -> Destination {
    Destination {
        tenant: format!("tenant-{tenant}"),
        queue: format!("queue-{queue}"),
        partition: format!("p{partition}"),
    }
}

async fn send_schedule(broker: u32, request: &ScheduleRequest) -> Option<ScheduleResponse> {
    let attempt = async {
        let mut stream =
            turmoil::net::TcpStream::connect((broker_name(broker).as_str(), SEAM_PORT)).await?;
        write_frame(&mut stream, request).await?;
        read_frame::<_, ScheduleResponse>(&mut stream).await
    };
    tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .ok()?
        .ok()
}

fn record(
    log: &Mutex<LoadLog>,
    broker: u32,
    response: Option<ScheduleResponse>,
    txns: &[String],
    scheduled_at: Us,
) {
    let mut log = log.lock().expect("not poisoned");
    match response {
        Some(ScheduleResponse::Applied { results, .. }) => {
            for (result, txn) in results.iter().zip(txns) {
                if let Some(deliver_at) = result.deliver_at.as_deref().and_then(parse_us) {
                    log.scheduled.push(Scheduled {
                        txn: txn.clone(),
                        deliver_at,
                        scheduled_at,
                        broker,
                    });
                }
            }
        }
        // A failed call may still have committed (the ambiguous commit); its timers are not
        // counted as scheduled, so the exactly-once check ignores them rather than guessing.
        _ => log.schedule_failures += 1,
    }
}

async fn scheduler(
    spec: RunSpec,
    load: TimerLoad,
    mut rng: Rng,
    log: Arc<Mutex<LoadLog>>,
) -> std::io::Result<()> {
    let calls_per_s = (load.per_s / load.batch.max(1)).max(1);
    let gap = Duration::from_micros(1_000_000 / u64::from(calls_per_s));
    let calls = spec.safety_ms * u64::from(calls_per_s) / 1000;
    let mut sequence = 0u64;
    for call in 0..calls {
        if elapsed_us() >= spec.safety_ms * 1000 {
            break;
        }
        let broker = 1 + (rng.next_u64() % u64::from(spec.brokers)) as u32;
        let tenant = rng.range(0, u64::from(load.tenants.max(1)) - 1) as u32;
        let mut ops = Vec::new();
        let mut txns = Vec::new();
        for _ in 0..load.batch {
            sequence += 1;
            let d = destination(
                tenant,
                rng.range(0, u64::from(load.queues.max(1)) - 1) as u32,
                rng.range(0, u64::from(load.partitions.max(1)) - 1) as u32,
            );
            let txn = format!("t{sequence}");
            ops.push(TimerOp::Schedule {
                queue: d.queue,
                timer_key: format!("k{sequence}"),
                delay_ms: rng.range(load.delay_ms.0, load.delay_ms.1) as i64,
                payload: described_payload(rng.range(load.payload_bytes.0, load.payload_bytes.1)),
                partition: Some(d.partition),
                txn: Some(txn.clone()),
            });
            txns.push(txn);
        }
        let request = ScheduleRequest {
            tenant: format!("tenant-{tenant}"),
            ops,
        };
        let scheduled_at = now_us();
        let response = send_schedule(broker, &request).await;
        record(&log, broker, response, &txns, scheduled_at);
        let next = Duration::from_micros(gap.as_micros() as u64 * (call + 1));
        let elapsed = Duration::from_micros(elapsed_us());
        if next > elapsed {
            tokio::time::sleep(next - elapsed).await;
        }
    }
    Ok(())
}

async fn burster(spec: RunSpec, log: Arc<Mutex<LoadLog>>) -> std::io::Result<()> {
    let mut bursts = spec.bursts.clone();
    bursts.sort_by_key(|b| b.at_ms);
    for (n, burst) in bursts.iter().enumerate() {
        if elapsed_us() >= spec.safety_ms * 1000 {
            break;
        }
        let at = Duration::from_millis(burst.at_ms);
        let elapsed = Duration::from_micros(elapsed_us());
        if at > elapsed {
            tokio::time::sleep(at - elapsed).await;
        }
        // One call per 500 timers: one broker's seam, several transactions, every call aimed
        // at the same instant (as the soak aims its calls), so the burst is due at once however
        // long scheduling it takes.
        let due_us = elapsed_us() + burst.delay_ms * 1000;
        let mut sent = 0;
        while sent < burst.count {
            let chunk = (burst.count - sent).min(500);
            let txns: Vec<String> = (sent..sent + chunk).map(|i| format!("b{n}-{i}")).collect();
            let ops = txns
                .iter()
                .enumerate()
                .map(|(j, txn)| TimerOp::Schedule {
                    queue: format!("queue-{}", j % 4),
                    timer_key: txn.clone(),
                    delay_ms: (due_us.saturating_sub(elapsed_us()) / 1000) as i64,
                    payload: described_payload(burst.payload_bytes),
                    partition: Some(format!("p{}", j % 8)),
                    txn: Some(txn.clone()),
                })
                .collect();
            let request = ScheduleRequest {
                tenant: burst.tenant.clone(),
                ops,
            };
            let scheduled_at = now_us();
            let response = send_schedule(burst.broker, &request).await;
            record(&log, burst.broker, response, &txns, scheduled_at);
            sent += chunk;
        }
    }
    Ok(())
}

async fn pusher(
    spec: RunSpec,
    load: PushLoad,
    index: u32,
    mut rng: Rng,
    log: Arc<Mutex<LoadLog>>,
) -> std::io::Result<()> {
    let gap = Duration::from_micros(1_000_000 / u64::from(load.per_s_each.max(1)));
    let pushes = spec.safety_ms * u64::from(load.per_s_each) / 1000;
    let partitions = spec.timers.as_ref().map_or(4, |t| t.partitions.max(1));
    let queues = spec.timers.as_ref().map_or(1, |t| t.queues.max(1));
    let tenants = spec.timers.as_ref().map_or(1, |t| t.tenants.max(1));
    let mut stream: Option<turmoil::net::TcpStream> = None;
    for n in 0..pushes {
        if elapsed_us() >= spec.safety_ms * 1000 {
            break;
        }
        let d = destination(
            rng.range(0, u64::from(tenants) - 1) as u32,
            rng.range(0, u64::from(queues) - 1) as u32,
            rng.range(0, u64::from(partitions) - 1) as u32,
        );
        let request = Request::Push {
            tenant: d.tenant,
            queue: d.queue,
            partition: d.partition,
            count: load.messages_per_push,
            payload_bytes: load.payload_bytes,
            txn_prefix: format!("push{index}"),
        };
        let started = now_us();
        if stream.is_none() {
            stream = turmoil::net::TcpStream::connect(("db", DB_PORT)).await.ok();
        }
        if let Some(s) = stream.as_mut() {
            let exchanged = async {
                write_frame(s, &request).await?;
                read_frame::<_, Response>(s).await
            };
            match tokio::time::timeout(Duration::from_secs(10), exchanged).await {
                Ok(Ok(Response::Pushed { .. })) => {
                    let mut log = log.lock().expect("not poisoned");
                    log.pushes += 1;
                    log.push_latency_us.push(now_us() - started);
                }
                _ => stream = None,
            }
        }
        let next = Duration::from_micros(gap.as_micros() as u64 * (n + 1));
        let elapsed = Duration::from_micros(elapsed_us());
        if next > elapsed {
            tokio::time::sleep(next - elapsed).await;
        }
    }
    Ok(())
}

async fn kv_writer(
    spec: RunSpec,
    load: KvLoad,
    mut rng: Rng,
    log: Arc<Mutex<LoadLog>>,
) -> std::io::Result<()> {
    let gap = Duration::from_micros(1_000_000 / u64::from(load.per_s.max(1)));
    let puts = spec.safety_ms * u64::from(load.per_s) / 1000;
    let mut stream = turmoil::net::TcpStream::connect(("db", DB_PORT)).await?;
    for n in 0..puts {
        if elapsed_us() >= spec.safety_ms * 1000 {
            break;
        }
        let request = Request::KvPut {
            tenant: "tenant-0".into(),
            namespace: "ns".into(),
            key: format!("key-{}", rng.range(0, u64::from(load.keys.max(1)) - 1)),
            ttl_ms: Some(rng.range(load.ttl_ms.0, load.ttl_ms.1)),
            bytes: 64,
        };
        write_frame(&mut stream, &request).await?;
        let _: Response = read_frame(&mut stream).await?;
        log.lock().expect("not poisoned").kv_puts += 1;
        let next = Duration::from_micros(gap.as_micros() as u64 * (n + 1));
        let elapsed = Duration::from_micros(elapsed_us());
        if next > elapsed {
            tokio::time::sleep(next - elapsed).await;
        }
    }
    Ok(())
}

/// Rolls back one transaction of the wire in this many; the others commit.
const WIRE_ROLLBACK_ONE_IN: u64 = 4;

/// A writer of the transaction wire: re-puts a key inside a transaction it holds open for a
/// while (its other statements' time), then commits, or rolls back, so the prune meets expired
/// rows under a put's lock, and the put's new expiry is there only after the commit.
async fn kv_wire_writer(
    spec: RunSpec,
    load: KvLoad,
    mut rng: Rng,
    log: Arc<Mutex<LoadLog>>,
) -> std::io::Result<()> {
    let store = SimStore::new("db", Duration::from_secs(5));
    let failed = |e: queen_sweeper::Error| std::io::Error::other(e.to_string());
    while elapsed_us() < spec.safety_ms * 1000 {
        let key = format!("key-{}", rng.range(0, u64::from(load.keys.max(1)) - 1));
        let ttl_ms = rng.range(load.ttl_ms.0, load.ttl_ms.1);
        let held = Duration::from_millis(rng.range(load.held_ms.0, load.held_ms.1).max(1));
        let commit = rng.range(1, WIRE_ROLLBACK_ONE_IN) != 1;
        let mut tx = store.begin().await.map_err(failed)?;
        tx.kv_put("tenant-0", "ns", &key, Some(ttl_ms), 64)
            .await
            .map_err(failed)?;
        tokio::time::sleep(held).await;
        if commit {
            queen_sweeper::TimerTx::commit(tx).await.map_err(failed)?;
            log.lock().expect("not poisoned").kv_puts += 1;
        } else {
            tx.rollback().await.map_err(failed)?;
        }
    }
    Ok(())
}
