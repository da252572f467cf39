//! Contracts of the KV surface, the KV prune, the usage rollup, and the schema-wide lock order,
//! proven against a real PostgreSQL (DESIGN.md §3–4, sql/020_kv.sql, sql/021_quota.sql,
//! sql/030_kv_sweeper.sql).
//!
//! Time: every test reads the server's `now()` once and passes explicit instants derived from it
//! as `p_now` (`base + 1 s`, `expires_at - 1 ms`), so it time-travels instead of sleeping and its
//! boundaries are exact to the microsecond. The lock-order test is the exception: it runs against
//! the server's clock as production does, and bounds itself with a tokio deadline and an
//! iteration count.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use queen_testdb::TestDb;
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, PgExecutor, PgPool};
use uuid::Uuid;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn all_shards() -> Vec<i32> {
    (0..64).collect()
}

/// 0..63 rotated to start at `start`, as a broker passes them.
fn rotated_shards(start: usize) -> Vec<i32> {
    (0..64).map(|i| ((start + i) % 64) as i32).collect()
}

fn ms(n: i64) -> TimeDelta {
    TimeDelta::milliseconds(n)
}

fn sqlstate(error: &sqlx::Error) -> Option<String> {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned())
}

/// The server's clock, read once; tests derive every `p_now` from it.
async fn server_now(pool: &PgPool) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT now()")
        .fetch_one(pool)
        .await
        .expect("server now")
}

async fn try_put<'e>(
    executor: impl PgExecutor<'e>,
    tenant: &str,
    namespace: &str,
    key: &str,
    value: Value,
    ttl_ms: Option<i64>,
    now: DateTime<Utc>,
) -> Result<Value, sqlx::Error> {
    sqlx::query_scalar("SELECT queen.kv_put_v1($1, $2, $3, $4, $5, $6)")
        .bind(tenant)
        .bind(namespace)
        .bind(key)
        .bind(value)
        .bind(ttl_ms)
        .bind(now)
        .fetch_one(executor)
        .await
}

async fn put(
    pool: &PgPool,
    tenant: &str,
    namespace: &str,
    key: &str,
    value: Value,
    ttl_ms: Option<i64>,
    now: DateTime<Utc>,
) -> Value {
    try_put(pool, tenant, namespace, key, value, ttl_ms, now)
        .await
        .unwrap_or_else(|e| panic!("kv_put_v1({tenant}, {namespace}, {key}): {e}"))
}

async fn get(
    pool: &PgPool,
    tenant: &str,
    namespace: &str,
    key: &str,
    now: DateTime<Utc>,
) -> Option<Value> {
    sqlx::query_scalar("SELECT queen.kv_get_v1($1, $2, $3, $4)")
        .bind(tenant)
        .bind(namespace)
        .bind(key)
        .bind(now)
        .fetch_one(pool)
        .await
        .expect("kv_get_v1")
}

async fn delete(
    pool: &PgPool,
    tenant: &str,
    namespace: &str,
    key: &str,
    now: DateTime<Utc>,
) -> bool {
    sqlx::query_scalar("SELECT queen.kv_delete_v1($1, $2, $3, $4)")
        .bind(tenant)
        .bind(namespace)
        .bind(key)
        .bind(now)
        .fetch_one(pool)
        .await
        .expect("kv_delete_v1")
}

async fn expires_at(
    pool: &PgPool,
    tenant: &str,
    namespace: &str,
    key: &str,
) -> Option<DateTime<Utc>> {
    sqlx::query_scalar(
        "SELECT expires_at FROM queen.kv WHERE tenant_id = $1 AND namespace = $2 AND key = $3",
    )
    .bind(tenant)
    .bind(namespace)
    .bind(key)
    .fetch_one(pool)
    .await
    .expect("expires_at of a present row")
}

async fn row_present(pool: &PgPool, tenant: &str, namespace: &str, key: &str) -> bool {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM queen.kv WHERE tenant_id = $1 AND namespace = $2 AND key = $3)",
    )
    .bind(tenant)
    .bind(namespace)
    .bind(key)
    .fetch_one(pool)
    .await
    .expect("row presence")
}

async fn try_expire_step<'e>(
    executor: impl PgExecutor<'e>,
    shards: Vec<i32>,
    now: DateTime<Utc>,
    max_rows: i32,
    unpruned_cap: i32,
) -> Result<Value, sqlx::Error> {
    sqlx::query_scalar("SELECT queen.kv_expire_step_v1($1, $2, $3, $4)")
        .bind(shards)
        .bind(now)
        .bind(max_rows)
        .bind(unpruned_cap)
        .fetch_one(executor)
        .await
}

async fn expire_step(pool: &PgPool, now: DateTime<Utc>, max_rows: i32, unpruned_cap: i32) -> Value {
    try_expire_step(pool, all_shards(), now, max_rows, unpruned_cap)
        .await
        .expect("kv_expire_step_v1")
}

async fn try_usage_step<'e>(
    executor: impl PgExecutor<'e>,
    after: Option<&str>,
    now: DateTime<Utc>,
    max_tenants: i32,
) -> Result<Value, sqlx::Error> {
    sqlx::query_scalar("SELECT queen.kv_usage_step_v1($1, $2, $3)")
        .bind(after)
        .bind(now)
        .bind(max_tenants)
        .fetch_one(executor)
        .await
}

async fn usage_step(
    pool: &PgPool,
    after: Option<&str>,
    now: DateTime<Utc>,
    max_tenants: i32,
) -> Value {
    try_usage_step(pool, after, now, max_tenants)
        .await
        .expect("kv_usage_step_v1")
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Usage {
    kv_rows: i64,
    kv_bytes: i64,
    timer_rows: i64,
    timer_bytes: i64,
    measured_at: DateTime<Utc>,
}

async fn usage(pool: &PgPool, tenant: &str) -> Option<Usage> {
    let row: Option<(i64, i64, i64, i64, DateTime<Utc>)> = sqlx::query_as(
        "SELECT kv_rows, kv_bytes, timer_rows, timer_bytes, measured_at FROM queen.kv_usage WHERE tenant_id = $1",
    )
    .bind(tenant)
    .fetch_optional(pool)
    .await
    .expect("kv_usage row");
    row.map(
        |(kv_rows, kv_bytes, timer_rows, timer_bytes, measured_at)| Usage {
            kv_rows,
            kv_bytes,
            timer_rows,
            timer_bytes,
            measured_at,
        },
    )
}

/// The documented KV byte formula, evaluated on the rows of `tenant` that are live at `now`:
/// namespace + key + the value's JSON text, in bytes.
async fn live_kv_bytes_by_formula(pool: &PgPool, tenant: &str, now: DateTime<Utc>) -> i64 {
    sqlx::query_scalar(
        "SELECT coalesce(sum(octet_length(namespace) + octet_length(key) + octet_length(value)), 0)::bigint \
         FROM queen.kv WHERE tenant_id = $1 AND (expires_at IS NULL OR expires_at > $2)",
    )
    .bind(tenant)
    .bind(now)
    .fetch_one(pool)
    .await
    .expect("formula bytes")
}

async fn apply<'e>(
    executor: impl PgExecutor<'e>,
    tenant: &str,
    ops: Value,
    now: DateTime<Utc>,
) -> Result<Value, sqlx::Error> {
    sqlx::query_scalar("SELECT queen.log_timers_apply_v1($1, $2, $3)")
        .bind(tenant)
        .bind(ops)
        .bind(now)
        .fetch_one(executor)
        .await
}

#[derive(Debug, Clone)]
struct Claimed {
    tenant_id: String,
    queue: String,
    timer_key: String,
    partition: String,
    txn: String,
    message_id: Uuid,
    claim_token: Uuid,
}

async fn claim(
    conn: &mut PgConnection,
    shards: Vec<i32>,
    now: DateTime<Utc>,
    lease_ms: i32,
    max_rows: i32,
) -> Result<Vec<Claimed>, sqlx::Error> {
    let rows: Vec<(String, String, String, String, String, Uuid, Uuid)> = sqlx::query_as(
        "SELECT tenant_id, queue, timer_key, partition, txn, message_id, claim_token \
         FROM queen.log_timers_claim_v1($1, $2, $3, $4, $4)",
    )
    .bind(shards)
    .bind(now)
    .bind(lease_ms)
    .bind(max_rows)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(tenant_id, queue, timer_key, partition, txn, message_id, claim_token)| Claimed {
                tenant_id,
                queue,
                timer_key,
                partition,
                txn,
                message_id,
                claim_token,
            },
        )
        .collect())
}

/// (tenant, queue, partition): where a message goes.
type Destination = (String, String, String);

/// One fire call's answer for one segment, with the claimed rows it covered.
#[derive(Debug)]
struct SegmentOutcome {
    result: String,
    rows: Vec<Claimed>,
}

