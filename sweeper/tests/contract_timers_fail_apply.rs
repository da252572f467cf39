//! Contracts of the timers' failure path (`queen.log_timers_fail_v1`, `queen.log_timers_dlq_v1`)
//! and of the schedule seam (`queen.log_timers_apply_v1`), tenants included, against real
//! PostgreSQL.
//!
//! Time travels, it is never waited for: every test reads the server's `now()` once and passes
//! instants relative to it as `p_now`, so a boundary such as "backoff - 1 ms" is exact whatever
//! the time between two statements.

use chrono::{DateTime, Duration, Utc};
use queen_testdb::TestDb;
use serde_json::{Value, json};
use sqlx::{PgPool, Row};
use uuid::Uuid;

/// The lease every claim of this file takes.
const LEASE_MS: i64 = 30_000;

/// A binary payload that is not UTF-8: zero bytes (leading, inner, trailing) and high bytes.
const BINARY_PAYLOAD: [u8; 12] = [
    0x00, 0xff, 0x00, 0x80, 0xfe, 0x01, 0x00, 0x7f, 0xc3, 0x28, 0x00, 0x00,
];
const BINARY_PAYLOAD_BASE64: &str = "AP8AgP4BAH/DKAAA";

/// A token no claim ever hands out.
const FORGED_TOKEN: Uuid = Uuid::from_u128(0x0bad_0bad_0bad_4bad_8bad_0bad_0bad_0bad);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The server's `now()`, the anchor every test travels from.
async fn server_now(pool: &PgPool) -> DateTime<Utc> {
    sqlx::query_scalar("SELECT now()")
        .fetch_one(pool)
        .await
        .expect("server now")
}

fn plus_ms(t: DateTime<Utc>, ms: i64) -> DateTime<Utc> {
    t + Duration::milliseconds(ms)
}

async fn try_apply(
    pool: &PgPool,
    tenant: &str,
    ops: &Value,
    now: DateTime<Utc>,
) -> Result<Vec<Value>, sqlx::Error> {
    let results: Value = sqlx::query_scalar("SELECT queen.log_timers_apply_v1($1, $2, $3)")
        .bind(tenant)
        .bind(ops.clone())
        .bind(now)
        .fetch_one(pool)
        .await?;
    Ok(results
        .as_array()
        .unwrap_or_else(|| panic!("apply returns a JSON array, got {results}"))
        .clone())
}

async fn apply(pool: &PgPool, tenant: &str, ops: &Value, now: DateTime<Utc>) -> Vec<Value> {
    let results = try_apply(pool, tenant, ops, now)
        .await
        .unwrap_or_else(|e| panic!("apply {ops} failed: {e}"));
    assert_eq!(
        results.len(),
        ops.as_array().map_or(0, Vec::len),
        "one result per op: {results:?}"
    );
    results
}

/// Applies one op and returns its one result.
async fn apply_one(pool: &PgPool, tenant: &str, op: Value, now: DateTime<Utc>) -> Value {
    apply(pool, tenant, &json!([op]), now).await.remove(0)
}

/// Schedules `queue`/`key` with a base64 payload, asserts `scheduled`, returns its message id.
async fn schedule(
    pool: &PgPool,
    tenant: &str,
    queue: &str,
    key: &str,
    delay_ms: i64,
    payload_base64: &str,
    now: DateTime<Utc>,
) -> Uuid {
    let result = apply_one(
        pool,
        tenant,
        json!({"op": "schedule", "queue": queue, "timerKey": key, "delayMs": delay_ms,
               "payloadBase64": payload_base64}),
        now,
    )
    .await;
    assert_eq!(result["status"], "scheduled", "{result}");
    message_id_of(&result)
}

fn message_id_of(result: &Value) -> Uuid {
    let id = result["messageId"]
        .as_str()
        .unwrap_or_else(|| panic!("result carries a messageId: {result}"));
    Uuid::parse_str(id).unwrap_or_else(|e| panic!("messageId {id:?} is a uuid: {e}"))
}

fn deliver_at_of(result: &Value) -> DateTime<Utc> {
    let at = result["deliverAt"]
        .as_str()
        .unwrap_or_else(|| panic!("result carries a deliverAt: {result}"));
    DateTime::parse_from_rfc3339(at)
        .unwrap_or_else(|e| panic!("deliverAt {at:?} is a timestamp: {e}"))
        .with_timezone(&Utc)
}

fn sqlstate(error: &sqlx::Error) -> Option<String> {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .map(|code| code.into_owned())
}

/// The apply raises SQLSTATE 22023.
async fn assert_rejected(pool: &PgPool, tenant: &str, ops: &Value, now: DateTime<Utc>) {
    match try_apply(pool, tenant, ops, now).await {
        Ok(results) => panic!("apply {ops} must be rejected, it returned {results:?}"),
        Err(error) => assert_eq!(
            sqlstate(&error).as_deref(),
            Some("22023"),
            "apply {ops} must raise 22023, it raised {error}"
        ),
    }
}

/// A row as the claim hands it out.
#[derive(Debug, Clone)]
struct Claimed {
    tenant: String,
    queue: String,
    key: String,
    partition: String,
    message_id: Uuid,
    payload: Vec<u8>,
    attempts: i32,
    token: Uuid,
    late_ms: i64,
}

/// What fail and dlq name a row by.
#[derive(Debug, Clone)]
struct Held {
    tenant: String,
    queue: String,
    key: String,
    token: Uuid,
}

impl Claimed {
    fn held(&self) -> Held {
        Held {
            tenant: self.tenant.clone(),
            queue: self.queue.clone(),
            key: self.key.clone(),
            token: self.token,
        }
    }
}

/// Claims every due row (all 64 shards) at `now` with a [`LEASE_MS`] lease.
async fn claim(pool: &PgPool, now: DateTime<Utc>) -> Vec<Claimed> {
    sqlx::query(
        "SELECT * FROM queen.log_timers_claim_v1(ARRAY(SELECT generate_series(0, 63)), $1, $2, 1000, 1000)",
    )
    .bind(now)
    .bind(i32::try_from(LEASE_MS).expect("lease fits"))
    .fetch_all(pool)
    .await
    .expect("claim")
    .iter()
    .map(|row| Claimed {
        tenant: row.get("tenant_id"),
        queue: row.get("queue"),
        key: row.get("timer_key"),
        partition: row.get("partition"),
        message_id: row.get("message_id"),
        payload: row.get("payload"),
        attempts: row.get("attempts"),
        token: row.get("claim_token"),
        late_ms: row.get("late_ms"),
    })
    .collect()
}

