//! The wire form of `POST /api/v1/timers` and its checks, turned into the seam's [`TimerOp`]s.
//! Pure: every refusal happens here, before a transaction opens, so a refused call writes nothing.
//!
//! ```json
//! {"ops": [
//!   {"op": "schedule",   "queue": "q", "timerKey": "k", "delayMs": 200, "payload": {"any": "json"},
//!    "partition": "p", "txn": "t"},
//!   {"op": "reschedule", "queue": "q", "timerKey": "k2", "delayMs": 0, "payloadBase64": "AP8="},
//!   {"op": "cancel",     "queue": "q", "timerKey": "k3"}
//! ]}
//! ```
//!
//! `log_timers_apply_v1` checks the same contract again inside the database (SQLSTATE 22023); the
//! API checks first so that the caller gets the limit's name and the operation's index, and so
//! that nothing over a limit ever reaches the database.

use std::collections::HashSet;

use base64::Engine as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::config::ApiConfig;
use super::errors::ApiError;
use super::input::{json_document, name, object, refuse_server_owned, typed};
use queen_sweeper::{JsonText, Payload, TimerOp};

/// Fields the server sets, refused by name wherever a caller could try to set them. The same list
/// as `c_server_owned` in `sql/014_timers_apply.sql`.
pub const SERVER_OWNED: &[&str] = &[
    "messageId",
    "message_id",
    "tenant",
    "tenantId",
    "tenant_id",
    "deliverAt",
    "deliver_at",
    "attempts",
    "token",
    "claimToken",
    "claim_token",
    "claimedUntil",
    "claimed_until",
    "lastError",
    "visibleAt",
    "shard",
    "offset",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchWire {
    ops: Vec<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum OpKind {
    Schedule,
    Reschedule,
    Cancel,
}

/// One operation without its `payload` (taken out first, so that `"payload": null`, a JSON value
/// like any other, is told apart from no payload).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct OpWire {
    op: OpKind,
    queue: String,
    timer_key: String,
    #[serde(default)]
    delay_ms: Option<i64>,
    #[serde(default)]
    partition: Option<String>,
    #[serde(default)]
    txn: Option<String>,
    #[serde(default)]
    payload_base64: Option<String>,
}

/// The payloads of a batch as the text the client wrote, read in a second pass over the body
/// (the first, into [`Value`]s, makes every other check): a JSON payload is stored as exactly
/// that text, so key order, number spelling and escapes survive.
#[derive(Debug, Deserialize)]
struct RawBatch<'a> {
    #[serde(borrow)]
    ops: Vec<RawOp<'a>>,
}

#[derive(Debug, Deserialize)]
struct RawOp<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    payload: Option<&'a RawValue>,
}

/// A field that is there, `null` included (`Option` alone would read `"payload": null` as none).
fn present<'de, D: Deserializer<'de>>(field: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(field).map(Some)
}

/// The body of `POST /api/v1/timers` as operations for the seam, or the first refusal.
pub fn parse_batch(body: &[u8], limits: &ApiConfig) -> Result<Vec<TimerOp>, ApiError> {
    let map = object(json_document(body)?, "the body")?;
    refuse_server_owned(&map, SERVER_OWNED, "the body")?;
    let batch: BatchWire = typed(map, "the body")?;
    if batch.ops.is_empty() {
        return Err(ApiError::bad_request(
            "no_ops",
            "\"ops\" is empty: nothing to do",
        ));
    }
    if batch.ops.len() > limits.max_ops_per_call as usize {
        return Err(ApiError::bad_request(
            "too_many_ops",
            format!(
                "{} operations, over QUEEN_TIMERS_MAX_OPS_PER_CALL={}; split the call",
                batch.ops.len(),
                limits.max_ops_per_call
            ),
        ));
    }
    let ops = batch
        .ops
        .into_iter()
        .enumerate()
        .map(|(index, op)| object(op, &format!("op {index}")).map_err(|e| e.at(index)))
        .collect::<Result<Vec<_>, _>>()?;
    // Every op is an object now, so this pass fails only on a key given twice, which the first
    // pass let the last one win.
    let raw: RawBatch<'_> = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("invalid_request", format!("the body: {e}")))?;
    let ops = ops
        .into_iter()
        .zip(raw.ops)
        .enumerate()
        .map(|(index, (op, raw))| parse_op(index, op, raw.payload, limits).map_err(|e| e.at(index)))
        .collect::<Result<Vec<_>, _>>()?;
    refuse_duplicates(&ops)?;
    Ok(ops)
}

