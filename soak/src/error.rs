//! The soak's one error type. Every failure stops the run that met it (a soak measures; a
//! half-measured number is worse than none), so the variants are by what failed, each with its
//! cause as the source, and `main` prints the chain.
//!
//! `bench`, `experiments`, `blocks`, `provider` and the load tasks of `run` still return
//! `Result<_, String>`; [`Error::Message`] and `From<Error> for String` carry their messages
//! across until each moves to this type.

use std::path::PathBuf;

/// What stopped a soak command.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A statement or a connection failed; `what` says which.
    #[error("{what}")]
    Db {
        what: String,
        #[source]
        source: sqlx::Error,
    },
    /// The sweeper's schema could not be applied to a run's database.
    #[error("cannot apply the schema")]
    Schema(#[source] queen_sweeper::Error),
    /// A directory could not be made.
    #[error("cannot create {}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A directory or a file could not be read.
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A report's JSON file does not hold what it should.
    #[error("{} does not hold the JSON expected", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A plot could not be drawn.
    #[error("cannot draw a plot")]
    Chart(#[from] queen_harness::Error),
    /// A run measured something that must not happen (a timer fired twice, early or never;
    /// a smoke run that measured nothing).
    #[error("{0}")]
    Broken(String),
    /// Nothing to do with what the person named (a missing directory, one with no report).
    #[error("{0}")]
    Nothing(String),
    /// A message from a module that does not return this type yet.
    #[error("{0}")]
    Message(String),
}

impl Error {
    /// A database error with what was being done.
    pub fn db(what: impl Into<String>) -> impl FnOnce(sqlx::Error) -> Error {
        let what = what.into();
        move |source| Error::Db { what, source }
    }
}

impl From<String> for Error {
    fn from(message: String) -> Error {
        Error::Message(message)
    }
}

/// For the modules still on `Result<_, String>`: the error with its whole chain, so the cause
/// is not lost on the way.
impl From<Error> for String {
    fn from(error: Error) -> String {
        chain(&error)
    }
}

/// `error` and each of its sources, one per line after the first, for a person at a terminal.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str("\n  caused by: ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