/// Claims at `now` and expects exactly one row.
async fn claim_one(pool: &PgPool, now: DateTime<Utc>) -> Claimed {
    let mut rows = claim(pool, now).await;
    assert_eq!(rows.len(), 1, "exactly one claimable row: {rows:?}");
    rows.remove(0)
}

/// Fires claimed rows, one segment per destination (tenant, queue, partition) in first-seen order.
/// Returns (segment, result, timers, first_offset) per segment.
async fn fire(
    pool: &PgPool,
    rows: &[&Claimed],
    now: DateTime<Utc>,
) -> Vec<(i32, String, i32, Option<i64>)> {
    let mut destinations: Vec<(String, String, String)> = Vec::new();
    let mut members: Vec<Vec<&Claimed>> = Vec::new();
    for row in rows {
        let destination = (row.tenant.clone(), row.queue.clone(), row.partition.clone());
        match destinations.iter().position(|d| *d == destination) {
            Some(i) => members[i].push(row),
            None => {
                destinations.push(destination);
                members.push(vec![row]);
            }
        }
    }
    let seg_sizes: Vec<i32> = members
        .iter()
        .map(|m| i32::try_from(m.len()).expect("segment size"))
        .collect();
    let keys: Vec<String> = members.iter().flatten().map(|r| r.key.clone()).collect();
    let tokens: Vec<Uuid> = members.iter().flatten().map(|r| r.token).collect();
    sqlx::query_as(
        "SELECT segment, result, timers, first_offset FROM queen.log_timers_fire_v1($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(destinations.iter().map(|d| d.0.clone()).collect::<Vec<_>>())
    .bind(destinations.iter().map(|d| d.1.clone()).collect::<Vec<_>>())
    .bind(destinations.iter().map(|d| d.2.clone()).collect::<Vec<_>>())
    .bind(seg_sizes)
    .bind(keys)
    .bind(tokens)
    .bind(now)
    .fetch_all(pool)
    .await
    .expect("fire")
}

#[derive(Debug, Clone, Copy)]
enum Failure<'a> {
    /// The database was unavailable: spends no attempt, records nothing.
    Transient(&'a str),
    /// Anything else: spends an attempt and records the error.
    Permanent(&'a str),
}

/// Fails held rows. Returns (tenant, queue, timer_key, attempts, exhausted) per row changed.
async fn fail(
    pool: &PgPool,
    rows: &[Held],
    failure: Failure<'_>,
    backoff_ms: i32,
    max_attempts: i32,
    now: DateTime<Utc>,
) -> Vec<(String, String, String, i32, bool)> {
    let (error, transient) = match failure {
        Failure::Transient(error) => (error, true),
        Failure::Permanent(error) => (error, false),
    };
    sqlx::query_as(
        "SELECT tenant_id, queue, timer_key, attempts, exhausted \
         FROM queen.log_timers_fail_v1($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(rows.iter().map(|r| r.tenant.clone()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.queue.clone()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.key.clone()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.token).collect::<Vec<_>>())
    .bind(vec![backoff_ms; rows.len()])
    .bind(error)
    .bind(transient)
    .bind(max_attempts)
    .bind(now)
    .fetch_all(pool)
    .await
    .expect("fail")
}

/// Archives held rows. Returns (tenant, queue, timer_key, dlq_id) per row archived.
async fn dlq(
    pool: &PgPool,
    rows: &[Held],
    now: DateTime<Utc>,
) -> Vec<(String, String, String, i64)> {
    sqlx::query_as(
        "SELECT tenant_id, queue, timer_key, dlq_id FROM queen.log_timers_dlq_v1($1, $2, $3, $4, $5)",
    )
    .bind(rows.iter().map(|r| r.tenant.clone()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.queue.clone()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.key.clone()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.token).collect::<Vec<_>>())
    .bind(now)
    .fetch_all(pool)
    .await
    .expect("dlq")
}

/// PROBE over all 64 shards.
async fn probe(pool: &PgPool, now: DateTime<Utc>) -> Value {
    sqlx::query_scalar(
        "SELECT queen.log_timers_due_v1(ARRAY(SELECT generate_series(0, 63)), $1, 100)",
    )
    .bind(now)
    .fetch_one(pool)
    .await
    .expect("probe")
}

/// Everything a timer row holds besides its key.
#[derive(Debug, Clone, PartialEq)]
struct TimerRow {
    partition: String,
    deliver_at: DateTime<Utc>,
    txn: String,
    message_id: Uuid,
    payload: Vec<u8>,
    attempts: i32,
    last_error: Option<String>,
    claimed_until: Option<DateTime<Utc>>,
    claim_token: Option<Uuid>,
}

async fn timer_row(pool: &PgPool, tenant: &str, queue: &str, key: &str) -> Option<TimerRow> {
    sqlx::query(
        "SELECT partition, deliver_at, txn, message_id, payload, attempts, last_error, claimed_until, claim_token \
         FROM queen.log_timers WHERE tenant_id = $1 AND queue = $2 AND timer_key = $3",
    )
    .bind(tenant)
    .bind(queue)
    .bind(key)
    .fetch_optional(pool)
    .await
    .expect("read timer row")
    .map(|row| TimerRow {
        partition: row.get("partition"),
        deliver_at: row.get("deliver_at"),
        txn: row.get("txn"),
        message_id: row.get("message_id"),
        payload: row.get("payload"),
        attempts: row.get("attempts"),
        last_error: row.get("last_error"),
        claimed_until: row.get("claimed_until"),
        claim_token: row.get("claim_token"),
    })
}

async fn existing_row(pool: &PgPool, tenant: &str, queue: &str, key: &str) -> TimerRow {
    timer_row(pool, tenant, queue, key)
        .await
        .unwrap_or_else(|| panic!("timer {tenant}/{queue}/{key} exists"))
}

async fn timer_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM queen.log_timers")
        .fetch_one(pool)
        .await
        .expect("count timers")
}

async fn dlq_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM queen.log_dlq")
        .fetch_one(pool)
        .await
        .expect("count dlq")
}

async fn message_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM queen.log_messages")
        .fetch_one(pool)
        .await
        .expect("count messages")
}

