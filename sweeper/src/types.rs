//! The sweeper's domain types: what the port carries between the cycle and PostgreSQL, and what
//! the schedule seam takes and answers. A leaf: nothing here depends on another module of the
//! crate, so every other module can name these without importing each other.

use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use uuid::Uuid;

/// Shards of `log_timers` and `kv`: 64, fixed forever by the schema.
pub const SHARD_COUNT: u8 = 64;

/// The order a broker visits the 64 shards in: a rotation of `0..64` starting at its starting
/// shard. Every order covers every shard; only where it starts differs between brokers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardOrder {
    shards: Vec<u8>,
}

impl ShardOrder {
    /// The rotation of `0..64` that begins at `start` (taken modulo 64).
    pub fn starting_at(start: u8) -> ShardOrder {
        let start = start % SHARD_COUNT;
        let shards = (0..SHARD_COUNT)
            .map(|i| (start + i) % SHARD_COUNT)
            .collect();
        ShardOrder { shards }
    }

    /// The shards in visiting order.
    pub fn as_slice(&self) -> &[u8] {
        &self.shards
    }

    /// The shard the order starts at.
    pub fn first(&self) -> u8 {
        self.shards[0]
    }
}

/// The tenant-fairness round every take or claim runs first: one due row from each of `tenants` tenants,
/// visiting tenants in key order after `after` (wrapping), before the shard rounds. A tenant with
/// a huge backlog then cannot starve another tenant's single due timer for more than one call:
/// the index orders rows by visibility, whoever they belong to. The claim moves `after` to the
/// last tenant it visited, so the next pass continues there.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FairRound {
    /// Tenants served one row each; 0 turns the round off.
    pub tenants: u32,
    /// The tenant the previous round ended at; `None` starts from the first tenant.
    pub after: Option<String>,
}

/// A shard for `text` that is the same in every process and every run (FNV-1a, modulo 64): a
/// broker's starting shard comes from its identity this way. The simulation's model uses it in
/// place of PostgreSQL's `hashtextextended`, whose values do not matter, only that they are fixed
/// and spread evenly.
pub fn stable_shard(text: &str) -> u8 {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    (hash % u64::from(SHARD_COUNT)) as u8
}

/// CLAIM: what to take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimRequest {
    /// The order shards are visited in.
    pub shards: ShardOrder,
    /// How long the claimed rows stay in this broker's hands.
    pub lease: Duration,
    /// Rows to take at most.
    pub max_rows: u32,
    /// Rows of one tenant at most.
    pub per_tenant: u32,
    /// The tenant-fairness round to run before the shard rounds, if any.
    pub fair: Option<FairRound>,
}

impl ClaimRequest {
    /// A claim of up to `max_rows` rows with no per-tenant cap below that and no fairness round.
    pub fn rows(shards: ShardOrder, lease: Duration, max_rows: u32) -> ClaimRequest {
        ClaimRequest {
            shards,
            lease,
            max_rows,
            per_tenant: max_rows,
            fair: None,
        }
    }
}

/// CLAIM: what was taken.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Claimed {
    /// The claimed rows, in their pre-claim visibility order.
    pub rows: Vec<ClaimedTimer>,
    /// The last tenant the fairness round visited, where the next round continues; `None` when
    /// the round did not run or took nothing.
    pub fair_after: Option<String>,
}

