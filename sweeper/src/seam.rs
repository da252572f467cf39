//! The schedule seam: schedule, reschedule and cancel timers inside a transaction, and ring the
//! local wake after the commit, never before.
//!
//! A wake rung for a transaction that then rolls back teaches the loop that work exists which
//! does not, so the wrong order is made impossible to write rather than documented: the seam
//! takes the transaction ([`Seam::begin`]) and hands back a [`SeamTx`] that carries the wake its
//! own operations owe. The only way to ring it is [`SeamTx::commit`], which commits first and
//! consumes the handle; a wake cannot travel to another transaction, because it never leaves the
//! one that produced it. Dropping the handle (a rollback) drops the wake with it: nothing is rung.
//!
//! Both seams that create timers go through here: the HTTP handler opens a transaction of its
//! own; the transaction wire wraps the caller's (`PgTimerTx::from_transaction`), and the caller
//! does its own work on [`SeamTx::transaction`] before the commit.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::port::TimerTx;
use crate::switches::Switches;
use crate::types::{ApplyResult, TimerOp};
use crate::waker::Waker;

/// The schedule seam of one broker.
#[derive(Debug, Clone)]
pub struct Seam {
    waker: Waker,
    switches: Switches,
}

impl Seam {
    /// A seam that rings `waker` and obeys the schedule switch of `switches`.
    pub fn new(waker: Waker, switches: Switches) -> Seam {
        Seam { waker, switches }
    }

    /// Takes `tx` over: operations are applied through the returned handle, and only its commit
    /// rings the wake they owe.
    pub fn begin<T: TimerTx>(&self, tx: T) -> SeamTx<T> {
        SeamTx {
            tx,
            seam: self.clone(),
            wake_at: None,
        }
    }
}

/// A transaction in the seam's hands, with the wake its operations owe. Dropping it rolls the
/// transaction back (the driver's drop) and rings nothing.
#[must_use = "commit it to keep its timers and ring the wake; dropping it rolls back"]
#[derive(Debug)]
pub struct SeamTx<T> {
    tx: T,
    seam: Seam,
    /// The earliest local instant any applied operation delivers at.
    wake_at: Option<Instant>,
}

