//! The [`Store`] port over PostgreSQL, with sqlx: the only file of the library that knows sqlx
//! (with [`crate::schema`], which applies `sql/`).
//!
//! Every call runs under a server-side `statement_timeout` (set once per connection as a startup
//! option, so it costs no round trip), which cancels a runaway statement inside the server. The
//! client waits a little longer than that; if even that passes (the server or the network stopped
//! answering), the connection is closed rather than returned to the pool, because its state is
//! unknown, and the server, which checks for its client every `CLIENT_CHECK_INTERVAL` while a
//! statement runs, aborts the statement. Either way the caller gets a transient error.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{Acquire, ConnectOptions, Connection, PgPool, Postgres, Row, Transaction};
use uuid::Uuid;

use crate::admission::{Maintenance, Slot};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::floors::{FloorPolicy, Floors, HeadFloors};
use crate::port::{Store, TimerTx};
use crate::types::{
    ApplyResult, ClaimRequest, Claimed, ClaimedTimer, Destination, ExpireStep, ExpiredKv,
    FailCause, FailOutcome, FailRequest, FireCall, Probe, ProbeRequest, SegmentOutcome,
    SegmentResult, ShardOrder, Switch, SwitchStates, TakeRequest, Taken, TakenDestination, TimerOp,
    TimerRef, UsageStep,
};

/// How much longer than the server's statement timeout the client waits before giving the
/// connection up. Not measured.
pub const CLIENT_GRACE: Duration = Duration::from_secs(2);

/// How often a running statement checks that its client is still connected (PostgreSQL ≥ 14).
/// Not measured; a poll of the socket this often costs nothing measurable.
pub const CLIENT_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// Converts a sqlx error into the crate's error, keeping the SQLSTATE and the error itself as
/// the source.
pub fn database_error(error: sqlx::Error, context: &str) -> Error {
    let (sqlstate, message) = match error.as_database_error() {
        Some(db) => (
            db.code().map(|code| code.into_owned()),
            db.message().to_owned(),
        ),
        None => (None, error.to_string()),
    };
    Error::database_from(sqlstate, message, context.to_owned(), error)
}

/// Connection options for `url` with the sweeper's per-session settings.
pub fn connect_options(
    url: &str,
    statement_timeout: Duration,
    application_name: &str,
) -> Result<PgConnectOptions> {
    let options = PgConnectOptions::from_str(url)
        .map_err(|e| Error::Config(format!("the database URL is not a PostgreSQL URL: {e}")))?;
    Ok(options.application_name(application_name).options([
        (
            "statement_timeout",
            statement_timeout.as_millis().to_string(),
        ),
        // When the client gives up first (the network, not the server, stalled), closing the
        // socket is not enough: a backend waiting on a lock would notice only when it next
        // writes, after committing. This makes it look for its client while it runs, and abort.
        (
            "client_connection_check_interval",
            CLIENT_CHECK_INTERVAL.as_millis().to_string(),
        ),
    ]))
}

/// The sweeper's store over a PostgreSQL pool.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    client_timeout: Duration,
    statement_timeout: Duration,
    floors: Arc<HeadFloors>,
}

impl PgStore {
    /// Opens a pool of `connections` on `url` for a broker called `identity`.
    pub async fn connect(
        url: &str,
        config: &Config,
        identity: &str,
        connections: u32,
    ) -> Result<PgStore> {
        let options = connect_options(
            url,
            config.statement_timeout(),
            &format!("queen-sweeper:{identity}"),
        )?;
        // One direct connection first: the pool would retry until its timeout and then report
        // only that it timed out, hiding "connection refused" or "password authentication failed".
        let first =
            tokio::time::timeout(config.statement_timeout() + CLIENT_GRACE, options.connect())
                .await
                .map_err(|_| Error::Timeout {
                    context: "connecting to the database".into(),
                    after_ms: (config.statement_timeout() + CLIENT_GRACE).as_millis() as u64,
                })?
                .map_err(|e| database_error(e, "connecting to the database"))?;
        let _ = first.close().await;
        let pool = PgPoolOptions::new()
            .max_connections(connections.max(1))
            .acquire_timeout(config.statement_timeout() + CLIENT_GRACE)
            .connect_with(options)
            .await
            .map_err(|e| database_error(e, "connecting to the database"))?;
        Ok(PgStore::with_floors(
            pool,
            config.statement_timeout(),
            config.head_floors(),
        ))
    }

