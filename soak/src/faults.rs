//! `soak faults`: the broker under faults, on a real PostgreSQL. Each case runs a load, injects
//! its fault, lets the brokers fire everything due, and ends with the delivery checks every run
//! makes: nothing fired twice, nothing early, nothing left unfired. A case may add a target of its
//! own (how fast the drain comes back). The report is `reports/faults/<date>-<rig>/`.
//!
//! | case | fault | its own measurement |
//! |---|---|---|
//! | `terminate` | every broker backend terminated, 4 rounds 250 ms apart, mid-drain | ms until the drain is back at 80% of its rate |
//! | `kill` | one of three broker processes SIGKILLed mid-stream, every schedule keyed and retried until answered | the lateness of the timers due before the kill; the calls answered from their key |
//! | `crash` | PostgreSQL crashed (a backend SIGKILLed: every connection ends, the WAL is replayed) mid-stream | every broker's `/healthz` answers within 1 s throughout; when it says ready again; the drain's recovery |
//! | `api-quiet` | none: 500 timers/s scheduled through 3 broker processes | the schedule latency the next case is compared with |
//! | `slow-clients` | the same, with 64 slow-body clients held against every broker | other clients' schedule p99 within 2× of `api-quiet`'s |
//! | `bad-input` | the API's bad-input table (36 hostile requests; 37 from 27a3487, which added an Idempotency-Key row, until a NUL in a JSON payload became a legal payload stored as sent), round after round, beside 200 timers/s through 3 broker processes | every answer the documented 4xx, none a 5xx |
//! | `steady` | none: 500 timers/s, 3 brokers, for minutes | the lateness the next case is compared with |
//! | `steady-tuned` | none: `steady` with the timers vacuumed eagerly ([`TUNED_AUTOVACUUM`]) | dead rows, table size and lateness over time against `steady` |
//! | `snapshot` | the same, with a snapshot held open by an idle transaction | lateness p99 within 2× of `steady`'s, none over 2 s; dead rows over time |
//!
//! The `crash` case stands in for `pg_ctl restart -m immediate`: the same crash recovery, without
//! the postmaster's own restart (which needs the data directory, which the docker and URL
//! providers do not give).

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::healthz;
use crate::run::{Autovacuum, Keyed, RECOVERED_SHARE, Run, RunResult, Workload};

/// After backend termination, the drain must be back at [`RECOVERED_SHARE`] of its rate within
/// this long (issue 18's target).
pub const RECOVERY_TARGET_MS: f64 = 2_000.0;
/// With a snapshot held, lateness p99 may be at most this many times the unpinned run's.
pub const PINNED_P99_FACTOR: f64 = 2.0;
/// With slow clients attached, other clients' schedule p99 may be at most this many times the
/// quiet run's.
pub const SLOW_CLIENTS_P99_FACTOR: f64 = 2.0;
/// Slow-body clients held against each broker in the `slow-clients` case: the API's default
/// in-flight limit, the number that once took every slot.
pub const SLOW_CLIENTS_PER_BROKER: u32 = 64;
/// The autovacuum candidate `steady-tuned` runs: the launcher every 5 s (the server's default is
/// 60 s, in which 500 timers/s leave 30 000 dead rows), a vacuum once 2 000 timer rows are dead
/// (4 s of fires at 500/s) whatever the table's size, at full speed.
pub const TUNED_AUTOVACUUM: Autovacuum = Autovacuum {
    naptime_s: 5,
    vacuum_threshold: 2_000,
    cost_delay_ms: 0,
};
/// With a snapshot held, no timer may be later than this.
pub const PINNED_MAX_MS: f64 = 2_000.0;

/// How long each case runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    /// Seconds of load.
    pub seconds: u64,
    /// Timers due when the terminate case starts: enough to keep the drain busy through the
    /// rounds and the recovery after them.
    pub backlog: u32,
    /// Seconds of load of the steady and snapshot cases (dead rows pile up over minutes).
    pub long_seconds: u64,
    pub reps: u32,
}

impl Size {
    /// The report's size: three repetitions, a backlog that outlasts the recovery search.
    pub fn full(reps: u32) -> Size {
        Size {
            seconds: 14,
            backlog: 300_000,
            long_seconds: 300,
            reps,
        }
    }

