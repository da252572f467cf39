//! `queen-sim`: a deterministic simulation of N Queen brokers' sweepers against a model of
//! PostgreSQL, on turmoil.
//!
//! Where to start reading: [`scenarios`] names the runs; [`world`] builds and runs one from its
//! [`world::RunSpec`].
//!
//! | module | owns |
//! |---|---|
//! | [`world`] | the turmoil world: host `db`, hosts `broker-i` running the real sweeper cycle, load hosts, faults, the two phases |
//! | [`model`] | the modelled PostgreSQL: tables, statements mirroring `sql/`, locks, the WAL, costs |
//! | [`calibration`] | which calibration of the model's costs a run uses: the newest committed, built in, or a file |
//! | [`parallel`] | the calibration's parallel drain in the model: `soak calibrate` fits the WAL bandwidth on it |
//! | [`naive`] | the seed's naive forms (claim then fire; the floor after an empty claim), on the sweeper's `Form` |
//! | [`client`] | [`client::SimStore`], the sweeper's `Store` port over the simulated wire |
//! | [`wire`] | requests and responses between brokers, load hosts and `db` |
//! | [`checkers`] | the invariants, checked outside the model |
//! | [`analysis`] | numbers from a run: lateness, stale segments, queries, over time |
//! | [`scenarios`] | [`scenarios::Scenario`]: `livelock`, `spin`, `crash`, `wake`, `burst`, `fairness`, `partition`, `swarm` |
//! | [`report`] | the summary table, the JSON report, the plots |
//! | [`batch`] | many runs: `--jobs` threads, `--shard K/N` of a plan, `--merge` of the shards' JSON |
//! | [`error`] | [`Error`]: writing the results failed, with the cause |
//! | [`rng`], [`time`] | the seeded generator and simulated time |

pub mod analysis;
pub mod batch;
pub mod calibration;
pub mod checkers;
pub mod client;
pub mod error;
pub mod model;
pub mod naive;
pub mod parallel;
pub mod report;
pub mod rng;
pub mod scenarios;
pub mod time;
pub mod wire;
pub mod world;

pub use error::Error;
