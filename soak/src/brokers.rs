//! The brokers of a run: in this process (each its own pool, identity and sweeper), or separate
//! `queen-sweeper serve` processes, one of which can be killed with SIGKILL. Either way they are
//! read the same way, through their Prometheus text.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use queen_sim::naive::NaiveForms;
use queen_sweeper::Config;
use queen_sweeper::Metrics;
use queen_sweeper::Sweeper;
use queen_sweeper::clock;
use queen_sweeper::{PgStore, connect_options};
use queen_sweeper::{Seam, TimerOp};
use sqlx::postgres::PgPoolOptions;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::error::Error;

/// What a broker has done so far, from its metrics.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    pub fired: u64,
    pub stale_timers: u64,
    pub stale_segments: u64,
    pub empty_claims: u64,
    pub failures: u64,
    pub dlq: u64,
    pub expired_not_pruned: i64,
    pub queries: BTreeMap<String, u64>,
}

impl Counters {
    /// Reads the Prometheus text a broker serves.
    pub fn parse(text: &str) -> Counters {
        let mut counters = Counters::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let value: f64 = value.parse().unwrap_or(0.0);
            let label = |name: &str| -> Option<String> {
                let start = series.find(&format!("{name}=\""))? + name.len() + 2;
                Some(series[start..].split('"').next()?.to_owned())
            };
            let name = series.split('{').next().unwrap_or(series);
            match name {
                "queen_sweeper_timers_total" if label("result").as_deref() == Some("fired") => {
                    counters.fired = value as u64;
                }
                "queen_sweeper_timers_total" if label("result").as_deref() == Some("stale") => {
                    counters.stale_timers = value as u64;
                }
                "queen_sweeper_segments_total" if label("result").as_deref() == Some("stale") => {
                    counters.stale_segments = value as u64;
                }
                "queen_sweeper_empty_claims_total" => counters.empty_claims = value as u64,
                "queen_sweeper_failures_total" => counters.failures += value as u64,
                "queen_sweeper_dlq_total" => counters.dlq = value as u64,
                "queen_kv_expired_not_pruned" => counters.expired_not_pruned = value as i64,
                "queen_sweeper_queries_total" => {
                    if let Some(kind) = label("kind") {
                        *counters.queries.entry(kind).or_default() += value as u64;
                    }
                }
                _ => {}
            }
        }
        counters
    }

    pub fn add(&mut self, other: &Counters) {
        self.fired += other.fired;
        self.stale_timers += other.stale_timers;
        self.stale_segments += other.stale_segments;
        self.empty_claims += other.empty_claims;
        self.failures += other.failures;
        self.dlq += other.dlq;
        self.expired_not_pruned = self.expired_not_pruned.max(other.expired_not_pruned);
        for (kind, n) in &other.queries {
            *self.queries.entry(kind.clone()).or_default() += n;
        }
    }
}

/// What a schedule call was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scheduled {
    /// Per op, the promised delivery instant (epoch µs), None when the op was refused.
    pub promised: Vec<Option<i64>>,
    /// The answer is an earlier call's, replayed for its `Idempotency-Key`.
    pub replayed: bool,
}

/// One broker.
pub enum Broker {
    InProcess {
        metrics: Metrics,
        seam: Seam,
        store: Arc<PgStore>,
        shutdown: CancellationToken,
        task: JoinHandle<()>,
    },
    Process {
        child: tokio::process::Child,
        listen: String,
        client: reqwest::Client,
    },
}

impl std::fmt::Debug for Broker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Broker::InProcess { .. } => f.write_str("Broker::InProcess"),
            Broker::Process { listen, .. } => write!(f, "Broker::Process({listen})"),
        }
    }
}

/// Connections of an in-process broker's pool: one for the loop, one for the schedule seam's
/// transactions, one for the switch refresh, one spare.
const POOL_SIZE: u32 = 4;

impl Broker {
    /// A broker in this process; `forms` other than the default replace the shipped drain or
    /// sleep with the seed's naive ones.
    pub async fn in_process(
        url: &str,
        config: Config,
        identity: &str,
        forms: NaiveForms,
    ) -> Result<Broker, Error> {
        let options = connect_options(url, config.statement_timeout(), identity).map_err(
            Error::sweeper(format!("broker {identity}: the database URL is not usable")),
        )?;
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(options)
            .await
            .map_err(Error::db(format!("broker {identity} cannot connect")))?;
        let store = Arc::new(PgStore::from_pool(pool, config.statement_timeout()));
        let mut sweeper = Sweeper::new(store.clone(), config, identity);
        if forms != NaiveForms::default() {
            sweeper = sweeper.with_form(forms);
        }
        Ok(Broker::InProcess {
            metrics: sweeper.metrics().clone(),
            seam: sweeper.seam(),
            store,
            shutdown: sweeper.shutdown_token(),
            task: tokio::spawn(sweeper.run()),
        })
    }

