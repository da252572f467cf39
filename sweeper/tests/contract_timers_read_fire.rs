//! Contracts of the sweeper's read and fire path against a real PostgreSQL: the PROBE
//! (`queen.log_timers_due_v1`), the CLAIM (`queen.log_timers_claim_v1`) and the FIRE
//! (`queen.log_timers_fire_v1`), as DESIGN.md §3–4 and the comments in `sql/011` and `sql/012`
//! state them.
//!
//! Time never passes in these tests: every call gets its `p_now` from the server, either as
//! `now() + offset` or as an exact instant read back from a row, so a lease "ends" by asking at a
//! later instant, not by sleeping.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use queen_testdb::TestDb;
use serde_json::{Value, json};
use sqlx::postgres::PgRow;
use sqlx::{Connection, PgConnection, PgExecutor, PgPool, Row};
use tokio::sync::Barrier;
use uuid::Uuid;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The instant a call passes as `p_now`.
#[derive(Debug, Clone, Copy)]
enum At {
    /// The statement's server `now()` plus this many milliseconds (negative goes back).
    NowPlusMs(i64),
    /// Exactly this instant (read back from a row, to sit on a boundary).
    Exactly(DateTime<Utc>),
}

impl At {
    const NOW: At = At::NowPlusMs(0);

    /// Binds for `coalesce($a::timestamptz, now() + $b::float8 * interval '1 millisecond')`.
    fn binds(self) -> (Option<DateTime<Utc>>, f64) {
        match self {
            At::NowPlusMs(ms) => (None, ms as f64),
            At::Exactly(instant) => (Some(instant), 0.0),
        }
    }
}

/// The probe's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Probe {
    next_in_ms: Option<i64>,
    due: i64,
    due_capped: bool,
    late_ms: i64,
}

/// One row of a claim.
#[derive(Debug, Clone)]
struct Claimed {
    tenant: String,
    queue: String,
    key: String,
    partition: String,
    deliver_at: DateTime<Utc>,
    visible_at: DateTime<Utc>,
    txn: String,
    message_id: Uuid,
    payload: Vec<u8>,
    token: Uuid,
    late_ms: i64,
}

impl Claimed {
    fn from_row(row: &PgRow) -> Claimed {
        Claimed {
            tenant: row.get("tenant_id"),
            queue: row.get("queue"),
            key: row.get("timer_key"),
            partition: row.get("partition"),
            deliver_at: row.get("deliver_at"),
            visible_at: row.get("visible_at"),
            txn: row.get("txn"),
            message_id: row.get("message_id"),
            payload: row.get("payload"),
            token: row.get("claim_token"),
            late_ms: row.get("late_ms"),
        }
    }
}

/// A fire segment: the claimed rows of one destination (tenant, queue, partition).
#[derive(Debug, Clone)]
struct Segment {
    tenant: String,
    queue: String,
    partition: String,
    rows: Vec<(String, Uuid)>,
}

/// One line of the fire's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fired {
    segment: i32,
    result: String,
    timers: i32,
    first_offset: Option<i64>,
}

/// Groups claimed rows into one segment per destination, in claim order.
fn segments_of(claimed: &[Claimed]) -> Vec<Segment> {
    let mut segments: Vec<Segment> = Vec::new();
    for row in claimed {
        let existing = segments.iter_mut().find(|s| {
            s.tenant == row.tenant && s.queue == row.queue && s.partition == row.partition
        });
        match existing {
            Some(segment) => segment.rows.push((row.key.clone(), row.token)),
            None => segments.push(Segment {
                tenant: row.tenant.clone(),
                queue: row.queue.clone(),
                partition: row.partition.clone(),
                rows: vec![(row.key.clone(), row.token)],
            }),
        }
    }
    segments
}

/// Schedules through the seam (`log_timers_apply_v1`) at the server's `now()`; panics unless
/// every op reports `scheduled`.
async fn schedule(exec: impl PgExecutor<'_>, tenant: &str, ops: Value) {
    let results: Value = sqlx::query_scalar("SELECT queen.log_timers_apply_v1($1, $2, now())")
        .bind(tenant)
        .bind(&ops)
        .fetch_one(exec)
        .await
        .expect("log_timers_apply_v1");
    let statuses: Vec<&str> = results
        .as_array()
        .expect("apply returns an array")
        .iter()
        .map(|r| r["status"].as_str().unwrap_or("?"))
        .collect();
    assert!(
        statuses.iter().all(|s| *s == "scheduled"),
        "schedule {ops} answered {results}"
    );
}

/// One `schedule` op.
fn op(queue: &str, key: &str, partition: &str, delay_ms: i64, payload: &Value) -> Value {
    json!({"op": "schedule", "queue": queue, "timerKey": key, "partition": partition,
           "delayMs": delay_ms, "payload": payload})
}

/// Inserts a timer directly, due `in_ms` after the statement's `now()`; returns its exact
/// `deliver_at`.
async fn insert_timer(pool: &PgPool, tenant: &str, key: &str, in_ms: i64) -> DateTime<Utc> {
    sqlx::query_scalar(
        "INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn, \
                                       message_id, payload, created_at) \
         VALUES ($1, 'q', $2, 'p', now() + $3::float8 * interval '1 millisecond', 'txn-' || $2, \
                 gen_random_uuid(), convert_to($2, 'UTF8'), now()) \
         RETURNING deliver_at",
    )
    .bind(tenant)
    .bind(key)
    .bind(in_ms as f64)
    .fetch_one(pool)
    .await
    .expect("insert timer")
}

/// PROBE over all 64 shards.
async fn probe(exec: impl PgExecutor<'_>, at: At, cap: i32) -> Probe {
    let (exact, offset) = at.binds();
    let answer: Value = sqlx::query_scalar(
        "SELECT queen.log_timers_due_v1(ARRAY(SELECT generate_series(0, 63)), \
             coalesce($1::timestamptz, now() + $2::float8 * interval '1 millisecond'), $3)",
    )
    .bind(exact)
    .bind(offset)
    .bind(cap)
    .fetch_one(exec)
    .await
    .expect("log_timers_due_v1");
    let int = |field: &str| {
        answer[field]
            .as_i64()
            .unwrap_or_else(|| panic!("{field} in {answer}"))
    };
    Probe {
        next_in_ms: answer["nextInMs"].as_i64(),
        due: int("due"),
        due_capped: answer["dueCapped"]
            .as_bool()
            .unwrap_or_else(|| panic!("dueCapped in {answer}")),
        late_ms: int("lateMs"),
    }
}

