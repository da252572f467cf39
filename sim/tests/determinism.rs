//! Same seed, same bytes; another seed, another run.

use queen_sim::report;
use queen_sim::scenarios::{self, Options};

fn json(name: &str, seed: u64) -> String {
    let options = Options {
        duration_s: Some(6),
    };
    report::json(&[scenarios::run(name, seed, options).expect("known scenario")])
}

#[test]
fn the_same_seed_writes_byte_identical_json_and_another_seed_does_not() {
    let first = json("swarm", 11);
    let second = json("swarm", 11);
    assert_eq!(first, second, "seed 11 ran differently twice");
    assert_ne!(
        first,
        json("swarm", 12),
        "two seeds gave the same run: the seed is not reaching the world"
    );
}

#[test]
fn a_crash_run_is_reproducible() {
    assert_eq!(json("crash", 3), json("crash", 3));
}
