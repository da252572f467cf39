//! How rows read from the database look in JSON answers. Pure.
//!
//! A payload is stored as bytes: a JSON payload as the UTF-8 text it was sent as, a
//! `payloadBase64` one as the bytes themselves. An answer always carries `payloadBase64` (exact,
//! whatever was stored) and, when the bytes are one JSON document, `payload` as well, written into
//! the answer as the stored text itself (not parsed and written again), so a JSON caller reads
//! back what it sent: the same key order, numbers and escapes.

use base64::Engine as _;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value, json};

use crate::queries::{MessageRow, TimerRow};

/// RFC 3339 in UTC with microseconds, PostgreSQL's own precision.
pub fn timestamp(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// A timestamp the database wrote into JSON (`...+00:00`, or the session's offset) in the one form
/// the API answers with ([`timestamp`]); kept as given if it does not parse.
pub fn normalized(text: &str) -> String {
    DateTime::parse_from_rfc3339(text)
        .map_or_else(|_| text.to_owned(), |at| timestamp(&at.with_timezone(&Utc)))
}

/// A row as an answer: its fields, then its `payload` as the stored JSON text, written as is.
#[derive(Debug)]
pub struct View {
    fields: Map<String, Value>,
    payload: Option<Box<RawValue>>,
}

impl Serialize for View {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.fields.len() + 1))?;
        for (key, value) in &self.fields {
            map.serialize_entry(key, value)?;
        }
        if let Some(payload) = &self.payload {
            map.serialize_entry("payload", payload)?;
        }
        map.end()
    }
}

impl View {
    fn new(fields: Map<String, Value>) -> View {
        View {
            fields,
            payload: None,
        }
    }

    fn with_payload(mut self, bytes: &[u8]) -> View {
        self.payload = std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| serde_json::from_str::<Box<RawValue>>(text).ok());
        self.fields.insert(
            "payloadBase64".into(),
            json!(base64::engine::general_purpose::STANDARD.encode(bytes)),
        );
        self
    }
}

pub fn timer(row: &TimerRow) -> View {
    let mut object = Map::new();
    object.insert("queue".into(), json!(row.queue));
    object.insert("timerKey".into(), json!(row.timer_key));
    object.insert("partition".into(), json!(row.partition));
    object.insert("state".into(), json!(row.state));
    object.insert("deliverAt".into(), json!(timestamp(&row.deliver_at)));
    object.insert("deliverInMs".into(), json!(row.deliver_in_ms));
    object.insert("txn".into(), json!(row.txn));
    object.insert("messageId".into(), json!(row.message_id));
    object.insert("attempts".into(), json!(row.attempts));
    if let Some(error) = &row.last_error {
        object.insert("lastError".into(), json!(error));
    }
    object.insert("payloadBytes".into(), json!(row.payload_bytes));
    match &row.payload {
        Some(payload) => View::new(object).with_payload(payload),
        None => View::new(object),
    }
}

pub fn message(row: &MessageRow) -> View {
    let mut object = Map::new();
    object.insert("offset".into(), json!(row.offset));
    object.insert("messageId".into(), json!(row.message_id));
    object.insert("txn".into(), json!(row.txn));
    object.insert("createdAt".into(), json!(timestamp(&row.created_at)));
    View::new(object).with_payload(&row.payload)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use uuid::Uuid;

    fn at() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 2, 13, 20, 0).unwrap()
            + chrono::Duration::microseconds(123_456)
    }

    #[test]
    fn database_timestamps_are_answered_in_one_form() {
        assert_eq!(
            normalized("2026-12-02T15:20:00.123456+02:00"),
            "2026-12-02T13:20:00.123456Z"
        );
        assert_eq!(
            normalized("2026-12-02T13:20:00+00:00"),
            "2026-12-02T13:20:00.000000Z"
        );
        assert_eq!(normalized("not a time"), "not a time");
    }

    /// The view as the client reads it.
    fn answer(view: &View) -> (String, Value) {
        let text = serde_json::to_string(view).unwrap();
        let value = serde_json::from_str(&text).unwrap();
        (text, value)
    }

    #[test]
    fn a_json_payload_reads_back_as_json_and_base64() {
        let row = MessageRow {
            offset: 7,
            message_id: Uuid::nil(),
            txn: "t".into(),
            payload: br#"{"a": 1}"#.to_vec(),
            created_at: at(),
        };
        let (_, view) = answer(&message(&row));
        assert_eq!(view["payload"], json!({"a": 1}));
        assert_eq!(view["payloadBase64"], json!("eyJhIjogMX0="));
        assert_eq!(view["createdAt"], json!("2026-12-02T13:20:00.123456Z"));
        assert_eq!(view["offset"], json!(7));
    }

    #[test]
    fn bytes_that_are_not_json_read_back_as_base64_only() {
        let row = MessageRow {
            offset: 0,
            message_id: Uuid::nil(),
            txn: "t".into(),
            payload: vec![0, 255],
            created_at: at(),
        };
        let (_, view) = answer(&message(&row));
        assert!(view.get("payload").is_none());
        assert_eq!(view["payloadBase64"], json!("AP8="));
    }

    #[test]
    fn a_listed_timer_has_its_size_but_not_its_payload() {
        let row = TimerRow {
            queue: "q".into(),
            timer_key: "k".into(),
            partition: "default".into(),
            deliver_at: at(),
            deliver_in_ms: 200,
            txn: "t".into(),
            message_id: Uuid::nil(),
            attempts: 0,
            last_error: None,
            state: "waiting".into(),
            payload_bytes: 8,
            payload: None,
        };
        let (_, view) = answer(&timer(&row));
        assert_eq!(view["payloadBytes"], json!(8));
        assert!(view.get("payloadBase64").is_none() && view.get("lastError").is_none());
        let (_, peeked) = answer(&timer(&TimerRow {
            payload: Some(b"1".to_vec()),
            ..row
        }));
        assert_eq!(peeked["payload"], json!(1));
    }

    #[test]
    fn a_json_payload_is_answered_as_the_text_stored() {
        // Keys out of order, a number no f64 holds, an escaped NUL, inner whitespace: parsing and
        // writing again would change every one of them.
        let stored = r#"{"b": 1, "a": [12345678901234567890123, 1.50], "nul": "\u0000"}"#;
        let row = MessageRow {
            offset: 0,
            message_id: Uuid::nil(),
            txn: "t".into(),
            payload: format!(" {stored}\n").into_bytes(),
            created_at: at(),
        };
        let (text, _) = answer(&message(&row));
        assert!(text.contains(&format!(r#""payload":{stored}"#)), "{text}");
    }
}
