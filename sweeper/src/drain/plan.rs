//! The fire's plan: claimed rows grouped by destination and packed into calls under the byte
//! cap. Pure: no I/O, no clock.
//!
//! Fires are capped in bytes, not rows: a fire's cost is the WAL it writes. [`plan_fire_calls`]
//! groups claimed rows by destination in claim order and packs them into calls of at most
//! `QUEEN_SWEEPER_MAX_FIRE_BYTES`; one oversized timer goes alone; a destination is never two
//! segments of one call.

use std::collections::HashMap;

use crate::types::{ClaimedTimer, Destination, FireCall, Segment};

/// WAL bytes a fired timer writes beyond its payload and key: the re-lock of its timer row, the
/// message row's header, its index entry, the timer row's deletion.
/// Measured 2026-12-03 (one session, PostgreSQL 15, fires of 200 timers with 512 B payloads,
/// `pg_current_wal_insert_lsn` deltas, two runs of 30): 311-313 bytes. `pg_waldump --stats` of one
/// such fire, per timer: the message insert 111 beyond the payload, its index leaf 72, the row
/// lock 54, the delete 54, and the locks and offset bumps of its 24 partitions spread over the
/// 200. It was 200, a guess. Full-page images come on top, once per page per checkpoint: 3 960 B
/// per timer in one fire whose small messages landed in the free space of old log pages, which
/// no constant can predict.
pub const ROW_OVERHEAD_BYTES: u64 = 300;

/// Estimated bytes one claimed timer writes when fired.
pub fn fire_bytes(row: &ClaimedTimer) -> u64 {
    row.payload_bytes + row.timer_key.len() as u64 + ROW_OVERHEAD_BYTES
}