/// CLAIM over all 64 shards (`shards = None`) or the given ones; per-tenant cap = `max_rows`.
async fn claim_shards(
    exec: impl PgExecutor<'_>,
    shards: Option<Vec<i32>>,
    at: At,
    lease_ms: i32,
    max_rows: i32,
) -> Result<Vec<Claimed>, sqlx::Error> {
    let (exact, offset) = at.binds();
    let rows = sqlx::query(
        "SELECT * FROM queen.log_timers_claim_v1( \
             coalesce($1::int4[], ARRAY(SELECT generate_series(0, 63))), \
             coalesce($2::timestamptz, now() + $3::float8 * interval '1 millisecond'), $4, $5, $5)",
    )
    .bind(shards)
    .bind(exact)
    .bind(offset)
    .bind(lease_ms)
    .bind(max_rows)
    .fetch_all(exec)
    .await?;
    Ok(rows.iter().map(Claimed::from_row).collect())
}

/// CLAIM over all 64 shards.
async fn claim(exec: impl PgExecutor<'_>, at: At, lease_ms: i32, max_rows: i32) -> Vec<Claimed> {
    claim_shards(exec, None, at, lease_ms, max_rows)
        .await
        .expect("log_timers_claim_v1")
}

/// FIRE the given segments.
async fn fire(
    exec: impl PgExecutor<'_>,
    segments: &[Segment],
    at: At,
) -> Result<Vec<Fired>, sqlx::Error> {
    let tenants: Vec<String> = segments.iter().map(|s| s.tenant.clone()).collect();
    let queues: Vec<String> = segments.iter().map(|s| s.queue.clone()).collect();
    let partitions: Vec<String> = segments.iter().map(|s| s.partition.clone()).collect();
    let sizes: Vec<i32> = segments
        .iter()
        .map(|s| i32::try_from(s.rows.len()).expect("segment size"))
        .collect();
    let keys: Vec<String> = segments
        .iter()
        .flat_map(|s| s.rows.iter().map(|(k, _)| k.clone()))
        .collect();
    let tokens: Vec<Uuid> = segments
        .iter()
        .flat_map(|s| s.rows.iter().map(|(_, t)| *t))
        .collect();
    fire_raw(exec, tenants, queues, partitions, sizes, keys, tokens, at).await
}

/// FIRE with arrays exactly as given (to send malformed calls).
#[allow(clippy::too_many_arguments)]
async fn fire_raw(
    exec: impl PgExecutor<'_>,
    tenants: Vec<String>,
    queues: Vec<String>,
    partitions: Vec<String>,
    sizes: Vec<i32>,
    keys: Vec<String>,
    tokens: Vec<Uuid>,
    at: At,
) -> Result<Vec<Fired>, sqlx::Error> {
    let (exact, offset) = at.binds();
    let rows: Vec<(i32, String, i32, Option<i64>)> = sqlx::query_as(
        "SELECT segment, result, timers, first_offset FROM queen.log_timers_fire_v1( \
             $1, $2, $3, $4, $5, $6, \
             coalesce($7::timestamptz, now() + $8::float8 * interval '1 millisecond')) \
         ORDER BY segment",
    )
    .bind(tenants)
    .bind(queues)
    .bind(partitions)
    .bind(sizes)
    .bind(keys)
    .bind(tokens)
    .bind(exact)
    .bind(offset)
    .fetch_all(exec)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(segment, result, timers, first_offset)| Fired {
            segment,
            result,
            timers,
            first_offset,
        })
        .collect())
}

/// The SQLSTATE of a database error (panics on any other outcome).
fn sqlstate<T: std::fmt::Debug>(outcome: Result<T, sqlx::Error>) -> String {
    match outcome {
        Ok(value) => panic!("expected a database error, got {value:?}"),
        Err(error) => error
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned())
            .unwrap_or_else(|| panic!("not a database error with a SQLSTATE: {error}")),
    }
}

/// One message of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Message {
    offset: i64,
    message_id: Uuid,
    txn: String,
    payload: Vec<u8>,
}

/// The messages of (tenant, queue, partition), in offset order.
async fn messages(pool: &PgPool, tenant: &str, queue: &str, partition: &str) -> Vec<Message> {
    let rows: Vec<(i64, Uuid, String, Vec<u8>)> = sqlx::query_as(
        "SELECT m.\"offset\", m.message_id, m.txn, m.payload \
         FROM queen.log_messages m \
         JOIN queen.log_partitions p ON p.id = m.partition_id \
         JOIN queen.queues q ON q.id = p.queue_id \
         WHERE q.tenant_id = $1 AND q.name = $2 AND p.name = $3 \
         ORDER BY m.\"offset\"",
    )
    .bind(tenant)
    .bind(queue)
    .bind(partition)
    .fetch_all(pool)
    .await
    .expect("read the log");
    rows.into_iter()
        .map(|(offset, message_id, txn, payload)| Message {
            offset,
            message_id,
            txn,
            payload,
        })
        .collect()
}