impl<T: TimerTx> SeamTx<T> {
    /// Applies `ops` for `tenant` inside the transaction. `now` is this process's clock when the
    /// call is made; the owed wake moves to `now` plus the earliest delivery delay the database
    /// answered, if that is earlier than what the transaction already owes.
    pub async fn apply(
        &mut self,
        tenant: &str,
        ops: &[TimerOp],
        now: Instant,
    ) -> Result<Vec<ApplyResult>> {
        if !self.seam.switches.schedule_enabled() && ops.iter().any(TimerOp::creates_work) {
            return Err(Error::Disabled(
                "scheduling is switched off (timers_schedule_enabled = false); cancels still work"
                    .into(),
            ));
        }
        let results = self.tx.apply(tenant, ops).await?;
        assert_eq!(
            results.len(),
            ops.len(),
            "the apply answers every operation exactly once"
        );
        let earliest = results.iter().filter_map(|r| r.deliver_in_ms).min();
        let at = earliest.map(|ms| now + Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
        self.wake_at = match (self.wake_at, at) {
            (Some(owed), Some(at)) => Some(owed.min(at)),
            (owed, at) => owed.or(at),
        };
        Ok(results)
    }

    /// The local instant the commit would ring for, if any operation created work.
    pub fn wake_at(&self) -> Option<Instant> {
        self.wake_at
    }

    /// The transaction itself, for the caller's own statements (the transaction wire).
    pub fn transaction(&mut self) -> &mut T {
        &mut self.tx
    }

    /// Commits, then rings the wake. Returns whether the ring moved the loop's next look. A
    /// failed commit rings nothing.
    pub async fn commit(self) -> Result<bool> {
        self.tx.commit().await?;
        Ok(self.wake_at.is_some_and(|at| self.seam.waker.hint(at)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::clock::tokio_now;
    use crate::types::{ApplyStatus, Payload};

    /// A transaction that records what happened to it.
    struct FakeTx {
        deliver_in_ms: Vec<Option<i64>>,
        committed: std::sync::Arc<std::sync::atomic::AtomicBool>,
        fail_commit: bool,
    }

    impl TimerTx for FakeTx {
        async fn apply(&mut self, _tenant: &str, ops: &[TimerOp]) -> Result<Vec<ApplyResult>> {
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

        async fn commit(self) -> Result<()> {
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
            payload: Payload::json(&json!({"a": 1})),
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
        let (tx, committed) = fake(vec![Some(900), Some(200), None], false);
        let mut tx = seam.begin(tx);
        tx.apply("t", &[schedule(900), schedule(200), schedule(5)], now)
            .await
            .unwrap();
        assert_eq!(tx.wake_at(), Some(now + Duration::from_millis(200)));
        assert_eq!(waker.promised(), None, "nothing is rung before the commit");
        assert!(tx.commit().await.unwrap());
        assert!(committed.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(waker.promised(), Some(now + Duration::from_millis(200)));
    }

    #[tokio::test(start_paused = true)]
    async fn two_applies_in_one_transaction_owe_the_earlier_wake() {
        let now = tokio_now();
        let waker = Waker::new(now);
        let seam = Seam::new(waker.clone(), Switches::default());
        let (tx, _) = fake(vec![Some(300)], false);
        let mut tx = seam.begin(tx);
        tx.apply("t", &[schedule(300)], now).await.unwrap();
        tx.transaction().deliver_in_ms = vec![Some(700)];
        tx.apply("t", &[schedule(700)], now).await.unwrap();
        assert_eq!(tx.wake_at(), Some(now + Duration::from_millis(300)));
        assert!(tx.commit().await.unwrap());
        assert_eq!(waker.promised(), Some(now + Duration::from_millis(300)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_rollback_rings_nothing() {
        let now = tokio_now();
        let waker = Waker::new(now);
        let seam = Seam::new(waker.clone(), Switches::default());
        let (tx, committed) = fake(vec![Some(100)], false);
        let mut tx = seam.begin(tx);
        tx.apply("t", &[schedule(100)], now).await.unwrap();
        drop(tx); // a rollback
        assert!(!committed.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(waker.promised(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_commit_rings_nothing() {
        let now = tokio_now();
        let waker = Waker::new(now);
        let seam = Seam::new(waker.clone(), Switches::default());
        let (tx, _) = fake(vec![Some(100)], true);
        let mut tx = seam.begin(tx);
        tx.apply("t", &[schedule(100)], now).await.unwrap();
        assert!(tx.commit().await.is_err());
        assert_eq!(waker.promised(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_negative_delay_rings_for_now() {
        let now = tokio_now();
        let waker = Waker::new(now);
        let seam = Seam::new(waker.clone(), Switches::default());
        let (tx, _) = fake(vec![Some(-500)], false);
        let mut tx = seam.begin(tx);
        tx.apply("t", &[schedule(-500)], now).await.unwrap();
        assert_eq!(tx.wake_at(), Some(now));
        assert!(tx.commit().await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn the_schedule_switch_refuses_work_but_not_cancels() {
        let now = tokio_now();
        let waker = Waker::new(now);
        let switches = Switches::default();
        switches.set_local(crate::types::Switch::Schedule, false);
        let seam = Seam::new(waker.clone(), switches);
        let (tx, _) = fake(vec![None], false);
        let mut tx = seam.begin(tx);
        let refused = tx.apply("t", &[schedule(10)], now).await.unwrap_err();
        assert!(matches!(refused, Error::Disabled(_)), "{refused}");
        let cancel = TimerOp::Cancel {
            queue: "q".into(),
            timer_key: "k".into(),
        };
        tx.apply("t", &[cancel], now).await.unwrap();
        assert!(!tx.commit().await.unwrap(), "a cancel owes no wake");
    }
}
