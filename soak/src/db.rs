//! The soak's own use of the server: a fresh database per run (so sizes and counters belong to one
//! run, made and dropped by the test tier's `queen_testdb`), and the measurement queries. The
//! multi-line measurements are in `soak/sql/`; the short reads (WAL position, fire span, delivery
//! faults, the expectation rows) are inline below, and the loads' own calls in `run.rs`.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

use crate::error::Error;

/// Measurement queries, one per file.
pub const EXPECTED_TABLE: &str = include_str!("../sql/expected_table.sql");
pub const LATENESS: &str = include_str!("../sql/lateness.sql");
pub const SIZES: &str = include_str!("../sql/sizes.sql");
pub const MOVE_BATCH: &str = include_str!("../sql/move_batch.sql");
pub const BACKLOG: &str = include_str!("../sql/backlog.sql");
pub const BACKFILL_KEYS: &str = include_str!("../sql/backfill_keys.sql");

/// Up to when a run's fires count as delivered: the instant its drain gave up at the limit, or
/// no bound when it drained. At a 500 ms lease the naive drain left 3 793 of 12 000 due after its
/// 60 s limit, and the brokers, stopping one by one, fired 8 193 more within 3 s once the contention
/// was gone; counted, those read as a 172 s lateness (agreement at 44e8abf).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cutoff {
    Drained,
    GaveUpAt { epoch_s: f64 },
}

impl Cutoff {
    fn epoch_s(self) -> f64 {
        match self {
            Cutoff::Drained => f64::INFINITY,
            Cutoff::GaveUpAt { epoch_s } => epoch_s,
        }
    }
}

/// A database of one run, dropped when the run is done.
#[derive(Debug)]
pub struct RunDb {
    pub name: String,
    pub url: String,
    pub pool: PgPool,
    admin: PgConnectOptions,
}

fn admin_options(server_url: &str) -> Result<PgConnectOptions, Error> {
    PgConnectOptions::from_str(server_url)
        .map_err(Error::db("the database URL is not a PostgreSQL URL"))
}

/// Replaces the database of a URL.
pub fn url_for(server_url: &str, database: &str) -> Result<String, Error> {
    Ok(admin_options(server_url)?
        .database(database)
        .to_url_lossy()
        .to_string())
}

impl RunDb {
    /// Creates `soak_<label>` on the server and applies `sql/` to it.
    pub async fn create(server_url: &str, label: &str) -> Result<RunDb, Error> {
        let admin = admin_options(server_url)?;
        let name = format!("soak_{label}");
        let mut connection = admin
            .connect()
            .await
            .map_err(Error::db("cannot connect to the server"))?;
        queen_testdb::drop_database(&mut connection, &name)
            .await
            .map_err(Error::db(format!("cannot drop an old {name}")))?;
        queen_testdb::create_database(&mut connection, &name, None)
            .await
            .map_err(Error::db(format!(
                "cannot create {name} (does the user have CREATEDB?)"
            )))?;
        let _ = connection.close().await;
        let url = url_for(server_url, &name)?;
        let pool = PgPoolOptions::new()
            .max_connections(16)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(admin.clone().database(&name))
            .await
            .map_err(Error::db(format!("cannot connect to {name}")))?;
        queen_sweeper::apply_schema(&pool)
            .await
            .map_err(Error::Schema)?;
        sqlx::raw_sql(EXPECTED_TABLE)
            .execute(&pool)
            .await
            .map_err(Error::db("cannot create the expectation table"))?;
        Ok(RunDb {
            name,
            url,
            pool,
            admin,
        })
    }

    /// Drops the run's database.
    pub async fn drop_now(self) -> Result<(), Error> {
        self.pool.close().await;
        let mut connection = self
            .admin
            .connect()
            .await
            .map_err(Error::db(format!("cannot reconnect to drop {}", self.name)))?;
        queen_testdb::drop_database(&mut connection, &self.name)
            .await
            .map_err(Error::db(format!("cannot drop {}", self.name)))?;
        Ok(())
    }

    pub async fn wal_lsn(&self) -> Result<i64, Error> {
        sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")
            .fetch_one(&self.pool)
            .await
            .map_err(Error::db("cannot read the WAL position"))
    }