/// Fires claimed rows the way the sweeper does: one segment per destination, rows in claim order.
async fn fire(
    conn: &mut PgConnection,
    claimed: &[Claimed],
    now: DateTime<Utc>,
) -> Result<Vec<SegmentOutcome>, sqlx::Error> {
    let mut segments: Vec<(Destination, Vec<Claimed>)> = Vec::new();
    for row in claimed {
        let destination = (
            row.tenant_id.clone(),
            row.queue.clone(),
            row.partition.clone(),
        );
        match segments.iter_mut().find(|(d, _)| *d == destination) {
            Some((_, rows)) => rows.push(row.clone()),
            None => segments.push((destination, vec![row.clone()])),
        }
    }
    if segments.is_empty() {
        return Ok(Vec::new());
    }
    let tenants: Vec<String> = segments.iter().map(|((t, _, _), _)| t.clone()).collect();
    let queues: Vec<String> = segments.iter().map(|((_, q, _), _)| q.clone()).collect();
    let partitions: Vec<String> = segments.iter().map(|((_, _, p), _)| p.clone()).collect();
    let sizes: Vec<i32> = segments.iter().map(|(_, rows)| rows.len() as i32).collect();
    let keys: Vec<String> = segments
        .iter()
        .flat_map(|(_, rows)| rows.iter().map(|r| r.timer_key.clone()))
        .collect();
    let tokens: Vec<Uuid> = segments
        .iter()
        .flat_map(|(_, rows)| rows.iter().map(|r| r.claim_token))
        .collect();
    let answers: Vec<(i32, String, i32)> = sqlx::query_as(
        "SELECT segment, result, timers FROM queen.log_timers_fire_v1($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(tenants)
    .bind(queues)
    .bind(partitions)
    .bind(sizes)
    .bind(keys)
    .bind(tokens)
    .bind(now)
    .fetch_all(conn)
    .await?;
    assert_eq!(
        answers.len(),
        segments.len(),
        "the fire answers once per segment: {answers:?}"
    );
    let mut outcomes = Vec::with_capacity(answers.len());
    for (segment, result, timers) in answers {
        let (_, rows) = &segments[segment as usize];
        assert_eq!(timers as usize, rows.len(), "segment {segment} size");
        assert!(
            result == "fired" || result == "stale",
            "unknown fire result {result:?}"
        );
        outcomes.push(SegmentOutcome {
            result,
            rows: rows.clone(),
        });
    }
    Ok(outcomes)
}

/// Waits (bounded, polling the server's view) until backend `pid` is blocked on a lock.
async fn wait_until_blocked_on_a_lock(pool: &PgPool, pid: i32) {
    for _ in 0..1000 {
        let waiting: Option<String> =
            sqlx::query_scalar("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1")
                .bind(pid)
                .fetch_optional(pool)
                .await
                .expect("pg_stat_activity")
                .flatten();
        if waiting.as_deref() == Some("Lock") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("backend {pid} never blocked on a lock within 10 s");
}

async fn backend_pid(conn: &mut PgConnection) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await
        .expect("backend pid")
}

// ---------------------------------------------------------------------------------------------
// KV: the expiry boundary
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn kv_live_is_true_without_expiry_and_false_from_the_expiry_instant_on() {
    let db = TestDb::new().await;
    let base = server_now(&db.pool).await;
    let live = |expires: Option<DateTime<Utc>>, now: DateTime<Utc>| {
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, bool>("SELECT queen.kv_live_v1($1, $2)")
                .bind(expires)
                .bind(now)
                .fetch_one(&pool)
                .await
                .expect("kv_live_v1")
        }
    };
    assert!(live(None, base).await, "no expiry is live");
    assert!(live(Some(base), base - ms(1)).await, "1 ms before is live");
    assert!(
        !live(Some(base), base).await,
        "exactly at the expiry is dead"
    );
    assert!(
        !live(Some(base), base + ms(1)).await,
        "after the expiry is dead"
    );
}

#[tokio::test]
async fn a_row_expiring_exactly_at_now_is_dead_for_readers_and_the_prune_and_alive_one_ms_before() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    put(pool, "t", "ns", "k", json!({"v": 1}), Some(1000), base).await;
    let expiry = expires_at(pool, "t", "ns", "k").await.expect("a TTL row");
    assert_eq!(expiry, base + ms(1000), "expires_at = p_now + ttl");

    // One millisecond before: alive for readers, not touched by the prune.
    let before = expiry - ms(1);
    let read = get(pool, "t", "ns", "k", before)
        .await
        .expect("alive 1 ms before");
    assert_eq!(read["value"], json!({"v": 1}));
    assert_eq!(read["version"], json!(1));
    let pass = expire_step(pool, before, 100, 10_000).await;
    assert_eq!(pass["deleted"], json!(0), "{pass}");
    assert_eq!(pass["unpruned"], json!(0), "{pass}");
    assert!(row_present(pool, "t", "ns", "k").await);

    // Exactly at expires_at: dead for readers and for the prune.
    assert_eq!(get(pool, "t", "ns", "k", expiry).await, None);
    let pass = expire_step(pool, expiry, 100, 10_000).await;
    assert_eq!(pass["deleted"], json!(1), "{pass}");
    assert_eq!(pass["unpruned"], json!(0), "{pass}");
    assert_eq!(pass["lagMs"], json!(0), "{pass}");
    assert!(!row_present(pool, "t", "ns", "k").await);
}

// ---------------------------------------------------------------------------------------------
// KV: the prune
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_expire_step_deletes_only_expired_rows_and_keeps_live_and_ttl_less_rows() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    for i in 0..4 {
        put(
            pool,
            "t",
            "ns",
            &format!("short{i}"),
            json!(i),
            Some(1000),
            base,
        )
        .await;
        put(
            pool,
            "t",
            "ns",
            &format!("long{i}"),
            json!(i),
            Some(60_000),
            base,
        )
        .await;
        put(
            pool,
            "t",
            "ns",
            &format!("forever{i}"),
            json!(i),
            None,
            base,
        )
        .await;
    }
    let pass = expire_step(pool, base + ms(5000), 100, 10_000).await;
    assert_eq!(
        pass,
        json!({"deleted": 4, "done": true, "unpruned": 0, "unprunedCapped": false, "lagMs": 0})
    );
    let left: Vec<String> = sqlx::query_scalar("SELECT key FROM queen.kv ORDER BY key")
        .fetch_all(pool)
        .await
        .expect("keys");
    let mut expected: Vec<String> = (0..4)
        .flat_map(|i| [format!("forever{i}"), format!("long{i}")])
        .collect();
    expected.sort();
    assert_eq!(left, expected);
}

#[tokio::test]
async fn the_expire_step_spares_a_row_re_put_with_a_later_expiry() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    put(pool, "t", "ns", "k", json!("short"), Some(1000), base).await;
    // Re-put while still live with a long TTL: the row now expires at base + 500 ms + 60 s.
    let reput = put(
        pool,
        "t",
        "ns",
        "k",
        json!("long"),
        Some(60_000),
        base + ms(500),
    )
    .await;
    assert_eq!(reput["version"], json!(2));

    // Between the first expiry and the second.
    let between = base + ms(5000);
    let pass = expire_step(pool, between, 100, 10_000).await;
    assert_eq!(pass["deleted"], json!(0), "{pass}");
    assert_eq!(pass["unpruned"], json!(0), "{pass}");
    let read = get(pool, "t", "ns", "k", between).await.expect("spared");
    assert_eq!(read["value"], json!("long"));
    assert_eq!(read["version"], json!(2));
}

#[tokio::test]
async fn the_expire_step_reports_done_only_when_its_scan_cannot_fill_the_budget() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    for i in 0..5 {
        put(
            pool,
            "t",
            "ns",
            &format!("k{i}"),
            json!(i),
            Some(1000),
            base,
        )
        .await;
    }
    let now = base + ms(2000);

    let first = expire_step(pool, now, 3, 10_000).await;
    assert_eq!(first["deleted"], json!(3), "{first}");
    assert_eq!(
        first["done"],
        json!(false),
        "a full budget is not done: {first}"
    );
    assert_eq!(first["unpruned"], json!(2), "{first}");

    let second = expire_step(pool, now, 3, 10_000).await;
    assert_eq!(second["deleted"], json!(2), "{second}");
    assert_eq!(second["done"], json!(true), "{second}");
    assert_eq!(second["unpruned"], json!(0), "{second}");

    // Exactly the budget: the scan filled it, so it cannot know it is done; the next pass does.
    for i in 0..3 {
        put(
            pool,
            "t",
            "ns",
            &format!("e{i}"),
            json!(i),
            Some(1000),
            base,
        )
        .await;
    }
    let exact = expire_step(pool, now, 3, 10_000).await;
    assert_eq!(exact["deleted"], json!(3), "{exact}");
    assert_eq!(exact["done"], json!(false), "{exact}");
    let after = expire_step(pool, now, 3, 10_000).await;
    assert_eq!(
        after,
        json!({"deleted": 0, "done": true, "unpruned": 0, "unprunedCapped": false, "lagMs": 0})
    );
}

