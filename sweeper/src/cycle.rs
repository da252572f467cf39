//! The cycle, phases A–D, one broker's sweeper.
//!
//! ```text
//! A. PROBE       one read-only call, one server now(): nextInMs, due count, lateness
//! B. DRAIN       claim and fire in the SAME iteration, under the lease budget
//! C. SUB-CLOCKS  usage rollup, then KV prune, each on its own gate
//! D. SLEEP       due-driven, clamped, interruptible by the local wake
//! ```
//!
//! Leaderless: every broker runs this loop over all 64 shards, and `FOR UPDATE ... SKIP LOCKED`
//! is the only coordination. The only thing derived from the broker's identity is the shard its
//! pass starts at, rotated by one every pass, so that N brokers do not all queue on the same head
//! of the index.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::admission::{Admission, LaneSizes};
use crate::classify::Class;
use crate::clock;
use crate::config::Config;
use crate::drain::{DrainLimits, DrainReport, DrainStop, Drainer};
use crate::metrics::{Metrics, PhaseLabel};
use crate::port::Store;
use crate::seam::Seam;
use crate::sleep::{Bands, PassOutcome, sleep_for};
use crate::subclock::{KV_ALARM_CAP, SlowPhase, SubClocks, SubclockInputs, SubclockReport};
use crate::switches::Switches;
use crate::types::{FairRound, Probe, ProbeRequest, SHARD_COUNT, ShardOrder, stable_shard};
use crate::waker::Waker;

/// A pass whose slowest take, claim or fire call ran longer than this fraction of the statement
/// timeout (1 s of the default 5 s) puts the fire under pressure: the next pass halves its batch
/// and doubles its sleep after work, up to the ceiling. Not measured.
pub const PRESSURE_CALL_FRACTION: u32 = 5;

/// The deepest pressure level slow calls alone reach: a quarter of the batch, four times the
/// sleep floor. Deeper, the backlog grows faster than the slower calls spare the database: in the
/// simulation's livelock world (16 MiB/s of WAL, a 12 000-timer burst of 8 KiB) unbounded
/// slowness pressure took the drain to one row a pass and doubled the burst's lateness p99
/// (22.3 s against 11.9 s for the naive drain, seed 1, commit 8f52afe). Not measured on
/// PostgreSQL.
pub const SLOW_PRESSURE_LEVELS: u32 = 2;

/// Tenants every take or claim of a pass serves one due row each before anything else (the fairness
/// round; see `FairRound`). Not measured: each costs one index seek and at most 64 row reads.
pub const FAIR_TENANTS_PER_PASS: u32 = 32;

/// How a pass drains and what it does after an empty first claim. [`Shipped`] is the form the
/// seed prescribes and the only one this crate provides; the simulation builds the seed's naive
/// forms (claim the whole pass, then fire; the 5 ms floor after an empty claim) on this trait,
/// from [`Drainer::claim`] and [`Drainer::fire_claimed`], to reproduce the livelock and the spin.
pub trait Form<S: Store>: Send + Sync + 'static {
    /// One pass of phase B. The shipped drain by default.
    fn drain<'a>(
        &'a self,
        drainer: &'a Drainer<'a, S>,
        shards: &'a ShardOrder,
        limits: &'a DrainLimits,
        fair: &'a mut FairRound,
    ) -> BoxFuture<'a, DrainReport> {
        Box::pin(drainer.drain(shards, limits, fair))
    }

    /// What the sleep is computed from when the probe saw due work but the pass's first claim
    /// took nothing. The jittered band by default.
    fn after_first_claim_empty(&self) -> PassOutcome {
        PassOutcome::FirstClaimEmpty
    }
}

/// The seed's cycle: claim and fire in the same iteration under the half-lease budget, and the
/// jittered band after an empty first claim.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shipped;

impl<S: Store> Form<S> for Shipped {}

/// A source of jitter samples in [0, 1]. Production draws from the OS; the simulation from its
/// seed.
pub type Jitter = Box<dyn FnMut() -> f64 + Send + Sync>;

/// What one pass did, for tests, the simulation and the soak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassReport {
    /// The shard the pass started at.
    pub start_shard: u8,
    /// The probe's answer, unless it failed.
    pub probe: Option<Probe>,
    /// The drain, if it ran.
    pub drain: Option<DrainReport>,
    /// The sub-clocks.
    pub subclocks: SubclockReport,
    /// What the sleep was computed from.
    pub outcome: PassOutcome,
    /// The planned sleep.
    pub sleep: Duration,
}

