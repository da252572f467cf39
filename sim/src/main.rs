//! `sim`: run named, seeded scenarios of the Queen sweeper's deterministic simulation.
//!
//! ```text
//! sim --scenario livelock --seed 1 [--json report.json] [--duration-s 600]
//! sim --swarm --seeds 1..1001 --jobs 0             every core
//! sim --swarm --seeds 1..1001 --shard 2/4 --json part-2.json   a quarter of the plan, on one machine
//! sim --merge part-1.json part-2.json ... --json all.json      the file one machine would write
//! sim --all --seeds 1..3
//! sim --list
//! sim ... --calibration sim/calibration/2026-12-04-2c-24g-pg15.json   the model's costs from this file
//! ```
//!
//! Every run prints its seed first; a failure prints the command that reproduces it and exits 1.
//! The JSON is in plan order whatever the job count, so it is the same on 1 job or 16.

use std::process::ExitCode;

use clap::Parser;
use queen_harness::Calibration;
use queen_sim::batch::{self, Outcome, Shard};
use queen_sim::calibration;
use queen_sim::error::{self, Error};
use queen_sim::report;
use queen_sim::scenarios::{Options, Scenario, ScenarioReport};

#[derive(Debug, Parser)]
#[command(
    name = "sim",
    about = "Deterministic simulation of N Queen brokers against a modelled PostgreSQL"
)]
struct Cli {
    /// One scenario by name (see --list).
    #[arg(long, value_enum, conflicts_with_all = ["swarm", "all"])]
    scenario: Option<Scenario>,
    /// The seed of a single run (--seeds runs a range instead).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The swarm: random worlds, one per seed of --seeds.
    #[arg(long)]
    swarm: bool,
    /// Every scenario on every seed of --seeds.
    #[arg(long)]
    all: bool,
    /// A seed range, `A..B` (B excluded) or `A..=B`.
    #[arg(long, value_parser = parse_seeds)]
    seeds: Option<std::ops::Range<u64>>,
    /// Length of the safety phase in simulated seconds (each scenario has its own default).
    #[arg(long)]
    duration_s: Option<u64>,
    /// Write the JSON report here (`-` for stdout).
    #[arg(long)]
    json: Option<String>,
    /// Write each scenario's report directory here: JSON, SVG plots over time, a markdown page.
    #[arg(long)]
    report_dir: Option<std::path::PathBuf>,
    /// Threads to run seeds on (0: one per core). The output does not depend on it.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Only this part of the plan, `K/N`: every N-th run from the K-th (to split a range across
    /// machines; join their --json files with --merge).
    #[arg(long)]
    shard: Option<Shard>,
    /// Join these JSON files (shards of one plan) into --json, in plan order, and exit.
    #[arg(long, num_args = 1.., conflicts_with_all = ["scenario", "swarm", "all"])]
    merge: Vec<std::path::PathBuf>,
    /// The model's costs from this calibration file (`soak calibrate` writes them); default: the
    /// newest in sim/calibration/, built in.
    #[arg(long)]
    calibration: Option<std::path::PathBuf>,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
}

fn parse_seeds(text: &str) -> Result<std::ops::Range<u64>, String> {
    let bad =
        || format!("{text:?} is not a seed range; write A..B (B excluded) or A..=B, e.g. 1..51");
    let (a, b, inclusive) = if let Some((a, b)) = text.split_once("..=") {
        (a, b, true)
    } else if let Some((a, b)) = text.split_once("..") {
        (a, b, false)
    } else {
        return Err(bad());
    };
    let a: u64 = a.trim().parse().map_err(|_| bad())?;
    let b: u64 = b.trim().parse().map_err(|_| bad())?;
    let end = if inclusive { b + 1 } else { b };
    if end <= a {
        return Err(format!("{text:?} is an empty seed range"));
    }
    Ok(a..end)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.list {
        for scenario in Scenario::all() {
            println!("{scenario}");
        }
        return ExitCode::SUCCESS;
    }
    if !cli.merge.is_empty() {
        return match batch::merge(&cli.merge).and_then(|text| write_json(&cli, &text)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("sim: {}", error::chain(&error));
                ExitCode::FAILURE
            }
        };
    }
    let Some(plan) = plan(&cli) else {
        eprintln!(
            "sim: say what to run: --scenario NAME, --swarm --seeds A..B, --all --seeds A..B, or --merge FILES (--list names them)"
        );
        return ExitCode::from(2);
    };
    match run(&cli, &plan) {
        Ok(failed) if failed.is_empty() => {
            println!("{} run(s), all passed", plan.len());
            ExitCode::SUCCESS
        }
        Ok(failed) => {
            println!(
                "{} of {} run(s) FAILED; reproduce with:",
                failed.len(),
                plan.len()
            );
            for command in failed {
                println!("  {command}");
            }
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("sim: {}", error::chain(&error));
            ExitCode::FAILURE
        }
    }
}

