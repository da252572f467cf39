//! One contract suite, two implementations: every check runs against the simulation's model of
//! PostgreSQL (over the simulated wire, in turmoil) and against `store::pg` on a real PostgreSQL
//! (the test tier). If the model drifts from the SQL, one side fails.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use queen_sim::client::{SimStore, SimTimerTx};
use queen_sim::model::server::{Db, serve};
use queen_sim::wire::{Request, Response};
use queen_sweeper::{
    Admission, ApplyResult, ApplyStatus, ClaimRequest, Destination, ExpiredKv, FailCause,
    FailRequest, FailRow, FairRound, FireCall, HeldTimer, Maintenance, Payload, PgStore,
    ProbeRequest, ROW_OVERHEAD_BYTES, Segment, SegmentResult, ShardOrder, Slot, Store, Switch,
    TakeRequest, TimerOp, TimerTx, plan_fire_calls,
};
use queen_testdb::TestDb;

/// A claim over all 64 shards with no fairness round.
fn claim_of(lease: Duration, max_rows: u32, per_tenant: u32) -> ClaimRequest {
    ClaimRequest {
        per_tenant,
        ..ClaimRequest::rows(ALL(), lease, max_rows)
    }
}

fn fail_of(rows: Vec<FailRow>, error: &str, cause: FailCause, max_attempts: u32) -> FailRequest {
    FailRequest {
        rows,
        error: error.to_owned(),
        cause,
        max_attempts,
    }
}

/// What a contract check needs beyond the `Store` port.
trait Backend {
    type S: Store;
    fn store(&self) -> &Self::S;
    /// Schedules in a transaction of its own and commits.
    async fn schedule(&self, tenant: &str, ops: Vec<TimerOp>) -> Vec<ApplyResult>;
    /// Waits on the backend's clock (simulated or real).
    async fn sleep(&self, duration: Duration);
    /// Txns of every message in the log, sorted.
    async fn messages(&self) -> Vec<String>;
    /// Puts `key` of tenant `t`, namespace `ns`, with [`KV_VALUE`], committed at once.
    async fn put_kv(&self, key: &str, ttl_ms: u64) {
        self.put_kv_row("t", "ns", key, KV_VALUE, Some(ttl_ms))
            .await;
    }
    /// Puts a row whose value is the JSON string `value`, committed at once.
    async fn put_kv_row(
        &self,
        tenant: &str,
        namespace: &str,
        key: &str,
        value: &str,
        ttl_ms: Option<u64>,
    );
    /// An open transaction that has put `key` of tenant `t`, namespace `ns`, with `ttl_ms`: it
    /// holds the row's lock until [`Backend::end`] (the transaction wire mid-flight).
    type Open;
    async fn put_kv_and_hold(&self, key: &str, ttl_ms: u64) -> Self::Open;
    /// Commits (`commit`) or rolls back an open transaction.
    async fn end(&self, open: Self::Open, commit: bool);
    /// Tenant `tenant`'s row of the usage table: kv rows, kv bytes, timer rows, timer bytes.
    async fn usage(&self, tenant: &str) -> Option<[u64; 4]>;
    /// A fire call straight to the database, past the port's own assertions, to check the
    /// database's guards.
    async fn fire_unchecked(&self, call: FireCall) -> Option<String>;
    /// Locks timer `key` of tenant `t`, queue `q` in a transaction of its own, held until the
    /// returned guard is dropped (another broker's take or claim in flight).
    async fn lock_timer(&self, key: &str) -> Box<dyn std::any::Any>;
    /// The offsets of every message in partition `p` of queue `q` of tenant `t`, sorted.
    async fn offsets(&self) -> Vec<u64>;
}

/// A model row lock held by a transaction that does nothing else, released on drop.
struct ModelLock {
    db: Arc<Db>,
    txn: u64,
}

impl Drop for ModelLock {
    fn drop(&mut self) {
        self.db.with(|t| t.release_locks(self.txn));
    }
}

struct Model {
    store: SimStore,
    db: Arc<Db>,
}

impl Backend for Model {
    type S = SimStore;
    fn store(&self) -> &SimStore {
        &self.store
    }
    async fn schedule(&self, tenant: &str, ops: Vec<TimerOp>) -> Vec<ApplyResult> {
        let mut tx = self.store.begin().await.expect("begin");
        let results = tx.apply(tenant, &ops).await.expect("apply");
        tx.commit().await.expect("commit");
        results
    }
    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
    async fn messages(&self) -> Vec<String> {
        let mut txns: Vec<String> = self
            .db
            .with(|t| t.messages.iter().map(|m| m.txn.clone()).collect());
        txns.sort();
        txns
    }
    async fn put_kv_row(
        &self,
        tenant: &str,
        namespace: &str,
        key: &str,
        value: &str,
        ttl_ms: Option<u64>,
    ) {
        let request = Request::KvPut {
            tenant: tenant.into(),
            namespace: namespace.into(),
            key: key.into(),
            ttl_ms,
            bytes: stored_bytes(value),
        };
        assert!(matches!(
            self.store.call(request).await.expect("kv put"),
            Response::Done
        ));
    }
    type Open = SimTimerTx;
    async fn put_kv_and_hold(&self, key: &str, ttl_ms: u64) -> SimTimerTx {
        let mut tx = self.store.begin().await.expect("begin");
        let bytes = stored_bytes(KV_VALUE);
        tx.kv_put("t", "ns", key, Some(ttl_ms), bytes)
            .await
            .expect("kv put in a transaction");
        tx
    }
    async fn end(&self, open: SimTimerTx, commit: bool) {
        if commit {
            open.commit().await.expect("commit");
        } else {
            open.rollback().await.expect("rollback");
        }
    }
    async fn usage(&self, tenant: &str) -> Option<[u64; 4]> {
        self.db.with(|t| {
            t.usage
                .get(tenant)
                .map(|u| [u.kv_rows, u.kv_bytes, u.timer_rows, u.timer_bytes])
        })
    }
    async fn lock_timer(&self, key: &str) -> Box<dyn std::any::Any> {
        let txn = self.db.with(|t| {
            let txn = t.new_txn();
            t.row_locks.insert(timer_key(key), txn);
            txn
        });
        Box::new(ModelLock {
            db: self.db.clone(),
            txn,
        })
    }
    async fn offsets(&self) -> Vec<u64> {
        let mut offsets: Vec<u64> = self.db.with(|t| {
            t.messages
                .iter()
                .filter(|m| m.destination.partition == "p")
                .map(|m| m.offset)
                .collect()
        });
        offsets.sort_unstable();
        offsets
    }
    async fn fire_unchecked(&self, call: FireCall) -> Option<String> {
        self.store
            .call(Request::Fire { call })
            .await
            .err()
            .and_then(|e| e.sqlstate().map(str::to_owned))
    }
}

