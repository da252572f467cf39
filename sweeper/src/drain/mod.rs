//! Phase B: take a batch, then the next, under the pass's budgets. Never claim the whole pass
//! first.
//!
//! **The take** (the default, `QUEEN_SWEEPER_FIRE_TAKE=1`): one statement picks due rows across
//! the 64 shards (`FOR UPDATE SKIP LOCKED`, the claim's rounds and fairness), stops at the row
//! budget or the byte cap, appends them into their partitions and deletes them, in one
//! transaction. No lease is written and no token re-checked, so a broker that dies mid-take delays
//! nothing: its transaction aborts and the rows are due at once.
//!
//! **The bulk lane** (`QUEEN_SWEEPER_BULK_BATCH`, take path only): a small take keeps a small
//! tenant's wait behind a big tenant's backlog short (it waits for at most one take in flight,
//! and the next take's fairness round serves it), but drains the backlog slowly, since every take
//! pays a fixed cost; a big take drains fast and makes every other tenant wait for it. One
//! connection cannot have both (on the 2026-12-07 rig at 398d97f: 19 070 timers/s and a small
//! tenant's p99 26.5 ms at 200 rows a take; 43 789/s and 441 ms at 5 000). So once a pass's take
//! comes back full, big takes of the oldest rows, with no fairness round, run beside the pass's
//! small ones on a second maintenance slot, until one comes back short. `SKIP LOCKED` shares the
//! rows between the two lanes as it does between brokers. The pass ends when its own lane does
//! (the bulk take in flight finishes first); while both run, the maintenance lane's two slots are
//! both taken, and the switch refresh waits for one of them (at most one take).
//!
//! **The leased path** (the seed's two-phase cycle): claim a batch with a lease and a token per
//! row, then fire it by token. It is what rows that must outlive one transaction need: after a
//! take fails on the content of a timer, the batch is claimed and fired one destination per call,
//! then one timer per call, so the failure narrows to the one timer that causes it
//! ([`failure`]). `QUEEN_SWEEPER_FIRE_TAKE=0` drains every batch this way, to compare.
//!
//! The naive form claims `QUEEN_SWEEPER_CYCLE_MAX_ROWS` in batches and then fires them. When fires
//! are slow (exactly what happens under load: they contend with pushes for partitions), the first
//! batch's lease runs out before the last fire commits; another broker re-claims those rows, this
//! broker's fire finds other tokens, every packed segment comes back stale, and two brokers steal
//! work from each other while lateness climbs. Claiming and firing in the same iteration, and
//! stopping once the pass has spent half the lease, keeps every fire inside its lease.
//!
//! A pass stops when it has spent half the lease, when it has taken the pass's row budget, or when
//! a take or claim takes nothing ([`DrainStop::NothingToClaim`]; if that was the pass's first
//! call, somebody else is draining and the loop backs off with jitter). The half-lease budget
//! bounds a pass on either path: it keeps every leased fire inside its lease, and a take-only pass
//! under the same bound gives the probe, the sub-clocks and a shutdown their turn.
//!
//! | file | owns |
//! |---|---|
//! | this one | the pass: its budgets, the take, the claim, when to stop |
//! | [`plan`] | the byte-capped grouping of claimed rows into fire calls (pure) |
//! | `fire` | firing the planned calls and counting their outcomes |
//! | [`failure`] | what a failed call means for its timers: split, back off, spend attempts, DLQ |
//!
//! The shipped pass is [`Drainer::drain`]. The leased path's building blocks, [`Drainer::claim`]
//! and [`Drainer::fire_claimed`], are public so the simulation can assemble the seed's naive form
//! from them (see [`crate::Form`]); production cannot name it.

pub(crate) mod failure;
mod fire;
pub(crate) mod plan;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::admission::Admission;
use crate::classify::Class;
use crate::clock;
use crate::config::Config;
use crate::metrics::{Metrics, ResultLabel};
use crate::port::Store;
use crate::types::{ClaimRequest, ClaimedTimer, FairRound, ShardOrder, TakeRequest, Taken};

use self::plan::ROW_OVERHEAD_BYTES;

