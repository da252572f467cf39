//! `soak`: drive a real PostgreSQL with Queen brokers, measure, emit dated blocks.
//!
//! ```text
//! soak                              the canonical workload; prints the headline numbers
//! soak --smoke                      about a minute and a half, end to end (CI runs it)
//! soak experiments [--only NAME]    both sides of every unmeasured setting, 3 runs each (about 30 minutes here)
//! soak bench                        the sweeper against the physical limit, probe p99, RSS, idle cost
//! soak calibrate                    the simulation model's costs on this rig: sim/calibration/<date>-<rig>.json
//! soak agreement                    the same scenarios in the calibrated sim and on the rig: reports/agreement/<date>-<rig>/
//! soak agreement --check DIR        the sim side again against DIR's rig numbers (no database; CI runs it)
//! soak apply-blocks DIR             put DIR/blocks.sql in place of the markers in sql/
//! soak blocks --check [--strict]    which blocks in sql/ were measured on the code in force
//! soak report DIR                   rebuild DIR/report.md and its plots from the JSON there
//! ```
//!
//! The database: `--database-url`/`DATABASE_URL`, else Docker (testcontainers) if an engine
//! answers, else a throwaway local cluster from the installed PostgreSQL binaries;
//! `--provider url|docker|local` forces one.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use queen_soak::blocks;
use queen_soak::error::{self, Error};
use queen_soak::experiments::{self, Scale};
use queen_soak::provider::{self, DockerOptions, ProviderKind};
use queen_soak::report;
use queen_soak::rig::Rig;
use queen_soak::run::{Run, RunResult, Workload};

