//! Serving the API until shutdown, then draining it.
//!
//! When `shutdown` is cancelled the listener closes at once (a new connection is refused, so a
//! load balancer moves on), idle keep-alive connections are closed, and requests in flight run to
//! their end. Their end is bounded: every `/api/v1` request has its deadline
//! (`QUEEN_API_REQUEST_TIMEOUT_MS`), so the drain waits that long plus [`DRAIN_SLACK`] and then
//! gives up on whatever is left (a `/metrics` scrape from a client that stopped reading).
//!
//! The caller stops the sweeper only after this returns, so a schedule answered during the drain
//! still has a sweeper to wake.

use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::{ApiState, router};

/// Time the drain allows beyond the request deadline, for answers to be written out. Not measured.
pub const DRAIN_SLACK: Duration = Duration::from_secs(1);

/// How the drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// Every request in flight was answered.
    Clean,
    /// The drain's bound passed with requests still open; they were dropped.
    Cut,
}

/// Serves `state`'s router on `listener` until `shutdown`, then drains.
pub async fn serve(listener: TcpListener, state: ApiState, shutdown: CancellationToken) -> Drained {
    let drain_limit = state.limits().request_timeout() + DRAIN_SLACK;
    let server = axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let bound = async {
        shutdown.cancelled().await;
        tokio::time::sleep(drain_limit).await;
    };
    tokio::select! {
        result = server => {
            if let Err(error) = result {
                tracing::error!(%error, "the HTTP server failed");
            }
            Drained::Clean
        }
        () = bound => {
            tracing::warn!(limit_ms = drain_limit.as_millis() as u64, "requests still open after the drain limit; dropping them");
            Drained::Cut
        }
    }
}