    /// CI's: one repetition of each case, small.
    pub fn smoke() -> Size {
        Size {
            seconds: 6,
            backlog: 150_000,
            long_seconds: 10,
            reps: 1,
        }
    }
}

/// One case: its name, what it does, its workload.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: &'static str,
    pub fault: &'static str,
    pub workload: Workload,
}

/// The cases at `size`.
pub fn cases(size: Size) -> Vec<Case> {
    let mut terminate = Workload::quiet("faults terminate", size.seconds);
    terminate.brokers = 3;
    terminate.backlog = size.backlog;
    (terminate.tenants, terminate.queues, terminate.partitions) = (1, 4, 8);
    terminate.terminate_at_s = Some((1, 4));
    terminate.drain_limit_s = 120;

    let mut kill = Workload::quiet("faults kill", size.seconds);
    kill.brokers = 3;
    kill.broker_processes = true;
    kill.timers_per_s = 500;
    kill.timer_delay_ms = (0, 2_000);
    kill.kill_one_at_s = Some(size.seconds / 2);
    kill.drain_limit_s = 120;
    // A careful client: every call keyed, a failed one retried until answered. A call the kill
    // cut after its commit is answered from its key (replayed), and the delivery checks show it
    // fired once.
    kill.keyed = Some(Keyed {
        window_s: 3_600,
        backfill: false,
    });

    // The crash comes 1 s into the drain of a backlog written just before: the WAL since the last
    // checkpoint holds the whole backlog, so the server has seconds of replay to do.
    let mut crash = Workload::quiet("faults crash", size.seconds);
    crash.brokers = 3;
    crash.broker_processes = true;
    crash.backlog = size.backlog;
    (crash.tenants, crash.queues, crash.partitions) = (1, 4, 8);
    crash.crash_server_at_s = Some(1);
    crash.drain_limit_s = 120;

    // Twice the short runs: the slow clients outlast one body read timeout (10 s) and reconnect.
    let mut api_quiet = Workload::quiet("faults api-quiet", size.seconds * 2);
    api_quiet.brokers = 3;
    api_quiet.broker_processes = true;
    api_quiet.timers_per_s = 500;
    api_quiet.timer_delay_ms = (0, 2_000);
    api_quiet.drain_limit_s = 120;
    let mut slow_clients = api_quiet.clone();
    slow_clients.label = "faults slow-clients".into();
    slow_clients.slow_clients_per_broker = SLOW_CLIENTS_PER_BROKER;

    let mut bad_input = Workload::quiet("faults bad-input", size.seconds);
    bad_input.brokers = 3;
    bad_input.broker_processes = true;
    bad_input.timers_per_s = 200;
    bad_input.timer_delay_ms = (0, 2_000);
    bad_input.drain_limit_s = 120;
    // Bounded by the load's end; this only caps a run whose stop never comes.
    bad_input.bad_input_rounds = 1_000;

    let mut steady = Workload::quiet("faults steady", size.long_seconds);
    steady.brokers = 3;
    steady.timers_per_s = 500;
    steady.timer_delay_ms = (0, 2_000);
    steady.drain_limit_s = 120;
    let mut steady_tuned = steady.clone();
    steady_tuned.label = "faults steady-tuned".into();
    steady_tuned.autovacuum = Some(TUNED_AUTOVACUUM);
    let mut snapshot = steady.clone();
    snapshot.label = "faults snapshot".into();
    snapshot.hold_snapshot = true;
    vec![
        Case {
            name: "terminate",
            fault: "every broker backend terminated (pg_terminate_backend), 4 rounds 250 ms apart, 1 s into a drain of the backlog",
            workload: terminate,
        },
        Case {
            name: "kill",
            fault: "one of 3 broker processes SIGKILLed halfway through a stream of 500 timers/s due 0-2 s ahead",
            workload: kill,
        },
        Case {
            name: "crash",
            fault: "PostgreSQL crashed 1 s into a drain of the backlog by 3 broker processes: one backend SIGKILLed, so every connection ends and the WAL written since the last checkpoint (the backlog's) is replayed",
            workload: crash,
        },
        Case {
            name: "api-quiet",
            fault: "none: the reference for the slow-clients case",
            workload: api_quiet,
        },
        Case {
            name: "slow-clients",
            fault: "64 clients on every broker that send a schedule's headers and a few bytes of its body, then a byte a second, and connect again when closed",
            workload: slow_clients,
        },
        Case {
            name: "bad-input",
            fault: "the API's bad-input table (bad percent-encoding, NULs, bad tenants, media types, over-long targets and headers, a 5 GiB declared body, ...) sent round after round, each row to the next broker",
            workload: bad_input,
        },
        Case {
            name: "steady",
            fault: "none: the reference for the snapshot case",
            workload: steady,
        },
        Case {
            name: "steady-tuned",
            fault: "none: the steady load with the timers vacuumed eagerly (a candidate for the shipped autovacuum settings)",
            workload: steady_tuned,
        },
        Case {
            name: "snapshot",
            fault: "a REPEATABLE READ snapshot held open, idle, by another session for the whole load",
            workload: snapshot,
        },
    ]
}