async fn count(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// (claim_token, claimed_until) of every timer of the tenant, by key.
async fn claims_of(
    pool: &PgPool,
    tenant: &str,
) -> BTreeMap<String, (Option<Uuid>, Option<DateTime<Utc>>)> {
    let rows: Vec<(String, Option<Uuid>, Option<DateTime<Utc>>)> = sqlx::query_as(
        "SELECT timer_key, claim_token, claimed_until FROM queen.log_timers WHERE tenant_id = $1",
    )
    .bind(tenant)
    .fetch_all(pool)
    .await
    .expect("read timer claims");
    rows.into_iter()
        .map(|(key, token, until)| (key, (token, until)))
        .collect()
}

/// `n` keys `prefix<i>` that all hash to one shard; returns the shard too.
async fn keys_in_one_shard(pool: &PgPool, prefix: &str, n: i64) -> (i32, Vec<String>) {
    let rows: Vec<(String, i32)> = sqlx::query_as(
        "WITH k AS (SELECT i, $1::text || i AS key, \
                           (hashtextextended($1::text || i, 0) & 63)::int AS shard \
                    FROM generate_series(1, 5000) AS i) \
         SELECT key, shard FROM k WHERE shard = (SELECT shard FROM k WHERE i = 1) \
         ORDER BY i LIMIT $2",
    )
    .bind(prefix)
    .bind(n)
    .fetch_all(pool)
    .await
    .expect("keys in one shard");
    assert_eq!(rows.len() as i64, n, "found {n} keys in one shard");
    (rows[0].1, rows.into_iter().map(|(k, _)| k).collect())
}

/// `n` keys `prefix<i>`, each in a shard of its own; returns (key, shard) pairs.
async fn keys_in_distinct_shards(pool: &PgPool, prefix: &str, n: i64) -> Vec<(String, i32)> {
    let rows: Vec<(String, i32)> = sqlx::query_as(
        "SELECT key, shard FROM ( \
             SELECT DISTINCT ON (shard) i, key, shard FROM ( \
                 SELECT i, $1::text || i AS key, (hashtextextended($1::text || i, 0) & 63)::int AS shard \
                 FROM generate_series(1, 5000) AS i) k \
             ORDER BY shard, i) d \
         ORDER BY i LIMIT $2",
    )
    .bind(prefix)
    .bind(n)
    .fetch_all(pool)
    .await
    .expect("keys in distinct shards");
    assert_eq!(rows.len() as i64, n, "found {n} keys in distinct shards");
    rows
}

fn keys(rows: &[Claimed]) -> Vec<String> {
    rows.iter().map(|r| r.key.clone()).collect()
}

// ---------------------------------------------------------------------------------------------
// PROBE
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn probe_of_an_empty_table_has_no_next_and_nothing_due() {
    let db = TestDb::new().await;
    let answer = probe(&db.pool, At::NOW, 100).await;
    assert_eq!(
        answer,
        Probe {
            next_in_ms: None,
            due: 0,
            due_capped: false,
            late_ms: 0
        }
    );
}

#[tokio::test]
async fn probe_counts_down_to_a_timer_and_reports_its_lateness_once_due() {
    let db = TestDb::new().await;
    schedule(
        &db.pool,
        "tenant",
        json!([op("q", "k", "p", 5000, &json!("five seconds"))]),
    )
    .await;

    // The probe's now() is a few ms after the schedule's: nextInMs is 5000 less that gap.
    let ahead = probe(&db.pool, At::NOW, 100).await;
    let next = ahead.next_in_ms.expect("a timer is waiting");
    assert!((4750..=5000).contains(&next), "nextInMs {next} ≈ 5000");
    assert_eq!((ahead.due, ahead.due_capped, ahead.late_ms), (0, false, 0));

    let due = probe(&db.pool, At::NowPlusMs(5100), 100).await;
    assert_eq!(due.next_in_ms, Some(0), "something is due: nextInMs is 0");
    assert_eq!((due.due, due.due_capped), (1, false));
    assert!(
        (100..350).contains(&due.late_ms),
        "lateMs {} ≈ 100",
        due.late_ms
    );
}

#[tokio::test]
async fn probe_answers_exactly_when_schedule_and_probe_share_one_now() {
    // Inside one transaction now() does not move, so the answers are exact.
    let db = TestDb::new().await;
    let mut conn = db.connection().await;
    let mut tx = conn.begin().await.expect("begin");
    schedule(
        &mut *tx,
        "tenant",
        json!([op("q", "k", "p", 5000, &json!(1))]),
    )
    .await;
    assert_eq!(
        probe(&mut *tx, At::NOW, 10).await,
        Probe {
            next_in_ms: Some(5000),
            due: 0,
            due_capped: false,
            late_ms: 0
        }
    );
    assert_eq!(
        probe(&mut *tx, At::NowPlusMs(5100), 10).await,
        Probe {
            next_in_ms: Some(0),
            due: 1,
            due_capped: false,
            late_ms: 100
        }
    );
    tx.rollback().await.expect("rollback");
}

#[tokio::test]
async fn probe_due_count_stops_at_the_cap_and_says_so() {
    let db = TestDb::new().await;
    let ops: Vec<Value> = (1..=5)
        .map(|i| op("q", &format!("k{i}"), "p", -1000 * i, &json!(i)))
        .collect();
    schedule(&db.pool, "tenant", Value::Array(ops)).await;
    // A sixth timer, not due yet, must not be counted.
    schedule(
        &db.pool,
        "tenant",
        json!([op("q", "later", "p", 60_000, &json!(6))]),
    )
    .await;

    let capped = probe(&db.pool, At::NOW, 3).await;
    assert_eq!((capped.due, capped.due_capped), (3, true));
    let at_cap_minus_one = probe(&db.pool, At::NOW, 4).await;
    assert_eq!(
        (at_cap_minus_one.due, at_cap_minus_one.due_capped),
        (4, true)
    );
    let exact = probe(&db.pool, At::NOW, 5).await;
    assert_eq!((exact.due, exact.due_capped), (5, false));
    let roomy = probe(&db.pool, At::NOW, 100).await;
    assert_eq!((roomy.due, roomy.due_capped), (5, false));
    assert!(
        (5000..5500).contains(&roomy.late_ms),
        "lateMs {} comes from the oldest due timer (5 s late)",
        roomy.late_ms
    );
}

// ---------------------------------------------------------------------------------------------
// CLAIM
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn nothing_is_claimable_one_ms_before_deliver_at() {
    let db = TestDb::new().await;
    let deliver_at = insert_timer(&db.pool, "tenant", "k", 600_000).await;
    let before = At::Exactly(deliver_at - TimeDelta::milliseconds(1));

    let seen = probe(&db.pool, before, 10).await;
    assert_eq!(
        (seen.next_in_ms, seen.due),
        (Some(1), 0),
        "the probe agrees: 1 ms to go"
    );
    let taken = claim(&db.pool, before, 30_000, 10).await;
    assert!(taken.is_empty(), "claimed early: {taken:?}");
    assert_eq!(
        claims_of(&db.pool, "tenant").await["k"],
        (None, None),
        "an empty claim leaves the row untouched"
    );
}

#[tokio::test]
async fn a_timer_is_claimable_one_ms_after_deliver_at() {
    let db = TestDb::new().await;
    let deliver_at = insert_timer(&db.pool, "tenant", "k", 600_000).await;
    let after = deliver_at + TimeDelta::milliseconds(1);

    let taken = claim(&db.pool, At::Exactly(after), 30_000, 10).await;
    assert_eq!(keys(&taken), ["k"]);
    assert_eq!(taken[0].deliver_at, deliver_at);
    assert_eq!(
        taken[0].visible_at, deliver_at,
        "visible_at is the pre-claim one"
    );
    assert_eq!(taken[0].late_ms, 1);
    assert_eq!(
        claims_of(&db.pool, "tenant").await["k"],
        (
            Some(taken[0].token),
            Some(after + TimeDelta::milliseconds(30_000))
        ),
        "the row carries the claim's token and a lease of now + lease_ms"
    );
}

#[tokio::test]
async fn a_claim_returns_rows_in_visible_at_order_with_a_distinct_fresh_token_each() {
    let db = TestDb::new().await;
    // Deliveries deliberately out of key order, written directly (a schedule into the past is
    // visible from its own now, so schedules would all tie); one row is not due.
    let delays = [
        ("a", -3000),
        ("b", -9000),
        ("c", -1000),
        ("d", -7000),
        ("e", -5000),
        ("future", 60_000),
    ];
    for (key, delay) in delays {
        insert_timer(&db.pool, "tenant", key, delay).await;
    }

    let taken = claim(&db.pool, At::NOW, 30_000, 100).await;
    assert_eq!(
        keys(&taken),
        ["b", "d", "e", "a", "c"],
        "oldest visible_at first"
    );
    assert!(
        taken.windows(2).all(|w| w[0].visible_at < w[1].visible_at),
        "visible_at strictly ascending: {taken:?}"
    );
    let tokens: BTreeSet<Uuid> = taken.iter().map(|r| r.token).collect();
    assert_eq!(tokens.len(), taken.len(), "one distinct token per row");
    assert!(tokens.iter().all(|t| !t.is_nil()));

    let stored = claims_of(&db.pool, "tenant").await;
    for row in &taken {
        assert_eq!(
            stored[&row.key].0,
            Some(row.token),
            "row {} holds its token",
            row.key
        );
        assert_eq!(row.payload, row.key.as_bytes());
    }
    assert_eq!(
        stored["future"],
        (None, None),
        "the waiting row is not claimed"
    );
    // Late by at least its delay.
    let late_b = taken[0].late_ms;
    assert!((9000..9500).contains(&late_b), "late_ms of b = {late_b}");
}

#[tokio::test]
async fn a_claim_takes_its_whole_budget_from_one_shard_without_counting_a_row_twice() {
    // All due rows in ONE shard: the claim's later rounds revisit that shard, and must take the
    // rows after the ones it already holds, not re-read (and re-count) its own locked rows.
    let db = TestDb::new().await;
    let (_, same_shard) = keys_in_one_shard(&db.pool, "s", 5).await;
    for (i, key) in same_shard.iter().enumerate() {
        insert_timer(&db.pool, "tenant", key, -1000 * (i as i64 + 1)).await;
    }

    let taken = claim(&db.pool, At::NOW, 30_000, 3).await;
    let distinct: BTreeSet<&str> = taken.iter().map(|r| r.key.as_str()).collect();
    assert_eq!(
        (taken.len(), distinct.len()),
        (3, 3),
        "max_rows 3 with 5 due rows claims 3 distinct rows: {:?}",
        keys(&taken)
    );
    // The three oldest (largest negative delay) of that shard.
    let mut expected: Vec<String> = same_shard[2..].to_vec();
    expected.reverse();
    assert_eq!(keys(&taken), expected);
    let left = probe(&db.pool, At::NOW, 100).await;
    assert_eq!(left.due, 2, "the other two stay due");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_open_transactions_claiming_at_once_get_disjoint_rows_and_neither_waits() {
    let db = TestDb::new().await;
    let ops: Vec<Value> = (1..=6)
        .map(|i| op("q", &format!("k{i}"), "p", -1000 * i, &json!(i)))
        .collect();
    schedule(&db.pool, "tenant", Value::Array(ops)).await;
    let all: BTreeSet<String> = (1..=6).map(|i| format!("k{i}")).collect();

    let mut conn_a = db.connection().await;
    let mut conn_b = db.connection().await;
    let mut tx_a = conn_a.begin().await.expect("begin A");
    let mut tx_b = conn_b.begin().await.expect("begin B");
    for tx in [&mut tx_a, &mut tx_b] {
        sqlx::query("SET LOCAL lock_timeout = '200ms'")
            .execute(&mut **tx)
            .await
            .expect("lock_timeout");
    }

    // A claims half and keeps its transaction (and its row locks) open.
    let a = tokio::time::timeout(
        Duration::from_secs(5),
        claim_shards(&mut *tx_a, None, At::NOW, 30_000, 3),
    )
    .await
    .expect("A did not return")
    .expect("A's claim");
    assert_eq!(a.len(), 3);

    // B claims everything it can while A is open: it must skip A's rows, not wait for them.
    let b = tokio::time::timeout(
        Duration::from_secs(5),
        claim_shards(&mut *tx_b, None, At::NOW, 30_000, 100),
    )
    .await
    .expect("B waited on A's locks")
    .expect("B's claim (an error here, e.g. 55P03, means it waited on a lock)");

    let a_keys: BTreeSet<String> = keys(&a).into_iter().collect();
    let b_keys: BTreeSet<String> = keys(&b).into_iter().collect();
    assert!(
        a_keys.is_disjoint(&b_keys),
        "overlap: A {a_keys:?}, B {b_keys:?}"
    );
    assert_eq!(
        a_keys.union(&b_keys).cloned().collect::<BTreeSet<_>>(),
        all,
        "together they took every due row"
    );
    assert_eq!(b.len(), 3, "B took exactly the rows A did not");

    // A again, with B still open: its own rows are no longer due, B's are locked: nothing, at once.
    let again = tokio::time::timeout(
        Duration::from_secs(5),
        claim_shards(&mut *tx_a, None, At::NOW, 30_000, 100),
    )
    .await
    .expect("A's second claim waited on B's locks")
    .expect("A's second claim");
    assert!(again.is_empty(), "A's second claim took {again:?}");

    tx_a.commit().await.expect("commit A");
    tx_b.commit().await.expect("commit B");
    let stored = claims_of(&db.pool, "tenant").await;
    for row in a.iter().chain(&b) {
        assert_eq!(stored[&row.key].0, Some(row.token), "row {}", row.key);
    }
}

#[tokio::test]
async fn a_claimed_row_leaves_the_due_count_until_its_lease_ends_then_is_reclaimed_with_a_new_token()
 {
    let db = TestDb::new().await;
    const LEASE_MS: i32 = 30_000;
    schedule(
        &db.pool,
        "tenant",
        json!([op("q", "k", "p", -1, &json!(1))]),
    )
    .await;
    assert_eq!(probe(&db.pool, At::NOW, 10).await.due, 1);

    let first = claim(&db.pool, At::NOW, LEASE_MS, 10).await;
    assert_eq!(keys(&first), ["k"]);

    let held = probe(&db.pool, At::NOW, 10).await;
    assert_eq!(held.due, 0, "a held row is not due");
    let next = held.next_in_ms.expect("the held row is still ahead");
    assert!(
        (29_500..=30_000).contains(&next),
        "nextInMs {next} points at the end of the lease"
    );
    assert_eq!(
        claim(&db.pool, At::NOW, LEASE_MS, 10).await.len(),
        0,
        "a held row is not claimable"
    );
    assert_eq!(
        claim(
            &db.pool,
            At::NowPlusMs(i64::from(LEASE_MS) - 1000),
            LEASE_MS,
            10
        )
        .await
        .len(),
        0,
        "nor one second before its lease ends"
    );

    let after_lease = At::NowPlusMs(i64::from(LEASE_MS) + 1);
    assert_eq!(
        probe(&db.pool, after_lease, 10).await.due,
        1,
        "due again after the lease"
    );
    let second = claim(&db.pool, after_lease, LEASE_MS, 10).await;
    assert_eq!(keys(&second), ["k"]);
    assert_ne!(
        second[0].token, first[0].token,
        "a reclaim replaces the token"
    );
    assert_eq!(
        claims_of(&db.pool, "tenant").await["k"].0,
        Some(second[0].token)
    );
}

// ---------------------------------------------------------------------------------------------
// FIRE
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn firing_a_live_token_writes_the_timer_message_once_and_removes_the_timer() {
    let db = TestDb::new().await;
    schedule(
        &db.pool,
        "tenant",
        json!([{"op": "schedule", "queue": "q", "timerKey": "k", "partition": "p",
                "delayMs": -1, "payload": {"n": 1}, "txn": "txn-1"}]),
    )
    .await;
    let taken = claim(&db.pool, At::NOW, 30_000, 10).await;
    assert_eq!(keys(&taken), ["k"]);
    let timer = &taken[0];

    let fired = fire(&db.pool, &segments_of(&taken), At::NOW)
        .await
        .expect("fire");
    assert_eq!(
        fired,
        [Fired {
            segment: 0,
            result: "fired".into(),
            timers: 1,
            first_offset: Some(0)
        }]
    );
    let log = messages(&db.pool, "tenant", "q", "p").await;
    assert_eq!(
        log,
        [Message {
            offset: 0,
            message_id: timer.message_id,
            txn: "txn-1".into(),
            payload: timer.payload.clone()
        }]
    );
    assert_eq!(timer.txn, "txn-1");
    assert_eq!(log[0].payload, br#"{"n": 1}"#, "the payload as scheduled");
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        0,
        "the timer row is gone"
    );

    // The same tokens again: the rows are gone, so the segment is stale and nothing is written.
    let again = fire(&db.pool, &segments_of(&taken), At::NOW)
        .await
        .expect("fire again");
    assert_eq!(
        again,
        [Fired {
            segment: 0,
            result: "stale".into(),
            timers: 1,
            first_offset: None
        }]
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_messages").await,
        1
    );
}

#[tokio::test]
async fn a_reclaimed_row_makes_its_segment_stale_releases_the_rest_and_a_healthy_segment_still_fires()
 {
    let db = TestDb::new().await;
    const LEASE_MS: i32 = 30_000;
    // a1, a2, a3 go to one destination; b1 to another. Every key sits in a shard of its own, so a
    // claim limited to a1's shard takes a1 alone.
    let ks = keys_in_distinct_shards(&db.pool, "x", 4).await;
    let (a1, a2, a3, b1) = (&ks[0].0, &ks[1].0, &ks[2].0, &ks[3].0);
    schedule(
        &db.pool,
        "tenant",
        json!([
            op("qa", a1, "pa", -4000, &json!("a1")),
            op("qa", a2, "pa", -3000, &json!("a2")),
            op("qa", a3, "pa", -2000, &json!("a3")),
            op("qb", b1, "pb", -1000, &json!("b1")),
        ]),
    )
    .await;

    // The first claimer takes all four.
    let first = claim(&db.pool, At::NOW, LEASE_MS, 10).await;
    assert_eq!(keys(&first), [a1.as_str(), a2, a3, b1]);
    let segments = segments_of(&first);
    assert_eq!(segments.len(), 2);
    assert_eq!(segments[0].rows.len(), 3);

    // A second claimer, after the first's lease ran out, re-claims a1 (and only a1).
    let second = claim_shards(
        &db.pool,
        Some(vec![ks[0].1]),
        At::NowPlusMs(i64::from(LEASE_MS) + 1),
        LEASE_MS,
        10,
    )
    .await
    .expect("second claim");
    assert_eq!(keys(&second), [a1.as_str()]);
    assert_ne!(second[0].token, first[0].token);

    // The first claimer fires with its old tokens.
    let fired = fire(&db.pool, &segments, At::NOW).await.expect("fire");
    assert_eq!(
        fired,
        [
            Fired {
                segment: 0,
                result: "stale".into(),
                timers: 3,
                first_offset: None
            },
            Fired {
                segment: 1,
                result: "fired".into(),
                timers: 1,
                first_offset: Some(0)
            },
        ]
    );
    assert!(
        messages(&db.pool, "tenant", "qa", "pa").await.is_empty(),
        "nothing of the stale segment"
    );
    let b_log = messages(&db.pool, "tenant", "qb", "pb").await;
    assert_eq!(b_log.len(), 1);
    assert_eq!(b_log[0].message_id, first[3].message_id);

    // a2 and a3 are released at once; a1 stays with the second claimer; b1 is gone.
    let stored = claims_of(&db.pool, "tenant").await;
    assert_eq!(stored.len(), 3, "b1 fired and left: {stored:?}");
    // Given back with no token, visible from the fire's now (not from their delivery, which a
    // head floor may already be past).
    for released in [&a2, &a3] {
        let (token, until) = stored[released.as_str()];
        assert_eq!(token, None, "{released} keeps no token");
        assert!(until.is_some(), "{released} is visible from the fire's now");
    }
    assert_eq!(stored[a1.as_str()].0, Some(second[0].token));

    // Released rows are claimable right now, not after the lease.
    let now = claim(&db.pool, At::NOW, LEASE_MS, 10).await;
    assert_eq!(keys(&now), [a2.as_str(), a3]);

    // And the second claimer's fire of a1 succeeds.
    let a1_fire = fire(&db.pool, &segments_of(&second), At::NOW)
        .await
        .expect("fire a1");
    assert_eq!(a1_fire[0].result, "fired");
}

#[tokio::test]
async fn two_segments_for_one_destination_in_one_call_are_refused_and_nothing_is_written() {
    let db = TestDb::new().await;
    schedule(
        &db.pool,
        "tenant",
        json!([
            op("q", "k1", "p", -2000, &json!(1)),
            op("q", "k2", "p", -1000, &json!(2))
        ]),
    )
    .await;
    let taken = claim(&db.pool, At::NOW, 30_000, 10).await;
    assert_eq!(taken.len(), 2);
    let before = claims_of(&db.pool, "tenant").await;

    let one = segments_of(&taken).remove(0);
    let split = vec![
        Segment {
            rows: vec![one.rows[0].clone()],
            ..one.clone()
        },
        Segment {
            rows: vec![one.rows[1].clone()],
            ..one.clone()
        },
    ];
    let outcome = fire(&db.pool, &split, At::NOW).await;
    assert_eq!(sqlstate(outcome), "22023");

    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_messages").await,
        0
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_partitions").await,
        0,
        "nothing provisioned"
    );
    assert_eq!(
        claims_of(&db.pool, "tenant").await,
        before,
        "tokens unchanged"
    );

    // The well-formed call with the same tokens still fires both.
    let fired = fire(&db.pool, &[one], At::NOW).await.expect("fire");
    assert_eq!((fired[0].result.as_str(), fired[0].timers), ("fired", 2));
}

#[tokio::test]
async fn misaligned_fire_arrays_are_refused_and_nothing_is_written() {
    let db = TestDb::new().await;
    schedule(
        &db.pool,
        "tenant",
        json!([
            op("q", "k1", "p", -2000, &json!(1)),
            op("q", "k2", "p", -1000, &json!(2))
        ]),
    )
    .await;
    let taken = claim(&db.pool, At::NOW, 30_000, 10).await;
    assert_eq!(taken.len(), 2);
    let before = claims_of(&db.pool, "tenant").await;
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let both_keys = s(&["k1", "k2"]);
    let both_tokens = vec![taken[0].token, taken[1].token];

    let malformed: Vec<(&str, Result<Vec<Fired>, sqlx::Error>)> = vec![
        (
            "one token for two keys",
            fire_raw(
                &db.pool,
                s(&["tenant"]),
                s(&["q"]),
                s(&["p"]),
                vec![2],
                both_keys.clone(),
                vec![taken[0].token],
                At::NOW,
            )
            .await,
        ),
        (
            "two queues for one segment",
            fire_raw(
                &db.pool,
                s(&["tenant"]),
                s(&["q", "q"]),
                s(&["p"]),
                vec![2],
                both_keys.clone(),
                both_tokens.clone(),
                At::NOW,
            )
            .await,
        ),
        (
            "sizes summing to fewer rows than given",
            fire_raw(
                &db.pool,
                s(&["tenant"]),
                s(&["q"]),
                s(&["p"]),
                vec![1],
                both_keys.clone(),
                both_tokens.clone(),
                At::NOW,
            )
            .await,
        ),
        (
            // Both positions would lock the same row (a transaction's own lock does not skip)
            // and append its message twice.
            "one timer twice in one segment",
            fire_raw(
                &db.pool,
                s(&["tenant"]),
                s(&["q"]),
                s(&["p"]),
                vec![2],
                s(&["k1", "k1"]),
                vec![taken[0].token, taken[0].token],
                At::NOW,
            )
            .await,
        ),
        (
            "two sizes for one segment",
            fire_raw(
                &db.pool,
                s(&["tenant"]),
                s(&["q"]),
                s(&["p"]),
                vec![1, 1],
                both_keys.clone(),
                both_tokens.clone(),
                At::NOW,
            )
            .await,
        ),
    ];
    for (what, outcome) in malformed {
        let state = match outcome {
            Ok(rows) => panic!("{what}: accepted, answered {rows:?}"),
            Err(e) => sqlstate::<()>(Err(e)),
        };
        assert_eq!(state, "22023", "{what}");
    }

    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_messages").await,
        0
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.queues").await,
        0
    );
    assert_eq!(claims_of(&db.pool, "tenant").await, before);
}