/// TAKE: due rows picked, fired and deleted in one transaction (the fire, version 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakeRequest {
    /// The order shards are visited in.
    pub shards: ShardOrder,
    /// Rows to take at most.
    pub max_rows: u32,
    /// Rows of one tenant at most.
    pub per_tenant: u32,
    /// The tenant-fairness round to run before the shard rounds, if any.
    pub fair: Option<FairRound>,
    /// The take stops before the row that would cross this many estimated bytes (a single row
    /// over it goes alone): `QUEEN_SWEEPER_MAX_FIRE_BYTES`.
    pub max_bytes: u64,
    /// Bytes counted per row beyond its payload and key ([`crate::ROW_OVERHEAD_BYTES`]).
    pub row_overhead: u64,
    /// Partitions another transaction holds are skipped, not waited for, and the rows bound for
    /// them left due (the pass's own takes while its bulk lane runs).
    #[serde(default)]
    pub skip_held_partitions: bool,
    /// Only rows due at least this many milliseconds ago are taken (the bulk lane's takes: the
    /// backlog its pass found, not what fell due since); lateness still counts from now.
    #[serde(default)]
    pub due_ms_ago: u64,
    /// Only rows due less than this many milliseconds ago are taken (the own lane's takes beside
    /// the bulk lane: what fell due since the pass began); `None`: every due row.
    #[serde(default)]
    pub due_within_ms: Option<u64>,
}

/// TAKE: what one destination received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakenDestination {
    /// Where the messages went.
    pub destination: Destination,
    /// The partition offset of the first message.
    pub first_offset: u64,
    /// Each fired timer's lateness at the take, in write order (one entry per timer).
    pub late_ms: Vec<u64>,
}

/// TAKE: what was fired.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Taken {
    /// One entry per destination, in destination order.
    pub destinations: Vec<TakenDestination>,
    /// The last tenant the fairness round visited, where the next round continues; `None` when
    /// the round did not run or took nothing.
    pub fair_after: Option<String>,
}

impl Taken {
    /// Timers fired.
    pub fn timers(&self) -> u64 {
        self.destinations
            .iter()
            .map(|d| d.late_ms.len() as u64)
            .sum()
    }
}

/// PROBE: what to ask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProbeRequest {
    /// The order shards are visited in.
    pub shards: ShardOrder,
    /// Due rows are counted up to this many.
    pub due_cap: u32,
    /// Expired-but-present KV rows are counted up to this many; 0 leaves the KV part out (the
    /// prune is off).
    pub kv_cap: u32,
}

/// PROBE: what is due, and what the rest of the pass needs to decide whether to run, in one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// Milliseconds until the earliest row becomes visible; 0 when something is due; `None` when
    /// the table is empty.
    pub next_in_ms: Option<u64>,
    /// Rows claimable now, counted up to the cap.
    pub due: u32,
    /// The count reached the cap: more rows than `due` are claimable.
    pub due_capped: bool,
    /// How long the oldest due shard head has been past its delivery instant.
    pub late_ms: u64,
    /// The kill switches as the database has them.
    pub switches: SwitchStates,
    /// The prune's alarm, when the probe was asked for it.
    pub kv_expired: Option<ExpiredKv>,
}

/// The prune's alarm: KV rows past their expiry and still present.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExpiredKv {
    /// Expired rows still present, counted up to a cap.
    pub expired: u64,
    /// The count reached its cap.
    pub capped: bool,
    /// How long the oldest of them has been dead.
    pub lag_ms: u64,
}

/// Where a timer's message goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Destination {
    /// The tenant that owns the queue.
    pub tenant: String,
    /// The queue, created on first fire if missing.
    pub queue: String,
    /// The partition of the queue, created on first fire if missing.
    pub partition: String,
}

/// A row this broker claimed: in its hands until the lease ends, proven by `token`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimedTimer {
    /// Where the fire writes its message.
    pub destination: Destination,
    /// The timer's key within its queue.
    pub timer_key: String,
    /// The claim token: the fire and the failure calls prove the hold with it.
    pub token: Uuid,
    /// Failed fires counted so far (transient ones are not counted).
    pub attempts: u32,
    /// How late the timer was when it was claimed, by the database's clock.
    pub late_ms: u64,
    /// Size of the payload the fire will write (the payload itself never leaves the database).
    pub payload_bytes: u64,
}

impl ClaimedTimer {
    /// The key and token, as a fire segment carries them.
    pub fn held(&self) -> HeldTimer {
        HeldTimer {
            timer_key: self.timer_key.clone(),
            token: self.token,
        }
    }

