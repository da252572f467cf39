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
