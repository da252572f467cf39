//! `GET /api/v1/messages/{queue}?partition=P&from=N&limit=M`: fired (and pushed) messages of one
//! partition from an offset on, in offset order; enough for a test or the soak to check delivery.
//!
//! A page is bounded twice: by rows (`limit`, at most [`MAX_PAGE_ROWS`]) and by payload bytes
//! ([`MAX_PAGE_BYTES`], the first message always included), so a page of large payloads cannot
//! become a response of gigabytes. `nextFrom` is where the next page starts.

use axum::Json;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};

use super::ApiState;
use super::errors::ApiError;
use super::input::{name, path, query, tenant};
use super::timers::{MAX_PAGE_ROWS, page_rows};
use super::views;
use crate::queries::Page;

/// The partition read when the caller names none: the one `log_timers_apply_v1` schedules into by
/// default.
pub const DEFAULT_PARTITION: &str = "default";

/// Payload bytes of one page beyond its first message. Four MiB is the default request body limit
/// too: an answer is no bigger than a request may be. Not measured.
pub const MAX_PAGE_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadQuery {
    partition: Option<String>,
    /// The first offset to read; 0 when absent.
    from: Option<u64>,
    limit: Option<u32>,
}

pub async fn read(
    State(state): State<ApiState>,
    headers: HeaderMap,
    queue_in_path: Result<Path<String>, PathRejection>,
    page: Result<Query<ReadQuery>, QueryRejection>,
) -> Result<Json<MessagePage>, ApiError> {
    let limits = &state.inner.limits;
    let tenant = tenant(&headers, limits)?;
    let queue = path(queue_in_path)?;
    name("queue", &queue, limits)?;
    let page = query(page)?;
    let partition = page
        .partition
        .unwrap_or_else(|| DEFAULT_PARTITION.to_owned());
    name("partition", &partition, limits)?;
    let from = page.from.unwrap_or(0);
    if from > i64::MAX as u64 {
        return Err(ApiError::bad_request(
            "invalid_query",
            format!("from {from} is not an offset"),
        ));
    }
    let rows = page_rows(page.limit)?;
    debug_assert!(rows <= MAX_PAGE_ROWS);
    let messages = state
        .inner
        .db
        .read_messages(
            &tenant,
            &queue,
            &partition,
            from,
            Page {
                rows,
                max_bytes: MAX_PAGE_BYTES,
            },
        )
        .await?;
    let next_from = messages.last().map_or(from, |m| m.offset + 1);
    Ok(Json(MessagePage {
        messages: messages.iter().map(views::message).collect(),
        queue,
        partition,
        next_from,
    }))
}

/// A page of a partition's messages.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MessagePage {
    queue: String,
    partition: String,
    messages: Vec<views::View>,
    next_from: u64,
}
