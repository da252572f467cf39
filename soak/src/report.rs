//! `reports/<date>-<rig>/`: `report.md` (a summary table first, then plots, then the raw JSON
//! beside it), SVG plots, `blocks.sql`, and the JSON of each part. The page is rebuilt from every
//! JSON present, so `soak experiments` and `soak bench` may run at different times.

use std::fmt::Write as _;
use std::path::Path;

use queen_harness::{LineChart, Mark, SweepPoint};

use crate::bench::Bench;
use crate::error::Error;
use crate::experiments::Finding;
use crate::rig::Rig;
use crate::run::RunResult;

pub const CANONICAL: &str = "canonical.json";
pub const EXPERIMENTS: &str = "experiments.json";
pub const BENCH: &str = "bench.json";
pub const RIG: &str = "rig.json";

pub fn write_json<T: serde::Serialize>(dir: &Path, file: &str, value: &T) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::CreateDir {
        path: dir.to_owned(),
        source,
    })?;
    let text = serde_json::to_string_pretty(value).expect("reports serialise") + "\n";
    write_file(&dir.join(file), &text)
}

/// Writes `text` to `path`, naming the path when it cannot.
pub fn write_file(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|source| Error::Write {
        path: path.to_owned(),
        source,
    })
}

/// The bench already written to `dir`, if any.
pub fn read_bench(dir: &Path) -> Result<Option<Bench>, Error> {
    read_json(dir, BENCH)
}

fn read_json<T: for<'de> serde::Deserialize<'de>>(
    dir: &Path,
    file: &str,
) -> Result<Option<T>, Error> {
    match std::fs::read_to_string(dir.join(file)) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| Error::Json {
                path: dir.join(file),
                source,
            }),
        Err(_) => Ok(None),
    }
}

/// `fresh` findings, with those of an earlier run in `dir` for the settings `fresh` does not
/// cover, in the earlier order.
pub fn merge_findings(dir: &Path, fresh: Vec<Finding>) -> Result<Vec<Finding>, Error> {
    let Some(earlier) = read_json::<Vec<Finding>>(dir, EXPERIMENTS)? else {
        return Ok(fresh);
    };
    let mut merged: Vec<Finding> = earlier
        .into_iter()
        .map(|old| {
            fresh
                .iter()
                .find(|f| f.setting == old.setting)
                .cloned()
                .unwrap_or(old)
        })
        .collect();
    for f in fresh {
        if !merged.iter().any(|m| m.setting == f.setting) {
            merged.push(f);
        }
    }
    Ok(merged)
}

/// The headline numbers of one run, for the terminal.
pub fn headline(result: &RunResult) -> String {
    let mut line = headline_counts(result);
    if result.schedule_failures > 0 {
        line.push_str(&format!(
            "; {} schedule call(s) FAILED, the first: {}",
            result.schedule_failures,
            result.first_schedule_error.as_deref().unwrap_or("?")
        ));
    }
    if let Some(kill) = &result.kill {
        line.push_str(&format!(
            "; SIGKILL at {} s: {} timers due before it fired after it, the last {} ms after the kill (their lateness p99 {} ms, max {} ms)",
            kill.at_s,
            kill.overdue_at_kill,
            kill.last_fired_after_kill_ms,
            kill.lateness_ms.p99,
            kill.lateness_ms.max
        ));
    }
    line
}

fn headline_counts(result: &RunResult) -> String {
    format!(
        "{}: {:.1} s, fired {} ({:.0}/s), lateness p50 {} ms p99 {} ms max {} ms, stale segments {}, push p50 {} ms p99 {} ms, WAL {:.2} MB/s, duplicates {}, never fired {}, fired early {}",
        result.workload.label,
        result.seconds,
        result.counters.fired,
        result.fired_per_s,
        result.lateness_ms.p50,
        result.lateness_ms.p99,
        result.lateness_ms.max,
        result.counters.stale_segments,
        result.push_latency_ms.p50,
        result.push_latency_ms.p99,
        result.wal_bytes_per_s / 1e6,
        result.duplicates,
        result.never_fired,
        result.fired_early
    )
}

