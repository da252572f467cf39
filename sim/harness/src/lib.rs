//! `queen-harness`: what the simulation (`queen-sim`) and the soak (`queen-soak`) share, so the
//! numbers both print mean the same thing and are drawn the same way.
//!
//! | module | owns |
//! |---|---|
//! | [`calibration`] | [`Calibration`]: the model's costs as the soak measured them on a rig, with their fits |
//! | [`spread`] | [`Spread`]: count, p50, p90, p99 and max of a sample, from values or a histogram |
//! | [`chart`] | [`LineChart`]: the one SVG line chart of both reports |
//! | [`knobs`] | [`Knobs`]: sweeper knob overrides checked against the sweeper's knob table |
//! | [`error`] | [`Error`]: what can go wrong in the above, with its source |

pub mod calibration;
pub mod chart;
pub mod error;
pub mod knobs;
pub mod spread;

pub use calibration::Calibration;
pub use chart::{Line, LineChart, Mark, SweepPoint};
pub use error::Error;
pub use knobs::Knobs;
pub use spread::{ShortSpread, Spread};
