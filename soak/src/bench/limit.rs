//! The limit: the bench's backlog moved into the log by one set-based statement per batch
//! (`soak/sql/move_batch.sql`): no claim, no lease, no token check. On N connections at once,
//! each moves a disjoint set of partitions, so the limit at N is what N sessions of this rig can
//! do when they never wait on each other.

use serde::{Deserialize, Serialize};
use sqlx::Connection;

use super::{BACKLOG, LIMIT_BATCH, PAYLOAD, SPREAD, cpu};
use crate::db::{MOVE_BATCH, RunDb};
use crate::run::Run;

/// One measurement of the limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LimitRun {
    pub connections: u32,
    pub per_s: f64,
    /// PostgreSQL CPU per moved timer, µs (`None` when `/proc` could not be read).
    pub cpu_us_per_timer: Option<f64>,
}

/// Moves [`BACKLOG`] due timers on `connections` connections at once.
pub async fn measure(run: &Run<'_>, connections: u32) -> Result<LimitRun, String> {
    let db = RunDb::create(run.server_url, &format!("bench_limit_{connections}")).await?;
    db.backlog(BACKLOG, -1, PAYLOAD, SPREAD, "limit").await?;
    // The sweeper's runs start on analysed tables (run.rs); so does the limit.
    sqlx::query("ANALYZE")
        .execute(&db.pool)
        .await
        .map_err(|e| e.to_string())?;
    for t in 0..SPREAD.0 {
        for q in 0..SPREAD.1 {
            for p in 0..SPREAD.2 {
                sqlx::query("SELECT queen.log_partition_ensure_v1($1, $2, $3)")
                    .bind(format!("t{t}"))
                    .bind(format!("q{q}"))
                    .bind(format!("p{p}"))
                    .execute(&db.pool)
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
    }
    let scope = cpu::Scope::locate(&db.pool).await;
    let mut sessions = Vec::new();
    for _ in 0..connections {
        sessions.push(
            sqlx::PgConnection::connect(&db.url)
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let cpu_before = scope.cpu_seconds();
    let started = queen_sweeper::clock::monotonic_now();
    let tasks: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(k, mut session)| {
            let partitions = partitions_of(k as u32, connections);
            tokio::spawn(async move { move_all(&mut session, partitions).await })
        })
        .collect();
    let mut moved = 0i64;
    for task in tasks {
        moved += task.await.map_err(|e| e.to_string())??;
    }
    let seconds = (queen_sweeper::clock::monotonic_now() - started).as_secs_f64();
    let cpu_after = scope.cpu_seconds();
    db.drop_now().await?;
    if moved != i64::from(BACKLOG) {
        return Err(format!(
            "the limit on {connections} connection(s) moved {moved} of {BACKLOG} timers"
        ));
    }
    Ok(LimitRun {
        connections,
        per_s: (moved as f64 / seconds.max(1e-9)).round(),
        cpu_us_per_timer: cpu_before
            .zip(cpu_after)
            .map(|(a, b)| ((b - a) / moved as f64 * 1e7).round() / 10.0),
    })
}

/// The partitions session `k` of `n` moves: every n-th of the bench's, from the k-th; `None`
/// (every partition) for one session.
fn partitions_of(k: u32, n: u32) -> Option<Vec<String>> {
    (n > 1).then(|| {
        (0..SPREAD.2)
            .filter(|p| p % n == k)
            .map(|p| format!("p{p}"))
            .collect()
    })
}

/// Batches of [`LIMIT_BATCH`] in physical order until this session's rows are gone.
async fn move_all(
    session: &mut sqlx::PgConnection,
    partitions: Option<Vec<String>>,
) -> Result<i64, String> {
    let mut moved = 0i64;
    let mut cursor = "(0,0)".to_owned();
    for _ in 0..BACKLOG {
        let (n, last): (i64, Option<String>) = sqlx::query_as(MOVE_BATCH)
            .bind(i64::from(LIMIT_BATCH))
            .bind(&cursor)
            .bind(&partitions)
            .fetch_one(&mut *session)
            .await
            .map_err(|e| e.to_string())?;
        match last {
            Some(last) if n > 0 => cursor = last,
            _ => break,
        }
        moved += n;
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_share_the_partitions_without_overlap() {
        assert_eq!(partitions_of(0, 1), None);
        let all: Vec<String> = (0..4).flat_map(|k| partitions_of(k, 4).unwrap()).collect();
        let mut sorted = all.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len(), "no partition in two sessions");
        assert_eq!(all.len() as u32, SPREAD.2, "every partition in one session");
        assert_eq!(partitions_of(1, 2).unwrap(), ["p1", "p3", "p5", "p7"]);
    }
}
