//! Reading a request: the tenant header, names, the JSON body and the query string, each refused
//! with a clear 4xx before anything touches the database. Pure: no I/O, no clock.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{Path, Query};
use axum::http::{HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::config::ApiConfig;
use super::errors::ApiError;

/// The header that names the tenant of a request.
pub const TENANT_HEADER: &str = "x-queen-tenant";

/// The tenant of a request without the header.
pub const DEFAULT_TENANT: &str = "default";

/// The tenant named by the request's header, or [`DEFAULT_TENANT`]. The header given twice is
/// refused rather than one of the two picked: which one a proxy keeps is not ours to guess.
pub fn tenant(headers: &HeaderMap, limits: &ApiConfig) -> Result<String, ApiError> {
    let mut values = headers.get_all(TENANT_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(DEFAULT_TENANT.to_owned());
    };
    if values.next().is_some() {
        return Err(ApiError::bad_request(
            "duplicate_tenant",
            format!("the {TENANT_HEADER} header is given more than once"),
        ));
    }
    let bytes = value.as_bytes();
    if !bytes.iter().all(u8::is_ascii_graphic) {
        return Err(ApiError::bad_request(
            "invalid_tenant",
            format!(
                "the {TENANT_HEADER} header must be visible ASCII (0x21..=0x7E: no space, no control, no byte over 0x7E)"
            ),
        ));
    }
    let tenant = String::from_utf8_lossy(bytes).into_owned();
    name("tenant", &tenant, limits)?;
    Ok(tenant)
}

/// The header of a schedule's optional idempotency key.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// The longest idempotency key: a UUID is 36 bytes; room for a client's own scheme.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;

/// The request's `Idempotency-Key`, if it gave one: 1 to [`MAX_IDEMPOTENCY_KEY_BYTES`] bytes of
/// visible ASCII, given once.
pub fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all(IDEMPOTENCY_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::bad_request(
            "duplicate_idempotency_key",
            "the Idempotency-Key header is given more than once",
        ));
    }
    let bytes = value.as_bytes();
    if bytes.is_empty()
        || bytes.len() > MAX_IDEMPOTENCY_KEY_BYTES
        || !bytes.iter().all(u8::is_ascii_graphic)
    {
        return Err(ApiError::bad_request(
            "invalid_idempotency_key",
            format!(
                "the Idempotency-Key header must be 1 to {MAX_IDEMPOTENCY_KEY_BYTES} bytes of visible ASCII (0x21..=0x7E), got {} bytes",
                bytes.len()
            ),
        ));
    }
    Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
}

/// Checks one name (queue, timer key, partition, txn, namespace, key, tenant): non-empty, no NUL
/// (PostgreSQL text cannot hold one: it would be a 500 from the database, SQLSTATE 22021) and at
/// most `QUEEN_API_MAX_KEY_BYTES` bytes.
pub fn name(what: &str, value: &str, limits: &ApiConfig) -> Result<(), ApiError> {
    if value.is_empty() {
        return Err(ApiError::bad_request(
            "empty_name",
            format!("{what} must be non-empty"),
        ));
    }
    if value.contains('\0') {
        return Err(ApiError::bad_request(
            "nul_in_name",
            format!("{what} contains a NUL character (U+0000), which a name cannot hold"),
        ));
    }
    if value.len() > limits.max_key_bytes as usize {
        return Err(ApiError::bad_request(
            "name_too_long",
            format!(
                "{what} is {} bytes, over QUEEN_API_MAX_KEY_BYTES={}",
                value.len(),
                limits.max_key_bytes
            ),
        ));
    }
    Ok(())
}

/// The request body as JSON. A body over `QUEEN_API_MAX_BODY_BYTES` is a 413; anything that is
/// not one JSON document is a 400.
pub fn json_body(
    body: Result<Bytes, BytesRejection>,
    limits: &ApiConfig,
) -> Result<Value, ApiError> {
    json_document(&body_bytes(body, limits)?)
}

/// The request body's bytes; over `QUEEN_API_MAX_BODY_BYTES` it is a 413.
pub fn body_bytes(
    body: Result<Bytes, BytesRejection>,
    limits: &ApiConfig,
) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(
                "body_too_large",
                format!(
                    "the request body is over QUEEN_API_MAX_BODY_BYTES={} bytes",
                    limits.max_body_bytes
                ),
            )
        } else {
            ApiError::bad_request("unreadable_body", rejection.body_text())
        }
    })
}

/// `bytes` as one JSON document, or a 400.
pub fn json_document(bytes: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        ApiError::bad_request("malformed_json", format!("the body is not valid JSON: {e}"))
    })
}

/// The path parameters as `T`, or a JSON 400 (a segment that is not UTF-8 once decoded, `%ff`).
pub fn path<T>(path: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    path.map(|Path(value)| value)
        .map_err(|rejection| ApiError::bad_request("invalid_path", rejection.body_text()))
}

