//! The harness's one error type.

use std::path::PathBuf;

/// What the harness cannot do, with the cause kept as the source.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A chart could not be drawn or written.
    #[error("cannot draw the chart {}", path.display())]
    Chart {
        /// The SVG file being written.
        path: PathBuf,
        /// What plotters reported.
        #[source]
        source: plotters::drawing::DrawingAreaErrorKind<std::io::Error>,
    },
    /// A knob override names a variable the sweeper does not have.
    #[error("{var} is not a sweeper knob (known: {known})")]
    UnknownKnob {
        /// The variable as written.
        var: String,
        /// Every knob's variable, comma-separated.
        known: String,
    },
    /// A knob override's value is not a whole number within the knob's bounds.
    #[error("{0}")]
    KnobValue(String),
    /// A calibration file could not be read.
    #[error("cannot read the calibration {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A calibration file is not a calibration.
    #[error("{} is not a calibration written by `soak calibrate`", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}
