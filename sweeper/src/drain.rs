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
//! budget, or when a claim comes back empty (the [`DrainStop::EmptyClaim`] outcome; if it was the
//! pass's first claim, somebody else is draining and the loop backs off with jitter).
//!
//! Fires are capped in bytes, not rows: a fire's cost is the WAL it writes. [`plan_fire_calls`]
//! groups claimed rows by destination in claim order and packs them into calls of at most
//! `QUEEN_SWEEPER_MAX_FIRE_BYTES`; one oversized timer goes alone; a destination is never two
//! segments of one call.
//!
//! Failures: transient → back off without spending an attempt; permanent in a multi-segment call →
//! replay one segment per call, so a poison timer cannot block the others; exhausted → DLQ, with
//! the payload intact (it never leaves the database).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::admission::Admission;
use crate::classify::Class;
use crate::clock;
use crate::config::Config;
use crate::error::Error;
use crate::metrics::{Metrics, ResultLabel};
use crate::store::{
    ClaimedTimer, Destination, FailRow, FairRound, FireCall, Segment, SegmentResult, ShardOrder,
    Store, TimerRef,
};

/// WAL bytes a fired timer writes beyond its payload and key: the re-lock of its timer row, the
/// message row's header, its index entry, the timer row's deletion.
/// Measured 2026-12-03 (one session, PostgreSQL 15, fires of 200 timers with 512 B payloads,
/// `pg_current_wal_insert_lsn` deltas, two runs of 30): 311-313 bytes. `pg_waldump --stats` of one
/// such fire, per timer: the message insert 111 beyond the payload, its index leaf 72, the row
/// lock 54, the delete 54, and the locks and offset bumps of its 24 partitions spread over the
/// 200. It was 200, a guess. Full-page images come on top, once per page per checkpoint: 3 960 B
/// per timer in one fire whose small messages landed in the free space of old log pages, which
/// no constant can predict.
pub const ROW_OVERHEAD_BYTES: u64 = 300;

/// Backoff after a transient failure: the database was unavailable, nothing was wrong with the
/// timer. Not measured.
pub const TRANSIENT_BACKOFF: Duration = Duration::from_secs(1);
/// Backoff after the first permanent failure; it doubles per attempt. Not measured.
pub const PERMANENT_BACKOFF_BASE: Duration = Duration::from_secs(1);
/// The longest backoff. Not measured.
pub const PERMANENT_BACKOFF_MAX: Duration = Duration::from_secs(300);

/// The budgets of one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainLimits {
    pub claim_batch: u32,
    pub cycle_max_rows: u32,
    pub lease: Duration,
    pub max_fire_bytes: u64,
    pub per_tenant: u32,
    pub max_attempts: u32,
    pub form: DrainForm,
}

impl DrainLimits {
    pub fn from_config(config: &Config) -> DrainLimits {
        DrainLimits {
            claim_batch: config.claim_batch,
            cycle_max_rows: config.cycle_max_rows,
            lease: config.lease(),
            max_fire_bytes: config.max_fire_bytes,
            per_tenant: config.claim_batch,
            max_attempts: config.max_attempts,
            form: DrainForm::Shipped,
        }
    }

    /// A pass stops claiming once it has spent this long.
    pub fn lease_budget(&self) -> Duration {
        self.lease / 2
    }
}

/// How a pass drains. Production can only name [`DrainForm::Shipped`]; the naive form exists to
/// reproduce the livelock in the simulation and is compiled only with the `naive-forms` feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainForm {
    /// Claim a batch, fire it, claim the next, under the half-lease budget.
    Shipped,
    /// Claim the whole pass budget in batches, then fire: the seed's livelock.
    #[cfg(feature = "naive-forms")]
    NaiveClaimThenFire,
}

/// Why a pass stopped claiming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainStop {
    /// A claim took nothing.
    EmptyClaim,
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
    pub stop: DrainStop,
    pub claims: u32,
    pub claimed: u64,
    pub fired: u64,
    pub stale_timers: u64,
    pub stale_segments: u64,
    pub fire_calls: u32,
    pub failed_timers: u64,
    pub dead_lettered: u64,
    pub transient_failures: u32,
}