/// One repetition of a case, and what its checks found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseRun {
    pub case: String,
    pub rep: u32,
    pub result: RunResult,
    /// Every delivery check that failed, in words; empty when exactly-once held.
    pub broken: Vec<String>,
    /// Every target of the case that was missed, in words.
    #[serde(default)]
    pub missed: Vec<String>,
}

/// Everything `soak faults` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Faults {
    pub date: String,
    pub rig: String,
    pub commit: String,
    pub runs: Vec<CaseRun>,
}

impl Faults {
    /// Every broken delivery check of every run, one line each.
    pub fn broken(&self) -> Vec<String> {
        self.lines(|r| &r.broken)
    }

    /// Every missed target of every run, one line each.
    pub fn missed(&self) -> Vec<String> {
        self.lines(|r| &r.missed)
    }

    fn lines(&self, of: impl Fn(&CaseRun) -> &Vec<String>) -> Vec<String> {
        self.runs
            .iter()
            .flat_map(|r| {
                of(r)
                    .iter()
                    .map(move |b| format!("{} rep {}: {b}", r.case, r.rep))
            })
            .collect()
    }
}

/// The delivery checks `result` failed. Pure.
pub fn delivery(result: &RunResult) -> Vec<String> {
    let mut broken = Vec::new();
    if result.lateness_ms.count == 0 {
        broken.push("no promised timer fired: the delivery checks compared nothing".to_owned());
    }
    for (what, n) in [
        ("fired twice", result.duplicates),
        ("never fired", result.never_fired),
        ("fired early", result.fired_early),
    ] {
        if n != 0 {
            broken.push(format!("{n} timers {what}"));
        }
    }
    broken
}

/// The case's own targets `result` missed. Pure.
pub fn targets(result: &RunResult) -> Vec<String> {
    let mut broken = Vec::new();
    if result.workload.terminate_at_s.is_some() {
        match &result.recovery {
            None => broken.push("no recovery was measured (no termination round ran)".into()),
            Some(r) if r.rate_before_per_s <= 0.0 => broken.push(
                "nothing fired before the first round: the backlog was gone, nothing to compare with"
                    .into(),
            ),
            Some(r) => match r.back_after_ms {
                Some(ms) if ms <= RECOVERY_TARGET_MS => {}
                Some(ms) => broken.push(format!(
                    "the drain was back at {:.0}% of its rate {ms:.0} ms after the last round, over the {RECOVERY_TARGET_MS:.0} ms target",
                    RECOVERED_SHARE * 100.0
                )),
                None => broken.push(format!(
                    "the drain did not come back to {:.0}% of its {:.0}/s before its backlog ran out (slowest second after: {:.0}/s)",
                    RECOVERED_SHARE * 100.0,
                    r.rate_before_per_s,
                    r.slowest_after_per_s
                )),
            },
        }
    }
    if let Some(bad) = &result.bad_input {
        if bad.requests == 0 {
            broken.push("no bad-input request was sent".into());
        }
        if bad.server_errors > 0 || bad.unanswered > 0 || bad.as_documented < bad.requests {
            broken.push(format!(
                "of {} bad-input requests, {} answered 5xx, {} unanswered, {} off their documented refusal; the first: {}",
                bad.requests,
                bad.server_errors,
                bad.unanswered,
                bad.requests - bad.as_documented,
                bad.wrong.join("; ")
            ));
        }
    }
    if result.workload.crash_server_at_s.is_some() {
        match &result.healthz {
            None => broken.push("no /healthz was polled".into()),
            Some(h) if h.latency_ms.max > healthz::TARGET_MS => broken.push(format!(
                "{} of {} /healthz answers took over {:.0} ms (the slowest {:.0} ms)",
                h.over_target,
                h.polls,
                healthz::TARGET_MS,
                h.latency_ms.max
            )),
            Some(_) => {}
        }
        match result.crash_survivors {
            Some(0) => {}
            Some(n) => broken.push(format!(
                "{n} connections from before the crash were still open after it: the server did not reset"
            )),
            None => broken.push("whether the crash reset the server was not measured".into()),
        }
    }
    broken
}

