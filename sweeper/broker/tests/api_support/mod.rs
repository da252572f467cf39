//! Shared by the `api_*` tests: a real `queen-sweeper serve` process on a free loopback port, a
//! real HTTP client, and bounded waits on events.
#![allow(dead_code)] // each test file uses its own subset

use std::future::Future;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use queen_testdb::TestDb;
use serde_json::Value;
use sqlx::PgPool;
use tokio::io::AsyncBufReadExt;
use tokio::process::{Child, Command};

pub const BINARY: &str = env!("CARGO_BIN_EXE_queen-sweeper");

/// How long a server may take to answer its first /healthz: it connects and applies the schema.
const START_LIMIT: Duration = Duration::from_secs(30);

/// Every HTTP call of a test is bounded by this.
const REQUEST_LIMIT: Duration = Duration::from_secs(30);

/// A free loopback port: bind port 0, read it, let it go.
pub fn free_loopback_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// A `queen-sweeper serve` process, killed when dropped.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub identity: String,
    pub client: reqwest::Client,
    stderr: Arc<Mutex<String>>,
    stderr_reader: Option<tokio::task::JoinHandle<()>>,
}

/// How to start a server.
pub struct Start<'a> {
    pub url: String,
    pub identity: &'a str,
    pub env: &'a [(&'a str, &'a str)],
    pub args: &'a [&'a str],
    /// Wait for /healthz to say ready (otherwise only for it to answer at all).
    pub ready: bool,
    /// The bearer token the wait for /healthz sends (when monitoring needs one).
    pub health_token: Option<&'a str>,
}

impl<'a> Start<'a> {
    pub fn on(db: &TestDb, identity: &'a str) -> Start<'a> {
        Start {
            url: db.url(),
            identity,
            env: &[],
            args: &[],
            ready: true,
            health_token: None,
        }
    }

    pub fn env(mut self, env: &'a [(&'a str, &'a str)]) -> Start<'a> {
        self.env = env;
        self
    }

    pub fn args(mut self, args: &'a [&'a str]) -> Start<'a> {
        self.args = args;
        self
    }

    pub fn health_token(mut self, token: &'a str) -> Start<'a> {
        self.health_token = Some(token);
        self
    }

    pub fn not_waiting_for_ready(mut self) -> Start<'a> {
        self.ready = false;
        self
    }

    pub async fn spawn(self) -> Server {
        Server::start(self).await
    }
}

impl Server {
    async fn start(start: Start<'_>) -> Server {
        let port = free_loopback_port();
        let mut command = Command::new(BINARY);
        command
            .args([
                "serve",
                "--database-url",
                &start.url,
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--identity",
                start.identity,
            ])
            .args(start.args)
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "info,sqlx=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in start.env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("spawn queen-sweeper serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let pipe = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        let stderr_reader = tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut text = sink.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        // Idle connections are dropped before the broker's advertised `Keep-Alive` time.
        let client = reqwest::Client::builder()
            .timeout(REQUEST_LIMIT)
            .pool_idle_timeout(Duration::from_secs(1))
            .build()
            .expect("client");
        let mut server = Server {
            child,
            port,
            identity: start.identity.to_owned(),
            client,
            stderr,
            stderr_reader: Some(stderr_reader),
        };
        server
            .wait_until_answering(start.ready, start.health_token)
            .await;
        server
    }

    async fn wait_until_answering(&mut self, ready: bool, token: Option<&str>) {
        let polls = START_LIMIT.as_millis() / 50;
        for _ in 0..polls {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!(
                    "serve exited with {status} before answering:\n{}",
                    self.stderr()
                );
            }
            let mut health = self.client.get(self.url("/healthz"));
            if let Some(token) = token {
                health = health.bearer_auth(token);
            }
            if let Ok(response) = health.send().await
                && (!ready || response.status() == 200)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "serve did not answer /healthz within {START_LIMIT:?}:\n{}",
            self.stderr()
        );
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn pid(&self) -> i32 {
        self.child.id().expect("a running child") as i32
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling a child this test spawned and has not reaped.
        #[allow(unsafe_code)]
        unsafe {
            libc::kill(self.pid(), signal);
        }
    }

