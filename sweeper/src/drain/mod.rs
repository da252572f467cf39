//! Phase B: claim a batch, fire it, claim the next. Never claim the whole pass first.
//!
//! The naive form claims `QUEEN_SWEEPER_CYCLE_MAX_ROWS` in batches and then fires them. When fires
//! are slow (exactly what happens under load: they contend with pushes for partitions), the first
//! batch's lease runs out before the last fire commits; another broker re-claims those rows, this
//! broker's fire finds other tokens, every packed segment comes back stale, and two brokers steal
//! work from each other while lateness climbs. Claiming and firing in the same iteration, and
//! stopping once the pass has spent half the lease, keeps every fire inside its lease.
//!
//! A pass stops claiming when it has spent half the lease, when it has claimed the pass's row
//! budget, or when a claim takes nothing ([`DrainStop::NothingToClaim`]; if that was the pass's
//! first claim, somebody else is draining and the loop backs off with jitter).
//!
//! | file | owns |
//! |---|---|
//! | this one | the pass: its budgets, the claim, when to stop |
//! | [`plan`] | the byte-capped grouping of claimed rows into fire calls (pure) |
//! | `fire` | firing the planned calls and counting their outcomes |
//! | [`failure`] | what a failed call means for its timers: split, back off, spend attempts, DLQ |
//!
//! The shipped pass is [`Drainer::drain`]. Its building blocks, [`Drainer::claim`] and
//! [`Drainer::fire_claimed`], are public so the simulation can assemble the seed's naive form
//! from them (see [`crate::Form`]); production cannot name it.

pub(crate) mod failure;
mod fire;
pub(crate) mod plan;

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::admission::Admission;
use crate::classify::Class;
use crate::clock;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::port::Store;
use crate::types::{ClaimRequest, ClaimedTimer, FairRound, ShardOrder};

/// The budgets of one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainLimits {
    /// Rows per claim call (shrinks under pressure, see the cycle).
    pub claim_batch: u32,
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
}

impl DrainLimits {
    /// The budgets the configuration sets.
    pub fn from_config(config: &Config) -> DrainLimits {
        DrainLimits {
            claim_batch: config.claim_batch,
            cycle_max_rows: config.cycle_max_rows,
            lease: config.lease(),
            max_fire_bytes: config.max_fire_bytes,
            per_tenant: config.claim_batch,
            max_attempts: config.max_attempts,
        }
    }

    /// A pass stops claiming once it has spent this long.
    pub fn lease_budget(&self) -> Duration {
        self.lease / 2
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
    /// A claim failed.
    ClaimFailed(Class),
}

/// What one pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainReport {
    /// Why it stopped claiming.
    pub stop: DrainStop,
    /// Claim calls made.
    pub claims: u32,
    /// Rows claimed.
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
    /// Fire calls that failed transiently.
    pub transient_failures: u32,
}

impl Default for DrainReport {
    fn default() -> DrainReport {
        DrainReport {
            stop: DrainStop::NothingToClaim,
            claims: 0,
            claimed: 0,
            fired: 0,
            stale_timers: 0,
            stale_segments: 0,
            fire_calls: 0,
            failed_timers: 0,
            dead_lettered: 0,
            transient_failures: 0,
        }
    }
}

impl DrainReport {
    /// The pass's first claim took nothing: another broker holds the due work.
    pub fn first_claim_empty(&self) -> bool {
        self.stop == DrainStop::NothingToClaim && self.claimed == 0
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
    /// One pass of phase B, the shipped form: claim a batch, fire it, claim the next, under the
    /// half-lease budget. Its first claim runs the tenant-fairness round `fair`.
    pub async fn drain(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        fair: &mut FairRound,
    ) -> DrainReport {
        let started = clock::tokio_now();
        let mut report = DrainReport::default();
        let mut fair = Some(fair);
        loop {
            if let Some(stop) = self.budget_spent(started, &report, limits) {
                report.stop = stop;
                return report;
            }
            let rows = match self.claim(shards, limits, &mut report, fair.take()).await {
                Ok(rows) if rows.is_empty() => {
                    report.stop = DrainStop::NothingToClaim;
                    return report;
                }
                Ok(rows) => rows,
                Err(class) => {
                    report.stop = DrainStop::ClaimFailed(class);
                    return report;
                }
            };
            self.fire_claimed(&rows, limits, &mut report).await;
        }
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
        let left = u64::from(limits.cycle_max_rows).saturating_sub(report.claimed);
        let batch = limits
            .claim_batch
            .min(u32::try_from(left).unwrap_or(u32::MAX));
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
        match self.store.claim(&slot, &request).await {
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
            Err(error) => {
                let class = error.class();
                self.metrics.failed(class);
                tracing::warn!(%error, "claim failed");
                Err(class)
            }
        }
    }
}