struct Pg {
    store: PgStore,
    _db: TestDb,
}

impl Backend for Pg {
    type S = PgStore;
    fn store(&self) -> &PgStore {
        &self.store
    }
    async fn schedule(&self, tenant: &str, ops: Vec<TimerOp>) -> Vec<ApplyResult> {
        let mut tx = self.store.begin_timer_tx().await.expect("begin");
        let results = tx.apply(tenant, &ops).await.expect("apply");
        tx.commit().await.expect("commit");
        results
    }
    async fn sleep(&self, duration: Duration) {
        tokio::time::sleep(duration).await;
    }
    async fn messages(&self) -> Vec<String> {
        sqlx::query_scalar("SELECT txn FROM queen.log_messages ORDER BY txn")
            .fetch_all(self.store.pool())
            .await
            .expect("messages")
    }
    async fn put_kv_row(
        &self,
        tenant: &str,
        namespace: &str,
        key: &str,
        value: &str,
        ttl_ms: Option<u64>,
    ) {
        sqlx::query("SELECT queen.kv_put_v2($1, $2, $3, $4, $5, now())")
            .bind(tenant)
            .bind(namespace)
            .bind(key)
            .bind(value)
            .bind(ttl_ms.map(|ms| i64::try_from(ms).unwrap()))
            .execute(self.store.pool())
            .await
            .expect("kv put");
        // The model is told the value's stored size; this is where that number is checked.
        let stored: i32 = sqlx::query_scalar(
            "SELECT octet_length(value) FROM queen.kv \
             WHERE tenant_id = $1 AND namespace = $2 AND key = $3",
        )
        .bind(tenant)
        .bind(namespace)
        .bind(key)
        .fetch_one(self.store.pool())
        .await
        .expect("stored size");
        assert_eq!(stored as u64, stored_bytes(value), "{value:?}");
    }
    type Open = sqlx::Transaction<'static, sqlx::Postgres>;
    async fn put_kv_and_hold(&self, key: &str, ttl_ms: u64) -> Self::Open {
        let mut tx = self.store.pool().begin().await.expect("begin");
        sqlx::query("SELECT queen.kv_put_v2('t', 'ns', $1, $2, $3, now())")
            .bind(key)
            .bind(KV_VALUE)
            .bind(i64::try_from(ttl_ms).unwrap())
            .execute(&mut *tx)
            .await
            .expect("kv put in a transaction");
        tx
    }
    async fn end(&self, open: Self::Open, commit: bool) {
        if commit {
            open.commit().await.expect("commit");
        } else {
            open.rollback().await.expect("rollback");
        }
    }
    async fn usage(&self, tenant: &str) -> Option<[u64; 4]> {
        let row: Option<(i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT kv_rows, kv_bytes, timer_rows, timer_bytes FROM queen.kv_usage \
             WHERE tenant_id = $1",
        )
        .bind(tenant)
        .fetch_optional(self.store.pool())
        .await
        .expect("usage");
        row.map(|(a, b, c, d)| [a as u64, b as u64, c as u64, d as u64])
    }
    async fn lock_timer(&self, key: &str) -> Box<dyn std::any::Any> {
        let mut connection = self.store.pool().acquire().await.expect("a connection");
        sqlx::query("BEGIN")
            .execute(&mut *connection)
            .await
            .expect("begin");
        sqlx::query(
            "SELECT 1 FROM queen.log_timers \
             WHERE tenant_id = 't' AND queue = 'q' AND timer_key = $1 FOR UPDATE",
        )
        .bind(key)
        .execute(&mut *connection)
        .await
        .expect("lock");
        // Dropped, the connection goes back to the pool and sqlx rolls its transaction back;
        // detached, it closes: either way the lock ends.
        Box::new(connection.detach())
    }
    async fn offsets(&self) -> Vec<u64> {
        let offsets: Vec<i64> = sqlx::query_scalar(
            "SELECT m.\"offset\" FROM queen.log_messages m \
             JOIN queen.log_partitions lp ON lp.id = m.partition_id \
             JOIN queen.queues q ON q.id = lp.queue_id \
             WHERE q.tenant_id = 't' AND q.name = 'q' AND lp.name = 'p' ORDER BY 1",
        )
        .fetch_all(self.store.pool())
        .await
        .expect("offsets");
        offsets.into_iter().map(|o| o as u64).collect()
    }
    async fn fire_unchecked(&self, call: FireCall) -> Option<String> {
        let column =
            |f: fn(&Segment) -> String| call.segments.iter().map(f).collect::<Vec<String>>();
        let sizes: Vec<i32> = call
            .segments
            .iter()
            .map(|s| s.timers.len() as i32)
            .collect();
        let keys: Vec<String> = call
            .segments
            .iter()
            .flat_map(|s| s.timers.iter().map(|t| t.timer_key.clone()))
            .collect();
        let tokens: Vec<uuid::Uuid> = call
            .segments
            .iter()
            .flat_map(|s| s.timers.iter().map(|t| t.token))
            .collect();
        sqlx::query("SELECT * FROM queen.log_timers_fire_v1($1, $2, $3, $4, $5, $6, now())")
            .bind(column(|s| s.destination.tenant.clone()))
            .bind(column(|s| s.destination.queue.clone()))
            .bind(column(|s| s.destination.partition.clone()))
            .bind(sizes)
            .bind(keys)
            .bind(tokens)
            .fetch_all(self.store.pool())
            .await
            .err()
            .and_then(|e| {
                e.as_database_error()
                    .and_then(|d| d.code())
                    .map(|c| c.into_owned())
            })
    }
}

