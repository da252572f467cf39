//! `store::pg` against real PostgreSQL: timeouts and what a timed-out call leaves behind.

use std::time::Duration;

use queen_sweeper::{
    Admission, ClaimRequest, Class, PgStore, ProbeRequest, SegmentResult, ShardOrder, Store,
    connect_options, plan_fire_calls,
};
use queen_testdb::TestDb;
use sqlx::postgres::PgPoolOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fire_past_its_statement_timeout_is_cancelled_server_side_and_the_pool_still_works() {
    let db = TestDb::new().await;
    let timeout = Duration::from_millis(300);
    let options = connect_options(&db.url(), timeout, "timeout-test").unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let store = PgStore::from_pool(pool, timeout);
    let admission = Admission::new(Default::default());

    // A due timer whose partition a push-like transaction holds locked.
    sqlx::query(
        "SELECT * FROM queen.log_push_v1('t', 'q', 'p', ARRAY['\\x00'::bytea], NULL, now())",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        r#"SELECT queen.log_timers_apply_v1('t', '[{"op": "schedule", "queue": "q", "timerKey": "k", "partition": "p", "delayMs": -1, "payload": 7}]', now())"#,
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut blocker = db.connection().await;
    sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
    sqlx::query("SELECT 1 FROM queen.log_partitions FOR UPDATE")
        .execute(&mut blocker)
        .await
        .unwrap();

    let slot = admission.maintenance().await;
    let claimed = store
        .claim(
            &slot,
            &ClaimRequest::rows(ShardOrder::starting_at(0), Duration::from_secs(30), 10),
        )
        .await
        .unwrap()
        .rows;
    assert_eq!(claimed.len(), 1);
    let call = plan_fire_calls(&claimed, 1 << 20).remove(0);
    let error = store
        .fire(&slot, &call)
        .await
        .expect_err("the fire waits on the partition lock past its timeout");
    assert_eq!(
        error.sqlstate(),
        Some("57014"),
        "cancelled by the server's statement_timeout: {error}"
    );
    assert_eq!(error.class(), Class::Transient);

    // Nothing of the cancelled fire is left running in the server (the backend may take a moment
    // to report itself idle after the error has reached us).
    let mut running: i64 = -1;
    for _ in 0..250 {
        running = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'timeout-test' AND state = 'active'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if running == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(running, 0, "the cancelled fire is still running after 5 s");

    // The lock goes away; the same pool fires the same claim (the cancelled fire rolled back).
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    let outcomes = store
        .fire(&slot, &call)
        .await
        .expect("the pool's connection is usable again");
    assert!(
        matches!(outcomes[0].result, SegmentResult::Fired { .. }),
        "{outcomes:?}"
    );
    let messages: i64 = sqlx::query_scalar("SELECT count(*) FROM queen.log_messages")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(messages, 2, "the push and the fired timer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_side_timeout_gives_up_the_connection_instead_of_reusing_it() {
    let db = TestDb::new().await;
    // The server would wait 60 s; the client gives up after 60 ms + grace. A pool of one
    // connection proves the stuck connection is not handed out again.
    let options = connect_options(&db.url(), Duration::from_secs(60), "client-timeout").unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect_with(options)
        .await
        .unwrap();
    let store = PgStore::from_pool(pool.clone(), Duration::from_millis(60));
    let admission = Admission::new(Default::default());
    sqlx::query(
        r#"SELECT queen.log_timers_apply_v1('t', '[{"op": "schedule", "queue": "q", "timerKey": "k", "partition": "p", "delayMs": -1, "payload": 7}]', now())"#,
    )
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query(
        "SELECT * FROM queen.log_push_v1('t', 'q', 'p', ARRAY['\\x00'::bytea], NULL, now())",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut blocker = db.connection().await;
    sqlx::query("BEGIN").execute(&mut blocker).await.unwrap();
    sqlx::query("SELECT 1 FROM queen.log_partitions FOR UPDATE")
        .execute(&mut blocker)
        .await
        .unwrap();

    let slot = admission.maintenance().await;
    let claimed = store
        .claim(
            &slot,
            &ClaimRequest::rows(ShardOrder::starting_at(0), Duration::from_secs(30), 10),
        )
        .await
        .unwrap()
        .rows;
    let call = plan_fire_calls(&claimed, 1 << 20).remove(0);
    let error = tokio::time::timeout(Duration::from_secs(10), store.fire(&slot, &call))
        .await
        .expect("the client gives up by itself")
        .expect_err("timed out");
    assert!(
        matches!(error, queen_sweeper::Error::Timeout { .. }),
        "{error}"
    );
    assert_eq!(error.class(), Class::Transient);

    // The abandoned connection was closed; its backend notices while still waiting on the lock,
    // aborts the fire and ends. Only then is the lock released.
    let mut gone = false;
    for _ in 0..250 {
        let backends: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'client-timeout'",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if backends == 0 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "the timed-out connection's backend is still there");
    sqlx::query("ROLLBACK").execute(&mut blocker).await.unwrap();
    let messages: i64 = sqlx::query_scalar("SELECT count(*) FROM queen.log_messages")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        messages, 1,
        "only the push: the abandoned fire did not commit"
    );
}

/// Forwards TCP connections on 127.0.0.1 to the test server's unix socket, so the store's own
/// connections are TCP sockets whose options can be read.
async fn tcp_proxy(socket: std::path::PathBuf) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let mut server = tokio::net::UnixStream::connect(&socket).await.unwrap();
            tokio::spawn(async move {
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    port
}

/// TCP_NODELAY of every socket of this process connected to 127.0.0.1:`port`.
#[allow(unsafe_code)] // getsockopt/getpeername on this process's own descriptors
fn nodelay_of_sockets_to(port: u16) -> Vec<bool> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // SAFETY: plain reads of socket options into properly sized, initialised buffers; a
        // descriptor that is not a TCP socket just makes the calls fail.
        unsafe {
            let mut peer: libc::sockaddr_in = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            if libc::getpeername(fd, (&raw mut peer).cast(), &mut len) != 0
                || i32::from(peer.sin_family) != libc::AF_INET
                || u16::from_be(peer.sin_port) != port
            {
                continue;
            }
            let mut value: libc::c_int = 0;
            let mut size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            if libc::getsockopt(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_NODELAY,
                (&raw mut value).cast(),
                &mut size,
            ) == 0
            {
                found.push(value != 0);
            }
        }
    }
    found
}

/// sqlx 0.9.0 stopped setting TCP_NODELAY (0.9.1 sets it again): without it a message larger
/// than one TCP segment can wait for a delayed acknowledgement, tens of milliseconds per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stores_tcp_connections_set_tcp_nodelay() {
    let db = TestDb::new().await;
    let options = db.options();
    let socket = options
        .get_socket()
        .expect("the test tier listens on a unix socket");
    let socket = socket.join(format!(".s.PGSQL.{}", options.get_port()));
    let port = tcp_proxy(socket).await;
    let url = format!(
        "postgres://{}@127.0.0.1:{port}/{}",
        options.get_username(),
        db.name
    );
    let config = queen_sweeper::Config::default();
    let store = PgStore::connect(&url, &config, "nodelay-test", 2)
        .await
        .unwrap();
    let admission = Admission::new(Default::default());
    let slot = admission.maintenance().await;
    let probe = ProbeRequest {
        shards: ShardOrder::starting_at(0),
        due_cap: 10,
        kv_cap: 0,
    };
    store.probe(&slot, &probe).await.unwrap();
    let sockets = nodelay_of_sockets_to(port);
    assert!(!sockets.is_empty(), "found the store's TCP connection");
    assert!(
        sockets.iter().all(|&nodelay| nodelay),
        "a connection without TCP_NODELAY: {sockets:?}"
    );
}
