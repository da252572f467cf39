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
use super::errors::{ApiError, RETRY_AFTER_BUSY_S, RETRY_AFTER_TRANSIENT_S, SuspectDatabase};
use super::metrics::RequestLabel;

/// The longest request target (path and query) served; longer is a JSON 414. Names are at most
/// `QUEEN_API_MAX_KEY_BYTES` (800 at most) each, three times that percent-encoded is 7.2 KiB, so
/// 8 KiB refuses no valid request. hyper's own limit (64 KiB) answers a bare 414 above that.
pub const MAX_URI_BYTES: usize = 8 * 1024;

/// The most header bytes (names and values) of one request; more is a JSON 431. The API reads
/// three headers; 16 KiB leaves proxies and tracing room. hyper's buffer limit (about 400 KiB)
/// answers a bare 431 above that. Not measured.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// The most headers of one request; more is a JSON 431. hyper is set to read twice this many,
/// so the refusal is ours (JSON), not hyper's bare one.
pub const MAX_HEADERS: usize = 100;

/// Refuses, in the JSON error shape, a request whose target or headers are over their limits,
/// before it is routed.
pub async fn http_limits(request: Request, next: Next) -> Response {
    let refused = over_http_limits(request.uri().to_string().len(), request.headers())
        .or_else(|| request.uri().query().and_then(undecodable_query));
    match refused {
        Some(error) => error.into_response(),
        None => next.run(request).await,
    }
}

/// A query string whose percent-decoded bytes are not UTF-8 (`?after=%ff`) is refused: the query
/// parser would replace them with U+FFFD and answer about a name the client never sent.
fn undecodable_query(query: &str) -> Option<ApiError> {
    let utf8 = query
        .split(['&', '='])
        .all(|part| std::str::from_utf8(&percent_decoded(part)).is_ok());
    (!utf8).then(|| {
        ApiError::bad_request(
            "invalid_query",
            "the query string is not UTF-8 once percent-decoded",
        )
    })
}

/// The bytes `%XX` escapes stand for; a `%` not followed by two hex digits stays as it is.
fn percent_decoded(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escaped = bytes
            .get(at + 1..at + 3)
            .filter(|_| bytes[at] == b'%')
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match escaped {
            Some(byte) => {
                decoded.push(byte);
                at += 3;
            }
            None => {
                decoded.push(bytes[at]);
                at += 1;
            }
        }
    }
    decoded
}

fn over_http_limits(uri_bytes: usize, headers: &HeaderMap) -> Option<ApiError> {
    if uri_bytes > MAX_URI_BYTES {
        return Some(ApiError::new(
            StatusCode::URI_TOO_LONG,
            "uri_too_long",
            format!("the request target is {uri_bytes} bytes, over {MAX_URI_BYTES}"),
        ));
    }
    let header_bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if header_bytes > MAX_HEADER_BYTES || headers.len() > MAX_HEADERS {
        return Some(ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers_too_large",
            format!(
                "the request has {} headers of {header_bytes} bytes, over {MAX_HEADERS} headers or {MAX_HEADER_BYTES} bytes",
                headers.len()
            ),
        ));
    }
    None
}

/// Whether a request with a body says it is JSON. A body without a `Content-Type` is not: a
/// client that forgot it would otherwise have a form or text parsed as JSON by luck.
fn refused_media_type(headers: &HeaderMap) -> Option<ApiError> {
    let has_body = declared_length(headers).is_some_and(|bytes| bytes > 0)
        || headers.contains_key(header::TRANSFER_ENCODING);
    if !has_body {
        return None;
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|value| value.as_bytes());
    if content_type.is_some_and(is_json) {
        return None;
    }
    let shown = content_type.map_or_else(
        || "none".to_owned(),
        |bytes| format!("\"{}\"", String::from_utf8_lossy(bytes)),
    );
    Some(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        format!("the request body must be application/json (Content-Type: {shown})"),
    ))
}