/// Runs `check` against the model inside a turmoil world.
fn on_model<F, Fut>(check: F)
where
    F: FnOnce(Model) -> Fut + 'static,
    Fut: std::future::Future<Output = ()> + 'static,
{
    let db = Db::new(queen_sim::calibration::builtin().costs, 1);
    let mut sim = turmoil::Builder::new()
        .rng_seed(1)
        .epoch(SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_600))
        .simulation_duration(Duration::from_secs(600))
        .build();
    let served = db.clone();
    sim.host("db", move || serve(served.clone()));
    sim.client("check", async move {
        check(Model {
            store: SimStore::new("db", Duration::from_secs(5)),
            db,
        })
        .await;
        Ok(())
    });
    sim.run().expect("the check ran to the end");
}

async fn on_pg() -> Pg {
    let db = TestDb::new().await;
    let store = PgStore::from_pool(db.pool_of(4).await, Duration::from_secs(5));
    Pg { store, _db: db }
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod model {
            $(#[test]
            fn $name() {
                super::on_model(|b| async move { super::$name(&b).await });
            })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name(&super::on_pg().await).await;
            })*
        }
    };
}

conformance![
    a_claim_takes_due_rows_once_each_with_its_own_token,
    a_claim_takes_at_most_per_tenant_rows_of_one_tenant_and_fills_from_the_others,
    a_fire_with_live_tokens_fires_once_and_again_is_stale,
    two_segments_of_one_destination_are_refused_with_22023,
    the_probe_counts_due_rows_up_to_its_cap,
    an_expired_lease_is_reclaimed_with_a_new_token_and_the_old_fire_is_stale,
    a_transient_failure_spends_no_attempt_and_an_exhausted_timer_goes_to_the_dlq,
    the_prune_deletes_expired_rows_in_budgets_and_reports_done,
    the_schedule_seam_answers_every_status,
    the_fairness_round_serves_a_small_tenant_behind_a_big_backlog,
    a_take_fires_due_rows_once_into_dense_offsets_and_deletes_them,
    a_take_stops_at_its_row_budget_and_before_the_row_that_crosses_the_byte_cap,
    a_take_skips_rows_another_transaction_holds,
    a_take_runs_the_fairness_round,
    a_take_leaves_leased_and_backing_off_rows_alone,
    the_probe_carries_the_switches_and_the_prunes_alarm,
    the_prune_skips_rows_open_puts_hold_and_prunes_them_once_the_lock_goes,
    the_usage_rollup_counts_live_kv_and_pending_timers_in_the_sqls_bytes,
    the_switches_read_back_as_written_and_stop_neither_the_prune_nor_the_rollup,
];

/// The value (its JSON text) of every KV row the checks write, unless they say otherwise.
const KV_VALUE: &str = r#""value""#;

/// The bytes the rollup counts for a value: the length of its JSON text, stored as sent. The
/// PostgreSQL side checks it on every put.
fn stored_bytes(json_text: &str) -> u64 {
    json_text.len() as u64
}

fn timer_key(key: &str) -> queen_sim::model::state::TimerKey {
    queen_sim::model::state::TimerKey {
        tenant: "t".into(),
        queue: "q".into(),
        key: key.into(),
    }
}

fn probe_of(due_cap: u32, kv_cap: u32) -> ProbeRequest {
    ProbeRequest {
        shards: ALL(),
        due_cap,
        kv_cap,
    }
}

fn take_of(max_rows: u32, max_bytes: u64) -> TakeRequest {
    TakeRequest {
        shards: ALL(),
        max_rows,
        per_tenant: max_rows,
        fair: None,
        max_bytes,
        row_overhead: ROW_OVERHEAD_BYTES,
        skip_held_partitions: false,
        due_ms_ago: 0,
        due_within_ms: None,
    }
}

/// `timer_key`s of the fired timers, in the order of the log (offset order per destination).
async fn fired_keys<B: Backend>(b: &B) -> Vec<String> {
    b.messages()
        .await
        .into_iter()
        .map(|txn| txn.trim_start_matches("txn-").to_owned())
        .collect()
}

