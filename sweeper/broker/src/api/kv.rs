//! `/api/v1/kv/{namespace}/{key}`: put with an optional TTL, get, delete, through
//! `kv_put_v2` / `kv_get_v2` / `kv_delete_v1`. An expired row is dead from the first read after
//! its instant, whether or not the prune has removed it yet (`kv_live_v1`).
//!
//! A value is stored as the JSON text the client sent and answered as that text, written into the
//! answer as is: key order, number spelling and escapes (`\u0000` included) survive. It is bounded
//! by the request body limit (`QUEEN_API_MAX_BODY_BYTES`); the tenant's quota, checked by
//! `kv_put_v2` against the usage rollup, is a 429.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::ApiState;
use super::config::ApiConfig;
use super::errors::ApiError;
use super::input::{
    body_bytes, json_document, name, object, path, refuse_server_owned, tenant, typed,
};
use super::views;

/// Fields of a KV row the server sets.
pub const SERVER_OWNED: &[&str] = &[
    "version",
    "expiresAt",
    "expires_at",
    "created",
    "createdAt",
    "created_at",
    "updatedAt",
    "updated_at",
    "tenant",
    "tenantId",
    "tenant_id",
];

/// The longest TTL: ten years, beyond which a number is a unit mistake (the same bound as
/// `log_timers_apply_v1`'s delays).
pub const MAX_TTL_MS: i64 = 315_360_000_000;

/// The body of a put without its `value` (taken out first: `null` is a value like any other).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PutWire {
    #[serde(default)]
    ttl_ms: Option<i64>,
}

/// The put's `value` as the text the client wrote, read in a second pass over the body (the
/// first, into a [`Value`], makes every other check).
#[derive(Debug, Deserialize)]
struct RawPut<'a> {
    #[serde(borrow)]
    value: &'a RawValue,
}

/// A live row as an answer, its value written as the stored text.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryView {
    value: Box<RawValue>,
    version: i64,
    expires_at: Option<String>,
}

/// `PUT /api/v1/kv/{namespace}/{key}` with `{"value": ..., "ttlMs": N}`: 201 when the row is new
/// (or replaced a dead one), 200 when it overwrote a live one.
pub async fn put(
    State(state): State<ApiState>,
    headers: HeaderMap,
    names_in_path: Result<Path<(String, String)>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let limits = &state.inner.limits;
    let tenant = tenant(&headers, limits)?;
    let (namespace, key) = path(names_in_path)?;
    names(&namespace, &key, limits)?;
    let body = body_bytes(body, limits)?;
    let (value, ttl_ms) = parse_put(&body)?;
    let written = state
        .inner
        .db
        .kv_put(&tenant, &namespace, &key, value, ttl_ms)
        .await?;
    let status = if written.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(json!({
            "version": written.version,
            "expiresAt": written.expires_at.as_deref().map(views::normalized),
            "created": written.created,
        })),
    ))
}

fn parse_put(body: &[u8]) -> Result<(&RawValue, Option<i64>), ApiError> {
    let mut map = object(json_document(body)?, "the body")?;
    refuse_server_owned(&map, SERVER_OWNED, "the body")?;
    if map.remove("value").is_none() {
        return Err(ApiError::bad_request(
            "invalid_request",
            "the body needs \"value\" (any JSON value)",
        ));
    }
    let wire: PutWire = typed(map, "the body")?;
    if let Some(ttl_ms) = wire.ttl_ms
        && !(1..=MAX_TTL_MS).contains(&ttl_ms)
    {
        return Err(ApiError::bad_request(
            "invalid_ttl",
            format!("ttlMs must be in 1..={MAX_TTL_MS} (got {ttl_ms}); leave it out for no expiry"),
        ));
    }
    // The body is one object holding "value" now, so this pass fails only on a key given twice,
    // which the first pass let the last one win.
    let raw: RawPut<'_> = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("invalid_request", format!("the body: {e}")))?;
    Ok((raw.value, wire.ttl_ms))
}

