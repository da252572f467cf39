//! While the database cannot be reached: `/healthz` answers within a second with the reason,
//! `/api/v1` calls are refused at once instead of waiting out the pool, and both recover by
//! themselves when the database is back. Real `serve` process, real PostgreSQL, reached through a
//! proxy of the test's own that can partition it.

mod api_support;

use std::path::PathBuf;
use std::time::Duration;

use api_support::{Start, wait_for};
use queen_sweeper::clock::monotonic_now;
use queen_testdb::TestDb;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::watch;

/// Where the proxy forwards: the test database's unix socket, or its TCP address.
#[derive(Clone)]
enum Target {
    Unix(PathBuf),
    Tcp(String),
}

/// A TCP proxy in front of the test database. Partitioned, it forwards nothing and closes nothing:
/// open connections go silent and new ones are accepted and left unanswered, the way a network
/// partition (not a refused connection) looks to a client. Healed, it closes what it held and
/// forwards new connections again.
struct Proxy {
    port: u16,
    forwarding: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(db: &TestDb) -> Proxy {
        let options = db.options();
        let target = match options.get_socket() {
            Some(dir) => Target::Unix(dir.join(format!(".s.PGSQL.{}", options.get_port()))),
            None => Target::Tcp(format!("{}:{}", options.get_host(), options.get_port())),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (forwarding, watching) = watch::channel(true);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, target.clone(), watching.clone()));
            }
        });
        Proxy {
            port,
            forwarding,
            accept,
        }
    }

    /// A URL that reaches `db` through the proxy.
    fn url(&self, db: &TestDb) -> String {
        let options = db.options();
        format!(
            "postgres://{}@127.0.0.1:{}/{}",
            options.get_username(),
            self.port,
            options.get_database().expect("a database name")
        )
    }

    fn partition(&self) {
        self.forwarding.send_replace(false);
    }

    fn heal(&self) {
        self.forwarding.send_replace(true);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn relay(mut client: TcpStream, target: Target, mut forwarding: watch::Receiver<bool>) {
    if *forwarding.borrow_and_update() {
        let server = match &target {
            Target::Unix(path) => UnixStream::connect(path).await.map(Server::Unix),
            Target::Tcp(address) => TcpStream::connect(address).await.map(Server::Tcp),
        };
        let Ok(mut server) = server else { return };
        let partitioned = {
            let copy = async {
                match &mut server {
                    Server::Unix(s) => tokio::io::copy_bidirectional(&mut client, s).await,
                    Server::Tcp(s) => tokio::io::copy_bidirectional(&mut client, s).await,
                }
            };
            tokio::select! {
                biased;
                _ = forwarding.wait_for(|on| !*on) => true,
                _ = copy => false,
            }
        };
        if !partitioned {
            return;
        }
    }
    // Silent until healed (or the proxy is gone), then closed.
    let _ = forwarding.wait_for(|on| *on).await;
}

enum Server {
    Unix(UnixStream),
    Tcp(TcpStream),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_the_database_is_unreachable_healthz_answers_in_time_calls_are_refused_at_once_and_both_recover()
 {
    let db = TestDb::new().await;
    let proxy = Proxy::start(&db).await;
    let mut start = Start::on(&db, "outage");
    start.url = proxy.url(&db);
    let server = start.spawn().await;
    assert_eq!(
        server
            .put("/api/v1/kv/ns/k", &json!({"value": 1}))
            .await
            .status,
        201
    );
    assert_eq!(server.metric("queen_api_database_up").await, 1.0);

    proxy.partition();
    // The first /healthz finds the pool's connection silent and gives up at 800 ms; the probe it
    // starts fails; from then on /healthz says so at once. The bound asserted is loose (a shared
    // machine); what it tells apart is an answer in under a second from the pool's 7 s wait.
    let mut answers = Vec::new();
    for _ in 0..10 {
        let asked = monotonic_now();
        let answer = server.get("/healthz").await;
        answers.push((answer.status, asked.elapsed(), answer.text));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    for (status, took, text) in &answers {
        assert_eq!(*status, 503, "{text}");
        assert!(*took < Duration::from_millis(2500), "{took:?}: {text}");
    }
    let (_, _, last) = answers.last().expect("ten answers");
    assert!(last.contains("has not answered for"), "{last}");

    let asked = monotonic_now();
    let refused = server.get("/api/v1/kv/ns/k").await;
    let took = asked.elapsed();
    refused.refused(503, "database_unavailable");
    assert_eq!(refused.retry_after.as_deref(), Some("1"));
    assert!(
        refused.text.contains("refused without trying"),
        "{}",
        refused.text
    );
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert_eq!(server.metric("queen_api_database_up").await, 0.0);
    assert!(
        server
            .metric("queen_api_refused_total{reason=\"database_down\"}")
            .await
            >= 1.0
    );

    proxy.heal();
    wait_for(
        "/healthz to answer 200",
        Duration::from_secs(15),
        || async { server.get("/healthz").await.status == 200 },
    )
    .await;
    let after = server.put("/api/v1/kv/ns/k", &json!({"value": 2})).await;
    assert_eq!(
        (after.status, after.json()["version"].clone()),
        (200, json!(2)),
        "{}",
        after.text
    );
    assert_eq!(server.metric("queen_api_database_up").await, 1.0);
    assert!(!server.stderr().contains("panicked"), "{}", server.stderr());
}