#[tokio::test]
async fn a_fire_provisions_a_missing_queue_and_partition() {
    let db = TestDb::new().await;
    schedule(
        &db.pool,
        "tenant",
        json!([
            op("fresh-q", "k1", "fresh-p", -2000, &json!(1)),
            op("fresh-q", "k2", "fresh-p", -1000, &json!(2))
        ]),
    )
    .await;
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.queues").await,
        0,
        "scheduling provisions nothing"
    );
    let taken = claim(&db.pool, At::NOW, 30_000, 10).await;
    let fired = fire(&db.pool, &segments_of(&taken), At::NOW)
        .await
        .expect("fire");
    assert_eq!(
        fired,
        [Fired {
            segment: 0,
            result: "fired".into(),
            timers: 2,
            first_offset: Some(0)
        }]
    );

    let provisioned: Vec<(String, String, String, i64)> = sqlx::query_as(
        "SELECT q.tenant_id, q.name, p.name, queen.log_last_offset_v1(p.id) \
         FROM queen.queues q JOIN queen.log_partitions p ON p.queue_id = q.id",
    )
    .fetch_all(&db.pool)
    .await
    .expect("read provisioning");
    assert_eq!(
        provisioned,
        [(
            "tenant".to_owned(),
            "fresh-q".to_owned(),
            "fresh-p".to_owned(),
            1
        )]
    );
    let log = messages(&db.pool, "tenant", "fresh-q", "fresh-p").await;
    assert_eq!(
        log.iter().map(|m| m.message_id).collect::<Vec<_>>(),
        taken.iter().map(|t| t.message_id).collect::<Vec<_>>(),
        "the segment's messages in claim order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_pushes_and_fires_on_one_partition_take_offsets_zero_to_n_minus_one_exactly_once()
 {
    const PUSHERS: usize = 3;
    const PUSHES_EACH: usize = 20;
    const FIRERS: usize = 3;
    const ROUNDS: usize = 8;
    const TIMERS_PER_ROUND: usize = 3;

    let db = TestDb::new().await;
    // Everyone starts at once (after the firers have scheduled their timers), so pushes and fires
    // really meet on the partition row; the partition does not exist yet, so they also race to
    // provision it.
    let start = Arc::new(Barrier::new(PUSHERS + FIRERS));
    let mut tasks = Vec::new();

    for pusher in 0..PUSHERS {
        let mut conn: PgConnection = db.connection().await;
        let start = Arc::clone(&start);
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let mut pushed = 0usize;
            for i in 0..PUSHES_EACH {
                let batch = 1 + (i + pusher) % 3;
                let payloads: Vec<Vec<u8>> = (0..batch)
                    .map(|j| format!("push-{pusher}-{i}-{j}").into_bytes())
                    .collect();
                let rows: Vec<(Uuid, i64)> = sqlx::query_as(
                    "SELECT * FROM queen.log_push_v1('tenant', 'q', 'p', $1, NULL, now())",
                )
                .bind(payloads)
                .fetch_all(&mut conn)
                .await
                .expect("push");
                assert_eq!(rows.len(), batch);
                pushed += batch;
            }
            (pushed, 0usize, 0usize)
        }));
    }

    for firer in 0..FIRERS {
        let mut conn: PgConnection = db.connection().await;
        let start = Arc::clone(&start);
        tasks.push(tokio::spawn(async move {
            let ops: Vec<Value> = (0..ROUNDS * TIMERS_PER_ROUND)
                .map(|j| op("q", &format!("t-{firer}-{j}"), "p", -1, &json!(j)))
                .collect();
            schedule(&mut conn, "tenant", Value::Array(ops)).await;
            start.wait().await;
            let (mut fired, mut stale) = (0usize, 0usize);
            for _ in 0..ROUNDS {
                let taken = claim(&mut conn, At::NOW, 30_000, TIMERS_PER_ROUND as i32).await;
                if taken.is_empty() {
                    continue;
                }
                for result in fire(&mut conn, &segments_of(&taken), At::NOW)
                    .await
                    .expect("fire")
                {
                    match result.result.as_str() {
                        "fired" => fired += usize::try_from(result.timers).unwrap(),
                        "stale" => stale += 1,
                        other => panic!("unknown fire result {other}"),
                    }
                }
            }
            (0usize, fired, stale)
        }));
    }

    let (mut pushed, mut fired, mut stale) = (0usize, 0usize, 0usize);
    for task in futures::future::join_all(tasks).await {
        let (p, f, s) = task.expect("task");
        pushed += p;
        fired += f;
        stale += s;
    }

    // Drain what is left (rows released by a stale segment, or skipped by every claim): past any
    // lease, bounded.
    for _ in 0..10 {
        let taken = claim(&db.pool, At::NowPlusMs(120_000), 30_000, 1000).await;
        if taken.is_empty() {
            break;
        }
        for result in fire(&db.pool, &segments_of(&taken), At::NOW)
            .await
            .expect("drain fire")
        {
            assert_eq!(result.result, "fired", "nobody else is firing now");
            fired += usize::try_from(result.timers).unwrap();
        }
    }

    let scheduled = FIRERS * ROUNDS * TIMERS_PER_ROUND;
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        0,
        "every timer fired"
    );
    assert_eq!(
        fired, scheduled,
        "each timer fired once ({stale} stale segments)"
    );

    let log = messages(&db.pool, "tenant", "q", "p").await;
    let n = pushed + fired;
    assert_eq!(log.len(), n, "pushes + fired timers");
    let offsets: Vec<i64> = log.iter().map(|m| m.offset).collect();
    let expected: Vec<i64> = (0..n as i64).collect();
    assert_eq!(offsets, expected, "offsets are 0..N-1, dense, each once");
    let ids: BTreeSet<Uuid> = log.iter().map(|m| m.message_id).collect();
    assert_eq!(ids.len(), n, "every message id once");
    let last_offset: i64 = sqlx::query_scalar(
        "SELECT queen.log_last_offset_v1(p.id) FROM queen.log_partitions p \
         JOIN queen.queues q ON q.id = p.queue_id \
         WHERE q.tenant_id = 'tenant' AND q.name = 'q' AND p.name = 'p'",
    )
    .fetch_one(&db.pool)
    .await
    .expect("last_offset");
    assert_eq!(
        last_offset,
        n as i64 - 1,
        "the allocator agrees with the log"
    );
}