/// `d` in whole milliseconds.
fn whole_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The budgets of one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainLimits {
    /// Rows per claim call (shrinks under pressure, see the cycle).
    pub claim_batch: u32,
    /// Rows per take of the bulk lane (shrinks under pressure with `claim_batch`); the lane runs
    /// only on the take path and only when this is above `claim_batch`.
    pub bulk_batch: u32,
    /// Rows per pass.
    pub cycle_max_rows: u32,
    /// The lease every claimed row gets.
    pub lease: Duration,
    /// Bytes per fire transaction.
    pub max_fire_bytes: u64,
    /// Rows of one tenant per claim.
    pub per_tenant: u32,
    /// Counted failures after which a timer goes to the DLQ.
    pub max_attempts: u32,
    /// Batches are taken in one transaction (`QUEEN_SWEEPER_FIRE_TAKE=1`), or claimed with a
    /// lease and then fired.
    pub take: bool,
    /// Takes skip the partitions another transaction holds (the pass's own takes while the bulk
    /// lane runs beside them); never set by the configuration.
    pub skip_held_partitions: bool,
    /// While the bulk lane runs, the pass's own lane waits this long after a take that was not
    /// full before the next (`QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS`, the empty-claim band's lower
    /// end): what it left was held by the bulk take, and taking again at once would spin.
    pub beside_bulk_pause: Duration,
    /// Which due rows a take asks for; never set by the configuration.
    pub due: Due,
}

/// Which due rows a take asks for, by how long ago they fell due. The bulk lane takes the
/// backlog its pass found, the pass's own lane beside it what fell due since, so the two never
/// meet on a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Due {
    /// Every due row.
    #[default]
    All,
    /// Rows due at least this many milliseconds ago.
    Before(u64),
    /// Rows due less than this many milliseconds ago.
    Since(u64),
}

impl DrainLimits {
    /// The budgets the configuration sets.
    pub fn from_config(config: &Config) -> DrainLimits {
        DrainLimits {
            claim_batch: config.claim_batch,
            bulk_batch: config.bulk_batch,
            cycle_max_rows: config.cycle_max_rows,
            lease: config.lease(),
            max_fire_bytes: config.max_fire_bytes,
            per_tenant: config.claim_batch,
            max_attempts: config.max_attempts,
            take: config.fire_take,
            skip_held_partitions: false,
            beside_bulk_pause: Duration::from_millis(config.empty_claim_ms_min),
            due: Due::All,
        }
    }

    /// A pass stops claiming once it has spent this long.
    pub fn lease_budget(&self) -> Duration {
        self.lease / 2
    }

    /// Whether a pass whose take came back full runs the bulk lane beside its own takes.
    pub fn bulk_lane(&self) -> bool {
        self.take && self.bulk_batch > self.claim_batch
    }

    /// The bulk lane's budgets: takes of `bulk_batch` rows, a tenant's rows uncapped within
    /// them, and no fairness round (the pass's own takes serve the other tenants).
    fn for_bulk(&self) -> DrainLimits {
        DrainLimits {
            claim_batch: self.bulk_batch,
            per_tenant: self.bulk_batch,
            ..*self
        }
    }

    /// The pass's own takes while the bulk lane runs, `found` after the pass began: only what
    /// fell due since, skipping the partitions the bulk take holds instead of queueing behind it.
    fn beside_bulk(&self, found: Duration) -> DrainLimits {
        DrainLimits {
            skip_held_partitions: true,
            due: Due::Since(whole_ms(found)),
            ..*self
        }
    }
}

/// Why a pass stopped claiming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainStop {
    /// A claim took nothing: nothing claimable is left (for this broker).
    NothingToClaim,
    /// The pass claimed `QUEEN_SWEEPER_CYCLE_MAX_ROWS`.
    RowBudget,
    /// The pass spent half the lease.
    LeaseBudget,
    /// The process is shutting down; claimed rows were fired first.
    Shutdown,
    /// A take or a claim failed (transient: the database is struggling; config: the deployment
    /// is broken). A take that failed on a timer's content does not stop the pass: its batch is
    /// retried on the leased path.
    CallFailed(Class),
}