    /// Wraps an existing pool. Its connections should carry `statement_timeout` (see
    /// [`connect_options`]); the client-side timeout applies either way.
    /// The head floors are the default configuration's ([`Config::head_floors`]).
    pub fn from_pool(pool: PgPool, statement_timeout: Duration) -> PgStore {
        PgStore::with_floors(pool, statement_timeout, Config::default().head_floors())
    }

    fn with_floors(pool: PgPool, statement_timeout: Duration, policy: FloorPolicy) -> PgStore {
        PgStore {
            pool,
            client_timeout: statement_timeout + CLIENT_GRACE,
            statement_timeout,
            floors: Arc::new(HeadFloors::new(policy)),
        }
    }

    /// The same pool with fresh head floors under `policy` (see [`crate::HeadFloors`]).
    pub fn with_head_floors(self, policy: FloorPolicy) -> PgStore {
        PgStore {
            floors: Arc::new(HeadFloors::new(policy)),
            ..self
        }
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The server-side statement timeout its connections carry.
    pub fn statement_timeout(&self) -> Duration {
        self.statement_timeout
    }

    /// Opens a transaction for the schedule seam.
    pub async fn begin_timer_tx(&self) -> Result<PgTimerTx<'static>> {
        let tx = self
            .pool
            .begin()
            .await
            .map_err(|e| database_error(e, "beginning a schedule transaction"))?;
        Ok(PgTimerTx { tx })
    }

    /// Runs `query` on a pooled connection under the client timeout. A connection whose call
    /// timed out on the client side is closed, not reused. The broker's API reads use it too.
    pub async fn call<T>(
        &self,
        context: &'static str,
        query: impl for<'c> FnOnce(&'c mut sqlx::PgConnection) -> BoxFuture<'c, Result<T, sqlx::Error>>,
    ) -> Result<T> {
        let mut connection = self
            .pool
            .acquire()
            .await
            .map_err(|e| database_error(e, context))?;
        match tokio::time::timeout(self.client_timeout, query(&mut connection)).await {
            Ok(result) => result.map_err(|e| database_error(e, context)),
            Err(_) => {
                connection.close_on_drop();
                Err(Error::Timeout {
                    context: context.to_owned(),
                    after_ms: self.client_timeout.as_millis() as u64,
                })
            }
        }
    }
}

fn shard_array(shards: &ShardOrder) -> Vec<i32> {
    shards.as_slice().iter().map(|&s| i32::from(s)).collect()
}

fn clamp_i32(value: u64) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

