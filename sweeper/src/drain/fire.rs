//! The fire of claimed rows: the plan's calls, one transaction each, their outcomes counted, and
//! a failed call handed to the failure policy.

use std::collections::{HashMap, VecDeque};

use super::failure::{FailedCall, TimerKey, respond_to_failure};
use super::plan::plan_fire_calls;
use super::{DrainLimits, DrainReport, Drainer};
use crate::metrics::ResultLabel;
use crate::port::Store;
use crate::types::{ClaimedTimer, FireCall, SegmentOutcome, SegmentResult};

impl<S: Store> Drainer<'_, S> {
    /// Fires claimed rows in byte-capped calls, replaying segments one per call after a
    /// non-transient failure of a call of several.
    pub async fn fire_claimed(
        &self,
        rows: &[ClaimedTimer],
        limits: &DrainLimits,
        report: &mut DrainReport,
    ) {
        let attempts: HashMap<TimerKey<'_>, u32> = rows
            .iter()
            .map(|r| {
                let d = &r.destination;
                (
                    (d.tenant.as_str(), d.queue.as_str(), r.timer_key.as_str()),
                    r.attempts,
                )
            })
            .collect();
        let mut calls: VecDeque<FireCall> = plan_fire_calls(rows, limits.max_fire_bytes).into();
        while let Some(call) = calls.pop_front() {
            let slot = self.admission.maintenance().await;
            self.metrics.query("fire");
            report.fire_calls += 1;
            let result = self.store.fire(&slot, &call).await;
            drop(slot);
            let error = match result {
                Ok(outcomes) => {
                    self.count_outcomes(&call, outcomes, report);
                    continue;
                }
                Err(error) => error,
            };
            let class = error.class();
            self.metrics.failed(class);
            match respond_to_failure(class, call.segments.len()) {
                FailedCall::Split => {
                    tracing::warn!(%error, segments = call.segments.len(), "fire failed; replaying one segment per call");
                    for segment in call.segments.into_iter().rev() {
                        calls.push_front(FireCall {
                            segments: vec![segment],
                        });
                    }
                }
                FailedCall::Record(cause) => {
                    tracing::warn!(%error, timers = call.timers(), class = class.as_str(), "fire failed; backing off");
                    self.record_failure(&call, &error, cause, &attempts, limits, report)
                        .await;
                }
            }
        }
    }

    /// Counts one call's outcomes: every segment answered once, all of its timers fired or none.
    fn count_outcomes(
        &self,
        call: &FireCall,
        outcomes: Vec<SegmentOutcome>,
        report: &mut DrainReport,
    ) {
        assert_eq!(
            outcomes.len(),
            call.segments.len(),
            "the fire answers every segment once"
        );
        for outcome in outcomes {
            let timers = u64::from(outcome.timers);
            assert_eq!(timers, call.segments[outcome.segment].timers.len() as u64);
            let result = match outcome.result {
                SegmentResult::Fired { .. } => {
                    report.fired += timers;
                    "fired"
                }
                SegmentResult::Stale => {
                    report.stale_timers += timers;
                    report.stale_segments += 1;
                    "stale"
                }
            };
            self.metrics
                .timers
                .get_or_create(&ResultLabel { result })
                .inc_by(timers);
            self.metrics
                .segments
                .get_or_create(&ResultLabel { result })
                .inc();
        }
    }
}