#[derive(Debug, Parser)]
#[command(
    name = "soak",
    about = "Drive a real PostgreSQL with Queen brokers, measure, emit dated blocks"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The short end-to-end run CI does (about 90 s).
    #[arg(long)]
    smoke: bool,
    /// Force a provider: url, docker or local.
    #[arg(long, global = true)]
    provider: Option<ProviderKind>,
    #[arg(long, global = true, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// Docker image and tag (the recipe in soak/docker builds queen-soak-postgres:15 offline).
    #[arg(long, global = true)]
    docker_image: Option<String>,
    #[arg(long, global = true)]
    docker_tag: Option<String>,
    /// Docker network mode: host (default; PostgreSQL on a free loopback port) or bridge.
    #[arg(long, global = true)]
    docker_network: Option<String>,
    /// Seconds per run (the canonical run, each experiment point, each bench drain).
    #[arg(long, global = true)]
    seconds: Option<u64>,
    /// Brokers as `queen-sweeper serve` processes (the canonical run); with --kill-one-at, one is
    /// killed with SIGKILL that many seconds in.
    #[arg(long)]
    broker_processes: bool,
    #[arg(long)]
    kill_one_at: Option<u64>,
    /// Where reports go (default: reports/<date>-<rig>).
    #[arg(long, global = true)]
    out: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// One sweep per unmeasured setting; writes report.md, plots, experiments.json, blocks.sql.
    Experiments {
        /// Only the settings whose name contains this.
        #[arg(long)]
        only: Option<String>,
        /// Runs per point (at least 3 for a block: min / median / max, and an edge is resolved
        /// only when its range clears its neighbour's).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
        reps: u32,
    },
    /// The sweeper against the physical limit (1, 2, 4 connections), PG CPU per timer, each
    /// call's time at 0-1M pending, lateness against the rate, a burst, a SIGKILL, RSS, idle cost.
    Bench {
        /// Only these parts, merged into the bench.json already in the output directory.
        #[arg(long, value_delimiter = ',')]
        only: Vec<queen_soak::bench::Part>,
    },
    /// The broker under faults (backend termination, a SIGKILLed broker, a server crash, slow
    /// clients, a held snapshot), each run ending with
    /// the delivery checks; writes reports/faults/<date>-<rig>/ (`--out DIR` for another).
    /// Exits 1 when a delivery check fails, or a target is missed (without --small).
    Faults {
        /// Only these cases (repeatable): terminate, kill, crash, api-quiet, slow-clients, bad-input,
        /// steady, steady-tuned, snapshot.
        #[arg(long, value_name = "CASE")]
        only: Vec<String>,
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
        reps: u32,
        /// CI's size: one short repetition of each case.
        #[arg(long)]
        small: bool,
        /// Seconds of load of steady, steady-tuned and snapshot (300 by default; 10 with --small).
        #[arg(long, value_parser = clap::value_parser!(u64).range(10..=86_400))]
        long_seconds: Option<u64>,
    },
    /// Measure the simulation model's costs on this rig (about a minute); writes
    /// `sim/calibration/<date>-<rig>.json` (`--out DIR` for another directory).
    Calibrate {
        /// No database: recompute, from FILE's stored measurements, the costs fitted by running
        /// the model (the WAL bandwidth, the model's parallel drains), and rewrite FILE.
        #[arg(long, value_name = "FILE")]
        refit: Option<PathBuf>,
    },
    /// The same scenarios in the calibrated simulation and on this rig, side by side (about 10
    /// minutes); writes reports/agreement/<date>-<rig>/ (`--out DIR` for another).
    Agreement {
        /// No database: rerun the simulation side against the rig numbers stored in DIR and
        /// fail when a row that agreed there no longer does.
        #[arg(long, value_name = "DIR")]
        check: Option<PathBuf>,
        /// No database: rerun the simulation side of the report in DIR at this commit and
        /// rewrite it (the rig numbers stay as measured).
        #[arg(long, value_name = "DIR", conflicts_with = "check")]
        resim: Option<PathBuf>,
        /// Run only these cases on the rig (repeatable; a partial report, needs `--out`).
        #[arg(long, value_name = "CASE")]
        only: Vec<String>,
        /// The simulation side's costs from this calibration file (default: the newest
        /// committed one, built in).
        #[arg(long, value_name = "FILE")]
        calibration: Option<PathBuf>,
        /// Runs of each case on the rig; its rows are the medians (this rig's drains vary by
        /// about 20% from run to run).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
        reps: u32,
    },
    /// Rebuild DIR/report.md and its plots from the JSON there (no database).
    Report { dir: PathBuf },
    /// Replace the `[not measured]` markers in sql/ with DIR/blocks.sql.
    ApplyBlocks {
        dir: PathBuf,
        #[arg(long, default_value = "sql")]
        sql_dir: PathBuf,
        /// The sweeper's config.rs, whose knobs table holds the defaults the blocks decide.
        #[arg(long, default_value = "sweeper/src/config.rs")]
        config: PathBuf,
        /// The API's config.rs, whose Knob constants hold the broker process's defaults.
        #[arg(long, default_value = "sweeper/broker/src/api/config.rs")]
        api_config: PathBuf,
        /// Apply the blocks that can be and list the refused ones (default: a refusal writes
        /// nothing).
        #[arg(long)]
        partial: bool,
    },
    /// The dated blocks in force, and which of them were measured on the code in force (no
    /// database).
    Blocks {
        /// List every block in sql/ as current or stale: stale when it names no commit, or
        /// when a file its setting governs changed after the commit it names.
        #[arg(long)]
        check: bool,
        /// Fail (exit 1) when a block is stale.
        #[arg(long, requires = "check")]
        strict: bool,
        #[arg(long, default_value = "sql")]
        sql_dir: PathBuf,
        /// Apply the decision rule in force again to the findings of an experiments directory
        /// (its measurements unchanged) and rewrite its blocks.sql and report.
        #[arg(long, value_name = "DIR", conflicts_with = "check")]
        redecide: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The commands that need no database, and no runtime.
    let offline = match &cli.command {
        Some(Command::ApplyBlocks {
            dir,
            sql_dir,
            config,
            api_config,
            partial,
        }) => Some(
            blocks::apply(
                dir,
                blocks::Targets {
                    sql_dir,
                    config,
                    api_config,
                    partial: *partial,
                },
            )
            .map(|applied| {
                applied
                    .iter()
                    .map(|l| {
                        if l.starts_with("REFUSED ") || l.starts_with(blocks::UNDECIDED) {
                            l.clone()
                        } else {
                            format!("applied {l}")
                        }
                    })
                    .collect()
            })
            .map_err(Error::Message),
        ),
        Some(Command::Blocks {
            check: true,
            strict,
            sql_dir,
            ..
        }) => Some(blocks_check(sql_dir, *strict)),
        Some(Command::Blocks {
            redecide: Some(dir),
            ..
        }) => Some(report::redecide(dir)),
        Some(Command::Blocks { check: false, .. }) => Some(Err(Error::Message(
            "soak blocks: say --check or --redecide DIR (the blocks are written by soak experiments)"
                .into(),
        ))),
        Some(Command::Calibrate { refit: Some(file) }) => Some(refit(file)),
        Some(Command::Agreement {
            resim: Some(dir),
            calibration,
            ..
        }) => Some(
            agreement_model(calibration.as_deref())
                .and_then(|model| {
                    queen_soak::agreement::resim(dir, &queen_soak::rig::source_commit(), &model)
                })
                .and_then(|a| queen_soak::agreement::write_report(dir, &a))
                .map(|()| vec![format!("wrote {}", dir.join("report.md").display())]),
        ),
        Some(Command::Agreement {
            check: Some(dir),
            calibration,
            ..
        }) => Some(
            agreement_model(calibration.as_deref())
                .and_then(|model| queen_soak::agreement::check(dir, &model))
                .and_then(|broken| {
                    if broken.is_empty() {
                        Ok(vec![format!(
                            "agreement: every row that agreed in {} still does",
                            dir.display()
                        )])
                    } else {
                        Err(Error::Broken(format!(
                            "rows that agreed in {} no longer do: {}",
                            dir.display(),
                            broken.join("; ")
                        )))
                    }
                }),
        ),
        Some(Command::Report { dir }) => Some(
            report::rebuild_existing(dir)
                .map(|()| vec![format!("wrote {}", dir.join("report.md").display())]),
        ),
        _ => None,
    };
    if let Some(outcome) = offline {
        return match outcome {
            Ok(lines) => {
                for line in lines {
                    println!("{line}");
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("soak: {}", error::chain(&e));
                ExitCode::FAILURE
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("soak: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(soak(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("soak: {}", error::chain(&e));
            ExitCode::FAILURE
        }
    }
}

fn docker_options(cli: &Cli) -> Result<DockerOptions, Error> {
    let mut options = DockerOptions::default();
    if let Some(image) = &cli.docker_image {
        options.image.clone_from(image);
    }
    if let Some(tag) = &cli.docker_tag {
        options.tag.clone_from(tag);
    }
    match cli.docker_network.as_deref() {
        None | Some("host") => {}
        Some("bridge") => options.host_network = false,
        Some(other) => {
            return Err(Error::Usage(format!(
                "--docker-network {other:?}: use host or bridge"
            )));
        }
    }
    Ok(options)
}

/// `queen-sweeper` built next to this binary, for broker processes.
fn sweeper_binary() -> Option<PathBuf> {
    let candidate = std::env::current_exe()
        .ok()?
        .parent()?
        .join("queen-sweeper");
    candidate.is_file().then_some(candidate)
}

async fn soak(cli: Cli) -> Result<(), Error> {
    let database = provider::provide(
        cli.provider,
        cli.database_url.clone(),
        &docker_options(&cli)?,
    )
    .await?;
    eprintln!(
        "soak: PostgreSQL from {:?}: {}",
        database.provider, database.description
    );
    let rig = read_rig(&database).await?;
    eprintln!("soak: rig {}", rig.describe());
    let binary = sweeper_binary();
    if let Some(broker) = &binary {
        queen_soak::rig::same_build(broker)?;
    }
    let built = queen_soak::rig::source_commit();
    match queen_soak::rig::tree_commit() {
        Some(tree) if tree != built => eprintln!(
            "soak: built at {built}, the working tree is at {tree}: the reports name {built}, the code that measures"
        ),
        _ => {}
    }
    let run = Run {
        server_url: &database.url,
        sweeper_binary: binary.as_deref(),
        quiet: false,
    };
    let date = today();
    let out = cli
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("reports/{date}-{}", rig.label())));

    match (&cli.command, cli.smoke) {
        (_, true) => smoke(&run, &rig, &date, binary.is_some()).await,
        (Some(Command::Experiments { only, reps }), _) => {
            let scale = Scale {
                seconds: cli.seconds.unwrap_or(12),
                reps: *reps,
            };
            run_experiments(&run, scale, only.as_deref(), (&date, &rig), &out).await
        }
        (Some(Command::Bench { only }), _) => {
            run_bench(&run, cli.seconds.unwrap_or(30), only, (&date, &rig), &out).await
        }
        (
            Some(Command::Agreement {
                only,
                calibration,
                reps,
                ..
            }),
            _,
        ) => {
            if !only.is_empty() && cli.out.is_none() {
                return Err(Error::Message(
                    "agreement --only writes a partial report: name its directory with --out"
                        .into(),
                ));
            }
            let model = agreement_model(calibration.as_deref())?;
            let dir = cli.out.clone().unwrap_or_else(|| {
                PathBuf::from(format!("reports/agreement/{date}-{}", rig.label()))
            });
            let commit = queen_soak::rig::source_commit();
            let agreement = queen_soak::agreement::run(
                &run,
                &commit,
                &rig.describe(),
                &date,
                only,
                &model,
                *reps,
            )
            .await?;
            queen_soak::agreement::write_report(&dir, &agreement)?;
            println!("wrote {}", dir.join("report.md").display());
            Ok(())
        }
        (
            Some(Command::Faults {
                only,
                reps,
                small,
                long_seconds,
            }),
            _,
        ) => {
            use queen_soak::faults;
            let mut size = if *small {
                faults::Size::smoke()
            } else {
                faults::Size::full(*reps)
            };
            if let Some(seconds) = long_seconds {
                size.long_seconds = *seconds;
            }
            let dir = cli
                .out
                .clone()
                .unwrap_or_else(|| PathBuf::from(format!("reports/faults/{date}-{}", rig.label())));
            let commit = queen_soak::rig::source_commit();
            let found = faults::run(&run, size, only, (&date, &rig.describe(), &commit)).await?;
            report::write_json(&dir, "faults.json", &found)?;
            report::write_file(&dir.join("report.md"), &faults::markdown(&found, size))?;
            println!("wrote {}", dir.join("report.md").display());
            // A missed target fails the full run; the small one (CI, on a shared machine) only
            // prints it: its delivery checks are what it guards.
            let mut failed = found.broken();
            if *small {
                for missed in found.missed() {
                    eprintln!("soak: faults (small): target missed: {missed}");
                }
            } else {
                failed.extend(found.missed());
            }
            if failed.is_empty() {
                Ok(())
            } else {
                Err(Error::Broken(failed.join("; ")))
            }
        }
        (Some(Command::Calibrate { .. }), _) => {
            let dir = cli
                .out
                .clone()
                .unwrap_or_else(|| PathBuf::from("sim/calibration"));
            calibrate(&database.url, &rig, &date, &dir).await
        }
        (
            Some(Command::ApplyBlocks { .. } | Command::Report { .. } | Command::Blocks { .. }),
            _,
        ) => {
            unreachable!("handled before the runtime starts")
        }
        (None, false) => {
            let runs = canonical(&run, &cli, cli.seconds.unwrap_or(60)).await?;
            if let Some(dir) = &cli.out {
                report::write_json(dir, report::RIG, &rig)?;
                report::write_json(dir, report::CANONICAL, &runs)?;
                report::rebuild(dir)?;
                println!("wrote the report to {}", dir.display());
            }
            check_delivery(&runs)
        }
    }
}

/// `soak blocks --check`: a line per block; with `strict`, an error when any is stale.
fn blocks_check(sql_dir: &Path, strict: bool) -> Result<Vec<String>, Error> {
    let found = queen_soak::currency::check(Path::new("."), sql_dir).map_err(Error::Message)?;
    let undecided = found
        .iter()
        .filter(|c| matches!(c.verdict, queen_soak::currency::Verdict::Undecided { .. }))
        .count();
    let stale = found.iter().filter(|c| !c.is_current()).count() - undecided;
    let mut lines: Vec<String> = found.iter().map(|c| c.line()).collect();
    lines.push(format!(
        "blocks: {} current, {stale} stale (soak experiments measures them again), {undecided} undecided (measured on the code in force; the rule gave no value, a person decides)",
        found.len() - stale - undecided
    ));
    if strict && stale + undecided > 0 {
        return Err(Error::Broken(lines.join("\n")));
    }
    Ok(lines)
}

/// The simulation side's model: `--calibration FILE`, else the built-in calibration.
fn agreement_model(file: Option<&Path>) -> Result<queen_soak::agreement::Model, Error> {
    match file {
        Some(path) => queen_soak::agreement::Model::from_file(path),
        None => Ok(queen_soak::agreement::Model::builtin()),
    }
}

/// `soak calibrate`: measures, writes the file, prints the costs and each fit's error.
async fn calibrate(url: &str, rig: &Rig, date: &str, dir: &Path) -> Result<(), Error> {
    let calibration = queen_soak::calibrate::measure(url, rig, date).await?;
    let file = format!("{date}-{}.json", rig.label());
    report::write_json(dir, &file, &calibration)?;
    println!("{}", queen_soak::calibrate::summary(&calibration));
    println!("wrote {}", dir.join(file).display());
    Ok(())
}

/// `soak calibrate --refit FILE`: the model-fitted costs of FILE again, from its measurements.
fn refit(file: &Path) -> Result<Vec<String>, Error> {
    let mut calibration = queen_harness::calibration::Calibration::load(file)
        .map_err(|e| Error::Message(format!("soak calibrate --refit: {e}")))?;
    queen_soak::calibrate::fit_to_drains(&mut calibration)?;
    calibration.refitted_at = Some(queen_soak::rig::source_commit());
    let dir = file.parent().unwrap_or(Path::new("."));
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::Message(format!("not a file name: {}", file.display())))?;
    report::write_json(dir, name, &calibration)?;
    Ok(vec![
        queen_soak::calibrate::summary(&calibration),
        format!("rewrote {}", file.display()),
    ])
}

