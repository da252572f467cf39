//! The schedule seam: schedule, reschedule and cancel timers inside a transaction, and ring the
//! local wake after the commit, never before.
//!
//! A wake rung for a transaction that then rolls back teaches the loop that work exists which
//! does not, so the wrong order is made impossible to write rather than documented:
//! [`Seam::apply`] returns a [`PendingWake`] that has no public way to ring. The only way to ring
//! it is [`Seam::commit`], which consumes the transaction and commits it first. Dropping the
//! transaction (a rollback) drops the wake with it: nothing is rung.
//!
//! Both seams that create timers, the HTTP handler and the transaction wire, go through here.

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::time::Instant;
use uuid::Uuid;

use crate::error::Error;
use crate::store::TimerTx;
use crate::switches::Switches;
use crate::waker::Waker;

/// A timer's payload: a JSON value (stored as its UTF-8 text) or raw bytes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Payload {
    Json(Value),
    /// Serialised as base64 text, not as a JSON array of numbers (four times smaller, and
    /// parsed at memory speed).
    Bytes(#[serde(with = "base64_text")] Vec<u8>),
}

mod base64_text {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
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
    Schedule {
        queue: String,
        timer_key: String,
        delay_ms: i64,
        payload: Payload,
        partition: Option<String>,
        txn: Option<String>,
    },
    Reschedule {
        queue: String,
        timer_key: String,
        delay_ms: i64,
        payload: Option<Payload>,
        partition: Option<String>,
        txn: Option<String>,
    },
    Cancel {
        queue: String,
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
        Some(Payload::Json(value)) => op["payload"] = value.clone(),
        Some(Payload::Bytes(bytes)) => {
            op["payloadBase64"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
        }
        None => {}
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyStatus {
    Scheduled,
    Rescheduled,
    Cancelled,
    Absent,
    /// The timer is in a sweeper's hands; it was left unchanged and will fire.
    TooLate,
}

/// The answer for one operation.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyResult {
    pub index: usize,
    pub queue: String,
    pub timer_key: String,
    pub status: ApplyStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<Uuid>,
    /// Milliseconds from the database's `now()` to delivery, for scheduled and rescheduled ops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_in_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deliver_at: Option<String>,
}

/// A wake that may be rung only after its transaction commits. Has no public `ring`.
#[must_use = "hand it to Seam::commit with its transaction; dropping it rings nothing"]
#[derive(Debug)]
pub struct PendingWake {
    at: Option<Instant>,
}

impl PendingWake {
    /// The local instant the wake would name, if any operation created work.
    pub fn at(&self) -> Option<Instant> {
        self.at
    }
}

/// What [`Seam::apply`] did, and the wake it owes after commit.
#[derive(Debug)]
pub struct Applied {
    pub results: Vec<ApplyResult>,
    pub wake: PendingWake,
}

/// The schedule seam of one broker.
#[derive(Debug, Clone)]
pub struct Seam {
    waker: Waker,
    switches: Switches,
}

impl Seam {
    pub fn new(waker: Waker, switches: Switches) -> Seam {
        Seam { waker, switches }
    }

    /// Applies `ops` for `tenant` inside `tx`. `now` is this process's clock when the call is
    /// made; the wake instant is `now` plus the earliest delivery delay the database answered.
    pub async fn apply<T: TimerTx>(
        &self,
        tx: &mut T,
        tenant: &str,
        ops: &[TimerOp],
        now: Instant,
    ) -> Result<Applied, Error> {
        if !self.switches.schedule_enabled() && ops.iter().any(TimerOp::creates_work) {
            return Err(Error::Disabled(
                "scheduling is switched off (timers_schedule_enabled = false); cancels still work"
                    .into(),
            ));
        }
        let results = tx.apply(tenant, ops).await?;
        assert_eq!(
            results.len(),
            ops.len(),
            "the apply answers every operation exactly once"
        );
        let earliest = results.iter().filter_map(|r| r.deliver_in_ms).min();
        let at = earliest.map(|ms| now + Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
        Ok(Applied {
            results,
            wake: PendingWake { at },
        })
    }

    /// Commits `tx`, then rings the wake. Returns whether the ring moved the loop's next look.
    pub async fn commit<T: TimerTx>(&self, tx: T, wake: PendingWake) -> Result<bool, Error> {
        tx.commit().await?;
        Ok(wake.at.is_some_and(|at| self.waker.hint(at)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::tokio_now;

    /// A transaction that records what happened to it.
    struct FakeTx {
        deliver_in_ms: Vec<Option<i64>>,
        committed: std::sync::Arc<std::sync::atomic::AtomicBool>,
        fail_commit: bool,
    }

    impl TimerTx for FakeTx {
        async fn apply(
            &mut self,
            _tenant: &str,
            ops: &[TimerOp],
        ) -> Result<Vec<ApplyResult>, Error> {
            Ok(ops
                .iter()
                .enumerate()
                .map(|(index, _)| ApplyResult {
                    index,
                    queue: "q".into(),
                    timer_key: format!("k{index}"),
                    status: ApplyStatus::Scheduled,
                    message_id: None,
                    deliver_in_ms: self.deliver_in_ms[index],
                    deliver_at: None,
                })
                .collect())
        }

        async fn commit(self) -> Result<(), Error> {
            if self.fail_commit {
                return Err(Error::database(
                    Some("40001".into()),
                    "could not serialize".into(),
                    "commit".into(),
                ));
            }
            self.committed
                .store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
    }

    fn schedule(delay_ms: i64) -> TimerOp {
        TimerOp::Schedule {
            queue: "q".into(),
            timer_key: "k".into(),
            delay_ms,
            payload: Payload::Json(json!({"a": 1})),
            partition: None,
            txn: None,
        }
    }

    fn fake(
        deliver_in_ms: Vec<Option<i64>>,
        fail_commit: bool,
    ) -> (FakeTx, std::sync::Arc<std::sync::atomic::AtomicBool>) {
        let committed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        (
            FakeTx {
                deliver_in_ms,
                committed: committed.clone(),
                fail_commit,
            },
            committed,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn the_wake_is_rung_after_commit_with_the_earliest_instant() {
        let now = tokio_now();
        let waker = Waker::new(now);
        let seam = Seam::new(waker.clone(), Switches::default());
        let (mut tx, committed) = fake(vec![Some(900), Some(200), None], false);
        let applied = seam
            .apply(
                &mut tx,
                "t",
                &[schedule(900), schedule(200), schedule(5)],
                now,
            )
            .await
            .unwrap();
        assert_eq!(applied.wake.at(), Some(now + Duration::from_millis(200)));
        assert_eq!(waker.promised(), None, "nothing is rung before the commit");
        assert!(seam.commit(tx, applied.wake).await.unwrap());
        assert!(committed.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(waker.promised(), Some(now + Duration::from_millis(200)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_rollback_rings_nothing() {
        let now = tokio_now();
        let waker = Waker::new(now);
        let seam = Seam::new(waker.clone(), Switches::default());
        let (mut tx, committed) = fake(vec![Some(100)], false);
        let applied = seam
            .apply(&mut tx, "t", &[schedule(100)], now)
            .await
            .unwrap();
        drop(applied.wake);
        drop(tx); // a rollback
        assert!(!committed.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(waker.promised(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_commit_rings_nothing() {
        let now = tokio_now();
        let waker = Waker::new(now);
        let seam = Seam::new(waker.clone(), Switches::default());
        let (mut tx, _) = fake(vec![Some(100)], true);
        let applied = seam
            .apply(&mut tx, "t", &[schedule(100)], now)
            .await
            .unwrap();
        assert!(seam.commit(tx, applied.wake).await.is_err());
        assert_eq!(waker.promised(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_negative_delay_rings_for_now() {
        let now = tokio_now();
        let waker = Waker::new(now);
        let seam = Seam::new(waker.clone(), Switches::default());
        let (mut tx, _) = fake(vec![Some(-500)], false);
        let applied = seam
            .apply(&mut tx, "t", &[schedule(-500)], now)
            .await
            .unwrap();
        assert_eq!(applied.wake.at(), Some(now));
        assert!(seam.commit(tx, applied.wake).await.unwrap());
    }

    #[test]
    fn byte_payloads_travel_as_base64_text() {
        let payload = Payload::Bytes(vec![0, 255, 7]);
        let text = serde_json::to_string(&payload).unwrap();
        assert_eq!(text, r#"{"Bytes":"AP8H"}"#);
        assert_eq!(serde_json::from_str::<Payload>(&text).unwrap(), payload);
    }

    #[test]
    fn ops_serialise_to_the_sql_contract() {
        assert_eq!(
            schedule(10).to_json(),
            json!({"op": "schedule", "queue": "q", "timerKey": "k", "delayMs": 10, "payload": {"a": 1}})
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
