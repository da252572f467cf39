//! Head floors on real PostgreSQL: with a snapshot held open, the timers fired since pile up as
//! dead entries at the head of every shard; a floored probe and take read past them, never past a
//! live row, and a row a floor hid is found by the next read from the start. Appends lock their
//! partition's row but write no version of it, so a held snapshot leaves no versions there to walk.
//!
//! Rows read are counted by PostgreSQL inside the call's transaction (as in `plans_pg.rs`), so
//! the checks do not depend on timing.

use std::time::Duration;

use queen_sweeper::{
    Admission, FloorPolicy, PgStore, ProbeRequest, ShardOrder, Store, TakeRequest,
};
use queen_testdb::TestDb;
use serde_json::Value;
use sqlx::{Connection, PgConnection};

const ALL_SHARDS: &str = "ARRAY(SELECT generate_series(0, 63))";
/// Timers fired (deleted) while the snapshot is held.
const DEAD: i64 = 20_000;
/// Live due timers after them.
const LIVE: i64 = 10;
const MARGIN_MS: i64 = 5_000;

/// Rows of `queen.log_timers` and its indexes `statement` reads, and what it answers (one value).
async fn read_by(session: &mut PgConnection, statement: &str) -> (i64, Value) {
    const READ: &str = "SELECT sum(pg_stat_get_xact_tuples_returned(r) + pg_stat_get_xact_tuples_fetched(r))::bigint
         FROM (SELECT 'queen.log_timers'::regclass::oid AS r
               UNION ALL SELECT indexrelid FROM pg_index WHERE indrelid = 'queen.log_timers'::regclass) x";
    let mut tx = session.begin().await.unwrap();
    let before: i64 = sqlx::query_scalar(READ).fetch_one(&mut *tx).await.unwrap();
    let answer: Value = sqlx::query_scalar(sqlx::AssertSqlSafe(statement.to_owned()))
        .fetch_one(&mut *tx)
        .await
        .unwrap_or_else(|e| panic!("{statement}: {e}"));
    let after: i64 = sqlx::query_scalar(READ).fetch_one(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    (after - before, answer)
}

fn probe(floors: Option<&Value>) -> String {
    let floors = floors.map_or("NULL".to_owned(), |f| {
        format!("ARRAY(SELECT jsonb_array_elements_text('{f}'::jsonb)::bigint)")
    });
    format!("SELECT queen.sweeper_probe_v1({ALL_SHARDS}, now(), 2000, 0, {floors}, {MARGIN_MS})")
}

/// A snapshot held open by a session of its own (dropping the connection ends it), then `DEAD`
/// timers due minutes ago written and deleted, then `LIVE` due ones.
async fn dead_head_under_a_held_snapshot(db: &TestDb) -> PgConnection {
    let mut holder = db.connection().await;
    sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM queen.log_timers")
        .execute(&mut holder)
        .await
        .unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload, created_at)
         SELECT 't' || (i % 3), 'q', 'dead-' || i, 'p', now() - interval '10 minutes' + i * interval '1 millisecond',
                'x', gen_random_uuid(), '\\x00'::bytea, now()
         FROM generate_series(1, {DEAD}) AS i;
         DELETE FROM queen.log_timers;
         INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload, created_at)
         SELECT 't' || (i % 3), 'q', 'live-' || i, 'p', now() - interval '1 second', 'x', gen_random_uuid(), '\\x00'::bytea, now()
         FROM generate_series(1, {LIVE}) AS i"
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    holder
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_snapshot_held_the_floored_probe_reads_past_the_dead_head_and_sees_the_same() {
    let db = TestDb::new().await;
    let _holder = dead_head_under_a_held_snapshot(&db).await;
    let mut session = db.connection().await;

    let (full_reads, full) = read_by(&mut session, &probe(None)).await;
    let floors = full["floors"].clone();
    assert_eq!(floors.as_array().map(Vec::len), Some(64), "{full}");
    let (floored_reads, floored) = read_by(&mut session, &probe(Some(&floors))).await;

    // The symptom: from the start, every dead entry is read (the heads and the count).
    assert!(
        full_reads >= DEAD,
        "the probe from the start read {full_reads} rows, not the {DEAD} dead ones"
    );
    // The fix: from the floors, a few per shard.
    assert!(
        floored_reads < 64 * 4 + 2 * LIVE,
        "the floored probe read {floored_reads} rows (from the start: {full_reads})"
    );
    for field in ["due", "dueCapped", "nextInMs"] {
        assert_eq!(full[field], floored[field], "{field}: {full} vs {floored}");
    }
    assert_eq!(floored["due"], LIVE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_live_row_is_below_its_floor_and_a_schedule_into_the_past_lands_above_it() {
    let db = TestDb::new().await;
    let _holder = dead_head_under_a_held_snapshot(&db).await;
    let mut session = db.connection().await;
    let (_, full) = read_by(&mut session, &probe(None)).await;
    let floors = full["floors"].clone();

    let below: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM queen.log_timers t
         WHERE t.visible_at < queen.head_floor_v1(ARRAY(SELECT jsonb_array_elements_text($1)::bigint), t.shard)",
    )
    .bind(&floors)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(below, 0, "live rows under their shard's floor");
    let margin: bool = sqlx::query_scalar(
        "SELECT bool_and(to_timestamp(f::bigint / 1000.0) <= now() - $2 * interval '1 millisecond')
         FROM jsonb_array_elements_text($1) AS f",
    )
    .bind(&floors)
    .bind(MARGIN_MS as f64)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(
        margin,
        "every floor is at least the margin below now: {floors}"
    );

    // After the probe: a schedule an hour into the past, and a reschedule of a live timer a day
    // into the past. Both are due at once, their delivery kept, and the floored probe counts them.
    let applied: Value = sqlx::query_scalar(
        r#"SELECT queen.log_timers_apply_v1('t0', '[
             {"op": "schedule", "queue": "q", "timerKey": "late", "delayMs": -3600000, "payload": 1},
             {"op": "reschedule", "queue": "q", "timerKey": "live-3", "delayMs": -86400000}]', now())"#,
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(applied[0]["status"], "scheduled", "{applied}");
    assert_eq!(applied[1]["status"], "rescheduled", "{applied}");
    let (_, floored) = read_by(&mut session, &probe(Some(&floors))).await;
    assert_eq!(floored["due"], LIVE + 1, "{floored}");
    let kept: Vec<(String, bool, bool)> = sqlx::query_as(
        "SELECT timer_key, deliver_at < now() - interval '59 minutes', visible_at > now() - interval '1 minute'
         FROM queen.log_timers WHERE timer_key IN ('late', 'live-3') ORDER BY timer_key",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        kept,
        [("late".into(), true, true), ("live-3".into(), true, true)],
        "delivery kept in the past, visible from the schedule's now"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_floors_its_take_and_finds_a_row_written_below_a_floor_at_the_next_rescan() {
    let db = TestDb::new().await;
    let _holder = dead_head_under_a_held_snapshot(&db).await;
    let rescan = Duration::from_millis(400);
    let store =
        PgStore::from_pool(db.pool.clone(), Duration::from_secs(5)).with_head_floors(FloorPolicy {
            rescan: Some(rescan),
            margin: Duration::from_millis(MARGIN_MS as u64),
        });
    let admission = Admission::new(Default::default());
    let slot = admission.maintenance().await;
    let request = ProbeRequest {
        shards: ShardOrder::starting_at(0),
        due_cap: 2_000,
        kv_cap: 0,
    };
    let started = queen_sweeper::clock::tokio_now();
    assert_eq!(store.probe(&slot, &request).await.unwrap().due, LIVE as u32);

    // A row written by hand an hour into the past, below every floor: the floored probe does not
    // see it yet, a read from the start does.
    sqlx::raw_sql(
        "INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload, created_at)
         VALUES ('t9', 'q', 'by-hand', 'p', now() - interval '1 hour', 'x', gen_random_uuid(), '\\x00'::bytea, now())",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let floored = store.probe(&slot, &request).await.unwrap();
    if started.elapsed() < rescan {
        assert_eq!(floored.due, LIVE as u32, "the floors hide the row by hand");
    }
    tokio::time::sleep(rescan).await;
    assert_eq!(
        store.probe(&slot, &request).await.unwrap().due,
        LIVE as u32 + 1,
        "the read from the start finds it"
    );

    // The take reads from the floors the probe just set and fires every due row.
    let take = TakeRequest {
        shards: ShardOrder::starting_at(0),
        max_rows: 200,
        per_tenant: 200,
        fair: None,
        max_bytes: 1 << 20,
        row_overhead: 300,
        skip_held_partitions: false,
        due_ms_ago: 0,
        due_within_ms: None,
    };
    let taken = store.take(&slot, &take).await.unwrap();
    assert_eq!(taken.timers(), LIVE as u64 + 1);
}

/// The fairness round runs only when more rows are due than the pick can take: below that, the
/// shard rounds take every tenant's due rows anyway, and the round's primary-key reads (which no
/// floor shortens) would be spent for nothing. `fair_next` says whether it ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fairness_round_runs_only_when_more_is_due_than_the_pick_can_take() {
    let db = TestDb::new().await;
    let due = |n: i64, prefix: &str| {
        format!(
            "INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload, created_at)
             SELECT 't' || (i % 2), 'q', '{prefix}' || i, 'p', now() - interval '1 second', 'x', gen_random_uuid(), '\\x00'::bytea, now()
             FROM generate_series(1, {n}) AS i"
        )
    };
    let claim = format!(
        "SELECT count(*), max(fair_next) FROM queen.log_timers_claim_v1({ALL_SHARDS}, now(), 30000, 10, 10, 8, NULL)"
    );
    let claimed = |rows: i64, fair_next: Option<String>| (rows, fair_next);

    sqlx::raw_sql(sqlx::AssertSqlSafe(due(4, "few-")))
        .execute(&db.pool)
        .await
        .unwrap();
    let few: (i64, Option<String>) = sqlx::query_as(sqlx::AssertSqlSafe(claim.clone()))
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(few, claimed(4, None), "4 due, a pick of 10: no round");

    sqlx::raw_sql(sqlx::AssertSqlSafe(due(11, "many-")))
        .execute(&db.pool)
        .await
        .unwrap();
    let many: (i64, Option<String>) = sqlx::query_as(sqlx::AssertSqlSafe(claim))
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        many,
        claimed(10, Some("t1".into())),
        "11 due, a pick of 10: the round ran"
    );
}

/// Where the one row of partition `p` is and which transaction wrote it: both change with every
/// new version of the row, and neither with a row lock.
async fn partition_row(db: &TestDb) -> (String, String) {
    sqlx::query_as("SELECT ctid::text, xmin::text FROM queen.log_partitions WHERE name = 'p'")
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

async fn push(db: &TestDb, payloads: usize) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT log_offset FROM queen.log_push_v1('t', 'q', 'p', \
         array_fill('\\x01'::bytea, ARRAY[$1::integer]), NULL, now())",
    )
    .bind(payloads as i32)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_write_no_version_of_their_partition_row_and_continue_above_last_offset() {
    let db = TestDb::new().await;
    assert_eq!(push(&db, 2).await, [0, 1]);
    let before = partition_row(&db).await;
    assert_eq!(push(&db, 1).await, [2]);
    sqlx::raw_sql(
        r#"SELECT queen.log_timers_apply_v1('t', '[{"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": -1, "partition": "p", "payloadBase64": "AQ=="}]', now());
           SELECT * FROM queen.log_timers_take_v1(ARRAY(SELECT generate_series(0, 63)), now(), 10, 10, 0, NULL, 1000000, 300);"#,
    )
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        partition_row(&db).await,
        before,
        "a push and a take wrote a new version of the partition's row"
    );
    let offsets: Vec<i64> =
        sqlx::query_scalar("SELECT \"offset\" FROM queen.log_messages ORDER BY \"offset\"")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(
        offsets,
        [0, 1, 2, 3],
        "the take continued the pushes' offsets"
    );

    // last_offset is a floor (raised by whoever would remove the newest messages).
    sqlx::raw_sql("UPDATE queen.log_partitions SET last_offset = 9")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(push(&db, 2).await, [10, 11]);
}
