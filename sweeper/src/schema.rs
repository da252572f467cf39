//! Applies `sql/` to a database: every file, in lexical order, in one transaction.
//!
//! The files are embedded at compile time, so a broker binary carries its schema. Everything in
//! them is idempotent (`IF NOT EXISTS`, `CREATE OR REPLACE`, `ALTER ... SET`), so applying on every
//! boot is safe; `tests/schema.rs` proves it by comparing catalogue snapshots.
//!
//! Several brokers booting at once may race on `CREATE ... IF NOT EXISTS` (the check and the
//! create are not atomic in PostgreSQL) or on replacing the same function. The loser's transaction
//! rolls back whole, and it applies again: idempotence makes the retry safe, and no advisory lock
//! is needed (the sweeper takes none; see the seed).

use std::time::Duration;

use sqlx::PgPool;

use crate::error::Error;
use crate::pg::database_error;

/// One embedded file of `sql/`.
#[derive(Debug, Clone, Copy)]
pub struct SqlFile {
    /// The file's name in `sql/`.
    pub name: &'static str,
    /// Its text.
    pub text: &'static str,
}

macro_rules! sql_files {
    ($($name:literal),* $(,)?) => {
        &[$(SqlFile { name: $name, text: include_str!(concat!("../../sql/", $name)) }),*]
    };
}

/// Every file of `sql/`, in the order it is applied. A unit test fails when a file in the
/// directory is missing here.
pub const FILES: &[SqlFile] = sql_files![
    "001_log_schema.sql",
    "002_log_push.sql",
    "010_timers_schema.sql",
    "011_timers_probe_claim.sql",
    "012_timers_fire.sql",
    "013_timers_fail_dlq.sql",
    "014_timers_apply.sql",
    "015_timers_take.sql",
    "016_sweeper_probe.sql",
    "020_kv.sql",
    "021_quota.sql",
    "030_kv_sweeper.sql",
    "040_system_state.sql",
    "050_api_reads.sql",
    "060_api_idempotency.sql",
];

