//! `queen-soak`: drives a real PostgreSQL with Queen brokers, measures, and turns measurements
//! into the dated blocks that replace the sweeper's unmeasured defaults.

pub mod provider;
