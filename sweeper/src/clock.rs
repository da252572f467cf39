//! The one module that reads a clock or draws randomness (clippy's `disallowed-methods` bans it
//! everywhere else; see `clippy.toml`). Everything else is handed `now` and a jitter sample, so
//! the sleep bands, deadlines and batches are pure functions that tests assert end to end.
#![allow(clippy::disallowed_methods)]

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The monotonic clock.
pub fn monotonic_now() -> Instant {
    Instant::now()
}

/// The monotonic clock as tokio sees it (tokio's test clock can pause it).
pub fn tokio_now() -> tokio::time::Instant {
    tokio::time::Instant::now()
}

/// Wall-clock time since the Unix epoch (reports and file names only; database time comes from
/// the database).
pub fn wall_since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

/// 64 random bits from the OS-seeded hasher (no RNG crate needed for seeds and jitter).
pub fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(wall_since_epoch().as_nanos() as u64);
    hasher.finish()
}

/// A uniform sample in [0, 1).
pub fn jitter_sample() -> f64 {
    (random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_samples_stay_in_the_unit_interval_and_vary() {
        let samples: Vec<f64> = (0..1000).map(|_| jitter_sample()).collect();
        assert!(samples.iter().all(|s| (0.0..1.0).contains(s)));
        let distinct = samples
            .iter()
            .map(|s| s.to_bits())
            .collect::<std::collections::HashSet<_>>();
        assert!(
            distinct.len() > 990,
            "only {} distinct samples of 1000",
            distinct.len()
        );
    }
}
