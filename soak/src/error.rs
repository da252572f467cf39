//! The soak's one error type. Every failure stops the run that met it (a soak measures; a
//! half-measured number is worse than none), so the variants are by what failed, each with its
//! cause as the source, and `main` prints the chain.
//!
//! `bench`, `experiments` and `blocks` still return `Result<_, String>`; [`Error::Message`] and
//! `From<Error> for String` carry their messages across until each moves to this type. The
//! Docker provider's reasons are one line by design (the provider chain prints one line per
//! provider) and arrive as [`Error::Docker`].

use std::path::PathBuf;

use crate::provider::ProviderKind;

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
    /// The command line asks for something that cannot be (an unknown network mode, the URL
    /// provider without a URL).
    #[error("{0}")]
    Usage(String),
    /// The workload's knobs do not make a valid sweeper configuration.
    #[error("{label}: the knobs are not a valid configuration")]
    Knobs {
        label: String,
        #[source]
        source: queen_sweeper::Error,
    },
    /// A call into the sweeper library failed (connect options, a schedule transaction); `what`
    /// says which.
    #[error("{what}")]
    Sweeper {
        what: String,
        #[source]
        source: queen_sweeper::Error,
    },
    /// A broker process could not be started.
    #[error("cannot start {}", path.display())]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A broker process could not be sent SIGKILL.
    #[error("cannot SIGKILL the broker process")]
    Kill(#[source] std::io::Error),
    /// An HTTP call to a broker process failed; `what` says which.
    #[error("{what}")]
    Http {
        what: String,
        #[source]
        source: reqwest::Error,
    },
    /// A broker refused or did not answer (its status and body, or what it did not do in time).
    #[error("{0}")]
    Broker(String),
    /// Fewer due rows than asked for could be held locked for the run.
    #[error("held {locked} of {wanted} due rows locked")]
    HeldRows { locked: i64, wanted: u32 },
    /// A load task panicked.
    #[error("a load task panicked")]
    LoadPanicked(#[source] tokio::task::JoinError),
    /// The provider that was asked for cannot start.
    #[error("provider {kind:?} cannot start")]
    Provider {
        kind: ProviderKind,
        #[source]
        source: Box<Error>,
    },
    /// No provider could start; one reason per provider tried.
    #[error("no PostgreSQL provider could start: {}", .0.join("; "))]
    NoProvider(Vec<String>),
    /// The Docker provider's one-line reason.
    #[error("{0}")]
    Docker(String),
    /// The local cluster could not start (the test tier's reason), or its thread died.
    #[error("{0}")]
    Cluster(String),
    /// The thread that keeps the local cluster could not be spawned.
    #[error("cannot spawn the cluster thread")]
    ClusterThread(#[source] std::io::Error),
    /// No loopback port could be had for a server or a broker.
    #[error("no free loopback port")]
    Port(#[source] std::io::Error),
    /// A message from a module that does not return this type yet: `bench`, `experiments` and
    /// `blocks`. Goes when they do.
    #[error("{0}")]
    Message(String),
}

impl Error {
    /// A database error with what was being done.
    pub fn db(what: impl Into<String>) -> impl FnOnce(sqlx::Error) -> Error {
        let what = what.into();
        move |source| Error::Db { what, source }
    }

    /// A sweeper library error with what was being done.
    pub fn sweeper(what: impl Into<String>) -> impl FnOnce(queen_sweeper::Error) -> Error {
        let what = what.into();
        move |source| Error::Sweeper { what, source }
    }

    /// An HTTP error with what was being done.
    pub fn http(what: impl Into<String>) -> impl FnOnce(reqwest::Error) -> Error {
        let what = what.into();
        move |source| Error::Http { what, source }
    }
}

/// For `bench`, `experiments` and `blocks`, still on `Result<_, String>`: their message as
/// [`Error::Message`]. Goes when they return this type.
impl From<String> for Error {
    fn from(message: String) -> Error {
        Error::Message(message)
    }
}

/// For `bench`, `experiments` and `blocks`, still on `Result<_, String>`: the error with its
/// whole chain, so the cause is not lost on the way. Goes when they return this type.
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

/// [`chain`] on one line, the causes after colons: for lists with one line per item.
pub fn one_line(error: &dyn std::error::Error) -> String {
    chain(error).replace("\n  caused by: ", ": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_error_says_what_was_done_and_keeps_the_sqlx_error_as_its_source() {
        let error = Error::db("pusher 3")(sqlx::Error::PoolTimedOut);
        let source = std::error::Error::source(&error).expect("the sqlx error");
        assert!(source.downcast_ref::<sqlx::Error>().is_some());
        assert_eq!(
            chain(&error),
            format!("pusher 3\n  caused by: {}", sqlx::Error::PoolTimedOut)
        );
    }

    #[test]
    fn a_forced_provider_that_cannot_start_keeps_its_reason_as_the_source_on_one_line() {
        let error = Error::Provider {
            kind: ProviderKind::Local,
            source: Box::new(Error::Port(std::io::Error::other("no ports left"))),
        };
        assert_eq!(
            one_line(&error),
            "provider Local cannot start: no free loopback port: no ports left"
        );
        assert_eq!(
            chain(&error).lines().count(),
            3,
            "one line per cause at a terminal"
        );
    }

    #[test]
    fn a_message_from_a_module_still_on_strings_crosses_both_ways_whole() {
        let error = Error::Spawn {
            path: PathBuf::from("/bin/queen-sweeper"),
            source: std::io::Error::other("denied"),
        };
        let text: String = error.into();
        assert_eq!(text, "cannot start /bin/queen-sweeper\n  caused by: denied");
        assert_eq!(Error::from(text.clone()).to_string(), text);
    }
}