/// A timer claimed and failed permanently with max_attempts = 1: exhausted, still held.
async fn exhausted_timer(pool: &PgPool, tenant: &str, key: &str, t0: DateTime<Utc>) -> Claimed {
    schedule(pool, tenant, "q", key, -1_000, "AQID", t0).await;
    let claimed = claim_one(pool, t0).await;
    let outcome = fail(
        pool,
        &[claimed.held()],
        Failure::Permanent("rejected"),
        1_000,
        1,
        t0,
    )
    .await;
    assert_eq!(
        outcome,
        vec![(tenant.to_owned(), "q".to_owned(), key.to_owned(), 1, true)]
    );
    claimed
}

// ---------------------------------------------------------------------------------------------
// FAIL, backoff, DLQ
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_transient_failure_spends_no_attempt_and_a_permanent_one_spends_one_and_records_its_error()
 {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    schedule(pool, "tenant-a", "q", "transient", -1_000, "AQ==", t0).await;
    schedule(pool, "tenant-a", "q", "permanent", -1_000, "Ag==", t0).await;
    let claimed = claim(pool, t0).await;
    assert_eq!(claimed.len(), 2, "{claimed:?}");
    let by_key = |key: &str| {
        claimed
            .iter()
            .find(|c| c.key == key)
            .expect("claimed")
            .held()
    };

    let transient = fail(
        pool,
        &[by_key("transient")],
        Failure::Transient("connection refused"),
        5_000,
        5,
        t0,
    )
    .await;
    let permanent = fail(
        pool,
        &[by_key("permanent")],
        Failure::Permanent("payload rejected: 422"),
        5_000,
        5,
        t0,
    )
    .await;
    assert_eq!(
        transient,
        vec![("tenant-a".into(), "q".into(), "transient".into(), 0, false)]
    );
    assert_eq!(
        permanent,
        vec![("tenant-a".into(), "q".into(), "permanent".into(), 1, false)]
    );

    let t = existing_row(pool, "tenant-a", "q", "transient").await;
    assert_eq!(t.attempts, 0, "a transient failure spends no attempt");
    assert_eq!(t.last_error, None, "a transient failure records no error");
    assert_eq!(t.claim_token, None, "in backoff: no token");
    assert_eq!(t.claimed_until, Some(plus_ms(t0, 5_000)));

    let p = existing_row(pool, "tenant-a", "q", "permanent").await;
    assert_eq!(p.attempts, 1, "a permanent failure spends an attempt");
    assert_eq!(p.last_error.as_deref(), Some("payload rejected: 422"));
    assert_eq!(p.claim_token, None);
    assert_eq!(p.claimed_until, Some(plus_ms(t0, 5_000)));

    // A later transient failure neither spends an attempt nor overwrites the recorded error.
    let t1 = plus_ms(t0, 5_001);
    let again = claim(pool, t1).await;
    let permanent_again = again
        .iter()
        .find(|c| c.key == "permanent")
        .expect("due again after its backoff");
    assert_eq!(permanent_again.attempts, 1);
    let outcome = fail(
        pool,
        &[permanent_again.held()],
        Failure::Transient("serialization failure"),
        5_000,
        5,
        t1,
    )
    .await;
    assert_eq!(
        outcome,
        vec![("tenant-a".into(), "q".into(), "permanent".into(), 1, false)]
    );
    let p = existing_row(pool, "tenant-a", "q", "permanent").await;
    assert_eq!(p.attempts, 1);
    assert_eq!(p.last_error.as_deref(), Some("payload rejected: 422"));
}

/// The failed call's own transaction can still hold its rows when the broker records the
/// failure: PostgreSQL sends the error before it aborts, and the record runs on another
/// connection. Skipping those rows left a live broker's timers held for the whole lease (issue 18's
/// stranded claims, seen in CI at 5d85929); the record waits the lock out briefly instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_of_a_failure_waits_out_a_lock_held_a_moment_on_its_rows() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    schedule(pool, "tenant-a", "q", "k", -1_000, "AQ==", t0).await;
    let held = claim_one(pool, t0).await.held();

    let mut locker = db.connection().await;
    sqlx::raw_sql("BEGIN; SELECT 1 FROM queen.log_timers FOR UPDATE")
        .execute(&mut locker)
        .await
        .unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(40)).await;
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut locker)
            .await
            .unwrap();
    });
    let recorded = fail(
        pool,
        std::slice::from_ref(&held),
        Failure::Transient("connection reset"),
        0,
        5,
        t0,
    )
    .await;
    release.await.unwrap();
    assert_eq!(
        recorded,
        [("tenant-a".into(), "q".into(), "k".into(), 0, false)],
        "the row locked for 40 ms is recorded, not skipped"
    );
    let row = existing_row(pool, "tenant-a", "q", "k").await;
    assert_eq!(row.claim_token, None, "released: {row:?}");
}

#[tokio::test]
async fn a_row_in_backoff_is_invisible_to_the_claim_until_its_backoff_has_passed() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    schedule(pool, "tenant-a", "q", "k", -1_000, "AQ==", t0).await;
    let first = claim_one(pool, t0).await;
    let tf = plus_ms(t0, 100);
    let backoff: i64 = 10_000;
    let outcome = fail(
        pool,
        &[first.held()],
        Failure::Permanent("boom"),
        i32::try_from(backoff).expect("fits"),
        5,
        tf,
    )
    .await;
    assert_eq!(outcome.len(), 1);

    assert!(claim(pool, tf).await.is_empty(), "in backoff at once");
    assert!(
        claim(pool, plus_ms(tf, backoff - 1)).await.is_empty(),
        "in backoff until the last millisecond"
    );
    let seen = probe(pool, tf).await;
    assert_eq!(seen["due"], 0, "{seen}");
    assert_eq!(
        seen["nextInMs"],
        json!(backoff),
        "the probe sees the backoff's end: {seen}"
    );

    let second = claim_one(pool, plus_ms(tf, backoff + 1)).await;
    assert_eq!(second.key, "k");
    assert_eq!(second.attempts, 1);
    assert_eq!(second.message_id, first.message_id);
    assert_ne!(
        second.token, first.token,
        "a new claim hands out a new token"
    );
}

