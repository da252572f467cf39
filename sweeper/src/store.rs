//! The port between the sweeper's loop and PostgreSQL: one method per database call of the
//! cycle, in the crate's own types (no sqlx here). [`pg`] implements it over a real server; the
//! simulation implements it over its model of one. The conformance suite runs the same contract
//! checks against both.
//!
//! Every method takes a [`Slot<Maintenance>`]: admission comes before the connection, which the
//! implementation takes inside the call (see [`crate::admission`]). Every method answers within
//! the statement timeout or fails with a transient [`Error`].
//!
//! "Now" is never passed in: each call uses the database's own `now()`, and relative answers
//! (`next_in_ms`, `late_ms`) are computed by the database.

pub mod pg;
pub mod pg_api;

use std::future::Future;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::admission::{Maintenance, Slot};
use crate::error::Error;
use crate::timers::{ApplyResult, TimerOp};

/// Shards of `log_timers` and `kv`: 64, fixed forever by the schema.
pub const SHARD_COUNT: u8 = 64;

/// The order a broker visits the 64 shards in: a rotation of `0..64` starting at its starting
/// shard. Every order covers every shard; only where it starts differs between brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardOrder {
    shards: Vec<u8>,
}

impl ShardOrder {
    pub fn starting_at(start: u8) -> ShardOrder {
        let start = start % SHARD_COUNT;
        let shards = (0..SHARD_COUNT)
            .map(|i| (start + i) % SHARD_COUNT)
            .collect();
        ShardOrder { shards }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.shards
    }

    pub fn first(&self) -> u8 {
        self.shards[0]
    }
}

/// The tenant-fairness round of a pass's first claim: one due row from each of `tenants` tenants,
/// visiting tenants in key order after `after` (wrapping), before the shard rounds. A tenant with
/// a huge backlog then cannot starve another tenant's single due timer for more than one pass:
/// the index orders rows by visibility, whoever they belong to. The claim moves `after` to the
/// last tenant it visited, so the next pass continues there.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FairRound {
    pub tenants: u32,
    pub after: Option<String>,
}

/// PROBE: what is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// Milliseconds until the earliest row becomes visible; 0 when something is due; `None` when
    /// the table is empty.
    pub next_in_ms: Option<u64>,
    /// Rows claimable now, counted up to the cap.
    pub due: u32,
    pub due_capped: bool,
    /// How long the oldest due shard head has been past its delivery instant.
    pub late_ms: u64,
}

/// Where a timer's message goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Destination {
    pub tenant: String,
    pub queue: String,
    pub partition: String,
}

/// A row this broker claimed: in its hands until the lease ends, proven by `token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimedTimer {
    pub destination: Destination,
    pub timer_key: String,
    pub token: Uuid,
    pub attempts: u32,
    pub late_ms: u64,
    /// Size of the payload the fire will write (the payload itself never leaves the database).
    pub payload_bytes: u64,
}

impl ClaimedTimer {
    pub fn held(&self) -> HeldTimer {
        HeldTimer {
            timer_key: self.timer_key.clone(),
            token: self.token,
        }
    }

    pub fn timer_ref(&self) -> TimerRef {
        TimerRef {
            tenant: self.destination.tenant.clone(),
            queue: self.destination.queue.clone(),
            timer_key: self.timer_key.clone(),
            token: self.token,
        }
    }
}

/// A timer key with the token that proves this broker holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldTimer {
    pub timer_key: String,
    pub token: Uuid,
}

/// The claimed timers of one destination in one fire call, in claim order. All or nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub destination: Destination,
    pub timers: Vec<HeldTimer>,
    /// Estimated bytes this segment writes.
    pub bytes: u64,
}

/// One fire transaction: segments of distinct destinations.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FireCall {
    pub segments: Vec<Segment>,
}

impl FireCall {
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }

    pub fn timers(&self) -> usize {
        self.segments.iter().map(|s| s.timers.len()).sum()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SegmentResult {
    /// Every row was still held: the messages are in the log from `first_offset` on.
    Fired { first_offset: u64 },
    /// Some row was not: nothing was written, and what this broker still held is released.
    Stale,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentOutcome {
    /// Index into [`FireCall::segments`].
    pub segment: usize,
    pub result: SegmentResult,
    pub timers: u32,
}

/// A held timer identified in full (tenant, queue, key) with its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerRef {
    pub tenant: String,
    pub queue: String,
    pub timer_key: String,
    pub token: Uuid,
}

/// A held timer whose fire failed, and how long it should back off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailRow {
    pub timer: TimerRef,
    pub backoff: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailOutcome {
    pub tenant: String,
    pub queue: String,
    pub timer_key: String,
    pub attempts: u32,
    /// Out of attempts: still held, to be handed to [`Store::dlq`].
    pub exhausted: bool,
}

/// PRUNE: one step of the KV expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExpireStep {
    pub deleted: u64,
    /// The scan found fewer expired rows than the budget.
    pub done: bool,
    /// Expired rows still present after the step (the alarm), counted up to a cap.
    pub unpruned: u64,
    pub unpruned_capped: bool,
    /// How long the oldest still-present expired row has been dead.
    pub lag_ms: u64,
}

