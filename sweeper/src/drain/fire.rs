//! The fire of claimed rows (the leased path): the plan's calls, one transaction each, their
//! outcomes counted, and a failed call handed to the failure policy, which may split it.

use std::collections::{HashMap, VecDeque};

use super::failure::{FailedCall, TimerKey, respond_to_failure};
use super::plan::plan_fire_calls;
use super::{DrainLimits, DrainReport, Drainer};
use crate::clock;
use crate::metrics::ResultLabel;
use crate::port::Store;
use crate::types::{ClaimedTimer, FireCall, Segment, SegmentOutcome, SegmentResult};

impl<S: Store> Drainer<'_, S> {
    /// Fires claimed rows in byte-capped calls. A call that fails on content is split (one
    /// destination per call, then one timer per call) until the failure is one timer's.
    pub async fn fire_claimed(
        &self,
        rows: &[ClaimedTimer],
        limits: &DrainLimits,
        report: &mut DrainReport,
    ) {
        self.fire_isolating(rows, limits, report, false).await;
    }

    /// As [`Drainer::fire_claimed`]; with `isolate`, every destination goes in a call of its own
    /// from the start (the retry of a take that failed on content).
    pub(super) async fn fire_isolating(
        &self,
        rows: &[ClaimedTimer],
        limits: &DrainLimits,
        report: &mut DrainReport,
        isolate: bool,
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
        let planned = plan_fire_calls(rows, limits.max_fire_bytes);
        let mut calls: VecDeque<FireCall> = if isolate {
            planned.into_iter().flat_map(one_segment_per_call).collect()
        } else {
            planned.into()
        };
        while let Some(call) = calls.pop_front() {
            let slot = self.admission.maintenance().await;
            self.metrics.query("fire");
            report.fire_calls += 1;
            let called = clock::tokio_now();
            let result = self.store.fire(&slot, &call).await;
            report.slowest_call = report.slowest_call.max(clock::tokio_now() - called);
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
            match respond_to_failure(class, call.segments.len(), call.timers()) {
                FailedCall::SplitSegments => {
                    tracing::warn!(%error, segments = call.segments.len(), "fire failed; replaying one segment per call");
                    for split in one_segment_per_call(call).into_iter().rev() {
                        calls.push_front(split);
                    }
                }
                FailedCall::SplitTimers => {
                    tracing::warn!(%error, timers = call.timers(), "fire failed; replaying one timer per call");
                    for split in one_timer_per_call(call).into_iter().rev() {
                        calls.push_front(split);
                    }
                }
                FailedCall::Record(cause) => {
                    if class == crate::classify::Class::Config {
                        report.config_failures += 1;
                        self.metrics.fire_config_failures.inc();
                        tracing::error!(%error, timers = call.timers(), "the fire cannot run: SQLSTATE class 42 is the deployment's fault, not the timers'; they go back without spending an attempt. Fix: apply sql/ and check the sweeper's role may execute queen.log_timers_fire_v1");
                    } else {
                        tracing::warn!(%error, timers = call.timers(), class = class.as_str(), "fire failed; backing off");
                    }
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

/// A call's segments, each in a call of its own.
fn one_segment_per_call(call: FireCall) -> Vec<FireCall> {
    call.segments
        .into_iter()
        .map(|segment| FireCall {
            segments: vec![segment],
        })
        .collect()
}

/// A call's timers, each in a call of its own (each a segment of one timer; the bytes estimate
/// is shared out evenly).
fn one_timer_per_call(call: FireCall) -> Vec<FireCall> {
    call.segments
        .into_iter()
        .flat_map(|segment| {
            let each = segment.bytes / segment.timers.len().max(1) as u64;
            let destination = segment.destination;
            segment.timers.into_iter().map(move |held| FireCall {
                segments: vec![Segment {
                    destination: destination.clone(),
                    timers: vec![held],
                    bytes: each,
                }],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use uuid::Uuid;

    use super::*;
    use crate::types::{Destination, HeldTimer};

    fn call(segments: &[(&str, usize)]) -> FireCall {
        FireCall {
            segments: segments
                .iter()
                .map(|(partition, n)| Segment {
                    destination: Destination {
                        tenant: "t".into(),
                        queue: "q".into(),
                        partition: (*partition).into(),
                    },
                    timers: (0..*n)
                        .map(|i| HeldTimer {
                            timer_key: format!("{partition}-{i}"),
                            token: Uuid::from_u128(i as u128),
                        })
                        .collect(),
                    bytes: 100 * *n as u64,
                })
                .collect(),
        }
    }

    #[test]
    fn splitting_keeps_every_timer_once_in_order() {
        let segments = one_segment_per_call(call(&[("a", 2), ("b", 3)]));
        assert_eq!(segments.len(), 2);
        assert!(segments.iter().all(|c| c.segments.len() == 1));
        let timers = one_timer_per_call(call(&[("a", 2), ("b", 3)]));
        let keys: Vec<String> = timers
            .iter()
            .map(|c| {
                assert_eq!((c.segments.len(), c.timers(), c.bytes()), (1, 1, 100));
                c.segments[0].timers[0].timer_key.clone()
            })
            .collect();
        assert_eq!(keys, ["a-0", "a-1", "b-0", "b-1", "b-2"]);
    }
}