fn non_negative(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProbeJson {
    next_in_ms: Option<i64>,
    due: i64,
    due_capped: bool,
    late_ms: i64,
    schedule_enabled: bool,
    fire_enabled: bool,
    kv_expired: Option<i64>,
    kv_expired_capped: Option<bool>,
    kv_lag_ms: Option<i64>,
    floors: Option<Floors>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExpireJson {
    deleted: i64,
    done: bool,
    unpruned: i64,
    unpruned_capped: bool,
    lag_ms: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UsageJson {
    tenants: i64,
    zeroed: i64,
    done: bool,
    last_tenant: Option<String>,
}

fn decode_json<T: for<'de> Deserialize<'de>>(value: serde_json::Value, context: &str) -> Result<T> {
    serde_json::from_value(value).map_err(|e| {
        Error::database(
            None,
            format!("unexpected answer shape: {e}"),
            context.to_owned(),
        )
    })
}

fn claimed_timer(row: &PgRow) -> Result<ClaimedTimer, sqlx::Error> {
    Ok(ClaimedTimer {
        destination: Destination {
            tenant: row.try_get(0)?,
            queue: row.try_get(1)?,
            partition: row.try_get(3)?,
        },
        timer_key: row.try_get(2)?,
        token: row.try_get(4)?,
        attempts: u32::try_from(row.try_get::<i32, _>(5)?).unwrap_or(0),
        late_ms: non_negative(row.try_get(6)?),
        payload_bytes: non_negative(row.try_get(7)?),
    })
}

fn taken_destination(row: &PgRow) -> Result<TakenDestination, sqlx::Error> {
    let late_ms: Vec<i64> = row.try_get(4)?;
    Ok(TakenDestination {
        destination: Destination {
            tenant: row.try_get(0)?,
            queue: row.try_get(1)?,
            partition: row.try_get(2)?,
        },
        first_offset: non_negative(row.try_get(3)?),
        late_ms: late_ms.into_iter().map(non_negative).collect(),
    })
}

/// The fire's arrays: per segment (tenant, queue, partition, size), per row (key, token).
struct FireArrays {
    tenants: Vec<String>,
    queues: Vec<String>,
    partitions: Vec<String>,
    sizes: Vec<i32>,
    keys: Vec<String>,
    tokens: Vec<Uuid>,
}

impl FireArrays {
    fn of(call: &FireCall) -> FireArrays {
        let mut arrays = FireArrays {
            tenants: Vec::new(),
            queues: Vec::new(),
            partitions: Vec::new(),
            sizes: Vec::new(),
            keys: Vec::new(),
            tokens: Vec::new(),
        };
        for segment in &call.segments {
            arrays.tenants.push(segment.destination.tenant.clone());
            arrays.queues.push(segment.destination.queue.clone());
            arrays
                .partitions
                .push(segment.destination.partition.clone());
            arrays
                .sizes
                .push(i32::try_from(segment.timers.len()).expect("a segment fits a claim batch"));
            for held in &segment.timers {
                arrays.keys.push(held.timer_key.clone());
                arrays.tokens.push(held.token);
            }
        }
        arrays
    }
}

fn assert_fire_call_well_formed(call: &FireCall) {
    let mut destinations = std::collections::HashSet::new();
    for segment in &call.segments {
        assert!(
            !segment.timers.is_empty(),
            "a fire segment must hold timers"
        );
        assert!(
            destinations.insert(&segment.destination),
            "a destination must be one segment per fire call"
        );
    }
}

impl Store for PgStore {
    async fn probe(&self, _slot: &Slot<Maintenance>, request: &ProbeRequest) -> Result<Probe> {
        let shards = shard_array(&request.shards);
        let (due_cap, kv_cap) = (
            clamp_i32(u64::from(request.due_cap)),
            clamp_i32(u64::from(request.kv_cap)),
        );
        let sent = self.floors.for_probe(crate::clock::tokio_now());
        let (read_from, margin_ms) = (sent.read_from.clone(), sent.margin_ms);
        let value: serde_json::Value = self
            .call("probe", move |c| {
                Box::pin(
                    sqlx::query_scalar("SELECT queen.sweeper_probe_v1($1, now(), $2, $3, $4, $5)")
                        .bind(shards)
                        .bind(due_cap)
                        .bind(kv_cap)
                        .bind(read_from)
                        .bind(margin_ms)
                        .fetch_one(c),
                )
            })
            .await?;
        let mut probe: ProbeJson = decode_json(value, "probe")?;
        self.floors
            .probed(&sent, probe.floors.take(), crate::clock::tokio_now());
        let kv_expired = match (probe.kv_expired, probe.kv_expired_capped, probe.kv_lag_ms) {
            (Some(expired), Some(capped), Some(lag_ms)) => Some(ExpiredKv {
                expired: non_negative(expired),
                capped,
                lag_ms: non_negative(lag_ms),
            }),
            _ => None,
        };
        Ok(Probe {
            next_in_ms: probe.next_in_ms.map(non_negative),
            due: u32::try_from(probe.due).unwrap_or(u32::MAX),
            due_capped: probe.due_capped,
            late_ms: non_negative(probe.late_ms),
            switches: SwitchStates {
                schedule_enabled: probe.schedule_enabled,
                fire_enabled: probe.fire_enabled,
            },
            kv_expired,
        })
    }

    async fn claim(&self, _slot: &Slot<Maintenance>, request: &ClaimRequest) -> Result<Claimed> {
        let shards = shard_array(&request.shards);
        let (fair_tenants, fair_after) = request
            .fair
            .as_ref()
            .map_or((0, None), |f| (f.tenants, f.after.clone()));
        let (lease, max_rows, per_tenant) = (
            clamp_i32(request.lease.as_millis() as u64),
            clamp_i32(u64::from(request.max_rows)),
            clamp_i32(u64::from(request.per_tenant)),
        );
        let floors = self.floors.for_pick();
        let rows = self
            .call("claim", move |c| {
                Box::pin(
                    sqlx::query(
                        "SELECT tenant_id, queue, timer_key, partition, claim_token, attempts, late_ms, \
                                octet_length(payload)::bigint, fair_next \
                         FROM queen.log_timers_claim_v1($1, now(), $2, $3, $4, $5, $6, $7)",
                    )
                    .bind(shards)
                    .bind(lease)
                    .bind(max_rows)
                    .bind(per_tenant)
                    .bind(clamp_i32(u64::from(fair_tenants)))
                    .bind(fair_after)
                    .bind(floors)
                    .fetch_all(c),
                )
            })
            .await?;
        let claimed = rows
            .iter()
            .map(claimed_timer)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| database_error(e, "claim"))?;
        let fair_after = match (&request.fair, rows.first()) {
            (Some(_), Some(first)) => first
                .try_get::<Option<String>, _>(8)
                .map_err(|e| database_error(e, "claim"))?,
            _ => None,
        };
        let tokens: std::collections::HashSet<Uuid> = claimed.iter().map(|c| c.token).collect();
        assert_eq!(
            tokens.len(),
            claimed.len(),
            "every claimed row carries its own token"
        );
        Ok(Claimed {
            rows: claimed,
            fair_after,
        })
    }

    async fn take(&self, _slot: &Slot<Maintenance>, request: &TakeRequest) -> Result<Taken> {
        let shards = shard_array(&request.shards);
        let (fair_tenants, fair_after) = request
            .fair
            .as_ref()
            .map_or((0, None), |f| (f.tenants, f.after.clone()));
        let (max_rows, per_tenant) = (
            clamp_i32(u64::from(request.max_rows)),
            clamp_i32(u64::from(request.per_tenant)),
        );
        let max_bytes = i64::try_from(request.max_bytes).unwrap_or(i64::MAX);
        let row_overhead = clamp_i32(request.row_overhead);
        let floors = self.floors.for_pick();
        let skip_held = request.skip_held_partitions;
        let due_ms_ago = clamp_i32(request.due_ms_ago);
        let due_within_ms = request.due_within_ms.map(clamp_i32);
        let rows = self
            .call("take", move |c| {
                Box::pin(
                    sqlx::query(
                        "SELECT tenant_id, queue, partition, first_offset, late_ms, fair_next \
                         FROM queen.log_timers_take_v1($1, now(), $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                    )
                    .bind(shards)
                    .bind(max_rows)
                    .bind(per_tenant)
                    .bind(clamp_i32(u64::from(fair_tenants)))
                    .bind(fair_after)
                    .bind(max_bytes)
                    .bind(row_overhead)
                    .bind(floors)
                    .bind(skip_held)
                    .bind(due_ms_ago)
                    .bind(due_within_ms)
                    .fetch_all(c),
                )
            })
            .await?;
        let destinations = rows
            .iter()
            .map(taken_destination)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| database_error(e, "take"))?;
        let fair_after = match (&request.fair, rows.first()) {
            (Some(_), Some(first)) => first
                .try_get::<Option<String>, _>(5)
                .map_err(|e| database_error(e, "take"))?,
            _ => None,
        };
        Ok(Taken {
            destinations,
            fair_after,
        })
    }

    async fn fire(
        &self,
        _slot: &Slot<Maintenance>,
        call: &FireCall,
    ) -> Result<Vec<SegmentOutcome>> {
        assert_fire_call_well_formed(call);
        let a = FireArrays::of(call);
        let rows = self
            .call("fire", move |c| {
                Box::pin(
                    sqlx::query(
                        "SELECT segment, result, timers, first_offset \
                         FROM queen.log_timers_fire_v1($1, $2, $3, $4, $5, $6, now())",
                    )
                    .bind(a.tenants)
                    .bind(a.queues)
                    .bind(a.partitions)
                    .bind(a.sizes)
                    .bind(a.keys)
                    .bind(a.tokens)
                    .fetch_all(c),
                )
            })
            .await?;
        rows.iter()
            .map(|row| -> Result<SegmentOutcome, sqlx::Error> {
                let result: String = row.try_get(1)?;
                let first_offset: Option<i64> = row.try_get(3)?;
                Ok(SegmentOutcome {
                    segment: usize::try_from(row.try_get::<i32, _>(0)?).unwrap_or(usize::MAX),
                    result: match (result.as_str(), first_offset) {
                        ("fired", Some(offset)) => SegmentResult::Fired {
                            first_offset: non_negative(offset),
                        },
                        _ => SegmentResult::Stale,
                    },
                    timers: u32::try_from(row.try_get::<i32, _>(2)?).unwrap_or(0),
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| database_error(e, "fire"))
    }

    async fn fail(
        &self,
        _slot: &Slot<Maintenance>,
        request: &FailRequest,
    ) -> Result<Vec<FailOutcome>> {
        let rows = &request.rows;
        let tenants: Vec<String> = rows.iter().map(|r| r.timer.tenant.clone()).collect();
        let queues: Vec<String> = rows.iter().map(|r| r.timer.queue.clone()).collect();
        let keys: Vec<String> = rows.iter().map(|r| r.timer.timer_key.clone()).collect();
        let tokens: Vec<Uuid> = rows.iter().map(|r| r.timer.token).collect();
        let backoff: Vec<i32> = rows
            .iter()
            .map(|r| clamp_i32(r.backoff.as_millis() as u64))
            .collect();
        let error = request.error.clone();
        let transient = request.cause == FailCause::Transient;
        let max_attempts = clamp_i32(u64::from(request.max_attempts));
        let rows = self
            .call("fail", move |c| {
                Box::pin(
                    sqlx::query(
                        "SELECT tenant_id, queue, timer_key, attempts, exhausted \
                         FROM queen.log_timers_fail_v1($1, $2, $3, $4, $5, $6, $7, $8, now())",
                    )
                    .bind(tenants)
                    .bind(queues)
                    .bind(keys)
                    .bind(tokens)
                    .bind(backoff)
                    .bind(error)
                    .bind(transient)
                    .bind(max_attempts)
                    .fetch_all(c),
                )
            })
            .await?;
        rows.iter()
            .map(|row| -> Result<FailOutcome, sqlx::Error> {
                Ok(FailOutcome {
                    tenant: row.try_get(0)?,
                    queue: row.try_get(1)?,
                    timer_key: row.try_get(2)?,
                    attempts: u32::try_from(row.try_get::<i32, _>(3)?).unwrap_or(0),
                    exhausted: row.try_get(4)?,
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| database_error(e, "fail"))
    }

    async fn dlq(&self, _slot: &Slot<Maintenance>, rows: &[TimerRef]) -> Result<u64> {
        let tenants: Vec<String> = rows.iter().map(|r| r.tenant.clone()).collect();
        let queues: Vec<String> = rows.iter().map(|r| r.queue.clone()).collect();
        let keys: Vec<String> = rows.iter().map(|r| r.timer_key.clone()).collect();
        let tokens: Vec<Uuid> = rows.iter().map(|r| r.token).collect();
        let archived: i64 = self
            .call("dlq", move |c| {
                Box::pin(
                    sqlx::query_scalar(
                        "SELECT count(*) FROM queen.log_timers_dlq_v1($1, $2, $3, $4, now())",
                    )
                    .bind(tenants)
                    .bind(queues)
                    .bind(keys)
                    .bind(tokens)
                    .fetch_one(c),
                )
            })
            .await?;
        Ok(non_negative(archived))
    }

    async fn kv_expire_step(
        &self,
        _slot: &Slot<Maintenance>,
        shards: &ShardOrder,
        max_rows: u32,
    ) -> Result<ExpireStep> {
        let shards = shard_array(shards);
        let value: serde_json::Value = self
            .call("prune", move |c| {
                Box::pin(
                    sqlx::query_scalar("SELECT queen.kv_expire_step_v1($1, now(), $2)")
                        .bind(shards)
                        .bind(clamp_i32(u64::from(max_rows)))
                        .fetch_one(c),
                )
            })
            .await?;
        let step: ExpireJson = decode_json(value, "prune")?;
        Ok(ExpireStep {
            deleted: non_negative(step.deleted),
            done: step.done,
            unpruned: non_negative(step.unpruned),
            unpruned_capped: step.unpruned_capped,
            lag_ms: non_negative(step.lag_ms),
        })
    }

    async fn usage_step(
        &self,
        _slot: &Slot<Maintenance>,
        after_tenant: Option<&str>,
        max_tenants: u32,
    ) -> Result<UsageStep> {
        let after = after_tenant.map(str::to_owned);
        let value: serde_json::Value = self
            .call("usage", move |c| {
                Box::pin(
                    sqlx::query_scalar("SELECT queen.kv_usage_step_v1($1, now(), $2)")
                        .bind(after)
                        .bind(clamp_i32(u64::from(max_tenants)))
                        .fetch_one(c),
                )
            })
            .await?;
        let step: UsageJson = decode_json(value, "usage")?;
        Ok(UsageStep {
            tenants: u32::try_from(step.tenants).unwrap_or(0),
            zeroed: u32::try_from(step.zeroed).unwrap_or(0),
            done: step.done,
            last_tenant: step.last_tenant,
        })
    }

    async fn read_switches(&self, _slot: &Slot<Maintenance>) -> Result<SwitchStates> {
        let (schedule, fire): (Option<serde_json::Value>, Option<serde_json::Value>) = self
            .call("switches", |c| {
                Box::pin(
                    sqlx::query_as(
                        "SELECT queen.system_state_get_v1('timers_schedule_enabled'), \
                                queen.system_state_get_v1('timers_fire_enabled')",
                    )
                    .fetch_one(c),
                )
            })
            .await?;
        // A missing or malformed row means "on": a switch is an operator's explicit act.
        let enabled =
            |value: Option<serde_json::Value>| value.and_then(|v| v.as_bool()).unwrap_or(true);
        Ok(SwitchStates {
            schedule_enabled: enabled(schedule),
            fire_enabled: enabled(fire),
        })
    }

    async fn write_switch(
        &self,
        _slot: &Slot<Maintenance>,
        switch: Switch,
        enabled: bool,
    ) -> Result<()> {
        self.call("switches", move |c| {
            Box::pin(
                sqlx::query("SELECT queen.system_state_set_v1($1, $2, now())")
                    .bind(switch.key())
                    .bind(serde_json::Value::Bool(enabled))
                    .execute(c),
            )
        })
        .await?;
        Ok(())
    }
}

/// The schedule seam's transaction over PostgreSQL. [`PgTimerTx::connection`] gives the caller
/// the same transaction for its own work (the transaction wire).
#[derive(Debug)]
pub struct PgTimerTx<'c> {
    tx: Transaction<'c, Postgres>,
}

impl<'c> PgTimerTx<'c> {
    /// Wraps a transaction the caller already holds.
    pub fn from_transaction(tx: Transaction<'c, Postgres>) -> PgTimerTx<'c> {
        PgTimerTx { tx }
    }

    /// The transaction, for the caller's own statements.
    pub async fn connection(&mut self) -> Result<&mut sqlx::PgConnection> {
        self.tx
            .acquire()
            .await
            .map_err(|e| database_error(e, "schedule transaction"))
    }
}

impl TimerTx for PgTimerTx<'_> {
    async fn apply(&mut self, tenant: &str, ops: &[TimerOp]) -> Result<Vec<ApplyResult>> {
        let ops = serde_json::Value::Array(ops.iter().map(TimerOp::to_json).collect());
        let value: serde_json::Value =
            sqlx::query_scalar("SELECT queen.log_timers_apply_v1($1, $2, now())")
                .bind(tenant)
                .bind(ops)
                .fetch_one(&mut *self.tx)
                .await
                .map_err(|e| database_error(e, "schedule"))?;
        decode_json(value, "schedule")
    }

    async fn commit(self) -> Result<()> {
        self.tx
            .commit()
            .await
            .map_err(|e| database_error(e, "committing a schedule"))
    }
}
