//! The calibration's parallel drain, in the model: a backlog of due timers taken 200 at a time
//! by several connections at once, each from its own starting shard, as `soak calibrate` drains
//! it on the rig. `soak calibrate` fits the WAL bandwidth a sustained drain sees by running this
//! against the drains it measured, and records the model's rate beside each, so the model is
//! judged on the same experiment as the server.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use queen_sweeper::{Admission, LaneSizes, ROW_OVERHEAD_BYTES, ShardOrder, Store, TakeRequest};

use crate::model::server::{Costs, Db, serve};
use crate::time::{EPOCH_UNIX_S, ORIGIN_US, now_us};
use crate::world::{Backlog, LoadLog, preload};

/// Rows a take asks for, as the calibration's takers do.
const TAKE_ROWS: u32 = 200;
/// A drain that has not ended after this much simulated time is reported as failed.
const LONGEST: Duration = Duration::from_secs(600);

/// One parallel drain: how many connections, and the backlog they drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainSpec {
    pub connections: u32,
    pub payload_bytes: u64,
    pub backlog: u32,
}

/// Timers per simulated second the model drains `spec`'s backlog at: the backlog over the time
/// from the start to the last taker's last take. `seed` drives the rounding of sub-millisecond
/// statement times. An error when the drain did not move the whole backlog.
pub fn timers_per_s(costs: Costs, spec: DrainSpec, seed: u64) -> Result<f64, String> {
    let db = Db::new(costs, seed);
    preload(
        &db,
        &Mutex::new(LoadLog::default()),
        &[Backlog {
            tenant: "drained".to_owned(),
            count: spec.backlog,
            due_at_ms: 0,
            payload_bytes: spec.payload_bytes,
        }],
    );
    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .epoch(SystemTime::UNIX_EPOCH + Duration::from_secs(EPOCH_UNIX_S as u64))
        .tick_duration(Duration::from_millis(1))
        .min_message_latency(Duration::ZERO)
        .max_message_latency(Duration::ZERO)
        .simulation_duration(LONGEST)
        .tcp_capacity(1 << 16)
        .build();
    let served = db.clone();
    sim.host("db", move || serve(served.clone()));
    // Each taker's rows moved and the instant its last take returned.
    let ends: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    for i in 0..spec.connections {
        let ends = ends.clone();
        sim.client(format!("taker-{i}"), async move {
            let store = crate::client::SimStore::new("db", Duration::from_secs(60));
            let moved = take_until_empty(&store, first_shard(i)).await?;
            ends.lock().expect("not poisoned").push((moved, now_us()));
            Ok(())
        });
    }
    sim.run()
        .map_err(|e| format!("the modelled parallel drain of {spec:?} stopped: {e}"))?;
    let ends = ends.lock().expect("not poisoned");
    let moved: u64 = ends.iter().map(|(moved, _)| moved).sum();
    if moved != u64::from(spec.backlog) {
        return Err(format!(
            "the modelled parallel drain of {spec:?} moved {moved} timers"
        ));
    }
    let last = ends.iter().map(|(_, at)| *at).max().unwrap_or(ORIGIN_US);
    let seconds = last.saturating_sub(ORIGIN_US) as f64 / 1e6;
    Ok(moved as f64 / seconds.max(1e-6))
}

/// The shard taker `i` of a parallel drain starts from, each its own as brokers' are.
pub fn first_shard(i: u32) -> u8 {
    (i * 13 % 64) as u8
}

/// A plain take of up to `rows` due timers from shard `first_shard` on: no fairness round, no
/// per-tenant cap below `rows`, no byte cap, every due row.
pub fn plain_take(first_shard: u8, rows: u32) -> TakeRequest {
    TakeRequest {
        shards: ShardOrder::starting_at(first_shard),
        max_rows: rows,
        per_tenant: rows,
        fair: None,
        max_bytes: u64::MAX / 2,
        row_overhead: ROW_OVERHEAD_BYTES,
        skip_held_partitions: false,
        due_ms_ago: 0,
        due_within_ms: None,
    }
}

/// Takes of [`TAKE_ROWS`] from `first_shard` on, on any store (the model's or PostgreSQL's), until
/// one comes back short; the timers moved.
pub async fn take_until_empty(
    store: &impl Store,
    first_shard: u8,
) -> Result<u64, queen_sweeper::Error> {
    let admission = Admission::new(LaneSizes::default());
    let request = plain_take(first_shard, TAKE_ROWS);
    let mut moved = 0;
    loop {
        let slot = admission.maintenance().await;
        let taken = store.take(&slot, &request).await?;
        moved += taken.timers();
        if taken.timers() < u64::from(TAKE_ROWS) {
            return Ok(moved);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs(wal_mb_per_s: u64) -> Costs {
        Costs {
            wal_bytes_per_s: wal_mb_per_s * 1_000_000,
            ..crate::calibration::builtin().costs
        }
    }

    fn drain(connections: u32) -> DrainSpec {
        DrainSpec {
            connections,
            payload_bytes: 8_192,
            backlog: 3_000,
        }
    }

    #[test]
    fn the_drain_moves_the_whole_backlog_and_the_same_seed_gives_the_same_rate() {
        let once = timers_per_s(costs(200), drain(3), 1).unwrap();
        assert!(once > 0.0);
        assert_eq!(once, timers_per_s(costs(200), drain(3), 1).unwrap());
    }

    #[test]
    fn a_slower_wal_slows_a_large_rows_drain_and_more_connections_than_one_drain_faster() {
        for n in [1, 2, 5] {
            let fast = timers_per_s(costs(300), drain(n), 1).unwrap();
            let slow = timers_per_s(costs(100), drain(n), 1).unwrap();
            assert!(
                slow < fast * 0.7,
                "{n} connections: {slow} at 100 MB/s, {fast} at 300"
            );
        }
        // A second connection picks while the first writes.
        let one = timers_per_s(costs(200), drain(1), 1).unwrap();
        let two = timers_per_s(costs(200), drain(2), 1).unwrap();
        assert!(two > one * 1.1, "{one} {two}");
    }
}