/// The take's rows per destination partition, as `(partition, timers)`.
async fn take_skipping(
    exec: impl PgExecutor<'_>,
    skip_held_partitions: bool,
) -> Result<Vec<(String, i32)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT partition, timers FROM queen.log_timers_take_v1(\
            ARRAY(SELECT generate_series(0, 63)), now(), 100, 100, 0, NULL, 1048576, 300, NULL, $1) \
         ORDER BY partition",
    )
    .bind(skip_held_partitions)
    .fetch_all(exec)
    .await
}

#[tokio::test]
async fn a_take_that_skips_held_partitions_fires_the_others_at_once_and_leaves_the_held_ones_due() {
    let db = TestDb::new().await;
    let big: Vec<Value> = (1..=5)
        .map(|i| op("q", &format!("big{i}"), "held", -1000 * i, &json!(i)))
        .collect();
    schedule(&db.pool, "big", Value::Array(big)).await;
    schedule(
        &db.pool,
        "small",
        json!([op("q", "small1", "free", -10, &json!("s"))]),
    )
    .await;
    let held: i64 = sqlx::query_scalar("SELECT queen.log_partition_ensure_v1('big', 'q', 'held')")
        .fetch_one(&db.pool)
        .await
        .expect("ensure");

    // Another transaction holds the big tenant's partition (a bulk take mid-way, or a push).
    let mut conn_a = db.connection().await;
    let mut tx_a = conn_a.begin().await.expect("begin A");
    sqlx::query("SELECT 1 FROM queen.log_partitions WHERE id = $1 FOR UPDATE")
        .bind(held)
        .execute(&mut *tx_a)
        .await
        .expect("hold the partition");

    let mut conn_b = db.connection().await;
    sqlx::query("SET lock_timeout = '300ms'")
        .execute(&mut conn_b)
        .await
        .expect("lock_timeout");
    // The plain take waits for the held partition (here: until its lock timeout, 55P03).
    assert_eq!(sqlstate(take_skipping(&mut conn_b, false).await), "55P03");
    // Skipping, it fires the small tenant's timer at once and leaves the big tenant's due.
    let started = queen_sweeper::clock::monotonic_now();
    let taken = take_skipping(&mut conn_b, true)
        .await
        .expect("skipping take");
    assert!(started.elapsed() < Duration::from_millis(250), "it waited");
    assert_eq!(taken, [("free".to_owned(), 1)]);
    assert_eq!(messages(&db.pool, "small", "q", "free").await.len(), 1);
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM queen.log_timers WHERE tenant_id = 'big'"
        )
        .await,
        5
    );
    // Nothing but held partitions left: an empty answer, still at once.
    assert_eq!(take_skipping(&mut conn_b, true).await.expect("take"), []);

    tx_a.commit().await.expect("release");
    assert_eq!(
        take_skipping(&mut conn_b, true).await.expect("take"),
        [("held".to_owned(), 5)]
    );
    let offsets: Vec<i64> = messages(&db.pool, "big", "q", "held")
        .await
        .iter()
        .map(|m| m.offset)
        .collect();
    assert_eq!(offsets, [0, 1, 2, 3, 4], "dense, once each");
}

