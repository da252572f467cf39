//! The port between the sweeper's loop and PostgreSQL: one method per database call of the
//! cycle, in the crate's own types (no sqlx here). [`crate::PgStore`] implements it over a real
//! server; the simulation implements it over its model of one. The conformance suite runs the
//! same contract checks against both.
//!
//! Every method takes a [`Slot<Maintenance>`]: admission comes before the connection, which the
//! implementation takes inside the call (see [`crate::Admission`]). Every method answers within
//! the statement timeout or fails with a transient [`crate::Error`].
//!
//! "Now" is never passed in: each call uses the database's own `now()`, and relative answers
//! (`next_in_ms`, `late_ms`) are computed by the database.

use std::future::Future;

use crate::admission::{Maintenance, Slot};
use crate::error::Result;
use crate::types::{
    ApplyResult, ClaimRequest, Claimed, ExpireStep, FailOutcome, FailRequest, FireCall, Probe,
    ProbeRequest, SegmentOutcome, ShardOrder, Switch, SwitchStates, TakeRequest, Taken, TimerOp,
    TimerRef, UsageStep,
};

/// The sweeper's database calls.
pub trait Store: Send + Sync + 'static {
    /// PROBE: one read-only call: 64 single-row index seeks, due rows counted up to a cap, the
    /// kill switches, and (unless `kv_cap` is 0) the prune's alarm. An idle pass makes this call
    /// and no other.
    fn probe(
        &self,
        slot: &Slot<Maintenance>,
        request: &ProbeRequest,
    ) -> impl Future<Output = Result<Probe>> + Send;

    /// CLAIM: takes due rows under `FOR UPDATE SKIP LOCKED` and leases them to this broker (the
    /// leased path: rows that must outlive one transaction, such as a retry narrowing to the one
    /// timer that fails). Rows
    /// come back in their pre-claim visibility order. With `request.fair`, the claim first takes
    /// one due row from each of its tenants (see [`crate::FairRound`]).
    fn claim(
        &self,
        slot: &Slot<Maintenance>,
        request: &ClaimRequest,
    ) -> impl Future<Output = Result<Claimed>> + Send;

    /// TAKE: picks due rows like the claim, appends them into their partitions and deletes them,
    /// in one statement and one transaction; no lease is written. The common path of the drain.
    fn take(
        &self,
        slot: &Slot<Maintenance>,
        request: &TakeRequest,
    ) -> impl Future<Output = Result<Taken>> + Send;

    /// FIRE: one transaction. Outcomes are per segment, in any order.
    fn fire(
        &self,
        slot: &Slot<Maintenance>,
        call: &FireCall,
    ) -> impl Future<Output = Result<Vec<SegmentOutcome>>> + Send;

    /// Puts held rows into backoff, spending an attempt when the failure counts.
    fn fail(
        &self,
        slot: &Slot<Maintenance>,
        request: &FailRequest,
    ) -> impl Future<Output = Result<Vec<FailOutcome>>> + Send;

    /// Archives exhausted rows still held with their tokens; returns how many were archived.
    fn dlq(
        &self,
        slot: &Slot<Maintenance>,
        rows: &[TimerRef],
    ) -> impl Future<Output = Result<u64>> + Send;

    /// PRUNE: deletes up to `max_rows` expired KV rows under `SKIP LOCKED`, and counts what is
    /// left (the alarm).
    fn kv_expire_step(
        &self,
        slot: &Slot<Maintenance>,
        shards: &ShardOrder,
        max_rows: u32,
    ) -> impl Future<Output = Result<ExpireStep>> + Send;

    /// ROLLUP: writes the usage of up to `max_tenants` tenants after `after_tenant`.
    fn usage_step(
        &self,
        slot: &Slot<Maintenance>,
        after_tenant: Option<&str>,
        max_tenants: u32,
    ) -> impl Future<Output = Result<UsageStep>> + Send;

    /// Reads both kill switches.
    fn read_switches(
        &self,
        slot: &Slot<Maintenance>,
    ) -> impl Future<Output = Result<SwitchStates>> + Send;

    /// Sets one kill switch.
    fn write_switch(
        &self,
        slot: &Slot<Maintenance>,
        switch: Switch,
        enabled: bool,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// A transaction the schedule seam writes into: the caller's own (the transaction wire) or one
/// the HTTP handler opens. The seam owns it from [`crate::Seam::begin`] on, so that only its
/// commit can ring the wake (see [`crate::SeamTx`]).
pub trait TimerTx: Send {
    /// Applies `ops` for `tenant` inside the transaction.
    fn apply(
        &mut self,
        tenant: &str,
        ops: &[TimerOp],
    ) -> impl Future<Output = Result<Vec<ApplyResult>>> + Send;

    /// Commits the transaction.
    fn commit(self) -> impl Future<Output = Result<()>> + Send;
}