/// `GET /api/v1/kv/{namespace}/{key}`: `{value, version, expiresAt}` of the live row, or 404.
pub async fn get(
    State(state): State<ApiState>,
    headers: HeaderMap,
    names_in_path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<EntryView>, ApiError> {
    let limits = &state.inner.limits;
    let tenant = tenant(&headers, limits)?;
    let (namespace, key) = path(names_in_path)?;
    names(&namespace, &key, limits)?;
    match state.inner.db.kv_get(&tenant, &namespace, &key).await? {
        Some(entry) => Ok(Json(EntryView {
            value: entry.value,
            version: entry.version,
            expires_at: entry.expires_at.as_ref().map(views::timestamp),
        })),
        None => Err(not_found(&namespace, &key)),
    }
}

/// `DELETE /api/v1/kv/{namespace}/{key}`: 200 when a live row was removed, 404 otherwise.
pub async fn delete(
    State(state): State<ApiState>,
    headers: HeaderMap,
    names_in_path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let limits = &state.inner.limits;
    let tenant = tenant(&headers, limits)?;
    let (namespace, key) = path(names_in_path)?;
    names(&namespace, &key, limits)?;
    if state.inner.db.kv_delete(&tenant, &namespace, &key).await? {
        Ok(Json(json!({ "deleted": true })))
    } else {
        Err(not_found(&namespace, &key))
    }
}

fn names(namespace: &str, key: &str, limits: &ApiConfig) -> Result<(), ApiError> {
    name("namespace", namespace, limits)?;
    name("key", key, limits)
}

fn not_found(namespace: &str, key: &str) -> ApiError {
    ApiError::not_found(
        "not_found",
        format!("no live row ({namespace}, {key}): never written, deleted, or expired"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(body: &str) -> Result<(String, Option<i64>), ApiError> {
        parse_put(body.as_bytes()).map(|(value, ttl_ms)| (value.get().to_owned(), ttl_ms))
    }

    #[test]
    fn a_put_takes_any_value_and_an_optional_ttl() {
        assert_eq!(put(r#"{"value": null}"#).unwrap(), ("null".into(), None));
        assert_eq!(
            put(r#"{"value": [1], "ttlMs": 1000}"#).unwrap(),
            ("[1]".into(), Some(1000))
        );
    }

    #[test]
    fn a_value_is_kept_as_the_text_sent() {
        let value = r#"{"z": 1,  "a": [12345678901234567890123, 1.50e3], "nul": "a\u0000b"}"#;
        assert_eq!(
            put(&format!(r#"{{"ttlMs": 5, "value": {value}}}"#)).unwrap(),
            (value.to_owned(), Some(5))
        );
    }

    #[test]
    fn a_put_refuses_what_it_cannot_honour() {
        assert_eq!(put("{}").unwrap_err().code, "invalid_request");
        assert_eq!(put("[1]").unwrap_err().code, "invalid_request");
        assert_eq!(put("{").unwrap_err().code, "malformed_json");
        assert_eq!(
            put(r#"{"value": 1, "value": 2}"#).unwrap_err().code,
            "invalid_request"
        );
        assert_eq!(
            put(r#"{"value": 1, "ttl": 5}"#).unwrap_err().code,
            "unknown_field"
        );
        assert_eq!(
            put(r#"{"value": 1, "version": 5}"#).unwrap_err().code,
            "server_owned_field"
        );
        for ttl in [0, -1, MAX_TTL_MS + 1] {
            assert_eq!(
                put(&format!(r#"{{"value": 1, "ttlMs": {ttl}}}"#))
                    .unwrap_err()
                    .code,
                "invalid_ttl"
            );
        }
        assert!(put(&format!(r#"{{"value": 1, "ttlMs": {MAX_TTL_MS}}}"#)).is_ok());
        assert_eq!(
            put(r#"{"value": 1, "ttlMs": 1.5}"#).unwrap_err().code,
            "invalid_request"
        );
    }
}
