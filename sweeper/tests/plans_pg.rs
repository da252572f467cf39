//! The hot functions read rows in proportion to their batch, not to the backlog, in a session
//! whose plans were made while the table was empty (a fresh deployment, a drained backlog), and
//! with no ANALYZE since: PL/pgSQL keeps a generic plan per statement and session, and one made
//! on an empty table chose sequential scans and prefix walks that then read every pending row.
//!
//! Rows read are counted by PostgreSQL itself, inside the call's transaction
//! (`pg_stat_get_xact_tuples_returned` and `_fetched` of `queen.log_timers` and its indexes), so
//! the check is exact and does not depend on timing.

use queen_testdb::TestDb;
use sqlx::{Connection, PgConnection};

/// Pending (future) timers in the one queue the batch goes to.
const PENDING: i64 = 100_000;
/// Due timers per call.
const BATCH: i64 = 200;
/// A call may read this many rows per timer of its batch, and no more (claim + fire read 5 525-5 601
/// rows for 200 timers with 10 000 and with 100 000 pending; a plan that walks the backlog reads
/// every pending row).
const ROWS_PER_TIMER: i64 = 40;

const ALL_SHARDS: &str = "ARRAY(SELECT generate_series(0, 63))";

/// Rows of `queen.log_timers` and its indexes the statements read, run in one transaction.
async fn rows_read(session: &mut PgConnection, statements: &[String]) -> i64 {
    // The counters are the backend's pending ones: they accumulate until the backend reports
    // them (between transactions), so the count is the difference inside one transaction.
    const READ: &str = "SELECT sum(pg_stat_get_xact_tuples_returned(r) + pg_stat_get_xact_tuples_fetched(r))::bigint
         FROM (SELECT 'queen.log_timers'::regclass::oid AS r
               UNION ALL SELECT indexrelid FROM pg_index WHERE indrelid = 'queen.log_timers'::regclass) x";
    let mut tx = session.begin().await.unwrap();
    let before: i64 = sqlx::query_scalar(READ).fetch_one(&mut *tx).await.unwrap();
    for statement in statements {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement.clone()))
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
    let after: i64 = sqlx::query_scalar(READ).fetch_one(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    after - before
}

fn insert(count: i64, prefix: &str, due: &str) -> String {
    format!(
        "INSERT INTO queen.log_timers (tenant_id, queue, timer_key, partition, deliver_at, txn, message_id, payload, created_at)
         SELECT 't0', 'q0', '{prefix}' || i, 'p' || (i % 8), now() + interval '{due}', '{prefix}' || i,
                gen_random_uuid(), '\\x00'::bytea, now()
         FROM generate_series(1, {count}) AS i"
    )
}

fn take() -> String {
    format!(
        "SELECT * FROM queen.log_timers_take_v1({ALL_SHARDS}, now(), {BATCH}, {BATCH}, 0, NULL, 8388608, 300)"
    )
}

fn probe() -> String {
    format!("SELECT queen.sweeper_probe_v1({ALL_SHARDS}, now(), 2000, 10000)")
}

/// A claim of the batch, then one fire of it, one segment per partition.
fn claim_and_fire(round: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE TEMP TABLE claimed_{round} ON COMMIT DROP AS
             SELECT * FROM queen.log_timers_claim_v1({ALL_SHARDS}, now(), 30000, {BATCH}, {BATCH})"
        ),
        format!(
            "WITH seg AS (
                 SELECT tenant_id, queue, partition, count(*)::integer AS n,
                        array_agg(timer_key ORDER BY visible_at, timer_key) AS keys,
                        array_agg(claim_token ORDER BY visible_at, timer_key) AS tokens
                 FROM claimed_{round} GROUP BY tenant_id, queue, partition)
             SELECT * FROM queen.log_timers_fire_v1(
                 (SELECT array_agg(tenant_id ORDER BY tenant_id, queue, partition) FROM seg),
                 (SELECT array_agg(queue ORDER BY tenant_id, queue, partition) FROM seg),
                 (SELECT array_agg(partition ORDER BY tenant_id, queue, partition) FROM seg),
                 (SELECT array_agg(n ORDER BY tenant_id, queue, partition) FROM seg),
                 (SELECT array_agg(k ORDER BY tenant_id, queue, partition, o) FROM seg, unnest(keys) WITH ORDINALITY AS u(k, o)),
                 (SELECT array_agg(t ORDER BY tenant_id, queue, partition, o) FROM seg, unnest(tokens) WITH ORDINALITY AS u(t, o)),
                 now())"
        ),
    ]
}

/// A schedule of `BATCH` new timers in the queue, in one call.
fn apply(round: &str) -> String {
    format!(
        "SELECT queen.log_timers_apply_v1('t0',
             (SELECT jsonb_agg(jsonb_build_object('op', 'schedule', 'queue', 'q0', 'timerKey', 'a{round}-' || g,
                                                  'delayMs', 600000, 'payload', 1, 'partition', 'p' || (g % 8)))
              FROM generate_series(1, {BATCH}) AS g),
             now())"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hot_calls_read_their_batch_not_the_backlog_whatever_the_plans_were_made_on() {
    let db = TestDb::new().await;
    let mut session = db.connection().await;
    // Statistics of an empty table, and nothing to refresh them (or to invalidate the plans).
    sqlx::raw_sql(
        "ALTER TABLE queen.log_timers SET (autovacuum_enabled = false); ANALYZE queen.log_timers",
    )
    .execute(&mut session)
    .await
    .unwrap();
    // Warm the session on a nearly empty table: past the five custom plans after which
    // PL/pgSQL settles on a generic one.
    for round in 0..8 {
        let r = format!("w{round}");
        let mut statements = vec![insert(3, &format!("{r}c-"), "-1 second")];
        statements.extend(claim_and_fire(&r));
        statements.push(insert(3, &format!("{r}t-"), "-1 second"));
        statements.push(take());
        statements.push(probe());
        statements.push(apply(&r));
        rows_read(&mut session, &statements).await;
    }
    // The backlog grows under the session's plans.
    rows_read(&mut session, &[insert(PENDING, "pending-", "7 days")]).await;

    let limit = ROWS_PER_TIMER * BATCH;
    let mut reads = Vec::new();
    for round in 0..3 {
        let r = format!("m{round}");
        rows_read(
            &mut session,
            &[insert(BATCH, &format!("{r}c-"), "-1 second")],
        )
        .await;
        reads.push(("probe", rows_read(&mut session, &[probe()]).await));
        reads.push((
            "claim + fire",
            rows_read(&mut session, &claim_and_fire(&r)).await,
        ));
        rows_read(
            &mut session,
            &[insert(BATCH, &format!("{r}t-"), "-1 second")],
        )
        .await;
        reads.push(("take", rows_read(&mut session, &[take()]).await));
        reads.push(("apply", rows_read(&mut session, &[apply(&r)]).await));
    }
    let over: Vec<_> = reads.iter().filter(|(_, n)| *n > limit).collect();
    assert!(
        over.is_empty(),
        "calls that read more than {limit} rows of log_timers for a batch of {BATCH} with {PENDING} pending: {over:?} (all: {reads:?})"
    );
    // Every due timer fired: the calls did their work, not merely little of it.
    let due: i64 =
        sqlx::query_scalar("SELECT count(*) FROM queen.log_timers WHERE deliver_at <= now()")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(due, 0);
    let fired: i64 =
        sqlx::query_scalar("SELECT count(*) FROM queen.log_messages WHERE txn LIKE 'm%'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(fired, 3 * 2 * BATCH);
}