    /// The timer identified in full, with its token.
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
    /// The timer's key within its segment's queue.
    pub timer_key: String,
    /// The claim token.
    pub token: Uuid,
}

/// The claimed timers of one destination in one fire call, in claim order. All or nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// The one destination of every timer in the segment.
    pub destination: Destination,
    /// The timers, in claim order.
    pub timers: Vec<HeldTimer>,
    /// Estimated bytes this segment writes.
    pub bytes: u64,
}

/// One fire transaction: segments of distinct destinations.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FireCall {
    /// The segments, each of its own destination.
    pub segments: Vec<Segment>,
}

impl FireCall {
    /// The estimated bytes the call writes.
    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.bytes).sum()
    }

    /// The timers the call fires.
    pub fn timers(&self) -> usize {
        self.segments.iter().map(|s| s.timers.len()).sum()
    }
}

/// What the fire did with one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SegmentResult {
    /// Every row was still held: the messages are in the log from `first_offset` on.
    Fired {
        /// The partition offset of the segment's first message.
        first_offset: u64,
    },
    /// Some row was not: nothing was written, and what this broker still held is released.
    Stale,
}

/// The fire's answer for one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentOutcome {
    /// Index into [`FireCall::segments`].
    pub segment: usize,
    /// Fired or stale.
    pub result: SegmentResult,
    /// The segment's timers (all fired, or none).
    pub timers: u32,
}

/// A held timer identified in full (tenant, queue, key) with its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimerRef {
    /// The timer's tenant.
    pub tenant: String,
    /// The timer's queue.
    pub queue: String,
    /// The timer's key within the queue.
    pub timer_key: String,
    /// The claim token that proves the hold.
    pub token: Uuid,
}

/// A held timer whose fire failed, and how long it should back off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailRow {
    /// The held timer.
    pub timer: TimerRef,
    /// How long it stays invisible to the sweeper.
    pub backoff: Duration,
}

/// Whether a failure spends one of the timer's attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FailCause {
    /// The database could not do it now (a lost connection, a timeout, a serialization
    /// failure): nothing is known to be wrong with the timer, so no attempt is spent.
    Transient,
    /// The timer's fire failed: one attempt is spent, and a timer out of attempts is exhausted.
    Counted,
}

/// A failure to record: the held rows, what went wrong, and whether it counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailRequest {
    /// The held timers and their backoffs.
    pub rows: Vec<FailRow>,
    /// The error, kept on each row as `last_error`.
    pub error: String,
    /// Whether the failure spends an attempt.
    pub cause: FailCause,
    /// Attempts after which a timer is exhausted.
    pub max_attempts: u32,
}

/// What recording a failure did to one timer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailOutcome {
    /// The timer's tenant.
    pub tenant: String,
    /// The timer's queue.
    pub queue: String,
    /// The timer's key.
    pub timer_key: String,
    /// Attempts spent so far, this one included when it counted.
    pub attempts: u32,
    /// Out of attempts: still held, to be handed to the port's `dlq`.
    pub exhausted: bool,
}

/// PRUNE: one step of the KV expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExpireStep {
    /// Rows deleted by this step.
    pub deleted: u64,
    /// The scan found fewer expired rows than the budget.
    pub done: bool,
    /// Expired rows still present after the step (the alarm), counted up to a cap.
    pub unpruned: u64,
    /// The count reached its cap.
    pub unpruned_capped: bool,
    /// How long the oldest still-present expired row has been dead.
    pub lag_ms: u64,
}

/// ROLLUP: one step of the usage rollup.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UsageStep {
    /// Tenants whose usage row was written.
    pub tenants: u32,
    /// Tenants that drained and were written as zero.
    pub zeroed: u32,
    /// The rollup reached the last tenant.
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

/// Both switches' states.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchStates {
    /// New schedules are accepted.
    pub schedule_enabled: bool,
    /// The sweeper fires due timers.
    pub fire_enabled: bool,
}

