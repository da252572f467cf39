//! Bad input gets a clear 4xx and writes nothing: over real HTTP against a real `serve` process
//! with tight limits, both sides of every limit.

mod api_support;

use std::time::Duration;

use api_support::{Server, Start, count, schedule_op};
use queen_testdb::TestDb;
use queen_testdb::hostile::{Answered, bad_input_table, exchange};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Limits small enough to reach in a test. The body limit must carry a payload at its limit,
/// base64-encoded, plus 4096 bytes of envelope: 1336 + 4096 = 5432 <= 8192.
const TIGHT: &[(&str, &str)] = &[
    ("QUEEN_TIMERS_MAX_PAYLOAD_BYTES", "1000"),
    ("QUEEN_TIMERS_MAX_OPS_PER_CALL", "5"),
    ("QUEEN_TIMERS_MAX_HORIZON_S", "60"),
    ("QUEEN_API_MAX_BODY_BYTES", "8192"),
    ("QUEEN_API_MAX_KEY_BYTES", "16"),
];

async fn tight(db: &TestDb, identity: &str) -> Server {
    Start::on(db, identity).env(TIGHT).spawn().await
}

async fn nothing_written(db: &TestDb) {
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        0
    );
    assert_eq!(count(&db.pool, "SELECT count(*) FROM queen.kv").await, 0);
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_messages").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_unknown_fields_and_server_owned_fields_are_400s_that_write_nothing() {
    let db = TestDb::new().await;
    let server = tight(&db, "malformed").await;
    for (body, code) in [
        ("{\"ops\": [", "malformed_json"),
        ("", "malformed_json"),
        ("ops=1", "malformed_json"),
        ("[]", "invalid_request"),
        ("{\"ops\": []}", "no_ops"),
        ("{\"ops\": [], \"dryRun\": true}", "unknown_field"),
        (
            "{\"ops\": [{\"op\": \"cancel\", \"queue\": \"q\", \"timerKey\": \"k\", \"when\": 1}]}",
            "unknown_field",
        ),
        (
            "{\"ops\": [{\"op\": \"explode\", \"queue\": \"q\", \"timerKey\": \"k\"}]}",
            "invalid_request",
        ),
        (
            "{\"ops\": [{\"op\": \"schedule\", \"queue\": \"q\", \"timerKey\": \"k\", \"delayMs\": \"5\", \"payload\": 1}]}",
            "invalid_request",
        ),
        (
            "{\"ops\": [{\"op\": \"schedule\", \"queue\": \"q\", \"timerKey\": \"k\", \"delayMs\": 5}]}",
            "invalid_request",
        ),
        (
            "{\"ops\": [{\"op\": \"schedule\", \"queue\": \"q\", \"timerKey\": \"k\", \"delayMs\": 5, \"payloadBase64\": \"%%%\"}]}",
            "invalid_base64",
        ),
    ] {
        server
            .post_raw("/api/v1/timers", body)
            .await
            .refused(400, code);
    }
    for field in [
        "messageId",
        "tenant",
        "deliverAt",
        "attempts",
        "token",
        "claimToken",
    ] {
        let mut op = schedule_op("q", "k", 5, json!(1));
        op[field] = json!("set by me");
        let answer = server.schedule(&json!({"ops": [op]})).await;
        answer.refused(400, "server_owned_field");
        assert!(answer.text.contains(field), "{}", answer.text);
        assert_eq!(answer.json()["error"]["index"], json!(0));
    }
    server
        .put(
            "/api/v1/kv/ns/k",
            &json!({"value": 1, "expiresAt": "2030-01-01T00:00:00Z"}),
        )
        .await
        .refused(400, "server_owned_field");
    server
        .put("/api/v1/kv/ns/k", &json!({"value": 1, "colour": "red"}))
        .await
        .refused(400, "unknown_field");
    // A good op beside a bad one: the whole call is refused, the good one with it.
    let mixed = json!({"ops": [schedule_op("q", "good", 5, json!(1)), {"op": "cancel", "queue": "q", "timerKey": "k", "tenant": "x"}]});
    let answer = server.schedule(&mixed).await;
    answer.refused(400, "server_owned_field");
    assert_eq!(answer.json()["error"]["index"], json!(1));
    nothing_written(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_names_and_names_over_their_byte_limit_are_400s() {
    let db = TestDb::new().await;
    let server = tight(&db, "names").await;
    let sixteen = "k".repeat(16);
    let seventeen = "k".repeat(17);
    server
        .schedule(&json!({"ops": [schedule_op("", "k", 5, json!(1))]}))
        .await
        .refused(400, "empty_name");
    server
        .schedule(&json!({"ops": [schedule_op("q", "", 5, json!(1))]}))
        .await
        .refused(400, "empty_name");
    server
        .schedule(&json!({"ops": [schedule_op("q", &seventeen, 5, json!(1))]}))
        .await
        .refused(400, "name_too_long");
    server
        .schedule(&json!({"ops": [schedule_op(&seventeen, "k", 5, json!(1))]}))
        .await
        .refused(400, "name_too_long");
    let mut long_txn = schedule_op("q", "k", 5, json!(1));
    long_txn["txn"] = json!(seventeen);
    server
        .schedule(&json!({"ops": [long_txn]}))
        .await
        .refused(400, "name_too_long");
    server
        .put(&format!("/api/v1/kv/ns/{seventeen}"), &json!({"value": 1}))
        .await
        .refused(400, "name_too_long");
    server
        .get(&format!("/api/v1/kv/{seventeen}/k"))
        .await
        .refused(400, "name_too_long");
    server
        .get(&format!("/api/v1/timers/q/{seventeen}"))
        .await
        .refused(400, "name_too_long");
    // An empty path segment is an empty name, not a missing route.
    server
        .put("/api/v1/kv/ns/", &json!({"value": 1}))
        .await
        .refused(400, "empty_name");
    server
        .delete("/api/v1/timers//k")
        .await
        .refused(400, "empty_name");
    server
        .get("/api/v1/timers/q/")
        .await
        .refused(400, "empty_name");
    for tenant in ["", &seventeen] {
        let answer = server
            .client
            .get(server.url("/api/v1/kv/ns/k"))
            .header("x-queen-tenant", tenant)
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 400, "tenant {tenant:?}");
    }
    nothing_written(&db).await;
    // At the limit, everything is accepted: 16 bytes of key, percent-encoded or not.
    assert_eq!(
        server
            .put(&format!("/api/v1/kv/ns/{sixteen}"), &json!({"value": 1}))
            .await
            .status,
        201
    );
    assert_eq!(
        server
            .schedule(&json!({"ops": [schedule_op(&sixteen, &sixteen, 60_000, json!(1))]}))
            .await
            .status,
        200
    );
    let encoded = server
        .put("/api/v1/kv/ns/a%2Fb", &json!({"value": 2}))
        .await;
    assert_eq!(encoded.status, 201, "{}", encoded.text);
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.kv WHERE key = 'a/b'").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payload_over_its_limit_is_413_and_one_at_its_limit_is_scheduled() {
    let db = TestDb::new().await;
    let server = tight(&db, "payload").await;
    // A JSON string of n characters is n + 2 bytes of JSON text.
    let at_limit = schedule_op("q", "at", 60_000, json!("x".repeat(998)));
    let over = schedule_op("q", "over", 60_000, json!("x".repeat(999)));
    let answer = server.schedule(&json!({"ops": [over]})).await;
    answer.refused(413, "payload_too_large");
    assert!(
        answer.text.contains("QUEEN_TIMERS_MAX_PAYLOAD_BYTES=1000"),
        "{}",
        answer.text
    );
    // Base64 counts decoded bytes: 1001 zero bytes.
    let raw_over = json!({"op": "schedule", "queue": "q", "timerKey": "raw", "delayMs": 5, "payloadBase64": base64_zeros(1001)});
    server
        .schedule(&json!({"ops": [raw_over]}))
        .await
        .refused(413, "payload_too_large");
    // One oversized payload sinks its whole batch.
    let batch = json!({"ops": [schedule_op("q", "fine", 5, json!(1)), schedule_op("q", "big", 5, json!("y".repeat(999)))]});
    server
        .schedule(&batch)
        .await
        .refused(413, "payload_too_large");
    nothing_written(&db).await;

    assert_eq!(
        server.schedule(&json!({"ops": [at_limit]})).await.status,
        200
    );
    let raw_at = json!({"op": "schedule", "queue": "q", "timerKey": "raw", "delayMs": 60_000, "payloadBase64": base64_zeros(1000)});
    assert_eq!(server.schedule(&json!({"ops": [raw_at]})).await.status, 200);
    let stored: i64 = count(
        &db.pool,
        "SELECT max(octet_length(payload))::bigint FROM queen.log_timers",
    )
    .await;
    assert_eq!(stored, 1000);
}

