//! The HTTP API's database calls, with sqlx: the only file of the API that knows sqlx.
//!
//! The API has a pool of its own (`QUEEN_API_POOL_SIZE` connections, application name
//! `queen-api:<identity>`), apart from the sweeper's, so a burst of requests cannot take the
//! connections the fire needs, and a slow fire cannot stall the API. Its connections carry the same
//! server-side `statement_timeout` as the sweeper's ([`connect_options`]), and every read here runs
//! under the same client timeout ([`PgStore::call`]).
//!
//! Schedules do not come through here: they go through the seam ([`queen_sweeper::Seam`]) on a
//! [`PgTimerTx`] from [`PgApi::begin_timer_tx`], which is how the wake gets rung after the commit.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{ConnectOptions, Connection};
use uuid::Uuid;

use queen_sweeper::{
    CLIENT_GRACE, Config, Error, PgStore, PgTimerTx, connect_options, database_error,
};

/// A timer as the API shows it. `payload` is present for a peek, absent in a list.
#[derive(Debug, Clone, PartialEq)]
pub struct TimerRow {
    pub queue: String,
    pub timer_key: String,
    pub partition: String,
    pub deliver_at: DateTime<Utc>,
    /// From the database's `now()` to `deliver_at`; negative when overdue.
    pub deliver_in_ms: i64,
    pub txn: String,
    pub message_id: Uuid,
    pub attempts: u32,
    pub last_error: Option<String>,
    /// `waiting`, `due`, `held` or `backoff` (see `sql/050_api_reads.sql`).
    pub state: String,
    pub payload_bytes: u64,
    pub payload: Option<Vec<u8>>,
}

/// A message of the log.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageRow {
    pub offset: u64,
    pub message_id: Uuid,
    pub txn: String,
    pub payload: Vec<u8>,
    pub created_at: DateTime<Utc>,
}

/// What `kv_put_v2` answered.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KvWritten {
    pub version: i64,
    #[serde(default)]
    pub expires_at: Option<String>,
    pub created: bool,
}

/// A live KV row, as `kv_get_v2` answers it.
#[derive(Debug)]
pub struct KvEntry {
    /// The JSON text the value was put as, byte for byte.
    pub value: Box<RawValue>,
    pub version: i64,
    pub expires_at: Option<DateTime<Utc>>,
}

/// What `api_idempotency_begin_v1` answered.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyTaken {
    /// The key is this call's: schedule, then store the answer.
    pub fresh: bool,
    /// Another call had it: whether with the same request, and what it answered.
    #[serde(default)]
    pub same_request: bool,
    #[serde(default)]
    pub answer: Value,
}

/// One page of a read: which rows, and how big.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub rows: u32,
    pub max_bytes: u64,
}

/// The API's side of PostgreSQL.
#[derive(Debug, Clone)]
pub struct PgApi {
    store: PgStore,
    /// For [`PgApi::probe`]: a connection of its own, outside the pool.
    probe_options: PgConnectOptions,
}

impl PgApi {
    /// Opens the API's pool of `connections` on `url` for a broker called `identity`.
    pub async fn connect(
        url: &str,
        config: &Config,
        identity: &str,
        connections: u32,
    ) -> Result<PgApi, Error> {
        let options = connect_options(
            url,
            config.statement_timeout(),
            &format!("queen-api:{identity}"),
        )?;
        let probe_options = connect_options(
            url,
            config.statement_timeout(),
            &format!("queen-api-probe:{identity}"),
        )?;
        let pool = PgPoolOptions::new()
            .max_connections(connections.max(1))
            .acquire_timeout(config.statement_timeout() + CLIENT_GRACE)
            .connect_with(options)
            .await
            .map_err(|e| database_error(e, "connecting the API's pool"))?;
        Ok(PgApi {
            store: PgStore::from_pool(pool, config.statement_timeout()),
            probe_options,
        })
    }

    /// A pool that connects on first use only, for tests of what happens before any call.
    #[cfg(test)]
    pub fn lazy(url: &str, statement_timeout: std::time::Duration) -> Result<PgApi, Error> {
        let options = connect_options(url, statement_timeout, "queen-api:lazy")?;
        Ok(PgApi {
            store: PgStore::from_pool(
                PgPoolOptions::new().connect_lazy_with(options.clone()),
                statement_timeout,
            ),
            probe_options: options,
        })
    }

    /// The pool as a [`queen_sweeper::Store`], for the kill switches.
    pub fn store(&self) -> &PgStore {
        &self.store
    }

