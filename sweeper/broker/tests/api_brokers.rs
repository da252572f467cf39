//! Brokers as processes: the wake an HTTP schedule rings, two `serve` processes sharing one
//! PostgreSQL, one of them SIGKILLed holding claims, and a graceful SIGTERM. Timings come from
//! database timestamps.

mod api_support;

use std::time::Duration;

use api_support::{Server, Start, count, schedule_op, wait_for, wait_for_lock_waiter};
use chrono::{DateTime, Utc};
use queen_testdb::TestDb;
use serde_json::{Value, json};
use sqlx::{Connection, PgPool};

/// Waits until the broker's sweeper has finished a pass and planned a sleep: it is idle.
async fn wait_until_idle(server: &Server) {
    wait_for(
        "the sweeper's first planned sleep",
        Duration::from_secs(10),
        || async { server.metric("queen_sweeper_sleep_ms_count").await >= 1.0 },
    )
    .await;
}

/// (messages, distinct txns, fired before deliver_at) for timers whose txn is recorded in
/// `expected(txn, deliver_at)`.
async fn delivery(pool: &PgPool) -> (i64, i64, i64) {
    sqlx::query_as(
        "SELECT count(*), count(DISTINCT m.txn), count(*) FILTER (WHERE m.created_at < e.deliver_at)
         FROM queen.log_messages m JOIN expected e USING (txn)",
    )
    .fetch_one(pool)
    .await
    .expect("delivery facts")
}

/// Remembers every current timer's (txn, deliver_at): the rows disappear when they fire.
async fn remember_timers(pool: &PgPool) {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS expected (txn text PRIMARY KEY, deliver_at timestamptz NOT NULL, claimed_until timestamptz)",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO expected SELECT txn, deliver_at, claimed_until FROM queen.log_timers
         ON CONFLICT (txn) DO UPDATE SET claimed_until = EXCLUDED.claimed_until",
    )
    .execute(pool)
    .await
    .unwrap();
}

/// Creates `queue`'s partition and holds its row lock in an open transaction: a fire or take
/// into it blocks until the returned connection commits.
async fn lock_the_partition(db: &TestDb, queue: &str) -> sqlx::PgConnection {
    sqlx::query("SELECT queen.log_partition_ensure_v1('default', $1, 'default')")
        .bind(queue)
        .execute(&db.pool)
        .await
        .unwrap();
    let mut lock = db.connection().await;
    sqlx::raw_sql("BEGIN; SELECT 1 FROM queen.log_partitions FOR UPDATE;")
        .execute(&mut lock)
        .await
        .unwrap();
    lock
}

/// Waits until no backend of this database is called `application_name`: a killed broker's
/// sessions have noticed their lost client and rolled back.
async fn wait_for_backends_to_go(pool: &PgPool, application_name: &str) {
    wait_for(
        "the dead broker's backends to go",
        Duration::from_secs(10),
        || async {
            let sessions: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND application_name = $1",
            )
            .bind(application_name)
            .fetch_one(pool)
            .await
            .expect("pg_stat_activity");
            sessions == 0
        },
    )
    .await;
}