    pub async fn sizes(&self) -> Result<Sizes, Error> {
        let row: (i64, i64, i64, i64, i64, i64, i64, i64) = sqlx::query_as(SIZES)
            .fetch_one(&self.pool)
            .await
            .map_err(Error::db("cannot read the table sizes"))?;
        Ok(Sizes {
            timers_bytes: row.0,
            timers_index_bytes: row.1,
            kv_bytes: row.2,
            kv_index_bytes: row.3,
            messages_bytes: row.4,
            pending_timers: row.5,
            timer_hot_updates: row.6,
            timers_dead_rows: row.7,
        })
    }

    /// Fills the idempotency key table with `keys` keys created over the last `window_s`
    /// seconds, over `tenants` tenants, each answering `ops` timers ([`BACKFILL_KEYS`]); in
    /// slices, so the progress shows and no statement runs for minutes.
    pub async fn backfill_keys(
        &self,
        keys: u64,
        window_s: u64,
        tenants: u32,
        ops: u64,
    ) -> Result<(), Error> {
        const SLICE: u64 = 200_000;
        // One instant for every slice: the window ends where the fill began (the keys of the
        // fill's own length have expired by the load, and the first calls trim them, 16 each).
        let anchor: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT now()")
            .fetch_one(&self.pool)
            .await
            .map_err(Error::db("cannot read the server's clock"))?;
        for from in (0..keys).step_by(SLICE as usize) {
            if keys > SLICE {
                eprintln!("soak: idempotency keys {from} of {keys} written");
            }
            sqlx::query(BACKFILL_KEYS)
                .bind(keys as i64)
                .bind(window_s as f64)
                .bind(i64::from(tenants.max(1)))
                .bind(ops as i64)
                .bind(from as i64)
                .bind(SLICE as i64)
                .bind(anchor)
                .execute(&self.pool)
                .await
                .map_err(Error::db("cannot fill the idempotency key table"))?;
        }
        // A table that filled over a window was vacuumed and checkpointed along the way: its
        // rows hinted and visible to all, its pages on disk. Written in one go, it is neither,
        // and the first reads would set every hint bit and the checkpoint would flush the whole
        // fill during the measured load (14 400 s of keys, 2 GB: keyed p99 127 ms without these
        // two statements, 7.9 ms with them; one 6 s trial run each, before 99425d9).
        // (Two statements: VACUUM cannot run in the implicit transaction of a multi-statement
        // string.)
        for statement in ["VACUUM (ANALYZE) queen.api_idempotency", "CHECKPOINT"] {
            sqlx::raw_sql(statement)
                .execute(&self.pool)
                .await
                .map_err(Error::db(format!(
                    "cannot {statement} after filling the key table (CHECKPOINT needs a superuser or pg_checkpoint)"
                )))?;
        }
        Ok(())
    }