/// The median over the runs of `case` of `metric`; `None` without such a run.
fn median_of(runs: &[CaseRun], case: &str, metric: fn(&RunResult) -> f64) -> Option<f64> {
    let mut values: Vec<f64> = runs
        .iter()
        .filter(|r| r.case == case)
        .map(|r| metric(&r.result))
        .collect();
    values.sort_by(f64::total_cmp);
    values.get(values.len().saturating_sub(1) / 2).copied()
}

/// A case against its reference: `metric` of every run of `case` within `factor` times the
/// median of the `reference` runs. Needs both cases in one invocation.
fn paired_target(
    runs: &mut [CaseRun],
    (case, reference): (&str, &str),
    (metric, what): (fn(&RunResult) -> f64, &str),
    factor: f64,
) {
    let base = median_of(runs, reference, metric);
    for run in runs.iter_mut().filter(|r| r.case == case) {
        let value = metric(&run.result);
        match base {
            None => run.missed.push(format!(
                "no {reference} run to compare with (run --only {reference} --only {case})"
            )),
            Some(base) if value > factor * base => run.missed.push(format!(
                "{what} {value:.1} ms is over {factor}× the {reference} run's {base:.1} ms"
            )),
            Some(_) => {}
        }
    }
}

/// The targets that compare two cases: the snapshot's lateness with the steady run's (and no
/// timer over [`PINNED_MAX_MS`]), the slow clients' schedule latency with the quiet API's.
fn paired_targets(runs: &mut [CaseRun]) {
    paired_target(
        runs,
        ("snapshot", "steady"),
        (|r| r.lateness_ms.p99, "lateness p99"),
        PINNED_P99_FACTOR,
    );
    for run in runs.iter_mut().filter(|r| r.case == "snapshot") {
        let late = run.result.lateness_ms;
        if late.max > PINNED_MAX_MS {
            run.missed.push(format!(
                "a timer fired {:.0} ms late, over {PINNED_MAX_MS:.0} ms",
                late.max
            ));
        }
    }
    paired_target(
        runs,
        ("slow-clients", "api-quiet"),
        (|r| r.schedule_latency_ms.p99, "schedule p99"),
        SLOW_CLIENTS_P99_FACTOR,
    );
    // The latency counts answered calls only: a broker that refused everyone else would look fast.
    for run in runs.iter_mut().filter(|r| r.case == "slow-clients") {
        let result = &run.result;
        if result.schedule_failures > 0 {
            run.missed.push(format!(
                "{} schedule calls of other clients failed (the first: {})",
                result.schedule_failures,
                result
                    .first_schedule_error
                    .as_deref()
                    .unwrap_or("no message")
            ));
        }
    }
}

