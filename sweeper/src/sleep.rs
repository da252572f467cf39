//! How long the loop sleeps: a pure function of what the pass found, the knobs and a jitter
//! sample. No clock, no randomness inside, so both ends of every band are asserted, not sampled.
//!
//! | outcome | sleep |
//! |---|---|
//! | [`PassOutcome::WorkAvailable`] (overdue, or the pass stopped on a budget) | the floor |
//! | [`PassOutcome::DueLater`] | `clamp(next_in_ms, floor, ceiling)` |
//! | [`PassOutcome::FirstClaimEmpty`] (due, but another broker is draining it) | `min + jitter × (max − min)`, within `[floor, ceiling]` |
//! | [`PassOutcome::NothingDue`] | the ceiling |
//!
//! The floor applies only when work is genuinely available: after an empty claim, returning to the
//! 5 ms floor is a spin (five brokers, one burst: four of them probing 200 times a second each,
//! about 800 extra queries a second landing exactly while the fire writes WAL).
//!
//! Bad inputs never panic and never give a zero sleep: NaN jitter is the band's middle, ±∞ and
//! out-of-range jitter are clamped to its ends, inverted knobs are put back in order, and zero
//! knobs are raised to 1 ms.

use std::time::Duration;

/// What the pass found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassOutcome {
    /// Due work remains for this broker: overdue rows, or the drain stopped on a budget.
    WorkAvailable,
    /// Nothing is due now; the earliest row becomes visible in `next_in_ms`.
    DueLater {
        /// Milliseconds until the earliest row becomes visible.
        next_in_ms: u64,
    },
    /// The probe said work was due, but the pass's first claim took nothing: somebody else holds
    /// it.
    FirstClaimEmpty,
    /// The table is empty (or everything in it is held or backing off beyond the ceiling).
    NothingDue,
}

/// The four bands' knobs, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bands {
    /// The sleep when work is genuinely available.
    pub floor_ms: u64,
    /// No sleep is longer: the cross-broker delivery bound.
    pub ceiling_ms: u64,
    /// The low end of the band after an empty first claim.
    pub empty_claim_ms_min: u64,
    /// The high end of that band.
    pub empty_claim_ms_max: u64,
}

impl Bands {
    /// The bands the configuration sets.
    pub fn from_config(config: &crate::config::Config) -> Bands {
        Bands {
            floor_ms: config.sleep_ms_min,
            ceiling_ms: config.sleep_ms_max,
            empty_claim_ms_min: config.empty_claim_ms_min,
            empty_claim_ms_max: config.empty_claim_ms_max,
        }
    }

    /// The knobs put in order: ceiling ≥ 1, floor in [1, ceiling], the empty-claim band sorted and
    /// inside [floor, ceiling].
    fn normalised(self) -> Bands {
        let ceiling_ms = self.ceiling_ms.max(1);
        let floor_ms = self.floor_ms.clamp(1, ceiling_ms);
        let (low, high) = if self.empty_claim_ms_min <= self.empty_claim_ms_max {
            (self.empty_claim_ms_min, self.empty_claim_ms_max)
        } else {
            (self.empty_claim_ms_max, self.empty_claim_ms_min)
        };
        Bands {
            floor_ms,
            ceiling_ms,
            empty_claim_ms_min: low.clamp(floor_ms, ceiling_ms),
            empty_claim_ms_max: high.clamp(floor_ms, ceiling_ms),
        }
    }
}

/// The sleep for `outcome`. `jitter` is a sample in [0, 1] used only by the empty-claim band.
pub fn sleep_for(outcome: PassOutcome, bands: Bands, jitter: f64) -> Duration {
    let b = bands.normalised();
    let ms = match outcome {
        PassOutcome::WorkAvailable => b.floor_ms,
        PassOutcome::DueLater { next_in_ms } => next_in_ms.clamp(b.floor_ms, b.ceiling_ms),
        PassOutcome::FirstClaimEmpty => {
            let span = (b.empty_claim_ms_max - b.empty_claim_ms_min) as f64;
            // Rounding keeps both ends reachable: 0.0 → min exactly, 1.0 → max exactly.
            b.empty_claim_ms_min + (unit(jitter) * span).round() as u64
        }
        PassOutcome::NothingDue => b.ceiling_ms,
    };
    debug_assert!(ms >= 1 && ms <= b.ceiling_ms);
    Duration::from_millis(ms)
}

