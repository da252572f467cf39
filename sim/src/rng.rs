//! The simulation's only randomness: a small, fast, seeded generator (SplitMix64). Every draw in a
//! run comes from the run's seed, so the same seed gives the same run.

/// A seeded generator. Cheap to fork: [`Rng::fork`] derives an independent stream per actor.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng {
            state: seed ^ 0x5851_f42d_4c95_7f2d,
        }
    }

    /// An independent stream for actor `label` (a broker, a load generator).
    pub fn fork(&self, label: u64) -> Rng {
        let mut mixer = Rng {
            state: self.state ^ label.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        };
        Rng::new(mixer.next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [low, high] (inclusive). `low > high` gives `low`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_stream_and_forks_differ() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let xs: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut f1 = Rng::new(7).fork(1);
        let mut f2 = Rng::new(7).fork(2);
        assert_ne!(f1.next_u64(), f2.next_u64());
    }

    #[test]
    fn ranges_and_units_stay_in_bounds() {
        let mut rng = Rng::new(1);
        for _ in 0..10_000 {
            assert!((10..=20).contains(&rng.range(10, 20)));
            assert!((0.0..1.0).contains(&rng.unit()));
        }
        assert_eq!(rng.range(5, 5), 5);
        assert_eq!(rng.range(9, 3), 9);
    }
}
