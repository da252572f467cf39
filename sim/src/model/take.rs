//! TAKE in the model, as `queen.log_timers_take_v1` does it: the claim's selection (the fairness
//! round, the shard rounds, the per-tenant cap, skipping rows other transactions lock), cut at the
//! byte cap (the take's fixed cost), then the fire's partition locks in ascending id, the append
//! and the delete under them (its per-row cost), and the WAL, then one commit that
//! appends every row into its partition and deletes it. No lease, no token: the row locks are the
//! take's only hold, and they end with its transaction.

use std::collections::BTreeMap;

use queen_sweeper::{Destination, TakeRequest, Taken, TakenDestination};

use super::ops;
use super::server::{Costs, Db};
use super::state::{Tables, TimerKey, Us};
use crate::time::now_us;
use crate::wire::Response;

/// A take's cost per row, split as the rig's takes spend it: `pick` before its partition locks
/// (finding and locking the row), `under_locks` after them, of which `insert` per message from
/// the first stamp on (the rest, the delete, after the last). A calibration without the split
/// (before 2026-12-07, evening) puts the whole row cost in the append, stamps included. Measured
/// on 20 000-row takes of 512 B: 170 ms before the first stamp, 57 ms over the stamps, 57 ms
/// after (sim/calibration/2026-12-07-2c-24g-pg15.json, at cf4679e). The fitted per-row parts
/// (8 µs before, 3 µs over the stamps) can exceed the fitted whole (10 µs): the insert is then
/// what the whole leaves after the pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RowCosts {
    pick: Us,
    under_locks: Us,
    insert: Us,
}

impl RowCosts {
    fn of(c: &Costs) -> RowCosts {
        if c.take_insert_row_us == 0 {
            return RowCosts {
                pick: 0,
                under_locks: c.take_row_us,
                insert: c.take_row_us,
            };
        }
        let pick = c.take_pick_row_us.min(c.take_row_us);
        let under_locks = c.take_row_us - pick;
        RowCosts {
            pick,
            under_locks,
            insert: c.take_insert_row_us.min(under_locks),
        }
    }
}

/// The rows a take locked and keeps: keys with their pre-take visibility, in take order.
type Picked = Vec<(TimerKey, Us)>;

/// TAKE: lock, cost, partition locks, WAL, commit.
pub(crate) async fn take(db: &Db, host: &str, request: &TakeRequest) -> Response {
    let c = db.costs;
    let now = now_us();
    let (txn, picked, fair_next) = db.with(|t| lock(t, request, now));
    if picked.is_empty() {
        db.with(|t| t.release_locks(txn));
        db.cpu(c.take_base_us).await;
        return Response::Taken(Taken::default());
    }
    // The pick (its fixed part and its rows'); the append and the delete come under the
    // partitions' locks.
    let rows = RowCosts::of(&c);
    db.cpu(c.take_base_us + rows.pick * picked.len() as Us)
        .await;
    let (mut ids, mut guards) = (db.with(|t| partition_ids(t, &picked)), Vec::new());
    ids.sort_unstable();
    ids.dedup();
    let mut picked = picked;
    if request.skip_held_partitions {
        // FOR UPDATE SKIP LOCKED on the partitions: the rows bound for a held one stay due.
        let mut held = Vec::new();
        for id in ids.drain(..) {
            match db.partition_lock(id).try_lock_owned() {
                Ok(guard) => guards.push(guard),
                Err(_) => held.push(id),
            }
        }
        if !held.is_empty() {
            picked = db.with(|t| {
                picked
                    .into_iter()
                    .filter(|(key, _)| !held.contains(&partition_of(t, key)))
                    .collect()
            });
        }
        if picked.is_empty() {
            db.with(|t| t.release_locks(txn));
            return Response::Taken(Taken::default());
        }
    }
    let bytes = db.with(|t| {
        picked
            .iter()
            .map(|(key, _)| {
                key.key.len() as u64
                    + c.row_wal_bytes(t.timers.get(key).map_or(0, |row| row.payload_bytes))
            })
            .sum::<u64>()
    });
    for id in ids {
        guards.push(db.partition_lock(id).lock_owned().await);
    }
    let append = Append {
        start: now_us(),
        row_us: rows.insert,
    };
    db.cpu(rows.under_locks * picked.len() as Us).await;
    db.write_wal(bytes).await;
    let taken = db.with(|t| commit(t, txn, &picked, (now, append), host, fair_next));
    drop(guards);
    Response::Taken(taken)
}

