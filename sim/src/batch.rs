//! Many runs at once. A plan of (scenario, seed) runs is split across machines (`--shard K/N`:
//! every N-th run from the K-th) and run on several threads (`--jobs`). Its results come back in
//! plan order, whatever order they finished in, so a run's JSON does not depend on the job count.
//! [`merge`] joins the JSON arrays of shards into the file one machine would have written.

use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::error::Error;
use crate::scenarios::{self, Options, Scenario, ScenarioReport};

/// One part of a plan split across N machines: `K/N`, K from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u32,
    pub count: u32,
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Shard, String> {
        let bad = || format!("{text:?} is not a shard; write K/N with 1 <= K <= N, e.g. 2/4");
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let index: u32 = k.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if index == 0 || index > count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

impl Shard {
    /// This shard's runs of `plan`: every `count`-th, from the `index`-th.
    pub fn select<T: Clone>(self, plan: &[T]) -> Vec<T> {
        plan.iter()
            .skip(self.index as usize - 1)
            .step_by(self.count as usize)
            .cloned()
            .collect()
    }
}

/// What one run came to: its report, or the panic of a broken model assumption.
#[derive(Debug)]
pub enum Outcome {
    Ran(Box<ScenarioReport>),
    Panicked {
        scenario: Scenario,
        seed: u64,
        message: String,
        reproduce: String,
    },
}

impl Outcome {
    pub fn passed(&self) -> bool {
        matches!(self, Outcome::Ran(report) if report.passed)
    }

    /// The command that runs it again alone.
    pub fn reproduce(&self) -> &str {
        match self {
            Outcome::Ran(report) => &report.reproduce,
            Outcome::Panicked { reproduce, .. } => reproduce,
        }
    }
}

/// Runs `plan` on `jobs` threads (at least one). `done` sees each outcome as it finishes, with
/// its index in the plan; the outcomes come back in plan order.
pub fn run(
    plan: &[(Scenario, u64)],
    options: Options,
    jobs: usize,
    done: &(dyn Fn(usize, &Outcome) + Sync),
) -> Vec<Outcome> {
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Outcome>>> = plan.iter().map(|_| Mutex::new(None)).collect();
    let worker = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(&(scenario, seed)) = plan.get(i) else {
                return;
            };
            let outcome = run_one(scenario, seed, options);
            done(i, &outcome);
            *slots[i].lock().expect("not poisoned") = Some(outcome);
        }
    };
    std::thread::scope(|scope| {
        for j in 0..jobs.clamp(1, plan.len().max(1)) {
            std::thread::Builder::new()
                .name(format!("sim-job-{j}"))
                // A world's futures nest deeply; the main thread's 8 MiB, not a spawned one's 2.
                .stack_size(8 << 20)
                .spawn_scoped(scope, worker)
                .expect("a job thread starts");
        }
    });
    slots
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .expect("not poisoned")
                .expect("every run of the plan ran")
        })
        .collect()
}

fn run_one(scenario: Scenario, seed: u64, options: Options) -> Outcome {
    match std::panic::catch_unwind(AssertUnwindSafe(|| scenarios::run(scenario, seed, options))) {
        Ok(report) => Outcome::Ran(Box::new(report)),
        Err(panic) => Outcome::Panicked {
            scenario,
            seed,
            message: panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a panic without a message".to_owned()),
            reproduce: scenarios::reproduce_command(scenario, seed, options),
        },
    }
}

/// Where a run of a merged file sits in the plan: its scenario's place in [`Scenario::all`], then
/// its seed.
#[derive(Debug, Deserialize)]
struct Key {
    scenario: String,
    seed: u64,
}

