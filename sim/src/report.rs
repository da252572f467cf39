//! Reports are for people: a table first, then the JSON beside it (and, for the reproductions
//! committed under `reports/`, plots). Nothing measured on the wall clock goes into the JSON, so
//! the same seed writes the same bytes.

use std::fmt::Write as _;
use std::path::Path;

use queen_harness::{Line, LineChart};

use crate::analysis;
use crate::error::Error;

use crate::scenarios::ScenarioReport;

/// The summary table of one scenario, with its checks and findings.
pub fn table(report: &ScenarioReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scenario {} seed {}: {}",
        report.scenario,
        report.seed,
        if report.passed { "PASSED" } else { "FAILED" }
    );
    let _ = writeln!(
        out,
        "{:<28} {:>8} {:>9} {:>8} {:>7} {:>9} {:>9} {:>9} {:>10} {:>8} {:>9}",
        "run",
        "sim s",
        "scheduled",
        "fired",
        "stale",
        "late p50",
        "late p99",
        "late max",
        "probe+pick",
        "wall s",
        "sim/wall"
    );
    for run in &report.runs {
        let n = &run.numbers;
        let probe_claim = analysis::polling_per_s(n);
        let _ = writeln!(
            out,
            "{:<28} {:>8.1} {:>9} {:>8} {:>7} {:>9.1} {:>9.1} {:>9.1} {:>9.1}/s {:>8.2} {:>8.0}x",
            truncate(&run.label, 28),
            n.simulated_s,
            n.scheduled,
            n.fired,
            n.stale_segments,
            n.lateness_ms.p50,
            n.lateness_ms.p99,
            n.lateness_ms.max,
            probe_claim,
            run.wall_s,
            n.simulated_s / run.wall_s.max(1e-9)
        );
        for check in run.checks.iter().filter(|c| !c.passed) {
            let _ = writeln!(
                out,
                "    check {} FAILED ({} form): {}",
                check.name, run.form, check.detail
            );
        }
    }
    for (key, value) in &report.findings {
        let _ = writeln!(out, "  {key}: {value}");
    }
    for expectation in &report.expectations {
        let _ = writeln!(
            out,
            "  expect {}: {} ({})",
            expectation.name,
            if expectation.passed { "yes" } else { "NO" },
            expectation.detail
        );
    }
    if !report.passed {
        let _ = writeln!(out, "  reproduce: {}", report.reproduce);
    }
    out
}

fn truncate(text: &str, width: usize) -> String {
    text.chars().take(width).collect()
}

/// The JSON report (pretty, stable key order).
pub fn json(reports: &[ScenarioReport]) -> String {
    serde_json::to_string_pretty(reports).expect("reports serialise") + "\n"
}

/// A chart of a report page: file suffix, its heading on the page, title, y axis (with its
/// unit), and the value it plots for a bucket of the given width in seconds (none: the bucket
/// has no such value, and the line joins its neighbours).
struct Chart {
    name: &'static str,
    heading: &'static str,
    title: &'static str,
    y_label: &'static str,
    metric: fn(&analysis::Bucket, f64) -> Option<f64>,
}

const CHARTS: [Chart; 5] = [
    Chart {
        name: "fired",
        heading: "Fired",
        title: "timers fired per second",
        y_label: "timers fired / s",
        metric: |b, width_s| Some(b.fired as f64 / width_s),
    },
    Chart {
        name: "overdue",
        heading: "Overdue",
        title: "timers due and not yet fired",
        y_label: "overdue timers",
        metric: |b, _| Some(b.overdue as f64),
    },
    Chart {
        name: "lateness",
        heading: "Lateness",
        title: "fire lateness p99 of the timers fired in each bucket",
        y_label: "lateness p99 (ms)",
        // A bucket that fired nothing has no lateness; a zero there would read as "on time".
        metric: |b, _| (b.fired > 0).then_some(b.lateness_ms.p99),
    },
    Chart {
        name: "stale",
        heading: "Stale segments",
        title: "stale segments per second",
        y_label: "stale segments / s",
        metric: |b, width_s| Some(b.stale_segments as f64 / width_s),
    },
    Chart {
        name: "queries",
        heading: "Probe + claim",
        title: "probe + claim-or-take calls per second",
        y_label: "calls / s",
        metric: |b, _| Some(b.probe_claim_per_s),
    },
];