/// The selection under row locks: the fairness round, then the shard rounds, then the byte cut.
/// Rows the cut leaves out stay locked until the take ends, as in PostgreSQL.
fn lock(t: &mut Tables, request: &TakeRequest, now: Us) -> (u64, Picked, Option<String>) {
    let txn = t.new_txn();
    let (fair_tenants, fair_after) = request
        .fair
        .as_ref()
        .map_or((0, None), |f| (f.tenants, f.after.as_deref()));
    let shards = request.shards.as_slice();
    // Due at least `due_ms_ago` before now (the bulk lane's takes), or less than
    // `due_within_ms` ago (the own lane's beside it); lateness counts from now.
    let since = request
        .due_within_ms
        .map_or(0, |ms| now.saturating_sub(ms.saturating_mul(1_000)));
    let now = now.saturating_sub(request.due_ms_ago.saturating_mul(1_000));
    let (mut picked, fair_next) = ops::claim_fair(
        t,
        txn,
        now,
        (shards, request.max_rows, since),
        fair_tenants.min(request.max_rows),
        fair_after,
    );
    let remaining = request.max_rows - picked.len() as u32;
    if remaining > 0 {
        let more = ops::claim_lock(
            t,
            txn,
            shards,
            (since, now),
            remaining,
            request.per_tenant,
            &picked,
        );
        picked.extend(more);
    }
    let kept = kept_under_cap(t, &picked, request.max_bytes, request.row_overhead);
    picked.truncate(kept);
    let fair_next = if picked.is_empty() { None } else { fair_next };
    (txn, picked, fair_next)
}

/// The partition ids the picked rows are bound for (with repeats).
fn partition_ids(t: &mut Tables, picked: &Picked) -> Vec<u64> {
    picked.iter().map(|(key, _)| partition_of(t, key)).collect()
}

/// The partition id a locked row is bound for.
fn partition_of(t: &mut Tables, key: &TimerKey) -> u64 {
    let row = t.timers.get(key).expect("a locked row exists");
    let destination = Destination {
        tenant: key.tenant.clone(),
        queue: key.queue.clone(),
        partition: row.partition.clone(),
    };
    t.partition_id(&destination)
}

/// How many picked rows fit `max_bytes` in take order; a first row over the cap goes alone.
fn kept_under_cap(t: &Tables, picked: &Picked, max_bytes: u64, row_overhead: u64) -> usize {
    let mut total = 0u64;
    for (i, (key, _)) in picked.iter().enumerate() {
        let size = t.timers.get(key).map_or(0, |row| row.payload_bytes)
            + key.key.len() as u64
            + row_overhead;
        if i > 0 && total + size > max_bytes {
            return i;
        }
        total += size;
    }
    picked.len()
}

/// The picked rows per destination, in destination order, each in write order (visibility,
/// then key).
fn destinations(t: &Tables, picked: &Picked) -> BTreeMap<Destination, Vec<(TimerKey, Us)>> {
    let mut ordered = picked.clone();
    ordered.sort_by(|a, b| (a.1, &a.0.key).cmp(&(b.1, &b.0.key)));
    let mut by_destination: BTreeMap<Destination, Vec<(TimerKey, Us)>> = BTreeMap::new();
    for (key, visible_at) in ordered {
        let row = t.timers.get(&key).expect("a locked row exists");
        let destination = Destination {
            tenant: key.tenant.clone(),
            queue: key.queue.clone(),
            partition: row.partition.clone(),
        };
        by_destination
            .entry(destination)
            .or_default()
            .push((key, visible_at));
    }
    by_destination
}

/// When the take's append began (its partition locks held) and what each row of it costs: a
/// message's `created_at` is the instant its row was inserted, as `clock_timestamp()` gives it in
/// the SQL, the rows in write order one `row_us` apart. Before 2026-12-07 every message of a take
/// carried the take's start, before its pick: a 20 000-row bulk take's messages all read as
/// fired at once (the agreement's burst at 44e8abf: 338 983 timers/s simulated against 25 932 on
/// the rig, lateness p99 64 ms against 498).
#[derive(Debug, Clone, Copy)]
struct Append {
    start: Us,
    row_us: Us,
}

