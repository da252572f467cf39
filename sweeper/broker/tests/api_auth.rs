//! Nobody acts as a tenant they are not (issue 18): bearer tokens against a real `serve` process
//! on a real database, and the start refused where serving open would be a mistake.

mod api_support;

use std::time::Duration;

use api_support::{Answer, Server, Start, count, free_loopback_port, schedule_op, serve_to_end};
use queen_testdb::TestDb;
use serde_json::json;
use tokio::io::AsyncWriteExt;

const ACME: &str = "acme-token-0123456789abcdef";
const GLOBEX: &str = "globex-token-0123456789abcdef";
const OPERATOR: &str = "operator-token-0123456789abcdef";

const TOKENS: &str = "acme:acme-token-0123456789abcdef,globex:globex-token-0123456789abcdef,*:operator-token-0123456789abcdef";

/// A server that wants tokens. The body read timeout is long so that a refusal arriving
/// quickly cannot be the body timeout.
async fn guarded(db: &TestDb, identity: &str) -> Server {
    Start::on(db, identity)
        .env(&[
            ("QUEEN_API_TOKENS", TOKENS),
            ("QUEEN_API_BODY_READ_TIMEOUT_MS", "60000"),
        ])
        .spawn()
        .await
}

/// `method path` as `token` (none: no `Authorization`), naming `tenant` (none: no header).
async fn call(
    server: &Server,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    tenant: Option<&str>,
    body: Option<&serde_json::Value>,
) -> Answer {
    let mut request = server.client.request(method, server.url(path));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(tenant) = tenant {
        request = request.header("x-queen-tenant", tenant);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    server.send(request).await
}

async fn get(server: &Server, path: &str, token: Option<&str>, tenant: Option<&str>) -> Answer {
    call(server, reqwest::Method::GET, path, token, tenant, None).await
}

async fn timers_written(db: &TestDb) -> i64 {
    count(&db.pool, "SELECT count(*) FROM queen.log_timers").await
}

#[track_caller]
fn unauthenticated(answer: &Answer, code: &str) {
    answer.refused(401, code);
    let challenge = answer
        .www_authenticate
        .as_deref()
        .unwrap_or_else(|| panic!("a 401 without WWW-Authenticate: {}", answer.text));
    assert!(
        challenge.starts_with("Bearer realm=\"queen\""),
        "{challenge}"
    );
    assert_eq!(
        challenge.contains("error=\"invalid_token\""),
        code == "invalid_token",
        "{challenge}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_valid_token_every_api_call_is_a_401_that_writes_nothing() {
    let db = TestDb::new().await;
    let server = guarded(&db, "auth-401").await;
    let batch = json!({"ops": [schedule_op("q", "k", 3_600_000, json!(1))]});
    for (token, code) in [
        (None, "missing_token"),
        (Some("not-a-token-anyone-was-given"), "invalid_token"),
        (Some(&ACME[..ACME.len() - 1]), "invalid_token"),
    ] {
        for tenant in [None, Some("acme")] {
            let answer = call(
                &server,
                reqwest::Method::POST,
                "/api/v1/timers",
                token,
                tenant,
                Some(&batch),
            )
            .await;
            unauthenticated(&answer, code);
            let kv = call(
                &server,
                reqwest::Method::PUT,
                "/api/v1/kv/ns/k",
                token,
                tenant,
                Some(&json!({"value": 1})),
            )
            .await;
            unauthenticated(&kv, code);
            unauthenticated(
                &get(&server, "/api/v1/timers/q/k", token, tenant).await,
                code,
            );
        }
    }
    let basic = server
        .send(
            server
                .client
                .get(server.url("/api/v1/messages/q"))
                .basic_auth("acme", Some(ACME)),
        )
        .await;
    unauthenticated(&basic, "missing_token");
    assert_eq!(timers_written(&db).await, 0);
    assert_eq!(count(&db.pool, "SELECT count(*) FROM queen.kv").await, 0);
    assert!(
        server
            .metric("queen_api_refused_total{reason=\"unauthenticated\"}")
            .await
            >= 13.0
    );
    assert!(
        !server.stderr().contains(ACME) && !server.stderr().contains(OPERATOR),
        "a token reached the log:\n{}",
        server.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_without_a_token_is_refused_before_its_body_is_read() {
    let db = TestDb::new().await;
    let server = guarded(&db, "auth-early").await;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
        .await
        .expect("connect");
    // 100 bytes declared, not one sent: the server would wait 60 s for them if it read first.
    stream
        .write_all(b"POST /api/v1/timers HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
        .await
        .expect("write");
    let answer = api_support::read_answer(&mut stream, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(
        answer
            .to_lowercase()
            .contains("www-authenticate: bearer realm=\"queen\""),
        "{answer}"
    );
    assert_eq!(
        api_support::raw_json(&answer)["error"]["code"],
        "missing_token"
    );
    assert_eq!(
        server
            .metric("queen_api_refused_total{reason=\"body_timeout\"}")
            .await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_token_acts_as_its_tenant_and_cannot_name_another() {
    let db = TestDb::new().await;
    let server = guarded(&db, "auth-tenant").await;
    // No header: the token's tenant.
    let batch = json!({"ops": [schedule_op("orders", "o-1", 3_600_000, json!({"n": 1}))]});
    let scheduled = call(
        &server,
        reqwest::Method::POST,
        "/api/v1/timers",
        Some(ACME),
        None,
        Some(&batch),
    )
    .await;
    assert_eq!(scheduled.status, 200, "{}", scheduled.text);
    let tenants: Vec<String> = sqlx::query_scalar("SELECT tenant_id FROM queen.log_timers")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(tenants, ["acme"]);

    let path = "/api/v1/timers/orders/o-1";
    for tenant in [None, Some("acme")] {
        let peek = get(&server, path, Some(ACME), tenant).await;
        assert_eq!(peek.status, 200, "{}", peek.text);
        assert_eq!(peek.json()["payload"], json!({"n": 1}));
    }
    // Another tenant's token sees its own tenant, where the timer is not.
    get(&server, path, Some(GLOBEX), None)
        .await
        .refused(404, "not_found");
    // A token naming another tenant: 403, whichever way round, read or write.
    get(&server, path, Some(GLOBEX), Some("acme"))
        .await
        .refused(403, "forbidden_tenant");
    get(&server, path, Some(ACME), Some("globex"))
        .await
        .refused(403, "forbidden_tenant");
    let cancel = call(
        &server,
        reqwest::Method::DELETE,
        path,
        Some(GLOBEX),
        Some("acme"),
        None,
    )
    .await;
    cancel.refused(403, "forbidden_tenant");
    assert!(
        cancel.www_authenticate.is_none(),
        "a 403 is not a challenge"
    );
    let other = json!({"ops": [schedule_op("orders", "o-2", 3_600_000, json!(2))]});
    call(
        &server,
        reqwest::Method::POST,
        "/api/v1/timers",
        Some(ACME),
        Some("globex"),
        Some(&other),
    )
    .await
    .refused(403, "forbidden_tenant");
    assert_eq!(
        timers_written(&db).await,
        1,
        "the refused calls wrote nothing"
    );
    // The operator's token acts as whichever tenant it names, `default` without one.
    let peek = get(&server, path, Some(OPERATOR), Some("acme")).await;
    assert_eq!(peek.status, 200, "{}", peek.text);
    get(&server, path, Some(OPERATOR), None)
        .await
        .refused(404, "not_found");
    assert!(
        server
            .metric("queen_api_refused_total{reason=\"forbidden\"}")
            .await
            >= 4.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switches_need_the_operators_token() {
    let db = TestDb::new().await;
    let server = guarded(&db, "auth-switches").await;
    let off = json!({"scheduleEnabled": false});
    let path = "/api/v1/system/switches";
    get(&server, path, Some(ACME), None)
        .await
        .refused(403, "operator_only");
    call(
        &server,
        reqwest::Method::POST,
        path,
        Some(ACME),
        Some("acme"),
        Some(&off),
    )
    .await
    .refused(403, "operator_only");
    unauthenticated(
        &call(&server, reqwest::Method::POST, path, None, None, Some(&off)).await,
        "missing_token",
    );
    // Nothing was switched by the refused calls.
    assert_eq!(
        get(&server, path, Some(OPERATOR), None).await.json(),
        json!({"scheduleEnabled": true, "fireEnabled": true})
    );
    let switched = call(
        &server,
        reqwest::Method::POST,
        path,
        Some(OPERATOR),
        None,
        Some(&off),
    )
    .await;
    assert_eq!(
        switched.json(),
        json!({"scheduleEnabled": false, "fireEnabled": true})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitoring_is_open_by_default_and_wants_a_token_when_told() {
    let db = TestDb::new().await;
    let open = guarded(&db, "auth-monitoring-open").await;
    for path in ["/healthz", "/metrics"] {
        let answer = get(&open, path, None, None).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.text);
    }
    drop(open);

    let closed = Start::on(&db, "auth-monitoring-closed")
        .env(&[
            ("QUEEN_API_TOKENS", TOKENS),
            ("QUEEN_API_AUTH_MONITORING", "1"),
        ])
        .health_token(GLOBEX)
        .spawn()
        .await;
    for path in ["/healthz", "/metrics"] {
        unauthenticated(&get(&closed, path, None, None).await, "missing_token");
        unauthenticated(
            &get(&closed, path, Some("not-a-token-anyone-was-given"), None).await,
            "invalid_token",
        );
        for token in [ACME, OPERATOR] {
            let answer = get(&closed, path, Some(token), None).await;
            assert_eq!(answer.status, 200, "{path}: {}", answer.text);
        }
    }
    let healthz = get(&closed, "/healthz", Some(ACME), None).await;
    assert_eq!(healthz.text, "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokens_file_grants_like_the_environment() {
    let db = TestDb::new().await;
    let file = std::env::temp_dir().join(format!("queen-api-auth-{}-tokens", std::process::id()));
    std::fs::write(&file, format!("# tenants\nacme {ACME}\n\n* {OPERATOR}\n")).unwrap();
    let file_arg = file.display().to_string();
    let args = ["--tokens-file", file_arg.as_str()];
    let server = Start::on(&db, "auth-file").args(&args).spawn().await;
    let _ = std::fs::remove_file(&file);
    let batch = json!({"ops": [schedule_op("q", "k", 3_600_000, json!(1))]});
    let scheduled = call(
        &server,
        reqwest::Method::POST,
        "/api/v1/timers",
        Some(ACME),
        None,
        Some(&batch),
    )
    .await;
    assert_eq!(scheduled.status, 200, "{}", scheduled.text);
    unauthenticated(
        &get(&server, "/api/v1/timers/q/k", Some(GLOBEX), None).await,
        "invalid_token",
    );
    get(&server, "/api/v1/system/switches", Some(ACME), None)
        .await
        .refused(403, "operator_only");
    assert_eq!(
        get(&server, "/api/v1/system/switches", Some(OPERATOR), None)
            .await
            .status,
        200
    );
}

/// Runs `serve` with `args` and `env` to its end (bounded): its exit code and stderr. The
/// database URL points at a closed loopback port, so a start that got past the checks would fail
/// differently (connection refused).
async fn refused_start(listen: &str, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let url = format!("postgres://nobody@127.0.0.1:{}/queen", free_loopback_port());
    let mut all = vec!["--database-url", &url, "--listen", listen];
    all.extend_from_slice(args);
    serve_to_end(&all, env).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_open_on_an_address_other_hosts_reach_is_refused_before_binding() {
    let port = free_loopback_port();
    let listen = format!("0.0.0.0:{port}");
    let (code, stderr) = refused_start(&listen, &[], &[]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("--listen {listen} is not a loopback address")),
        "{stderr}"
    );
    assert!(stderr.contains("QUEEN_API_ALLOW_NO_AUTH=1"), "{stderr}");
    assert!(!stderr.contains("cannot connect"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_token_stops_the_start_naming_its_line_never_the_token() {
    let file = std::env::temp_dir().join(format!("queen-api-auth-{}-bad", std::process::id()));
    std::fs::write(
        &file,
        format!("acme {ACME}\nglobex short-secret\nglobex {ACME}\n"),
    )
    .unwrap();
    let shown = file.display().to_string();
    let listen = format!("127.0.0.1:{}", free_loopback_port());
    let (code, stderr) = refused_start(&listen, &["--tokens-file", &shown], &[]).await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("refusing to serve the API"), "{stderr}");
    assert!(
        stderr.contains(&format!("{shown}:2: the token is 12 bytes, under the 16")),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{shown}:3: the same token as {shown}:1")),
        "{stderr}"
    );
    assert!(
        !stderr.contains("short-secret") && !stderr.contains(ACME),
        "a token reached stderr:\n{stderr}"
    );
    // A misspelt variable under the API's prefix is refused too, not ignored.
    let (code, stderr) = refused_start(&listen, &[], &[("QUEEN_API_TOKEN", TOKENS)]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("QUEEN_API_TOKEN is not an API setting"),
        "{stderr}"
    );
    assert!(!stderr.contains(ACME), "a token reached stderr:\n{stderr}");
}
