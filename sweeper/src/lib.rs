//! The sweeper of the Queen broker: one background task per broker that fires due timers out of
//! `queen.log_timers` into the log, prunes expired rows out of `queen.kv`, and rolls up usage.
//!
//! Where to start reading: [`cycle`] is the loop, phases A–D; everything else serves it.
//!
//! | module | owns |
//! |---|---|
//! | [`cycle`] | the loop: probe, drain, sub-clocks, sleep; the starting shard from the broker's identity |
//! | [`drain`] | phase B: claim and fire in the same iteration, the lease budget, byte-capped fire calls, failures |
//! | [`subclock`] | phase C: the usage rollup and the KV prune on their own gates; shedding; switching off on class 42 |
//! | [`sleep`] | phase D's length: the pure four-band function |
//! | [`waker`] | the local wake: the promised instant and its notification |
//! | [`timers`] | the schedule seam: apply inside a transaction, ring the wake only after commit |
//! | [`switches`] | the two kill switches, mirrored to `queen.system_state` |
//! | [`admission`] | lanes and slots: a slot before a connection, never the reverse |
//! | [`store`] | the port to PostgreSQL (a trait); [`store::pg`] is its sqlx implementation, [`store::pg_api`] the HTTP API's reads and KV |
//! | [`api`] | `queen-sweeper serve`'s HTTP surface: timers through the seam, KV, messages, switches, limits |
//! | [`classify`] | SQLSTATE → transient / config / permanent; [`error`] is the crate's one error |
//! | [`config`] | every knob, its default and its validation |
//! | [`metrics`] | the Prometheus series |
//! | [`schema`] | applies `sql/`, idempotently |
//! | [`clock`] | the only module that reads a clock or draws randomness |
//! | `testing` | (feature `testing`) a throwaway PostgreSQL and a database per test |

pub mod admission;
pub mod api;
pub mod classify;
pub mod clock;
pub mod config;
pub mod cycle;
pub mod drain;
pub mod error;
pub mod metrics;
pub mod schema;
pub mod sleep;
pub mod store;
pub mod subclock;
pub mod switches;
#[cfg(feature = "testing")]
pub mod testing;
pub mod timers;
pub mod waker;

pub use error::Error;