async fn a_take_fires_due_rows_once_into_dense_offsets_and_deletes_them<B: Backend>(b: &B) {
    let mut ops: Vec<TimerOp> = (0..5).map(|i| schedule(&format!("due-{i}"), -10)).collect();
    ops.push(schedule("later", 60_000));
    b.schedule("t", ops).await;
    let slot = slot().await;
    let taken = b
        .store()
        .take(&slot, &take_of(10, 1 << 20))
        .await
        .expect("take");
    assert_eq!(taken.timers(), 5);
    assert_eq!(taken.destinations.len(), 1);
    let only = &taken.destinations[0];
    assert_eq!(
        only.destination,
        Destination {
            tenant: "t".into(),
            queue: "q".into(),
            partition: "p".into(),
        }
    );
    assert_eq!(only.first_offset, 0);
    assert!(only.late_ms.iter().all(|&late| late >= 10), "{taken:?}");
    assert_eq!(b.offsets().await, [0, 1, 2, 3, 4], "dense, from 0");
    assert_eq!(
        fired_keys(b).await,
        ["due-0", "due-1", "due-2", "due-3", "due-4"]
    );
    let again = b
        .store()
        .take(&slot, &take_of(10, 1 << 20))
        .await
        .expect("take");
    assert_eq!(again.timers(), 0, "a fired timer is gone: {again:?}");
    let probe = b
        .store()
        .probe(&slot, &probe_of(10, 0))
        .await
        .expect("probe");
    assert_eq!(probe.due, 0);
    assert!(probe.next_in_ms.is_some(), "the later timer is still there");
}

async fn a_take_stops_at_its_row_budget_and_before_the_row_that_crosses_the_byte_cap<B: Backend>(
    b: &B,
) {
    // Six timers of exactly 1 000 payload bytes; each counts 1 000 + 2 (its key) + the overhead.
    let ops: Vec<TimerOp> = (0..6)
        .map(|i| TimerOp::Schedule {
            queue: "q".into(),
            timer_key: format!("b{i}"),
            delay_ms: -10,
            payload: Payload::Bytes(vec![7; 1000]),
            partition: Some("p".into()),
            txn: Some(format!("txn-b{i}")),
        })
        .collect();
    b.schedule("t", ops).await;
    let row = 1000 + 2 + ROW_OVERHEAD_BYTES;
    let slot = slot().await;
    let by_rows = b
        .store()
        .take(&slot, &take_of(1, 1 << 20))
        .await
        .expect("take");
    assert_eq!(by_rows.timers(), 1, "the row budget");
    let exact = b
        .store()
        .take(&slot, &take_of(10, 2 * row))
        .await
        .expect("take");
    assert_eq!(exact.timers(), 2, "two rows fill the cap exactly");
    let under = b
        .store()
        .take(&slot, &take_of(10, 2 * row - 1))
        .await
        .expect("take");
    assert_eq!(
        under.timers(),
        1,
        "one byte less: the second row would cross it"
    );
    let alone = b
        .store()
        .take(&slot, &take_of(10, 100))
        .await
        .expect("take");
    assert_eq!(alone.timers(), 1, "a row over the cap goes alone");
    let rest = b
        .store()
        .take(&slot, &take_of(10, 1 << 20))
        .await
        .expect("take");
    assert_eq!(rest.timers(), 1);
    assert_eq!(b.offsets().await, [0, 1, 2, 3, 4, 5]);
}

async fn a_take_skips_rows_another_transaction_holds<B: Backend>(b: &B) {
    b.schedule(
        "t",
        (0..3).map(|i| schedule(&format!("k{i}"), -10)).collect(),
    )
    .await;
    let held = b.lock_timer("k1").await;
    let slot = slot().await;
    let taken = b
        .store()
        .take(&slot, &take_of(10, 1 << 20))
        .await
        .expect("take");
    assert_eq!(taken.timers(), 2, "the held row is skipped, not waited for");
    assert_eq!(fired_keys(b).await, ["k0", "k2"]);
    drop(held);
    b.sleep(Duration::from_millis(50)).await;
    let later = b
        .store()
        .take(&slot, &take_of(10, 1 << 20))
        .await
        .expect("take");
    assert_eq!(later.timers(), 1, "released, it is taken");
    assert_eq!(b.offsets().await, [0, 1, 2]);
}

async fn a_take_runs_the_fairness_round<B: Backend>(b: &B) {
    for chunk in 0..3 {
        let ops = (0..100)
            .map(|i| schedule(&format!("big-{chunk}-{i}"), -1_000))
            .collect();
        b.schedule("big", ops).await;
    }
    b.schedule("small", vec![schedule("only", -1)]).await;
    let slot = slot().await;
    let plain = b
        .store()
        .take(&slot, &take_of(10, 1 << 20))
        .await
        .expect("take");
    assert!(
        plain
            .destinations
            .iter()
            .all(|d| d.destination.tenant == "big"),
        "without the round, visibility order wins"
    );
    let fair = b
        .store()
        .take(
            &slot,
            &TakeRequest {
                fair: Some(FairRound {
                    tenants: 32,
                    after: None,
                }),
                ..take_of(10, 1 << 20)
            },
        )
        .await
        .expect("take");
    assert_eq!(fair.timers(), 10);
    assert!(
        fair.destinations
            .iter()
            .any(|d| d.destination.tenant == "small"),
        "{fair:?}"
    );
    assert_eq!(fair.fair_after.as_deref(), Some("small"));
}

async fn a_take_leaves_leased_and_backing_off_rows_alone<B: Backend>(b: &B) {
    b.schedule(
        "t",
        (0..3).map(|i| schedule(&format!("k{i}"), -10)).collect(),
    )
    .await;
    let slot = slot().await;
    let leased = b
        .store()
        .claim(&slot, &claim_of(Duration::from_secs(30), 1, 1))
        .await
        .expect("claim")
        .rows;
    let backoff = b
        .store()
        .claim(&slot, &claim_of(Duration::from_secs(30), 1, 1))
        .await
        .expect("claim")
        .rows;
    let failed = FailRow {
        timer: backoff[0].timer_ref(),
        backoff: Duration::from_secs(60),
    };
    b.store()
        .fail(
            &slot,
            &fail_of(vec![failed], "later", FailCause::Transient, 5),
        )
        .await
        .expect("fail");
    let taken = b
        .store()
        .take(&slot, &take_of(10, 1 << 20))
        .await
        .expect("take");
    assert_eq!(taken.timers(), 1, "only the free row: {taken:?}");
    assert_eq!(fired_keys(b).await.len(), 1);
    assert!(!fired_keys(b).await.contains(&leased[0].timer_key));
    assert!(!fired_keys(b).await.contains(&backoff[0].timer_key));
}