/// The machine and the server the measurements are taken on, read over a connection of its own.
async fn read_rig(database: &provider::Database) -> Result<Rig, Error> {
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&database.url)
        .await
        .map_err(Error::db("cannot connect"))?;
    let rig = Rig::read(&admin, &format!("{:?}", database.provider).to_lowercase()).await?;
    admin.close().await;
    Ok(rig)
}

/// Today's date on the wall clock, `YYYY-MM-DD`, for report directories and dated blocks.
fn today() -> String {
    chrono::DateTime::from_timestamp(queen_sweeper::clock::wall_since_epoch().as_secs() as i64, 0)
        .map_or_else(
            || "unknown-date".to_owned(),
            |d| d.format("%Y-%m-%d").to_string(),
        )
}

/// `soak experiments`: the sweeps, then their findings, blocks and report in `out`.
async fn run_experiments(
    run: &Run<'_>,
    scale: Scale,
    only: Option<&str>,
    (date, rig): (&str, &Rig),
    out: &Path,
) -> Result<(), Error> {
    let mut findings = experiments::run_all(run, scale, only, (date, rig)).await?;
    if only.is_some() {
        // Keep the other settings' findings of an earlier run in the same directory.
        findings = report::merge_findings(out, findings)?;
    }
    let emitted = blocks::blocks(&findings, rig, date);
    report::write_json(out, report::RIG, rig)?;
    report::write_json(out, report::EXPERIMENTS, &findings)?;
    report::write_file(
        &out.join("blocks.sql"),
        &blocks::file_text(&emitted, rig, date),
    )?;
    report::rebuild(out)?;
    for f in &findings {
        println!(
            "{} (shipped {}): edge {:?}, shipped safe: {}; {}",
            f.setting, f.shipped, f.threshold, f.shipped_ok, f.observed
        );
    }
    println!(
        "wrote {} blocks and the report to {}",
        emitted.len(),
        out.display()
    );
    Ok(())
}