#[tokio::test]
async fn a_take_of_rows_due_long_enough_ago_leaves_the_fresh_ones_and_counts_lateness_from_now() {
    let db = TestDb::new().await;
    insert_timer(&db.pool, "big", "old1", -5_000).await;
    insert_timer(&db.pool, "big", "old2", -4_000).await;
    insert_timer(&db.pool, "small", "fresh", -20).await;

    let taken: Vec<(String, i32, Vec<i64>)> = sqlx::query_as(
        "SELECT tenant_id, timers, late_ms FROM queen.log_timers_take_v1(\
            ARRAY(SELECT generate_series(0, 63)), now(), 100, 100, 0, NULL, 1048576, 300, NULL, false, 1000)",
    )
    .fetch_all(&db.pool)
    .await
    .expect("take");
    assert_eq!(taken.len(), 1, "{taken:?}");
    let (tenant, timers, late_ms) = &taken[0];
    assert_eq!((tenant.as_str(), *timers), ("big", 2));
    assert!(
        late_ms.iter().all(|ms| *ms >= 4_000),
        "lateness from now: {late_ms:?}"
    );
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM queen.log_timers WHERE timer_key = 'fresh'"
        )
        .await,
        1
    );
    // A negative age is refused.
    let refused = sqlx::query(
        "SELECT * FROM queen.log_timers_take_v1(\
            ARRAY(SELECT generate_series(0, 63)), now(), 100, 100, 0, NULL, 1048576, 300, NULL, false, -1)",
    )
    .fetch_all(&db.pool)
    .await;
    assert_eq!(sqlstate(refused), "22023");
}

