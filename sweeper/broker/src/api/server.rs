//! Serving the API until shutdown, then draining it.
//!
//! Connections are served here with hyper's HTTP/1 builder rather than `axum::serve`, for one
//! setting `axum::serve` does not offer: a header read timeout
//! (`QUEEN_API_HEADER_READ_TIMEOUT_MS`). Without it a client that opens a connection and sends
//! its headers a byte at a time holds that connection for ever.
//!
//! hyper's header read timeout also bounds the wait for the next request on an idle keep-alive
//! connection (hyper 1.12): the server closes a connection idle that long, and a client that sends
//! on it at that instant gets a reset instead of an answer. So every answer says how long an idle
//! connection is kept (`Keep-Alive: timeout=N`, whole seconds, at least one second short of the
//! close), and a timeout too short to leave a second of it turns keep-alive off: each answer
//! closes its connection (`Connection: close`) rather than leave one that races. A client that
//! pools connections should keep them idle for less than `N` seconds.
//!
//! When `shutdown` is cancelled the listener closes at once (a new connection is refused, so a
//! load balancer moves on), idle keep-alive connections are closed, and requests in flight run to
//! their end. Their end is bounded: every `/api/v1` request reads its body within
//! `QUEEN_API_BODY_READ_TIMEOUT_MS` and is then answered within `QUEEN_API_REQUEST_TIMEOUT_MS`, so
//! the drain waits those two plus [`DRAIN_SLACK`] and then gives up on whatever is left (a
//! `/metrics` scrape from a client that stopped reading).
//!
//! The caller stops the sweeper only after this returns, so a schedule answered during the drain
//! still has a sweeper to wake.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::guard::MAX_HEADERS;
use super::unparsed::Documented;
use super::{ApiState, router};

/// Time the drain allows beyond the body read and the request deadline, for answers to be written
/// out. Not measured.
pub const DRAIN_SLACK: Duration = Duration::from_secs(1);

/// The pause after a failed accept (out of file descriptors, most likely), so the loop does not
/// spin on an error that needs a connection to close first. Not measured.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// How the drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Every request in flight was answered.
    Clean,
    /// The drain's bound passed with requests still open; they were dropped.
    Cut,
}

/// The `Keep-Alive` header for a server that closes idle connections after `idle_close`: the whole
/// seconds left once one second of margin is taken off, or `None` (keep-alive off) when that
/// leaves nothing.
pub fn keep_alive(idle_close: Duration) -> Option<HeaderValue> {
    let seconds = idle_close.as_secs().saturating_sub(1);
    (seconds > 0).then(|| {
        HeaderValue::from_str(&format!("timeout={seconds}"))
            .expect("ASCII digits are a header value")
    })
}

async fn say_keep_alive(
    State(header): State<Option<HeaderValue>>,
    request: Request,
    next: Next,
) -> Response {
    let mut response = next.run(request).await;
    if let Some(header) = header {
        response
            .headers_mut()
            .insert(HeaderName::from_static("keep-alive"), header);
    }
    response
}

/// Serves `state`'s router on `listener` until `shutdown`, then drains.
pub async fn serve(listener: TcpListener, state: ApiState, shutdown: CancellationToken) -> Drained {
    let limits = state.limits().clone();
    let drain_limit = limits.body_read_timeout() + limits.request_timeout() + DRAIN_SLACK;
    let idle_kept = keep_alive(limits.header_read_timeout());
    let app = router(state).layer(axum::middleware::from_fn_with_state(
        idle_kept.clone(),
        say_keep_alive,
    ));
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout())
        .keep_alive(idle_kept.is_some())
        .max_headers(2 * MAX_HEADERS);
    let connections = GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let stream = match accepted {
            Ok((stream, _peer)) => stream,
            Err(error) => {
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let connection = http.serve_connection(
            Documented::new(TokioIo::new(stream)),
            TowerToHyperService::new(app.clone()),
        );
        let connection = connections.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                // A client that left, or one too slow with its headers: its business, not ours.
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    match tokio::time::timeout(drain_limit, connections.shutdown()).await {
        Ok(()) => Drained::Clean,
        Err(_) => {
            tracing::warn!(
                limit_ms = drain_limit.as_millis() as u64,
                "requests still open after the drain limit; dropping them"
            );
            Drained::Cut
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advertised_idle_time_is_a_second_short_of_the_close() {
        let header =
            |ms| keep_alive(Duration::from_millis(ms)).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(header(5_000).as_deref(), Some("timeout=4"));
        assert_eq!(header(2_999).as_deref(), Some("timeout=1"));
        assert_eq!(header(1_999), None);
        assert_eq!(header(300), None);
    }
}