/// What one pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainReport {
    /// Why it stopped claiming.
    pub stop: DrainStop,
    /// Take calls made.
    pub takes: u32,
    /// Claim calls made (the leased path).
    pub claims: u32,
    /// Rows taken or claimed.
    pub claimed: u64,
    /// Timers fired.
    pub fired: u64,
    /// Timers of stale segments (thrown back).
    pub stale_timers: u64,
    /// Stale segments: the livelock's signature.
    pub stale_segments: u64,
    /// Fire calls made.
    pub fire_calls: u32,
    /// Timers put into backoff.
    pub failed_timers: u64,
    /// Timers archived to the DLQ.
    pub dead_lettered: u64,
    /// Take or fire calls that failed transiently.
    pub transient_failures: u32,
    /// Take or fire calls that failed on the deployment (SQLSTATE class 42): no timer spent an
    /// attempt.
    pub config_failures: u32,
    /// The longest take, claim or fire call of the pass: how hard the database is pressed.
    pub slowest_call: Duration,
    /// Of `takes`, those of the bulk lane.
    pub bulk_takes: u32,
}

impl Default for DrainReport {
    fn default() -> DrainReport {
        DrainReport {
            stop: DrainStop::NothingToClaim,
            takes: 0,
            claims: 0,
            claimed: 0,
            fired: 0,
            stale_timers: 0,
            stale_segments: 0,
            fire_calls: 0,
            failed_timers: 0,
            dead_lettered: 0,
            transient_failures: 0,
            config_failures: 0,
            slowest_call: Duration::ZERO,
            bulk_takes: 0,
        }
    }
}

impl DrainReport {
    /// The pass's first claim took nothing: another broker holds the due work.
    pub fn first_claim_empty(&self) -> bool {
        self.stop == DrainStop::NothingToClaim && self.claimed == 0
    }

    /// Adds the bulk lane's work to the pass's; the pass's `stop` stays its own.
    fn absorb_bulk(&mut self, bulk: &DrainReport) {
        self.takes += bulk.takes;
        self.bulk_takes += bulk.takes;
        self.claims += bulk.claims;
        self.claimed += bulk.claimed;
        self.fired += bulk.fired;
        self.stale_timers += bulk.stale_timers;
        self.stale_segments += bulk.stale_segments;
        self.fire_calls += bulk.fire_calls;
        self.failed_timers += bulk.failed_timers;
        self.dead_lettered += bulk.dead_lettered;
        self.transient_failures += bulk.transient_failures;
        self.config_failures += bulk.config_failures;
        self.slowest_call = self.slowest_call.max(bulk.slowest_call);
    }
}

/// What the drain needs from its broker.
#[derive(Debug, Clone, Copy)]
pub struct Drainer<'a, S> {
    /// The port.
    pub store: &'a S,
    /// The broker's lanes: every call takes a maintenance slot first.
    pub admission: &'a Admission,
    /// The sweeper's series.
    pub metrics: &'a Metrics,
    /// Cancelled when the broker stops: no new claim starts.
    pub shutdown: &'a CancellationToken,
}

