//! `/api/v1/timers`: schedule, reschedule and cancel in batches, cancel one, peek one, list a
//! queue a page at a time.
//!
//! Every write goes through the schedule seam in a transaction of its own: [`Seam::apply`] inside
//! it, then [`Seam::commit`], which commits and only then rings the sweeper's wake with the
//! earliest new delivery instant. A refused or failed call drops the transaction (a rollback) and
//! the wake with it. The schedule kill switch is the seam's to enforce: a batch that creates work
//! while it is off is a 503 with `Retry-After`; a batch of cancels still goes through.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::ApiState;
use super::errors::ApiError;
use super::input::{body_bytes, idempotency_key, name, path, query, tenant};
use super::ops::parse_batch;
use super::views;
use crate::queries::{KeyTaken, PgApi};
use queen_sweeper::clock;
use queen_sweeper::{ApplyResult, ApplyStatus, PgTimerTx, SeamTx, TimerOp};

/// Timers per page of a list when the caller does not say. Not measured.
pub const DEFAULT_PAGE_ROWS: u32 = 100;

/// The most timers one page may ask for: a page is one index range scan, and 1000 rows of
/// metadata (no payloads) is about 300 KB of JSON. Not measured.
pub const MAX_PAGE_ROWS: u32 = 1000;

/// The answer header of a schedule that repeats an earlier call's results.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";

/// `POST /api/v1/timers`: `{"ops": [...]}` → `{"results": [...]}`, one result per op, in order.
/// With an `Idempotency-Key`, a retry of the same request within
/// `QUEEN_API_IDEMPOTENCY_WINDOW_S` answers the first call's results (and `Idempotent-Replayed:
/// true`) and schedules nothing; the key with another request is a 422.
pub async fn batch(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let limits = &state.inner.limits;
    let tenant = tenant(&headers, limits)?;
    let key = idempotency_key(&headers)?;
    // Hashed only when keyed: an unkeyed schedule (the hot path) pays nothing for the feature.
    let body = body_bytes(body, limits)?;
    let request_sha256 = key.as_ref().map(|_| Sha256::digest(&body));
    let ops = parse_batch(&body, limits)?;
    let mut tx = state
        .inner
        .seam
        .begin(state.inner.db.begin_timer_tx().await?);
    if let (Some(key), Some(sha256)) = (&key, request_sha256) {
        let window_ms = limits.idempotency_window_s.saturating_mul(1000);
        let taken =
            PgApi::idempotency_begin(tx.transaction(), &tenant, key, &sha256, window_ms).await?;
        if !taken.fresh {
            // Nothing was written: dropping the transaction rolls back the expired keys' delete.
            return replay(key, &taken);
        }
    }
    let results = apply(&state, &tenant, &ops, tx, key.as_deref()).await?;
    Ok(Json(json!({ "results": results })).into_response())
}

/// The answer of a call whose key another call took first.
fn replay(key: &str, taken: &KeyTaken) -> Result<Response, ApiError> {
    if !taken.same_request {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "idempotency_key_reused",
            format!(
                "the Idempotency-Key {key:?} was used with another request within QUEEN_API_IDEMPOTENCY_WINDOW_S; use a new key for a new request"
            ),
        ));
    }
    let mut response = Json(json!({ "results": &taken.answer })).into_response();
    response
        .headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    Ok(response)
}

/// `DELETE /api/v1/timers/{queue}/{timerKey}`: 200 cancelled, 404 absent (the error shape, like
/// every 404), 409 too late (the timer is in a sweeper's hands and will fire).
pub async fn cancel(
    State(state): State<ApiState>,
    headers: HeaderMap,
    names_in_path: Result<Path<(String, String)>, PathRejection>,
) -> Result<(StatusCode, Json<ApplyResult>), ApiError> {
    let limits = &state.inner.limits;
    let tenant = tenant(&headers, limits)?;
    let (queue, timer_key) = path(names_in_path)?;
    name("queue", &queue, limits)?;
    name("timerKey", &timer_key, limits)?;
    let absent = absent_timer(&tenant, &queue, &timer_key);
    let op = TimerOp::Cancel { queue, timer_key };
    let tx = state
        .inner
        .seam
        .begin(state.inner.db.begin_timer_tx().await?);
    let mut results = apply(&state, &tenant, std::slice::from_ref(&op), tx, None).await?;
    let result = results.pop().expect("the seam answers every operation");
    let status = match result.status {
        ApplyStatus::Absent => return Err(absent),
        ApplyStatus::TooLate => StatusCode::CONFLICT,
        _ => StatusCode::OK,
    };
    Ok((status, Json(result)))
}

