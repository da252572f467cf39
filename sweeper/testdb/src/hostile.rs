//! Hostile input for the broker's API, shared by its tests and the soak's `bad-input` case: the
//! bad-input table (every row a raw HTTP request and the refusal it must get), and a way to send
//! one and judge the answer.
//!
//! Every row is refused before anything is written, with a 4xx in the documented error JSON
//! (`{"error": {"code": ..., "message": ...}}`): the HTTP layer's refusals (target and header
//! limits, media type, percent-encoding) and the NULs PostgreSQL cannot store included. The table
//! holds at the API's default limits and at any smaller ones.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One row: what it tries, the request's bytes, and the status and `error.code` it must get.
#[derive(Debug, Clone)]
pub struct BadInput {
    /// What the request does wrong, in words.
    pub what: &'static str,
    /// The whole request, as sent.
    pub request: Vec<u8>,
    /// The status it must get.
    pub status: u16,
    /// The `error.code` it must get.
    pub code: &'static str,
}

/// What came back for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// The status (0 when no status line came back).
    pub status: u16,
    /// `error.code` of the body, when the body is the error JSON.
    pub code: Option<String>,
    /// Whether the body carries `error.message`, a string.
    pub has_message: bool,
}

impl Answered {
    /// Reads a raw answer: its status line and its JSON body.
    pub fn of(answer: &str) -> Answered {
        let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
        let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
        let error = parsed.as_ref().map(|v| &v["error"]);
        Answered {
            status,
            code: error.and_then(|e| e["code"].as_str()).map(str::to_owned),
            has_message: error.is_some_and(|e| e["message"].is_string()),
        }
    }

    /// Whether this is the refusal `row` documents.
    pub fn as_documented(&self, row: &BadInput) -> bool {
        self.status == row.status && self.code.as_deref() == Some(row.code) && self.has_message
    }
}

/// Sends `request` to `address` (`host:port`) on a connection of its own and reads the answer
/// until the server closes (every row asks `Connection: close`) or `limit` passes.
pub async fn exchange(address: &str, request: &[u8], limit: Duration) -> String {
    let talk = async {
        let mut stream = TcpStream::connect(address).await.ok()?;
        // A refusal may come before the server read the whole request (a 413 on a declared
        // length); the write may then fail, and the answer is still there to read.
        let _ = stream.write_all(request).await;
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        Some(answer)
    };
    let answer = tokio::time::timeout(limit, talk)
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    String::from_utf8_lossy(&answer).into_owned()
}

/// One request as raw bytes: `Host` and `Connection: close` added, and a `Content-Length` when
/// there is a body.
pub fn raw(method: &str, target: &str, headers: &[&str], body: &str) -> Vec<u8> {
    let mut text =
        format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    for header in headers {
        text.push_str(header);
        text.push_str("\r\n");
    }
    if !body.is_empty() {
        text.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    text.push_str("\r\n");
    text.push_str(body);
    text.into_bytes()
}

const JSON: &str = "Content-Type: application/json";

/// A schedule of one op whose field `field` is `value` (raw JSON text).
fn schedule_with(field: &str, value: &str) -> String {
    let mut fields = vec![
        ("op", "\"schedule\"".to_owned()),
        ("queue", "\"q\"".to_owned()),
        ("timerKey", "\"k\"".to_owned()),
        ("delayMs", "5".to_owned()),
        ("payload", "1".to_owned()),
    ];
    match fields.iter_mut().find(|(name, _)| *name == field) {
        Some((_, old)) => *old = value.to_owned(),
        None => fields.push((field_name(field), value.to_owned())),
    }
    let op: Vec<String> = fields
        .iter()
        .map(|(name, value)| format!("\"{name}\":{value}"))
        .collect();
    format!("{{\"ops\":[{{{}}}]}}", op.join(","))
}

/// The fields a row may add to a schedule op.
fn field_name(field: &str) -> &'static str {
    match field {
        "partition" => "partition",
        "txn" => "txn",
        other => panic!("the table adds no field {other}"),
    }
}

/// Replaces the `?` of `request` with the byte 0xff (a byte no header or name may hold).
fn with_ff(mut request: Vec<u8>) -> Vec<u8> {
    let at = request
        .iter()
        .position(|b| *b == b'?')
        .expect("a ? to replace");
    request[at] = 0xff;
    request
}