    /// Rows of the idempotency key table, and its bytes (heap, indexes, TOAST).
    pub async fn key_table(&self) -> Result<(i64, i64), Error> {
        sqlx::query_as(
            "SELECT count(*), pg_total_relation_size('queen.api_idempotency') FROM queen.api_idempotency",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(Error::db("cannot read the idempotency key table's size"))
    }

    /// Stores the delivery instants the load generators were promised (txn, deliver_at in epoch
    /// microseconds), for the lateness join.
    pub async fn record_expected(
        &self,
        txns: &[String],
        deliver_at_us: &[i64],
    ) -> Result<(), Error> {
        for (txn, at) in txns.chunks(10_000).zip(deliver_at_us.chunks(10_000)) {
            sqlx::query("INSERT INTO soak_expected (txn, deliver_at) SELECT t, to_timestamp(d / 1e6) FROM unnest($1::text[], $2::bigint[]) AS u(t, d) ON CONFLICT DO NOTHING")
                .bind(txn)
                .bind(at)
                .execute(&self.pool)
                .await
                .map_err(Error::db("cannot record expectations"))?;
        }
        Ok(())
    }

    /// Lateness of every fired timer (ms) with the second of the run it fired in, and the
    /// number of messages per txn above one (duplicates) and of expected txns never fired.
    pub async fn lateness(
        &self,
        run_start_epoch_s: f64,
        cutoff: Cutoff,
    ) -> Result<Vec<(f64, f64)>, Error> {
        sqlx::query_as(LATENESS)
            .bind(run_start_epoch_s)
            .bind(cutoff.epoch_s())
            .fetch_all(&self.pool)
            .await
            .map_err(Error::db("cannot read the lateness"))
    }

    /// The lateness (ms) of every fired timer of the stream (`s<n>` txns), not the backlog's.
    pub async fn stream_lateness(&self) -> Result<Vec<f64>, Error> {
        sqlx::query_scalar(
            "SELECT (extract(epoch FROM m.created_at - e.deliver_at) * 1000)::float8
             FROM queen.log_messages m JOIN soak_expected e USING (txn)
             WHERE e.txn ~ '^s[0-9]+$'",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(Error::db("cannot read the stream's lateness"))
    }

    /// Inserts `count` timers due `due_in_ms` from now (set-based), recording their promises.
    pub async fn backlog(
        &self,
        count: u32,
        due_in_ms: i64,
        payload_bytes: u32,
        spread: (u32, u32, u32),
        prefix: &str,
    ) -> Result<(), Error> {
        self.backlog_of(count, due_in_ms, (payload_bytes, false), spread, prefix)
            .await
    }

    /// [`RunDb::backlog`] with payloads of pseudo-random bytes when `payload.1` is set (the
    /// WAL then carries every byte: [`BACKLOG`]).
    pub async fn backlog_of(
        &self,
        count: u32,
        due_in_ms: i64,
        payload: (u32, bool),
        spread: (u32, u32, u32),
        prefix: &str,
    ) -> Result<(), Error> {
        let (payload_bytes, incompressible) = payload;
        sqlx::query(BACKLOG)
            .bind(i64::from(count))
            .bind(due_in_ms as f64)
            .bind(i32::try_from(payload_bytes).unwrap_or(i32::MAX))
            .bind(i64::from(spread.0.max(1)))
            .bind(i64::from(spread.1.max(1)))
            .bind(i64::from(spread.2.max(1)))
            .bind(prefix)
            .bind(incompressible)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(Error::db("cannot insert the backlog"))
    }

    /// Like [`RunDb::backlog`], but the timers are no promise of the run: they stay out of the
    /// lateness and the delivery checks (timers for next week, or rows held locked on purpose).
    pub async fn backlog_unpromised(
        &self,
        count: u32,
        due_in_ms: i64,
        payload_bytes: u32,
        spread: (u32, u32, u32),
        prefix: &str,
    ) -> Result<(), Error> {
        self.backlog(count, due_in_ms, payload_bytes, spread, prefix)
            .await?;
        sqlx::query("DELETE FROM soak_expected WHERE starts_with(txn, $1 || '-')")
            .bind(prefix)
            .execute(&self.pool)
            .await
            .map(|_| ())
            .map_err(Error::db(format!(
                "cannot leave the {prefix} timers out of the expectations"
            )))
    }

    /// The first and the last fired message the soak promised, epoch seconds (their distance is
    /// the drain time of a backlog, measured by the database, not by the sampler's steps).
    pub async fn fire_window_epoch_s(&self, cutoff: Cutoff) -> Result<Option<(f64, f64)>, Error> {
        let (first, last): (Option<f64>, Option<f64>) = sqlx::query_as(
            "SELECT extract(epoch FROM min(m.created_at))::float8, extract(epoch FROM max(m.created_at))::float8 FROM queen.log_messages m JOIN soak_expected e USING (txn) WHERE m.created_at <= to_timestamp($1)",
        )
        .bind(cutoff.epoch_s())
        .fetch_one(&self.pool)
        .await
        .map_err(Error::db("cannot read the fire window"))?;
        Ok(first.zip(last))
    }

    /// The earliest and the latest promised delivery instant, epoch seconds.
    pub async fn due_window_epoch_s(&self) -> Result<Option<(f64, f64)>, Error> {
        self.epoch_window(
            "SELECT extract(epoch FROM min(deliver_at))::float8, extract(epoch FROM max(deliver_at))::float8 FROM soak_expected",
            "cannot read the due window",
        )
        .await
    }

    /// A (min, max) pair of epoch seconds read by `sql`; `None` when there were no rows.
    /// The first and the last fired timer of the backlog (`backlog-` txns), epoch seconds: the
    /// backlog's own drain, apart from a stream fired beside it.
    pub async fn backlog_fire_window_epoch_s(&self) -> Result<Option<(f64, f64)>, Error> {
        self.epoch_window(
            "SELECT extract(epoch FROM min(m.created_at))::float8, extract(epoch FROM max(m.created_at))::float8 FROM queen.log_messages m JOIN soak_expected e USING (txn) WHERE starts_with(e.txn, 'backlog-')",
            "cannot read the backlog's fire window",
        )
        .await
    }

    async fn epoch_window(
        &self,
        sql: &'static str,
        what: &'static str,
    ) -> Result<Option<(f64, f64)>, Error> {
        let (first, last): (Option<f64>, Option<f64>) = sqlx::query_as(sql)
            .fetch_one(&self.pool)
            .await
            .map_err(Error::db(what))?;
        Ok(first.zip(last))
    }

    /// Timers fired so far (pushed messages, whose txn is their own message id, are not).
    pub async fn fired_count(&self) -> Result<u64, Error> {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM queen.log_messages WHERE txn <> message_id::text",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(Error::db("cannot count the fired messages"))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// Every fired timer's instant, epoch seconds, in order (not the pushes').
    pub async fn fired_epochs(&self) -> Result<Vec<f64>, Error> {
        sqlx::query_scalar(
            "SELECT extract(epoch FROM created_at)::float8 FROM queen.log_messages
             WHERE txn <> message_id::text ORDER BY created_at",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(Error::db("cannot read the fire instants"))
    }

    /// Terminates every backend of the run's brokers (their application name is their identity,
    /// `soak-broker-N`); answers how many.
    pub async fn terminate_brokers(&self) -> Result<i64, Error> {
        sqlx::query_scalar(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name LIKE 'soak-broker-%'",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(Error::db("cannot terminate the brokers' backends"))
    }

    /// Crashes the server: a backend SIGKILLs itself through `COPY ... TO PROGRAM` (superuser),
    /// so the postmaster ends every connection and replays its WAL, as after an immediate
    /// restart. The call loses its own connection; what it answered, in words.
    pub async fn crash_server(&self) -> String {
        let mut connection = match self.pool.acquire().await {
            Ok(connection) => connection,
            Err(e) => return format!("no connection to crash it from: {e}"),
        };
        match sqlx::raw_sql("COPY (SELECT 1) TO PROGRAM 'kill -9 $PPID'")
            .execute(&mut *connection)
            .await
        {
            Ok(_) => "the backend survived its own SIGKILL: no crash".to_owned(),
            Err(e) => {
                connection.close_on_drop();
                format!("its backend ended as expected: {e}")
            }
        }
    }

    /// Client connections to this database that began before `at` (epoch seconds) and are open
    /// now.
    pub async fn connections_begun_before(&self, at: f64) -> Result<i64, Error> {
        sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND backend_type = 'client backend'
               AND backend_start < to_timestamp($1)",
        )
        .bind(at)
        .fetch_one(&self.pool)
        .await
        .map_err(Error::db(
            "cannot count the connections older than the crash",
        ))
    }

    /// Every promised timer due at or before `at` (epoch seconds) that fired after it: (ms from
    /// `at` to its fire, its lateness in ms).
    pub async fn overdue_at(&self, at: f64) -> Result<Vec<(f64, f64)>, Error> {
        sqlx::query_as(
            "SELECT (extract(epoch FROM m.created_at) - $1)::float8 * 1000, \
                    (extract(epoch FROM m.created_at - e.deliver_at) * 1000)::float8 \
             FROM queen.log_messages m JOIN soak_expected e USING (txn) \
             WHERE e.deliver_at <= to_timestamp($1) AND m.created_at > to_timestamp($1)",
        )
        .bind(at)
        .fetch_all(&self.pool)
        .await
        .map_err(Error::db("cannot read the timers overdue at the kill"))
    }

    pub async fn delivery_faults(&self, cutoff: Cutoff) -> Result<(i64, i64, i64), Error> {
        sqlx::query_as(
            "SELECT (SELECT count(*) FROM (SELECT txn FROM queen.log_messages GROUP BY txn HAVING count(*) > 1) d),
                    (SELECT count(*) FROM soak_expected e WHERE NOT EXISTS (SELECT 1 FROM queen.log_messages m WHERE m.txn = e.txn AND m.created_at <= to_timestamp($1))),
                    (SELECT count(*) FROM soak_expected e JOIN queen.log_messages m USING (txn) WHERE m.created_at < e.deliver_at)",
        )
        .bind(cutoff.epoch_s())
        .fetch_one(&self.pool)
        .await
        .map_err(Error::db("cannot count the delivery faults"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Sizes {
    pub timers_bytes: i64,
    pub timers_index_bytes: i64,
    pub kv_bytes: i64,
    pub kv_index_bytes: i64,
    pub messages_bytes: i64,
    pub pending_timers: i64,
    pub timer_hot_updates: i64,
    /// Dead row versions in queen.log_timers (the statistics collector's count): what vacuum
    /// has not removed yet.
    #[serde(default)]
    pub timers_dead_rows: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_run_database_is_made_with_the_schema_and_dropped_after() {
        let server = queen_testdb::TestDb::empty().await;
        let label = format!("db_test_{}", std::process::id());
        let db = RunDb::create(&server.url(), &label).await.expect("created");
        let name = db.name.clone();
        assert_eq!(
            db.sizes()
                .await
                .expect("the schema is there")
                .pending_timers,
            0
        );
        db.drop_now().await.expect("dropped");
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
            .bind(&name)
            .fetch_one(&server.pool)
            .await
            .expect("pg_database reads");
        assert_eq!(left, 0, "{name} outlived its run");
    }

    #[tokio::test]
    async fn an_incompressible_backlog_is_stored_at_its_full_size() {
        let server = queen_testdb::TestDb::empty().await;
        let label = format!("db_backlog_{}", std::process::id());
        let db = RunDb::create(&server.url(), &label).await.expect("created");
        let size = 64 * 1024;
        db.backlog_of(4, -1, (size, false), (1, 1, 1), "plain")
            .await
            .unwrap();
        db.backlog_of(4, -1, (size, true), (1, 1, 1), "noise")
            .await
            .unwrap();
        let stored = |prefix: &'static str| {
            let pool = db.pool.clone();
            async move {
                let row: (i64, i64, i64, i64) = sqlx::query_as(
                    "SELECT min(octet_length(payload))::int8, max(pg_column_size(payload))::int8,
                            count(DISTINCT payload), count(*)
                     FROM queen.log_timers WHERE starts_with(txn, $1)",
                )
                .bind(prefix)
                .fetch_one(&pool)
                .await
                .unwrap();
                row
            }
        };
        let (len, stored_bytes, distinct, rows) = stored("plain-").await;
        assert_eq!((len, distinct, rows), (i64::from(size), 1, 4));
        assert!(
            stored_bytes < 4_096,
            "a repeated character compresses: {stored_bytes} B stored"
        );
        let (len, stored_bytes, distinct, rows) = stored("noise-").await;
        assert_eq!((len, distinct, rows), (i64::from(size), 4, 4));
        assert!(
            stored_bytes >= i64::from(size),
            "pseudo-random bytes do not compress: {stored_bytes} B stored"
        );
        db.drop_now().await.expect("dropped");
    }

    #[tokio::test]
    async fn a_backfilled_key_table_is_what_a_window_of_calls_leaves() {
        let server = queen_testdb::TestDb::empty().await;
        let label = format!("db_keys_{}", std::process::id());
        let db = RunDb::create(&server.url(), &label).await.expect("created");
        // Two slices and a part, over 3 tenants, answers of 5 timers, over the last 100 s.
        let keys = 450_001;
        db.backfill_keys(keys, 100, 3, 5).await.expect("filled");
        let (rows, bytes) = db.key_table().await.expect("sized");
        assert_eq!(rows, keys as i64);
        assert!(bytes > 450_001 * 100, "{bytes} B for {rows} keys");
        let (tenants, answers, span_s, newest_s): (i64, i64, f64, f64) = sqlx::query_as(
            "SELECT count(DISTINCT tenant), count(*) FILTER (WHERE jsonb_array_length(answer) = 5
                                                          AND answer->0->>'status' = 'scheduled'),
                    extract(epoch FROM max(created_at) - min(created_at))::float8,
                    extract(epoch FROM now() - max(created_at))::float8
             FROM queen.api_idempotency",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        assert_eq!((tenants, answers), (3, keys as i64));
        assert!(
            (99.99..=100.0).contains(&span_s),
            "the keys span one window, in every slice: {span_s}"
        );
        assert!(
            (0.0..60.0).contains(&newest_s),
            "the newest key is as old as the fill: {newest_s}"
        );
        // A key of the window's last second is still taken; the first second's has expired.
        let begin = "SELECT queen.api_idempotency_begin_v1($1, $2, sha256(convert_to($2, 'UTF8')), 100000, now())";
        let fresh = |key: &'static str| {
            let pool = db.pool.clone();
            async move {
                let answer: serde_json::Value = sqlx::query_scalar(begin)
                    .bind(format!(
                        "t{}",
                        key.rsplit('-').next().unwrap().parse::<u64>().unwrap() % 3
                    ))
                    .bind(key)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                answer["fresh"].as_bool().unwrap()
            }
        };
        assert!(!fresh("backfill-450000").await, "a live key replays");
        assert!(fresh("backfill-0").await, "an expired key is taken again");
        db.drop_now().await.expect("dropped");
    }
}