/// `soak bench`: the bench, printed and written with the report in `out`.
async fn run_bench(
    run: &Run<'_>,
    seconds: u64,
    only: &[queen_soak::bench::Part],
    (date, rig): (&str, &Rig),
    out: &Path,
) -> Result<(), Error> {
    use queen_soak::bench::{Bench, Part};
    let (parts, earlier) = if only.is_empty() {
        (Part::ALL.to_vec(), Bench::empty(date))
    } else {
        let earlier = report::read_bench(out)?.unwrap_or_else(|| Bench::empty(date));
        (only.to_vec(), earlier)
    };
    let bench = queen_soak::bench::run(run, seconds, date, &parts, earlier).await?;
    report::write_json(out, report::RIG, rig)?;
    report::write_json(out, report::BENCH, &bench)?;
    report::rebuild(out)?;
    println!(
        "wrote the bench to {} ({} and report.md)",
        out.display(),
        report::BENCH
    );
    Ok(())
}

/// The canonical workload, and the same pushes without a sweeper for the push p99 impact.
async fn canonical(run: &Run<'_>, cli: &Cli, seconds: u64) -> Result<Vec<RunResult>, Error> {
    let mut alone = Workload::canonical(seconds.min(30));
    alone.label = "pushes alone (no sweeper)".into();
    alone.brokers = 0;
    alone.timers_per_s = 0;
    alone.kv_per_s = 0;
    let baseline = run.execute(&alone, "canonical_baseline").await?;
    let mut workload = Workload::canonical(seconds);
    workload.broker_processes = cli.broker_processes || cli.kill_one_at.is_some();
    workload.kill_one_at_s = cli.kill_one_at;
    if cli.kill_one_at.is_some() {
        // A killed broker's claims come back after the lease: keep it short enough to see.
        workload = workload
            .knob("QUEEN_SWEEPER_LEASE_MS", 10_000)
            .knob("QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS", 5_000);
        workload.drain_limit_s = 30;
    }
    let result = run.execute(&workload, "canonical").await?;
    println!("{}", report::headline(&baseline));
    println!("{}", report::headline(&result));
    println!(
        "headline: {:.0} timers fired/s, lateness p99 {} ms, push p99 {} ms with the sweeper vs {} ms without ({:+.1} ms)",
        result.fired_per_s,
        result.lateness_ms.p99,
        result.push_latency_ms.p99,
        baseline.push_latency_ms.p99,
        result.push_latency_ms.p99 - baseline.push_latency_ms.p99
    );
    Ok(vec![baseline, result])
}

