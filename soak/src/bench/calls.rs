//! Each drain call's time against the backlog's size and shape: probe, claim, fire and take,
//! with 0, 10k, 100k and 1M pending (future) timers in one queue of one tenant, and spread over
//! 96 destinations. The pending rows are not due; each repetition adds one batch of due timers
//! beside them and times the calls that move it, through the sweeper's own `PgStore`.

use std::time::Duration;

use queen_harness::Spread;
use queen_sweeper::{
    Admission, ClaimRequest, Config, KV_ALARM_CAP, LaneSizes, PgStore, ProbeRequest,
    ROW_OVERHEAD_BYTES, SegmentResult, ShardOrder, Store, TakeRequest, clock, plan_fire_calls,
};
use serde::{Deserialize, Serialize};

use super::SPREAD;
use crate::db::RunDb;
use crate::run::Run;

/// The pending levels.
pub const LEVELS: [u64; 4] = [0, 10_000, 100_000, 1_000_000];
/// Repetitions per level and shape: each times one probe, one claim, its fires and one take.
const REPS: u32 = 15;
/// Due timers per repetition: the shipped claim batch.
const BATCH: u32 = queen_sweeper::knob::CLAIM_BATCH.default as u32;
const DUE_PAYLOAD: u32 = 512;
const PENDING_PAYLOAD: u32 = 64;

/// One call's time at one level of one shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallTime {
    /// `one queue` (1 tenant, 1 queue, 8 partitions) or `spread` (3 × 4 × 8).
    pub shape: String,
    pub pending: u64,
    /// probe, claim, fire or take.
    pub call: String,
    /// Microseconds, client side (round trip included).
    pub us: Spread,
}

/// The backlog shapes: (name, tenants, queues, partitions).
pub const SHAPES: [(&str, (u32, u32, u32)); 2] = [("one queue", (1, 1, 8)), ("spread", SPREAD)];

pub async fn measure(run: &Run<'_>) -> Result<Vec<CallTime>, String> {
    let mut out = Vec::new();
    for (shape, spread) in SHAPES {
        out.extend(shape_levels(run, shape, spread).await?);
    }
    Ok(out)
}

async fn shape_levels(
    run: &Run<'_>,
    shape: &str,
    spread: (u32, u32, u32),
) -> Result<Vec<CallTime>, String> {
    let db = RunDb::create(run.server_url, "bench_calls").await?;
    let store = PgStore::from_pool(db.pool.clone(), Duration::from_secs(60));
    let admission = Admission::new(LaneSizes::default());
    let mut out = Vec::new();
    let mut pending = 0u64;
    for level in LEVELS {
        if level > pending {
            db.backlog_unpromised(
                (level - pending) as u32,
                7 * 24 * 3_600_000,
                PENDING_PAYLOAD,
                spread,
                &format!("pending{level}"),
            )
            .await?;
            settle(&db, level).await;
            pending = level;
        }
        let mut times: [Vec<f64>; 4] = Default::default();
        for rep in 0..REPS {
            let prefix = format!("due{level}r{rep}");
            db.backlog_unpromised(BATCH, -1_000, DUE_PAYLOAD, spread, &format!("{prefix}c"))
                .await?;
            let (probe, claim, fires) = probe_claim_fire(&store, &admission).await?;
            times[0].push(probe);
            times[1].push(claim);
            times[2].extend(fires);
            db.backlog_unpromised(BATCH, -1_000, DUE_PAYLOAD, spread, &format!("{prefix}t"))
                .await?;
            times[3].push(take(&store, &admission).await?);
        }
        for (call, values) in ["probe", "claim", "fire", "take"].iter().zip(times) {
            let us = Spread::of_values(values);
            eprintln!(
                "soak: bench: {shape}, {level} pending: {call} p50 {:.2} ms, max {:.2} ms",
                us.p50 / 1000.0,
                us.max / 1000.0
            );
            out.push(CallTime {
                shape: shape.to_owned(),
                pending: level,
                call: (*call).to_owned(),
                us,
            });
        }
    }
    db.drop_now().await?;
    Ok(out)
}