/// The (scenario, seed) runs the command line asks for (this shard's part of them), or `None`
/// when it asks for none.
fn plan(cli: &Cli) -> Option<Vec<(Scenario, u64)>> {
    let plan: Vec<(Scenario, u64)> = match (cli.scenario, cli.swarm, cli.all) {
        (Some(scenario), _, _) => seeds(cli).map(|s| (scenario, s)).collect(),
        (None, true, _) => seeds(cli).map(|s| (Scenario::Swarm, s)).collect(),
        (None, false, true) => Scenario::all()
            .iter()
            .flat_map(|scenario| seeds(cli).map(move |s| (*scenario, s)))
            .collect(),
        (None, false, false) => return None,
    };
    Some(match cli.shard {
        Some(shard) => shard.select(&plan),
        None => plan,
    })
}

/// Runs the plan, printing each run's table as it finishes and writing what was asked; returns
/// the reproduce commands of the runs that failed.
fn run(cli: &Cli, plan: &[(Scenario, u64)]) -> Result<Vec<String>, Error> {
    let mut options = Options {
        duration_s: cli.duration_s,
        ..Options::default()
    };
    match &cli.calibration {
        None => println!(
            "calibration: built in, sim/calibration/{} ({})",
            calibration::BUILTIN_NAME,
            calibration::builtin().describe()
        ),
        Some(path) => {
            let loaded = Calibration::load(path).map_err(Error::Calibration)?;
            println!("calibration: {} ({})", path.display(), loaded.describe());
            options.costs = loaded.costs;
            // Named in every reproduce line; the process ends after the plan.
            options.calibration = Some(Box::leak(path.display().to_string().into_boxed_str()));
        }
    }
    let jobs = match cli.jobs {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    };
    let started = queen_sweeper::clock::monotonic_now();
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let print = |i: usize, outcome: &Outcome| {
        let n = finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        let (scenario, seed) = plan[i];
        // One block per run, written at once, so the tables of parallel runs do not interleave.
        let block = match outcome {
            Outcome::Ran(report) => report::table(report),
            Outcome::Panicked { message, .. } => format!("  PANICKED: {message}\n"),
        };
        print!(
            "[{n}/{}] seed {seed} scenario {scenario}\n{block}",
            plan.len()
        );
    };
    let outcomes = batch::run(plan, options, jobs, &print);
    let seconds = (queen_sweeper::clock::monotonic_now() - started).as_secs_f64();
    println!(
        "{} run(s) in {seconds:.1} s on {jobs} job(s): {:.0} runs/hour",
        plan.len(),
        plan.len() as f64 / seconds.max(1e-9) * 3600.0
    );
    let failed = outcomes
        .iter()
        .filter(|o| !o.passed())
        .map(|o| o.reproduce().to_owned())
        .collect();
    let reports: Vec<ScenarioReport> = outcomes
        .into_iter()
        .filter_map(|o| match o {
            Outcome::Ran(report) => Some(*report),
            Outcome::Panicked { .. } => None,
        })
        .collect();
    if let Some(dir) = &cli.report_dir {
        for report in &reports {
            let files = report::write_dir(dir, report)?;
            println!("  wrote {} files to {}", files.len(), dir.display());
        }
    }
    if cli.json.is_some() {
        write_json(cli, &report::json(&reports))?;
    }
    Ok(failed)
}

/// Writes `text` where --json says (`-` or nothing: stdout).
fn write_json(cli: &Cli, text: &str) -> Result<(), Error> {
    match cli.json.as_deref() {
        None | Some("-") => {
            use std::io::Write as _;
            std::io::stdout()
                .write_all(text.as_bytes())
                .map_err(Error::Stdout)
        }
        Some(path) => report::write_file(std::path::Path::new(path), text),
    }
}

fn seeds(cli: &Cli) -> std::ops::Range<u64> {
    cli.seeds.clone().unwrap_or(cli.seed..cli.seed + 1)
}
