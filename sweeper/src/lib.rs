//! The sweeper of the Queen broker: one background task per broker that fires due timers out of
//! `queen.log_timers` into the log, prunes expired rows out of `queen.kv`, and rolls up usage.
//!
//! Where to start reading: `cycle` is the loop, phases A–D; everything else serves it. The
//! modules are private; what callers use is re-exported at the crate root.
//!
//! | module | owns |
//! |---|---|
//! | `types` | the domain types the port and the seam carry (a leaf: it imports no other module) |
//! | `port` | the port to PostgreSQL: [`Store`] for the cycle, [`TimerTx`] for the seam |
//! | `pg` | the port over PostgreSQL with sqlx: [`PgStore`], [`PgTimerTx`] |
//! | `floors` | the probe's head floors, past the dead rows a held snapshot keeps (the `pg` store's) |
//! | `cycle` | the loop: probe, drain, sub-clocks, sleep; [`Form`] and its [`Shipped`] form |
//! | `drain` | phase B: the pass and its budgets; its byte-capped plan, its fire, its failure policy |
//! | `subclock` | phase C: the usage rollup and the KV prune on their own gates; shedding; off on class 42 |
//! | `sleep` | phase D's length: the pure four-band function |
//! | `waker` | the local wake: the promised instant and its notification |
//! | `seam` | the schedule seam: a transaction that carries its own wake, rung only by its commit |
//! | `switches` | the two kill switches, mirrored to `queen.system_state` |
//! | `admission` | lanes and slots: a slot before a connection, never the reverse |
//! | `classify`, `error` | SQLSTATE → transient / config / permanent; the crate's one [`Error`] |
//! | `config` | every knob, its default and its validation |
//! | `metrics` | the Prometheus series |
//! | `schema` | applies `sql/`, idempotently |
//! | `clock` | the only module that reads a clock or draws randomness |
//!
//! The import graph has no circle: `types`, `classify` and `clock` import nothing of the crate;
//! `error` only `classify`; `port` only those and `admission`; the phases import the port, never
//! the other way round.

#![warn(missing_docs, unreachable_pub)]

mod admission;
mod classify;
pub mod clock;
mod config;
mod cycle;
mod drain;
mod error;
mod floors;
mod metrics;
mod pg;
mod port;
mod schema;
mod seam;
mod sleep;
mod subclock;
mod switches;
mod types;
mod waker;

pub use admission::{Ack, Admission, Lane, LaneSizes, Maintenance, Pop, Push, Slot};
pub use classify::{Class, classify};
pub use config::{Config, FORBIDDEN_SHARDS_VAR, Knob, knob};
pub use cycle::{
    FAIR_TENANTS_PER_PASS, Form, Jitter, PRESSURE_CALL_FRACTION, PassReport, SLOW_PRESSURE_LEVELS,
    Shipped, Sweeper, identity_shard,
};
pub use drain::failure::{
    FailedCall, PERMANENT_BACKOFF_BASE, PERMANENT_BACKOFF_MAX, RECORD_RETRY_FIRST,
    RECORD_RETRY_MAX, TRANSIENT_BACKOFF, backoff, respond_to_failure,
};
pub use drain::plan::{ROW_OVERHEAD_BYTES, fire_bytes, plan_fire_calls};
pub use drain::{DrainLimits, DrainReport, DrainStop, Drainer, Due};
pub use error::{Error, Result, Source};
pub use floors::{FloorPolicy, Floors, HeadFloors, ProbeFloors};
pub use metrics::{ClassLabel, KindLabel, Metrics, PhaseLabel, ResultLabel, SkipLabel};
pub use pg::{
    CLIENT_CHECK_INTERVAL, CLIENT_GRACE, PgStore, PgTimerTx, connect_options, database_error,
};
pub use port::{Store, TimerTx};
pub use schema::{
    FILES as SQL_FILES, MEASURED_NAPTIME_S, SqlFile, apply as apply_schema, autovacuum_advice,
    server_advice,
};
pub use seam::{Seam, SeamTx};
pub use sleep::{Bands, PassOutcome, sleep_for};
pub use subclock::{
    KV_ALARM_CAP, PRUNE_CALLS_PER_PASS, ROLLUP_STEPS_PER_PASS, ROLLUP_TENANTS_PER_STEP,
    SHED_PRUNE_AFTER, SHED_ROLLUP_AFTER, SlowPhase, SubClocks, SubclockInputs, SubclockReport,
};
pub use switches::Switches;
pub use types::{
    ApplyResult, ApplyStatus, ClaimRequest, Claimed, ClaimedTimer, Destination, ExpireStep,
    ExpiredKv, FailCause, FailOutcome, FailRequest, FailRow, FairRound, FireCall, HeldTimer,
    JsonText, Payload, Probe, ProbeRequest, SHARD_COUNT, Segment, SegmentOutcome, SegmentResult,
    ShardOrder, Switch, SwitchStates, TakeRequest, Taken, TakenDestination, TimerOp, TimerRef,
    UsageStep, stable_shard,
};
pub use waker::{Wake, Waker};
