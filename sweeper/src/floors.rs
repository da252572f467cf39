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
//! Every `QUEEN_SWEEPER_HEAD_RESCAN_MS` each shard is read once from its start instead, which
//! finds within that period a row a floor hid (one written by a transaction that took longer than
//! the margin to commit, or by hand). A floor never loses a row; at worst it delays one by the
//! rescan period.
//!
//! The shards take their turns: after the first probe (which reads all of them from the start)
//! shard `s` is due for its read from the start `(s + 1) / 64` of a period later, and then once a
//! period, so a probe reads about one shard from its start instead of all 64 at once. Under a held
//! snapshot a read from the start walks every dead entry of its shard; 64 of them at once stalled
//! the cycle for a whole full read every period, a 64th of that is lost in the noise.

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
    /// Per shard, when the probe next reads it from its start; `None` until a first full read.
    next_full: Option<Vec<Instant>>,
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

    /// What the probe at `now` sends: the floors, with `None` (read from the start) for every
    /// shard whose turn has come, or no floors at all before the first full read.
    pub fn for_probe(&self, now: Instant) -> ProbeFloors {
        if self.policy.rescan.is_none() {
            return ProbeFloors {
                read_from: None,
                margin_ms: None,
            };
        }
        let state = self
            .state
            .lock()
            .expect("the floors' lock is never poisoned");
        let read_from = match (&state.floors, &state.next_full) {
            (Some(floors), Some(next_full)) => Some(
                floors
                    .iter()
                    .enumerate()
                    .map(|(shard, floor)| {
                        floor.filter(|_| next_full.get(shard).is_some_and(|&due| now < due))
                    })
                    .collect(),
            ),
            _ => None,
        };
        ProbeFloors {
            read_from,
            margin_ms: Some(i32::try_from(self.policy.margin.as_millis()).unwrap_or(i32::MAX)),
        }
    }

    /// Keeps the floors a probe at `at` handed back (it sent `sent`): every shard it read from the
    /// start has its next turn a period later (after a full read, staggered over the period).
    pub fn probed(&self, sent: &ProbeFloors, floors: Option<Floors>, at: Instant) {
        let (Some(period), Some(_)) = (self.policy.rescan, sent.margin_ms) else {
            return;
        };
        let mut state = self
            .state
            .lock()
            .expect("the floors' lock is never poisoned");
        let shards = crate::types::SHARD_COUNT as usize;
        match (&sent.read_from, state.next_full.as_mut()) {
            (Some(read_from), Some(next_full)) => {
                for (shard, floor) in read_from.iter().enumerate().take(shards) {
                    if floor.is_none() {
                        next_full[shard] = at + period;
                    }
                }
            }
            _ => {
                state.next_full = Some(
                    (0..shards)
                        .map(|shard| at + period.mul_f64((shard + 1) as f64 / shards as f64))
                        .collect(),
                );
            }
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

    /// Floors in which `shards` read from the start and every other shard from `floor`.
    fn with_rescanned(floor: i64, shards: &[usize]) -> Option<Floors> {
        Some(
            (0..64)
                .map(|s| (!shards.contains(&s)).then_some(floor))
                .collect(),
        )
    }

    #[tokio::test(start_paused = true)]
    async fn after_the_first_full_read_the_shards_take_turns_to_be_read_from_the_start() {
        // A 64 s period: shard s has its first turn s + 1 seconds after the full read.
        let f = floors(Some(64 * SECOND));
        let start = crate::clock::tokio_now();
        let first = f.for_probe(start);
        assert_eq!(first.read_from, None);
        f.probed(&first, Some(vec![Some(7); 64]), start);
        assert_eq!(f.for_pick(), Some(vec![Some(7); 64]));

        let before = f.for_probe(start + SECOND / 2);
        assert_eq!(before.read_from, Some(vec![Some(7); 64]), "no turn yet");
        f.probed(&before, Some(vec![Some(8); 64]), start + SECOND / 2);

        let turn = f.for_probe(start + SECOND);
        assert_eq!(turn.read_from, with_rescanned(8, &[0]), "shard 0's turn");
        f.probed(&turn, Some(vec![Some(9); 64]), start + SECOND);

        let later = f.for_probe(start + 2 * SECOND + SECOND / 2);
        assert_eq!(
            later.read_from,
            with_rescanned(9, &[1]),
            "shard 1's turn; shard 0's is a period after its read"
        );
        f.probed(
            &later,
            Some(vec![Some(9); 64]),
            start + 2 * SECOND + SECOND / 2,
        );

        // A probe that missed several turns reads each of those shards from its start.
        let late = f.for_probe(start + 6 * SECOND);
        assert_eq!(late.read_from, with_rescanned(9, &[2, 3, 4, 5]));
        f.probed(&late, Some(vec![Some(9); 64]), start + 6 * SECOND);
        let mut expected: Vec<usize> = vec![0];
        expected.extend(6..64);
        assert_eq!(
            f.for_probe(start + 65 * SECOND).read_from,
            with_rescanned(9, &expected),
            "shard 0 a period after its turn, shards 6-63 whose first turns passed unprobed; \
             shard 1 (read at 2.5 s) and shards 2-5 (at 6 s) not yet"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn probing_every_100_ms_reads_each_shard_from_the_start_once_a_period_one_at_a_time() {
        let period = Duration::from_millis(6_400);
        let f = floors(Some(period));
        let start = crate::clock::tokio_now();
        let mut full_reads = [0u32; 64];
        let mut most_in_one_probe = 0;
        let step = Duration::from_millis(100);
        // Three periods after the first full read, probing every 100 ms.
        for i in 0..=(3 * 64) {
            let at = start + step * i;
            let sent = f.for_probe(at);
            if let Some(read_from) = &sent.read_from {
                let from_start = read_from.iter().filter(|floor| floor.is_none()).count();
                most_in_one_probe = most_in_one_probe.max(from_start);
                for (shard, floor) in read_from.iter().enumerate() {
                    full_reads[shard] += u32::from(floor.is_none());
                }
            } else {
                assert_eq!(i, 0, "only the first probe reads everything from the start");
            }
            f.probed(&sent, Some(vec![Some(1); 64]), at);
        }
        assert_eq!(most_in_one_probe, 1, "one shard per probe at most");
        assert_eq!(full_reads, [3; 64], "each shard once per period");
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