#[tokio::test]
async fn the_expire_step_reports_unpruned_capped_and_lag_on_a_pass_that_deletes_nothing() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    // Five rows, expired at base + 1 s .. base + 5 s.
    for i in 0..5i64 {
        put(
            pool,
            "t",
            "ns",
            &format!("k{i}"),
            json!(i),
            Some(1000 * (i + 1)),
            base,
        )
        .await;
    }
    let now = base + ms(10_000);

    // Another transaction holds all five: the pass deletes nothing, and still raises the alarm.
    let mut holder = db.connection().await;
    let mut tx = holder.begin().await.expect("begin");
    let held: Vec<String> = sqlx::query_scalar(
        "SELECT key FROM queen.kv WHERE tenant_id = 't' ORDER BY key FOR UPDATE",
    )
    .fetch_all(&mut *tx)
    .await
    .expect("hold the rows");
    assert_eq!(held.len(), 5);

    let pass = expire_step(pool, now, 100, 10_000).await;
    assert_eq!(
        pass,
        json!({"deleted": 0, "done": true, "unpruned": 5, "unprunedCapped": false, "lagMs": 9000}),
        "the oldest expired at base + 1 s, 9000 ms before now"
    );
    let capped = expire_step(pool, now, 100, 3).await;
    assert_eq!(capped["deleted"], json!(0), "{capped}");
    assert_eq!(capped["unpruned"], json!(3), "{capped}");
    assert_eq!(capped["unprunedCapped"], json!(true), "{capped}");
    assert_eq!(capped["lagMs"], json!(9000), "{capped}");
    let at_cap = expire_step(pool, now, 100, 5).await;
    assert_eq!(at_cap["unpruned"], json!(5), "{at_cap}");
    assert_eq!(
        at_cap["unprunedCapped"],
        json!(false),
        "exactly the cap is not over it"
    );
    let zero_cap = expire_step(pool, now, 100, 0).await;
    assert_eq!(zero_cap["unpruned"], json!(0), "{zero_cap}");
    assert_eq!(zero_cap["unprunedCapped"], json!(true), "{zero_cap}");

    tx.rollback().await.expect("release");
    let pass = expire_step(pool, now, 100, 10_000).await;
    assert_eq!(
        pass,
        json!({"deleted": 5, "done": true, "unpruned": 0, "unprunedCapped": false, "lagMs": 0})
    );
}

#[tokio::test]
async fn the_expire_step_reports_the_rows_a_small_budget_left_behind() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    for i in 0..5i64 {
        put(
            pool,
            "t",
            "ns",
            &format!("k{i}"),
            json!(i),
            Some(1000 * (i + 1)),
            base,
        )
        .await;
    }
    let now = base + ms(10_000);
    let pass = expire_step(pool, now, 2, 10_000).await;
    assert_eq!(pass["deleted"], json!(2), "{pass}");
    assert_eq!(pass["done"], json!(false), "{pass}");
    assert_eq!(pass["unpruned"], json!(3), "{pass}");
    assert_eq!(pass["unprunedCapped"], json!(false), "{pass}");
    // The lag is that of the oldest row still present, whichever two the pass took.
    let oldest_left: DateTime<Utc> = sqlx::query_scalar("SELECT min(expires_at) FROM queen.kv")
        .fetch_one(pool)
        .await
        .expect("oldest left");
    assert_eq!(
        pass["lagMs"],
        json!((now - oldest_left).num_milliseconds()),
        "{pass}"
    );
    let capped = expire_step(pool, now, 1, 1).await;
    assert_eq!(capped["deleted"], json!(1), "{capped}");
    assert_eq!(capped["unpruned"], json!(1), "{capped}");
    assert_eq!(
        capped["unprunedCapped"],
        json!(true),
        "2 left, cap 1: {capped}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_expire_step_skips_a_row_locked_by_another_transaction_without_waiting() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    for key in ["a", "b", "c", "d"] {
        put(pool, "t", "ns", key, json!(key), Some(1000), base).await;
    }
    let now = base + ms(5000);

    let mut holder = db.connection().await;
    let mut tx = holder.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM queen.kv WHERE tenant_id = 't' AND namespace = 'ns' AND key = 'b' FOR UPDATE")
        .execute(&mut *tx)
        .await
        .expect("hold b");

    // A prune that waited would hit lock_timeout (an error) or the tokio deadline (a panic).
    let mut pruner = db.connection().await;
    sqlx::query("SET lock_timeout = '1s'")
        .execute(&mut pruner)
        .await
        .expect("lock_timeout");
    let pass = tokio::time::timeout(
        Duration::from_secs(5),
        try_expire_step(&mut pruner, all_shards(), now, 100, 10_000),
    )
    .await
    .expect("the prune returned without waiting for the held row")
    .unwrap_or_else(|e| panic!("the prune waited on the held row: {e}"));
    assert_eq!(
        pass,
        json!({"deleted": 3, "done": true, "unpruned": 1, "unprunedCapped": false, "lagMs": 4000})
    );
    assert!(
        row_present(pool, "t", "ns", "b").await,
        "the held row is skipped"
    );
    for key in ["a", "c", "d"] {
        assert!(!row_present(pool, "t", "ns", key).await, "{key} is pruned");
    }

    tx.commit().await.expect("release");
    let pass = try_expire_step(&mut pruner, all_shards(), now, 100, 10_000)
        .await
        .expect("prune");
    assert_eq!(pass["deleted"], json!(1), "{pass}");
    assert!(!row_present(pool, "t", "ns", "b").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_expire_step_skips_a_row_an_open_put_holds_and_spares_it_once_the_put_commits_a_later_expiry()
 {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    for key in ["a", "b"] {
        put(pool, "t", "ns", key, json!("old"), Some(1000), base).await;
    }
    let now = base + ms(5000);

    // The transaction wire re-puts b (dead by now) with an hour to live, and has not committed.
    let mut holder = db.connection().await;
    let mut tx = holder.begin().await.expect("begin");
    let reput = try_put(
        &mut *tx,
        "t",
        "ns",
        "b",
        json!("new"),
        Some(3_600_000),
        base + ms(2000),
    )
    .await
    .expect("open put");
    assert_eq!(
        reput["version"],
        json!(1),
        "a put over a dead row restarts at 1"
    );
    assert_eq!(reput["created"], json!(true));

    let mut pruner = db.connection().await;
    sqlx::query("SET lock_timeout = '1s'")
        .execute(&mut pruner)
        .await
        .expect("lock_timeout");
    let pass = tokio::time::timeout(
        Duration::from_secs(5),
        try_expire_step(&mut pruner, all_shards(), now, 100, 10_000),
    )
    .await
    .expect("the prune returned without waiting for the open put")
    .unwrap_or_else(|e| panic!("the prune waited on the open put: {e}"));
    assert_eq!(pass["deleted"], json!(1), "only a: {pass}");
    assert_eq!(
        pass["unpruned"],
        json!(1),
        "b is still expired as committed: {pass}"
    );

    tx.commit().await.expect("commit the put");
    let pass = try_expire_step(&mut pruner, all_shards(), now, 100, 10_000)
        .await
        .expect("prune");
    assert_eq!(
        pass,
        json!({"deleted": 0, "done": true, "unpruned": 0, "unprunedCapped": false, "lagMs": 0})
    );
    let read = get(pool, "t", "ns", "b", now).await.expect("b survives");
    assert_eq!(read["value"], json!("new"));
}

#[tokio::test]
async fn the_expire_step_visits_only_the_shards_it_is_given() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    for i in 0..20 {
        put(
            pool,
            "t",
            "ns",
            &format!("k{i}"),
            json!(i),
            Some(1000),
            base,
        )
        .await;
    }
    let shard: i32 = sqlx::query_scalar("SELECT shard FROM queen.kv WHERE key = 'k0'")
        .fetch_one(pool)
        .await
        .expect("shard");
    let in_shard: i64 = sqlx::query_scalar("SELECT count(*) FROM queen.kv WHERE shard = $1")
        .bind(shard)
        .fetch_one(pool)
        .await
        .expect("count");
    let pass = try_expire_step(pool, vec![shard], base + ms(2000), 100, 10_000)
        .await
        .expect("prune one shard");
    assert_eq!(pass["deleted"], json!(in_shard), "{pass}");
    assert_eq!(
        pass["unpruned"],
        json!(0),
        "the alarm counts the given shards: {pass}"
    );
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM queen.kv")
        .fetch_one(pool)
        .await
        .expect("count");
    assert_eq!(left, 20 - in_shard, "other shards untouched");
    assert!(left > 0, "20 keys do not all hash to one shard");

    let malformed = try_expire_step(pool, vec![3, 3], base, 10, 10).await;
    assert_eq!(
        malformed.as_ref().err().and_then(sqlstate).as_deref(),
        Some("22023"),
        "{malformed:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// KV: put, get, delete, names, quota
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn put_increments_the_version_of_a_live_row_and_restarts_at_one_over_a_dead_row() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    let first = put(pool, "t", "ns", "k", json!(1), Some(1000), base).await;
    assert_eq!(
        first,
        json!({"version": 1, "created": true, "expiresAt": first["expiresAt"].clone()})
    );
    assert!(first["expiresAt"].is_string(), "{first}");
    let second = put(pool, "t", "ns", "k", json!(2), Some(1000), base + ms(999)).await;
    assert_eq!(second["version"], json!(2), "{second}");
    assert_eq!(second["created"], json!(false), "{second}");
    // The second put moved the expiry to base + 1999 ms, so at base + 1998 ms it is still live.
    let third = put(pool, "t", "ns", "k", json!(3), None, base + ms(1998)).await;
    assert_eq!(
        third,
        json!({"version": 3, "created": false}),
        "no TTL: no expiresAt"
    );
    assert_eq!(
        get(pool, "t", "ns", "k", base + ms(1_000_000)).await,
        Some(json!({"value": 3, "version": 3}))
    );

    put(pool, "t", "ns", "d", json!("a"), Some(1000), base).await;
    put(pool, "t", "ns", "d", json!("b"), Some(1000), base + ms(10)).await;
    // Dead at exactly its expiry (base + 1010 ms): the put starts over.
    let over_dead = put(
        pool,
        "t",
        "ns",
        "d",
        json!("c"),
        Some(1000),
        base + ms(1010),
    )
    .await;
    assert_eq!(over_dead["version"], json!(1), "{over_dead}");
    assert_eq!(over_dead["created"], json!(true), "{over_dead}");
    let created_at: DateTime<Utc> =
        sqlx::query_scalar("SELECT created_at FROM queen.kv WHERE key = 'd'")
            .fetch_one(pool)
            .await
            .expect("created_at");
    assert_eq!(
        created_at,
        base + ms(1010),
        "a put over a dead row is a new row"
    );
}

#[tokio::test]
async fn delete_reports_true_for_a_live_row_and_false_for_an_absent_or_dead_one() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    put(pool, "t", "ns", "live", json!(1), Some(1000), base).await;
    put(pool, "t", "ns", "dead", json!(1), Some(1000), base).await;
    assert!(delete(pool, "t", "ns", "live", base + ms(999)).await);
    assert!(!row_present(pool, "t", "ns", "live").await);
    assert!(
        !delete(pool, "t", "ns", "live", base + ms(999)).await,
        "gone now"
    );
    assert!(!delete(pool, "t", "ns", "never", base).await, "absent");
    assert!(
        !delete(pool, "t", "ns", "dead", base + ms(1000)).await,
        "dead at its expiry"
    );
    assert!(
        !row_present(pool, "t", "ns", "dead").await,
        "a dead row is removed quietly"
    );
}