fn parse_op(
    index: usize,
    mut map: serde_json::Map<String, Value>,
    payload: Option<&RawValue>,
    limits: &ApiConfig,
) -> Result<TimerOp, ApiError> {
    let what = format!("op {index}");
    refuse_server_owned(&map, SERVER_OWNED, &what)?;
    map.remove("payload");
    let wire: OpWire = typed(map, &what)?;
    checked_op(wire, payload, limits).map_err(|e| e.prefixed(&what))
}

/// The checks on one well-formed op: names, payload, the fields its kind takes, the horizon.
fn checked_op(
    wire: OpWire,
    payload: Option<&RawValue>,
    limits: &ApiConfig,
) -> Result<TimerOp, ApiError> {
    name("queue", &wire.queue, limits)?;
    name("timerKey", &wire.timer_key, limits)?;
    for (what, value) in [("partition", &wire.partition), ("txn", &wire.txn)] {
        if let Some(value) = value {
            name(what, value, limits)?;
        }
    }
    let payload = payload_of(payload, wire.payload_base64.as_deref(), limits)?;
    if wire.op == OpKind::Cancel {
        if wire.delay_ms.is_some()
            || payload.is_some()
            || wire.partition.is_some()
            || wire.txn.is_some()
        {
            return Err(ApiError::bad_request(
                "invalid_request",
                "cancel takes only \"queue\" and \"timerKey\"",
            ));
        }
        return Ok(TimerOp::Cancel {
            queue: wire.queue,
            timer_key: wire.timer_key,
        });
    }
    let delay_ms = delay_within_horizon(wire.delay_ms, limits)?;
    match (wire.op, payload) {
        (OpKind::Schedule, None) => Err(ApiError::bad_request(
            "invalid_request",
            "schedule needs \"payload\" or \"payloadBase64\"",
        )),
        (OpKind::Schedule, Some(payload)) => Ok(TimerOp::Schedule {
            queue: wire.queue,
            timer_key: wire.timer_key,
            delay_ms,
            payload,
            partition: wire.partition,
            txn: wire.txn,
        }),
        (_, payload) => Ok(TimerOp::Reschedule {
            queue: wire.queue,
            timer_key: wire.timer_key,
            delay_ms,
            payload,
            partition: wire.partition,
            txn: wire.txn,
        }),
    }
}

/// `delayMs` is required for schedule and reschedule, and within the horizon either way: a
/// negative delay is legal (due at once) but a very negative one is the same unit mistake.
fn delay_within_horizon(delay_ms: Option<i64>, limits: &ApiConfig) -> Result<i64, ApiError> {
    let Some(delay_ms) = delay_ms else {
        return Err(ApiError::bad_request(
            "invalid_request",
            "schedule and reschedule need \"delayMs\", an integer number of milliseconds",
        ));
    };
    if delay_ms.unsigned_abs() > limits.max_horizon_ms().unsigned_abs() {
        return Err(ApiError::bad_request(
            "beyond_horizon",
            format!(
                "delayMs {delay_ms} is beyond QUEEN_TIMERS_MAX_HORIZON_S={} s",
                limits.max_horizon_s
            ),
        ));
    }
    Ok(delay_ms)
}

/// The payload, from `payload` (any JSON value, kept as the text sent) or `payloadBase64` (bytes),
/// never both; over `QUEEN_TIMERS_MAX_PAYLOAD_BYTES` (the text's bytes, or the decoded bytes) it
/// is a 413.
fn payload_of(
    json: Option<&RawValue>,
    base64: Option<&str>,
    limits: &ApiConfig,
) -> Result<Option<Payload>, ApiError> {
    let (payload, bytes) = match (json, base64) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "give \"payload\" or \"payloadBase64\", not both",
            ));
        }
        (Some(text), None) => {
            let bytes = text.get().len();
            (Payload::Json(JsonText::from_raw(text.to_owned())), bytes)
        }
        (None, Some(text)) => {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| {
                    ApiError::bad_request(
                        "invalid_base64",
                        format!("payloadBase64 is not base64: {e}"),
                    )
                })?;
            let bytes = raw.len();
            (Payload::Bytes(raw), bytes)
        }
    };
    if bytes as u64 > limits.max_payload_bytes {
        return Err(ApiError::too_large(
            "payload_too_large",
            format!(
                "the payload is {bytes} bytes, over QUEEN_TIMERS_MAX_PAYLOAD_BYTES={}",
                limits.max_payload_bytes
            ),
        ));
    }
    Ok(Some(payload))
}

