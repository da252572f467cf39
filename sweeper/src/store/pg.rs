//! The [`Store`](super::Store) port over PostgreSQL, with sqlx. The only file of the cycle that
//! knows sqlx.

use crate::error::Error;

/// Converts a sqlx error into the crate's error, keeping the SQLSTATE.
pub fn database_error(error: &sqlx::Error, context: &str) -> Error {
    match error.as_database_error() {
        Some(db) => Error::database(
            db.code().map(|code| code.into_owned()),
            db.message().to_owned(),
            context.to_owned(),
        ),
        None => Error::database(None, error.to_string(), context.to_owned()),
    }
}