impl<S: Store> Drainer<'_, S> {
    /// One pass of phase B, the shipped form: take a batch (or claim and fire it on the leased
    /// path), then the next, under the half-lease budget, with the bulk lane beside them once a
    /// take comes back full. Every call of the pass's own lane runs the tenant-fairness round
    /// `fair` first and moves it on, so a small tenant behind a big tenant's backlog waits at most
    /// one of those calls, not one pass (a pass of `QUEEN_SWEEPER_CYCLE_MAX_ROWS` rows took the
    /// small tenant's p99 from 148 ms to 1 723 ms at 5 000 rows in reports/2026-12-05-2c-24g-pg15,
    /// soak at d852934, when only the pass's first call ran the round).
    pub async fn drain(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        fair: &mut FairRound,
    ) -> DrainReport {
        let started = clock::tokio_now();
        let mut report = DrainReport::default();
        if let Some(stop) = self.budget_spent(started, &report, limits) {
            report.stop = stop;
            return report;
        }
        let first = self.step(shards, limits, &mut report, &mut *fair).await;
        let full = report.claimed >= u64::from(limits.claim_batch);
        if first.is_none() && full && limits.bulk_lane() {
            let pass_done = AtomicBool::new(false);
            let bulk_done = AtomicBool::new(false);
            let own = async {
                let stop = self
                    .own_lane_beside_bulk(shards, limits, &mut report, fair, started, &bulk_done)
                    .await;
                pass_done.store(true, Ordering::Relaxed);
                stop
            };
            let bulk = async {
                let report = self.bulk_lane(shards, limits, started, &pass_done).await;
                bulk_done.store(true, Ordering::Relaxed);
                report
            };
            let (stop, bulk) = futures::future::join(own, bulk).await;
            report.stop = stop;
            report.absorb_bulk(&bulk);
            return report;
        }
        report.stop = match first {
            Some(stop) => stop,
            None => {
                self.own_lane(shards, limits, &mut report, fair, started)
                    .await
            }
        };
        report
    }

    /// The pass's own takes (or claims and fires), the fairness round first in each, until a
    /// budget is spent or a call takes nothing or fails.
    async fn own_lane(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        report: &mut DrainReport,
        fair: &mut FairRound,
        started: Instant,
    ) -> DrainStop {
        loop {
            if let Some(stop) = self.budget_spent(started, report, limits) {
                return stop;
            }
            if let Some(stop) = self.step(shards, limits, report, &mut *fair).await {
                return stop;
            }
        }
    }

    /// The pass's own lane while the bulk lane runs: takes of what fell due since the pass began
    /// ([`Due::Since`]) that skip the partitions the bulk take holds, each not-full one followed
    /// by `beside_bulk_pause`, an empty one included (nothing more fell due; the bulk lane holds
    /// the rest); once the bulk lane is done, as [`Drainer::own_lane`].
    async fn own_lane_beside_bulk(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        report: &mut DrainReport,
        fair: &mut FairRound,
        started: Instant,
        bulk_done: &AtomicBool,
    ) -> DrainStop {
        while !bulk_done.load(Ordering::Relaxed) {
            if let Some(stop) = self.budget_spent(started, report, limits) {
                return stop;
            }
            let beside = limits.beside_bulk(clock::tokio_now().saturating_duration_since(started));
            let before = report.claimed;
            match self.step(shards, &beside, report, &mut *fair).await {
                None | Some(DrainStop::NothingToClaim) => {}
                Some(stop) => return stop,
            }
            if report.claimed - before < u64::from(beside.claim_batch)
                && !bulk_done.load(Ordering::Relaxed)
            {
                tokio::time::sleep(beside.beside_bulk_pause).await;
            }
        }
        self.own_lane(shards, limits, report, fair, started).await
    }

    /// One call of the pass's own lane: a take, or a claim and its fire on the leased path.
    async fn step(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        report: &mut DrainReport,
        fair: &mut FairRound,
    ) -> Option<DrainStop> {
        if limits.take {
            self.take_batch(shards, limits, report, Some(fair)).await
        } else {
            self.claim_and_fire(shards, limits, report, Some(fair), false)
                .await
        }
    }

    /// The bulk lane: while the pass's own lane runs, takes of `bulk_batch` rows, oldest first,
    /// on a maintenance slot of their own, so a deep backlog drains in big takes while the own
    /// lane's small ones keep every other tenant's wait to one small take. Its takes only take
    /// rows due before the pass's first take began ([`Due::Before`]): whatever fell due since, a
    /// small tenant's fresh timer above all, is the own lane's. It stops with the pass
    /// (after its take in flight), at the half-lease budget, at a row budget of its own (a pass
    /// with the bulk lane takes up to twice `QUEEN_SWEEPER_CYCLE_MAX_ROWS`), and at the first take
    /// that comes back
    /// short (the backlog is gone) or fails: whatever a failure means for a timer, the own lane
    /// meets the same rows and handles it.
    async fn bulk_lane(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        started: Instant,
        pass_done: &AtomicBool,
    ) -> DrainReport {
        let bulk = limits.for_bulk();
        let mut report = DrainReport::default();
        while !pass_done.load(Ordering::Relaxed)
            && self.budget_spent(started, &report, &bulk).is_none()
        {
            // The backlog this pass found: rows due before its first take began.
            let found = clock::tokio_now().saturating_duration_since(started);
            let bulk = DrainLimits {
                due: Due::Before(whole_ms(found)),
                ..bulk
            };
            match self.take(shards, &bulk, &mut report, None).await {
                Ok(timers) if timers >= u64::from(bulk.claim_batch) => {}
                Ok(_) | Err(_) => break,
            }
        }
        report
    }

    /// One take; after a take that failed on a timer's content, the same batch on the leased
    /// path, isolating the timer. Answers why the pass stops, if it does.
    async fn take_batch(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        report: &mut DrainReport,
        fair: Option<&mut FairRound>,
    ) -> Option<DrainStop> {
        match self.take(shards, limits, report, fair).await {
            Ok(0) => Some(DrainStop::NothingToClaim),
            Ok(_) => None,
            Err(Class::Permanent) => {
                self.claim_and_fire(shards, limits, report, None, true)
                    .await
            }
            Err(class) => Some(DrainStop::CallFailed(class)),
        }
    }

    /// One claim and the fire of what it took (the leased path); `isolate` fires one destination
    /// per call from the start. Answers why the pass stops, if it does.
    async fn claim_and_fire(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        report: &mut DrainReport,
        fair: Option<&mut FairRound>,
        isolate: bool,
    ) -> Option<DrainStop> {
        match self.claim(shards, limits, report, fair).await {
            Ok(rows) if rows.is_empty() => Some(DrainStop::NothingToClaim),
            Ok(rows) => {
                let broken_before = report.config_failures;
                self.fire_isolating(&rows, limits, report, isolate).await;
                // A broken deployment fails every call alike: stop, and sleep the ceiling.
                (report.config_failures > broken_before)
                    .then_some(DrainStop::CallFailed(Class::Config))
            }
            Err(class) => Some(DrainStop::CallFailed(class)),
        }
    }

    /// The next batch's size: `limits.claim_batch` rows, or what is left of the pass's budget.
    fn next_batch(limits: &DrainLimits, report: &DrainReport) -> u32 {
        let left = u64::from(limits.cycle_max_rows).saturating_sub(report.claimed);
        limits
            .claim_batch
            .min(u32::try_from(left).unwrap_or(u32::MAX))
    }

    /// One take of the next batch. Answers how many timers it fired, or the failure's class
    /// (already counted and logged).
    pub async fn take(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        report: &mut DrainReport,
        fair: Option<&mut FairRound>,
    ) -> Result<u64, Class> {
        let batch = Self::next_batch(limits, report);
        // The bulk lane's takes (no fairness round) are never a pass's first.
        let first_of_pass = report.claimed == 0 && fair.is_some();
        let request = TakeRequest {
            shards: shards.clone(),
            max_rows: batch,
            per_tenant: limits.per_tenant,
            fair: fair.as_deref().cloned(),
            max_bytes: limits.max_fire_bytes,
            row_overhead: ROW_OVERHEAD_BYTES,
            skip_held_partitions: limits.skip_held_partitions,
            due_ms_ago: match limits.due {
                Due::Before(ms) => ms,
                _ => 0,
            },
            due_within_ms: match limits.due {
                Due::Since(ms) => Some(ms),
                _ => None,
            },
        };
        let slot = self.admission.maintenance().await;
        self.metrics.query("take");
        report.takes += 1;
        let called = clock::tokio_now();
        let result = self.store.take(&slot, &request).await;
        report.slowest_call = report.slowest_call.max(clock::tokio_now() - called);
        drop(slot);
        match result {
            Ok(taken) => {
                let timers = taken.timers();
                assert!(
                    timers <= u64::from(batch),
                    "a take fired {timers} timers for a batch of {batch}"
                );
                if let (Some(fair), Some(after)) = (fair, taken.fair_after.clone()) {
                    fair.after = Some(after);
                }
                if timers == 0 && first_of_pass {
                    self.metrics.empty_claims.inc();
                }
                self.count_taken(&taken, report);
                Ok(timers)
            }
            Err(error) => Err(self.call_failed("take", &error, report)),
        }
    }

    fn count_taken(&self, taken: &Taken, report: &mut DrainReport) {
        let timers = taken.timers();
        report.claimed += timers;
        report.fired += timers;
        for destination in &taken.destinations {
            assert!(
                !destination.late_ms.is_empty(),
                "a take answers only destinations it fired into"
            );
            for &late in &destination.late_ms {
                self.metrics.fire_lag_ms.observe(late as f64);
            }
        }
        let fired = ResultLabel { result: "fired" };
        self.metrics.timers.get_or_create(&fired).inc_by(timers);
        self.metrics
            .segments
            .get_or_create(&fired)
            .inc_by(taken.destinations.len() as u64);
    }

    /// Counts and logs a failed take or claim; answers its class.
    fn call_failed(&self, call: &str, error: &crate::Error, report: &mut DrainReport) -> Class {
        let class = error.class();
        self.metrics.failed(class);
        match class {
            Class::Transient => {
                report.transient_failures += 1;
                tracing::warn!(%error, "{call} failed; backing off");
            }
            Class::Config => {
                report.config_failures += 1;
                self.metrics.fire_config_failures.inc();
                tracing::error!(%error, "the {call} cannot run: SQLSTATE class 42 is the deployment's fault (a missing function or table, or a privilege), not a timer's; no timer spends an attempt and the fire keeps trying at the sleep ceiling. Fix: apply sql/ (`queen-sweeper run` applies it at start unless --no-apply-schema) and check the sweeper's role may execute the queen.log_timers_* functions");
            }
            Class::Permanent if call == "take" => {
                tracing::warn!(%error, "take failed; retrying the batch on the leased path, one destination per call");
            }
            Class::Permanent => tracing::warn!(%error, "{call} failed"),
        }
        class
    }

    fn budget_spent(
        &self,
        started: Instant,
        report: &DrainReport,
        limits: &DrainLimits,
    ) -> Option<DrainStop> {
        if self.shutdown.is_cancelled() {
            Some(DrainStop::Shutdown)
        } else if report.claimed >= u64::from(limits.cycle_max_rows) {
            Some(DrainStop::RowBudget)
        } else if clock::tokio_now().saturating_duration_since(started) >= limits.lease_budget() {
            Some(DrainStop::LeaseBudget)
        } else {
            None
        }
    }

    /// One claim of the next batch: `limits.claim_batch` rows, or what is left of the pass's
    /// row budget. With `fair`, the claim runs the fairness round first and moves it on. A failed
    /// claim answers its class (already counted and logged).
    pub async fn claim(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        report: &mut DrainReport,
        fair: Option<&mut FairRound>,
    ) -> Result<Vec<ClaimedTimer>, Class> {
        let batch = Self::next_batch(limits, report);
        let request = ClaimRequest {
            shards: shards.clone(),
            lease: limits.lease,
            max_rows: batch,
            per_tenant: limits.per_tenant,
            fair: fair.as_deref().cloned(),
        };
        let slot = self.admission.maintenance().await;
        self.metrics.query("claim");
        report.claims += 1;
        let called = clock::tokio_now();
        let result = self.store.claim(&slot, &request).await;
        report.slowest_call = report.slowest_call.max(clock::tokio_now() - called);
        match result {
            Ok(claimed) => {
                let rows = claimed.rows;
                assert!(
                    rows.len() <= batch as usize,
                    "a claim returned {} rows for a batch of {batch}",
                    rows.len()
                );
                if let (Some(fair), Some(after)) = (fair, claimed.fair_after) {
                    fair.after = Some(after);
                }
                if rows.is_empty() && report.claimed == 0 {
                    self.metrics.empty_claims.inc();
                }
                report.claimed += rows.len() as u64;
                for row in &rows {
                    self.metrics.fire_lag_ms.observe(row.late_ms as f64);
                }
                Ok(rows)
            }
            Err(error) => Err(self.call_failed("claim", &error, report)),
        }
    }
}
