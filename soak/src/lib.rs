//! `queen-soak`: drives a real PostgreSQL with Queen brokers, measures, and turns measurements
//! into the dated blocks that replace the sweeper's unmeasured defaults.
//!
//! | module | owns |
//! |---|---|
//! | [`provider`] | where the PostgreSQL comes from: a URL, Docker (testcontainers), or a local cluster |
//! | [`rig`] | what a measurement was taken on: cores, memory, server version and settings |
//! | [`db`] | a fresh database per run, and the measurement queries (`soak/sql/`) |
//! | [`brokers`] | brokers in this process or as `queen-sweeper serve` processes, read through their metrics |
//! | [`run`] | one run: loads, the sampler, progress, the measurements |
//! | [`experiments`] | one sweep per unmeasured setting, and what it found |
//! | [`faults`] | `soak faults`: the broker under faults, each run ending with the delivery checks |
//! | [`agreement`] | `soak agreement`: the same scenarios in the calibrated sim and on this rig, side by side |
//! | [`calibrate`] | `soak calibrate`: the simulation model's costs measured on this rig |
//! | [`blocks`] | dated blocks in the house formula, and `apply-blocks` |
//! | [`currency`] | `blocks --check`: which blocks were measured on the code in force |
//! | [`bench`] | the sweeper against the physical limit; probe p99; peak RSS; idle cost |
//! | [`report`] | `reports/<date>-<rig>/`: report.md, plots, JSON |
//! | [`error`] | [`Error`]: what stopped a command, with its cause |

pub mod agreement;
pub mod bench;
pub mod blocks;
pub mod brokers;
pub mod calibrate;
pub mod currency;
pub mod db;
pub mod error;
pub mod experiments;
pub mod faults;
pub mod healthz;
pub mod hostile;
pub mod provider;
pub mod report;
pub mod rig;
pub mod run;

pub use error::Error;