/// [`rebuild`] for a directory a person named: it must exist and hold a run's JSON.
pub fn rebuild_existing(dir: &Path) -> Result<(), Error> {
    if !dir.is_dir() {
        return Err(Error::Nothing(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let inputs = [RIG, CANONICAL, EXPERIMENTS, BENCH];
    if !inputs.iter().any(|f| dir.join(f).exists()) {
        return Err(Error::Nothing(format!(
            "{} holds none of {}: nothing to report",
            dir.display(),
            inputs.join(", ")
        )));
    }
    rebuild(dir)
}

/// `soak blocks --redecide DIR`: the decision rule in force applied again to the findings in
/// `dir`; rewrites experiments.json, blocks.sql and the report. Returns what it decided.
pub fn redecide(dir: &Path) -> Result<Vec<String>, Error> {
    let rig: Rig = read_json(dir, RIG)?
        .ok_or_else(|| Error::Message(format!("{}: no {RIG}", dir.display())))?;
    let mut findings: Vec<Finding> = read_json(dir, EXPERIMENTS)?
        .ok_or_else(|| Error::Message(format!("{}: no {EXPERIMENTS}", dir.display())))?;
    crate::experiments::redecide(&mut findings);
    let date = findings
        .first()
        .map_or_else(String::new, |f| f.measured_on.clone());
    let emitted = crate::blocks::blocks(&findings, &rig, &date);
    write_json(dir, EXPERIMENTS, &findings)?;
    write_file(
        &dir.join("blocks.sql"),
        &crate::blocks::file_text(&emitted, &rig, &date),
    )?;
    rebuild(dir)?;
    Ok(emitted
        .iter()
        .map(|b| format!("{} = {}: {:?}", b.setting, b.value, b.decided()))
        .collect())
}

/// Rebuilds `report.md` and the plots from the JSON in `dir`.
pub fn rebuild(dir: &Path) -> Result<(), Error> {
    let rig: Option<Rig> = read_json(dir, RIG)?;
    let canonical: Option<Vec<RunResult>> = read_json(dir, CANONICAL)?;
    let findings: Option<Vec<Finding>> = read_json(dir, EXPERIMENTS)?;
    let bench: Option<Bench> = read_json(dir, BENCH)?;
    let mut page = String::new();
    let _ = writeln!(
        page,
        "# Soak report: {}\n",
        dir.file_name().and_then(|n| n.to_str()).unwrap_or("soak")
    );
    if let Some(rig) = &rig {
        let _ = writeln!(page, "Rig of the latest run: {}.\n", rig.describe());
    }
    if let Some(findings) = &findings {
        findings_table(&mut page, findings);
    }
    if let Some(bench) = &bench {
        if bench.drains.is_empty() {
            // A bench from before 2026-12-04: one-connection limit, probe timings only.
            bench_table(&mut page, bench);
        } else {
            crate::bench::report::section(&mut page, dir, bench)?;
        }
    }
    if let Some(runs) = &canonical {
        canonical_section(&mut page, dir, runs)?;
    }
    if let Some(findings) = &findings {
        experiment_plots(&mut page, dir, findings)?;
    }
    let _ = writeln!(page, "## Raw data\n");
    // floor.md is written by hand: the bench's gap to its limit taken apart statement by statement.
    for file in [RIG, CANONICAL, EXPERIMENTS, BENCH, "blocks.sql", "floor.md"] {
        if dir.join(file).exists() {
            let _ = writeln!(page, "- [`{file}`]({file})");
        }
    }
    write_file(&dir.join("report.md"), &page)
}

fn findings_table(page: &mut String, findings: &[Finding]) {
    let _ = writeln!(page, "## Settings\n");
    // Findings kept from earlier runs by `--only` carry their own day and rig; list every rig
    // once and point to it.
    let mut rigs: Vec<&str> = Vec::new();
    for f in findings {
        if !f.rig.is_empty() && !rigs.contains(&f.rig.as_str()) {
            rigs.push(&f.rig);
        }
    }
    let _ = writeln!(
        page,
        "| setting | shipped | decided | edge of side 1 | shipped safe on every side | runs per value | measured | commit | load |"
    );
    let _ = writeln!(page, "|---|---|---|---|---|---|---|---|---|");
    for f in findings {
        let measured = match rigs.iter().position(|r| *r == f.rig) {
            Some(i) => format!("{} (rig {})", f.measured_on, i + 1),
            None => "before findings were dated (see blocks.sql)".to_owned(),
        };
        let decided = match &f.decision {
            None => "(not decided by rule)".to_owned(),
            Some(d) => d.value.map_or("**none**".to_owned(), |v| {
                if v == f.shipped {
                    v.to_string()
                } else {
                    format!("**{v}**")
                }
            }),
        };
        let _ = writeln!(
            page,
            "| `{}` | {} | {decided} | {} | {} | {} | {} | {} | {} |",
            f.setting,
            f.shipped,
            f.threshold
                .map_or("none found in the sweep".to_owned(), |t| t.to_string()),
            if f.shipped_ok { "yes" } else { "**no**" },
            f.reps.max(1),
            measured,
            if f.commit.is_empty() { "-" } else { &f.commit },
            f.load,
        );
    }
    let _ = writeln!(page);
    for (i, rig) in rigs.iter().enumerate() {
        let _ = writeln!(page, "- rig {}: {rig}", i + 1);
    }
    if !rigs.is_empty() {
        let _ = writeln!(page);
    }
}

fn bench_table(page: &mut String, bench: &Bench) {
    let _ = writeln!(page, "## Bench: against the physical limit\n");
    if !bench.measured_on.is_empty() {
        let _ = writeln!(page, "Measured {}.\n", bench.measured_on);
    }
    let runs = bench
        .limit_runs_per_s
        .iter()
        .map(|r| format!("{r:.0}"))
        .collect::<Vec<_>>()
        .join(", ");
    let around = !bench.limit_around_per_s.is_empty();
    let _ = writeln!(
        page,
        "The limit: {} timers ({} B payloads) moved into the log by one set-based statement per batch of {} on one connection: **{:.0} timers/s** on average, measured {} ({runs}); each run's share is {}.\n",
        bench.backlog,
        bench.payload_bytes,
        bench.limit_batch,
        bench.limit_per_s,
        if around {
            "before the first sweeper run and after each"
        } else {
            "before and after the sweeper's runs"
        },
        if around {
            "of the mean of the two measurements around it"
        } else {
            "of that mean"
        },
    );
    let _ = writeln!(
        page,
        "| brokers | sweeper drain rate (timers/s) | limit around the run (timers/s) | share of the limit | target |"
    );
    let _ = writeln!(page, "|---|---|---|---|---|");
    for (brokers, rate, share) in &bench.sweeper_per_s {
        let limit = bench
            .limit_around_per_s
            .iter()
            .find(|(b, _)| b == brokers)
            .map_or(bench.limit_per_s, |(_, l)| *l);
        let _ = writeln!(
            page,
            "| {brokers} | {rate:.0} | {limit:.0} | {share}% | {} |",
            if *share >= 70.0 {
                "met (≥ 70%)"
            } else {
                "**missed** (< 70%)"
            }
        );
    }
    let _ = writeln!(
        page,
        "\n| pending timers | probe p50 ms | probe p99 ms | probe max ms |"
    );
    let _ = writeln!(page, "|---|---|---|---|");
    for (pending, spread) in &bench.probe_ms {
        let _ = writeln!(
            page,
            "| {pending} | {} | {} | {} |",
            spread.p50, spread.p99, spread.max
        );
    }
    if !bench.peak_rss_kib.is_empty() {
        let _ = writeln!(page, "\n| due backlog | broker process peak RSS | target |");
        let _ = writeln!(page, "|---|---|---|");
        for (backlog, kib) in &bench.peak_rss_kib {
            let mib = *kib as f64 / 1024.0;
            let _ = writeln!(
                page,
                "| {backlog} | {mib:.1} MiB | {} |",
                if mib < 64.0 {
                    "met (< 64 MiB)"
                } else {
                    "**missed**"
                }
            );
        }
    }
    let calls: Vec<String> = bench
        .idle_calls_per_s
        .iter()
        .map(|(k, v)| format!("{k} {v}/s"))
        .collect();
    let _ = writeln!(
        page,
        "\nIdle cost of one broker with nothing due: {}.\n",
        calls.join(", ")
    );
}

/// A chart: file suffix, title, and the value it plots per second.
type Chart = (&'static str, &'static str, fn(&crate::run::Sample) -> f64);

fn canonical_section(page: &mut String, dir: &Path, runs: &[RunResult]) -> Result<(), Error> {
    let _ = writeln!(page, "## Canonical workload\n");
    let _ = writeln!(
        page,
        "| run | load | fired/s | lateness p50 / p99 / max ms | stale segments | push p50 / p99 ms | WAL MB/s | duplicates / never fired / early |"
    );
    let _ = writeln!(page, "|---|---|---|---|---|---|---|---|");
    for r in runs {
        let _ = writeln!(
            page,
            "| {} | {} | {:.0} | {} / {} / {} | {} | {} / {} | {:.2} | {} / {} / {} |",
            r.workload.label,
            r.workload.describe(),
            r.fired_per_s,
            r.lateness_ms.p50,
            r.lateness_ms.p99,
            r.lateness_ms.max,
            r.counters.stale_segments,
            r.push_latency_ms.p50,
            r.push_latency_ms.p99,
            r.wal_bytes_per_s / 1e6,
            r.duplicates,
            r.never_fired,
            r.fired_early
        );
    }
    let _ = writeln!(page);
    let charts: [Chart; 6] = [
        ("lateness", "fire lateness p99 (ms)", |s| s.lateness_p99_ms),
        ("fired", "timers fired per second", |s| s.fired_per_s),
        ("stale", "stale segments per second", |s| {
            s.stale_segments as f64
        }),
        ("push-p99", "push p99 (ms)", |s| s.push_p99_ms),
        ("table-size", "log_timers + kv bytes", |s| {
            (s.timers_bytes + s.kv_bytes) as f64
        }),
        ("expired-not-pruned", "expired KV rows not pruned", |s| {
            s.expired_not_pruned as f64
        }),
    ];
    for (name, title, metric) in charts {
        let lines: Vec<(String, Vec<(f64, f64)>)> = runs
            .iter()
            .map(|r| {
                (
                    r.workload.label.clone(),
                    r.series.iter().map(|s| (s.t_s as f64, metric(s))).collect(),
                )
            })
            .collect();
        let file = format!("canonical-{name}.svg");
        chart(title).write_svg(&dir.join(&file), &lines)?;
        let _ = writeln!(page, "![{title}]({file})\n");
    }
    Ok(())
}

/// The soak's charts: seconds of a run across, the title names what is plotted and its unit.
fn chart(title: &str) -> LineChart<'_> {
    LineChart {
        title,
        x_label: "seconds",
        y_label: "",
    }
}

fn experiment_plots(page: &mut String, dir: &Path, findings: &[Finding]) -> Result<(), Error> {
    let _ = writeln!(page, "## Experiments\n");
    for f in findings {
        let _ = writeln!(page, "### `{}`\n", f.setting);
        if let Some(d) = &f.decision {
            let _ = writeln!(
                page,
                "Decision: **{}** (shipped {}): {}.\n",
                d.value.map_or("none".to_owned(), |v| v.to_string()),
                f.shipped,
                d.reason
            );
        }
        let stem = f.setting.to_lowercase().replace(' ', "-");
        for (i, side) in f.sides.iter().enumerate() {
            let file = format!("sweep-{stem}-{}.svg", i + 1);
            sweep_chart(dir, &file, f, side)?;
            let _ = writeln!(
                page,
                "{}. {}\n\n   {}\n\n   ![{} side {}]({file})\n",
                i + 1,
                side.symptom,
                side.words(),
                f.setting,
                i + 1
            );
        }
        if f.sides.is_empty() {
            let _ = writeln!(page, "{}\n", f.observed);
        }
        if f.points.iter().any(|p| p.result.is_some()) {
            let (y_label, metric) = over_time_metric(&f.setting);
            let lines: Vec<(String, Vec<(f64, f64)>)> = f
                .points
                .iter()
                .filter_map(|p| {
                    p.result.as_ref().map(|r| {
                        (
                            format!("{}", p.value),
                            r.series.iter().map(|s| (s.t_s as f64, metric(s))).collect(),
                        )
                    })
                })
                .collect();
            let file = format!("experiment-{stem}.svg");
            let title = format!("{} over the median run of each value", f.setting);
            LineChart {
                title: &title,
                x_label: "seconds into the run",
                y_label,
            }
            .write_svg(&dir.join(&file), &lines)?;
            let _ = writeln!(page, "Over time:\n\n![{}]({file})\n", f.setting);
        }
    }
    Ok(())
}

/// What a sweep's over-time chart plots per second, and its axis label.
fn over_time_metric(setting: &str) -> (&'static str, fn(&crate::run::Sample) -> f64) {
    match setting {
        s if s.starts_with("QUEEN_KV_EXPIRE") => ("expired-but-present KV rows", |s| {
            s.expired_not_pruned as f64
        }),
        "QUEEN_SWEEPER_MAX_FIRE_BYTES" => ("push p99 (ms)", |s| s.push_p99_ms),
        s if s.starts_with("QUEEN_SWEEPER_EMPTY_CLAIM") => {
            ("probe + claim calls/s", |s| s.probe_claim_per_s)
        }
        "QUEEN_SWEEPER_LEASE_MS" => ("stale segments", |s| s.stale_segments as f64),
        "QUEEN_SWEEPER_MAX_SLEEP_MS" => ("lateness p99 (ms)", |s| s.lateness_p99_ms),
        "log_timers fillfactor" => ("log_timers bytes", |s| s.timers_bytes as f64),
        "log_timers autovacuum_vacuum_threshold" => ("dead rows in queen.log_timers", |s| {
            s.timers_dead_rows as f64
        }),
        _ => ("timers fired/s", |s| s.fired_per_s),
    }
}

/// One side of a sweep: its metric's median and range against the setting's value, with the
/// shipped value, the edge and the decided value marked.
fn sweep_chart(
    dir: &Path,
    file: &str,
    f: &Finding,
    side: &crate::experiments::Side,
) -> Result<(), Error> {
    let points: Vec<SweepPoint> = side
        .points
        .iter()
        .map(|p| {
            let (low, high) = p.range();
            SweepPoint {
                label: p.value.to_string(),
                median: p.metric,
                low,
                high,
            }
        })
        .collect();
    let index = |v: u64| side.points.iter().position(|p| p.value == v);
    let mut marks = Vec::new();
    if let Some(at) = index(f.shipped) {
        marks.push(Mark {
            at,
            name: format!("shipped {}", f.shipped),
        });
    }
    if let Some(at) = side.edge.and_then(index) {
        let resolved = if side.edge_resolved {
            ""
        } else {
            ", not resolved"
        };
        marks.push(Mark {
            at,
            name: format!("edge {}{resolved}", side.edge.unwrap_or_default()),
        });
    }
    if let Some(v) = f.decision.as_ref().and_then(|d| d.value)
        && v != f.shipped
        && let Some(at) = index(v)
    {
        marks.push(Mark {
            at,
            name: format!("decided {v}"),
        });
    }
    let x_label = if f.unit.is_empty() {
        f.setting.clone()
    } else {
        format!("{} ({})", f.setting, f.unit)
    };
    LineChart {
        title: &side.symptom.chars().take(90).collect::<String>(),
        x_label: &x_label,
        y_label: &side.metric_name.chars().take(70).collect::<String>(),
    }
    .write_sweep_svg(&dir.join(file), &points, &marks)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bench(around: Vec<(u32, f64)>) -> Bench {
        Bench {
            measured_on: "2026-12-03".into(),
            limit_per_s: 19_000.0,
            limit_runs_per_s: vec![20_000.0, 18_000.0],
            limit_around_per_s: around,
            sweeper_per_s: vec![(1, 7_000.0, 36.8), (2, 14_000.0, 73.7)],
            ..Bench::empty("2026-12-03")
        }
    }

    #[test]
    fn each_bench_run_is_shown_against_the_limit_measured_around_it() {
        let mut page = String::new();
        bench_table(&mut page, &bench(vec![(1, 19_500.0), (2, 19_000.0)]));
        assert!(page.contains("Measured 2026-12-03."), "{page}");
        assert!(
            page.contains("| 1 | 7000 | 19500 | 36.8% | **missed** (< 70%) |"),
            "{page}"
        );
        assert!(
            page.contains("| 2 | 14000 | 19000 | 73.7% | met (≥ 70%) |"),
            "{page}"
        );
        assert!(
            page.contains("before the first sweeper run and after each (20000, 18000)"),
            "{page}"
        );
    }

    #[test]
    fn a_bench_from_before_the_brackets_is_shown_against_its_mean() {
        let mut page = String::new();
        bench_table(&mut page, &bench(Vec::new()));
        assert!(page.contains("| 1 | 7000 | 19000 | 36.8% |"), "{page}");
        assert!(
            page.contains("before and after the sweeper's runs"),
            "{page}"
        );
    }

    /// The committed reports were written before knobs and spreads had their own types; they
    /// must still load, or `soak report` cannot rebuild them.
    #[test]
    fn every_committed_soak_report_still_loads() {
        let reports = Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports");
        let mut loaded = 0;
        for entry in std::fs::read_dir(&reports).expect("reports/ exists") {
            let dir = entry.expect("readable").path();
            let findings: Option<Vec<Finding>> = read_json(&dir, EXPERIMENTS).expect("loads");
            let bench: Option<Bench> = read_json(&dir, BENCH).expect("loads");
            let canonical: Option<Vec<RunResult>> = read_json(&dir, CANONICAL).expect("loads");
            loaded += usize::from(findings.is_some())
                + usize::from(bench.is_some())
                + usize::from(canonical.is_some());
        }
        assert!(loaded > 0, "no soak report under {}", reports.display());
    }

    #[test]
    fn a_report_of_a_missing_or_empty_directory_is_an_error() {
        let dir = std::env::temp_dir().join(format!("soak-report-test-{}", std::process::id()));
        let missing = rebuild_existing(&dir).unwrap_err().to_string();
        assert!(missing.contains("is not a directory"), "{missing}");
        std::fs::create_dir_all(&dir).unwrap();
        let empty = rebuild_existing(&dir).unwrap_err().to_string();
        assert!(empty.contains("nothing to report"), "{empty}");
        assert!(!dir.join("report.md").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
