//! Same seed, same bytes; another seed, another run.

use queen_sim::report;
use queen_sim::scenarios::{self, Options, Scenario};

fn json(scenario: Scenario, seed: u64) -> String {
    let options = Options {
        duration_s: Some(6),
        ..Options::default()
    };
    report::json(&[scenarios::run(scenario, seed, options)])
}

#[test]
fn the_same_seed_writes_byte_identical_json_and_another_seed_does_not() {
    let first = json(Scenario::Swarm, 11);
    let second = json(Scenario::Swarm, 11);
    assert_eq!(first, second, "seed 11 ran differently twice");
    assert_ne!(
        first,
        json(Scenario::Swarm, 12),
        "two seeds gave the same run: the seed is not reaching the world"
    );
}

#[test]
fn a_crash_run_is_reproducible() {
    assert_eq!(json(Scenario::Crash, 3), json(Scenario::Crash, 3));
}
