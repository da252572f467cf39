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

/// A chart of a report page: file suffix, title, unit, and the value it plots per bucket.
type Chart = (
    &'static str,
    &'static str,
    &'static str,
    fn(&crate::analysis::Bucket) -> f64,
);

const CHARTS: [Chart; 4] = [
    ("lateness", "fire lateness p99 per bucket", "ms", |b| {
        b.lateness_ms.p99
    }),
    ("stale", "stale segments per bucket", "segments", |b| {
        b.stale_segments as f64
    }),
    ("fired", "timers fired per bucket", "timers", |b| {
        b.fired as f64
    }),
    (
        "queries",
        "probe + claim calls per second",
        "calls/s",
        |b| b.probe_claim_per_s,
    ),
];

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
    for (name, title, unit, metric) in CHARTS {
        let file = format!("{stem}-{name}.svg");
        let lines: Vec<Line> = report
            .runs
            .iter()
            .map(|r| {
                let points = r.numbers.series.iter().map(|b| (b.start_s, metric(b)));
                (r.label.clone(), points.collect())
            })
            .collect();
        LineChart {
            title: &format!("{}: {title}", report.scenario),
            x_label: "simulated seconds",
            y_label: unit,
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
    for (name, title) in [
        ("lateness", "Lateness"),
        ("stale", "Stale segments"),
        ("fired", "Fired"),
        ("queries", "Probe + claim"),
    ] {
        let _ = writeln!(page, "![{title}]({stem}-{name}.svg)\n");
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