const ALL: fn() -> ShardOrder = || ShardOrder::starting_at(0);

fn schedule(key: &str, delay_ms: i64) -> TimerOp {
    TimerOp::Schedule {
        queue: "q".into(),
        timer_key: key.into(),
        delay_ms,
        payload: Payload::json(&serde_json::json!({"key": key})),
        partition: Some("p".into()),
        txn: Some(format!("txn-{key}")),
    }
}

async fn slot() -> Slot<Maintenance> {
    Admission::new(Default::default()).maintenance().await
}

async fn a_claim_takes_due_rows_once_each_with_its_own_token<B: Backend>(b: &B) {
    let mut ops: Vec<TimerOp> = (0..5).map(|i| schedule(&format!("due-{i}"), -10)).collect();
    ops.push(schedule("later", 60_000));
    b.schedule("t", ops).await;
    let slot = slot().await;
    let claimed = b
        .store()
        .claim(&slot, &claim_of(Duration::from_secs(30), 10, 10))
        .await
        .expect("claim")
        .rows;
    let mut keys: Vec<&str> = claimed.iter().map(|c| c.timer_key.as_str()).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["due-0", "due-1", "due-2", "due-3", "due-4"]);
    let tokens: std::collections::BTreeSet<_> = claimed.iter().map(|c| c.token).collect();
    assert_eq!(tokens.len(), 5);
    let again = b
        .store()
        .claim(&slot, &claim_of(Duration::from_secs(30), 10, 10))
        .await
        .expect("claim")
        .rows;
    assert!(
        again.is_empty(),
        "held rows are not claimed twice: {again:?}"
    );
}

async fn a_claim_takes_at_most_per_tenant_rows_of_one_tenant_and_fills_from_the_others<
    B: Backend,
>(
    b: &B,
) {
    b.schedule(
        "big",
        (0..20).map(|i| schedule(&format!("b{i}"), -10)).collect(),
    )
    .await;
    b.schedule(
        "small",
        (0..3).map(|i| schedule(&format!("s{i}"), -10)).collect(),
    )
    .await;
    let slot = slot().await;
    let per_tenant = |claimed: &[queen_sweeper::ClaimedTimer]| {
        let mut counts = std::collections::BTreeMap::new();
        for c in claimed {
            *counts.entry(c.destination.tenant.clone()).or_insert(0u32) += 1;
        }
        counts.into_iter().collect::<Vec<_>>()
    };
    let first = b
        .store()
        .claim(&slot, &claim_of(Duration::from_secs(30), 10, 4))
        .await
        .expect("claim")
        .rows;
    assert_eq!(
        per_tenant(&first),
        [("big".to_owned(), 4), ("small".to_owned(), 3)],
        "the cap stops the big tenant at 4; the small one is taken whole"
    );
    // The rows over the cap were only locked by that claim, not claimed: the next takes them.
    let second = b
        .store()
        .claim(&slot, &claim_of(Duration::from_secs(30), 10, 4))
        .await
        .expect("claim")
        .rows;
    assert_eq!(per_tenant(&second), [("big".to_owned(), 4)]);
    let uncapped = b
        .store()
        .claim(&slot, &claim_of(Duration::from_secs(30), 10, 10))
        .await
        .expect("claim")
        .rows;
    assert_eq!(per_tenant(&uncapped), [("big".to_owned(), 10)]);
}

async fn a_fire_with_live_tokens_fires_once_and_again_is_stale<B: Backend>(b: &B) {
    b.schedule(
        "t",
        (0..3).map(|i| schedule(&format!("k{i}"), -5)).collect(),
    )
    .await;
    let slot = slot().await;
    let claimed = b
        .store()
        .claim(&slot, &claim_of(Duration::from_secs(30), 10, 10))
        .await
        .expect("claim")
        .rows;
    let call = plan_fire_calls(&claimed, 1 << 20).remove(0);
    let first = b.store().fire(&slot, &call).await.expect("fire");
    assert!(
        first
            .iter()
            .all(|o| matches!(o.result, SegmentResult::Fired { .. })),
        "{first:?}"
    );
    let second = b.store().fire(&slot, &call).await.expect("fire again");
    assert!(
        second.iter().all(|o| o.result == SegmentResult::Stale),
        "{second:?}"
    );
    assert_eq!(b.messages().await, ["txn-k0", "txn-k1", "txn-k2"]);
}

async fn two_segments_of_one_destination_are_refused_with_22023<B: Backend>(b: &B) {
    b.schedule("t", vec![schedule("a", -5), schedule("b", -5)])
        .await;
    let slot = slot().await;
    let claimed = b
        .store()
        .claim(&slot, &claim_of(Duration::from_secs(30), 10, 10))
        .await
        .expect("claim")
        .rows;
    let destination = Destination {
        tenant: "t".into(),
        queue: "q".into(),
        partition: "p".into(),
    };
    let segment = |c: &queen_sweeper::ClaimedTimer| Segment {
        destination: destination.clone(),
        timers: vec![HeldTimer {
            timer_key: c.timer_key.clone(),
            token: c.token,
        }],
        bytes: 1,
    };
    let call = FireCall {
        segments: vec![segment(&claimed[0]), segment(&claimed[1])],
    };
    assert_eq!(b.fire_unchecked(call).await.as_deref(), Some("22023"));
    assert!(b.messages().await.is_empty(), "nothing written");
}

