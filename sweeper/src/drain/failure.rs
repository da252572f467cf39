//! The failure policy of the fire: what a failed call means for its timers, how long they back
//! off, and recording it.
//!
//! - Transient (the database could not do it now) → every timer of the call backs off
//!   [`TRANSIENT_BACKOFF`] without spending an attempt.
//! - Config (SQLSTATE class 42: a missing function or table, a privilege) → the deployment's
//!   fault, not the timers': they go back the same way, without spending an attempt, and nothing
//!   is dead-lettered; the error is logged loudly and the pass sleeps the ceiling.
//! - Permanent, in a call of several segments → the call is replayed one segment per call; in a
//!   segment of several timers → one timer per call. A failure is only a timer's own once it is
//!   alone, so a poison timer among 199 innocents costs the innocents nothing.
//! - Permanent, one timer alone → it spends an attempt and backs off exponentially; a timer out of
//!   attempts goes to the DLQ with its payload intact (the payload never leaves the database).
//!
//! No claim outlives its broker's knowledge: when recording the failure fails too (the database
//! went away mid-fire), the broker retries the record with backoff ([`RECORD_RETRY_FIRST`]
//! doubling to [`RECORD_RETRY_MAX`]) for up to half the lease, and a retried transient record
//! releases the rows at once (backoff 0): the database answering again is the event they were
//! waiting for. Without it a live broker left its held rows to the lease, 30 s.

use std::collections::HashMap;
use std::time::Duration;

use super::{DrainLimits, DrainReport, Drainer};
use crate::classify::Class;
use crate::clock;
use crate::error::Error;
use crate::port::Store;
use crate::types::{FailCause, FailOutcome, FailRequest, FailRow, FireCall, TimerRef};

/// Backoff after a transient failure: the database was unavailable, nothing was wrong with the
/// timer. Not measured.
pub const TRANSIENT_BACKOFF: Duration = Duration::from_secs(1);
/// Backoff after the first counted failure; it doubles per attempt. Not measured.
pub const PERMANENT_BACKOFF_BASE: Duration = Duration::from_secs(1);
/// The longest backoff. Not measured.
pub const PERMANENT_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// The first wait before recording a failure again after the record itself failed; it doubles per
/// retry. Short, because the rows it holds are invisible to every other broker until recorded.
/// Not measured.
pub const RECORD_RETRY_FIRST: Duration = Duration::from_millis(50);
/// The longest wait between retries of a failed record: after the database answers again, the
/// rows it holds are released within this long. Under the target of one second. Not measured.
pub const RECORD_RETRY_MAX: Duration = Duration::from_millis(400);

/// What to do about a fire call that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailedCall {
    /// Fire its segments again, one per call.
    SplitSegments,
    /// Fire its one segment's timers again, one per call.
    SplitTimers,
    /// Put its timers into backoff, spending an attempt or not.
    Record(FailCause),
}

/// The response to a call of `segments` segments and `timers` timers that failed with `class`.
/// Pure.
pub fn respond_to_failure(class: Class, segments: usize, timers: usize) -> FailedCall {
    match class {
        Class::Transient | Class::Config => FailedCall::Record(FailCause::Transient),
        Class::Permanent if segments > 1 => FailedCall::SplitSegments,
        Class::Permanent if timers > 1 => FailedCall::SplitTimers,
        Class::Permanent => FailedCall::Record(FailCause::Counted),
    }
}

/// How long a failed timer waits before it can be claimed again. Pure.
pub fn backoff(attempts_before: u32, cause: FailCause) -> Duration {
    if cause == FailCause::Transient {
        return TRANSIENT_BACKOFF;
    }
    let factor = 1u32
        .checked_shl(attempts_before.min(31))
        .unwrap_or(u32::MAX);
    PERMANENT_BACKOFF_BASE
        .saturating_mul(factor)
        .min(PERMANENT_BACKOFF_MAX)
}

/// A claimed timer's full key, borrowed.
pub(super) type TimerKey<'a> = (&'a str, &'a str, &'a str);

