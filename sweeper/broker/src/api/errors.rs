//! What the API answers when it does not do what was asked: an HTTP status, a stable `code` a
//! program can branch on, one human sentence, and for a retryable refusal a `Retry-After`.
//!
//! ```json
//! {"error": {"code": "payload_too_large", "message": "op 2: ...", "index": 2}}
//! ```
//!
//! | the crate's error | status | code |
//! |---|---|---|
//! | `Disabled` (a kill switch) | 503 + Retry-After | `switched_off` |
//! | transient (timeout, lost connection, SQLSTATE 40001, 40P01, classes 08/53/57/58) | 503 + Retry-After | `database_unavailable` |
//! | SQLSTATE 22023 (a function refused its input) | 400 | `invalid_request` |
//! | SQLSTATE 54000 (the tenant's KV quota) | 429 | `quota_exceeded` |
//! | class 42 (the schema is not what this binary expects) | 500 | `schema` |
//! | anything else | 500 | `database` |
//!
//! A 500 still carries one sentence and never a backtrace: the message is the database's own, with
//! its SQLSTATE, which is what an operator needs and nothing more.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::health::suggests_outage;
use queen_sweeper::{Class, Error};

/// Seconds to wait after a transient database failure: a lock, a timeout, a lost connection. One
/// second is the sweeper's own ceiling; not measured.
pub const RETRY_AFTER_TRANSIENT_S: u64 = 1;

/// Seconds to wait after a refusal by a kill switch: the other brokers re-read the switches every
/// five seconds (`cycle::SWITCH_REFRESH`), so asking sooner learns nothing new.
pub const RETRY_AFTER_SWITCHED_OFF_S: u64 = 5;

/// Seconds to wait when every in-flight slot is taken; requests last milliseconds when the
/// database is healthy. Not measured.
pub const RETRY_AFTER_BUSY_S: u64 = 1;

/// A refusal, ready to become a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// The operation of a batch the refusal is about.
    pub index: Option<usize>,
    pub retry_after_s: Option<u64>,
    /// The failure can mean the database is unreachable ([`super::health::suggests_outage`]):
    /// the answer carries a [`SuspectDatabase`] for [`super::guard::admit`] to act on.
    pub suspects_database: bool,
}

/// A response extension: the request failed in a way that can mean the database is gone.
#[derive(Debug, Clone, Copy)]
pub struct SuspectDatabase;

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            index: None,
            retry_after_s: None,
            suspects_database: false,
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn too_large(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, code, message)
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, code, message)
    }

    pub fn unavailable(
        code: &'static str,
        message: impl Into<String>,
        retry_after_s: u64,
    ) -> ApiError {
        ApiError {
            retry_after_s: Some(retry_after_s),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
        }
    }

    /// The message, said of `what` (e.g. "op 3: queue must be non-empty").
    pub fn prefixed(mut self, what: &str) -> ApiError {
        self.message = format!("{what}: {}", self.message);
        self
    }

    /// The refusal is about operation `index` of a batch.
    pub fn at(mut self, index: usize) -> ApiError {
        self.index = Some(index);
        self
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> ApiError {
        match &error {
            Error::Disabled(message) => {
                ApiError::unavailable("switched_off", message.clone(), RETRY_AFTER_SWITCHED_OFF_S)
            }
            Error::Config(message) => {
                tracing::error!(%error, "API request failed on configuration");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "configuration",
                    message.clone(),
                )
            }
            Error::Database { .. } | Error::Timeout { .. } => from_database(&error),
        }
    }
}

fn from_database(error: &Error) -> ApiError {
    match (error.sqlstate(), error.class()) {
        (Some("22023"), _) => ApiError::bad_request("invalid_request", error.to_string()),
        (Some("54000"), _) => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "quota_exceeded",
            error.to_string(),
        ),
        (_, Class::Transient) => {
            tracing::warn!(%error, "API request failed transiently");
            ApiError {
                suspects_database: suggests_outage(error),
                ..ApiError::unavailable(
                    "database_unavailable",
                    format!(
                        "the database could not answer now ({error}); retry in {RETRY_AFTER_TRANSIENT_S} s"
                    ),
                    RETRY_AFTER_TRANSIENT_S,
                )
            }
        }
        (_, Class::Config) => {
            tracing::error!(%error, "API request failed: the schema is not what this binary expects");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "schema",
                error.to_string(),
            )
        }
        (_, Class::Permanent) => {
            tracing::error!(%error, "API request failed");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "database",
                error.to_string(),
            )
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"code": self.code, "message": self.message});
        if let Some(index) = self.index {
            body["index"] = json!(index);
        }
        let mut response = (self.status, Json(json!({ "error": body }))).into_response();
        if let Some(seconds) = self.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.suspects_database {
            response.extensions_mut().insert(SuspectDatabase);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn database(sqlstate: Option<&str>) -> ApiError {
        ApiError::from(Error::database(
            sqlstate.map(str::to_owned),
            "message".into(),
            "context".into(),
        ))
    }

    #[test]
    fn transient_failures_are_503_with_retry_after() {
        for sqlstate in [
            None,
            Some("40001"),
            Some("40P01"),
            Some("57014"),
            Some("57P01"),
            Some("08006"),
            Some("53300"),
        ] {
            let e = database(sqlstate);
            assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE, "{sqlstate:?}");
            assert_eq!(e.retry_after_s, Some(RETRY_AFTER_TRANSIENT_S));
            assert_eq!(e.code, "database_unavailable");
        }
        let timeout = ApiError::from(Error::Timeout {
            context: "kv".into(),
            after_ms: 7000,
        });
        assert_eq!(timeout.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(timeout.message.contains("7000 ms"), "{}", timeout.message);
    }

    #[test]
    fn a_kill_switch_is_503_with_the_refresh_period_as_retry_after() {
        let e = ApiError::from(Error::Disabled("scheduling is switched off".into()));
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!((e.code, e.retry_after_s), ("switched_off", Some(5)));
    }

    #[test]
    fn refused_input_quota_schema_and_the_rest_map_by_sqlstate() {
        assert_eq!(database(Some("22023")).status, StatusCode::BAD_REQUEST);
        assert_eq!(
            database(Some("54000")).status,
            StatusCode::TOO_MANY_REQUESTS
        );
        let schema = database(Some("42883"));
        assert_eq!(
            (schema.status, schema.code),
            (StatusCode::INTERNAL_SERVER_ERROR, "schema")
        );
        let other = database(Some("23505"));
        assert_eq!(
            (other.status, other.code),
            (StatusCode::INTERNAL_SERVER_ERROR, "database")
        );
        assert_eq!(
            other.retry_after_s, None,
            "a permanent failure is not retried"
        );
    }

    #[tokio::test]
    async fn the_response_is_json_with_the_code_the_index_and_the_header() {
        let response = ApiError::unavailable("busy", "full", 1)
            .at(3)
            .into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            json!({"error": {"code": "busy", "message": "full", "index": 3}})
        );
    }
}