/// Attempts of one apply when it loses a race with another broker's apply.
const APPLY_ATTEMPTS: u32 = 5;
/// Pause before the next attempt, times the attempt number.
const APPLY_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// Applies every file of `sql/` in one transaction.
pub async fn apply(pool: &PgPool) -> Result<(), Error> {
    let mut attempt = 1;
    loop {
        match apply_once(pool).await {
            Ok(()) => return Ok(()),
            Err(error) if attempt < APPLY_ATTEMPTS && lost_a_race(&error) => {
                tracing::info!(attempt, %error, "schema apply raced another broker; applying again");
                tokio::time::sleep(APPLY_RETRY_PAUSE * attempt).await;
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

async fn apply_once(pool: &PgPool) -> Result<(), Error> {
    let context = |file: &str| format!("applying sql/{file}");
    let mut tx = pool
        .begin()
        .await
        .map_err(|e| database_error(e, "opening the schema transaction"))?;
    sqlx::raw_sql("SET LOCAL client_min_messages = warning")
        .execute(&mut *tx)
        .await
        .map_err(|e| database_error(e, "opening the schema transaction"))?;
    for file in FILES {
        sqlx::raw_sql(file.text)
            .execute(&mut *tx)
            .await
            .map_err(|e| database_error(e, &context(file.name)))?;
    }
    tx.commit()
        .await
        .map_err(|e| database_error(e, "committing the schema"))
}

/// The slowest `autovacuum_naptime` the timers' autovacuum settings were measured with
/// (`sql/010_timers_schema.sql`): a launcher that looks less often lets dead rows pile up between
/// its visits.
pub const MEASURED_NAPTIME_S: u64 = 5;

/// What to tell the operator about the server's autovacuum, one line each: nothing when it runs
/// and its launcher looks at least every [`MEASURED_NAPTIME_S`]. Server settings cannot be set
/// from the schema, so they are checked at boot instead.
pub fn autovacuum_advice(autovacuum_on: bool, naptime_s: u64) -> Vec<String> {
    let mut advice = Vec::new();
    if !autovacuum_on {
        advice.push(
            "the server runs with autovacuum = off: every fired timer leaves a dead row that nothing removes, and the probe and claim slow down as they pile up; turn it on".to_owned(),
        );
    }
    if naptime_s > MEASURED_NAPTIME_S {
        advice.push(format!(
            "the server's autovacuum_naptime is {naptime_s} s: the timers' dead rows pile up between the launcher's visits (tens of thousands a minute at 500 timers/s); set autovacuum_naptime = '{MEASURED_NAPTIME_S}s' in postgresql.conf, as measured in sql/010_timers_schema.sql"
        ));
    }
    advice
}

/// Reads the server's autovacuum settings and returns [`autovacuum_advice`] on them.
pub async fn server_advice(pool: &PgPool) -> Result<Vec<String>, Error> {
    let (on, naptime_s): (bool, i64) = sqlx::query_as(
        "SELECT current_setting('autovacuum')::boolean, \
                (SELECT setting::bigint FROM pg_settings WHERE name = 'autovacuum_naptime')",
    )
    .fetch_one(pool)
    .await
    .map_err(|e| database_error(e, "reading the server's autovacuum settings"))?;
    Ok(autovacuum_advice(on, u64::try_from(naptime_s).unwrap_or(0)))
}

/// SQLSTATEs a concurrent apply of the same files produces: duplicate objects from two
/// `IF NOT EXISTS` creates, a unique violation in the catalogue, "tuple concurrently updated"
/// (XX000) from two `CREATE OR REPLACE` of one function, a deadlock between the two.
fn lost_a_race(error: &Error) -> bool {
    matches!(
        error.sqlstate(),
        Some("23505" | "42P07" | "42710" | "42723" | "XX000" | "40P01" | "40001")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sql_dir() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql")
    }

    #[test]
    fn every_file_in_sql_dir_is_embedded_in_lexical_order() {
        let mut on_disk: Vec<String> = std::fs::read_dir(sql_dir())
            .expect("sql/ is readable")
            .map(|entry| {
                entry
                    .expect("directory entry")
                    .file_name()
                    .into_string()
                    .expect("utf-8 name")
            })
            .filter(|name| name.ends_with(".sql"))
            .collect();
        on_disk.sort();
        let embedded: Vec<&str> = FILES.iter().map(|file| file.name).collect();
        assert_eq!(
            embedded, on_disk,
            "schema::FILES must list every file of sql/, sorted"
        );
    }

    #[test]
    fn embedded_text_matches_the_file_on_disk() {
        for file in FILES {
            let disk = std::fs::read_to_string(sql_dir().join(file.name)).expect("readable file");
            assert_eq!(
                file.text, disk,
                "{} differs from its embedded copy",
                file.name
            );
        }
    }

    #[test]
    fn the_log_schema_opens_with_the_dated_block_convention() {
        let first = FILES[0];
        assert_eq!(first.name, "001_log_schema.sql");
        let header: String = first
            .text
            .lines()
            .take_while(|line| line.starts_with("--"))
            .collect();
        for needle in [
            "[measured ",
            "rig:",
            "symptom:",
            "observed:",
            "[not measured]",
        ] {
            assert!(
                header.contains(needle),
                "001_log_schema.sql header lacks {needle:?}"
            );
        }
    }

    #[test]
    fn autovacuum_advice_speaks_only_when_the_server_differs_from_what_was_measured() {
        assert!(autovacuum_advice(true, MEASURED_NAPTIME_S).is_empty());
        assert!(autovacuum_advice(true, 1).is_empty());
        let slow = autovacuum_advice(true, 60);
        assert_eq!(slow.len(), 1);
        assert!(
            slow[0].contains("60 s") && slow[0].contains("'5s'"),
            "{}",
            slow[0]
        );
        let off = autovacuum_advice(false, 5);
        assert_eq!(off.len(), 1);
        assert!(off[0].contains("autovacuum = off"), "{}", off[0]);
        assert_eq!(autovacuum_advice(false, 60).len(), 2);
    }

    #[test]
    fn a_concurrent_apply_is_recognised_as_a_race() {
        let raced = Error::database(Some("42P07".into()), "relation exists".into(), "x".into());
        let broken = Error::database(Some("42601".into()), "syntax error".into(), "x".into());
        assert!(lost_a_race(&raced));
        assert!(!lost_a_race(&broken));
    }
}