    /// Opens a transaction for the schedule seam.
    pub async fn begin_timer_tx(&self) -> Result<PgTimerTx<'static>, Error> {
        self.store.begin_timer_tx().await
    }

    /// Whether the database answers and holds the schema this binary serves (the newest file's
    /// functions are there).
    pub async fn schema_ready(&self) -> Result<bool, Error> {
        self.store
            .call("health", |c| {
                Box::pin(
                    sqlx::query_scalar(
                        "SELECT to_regprocedure('queen.api_idempotency_finish_v1(text, text, jsonb)') IS NOT NULL",
                    )
                    .fetch_one(c),
                )
            })
            .await
    }

    /// Connects outside the pool and runs one statement: whether the server takes connections and
    /// answers, which the pool cannot tell quickly (its acquire retries connects until its
    /// timeout). The caller bounds it in time ([`crate::api::health`]).
    pub async fn probe(&self) -> Result<(), Error> {
        let mut connection = self
            .probe_options
            .connect()
            .await
            .map_err(|e| database_error(e, "health probe: connecting"))?;
        sqlx::query("SELECT 1")
            .execute(&mut connection)
            .await
            .map_err(|e| database_error(e, "health probe"))?;
        connection
            .close()
            .await
            .map_err(|e| database_error(e, "health probe: closing"))
    }

    /// Takes an idempotency key inside the schedule transaction `tx`
    /// (`sql/060_api_idempotency.sql`): whether the key is this call's, or what its first call
    /// answered.
    pub async fn idempotency_begin(
        tx: &mut PgTimerTx<'static>,
        tenant: &str,
        key: &str,
        request_sha256: &[u8],
        window_ms: u64,
    ) -> Result<KeyTaken, Error> {
        let connection = tx.connection().await?;
        let value: Value =
            sqlx::query_scalar("SELECT queen.api_idempotency_begin_v1($1, $2, $3, $4, now())")
                .bind(tenant)
                .bind(key)
                .bind(request_sha256)
                .bind(i64::try_from(window_ms).unwrap_or(i64::MAX))
                .fetch_one(connection)
                .await
                .map_err(|e| database_error(e, "idempotency key"))?;
        serde_json::from_value(value.clone())
            .map_err(|e| Error::database(None, format!("{e}: {value}"), "idempotency key".into()))
    }

    /// Stores the answer of the call that took `key`, before its transaction commits.
    pub async fn idempotency_finish(
        tx: &mut PgTimerTx<'static>,
        tenant: &str,
        key: &str,
        answer: &Value,
    ) -> Result<(), Error> {
        let connection = tx.connection().await?;
        sqlx::query("SELECT queen.api_idempotency_finish_v1($1, $2, $3)")
            .bind(tenant)
            .bind(key)
            .bind(answer)
            .execute(connection)
            .await
            .map(|_| ())
            .map_err(|e| database_error(e, "idempotency answer"))
    }

    pub async fn peek_timer(
        &self,
        tenant: &str,
        queue: &str,
        timer_key: &str,
    ) -> Result<Option<TimerRow>, Error> {
        let (tenant, queue, timer_key) =
            (tenant.to_owned(), queue.to_owned(), timer_key.to_owned());
        let row = self
            .store
            .call("peek", move |c| {
                Box::pin(
                    sqlx::query(
                        "SELECT queue, timer_key, partition, deliver_at, deliver_in_ms, txn, message_id, \
                                attempts, last_error, state, octet_length(payload)::bigint, payload \
                         FROM queen.log_timers_peek_v1($1, $2, $3, now())",
                    )
                    .bind(tenant)
                    .bind(queue)
                    .bind(timer_key)
                    .fetch_optional(c),
                )
            })
            .await?;
        row.as_ref()
            .map(|row| timer_row(row, true))
            .transpose()
            .map_err(|e| database_error(e, "peek"))
    }

    /// Timers of `queue` in key order after `after`.
    pub async fn list_timers(
        &self,
        tenant: &str,
        queue: &str,
        after: Option<&str>,
        rows: u32,
    ) -> Result<Vec<TimerRow>, Error> {
        let (tenant, queue) = (tenant.to_owned(), queue.to_owned());
        let after = after.map(str::to_owned);
        let limit = i32::try_from(rows).unwrap_or(i32::MAX);
        let rows = self
            .store
            .call("list", move |c| {
                Box::pin(
                    sqlx::query(
                        "SELECT queue, timer_key, partition, deliver_at, deliver_in_ms, txn, message_id, \
                                attempts, last_error, state, payload_bytes \
                         FROM queen.log_timers_list_v1($1, $2, $3, $4, now())",
                    )
                    .bind(tenant)
                    .bind(queue)
                    .bind(after)
                    .bind(limit)
                    .fetch_all(c),
                )
            })
            .await?;
        rows.iter()
            .map(|row| timer_row(row, false))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| database_error(e, "list"))
    }

    /// Messages of `(queue, partition)` from offset `from` on.
    pub async fn read_messages(
        &self,
        tenant: &str,
        queue: &str,
        partition: &str,
        from: u64,
        page: Page,
    ) -> Result<Vec<MessageRow>, Error> {
        let (tenant, queue, partition) =
            (tenant.to_owned(), queue.to_owned(), partition.to_owned());
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        let limit = i32::try_from(page.rows).unwrap_or(i32::MAX);
        let max_bytes = i64::try_from(page.max_bytes).unwrap_or(i64::MAX);
        let rows = self
            .store
            .call("messages", move |c| {
                Box::pin(
                    sqlx::query(
                        "SELECT log_offset, message_id, txn, payload, created_at \
                         FROM queen.log_messages_read_v1($1, $2, $3, $4, $5, $6)",
                    )
                    .bind(tenant)
                    .bind(queue)
                    .bind(partition)
                    .bind(from)
                    .bind(limit)
                    .bind(max_bytes)
                    .fetch_all(c),
                )
            })
            .await?;
        rows.iter()
            .map(|row| -> Result<MessageRow, sqlx::Error> {
                Ok(MessageRow {
                    offset: u64::try_from(row.try_get::<i64, _>(0)?).unwrap_or(0),
                    message_id: row.try_get(1)?,
                    txn: row.try_get(2)?,
                    payload: row.try_get(3)?,
                    created_at: row.try_get(4)?,
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| database_error(e, "messages"))
    }

    /// Writes `value`, the text of one JSON value, under `(namespace, key)`; `ttl_ms` `None`
    /// never expires.
    pub async fn kv_put(
        &self,
        tenant: &str,
        namespace: &str,
        key: &str,
        value: &RawValue,
        ttl_ms: Option<i64>,
    ) -> Result<KvWritten, Error> {
        let (tenant, namespace, key) = (tenant.to_owned(), namespace.to_owned(), key.to_owned());
        let value = value.get().to_owned();
        let answer: Value = self
            .store
            .call("kv_put", move |c| {
                Box::pin(
                    sqlx::query_scalar("SELECT queen.kv_put_v2($1, $2, $3, $4, $5, now())")
                        .bind(tenant)
                        .bind(namespace)
                        .bind(key)
                        .bind(value)
                        .bind(ttl_ms)
                        .fetch_one(c),
                )
            })
            .await?;
        decode(answer, "kv_put")
    }

    pub async fn kv_get(
        &self,
        tenant: &str,
        namespace: &str,
        key: &str,
    ) -> Result<Option<KvEntry>, Error> {
        let (tenant, namespace, key) = (tenant.to_owned(), namespace.to_owned(), key.to_owned());
        let row: Option<(String, i64, Option<DateTime<Utc>>)> = self
            .store
            .call("kv_get", move |c| {
                Box::pin(
                    sqlx::query_as(
                        "SELECT value, version, expires_at FROM queen.kv_get_v2($1, $2, $3, now())",
                    )
                    .bind(tenant)
                    .bind(namespace)
                    .bind(key)
                    .fetch_optional(c),
                )
            })
            .await?;
        row.map(|(value, version, expires_at)| {
            let value = RawValue::from_string(value).map_err(|e| {
                Error::database(
                    None,
                    format!("the stored value is not JSON text: {e}"),
                    "kv_get".into(),
                )
            })?;
            Ok(KvEntry {
                value,
                version,
                expires_at,
            })
        })
        .transpose()
    }

    /// Removes the row; whether a live one was removed.
    pub async fn kv_delete(&self, tenant: &str, namespace: &str, key: &str) -> Result<bool, Error> {
        let (tenant, namespace, key) = (tenant.to_owned(), namespace.to_owned(), key.to_owned());
        self.store
            .call("kv_delete", move |c| {
                Box::pin(
                    sqlx::query_scalar("SELECT queen.kv_delete_v1($1, $2, $3, now())")
                        .bind(tenant)
                        .bind(namespace)
                        .bind(key)
                        .fetch_one(c),
                )
            })
            .await
    }
}

/// Columns 0..=10 are those of `log_timers_peek_v1` / `_list_v1`; a peek adds the payload at 11.
fn timer_row(row: &PgRow, with_payload: bool) -> Result<TimerRow, sqlx::Error> {
    Ok(TimerRow {
        queue: row.try_get(0)?,
        timer_key: row.try_get(1)?,
        partition: row.try_get(2)?,
        deliver_at: row.try_get(3)?,
        deliver_in_ms: row.try_get(4)?,
        txn: row.try_get(5)?,
        message_id: row.try_get(6)?,
        attempts: u32::try_from(row.try_get::<i32, _>(7)?).unwrap_or(0),
        last_error: row.try_get(8)?,
        state: row.try_get(9)?,
        payload_bytes: u64::try_from(row.try_get::<i64, _>(10)?).unwrap_or(0),
        payload: if with_payload {
            Some(row.try_get(11)?)
        } else {
            None
        },
    })
}

/// An answer of the wrong shape means the database holds another version of the function than
/// the one this binary carries: a configuration problem, not one that a retry fixes.
fn decode<T: for<'de> Deserialize<'de>>(value: Value, context: &str) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| {
        Error::Config(format!(
            "{context}: unexpected answer shape ({e}); is the schema the one this binary carries?"
        ))
    })
}
