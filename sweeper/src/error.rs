//! The crate's one error type, classified by what the caller should do ([`Class`]).
//!
//! A broken invariant is not an `Error`: it is an `assert!`.

use std::fmt;

use crate::classify::{Class, classify};

/// What the crate's fallible calls return.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The driver's error, kept as the source of a [`Error::Database`].
pub type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Every failure of the sweeper, classified by [`Error::class`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database answered with an error, or did not answer at all (`sqlstate` is `None`).
    #[error("{context}: {message}{}", SqlState(.sqlstate.as_deref()))]
    Database {
        /// The SQLSTATE the server gave; `None` when it did not answer.
        sqlstate: Option<String>,
        /// The server's or the driver's message.
        message: String,
        /// Which call failed.
        context: String,
        /// The driver's error, when there was one (the simulation's model has none).
        #[source]
        source: Option<Source>,
    },
    /// A call ran past its statement timeout and was cancelled.
    #[error("{context}: no answer within {after_ms} ms; the call was cancelled")]
    Timeout {
        /// Which call timed out.
        context: String,
        /// How long the client waited.
        after_ms: u64,
    },
    /// A setting is wrong; the message names it, its value and what is allowed.
    #[error("{0}")]
    Config(String),
    /// An operator switched this off (a kill switch); try again when it is back on.
    #[error("{0}")]
    Disabled(String),
}

struct SqlState<'a>(Option<&'a str>);

impl fmt::Display for SqlState<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(code) => write!(f, " (SQLSTATE {code})"),
            None => Ok(()),
        }
    }
}

impl Error {
    /// A database failure with no driver error behind it (a model's, or a test's).
    pub fn database(sqlstate: Option<String>, message: String, context: String) -> Self {
        Error::Database {
            sqlstate,
            message,
            context,
            source: None,
        }
    }

    /// A database failure caused by `source`.
    pub fn database_from(
        sqlstate: Option<String>,
        message: String,
        context: String,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Error::Database {
            sqlstate,
            message,
            context,
            source: Some(Box::new(source)),
        }
    }

    /// The SQLSTATE the database gave, if any.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::Database { sqlstate, .. } => sqlstate.as_deref(),
            Error::Timeout { .. } | Error::Config(_) | Error::Disabled(_) => None,
        }
    }

    /// What the caller should do about it.
    pub fn class(&self) -> Class {
        match self {
            Error::Database { sqlstate, .. } => classify(sqlstate.as_deref()),
            Error::Timeout { .. } | Error::Disabled(_) => Class::Transient,
            Error::Config(_) => Class::Config,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_carries_context_and_sqlstate() {
        let error = Error::database(
            Some("42883".into()),
            "function missing".into(),
            "prune".into(),
        );
        assert_eq!(
            error.to_string(),
            "prune: function missing (SQLSTATE 42883)"
        );
        assert_eq!(error.class(), Class::Config);
        let lost = Error::database(None, "connection reset".into(), "claim".into());
        assert_eq!(lost.to_string(), "claim: connection reset");
        assert_eq!(lost.class(), Class::Transient);
    }

    #[test]
    fn the_driver_error_stays_the_source() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let error = Error::database_from(None, "connection lost".into(), "fire".into(), io);
        let source = std::error::Error::source(&error).expect("the source is kept");
        assert_eq!(source.to_string(), "reset by peer");
    }

    #[test]
    fn a_timeout_is_transient() {
        let error = Error::Timeout {
            context: "fire".into(),
            after_ms: 5000,
        };
        assert_eq!(error.class(), Class::Transient);
        assert!(error.to_string().contains("5000 ms"));
    }
}