async fn the_probe_counts_due_rows_up_to_its_cap<B: Backend>(b: &B) {
    let slot = slot().await;
    let empty = b
        .store()
        .probe(&slot, &probe_of(3, 0))
        .await
        .expect("probe");
    assert_eq!(
        (empty.next_in_ms, empty.due, empty.due_capped),
        (None, 0, false)
    );
    let mut ops: Vec<TimerOp> = (0..5).map(|i| schedule(&format!("d{i}"), -1_000)).collect();
    ops.push(schedule("later", 60_000));
    b.schedule("t", ops).await;
    let capped = b
        .store()
        .probe(&slot, &probe_of(3, 0))
        .await
        .expect("probe");
    assert_eq!(
        (capped.next_in_ms, capped.due, capped.due_capped),
        (Some(0), 3, true)
    );
    assert!(capped.late_ms >= 1_000, "{capped:?}");
    let full = b
        .store()
        .probe(&slot, &probe_of(10, 0))
        .await
        .expect("probe");
    assert_eq!((full.due, full.due_capped), (5, false));
}

async fn an_expired_lease_is_reclaimed_with_a_new_token_and_the_old_fire_is_stale<B: Backend>(
    b: &B,
) {
    b.schedule("t", vec![schedule("x", -5)]).await;
    let slot = slot().await;
    let lease = Duration::from_millis(300);
    let first = b
        .store()
        .claim(&slot, &claim_of(lease, 10, 10))
        .await
        .expect("claim")
        .rows;
    assert_eq!(first.len(), 1);
    assert!(
        b.store()
            .claim(&slot, &claim_of(lease, 10, 10))
            .await
            .expect("claim")
            .rows
            .is_empty()
    );
    b.sleep(Duration::from_millis(400)).await;
    let second = b
        .store()
        .claim(&slot, &claim_of(lease * 100, 10, 10))
        .await
        .expect("reclaim")
        .rows;
    assert_eq!(second.len(), 1);
    assert_ne!(first[0].token, second[0].token);
    let old = b
        .store()
        .fire(&slot, &plan_fire_calls(&first, 1 << 20)[0])
        .await
        .expect("old fire");
    assert_eq!(old[0].result, SegmentResult::Stale);
    let new = b
        .store()
        .fire(&slot, &plan_fire_calls(&second, 1 << 20)[0])
        .await
        .expect("new fire");
    assert!(matches!(new[0].result, SegmentResult::Fired { .. }));
    assert_eq!(b.messages().await, ["txn-x"]);
}

async fn a_transient_failure_spends_no_attempt_and_an_exhausted_timer_goes_to_the_dlq<
    B: Backend,
>(
    b: &B,
) {
    b.schedule("t", vec![schedule("f", -5)]).await;
    let slot = slot().await;
    let claimed = b
        .store()
        .claim(&slot, &claim_of(Duration::from_secs(30), 10, 10))
        .await
        .expect("claim")
        .rows;
    let row = |backoff_ms| FailRow {
        timer: claimed[0].timer_ref(),
        backoff: Duration::from_millis(backoff_ms),
    };
    let transient = b
        .store()
        .fail(
            &slot,
            &fail_of(vec![row(200)], "db away", FailCause::Transient, 2),
        )
        .await
        .expect("fail");
    assert_eq!((transient[0].attempts, transient[0].exhausted), (0, false));
    assert!(
        b.store()
            .claim(&slot, &claim_of(Duration::from_secs(30), 10, 10))
            .await
            .expect("claim")
            .rows
            .is_empty(),
        "in backoff"
    );
    b.sleep(Duration::from_millis(300)).await;
    let again = b
        .store()
        .claim(&slot, &claim_of(Duration::from_secs(30), 10, 10))
        .await
        .expect("claim")
        .rows;
    assert_eq!(again.len(), 1);
    let failed_row = FailRow {
        timer: again[0].timer_ref(),
        backoff: Duration::ZERO,
    };
    let permanent = b
        .store()
        .fail(
            &slot,
            &fail_of(vec![failed_row], "poison", FailCause::Counted, 1),
        )
        .await
        .expect("fail");
    assert_eq!((permanent[0].attempts, permanent[0].exhausted), (1, true));
    assert_eq!(
        b.store()
            .dlq(&slot, &[again[0].timer_ref()])
            .await
            .expect("dlq"),
        1
    );
    assert!(
        b.messages().await.is_empty(),
        "a dead letter is not a message"
    );
}

async fn the_prune_deletes_expired_rows_in_budgets_and_reports_done<B: Backend>(b: &B) {
    for i in 0..5 {
        b.put_kv(&format!("gone-{i}"), 1).await;
    }
    b.put_kv("alive", 600_000).await;
    b.sleep(Duration::from_millis(50)).await;
    let slot = slot().await;
    let first = b
        .store()
        .kv_expire_step(&slot, &ALL(), 3)
        .await
        .expect("prune");
    assert_eq!((first.deleted, first.done, first.unpruned), (3, false, 2));
    let second = b
        .store()
        .kv_expire_step(&slot, &ALL(), 3)
        .await
        .expect("prune");
    assert_eq!((second.deleted, second.done, second.unpruned), (2, true, 0));
    let third = b
        .store()
        .kv_expire_step(&slot, &ALL(), 3)
        .await
        .expect("prune");
    assert_eq!(
        (third.deleted, third.done, third.unpruned, third.lag_ms),
        (0, true, 0, 0)
    );
}

