//! When the database or the load says no: transient failures are 503s with `Retry-After`, never
//! 500s with a backtrace; a failed commit writes nothing and rings no wake; the in-flight limit,
//! the body and header read timeouts and the request deadline hold. Real `serve` processes, real PostgreSQL.

mod api_support;

use std::time::Duration;

use api_support::{Start, count, schedule_op, wait_for, wait_for_lock_waiter};
use queen_sweeper::clock::monotonic_now;
use queen_testdb::TestDb;
use serde_json::json;
use sqlx::{Connection, PgConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Holds a row lock in a transaction of the test's own until dropped or committed.
async fn lock_row(db: &TestDb, sql: &'static str) -> PgConnection {
    let mut connection = db.connection().await;
    sqlx::raw_sql("BEGIN")
        .execute(&mut connection)
        .await
        .unwrap();
    sqlx::raw_sql(sql).execute(&mut connection).await.unwrap();
    connection
}

async fn release(mut connection: PgConnection) {
    sqlx::raw_sql("COMMIT")
        .execute(&mut connection)
        .await
        .unwrap();
    connection.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_timeout_on_a_locked_row_is_a_503_with_retry_after_and_the_retry_succeeds() {
    let db = TestDb::new().await;
    let env = [
        ("QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS", "300"),
        ("QUEEN_SWEEPER_LEASE_MS", "600"),
    ];
    let server = Start::on(&db, "stmt").env(&env).spawn().await;
    let op = json!({"ops": [schedule_op("q", "k", 3_600_000, json!(1))]});
    assert_eq!(server.schedule(&op).await.status, 200);

    let lock = lock_row(
        &db,
        "SELECT 1 FROM queen.log_timers WHERE timer_key = 'k' FOR UPDATE",
    )
    .await;
    let answer = server.delete("/api/v1/timers/q/k").await;
    answer.refused(503, "database_unavailable");
    assert_eq!(answer.retry_after.as_deref(), Some("1"));
    assert!(
        answer.text.contains("57014"),
        "the cancel's statement timed out: {}",
        answer.text
    );
    assert_eq!(
        answer.text.lines().count(),
        1,
        "one line of JSON, no trace: {}",
        answer.text
    );
    release(lock).await;

    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        1,
        "nothing was cancelled"
    );
    let retried = server.delete("/api/v1/timers/q/k").await;
    assert_eq!(retried.status, 200, "{}", retried.text);
    assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_terminated_mid_request_is_a_503_and_the_next_request_gets_a_new_connection() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "term").spawn().await;
    assert_eq!(
        server
            .put("/api/v1/kv/ns/k", &json!({"value": 1}))
            .await
            .status,
        201
    );
    let lock = lock_row(&db, "SELECT 1 FROM queen.kv WHERE key = 'k' FOR UPDATE").await;
    let url = server.url("/api/v1/kv/ns/k");
    let client = server.client.clone();
    let in_flight =
        tokio::spawn(async move { client.put(url).json(&json!({"value": 2})).send().await });
    wait_for_lock_waiter(&db.pool, "queen-api:term").await;
    let terminated: i64 = sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'queen-api:term' AND wait_event_type = 'Lock'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(terminated, 1);
    let response = in_flight.await.unwrap().expect("an answer");
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(
        body["error"]["code"],
        json!("database_unavailable"),
        "{body}"
    );
    release(lock).await;

    let after = server.put("/api/v1/kv/ns/k", &json!({"value": 3})).await;
    assert_eq!(
        (after.status, after.json()["version"].clone()),
        (200, json!(2)),
        "{}",
        after.text
    );
    assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
}

