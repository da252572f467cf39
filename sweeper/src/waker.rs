//! The local wake: an atomic holding the instant the loop has promised to look next, plus a
//! notification.
//!
//! A seam that commits a timer rings [`Waker::hint`] with the timer's delivery instant, after the
//! commit and never before (see [`crate::Seam`]). The hint wakes the loop only when that instant
//! is earlier than the promise, so a million timers for next week produce no wake at all. A hint
//! that lands while the loop is working (no promise outstanding) is kept and cuts the next sleep.
//!
//! A wake is losable and never does damage: it reaches only this process, and the sleep ceiling
//! (`QUEEN_SWEEPER_MAX_SLEEP_MS`) is the net for timers scheduled anywhere else. There is no
//! LISTEN/NOTIFY (a connection held forever outside the pool, and a notify queue that, when full,
//! fails the committing transaction) and no mesh frame.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;
use tokio::time::Instant;

/// "No promise": the loop is working and will decide its next look when it sleeps.
const NEVER: u64 = u64::MAX;

/// Why [`Waker::sleep`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The planned instant arrived.
    Planned,
    /// A hint moved the look earlier, and that instant arrived.
    Hinted,
}

/// Cheap to clone; every clone rings the same loop.
#[derive(Debug, Clone)]
pub struct Waker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Instants are stored as nanoseconds after `base`.
    base: Instant,
    promised: AtomicU64,
    notify: Notify,
}

impl Waker {
    /// A waker whose loop is working (no promise yet).
    pub fn new(now: Instant) -> Waker {
        Waker {
            inner: Arc::new(Inner {
                base: now,
                promised: AtomicU64::new(NEVER),
                notify: Notify::new(),
            }),
        }
    }

    /// Rings the loop for a timer deliverable at `at`. Returns whether it moved the promise
    /// earlier (and so will wake the loop, now or when it next sleeps).
    pub fn hint(&self, at: Instant) -> bool {
        let at = self.encode(at);
        let before = self.inner.promised.fetch_min(at, Ordering::AcqRel);
        if at < before {
            self.inner.notify.notify_one();
            true
        } else {
            false
        }
    }

    /// The loop starts a pass: no promise is outstanding until it sleeps again. Call it before
    /// the probe, so a hint for a timer that committed before this call is either seen by the
    /// probe or kept for the next sleep.
    pub fn begin_pass(&self) {
        self.inner.promised.store(NEVER, Ordering::Release);
    }

    /// The instant the loop has promised to look next, if it is sleeping or has been hinted.
    pub fn promised(&self) -> Option<Instant> {
        self.decode(self.inner.promised.load(Ordering::Acquire))
    }

    /// Sleeps until `planned`, or until an earlier hinted instant (including one that arrived
    /// while the loop was working).
    pub async fn sleep(&self, planned: Instant) -> Wake {
        let planned_code = self.encode(planned);
        self.inner
            .promised
            .fetch_min(planned_code, Ordering::AcqRel);
        loop {
            let promised = self.inner.promised.load(Ordering::Acquire);
            let deadline = self.decode(promised).unwrap_or(planned);
            let notified = self.inner.notify.notified();
            tokio::select! {
                biased;
                () = notified => continue,
                () = tokio::time::sleep_until(deadline) => {
                    return if promised < planned_code { Wake::Hinted } else { Wake::Planned };
                }
            }
        }
    }