/// ROLLUP: one step of the usage rollup.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UsageStep {
    pub tenants: u32,
    pub zeroed: u32,
    pub done: bool,
    /// Pass it as `after_tenant` to the next step.
    pub last_tenant: Option<String>,
}

/// The two operator kill switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Switch {
    /// New schedules are refused; cancels still work.
    Schedule,
    /// The fire stops; the probe keeps the backlog gauge true.
    Fire,
}

impl Switch {
    /// The key in `queen.system_state`.
    pub fn key(self) -> &'static str {
        match self {
            Switch::Schedule => "timers_schedule_enabled",
            Switch::Fire => "timers_fire_enabled",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchStates {
    pub schedule_enabled: bool,
    pub fire_enabled: bool,
}

/// The sweeper's database calls.
pub trait Store: Send + Sync + 'static {
    fn probe(
        &self,
        slot: &Slot<Maintenance>,
        shards: &ShardOrder,
        due_cap: u32,
    ) -> impl Future<Output = Result<Probe, Error>> + Send;

    /// Claims up to `max_rows` due rows, at most `per_tenant` of one tenant, visiting shards in
    /// `shards` order. Rows come back in their pre-claim visibility order. With `fair`, the claim
    /// first takes one due row from each of `fair.tenants` tenants after `fair.after`, and moves
    /// `fair.after` on (see [`FairRound`]).
    fn claim(
        &self,
        slot: &Slot<Maintenance>,
        shards: &ShardOrder,
        lease: Duration,
        max_rows: u32,
        per_tenant: u32,
        fair: Option<&mut FairRound>,
    ) -> impl Future<Output = Result<Vec<ClaimedTimer>, Error>> + Send;

    /// One fire transaction. Outcomes are per segment, in any order.
    fn fire(
        &self,
        slot: &Slot<Maintenance>,
        call: &FireCall,
    ) -> impl Future<Output = Result<Vec<SegmentOutcome>, Error>> + Send;

    fn fail(
        &self,
        slot: &Slot<Maintenance>,
        rows: &[FailRow],
        error: &str,
        transient: bool,
        max_attempts: u32,
    ) -> impl Future<Output = Result<Vec<FailOutcome>, Error>> + Send;

    /// Archives exhausted rows still held with their tokens; returns how many were archived.
    fn dlq(
        &self,
        slot: &Slot<Maintenance>,
        rows: &[TimerRef],
    ) -> impl Future<Output = Result<u64, Error>> + Send;

    fn kv_expire_step(
        &self,
        slot: &Slot<Maintenance>,
        shards: &ShardOrder,
        max_rows: u32,
    ) -> impl Future<Output = Result<ExpireStep, Error>> + Send;

    fn usage_step(
        &self,
        slot: &Slot<Maintenance>,
        after_tenant: Option<&str>,
        max_tenants: u32,
    ) -> impl Future<Output = Result<UsageStep, Error>> + Send;

    fn read_switches(
        &self,
        slot: &Slot<Maintenance>,
    ) -> impl Future<Output = Result<SwitchStates, Error>> + Send;

    fn write_switch(
        &self,
        slot: &Slot<Maintenance>,
        switch: Switch,
        enabled: bool,
    ) -> impl Future<Output = Result<(), Error>> + Send;
}

/// A transaction the schedule seam writes into: the caller's own (the transaction wire) or one
/// the HTTP handler opens. See [`crate::timers`] for why commit is consumed by the seam.
pub trait TimerTx: Send {
    fn apply(
        &mut self,
        tenant: &str,
        ops: &[TimerOp],
    ) -> impl Future<Output = Result<Vec<ApplyResult>, Error>> + Send;

    fn commit(self) -> impl Future<Output = Result<(), Error>> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shard_order_covers_all_64_shards_once() {
        for start in 0..=255u8 {
            let order = ShardOrder::starting_at(start);
            let mut seen = order.as_slice().to_vec();
            assert_eq!(order.first(), start % 64);
            seen.sort_unstable();
            assert_eq!(seen, (0..64).collect::<Vec<u8>>());
        }
    }

    #[test]
    fn consecutive_starts_rotate_by_one() {
        let a = ShardOrder::starting_at(63);
        assert_eq!(&a.as_slice()[..3], &[63, 0, 1]);
    }
}