    /// Waits (bounded) for the process to exit; its exit code.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let status = tokio::time::timeout(limit, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("serve did not exit within {limit:?}:\n{}", self.stderr()))
            .expect("wait");
        // Let the reader take in what the process wrote last: the pipe closes with the process.
        if let Some(reader) = self.stderr_reader.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
        }
        status.code()
    }

    pub async fn get(&self, path: &str) -> Answer {
        Answer::of(self.client.get(self.url(path)).send().await).await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        Answer::of(self.client.delete(self.url(path)).send().await).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Answer {
        Answer::of(self.client.post(self.url(path)).json(body).send().await).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Answer {
        Answer::of(self.client.put(self.url(path)).json(body).send().await).await
    }

    /// POST with a raw body, as given.
    pub async fn post_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> Answer {
        self.raw(self.client.post(self.url(path)), body).await
    }

    /// PUT with a raw body, as given.
    pub async fn put_raw(&self, path: &str, body: impl Into<reqwest::Body>) -> Answer {
        self.raw(self.client.put(self.url(path)), body).await
    }

    async fn raw(
        &self,
        request: reqwest::RequestBuilder,
        body: impl Into<reqwest::Body>,
    ) -> Answer {
        Answer::of(
            request
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await,
        )
        .await
    }

    /// Sends a request built on the server's client (with headers of the caller's choosing).
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        Answer::of(request.send().await).await
    }

    pub async fn schedule(&self, body: &Value) -> Answer {
        self.post("/api/v1/timers", body).await
    }

    /// The value of one series in /metrics (0 when absent).
    pub async fn metric(&self, series: &str) -> f64 {
        let text = self.get("/metrics").await.text;
        metric_value(&text, series)
    }
}

/// Runs `serve` with `args` and `env` to its end (bounded); (exit code, stderr).
pub async fn serve_to_end(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut command = Command::new(BINARY);
    command
        .arg("serve")
        .args(args)
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        command.env(k, v);
    }
    let output = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .expect("serve exits within 30 s")
        .expect("output");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The value of `series` (name with labels, exactly as rendered) in a Prometheus text exposition.
pub fn metric_value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |value| value.trim().parse().expect("a number"))
}

/// An HTTP answer, read whole.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub retry_after: Option<String>,
    pub www_authenticate: Option<String>,
    pub text: String,
}

impl Answer {
    async fn of(response: reqwest::Result<reqwest::Response>) -> Answer {
        let response = response.expect("the server answers");
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        let retry_after = header("retry-after");
        let www_authenticate = header("www-authenticate");
        let text = response.text().await.expect("a readable body");
        Answer {
            status,
            retry_after,
            www_authenticate,
            text,
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }

    /// The `error.code` of a refusal.
    pub fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error code in {}", self.text))
            .to_owned()
    }

    /// Asserts a refusal: its status and code.
    #[track_caller]
    pub fn refused(&self, status: u16, code: &str) {
        assert_eq!(
            (self.status, self.code().as_str()),
            (status, code),
            "{}",
            self.text
        );
    }
}

/// Polls `condition` every 20 ms until it holds; fails the test after `limit`.
pub async fn wait_for<F, Fut>(what: &str, limit: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let polls = limit.as_millis() / 20;
    for _ in 0..polls {
        if condition().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out after {limit:?} waiting for {what}");
}

pub async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Backends of this database whose application name starts with `prefix` and that wait on a lock.
pub async fn lock_waiters(pool: &PgPool, prefix: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name LIKE $1 || '%'
           AND wait_event_type = 'Lock'",
    )
    .bind(prefix)
    .fetch_one(pool)
    .await
    .expect("pg_stat_activity")
}

/// Waits until a backend of `prefix` waits on a lock.
pub async fn wait_for_lock_waiter(pool: &PgPool, prefix: &str) {
    wait_for(
        &format!("a {prefix} backend waiting on a lock"),
        Duration::from_secs(10),
        || async { lock_waiters(pool, prefix).await > 0 },
    )
    .await;
}

/// One schedule op as JSON.
pub fn schedule_op(queue: &str, timer_key: &str, delay_ms: i64, payload: Value) -> Value {
    let mut op = serde_json::json!({"op": "schedule", "queue": queue, "timerKey": timer_key, "delayMs": delay_ms});
    op["payload"] = payload;
    op
}

/// Reads one HTTP/1.1 answer from `stream`: its head and, when it declares one, its
/// `Content-Length` body; bounded by `limit`. The text read, lower-cased head included as sent.
pub async fn read_answer(stream: &mut tokio::net::TcpStream, limit: Duration) -> String {
    use tokio::io::AsyncReadExt;
    let read = async {
        let mut bytes = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if answer_complete(&bytes) {
                break;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    };
    tokio::time::timeout(limit, read)
        .await
        .unwrap_or_else(|_| panic!("no whole answer within {limit:?}"))
}

/// Whether `bytes` hold a whole answer: a head, and as much body as it declares.
fn answer_complete(bytes: &[u8]) -> bool {
    let text = String::from_utf8_lossy(bytes);
    let Some(end) = text.find("\r\n\r\n") else {
        return false;
    };
    let head = text[..end].to_lowercase();
    if head.starts_with("http/1.1 100") {
        return true;
    }
    let length = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .map_or(0, |value| value.trim().parse::<usize>().expect("a length"));
    bytes.len() >= end + 4 + length
}

/// The JSON body of a raw answer read by [`read_answer`].
pub fn raw_json(answer: &str) -> Value {
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {answer}"))
}