fn refuse_duplicates(ops: &[TimerOp]) -> Result<(), ApiError> {
    let mut seen = HashSet::new();
    for (index, op) in ops.iter().enumerate() {
        let (TimerOp::Schedule {
            queue, timer_key, ..
        }
        | TimerOp::Reschedule {
            queue, timer_key, ..
        }
        | TimerOp::Cancel { queue, timer_key }) = op;
        if !seen.insert((queue, timer_key)) {
            return Err(ApiError::bad_request(
                "duplicate_timer",
                format!("op {index}: ({queue}, {timer_key}) appears twice in one call"),
            )
            .at(index));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use serde_json::json;

    fn limits() -> ApiConfig {
        ApiConfig {
            max_payload_bytes: 10,
            max_ops_per_call: 3,
            max_horizon_s: 60,
            max_key_bytes: 8,
            ..ApiConfig::default()
        }
    }

    fn parse(body: &Value, limits: &ApiConfig) -> Result<Vec<TimerOp>, ApiError> {
        parse_batch(&serde_json::to_vec(body).unwrap(), limits)
    }

    fn refusal(body: &Value) -> ApiError {
        parse(body, &limits()).expect_err("refused")
    }

    #[test]
    fn the_three_operations_become_seam_ops() {
        let ops = parse(&
            json!({"ops": [
                {"op": "schedule", "queue": "q", "timerKey": "a", "delayMs": 200, "payload": null, "partition": "p", "txn": "t"},
                {"op": "reschedule", "queue": "q", "timerKey": "b", "delayMs": -5, "payloadBase64": "AP8="},
                {"op": "cancel", "queue": "q", "timerKey": "c"},
            ]}),
            &limits(),
        )
        .unwrap();
        assert_eq!(
            ops,
            vec![
                TimerOp::Schedule {
                    queue: "q".into(),
                    timer_key: "a".into(),
                    delay_ms: 200,
                    payload: Payload::json(&Value::Null),
                    partition: Some("p".into()),
                    txn: Some("t".into()),
                },
                TimerOp::Reschedule {
                    queue: "q".into(),
                    timer_key: "b".into(),
                    delay_ms: -5,
                    payload: Some(Payload::Bytes(vec![0, 255])),
                    partition: None,
                    txn: None,
                },
                TimerOp::Cancel {
                    queue: "q".into(),
                    timer_key: "c".into()
                },
            ]
        );
    }

    #[test]
    fn server_owned_fields_are_refused_by_name_in_an_op_and_at_the_top() {
        for field in SERVER_OWNED {
            let mut op = json!({"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 1, "payload": 1});
            op[*field] = json!("x");
            let e = refusal(&json!({"ops": [op]}));
            assert_eq!(
                (e.code, e.index),
                ("server_owned_field", Some(0)),
                "{field}"
            );
        }
        assert_eq!(
            refusal(&json!({"ops": [], "tenant": "t"})).code,
            "server_owned_field"
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        let e = refusal(
            &json!({"ops": [{"op": "cancel", "queue": "q", "timerKey": "k", "colour": 1}]}),
        );
        assert_eq!((e.code, e.index), ("unknown_field", Some(0)));
        assert!(e.message.contains("colour"), "{}", e.message);
        assert_eq!(
            refusal(&json!({"ops": [], "extra": 1})).code,
            "unknown_field"
        );
    }

    #[test]
    fn empty_and_over_long_names_are_refused() {
        let e = refusal(&json!({"ops": [{"op": "cancel", "queue": "", "timerKey": "k"}]}));
        assert_eq!(e.code, "empty_name");
        let e = refusal(&json!({"ops": [{"op": "cancel", "queue": "q", "timerKey": ""}]}));
        assert_eq!(e.code, "empty_name");
        let e = refusal(&json!({"ops": [{"op": "cancel", "queue": "q", "timerKey": "123456789"}]}));
        assert_eq!(e.code, "name_too_long");
        assert!(
            parse(
                &json!({"ops": [{"op": "cancel", "queue": "q", "timerKey": "12345678"}]}),
                &limits()
            )
            .is_ok()
        );
    }

    #[test]
    fn a_payload_one_byte_over_the_limit_is_a_413() {
        // "123456789" is 11 bytes of JSON text with its quotes; "12345678" is 10.
        let at = json!({"ops": [{"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 0, "payload": "12345678"}]});
        assert!(parse(&at, &limits()).is_ok());
        let e = refusal(
            &json!({"ops": [{"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 0, "payload": "123456789"}]}),
        );
        assert_eq!(
            (e.status, e.code),
            (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
        );
        // Base64 is measured decoded: 12 bytes.
        let e = refusal(
            &json!({"ops": [{"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 0, "payloadBase64": "AAAAAAAAAAAAAAAA"}]}),
        );
        assert_eq!(e.status, StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[test]
    fn more_ops_than_the_limit_and_no_ops_are_refused() {
        let op = json!({"op": "cancel", "queue": "q", "timerKey": "k"});
        let four: Vec<Value> = (0..4)
            .map(|i| {
                let mut op = op.clone();
                op["timerKey"] = json!(format!("k{i}"));
                op
            })
            .collect();
        assert_eq!(refusal(&json!({"ops": four})).code, "too_many_ops");
        assert_eq!(refusal(&json!({"ops": []})).code, "no_ops");
    }

    #[test]
    fn a_delay_one_millisecond_beyond_the_horizon_is_refused_either_way() {
        let op = |delay: i64| json!({"ops": [{"op": "reschedule", "queue": "q", "timerKey": "k", "delayMs": delay}]});
        assert!(parse(&op(60_000), &limits()).is_ok());
        assert!(parse(&op(-60_000), &limits()).is_ok());
        assert_eq!(refusal(&op(60_001)).code, "beyond_horizon");
        assert_eq!(refusal(&op(-60_001)).code, "beyond_horizon");
        assert_eq!(refusal(&op(i64::MIN)).code, "beyond_horizon");
    }

    #[test]
    fn contract_breaches_are_400s() {
        for (op, code) in [
            (
                json!({"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 1}),
                "invalid_request",
            ),
            (
                json!({"op": "schedule", "queue": "q", "timerKey": "k", "payload": 1}),
                "invalid_request",
            ),
            (
                json!({"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 1.5, "payload": 1}),
                "invalid_request",
            ),
            (
                json!({"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 1, "payload": 1, "payloadBase64": "AA=="}),
                "invalid_request",
            ),
            (
                json!({"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 1, "payloadBase64": "!!"}),
                "invalid_base64",
            ),
            (
                json!({"op": "cancel", "queue": "q", "timerKey": "k", "delayMs": 1}),
                "invalid_request",
            ),
            (
                json!({"op": "fire", "queue": "q", "timerKey": "k"}),
                "invalid_request",
            ),
            (json!({"queue": "q", "timerKey": "k"}), "invalid_request"),
            (json!("cancel"), "invalid_request"),
        ] {
            assert_eq!(refusal(&json!({"ops": [op.clone()]})).code, code, "{op}");
        }
        assert_eq!(refusal(&json!([1])).code, "invalid_request");
    }

    #[test]
    fn the_same_timer_twice_in_one_call_is_refused_at_its_second_index() {
        let e = refusal(&json!({"ops": [
            {"op": "cancel", "queue": "q", "timerKey": "k"},
            {"op": "cancel", "queue": "q", "timerKey": "other"},
            {"op": "cancel", "queue": "q", "timerKey": "k"},
        ]}));
        assert_eq!((e.code, e.index), ("duplicate_timer", Some(2)));
    }

    fn payload_text(body: &str) -> String {
        match parse_batch(body.as_bytes(), &ApiConfig::default())
            .unwrap()
            .pop()
        {
            Some(TimerOp::Schedule {
                payload: Payload::Json(text),
                ..
            }) => text.get().to_owned(),
            other => panic!("not a JSON schedule: {other:?}"),
        }
    }

    #[test]
    fn a_json_payload_is_kept_as_the_text_sent() {
        // Key order, a number no f64 holds, an escaped NUL, inner whitespace: all as sent.
        let payload = r#"{"b": 1,  "a": [12345678901234567890123, 1.50], "nul": "\u0000"}"#;
        let body = format!(
            r#"{{"ops": [{{"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 0, "payload": {payload} }}]}}"#
        );
        assert_eq!(payload_text(&body), payload);
        assert_eq!(
            payload_text(
                r#"{"ops": [{"payload": null, "op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 0}]}"#
            ),
            "null"
        );
    }

    #[test]
    fn a_payload_is_measured_as_the_text_sent() {
        // 10 bytes with its inner spaces: at the limit; one more space is over it.
        let body = |payload: &str| {
            format!(
                r#"{{"ops": [{{"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 0, "payload": {payload}}}]}}"#
            )
        };
        assert!(parse_batch(body("[1,  2,  3]").as_bytes(), &limits()).is_err());
        assert!(parse_batch(body("[1, 2,  3]").as_bytes(), &limits()).is_ok());
    }

    #[test]
    fn a_payload_given_twice_in_one_op_is_refused() {
        let e = parse_batch(
            br#"{"ops": [{"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 0, "payload": 1, "payload": 2}]}"#,
            &limits(),
        )
        .unwrap_err();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, "invalid_request")
        );
        assert!(e.message.contains("payload"), "{}", e.message);
    }
}
