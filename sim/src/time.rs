//! Simulated time. Every host reads the one simulated clock through turmoil (tokio's clock in
//! each host has its own base, and `std::time` inside a host is the real clock: neither is used).

use std::time::Duration;

use crate::model::state::Us;

/// Where the database's clock stands when a run starts: one hour in, so a timer scheduled with
/// a negative delay at the start of a run still has a representable (earlier) delivery instant.
pub const ORIGIN_US: Us = 3_600_000_000;

/// The database's clock: simulated microseconds since [`ORIGIN_US`] before the run started.
pub fn now_us() -> Us {
    ORIGIN_US + elapsed_us()
}

/// Simulated microseconds since the run started (for pacing load, not for database times).
pub fn elapsed_us() -> Us {
    turmoil::sim_elapsed().map_or(0, |elapsed| elapsed.as_micros() as Us)
}

pub fn us(duration: Duration) -> Us {
    duration.as_micros() as Us
}

/// The fixed epoch every run starts at, so timestamps in reports are the same for a seed.
pub const EPOCH_UNIX_S: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z

/// A simulated instant as an RFC 3339 timestamp from the fixed epoch.
pub fn format_us(at: Us) -> String {
    let at = chrono::DateTime::from_timestamp(EPOCH_UNIX_S, 0).expect("valid epoch")
        + chrono::Duration::microseconds(at as i64 - ORIGIN_US as i64);
    at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// Parses what [`format_us`] wrote.
pub fn parse_us(text: &str) -> Option<Us> {
    let at = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    let epoch = chrono::DateTime::from_timestamp(EPOCH_UNIX_S, 0)?;
    (at.to_utc() - epoch)
        .num_microseconds()
        .and_then(|m| u64::try_from(m + ORIGIN_US as i64).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_instants_round_trip_through_text() {
        for at in [0, 1, 999_999, ORIGIN_US, ORIGIN_US + 600_000_000_123] {
            assert_eq!(parse_us(&format_us(at)), Some(at));
        }
        assert_eq!(
            format_us(ORIGIN_US + 1_500_000),
            "2026-01-01T00:00:01.500000Z"
        );
    }
}