#[tokio::test]
async fn a_row_in_backoff_is_still_cancellable() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    let message_id = schedule(pool, "tenant-a", "q", "k", -1_000, "AQ==", t0).await;
    let claimed = claim_one(pool, t0).await;
    fail(
        pool,
        &[claimed.held()],
        Failure::Transient("connection reset"),
        60_000,
        5,
        t0,
    )
    .await;
    let row = existing_row(pool, "tenant-a", "q", "k").await;
    assert_eq!(row.claim_token, None);
    assert_eq!(row.claimed_until, Some(plus_ms(t0, 60_000)), "in backoff");

    let result = apply_one(
        pool,
        "tenant-a",
        json!({"op": "cancel", "queue": "q", "timerKey": "k"}),
        plus_ms(t0, 1),
    )
    .await;
    assert_eq!(result["status"], "cancelled", "{result}");
    assert_eq!(message_id_of(&result), message_id);
    assert_eq!(timer_row(pool, "tenant-a", "q", "k").await, None);
    assert!(claim(pool, plus_ms(t0, 60_001)).await.is_empty());
}

#[tokio::test]
async fn a_row_at_max_attempts_is_reported_exhausted_and_stays_held_with_its_token() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    schedule(pool, "tenant-a", "q", "k", -1_000, "AQ==", t0).await;

    let max_attempts = 3;
    let mut t = t0;
    let mut last = None;
    for attempt in 1..=max_attempts {
        let claimed = claim_one(pool, t).await;
        assert_eq!(claimed.attempts, attempt - 1);
        let outcome = fail(
            pool,
            &[claimed.held()],
            Failure::Permanent("still failing"),
            1_000,
            max_attempts,
            t,
        )
        .await;
        assert_eq!(
            outcome,
            vec![(
                "tenant-a".into(),
                "q".into(),
                "k".into(),
                attempt,
                attempt == max_attempts
            )],
            "attempt {attempt}"
        );
        last = Some((claimed, t));
        t = plus_ms(t, 1_001);
    }
    let (claimed, claimed_at) = last.expect("claimed");

    let row = existing_row(pool, "tenant-a", "q", "k").await;
    assert_eq!(row.attempts, max_attempts);
    assert_eq!(row.last_error.as_deref(), Some("still failing"));
    assert_eq!(
        row.claim_token,
        Some(claimed.token),
        "an exhausted row keeps its token"
    );
    assert_eq!(
        row.claimed_until,
        Some(plus_ms(claimed_at, LEASE_MS)),
        "an exhausted row keeps its lease, it is not put into backoff"
    );
    assert!(
        claim(pool, plus_ms(claimed_at, 1_001)).await.is_empty(),
        "an exhausted row is still held"
    );
    let result = apply_one(
        pool,
        "tenant-a",
        json!({"op": "cancel", "queue": "q", "timerKey": "k"}),
        plus_ms(claimed_at, 1_001),
    )
    .await;
    assert_eq!(
        result["status"], "too_late",
        "an exhausted row is in the sweeper's hands"
    );
}

#[tokio::test]
async fn a_transient_failure_never_exhausts_a_row() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    schedule(pool, "tenant-a", "q", "k", -1_000, "AQ==", t0).await;
    let claimed = claim_one(pool, t0).await;
    let outcome = fail(
        pool,
        &[claimed.held()],
        Failure::Transient("database unavailable"),
        2_000,
        1,
        t0,
    )
    .await;
    assert_eq!(
        outcome,
        vec![("tenant-a".into(), "q".into(), "k".into(), 0, false)]
    );
    let row = existing_row(pool, "tenant-a", "q", "k").await;
    assert_eq!(row.claim_token, None, "put into backoff, not held");
    assert_eq!(row.claimed_until, Some(plus_ms(t0, 2_000)));
}

#[tokio::test]
async fn the_dlq_archives_an_exhausted_row_with_its_payload_byte_for_byte_and_deletes_it() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    let result = apply_one(
        pool,
        "tenant-a",
        json!({"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": -250,
               "payloadBase64": BINARY_PAYLOAD_BASE64, "partition": "p-7", "txn": "txn-42"}),
        t0,
    )
    .await;
    assert_eq!(result["status"], "scheduled");
    let message_id = message_id_of(&result);

    let claimed = claim_one(pool, t0).await;
    assert_eq!(
        claimed.payload, BINARY_PAYLOAD,
        "the claim hands out the bytes"
    );
    let outcome = fail(
        pool,
        &[claimed.held()],
        Failure::Permanent("poison"),
        1_000,
        1,
        t0,
    )
    .await;
    assert_eq!(
        outcome,
        vec![("tenant-a".into(), "q".into(), "k".into(), 1, true)]
    );

    let dead_at = plus_ms(t0, 5);
    let archived = dlq(pool, &[claimed.held()], dead_at).await;
    assert_eq!(archived.len(), 1, "{archived:?}");
    let (tenant, queue, key, dlq_id) = archived[0].clone();
    assert_eq!(
        (tenant.as_str(), queue.as_str(), key.as_str()),
        ("tenant-a", "q", "k")
    );

    let row = sqlx::query(
        "SELECT id, tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload, \
                attempts, last_error, dead_at FROM queen.log_dlq",
    )
    .fetch_one(pool)
    .await
    .expect("exactly one dead letter");
    assert_eq!(row.get::<i64, _>("id"), dlq_id);
    assert_eq!(row.get::<String, _>("tenant_id"), "tenant-a");
    assert_eq!(row.get::<String, _>("queue"), "q");
    assert_eq!(row.get::<String, _>("timer_key"), "k");
    assert_eq!(row.get::<String, _>("partition"), "p-7");
    assert_eq!(row.get::<DateTime<Utc>, _>("deliver_at"), plus_ms(t0, -250));
    assert_eq!(row.get::<String, _>("txn"), "txn-42");
    assert_eq!(row.get::<Uuid, _>("message_id"), message_id);
    assert_eq!(
        row.get::<Vec<u8>, _>("payload"),
        BINARY_PAYLOAD,
        "the payload is archived byte for byte"
    );
    assert_eq!(row.get::<i32, _>("attempts"), 1);
    assert_eq!(
        row.get::<Option<String>, _>("last_error").as_deref(),
        Some("poison")
    );
    assert_eq!(row.get::<DateTime<Utc>, _>("dead_at"), dead_at);

    assert_eq!(
        timer_row(pool, "tenant-a", "q", "k").await,
        None,
        "deleted from log_timers"
    );
    assert_eq!(timer_count(pool).await, 0);
    assert_eq!(
        message_count(pool).await,
        0,
        "a dead letter is not delivered"
    );

    // Archiving again with the same token finds nothing: a row dies once.
    assert!(dlq(pool, &[claimed.held()], dead_at).await.is_empty());
    assert_eq!(dlq_count(pool).await, 1);
}