    /// Starts `queen-sweeper serve` with `knobs`, and the API's settings in `api_env`, in its
    /// environment, and waits for /healthz.
    pub async fn process(
        binary: &std::path::Path,
        url: &str,
        (knobs, api_env): (&queen_harness::Knobs, &[(&str, String)]),
        identity: &str,
    ) -> Result<Broker, Error> {
        let port = crate::provider::free_loopback_port()?;
        let listen = format!("127.0.0.1:{port}");
        let mut command = tokio::process::Command::new(binary);
        command
            .args([
                "serve",
                "--database-url",
                url,
                "--listen",
                &listen,
                "--identity",
                identity,
                "--no-apply-schema",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        for (var, value) in knobs.env() {
            command.env(var, value);
        }
        for (var, value) in api_env {
            command.env(var, value);
        }
        let child = command.spawn().map_err(|source| Error::Spawn {
            path: binary.to_owned(),
            source,
        })?;
        // Idle connections are dropped before the broker's advertised `Keep-Alive` time.
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .pool_idle_timeout(Duration::from_secs(1))
            .build()
            .map_err(Error::http("cannot make an HTTP client"))?;
        let broker = Broker::Process {
            child,
            listen: listen.clone(),
            client,
        };
        for _ in 0..500 {
            if let Broker::Process { client, .. } = &broker
                && client
                    .get(format!("http://{listen}/healthz"))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            {
                return Ok(broker);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(Error::Broker(format!(
            "broker {identity} ({}) did not answer /healthz within 10 s",
            binary.display()
        )))
    }

    /// The address a broker process serves on; `None` in process.
    pub fn listen(&self) -> Option<String> {
        match self {
            Broker::Process { listen, .. } => Some(listen.clone()),
            Broker::InProcess { .. } => None,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        match self {
            Broker::Process { child, .. } => child.id(),
            Broker::InProcess { .. } => None,
        }
    }

    pub async fn counters(&self) -> Counters {
        match self {
            Broker::InProcess { metrics, .. } => Counters::parse(&metrics.render()),
            Broker::Process { listen, client, .. } => {
                match client.get(format!("http://{listen}/metrics")).send().await {
                    Ok(response) => Counters::parse(&response.text().await.unwrap_or_default()),
                    Err(_) => Counters::default(),
                }
            }
        }
    }

    /// Schedules `ops` for `tenant` through this broker's seam (in-process) or its HTTP API
    /// (with `key` as its `Idempotency-Key`, if given), and returns each op's promised delivery
    /// instant, epoch microseconds (None when refused), and whether the answer replays an
    /// earlier call's.
    ///
    /// With `aim`, every schedule is due at that instant: its delay is set once the transaction
    /// is open (the database's `now()` fixed), or, through the API, when the request is sent.
    pub async fn schedule(
        &self,
        tenant: &str,
        ops: &[TimerOp],
        key: Option<&str>,
        aim: Option<Instant>,
    ) -> Result<Scheduled, Error> {
        match self {
            Broker::InProcess { .. } if key.is_some() => Err(Error::Broker(
                "an Idempotency-Key goes through a broker process's API; an in-process broker has none".to_owned(),
            )),
            Broker::InProcess { seam, store, .. } => {
                let opened = store
                    .begin_timer_tx()
                    .await
                    .map_err(Error::sweeper("cannot begin a schedule transaction"))?;
                let mut tx = seam.begin(opened);
                let aimed = aimed(ops, aim);
                let results = tx
                    .apply(tenant, &aimed, clock::tokio_now())
                    .await
                    .map_err(Error::sweeper("the schedule was refused"))?;
                let promised = results
                    .iter()
                    .map(|r| r.deliver_at.as_deref().and_then(epoch_us))
                    .collect();
                tx.commit()
                    .await
                    .map_err(Error::sweeper("cannot commit the schedule"))?;
                Ok(Scheduled {
                    promised,
                    replayed: false,
                })
            }
            Broker::Process { listen, client, .. } => {
                let body = serde_json::json!({ "ops": aimed(ops, aim).iter().map(TimerOp::to_json).collect::<Vec<_>>() });
                let mut request = client
                    .post(format!("http://{listen}/api/v1/timers"))
                    .header("x-queen-tenant", tenant)
                    .json(&body);
                if let Some(key) = key {
                    request = request.header("idempotency-key", key);
                }
                let response = request
                    .send()
                    .await
                    .map_err(Error::http(format!("cannot schedule through {listen}")))?;
                if !response.status().is_success() {
                    return Err(Error::Broker(format!(
                        "{}: {}",
                        response.status(),
                        response.text().await.unwrap_or_default()
                    )));
                }
                let replayed = response
                    .headers()
                    .get("idempotent-replayed")
                    .is_some_and(|v| v == "true");
                let answer: serde_json::Value = response.json().await.map_err(Error::http(
                    format!("the schedule answer of {listen} is not JSON"),
                ))?;
                let promised = answer["results"]
                    .as_array()
                    .map(|results| {
                        results
                            .iter()
                            .map(|r| r["deliverAt"].as_str().and_then(epoch_us))
                            .collect()
                    })
                    .unwrap_or_default();
                Ok(Scheduled { promised, replayed })
            }
        }
    }

    /// SIGKILL (process brokers only): no shutdown, no goodbye; its claims wait for their lease.
    pub fn kill(&mut self) -> Result<(), Error> {
        match self {
            Broker::Process { child, .. } => child.start_kill().map_err(Error::Kill),
            Broker::InProcess { .. } => Err(Error::Broker(
                "only a broker process can be killed".to_owned(),
            )),
        }
    }

    /// A clean stop: no new claims, the fire in flight finishes.
    pub async fn stop(self) {
        match self {
            Broker::InProcess { shutdown, task, .. } => {
                shutdown.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(30), task).await;
            }
            Broker::Process { mut child, .. } => {
                if let Some(pid) = child.id() {
                    // SAFETY: signalling a child we spawned and have not reaped.
                    #[allow(unsafe_code)]
                    unsafe {
                        libc::kill(pid as libc::pid_t, libc::SIGTERM);
                    }
                }
                let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
            }
        }
    }
}

/// An RFC 3339 instant as epoch microseconds.
pub fn epoch_us(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|at| at.timestamp_micros())
}

/// `ops` with every schedule's delay set so that it is due at `aim` (this host's clock is the
/// database's: the soak's server is on loopback), or as they are without one.
pub fn aimed(ops: &[TimerOp], aim: Option<Instant>) -> Cow<'_, [TimerOp]> {
    let Some(due_at) = aim else {
        return Cow::Borrowed(ops);
    };
    let delay = due_at
        .saturating_duration_since(clock::monotonic_now())
        .as_millis() as i64;
    let mut ops = ops.to_vec();
    for op in &mut ops {
        if let TimerOp::Schedule { delay_ms, .. } = op {
            *delay_ms = delay;
        }
    }
    Cow::Owned(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aimed_schedules_are_all_due_at_the_instant_and_without_an_aim_nothing_changes() {
        let schedule = |delay_ms| TimerOp::Schedule {
            queue: "q".into(),
            timer_key: "k".into(),
            delay_ms,
            payload: queen_sweeper::Payload::Bytes(vec![1]),
            partition: None,
            txn: None,
        };
        let ops = vec![schedule(5), schedule(9_000)];
        assert!(matches!(aimed(&ops, None), Cow::Borrowed(_)));
        let at = clock::monotonic_now() + Duration::from_secs(2);
        let delays: Vec<i64> = aimed(&ops, Some(at))
            .iter()
            .map(|op| match op {
                TimerOp::Schedule { delay_ms, .. } => *delay_ms,
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(delays[0], delays[1]);
        assert!((1_900..=2_000).contains(&delays[0]), "{delays:?}");
        // An instant already past: due now, never a negative delay.
        let past = aimed(
            &ops,
            Some(clock::monotonic_now() - Duration::from_millis(50)),
        );
        assert!(matches!(past[0], TimerOp::Schedule { delay_ms: 0, .. }));
    }

    #[test]
    fn counters_are_read_from_the_prometheus_text_of_a_broker() {
        let metrics = Metrics::new();
        metrics.query("probe");
        metrics.query("probe");
        metrics.query("claim");
        metrics.empty_claims.inc();
        metrics.kv_expired_not_pruned.set(17);
        metrics
            .timers
            .get_or_create(&queen_sweeper::ResultLabel { result: "fired" })
            .inc_by(5);
        metrics
            .segments
            .get_or_create(&queen_sweeper::ResultLabel { result: "stale" })
            .inc_by(2);
        let counters = Counters::parse(&metrics.render());
        assert_eq!(counters.fired, 5);
        assert_eq!(counters.stale_segments, 2);
        assert_eq!(counters.empty_claims, 1);
        assert_eq!(counters.expired_not_pruned, 17);
        assert_eq!(counters.queries.get("probe"), Some(&2));
        assert_eq!(counters.queries.get("claim"), Some(&1));
    }

    #[test]
    fn instants_convert_to_epoch_microseconds() {
        assert_eq!(epoch_us("1970-01-01T00:00:01.000002Z"), Some(1_000_002));
        assert_eq!(
            epoch_us("2026-01-01T00:00:00+00:00"),
            Some(1_767_225_600_000_000)
        );
        assert_eq!(epoch_us("yesterday"), None);
    }
}