/// The bad-input table.
pub fn bad_input_table() -> Vec<BadInput> {
    let long_target = format!("/api/v1/timers/{}", "q".repeat(9000));
    let huge_target = format!("/api/v1/timers/{}", "q".repeat(70_000));
    let big_header = format!("X-Big: {}", "b".repeat(20_000));
    let many_headers: Vec<String> = (0..150).map(|n| format!("X-H{n}: v")).collect();
    let many_headers: Vec<&str> = many_headers.iter().map(String::as_str).collect();
    let schedule = |field: &str, value: &str| {
        raw(
            "POST",
            "/api/v1/timers",
            &[JSON],
            &schedule_with(field, value),
        )
    };
    let row = |what, request, status, code| BadInput {
        what,
        request,
        status,
        code,
    };
    vec![
        row(
            "bad percent-encoding in a path",
            raw("GET", "/api/v1/timers/q/k%ff", &[], ""),
            400,
            "invalid_path",
        ),
        row(
            "bad percent-encoding in a queue",
            raw("GET", "/api/v1/messages/q%ff", &[], ""),
            400,
            "invalid_path",
        ),
        row(
            "bad percent-encoding in a KV key",
            raw("DELETE", "/api/v1/kv/ns/%ff", &[], ""),
            400,
            "invalid_path",
        ),
        row(
            "bad percent-encoding in a query",
            raw("GET", "/api/v1/timers/q?after=%ff", &[], ""),
            400,
            "invalid_query",
        ),
        row(
            "a query value of the wrong type",
            raw("GET", "/api/v1/timers/q?limit=x", &[], ""),
            400,
            "invalid_query",
        ),
        row(
            "an unknown query field",
            raw("GET", "/api/v1/timers/q?limt=5", &[], ""),
            400,
            "invalid_query",
        ),
        row(
            "NUL in a path queue",
            raw("GET", "/api/v1/timers/q%00/k", &[], ""),
            400,
            "nul_in_name",
        ),
        row(
            "NUL in a path timer key",
            raw("DELETE", "/api/v1/timers/q/k%00", &[], ""),
            400,
            "nul_in_name",
        ),
        row(
            "NUL in a query after",
            raw("GET", "/api/v1/timers/q?after=%00", &[], ""),
            400,
            "nul_in_name",
        ),
        row(
            "NUL in a query partition",
            raw("GET", "/api/v1/messages/q?partition=p%00", &[], ""),
            400,
            "nul_in_name",
        ),
        row(
            "NUL in a KV namespace",
            raw("GET", "/api/v1/kv/n%00s/k", &[], ""),
            400,
            "nul_in_name",
        ),
        row(
            "NUL in a KV key",
            raw("PUT", "/api/v1/kv/ns/k%00", &[JSON], "{\"value\": 1}"),
            400,
            "nul_in_name",
        ),
        row(
            "NUL in a JSON queue",
            schedule("queue", "\"q\\u0000\""),
            400,
            "nul_in_name",
        ),
        row(
            "NUL in a JSON timer key",
            schedule("timerKey", "\"\\u0000\""),
            400,
            "nul_in_name",
        ),
        row(
            "NUL in a partition",
            schedule("partition", "\"p\\u0000\""),
            400,
            "nul_in_name",
        ),
        row(
            "NUL in a txn",
            schedule("txn", "\"t\\u0000\""),
            400,
            "nul_in_name",
        ),
        row(
            "the tenant twice",
            raw(
                "GET",
                "/api/v1/kv/ns/k",
                &["x-queen-tenant: a", "x-queen-tenant: b"],
                "",
            ),
            400,
            "duplicate_tenant",
        ),
        row(
            "a space in the tenant",
            raw("GET", "/api/v1/kv/ns/k", &["x-queen-tenant: a b"], ""),
            400,
            "invalid_tenant",
        ),
        row(
            "a byte over 0x7e in the tenant",
            with_ff(raw("GET", "/api/v1/kv/ns/k", &["x-queen-tenant: caf?"], "")),
            400,
            "invalid_tenant",
        ),
        row(
            "an empty tenant",
            raw("GET", "/api/v1/kv/ns/k", &["x-queen-tenant:"], ""),
            400,
            "empty_name",
        ),
        row(
            "a text/plain body",
            raw(
                "PUT",
                "/api/v1/kv/ns/k",
                &["Content-Type: text/plain"],
                "{\"value\": 1}",
            ),
            415,
            "unsupported_media_type",
        ),
        row(
            "a body without a Content-Type",
            raw("PUT", "/api/v1/kv/ns/k", &[], "{\"value\": 1}"),
            415,
            "unsupported_media_type",
        ),
        row(
            "a switches body as a form",
            raw(
                "POST",
                "/api/v1/system/switches",
                &["Content-Type: application/x-www-form-urlencoded"],
                "fireEnabled=true",
            ),
            415,
            "unsupported_media_type",
        ),
        row(
            "a Content-Type that is not ASCII",
            with_ff(raw(
                "PUT",
                "/api/v1/kv/ns/k",
                &["Content-Type: ?"],
                "{\"value\": 1}",
            )),
            415,
            "unsupported_media_type",
        ),
        row(
            "an over-long target",
            raw("GET", &long_target, &[], ""),
            414,
            "uri_too_long",
        ),
        row(
            "a NUL in a header value",
            raw("GET", "/api/v1/kv/ns/k", &["X-Note: a\0b"], ""),
            400,
            "malformed_request",
        ),
        row(
            "a space in a header name",
            raw("GET", "/api/v1/kv/ns/k", &["X Note: a"], ""),
            400,
            "malformed_request",
        ),
        row(
            "a request line that is not HTTP",
            b"NOT HTTP AT ALL\r\nConnection: close\r\n\r\n".to_vec(),
            400,
            "malformed_request",
        ),
        row(
            "a target over the HTTP parser's 64 KiB",
            raw("GET", &huge_target, &[], ""),
            414,
            "uri_too_long",
        ),
        row(
            "an oversized header",
            raw("GET", "/api/v1/kv/ns/k", &[&big_header], ""),
            431,
            "headers_too_large",
        ),
        row(
            "too many headers",
            raw("GET", "/api/v1/kv/ns/k", &many_headers, ""),
            431,
            "headers_too_large",
        ),
        row(
            "a declared 5 GiB body",
            raw(
                "POST",
                "/api/v1/timers",
                &[JSON, "Content-Length: 5368709120"],
                "",
            ),
            413,
            "body_too_large",
        ),
        row(
            "malformed JSON",
            raw("POST", "/api/v1/timers", &[JSON], "{\"ops\": ["),
            400,
            "malformed_json",
        ),
        row(
            "a method not served",
            raw("PATCH", "/api/v1/kv/ns/k", &[JSON], "{}"),
            405,
            "method_not_allowed",
        ),
        row(
            "a path not served",
            raw("GET", "/api/v2/nothing", &[], ""),
            404,
            "no_route",
        ),
        row(
            "an empty key in the path",
            raw("GET", "/api/v1/kv/ns/", &[], ""),
            400,
            "empty_name",
        ),
        row(
            "an Idempotency-Key with a space",
            raw(
                "POST",
                "/api/v1/timers",
                &[JSON, "Idempotency-Key: a b"],
                &schedule_with("queue", "\"q\""),
            ),
            400,
            "invalid_idempotency_key",
        ),
        row(
            "an absent timer cancelled",
            raw("DELETE", "/api/v1/timers/q/absent", &[], ""),
            404,
            "not_found",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_row_replaces_or_adds_exactly_its_field() {
        let replaced = schedule_with("queue", "\"q\\u0000\"");
        let parsed: serde_json::Value = serde_json::from_str(&replaced).expect("JSON");
        assert_eq!(parsed["ops"][0]["queue"], "q\u{0}");
        assert_eq!(parsed["ops"][0]["timerKey"], "k");
        let added = schedule_with("txn", "\"t\"");
        let parsed: serde_json::Value = serde_json::from_str(&added).expect("JSON");
        assert_eq!(parsed["ops"][0]["txn"], "t");
        assert_eq!(parsed["ops"][0]["op"], "schedule");
    }

    #[test]
    fn an_answer_is_as_documented_only_with_its_status_code_and_message() {
        let row = BadInput {
            what: "w",
            request: Vec::new(),
            status: 400,
            code: "nul_in_name",
        };
        let good = "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\r\n{\"error\":{\"code\":\"nul_in_name\",\"message\":\"m\"}}";
        assert!(Answered::of(good).as_documented(&row));
        let no_message = "HTTP/1.1 400 Bad Request\r\n\r\n{\"error\":{\"code\":\"nul_in_name\"}}";
        assert!(!Answered::of(no_message).as_documented(&row));
        let plain = "HTTP/1.1 400 Bad Request\r\n\r\nbad";
        assert_eq!(Answered::of(plain).code, None);
        assert!(!Answered::of(plain).as_documented(&row));
        let server_error = "HTTP/1.1 500 Internal Server Error\r\n\r\n{\"error\":{\"code\":\"nul_in_name\",\"message\":\"m\"}}";
        assert_eq!(Answered::of(server_error).status, 500);
        assert!(!Answered::of(server_error).as_documented(&row));
        assert_eq!(Answered::of("").status, 0);
    }

    #[test]
    fn every_row_is_a_whole_request_that_asks_to_be_closed() {
        let table = bad_input_table();
        assert_eq!(table.len(), 38);
        for row in &table {
            let text = String::from_utf8_lossy(&row.request);
            assert!(text.contains("Connection: close\r\n"), "{}", row.what);
            assert!(text.contains("\r\n\r\n"), "{}", row.what);
            assert!((400..500).contains(&row.status), "{}", row.what);
        }
    }
}
