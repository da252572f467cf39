//! The sweeper of the Queen broker: one background task per broker that fires due timers out of
//! `queen.log_timers` into the log, prunes expired rows out of `queen.kv`, and rolls up usage.
//!
//! Where to start reading:
//!
//! - [`schema`] applies `sql/` (the tables and every function the sweeper calls), idempotently.
//! - [`classify`] maps a SQLSTATE to what the caller should do; [`error`] is the crate's one error.
//! - [`store`] is the port between the loop and PostgreSQL; [`store::pg`] is the only sqlx code
//!   of the loop.
//! - [`clock`] is the only module that reads a clock or draws randomness.
//! - `testing` (feature `testing`) starts a throwaway PostgreSQL and hands each test its own
//!   database.

pub mod classify;
pub mod clock;
pub mod error;
pub mod schema;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;

pub use error::Error;
