//! The seed's two naive forms, kept only to reproduce their symptoms, built on the sweeper's
//! public [`Form`] from the same blocks the shipped drain uses ([`Drainer::claim`],
//! [`Drainer::fire_claimed`]). Production code cannot name them: they live here, not in the
//! sweeper crate.
//!
//! - **Claim, then fire**: claim the whole pass (`QUEEN_SWEEPER_CYCLE_MAX_ROWS`) in batches, then
//!   fire. When fires are slow the first batch's lease ends before its fire, another broker
//!   re-claims the rows, and the fire comes back stale: the livelock.
//! - **The floor after an empty claim**: return to the 5 ms floor when the first claim took
//!   nothing, instead of the jittered band: the spin.

use futures::future::BoxFuture;
use queen_sweeper::{
    DrainLimits, DrainReport, DrainStop, Drainer, FairRound, Form, PassOutcome, ShardOrder, Store,
};

/// Which naive forms a broker runs; both off is the shipped cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NaiveForms {
    /// Claim the whole pass, then fire.
    pub claim_then_fire: bool,
    /// Sleep the floor after an empty first claim.
    pub floor_after_empty_claim: bool,
}

impl<S: Store> Form<S> for NaiveForms {
    fn drain<'a>(
        &'a self,
        drainer: &'a Drainer<'a, S>,
        shards: &'a ShardOrder,
        limits: &'a DrainLimits,
        fair: &'a mut FairRound,
    ) -> BoxFuture<'a, DrainReport> {
        if self.claim_then_fire {
            Box::pin(claim_then_fire(drainer, shards, limits, fair))
        } else {
            Box::pin(drainer.drain(shards, limits, fair))
        }
    }

    fn after_first_claim_empty(&self) -> PassOutcome {
        if self.floor_after_empty_claim {
            PassOutcome::WorkAvailable
        } else {
            PassOutcome::FirstClaimEmpty
        }
    }
}

/// The livelock's drain: claim up to the pass's row budget with no time budget, then fire
/// everything claimed, a claim batch at a time.
async fn claim_then_fire<S: Store>(
    drainer: &Drainer<'_, S>,
    shards: &ShardOrder,
    limits: &DrainLimits,
    fair: &mut FairRound,
) -> DrainReport {
    let mut report = DrainReport::default();
    let mut claimed = Vec::new();
    let mut fair = Some(fair);
    loop {
        if report.claimed >= u64::from(limits.cycle_max_rows) {
            report.stop = DrainStop::RowBudget;
            break;
        }
        match drainer
            .claim(shards, limits, &mut report, fair.take())
            .await
        {
            Ok(rows) if rows.is_empty() => {
                report.stop = DrainStop::NothingToClaim;
                break;
            }
            Ok(rows) => claimed.extend(rows),
            Err(class) => {
                report.stop = DrainStop::CallFailed(class);
                break;
            }
        }
    }
    for batch in claimed.chunks(limits.claim_batch as usize) {
        drainer.fire_claimed(batch, limits, &mut report).await;
    }
    report
}
