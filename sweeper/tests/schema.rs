//! Applying `sql/` is idempotent: proven by catalogue snapshots, not assumed.

use queen_testdb::TestDb;
use sqlx::PgPool;

/// Everything about the `queen` schema that an apply could change, one line per fact, sorted:
/// relations with their kind and storage options, columns with type, nullability, default or
/// generated expression, identity and collation, indexes, constraints, and functions with their
/// signature, result, volatility and a digest of their body.
const CATALOGUE_SNAPSHOT: &str = r#"
SELECT string_agg(line, E'\n' ORDER BY line) FROM (
    SELECT format('relation %s kind=%s options=%s', c.relname, c.relkind, coalesce(array_to_string(c.reloptions, ','), '')) AS line
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'queen'
  UNION ALL
    SELECT format('column %s.%s %s notnull=%s generated=%s identity=%s expression=%s collation=%s',
                  c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                  a.attgenerated, a.attidentity, coalesce(pg_get_expr(d.adbin, d.adrelid), ''),
                  coalesce(co.collname, ''))
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    LEFT JOIN pg_collation co ON co.oid = a.attcollation
    WHERE n.nspname = 'queen' AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
    SELECT format('index %s', pg_get_indexdef(i.indexrelid))
    FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'queen'
  UNION ALL
    SELECT format('constraint %s.%s %s', c.relname, con.conname, pg_get_constraintdef(con.oid))
    FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'queen'
  UNION ALL
    SELECT format('function %s(%s) returns %s volatility=%s language=%s body=%s',
                  p.proname, pg_get_function_identity_arguments(p.oid), pg_get_function_result(p.oid),
                  p.provolatile, l.lanname, md5(p.prosrc))
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
    WHERE n.nspname = 'queen'
) AS facts
"#;

async fn snapshot(pool: &PgPool) -> String {
    sqlx::query_scalar::<_, Option<String>>(CATALOGUE_SNAPSHOT)
        .fetch_one(pool)
        .await
        .expect("catalogue snapshot")
        .unwrap_or_default()
}

#[tokio::test]
async fn applying_twice_to_a_fresh_database_leaves_an_identical_catalogue() {
    let db = TestDb::empty().await;
    assert_eq!(
        snapshot(&db.pool).await,
        "",
        "a fresh database has no queen schema"
    );

    queen_sweeper::apply_schema(&db.pool)
        .await
        .expect("first apply");
    let first = snapshot(&db.pool).await;
    queen_sweeper::apply_schema(&db.pool)
        .await
        .expect("second apply");
    let second = snapshot(&db.pool).await;
    assert_eq!(first, second);

    // The snapshot really covers what an apply could change (so the comparison above can fail).
    for fact in [
        "relation kv kind=r options=fillfactor=90,vacuum_truncate=off",
        "relation log_timers kind=r options=fillfactor=100,vacuum_truncate=off,autovacuum_vacuum_scale_factor=0,autovacuum_vacuum_threshold=2000,autovacuum_vacuum_cost_delay=0",
        "column log_timers.shard integer notnull=f generated=s identity= expression=((hashtextextended(timer_key, (0)::bigint) & (63)::bigint))::integer collation=",
        "column log_timers.visible_at timestamp with time zone notnull=f generated=s identity= expression=GREATEST(deliver_at, claimed_until) collation=",
        "column kv.key text notnull=t generated= identity= expression= collation=default",
        "index CREATE INDEX log_timers_shard_visible_idx ON queen.log_timers USING btree (shard, visible_at)",
        "index CREATE INDEX kv_shard_expires_idx ON queen.kv USING btree (shard, expires_at) WHERE (expires_at IS NOT NULL)",
        "function log_timers_claim_v1(p_shards integer[], p_now timestamp with time zone, p_lease_ms integer, p_max_rows integer, p_per_tenant integer, p_fair_tenants integer, p_fair_after text, p_floors bigint[])",
        "function kv_live_v1(p_expires_at timestamp with time zone, p_now timestamp with time zone) returns boolean volatility=i language=sql",
    ] {
        assert!(first.contains(fact), "snapshot lacks {fact:?}:\n{first}");
    }
}

#[tokio::test]
async fn a_database_cloned_from_the_template_matches_a_fresh_apply() {
    let fresh = TestDb::empty().await;
    queen_sweeper::apply_schema(&fresh.pool)
        .await
        .expect("apply");
    let cloned = TestDb::new().await;
    assert_eq!(snapshot(&fresh.pool).await, snapshot(&cloned.pool).await);
}

