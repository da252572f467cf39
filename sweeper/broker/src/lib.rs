//! A Queen broker as a process: the sweeper of `queen-sweeper`, and with `serve` the HTTP API
//! that schedules timers through its seam. The binary is `queen-sweeper` (`run | serve`); this
//! crate is the only one that compiles axum.
//!
//! | module | owns |
//! |---|---|
//! | [`api`] | the HTTP surface: timers through the seam, KV, messages, switches, limits, metrics |
//! | [`queries`] | the API's reads and KV calls over PostgreSQL, on a pool of the API's own |
//! | [`process`] | `run` and `serve`: connect, apply the schema, start the sweeper (and the API), stop on a signal |

pub mod api;
pub mod process;
pub mod queries;

pub use process::BrokerError;

/// The version `queen-sweeper --version` prints: the crate's, then the commit the binary was
/// built from (`sweeper/build_commit.rs`), which the soak checks against its own before it starts
/// broker processes.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("QUEEN_BUILD_COMMIT"),
    ")"
);