#[tokio::test]
async fn a_take_of_rows_due_within_a_window_leaves_the_older_backlog() {
    let db = TestDb::new().await;
    for i in 0..50 {
        insert_timer(&db.pool, "big", &format!("old{i}"), -5_000 - i).await;
    }
    insert_timer(&db.pool, "small", "fresh", -20).await;

    // Rows due less than 1 s ago: the fresh one only, though 50 older ones are due.
    let taken: Vec<(String, i32)> = sqlx::query_as(
        "SELECT tenant_id, timers FROM queen.log_timers_take_v1(\
            ARRAY(SELECT generate_series(0, 63)), now(), 10, 10, 32, NULL, 1048576, 300, NULL, false, 0, 1000)",
    )
    .fetch_all(&db.pool)
    .await
    .expect("take");
    assert_eq!(taken, [("small".to_owned(), 1)]);
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM queen.log_timers WHERE tenant_id = 'big'"
        )
        .await,
        50
    );
    let refused = sqlx::query(
        "SELECT * FROM queen.log_timers_take_v1(\
            ARRAY(SELECT generate_series(0, 63)), now(), 10, 10, 0, NULL, 1048576, 300, NULL, false, 0, -1)",
    )
    .fetch_all(&db.pool)
    .await;
    assert_eq!(sqlstate(refused), "22023");
}
