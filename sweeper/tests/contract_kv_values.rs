//! KV values come back exactly as they were put.

use queen_testdb::TestDb;
use serde_json::{Value, json};

async fn put_then_get(db: &TestDb, key: &str, value: &Value, ttl_ms: Option<i64>) -> Value {
    sqlx::query("SELECT queen.kv_put_v1('t', 'ns', $1, $2, $3, now())")
        .bind(key)
        .bind(value)
        .bind(ttl_ms)
        .execute(&db.pool)
        .await
        .expect("put");
    sqlx::query_scalar("SELECT queen.kv_get_v1('t', 'ns', $1, now())")
        .bind(key)
        .fetch_one(&db.pool)
        .await
        .expect("get")
}

#[tokio::test]
async fn a_value_with_nulls_at_any_depth_reads_back_unchanged() {
    let db = TestDb::new().await;
    for value in [
        json!(null),
        json!({"a": null, "b": [1, null, {"c": null}]}),
        json!([null]),
        json!("text"),
    ] {
        let answer = put_then_get(&db, "k", &value, None).await;
        assert_eq!(answer["value"], value, "stored {value}, read {answer}");
        assert!(
            answer.get("value").is_some(),
            "a JSON null value is present, not missing: {answer}"
        );
        assert!(
            answer.get("expiresAt").is_none(),
            "no expiry, no expiresAt: {answer}"
        );
    }
}

#[tokio::test]
async fn a_value_with_a_ttl_reads_back_with_its_expiry() {
    let db = TestDb::new().await;
    let answer = put_then_get(&db, "ttl", &json!({"x": null}), Some(60_000)).await;
    assert_eq!(answer["value"], json!({"x": null}));
    assert!(answer["expiresAt"].is_string(), "{answer}");
    assert_eq!(answer["version"], json!(1));
}

/// Key order, a number no f64 holds, an escaped NUL and inner whitespace: jsonb changed or
/// refused each of them.
const AS_WRITTEN: &str = r#"{"z": 1,  "a": [12345678901234567890123, 1.50e3], "nul": "a\u0000b"}"#;

#[tokio::test]
async fn a_value_put_as_text_is_stored_and_read_as_those_bytes() {
    let db = TestDb::new().await;
    let written: Value =
        sqlx::query_scalar("SELECT queen.kv_put_v2('t', 'ns', 'w', $1, NULL, now())")
            .bind(AS_WRITTEN)
            .fetch_one(&db.pool)
            .await
            .expect("put");
    assert_eq!(written, json!({"version": 1, "created": true}));
    let (value, version, expires_at): (String, i64, Option<chrono::DateTime<chrono::Utc>>) =
        sqlx::query_as(
            "SELECT value, version, expires_at FROM queen.kv_get_v2('t', 'ns', 'w', now())",
        )
        .fetch_one(&db.pool)
        .await
        .expect("get");
    assert_eq!((value.as_str(), version, expires_at), (AS_WRITTEN, 1, None));
    let stored: Vec<u8> =
        sqlx::query_scalar("SELECT convert_to(value, 'UTF8') FROM queen.kv WHERE key = 'w'")
            .fetch_one(&db.pool)
            .await
            .expect("stored");
    assert_eq!(stored, AS_WRITTEN.as_bytes());

    // Through jsonb, for SQL callers: the NUL it cannot hold is an error, not a changed value.
    let through_jsonb =
        sqlx::query_scalar::<_, Value>("SELECT queen.kv_get_v1('t', 'ns', 'w', now())")
            .fetch_one(&db.pool)
            .await
            .expect_err("jsonb cannot hold U+0000");
    let code = through_jsonb
        .as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned());
    assert_eq!(code.as_deref(), Some("22P05"), "{through_jsonb}");
}

#[tokio::test]
async fn text_that_is_not_json_is_refused_and_writes_nothing() {
    let db = TestDb::new().await;
    for bad in ["", "{", "{'a': 1}", "1 2", "nul"] {
        let refused = sqlx::query("SELECT queen.kv_put_v2('t', 'ns', 'bad', $1, NULL, now())")
            .bind(bad)
            .execute(&db.pool)
            .await
            .expect_err(bad);
        let code = refused
            .as_database_error()
            .and_then(|e| e.code())
            .map(|c| c.into_owned());
        assert_eq!(code.as_deref(), Some("22P02"), "{bad:?}: {refused}");
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM queen.kv")
        .fetch_one(&db.pool)
        .await
        .expect("count");
    assert_eq!(rows, 0);
}

#[tokio::test]
async fn a_get_after_the_row_expired_answers_no_row() {
    let db = TestDb::new().await;
    sqlx::query("SELECT queen.kv_put_v2('t', 'ns', 'e', '1', 1000, now() - interval '2 s')")
        .execute(&db.pool)
        .await
        .expect("put");
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT value, version FROM queen.kv_get_v2('t', 'ns', 'e', now())")
            .fetch_all(&db.pool)
            .await
            .expect("get");
    assert!(rows.is_empty(), "{rows:?}");
}