impl DrainReport {
    fn new() -> DrainReport {
        DrainReport {
            stop: DrainStop::EmptyClaim,
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

    /// The first claim of the pass took nothing: another broker holds the due work.
    pub fn first_claim_empty(&self) -> bool {
        self.stop == DrainStop::EmptyClaim && self.claimed == 0
    }
}

/// What the drain needs from its broker.
#[derive(Debug, Clone, Copy)]
pub struct Drainer<'a, S> {
    pub store: &'a S,
    pub admission: &'a Admission,
    pub metrics: &'a Metrics,
    pub shutdown: &'a CancellationToken,
}

impl<S: Store> Drainer<'_, S> {
    /// One pass of phase B. Its first claim runs the tenant-fairness round `fair`.
    pub async fn drain(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        fair: &mut FairRound,
    ) -> DrainReport {
        match limits.form {
            DrainForm::Shipped => self.drain_shipped(shards, limits, fair).await,
            #[cfg(feature = "naive-forms")]
            DrainForm::NaiveClaimThenFire => self.drain_naive(shards, limits, fair).await,
        }
    }

    async fn drain_shipped(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        fair: &mut FairRound,
    ) -> DrainReport {
        let started = clock::tokio_now();
        let mut report = DrainReport::new();
        let mut fair = Some(fair);
        loop {
            if let Some(stop) = self.budget_spent(started, &report, limits) {
                report.stop = stop;
                return report;
            }
            let batch = limits
                .claim_batch
                .min(limits.cycle_max_rows - report.claimed as u32);
            let rows = match self
                .claim(shards, limits, batch, &mut report, fair.take())
                .await
            {
                Ok(rows) if rows.is_empty() => {
                    report.stop = DrainStop::EmptyClaim;
                    return report;
                }
                Ok(rows) => rows,
                Err(class) => {
                    report.stop = DrainStop::ClaimFailed(class);
                    return report;
                }
            };
            self.fire_rows(&rows, limits, &mut report).await;
        }
    }