/// The JSON arrays of `files` (shards of one plan) as the one array a single machine would have
/// written: every run once, in plan order, each run's text as its shard wrote it.
pub fn merge(files: &[PathBuf]) -> Result<String, Error> {
    let mut runs: Vec<((usize, u64), Box<RawValue>)> = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.clone(),
            source,
        })?;
        let json = |source| Error::Json {
            path: path.clone(),
            source,
        };
        let items: Vec<Box<RawValue>> = serde_json::from_str(&text).map_err(json)?;
        for item in items {
            let key: Key = serde_json::from_str(item.get()).map_err(json)?;
            let place = Scenario::all()
                .iter()
                .position(|s| s.name() == key.scenario)
                .ok_or_else(|| {
                    Error::Merge(format!(
                        "{} holds a run of an unknown scenario {:?}",
                        path.display(),
                        key.scenario
                    ))
                })?;
            runs.push(((place, key.seed), item));
        }
    }
    runs.sort_by_key(|(key, _)| *key);
    if let Some(pair) = runs.windows(2).find(|w| w[0].0 == w[1].0) {
        let (place, seed) = pair[0].0;
        return Err(Error::Merge(format!(
            "scenario {} seed {seed} is in more than one file: the shards overlap",
            Scenario::all()[place]
        )));
    }
    // serde_json's pretty array: each element on its own lines, indented by two spaces, which
    // the element's raw text already carries inside it.
    if runs.is_empty() {
        return Ok("[]\n".to_owned());
    }
    let items: Vec<&str> = runs.iter().map(|(_, raw)| raw.get()).collect();
    Ok(format!("[\n  {}\n]\n", items.join(",\n  ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_every_nth_run_from_the_kth() {
        let plan: Vec<u32> = (1..=10).collect();
        let shard = |text: &str| text.parse::<Shard>().unwrap().select(&plan);
        assert_eq!(shard("1/3"), [1, 4, 7, 10]);
        assert_eq!(shard("3/3"), [3, 6, 9]);
        assert_eq!(shard("1/1"), plan);
        for bad in ["0/3", "4/3", "3", "a/b", "1/0"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }

    #[test]
    fn runs_on_two_jobs_come_back_in_plan_order_and_equal_one_job() {
        // The first run is the slowest (burst: about 1.1 s at 20 s, a swarm seed 0.2 s), so on
        // two jobs the swarm seeds finish before it: plan order is not finish order.
        let plan: Vec<(Scenario, u64)> = std::iter::once((Scenario::Burst, 1))
            .chain((1..=4).map(|seed| (Scenario::Swarm, seed)))
            .collect();
        let options = Options {
            duration_s: Some(20),
            ..Options::default()
        };
        let json = |jobs: usize| {
            let outcomes = run(&plan, options, jobs, &|_, _| {});
            let reports: Vec<ScenarioReport> = outcomes
                .into_iter()
                .map(|o| match o {
                    Outcome::Ran(report) => *report,
                    Outcome::Panicked { message, .. } => panic!("{message}"),
                })
                .collect();
            crate::report::json(&reports)
        };
        let one = json(1);
        assert_eq!(json(2), one);
        // And the shards of the plan, merged, are the same file.
        let dir = std::env::temp_dir().join(format!("sim-merge-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut files = Vec::new();
        for k in 1..=2u32 {
            let part = Shard { index: k, count: 2 }.select(&plan);
            let reports: Vec<ScenarioReport> = run(&part, options, 1, &|_, _| {})
                .into_iter()
                .map(|o| match o {
                    Outcome::Ran(report) => *report,
                    Outcome::Panicked { message, .. } => panic!("{message}"),
                })
                .collect();
            let file = dir.join(format!("part-{k}.json"));
            std::fs::write(&file, crate::report::json(&reports)).unwrap();
            files.push(file);
        }
        let merged = merge(&files).unwrap();
        files.push(files[0].clone());
        let overlap = merge(&files).unwrap_err().to_string();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(merged, one);
        assert!(overlap.contains("more than one file"), "{overlap}");
    }

    #[test]
    fn a_panicking_run_is_reported_with_its_reproduction() {
        let outcome = Outcome::Panicked {
            scenario: Scenario::Swarm,
            seed: 7,
            message: "boom".into(),
            reproduce: scenarios::reproduce_command(Scenario::Swarm, 7, Options::default()),
        };
        assert!(!outcome.passed());
        assert!(outcome.reproduce().ends_with("--scenario swarm --seed 7"));
    }
}