#[tokio::test]
async fn empty_or_missing_names_are_rejected_with_22023() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    let bad: [(Option<&str>, Option<&str>, Option<&str>); 6] = [
        (Some(""), Some("ns"), Some("k")),
        (Some("t"), Some(""), Some("k")),
        (Some("t"), Some("ns"), Some("")),
        (None, Some("ns"), Some("k")),
        (Some("t"), None, Some("k")),
        (Some("t"), Some("ns"), None),
    ];
    for (tenant, namespace, key) in bad {
        let name = format!("{tenant:?}/{namespace:?}/{key:?}");
        let put: Result<Value, _> =
            sqlx::query_scalar("SELECT queen.kv_put_v1($1, $2, $3, '1', NULL, $4)")
                .bind(tenant)
                .bind(namespace)
                .bind(key)
                .bind(base)
                .fetch_one(pool)
                .await;
        assert_eq!(
            put.err().as_ref().and_then(sqlstate).as_deref(),
            Some("22023"),
            "put {name}"
        );
        let get: Result<Option<Value>, _> =
            sqlx::query_scalar("SELECT queen.kv_get_v1($1, $2, $3, $4)")
                .bind(tenant)
                .bind(namespace)
                .bind(key)
                .bind(base)
                .fetch_one(pool)
                .await;
        assert_eq!(
            get.err().as_ref().and_then(sqlstate).as_deref(),
            Some("22023"),
            "get {name}"
        );
        let delete: Result<bool, _> =
            sqlx::query_scalar("SELECT queen.kv_delete_v1($1, $2, $3, $4)")
                .bind(tenant)
                .bind(namespace)
                .bind(key)
                .bind(base)
                .fetch_one(pool)
                .await;
        assert_eq!(
            delete.err().as_ref().and_then(sqlstate).as_deref(),
            Some("22023"),
            "delete {name}"
        );
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM queen.kv")
        .fetch_one(pool)
        .await
        .expect("count");
    assert_eq!(count, 0, "nothing was written");
    // The same call with good names works, so the rejections above are about the names.
    put(pool, "t", "ns", "k", json!(1), None, base).await;
}

#[tokio::test]
async fn a_put_of_a_new_key_over_quota_raises_54000_but_overwriting_a_live_key_succeeds() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    put(pool, "tq", "ns", "k1", json!(1), None, base).await;
    put(pool, "tq", "ns", "k2", json!(2), Some(1000), base).await;
    sqlx::query(
        "INSERT INTO queen.kv_quota (tenant_id, max_rows, max_bytes) VALUES ('tq', 2, NULL)",
    )
    .execute(pool)
    .await
    .expect("quota");
    // A quota without a usage row yet means no limit.
    put(pool, "tq", "ns", "k0", json!(0), None, base).await;
    sqlx::query("DELETE FROM queen.kv WHERE key = 'k0'")
        .execute(pool)
        .await
        .expect("undo");
    let rollup = usage_step(pool, None, base, 100).await;
    assert_eq!(rollup["done"], json!(true), "{rollup}");
    assert_eq!(
        usage(pool, "tq").await.expect("usage").kv_rows,
        2,
        "at the limit"
    );

    let new_key = try_put(pool, "tq", "ns", "k3", json!(3), None, base).await;
    assert_eq!(
        new_key.as_ref().err().and_then(sqlstate).as_deref(),
        Some("54000"),
        "{new_key:?}"
    );
    assert!(!row_present(pool, "tq", "ns", "k3").await);

    let overwrite = put(pool, "tq", "ns", "k1", json!("again"), None, base).await;
    assert_eq!(overwrite["version"], json!(2), "{overwrite}");

    // k2 is dead at base + 1 s: a put over it creates a row, so it counts as new.
    let over_dead = try_put(pool, "tq", "ns", "k2", json!(2), None, base + ms(1000)).await;
    assert_eq!(
        over_dead.as_ref().err().and_then(sqlstate).as_deref(),
        Some("54000"),
        "{over_dead:?}"
    );
    // While k2 is still live, overwriting it is fine.
    let live = put(pool, "tq", "ns", "k2", json!(2), Some(1000), base + ms(999)).await;
    assert_eq!(live["version"], json!(2), "{live}");

    // Other tenants are not limited by tq's quota.
    put(pool, "other", "ns", "k3", json!(3), None, base).await;

    // Bytes: at the limit raises, one byte under does not.
    sqlx::query(
        "INSERT INTO queen.kv_quota (tenant_id, max_rows, max_bytes) VALUES ('tb', NULL, 50)",
    )
    .execute(pool)
    .await
    .expect("byte quota");
    sqlx::query("INSERT INTO queen.kv_usage VALUES ('tb', 1, 50, 0, 0, now())")
        .execute(pool)
        .await
        .expect("byte usage");
    let at_bytes = try_put(pool, "tb", "ns", "new", json!(1), None, base).await;
    assert_eq!(
        at_bytes.as_ref().err().and_then(sqlstate).as_deref(),
        Some("54000"),
        "{at_bytes:?}"
    );
    sqlx::query("UPDATE queen.kv_usage SET kv_bytes = 49 WHERE tenant_id = 'tb'")
        .execute(pool)
        .await
        .expect("under");
    put(pool, "tb", "ns", "new", json!(1), None, base).await;
}

// ---------------------------------------------------------------------------------------------
// Usage rollup
// ---------------------------------------------------------------------------------------------

/// Schedules timers for `tenant` on queue `q` with raw payloads; returns their message ids.
async fn schedule_raw(
    pool: &PgPool,
    tenant: &str,
    timers: &[(&str, &str, i64)],
    now: DateTime<Utc>,
) -> Vec<Uuid> {
    let ops: Vec<Value> = timers
        .iter()
        .map(|(key, base64, delay)| {
            json!({"op": "schedule", "queue": "q", "timerKey": key, "delayMs": delay, "payloadBase64": base64})
        })
        .collect();
    let results = apply(pool, tenant, Value::Array(ops), now)
        .await
        .expect("schedule");
    results
        .as_array()
        .expect("results")
        .iter()
        .map(|r| {
            assert_eq!(r["status"], json!("scheduled"), "{r}");
            r["messageId"].as_str().expect("id").parse().expect("uuid")
        })
        .collect()
}