/// A jitter sample forced into [0, 1]: NaN is the middle, everything else is clamped.
fn unit(jitter: f64) -> f64 {
    if jitter.is_nan() {
        0.5
    } else {
        jitter.clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: Bands = Bands {
        floor_ms: 5,
        ceiling_ms: 1000,
        empty_claim_ms_min: 25,
        empty_claim_ms_max: 200,
    };

    fn ms(outcome: PassOutcome, bands: Bands, jitter: f64) -> u64 {
        sleep_for(outcome, bands, jitter).as_millis() as u64
    }

    #[test]
    fn overdue_work_sleeps_the_floor_not_zero() {
        assert_eq!(ms(PassOutcome::WorkAvailable, DEFAULT, 0.5), 5);
    }

    #[test]
    fn due_later_sleeps_until_it_is_due_within_floor_and_ceiling() {
        assert_eq!(ms(PassOutcome::DueLater { next_in_ms: 0 }, DEFAULT, 0.5), 5);
        assert_eq!(ms(PassOutcome::DueLater { next_in_ms: 4 }, DEFAULT, 0.5), 5);
        assert_eq!(ms(PassOutcome::DueLater { next_in_ms: 5 }, DEFAULT, 0.5), 5);
        assert_eq!(ms(PassOutcome::DueLater { next_in_ms: 6 }, DEFAULT, 0.5), 6);
        assert_eq!(
            ms(PassOutcome::DueLater { next_in_ms: 200 }, DEFAULT, 0.5),
            200
        );
        assert_eq!(
            ms(PassOutcome::DueLater { next_in_ms: 999 }, DEFAULT, 0.5),
            999
        );
        assert_eq!(
            ms(PassOutcome::DueLater { next_in_ms: 1000 }, DEFAULT, 0.5),
            1000
        );
        assert_eq!(
            ms(PassOutcome::DueLater { next_in_ms: 1001 }, DEFAULT, 0.5),
            1000
        );
        assert_eq!(
            ms(
                PassOutcome::DueLater {
                    next_in_ms: u64::MAX
                },
                DEFAULT,
                0.5
            ),
            1000
        );
    }

    #[test]
    fn an_empty_claim_spans_the_jitter_band_end_to_end() {
        assert_eq!(ms(PassOutcome::FirstClaimEmpty, DEFAULT, 0.0), 25);
        assert_eq!(ms(PassOutcome::FirstClaimEmpty, DEFAULT, 1.0), 200);
        assert_eq!(ms(PassOutcome::FirstClaimEmpty, DEFAULT, 0.5), 113);
    }

    #[test]
    fn the_empty_claim_band_is_monotonic_in_jitter() {
        let mut previous = 0;
        for i in 0..=10_000 {
            let now = ms(
                PassOutcome::FirstClaimEmpty,
                DEFAULT,
                f64::from(i) / 10_000.0,
            );
            assert!(
                now >= previous,
                "jitter {i}/10000 gave {now} after {previous}"
            );
            assert!((25..=200).contains(&now));
            previous = now;
        }
    }

    #[test]
    fn nothing_due_sleeps_the_ceiling() {
        assert_eq!(ms(PassOutcome::NothingDue, DEFAULT, 0.5), 1000);
    }

    #[test]
    fn nan_infinite_and_negative_jitter_stay_in_the_band() {
        assert_eq!(ms(PassOutcome::FirstClaimEmpty, DEFAULT, f64::NAN), 113);
        assert_eq!(
            ms(PassOutcome::FirstClaimEmpty, DEFAULT, f64::INFINITY),
            200
        );
        assert_eq!(
            ms(PassOutcome::FirstClaimEmpty, DEFAULT, f64::NEG_INFINITY),
            25
        );
        assert_eq!(ms(PassOutcome::FirstClaimEmpty, DEFAULT, -0.3), 25);
        assert_eq!(ms(PassOutcome::FirstClaimEmpty, DEFAULT, 7.0), 200);
        assert_eq!(ms(PassOutcome::FirstClaimEmpty, DEFAULT, -0.0), 25);
    }

    #[test]
    fn the_ceiling_is_never_exceeded_by_any_outcome() {
        let jitters = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -1.0,
            0.0,
            0.5,
            1.0,
            2.0,
        ];
        let outcomes = [
            PassOutcome::WorkAvailable,
            PassOutcome::DueLater {
                next_in_ms: u64::MAX,
            },
            PassOutcome::FirstClaimEmpty,
            PassOutcome::NothingDue,
        ];
        let band_sets = [
            DEFAULT,
            Bands {
                floor_ms: 5,
                ceiling_ms: 100,
                empty_claim_ms_min: 25,
                empty_claim_ms_max: 200,
            },
            Bands {
                floor_ms: 500,
                ceiling_ms: 100,
                empty_claim_ms_min: 25,
                empty_claim_ms_max: 200,
            },
            Bands {
                floor_ms: u64::MAX,
                ceiling_ms: u64::MAX,
                empty_claim_ms_min: u64::MAX,
                empty_claim_ms_max: 0,
            },
        ];
        for bands in band_sets {
            let ceiling = bands.ceiling_ms.max(1);
            for outcome in outcomes {
                for jitter in jitters {
                    let slept = ms(outcome, bands, jitter);
                    assert!(
                        slept <= ceiling,
                        "{outcome:?} {bands:?} {jitter} slept {slept}"
                    );
                }
            }
        }
    }

    #[test]
    fn inverted_or_zero_knobs_never_panic_and_never_sleep_zero() {
        let odd = [
            Bands {
                floor_ms: 0,
                ceiling_ms: 0,
                empty_claim_ms_min: 0,
                empty_claim_ms_max: 0,
            },
            Bands {
                floor_ms: 1000,
                ceiling_ms: 5,
                empty_claim_ms_min: 200,
                empty_claim_ms_max: 25,
            },
            Bands {
                floor_ms: 0,
                ceiling_ms: 1000,
                empty_claim_ms_min: 0,
                empty_claim_ms_max: 0,
            },
            Bands {
                floor_ms: 5,
                ceiling_ms: 0,
                empty_claim_ms_min: 25,
                empty_claim_ms_max: 200,
            },
        ];
        for bands in odd {
            for outcome in [
                PassOutcome::WorkAvailable,
                PassOutcome::DueLater { next_in_ms: 0 },
                PassOutcome::FirstClaimEmpty,
                PassOutcome::NothingDue,
            ] {
                for jitter in [f64::NAN, 0.0, 1.0] {
                    assert!(
                        ms(outcome, bands, jitter) >= 1,
                        "{outcome:?} {bands:?} {jitter}"
                    );
                }
            }
        }
        let inverted = Bands {
            floor_ms: 5,
            ceiling_ms: 1000,
            empty_claim_ms_min: 200,
            empty_claim_ms_max: 25,
        };
        assert_eq!(ms(PassOutcome::FirstClaimEmpty, inverted, 0.0), 25);
        assert_eq!(ms(PassOutcome::FirstClaimEmpty, inverted, 1.0), 200);
    }

    #[test]
    fn the_empty_claim_band_is_never_faster_than_the_floor() {
        let bands = Bands {
            floor_ms: 50,
            ceiling_ms: 1000,
            empty_claim_ms_min: 25,
            empty_claim_ms_max: 200,
        };
        assert_eq!(ms(PassOutcome::FirstClaimEmpty, bands, 0.0), 50);
    }
}