impl<S: Store> Drainer<'_, S> {
    /// Puts every timer of `call` into backoff and dead-letters those out of attempts. When
    /// recording fails, it is retried ([`Drainer::record_until_done`]); only when the retries give
    /// up do the rows stay held until their lease ends.
    pub(super) async fn record_failure(
        &self,
        call: &FireCall,
        error: &Error,
        cause: FailCause,
        attempts: &HashMap<TimerKey<'_>, u32>,
        limits: &DrainLimits,
        report: &mut DrainReport,
    ) {
        if cause == FailCause::Transient && error.class() == Class::Transient {
            report.transient_failures += 1;
        }
        let mut request = FailRequest {
            rows: fail_rows(call, cause, attempts),
            error: error.to_string(),
            cause,
            max_attempts: limits.max_attempts,
        };
        report.failed_timers += request.rows.len() as u64;
        let Some(outcomes) = self.record_until_done(&mut request, limits).await else {
            return;
        };
        let by_key: HashMap<TimerKey<'_>, &TimerRef> = request
            .rows
            .iter()
            .map(|row| {
                let t = &row.timer;
                (
                    (t.tenant.as_str(), t.queue.as_str(), t.timer_key.as_str()),
                    t,
                )
            })
            .collect();
        let exhausted: Vec<TimerRef> = outcomes
            .iter()
            .filter(|o| o.exhausted)
            .filter_map(|o| {
                by_key
                    .get(&(o.tenant.as_str(), o.queue.as_str(), o.timer_key.as_str()))
                    .map(|t| (*t).clone())
            })
            .collect();
        if exhausted.is_empty() {
            return;
        }
        let slot = self.admission.maintenance().await;
        self.metrics.query("dlq");
        match self.store.dlq(&slot, &exhausted).await {
            Ok(archived) => {
                report.dead_lettered += archived;
                self.metrics.dlq.inc_by(archived);
                tracing::warn!(
                    archived,
                    "timers exhausted their attempts and went to the DLQ"
                );
            }
            Err(dlq_error) => {
                self.metrics.failed(dlq_error.class());
                tracing::warn!(error = %dlq_error, "archiving exhausted timers failed; the lease will return them");
            }
        }
    }

    /// Records `request`, retrying a transient failure of the record itself with backoff for up
    /// to half the lease (after that the lease is about to return the rows anyway) or until
    /// shutdown. A retry releases transient rows at once: by the time it succeeds the database
    /// answers again, which is what their backoff was waiting for. Answers the outcomes, or
    /// `None` when the record was given up (logged; the lease returns the rows).
    async fn record_until_done(
        &self,
        request: &mut FailRequest,
        limits: &DrainLimits,
    ) -> Option<Vec<FailOutcome>> {
        let give_up = clock::tokio_now() + limits.lease_budget();
        let mut wait = RECORD_RETRY_FIRST;
        loop {
            let slot = self.admission.maintenance().await;
            self.metrics.query("fail");
            let result = self.store.fail(&slot, request).await;
            drop(slot);
            let error = match result {
                Ok(outcomes) => {
                    if outcomes.len() < request.rows.len() {
                        // The record skips rows it does not hold with the token, or finds
                        // locked this instant (SKIP LOCKED): those wait out their lease.
                        tracing::warn!(
                            recorded = outcomes.len(),
                            failed = request.rows.len(),
                            "some failed timers were not recorded (no longer held under this broker's token, or locked this instant); the lease returns them"
                        );
                    }
                    return Some(outcomes);
                }
                Err(error) => error,
            };
            self.metrics.failed(error.class());
            let retry = error.class() == Class::Transient
                && !self.shutdown.is_cancelled()
                && clock::tokio_now() + wait <= give_up;
            if !retry {
                tracing::warn!(%error, "recording the failure failed; the lease will return the rows");
                return None;
            }
            tracing::warn!(%error, retry_in_ms = wait.as_millis() as u64, "recording the failure failed; retrying, and releasing the rows once the database answers");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(RECORD_RETRY_MAX);
            release_at_once(request);
        }
    }
}

/// Makes a retried record release its rows at once when the failure spent no attempt; a counted
/// failure is the timer's own and keeps its backoff. Pure.
fn release_at_once(request: &mut FailRequest) {
    if request.cause == FailCause::Transient {
        for row in &mut request.rows {
            row.backoff = Duration::ZERO;
        }
    }
}

/// The rows of a failed call, each with the backoff its attempts so far give it.
fn fail_rows(
    call: &FireCall,
    cause: FailCause,
    attempts: &HashMap<TimerKey<'_>, u32>,
) -> Vec<FailRow> {
    call.segments
        .iter()
        .flat_map(|segment| {
            let d = &segment.destination;
            segment.timers.iter().map(move |held| {
                let key = (d.tenant.as_str(), d.queue.as_str(), held.timer_key.as_str());
                FailRow {
                    timer: TimerRef {
                        tenant: d.tenant.clone(),
                        queue: d.queue.clone(),
                        timer_key: held.timer_key.clone(),
                        token: held.token,
                    },
                    backoff: backoff(attempts.get(&key).copied().unwrap_or(0), cause),
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transient_failure_backs_off_the_same_whatever_the_attempts() {
        assert_eq!(backoff(0, FailCause::Transient), TRANSIENT_BACKOFF);
        assert_eq!(backoff(7, FailCause::Transient), TRANSIENT_BACKOFF);
    }

    #[test]
    fn counted_backoff_doubles_per_attempt_up_to_the_ceiling() {
        let counted = FailCause::Counted;
        assert_eq!(backoff(0, counted), Duration::from_secs(1));
        assert_eq!(backoff(1, counted), Duration::from_secs(2));
        assert_eq!(backoff(4, counted), Duration::from_secs(16));
        assert_eq!(backoff(9, counted), PERMANENT_BACKOFF_MAX);
        assert_eq!(backoff(u32::MAX, counted), PERMANENT_BACKOFF_MAX);
    }

    #[test]
    fn a_content_failure_narrows_to_one_timer_before_it_spends_an_attempt() {
        assert_eq!(
            respond_to_failure(Class::Permanent, 2, 10),
            FailedCall::SplitSegments
        );
        assert_eq!(
            respond_to_failure(Class::Permanent, 1, 10),
            FailedCall::SplitTimers
        );
        assert_eq!(
            respond_to_failure(Class::Permanent, 1, 1),
            FailedCall::Record(FailCause::Counted)
        );
    }

    #[test]
    fn transient_and_config_failures_never_spend_an_attempt_nor_split() {
        for class in [Class::Transient, Class::Config] {
            for (segments, timers) in [(1, 1), (1, 5), (3, 9)] {
                assert_eq!(
                    respond_to_failure(class, segments, timers),
                    FailedCall::Record(FailCause::Transient),
                    "{class:?}"
                );
            }
        }
    }
}