/// Exactly once and never early, or the run fails.
fn check_delivery(runs: &[RunResult]) -> Result<(), Error> {
    for r in runs {
        if r.duplicates != 0 || r.never_fired != 0 || r.fired_early != 0 {
            return Err(Error::Broken(format!(
                "{}: {} duplicated, {} never fired, {} fired early",
                r.workload.label, r.duplicates, r.never_fired, r.fired_early
            )));
        }
    }
    Ok(())
}

/// About a minute and a half, end to end: the canonical workload briefly, a broker process
/// killed with SIGKILL (when the binary is there), two experiment points, dated blocks, and
/// apply-blocks on a copy of sql/.
async fn smoke(run: &Run<'_>, rig: &Rig, date: &str, have_binary: bool) -> Result<(), Error> {
    let mut runs = Vec::new();
    let mut quick = Workload::canonical(15);
    quick.label = "smoke".into();
    runs.push(run.execute(&quick, "smoke").await?);
    println!("{}", report::headline(&runs[0]));
    if have_binary {
        let mut killed = Workload::canonical(15);
        killed.label = "smoke, a broker SIGKILLed".into();
        killed.brokers = 2;
        killed.broker_processes = true;
        killed.kill_one_at_s = Some(5);
        killed.drain_limit_s = 20;
        killed = killed
            .knob("QUEEN_SWEEPER_LEASE_MS", 4_000)
            .knob("QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS", 2_000);
        runs.push(run.execute(&killed, "smoke_killed").await?);
        println!("{}", report::headline(&runs[1]));
    } else {
        println!(
            "smoke: no queen-sweeper binary next to soak; the broker-process run is skipped (cargo build --release -p queen-broker)"
        );
    }
    check_delivery(&runs)?;
    let findings = experiments::run_all(
        run,
        Scale {
            seconds: 8,
            reps: 1,
        },
        Some("MAX_SLEEP"),
        (date, rig),
    )
    .await?;
    let emitted = blocks::blocks(&findings, rig, date);
    if emitted.is_empty() {
        return Err(Error::Broken(
            "the smoke experiment measured no shipped value".to_owned(),
        ));
    }
    let scratch = std::env::temp_dir().join(format!("queen-soak-smoke-{}", std::process::id()));
    let sql_copy = scratch.join("sql");
    copy_sql(Path::new("sql"), &sql_copy)?;
    report::write_file(
        &scratch.join("blocks.sql"),
        &blocks::file_text(&emitted, rig, date),
    )?;
    let config_copy = scratch.join("config.rs");
    let api_config_copy = scratch.join("api_config.rs");
    for (from, to) in [
        ("sweeper/src/config.rs", &config_copy),
        ("sweeper/broker/src/api/config.rs", &api_config_copy),
    ] {
        std::fs::copy(from, to).map_err(|e| {
            Error::Message(format!(
                "cannot copy {from} (soak runs from the repository root): {e}"
            ))
        })?;
    }
    let applied = blocks::apply(
        &scratch,
        blocks::Targets {
            sql_dir: &sql_copy,
            config: &config_copy,
            api_config: &api_config_copy,
            partial: true,
        },
    )?;
    let _ = std::fs::remove_dir_all(&scratch);
    println!(
        "smoke: {} block(s) emitted and applied to a copy of sql/: {}",
        applied.len(),
        applied.join(", ")
    );
    Ok(())
}

/// Copies `from`'s `.sql` files into `to`. `from` is relative: soak runs from the repository
/// root.
fn copy_sql(from: &Path, to: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(to).map_err(|source| Error::CreateDir {
        path: to.to_owned(),
        source,
    })?;
    let read = |source| Error::Read {
        path: from.to_owned(),
        source,
    };
    for entry in std::fs::read_dir(from).map_err(read)? {
        let path = entry.map_err(read)?.path();
        if path.extension().is_some_and(|x| x == "sql") {
            let copy = to.join(path.file_name().expect("a file"));
            std::fs::copy(&path, &copy).map_err(|source| Error::Write { path: copy, source })?;
        }
    }
    Ok(())
}