/// The rest of one transaction through the seam: apply, store the answer under the call's
/// idempotency key (taken by the caller), commit, then the wake.
async fn apply(
    state: &ApiState,
    tenant: &str,
    ops: &[TimerOp],
    mut tx: SeamTx<PgTimerTx<'static>>,
    key: Option<&str>,
) -> Result<Vec<ApplyResult>, ApiError> {
    let mut results = tx.apply(tenant, ops, clock::tokio_now()).await?;
    for result in &mut results {
        result.deliver_at = result.deliver_at.as_deref().map(views::normalized);
    }
    if let Some(key) = key {
        let answer = serde_json::to_value(&results).expect("results serialize");
        PgApi::idempotency_finish(tx.transaction(), tenant, key, &answer).await?;
    }
    let rings = tx.wake_at().is_some();
    let moved = tx.commit().await?;
    if rings {
        state.inner.metrics.woke(moved);
    }
    Ok(results)
}

/// `GET /api/v1/timers/{queue}/{timerKey}`: the timer with its payload and state, or 404.
pub async fn peek(
    State(state): State<ApiState>,
    headers: HeaderMap,
    names_in_path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<views::View>, ApiError> {
    let limits = &state.inner.limits;
    let tenant = tenant(&headers, limits)?;
    let (queue, timer_key) = path(names_in_path)?;
    name("queue", &queue, limits)?;
    name("timerKey", &timer_key, limits)?;
    match state
        .inner
        .db
        .peek_timer(&tenant, &queue, &timer_key)
        .await?
    {
        Some(row) => Ok(Json(views::timer(&row))),
        None => Err(absent_timer(&tenant, &queue, &timer_key)),
    }
}

fn absent_timer(tenant: &str, queue: &str, timer_key: &str) -> ApiError {
    ApiError::not_found(
        "not_found",
        format!(
            "no timer ({queue}, {timer_key}) for tenant {tenant}: it fired, was cancelled, or never was"
        ),
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// The last timer key of the previous page (`nextAfter`); absent for the first page.
    after: Option<String>,
    limit: Option<u32>,
}

/// `GET /api/v1/timers/{queue}?after=KEY&limit=N`: timers in key order, `nextAfter` to continue
/// (absent on the last page).
pub async fn list(
    State(state): State<ApiState>,
    headers: HeaderMap,
    queue_in_path: Result<Path<String>, PathRejection>,
    page: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<TimerPage>, ApiError> {
    let limits = &state.inner.limits;
    let tenant = tenant(&headers, limits)?;
    let queue = path(queue_in_path)?;
    name("queue", &queue, limits)?;
    let page = query(page)?;
    let rows = page_rows(page.limit)?;
    if let Some(after) = &page.after {
        name("after", after, limits)?;
    }
    let timers = state
        .inner
        .db
        .list_timers(&tenant, &queue, page.after.as_deref(), rows)
        .await?;
    let next_after = (timers.len() == rows as usize)
        .then(|| timers.last().map(|row| row.timer_key.clone()))
        .flatten();
    Ok(Json(TimerPage {
        timers: timers.iter().map(views::timer).collect(),
        next_after,
    }))
}

/// A page of a queue's timers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimerPage {
    timers: Vec<views::View>,
    next_after: Option<String>,
}

/// The page size asked for, 1..=[`MAX_PAGE_ROWS`], [`DEFAULT_PAGE_ROWS`] when not asked.
pub fn page_rows(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit {
        None => Ok(DEFAULT_PAGE_ROWS),
        Some(rows) if (1..=MAX_PAGE_ROWS).contains(&rows) => Ok(rows),
        Some(rows) => Err(ApiError::bad_request(
            "invalid_query",
            format!("limit {rows} is outside 1..={MAX_PAGE_ROWS}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_between_one_and_the_maximum_rows() {
        assert_eq!(page_rows(None).unwrap(), DEFAULT_PAGE_ROWS);
        assert_eq!(page_rows(Some(1)).unwrap(), 1);
        assert_eq!(page_rows(Some(MAX_PAGE_ROWS)).unwrap(), MAX_PAGE_ROWS);
        assert!(page_rows(Some(0)).is_err());
        assert!(page_rows(Some(MAX_PAGE_ROWS + 1)).is_err());
    }
}
