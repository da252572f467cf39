//! The crate's one error type, classified by what the caller should do ([`Class`]).
//!
//! A broken invariant is not an `Error`: it is an `assert!`.

use std::fmt;

use crate::classify::{Class, classify};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database answered with an error, or did not answer at all (`sqlstate` is `None`).
    #[error("{context}: {message}{}", SqlState(.sqlstate.as_deref()))]
    Database {
        sqlstate: Option<String>,
        message: String,
        context: String,
    },
    /// A call ran past its statement timeout and was cancelled.
    #[error("{context}: no answer within {after_ms} ms; the call was cancelled")]
    Timeout { context: String, after_ms: u64 },
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
    pub fn database(sqlstate: Option<String>, message: String, context: String) -> Self {
        Error::Database {
            sqlstate,
            message,
            context,
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
    fn a_timeout_is_transient() {
        let error = Error::Timeout {
            context: "fire".into(),
            after_ms: 5000,
        };
        assert_eq!(error.class(), Class::Transient);
        assert!(error.to_string().contains("5000 ms"));
    }
}