#[tokio::test]
async fn the_rollup_writes_live_kv_and_timer_rows_and_bytes_per_tenant() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    put(pool, "ua", "ns", "a", json!({"x": 1}), None, base).await;
    put(
        pool,
        "ua",
        "ns",
        "bb",
        json!("hello"),
        Some(3_600_000),
        base,
    )
    .await;
    put(
        pool,
        "ua",
        "ns2",
        "c",
        json!([1, 2, 3]),
        Some(3_600_000),
        base,
    )
    .await;
    // 4 and 2 raw bytes.
    schedule_raw(
        pool,
        "ua",
        &[("t1", "AAECAw==", 60_000), ("t22", "AAE=", 60_000)],
        base,
    )
    .await;
    put(pool, "ub", "ns", "only", json!("x"), None, base).await;
    schedule_raw(pool, "uc", &[("t", "AA==", 60_000)], base).await;

    let now = base + ms(1000);
    let step = usage_step(pool, None, now, 100).await;
    assert_eq!(
        step,
        json!({"tenants": 3, "zeroed": 0, "done": true, "lastTenant": "uc"})
    );

    let ua = usage(pool, "ua").await.expect("ua");
    assert_eq!((ua.kv_rows, ua.timer_rows), (3, 2));
    assert_eq!(ua.kv_bytes, live_kv_bytes_by_formula(pool, "ua", now).await);
    assert!(
        ua.kv_bytes > (2 + 1) + (2 + 2) + (3 + 1),
        "the values count too: {ua:?}"
    );
    assert_eq!(
        ua.timer_bytes,
        (1 + 2 + 4) + (1 + 3 + 2),
        "queue + key + payload"
    );
    assert_eq!(ua.measured_at, now);

    let ub = usage(pool, "ub").await.expect("ub");
    assert_eq!((ub.kv_rows, ub.timer_rows, ub.timer_bytes), (1, 0, 0));
    assert_eq!(ub.kv_bytes, live_kv_bytes_by_formula(pool, "ub", now).await);
    assert!(ub.kv_bytes > 2 + 4, "{ub:?}");

    let uc = usage(pool, "uc").await.expect("uc");
    assert_eq!(
        (uc.kv_rows, uc.kv_bytes, uc.timer_rows, uc.timer_bytes),
        (0, 0, 1, 1 + 1 + 1)
    );

    // A bigger value is more bytes.
    put(pool, "ub", "ns", "only", json!("x".repeat(100)), None, now).await;
    usage_step(pool, None, now, 100).await;
    let grown = usage(pool, "ub").await.expect("ub");
    assert_eq!(
        grown.kv_bytes,
        live_kv_bytes_by_formula(pool, "ub", now).await
    );
    assert!(grown.kv_bytes >= ub.kv_bytes + 99, "{grown:?} vs {ub:?}");
}

#[tokio::test]
async fn the_rollup_does_not_count_expired_kv_rows() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    put(pool, "t", "ns", "forever", json!(1), None, base).await;
    put(pool, "t", "ns", "short", json!(2), Some(1000), base).await;

    usage_step(pool, None, base + ms(999), 10).await;
    let before = usage(pool, "t").await.expect("usage");
    assert_eq!(before.kv_rows, 2, "1 ms before the expiry both are live");

    // At the expiry instant, as for readers: dead, though still present (not pruned).
    usage_step(pool, None, base + ms(1000), 10).await;
    let at = usage(pool, "t").await.expect("usage");
    assert!(row_present(pool, "t", "ns", "short").await);
    assert_eq!(at.kv_rows, 1);
    assert_eq!(
        at.kv_bytes,
        live_kv_bytes_by_formula(pool, "t", base + ms(1000)).await
    );
    assert!(
        at.kv_bytes < before.kv_bytes && at.kv_bytes > 0,
        "{at:?} vs {before:?}"
    );
}

#[tokio::test]
async fn a_tenant_whose_rows_all_expired_or_fired_is_written_as_zero_on_the_next_rollup() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    // za: a TTL row and a timer; both will be gone from the tables.
    put(pool, "za", "ns", "k", json!(1), Some(1000), base).await;
    let timer_ids = schedule_raw(pool, "za", &[("t", "AQID", 1000)], base).await;
    // zb: only TTL rows, expiring later than za's, which will be expired but not pruned.
    put(pool, "zb", "ns", "k1", json!(1), Some(1500), base).await;
    put(pool, "zb", "ns", "k2", json!(2), Some(1500), base).await;
    // zc: keeps a live row, as a control.
    put(pool, "zc", "ns", "k", json!(1), None, base).await;

    usage_step(pool, None, base, 10).await;
    let za = usage(pool, "za").await.expect("za");
    assert_eq!((za.kv_rows, za.timer_rows), (1, 1));
    assert_eq!(usage(pool, "zb").await.expect("zb").kv_rows, 2);

    // Prune while only za's row is expired; fire za's timer.
    let prune = expire_step(pool, base + ms(1200), 100, 10_000).await;
    assert_eq!(prune["deleted"], json!(1), "{prune}");
    let later = base + ms(2000);
    let mut conn = db.connection().await;
    let claimed = claim(&mut conn, all_shards(), later, 30_000, 10)
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1);
    let outcomes = fire(&mut conn, &claimed, later).await.expect("fire");
    assert_eq!(outcomes[0].result, "fired");
    let fired: i64 =
        sqlx::query_scalar("SELECT count(*) FROM queen.log_messages WHERE message_id = $1")
            .bind(timer_ids[0])
            .fetch_one(pool)
            .await
            .expect("fired");
    assert_eq!(fired, 1);
    let za_rows: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM queen.kv WHERE tenant_id = 'za') \
              + (SELECT count(*) FROM queen.log_timers WHERE tenant_id = 'za')",
    )
    .fetch_one(pool)
    .await
    .expect("za rows");
    assert_eq!(za_rows, 0, "za has no row left anywhere");
    assert!(
        row_present(pool, "zb", "ns", "k1").await,
        "zb's rows are expired, not pruned"
    );

    let step = usage_step(pool, None, later, 10).await;
    assert_eq!(
        step["zeroed"],
        json!(1),
        "za has no row left anywhere: {step}"
    );
    assert_eq!(step["tenants"], json!(2), "zb (dead rows) and zc: {step}");
    for tenant in ["za", "zb"] {
        let u = usage(pool, tenant).await.expect("usage");
        assert_eq!(
            (u.kv_rows, u.kv_bytes, u.timer_rows, u.timer_bytes),
            (0, 0, 0, 0),
            "{tenant}"
        );
        assert_eq!(u.measured_at, later, "{tenant} was measured again");
    }
    assert_eq!(usage(pool, "zc").await.expect("zc").kv_rows, 1);
}

#[tokio::test]
async fn paged_rollups_cover_every_tenant_and_the_last_page_reports_done() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    put(pool, "pa", "ns", "k", json!(1), None, base).await;
    schedule_raw(pool, "pb", &[("t", "AA==", 60_000)], base).await;
    put(pool, "pc", "ns", "k", json!(1), None, base).await;
    schedule_raw(pool, "pc", &[("t", "AA==", 60_000)], base).await;
    put(pool, "pd", "ns", "k", json!(1), None, base).await;
    put(pool, "pd", "ns", "k2", json!(1), None, base).await;
    schedule_raw(
        pool,
        "pe",
        &[("t1", "AA==", 60_000), ("t2", "AA==", 60_000)],
        base,
    )
    .await;
    // Stale numbers of tenants that have no rows any more: before the first tenant, inside the
    // second page, after the last tenant.
    sqlx::query(
        "INSERT INTO queen.kv_usage VALUES ('p0', 5, 50, 1, 1, $1), ('pbb', 5, 50, 1, 1, $1), ('pz', 5, 50, 1, 1, $1)",
    )
    .bind(base)
    .execute(pool)
    .await
    .expect("stale usage");

    let now = base + ms(1000);
    let mut after: Option<String> = None;
    let mut pages = Vec::new();
    for _ in 0..10 {
        let step = usage_step(pool, after.as_deref(), now, 2).await;
        pages.push(step.clone());
        if step["done"] == json!(true) {
            break;
        }
        after = Some(step["lastTenant"].as_str().expect("lastTenant").to_owned());
    }
    assert_eq!(
        pages,
        vec![
            json!({"tenants": 2, "zeroed": 1, "done": false, "lastTenant": "pb"}),
            json!({"tenants": 2, "zeroed": 1, "done": false, "lastTenant": "pd"}),
            json!({"tenants": 1, "zeroed": 1, "done": true, "lastTenant": "pe"}),
        ]
    );
    let expected = [
        ("pa", 1, 0),
        ("pb", 0, 1),
        ("pc", 1, 1),
        ("pd", 2, 0),
        ("pe", 0, 2),
        ("p0", 0, 0),
        ("pbb", 0, 0),
        ("pz", 0, 0),
    ];
    for (tenant, kv_rows, timer_rows) in expected {
        let u = usage(pool, tenant).await.expect("every tenant has a row");
        assert_eq!((u.kv_rows, u.timer_rows), (kv_rows, timer_rows), "{tenant}");
        assert_eq!(u.measured_at, now, "{tenant} covered by the pages");
        if kv_rows == 0 {
            assert_eq!(u.kv_bytes, 0, "{tenant}");
        }
        if timer_rows == 0 {
            assert_eq!(u.timer_bytes, 0, "{tenant}");
        }
    }
}

