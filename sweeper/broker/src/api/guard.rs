//! What every `/api/v1` request passes before its handler: an in-flight slot, then a deadline.
//!
//! The slot is the API's admission, taken before any connection (the house rule: a slot before a
//! connection, never the reverse). When all `QUEEN_API_MAX_IN_FLIGHT` slots are taken the request
//! is refused at once with a 503 and `Retry-After`, never queued: a queue in front of the pool is
//! a hidden, unbounded limit, and a client that is told to come back can go to another broker.
//!
//! The deadline (`QUEEN_API_REQUEST_TIMEOUT_MS`) bounds everything a request can hold a slot for,
//! including a client that sends its body slowly. A request past it gets a 503 with `Retry-After`;
//! if it was a schedule, its transaction is dropped, which rolls it back unless its commit had
//! already reached the database, so the outcome of a timed-out schedule is unknown and the
//! message says so.
//!
//! `/metrics` and `/healthz` do not pass through here: monitoring must keep answering when the API
//! is saturated, which is exactly when it is needed.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiState;
use super::errors::{ApiError, RETRY_AFTER_BUSY_S, RETRY_AFTER_TRANSIENT_S};
use super::metrics::RequestLabel;

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