#[tokio::test]
async fn the_dlq_skips_a_row_rescheduled_after_its_lease_ran_out() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    let claimed = exhausted_timer(pool, "tenant-a", "k", t0).await;

    let t1 = plus_ms(t0, LEASE_MS + 1);
    let result = apply_one(
        pool,
        "tenant-a",
        json!({"op": "reschedule", "queue": "q", "timerKey": "k", "delayMs": 60_000}),
        t1,
    )
    .await;
    assert_eq!(
        result["status"], "rescheduled",
        "the lease ran out: the row is no longer in the sweeper's hands: {result}"
    );

    let archived = dlq(pool, &[claimed.held()], t1).await;
    assert!(
        archived.is_empty(),
        "a rescheduled row is not dead: {archived:?}"
    );
    assert_eq!(dlq_count(pool).await, 0);
    let row = existing_row(pool, "tenant-a", "q", "k").await;
    assert_eq!(row.message_id, claimed.message_id);
    assert_eq!(row.deliver_at, plus_ms(t1, 60_000));
    assert_eq!(row.claim_token, None);
    assert_eq!(row.claimed_until, None);
    assert_eq!(row.attempts, 0, "a rescheduled row starts over");
    assert_eq!(row.last_error, None);
}

#[tokio::test]
async fn fail_and_dlq_with_a_token_that_is_not_the_current_one_change_nothing() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    schedule(pool, "tenant-a", "q", "k", -1_000, "AQ==", t0).await;
    let first = claim_one(pool, t0).await;
    // The lease runs out and another broker claims the row: the first token is now stale.
    let t1 = plus_ms(t0, LEASE_MS + 1);
    let second = claim_one(pool, t1).await;
    assert_ne!(first.token, second.token);
    let before = existing_row(pool, "tenant-a", "q", "k").await;
    assert_eq!(before.claim_token, Some(second.token));

    let t2 = plus_ms(t1, 1);
    let forged = Held {
        token: FORGED_TOKEN,
        ..second.held()
    };
    for stale in [first.held(), forged] {
        for failure in [
            Failure::Permanent("stale holder"),
            Failure::Transient("stale holder"),
        ] {
            let outcome = fail(pool, std::slice::from_ref(&stale), failure, 1_000, 1, t2).await;
            assert!(
                outcome.is_empty(),
                "fail with token {} changed {outcome:?}",
                stale.token
            );
            assert_eq!(existing_row(pool, "tenant-a", "q", "k").await, before);
        }
        let archived = dlq(pool, std::slice::from_ref(&stale), t2).await;
        assert!(
            archived.is_empty(),
            "dlq with token {} archived {archived:?}",
            stale.token
        );
        assert_eq!(dlq_count(pool).await, 0);
        assert_eq!(existing_row(pool, "tenant-a", "q", "k").await, before);
    }

    // The current token still works: the calls above were refused for their token alone.
    let outcome = fail(
        pool,
        &[second.held()],
        Failure::Permanent("real"),
        1_000,
        5,
        t2,
    )
    .await;
    assert_eq!(
        outcome,
        vec![("tenant-a".into(), "q".into(), "k".into(), 1, false)]
    );
}

// ---------------------------------------------------------------------------------------------
// APPLY
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn schedule_of_a_new_key_is_scheduled_with_a_message_id_and_deliver_in_ms_in_op_order() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    // Given out of primary-key order: results still come back in the caller's order.
    let results = apply(
        pool,
        "tenant-a",
        &json!([
            {"op": "schedule", "queue": "q", "timerKey": "b", "delayMs": 1_500,
             "payload": {"n": 2}, "partition": "p1", "txn": "t-b"},
            {"op": "schedule", "queue": "q", "timerKey": "a", "delayMs": 0, "payloadBase64": "AA=="},
        ]),
        t0,
    )
    .await;

    assert_eq!(results[0]["index"], 0);
    assert_eq!(results[0]["timerKey"], "b");
    assert_eq!(results[0]["status"], "scheduled");
    assert_eq!(results[0]["deliverInMs"], 1_500);
    assert_eq!(deliver_at_of(&results[0]), plus_ms(t0, 1_500));
    assert_eq!(results[1]["index"], 1);
    assert_eq!(results[1]["timerKey"], "a");
    assert_eq!(results[1]["status"], "scheduled");
    assert_eq!(results[1]["deliverInMs"], 0);

    let b_id = message_id_of(&results[0]);
    let a_id = message_id_of(&results[1]);
    assert_ne!(a_id, b_id);

    let b = existing_row(pool, "tenant-a", "q", "b").await;
    assert_eq!(b.message_id, b_id);
    assert_eq!(b.deliver_at, plus_ms(t0, 1_500));
    assert_eq!(b.partition, "p1");
    assert_eq!(b.txn, "t-b");
    assert_eq!(b.attempts, 0);
    assert_eq!((b.claim_token, b.claimed_until), (None, None));
    let stored: Value =
        serde_json::from_slice(&b.payload).expect("a JSON payload is stored as its text");
    assert_eq!(stored, json!({"n": 2}));

    let a = existing_row(pool, "tenant-a", "q", "a").await;
    assert_eq!(a.message_id, a_id);
    assert_eq!(a.partition, "default", "the default partition");
    assert_eq!(a.txn, a_id.to_string(), "the default txn is the message id");
    assert_eq!(a.payload, vec![0u8]);
    assert_eq!(timer_count(pool).await, 2);
}