/// A timer's payload: the text of a JSON value (stored as those bytes) or raw bytes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Payload {
    /// A JSON value, stored as the exact text it came in.
    Json(JsonText),
    /// Serialised as base64 text, not as a JSON array of numbers (four times smaller, and
    /// parsed at memory speed).
    Bytes(#[serde(with = "base64_text")] Vec<u8>),
}

impl Payload {
    /// A JSON payload written from `value` as compact text.
    pub fn json(value: &Value) -> Payload {
        Payload::Json(JsonText::of(value))
    }
}

/// The text of one JSON value, kept exactly as written (key order, number spelling, escapes such
/// as `\u0000`, inner whitespace; the text around the value is trimmed). A JSON payload is stored
/// as these bytes, so whatever a client sent reads back the same: `jsonb` would reorder keys,
/// rewrite numbers and refuse `\u0000` (SQLSTATE 22P05).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct JsonText(Box<serde_json::value::RawValue>);

impl JsonText {
    /// `text` if it is one JSON value, or why not.
    pub fn new(text: String) -> Result<JsonText, serde_json::Error> {
        serde_json::value::RawValue::from_string(text).map(JsonText)
    }

    /// A value already checked as JSON by the parser that found it.
    pub fn from_raw(raw: Box<serde_json::value::RawValue>) -> JsonText {
        JsonText(raw)
    }

    /// `value` written as compact text.
    pub fn of(value: &Value) -> JsonText {
        JsonText(serde_json::value::to_raw_value(value).expect("a JSON value always serialises"))
    }

    /// The text.
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for JsonText {
    fn eq(&self, other: &JsonText) -> bool {
        self.get() == other.get()
    }
}

mod base64_text {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

/// One operation of a schedule call. `delay_ms` is relative to the database's `now()`; a negative
/// delay is legal and due at once.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum TimerOp {
    /// Create a timer, or replace the one with the same key (answered `rescheduled`).
    Schedule {
        /// The queue the message fires into.
        queue: String,
        /// The timer's key within the queue.
        timer_key: String,
        /// Milliseconds from the database's `now()` to delivery.
        delay_ms: i64,
        /// The message's payload.
        payload: Payload,
        /// The partition; `default` when `None`.
        partition: Option<String>,
        /// The message's transaction id; the server's when `None`.
        txn: Option<String>,
    },
    /// Move an existing timer (and optionally replace its payload).
    Reschedule {
        /// The timer's queue.
        queue: String,
        /// The timer's key.
        timer_key: String,
        /// Milliseconds from the database's `now()` to the new delivery.
        delay_ms: i64,
        /// A new payload, or `None` to keep the old one.
        payload: Option<Payload>,
        /// A new partition, or `None` to keep the old one.
        partition: Option<String>,
        /// A new transaction id, or `None` to keep the old one.
        txn: Option<String>,
    },
    /// Delete a timer that is not in a sweeper's hands.
    Cancel {
        /// The timer's queue.
        queue: String,
        /// The timer's key.
        timer_key: String,
    },
}

impl TimerOp {
    /// True for operations the schedule switch refuses (everything but cancel).
    pub fn creates_work(&self) -> bool {
        !matches!(self, TimerOp::Cancel { .. })
    }