#[tokio::test]
async fn a_rollup_page_that_exactly_fills_its_budget_is_followed_by_an_empty_done_page() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    put(pool, "xa", "ns", "k", json!(1), None, base).await;
    schedule_raw(pool, "xb", &[("t", "AA==", 60_000)], base).await;
    sqlx::query("INSERT INTO queen.kv_usage VALUES ('xz', 5, 50, 1, 1, $1)")
        .bind(base)
        .execute(pool)
        .await
        .expect("stale usage");

    let first = usage_step(pool, None, base, 2).await;
    assert_eq!(
        first,
        json!({"tenants": 2, "zeroed": 0, "done": false, "lastTenant": "xb"})
    );
    let second = usage_step(pool, Some("xb"), base, 2).await;
    assert_eq!(second, json!({"tenants": 0, "zeroed": 1, "done": true}));
    assert_eq!(usage(pool, "xz").await.expect("xz").kv_rows, 0);
}

/// Two rollups that see different tenants drained (the data changed between their snapshots)
/// must not lock kv_usage rows in crossed orders. The interleaving is forced: X holds d0's usage
/// row, A blocks on it after writing what it measured, the data changes, B starts and blocks too;
/// then X lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_rollups_with_crossed_views_of_drained_tenants_do_not_deadlock() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let base = server_now(pool).await;
    // Numbers an earlier rollup left, in tenant order.
    sqlx::query(
        "INSERT INTO queen.kv_usage VALUES ('d0', 1, 10, 0, 0, $1), ('d1', 1, 10, 0, 0, $1), ('d2', 1, 10, 0, 0, $1)",
    )
    .bind(base)
    .execute(pool)
    .await
    .expect("earlier usage");
    // A's view: only d2 has rows.
    put(pool, "d2", "ns", "k", json!(1), None, base).await;

    let mut x = db.connection().await;
    let mut x_tx = x.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM queen.kv_usage WHERE tenant_id = 'd0' FOR UPDATE")
        .execute(&mut *x_tx)
        .await
        .expect("hold d0");

    let mut a = db.connection().await;
    let a_pid = backend_pid(&mut a).await;
    let a_task = tokio::spawn(async move { try_usage_step(&mut a, None, base, 100).await });
    wait_until_blocked_on_a_lock(pool, a_pid).await;

    // B's view: d1 has rows, d2 drained.
    put(pool, "d1", "ns", "k", json!(1), None, base).await;
    assert!(delete(pool, "d2", "ns", "k", base).await);
    let mut b = db.connection().await;
    let b_pid = backend_pid(&mut b).await;
    let b_task = tokio::spawn(async move { try_usage_step(&mut b, None, base, 100).await });
    wait_until_blocked_on_a_lock(pool, b_pid).await;

    x_tx.commit().await.expect("release d0");
    let a_result = tokio::time::timeout(Duration::from_secs(30), a_task)
        .await
        .expect("A finished")
        .expect("A task");
    let b_result = tokio::time::timeout(Duration::from_secs(30), b_task)
        .await
        .expect("B finished")
        .expect("B task");
    for (name, result) in [("A", &a_result), ("B", &b_result)] {
        if let Err(error) = result {
            panic!(
                "rollup {name} failed with SQLSTATE {:?} (40P01 = deadlock): {error}",
                sqlstate(error)
            );
        }
    }
    // Both wrote; B measured last, on the newest data.
    let d1 = usage(pool, "d1").await.expect("d1");
    assert_eq!(
        (d1.kv_rows, usage(pool, "d2").await.expect("d2").kv_rows),
        (1, 0)
    );
    assert_eq!(usage(pool, "d0").await.expect("d0").kv_rows, 0);
}

// ---------------------------------------------------------------------------------------------
// The schedule seam under a schedule/cancel race on one key
// ---------------------------------------------------------------------------------------------

const RACE_ROUNDS: usize = 3000;
const RACE_FOR: Duration = Duration::from_secs(5);

