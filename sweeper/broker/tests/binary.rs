//! `queen-sweeper run` as a process: clear one-line errors, metrics, and a clean exit on a signal.

use std::process::{Command, Stdio};
use std::time::Duration;

use queen_testdb::TestDb;

const BINARY: &str = env!("CARGO_BIN_EXE_queen-sweeper");

fn free_loopback_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// Runs the binary to completion (bounded) and returns (exit code, stderr).
fn run_to_end(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut command = Command::new(BINARY);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    command.env_remove("DATABASE_URL");
    let child = command.spawn().expect("spawn queen-sweeper");
    let output = wait_with_limit(child, Duration::from_secs(30));
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn wait_with_limit(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let polls = limit.as_millis() / 20;
    for _ in 0..polls {
        if child.try_wait().expect("try_wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("queen-sweeper did not exit within {limit:?}");
}

fn assert_one_clear_line(stderr: &str, needle: &str) {
    assert!(
        stderr.contains(needle),
        "stderr lacks {needle:?}:\n{stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("stack backtrace"),
        "a panic reached the user:\n{stderr}"
    );
    let error_lines = stderr
        .lines()
        .filter(|l| l.starts_with("queen-sweeper:"))
        .count();
    assert_eq!(error_lines, 1, "exactly one error line expected:\n{stderr}");
}

#[test]
fn an_unreachable_server_is_one_clear_error_line_and_exit_code_1() {
    let port = free_loopback_port().to_string();
    let url = format!("postgres://nobody:secret@127.0.0.1:{port}/queen");
    let (code, stderr) = run_to_end(&["run", "--database-url", &url], &[]);
    assert_eq!(code, Some(1));
    assert_one_clear_line(&stderr, "Connection refused");
    assert!(
        !stderr.contains("secret"),
        "the password leaked into the message:\n{stderr}"
    );
}

#[test]
fn a_malformed_url_is_one_clear_error_line() {
    let (code, stderr) = run_to_end(&["run", "--database-url", "not-a-url"], &[]);
    assert_eq!(code, Some(1));
    assert_one_clear_line(&stderr, "is not a PostgreSQL URL");
}

#[test]
fn a_bad_knob_stops_the_start_naming_the_variable() {
    let (code, stderr) = run_to_end(
        &["run", "--database-url", "postgres://x@127.0.0.1:1/x"],
        &[("QUEEN_SWEEPER_CLAIM_BATCH", "lots")],
    );
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("QUEEN_SWEEPER_CLAIM_BATCH=\"lots\" is not a whole number"),
        "{stderr}"
    );
}

#[test]
fn a_missing_database_url_is_a_usage_error() {
    let (code, stderr) = run_to_end(&["run"], &[]);
    assert_eq!(code, Some(2), "clap's usage error:\n{stderr}");
    assert!(stderr.contains("--database-url"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_process_applies_the_schema_fires_serves_metrics_and_exits_0_on_sigint() {
    let db = TestDb::empty().await;
    let port = free_loopback_port();
    let mut child = tokio::process::Command::new(BINARY)
        .args([
            "run",
            "--database-url",
            &db.url(),
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
            "--identity",
            "proc-1",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn");

    // The schema is applied by the process itself (the database was empty).
    let mut applied = false;
    for _ in 0..500 {
        let exists: Option<String> =
            sqlx::query_scalar("SELECT to_regproc('queen.log_timers_fire_v1')::text")
                .fetch_one(&db.pool)
                .await
                .expect("query");
        if exists.is_some() {
            applied = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(applied, "the process did not apply the schema within 10 s");

    sqlx::query(
        r#"SELECT queen.log_timers_apply_v1('t', '[{"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 0, "payload": 1}]', now())"#,
    )
    .execute(&db.pool)
    .await
    .expect("schedule");
    let mut fired = false;
    for _ in 0..500 {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM queen.log_messages")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        if n == 1 {
            fired = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(fired, "the process did not fire the timer within 10 s");

    let metrics = http_get(port, "/metrics").await;
    assert!(
        metrics.contains("queen_sweeper_timers_total{result=\"fired\"} 1"),
        "{metrics}"
    );
    assert!(http_get(port, "/healthz").await.ends_with("ok"));

    let pid = child.id().expect("pid") as i32;
    // SAFETY: signalling a child we spawned and have not reaped.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid, libc::SIGINT);
    }
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("exits within 20 s of SIGINT")
        .expect("wait");
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr)
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "stderr:\n{stderr}");
    assert!(stderr.contains("finishing the fire in flight"), "{stderr}");
    assert!(stderr.contains("stopped cleanly"), "{stderr}");
}

/// A minimal HTTP/1.0 GET on loopback (the body only).
async fn http_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .trim()
        .to_owned()
}
