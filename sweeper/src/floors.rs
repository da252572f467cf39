//! Head floors: where the probe and the pick start reading each shard of `log_timers`.
//!
//! A fired timer leaves dead entries at the head of its shard in the index the probe and the pick
//! walk, and while any session holds an old snapshot vacuum can remove none of them, so every
//! seek walked every timer fired since the snapshot was taken (`sql/011_timers_probe_claim.sql`,
//! HEAD FLOORS, has the numbers). The probe hands back a floor per shard, below which no live row
//! was and no row written since can be (by more than a write's duration); the next probe and
//! every take or claim until it read from there.
//!
//! The floors are the broker's own and live in memory: written to a table, they would be hot rows
//! updated many times a second, piling up dead versions of their own under the same snapshot.
//! Every `QUEEN_SWEEPER_HEAD_RESCAN_MS` the probe reads every shard from its start instead, which
//! finds within that period a row a floor hid (one written by a transaction that took longer than
//! the margin to commit, or by hand). A floor never loses a row; at worst it delays one by the
//! rescan period.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Floors per shard, indexed by shard: epoch milliseconds, `None` reads that shard from its start.
pub type Floors = Vec<Option<i64>>;

/// When the floors are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloorPolicy {
    /// How often the probe reads from the start; `None` always does (no floors).
    pub rescan: Option<Duration>,
    /// How far below the probe's now a floor stays at least: the longest a write is expected to
    /// take to commit. A write slower than that may land under a floor and wait for the next
    /// read from the start; a longer margin costs every floored read the dead entries of that
    /// many milliseconds of fired timers.
    pub margin: Duration,
}

/// What one probe sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeFloors {
    /// The floors to read from; `None` reads every shard from its start.
    pub read_from: Option<Floors>,
    /// The margin of the floors the probe hands back; `None` asks for none.
    pub margin_ms: Option<i32>,
}

#[derive(Debug, Default)]
struct State {
    floors: Option<Floors>,
    last_full: Option<Instant>,
}

/// One broker's floors.
#[derive(Debug)]
pub struct HeadFloors {
    policy: FloorPolicy,
    state: Mutex<State>,
}

impl HeadFloors {
    /// No floors yet: the first probe reads from the start.
    pub fn new(policy: FloorPolicy) -> HeadFloors {
        HeadFloors {
            policy,
            state: Mutex::new(State::default()),
        }
    }

    /// The policy.
    pub fn policy(&self) -> FloorPolicy {
        self.policy
    }

    /// What the probe at `now` sends: the floors, unless it is time to read from the start.
    pub fn for_probe(&self, now: Instant) -> ProbeFloors {
        let Some(rescan) = self.policy.rescan else {
            return ProbeFloors {
                read_from: None,
                margin_ms: None,
            };
        };
        let state = self
            .state
            .lock()
            .expect("the floors' lock is never poisoned");
        let fresh = state
            .last_full
            .is_some_and(|full| now.saturating_duration_since(full) < rescan);
        ProbeFloors {
            read_from: state.floors.clone().filter(|_| fresh),
            margin_ms: Some(i32::try_from(self.policy.margin.as_millis()).unwrap_or(i32::MAX)),
        }
    }

    /// Keeps the floors a probe at `at` handed back (it sent `sent`).
    pub fn probed(&self, sent: &ProbeFloors, floors: Option<Floors>, at: Instant) {
        if sent.margin_ms.is_none() {
            return;
        }
        let mut state = self
            .state
            .lock()
            .expect("the floors' lock is never poisoned");
        if sent.read_from.is_none() {
            state.last_full = Some(at);
        }
        state.floors = floors;
    }

    /// The floors a take or a claim reads from.
    pub fn for_pick(&self) -> Option<Floors> {
        self.policy.rescan?;
        self.state
            .lock()
            .expect("the floors' lock is never poisoned")
            .floors
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn floors(policy: Option<Duration>) -> HeadFloors {
        HeadFloors::new(FloorPolicy {
            rescan: policy,
            margin: 5 * SECOND,
        })
    }

    #[test]
    fn the_first_probe_reads_from_the_start_and_asks_for_floors() {
        let f = floors(Some(30 * SECOND));
        let sent = f.for_probe(crate::clock::tokio_now());
        assert_eq!(sent.read_from, None);
        assert_eq!(sent.margin_ms, Some(5_000));
        assert_eq!(f.for_pick(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn floors_are_used_until_the_rescan_period_passes_then_read_from_the_start_again() {
        let f = floors(Some(30 * SECOND));
        let start = crate::clock::tokio_now();
        let first = f.for_probe(start);
        f.probed(&first, Some(vec![Some(7); 64]), start);
        assert_eq!(f.for_pick(), Some(vec![Some(7); 64]));

        let later = f.for_probe(start + 29 * SECOND);
        assert_eq!(later.read_from, Some(vec![Some(7); 64]));
        f.probed(&later, Some(vec![Some(9); 64]), start + 29 * SECOND);
        assert_eq!(f.for_pick(), Some(vec![Some(9); 64]));

        // A probe that read from its floors does not restart the period.
        let rescan = f.for_probe(start + 30 * SECOND);
        assert_eq!(rescan.read_from, None, "30 s after the last full read");
        f.probed(&rescan, Some(vec![Some(3); 64]), start + 30 * SECOND);
        assert_eq!(
            f.for_probe(start + 31 * SECOND).read_from,
            Some(vec![Some(3); 64])
        );
    }

    #[test]
    fn without_a_rescan_period_nothing_is_floored() {
        let f = floors(None);
        let sent = f.for_probe(crate::clock::tokio_now());
        assert_eq!(
            sent,
            ProbeFloors {
                read_from: None,
                margin_ms: None
            }
        );
        f.probed(&sent, Some(vec![Some(1); 64]), crate::clock::tokio_now());
        assert_eq!(f.for_pick(), None);
        assert_eq!(f.for_probe(crate::clock::tokio_now()).read_from, None);
    }
}