/// Schedules 50 timers due now into `queue` through `server`, keys and txns `{prefix}0..49`.
async fn schedule_fifty_due(server: &Server, queue: &str, prefix: &str) {
    let ops: Vec<Value> = (0..50)
        .map(|i| {
            let mut op = schedule_op(queue, &format!("{prefix}{i}"), 0, json!(i));
            op["txn"] = json!(format!("{prefix}{i}"));
            op
        })
        .collect();
    assert_eq!(server.schedule(&json!({ "ops": ops })).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_scheduled_over_http_on_an_idle_broker_fires_long_before_the_one_second_ceiling() {
    let db = TestDb::new().await;
    // A five-second ceiling: without the wake the timer could wait up to five seconds, so a fire
    // within the first second is the wake's doing.
    let server = Start::on(&db, "wake")
        .env(&[("QUEEN_SWEEPER_MAX_SLEEP_MS", "5000")])
        .spawn()
        .await;
    wait_until_idle(&server).await;
    let probes_before = server
        .metric("queen_sweeper_queries_total{kind=\"probe\"}")
        .await;

    let answer = server
        .schedule(&json!({"ops": [{"op": "schedule", "queue": "q", "timerKey": "wake", "delayMs": 200, "payload": {"hello": "wake"}, "txn": "wake-txn"}]}))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(answer.json()["results"][0]["deliverInMs"], json!(200));
    wait_for("the woken fire", Duration::from_secs(10), || async {
        count(&db.pool, "SELECT count(*) FROM queen.log_messages").await == 1
    })
    .await;

    // The database's own instants: deliver_at is its now() at the schedule plus 200 ms.
    let deliver_at: DateTime<Utc> = answer.json()["results"][0]["deliverAt"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let fired_at: DateTime<Utc> =
        sqlx::query_scalar("SELECT created_at FROM queen.log_messages WHERE txn = 'wake-txn'")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    let after_deliver = (fired_at - deliver_at).num_microseconds().unwrap() as f64 / 1000.0;
    let after_schedule = after_deliver + 200.0;
    let probes = server
        .metric("queen_sweeper_queries_total{kind=\"probe\"}")
        .await
        - probes_before;
    let moved = server.metric("queen_api_wakes_total{moved=\"true\"}").await;
    println!(
        "wake over HTTP: fired {after_deliver:.1} ms after deliver_at, {after_schedule:.1} ms after scheduling (delay 200 ms, ceiling 5000 ms, the default ceiling 1000 ms); {probes} probes since scheduling"
    );
    assert!(
        after_deliver >= 0.0,
        "fired {after_deliver:.1} ms before deliver_at"
    );
    assert!(
        after_schedule < 700.0,
        "fired {after_schedule:.0} ms after scheduling: the wake did not cut the idle sleep well before 1 s"
    );
    assert_eq!(
        moved, 1.0,
        "the schedule's wake moved the idle sweeper's next look"
    );
    assert!(probes <= 3.0, "the wake took {probes} probes, not one pass");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_brokers_share_the_work_and_fire_every_timer_exactly_once() {
    let db = TestDb::new().await;
    // Small claims, so that both brokers are draining at the same time.
    let env = [("QUEEN_SWEEPER_CLAIM_BATCH", "25")];
    let a = Start::on(&db, "share-a").env(&env).spawn().await;
    let b = Start::on(&db, "share-b").env(&env).spawn().await;
    let batch = |broker: &str| -> Value {
        let ops: Vec<Value> = (0..500)
            .map(|i| {
                let mut op = schedule_op(
                    &format!("q{}", i % 4),
                    &format!("{broker}-{i}"),
                    1_000,
                    json!(i),
                );
                op["txn"] = json!(format!("{broker}-{i}"));
                op["partition"] = json!(format!("p{}", i % 3));
                op
            })
            .collect();
        json!({ "ops": ops })
    };
    let (batch_a, batch_b) = (batch("a"), batch("b"));
    let (to_a, to_b) = tokio::join!(a.schedule(&batch_a), b.schedule(&batch_b));
    assert_eq!(
        (to_a.status, to_b.status),
        (200, 200),
        "{} {}",
        to_a.text,
        to_b.text
    );
    remember_timers(&db.pool).await;
    wait_for("1000 fired messages", Duration::from_secs(30), || async {
        count(&db.pool, "SELECT count(*) FROM queen.log_messages").await >= 1000
    })
    .await;
    let (messages, txns, early) = delivery(&db.pool).await;
    let fired_a = a
        .metric("queen_sweeper_timers_total{result=\"fired\"}")
        .await;
    let fired_b = b
        .metric("queen_sweeper_timers_total{result=\"fired\"}")
        .await;
    let (late_p50, late_max): (f64, f64) = sqlx::query_as(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM m.created_at - e.deliver_at) * 1000)::float8,
                max(extract(epoch FROM m.created_at - e.deliver_at) * 1000)::float8
         FROM queen.log_messages m JOIN expected e USING (txn)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    println!(
        "two brokers, 1000 timers: fired {fired_a} by a, {fired_b} by b; lateness p50 {late_p50:.1} ms, max {late_max:.1} ms"
    );
    assert_eq!(
        (messages, txns, early),
        (1000, 1000, 0),
        "every timer once, none early"
    );
    assert_eq!(fired_a + fired_b, 1000.0);
    assert!(
        fired_a > 0.0 && fired_b > 0.0,
        "one broker did all the work: {fired_a} / {fired_b}"
    );
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_leased_path_a_sigkilled_brokers_claims_fire_in_the_other_broker_after_the_lease() {
    let db = TestDb::new().await;
    // The leased path (the take is the default): a short lease to wait out; the statement
    // timeout at half of it, as the knobs require.
    let env = [
        ("QUEEN_SWEEPER_FIRE_TAKE", "0"),
        ("QUEEN_SWEEPER_LEASE_MS", "6000"),
        ("QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS", "3000"),
    ];
    let mut doomed = Start::on(&db, "doomed").env(&env).spawn().await;
    // Hold the destination partition's row lock, so the doomed broker's fire blocks after its
    // claim: it then holds all the claims and none of them has fired.
    let mut partition_lock = lock_the_partition(&db, "kq").await;
    schedule_fifty_due(&doomed, "kq", "k").await;
    wait_for("the doomed broker to claim all 50", Duration::from_secs(10), || async {
        count(&db.pool, "SELECT count(*) FROM queen.log_timers WHERE claim_token IS NOT NULL AND claimed_until > now()").await == 50
    })
    .await;
    wait_for_lock_waiter(&db.pool, "queen-sweeper:doomed").await;
    remember_timers(&db.pool).await;

    doomed.signal(libc::SIGKILL);
    assert_eq!(
        doomed.wait_exit(Duration::from_secs(10)).await,
        None,
        "killed by a signal"
    );
    // Its backend notices the lost client while it waits (client_connection_check_interval) and
    // aborts the fire: nothing of it may commit once the lock is released.
    wait_for_backends_to_go(&db.pool, "queen-sweeper:doomed").await;
    sqlx::raw_sql("COMMIT")
        .execute(&mut partition_lock)
        .await
        .unwrap();
    partition_lock.close().await.unwrap();
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_messages").await,
        0
    );

    let survivor = Start::on(&db, "survivor").env(&env).spawn().await;
    wait_for(
        "the dead broker's 50 timers",
        Duration::from_secs(30),
        || async { count(&db.pool, "SELECT count(*) FROM queen.log_messages").await == 50 },
    )
    .await;
    let (messages, txns, early) = delivery(&db.pool).await;
    assert_eq!(
        (messages, txns, early),
        (50, 50, 0),
        "each timer once, none early"
    );
    let before_lease_end = count(
        &db.pool,
        "SELECT count(*) FROM queen.log_messages m JOIN expected e USING (txn) WHERE m.created_at < e.claimed_until",
    )
    .await;
    assert_eq!(
        before_lease_end, 0,
        "a held timer fired before its lease ended"
    );
    let waited: f64 = sqlx::query_scalar(
        "SELECT (extract(epoch FROM min(m.created_at) - min(e.claimed_until - interval '6 seconds')) * 1000)::float8
         FROM queen.log_messages m JOIN expected e USING (txn)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let fired = survivor
        .metric("queen_sweeper_timers_total{result=\"fired\"}")
        .await;
    println!(
        "a SIGKILLed broker's 50 claims fired in the survivor {waited:.0} ms after the claim (lease 6000 ms)"
    );
    assert_eq!(fired, 50.0, "the survivor fired them all");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_sigkilled_mid_take_leaves_no_lease_its_timers_fire_within_two_seconds() {
    let db = TestDb::new().await;
    // The take (the default) with the default 30 s lease: nothing of it may be waited out.
    let mut doomed = Start::on(&db, "doomed").spawn().await;
    let survivor = Start::on(&db, "survivor").spawn().await;
    // Hold the destination partition's row lock. Whichever broker takes the 50 timers then
    // waits on it inside its take, holding the rows; the other one skips them.
    let mut partition_lock = lock_the_partition(&db, "tq").await;
    schedule_fifty_due(&doomed, "tq", "t").await;
    remember_timers(&db.pool).await;
    // The doomed broker's wake makes it the likely taker; if the survivor took them, the kill
    // below still shows that a dead broker leaves nothing behind, and the test says which.
    wait_for_lock_waiter(&db.pool, "queen-sweeper:").await;
    let taker: String = sqlx::query_scalar(
        "SELECT application_name FROM pg_stat_activity
         WHERE datname = current_database() AND application_name LIKE 'queen-sweeper:%'
           AND wait_event_type = 'Lock' LIMIT 1",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        count(
            &db.pool,
            "SELECT count(*) FROM queen.log_timers WHERE claim_token IS NOT NULL"
        )
        .await,
        0,
        "the take writes no lease"
    );

    let killed_at: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    doomed.signal(libc::SIGKILL);
    assert_eq!(doomed.wait_exit(Duration::from_secs(10)).await, None);
    // Release the partition once the dead broker's backends are gone (their take aborted), or
    // at once when the survivor is the taker: either way every timer must fire, once, soon.
    if taker == "queen-sweeper:doomed" {
        wait_for_backends_to_go(&db.pool, "queen-sweeper:doomed").await;
    }
    sqlx::raw_sql("COMMIT")
        .execute(&mut partition_lock)
        .await
        .unwrap();
    partition_lock.close().await.unwrap();
    wait_for("the 50 timers", Duration::from_secs(10), || async {
        count(&db.pool, "SELECT count(*) FROM queen.log_messages").await == 50
    })
    .await;
    let (messages, txns, early) = delivery(&db.pool).await;
    assert_eq!(
        (messages, txns, early),
        (50, 50, 0),
        "each timer once, none early"
    );
    let after_kill_ms: f64 = sqlx::query_scalar(
        "SELECT (extract(epoch FROM max(created_at) - $1) * 1000)::float8 FROM queen.log_messages",
    )
    .bind(killed_at)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    println!("taker {taker}: the last of 50 timers fired {after_kill_ms:.0} ms after the SIGKILL");
    assert!(
        after_kill_ms < 2000.0,
        "a killed broker's timers waited {after_kill_ms:.0} ms (lease 30 000 ms)"
    );
    assert!(
        survivor
            .metric("queen_sweeper_timers_total{result=\"fired\"}")
            .await
            <= 50.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_accepting_finishes_the_request_in_flight_and_exits_0() {
    let db = TestDb::new().await;
    let mut server = Start::on(&db, "graceful").spawn().await;
    assert_eq!(
        server
            .put("/api/v1/kv/ns/k", &json!({"value": 1}))
            .await
            .status,
        201
    );
    let mut lock = db.connection().await;
    sqlx::raw_sql("BEGIN; SELECT 1 FROM queen.kv WHERE key = 'k' FOR UPDATE;")
        .execute(&mut lock)
        .await
        .unwrap();
    let url = server.url("/api/v1/kv/ns/k");
    let client = server.client.clone();
    let in_flight =
        tokio::spawn(async move { client.put(url).json(&json!({"value": 2})).send().await });
    wait_for_lock_waiter(&db.pool, "queen-api:graceful").await;

    server.signal(libc::SIGTERM);
    let port = server.port;
    wait_for(
        "the listener to close",
        Duration::from_secs(10),
        || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
        },
    )
    .await;
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "exited with a request in flight"
    );

    sqlx::raw_sql("COMMIT").execute(&mut lock).await.unwrap();
    let finished = in_flight
        .await
        .unwrap()
        .expect("the request in flight is answered");
    assert_eq!(finished.status(), 200);
    let code = server.wait_exit(Duration::from_secs(30)).await;
    let stderr = server.stderr();
    assert_eq!(code, Some(0), "{stderr}");
    let version: i64 = sqlx::query_scalar("SELECT version FROM queen.kv WHERE key = 'k'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(version, 2, "the request in flight was written");
    let order = [
        "finishing the requests in flight",
        "requests drained; no new claims; finishing the fire in flight",
        "sweeper stopped",
        "stopped cleanly",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|line| {
            stderr
                .find(line)
                .unwrap_or_else(|| panic!("no {line:?} in:\n{stderr}"))
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "out of order:\n{stderr}"
    );
}