/// Fails the commit of any transaction that wrote a timer whose key starts with `doomed`, with a
/// serialization failure, the way a real conflict surfaces at commit.
const DOOM_AT_COMMIT: &str = r#"
CREATE FUNCTION public.doom_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.timer_key LIKE 'doomed%' THEN
        RAISE EXCEPTION 'doomed at commit' USING ERRCODE = '40001';
    END IF;
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER doom_at_commit AFTER INSERT OR UPDATE ON queen.log_timers
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.doom_at_commit();
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_whose_commit_fails_is_a_503_writes_nothing_and_rings_no_wake() {
    let db = TestDb::new().await;
    sqlx::raw_sql(DOOM_AT_COMMIT)
        .execute(&db.pool)
        .await
        .unwrap();
    let server = Start::on(&db, "doomed").spawn().await;
    let doomed = server
        .schedule(&json!({"ops": [schedule_op("q", "doomed", 0, json!(1))]}))
        .await;
    doomed.refused(503, "database_unavailable");
    assert_eq!(doomed.retry_after.as_deref(), Some("1"));
    assert!(doomed.text.contains("40001"), "{}", doomed.text);
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        0
    );
    let wakes = |text: &str| {
        api_support::metric_value(text, "queen_api_wakes_total{moved=\"true\"}")
            + api_support::metric_value(text, "queen_api_wakes_total{moved=\"false\"}")
    };
    assert_eq!(
        wakes(&server.get("/metrics").await.text),
        0.0,
        "a rolled-back schedule rang a wake"
    );

    let fine = server
        .schedule(&json!({"ops": [schedule_op("q", "fine", 0, json!(2))]}))
        .await;
    assert_eq!(fine.status, 200, "{}", fine.text);
    assert_eq!(
        wakes(&server.get("/metrics").await.text),
        1.0,
        "a committed schedule rings once"
    );
    wait_for(
        "the committed timer to fire",
        Duration::from_secs(10),
        || async { count(&db.pool, "SELECT count(*) FROM queen.log_messages").await == 1 },
    )
    .await;
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM queen.log_messages WHERE convert_from(payload, 'UTF8') = '1'"
        )
        .await,
        0,
        "the doomed timer never existed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_slot_taken_a_request_is_503_busy_while_metrics_and_healthz_still_answer() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "busy")
        .env(&[("QUEEN_API_MAX_IN_FLIGHT", "1")])
        .spawn()
        .await;
    assert_eq!(
        server
            .put("/api/v1/kv/ns/k", &json!({"value": 1}))
            .await
            .status,
        201
    );
    let lock = lock_row(&db, "SELECT 1 FROM queen.kv WHERE key = 'k' FOR UPDATE").await;
    let url = server.url("/api/v1/kv/ns/k");
    let client = server.client.clone();
    let holder =
        tokio::spawn(async move { client.put(url).json(&json!({"value": 2})).send().await });
    wait_for_lock_waiter(&db.pool, "queen-api:busy").await;

    let refused = server.get("/api/v1/kv/ns/other").await;
    refused.refused(503, "busy");
    assert_eq!(refused.retry_after.as_deref(), Some("1"));
    assert!(
        refused.text.contains("QUEEN_API_MAX_IN_FLIGHT=1"),
        "{}",
        refused.text
    );
    assert_eq!(server.get("/healthz").await.status, 200);
    let metrics = server.get("/metrics").await.text;
    assert_eq!(
        api_support::metric_value(&metrics, "queen_api_refused_total{reason=\"busy\"}"),
        1.0
    );
    assert_eq!(
        api_support::metric_value(&metrics, "queen_api_in_flight"),
        1.0
    );

    release(lock).await;
    let held = holder.await.unwrap().expect("an answer");
    assert_eq!(held.status(), 200, "the request in the slot finished");
    let freed = server.get("/api/v1/kv/ns/k").await;
    assert_eq!(
        (freed.status, freed.json()["value"].clone()),
        (200, json!(2))
    );
}

