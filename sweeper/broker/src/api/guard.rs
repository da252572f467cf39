//! What every `/api/v1` request passes before its handler: its body read whole, then an in-flight
//! slot, then a deadline.
//!
//! The body is read first ([`read_body`]), under `QUEEN_API_BODY_READ_TIMEOUT_MS` and
//! `QUEEN_API_MAX_BODY_BYTES`, holding no slot: a client that sends its body slowly (or never)
//! costs a connection and a task, not one of the slots every other client needs. A declared
//! `Content-Length` over the limit is a 413 before a byte of the body is read.
//!
//! The slot is the API's admission, taken before any connection (the house rule: a slot before a
//! connection, never the reverse). When all `QUEEN_API_MAX_IN_FLIGHT` slots are taken the request
//! is refused at once with a 503 and `Retry-After`, never queued: a queue in front of the pool is
//! a hidden, unbounded limit, and a client that is told to come back can go to another broker.
//!
//! The deadline (`QUEEN_API_REQUEST_TIMEOUT_MS`) bounds everything a request can hold a slot for:
//! the handler and its database calls, the body being already in memory. A request past it gets a 503 with `Retry-After`;
//! if it was a schedule, its transaction is dropped, which rolls it back unless its commit had
//! already reached the database, so the outcome of a timed-out schedule is unknown and the
//! message says so.
//!
//! `/metrics` and `/healthz` do not pass through here: monitoring must keep answering when the API
//! is saturated, which is exactly when it is needed.

use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::LengthLimitError;

use super::ApiState;
use super::errors::{ApiError, RETRY_AFTER_BUSY_S, RETRY_AFTER_TRANSIENT_S};
use super::metrics::RequestLabel;

/// Reads the request body whole, within the body limit and the body read timeout, before the
/// request takes a slot ([`admit`]).
pub async fn read_body(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let limits = &state.inner.limits;
    if let Some(declared) = declared_length(request.headers())
        && declared > limits.max_body_bytes
    {
        state.inner.metrics.refused("body_too_large");
        return body_too_large(limits.max_body_bytes, Some(declared)).into_response();
    }
    let (parts, body) = request.into_parts();
    let limit = usize::try_from(limits.max_body_bytes).unwrap_or(usize::MAX);
    let timeout = limits.body_read_timeout();
    let bytes = match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(error)) if over_limit(&error) => {
            state.inner.metrics.refused("body_too_large");
            return body_too_large(limits.max_body_bytes, None).into_response();
        }
        Ok(Err(_)) => {
            return ApiError::bad_request(
                "unreadable_body",
                "the request body could not be read (the client closed it or sent bad chunking)",
            )
            .into_response();
        }
        Err(_) => {
            state.inner.metrics.refused("body_timeout");
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body_timeout",
                format!(
                    "the request body was not all received within QUEEN_API_BODY_READ_TIMEOUT_MS={} ms",
                    timeout.as_millis()
                ),
            )
            .into_response();
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Whether reading a body failed on the body limit (not on the client).
fn over_limit(error: &axum::Error) -> bool {
    std::error::Error::source(error).is_some_and(|source| source.is::<LengthLimitError>())
}

/// The `Content-Length` the client declared, when it declared one that is a number.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn body_too_large(limit: u64, declared: Option<u64>) -> ApiError {
    let declared = declared.map_or_else(String::new, |bytes| format!(" (Content-Length: {bytes})"));
    ApiError::too_large(
        "body_too_large",
        format!("the request body is over QUEEN_API_MAX_BODY_BYTES={limit} bytes{declared}"),
    )
}

/// Takes a slot, runs the request under its deadline, gives the slot back.
pub async fn admit(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let Ok(slot) = state.inner.in_flight.clone().try_acquire_owned() else {
        state.inner.metrics.refused("busy");
        return ApiError::unavailable(
            "busy",
            format!(
                "all QUEEN_API_MAX_IN_FLIGHT={} request slots are taken; retry in {RETRY_AFTER_BUSY_S} s",
                state.inner.limits.max_in_flight
            ),
            RETRY_AFTER_BUSY_S,
        )
        .into_response();
    };
    let _in_flight = InFlight::enter(&state);
    let deadline = state.inner.limits.request_timeout();
    let response = match tokio::time::timeout(deadline, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            state.inner.metrics.refused("timeout");
            ApiError::unavailable(
                "timeout",
                format!(
                    "the request was not answered within QUEEN_API_REQUEST_TIMEOUT_MS={} ms; if it was a schedule, it may or may not have been committed",
                    deadline.as_millis()
                ),
                RETRY_AFTER_TRANSIENT_S,
            )
            .into_response()
        }
    };
    drop(slot);
    response
}

/// Counts every answered request by its route template.
pub async fn count(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    state
        .inner
        .metrics
        .requests
        .get_or_create(&RequestLabel {
            method,
            route,
            status: response.status().as_u16(),
        })
        .inc();
    response
}

/// Keeps the in-flight gauge true even when a request's future is dropped (its client left).
struct InFlight(prometheus_client::metrics::gauge::Gauge);

impl InFlight {
    fn enter(state: &ApiState) -> InFlight {
        let gauge = state.inner.metrics.in_flight.clone();
        gauge.inc();
        InFlight(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn a_declared_length_is_read_only_when_it_is_a_number() {
        let mut headers = HeaderMap::new();
        assert_eq!(declared_length(&headers), None);
        headers.insert(
            header::CONTENT_LENGTH,
            HeaderValue::from_static("5368709120"),
        );
        assert_eq!(declared_length(&headers), Some(5 * 1024 * 1024 * 1024));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("many"));
        assert_eq!(declared_length(&headers), None);
    }
}