    /// The JSON form `queen.log_timers_apply_v1` takes.
    pub fn to_json(&self) -> Value {
        let mut op = match self {
            TimerOp::Schedule {
                queue,
                timer_key,
                delay_ms,
                payload,
                ..
            } => {
                let mut op = json!({"op": "schedule", "queue": queue, "timerKey": timer_key, "delayMs": delay_ms});
                put_payload(&mut op, Some(payload));
                op
            }
            TimerOp::Reschedule {
                queue,
                timer_key,
                delay_ms,
                payload,
                ..
            } => {
                let mut op = json!({"op": "reschedule", "queue": queue, "timerKey": timer_key, "delayMs": delay_ms});
                put_payload(&mut op, payload.as_ref());
                op
            }
            TimerOp::Cancel { queue, timer_key } => {
                json!({"op": "cancel", "queue": queue, "timerKey": timer_key})
            }
        };
        if let TimerOp::Schedule { partition, txn, .. }
        | TimerOp::Reschedule { partition, txn, .. } = self
        {
            if let Some(partition) = partition {
                op["partition"] = json!(partition);
            }
            if let Some(txn) = txn {
                op["txn"] = json!(txn);
            }
        }
        op
    }
}

fn put_payload(op: &mut Value, payload: Option<&Payload>) {
    match payload {
        Some(Payload::Json(text)) => op["payloadJson"] = json!(text.get()),
        Some(Payload::Bytes(bytes)) => {
            op["payloadBase64"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
        }
        None => {}
    }
}

/// What an operation did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyStatus {
    /// A new timer exists.
    Scheduled,
    /// The timer was moved.
    Rescheduled,
    /// The timer was deleted.
    Cancelled,
    /// There was no such timer.
    Absent,
    /// The timer is in a sweeper's hands; it was left unchanged and will fire.
    TooLate,
}

/// The answer for one operation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyResult {
    /// The operation's position in the call.
    pub index: usize,
    /// The operation's queue.
    pub queue: String,
    /// The operation's timer key.
    pub timer_key: String,
    /// What the operation did.
    pub status: ApplyStatus,
    /// The message id the timer will fire with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<Uuid>,
    /// Milliseconds from the database's `now()` to delivery, for scheduled and rescheduled ops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_in_ms: Option<i64>,
    /// The delivery instant as the database wrote it (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_at: Option<String>,
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

    #[test]
    fn the_stable_shard_is_fixed_and_spreads() {
        assert_eq!(stable_shard("broker-1"), stable_shard("broker-1"));
        let starts: std::collections::HashSet<u8> = (0..16)
            .map(|i| stable_shard(&format!("broker-{i}")))
            .collect();
        assert!(
            starts.len() >= 10,
            "16 names fall in only {} distinct shards",
            starts.len()
        );
        assert!((0..1000).all(|i| stable_shard(&format!("b{i}")) < SHARD_COUNT));
    }

    #[test]
    fn byte_payloads_travel_as_base64_text() {
        let payload = Payload::Bytes(vec![0, 255, 7]);
        let text = serde_json::to_string(&payload).unwrap();
        assert_eq!(text, r#"{"Bytes":"AP8H"}"#);
        assert_eq!(serde_json::from_str::<Payload>(&text).unwrap(), payload);
    }

    fn schedule(delay_ms: i64) -> TimerOp {
        TimerOp::Schedule {
            queue: "q".into(),
            timer_key: "k".into(),
            delay_ms,
            payload: Payload::json(&json!({"a": 1})),
            partition: None,
            txn: None,
        }
    }

    #[test]
    fn ops_serialise_to_the_sql_contract() {
        assert_eq!(
            schedule(10).to_json(),
            json!({"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 10, "payloadJson": r#"{"a":1}"#})
        );
        let bytes = TimerOp::Reschedule {
            queue: "q".into(),
            timer_key: "k".into(),
            delay_ms: -1,
            payload: Some(Payload::Bytes(vec![0, 255])),
            partition: Some("p1".into()),
            txn: Some("t1".into()),
        };
        assert_eq!(
            bytes.to_json(),
            json!({"op": "reschedule", "queue": "q", "timerKey": "k", "delayMs": -1, "payloadBase64": "AP8=", "partition": "p1", "txn": "t1"})
        );
        let cancel = TimerOp::Cancel {
            queue: "q".into(),
            timer_key: "k".into(),
        };
        assert_eq!(
            cancel.to_json(),
            json!({"op": "cancel", "queue": "q", "timerKey": "k"})
        );
    }
}
