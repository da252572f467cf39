//! `sim`: run named, seeded scenarios of the Queen sweeper's deterministic simulation.
//!
//! ```text
//! sim --scenario livelock --seed 1 [--json report.json] [--duration-s 600]
//! sim --swarm --seeds 1..50
//! sim --all --seeds 1..3
//! sim --list
//! ```
//!
//! Every run prints its seed first; a failure prints the command that reproduces it and exits 1.

use std::process::ExitCode;

use clap::Parser;
use queen_sim::error::{self, Error};
use queen_sim::report;
use queen_sim::scenarios::{self, Options, Scenario, ScenarioReport};

#[derive(Debug, Parser)]
#[command(
    name = "sim",
    about = "Deterministic simulation of N Queen brokers against a modelled PostgreSQL"
)]
struct Cli {
    /// One scenario by name (see --list).
    #[arg(long, value_enum, conflicts_with_all = ["swarm", "all"])]
    scenario: Option<Scenario>,
    /// The seed of a single run.
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
    let Some(plan) = plan(&cli) else {
        eprintln!(
            "sim: say what to run: --scenario NAME, --swarm --seeds A..B, or --all --seeds A..B (--list names them)"
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

/// The (scenario, seed) runs the command line asks for, or `None` when it asks for none.
fn plan(cli: &Cli) -> Option<Vec<(Scenario, u64)>> {
    match (cli.scenario, cli.swarm, cli.all) {
        (Some(scenario), _, _) => Some(vec![(scenario, cli.seed)]),
        (None, true, _) => Some(seeds(cli).map(|s| (Scenario::Swarm, s)).collect()),
        (None, false, true) => Some(
            Scenario::all()
                .iter()
                .flat_map(|scenario| seeds(cli).map(move |s| (*scenario, s)))
                .collect(),
        ),
        (None, false, false) => None,
    }
}

/// Runs the plan, printing each run's table and writing what was asked; returns the reproduce
/// commands of the runs that failed.
fn run(cli: &Cli, plan: &[(Scenario, u64)]) -> Result<Vec<String>, Error> {
    let options = Options {
        duration_s: cli.duration_s,
    };
    let mut reports: Vec<ScenarioReport> = Vec::with_capacity(plan.len());
    for (i, (scenario, seed)) in plan.iter().enumerate() {
        println!("[{}/{}] seed {seed} scenario {scenario}", i + 1, plan.len());
        let report = scenarios::run(*scenario, *seed, options);
        print!("{}", report::table(&report));
        if let Some(dir) = &cli.report_dir {
            let files = report::write_dir(dir, &report)?;
            println!("  wrote {} files to {}", files.len(), dir.display());
        }
        reports.push(report);
    }
    if let Some(path) = &cli.json {
        let text = report::json(&reports);
        if path == "-" {
            use std::io::Write as _;
            std::io::stdout()
                .write_all(text.as_bytes())
                .map_err(Error::Stdout)?;
        } else {
            report::write_file(std::path::Path::new(path), &text)?;
        }
    }
    Ok(reports
        .into_iter()
        .filter(|r| !r.passed)
        .map(|r| r.reproduce)
        .collect())
}

fn seeds(cli: &Cli) -> std::ops::Range<u64> {
    cli.seeds.clone().unwrap_or(cli.seed..cli.seed + 1)
}
