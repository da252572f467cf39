//! The sim's one error type. A run itself does not fail with an error: a broken invariant is a
//! failed check in the report, and a broken assumption of the model an `assert!`. What can fail
//! is writing the results.

use std::path::PathBuf;

/// Why the sim could not write what it was asked to.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The report directory could not be made.
    #[error("cannot create the report directory {}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A report file could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The JSON could not be written to stdout.
    #[error("cannot write the JSON to stdout")]
    Stdout(#[source] std::io::Error),
    /// The calibration named with --calibration could not be loaded.
    #[error("the calibration cannot be used")]
    Calibration(#[source] queen_harness::Error),
    /// A plot could not be drawn.
    #[error("cannot draw a plot")]
    Chart(#[from] queen_harness::Error),
    /// A file to merge could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file to merge is not a sim JSON report.
    #[error("{} is not a sim JSON report", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The files to merge are not shards of one plan.
    #[error("cannot merge: {0}")]
    Merge(String),
}

/// `error` and each of its sources, one per line after the first, for a person at a terminal.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!("\n  caused by: {cause}"));
        source = cause.source();
    }
    text
}
