//! The schedule seam on PostgreSQL: the wake is rung only by the commit of the transaction that
//! owes it, for both seams that create timers — a transaction the seam's caller opens (the HTTP
//! handler's shape) and the caller's own transaction handed over (the transaction wire).

use std::time::Duration;

use queen_sweeper::clock::tokio_now;
use queen_sweeper::{Error, Payload, PgStore, PgTimerTx, Seam, Switches, TimerOp, Waker};
use queen_testdb::TestDb;
use serde_json::json;
use sqlx::{Connection, PgPool};

fn schedule(key: &str) -> TimerOp {
    TimerOp::Schedule {
        queue: "q".into(),
        timer_key: key.into(),
        delay_ms: 100,
        payload: Payload::json(&json!({"key": key})),
        partition: None,
        txn: None,
    }
}

async fn count(pool: &PgPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// Fails the commit of any transaction that wrote a timer whose key starts with `doomed`, with a
/// serialization failure, the way a real conflict surfaces at commit.
const DOOM_AT_COMMIT: &str = r#"
CREATE FUNCTION public.doom_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.timer_key LIKE 'doomed%' THEN
        RAISE EXCEPTION 'doomed at commit' USING ERRCODE = '40001';
    END IF;
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER doom_at_commit AFTER INSERT OR UPDATE ON queen.log_timers
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.doom_at_commit();
"#;

/// The transaction wire's shape: schedule through the seam, then the caller's own statement
/// fails, and `?` drops the transaction and the wake together.
async fn schedule_then_fail(seam: &Seam, tx: PgTimerTx<'static>) -> Result<(), Error> {
    let mut tx = seam.begin(tx);
    tx.apply("t", &[schedule("rolled-back")], tokio_now())
        .await?;
    assert!(tx.wake_at().is_some(), "the schedule owes a wake");
    let connection = tx.transaction().connection().await?;
    sqlx::query("SELECT 1 / 0")
        .execute(connection)
        .await
        .map_err(|e| queen_sweeper::database_error(e, "the caller's own work"))?;
    tx.commit().await.map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seam_rings_nothing_when_its_postgres_transaction_rolls_back_or_fails_to_commit() {
    let db = TestDb::new().await;
    sqlx::raw_sql(DOOM_AT_COMMIT)
        .execute(&db.pool)
        .await
        .unwrap();
    let store = PgStore::from_pool(db.pool.clone(), Duration::from_secs(5));
    let waker = Waker::new(tokio_now());
    let seam = Seam::new(waker.clone(), Switches::default());

    let failed = schedule_then_fail(&seam, store.begin_timer_tx().await.unwrap()).await;
    let failed = failed.unwrap_err();
    assert_eq!(failed.sqlstate(), Some("22012"));
    assert!(
        std::error::Error::source(&failed).is_some(),
        "the driver's error is kept as the source"
    );
    assert_eq!(waker.promised(), None, "a rollback rang the wake");

    let mut tx = seam.begin(store.begin_timer_tx().await.unwrap());
    tx.apply("t", &[schedule("doomed")], tokio_now())
        .await
        .unwrap();
    let commit = tx.commit().await;
    assert_eq!(commit.unwrap_err().sqlstate(), Some("40001"));
    assert_eq!(waker.promised(), None, "a failed commit rang the wake");
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        0
    );

    let mut tx = seam.begin(store.begin_timer_tx().await.unwrap());
    let before = tokio_now();
    tx.apply("t", &[schedule("committed")], before)
        .await
        .unwrap();
    assert_eq!(waker.promised(), None, "nothing is rung before the commit");
    assert!(tx.commit().await.unwrap());
    assert_eq!(waker.promised(), Some(before + Duration::from_millis(100)));
    assert_eq!(
        count(&db.pool, "SELECT count(*) FROM queen.log_timers").await,
        1
    );
}

/// The transaction wire: a caller's own transaction, holding its own write, is handed to the seam;
/// the timer and the caller's row commit or roll back together, and only the commit rings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transaction_wire_commits_the_callers_work_and_the_timer_together() {
    let db = TestDb::new().await;
    sqlx::raw_sql("CREATE TABLE public.orders (id int PRIMARY KEY)")
        .execute(&db.pool)
        .await
        .unwrap();
    let waker = Waker::new(tokio_now());
    let seam = Seam::new(waker.clone(), Switches::default());

    for (key, commit) in [("wire-rolled-back", false), ("wire-committed", true)] {
        let mut own = db.pool.begin().await.unwrap();
        let id = i32::from(commit);
        sqlx::query("INSERT INTO public.orders VALUES ($1)")
            .bind(id)
            .execute(&mut *own)
            .await
            .unwrap();
        let mut tx = seam.begin(PgTimerTx::from_transaction(own));
        let at = tokio_now();
        tx.apply("t", &[schedule(key)], at).await.unwrap();
        let visible: i64 = sqlx::query_scalar("SELECT count(*) FROM public.orders")
            .fetch_one(tx.transaction().connection().await.unwrap())
            .await
            .unwrap();
        assert_eq!(visible, 1, "the seam writes in the caller's transaction");
        if commit {
            assert!(tx.commit().await.unwrap());
            assert_eq!(waker.promised(), Some(at + Duration::from_millis(100)));
        } else {
            drop(tx);
            assert_eq!(
                waker.promised(),
                None,
                "a dropped wire transaction rang the wake"
            );
        }
    }
    let mut check = db.connection().await;
    let orders: Vec<i32> = sqlx::query_scalar("SELECT id FROM public.orders ORDER BY id")
        .fetch_all(&mut check)
        .await
        .unwrap();
    let timers: Vec<String> =
        sqlx::query_scalar("SELECT timer_key FROM queen.log_timers ORDER BY timer_key")
            .fetch_all(&mut check)
            .await
            .unwrap();
    check.close().await.unwrap();
    assert_eq!(orders, vec![1]);
    assert_eq!(timers, vec!["wire-committed".to_owned()]);
}