/// The commit: every destination's rows appended and deleted, the locks released. `at`: the
/// take's `now` (its lateness, as the SQL's `p_now`) and its append.
fn commit(
    t: &mut Tables,
    txn: u64,
    picked: &Picked,
    at: (Us, Append),
    host: &str,
    fair_next: Option<String>,
) -> Taken {
    let (now, append) = at;
    let committed = now_us();
    let mut taken = Taken {
        destinations: Vec::new(),
        fair_after: fair_next,
    };
    let mut written: Us = 0;
    for (destination, rows) in destinations(t, picked) {
        let mut late_ms = Vec::with_capacity(rows.len());
        let entries: Vec<_> = rows
            .iter()
            .map(|(key, _)| {
                let row = t.remove_timer(key).expect("a locked row exists");
                late_ms.push(now.saturating_sub(row.deliver_at) / 1000);
                (row.txn, row.message_id)
            })
            .collect();
        let count = entries.len();
        let first_offset = t.append(&destination, entries, now, super::state::Source::Fire, host);
        let start = t.messages.len() - count;
        for message in &mut t.messages[start..] {
            written += 1;
            message.created_at = (append.start + append.row_us * written).min(committed);
        }
        t.segments.push(super::state::SegmentEvent {
            at: committed,
            host: host.to_owned(),
            fired: true,
            timers: late_ms.len() as u32,
        });
        taken.destinations.push(TakenDestination {
            destination,
            first_offset,
            late_ms,
        });
    }
    t.release_locks(txn);
    taken
}

#[cfg(test)]
mod tests {
    use super::RowCosts;
    use crate::analysis;
    use crate::calibration;
    use crate::world::{self, Burst, RunSpec};

    #[test]
    fn a_takes_row_cost_splits_at_its_partition_locks_and_its_stamps_span_only_the_insert() {
        let mut c = calibration::builtin().costs;
        (c.take_row_us, c.take_pick_row_us, c.take_insert_row_us) = (12, 8, 5);
        assert_eq!(
            RowCosts::of(&c),
            RowCosts {
                pick: 8,
                under_locks: 4,
                insert: 4
            }
        );
        (c.take_pick_row_us, c.take_insert_row_us) = (3, 5);
        assert_eq!(
            RowCosts::of(&c),
            RowCosts {
                pick: 3,
                under_locks: 9,
                insert: 5
            }
        );
        // A file without the split: every row cost in the append, as before it was measured.
        (c.take_pick_row_us, c.take_insert_row_us) = (0, 0);
        assert_eq!(
            RowCosts::of(&c),
            RowCosts {
                pick: 0,
                under_locks: 12,
                insert: 12
            }
        );
    }

    /// 4 000 timers due at once, one broker: its first take (the claim batch) comes back full
    /// and the bulk lane takes the rest in one take of 3 200 rows.
    #[test]
    fn a_takes_messages_carry_the_instants_their_rows_were_inserted_not_the_takes_start() {
        let costs = calibration::builtin().costs;
        let mut spec = RunSpec::new(1, costs);
        spec.brokers = 1;
        spec.safety_ms = 5_000;
        spec.liveness_ms = 20_000;
        spec.bursts = vec![Burst {
            at_ms: 500,
            count: 4_000,
            delay_ms: 1_000,
            payload_bytes: 512,
            tenant: "t0".into(),
            broker: 1,
        }];
        let outcome = world::run(&spec);
        assert!(outcome.failure.is_none(), "{:?}", outcome.failure);
        let fires = analysis::fires_of(&outcome, "");
        assert_eq!(fires.len(), 4_000);
        let mut instants: Vec<_> = fires.iter().map(|f| f.1).collect();
        instants.sort_unstable();
        instants.dedup();
        // Each row its own instant: stamped with its take's start, the 4 000 shared 2.
        assert!(
            instants.len() >= 3_800,
            "{} distinct instants",
            instants.len()
        );
        // The bulk take's 3 200 rows alone are 3 200 inserts apart from the first to the last.
        let rows = RowCosts::of(&costs);
        let span = instants.last().unwrap() - instants.first().unwrap();
        assert!(
            span >= 3_200 * rows.insert * 9 / 10,
            "{span} µs from the first fired message to the last"
        );
        // Within a take, one insert apart (stamped over the whole row cost, they were
        // `take_row_us` apart); between the two takes, at least the bulk take's pick of its
        // rows, spent before its first stamp.
        let gaps: Vec<u64> = instants.windows(2).map(|w| w[1] - w[0]).collect();
        let mut sorted = gaps.clone();
        sorted.sort_unstable();
        assert_eq!(sorted[sorted.len() / 2], rows.insert, "{rows:?}");
        let (at, widest) = gaps
            .iter()
            .copied()
            .enumerate()
            .max_by_key(|g| g.1)
            .expect("4 000 instants");
        let bulk = (instants.len() - at - 1) as u64;
        assert!(
            widest >= rows.pick * bulk,
            "{widest} µs between the takes, a pick of {bulk} rows costs {}",
            rows.pick * bulk
        );
    }
}