/// The x axis of every chart: bucket starts on the database's simulated clock.
const X_LABEL: &str = "simulated time (s)";

/// Writes a scenario's report directory: JSON, plots over time, and a markdown page; returns
/// the files' names.
pub fn write_dir(dir: &Path, report: &ScenarioReport) -> Result<Vec<String>, Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::CreateDir {
        path: dir.to_owned(),
        source,
    })?;
    let stem = format!("{}-seed{}", report.scenario, report.seed);
    let mut files = vec![format!("{stem}.json")];
    write_file(&dir.join(&files[0]), &json(std::slice::from_ref(report)))?;
    for chart in &CHARTS {
        let file = format!("{stem}-{}.svg", chart.name);
        let lines: Vec<Line> = report
            .runs
            .iter()
            .map(|r| {
                let width_s = analysis::bucket_width_s(&r.numbers.series);
                let points = r.numbers.series.iter();
                let points = points.filter_map(|b| Some((b.start_s, (chart.metric)(b, width_s)?)));
                (r.label.clone(), points.collect())
            })
            .collect();
        let width_s = report
            .runs
            .first()
            .map_or(1.0, |r| analysis::bucket_width_s(&r.numbers.series));
        LineChart {
            title: &format!("{}: {} ({width_s} s buckets)", report.scenario, chart.title),
            x_label: X_LABEL,
            y_label: chart.y_label,
        }
        .write_svg(&dir.join(&file), &lines)?;
        files.push(file);
    }
    let md = format!("{stem}.md");
    write_file(&dir.join(&md), &page(report, &stem))?;
    files.push(md);
    Ok(files)
}

/// Writes `text` to `path`, naming the path when it cannot.
pub fn write_file(path: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(path, text).map_err(|source| Error::Write {
        path: path.to_owned(),
        source,
    })
}

/// The markdown page of a scenario: what it shows, the table, findings, expectations, plots.
fn page(report: &ScenarioReport, stem: &str) -> String {
    let mut page = String::new();
    let _ = writeln!(page, "# `{}`, seed {}\n", report.scenario, report.seed);
    let _ = writeln!(page, "{}\n", report.scenario.explanation());
    let _ = writeln!(page, "Reproduce: `{}`\n", report.reproduce);
    page_table(&mut page, report);
    let _ = writeln!(page, "\nFindings:\n");
    for (key, value) in &report.findings {
        let _ = writeln!(page, "- `{key}`: `{value}`");
    }
    let _ = writeln!(page, "\nExpectations:\n");
    for e in &report.expectations {
        let _ = writeln!(
            page,
            "- {}: **{}** ({})",
            e.name,
            if e.passed { "yes" } else { "no" },
            e.detail
        );
    }
    let _ = writeln!(
        page,
        "\nInvariants (every run): {}.\n",
        if report
            .runs
            .iter()
            .all(|r| r.checks.iter().all(|c| c.passed))
        {
            "all held"
        } else {
            "see the JSON: some failed (a naive form's liveness may)"
        }
    );
    for chart in &CHARTS {
        let _ = writeln!(page, "![{}]({stem}-{}.svg)\n", chart.heading, chart.name);
    }
    let _ = writeln!(page, "Raw data: [`{stem}.json`]({stem}.json).");
    page
}

fn page_table(page: &mut String, report: &ScenarioReport) {
    let _ = writeln!(
        page,
        "| run | scheduled | fired | stale segments | stale timers | lateness p50 ms | p99 ms | max ms | probe+pick/s (claim or take) |"
    );
    let _ = writeln!(page, "|---|---|---|---|---|---|---|---|---|");
    for run in &report.runs {
        let n = &run.numbers;
        let calls = analysis::polling_per_s(n);
        let _ = writeln!(
            page,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.1} |",
            run.label,
            n.scheduled,
            n.fired,
            n.stale_segments,
            n.stale_timers,
            n.lateness_ms.p50,
            n.lateness_ms.p99,
            n.lateness_ms.max,
            calls
        );
    }
}