/// Opens a connection that sends a PUT's headers with `Expect: 100-continue`, waits for the
/// server's `100 Continue` (the server is reading the body now), then sends part of the body and
/// stalls. The first line the server answered with, and the stream, kept open.
async fn slow_body_client(port: u16, key: &str) -> (String, tokio::net::TcpStream) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let head = format!(
        "PUT /api/v1/kv/ns/{key} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let answer = api_support::read_answer(&mut stream, Duration::from_secs(10)).await;
    let first_line = answer.lines().next().unwrap_or("").to_owned();
    if first_line.starts_with("HTTP/1.1 100") {
        stream.write_all(b"{\"value\":").await.unwrap();
    }
    (first_line, stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_hold_no_slot_and_another_clients_schedule_still_succeeds() {
    let db = TestDb::new().await;
    let env = [
        ("QUEEN_API_MAX_IN_FLIGHT", "2"),
        ("QUEEN_API_BODY_READ_TIMEOUT_MS", "30000"),
    ];
    let server = Start::on(&db, "slow-bodies").env(&env).spawn().await;
    let mut slow = Vec::new();
    for n in 0..4 {
        let (first_line, stream) = slow_body_client(server.port, &format!("slow{n}")).await;
        assert_eq!(
            first_line, "HTTP/1.1 100 Continue",
            "slow client {n} is being read, not refused"
        );
        slow.push(stream);
    }
    let op = schedule_op("q", "k", 60_000, json!({"n": 1}));
    let answer = server.schedule(&json!({"ops": [op]})).await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(
        server
            .metric("queen_api_refused_total{reason=\"busy\"}")
            .await,
        0.0
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        1
    );
    drop(slow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_a_408_after_the_body_read_timeout_and_writes_nothing() {
    let db = TestDb::new().await;
    let env = [
        ("QUEEN_API_BODY_READ_TIMEOUT_MS", "500"),
        ("QUEEN_API_MAX_IN_FLIGHT", "1"),
    ];
    let server = Start::on(&db, "stalled-body").env(&env).spawn().await;
    // A client that promises 100 bytes of body and sends 10.
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    let started = monotonic_now();
    stream
        .write_all(b"PUT /api/v1/kv/ns/slow HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"value\":")
        .await
        .unwrap();
    let answer = api_support::read_answer(&mut stream, Duration::from_secs(10)).await;
    let waited = started.elapsed();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert_eq!(
        api_support::raw_json(&answer)["error"]["code"],
        "body_timeout"
    );
    assert!(
        waited >= Duration::from_millis(500),
        "answered after {waited:?}, before the body read timeout"
    );
    let next = server.get("/api/v1/kv/ns/slow").await;
    next.refused(404, "not_found");
    assert_eq!(
        server
            .metric("queen_api_refused_total{reason=\"body_timeout\"}")
            .await,
        1.0
    );
    assert_eq!(count(&db.pool, "SELECT count(*) FROM queen.kv").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_finishes_its_headers_is_closed_after_the_header_read_timeout() {
    let db = TestDb::new().await;
    let env = [("QUEEN_API_HEADER_READ_TIMEOUT_MS", "300")];
    let server = Start::on(&db, "slow-headers").env(&env).spawn().await;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .unwrap();
    let started = monotonic_now();
    stream
        .write_all(b"GET /api/v1/kv/ns/k HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
    let waited = started.elapsed();
    assert!(closed.is_ok(), "the connection was still open after 5 s");
    // The server's timer starts at accept, a little before this test's clock (CI at 5a174c7 saw
    // 299.9 ms); well short of 300 ms would be a close before the timeout.
    assert!(
        waited >= Duration::from_millis(250),
        "closed after {waited:?}, before the header read timeout"
    );
    // Too short a timeout to leave a second of idle time: each answer closes its connection, so no
    // pooled connection is left for the close to race with.
    let answer = raw_healthz(server.port).await;
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(answer.contains("\r\nconnection: close\r\n"), "{answer}");
    assert!(!answer.contains("keep-alive:"), "{answer}");
    assert_eq!(server.get("/healthz").await.status, 200);
}

/// `GET /healthz` on a connection of its own, read until the server closes it (within 5 s).
async fn raw_healthz(port: u16) -> String {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the connection was still open after 5 s");
    String::from_utf8_lossy(&answer).to_lowercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_says_how_long_an_idle_connection_is_kept() {
    let db = TestDb::new().await;
    let env = [("QUEEN_API_HEADER_READ_TIMEOUT_MS", "3500")];
    let server = Start::on(&db, "keep-alive").env(&env).spawn().await;
    let started = monotonic_now();
    let answer = raw_healthz(server.port).await;
    let waited = started.elapsed();
    assert!(answer.starts_with("http/1.1 200"), "{answer}");
    assert!(answer.contains("\r\nkeep-alive: timeout=2\r\n"), "{answer}");
    // The idle connection is closed by the header read timeout, not kept for ever.
    assert!(
        waited >= Duration::from_millis(3_400) && waited < Duration::from_millis(5_000),
        "the idle connection closed after {waited:?}"
    );
}
