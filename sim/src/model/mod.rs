//! The model of PostgreSQL the simulated brokers talk to: [`state`] holds the tables, [`ops`]
//! the statements as state transitions mirroring `sql/`, [`server`] the db host that gives them
//! time, locks and a WAL.

pub mod ops;
pub mod server;
pub mod state;
mod take;