#[tokio::test]
async fn applying_to_a_populated_database_keeps_its_rows_and_its_catalogue() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    sqlx::query(
        r#"SELECT queen.log_timers_apply_v1('tenant-a', '[
               {"op": "schedule", "queue": "q", "timerKey": "k1", "delayMs": 60000, "payload": {"n": 1}},
               {"op": "schedule", "queue": "q", "timerKey": "k2", "delayMs": -5, "payload": "due"}]', now())"#,
    )
    .execute(pool)
    .await
    .expect("schedule");
    sqlx::query("SELECT * FROM queen.log_push_v1('tenant-a', 'q', 'p0', ARRAY['\\x01'::bytea], NULL, now())")
        .execute(pool)
        .await
        .expect("push");
    sqlx::query("SELECT queen.kv_put_v1('tenant-a', 'ns', 'key', '{\"v\": 1}', 60000, now())")
        .execute(pool)
        .await
        .expect("kv put");
    sqlx::query("SELECT queen.system_state_set_v1('timers_fire_enabled', 'false', now())")
        .execute(pool)
        .await
        .expect("switch off");

    let counts = "SELECT (SELECT count(*) FROM queen.log_timers), (SELECT count(*) FROM queen.log_messages), \
                  (SELECT count(*) FROM queen.kv), (SELECT value::text FROM queen.system_state WHERE key = 'timers_fire_enabled')";
    let before_rows: (i64, i64, i64, String) = sqlx::query_as(counts)
        .fetch_one(pool)
        .await
        .expect("counts");
    let before = snapshot(pool).await;

    queen_sweeper::apply_schema(pool)
        .await
        .expect("apply over data");

    let after_rows: (i64, i64, i64, String) = sqlx::query_as(counts)
        .fetch_one(pool)
        .await
        .expect("counts");
    assert_eq!(before_rows, (2, 1, 1, "false".to_owned()));
    assert_eq!(
        after_rows, before_rows,
        "an apply must not touch rows, nor reset an operator's switch"
    );
    assert_eq!(snapshot(pool).await, before);
}

#[tokio::test]
async fn concurrent_applies_from_several_brokers_all_succeed() {
    let db = TestDb::empty().await;
    let pools: Vec<PgPool> = futures_pools(&db, 4).await;
    let applies = pools.iter().map(queen_sweeper::apply_schema);
    for result in futures::future::join_all(applies).await {
        result.expect("every concurrent apply succeeds (losers of a race retry)");
    }
    let reference = TestDb::new().await;
    assert_eq!(snapshot(&db.pool).await, snapshot(&reference.pool).await);
}

async fn futures_pools(db: &TestDb, n: usize) -> Vec<PgPool> {
    let mut pools = Vec::with_capacity(n);
    for _ in 0..n {
        pools.push(db.pool_of(1).await);
    }
    pools
}

#[tokio::test]
async fn a_kv_table_made_with_jsonb_values_is_converted_to_their_text_once() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    sqlx::raw_sql(
        "ALTER TABLE queen.kv ALTER COLUMN value TYPE jsonb USING value::jsonb;
         INSERT INTO queen.kv (tenant_id, namespace, key, value, created_at, updated_at)
         VALUES ('t', 'ns', 'old', '{\"b\": 1, \"a\": [1.50]}'::jsonb, now(), now());",
    )
    .execute(pool)
    .await
    .expect("the table as it was made before");

    queen_sweeper::apply_schema(pool)
        .await
        .expect("apply over the old table");
    let converted = snapshot(pool).await;
    let (kind, value): (String, String) =
        sqlx::query_as("SELECT pg_typeof(value)::text, value FROM queen.kv WHERE key = 'old'")
            .fetch_one(pool)
            .await
            .expect("the converted row");
    assert_eq!(
        (kind.as_str(), value.as_str()),
        ("text", r#"{"a": [1.50], "b": 1}"#),
        "jsonb's text of the value, as kv_get_v1 answered it before"
    );
    assert!(
        converted.contains("column kv.value text notnull=t "),
        "{converted}"
    );

    queen_sweeper::apply_schema(pool)
        .await
        .expect("apply again");
    assert_eq!(
        snapshot(pool).await,
        converted,
        "converted once, then left alone"
    );
}