/// One broker's sweeper.
pub struct Sweeper<S> {
    store: Arc<S>,
    config: Config,
    identity: String,
    identity_shard: u8,
    admission: Admission,
    waker: Waker,
    switches: Switches,
    metrics: Metrics,
    shutdown: CancellationToken,
    jitter: Jitter,
    subclocks: SubClocks,
    limits: DrainLimits,
    form: Box<dyn Form<S>>,
    passes: u64,
    /// Consecutive passes that ended on a budget or a capped backlog: sheds the sub-clocks.
    backlog_passes: u32,
    /// How many times the fire's batch is halved and its sleep after work doubled.
    fire_pressure: u32,
    fair: FairRound,
}

impl<S> std::fmt::Debug for Sweeper<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sweeper")
            .field("identity", &self.identity)
            .field("passes", &self.passes)
            .field("backlog_passes", &self.backlog_passes)
            .field("fire_pressure", &self.fire_pressure)
            .finish_non_exhaustive()
    }
}

impl<S: Store> Sweeper<S> {
    /// A sweeper with its own admission lanes, waker, switches and metrics, drawing jitter from
    /// the OS. `config` must be valid ([`Config::validate`]).
    pub fn new(store: Arc<S>, config: Config, identity: impl Into<String>) -> Sweeper<S> {
        Self::with_jitter(store, config, identity, Box::new(clock::jitter_sample))
    }

    /// As [`Sweeper::new`], with jitter from `jitter` (the simulation passes its seeded RNG).
    pub fn with_jitter(
        store: Arc<S>,
        config: Config,
        identity: impl Into<String>,
        mut jitter: Jitter,
    ) -> Sweeper<S> {
        let identity = identity.into();
        let now = clock::tokio_now();
        let subclocks = SubClocks::new(&config, now, jitter());
        Sweeper {
            store,
            limits: DrainLimits::from_config(&config),
            form: Box::new(Shipped),
            identity_shard: identity_shard(&identity),
            identity,
            admission: Admission::new(LaneSizes::default()),
            waker: Waker::new(now),
            switches: Switches::default(),
            metrics: Metrics::new(),
            shutdown: CancellationToken::new(),
            jitter,
            subclocks,
            passes: 0,
            backlog_passes: 0,
            fire_pressure: 0,
            fair: FairRound {
                tenants: FAIR_TENANTS_PER_PASS,
                after: None,
            },
            config,
        }
    }

