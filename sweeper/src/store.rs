//! The port between the sweeper's loop and PostgreSQL.

pub mod pg;