/// After a level's insert: the checkpoint its writes set off, out of the way of the timings (on
/// two cores its writes landed in the probe's p99: 11-14 ms against 1.3-1.5 ms by hand on the same
/// tables). No ANALYZE: the sessions keep the plans they made at the level before, as a broker's
/// do when a backlog grows faster than autovacuum looks (the case that made the take 0.9 s and
/// the probe 5 s at 200 000 pending, 2026-12-04).
async fn settle(db: &RunDb, level: u64) {
    if let Err(e) = sqlx::query("CHECKPOINT").execute(&db.pool).await {
        eprintln!(
            "soak: bench: CHECKPOINT at {level} pending failed ({e}); the timings may include its writes"
        );
    }
}

fn elapsed_us(since: std::time::Instant) -> f64 {
    (clock::monotonic_now() - since).as_secs_f64() * 1e6
}

/// One probe, one claim of a batch, and the fires of what it claimed (µs each). Every claimed
/// row must fire: a stale segment here would be a defect, not a timing.
async fn probe_claim_fire(
    store: &PgStore,
    admission: &Admission,
) -> Result<(f64, f64, Vec<f64>), String> {
    let config = Config::default();
    let slot = admission.maintenance().await;
    let shards = ShardOrder::starting_at(0);
    let started = clock::monotonic_now();
    let probe = store
        .probe(
            &slot,
            &ProbeRequest {
                shards: shards.clone(),
                due_cap: config.due_cap,
                kv_cap: KV_ALARM_CAP,
            },
        )
        .await
        .map_err(|e| format!("the probe failed: {e}"))?;
    let probe_us = elapsed_us(started);
    if probe.due < BATCH {
        return Err(format!("the probe saw {} due of {BATCH}", probe.due));
    }
    let started = clock::monotonic_now();
    let claimed = store
        .claim(
            &slot,
            &ClaimRequest::rows(shards, Duration::from_millis(config.lease_ms), BATCH),
        )
        .await
        .map_err(|e| format!("the claim failed: {e}"))?;
    let claim_us = elapsed_us(started);
    if claimed.rows.len() != BATCH as usize {
        return Err(format!("the claim took {} of {BATCH}", claimed.rows.len()));
    }
    let mut fires = Vec::new();
    for call in plan_fire_calls(&claimed.rows, config.max_fire_bytes) {
        let started = clock::monotonic_now();
        let outcomes = store
            .fire(&slot, &call)
            .await
            .map_err(|e| format!("the fire failed: {e}"))?;
        fires.push(elapsed_us(started));
        if let Some(o) = outcomes
            .iter()
            .find(|o| !matches!(o.result, SegmentResult::Fired { .. }))
        {
            return Err(format!("a fire segment came back {:?}", o.result));
        }
    }
    Ok((probe_us, claim_us, fires))
}

/// One take of a batch (µs); it must take the whole batch.
async fn take(store: &PgStore, admission: &Admission) -> Result<f64, String> {
    let config = Config::default();
    let slot = admission.maintenance().await;
    let started = clock::monotonic_now();
    let taken = store
        .take(
            &slot,
            &TakeRequest {
                shards: ShardOrder::starting_at(0),
                max_rows: BATCH,
                per_tenant: BATCH,
                fair: None,
                max_bytes: config.max_fire_bytes,
                row_overhead: ROW_OVERHEAD_BYTES,
                skip_held_partitions: false,
                due_ms_ago: 0,
                due_within_ms: None,
            },
        )
        .await
        .map_err(|e| format!("the take failed: {e}"))?;
    let us = elapsed_us(started);
    if taken.timers() != u64::from(BATCH) {
        return Err(format!("the take moved {} of {BATCH}", taken.timers()));
    }
    Ok(us)
}
