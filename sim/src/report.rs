//! Reports are for people: a table first, then the JSON beside it (and, for the reproductions
//! committed under `reports/`, plots). Nothing measured on the wall clock goes into the JSON, so
//! the same seed writes the same bytes.

use std::fmt::Write as _;

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
        "probe+claim",
        "wall s",
        "sim/wall"
    );
    for run in &report.runs {
        let n = &run.numbers;
        let probe_claim = (n.queries.get("probe").copied().unwrap_or(0)
            + n.queries.get("claim").copied().unwrap_or(0)) as f64
            / n.simulated_s.max(1e-9);
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