fn base64_zeros(n: usize) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(vec![0u8; n])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_ops_and_a_delay_beyond_the_horizon_are_400s_at_the_boundary() {
    let db = TestDb::new().await;
    let server = tight(&db, "bounds").await;
    let ops = |n: usize| -> Value {
        json!({"ops": (0..n).map(|i| schedule_op("q", &format!("k{i}"), 60_000, json!(i))).collect::<Vec<_>>()})
    };
    let answer = server.schedule(&ops(6)).await;
    answer.refused(400, "too_many_ops");
    assert!(
        answer.text.contains("QUEEN_TIMERS_MAX_OPS_PER_CALL=5"),
        "{}",
        answer.text
    );
    for delay in [60_001, -60_001, i64::MAX] {
        let answer = server
            .schedule(&json!({"ops": [schedule_op("q", "far", delay, json!(1))]}))
            .await;
        answer.refused(400, "beyond_horizon");
    }
    let answer = server.schedule(&json!({"ops": [schedule_op("q", "k", 5, json!(1)), schedule_op("q", "k", 6, json!(1))]})).await;
    answer.refused(400, "duplicate_timer");
    nothing_written(&db).await;

    assert_eq!(server.schedule(&ops(5)).await.status, 200);
    let edge = server
        .schedule(&json!({"ops": [schedule_op("q", "edge", 60_000, json!(1))]}))
        .await;
    assert_eq!(
        (
            edge.status,
            edge.json()["results"][0]["deliverInMs"].clone()
        ),
        (200, json!(60_000))
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        6
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_its_limit_is_413_with_or_without_a_length_and_writes_nothing() {
    let db = TestDb::new().await;
    let server = tight(&db, "body").await;
    // A KV value is bounded by the body limit alone.
    let big = json!({"value": "z".repeat(8200)});
    let answer = server.put("/api/v1/kv/ns/k", &big).await;
    answer.refused(413, "body_too_large");
    assert!(
        answer.text.contains("QUEEN_API_MAX_BODY_BYTES=8192"),
        "{}",
        answer.text
    );
    // Over the body limit before the payload limit is even looked at.
    let huge_op = schedule_op("q", "k", 5, json!("p".repeat(9000)));
    server
        .schedule(&json!({"ops": [huge_op]}))
        .await
        .refused(413, "body_too_large");

    // Chunked, with no Content-Length to refuse early: the limit holds while reading.
    let chunk = format!("{{\"value\": \"{}\"}}", "c".repeat(9000));
    let request = format!(
        "PUT /api/v1/kv/ns/chunked HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len()
    );
    let response = raw_exchange(server.port, request.as_bytes()).await;
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(response.contains("body_too_large"), "{response}");
    nothing_written(&db).await;

    let fits = json!({"value": "z".repeat(8000)});
    assert_eq!(server.put("/api/v1/kv/ns/k", &fits).await.status, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_content_length_over_the_limit_is_a_413_at_once() {
    let db = TestDb::new().await;
    let server = tight(&db, "declared").await;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .expect("connect");
    let started = queen_sweeper::clock::monotonic_now();
    // 5 GiB declared, not a byte of it sent: the answer cannot depend on reading it.
    stream
        .write_all(b"POST /api/v1/timers HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 5368709120\r\n\r\n")
        .await
        .expect("write");
    let answer = api_support::read_answer(&mut stream, Duration::from_secs(5)).await;
    let waited = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let body = api_support::raw_json(&answer);
    assert_eq!(body["error"]["code"], "body_too_large", "{answer}");
    assert!(
        waited < Duration::from_secs(1),
        "a declared 5 GiB body took {waited:?} to refuse"
    );
    nothing_written(&db).await;
}

/// The bad-input table ([`queen_testdb::hostile`], which the soak's `bad-input` case sends too):
/// no row may be a 500, and every answer must be the documented error JSON, including the
/// refusals of the HTTP layer (target and header limits, media type, percent-encoding) and the
/// NULs PostgreSQL cannot store (once 500s with SQLSTATE 22P05 / 22021). Nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bad_input_table_is_all_4xx_in_the_error_shape() {
    let db = TestDb::new().await;
    let server = tight(&db, "table").await;
    let address = format!("127.0.0.1:{}", server.port);
    let rows = bad_input_table();
    let mut failures = Vec::new();
    for row in &rows {
        let answer = exchange(&address, &row.request, Duration::from_secs(5)).await;
        let answered = Answered::of(&answer);
        assert_ne!(answered.status, 500, "{}: a 500\n{answer}", row.what);
        if !answered.as_documented(row) {
            failures.push(format!(
                "{}: got {} {:?}, want {} {}\n  {answer}",
                row.what, answered.status, answered.code, row.status, row.code
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows wrong:\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n")
    );
    nothing_written(&db).await;
}

/// Sends `request` on a fresh connection and reads the answer to its end (bounded).
async fn raw_exchange(port: u16, request: &[u8]) -> String {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    // The server may answer 413 before reading the whole body and close; a failed write then is
    // expected, and the answer is still there to read.
    let _ = stream.write_all(request).await;
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .expect("an answer within 10 s");
    String::from_utf8_lossy(&response).into_owned()
}