/// Groups claimed rows by destination, in claim order, and packs them into fire calls of at most
/// `max_fire_bytes`. A destination's rows stay in claim order; one call never holds two segments
/// of the same destination; a timer bigger than the cap goes alone. Pure.
pub fn plan_fire_calls(rows: &[ClaimedTimer], max_fire_bytes: u64) -> Vec<FireCall> {
    let mut order: Vec<&Destination> = Vec::new();
    let mut groups: HashMap<&Destination, Vec<&ClaimedTimer>> = HashMap::new();
    for row in rows {
        let group = groups.entry(&row.destination).or_default();
        if group.is_empty() {
            order.push(&row.destination);
        }
        group.push(row);
    }

    let mut calls = Vec::new();
    let mut call = FireCall::default();
    let mut call_bytes = 0u64;
    for destination in order {
        let mut segment = Segment {
            destination: destination.clone(),
            timers: Vec::new(),
            bytes: 0,
        };
        for row in &groups[destination] {
            let bytes = fire_bytes(row);
            let call_has_timers = call_bytes > 0 || !segment.timers.is_empty();
            if call_has_timers && call_bytes + bytes > max_fire_bytes {
                if !segment.timers.is_empty() {
                    let full = std::mem::replace(
                        &mut segment,
                        Segment {
                            destination: destination.clone(),
                            timers: Vec::new(),
                            bytes: 0,
                        },
                    );
                    call.segments.push(full);
                }
                calls.push(std::mem::take(&mut call));
                call_bytes = 0;
            }
            segment.timers.push(row.held());
            segment.bytes += bytes;
            call_bytes += bytes;
        }
        call.segments.push(segment);
    }
    if !call.segments.is_empty() {
        calls.push(call);
    }
    debug_assert_eq!(
        calls.iter().map(FireCall::timers).sum::<usize>(),
        rows.len()
    );
    calls
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use uuid::Uuid;

    use super::*;

    fn row(
        tenant: &str,
        queue: &str,
        partition: &str,
        key: &str,
        payload_bytes: u64,
    ) -> ClaimedTimer {
        ClaimedTimer {
            destination: Destination {
                tenant: tenant.into(),
                queue: queue.into(),
                partition: partition.into(),
            },
            timer_key: key.into(),
            token: Uuid::from_u128(u128::from(key.len() as u64) << 64 | u128::from(payload_bytes)),
            attempts: 0,
            late_ms: 0,
            payload_bytes,
        }
    }

    /// The invariants every plan must keep, checked on every test's output.
    fn check_plan(rows: &[ClaimedTimer], calls: &[FireCall], cap: u64) {
        let mut seen = Vec::new();
        for call in calls {
            assert!(!call.segments.is_empty(), "no empty calls");
            let destinations: HashSet<&Destination> =
                call.segments.iter().map(|s| &s.destination).collect();
            assert_eq!(
                destinations.len(),
                call.segments.len(),
                "a destination is one segment per call"
            );
            assert!(
                call.bytes() <= cap || call.timers() == 1,
                "over the cap with {} timers",
                call.timers()
            );
            for segment in &call.segments {
                assert!(!segment.timers.is_empty(), "no empty segments");
                for held in &segment.timers {
                    seen.push((segment.destination.clone(), held.timer_key.clone()));
                }
            }
        }
        assert_eq!(seen.len(), rows.len(), "every row exactly once");
        // Per destination, claim order is kept across calls.
        for destination in rows.iter().map(|r| &r.destination).collect::<HashSet<_>>() {
            let claimed: Vec<&str> = rows
                .iter()
                .filter(|r| &r.destination == destination)
                .map(|r| r.timer_key.as_str())
                .collect();
            let planned: Vec<&str> = seen
                .iter()
                .filter(|(d, _)| d == destination)
                .map(|(_, k)| k.as_str())
                .collect();
            assert_eq!(claimed, planned);
        }
    }

    #[test]
    fn rows_are_grouped_by_destination_in_claim_order() {
        let rows = vec![
            row("t", "q", "p1", "a", 10),
            row("t", "q", "p2", "b", 10),
            row("t", "q", "p1", "c", 10),
            row("u", "q", "p1", "d", 10),
        ];
        let calls = plan_fire_calls(&rows, 1 << 20);
        check_plan(&rows, &calls, 1 << 20);
        assert_eq!(calls.len(), 1);
        let segments: Vec<(&str, &str, Vec<&str>)> = calls[0]
            .segments
            .iter()
            .map(|s| {
                (
                    s.destination.tenant.as_str(),
                    s.destination.partition.as_str(),
                    s.timers.iter().map(|t| t.timer_key.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            segments,
            vec![
                ("t", "p1", vec!["a", "c"]),
                ("t", "p2", vec!["b"]),
                ("u", "p1", vec!["d"])
            ]
        );
    }

    #[test]
    fn a_batch_over_the_cap_splits_into_calls_under_it() {
        let rows: Vec<ClaimedTimer> = (0..10)
            .map(|i| row("t", "q", &format!("p{}", i % 3), &format!("k{i}"), 1000))
            .collect();
        let cap = 3 * (1000 + 2 + ROW_OVERHEAD_BYTES);
        let calls = plan_fire_calls(&rows, cap);
        check_plan(&rows, &calls, cap);
        assert_eq!(calls.len(), 4, "10 timers of which 3 fit a call");
    }

    #[test]
    fn exactly_at_the_cap_fits_and_one_byte_over_splits() {
        let rows = vec![row("t", "q", "p", "a", 800), row("t", "q", "p", "b", 800)];
        let one = fire_bytes(&rows[0]);
        let calls = plan_fire_calls(&rows, 2 * one);
        assert_eq!(calls.len(), 1);
        let calls = plan_fire_calls(&rows, 2 * one - 1);
        check_plan(&rows, &calls, 2 * one - 1);
        assert_eq!(calls.len(), 2);
    }

    #[test]
    fn one_oversized_timer_goes_alone() {
        let rows = vec![
            row("t", "q", "p", "a", 10),
            row("t", "q", "p", "big", 10_000),
            row("t", "q", "p", "c", 10),
        ];
        let calls = plan_fire_calls(&rows, 1000);
        check_plan(&rows, &calls, 1000);
        let sizes: Vec<usize> = calls.iter().map(FireCall::timers).collect();
        assert_eq!(sizes, vec![1, 1, 1]);
        assert_eq!(calls[1].segments[0].timers[0].timer_key, "big");
    }

    #[test]
    fn a_split_destination_is_one_segment_in_each_call() {
        let rows: Vec<ClaimedTimer> = (0..7)
            .map(|i| row("t", "q", "p", &format!("k{i}"), 500))
            .collect();
        let cap = 2 * fire_bytes(&rows[0]);
        let calls = plan_fire_calls(&rows, cap);
        check_plan(&rows, &calls, cap);
        assert_eq!(calls.len(), 4);
        assert!(calls.iter().all(|c| c.segments.len() == 1));
    }

    #[test]
    fn nothing_claimed_plans_no_call() {
        assert!(plan_fire_calls(&[], 1000).is_empty());
    }

    #[test]
    fn many_shapes_keep_the_invariants() {
        // A deterministic spread of sizes, destinations and caps.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..300 {
            let n = (next() % 60) as usize;
            let rows: Vec<ClaimedTimer> = (0..n)
                .map(|i| {
                    let d = next() % 5;
                    row(
                        &format!("t{}", d % 2),
                        "q",
                        &format!("p{d}"),
                        &format!("k{i}"),
                        next() % 5000,
                    )
                })
                .collect();
            let cap = 1 + next() % 20_000;
            check_plan(&rows, &plan_fire_calls(&rows, cap), cap);
        }
    }
}