/// A schedule that loses the insert race to a concurrent schedule treats the winner's row as
/// existing (sql/014). That row may be cancelled (or fired) again before the loser locks it; the
/// loser must then find the key free, not fail. Two schedulers and two cancellers hammer one key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schedules_racing_cancels_on_one_key_always_answer_with_a_status() {
    let db = TestDb::new().await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut racers = Vec::new();
    for racer in 0..4usize {
        let mut conn = db.connection().await;
        let stop = stop.clone();
        racers.push(tokio::spawn(async move {
            let op = if racer % 2 == 0 {
                json!([{"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 60_000, "payload": racer}])
            } else {
                json!([{"op": "cancel", "queue": "q", "timerKey": "k"}])
            };
            let mut statuses: HashMap<String, usize> = HashMap::new();
            for _ in 0..RACE_ROUNDS {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let results: Result<Value, sqlx::Error> =
                    sqlx::query_scalar("SELECT queen.log_timers_apply_v1('t', $1, now())")
                        .bind(op.clone())
                        .fetch_one(&mut conn)
                        .await;
                match results {
                    Ok(results) => {
                        let status = results[0]["status"].as_str().expect("status").to_owned();
                        *statuses.entry(status).or_default() += 1;
                    }
                    Err(error) => {
                        stop.store(true, Ordering::Relaxed);
                        return Err(format!(
                            "racer {racer}: SQLSTATE {:?}: {error}",
                            sqlstate(&error)
                        ));
                    }
                }
            }
            Ok(statuses)
        }));
    }
    let deadline = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RACE_FOR).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let mut all: HashMap<String, usize> = HashMap::new();
    for racer in racers {
        let statuses = tokio::time::timeout(Duration::from_secs(60), racer)
            .await
            .expect("racer finished")
            .expect("racer task")
            .unwrap_or_else(|e| panic!("an apply failed instead of answering: {e}"));
        for (status, n) in statuses {
            *all.entry(status).or_default() += n;
        }
    }
    deadline.abort();
    eprintln!("schedule/cancel race statuses: {all:?}");
    // Every row a schedule created was cancelled once, or is still there.
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM queen.log_timers")
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(
        all.get("scheduled").copied().unwrap_or(0),
        all.get("cancelled").copied().unwrap_or(0) + left as usize,
        "{all:?}, {left} left"
    );
    for status in ["scheduled", "rescheduled", "cancelled"] {
        assert!(
            all.get(status).copied().unwrap_or(0) > 0,
            "no {status}: {all:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Lock order: every actor against shared rows
// ---------------------------------------------------------------------------------------------

const BROKERS: usize = 8;
const STRESS_FOR: Duration = Duration::from_secs(10);
const MAX_ITERATIONS_PER_BROKER: usize = 20_000;
const TENANTS: [&str; 3] = ["ta", "tb", "tc"];
const QUEUES: [&str; 2] = ["q0", "q1"];
const PARTITIONS: [&str; 2] = ["p0", "p1"];
const TIMER_KEYS: usize = 6;
const KV_KEYS: usize = 4;
/// Leases are 30 s; a claim this far ahead steals rows others hold, so their fires go stale.
const STEAL_AHEAD_MS: f64 = 40_000.0;

/// xorshift64: a deterministic per-broker choice of operations (no RNG crate, no clock).
#[derive(Debug)]
struct Choice(u64);

impl Choice {
    fn below(&mut self, n: usize) -> usize {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (x % n as u64) as usize
    }

    fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[self.below(of.len())]
    }
}

#[derive(Debug, Clone)]
struct Pushed {
    message_id: Uuid,
    destination: Destination,
    offset: i64,
}

#[derive(Debug, Default)]
struct BrokerLog {
    errors: Vec<String>,
    scheduled: Vec<Uuid>,
    cancelled: Vec<Uuid>,
    fired: Vec<Claimed>,
    /// Timers taken (picked, appended and deleted in one statement), per destination.
    taken: HashMap<Destination, i64>,
    pushed: Vec<Pushed>,
    stale_segments: usize,
    operations: HashMap<&'static str, usize>,
    pruned: i64,
    iterations: usize,
}

impl BrokerLog {
    fn record(&mut self, broker: usize, operation: &'static str, result: Result<(), sqlx::Error>) {
        *self.operations.entry(operation).or_default() += 1;
        if let Err(error) = result {
            self.errors.push(format!(
                "broker {broker} {operation}: SQLSTATE {}: {error}",
                sqlstate(&error).unwrap_or_else(|| "-".into())
            ));
        }
    }
}

async fn stress_now(conn: &mut PgConnection, ahead_ms: f64) -> Result<DateTime<Utc>, sqlx::Error> {
    sqlx::query_scalar("SELECT now() + ($1::float8 * interval '1 millisecond')")
        .bind(ahead_ms)
        .fetch_one(conn)
        .await
}

fn random_apply_ops(choice: &mut Choice, serial: &str) -> (String, Value) {
    let tenant = choice.pick(&TENANTS).to_owned();
    let queue = choice.pick(&QUEUES);
    let first = choice.below(TIMER_KEYS);
    let count = 1 + choice.below(2);
    let mut ops = Vec::new();
    for i in 0..count {
        let key = format!("k{}", (first + i) % TIMER_KEYS);
        let delay = choice.below(500) as i64 - 200;
        let op = match choice.below(10) {
            0..=5 => json!({"op": "schedule", "queue": queue, "timerKey": key, "delayMs": delay,
                            "partition": choice.pick(&PARTITIONS), "txn": format!("{serial}-{i}"),
                            "payload": {"serial": serial}}),
            6..=7 => json!({"op": "reschedule", "queue": queue, "timerKey": key, "delayMs": delay,
                            "partition": choice.pick(&PARTITIONS)}),
            _ => json!({"op": "cancel", "queue": queue, "timerKey": key}),
        };
        ops.push(op);
    }
    (tenant, Value::Array(ops))
}

fn note_apply_results(log: &mut BrokerLog, results: &Value) {
    for r in results.as_array().expect("apply results") {
        let id = || -> Uuid {
            r["messageId"]
                .as_str()
                .expect("messageId")
                .parse()
                .expect("uuid")
        };
        match r["status"].as_str().expect("status") {
            "scheduled" => log.scheduled.push(id()),
            "cancelled" => log.cancelled.push(id()),
            "rescheduled" | "absent" | "too_late" => {}
            other => panic!("unknown apply status {other:?} in {r}"),
        }
    }
}

async fn push(
    conn: &mut PgConnection,
    destination: Destination,
    payloads: usize,
) -> Result<Vec<Pushed>, sqlx::Error> {
    let bodies: Vec<Vec<u8>> = (0..payloads).map(|i| vec![i as u8; 8]).collect();
    let rows: Vec<(Uuid, i64)> = sqlx::query_as(
        "SELECT message_id, log_offset FROM queen.log_push_v1($1, $2, $3, $4, NULL, now())",
    )
    .bind(&destination.0)
    .bind(&destination.1)
    .bind(&destination.2)
    .bind(bodies)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(message_id, offset)| Pushed {
            message_id,
            destination: destination.clone(),
            offset,
        })
        .collect())
}

fn random_destination(choice: &mut Choice) -> Destination {
    (
        choice.pick(&TENANTS).to_owned(),
        choice.pick(&QUEUES).to_owned(),
        choice.pick(&PARTITIONS).to_owned(),
    )
}

async fn claim_and_fire(
    conn: &mut PgConnection,
    broker: usize,
    choice: &mut Choice,
    log: &mut BrokerLog,
) -> Result<(), sqlx::Error> {
    let ahead = if choice.below(5) == 0 {
        STEAL_AHEAD_MS
    } else {
        0.0
    };
    let now = stress_now(conn, ahead).await?;
    let claimed = claim(conn, rotated_shards(broker * 8), now, 30_000, 20).await?;
    for outcome in fire(conn, &claimed, now).await? {
        if outcome.result == "fired" {
            log.fired.extend(outcome.rows);
        } else {
            log.stale_segments += 1;
        }
    }
    Ok(())
}

/// A take, as the shipped drain does it: pick, append and delete in one statement.
async fn take(
    conn: &mut PgConnection,
    broker: usize,
    choice: &mut Choice,
    log: &mut BrokerLog,
) -> Result<(), sqlx::Error> {
    let ahead = if choice.below(5) == 0 {
        STEAL_AHEAD_MS
    } else {
        0.0
    };
    let now = stress_now(conn, ahead).await?;
    let rows: Vec<(String, String, String, i32)> = sqlx::query_as(
        "SELECT tenant_id, queue, partition, timers \
         FROM queen.log_timers_take_v1($1, $2, 20, 20, 0, NULL, 1048576, 300)",
    )
    .bind(rotated_shards(broker * 8 + 4))
    .bind(now)
    .fetch_all(conn)
    .await?;
    for (tenant, queue, partition, timers) in rows {
        *log.taken.entry((tenant, queue, partition)).or_default() += i64::from(timers);
    }
    Ok(())
}

/// The transaction wire: one transaction that writes a KV row, schedules, and pushes, in the
/// schema's lock order (kv -> log_timers -> queues -> log_partitions).
async fn wire_transaction(
    conn: &mut PgConnection,
    choice: &mut Choice,
    serial: &str,
    log: &mut BrokerLog,
) -> Result<(), sqlx::Error> {
    let (tenant, ops) = random_apply_ops(choice, serial);
    let key = format!("k{}", choice.below(KV_KEYS));
    let ttl = (choice.below(2) == 0).then(|| 50 + choice.below(450) as i64);
    let destination = (
        tenant.clone(),
        choice.pick(&QUEUES).to_owned(),
        choice.pick(&PARTITIONS).to_owned(),
    );
    let mut tx = conn.begin().await?;
    sqlx::query("SELECT queen.kv_put_v1($1, 'ns', $2, $3, $4, now())")
        .bind(&tenant)
        .bind(&key)
        .bind(json!({"serial": serial}))
        .bind(ttl)
        .execute(&mut *tx)
        .await?;
    let results: Value = sqlx::query_scalar("SELECT queen.log_timers_apply_v1($1, $2, now())")
        .bind(&tenant)
        .bind(ops)
        .fetch_one(&mut *tx)
        .await?;
    let pushed = push(&mut tx, destination, 1).await?;
    tx.commit().await?;
    note_apply_results(log, &results);
    log.pushed.extend(pushed);
    Ok(())
}

async fn one_operation(
    conn: &mut PgConnection,
    broker: usize,
    iteration: usize,
    choice: &mut Choice,
    log: &mut BrokerLog,
) {
    let serial = format!("b{broker}-i{iteration}");
    let roll = choice.below(100);
    if roll < 12 {
        let result = claim_and_fire(conn, broker, choice, log).await;
        log.record(broker, "claim+fire", result);
    } else if roll < 25 {
        let result = take(conn, broker, choice, log).await;
        log.record(broker, "take", result);
    } else if roll < 40 {
        let (tenant, ops) = random_apply_ops(choice, &serial);
        let result: Result<Value, sqlx::Error> =
            sqlx::query_scalar("SELECT queen.log_timers_apply_v1($1, $2, now())")
                .bind(tenant)
                .bind(ops)
                .fetch_one(&mut *conn)
                .await;
        let result = result.map(|results| note_apply_results(log, &results));
        log.record(broker, "apply", result);
    } else if roll < 52 {
        let destination = random_destination(choice);
        let payloads = 1 + choice.below(3);
        let result = push(conn, destination, payloads)
            .await
            .map(|pushed| log.pushed.extend(pushed));
        log.record(broker, "push", result);
    } else if roll < 67 {
        let result = wire_transaction(conn, choice, &serial, log).await;
        log.record(broker, "wire", result);
    } else if roll < 77 {
        let tenant = choice.pick(&TENANTS);
        let key = format!("k{}", choice.below(KV_KEYS));
        let ttl = (choice.below(2) == 0).then(|| 50 + choice.below(450) as i64);
        let result = sqlx::query("SELECT queen.kv_put_v1($1, 'ns', $2, $3, $4, now())")
            .bind(tenant)
            .bind(key)
            .bind(json!({"serial": serial}))
            .bind(ttl)
            .execute(&mut *conn)
            .await
            .map(drop);
        log.record(broker, "kv put", result);
    } else if roll < 82 {
        let tenant = choice.pick(&TENANTS);
        let key = format!("k{}", choice.below(KV_KEYS));
        let result = sqlx::query("SELECT queen.kv_delete_v1($1, 'ns', $2, now())")
            .bind(tenant)
            .bind(key)
            .execute(&mut *conn)
            .await
            .map(drop);
        log.record(broker, "kv delete", result);
    } else if roll < 91 {
        // Time-travel a second ahead so the short TTLs really are expired.
        let result: Result<Value, sqlx::Error> = sqlx::query_scalar(
            "SELECT queen.kv_expire_step_v1($1, now() + interval '1 second', 50, 1000)",
        )
        .bind(rotated_shards(broker * 8))
        .fetch_one(&mut *conn)
        .await;
        let result = result.map(|pass| log.pruned += pass["deleted"].as_i64().expect("deleted"));
        log.record(broker, "prune", result);
    } else {
        let result = rollup_all(conn).await;
        log.record(broker, "rollup", result);
    }
}

/// One full rollup, paged two tenants at a time, as the sweeper walks it.
async fn rollup_all(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    let mut after: Option<String> = None;
    for _ in 0..TENANTS.len() + 2 {
        let step: Value = sqlx::query_scalar("SELECT queen.kv_usage_step_v1($1, now(), 2)")
            .bind(after.as_deref())
            .fetch_one(&mut *conn)
            .await?;
        if step["done"] == json!(true) {
            return Ok(());
        }
        after = step["lastTenant"].as_str().map(str::to_owned);
    }
    panic!("a rollup over {} tenants did not finish", TENANTS.len());
}

async fn broker(mut conn: PgConnection, broker: usize, stop: Arc<AtomicBool>) -> BrokerLog {
    let mut log = BrokerLog::default();
    // A wait longer than these is a hang, reported as an error rather than a stuck test.
    sqlx::query("SET lock_timeout = '20s'")
        .execute(&mut conn)
        .await
        .expect("lock_timeout");
    sqlx::query("SET statement_timeout = '30s'")
        .execute(&mut conn)
        .await
        .expect("statement_timeout");
    let mut choice =
        Choice(0x9E37_79B9_7F4A_7C15 ^ (broker as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    while !stop.load(Ordering::Relaxed) && log.iterations < MAX_ITERATIONS_PER_BROKER {
        one_operation(&mut conn, broker, log.iterations, &mut choice, &mut log).await;
        log.iterations += 1;
    }
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn eight_brokers_mixing_every_operation_on_shared_rows_never_deadlock_nor_lose_or_duplicate_a_message()
 {
    let db = TestDb::new().await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut brokers = Vec::with_capacity(BROKERS);
    for b in 0..BROKERS {
        let conn = db.connection().await;
        brokers.push(tokio::spawn(broker(conn, b, stop.clone())));
    }
    let deadline = {
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::time::sleep(STRESS_FOR).await;
            stop.store(true, Ordering::Relaxed);
        })
    };
    let logs = tokio::time::timeout(
        STRESS_FOR + Duration::from_secs(90),
        futures::future::join_all(brokers),
    )
    .await
    .expect("every broker stops within 90 s of the deadline");
    deadline.abort();

    let mut all = BrokerLog::default();
    for log in logs {
        let log = log.expect("broker task");
        all.errors.extend(log.errors);
        all.scheduled.extend(log.scheduled);
        all.cancelled.extend(log.cancelled);
        all.fired.extend(log.fired);
        for (destination, n) in log.taken {
            *all.taken.entry(destination).or_default() += n;
        }
        all.pushed.extend(log.pushed);
        all.stale_segments += log.stale_segments;
        all.pruned += log.pruned;
        all.iterations += log.iterations;
        for (operation, n) in log.operations {
            *all.operations.entry(operation).or_default() += n;
        }
    }
    eprintln!(
        "lock-order stress: {} iterations, operations {:?}, {} scheduled, {} cancelled, {} fired, \
         {} taken, {} stale segments, {} pushed, {} kv rows pruned, {} errors",
        all.iterations,
        all.operations,
        all.scheduled.len(),
        all.cancelled.len(),
        all.fired.len(),
        all.taken.values().sum::<i64>(),
        all.stale_segments,
        all.pushed.len(),
        all.pruned,
        all.errors.len()
    );

    let deadlocks: Vec<&String> = all
        .errors
        .iter()
        .filter(|e| e.contains("SQLSTATE 40P01"))
        .collect();
    assert!(deadlocks.is_empty(), "deadlocks: {deadlocks:#?}");
    assert!(all.errors.is_empty(), "errors: {:#?}", all.errors);

    // The workload really ran and really contended.
    assert!(!all.fired.is_empty(), "no timer fired");
    assert!(all.taken.values().sum::<i64>() > 0, "no timer taken");
    assert!(!all.pushed.is_empty(), "nothing pushed");
    assert!(all.pruned > 0, "nothing pruned");
    for operation in [
        "claim+fire",
        "take",
        "apply",
        "push",
        "wire",
        "kv put",
        "kv delete",
        "prune",
        "rollup",
    ] {
        assert!(
            all.operations.get(operation).copied().unwrap_or(0) > 10,
            "too few {operation}"
        );
    }

    check_the_log(&db.pool, &all).await;
}

/// Exactly once, from outside: every fired timer and every push is in the log once, at its
/// destination; every scheduled timer is in exactly one place; offsets are dense per partition.
async fn check_the_log(pool: &PgPool, all: &BrokerLog) {
    let duplicated: Vec<(Uuid, i64)> = sqlx::query_as(
        "SELECT message_id, count(*) FROM queen.log_messages GROUP BY message_id HAVING count(*) > 1",
    )
    .fetch_all(pool)
    .await
    .expect("duplicates");
    assert!(
        duplicated.is_empty(),
        "message ids in the log twice: {duplicated:?}"
    );

    let rows: Vec<(Uuid, String, String, String, String, i64)> = sqlx::query_as(
        "SELECT m.message_id, m.txn, q.tenant_id, q.name, p.name, m.\"offset\" \
         FROM queen.log_messages m JOIN queen.log_partitions p ON p.id = m.partition_id \
         JOIN queen.queues q ON q.id = p.queue_id",
    )
    .fetch_all(pool)
    .await
    .expect("log");
    let log: HashMap<Uuid, (String, Destination, i64)> = rows
        .into_iter()
        .map(|(id, txn, tenant, queue, partition, offset)| {
            (id, (txn, (tenant, queue, partition), offset))
        })
        .collect();

    let mut fired_ids = HashSet::new();
    for timer in &all.fired {
        assert!(fired_ids.insert(timer.message_id), "fired twice: {timer:?}");
        let (txn, destination, _) = log
            .get(&timer.message_id)
            .unwrap_or_else(|| panic!("reported fired but not in the log: {timer:?}"));
        assert_eq!(txn, &timer.txn, "{timer:?}");
        assert_eq!(
            destination,
            &(
                timer.tenant_id.clone(),
                timer.queue.clone(),
                timer.partition.clone()
            ),
            "{timer:?}"
        );
    }
    for pushed in &all.pushed {
        let (_, destination, offset) = log
            .get(&pushed.message_id)
            .unwrap_or_else(|| panic!("pushed but not in the log: {pushed:?}"));
        assert_eq!(
            (destination, *offset),
            (&pushed.destination, pushed.offset),
            "{pushed:?}"
        );
    }
    // What is left in the log are the taken timers: exactly as many per destination as the
    // takes reported, each once (message ids are unique above).
    let pushed_ids: HashSet<Uuid> = all.pushed.iter().map(|p| p.message_id).collect();
    let mut taken_in_log: HashMap<Destination, i64> = HashMap::new();
    for (id, (_, destination, _)) in &log {
        if !fired_ids.contains(id) && !pushed_ids.contains(id) {
            *taken_in_log.entry(destination.clone()).or_default() += 1;
            fired_ids.insert(*id);
        }
    }
    assert_eq!(
        taken_in_log, all.taken,
        "the log holds the taken timers the takes reported, per destination"
    );
    assert_eq!(
        log.len() as i64,
        (all.fired.len() + all.pushed.len()) as i64 + all.taken.values().sum::<i64>(),
        "the log holds exactly the fired and taken timers and the pushes"
    );

    let pending: HashSet<Uuid> = sqlx::query_scalar("SELECT message_id FROM queen.log_timers")
        .fetch_all(pool)
        .await
        .expect("pending")
        .into_iter()
        .collect();
    let cancelled: HashSet<Uuid> = all.cancelled.iter().copied().collect();
    assert_eq!(cancelled.len(), all.cancelled.len(), "cancelled twice");
    let scheduled: HashSet<Uuid> = all.scheduled.iter().copied().collect();
    assert_eq!(
        scheduled.len(),
        all.scheduled.len(),
        "one id scheduled twice"
    );
    for id in &scheduled {
        let places = [
            fired_ids.contains(id),
            pending.contains(id),
            cancelled.contains(id),
        ];
        assert_eq!(
            places.iter().filter(|p| **p).count(),
            1,
            "timer {id}: fired/pending/cancelled = {places:?}"
        );
    }
    assert!(
        fired_ids.is_subset(&scheduled)
            && cancelled.is_subset(&scheduled)
            && pending.is_subset(&scheduled),
        "every timer seen came from a schedule"
    );

    // id, the allocator's last offset, messages, lowest offset, highest offset.
    type PartitionOffsets = (i64, i64, i64, Option<i64>, Option<i64>);
    let partitions: Vec<PartitionOffsets> = sqlx::query_as(
        "SELECT p.id, queen.log_last_offset_v1(p.id), count(m.\"offset\"), min(m.\"offset\"), \
                max(m.\"offset\") \
         FROM queen.log_partitions p LEFT JOIN queen.log_messages m ON m.partition_id = p.id \
         GROUP BY p.id ORDER BY p.id",
    )
    .fetch_all(pool)
    .await
    .expect("partitions");
    assert!(!partitions.is_empty());
    for (id, last_offset, count, min, max) in partitions {
        // The primary key (partition_id, offset) makes offsets distinct; with min 0 and
        // max count - 1 they are exactly 0..N-1.
        assert_eq!(last_offset, count - 1, "partition {id}");
        if count > 0 {
            assert_eq!((min, max), (Some(0), Some(count - 1)), "partition {id}");
        }
    }
}