    /// Shares admission lanes with the rest of the broker process.
    pub fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = admission;
        self
    }

    /// Shares the kill switches with the rest of the broker process.
    pub fn with_switches(mut self, switches: Switches) -> Self {
        self.switches = switches;
        self
    }

    /// Uses `metrics` instead of a private set.
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Drains in `form` instead of [`Shipped`] (the simulation's naive forms).
    pub fn with_form(mut self, form: impl Form<S>) -> Self {
        self.form = Box::new(form);
        self
    }

    /// The local wake this sweeper sleeps on.
    pub fn waker(&self) -> &Waker {
        &self.waker
    }

    /// The kill switches it obeys.
    pub fn switches(&self) -> &Switches {
        &self.switches
    }

    /// Its series.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Its admission lanes.
    pub fn admission(&self) -> &Admission {
        &self.admission
    }

    /// Its port.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// The schedule seam that rings this sweeper's wake.
    pub fn seam(&self) -> Seam {
        Seam::new(self.waker.clone(), self.switches.clone())
    }

    /// Cancel it to stop: no new claim starts; a fire in flight finishes.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Whether a slow phase is switched off for the life of the process (class 42).
    pub fn subclocks_off(&self, phase: SlowPhase) -> bool {
        self.subclocks.is_off(phase)
    }

    /// The shard this broker's passes start from before rotation.
    pub fn identity_shard(&self) -> u8 {
        self.identity_shard
    }

    /// Runs passes until shut down.
    pub async fn run(mut self) {
        tracing::info!(identity = %self.identity, start_shard = self.identity_shard, "sweeper started");
        while !self.shutdown.is_cancelled() {
            let report = self.pass().await;
            if self.shutdown.is_cancelled() {
                break;
            }
            let planned = clock::tokio_now() + report.sleep;
            let shutdown = self.shutdown.clone();
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                _ = self.waker.sleep(planned) => {}
            }
        }
        tracing::info!(identity = %self.identity, passes = self.passes, "sweeper stopped");
    }

    /// One pass, phases A–C, and the sleep it plans (phase D is [`Sweeper::run`]'s).
    pub async fn pass(&mut self) -> PassReport {
        self.waker.begin_pass();
        let started = clock::tokio_now();
        let start_shard =
            ((u64::from(self.identity_shard) + self.passes) % u64::from(SHARD_COUNT)) as u8;
        let shards = ShardOrder::starting_at(start_shard);
        self.passes += 1;

        let probe = self.probe(&shards).await;
        let drain = match &probe {
            Ok(p) if p.due > 0 && self.switches.fire_enabled() => Some(self.drain(&shards).await),
            Ok(p) if p.due > 0 => {
                self.metrics.skipped("fire", "switched_off");
                None
            }
            _ => None,
        };
        // Pressure is the fire falling behind; with the fire switched off nothing is falling
        // behind that shedding could help, and the prune keeps its cadence.
        let pressured = self.switches.fire_enabled()
            && (matches!(&probe, Ok(p) if p.due_capped)
                || matches!(
                    drain.map(|d| d.stop),
                    Some(DrainStop::RowBudget | DrainStop::LeaseBudget)
                ));
        self.backlog_passes = if pressured {
            self.backlog_passes.saturating_add(1)
        } else {
            0
        };
        self.adapt_to_pressure(drain.as_ref(), &probe);

        let timer = clock::tokio_now();
        let subclocks = self
            .subclocks
            .run(
                &*self.store,
                &self.admission,
                &self.metrics,
                &shards,
                SubclockInputs {
                    now: timer,
                    pressure: self.backlog_passes,
                    kv_expired: probe
                        .as_ref()
                        .ok()
                        .and_then(|p| p.kv_expired.map(|kv| kv.expired)),
                },
            )
            .await;
        self.observe_phase("subclocks", timer);

        let outcome = self.outcome(probe.as_ref().ok(), drain.as_ref());
        let sleep = sleep_for(outcome, Bands::from_config(&self.config), (self.jitter)());
        self.metrics.sleep_ms.observe(sleep.as_millis() as f64);
        self.observe_phase("pass", started);
        PassReport {
            start_shard,
            probe: probe.ok(),
            drain,
            subclocks,
            outcome,
            sleep,
        }
    }

    /// Phase A, and what the pass learns from it: the backlog, the kill switches, the prune's
    /// alarm. When the prune's SQL is missing (class 42 from the probe's KV part), the prune goes
    /// off for good and the probe is asked again without it.
    async fn probe(&mut self, shards: &ShardOrder) -> Result<Probe, Class> {
        let timer = clock::tokio_now();
        let kv_cap = if self.subclocks.is_off(SlowPhase::Prune) {
            0
        } else {
            KV_ALARM_CAP
        };
        let result = match self.probe_once(shards, kv_cap).await {
            Err(error) if kv_cap > 0 && error.class() == Class::Config => {
                self.metrics.failed(error.class());
                self.subclocks
                    .switch_off(SlowPhase::Prune, &error, &self.metrics);
                self.probe_once(shards, 0).await
            }
            other => other,
        };
        self.observe_phase("probe", timer);
        match result {
            Ok(probe) => {
                self.metrics.due_backlog.set(i64::from(probe.due));
                self.metrics.due_capped.set(i64::from(probe.due_capped));
                self.metrics
                    .oldest_lateness_ms
                    .set(i64::try_from(probe.late_ms).unwrap_or(i64::MAX));
                self.switches.observe(probe.switches);
                if let Some(alarm) = probe.kv_expired {
                    self.metrics.publish_kv_alarm(alarm);
                }
                Ok(probe)
            }
            Err(error) => {
                self.metrics.failed(error.class());
                tracing::warn!(%error, "probe failed");
                Err(error.class())
            }
        }
    }

    async fn probe_once(&self, shards: &ShardOrder, kv_cap: u32) -> crate::Result<Probe> {
        let request = ProbeRequest {
            shards: shards.clone(),
            due_cap: self.config.due_cap,
            kv_cap,
        };
        let slot = self.admission.maintenance().await;
        self.metrics.query("probe");
        self.store.probe(&slot, &request).await
    }

    async fn drain(&mut self, shards: &ShardOrder) -> DrainReport {
        let timer = clock::tokio_now();
        let drainer = Drainer {
            store: &*self.store,
            admission: &self.admission,
            metrics: &self.metrics,
            shutdown: &self.shutdown,
        };
        let report = self
            .form
            .drain(&drainer, shards, &self.limits, &mut self.fair)
            .await;
        self.observe_phase("drain", timer);
        report
    }

    /// Under pressure the fire shrinks its batch and lengthens its sleep; it never switches itself
    /// off. Pressure is what the pass measured: a transient failure (the probe's, a take's, a
    /// claim's or a fire's), or a call slower than a fifth of the statement timeout. Each pressured
    /// pass halves the batch and doubles the sleep after work once more; each clean pass undoes
    /// one step. Failures may push it to one row at the ceiling. Slowness alone stops at
    /// [`SLOW_PRESSURE_LEVELS`]: a slow call says the database is busy, not that it is failing,
    /// and backing off further only turns a busy database into a late fire.
    fn adapt_to_pressure(&mut self, drain: Option<&DrainReport>, probe: &Result<Probe, Class>) {
        let slow = self.config.statement_timeout() / PRESSURE_CALL_FRACTION;
        let failing = matches!(probe, Err(Class::Transient))
            || drain.is_some_and(|d| {
                d.transient_failures > 0 || d.stop == DrainStop::CallFailed(Class::Transient)
            });
        let slowed = drain.is_some_and(|d| d.slowest_call > slow);
        self.fire_pressure = if failing {
            (self.fire_pressure + 1).min(self.deepest_pressure())
        } else if slowed && self.fire_pressure < SLOW_PRESSURE_LEVELS {
            self.fire_pressure + 1
        } else if slowed {
            self.fire_pressure
        } else {
            self.fire_pressure.saturating_sub(1)
        };
        self.limits.claim_batch = (self.config.claim_batch >> self.fire_pressure).max(1);
        self.limits.bulk_batch = self.config.bulk_batch >> self.fire_pressure;
        self.metrics
            .fire_pressure
            .set(i64::from(self.fire_pressure));
    }

    /// The deepest pressure level that still changes something: the batch can halve, or the
    /// sleep after work can double without passing the ceiling.
    fn deepest_pressure(&self) -> u32 {
        let halvings = 32 - self.config.claim_batch.leading_zeros();
        let ratio = self.config.sleep_ms_max / self.config.sleep_ms_min.max(1);
        let doublings = 64 - ratio.leading_zeros();
        halvings.max(doublings)
    }

    /// The sleep after a pass that left work: the floor, doubled once per pressure level.
    fn after_work(&self) -> PassOutcome {
        if self.fire_pressure == 0 {
            return PassOutcome::WorkAvailable;
        }
        let shift = self.fire_pressure.min(63);
        PassOutcome::DueLater {
            next_in_ms: self.config.sleep_ms_min.saturating_mul(1 << shift),
        }
    }

    fn outcome(&self, probe: Option<&Probe>, drain: Option<&DrainReport>) -> PassOutcome {
        let Some(probe) = probe else {
            return PassOutcome::NothingDue; // the database is struggling: back off to the ceiling
        };
        let idle = match probe.next_in_ms {
            None => PassOutcome::NothingDue,
            Some(next_in_ms) => PassOutcome::DueLater { next_in_ms },
        };
        if probe.due == 0 {
            return idle;
        }
        let Some(drain) = drain else {
            return PassOutcome::NothingDue; // due, but the fire is switched off
        };
        if drain.transient_failures > 0 {
            return PassOutcome::NothingDue; // the database is struggling: back off to the ceiling
        }
        match drain.stop {
            DrainStop::NothingToClaim if drain.first_claim_empty() => {
                self.form.after_first_claim_empty()
            }
            DrainStop::NothingToClaim
            | DrainStop::RowBudget
            | DrainStop::LeaseBudget
            | DrainStop::Shutdown => self.after_work(),
            // The database is struggling, or the deployment is broken (class 42): the ceiling.
            DrainStop::CallFailed(_) => PassOutcome::NothingDue,
        }
    }

    fn observe_phase(&self, phase: &'static str, since: Instant) {
        let seconds = clock::tokio_now()
            .saturating_duration_since(since)
            .as_secs_f64();
        self.metrics
            .phase_seconds
            .get_or_create(&PhaseLabel { phase })
            .observe(seconds);
    }
}

/// The starting shard derived from a broker's identity ([`stable_shard`], so it is the same in
/// every process and every run).
pub fn identity_shard(identity: &str) -> u8 {
    stable_shard(identity)
}