/// `application/json`, with or without parameters (`; charset=utf-8`), in any letter case.
fn is_json(content_type: &[u8]) -> bool {
    let text = String::from_utf8_lossy(content_type);
    let essence = text.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// Reads the request body whole, within the body limit and the body read timeout, before the
/// request takes a slot ([`admit`]).
pub async fn read_body(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let limits = &state.inner.limits;
    if let Some(error) = refused_media_type(request.headers()) {
        return error.into_response();
    }
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

/// Refuses at once while the database is known to be down ([`super::health`]); otherwise takes
/// a slot, runs the request under its deadline, gives the slot back, and has the database probed
/// when the answer suggests it is gone.
pub async fn admit(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    if let Some(down) = state.inner.health.down() {
        state.inner.metrics.refused("database_down");
        return ApiError::unavailable(
            "database_unavailable",
            format!(
                "{}; refused without trying, retry in {RETRY_AFTER_TRANSIENT_S} s",
                down.describe()
            ),
            RETRY_AFTER_TRANSIENT_S,
        )
        .into_response();
    }
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
            state
                .inner
                .health
                .suspect("a request ran past its deadline");
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
    if response.extensions().get::<SuspectDatabase>().is_some() {
        state
            .inner
            .health
            .suspect("a request failed without an answer from the database");
    }
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

    /// The API's state on a database nothing listens for (port 1 of loopback): enough for what a
    /// request meets before its handler calls the database.
    fn state(limits: super::super::config::ApiConfig) -> ApiState {
        use queen_sweeper::{Admission, LaneSizes, Metrics, Seam, Switches, Waker};
        let db = crate::queries::PgApi::lazy(
            "postgres://queen@127.0.0.1:1/queen",
            std::time::Duration::from_millis(100),
        )
        .expect("a URL");
        let switches = Switches::default();
        ApiState::new(super::super::Parts {
            db,
            seam: Seam::new(
                Waker::new(queen_sweeper::clock::tokio_now()),
                switches.clone(),
            ),
            switches,
            admission: Admission::new(LaneSizes::default()),
            sweeper_metrics: Metrics::new(),
            limits,
            auth: super::super::auth::Auth {
                tokens: None,
                monitoring_closed: false,
                allow_no_auth: true,
            },
        })
    }

    /// A handler that answers after `ms`, behind [`admit`].
    async fn answered_after(state: &ApiState, ms: u64) -> Response {
        use tower::ServiceExt as _;
        let app = axum::Router::new()
            .route(
                "/slow",
                axum::routing::get(move || async move {
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                    "done"
                }),
            )
            .layer(axum::middleware::from_fn_with_state(state.clone(), admit));
        app.oneshot(Request::get("/slow").body(Body::empty()).unwrap())
            .await
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_past_its_deadline_is_a_503_timeout_and_gives_its_slot_back() {
        let limits = super::super::config::ApiConfig {
            request_timeout_ms: 1_000,
            max_in_flight: 2,
            ..Default::default()
        };
        let state = state(limits);
        let answer = answered_after(&state, 1_500).await;
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            answer
                .headers()
                .get(header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap()),
            Some(RETRY_AFTER_TRANSIENT_S.to_string().as_str())
        );
        let body = axum::body::to_bytes(answer.into_body(), 1 << 16)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], "timeout", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("QUEEN_API_REQUEST_TIMEOUT_MS=1000"),
            "{message}"
        );
        assert!(
            message.contains("may or may not have been committed"),
            "{message}"
        );
        assert_eq!(
            state.inner.in_flight.available_permits(),
            2,
            "the slot is back"
        );
        let metrics = state.inner.metrics.render(&state.inner.sweeper_metrics);
        assert!(
            metrics.contains("queen_api_refused_total{reason=\"timeout\"} 1"),
            "{metrics}"
        );

        let in_time = answered_after(&state, 900).await;
        assert_eq!(
            in_time.status(),
            StatusCode::OK,
            "a request within its deadline is answered"
        );
    }

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

    #[test]
    fn a_body_must_say_it_is_json_and_a_bodiless_request_need_not() {
        let mut headers = HeaderMap::new();
        assert!(refused_media_type(&headers).is_none());
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        assert!(refused_media_type(&headers).is_none());
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("2"));
        assert_eq!(
            refused_media_type(&headers).map(|e| e.status),
            Some(StatusCode::UNSUPPORTED_MEDIA_TYPE)
        );
        for json in ["application/json", "Application/JSON; charset=utf-8"] {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(json));
            assert!(refused_media_type(&headers).is_none(), "{json}");
        }
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(refused_media_type(&headers).is_some());
    }

    #[test]
    fn a_query_is_refused_only_when_its_escapes_are_not_utf8() {
        assert_eq!(percent_decoded("a%41%e2%82%ac%"), b"aA\xe2\x82\xac%");
        assert!(undecodable_query("after=%e2%82%ac&limit=5").is_none());
        assert!(undecodable_query("after=%zz").is_none());
        assert_eq!(
            undecodable_query("after=%ff").map(|e| e.code),
            Some("invalid_query")
        );
    }

    #[test]
    fn targets_and_headers_one_past_their_limits_are_refused() {
        let headers = HeaderMap::new();
        assert!(over_http_limits(MAX_URI_BYTES, &headers).is_none());
        assert_eq!(
            over_http_limits(MAX_URI_BYTES + 1, &headers).map(|e| e.code),
            Some("uri_too_long")
        );
        let mut headers = HeaderMap::new();
        let name = "x-big";
        let fits = "v".repeat(MAX_HEADER_BYTES - name.len());
        headers.insert(name, HeaderValue::from_str(&fits).unwrap());
        assert!(over_http_limits(1, &headers).is_none());
        headers.insert(name, HeaderValue::from_str(&format!("{fits}v")).unwrap());
        assert_eq!(
            over_http_limits(1, &headers).map(|e| e.code),
            Some("headers_too_large")
        );
    }
}
