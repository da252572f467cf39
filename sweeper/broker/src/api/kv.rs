//! `/api/v1/kv/{namespace}/{key}`: put with an optional TTL, get, delete, through the existing
//! `kv_put_v1` / `kv_get_v1` / `kv_delete_v1`. An expired row is dead from the first read after
//! its instant, whether or not the prune has removed it yet (`kv_live_v1`).
//!
//! A value is bounded by the request body limit (`QUEEN_API_MAX_BODY_BYTES`); the tenant's quota,
//! checked by `kv_put_v1` against the usage rollup, is a 429.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::ApiState;
use super::config::ApiConfig;
use super::errors::ApiError;
use super::input::{
    json_body, name, nul_free_json, object, path, refuse_server_owned, tenant, typed,
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
    let (value, ttl_ms) = parse_put(json_body(body, limits)?)?;
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

fn parse_put(body: Value) -> Result<(Value, Option<i64>), ApiError> {
    let mut map = object(body, "the body")?;
    refuse_server_owned(&map, SERVER_OWNED, "the body")?;
    let Some(value) = map.remove("value") else {
        return Err(ApiError::bad_request(
            "invalid_request",
            "the body needs \"value\" (any JSON value)",
        ));
    };
    nul_free_json(&value, "value")?;
    let wire: PutWire = typed(map, "the body")?;
    if let Some(ttl_ms) = wire.ttl_ms
        && !(1..=MAX_TTL_MS).contains(&ttl_ms)
    {
        return Err(ApiError::bad_request(
            "invalid_ttl",
            format!("ttlMs must be in 1..={MAX_TTL_MS} (got {ttl_ms}); leave it out for no expiry"),
        ));
    }
    Ok((value, wire.ttl_ms))
}

/// `GET /api/v1/kv/{namespace}/{key}`: `{value, version, expiresAt}` of the live row, or 404.
pub async fn get(
    State(state): State<ApiState>,
    headers: HeaderMap,
    names_in_path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let limits = &state.inner.limits;
    let tenant = tenant(&headers, limits)?;
    let (namespace, key) = path(names_in_path)?;
    names(&namespace, &key, limits)?;
    match state.inner.db.kv_get(&tenant, &namespace, &key).await? {
        Some(entry) => Ok(Json(json!({
            "value": entry.value,
            "version": entry.version,
            "expiresAt": entry.expires_at.as_deref().map(views::normalized),
        }))),
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

    #[test]
    fn a_put_takes_any_value_and_an_optional_ttl() {
        assert_eq!(
            parse_put(json!({"value": null})).unwrap(),
            (Value::Null, None)
        );
        assert_eq!(
            parse_put(json!({"value": [1], "ttlMs": 1000})).unwrap(),
            (json!([1]), Some(1000))
        );
    }

    #[test]
    fn a_put_refuses_what_it_cannot_honour() {
        assert_eq!(parse_put(json!({})).unwrap_err().code, "invalid_request");
        assert_eq!(
            parse_put(json!({"value": 1, "ttl": 5})).unwrap_err().code,
            "unknown_field"
        );
        assert_eq!(
            parse_put(json!({"value": 1, "version": 5}))
                .unwrap_err()
                .code,
            "server_owned_field"
        );
        for ttl in [0, -1, MAX_TTL_MS + 1] {
            assert_eq!(
                parse_put(json!({"value": 1, "ttlMs": ttl}))
                    .unwrap_err()
                    .code,
                "invalid_ttl"
            );
        }
        assert!(parse_put(json!({"value": 1, "ttlMs": MAX_TTL_MS})).is_ok());
        assert_eq!(
            parse_put(json!({"value": 1, "ttlMs": 1.5}))
                .unwrap_err()
                .code,
            "invalid_request"
        );
    }
}