#[tokio::test]
async fn schedule_over_an_existing_key_is_rescheduled_and_keeps_the_message_id() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    let message_id = schedule(pool, "tenant-a", "q", "k", 60_000, "AQ==", t0).await;

    let t1 = plus_ms(t0, 10);
    let result = apply_one(
        pool,
        "tenant-a",
        json!({"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 1_000, "payloadBase64": "Ag=="}),
        t1,
    )
    .await;
    assert_eq!(result["status"], "rescheduled", "{result}");
    assert_eq!(message_id_of(&result), message_id);
    assert_eq!(result["deliverInMs"], 1_000);

    let row = existing_row(pool, "tenant-a", "q", "k").await;
    assert_eq!(row.message_id, message_id);
    assert_eq!(row.deliver_at, plus_ms(t1, 1_000));
    assert_eq!(row.payload, vec![2u8], "schedule replaces the payload");
    assert_eq!(timer_count(pool).await, 1, "still one timer");
}

#[tokio::test]
async fn reschedule_moves_a_timer_and_keeps_its_message_id_and_payload_unless_given_one() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    let message_id = schedule(pool, "tenant-a", "q", "k", 60_000, "AQ==", t0).await;

    let result = apply_one(
        pool,
        "tenant-a",
        json!({"op": "reschedule", "queue": "q", "timerKey": "k", "delayMs": 5_000}),
        t0,
    )
    .await;
    assert_eq!(result["status"], "rescheduled", "{result}");
    assert_eq!(message_id_of(&result), message_id);
    assert_eq!(result["deliverInMs"], 5_000);
    assert_eq!(deliver_at_of(&result), plus_ms(t0, 5_000));
    let row = existing_row(pool, "tenant-a", "q", "k").await;
    assert_eq!(row.deliver_at, plus_ms(t0, 5_000), "moved");
    assert_eq!(row.payload, vec![1u8], "payload kept");
    assert_eq!(row.message_id, message_id);

    let result = apply_one(
        pool,
        "tenant-a",
        json!({"op": "reschedule", "queue": "q", "timerKey": "k", "delayMs": 7_000, "payloadBase64": "Aw=="}),
        t0,
    )
    .await;
    assert_eq!(result["status"], "rescheduled");
    assert_eq!(message_id_of(&result), message_id);
    let row = existing_row(pool, "tenant-a", "q", "k").await;
    assert_eq!(row.deliver_at, plus_ms(t0, 7_000));
    assert_eq!(row.payload, vec![3u8], "payload replaced when given");
    assert_eq!(row.message_id, message_id);
    assert!(claim(pool, plus_ms(t0, 6_999)).await.is_empty());
    assert_eq!(
        claim_one(pool, plus_ms(t0, 7_000)).await.message_id,
        message_id
    );
}

#[tokio::test]
async fn reschedule_of_a_row_in_backoff_starts_it_over() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    schedule(pool, "tenant-a", "q", "k", -1_000, "AQ==", t0).await;
    let claimed = claim_one(pool, t0).await;
    fail(
        pool,
        &[claimed.held()],
        Failure::Permanent("boom"),
        60_000,
        5,
        t0,
    )
    .await;

    let result = apply_one(
        pool,
        "tenant-a",
        json!({"op": "reschedule", "queue": "q", "timerKey": "k", "delayMs": 100}),
        t0,
    )
    .await;
    assert_eq!(result["status"], "rescheduled");
    let row = existing_row(pool, "tenant-a", "q", "k").await;
    assert_eq!(row.attempts, 0);
    assert_eq!(row.last_error, None);
    assert_eq!((row.claim_token, row.claimed_until), (None, None));
    let again = claim_one(pool, plus_ms(t0, 100)).await;
    assert_eq!(again.attempts, 0, "due at its new time, backoff forgotten");
}

#[tokio::test]
async fn cancel_of_a_waiting_timer_is_cancelled_and_deletes_it() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    let message_id = schedule(pool, "tenant-a", "q", "k", 60_000, "AQ==", t0).await;
    schedule(pool, "tenant-a", "q", "other", 60_000, "AQ==", t0).await;

    let result = apply_one(
        pool,
        "tenant-a",
        json!({"op": "cancel", "queue": "q", "timerKey": "k"}),
        t0,
    )
    .await;
    assert_eq!(result["status"], "cancelled", "{result}");
    assert_eq!(message_id_of(&result), message_id);
    assert_eq!(timer_row(pool, "tenant-a", "q", "k").await, None);
    assert!(
        timer_row(pool, "tenant-a", "q", "other").await.is_some(),
        "only the named timer"
    );
    assert!(
        claim(pool, plus_ms(t0, 60_000))
            .await
            .iter()
            .all(|c| c.key != "k")
    );
}

#[tokio::test]
async fn cancel_or_reschedule_of_a_missing_key_is_absent_and_writes_nothing() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    let results = apply(
        pool,
        "tenant-a",
        &json!([
            {"op": "cancel", "queue": "q", "timerKey": "gone"},
            {"op": "reschedule", "queue": "q", "timerKey": "never", "delayMs": 1_000, "payloadBase64": "AQ=="},
        ]),
        t0,
    )
    .await;
    for result in &results {
        assert_eq!(result["status"], "absent", "{result}");
        assert!(result.get("messageId").is_none(), "no message: {result}");
        assert!(
            result.get("deliverInMs").is_none(),
            "nothing scheduled: {result}"
        );
    }
    assert_eq!(timer_count(pool).await, 0, "reschedule does not create");

    // A timer that fired is gone too.
    schedule(pool, "tenant-a", "q", "fired", -1, "AQ==", t0).await;
    let claimed = claim_one(pool, t0).await;
    assert_eq!(fire(pool, &[&claimed], t0).await[0].1, "fired");
    let result = apply_one(
        pool,
        "tenant-a",
        json!({"op": "cancel", "queue": "q", "timerKey": "fired"}),
        t0,
    )
    .await;
    assert_eq!(result["status"], "absent", "{result}");
}