async fn the_schedule_seam_answers_every_status<B: Backend>(b: &B) {
    let first = b.schedule("t", vec![schedule("s", 60_000)]).await;
    assert_eq!(first[0].status, ApplyStatus::Scheduled);
    assert_eq!(first[0].deliver_in_ms, Some(60_000));
    let again = b.schedule("t", vec![schedule("s", 30_000)]).await;
    assert_eq!(again[0].status, ApplyStatus::Rescheduled);
    assert_eq!(
        again[0].message_id, first[0].message_id,
        "a reschedule keeps the message id"
    );
    let cancel = TimerOp::Cancel {
        queue: "q".into(),
        timer_key: "s".into(),
    };
    assert_eq!(
        b.schedule("t", vec![cancel.clone()]).await[0].status,
        ApplyStatus::Cancelled
    );
    assert_eq!(
        b.schedule("t", vec![cancel]).await[0].status,
        ApplyStatus::Absent
    );
    b.schedule("t", vec![schedule("held", -5)]).await;
    let slot = slot().await;
    assert_eq!(
        b.store()
            .claim(&slot, &claim_of(Duration::from_secs(30), 10, 10))
            .await
            .expect("claim")
            .rows
            .len(),
        1
    );
    let late = b
        .schedule(
            "t",
            vec![TimerOp::Cancel {
                queue: "q".into(),
                timer_key: "held".into(),
            }],
        )
        .await;
    assert_eq!(late[0].status, ApplyStatus::TooLate);
}

async fn the_fairness_round_serves_a_small_tenant_behind_a_big_backlog<B: Backend>(b: &B) {
    for chunk in 0..3 {
        let ops = (0..100)
            .map(|i| schedule(&format!("big-{chunk}-{i}"), -1_000))
            .collect();
        b.schedule("big", ops).await;
    }
    b.schedule("small", vec![schedule("only", -1)]).await;
    let slot = slot().await;
    let plain = b
        .store()
        .claim(&slot, &claim_of(Duration::from_secs(30), 10, 10))
        .await
        .expect("claim")
        .rows;
    assert!(
        plain.iter().all(|c| c.destination.tenant == "big"),
        "without the round, visibility order wins"
    );
    let mut fair = FairRound {
        tenants: 32,
        after: None,
    };
    let claimed = b
        .store()
        .claim(
            &slot,
            &ClaimRequest {
                fair: Some(fair.clone()),
                ..claim_of(Duration::from_secs(30), 10, 10)
            },
        )
        .await
        .expect("claim");
    fair.after = claimed.fair_after;
    let claimed = claimed.rows;
    assert_eq!(claimed.len(), 10);
    assert!(
        claimed
            .iter()
            .any(|c| c.destination.tenant == "small" && c.timer_key == "only"),
        "{claimed:?}"
    );
    assert_eq!(
        fair.after.as_deref(),
        Some("small"),
        "the round visited big, then small"
    );
}

async fn the_probe_carries_the_switches_and_the_prunes_alarm<B: Backend>(b: &B) {
    let slot = slot().await;
    let fresh = b
        .store()
        .probe(&slot, &probe_of(10, 100))
        .await
        .expect("probe");
    assert_eq!(
        (fresh.switches.schedule_enabled, fresh.switches.fire_enabled),
        (true, true)
    );
    assert_eq!(
        fresh.kv_expired,
        Some(ExpiredKv::default()),
        "nothing expired yet"
    );
    assert_eq!(
        b.store()
            .probe(&slot, &probe_of(10, 0))
            .await
            .expect("probe")
            .kv_expired,
        None,
        "kv_cap 0 leaves the alarm out"
    );
    for i in 0..5 {
        b.put_kv(&format!("short-{i}"), 1).await;
    }
    b.put_kv("long", 3_600_000).await;
    b.sleep(Duration::from_millis(300)).await;
    let alarm = b
        .store()
        .probe(&slot, &probe_of(10, 3))
        .await
        .expect("probe")
        .kv_expired
        .expect("asked for");
    assert_eq!((alarm.expired, alarm.capped), (3, true), "capped at 3 of 5");
    assert!(alarm.lag_ms >= 250, "{alarm:?}");
    b.store()
        .write_switch(&slot, Switch::Fire, false)
        .await
        .expect("switch");
    let off = b
        .store()
        .probe(&slot, &probe_of(10, 0))
        .await
        .expect("probe");
    assert_eq!(
        (off.switches.schedule_enabled, off.switches.fire_enabled),
        (true, false)
    );
}

async fn prune<B: Backend>(b: &B, max_rows: u32) -> (u64, bool, u64) {
    let step = b
        .store()
        .kv_expire_step(&slot().await, &ALL(), max_rows)
        .await
        .expect("prune");
    (step.deleted, step.done, step.unpruned)
}

async fn rollup<B: Backend>(
    b: &B,
    after: Option<&str>,
    max_tenants: u32,
) -> queen_sweeper::UsageStep {
    b.store()
        .usage_step(&slot().await, after, max_tenants)
        .await
        .expect("rollup")
}

async fn the_prune_skips_rows_open_puts_hold_and_prunes_them_once_the_lock_goes<B: Backend>(b: &B) {
    for key in ["free", "rolled-back", "committed"] {
        b.put_kv(key, 1).await;
    }
    b.sleep(Duration::from_millis(50)).await;
    // Two transactions of the wire re-put expired rows with a long TTL and have not committed.
    let rolled_back = b.put_kv_and_hold("rolled-back", 600_000).await;
    let committed = b.put_kv_and_hold("committed", 600_000).await;
    assert_eq!(
        prune(b, 3).await,
        (1, false, 2),
        "the held rows are skipped, not waited for; they count toward the budget, and their \
         committed versions, expired, as unpruned"
    );
    assert_eq!(prune(b, 10).await, (0, true, 2), "still held");
    b.end(rolled_back, false).await;
    b.end(committed, true).await;
    assert_eq!(
        prune(b, 10).await,
        (1, true, 0),
        "the rolled-back row goes once its lock does; the committed put made its row live"
    );
    let step = rollup(b, None, 10).await;
    assert_eq!((step.tenants, step.done), (1, true));
    let live = 2 + "committed".len() as u64 + stored_bytes(KV_VALUE);
    assert_eq!(
        b.usage("t").await,
        Some([1, live, 0, 0]),
        "only the committed row is left"
    );
}

