//! Every endpoint of `queen-sweeper serve`, over real HTTP against a real process on loopback and
//! the real PostgreSQL tier: what each answers, and that the routes are those of openapi.json.

mod api_support;

use std::time::Duration;

use api_support::{Start, count, free_loopback_port, schedule_op, serve_to_end, wait_for};
use queen_testdb::TestDb;
use serde_json::{Value, json};

const OPENAPI: &str = include_str!("../openapi.json");

/// A concrete path for an OpenAPI template.
fn concrete(template: &str) -> String {
    template
        .replace("{queue}", "q")
        .replace("{timerKey}", "k")
        .replace("{namespace}", "ns")
        .replace("{key}", "k")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_route_is_served_and_answers_a_documented_status() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "routes").spawn().await;
    let document: Value = serde_json::from_str(OPENAPI).unwrap();
    let mut checked = 0;
    for (template, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let path = concrete(template);
            let body = match (method.as_str(), template.as_str()) {
                ("post", "/api/v1/timers") => {
                    Some(json!({"ops": [{"op": "cancel", "queue": "q", "timerKey": "k"}]}))
                }
                ("put", _) => Some(json!({"value": 1})),
                ("post", _) => Some(json!({"fireEnabled": true})),
                _ => None,
            };
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let mut request = server.client.request(method.clone(), server.url(&path));
            if let Some(body) = &body {
                request = request.json(body);
            }
            let response = request.send().await.expect("answer");
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            assert!(
                !text.contains("\"no_route\"") && status != 405,
                "{method} {path} is documented but not served: {status} {text}"
            );
            assert!(
                operation["responses"].get(status.to_string()).is_some(),
                "{method} {path} answered {status}, which openapi.json does not document: {text}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, queen_broker::api::ROUTES.len());
    // And what is not documented is not served, with JSON that says so.
    server.get("/api/v1/queues").await.refused(404, "no_route");
    let wrong_method = server.post("/api/v1/messages/q", &json!({})).await;
    wrong_method.refused(405, "method_not_allowed");
    assert!(wrong_method.text.contains("GET"), "{}", wrong_method.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_schedules_reschedules_and_cancels_and_answers_per_operation() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "batch").spawn().await;
    let first = server
        .schedule(&json!({"ops": [
            schedule_op("q", "a", 60_000, json!({"n": 1})),
            {"op": "schedule", "queue": "q", "timerKey": "b", "delayMs": 60_000, "payloadBase64": "AP8=", "partition": "p1", "txn": "tx-b"},
            schedule_op("q", "c", 60_000, json!("x")),
        ]}))
        .await;
    assert_eq!(first.status, 200, "{}", first.text);
    let results = first.json()["results"].clone();
    for (index, key) in ["a", "b", "c"].iter().enumerate() {
        let result = &results[index];
        assert_eq!(result["index"], json!(index));
        assert_eq!(result["timerKey"], json!(key));
        assert_eq!(result["status"], json!("scheduled"));
        assert_eq!(result["deliverInMs"], json!(60_000));
        assert!(
            result["messageId"]
                .as_str()
                .is_some_and(|id| id.len() == 36)
        );
        assert!(result["deliverAt"].is_string());
    }
    let a_message_id = results[0]["messageId"].clone();

    let second = server
        .schedule(&json!({"ops": [
            {"op": "reschedule", "queue": "q", "timerKey": "a", "delayMs": 120_000},
            {"op": "cancel", "queue": "q", "timerKey": "b"},
            {"op": "cancel", "queue": "q", "timerKey": "never"},
            schedule_op("q", "c", 30_000, json!("y")),
        ]}))
        .await;
    assert_eq!(second.status, 200, "{}", second.text);
    let statuses: Vec<Value> = second.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].clone())
        .collect();
    assert_eq!(
        statuses,
        vec![
            json!("rescheduled"),
            json!("cancelled"),
            json!("absent"),
            json!("rescheduled")
        ]
    );
    assert_eq!(
        second.json()["results"][0]["messageId"],
        a_message_id,
        "a reschedule keeps the message id"
    );

    // What the database holds: a moved (payload kept), c replaced, b gone.
    let peek = server.get("/api/v1/timers/q/a").await.json();
    assert_eq!(peek["payload"], json!({"n": 1}));
    assert!(peek["deliverInMs"].as_i64().unwrap() > 60_000);
    assert_eq!(
        server.get("/api/v1/timers/q/c").await.json()["payload"],
        json!("y")
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        2
    );

    // Another tenant sees none of it.
    let other = server
        .client
        .delete(server.url("/api/v1/timers/q/a"))
        .header("x-queen-tenant", "other")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peek_shows_payload_state_and_attempts_and_an_absent_timer_is_404() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "peek").spawn().await;
    let answer = server
        .schedule(&json!({"ops": [
            {"op": "schedule", "queue": "q", "timerKey": "bytes", "delayMs": 3_600_000, "payloadBase64": "AP8=", "txn": "t-1"},
        ]}))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let peek = server.get("/api/v1/timers/q/bytes").await;
    assert_eq!(peek.status, 200, "{}", peek.text);
    let peek = peek.json();
    assert_eq!(peek["state"], json!("waiting"));
    assert_eq!(peek["payloadBase64"], json!("AP8="));
    assert!(
        peek.get("payload").is_none(),
        "bytes that are not JSON: {peek}"
    );
    assert_eq!(
        (
            peek["attempts"].clone(),
            peek["txn"].clone(),
            peek["partition"].clone()
        ),
        (json!(0), json!("t-1"), json!("default"))
    );
    assert_eq!(peek["payloadBytes"], json!(2));
    let deliver_in_ms = peek["deliverInMs"].as_i64().unwrap();
    assert!(
        (3_590_000..=3_600_000).contains(&deliver_in_ms),
        "{deliver_in_ms}"
    );

    // A sweeper's claim shows as held.
    sqlx::query("UPDATE queen.log_timers SET claim_token = gen_random_uuid(), claimed_until = now() + interval '1 hour'")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        server.get("/api/v1/timers/q/bytes").await.json()["state"],
        json!("held")
    );
    server
        .get("/api/v1/timers/q/none")
        .await
        .refused(404, "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_pages_through_a_queue_in_key_order_without_repeats_or_gaps() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "list").spawn().await;
    let ops: Vec<Value> = (0..25)
        .map(|i| schedule_op("lq", &format!("k{i:02}"), 3_600_000, json!(i)))
        .collect();
    assert_eq!(server.schedule(&json!({ "ops": ops })).await.status, 200);
    // The same queue name under another tenant is another queue.
    let other = server
        .client
        .post(server.url("/api/v1/timers"))
        .header("x-queen-tenant", "t2")
        .json(&json!({"ops": [schedule_op("lq", "zz", 3_600_000, json!(0))]}))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);

    let mut keys = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        pages += 1;
        assert!(pages <= 10, "the list never ended");
        let path = match &after {
            None => "/api/v1/timers/lq?limit=10".to_owned(),
            Some(key) => format!("/api/v1/timers/lq?limit=10&after={key}"),
        };
        let page = server.get(&path).await.json();
        for timer in page["timers"].as_array().unwrap() {
            assert!(
                timer.get("payloadBase64").is_none(),
                "a list carries no payloads"
            );
            assert_eq!(
                timer["payloadBytes"],
                json!(
                    timer["timerKey"].as_str().unwrap()[1..]
                        .parse::<i64>()
                        .unwrap()
                        .to_string()
                        .len()
                )
            );
            keys.push(timer["timerKey"].as_str().unwrap().to_owned());
        }
        match page["nextAfter"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => break,
        }
    }
    let expected: Vec<String> = (0..25).map(|i| format!("k{i:02}")).collect();
    assert_eq!(keys, expected);
    assert_eq!(pages, 3);
    server
        .get("/api/v1/timers/lq?limit=0")
        .await
        .refused(400, "invalid_query");
    server
        .get("/api/v1/timers/lq?limit=1001")
        .await
        .refused(400, "invalid_query");
    server
        .get("/api/v1/timers/lq?limit=ten")
        .await
        .refused(400, "invalid_query");
    server
        .get("/api/v1/timers/lq?page=2")
        .await
        .refused(400, "invalid_query");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_cancels_404s_when_absent_and_409s_when_a_sweeper_holds_the_timer() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "delete").spawn().await;
    let ops = json!({"ops": [
        schedule_op("q", "gone", 3_600_000, json!(1)),
        schedule_op("q", "held", 3_600_000, json!(2)),
    ]});
    assert_eq!(server.schedule(&ops).await.status, 200);
    let cancelled = server.delete("/api/v1/timers/q/gone").await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.text);
    assert_eq!(cancelled.json()["status"], json!("cancelled"));
    // An absent timer is a 404 in the error shape, like every other 404.
    server
        .delete("/api/v1/timers/q/gone")
        .await
        .refused(404, "not_found");

    sqlx::query("UPDATE queen.log_timers SET claim_token = gen_random_uuid(), claimed_until = now() + interval '1 hour' WHERE timer_key = 'held'")
        .execute(&db.pool)
        .await
        .unwrap();
    let too_late = server.delete("/api/v1/timers/q/held").await;
    assert_eq!(
        (too_late.status, too_late.json()["status"].clone()),
        (409, json!("too_late"))
    );
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM queen.log_timers WHERE timer_key = 'held'"
        )
        .await,
        1,
        "a held timer is left to fire"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_puts_gets_deletes_and_a_ttl_expires_the_row() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "kv").spawn().await;
    let created = server
        .put("/api/v1/kv/ns/k", &json!({"value": {"a": [1, 2]}}))
        .await;
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(created.json()["version"], json!(1));
    assert_eq!(created.json()["expiresAt"], Value::Null);
    let updated = server.put("/api/v1/kv/ns/k", &json!({"value": null})).await;
    assert_eq!(
        (updated.status, updated.json()["version"].clone()),
        (200, json!(2))
    );
    let read = server.get("/api/v1/kv/ns/k").await;
    assert_eq!(read.status, 200);
    assert_eq!(
        (read.json()["value"].clone(), read.json()["version"].clone()),
        (Value::Null, json!(2))
    );

    let other_tenant = server
        .client
        .get(server.url("/api/v1/kv/ns/k"))
        .header("x-queen-tenant", "other")
        .send()
        .await
        .unwrap();
    assert_eq!(other_tenant.status(), 404);

    let deleted = server.delete("/api/v1/kv/ns/k").await;
    assert_eq!(
        (deleted.status, deleted.json()),
        (200, json!({"deleted": true}))
    );
    server
        .get("/api/v1/kv/ns/k")
        .await
        .refused(404, "not_found");
    server
        .delete("/api/v1/kv/ns/k")
        .await
        .refused(404, "not_found");

    let short = server
        .put(
            "/api/v1/kv/ns/short",
            &json!({"value": "soon gone", "ttlMs": 300}),
        )
        .await;
    assert_eq!(short.status, 201, "{}", short.text);
    assert!(short.json()["expiresAt"].is_string());
    assert_eq!(server.get("/api/v1/kv/ns/short").await.status, 200);
    wait_for("the row to expire", Duration::from_secs(10), || async {
        server.get("/api/v1/kv/ns/short").await.status == 404
    })
    .await;
    server
        .put("/api/v1/kv/ns/k", &json!({"value": 1, "ttlMs": 0}))
        .await
        .refused(400, "invalid_ttl");
    server
        .put("/api/v1/kv/ns/k", &json!({"value": 1, "version": 7}))
        .await
        .refused(400, "server_owned_field");
    server
        .put("/api/v1/kv/ns/k", &json!({"ttlMs": 5}))
        .await
        .refused(400, "invalid_request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fired_messages_are_read_from_an_offset_with_their_payloads() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "messages").spawn().await;
    let ops: Vec<Value> = (0..5)
        .map(|i| {
            let mut op = schedule_op("mq", &format!("m{i}"), 0, json!({"i": i}));
            op["txn"] = json!(format!("txn-{i}"));
            op
        })
        .collect();
    assert_eq!(server.schedule(&json!({ "ops": ops })).await.status, 200);
    let bytes = json!({"ops": [{"op": "schedule", "queue": "mq", "timerKey": "raw", "delayMs": 0, "payloadBase64": "AP8=", "partition": "p2"}]});
    assert_eq!(server.schedule(&bytes).await.status, 200);
    wait_for("six fired messages", Duration::from_secs(10), || async {
        count(&db.pool, "SELECT count(*) FROM queen.log_messages").await == 6
    })
    .await;

    let all = server.get("/api/v1/messages/mq").await.json();
    assert_eq!(all["messages"].as_array().unwrap().len(), 5);
    assert_eq!(all["partition"], json!("default"));
    let mut txns: Vec<String> = all["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["txn"].as_str().unwrap().to_owned())
        .collect();
    txns.sort();
    assert_eq!(txns, (0..5).map(|i| format!("txn-{i}")).collect::<Vec<_>>());
    for message in all["messages"].as_array().unwrap() {
        let i = message["txn"].as_str().unwrap()[4..]
            .parse::<i64>()
            .unwrap();
        assert_eq!(message["payload"], json!({"i": i}), "{message}");
    }

    let page = server
        .get("/api/v1/messages/mq?from=2&limit=2")
        .await
        .json();
    let offsets: Vec<Value> = page["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["offset"].clone())
        .collect();
    assert_eq!(offsets, vec![json!(2), json!(3)]);
    assert_eq!(page["nextFrom"], json!(4));

    let raw = server.get("/api/v1/messages/mq?partition=p2").await.json();
    assert_eq!(raw["messages"][0]["payloadBase64"], json!("AP8="));
    assert!(raw["messages"][0].get("payload").is_none());

    let nothing = server.get("/api/v1/messages/nowhere?from=7").await.json();
    assert_eq!(
        (nothing["messages"].clone(), nothing["nextFrom"].clone()),
        (json!([]), json!(7))
    );
    server
        .get("/api/v1/messages/mq?from=-1")
        .await
        .refused(400, "invalid_query");
}

/// Key order, a number no f64 holds, an escaped NUL and inner whitespace: `jsonb` (the store
/// before) changed or refused each of them.
const AS_WRITTEN: &str = r#"{"z": 1,  "a": [12345678901234567890123, 1.50e3], "nul": "a\u0000b"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_payload_is_peeked_and_delivered_as_the_text_sent() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "as-written").spawn().await;
    let body = |key: &str, delay_ms: u64| {
        format!(
            r#"{{"ops": [{{"op": "schedule", "queue": "w", "timerKey": "{key}", "delayMs": {delay_ms}, "payload": {AS_WRITTEN}}}]}}"#
        )
    };
    let later = server
        .post_raw("/api/v1/timers", body("later", 600_000))
        .await;
    assert_eq!(later.status, 200, "{}", later.text);
    let peeked = server.get("/api/v1/timers/w/later").await;
    assert!(
        peeked.text.contains(&format!(r#""payload":{AS_WRITTEN}"#)),
        "{}",
        peeked.text
    );
    assert_eq!(
        server
            .post_raw("/api/v1/timers", body("now", 0))
            .await
            .status,
        200
    );
    wait_for("the message", Duration::from_secs(10), || async {
        count(&db.pool, "SELECT count(*) FROM queen.log_messages").await == 1
    })
    .await;
    let stored: Vec<u8> = sqlx::query_scalar("SELECT payload FROM queen.log_messages")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, AS_WRITTEN.as_bytes(), "stored as the bytes sent");
    let read = server.get("/api/v1/messages/w").await;
    assert!(
        read.text.contains(&format!(r#""payload":{AS_WRITTEN}"#)),
        "{}",
        read.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_value_is_stored_and_read_as_the_text_sent() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "kv-as-written").spawn().await;
    let put = server
        .put_raw(
            "/api/v1/kv/ns/w",
            format!(r#"{{"value": {AS_WRITTEN}, "ttlMs": 600000}}"#),
        )
        .await;
    assert_eq!(put.status, 201, "{}", put.text);
    let stored: String = sqlx::query_scalar("SELECT value FROM queen.kv WHERE key = 'w'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(stored, AS_WRITTEN, "stored as the text sent");
    let read = server.get("/api/v1/kv/ns/w").await;
    assert_eq!(read.status, 200, "{}", read.text);
    assert!(
        read.text.starts_with(&format!(
            r#"{{"value":{AS_WRITTEN},"version":1,"expiresAt":""#
        )),
        "{}",
        read.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedule_switch_refuses_schedules_with_retry_after_but_cancels_still_work() {
    let db = TestDb::new().await;
    let server = Start::on(&db, "switches").spawn().await;
    assert_eq!(
        server.get("/api/v1/system/switches").await.json(),
        json!({"scheduleEnabled": true, "fireEnabled": true})
    );
    let keep = json!({"ops": [schedule_op("q", "keep", 3_600_000, json!(1)), schedule_op("q", "cancel-me", 3_600_000, json!(2))]});
    assert_eq!(server.schedule(&keep).await.status, 200);

    let off = server
        .post(
            "/api/v1/system/switches",
            &json!({"scheduleEnabled": false}),
        )
        .await;
    assert_eq!(
        off.json(),
        json!({"scheduleEnabled": false, "fireEnabled": true})
    );
    let mirrored: Value = sqlx::query_scalar(
        "SELECT value FROM queen.system_state WHERE key = 'timers_schedule_enabled'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(mirrored, json!(false));

    let refused = server
        .schedule(&json!({"ops": [schedule_op("q", "new", 0, json!(1))]}))
        .await;
    refused.refused(503, "switched_off");
    assert_eq!(refused.retry_after.as_deref(), Some("5"));
    let mixed = json!({"ops": [{"op": "cancel", "queue": "q", "timerKey": "keep"}, {"op": "reschedule", "queue": "q", "timerKey": "cancel-me", "delayMs": 5}]});
    server.schedule(&mixed).await.refused(503, "switched_off");
    let cancel_absent = server.delete("/api/v1/timers/q/nothing").await;
    assert_eq!(
        cancel_absent.status, 404,
        "a cancel is answered, not refused: {}",
        cancel_absent.text
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        2,
        "nothing was written or removed by a refused call"
    );
    let cancels = server
        .schedule(&json!({"ops": [{"op": "cancel", "queue": "q", "timerKey": "cancel-me"}]}))
        .await;
    assert_eq!(
        (
            cancels.status,
            cancels.json()["results"][0]["status"].clone()
        ),
        (200, json!("cancelled"))
    );
    assert_eq!(server.delete("/api/v1/timers/q/keep").await.status, 200);

    let on = server
        .post(
            "/api/v1/system/switches",
            &json!({"scheduleEnabled": true, "fireEnabled": false}),
        )
        .await;
    assert_eq!(
        on.json(),
        json!({"scheduleEnabled": true, "fireEnabled": false})
    );
    assert_eq!(
        server
            .schedule(&json!({"ops": [schedule_op("q", "new", 3_600_000, json!(1))]}))
            .await
            .status,
        200
    );
    assert_eq!(
        server.get("/api/v1/system/switches").await.json(),
        json!({"scheduleEnabled": true, "fireEnabled": false})
    );
    server
        .post("/api/v1/system/switches", &json!({}))
        .await
        .refused(400, "invalid_request");
    server
        .post("/api/v1/system/switches", &json!({"fire": false}))
        .await
        .refused(400, "unknown_field");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_not_ready_until_the_schema_exists_and_metrics_carry_both_sets() {
    let db = TestDb::empty().await;
    let server = Start::on(&db, "health")
        .args(&["--no-apply-schema"])
        .not_waiting_for_ready()
        .spawn()
        .await;
    let not_ready = server.get("/healthz").await;
    assert_eq!(not_ready.status, 503, "{}", not_ready.text);
    assert!(
        not_ready.text.contains("schema is not applied"),
        "{}",
        not_ready.text
    );

    queen_sweeper::apply_schema(&db.pool).await.expect("apply");
    let ready = server.get("/healthz").await;
    assert_eq!((ready.status, ready.text.as_str()), (200, "ok"));
    let metrics = server.get("/metrics").await.text;
    for series in [
        "queen_sweeper_queries_total",
        "queen_api_requests_total{method=\"GET\",route=\"/healthz\",status=\"503\"} ",
        "queen_api_in_flight 0",
    ] {
        assert!(metrics.contains(series), "missing {series} in:\n{metrics}");
    }
    assert!(metrics.ends_with("# EOF\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_api_limit_or_a_taken_port_stops_serve_with_one_clear_line() {
    let db = TestDb::new().await;
    let listen = format!("127.0.0.1:{}", free_loopback_port());
    let url = db.url();
    let (code, stderr) = serve_to_end(
        &["--database-url", &url, "--listen", &listen],
        &[
            ("QUEEN_API_MAX_IN_FLIGHT", "0"),
            ("QUEEN_TIMERS_MAX_OPS", "9"),
        ],
    )
    .await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("QUEEN_API_MAX_IN_FLIGHT=\"0\" is out of range"),
        "{stderr}"
    );
    assert!(
        stderr.contains("QUEEN_TIMERS_MAX_OPS is not an API setting"),
        "{stderr}"
    );

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    let (code, stderr) =
        serve_to_end(&["--database-url", &url, "--listen", &taken_addr], &[]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {taken_addr}")),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("queen-sweeper:"))
            .count(),
        1,
        "{stderr}"
    );
    drop(taken);
}