#[tokio::test]
async fn cancel_reschedule_or_schedule_of_a_claimed_row_is_too_late_and_leaves_it_unchanged() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    let message_id = schedule(
        pool,
        "tenant-a",
        "q",
        "k",
        -1_000,
        BINARY_PAYLOAD_BASE64,
        t0,
    )
    .await;
    let claimed = claim_one(pool, t0).await;
    let before = existing_row(pool, "tenant-a", "q", "k").await;
    assert_eq!(before.claim_token, Some(claimed.token));

    let t1 = plus_ms(t0, LEASE_MS - 1);
    for op in [
        json!({"op": "cancel", "queue": "q", "timerKey": "k"}),
        json!({"op": "reschedule", "queue": "q", "timerKey": "k", "delayMs": 60_000, "payloadBase64": "AQ=="}),
        json!({"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 60_000, "payloadBase64": "AQ=="}),
    ] {
        let result = apply_one(pool, "tenant-a", op.clone(), t1).await;
        assert_eq!(result["status"], "too_late", "{op} -> {result}");
        assert_eq!(message_id_of(&result), message_id);
        assert_eq!(
            existing_row(pool, "tenant-a", "q", "k").await,
            before,
            "{op} left the claimed row unchanged (deliver_at, token, payload)"
        );
    }

    // It fires as claimed, with its original payload.
    let fired = fire(pool, &[&claimed], t1).await;
    assert_eq!(fired, vec![(0, "fired".to_owned(), 1, Some(0))]);
    let (logged_id, logged_payload): (Uuid, Vec<u8>) =
        sqlx::query_as("SELECT message_id, payload FROM queen.log_messages")
            .fetch_one(pool)
            .await
            .expect("one message");
    assert_eq!(logged_id, message_id);
    assert_eq!(logged_payload, BINARY_PAYLOAD);
}

#[tokio::test]
async fn server_owned_fields_are_rejected_with_22023_and_nothing_is_written() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    schedule(pool, "tenant-a", "q", "x", 60_000, "AQ==", t0).await;
    let x_before = existing_row(pool, "tenant-a", "q", "x").await;

    let fields = [
        ("messageId", json!("6b1f6f58-8e4d-4f9e-9d3b-0c1e2a3b4c5d")),
        ("message_id", json!("6b1f6f58-8e4d-4f9e-9d3b-0c1e2a3b4c5d")),
        ("tenant", json!("tenant-b")),
        ("tenantId", json!("tenant-b")),
        ("deliverAt", json!("2030-01-01T00:00:00Z")),
        ("attempts", json!(0)),
        ("token", json!("6b1f6f58-8e4d-4f9e-9d3b-0c1e2a3b4c5d")),
        ("claimToken", json!("6b1f6f58-8e4d-4f9e-9d3b-0c1e2a3b4c5d")),
        ("claimedUntil", json!("2030-01-01T00:00:00Z")),
    ];
    for (field, value) in fields {
        let mut bad = json!({"op": "schedule", "queue": "q", "timerKey": "z", "delayMs": 1_000, "payloadBase64": "AQ=="});
        bad[field] = value.clone();
        // Valid ops around it (one before, one after) must not be written either.
        let ops = json!([
            {"op": "cancel", "queue": "q", "timerKey": "x"},
            {"op": "schedule", "queue": "q", "timerKey": "y", "delayMs": 1_000, "payloadBase64": "AQ=="},
            bad,
            {"op": "schedule", "queue": "q2", "timerKey": "w", "delayMs": 1, "payloadBase64": "AQ=="},
        ]);
        assert_rejected(pool, "tenant-a", &ops, t0).await;

        // On a cancel, too.
        let mut bad_cancel = json!({"op": "cancel", "queue": "q", "timerKey": "x"});
        bad_cancel[field] = value;
        assert_rejected(pool, "tenant-a", &json!([bad_cancel]), t0).await;

        assert_eq!(
            existing_row(pool, "tenant-a", "q", "x").await,
            x_before,
            "{field}: the cancel in the rejected call did not run"
        );
        assert_eq!(
            timer_count(pool).await,
            1,
            "{field}: none of the rejected call's schedules was written"
        );
    }
}

#[tokio::test]
async fn unknown_fields_are_rejected_with_22023_and_nothing_is_written() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    for (field, value) in [
        ("delay", json!(1_000)),
        ("payloadB64", json!("AQ==")),
        ("priority", json!(1)),
        ("TimerKey", json!("k")),
    ] {
        let mut bad = json!({"op": "schedule", "queue": "q", "timerKey": "bad", "delayMs": 1_000, "payloadBase64": "AQ=="});
        bad[field] = value;
        let ops = json!([
            {"op": "schedule", "queue": "q", "timerKey": "good", "delayMs": 1_000, "payloadBase64": "AQ=="},
            bad,
        ]);
        assert_rejected(pool, "tenant-a", &ops, t0).await;
        assert_eq!(timer_count(pool).await, 0, "{field}: nothing written");
    }
    // The same call without the unknown field is accepted (the rejection was the field's).
    let results = apply(
        pool,
        "tenant-a",
        &json!([
            {"op": "schedule", "queue": "q", "timerKey": "good", "delayMs": 1_000, "payloadBase64": "AQ=="},
            {"op": "schedule", "queue": "q", "timerKey": "bad", "delayMs": 1_000, "payloadBase64": "AQ=="},
        ]),
        t0,
    )
    .await;
    assert!(
        results.iter().all(|r| r["status"] == "scheduled"),
        "{results:?}"
    );
}