    /// The seed's livelock, kept to reproduce it: claim the whole pass, then fire.
    #[cfg(feature = "naive-forms")]
    async fn drain_naive(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        fair: &mut FairRound,
    ) -> DrainReport {
        let mut report = DrainReport::new();
        let mut claimed = Vec::new();
        let mut fair = Some(fair);
        loop {
            if report.claimed >= u64::from(limits.cycle_max_rows) {
                report.stop = DrainStop::RowBudget;
                break;
            }
            let batch = limits
                .claim_batch
                .min(limits.cycle_max_rows - report.claimed as u32);
            match self
                .claim(shards, limits, batch, &mut report, fair.take())
                .await
            {
                Ok(rows) if rows.is_empty() => {
                    report.stop = DrainStop::EmptyClaim;
                    break;
                }
                Ok(rows) => claimed.extend(rows),
                Err(class) => {
                    report.stop = DrainStop::ClaimFailed(class);
                    break;
                }
            }
        }
        for batch in claimed.chunks(limits.claim_batch as usize) {
            self.fire_rows(batch, limits, &mut report).await;
        }
        report
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

    async fn claim(
        &self,
        shards: &ShardOrder,
        limits: &DrainLimits,
        batch: u32,
        report: &mut DrainReport,
        fair: Option<&mut FairRound>,
    ) -> Result<Vec<ClaimedTimer>, Class> {
        let slot = self.admission.maintenance().await;
        self.metrics.query("claim");
        report.claims += 1;
        match self
            .store
            .claim(&slot, shards, limits.lease, batch, limits.per_tenant, fair)
            .await
        {
            Ok(rows) => {
                assert!(
                    rows.len() <= batch as usize,
                    "a claim returned {} rows for a batch of {batch}",
                    rows.len()
                );
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

    /// Fires claimed rows in byte-capped calls, replaying segments one per call after a
    /// permanent failure.
    async fn fire_rows(
        &self,
        rows: &[ClaimedTimer],
        limits: &DrainLimits,
        report: &mut DrainReport,
    ) {
        let attempts: HashMap<(&str, &str, &str), u32> = rows
            .iter()
            .map(|r| {
                (
                    (
                        r.destination.tenant.as_str(),
                        r.destination.queue.as_str(),
                        r.timer_key.as_str(),
                    ),
                    r.attempts,
                )
            })
            .collect();
        let mut calls: VecDeque<FireCall> = plan_fire_calls(rows, limits.max_fire_bytes).into();
        while let Some(call) = calls.pop_front() {
            let slot = self.admission.maintenance().await;
            self.metrics.query("fire");
            report.fire_calls += 1;
            match self.store.fire(&slot, &call).await {
                Ok(outcomes) => {
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
                Err(error) => {
                    drop(slot);
                    let class = error.class();
                    self.metrics.failed(class);
                    if class != Class::Transient && call.segments.len() > 1 {
                        tracing::warn!(%error, segments = call.segments.len(), "fire failed; replaying one segment per call");
                        for segment in call.segments.into_iter().rev() {
                            calls.push_front(FireCall {
                                segments: vec![segment],
                            });
                        }
                        continue;
                    }
                    tracing::warn!(%error, timers = call.timers(), class = class.as_str(), "fire failed; backing off");
                    self.fail_call(&call, &error, &attempts, limits, report)
                        .await;
                }
            }
        }
    }

    async fn fail_call(
        &self,
        call: &FireCall,
        error: &Error,
        attempts: &HashMap<(&str, &str, &str), u32>,
        limits: &DrainLimits,
        report: &mut DrainReport,
    ) {
        let transient = error.class() == Class::Transient;
        if transient {
            report.transient_failures += 1;
        }
        let rows: Vec<FailRow> = call
            .segments
            .iter()
            .flat_map(|segment| {
                segment.timers.iter().map(|held| {
                    let key = (
                        segment.destination.tenant.as_str(),
                        segment.destination.queue.as_str(),
                        held.timer_key.as_str(),
                    );
                    FailRow {
                        timer: TimerRef {
                            tenant: segment.destination.tenant.clone(),
                            queue: segment.destination.queue.clone(),
                            timer_key: held.timer_key.clone(),
                            token: held.token,
                        },
                        backoff: backoff(attempts.get(&key).copied().unwrap_or(0), transient),
                    }
                })
            })
            .collect();
        report.failed_timers += rows.len() as u64;
        let slot = self.admission.maintenance().await;
        self.metrics.query("fail");
        let outcomes = match self
            .store
            .fail(
                &slot,
                &rows,
                &error.to_string(),
                transient,
                limits.max_attempts,
            )
            .await
        {
            Ok(outcomes) => outcomes,
            Err(fail_error) => {
                // The rows stay held until their lease ends, then another pass retries them.
                self.metrics.failed(fail_error.class());
                tracing::warn!(error = %fail_error, "recording the failure failed; the lease will return the rows");
                return;
            }
        };
        let exhausted: Vec<TimerRef> = outcomes
            .iter()
            .filter(|o| o.exhausted)
            .filter_map(|o| {
                rows.iter()
                    .find(|r| {
                        r.timer.tenant == o.tenant
                            && r.timer.queue == o.queue
                            && r.timer.timer_key == o.timer_key
                    })
                    .map(|r| r.timer.clone())
            })
            .collect();
        if exhausted.is_empty() {
            return;
        }
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
}

/// How long a failed timer waits before it can be claimed again. Pure.
pub fn backoff(attempts_before: u32, transient: bool) -> Duration {
    if transient {
        return TRANSIENT_BACKOFF;
    }
    let factor = 1u32
        .checked_shl(attempts_before.min(31))
        .unwrap_or(u32::MAX);
    PERMANENT_BACKOFF_BASE
        .saturating_mul(factor)
        .min(PERMANENT_BACKOFF_MAX)
}

/// Estimated bytes one claimed timer writes when fired.
pub fn fire_bytes(row: &ClaimedTimer) -> u64 {
    row.payload_bytes + row.timer_key.len() as u64 + ROW_OVERHEAD_BYTES
}

/// Groups claimed rows by destination, in claim order, and packs them into fire calls of at most
/// `max_fire_bytes`. A destination's rows stay in claim order; one call never holds two segments
/// of the same destination; a timer bigger than the cap goes alone. Pure.
pub fn plan_fire_calls(rows: &[ClaimedTimer], max_fire_bytes: u64) -> Vec<FireCall> {
    let mut order: Vec<&Destination> = Vec::new();
    let mut groups: HashMap<&Destination, Vec<&ClaimedTimer>> = HashMap::new();
    for row in rows {
        let group = groups.entry(&row.destination).or_default();
        if group.is_empty() {
            order.push(&row.destination);
        }
        group.push(row);
    }

    let mut calls = Vec::new();
    let mut call = FireCall::default();
    let mut call_bytes = 0u64;
    for destination in order {
        let mut segment = Segment {
            destination: destination.clone(),
            timers: Vec::new(),
            bytes: 0,
        };
        for row in &groups[destination] {
            let bytes = fire_bytes(row);
            let call_has_timers = call_bytes > 0 || !segment.timers.is_empty();
            if call_has_timers && call_bytes + bytes > max_fire_bytes {
                if !segment.timers.is_empty() {
                    let full = std::mem::replace(
                        &mut segment,
                        Segment {
                            destination: destination.clone(),
                            timers: Vec::new(),
                            bytes: 0,
                        },
                    );
                    call.segments.push(full);
                }
                calls.push(std::mem::take(&mut call));
                call_bytes = 0;
            }
            segment.timers.push(row.held());
            segment.bytes += bytes;
            call_bytes += bytes;
        }
        call.segments.push(segment);
    }
    if !call.segments.is_empty() {
        calls.push(call);
    }
    debug_assert_eq!(
        calls.iter().map(FireCall::timers).sum::<usize>(),
        rows.len()
    );
    calls
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use uuid::Uuid;

    use super::*;

    fn row(
        tenant: &str,
        queue: &str,
        partition: &str,
        key: &str,
        payload_bytes: u64,
    ) -> ClaimedTimer {
        ClaimedTimer {
            destination: Destination {
                tenant: tenant.into(),
                queue: queue.into(),
                partition: partition.into(),
            },
            timer_key: key.into(),
            token: Uuid::from_u128(u128::from(key.len() as u64) << 64 | u128::from(payload_bytes)),
            attempts: 0,
            late_ms: 0,
            payload_bytes,
        }
    }

    /// The invariants every plan must keep, checked on every test's output.
    fn check_plan(rows: &[ClaimedTimer], calls: &[FireCall], cap: u64) {
        let mut seen = Vec::new();
        for call in calls {
            assert!(!call.segments.is_empty(), "no empty calls");
            let destinations: HashSet<&Destination> =
                call.segments.iter().map(|s| &s.destination).collect();
            assert_eq!(
                destinations.len(),
                call.segments.len(),
                "a destination is one segment per call"
            );
            assert!(
                call.bytes() <= cap || call.timers() == 1,
                "over the cap with {} timers",
                call.timers()
            );
            for segment in &call.segments {
                assert!(!segment.timers.is_empty(), "no empty segments");
                for held in &segment.timers {
                    seen.push((segment.destination.clone(), held.timer_key.clone()));
                }
            }
        }
        assert_eq!(seen.len(), rows.len(), "every row exactly once");
        // Per destination, claim order is kept across calls.
        for destination in rows.iter().map(|r| &r.destination).collect::<HashSet<_>>() {
            let claimed: Vec<&str> = rows
                .iter()
                .filter(|r| &r.destination == destination)
                .map(|r| r.timer_key.as_str())
                .collect();
            let planned: Vec<&str> = seen
                .iter()
                .filter(|(d, _)| d == destination)
                .map(|(_, k)| k.as_str())
                .collect();
            assert_eq!(claimed, planned);
        }
    }

    #[test]
    fn rows_are_grouped_by_destination_in_claim_order() {
        let rows = vec![
            row("t", "q", "p1", "a", 10),
            row("t", "q", "p2", "b", 10),
            row("t", "q", "p1", "c", 10),
            row("u", "q", "p1", "d", 10),
        ];
        let calls = plan_fire_calls(&rows, 1 << 20);
        check_plan(&rows, &calls, 1 << 20);
        assert_eq!(calls.len(), 1);
        let segments: Vec<(&str, &str, Vec<&str>)> = calls[0]
            .segments
            .iter()
            .map(|s| {
                (
                    s.destination.tenant.as_str(),
                    s.destination.partition.as_str(),
                    s.timers.iter().map(|t| t.timer_key.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            segments,
            vec![
                ("t", "p1", vec!["a", "c"]),
                ("t", "p2", vec!["b"]),
                ("u", "p1", vec!["d"])
            ]
        );
    }

    #[test]
    fn a_batch_over_the_cap_splits_into_calls_under_it() {
        let rows: Vec<ClaimedTimer> = (0..10)
            .map(|i| row("t", "q", &format!("p{}", i % 3), &format!("k{i}"), 1000))
            .collect();
        let cap = 3 * (1000 + 2 + ROW_OVERHEAD_BYTES);
        let calls = plan_fire_calls(&rows, cap);
        check_plan(&rows, &calls, cap);
        assert_eq!(calls.len(), 4, "10 timers of which 3 fit a call");
    }

    #[test]
    fn exactly_at_the_cap_fits_and_one_byte_over_splits() {
        let rows = vec![row("t", "q", "p", "a", 800), row("t", "q", "p", "b", 800)];
        let one = fire_bytes(&rows[0]);
        let calls = plan_fire_calls(&rows, 2 * one);
        assert_eq!(calls.len(), 1);
        let calls = plan_fire_calls(&rows, 2 * one - 1);
        check_plan(&rows, &calls, 2 * one - 1);
        assert_eq!(calls.len(), 2);
    }

    #[test]
    fn one_oversized_timer_goes_alone() {
        let rows = vec![
            row("t", "q", "p", "a", 10),
            row("t", "q", "p", "big", 10_000),
            row("t", "q", "p", "c", 10),
        ];
        let calls = plan_fire_calls(&rows, 1000);
        check_plan(&rows, &calls, 1000);
        let sizes: Vec<usize> = calls.iter().map(FireCall::timers).collect();
        assert_eq!(sizes, vec![1, 1, 1]);
        assert_eq!(calls[1].segments[0].timers[0].timer_key, "big");
    }

    #[test]
    fn a_split_destination_is_one_segment_in_each_call() {
        let rows: Vec<ClaimedTimer> = (0..7)
            .map(|i| row("t", "q", "p", &format!("k{i}"), 500))
            .collect();
        let cap = 2 * fire_bytes(&rows[0]);
        let calls = plan_fire_calls(&rows, cap);
        check_plan(&rows, &calls, cap);
        assert_eq!(calls.len(), 4);
        assert!(calls.iter().all(|c| c.segments.len() == 1));
    }

    #[test]
    fn nothing_claimed_plans_no_call() {
        assert!(plan_fire_calls(&[], 1000).is_empty());
    }

    #[test]
    fn many_shapes_keep_the_invariants() {
        // A deterministic spread of sizes, destinations and caps.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..300 {
            let n = (next() % 60) as usize;
            let rows: Vec<ClaimedTimer> = (0..n)
                .map(|i| {
                    let d = next() % 5;
                    row(
                        &format!("t{}", d % 2),
                        "q",
                        &format!("p{d}"),
                        &format!("k{i}"),
                        next() % 5000,
                    )
                })
                .collect();
            let cap = 1 + next() % 20_000;
            check_plan(&rows, &plan_fire_calls(&rows, cap), cap);
        }
    }

    #[test]
    fn a_transient_failure_backs_off_the_same_whatever_the_attempts() {
        assert_eq!(backoff(0, true), TRANSIENT_BACKOFF);
        assert_eq!(backoff(7, true), TRANSIENT_BACKOFF);
    }

    #[test]
    fn permanent_backoff_doubles_per_attempt_up_to_the_ceiling() {
        assert_eq!(backoff(0, false), Duration::from_secs(1));
        assert_eq!(backoff(1, false), Duration::from_secs(2));
        assert_eq!(backoff(4, false), Duration::from_secs(16));
        assert_eq!(backoff(9, false), PERMANENT_BACKOFF_MAX);
        assert_eq!(backoff(u32::MAX, false), PERMANENT_BACKOFF_MAX);
    }
}
