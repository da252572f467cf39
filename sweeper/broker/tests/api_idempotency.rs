//! `Idempotency-Key` on `POST /api/v1/timers`: a retry of the same request within the window
//! answers the first call's results and schedules nothing, even after the timer fired; the key with
//! another request is a 422; concurrent calls with one key schedule once; a key past its window is
//! taken again. Real `serve` processes, real PostgreSQL.

mod api_support;

use std::time::Duration;

use api_support::{Server, Start, count, schedule_op, wait_for};
use queen_testdb::TestDb;
use serde_json::{Value, json};

const KEY_HEADER: &str = "idempotency-key";
const REPLAYED: &str = "idempotent-replayed";

/// A keyed schedule: the status, whether the answer says it is a replay, and the body.
async fn keyed(server: &Server, tenant: &str, key: &str, body: &Value) -> (u16, bool, Value) {
    let response = server
        .client
        .post(server.url("/api/v1/timers"))
        .header("x-queen-tenant", tenant)
        .header(KEY_HEADER, key)
        .json(body)
        .send()
        .await
        .expect("an answer");
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get(REPLAYED)
        .is_some_and(|v| v == "true");
    let body = response.json().await.expect("a JSON answer");
    (status, replayed, body)
}

fn one_timer(timer_key: &str, delay_ms: i64) -> Value {
    json!({"ops": [schedule_op("q", timer_key, delay_ms, json!({"n": 1}))]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_timer_fired_answers_the_first_results_and_schedules_nothing() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "idem-fired").spawn().await;
    let body = one_timer("k", 0);
    let (status, replayed, first) = keyed(&server, "acme", "order-42", &body).await;
    assert_eq!((status, replayed), (200, false), "{first}");
    assert_eq!(first["results"][0]["status"], "scheduled", "{first}");
    wait_for("the timer to fire", Duration::from_secs(10), || async {
        count(&db.pool, "SELECT count(*) FROM queen.log_messages").await == 1
    })
    .await;

    // The client lost the answer and retries: without the key, this would schedule it again.
    let (status, replayed, again) = keyed(&server, "acme", "order-42", &body).await;
    assert_eq!((status, replayed), (200, true), "{again}");
    assert_eq!(again, first, "the first call's results, byte for byte");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        0
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_messages").await,
        1,
        "fired once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_key_with_another_request_is_a_422_and_keys_are_per_tenant() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "idem-reuse").spawn().await;
    let (status, _, _) = keyed(&server, "acme", "k1", &one_timer("a", 60_000)).await;
    assert_eq!(status, 200);
    let (status, replayed, refused) = keyed(&server, "acme", "k1", &one_timer("b", 60_000)).await;
    assert_eq!((status, replayed), (422, false), "{refused}");
    assert_eq!(
        refused["error"]["code"], "idempotency_key_reused",
        "{refused}"
    );
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM queen.log_timers WHERE timer_key = 'b'"
        )
        .await,
        0
    );
    let (status, replayed, other) = keyed(&server, "globex", "k1", &one_timer("b", 60_000)).await;
    assert_eq!((status, replayed), (200, false), "{other}");
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_with_one_key_schedule_once_and_all_answer_the_same() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "idem-race").spawn().await;
    let body = json!({"ops": [
        schedule_op("q", "x", 60_000, json!(1)),
        schedule_op("q", "y", 60_000, json!(2)),
    ]});
    let calls = (0..8).map(|_| keyed(&server, "acme", "race", &body));
    let answers = futures::future::join_all(calls).await;
    let fresh: Vec<&Value> = answers
        .iter()
        .filter(|(status, replayed, _)| *status == 200 && !replayed)
        .map(|(_, _, body)| body)
        .collect();
    assert_eq!(fresh.len(), 1, "{answers:?}");
    for (status, _, body) in &answers {
        assert_eq!((*status, body), (200, fresh[0]), "{answers:?}");
    }
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        2
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.api_idempotency").await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_past_its_window_is_taken_again_and_bad_keys_are_400s() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "idem-window")
        .env(&[("QUEEN_API_IDEMPOTENCY_WINDOW_S", "1")])
        .spawn()
        .await;
    let body = one_timer("w", 60_000);
    let (status, replayed, _) = keyed(&server, "acme", "late", &body).await;
    assert_eq!((status, replayed), (200, false));
    let (status, replayed, _) = keyed(&server, "acme", "late", &body).await;
    assert_eq!((status, replayed), (200, true), "within the window");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let (status, replayed, again) = keyed(&server, "acme", "late", &body).await;
    assert_eq!((status, replayed), (200, false), "{again}");
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.api_idempotency").await,
        1
    );

    for bad in ["a b", &"k".repeat(256)] {
        let (status, _, refused) = keyed(&server, "acme", bad, &body).await;
        assert_eq!(
            (status, refused["error"]["code"].as_str()),
            (400, Some("invalid_idempotency_key")),
            "{refused}"
        );
    }
    let twice = server
        .client
        .post(server.url("/api/v1/timers"))
        .header(KEY_HEADER, "a")
        .header(KEY_HEADER, "b")
        .json(&body)
        .send()
        .await
        .expect("an answer");
    assert_eq!(twice.status().as_u16(), 400);
    let refused: Value = twice.json().await.expect("JSON");
    assert_eq!(refused["error"]["code"], "duplicate_idempotency_key");
}