#[tokio::test]
async fn the_same_key_twice_in_one_call_is_rejected_with_22023_and_nothing_is_written() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    for ops in [
        json!([
            {"op": "schedule", "queue": "q", "timerKey": "other", "delayMs": 1_000, "payloadBase64": "AQ=="},
            {"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 1_000, "payloadBase64": "AQ=="},
            {"op": "cancel", "queue": "q", "timerKey": "k"},
        ]),
        json!([
            {"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 1_000, "payloadBase64": "AQ=="},
            {"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 2_000, "payloadBase64": "Ag=="},
        ]),
    ] {
        assert_rejected(pool, "tenant-a", &ops, t0).await;
        assert_eq!(timer_count(pool).await, 0, "{ops}: nothing written");
    }

    // The same timerKey on two queues is two timers, not a repeat.
    let results = apply(
        pool,
        "tenant-a",
        &json!([
            {"op": "schedule", "queue": "q1", "timerKey": "k", "delayMs": 1_000, "payloadBase64": "AQ=="},
            {"op": "schedule", "queue": "q2", "timerKey": "k", "delayMs": 1_000, "payloadBase64": "AQ=="},
        ]),
        t0,
    )
    .await;
    assert!(
        results.iter().all(|r| r["status"] == "scheduled"),
        "{results:?}"
    );
    assert_eq!(timer_count(pool).await, 2);
}

#[tokio::test]
async fn a_negative_delay_is_legal_and_due_at_once() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    let result = apply_one(
        pool,
        "tenant-a",
        json!({"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": -5_000, "payloadBase64": "AQ=="}),
        t0,
    )
    .await;
    assert_eq!(result["status"], "scheduled", "{result}");
    let deliver_in_ms = result["deliverInMs"]
        .as_i64()
        .unwrap_or_else(|| panic!("deliverInMs: {result}"));
    assert!(deliver_in_ms <= 0, "due at once: {result}");
    assert_eq!(
        existing_row(pool, "tenant-a", "q", "k").await.deliver_at,
        plus_ms(t0, -5_000)
    );

    let seen = probe(pool, t0).await;
    assert_eq!(seen["due"], 1, "{seen}");
    assert_eq!(seen["nextInMs"], 0, "{seen}");
    let claimed = claim_one(pool, t0).await;
    assert_eq!(claimed.key, "k");
    assert_eq!(claimed.late_ms, 5_000);
}

// ---------------------------------------------------------------------------------------------
// Tenants
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn the_same_queue_and_timer_key_under_two_tenants_are_two_timers() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    let a = schedule(pool, "tenant-a", "q", "k", 60_000, "AQ==", t0).await;
    let b = schedule(pool, "tenant-b", "q", "k", 60_000, "Ag==", t0).await;
    assert_ne!(a, b, "two messages");
    assert_eq!(timer_count(pool).await, 2);
    assert_eq!(
        existing_row(pool, "tenant-a", "q", "k").await.payload,
        vec![1u8]
    );
    assert_eq!(
        existing_row(pool, "tenant-b", "q", "k").await.payload,
        vec![2u8]
    );
}

#[tokio::test]
async fn a_cross_tenant_cancel_or_reschedule_is_absent_and_leaves_the_other_tenants_timer() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    schedule(pool, "tenant-a", "q", "k", 60_000, "AQ==", t0).await;
    let before = existing_row(pool, "tenant-a", "q", "k").await;

    let results = apply(
        pool,
        "tenant-b",
        &json!([{"op": "cancel", "queue": "q", "timerKey": "k"}]),
        t0,
    )
    .await;
    assert_eq!(results[0]["status"], "absent", "{results:?}");
    let results = apply(
        pool,
        "tenant-b",
        &json!([{"op": "reschedule", "queue": "q", "timerKey": "k", "delayMs": 1}]),
        t0,
    )
    .await;
    assert_eq!(results[0]["status"], "absent", "{results:?}");

    assert_eq!(existing_row(pool, "tenant-a", "q", "k").await, before);
    assert_eq!(timer_count(pool).await, 1);
}

#[tokio::test]
async fn one_fire_across_two_tenants_writes_each_message_into_its_own_tenants_partition() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let t0 = server_now(pool).await;
    let a_id = schedule(pool, "tenant-a", "q", "k", -1_000, "AHRlbmFudC1h/w==", t0).await;
    let b_id = schedule(pool, "tenant-b", "q", "k", -1_000, "AHRlbmFudC1i/g==", t0).await;
    let claimed = claim(pool, t0).await;
    assert_eq!(claimed.len(), 2, "{claimed:?}");
    let a = claimed.iter().find(|c| c.tenant == "tenant-a").expect("a");
    let b = claimed.iter().find(|c| c.tenant == "tenant-b").expect("b");

    let fired = fire(pool, &[a, b], t0).await;
    assert_eq!(
        fired,
        vec![
            (0, "fired".to_owned(), 1, Some(0)),
            (1, "fired".to_owned(), 1, Some(0)),
        ]
    );

    let logged: Vec<(String, String, i64, String, Uuid, Vec<u8>)> = sqlx::query_as(
        "SELECT q.tenant_id, q.name, p.id, p.name, m.message_id, m.payload \
         FROM queen.log_messages m \
         JOIN queen.log_partitions p ON p.id = m.partition_id \
         JOIN queen.queues q ON q.id = p.queue_id \
         ORDER BY q.tenant_id",
    )
    .fetch_all(pool)
    .await
    .expect("logged messages");
    assert_eq!(logged.len(), 2, "{logged:?}");
    assert_eq!(
        (
            logged[0].0.as_str(),
            logged[0].1.as_str(),
            logged[0].3.as_str()
        ),
        ("tenant-a", "q", "default")
    );
    assert_eq!(
        (
            logged[1].0.as_str(),
            logged[1].1.as_str(),
            logged[1].3.as_str()
        ),
        ("tenant-b", "q", "default")
    );
    assert_ne!(logged[0].2, logged[1].2, "two different partitions");
    assert_eq!(
        logged[0].4, a_id,
        "tenant-a's message in tenant-a's partition"
    );
    assert_eq!(logged[0].5, b"\x00tenant-a\xff".to_vec());
    assert_eq!(
        logged[1].4, b_id,
        "tenant-b's message in tenant-b's partition"
    );
    assert_eq!(logged[1].5, b"\x00tenant-b\xfe".to_vec());

    let queues: Vec<(String, String)> =
        sqlx::query_as("SELECT tenant_id, name FROM queen.queues ORDER BY tenant_id")
            .fetch_all(pool)
            .await
            .expect("queues");
    assert_eq!(
        queues,
        vec![
            ("tenant-a".to_owned(), "q".to_owned()),
            ("tenant-b".to_owned(), "q".to_owned()),
        ],
        "the same queue name under two tenants is two queues"
    );
    assert_eq!(timer_count(pool).await, 0, "both timers fired");
}