async fn the_usage_rollup_counts_live_kv_and_pending_timers_in_the_sqls_bytes<B: Backend>(b: &B) {
    let bytes_payload = TimerOp::Schedule {
        queue: "q".into(),
        timer_key: "bin".into(),
        delay_ms: 60_000,
        payload: Payload::Bytes(vec![7; 100]),
        partition: Some("p".into()),
        txn: None,
    };
    // A JSON payload is stored as the text it came in, `{"key":"j"}`: 11 bytes.
    b.schedule("t", vec![schedule("j", 60_000), bytes_payload])
        .await;
    b.schedule("u", vec![schedule("u1", 60_000)]).await;
    b.put_kv_row("t", "ns", "a", "[0,1,2,3,4,5,6,7,8,9]", None)
        .await;
    b.put_kv_row(
        "t",
        "ns2",
        "bb",
        &format!("{:?}", "x".repeat(20)),
        Some(600_000),
    )
    .await;
    b.put_kv_row("t", "ns", "gone", KV_VALUE, Some(1)).await;
    b.put_kv_row("v", "ns", "k", KV_VALUE, Some(2_000)).await;
    b.sleep(Duration::from_millis(50)).await;

    // Two tenants a step, in tenant order, as the sweeper pages it.
    let first = rollup(b, None, 2).await;
    assert_eq!(
        (
            first.tenants,
            first.zeroed,
            first.done,
            first.last_tenant.as_deref()
        ),
        (2, 0, false, Some("u"))
    );
    let second = rollup(b, Some("u"), 2).await;
    assert_eq!(
        (
            second.tenants,
            second.zeroed,
            second.done,
            second.last_tenant.as_deref()
        ),
        (1, 0, true, Some("v"))
    );
    // Namespace + key + the value's JSON text for KV (live rows only); queue + timer key +
    // payload for timers.
    let kv_a = 2 + 1 + 21;
    let kv_bb = 3 + 2 + (20 + 2);
    let timer_j = 1 + 1 + r#"{"key":"j"}"#.len() as u64;
    let timer_bin = 1 + 3 + 100;
    assert_eq!(
        b.usage("t").await,
        Some([2, kv_a + kv_bb, 2, timer_j + timer_bin]),
        "the expired row is not counted"
    );
    let timer_u1 = 1 + 2 + r#"{"key":"u1"}"#.len() as u64;
    assert_eq!(b.usage("u").await, Some([0, 0, 1, timer_u1]));
    assert_eq!(b.usage("v").await, Some([1, 2 + 1 + (5 + 2), 0, 0]));

    // v's only row expires and is pruned: the next rollup writes v as zeros.
    b.sleep(Duration::from_millis(2_100)).await;
    assert_eq!(prune(b, 10).await, (2, true, 0), "gone and v's row");
    let again = rollup(b, None, 10).await;
    assert_eq!(
        (
            again.tenants,
            again.zeroed,
            again.done,
            again.last_tenant.as_deref()
        ),
        (2, 1, true, Some("u"))
    );
    assert_eq!(b.usage("v").await, Some([0, 0, 0, 0]));
    assert_eq!(
        b.usage("t").await,
        Some([2, kv_a + kv_bb, 2, timer_j + timer_bin])
    );
}

async fn switches<B: Backend>(b: &B) -> (bool, bool) {
    let slot = slot().await;
    let read = b.store().read_switches(&slot).await.expect("read switches");
    let probed = b
        .store()
        .probe(&slot, &probe_of(10, 0))
        .await
        .expect("probe")
        .switches;
    assert_eq!(read, probed, "the read and the probe agree");
    (read.schedule_enabled, read.fire_enabled)
}

async fn set<B: Backend>(b: &B, switch: Switch, enabled: bool) {
    b.store()
        .write_switch(&slot().await, switch, enabled)
        .await
        .expect("write switch");
}

async fn the_switches_read_back_as_written_and_stop_neither_the_prune_nor_the_rollup<B: Backend>(
    b: &B,
) {
    assert_eq!(switches(b).await, (true, true), "both on by default");
    set(b, Switch::Schedule, false).await;
    assert_eq!(switches(b).await, (false, true), "one switch, not both");
    set(b, Switch::Fire, false).await;
    set(b, Switch::Fire, false).await;
    assert_eq!(
        switches(b).await,
        (false, false),
        "written twice, still off"
    );
    // The database keeps the switches and the brokers obey them: with both off, the prune and
    // the rollup run as ever (the prune is not a fire, and the rollup is what the quota reads).
    b.put_kv("gone", 1).await;
    b.put_kv("kept", 600_000).await;
    b.sleep(Duration::from_millis(50)).await;
    assert_eq!(prune(b, 10).await, (1, true, 0));
    let step = rollup(b, None, 10).await;
    assert_eq!((step.tenants, step.done), (1, true));
    let kept = 2 + "kept".len() as u64 + stored_bytes(KV_VALUE);
    assert_eq!(b.usage("t").await, Some([1, kept, 0, 0]));
    set(b, Switch::Schedule, true).await;
    assert_eq!(switches(b).await, (true, false));
    set(b, Switch::Fire, true).await;
    assert_eq!(switches(b).await, (true, true));
}