/// A JSON object, or a 400 naming `what`.
pub fn object(value: Value, what: &str) -> Result<Map<String, Value>, ApiError> {
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ApiError::bad_request(
            "invalid_request",
            format!("{what} must be a JSON object, not {}", kind(&other)),
        )),
    }
}

/// Refuses a field the server sets itself, naming it: a caller who sends one expects it to take
/// effect, and silently ignoring it would be a lie.
pub fn refuse_server_owned(
    map: &Map<String, Value>,
    server_owned: &[&str],
    what: &str,
) -> Result<(), ApiError> {
    match map.keys().find(|key| server_owned.contains(&key.as_str())) {
        Some(field) => Err(ApiError::bad_request(
            "server_owned_field",
            format!("{what}: \"{field}\" is set by the server and cannot be given"),
        )),
        None => Ok(()),
    }
}

/// Deserializes `map` into `T` (whose serde attributes deny unknown fields). An unknown field is
/// its own code, so a typo is told apart from a wrong type.
pub fn typed<T: DeserializeOwned>(map: Map<String, Value>, what: &str) -> Result<T, ApiError> {
    serde_json::from_value(Value::Object(map)).map_err(|e| {
        let message = e.to_string();
        let code = if message.starts_with("unknown field") {
            "unknown_field"
        } else {
            "invalid_request"
        };
        ApiError::bad_request(code, format!("{what}: {message}"))
    })
}

/// The query string as `T`, or a 400.
pub fn query<T>(query: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    query
        .map(|Query(value)| value)
        .map_err(|rejection| ApiError::bad_request("invalid_query", rejection.body_text()))
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use serde_json::json;

    #[test]
    fn the_tenant_defaults_and_is_checked_like_every_name() {
        let limits = ApiConfig::default();
        let mut headers = HeaderMap::new();
        assert_eq!(tenant(&headers, &limits).unwrap(), "default");
        headers.insert(TENANT_HEADER, HeaderValue::from_static("acme"));
        assert_eq!(tenant(&headers, &limits).unwrap(), "acme");
        headers.insert(TENANT_HEADER, HeaderValue::from_static(""));
        assert_eq!(tenant(&headers, &limits).unwrap_err().code, "empty_name");
        headers.insert(
            TENANT_HEADER,
            HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
        );
        assert_eq!(
            tenant(&headers, &limits).unwrap_err().code,
            "invalid_tenant"
        );
        headers.insert(TENANT_HEADER, HeaderValue::from_static("a b"));
        assert_eq!(
            tenant(&headers, &limits).unwrap_err().code,
            "invalid_tenant"
        );
        headers.insert(TENANT_HEADER, HeaderValue::from_static("a"));
        headers.append(TENANT_HEADER, HeaderValue::from_static("b"));
        assert_eq!(
            tenant(&headers, &limits).unwrap_err().code,
            "duplicate_tenant"
        );
    }

    #[test]
    fn a_nul_in_a_name_is_refused_by_name() {
        let limits = ApiConfig::default();
        let e = name("queue", "q\0", &limits).unwrap_err();
        assert_eq!((e.code, e.message.contains("queue")), ("nul_in_name", true));
        assert!(name("queue", "q0", &limits).is_ok());
    }

    #[test]
    fn a_name_at_its_limit_passes_and_one_byte_more_is_refused() {
        let limits = ApiConfig {
            max_key_bytes: 4,
            ..ApiConfig::default()
        };
        assert!(name("key", "abcd", &limits).is_ok());
        let e = name("key", "abcde", &limits).unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, "name_too_long")
        );
        // Bytes, not characters: "é" is two.
        assert!(name("key", "abé", &limits).is_ok());
        assert!(name("key", "abcé", &limits).is_err());
    }

    #[test]
    fn malformed_json_is_a_400() {
        let limits = ApiConfig::default();
        let e = json_body(Ok(Bytes::from_static(b"{\"ops\": [")), &limits).unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, "malformed_json")
        );
        assert!(json_body(Ok(Bytes::from_static(b"")), &limits).is_err());
        assert_eq!(
            json_body(Ok(Bytes::from_static(b" {\"a\": 1} ")), &limits).unwrap(),
            json!({"a": 1})
        );
    }

    #[test]
    fn server_owned_and_unknown_fields_are_told_apart() {
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Wire {
            a: i64,
        }
        let map = object(json!({"a": 1, "messageId": "x"}), "op 0").unwrap();
        let e = refuse_server_owned(&map, &["messageId"], "op 0").unwrap_err();
        assert_eq!(e.code, "server_owned_field");
        assert!(e.message.contains("\"messageId\""), "{}", e.message);
        let e = typed::<Wire>(object(json!({"a": 1, "b": 2}), "x").unwrap(), "op 0").unwrap_err();
        assert_eq!(e.code, "unknown_field");
        let e = typed::<Wire>(object(json!({"a": 1.5}), "x").unwrap(), "op 0").unwrap_err();
        assert_eq!(e.code, "invalid_request");
        assert_eq!(
            object(json!([1]), "the body").unwrap_err().code,
            "invalid_request"
        );
    }
}