    fn encode(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.inner.base).as_nanos();
        u64::try_from(since).unwrap_or(u64::MAX).min(NEVER - 1)
    }

    fn decode(&self, code: u64) -> Option<Instant> {
        (code != NEVER).then(|| self.inner.base + std::time::Duration::from_nanos(code))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::tokio_now;

    const WEEK: Duration = Duration::from_secs(7 * 24 * 3600);

    #[tokio::test(start_paused = true)]
    async fn a_hint_later_than_the_promise_does_not_wake() {
        let start = tokio_now();
        let waker = Waker::new(start);
        let sleeper = waker.clone();
        let sleeping = tokio::spawn(async move {
            (
                sleeper.sleep(start + Duration::from_secs(1)).await,
                tokio_now(),
            )
        });
        tokio::task::yield_now().await;
        assert!(!waker.hint(start + Duration::from_secs(2)));
        let (wake, at) = sleeping.await.unwrap();
        assert_eq!(wake, Wake::Planned);
        assert_eq!(at - start, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hint_past_the_encodable_range_saturates_and_is_still_a_promise() {
        // Instants are nanoseconds in a u64 (about 584 years); later ones saturate one short of
        // "never", so a real hint is never mistaken for no promise at all.
        let start = tokio_now();
        let waker = Waker::new(start);
        let far = start + Duration::from_secs(600 * 365 * 24 * 3600);
        assert!(waker.hint(far));
        assert!(waker.promised().is_some_and(|at| at < far));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hint_for_the_promised_instant_itself_does_not_wake() {
        let start = tokio_now();
        let waker = Waker::new(start);
        let at = start + Duration::from_secs(1);
        assert!(waker.hint(at), "the first hint is a promise");
        assert!(!waker.hint(at), "the same instant again is not earlier");
        assert_eq!(waker.promised(), Some(at));
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_hint_wakes_the_loop_at_the_hinted_instant() {
        let start = tokio_now();
        let waker = Waker::new(start);
        let sleeper = waker.clone();
        let sleeping = tokio::spawn(async move {
            (
                sleeper.sleep(start + Duration::from_secs(1)).await,
                tokio_now(),
            )
        });
        tokio::task::yield_now().await;
        assert!(waker.hint(start + Duration::from_millis(200)));
        let (wake, at) = sleeping.await.unwrap();
        assert_eq!(wake, Wake::Hinted);
        assert_eq!(at - start, Duration::from_millis(200));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hint_for_a_past_instant_wakes_at_once() {
        let start = tokio_now();
        let waker = Waker::new(start);
        tokio::time::advance(Duration::from_millis(50)).await;
        let sleeper = waker.clone();
        let sleeping = tokio::spawn(async move {
            (
                sleeper.sleep(tokio_now() + Duration::from_secs(1)).await,
                tokio_now(),
            )
        });
        tokio::task::yield_now().await;
        assert!(waker.hint(start));
        let (wake, at) = sleeping.await.unwrap();
        assert_eq!(wake, Wake::Hinted);
        assert_eq!(at - start, Duration::from_millis(50));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hint_that_lands_while_the_loop_works_is_kept_and_cuts_the_next_sleep() {
        let start = tokio_now();
        let waker = Waker::new(start);
        waker.begin_pass();
        // The pass is working: its probe ran before this timer committed.
        assert!(waker.hint(start + Duration::from_millis(300)));
        assert_eq!(waker.promised(), Some(start + Duration::from_millis(300)));
        // The pass ends and plans the ceiling; the hint wins.
        let wake = waker.sleep(start + Duration::from_secs(1)).await;
        assert_eq!(wake, Wake::Hinted);
        assert_eq!(tokio_now() - start, Duration::from_millis(300));
    }

    #[tokio::test(start_paused = true)]
    async fn a_million_hints_for_next_week_cause_no_wake() {
        let start = tokio_now();
        let waker = Waker::new(start);
        let sleeper = waker.clone();
        let sleeping = tokio::spawn(async move {
            (
                sleeper.sleep(start + Duration::from_secs(1)).await,
                tokio_now(),
            )
        });
        tokio::task::yield_now().await;
        let mut woke = 0;
        for i in 0..1_000_000u64 {
            if waker.hint(start + WEEK + Duration::from_nanos(i)) {
                woke += 1;
            }
        }
        assert_eq!(woke, 0);
        let (wake, at) = sleeping.await.unwrap();
        assert_eq!(wake, Wake::Planned);
        assert_eq!(at - start, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_million_hints_for_next_week_during_a_pass_do_not_shorten_the_sleep() {
        let start = tokio_now();
        let waker = Waker::new(start);
        waker.begin_pass();
        let moved = (0..1_000_000u64)
            .filter(|i| waker.hint(start + WEEK + Duration::from_nanos(*i)))
            .count();
        // With no promise outstanding the first hint is kept; none of the rest is earlier. None
        // is before the planned look either, so the sleep still lasts the full second.
        assert_eq!(moved, 1);
        let wake = waker.sleep(start + Duration::from_secs(1)).await;
        assert_eq!(wake, Wake::Planned);
        assert_eq!(tokio_now() - start, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn begin_pass_clears_a_spent_promise() {
        let start = tokio_now();
        let waker = Waker::new(start);
        waker.sleep(start + Duration::from_millis(10)).await;
        waker.begin_pass();
        assert_eq!(waker.promised(), None);
        assert!(
            waker.hint(start + WEEK),
            "with no promise outstanding, any hint is kept"
        );
    }
}