/// Runs every case (or those whose name is in `only`) `size.reps` times, case by case.
pub async fn run(
    run: &Run<'_>,
    size: Size,
    only: &[String],
    (date, rig, commit): (&str, &str, &str),
) -> Result<Faults, Error> {
    let mut runs = Vec::new();
    let cases: Vec<Case> = cases(size)
        .into_iter()
        .filter(|c| only.is_empty() || only.iter().any(|o| o == c.name))
        .collect();
    if cases.is_empty() {
        return Err(Error::Usage(format!(
            "soak faults --only {only:?}: no such case (the cases are {})",
            self::cases(size)
                .iter()
                .map(|c| c.name)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    for case in &cases {
        for rep in 1..=size.reps {
            eprintln!(
                "soak: fault {} ({}), repetition {rep}/{}",
                case.name, case.fault, size.reps
            );
            let result = run
                .execute(&case.workload, &format!("faults_{}_{rep}", case.name))
                .await?;
            let (broken, missed) = (delivery(&result), targets(&result));
            for b in &broken {
                eprintln!("soak: fault {} rep {rep}: BROKEN: {b}", case.name);
            }
            for m in &missed {
                eprintln!("soak: fault {} rep {rep}: target missed: {m}", case.name);
            }
            runs.push(CaseRun {
                case: case.name.to_owned(),
                rep,
                result,
                broken,
                missed,
            });
        }
    }
    paired_targets(&mut runs);
    Ok(Faults {
        date: date.to_owned(),
        rig: rig.to_owned(),
        commit: commit.to_owned(),
        runs,
    })
}

/// The report: a table per case, a row per repetition.
pub fn markdown(faults: &Faults, size: Size) -> String {
    let mut out = format!(
        "# The broker under faults\n\nRun {} on {}, soak built at {}. {} repetition(s) per case, each with the seconds of load its section names; every run then waits until nothing due is left.\n\n",
        faults.date, faults.rig, faults.commit, size.reps
    );
    for case in cases(size) {
        let runs: Vec<&CaseRun> = faults.runs.iter().filter(|r| r.case == case.name).collect();
        if runs.is_empty() {
            continue;
        }
        out += &format!(
            "## `{}`\n\n{}. Load: {}, {} s.\n\n",
            case.name,
            case.fault,
            case.workload.describe(),
            case.workload.seconds
        );
        out += "| rep | promised timers fired (database) | twice | early | never | its own measurement | verdict |\n|---|---|---|---|---|---|---|\n";
        for r in runs {
            let res = &r.result;
            out += &format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                r.rep,
                res.lateness_ms.count,
                res.duplicates,
                res.fired_early,
                res.never_fired,
                own_measurement(res),
                match (r.broken.is_empty(), r.missed.is_empty()) {
                    (true, true) => "held".to_owned(),
                    (true, false) => format!(
                        "exactly-once held; **target missed**: {}",
                        r.missed.join("; ")
                    ),
                    _ => format!(
                        "**BROKEN**: {}",
                        [&r.broken[..], &r.missed[..]].concat().join("; ")
                    ),
                }
            );
        }
        out += "\n";
        for r in faults.runs.iter().filter(|r| r.case == case.name) {
            if case.workload.seconds >= 60 {
                out += &over_time(r);
            }
        }
    }
    out
}

/// A long run in ten buckets: the worst per-second lateness p99, dead timer rows and the timers
/// table's size at the bucket's end.
fn over_time(run: &CaseRun) -> String {
    let series = &run.result.series;
    let mut out = format!(
        "Rep {} over time:\n\n| seconds | worst per-second lateness p99 (ms) | dead timer rows | timers table and indexes (KiB) |\n|---|---|---|---|\n",
        run.rep
    );
    for bucket in series.chunks(series.len().div_ceil(10).max(1)) {
        let (Some(first), Some(last)) = (bucket.first(), bucket.last()) else {
            continue;
        };
        let worst = bucket.iter().map(|s| s.lateness_p99_ms).fold(0.0, f64::max);
        out += &format!(
            "| {}-{} | {worst:.0} | {} | {} |\n",
            first.t_s,
            last.t_s,
            last.timers_dead_rows,
            last.timers_bytes / 1024
        );
    }
    out + "\n"
}

fn own_measurement(result: &RunResult) -> String {
    let healthz = result.healthz.as_ref().map_or_else(String::new, |h| {
        format!(
            "/healthz: {} polls, {} not ready, {} unanswered, latency p50 {:.0} / p99 {:.0} / max {:.0} ms, all ready again {} after the crash; ",
            h.polls,
            h.not_ready,
            h.unanswered,
            h.latency_ms.p50,
            h.latency_ms.p99,
            h.latency_ms.max,
            h.ready_again_after_ms
                .map_or("never".to_owned(), |ms| format!("{ms:.0} ms"))
        )
    });
    let schedule = result.schedule_latency_ms;
    let schedule = format!(
        "schedule p50 {:.1} / p99 {:.1} / max {:.1} ms over {} calls",
        schedule.p50, schedule.p99, schedule.max, schedule.count
    );
    if let Some(slow) = &result.slow_clients {
        let answers: Vec<String> = slow
            .answers
            .iter()
            .map(|(status, n)| format!("{n}× {status}"))
            .collect();
        return format!(
            "{schedule}; {} slow clients, {} connections, answered {}",
            slow.clients,
            slow.connections,
            answers.join(", ")
        );
    }
    if let Some(bad) = &result.bad_input {
        return format!(
            "{} bad-input requests ({} rounds of {} rows): {} as documented, {} 5xx, {} unanswered; {schedule}",
            bad.requests,
            bad.rounds,
            bad.rows,
            bad.as_documented,
            bad.server_errors,
            bad.unanswered
        );
    }
    if result.workload.label == "faults api-quiet" {
        return schedule;
    }
    if let Some(r) = &result.recovery {
        return healthz
            + &format!(
                "{:.0}/s before; slowest second after {:.0}/s; back at {:.0}% after {}",
                r.rate_before_per_s,
                r.slowest_after_per_s,
                RECOVERED_SHARE * 100.0,
                r.back_after_ms
                    .map_or("never (10 s searched)".to_owned(), |ms| format!(
                        "{ms:.0} ms"
                    ))
            );
    }
    if let Some(k) = &result.kill {
        let keyed = result.keyed.as_ref().map_or_else(String::new, |c| {
            format!(
                "; {} keyed calls answered: {} retried after a failure, {} of them answered from their key (a reply lost after its commit), {} never answered, the longest {:.0} ms from first send to answer",
                c.answered, c.retried, c.replayed, c.abandoned, c.longest_retry_ms
            )
        });
        return format!(
            "{} timers due before the kill fired after it, lateness p50 {:.0} / p99 {:.0} ms, the last {:.0} ms after the kill{keyed}",
            k.overdue_at_kill, k.lateness_ms.p50, k.lateness_ms.p99, k.last_fired_after_kill_ms
        );
    }
    let dead = result
        .series
        .iter()
        .map(|s| s.timers_dead_rows)
        .max()
        .unwrap_or(0);
    let bytes = |at: Option<&crate::run::Sample>| at.map_or(0, |s| s.timers_bytes) / 1024;
    format!(
        "lateness p50 {:.0} / p99 {:.0} / max {:.0} ms; dead timer rows at most {dead}; timers table and indexes {} KiB → {} KiB",
        result.lateness_ms.p50,
        result.lateness_ms.p99,
        result.lateness_ms.max,
        bytes(result.series.first()),
        bytes(result.series.last())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Recovery;

    #[test]
    fn every_case_builds_a_valid_configuration_at_both_sizes() {
        for size in [Size::full(3), Size::smoke()] {
            for case in cases(size) {
                case.workload.config().expect(case.name);
                assert!(
                    case.workload.drain_limit_s > 0,
                    "{}: runs until drained",
                    case.name
                );
            }
        }
    }

    #[test]
    fn recovery_finds_the_first_second_back_at_80_percent() {
        // 1 000/s for 5 s, nothing for 1.5 s after the round at 5.0, then 1 000/s again.
        // Fires half a millisecond off the grid, so no window edge falls on one.
        let at = |i: i32| (f64::from(i) + 0.5) / 1_000.0;
        let mut fired: Vec<f64> = (0..5_000).map(at).collect();
        fired.extend((6_500..12_000).map(at));
        let r = Recovery::of(&fired, &[4.9, 5.0], 0.0).unwrap();
        assert_eq!(r.rate_before_per_s, 1_000.0);
        assert_eq!(r.slowest_after_per_s, 0.0);
        // The first window [from, from + 1) holding 800 fires starts at 6.3: 1.3 s after.
        assert_eq!(r.back_after_ms, Some(1_300.0));
        assert_eq!((r.first_round_s, r.last_round_s), (4.9, 5.0));
    }

    #[test]
    fn a_drain_that_never_comes_back_has_no_recovery_instant() {
        let fired: Vec<f64> = (0..5_000).map(|i| f64::from(i) / 1_000.0).collect();
        let r = Recovery::of(&fired, &[5.0], 0.0).unwrap();
        assert_eq!(r.back_after_ms, None);
        assert!(Recovery::of(&fired, &[], 0.0).is_none());
    }
}
