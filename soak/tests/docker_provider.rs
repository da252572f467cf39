//! The Docker provider on both kinds of machine.
//!
//! - No Docker engine answers (the default here: `docker` is installed, nothing listens): the
//!   provider fails within [`FAIL_FAST_BOUND`], in one line that names the problem.
//! - An engine answers (CI's `soak/docker/ci-docker.sh` starts one, builds the image and sets
//!   `QUEEN_SOAK_DOCKER=1`): the provider starts PostgreSQL 15 through testcontainers on the host
//!   network, it answers SQL, it listens on 127.0.0.1 only, and dropping it removes it.
//!
//! Which case applies is probed here, independently of the provider, the way testcontainers looks
//! for an engine. `QUEEN_SOAK_DOCKER=1` makes the engine mandatory: without one the engine test
//! fails rather than passing on the other branch. Every wait is bounded.

use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use queen_soak::provider::{DockerOptions, ProviderKind, docker};
use queen_sweeper::clock::monotonic_now;
use sqlx::Connection;

/// A missing engine is a missing socket or a refused connection: about a millisecond. A second
/// is "well under" for a check that must not make the provider chain feel slow.
const FAIL_FAST_BOUND: Duration = Duration::from_secs(1);
/// The container path: about 0.3 s to ready with the prebuilt image; 90 s covers a loaded CI.
const START_BOUND: Duration = Duration::from_secs(90);
/// Bound on one query and on the removal check after the drop.
const QUERY_BOUND: Duration = Duration::from_secs(10);
const REMOVAL_POLL: Duration = Duration::from_millis(50);
/// Bound on the probe's connection to a `tcp://` engine.
const ENGINE_PROBE_BOUND: Duration = Duration::from_secs(1);
/// TCP state "listening" in /proc/net/tcp{,6}.
const TCP_LISTEN: &str = "0A";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_engine_the_docker_provider_fails_fast_in_one_line() {
    if engine_required() || engine_answers().is_some() {
        eprintln!("not this machine's case: an engine answers or QUEEN_SOAK_DOCKER=1 requires one");
        return;
    }
    let started = monotonic_now();
    let outcome = tokio::time::timeout(FAIL_FAST_BOUND, docker::start(&DockerOptions::default()))
        .await
        .expect("the Docker provider must give up at once when no engine answers");
    let elapsed = monotonic_now() - started;
    let reason = outcome.expect_err("no engine answers, so the Docker provider cannot start");
    eprintln!("no engine: failed in {} µs: {reason}", elapsed.as_micros());
    assert!(elapsed < FAIL_FAST_BOUND, "took {elapsed:?}");
    assert!(!reason.contains('\n'), "one line, got: {reason:?}");
    assert!(
        reason.starts_with("no Docker engine answers"),
        "names the problem, got: {reason}"
    );
    assert!(
        reason.contains("docker.sock") || reason.contains("DOCKER_HOST"),
        "names where it looked, got: {reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_engine_the_docker_provider_serves_postgres_15_on_loopback_only() {
    let required = engine_required();
    if !required && engine_answers().is_none() {
        eprintln!("not this machine's case: no Docker engine answers (QUEEN_SOAK_DOCKER unset)");
        return;
    }
    if let Some(engine) = engine_answers() {
        eprintln!("engine at {engine}");
    }
    let started = monotonic_now();
    let database = tokio::time::timeout(START_BOUND, docker::start(&DockerOptions::default()))
        .await
        .unwrap_or_else(|_| panic!("the container was not ready within {START_BOUND:?}"))
        .unwrap_or_else(|reason| panic!("the Docker provider failed: {reason}"));
    eprintln!(
        "container ready in {} ms: {}",
        (monotonic_now() - started).as_millis(),
        database.description
    );
    assert_eq!(database.provider, ProviderKind::Docker);
    assert!(database.description.contains("queen-soak-postgres:15"));
    assert!(database.description.contains("host network"));
    let port = port_of(&database.url);
    assert!(database.url.starts_with("postgres://postgres@127.0.0.1:"));

    let mut connection = bounded(sqlx::PgConnection::connect(&database.url)).await;
    let version: String =
        bounded(sqlx::query_scalar("SELECT version()").fetch_one(&mut connection)).await;
    assert!(version.starts_with("PostgreSQL 15."), "got {version}");
    let listen: String =
        bounded(sqlx::query_scalar("SHOW listen_addresses").fetch_one(&mut connection)).await;
    assert_eq!(listen, "127.0.0.1");
    bounded(connection.close()).await;

    // From outside the server: with host networking its sockets are this machine's sockets.
    assert_eq!(listening_addresses(port), vec!["127.0.0.1".to_owned()]);

    drop(database);
    let polls = QUERY_BOUND.as_millis() / REMOVAL_POLL.as_millis();
    let mut removed = false;
    for _ in 0..polls {
        if listening_addresses(port).is_empty() {
            removed = true;
            break;
        }
        tokio::time::sleep(REMOVAL_POLL).await;
    }
    assert!(
        removed,
        "port {port} still listens {QUERY_BOUND:?} after the drop"
    );
}

fn engine_required() -> bool {
    std::env::var("QUEEN_SOAK_DOCKER").as_deref() == Ok("1")
}

/// Where an engine accepts a connection, looked for as testcontainers does: `DOCKER_HOST`
/// (`unix://path`, or `tcp://host:port`), else the first of the default socket and the rootless
/// ones that exists.
fn engine_answers() -> Option<String> {
    if let Ok(host) = std::env::var("DOCKER_HOST") {
        let answers = match host.split_once("://") {
            Some(("unix", path)) => UnixStream::connect(path).is_ok(),
            Some((_, address)) => address
                .to_socket_addrs()
                .ok()?
                .any(|address| TcpStream::connect_timeout(&address, ENGINE_PROBE_BOUND).is_ok()),
            None => false,
        };
        return answers.then_some(host);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from);
    let candidates = [
        Some(PathBuf::from("/var/run/docker.sock")),
        runtime.map(|dir| dir.join(".docker/run/docker.sock")),
        home.as_ref().map(|dir| dir.join(".docker/run/docker.sock")),
        home.as_ref()
            .map(|dir| dir.join(".docker/desktop/docker.sock")),
    ];
    // testcontainers takes the first that exists, whether or not it answers.
    let first = candidates
        .into_iter()
        .flatten()
        .find(|path| path.exists())?;
    UnixStream::connect(&first)
        .is_ok()
        .then(|| first.display().to_string())
}

fn port_of(url: &str) -> u16 {
    let after_host = url.rsplit_once("127.0.0.1:").expect("a loopback URL").1;
    after_host
        .split('/')
        .next()
        .and_then(|port| port.parse().ok())
        .expect("a port in the URL")
}

/// Local addresses listening on `port`, from /proc/net/tcp and /proc/net/tcp6 (IPv6 ones as hex).
fn listening_addresses(port: u16) -> Vec<String> {
    let mut addresses = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (fields.get(1), fields.get(3)) else {
                continue;
            };
            let Some((address, port_hex)) = local.split_once(':') else {
                continue;
            };
            if *state != TCP_LISTEN || u16::from_str_radix(port_hex, 16) != Ok(port) {
                continue;
            }
            addresses.push(match u32::from_str_radix(address, 16) {
                // /proc prints an IPv4 address as a little-endian 32-bit hex number.
                Ok(raw) if address.len() == 8 => {
                    std::net::Ipv4Addr::from(raw.to_le_bytes()).to_string()
                }
                _ => format!("[{address}]"),
            });
        }
    }
    addresses
}

async fn bounded<T, E: std::fmt::Display>(work: impl Future<Output = Result<T, E>>) -> T {
    tokio::time::timeout(QUERY_BOUND, work)
        .await
        .unwrap_or_else(|_| panic!("no answer within {QUERY_BOUND:?}"))
        .unwrap_or_else(|e| panic!("{e}"))
}
