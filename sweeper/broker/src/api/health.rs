//! What the API knows of its database between calls, so that an outage costs each caller a
//! refusal, not a wait.
//!
//! Without this, every request during an outage waits out the pool's acquire timeout (the
//! statement timeout plus [`queen_sweeper::CLIENT_GRACE`], 7 s by default) while sqlx retries its
//! connects, and so does `/healthz`: the monitor that should say "down" says nothing at all.
//!
//! The rule:
//! - A call that failed in a way that can mean the database is gone ([`suggests_outage`]), or a
//!   `/healthz` that got no answer within [`HEALTHZ_LIMIT`], *suspects* the database.
//! - A suspicion starts one prober (never two): a fresh connection, outside the pool, that must
//!   connect and answer within [`PROBE_LIMIT`]. Only a failed probe marks the database down, so a
//!   busy pool or one terminated backend never refuses anybody.
//! - While down, `/healthz` answers 503 at once with the reason and how long, and every
//!   `/api/v1` call is refused at once with a 503 `database_unavailable` and `Retry-After`
//!   ([`super::guard::admit`]). The prober tries again every [`PROBE_EVERY`]; its first success
//!   marks the database up, and the API serves again by itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;

use crate::queries::PgApi;
use queen_sweeper::Error;
use queen_sweeper::clock::monotonic_now;

/// The longest `/healthz` waits for the database before it answers 503: under the 1 s a monitor
/// allows, with room for the answer to travel. Not measured.
pub const HEALTHZ_LIMIT: Duration = Duration::from_millis(800);

/// How long one probe may take to connect and answer. A healthy local server does it in a few
/// milliseconds (one backend start); not measured.
pub const PROBE_LIMIT: Duration = Duration::from_millis(500);

/// The pause between probes while the database is down: recovery is noticed within this plus
/// one probe. Each probe costs the server one backend start. Not measured.
pub const PROBE_EVERY: Duration = Duration::from_millis(250);

/// Why and since when the database is taken to be down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Down {
    pub since: Instant,
    pub reason: String,
}

/// The API's knowledge of its database. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DbHealth {
    db: PgApi,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    down: Mutex<Option<Down>>,
    probing: AtomicBool,
    /// `queen_api_database_up`: 1 unless a probe failed and none has succeeded since.
    up: Gauge,
}

impl DbHealth {
    pub fn new(db: PgApi, up: Gauge) -> DbHealth {
        up.set(1);
        DbHealth {
            db,
            shared: Arc::new(Shared {
                down: Mutex::new(None),
                probing: AtomicBool::new(false),
                up,
            }),
        }
    }

    /// `Some` while the database is taken to be down.
    pub fn down(&self) -> Option<Down> {
        self.shared.down.lock().expect("not poisoned").clone()
    }

    /// Something failed that may mean the database is gone: probe it, unless a prober already
    /// runs. Returns at once.
    pub fn suspect(&self, what: &str) {
        if self
            .shared
            .probing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return;
        }
        tracing::info!(%what, "the API suspects its database; probing it");
        let health = self.clone();
        tokio::spawn(async move { health.probe_until_up().await });
    }

    async fn probe_until_up(self) {
        loop {
            let failure = match tokio::time::timeout(PROBE_LIMIT, self.db.probe()).await {
                Ok(Ok(())) => None,
                Ok(Err(error)) => Some(error.to_string()),
                Err(_) => Some(format!(
                    "no connection and answer within {} ms",
                    PROBE_LIMIT.as_millis()
                )),
            };
            match failure {
                None => {
                    self.mark_up();
                    break;
                }
                Some(reason) => self.mark_down(reason),
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
        self.shared.probing.store(false, Ordering::Release);
    }

    fn mark_down(&self, reason: String) {
        let mut down = self.shared.down.lock().expect("not poisoned");
        match down.as_mut() {
            Some(known) => known.reason = reason,
            None => {
                tracing::warn!(%reason, "the API's database is down; API calls are refused until a probe succeeds");
                self.shared.up.set(0);
                *down = Some(Down {
                    since: monotonic_now(),
                    reason,
                });
            }
        }
    }

    fn mark_up(&self) {
        let mut down = self.shared.down.lock().expect("not poisoned");
        if let Some(was) = down.take() {
            tracing::info!(
                down_ms = was.since.elapsed().as_millis() as u64,
                "the API's database answers again"
            );
        }
        self.shared.up.set(1);
    }
}

impl Down {
    /// One sentence for an answer: how long, and the last probe's failure.
    pub fn describe(&self) -> String {
        format!(
            "the database has not answered for {} ms (last probe: {})",
            self.since.elapsed().as_millis(),
            self.reason
        )
    }
}

/// Whether a failed call may mean the database is unreachable, rather than busy or refusing the
/// input: no answer at all (a lost or refused connection, the pool giving up on its connects),
/// a connection exception (class 08), or a server shutting down or starting up (57P02, 57P03).
/// A terminated backend (57P01) and a statement timeout (57014) are not: the server answered.
pub fn suggests_outage(error: &Error) -> bool {
    match error {
        Error::Database { sqlstate: None, .. } => true,
        Error::Database {
            sqlstate: Some(code),
            ..
        } => code.starts_with("08") || code == "57P02" || code == "57P03",
        Error::Timeout { .. } | Error::Config(_) | Error::Disabled(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn database(sqlstate: Option<&str>) -> Error {
        Error::database(sqlstate.map(str::to_owned), "m".into(), "c".into())
    }

    #[test]
    fn only_failures_that_can_mean_an_unreachable_server_suggest_an_outage() {
        for outage in [
            None,
            Some("08006"),
            Some("08001"),
            Some("57P02"),
            Some("57P03"),
        ] {
            assert!(suggests_outage(&database(outage)), "{outage:?}");
        }
        for answered in [
            Some("57P01"),
            Some("57014"),
            Some("40001"),
            Some("53300"),
            Some("22023"),
            Some("42883"),
        ] {
            assert!(!suggests_outage(&database(answered)), "{answered:?}");
        }
        let timeout = Error::Timeout {
            context: "peek".into(),
            after_ms: 5000,
        };
        assert!(!suggests_outage(&timeout));
        assert!(!suggests_outage(&Error::Disabled("off".into())));
    }
}
