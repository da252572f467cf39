//! Named, seeded scenarios. Each builds one or more worlds from the seed, runs them, checks the
//! invariants and, for the reproductions, puts the symptom in numbers side by side.

use std::collections::BTreeMap;

use queen_harness::spread::round1;
use queen_harness::{Knobs, Spread};
use queen_sweeper::knob;
use serde::Serialize;
use serde_json::{Value, json};

use crate::analysis::{self, RunNumbers};
use crate::checkers::{self, Check};
use crate::model::server::Costs;
use crate::rng::Rng;
use crate::world::{self, Burst, Fault, FaultKind, KvLoad, PushLoad, RunSpec, TimerLoad};

/// The scenarios. Their names on the command line, in `--list`, in the JSON and in the
/// reproduce command all come from this enum (clap's kebab-case of the variant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Livelock,
    Spin,
    Crash,
    Wake,
    Burst,
    Fairness,
    Partition,
    Swarm,
}

impl Scenario {
    /// The scenario's name, as the command line takes it.
    pub fn name(self) -> String {
        use clap::ValueEnum as _;
        self.to_possible_value()
            .expect("no scenario is hidden from the command line")
            .get_name()
            .to_owned()
    }

    /// Every scenario, in `--list` order.
    pub fn all() -> &'static [Scenario] {
        use clap::ValueEnum as _;
        Scenario::value_variants()
    }

    /// What a scenario shows, for the report pages.
    pub fn explanation(self) -> &'static str {
        match self {
            Scenario::Livelock => LIVELOCK,
            Scenario::Spin => SPIN,
            Scenario::Crash => {
                "Three brokers under a steady load; brokers crash (between claim and fire, or mid-fire) and restart. Their claims fire through the others after the lease, exactly once."
            }
            Scenario::Wake => {
                "A timer scheduled on an idle broker fires on its local wake; one scheduled on a broker that dies right after fires through another broker within the sleep ceiling."
            }
            Scenario::Burst => "A burst of 50 000 timers due at once on three brokers.",
            Scenario::Fairness => {
                "One tenant with 100 000 due timers and another with one timer due just after them."
            }
            Scenario::Partition => {
                "Brokers cut from the database mid-fire (the ambiguous commit) and healed. Exactly once holds."
            }
            Scenario::Swarm => "Broker count, loads, latencies and faults drawn from the seed.",
        }
    }
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}

impl Serialize for Scenario {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

const LIVELOCK: &str = "Five brokers share a 16 MiB/s WAL with 8 producers pushing 100-message batches (about 9 MB/s, each commit 225 KB). At t = 2 s a burst of 12 000 timers with 8 KiB payloads is scheduled, due at 5 s, on top of 200 timers/s; its schedule commits fill the WAL too. The lease is 2 s. The naive drain claims a whole pass (up to 5 000 rows) in batches of 200 and then fires them; each claim's commit waits its turn in the WAL, so the pass's first claims reach their lease before their fire: the fires come back stale, other brokers re-claim the rows, and for several seconds almost nothing fires while the overdue backlog stays high. The leased drain (the seed's form, `QUEEN_SWEEPER_FIRE_TAKE=0`) claims a batch, fires it, and stops claiming at half the lease: every fire commits inside its lease. The take (the default) picks, appends and deletes a batch in one transaction: no lease to outlive. A stall is a second with 1 000+ timers overdue and under 100 fired. The naive drain is also run with leases of 8 s and 32 s to show where the symptom disappears.";

const SPIN: &str = "Five brokers share an 8 MiB/s WAL with producers pushing 100-message batches, so a commit waits its turn in the WAL queue (up to a few hundred ms). Every second a burst of 150 timers, scheduled 2 s ahead, becomes due; every broker knows when and wakes for it. One claim takes the whole burst and keeps its rows locked while its commit waits for the WAL; the others see work due and their claims take nothing. With the 5 ms floor they come straight back, probe and claim again, for the whole wait; with the shipped jittered band (QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS to _MAX_MS) they back off. The rates are measured from each burst's due instant to its last fire.";

/// One world of a scenario, with what came out of it.
#[derive(Debug, Clone, Serialize)]
pub struct RunReport {
    pub label: String,
    /// Whether the invariant checks gate this run. A reproduction of a naive form is expected to
    /// break liveness; its safety checks still gate.
    pub form: &'static str,
    /// Named `world` in the JSON, as it was before the type was called a run spec.
    #[serde(rename = "world")]
    pub spec: RunSpec,
    pub numbers: RunNumbers,
    pub checks: Vec<Check>,
    #[serde(skip)]
    pub wall_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    pub scenario: Scenario,
    pub seed: u64,
    pub reproduce: String,
    pub runs: Vec<RunReport>,
    /// Scenario-specific numbers: the symptom and where it appears or disappears.
    pub findings: BTreeMap<String, Value>,
    /// Expectations of the scenario (a reproduction shows its symptom; a shipped form does not).
    pub expectations: Vec<Check>,
    pub passed: bool,
}

/// Checks that gate even a naive form's run.
const SAFETY: &[&str] = &[
    "ran_to_the_end",
    "never_early",
    "exactly_once",
    "no_live_kv_pruned",
    "dense_offsets",
];

/// Options from the command line that shape a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Overrides the safety phase's length, in simulated seconds.
    pub duration_s: Option<u64>,
    /// The model's costs: the built-in calibration's, or those of `calibration`.
    pub costs: Costs,
    /// The calibration file named on the command line; `None` for the built-in one.
    pub calibration: Option<&'static str>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            duration_s: None,
            costs: crate::calibration::builtin().costs,
            calibration: None,
        }
    }
}

/// The one line that runs `scenario` on `seed` again, alone.
pub fn reproduce_command(scenario: Scenario, seed: u64, options: Options) -> String {
    let duration = options
        .duration_s
        .map(|s| format!(" --duration-s {s}"))
        .unwrap_or_default();
    let calibration = options
        .calibration
        .map(|file| format!(" --calibration {file}"))
        .unwrap_or_default();
    format!(
        "cargo run --release -p queen-sim --bin sim -- --scenario {scenario} --seed {seed}{duration}{calibration}"
    )
}

/// Runs `scenario` on `seed`: its runs, findings and expectations.
pub fn run(scenario: Scenario, seed: u64, options: Options) -> ScenarioReport {
    let (runs, findings, expectations) = match scenario {
        Scenario::Livelock => livelock(seed, options),
        Scenario::Spin => spin(seed, options),
        Scenario::Crash => single(&crash(seed, options)),
        Scenario::Wake => wake(seed, options),
        Scenario::Burst => burst(seed, options),
        Scenario::Fairness => fairness(seed, options),
        Scenario::Partition => single(&partition(seed, options)),
        Scenario::Swarm => single(&swarm(seed, options)),
    };
    let gated = runs.iter().all(|run| {
        run.checks
            .iter()
            .filter(|c| run.form == "shipped" || SAFETY.contains(&c.name))
            .all(|c| c.passed)
    });
    let passed = gated && expectations.iter().all(|c| c.passed);
    ScenarioReport {
        scenario,
        seed,
        reproduce: reproduce_command(scenario, seed, options),
        runs,
        findings,
        expectations,
        passed,
    }
}

type Parts = (Vec<RunReport>, BTreeMap<String, Value>, Vec<Check>);

fn single(spec: &RunSpec) -> Parts {
    (
        vec![execute("shipped", "shipped", spec, 10)],
        BTreeMap::new(),
        Vec::new(),
    )
}

pub fn execute(label: &str, form: &'static str, spec: &RunSpec, bucket_s: u64) -> RunReport {
    report_of(label, form, spec, &world::run(spec), bucket_s)
}

fn report_of(
    label: &str,
    form: &'static str,
    spec: &RunSpec,
    outcome: &world::RunOutcome,
    bucket_s: u64,
) -> RunReport {
    RunReport {
        label: label.to_owned(),
        form,
        spec: spec.clone(),
        numbers: analysis::numbers(label, outcome, bucket_s),
        checks: checkers::check(outcome),
        wall_s: outcome.wall.as_secs_f64(),
    }
}

fn expect(name: &'static str, passed: bool, detail: String) -> Check {
    Check {
        name,
        passed,
        detail,
    }
}

/// The drain forms the livelock scenario puts side by side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DrainForm {
    /// Claim everything, then fire it all: the seed's symptom.
    Naive,
    /// The seed's budgeted claim + fire under a lease (`QUEEN_SWEEPER_FIRE_TAKE=0`).
    Leased,
    /// The take: pick, append and delete in one transaction (the default).
    Take,
}

/// The livelock: five brokers, a burst of 12 000 timers with 8 KiB payloads under a push load
/// of 100-message batches, the naive drain (claim the whole pass, then fire) against the shipped
/// ones (claim and fire in the same iteration, stop at half the lease; the take), same seed and
/// load. Then the naive drain with longer leases, to find where the symptom disappears.
fn livelock(seed: u64, options: Options) -> Parts {
    let lease_ms = 2_000u64;
    let run = |label: &str, form: &'static str, lease: u64, drain: DrainForm| {
        let label = format!("{label}, lease {lease} ms");
        execute(&label, form, &livelock_spec(seed, options, lease, drain), 1)
    };
    let take = run("take", "shipped", lease_ms, DrainForm::Take);
    let leased = run("leased", "shipped", lease_ms, DrainForm::Leased);
    let naive = run("naive", "naive", lease_ms, DrainForm::Naive);
    let sweep: Vec<RunReport> = [lease_ms * 4, lease_ms * 16]
        .into_iter()
        .map(|lease| run("naive", "naive", lease, DrainForm::Naive))
        .collect();
    let findings = livelock_findings(&take, &leased, &naive, &sweep);
    let expectations = livelock_expectations(&take, &leased, &naive);
    let mut runs = vec![take, leased, naive];
    runs.extend(sweep);
    (runs, findings, expectations)
}

/// The livelock's world. The pushes come in batches of 100 messages (225 KB of WAL each, 14 ms
/// of the 16 MiB/s WAL), and the burst's own schedule commits go through the same WAL: a claim's
/// commit waits behind them. The naive drain claims 25 batches before it fires the first, so
/// its first claims' leases end before their fire; the shipped forms fire each batch as soon as
/// it is claimed. With the 10-message pushes of commit 33aa3f1 the naive drain threw back
/// thousands of stale segments but its fired/s never fell below the shipped forms' for more than
/// two seconds in a row (seed 1): the WAL stayed busy with live fires either way.
fn livelock_spec(seed: u64, options: Options, lease_ms: u64, form: DrainForm) -> RunSpec {
    let mut w = RunSpec::new(seed, options.costs);
    w.brokers = 5;
    w.safety_ms = options.duration_s.unwrap_or(60) * 1000;
    w.liveness_ms = 60_000;
    w.knobs = Knobs::new()
        .with(knob::LEASE_MS, lease_ms)
        .with(knob::STATEMENT_TIMEOUT_MS, (lease_ms / 2).min(5_000))
        .with(knob::FIRE_TAKE, u64::from(form == DrainForm::Take));
    if form == DrainForm::Naive {
        // The seed's naive form in the seed's numbers: claims of 200 rows (the shipped claim
        // batch is 800 since the experiments at 084692f; the shipped forms run it).
        w.knobs = w.knobs.clone().with(knob::CLAIM_BATCH, 200);
    }
    w.naive_drain = form == DrainForm::Naive;
    w.costs = Costs {
        wal_bytes_per_s: 16 * 1024 * 1024,
        ..options.costs
    };
    w.timers = Some(TimerLoad {
        per_s: LIVELOCK_TIMERS_PER_S,
        batch: 20,
        delay_ms: (0, 2_000),
        payload_bytes: (1_024, 4_096),
        tenants: 2,
        queues: 4,
        partitions: 8,
    });
    w.bursts = vec![Burst {
        at_ms: 2_000,
        count: 12_000,
        delay_ms: 3_000,
        payload_bytes: 8_192,
        tenant: "tenant-0".into(),
        broker: 1,
    }];
    w.pushes = Some(PushLoad {
        pushers: 8,
        per_s_each: 5,
        messages_per_push: 100,
        payload_bytes: 2_048,
    });
    w
}

/// The steady timer load of the livelock world, timers a second.
const LIVELOCK_TIMERS_PER_S: u32 = 200;

fn livelock_findings(
    take: &RunReport,
    leased: &RunReport,
    naive: &RunReport,
    sweep: &[RunReport],
) -> BTreeMap<String, Value> {
    let row = |r: &RunReport| {
        json!({"staleSegments": r.numbers.stale_segments, "staleTimers": r.numbers.stale_timers,
               "fired": r.numbers.fired, "latenessMs": r.numbers.lateness_ms.short(),
               "pushLatencyMs": r.numbers.push_latency_ms.short(),
               "longestStallS": stall_s(r)})
    };
    let mut findings = BTreeMap::new();
    findings.insert("take".into(), row(take));
    findings.insert("leased".into(), row(leased));
    findings.insert("naive".into(), row(naive));
    let by_lease: Vec<Value> = std::iter::once(naive)
        .chain(sweep.iter())
        .map(|r| json!({"leaseMs": lease_of(&r.spec), "staleSegments": r.numbers.stale_segments, "latenessP99Ms": r.numbers.lateness_ms.p99, "longestStallS": stall_s(r)}))
        .collect();
    findings.insert("naiveByLease".into(), Value::Array(by_lease));
    let disappears = std::iter::once(naive)
        .chain(sweep.iter())
        .find(|r| r.numbers.stale_segments == 0)
        .map(|r| lease_of(&r.spec));
    findings.insert("naiveSymptomGoneAtLeaseMs".into(), json!(disappears));
    findings
}

/// A stall: a second in which at least this many timers are overdue and fewer than half the
/// steady load's rate fires, so the backlog cannot be shrinking.
const STALL_BACKLOG: u64 = 1_000;
const STALL_FIRED_PER_S: f64 = LIVELOCK_TIMERS_PER_S as f64 / 2.0;

/// The longest stall of a run ([`analysis::longest_stall_s`]), in seconds.
fn stall_s(r: &RunReport) -> f64 {
    analysis::longest_stall_s(&r.numbers.series, STALL_BACKLOG, STALL_FIRED_PER_S)
}

/// The naive drain stalls for at least this long. On seeds 1-20 its longest stall was 5-13 s
/// (median 10 s) and the shipped forms' 0-5 s (median 2 s; those are the burst's own schedule
/// commits filling the WAL at 5-10 s), and on every seed the naive's was the longest, by 3-11 s.
/// The floor is 3 s, below the naive's lowest, so that it says "sustained" without being a
/// seed's luck; the comparison with the shipped forms on the same seed carries the contrast.
const NAIVE_STALL_MIN_S: f64 = 3.0;

/// The symptom as the seed states it, on every seed: the naive drain throws back stale
/// segments and its fired count stays low for a sustained stretch with work due; the shipped
/// forms throw back none and keep draining. Lateness is reported in the findings, not ordered
/// here: every form writes the same bytes through one WAL, and per-seed p99 ratios between
/// forms overlapped 1.0 (see the commit that introduced this).
fn livelock_expectations(take: &RunReport, leased: &RunReport, naive: &RunReport) -> Vec<Check> {
    let stale = |r: &RunReport| r.numbers.stale_segments;
    let mut checks = vec![
        expect(
            "naive_shows_stale_segments",
            stale(naive) > 0,
            format!("naive drain: {} stale segments", stale(naive)),
        ),
        expect(
            "naive_stalls_with_work_due",
            stall_s(naive) >= NAIVE_STALL_MIN_S,
            format!(
                "naive drain: {} s in a row with {STALL_BACKLOG}+ overdue and under {STALL_FIRED_PER_S}/s fired (at least {NAIVE_STALL_MIN_S} s)",
                stall_s(naive)
            ),
        ),
    ];
    for (name, stale_name, stall_name, r) in [
        (
            "leased drain",
            "leased_has_no_stale_segments",
            "leased_keeps_draining",
            leased,
        ),
        (
            "take",
            "take_has_no_stale_segments",
            "take_keeps_draining",
            take,
        ),
    ] {
        checks.push(expect(
            stale_name,
            stale(r) == 0,
            format!("{name}: {} stale segments", stale(r)),
        ));
        // Shorter than the naive drain's on the same seed: both see the same congested WAL, so
        // the comparison is on the same world (on seeds 1-20 the naive's was 3-11 s longer).
        checks.push(expect(
            stall_name,
            stall_s(r) < stall_s(naive),
            format!(
                "{name}: longest stall {} s, naive {} s",
                stall_s(r),
                stall_s(naive)
            ),
        ));
    }
    checks
}

fn lease_of(spec: &RunSpec) -> u64 {
    spec.config().lease_ms
}

/// The spin: five brokers share an 8 MiB/s WAL with producers pushing 100-message batches, so
/// every commit waits its turn in the WAL queue, up to a few hundred milliseconds. Every second
/// a burst of 150 timers, scheduled two seconds ahead, becomes due: every broker knows when and
/// wakes for it. One claim takes the whole burst and holds its rows locked while its commit waits
/// for the WAL; the other brokers see the burst due and their claims take nothing. With the 5 ms
/// floor they come straight back, probe and claim again, for the whole wait; with the jittered
/// band they back off (15-200 ms by default since the experiments at 084692f).
fn spin(seed: u64, options: Options) -> Parts {
    let seconds = options.duration_s.unwrap_or(30);
    let make = |floor: bool| {
        let mut w = RunSpec::new(seed, options.costs);
        w.brokers = 5;
        w.safety_ms = seconds * 1_000 + 5_000;
        w.liveness_ms = 10_000;
        w.floor_after_empty_claim = floor;
        w.costs = Costs {
            wal_bytes_per_s: 8 * 1024 * 1024,
            ..options.costs
        };
        w.pushes = Some(PushLoad {
            pushers: 4,
            per_s_each: 4,
            messages_per_push: 100,
            payload_bytes: 4_096,
        });
        w.bursts = (0..seconds)
            .map(|i| Burst {
                at_ms: 1_000 + i * 1_000,
                count: 150,
                delay_ms: 2_000,
                payload_bytes: 256,
                tenant: "tenant-0".into(),
                broker: 1 + (i % 5) as u32,
            })
            .collect();
        w
    };
    let band_label = format!(
        "jittered {}-{} ms band",
        knob::EMPTY_CLAIM_MIN_MS.default,
        knob::EMPTY_CLAIM_MAX_MS.default
    );
    let (band, band_rates) = run_spin(&band_label, "shipped", &make(false));
    let (floor, floor_rates) = run_spin("5 ms floor", "naive", &make(true));
    let total = |rates: &BTreeMap<String, f64>| -> f64 { rates.values().sum() };
    let extra = total(&floor_rates) - total(&band_rates);
    let mut findings = BTreeMap::new();
    findings.insert("bandProbeClaimPerSByBroker".into(), json!(band_rates));
    findings.insert("floorProbeClaimPerSByBroker".into(), json!(floor_rates));
    findings.insert(
        "bandAllBrokersPerS".into(),
        json!(round1(total(&band_rates))),
    );
    findings.insert(
        "floorAllBrokersPerS".into(),
        json!(round1(total(&floor_rates))),
    );
    findings.insert("extraQueriesPerS".into(), json!(round1(extra)));
    // A ratio, not a count: the count moves with the statements' cost (extra was 92-109 calls/s
    // over seeds 1-20 once sub-millisecond costs stopped rounding up to a tick, at 2026-12-05),
    // the ratio stays near 5×; without the floor it is 1.
    let times = total(&floor_rates) / total(&band_rates).max(1e-9);
    let expectations = vec![expect(
        "floor_spins",
        times > FLOOR_SPIN_RATIO,
        format!(
            "while the bursts came due and drained, the five brokers made {times:.1}× the band's probe+pick calls/s with the floor ({extra:.0} more a second; spinning is over {FLOOR_SPIN_RATIO}×)"
        ),
    )];
    (vec![band, floor], findings, expectations)
}

/// The floor spins when the brokers poll this many times as often as with the band.
const FLOOR_SPIN_RATIO: f64 = 3.0;

/// Runs a spin world and measures each broker's probe+pick rate (probe, and claim or take) from
/// the instant the first burst became due to the last fire of the last burst. The window used to
/// be each burst's own drain; under the take a 150-timer burst drains in one call of a few
/// milliseconds, so those windows held one call each and measured nothing.
fn run_spin(label: &str, form: &'static str, spec: &RunSpec) -> (RunReport, BTreeMap<String, f64>) {
    let outcome = world::run(spec);
    let first_due = spec
        .bursts
        .iter()
        .map(|b| crate::time::ORIGIN_US + (b.at_ms + b.delay_ms) * 1000)
        .min();
    let last_fire = spec
        .bursts
        .iter()
        .enumerate()
        .filter_map(|(n, _)| analysis::last_fire_of(&outcome, &format!("b{n}-")))
        .max();
    let rates = match (first_due, last_fire) {
        (Some(from), Some(to)) if to > from => analysis::probe_claim_rate(&outcome, from, to),
        _ => BTreeMap::new(),
    };
    (report_of(label, form, spec, &outcome, 1), rates)
}

fn crash(seed: u64, options: Options) -> RunSpec {
    let mut w = steady(seed, options, 3);
    w.faults = vec![
        Fault {
            at_ms: 7_300,
            kind: FaultKind::Crash { broker: 2 },
        },
        Fault {
            at_ms: 15_000,
            kind: FaultKind::Restart { broker: 2 },
        },
        Fault {
            at_ms: 18_150,
            kind: FaultKind::Crash { broker: 3 },
        },
        Fault {
            at_ms: 21_010,
            kind: FaultKind::Crash { broker: 1 },
        },
        Fault {
            at_ms: 24_000,
            kind: FaultKind::Restart { broker: 1 },
        },
    ];
    w
}

fn partition(seed: u64, options: Options) -> RunSpec {
    let mut w = steady(seed, options, 3);
    w.faults = vec![
        Fault {
            at_ms: 6_200,
            kind: FaultKind::Cut { broker: 1 },
        },
        Fault {
            at_ms: 12_000,
            kind: FaultKind::Heal { broker: 1 },
        },
        Fault {
            at_ms: 14_050,
            kind: FaultKind::Cut { broker: 2 },
        },
        Fault {
            at_ms: 14_070,
            kind: FaultKind::Cut { broker: 3 },
        },
        Fault {
            at_ms: 20_000,
            kind: FaultKind::Heal { broker: 2 },
        },
    ];
    w
}

/// A steady mixed load on `brokers` brokers, short leases so faults heal within the run.
fn steady(seed: u64, options: Options, brokers: u32) -> RunSpec {
    let mut w = RunSpec::new(seed, options.costs);
    w.brokers = brokers;
    w.safety_ms = options.duration_s.unwrap_or(30) * 1000;
    w.liveness_ms = 20_000;
    w.knobs = Knobs::new()
        .with(knob::LEASE_MS, 3_000)
        .with(knob::STATEMENT_TIMEOUT_MS, 1_000)
        .with(knob::KV_EXPIRE_EVERY_MS, 500);
    w.timers = Some(TimerLoad {
        per_s: 300,
        batch: 10,
        delay_ms: (0, 3_000),
        payload_bytes: (64, 2_048),
        tenants: 3,
        queues: 3,
        partitions: 4,
    });
    w.pushes = Some(PushLoad {
        pushers: 2,
        per_s_each: 50,
        messages_per_push: 5,
        payload_bytes: 512,
    });
    w.kv = Some(KvLoad {
        per_s: 100,
        ttl_ms: (100, 3_000),
        keys: 500,
        wire_writers: 2,
        held_ms: (50, 1_000),
    });
    w
}

/// The wake: a timer scheduled on an idle broker fires on the local wake; one scheduled on a
/// broker that dies right after is fired by another within the sleep ceiling.
fn wake(seed: u64, options: Options) -> Parts {
    let mut w = RunSpec::new(seed, options.costs);
    w.brokers = 3;
    w.safety_ms = 20_000;
    w.liveness_ms = 5_000;
    w.bursts = vec![
        // Scheduled halfway between the idle brokers' passes and due 30 ms after its commit, so
        // only the wake can have it fired at once. (Scheduled at 5 000 ms and due 300 ms later,
        // a pass at the whole second saw it first: with the wake removed, the check still
        // passed on seeds 1-40.)
        Burst {
            at_ms: 5_450,
            count: 1,
            delay_ms: 30,
            payload_bytes: 100,
            tenant: "tenant-0".into(),
            broker: 1,
        },
        Burst {
            at_ms: 12_000,
            count: 1,
            delay_ms: 300,
            payload_bytes: 100,
            tenant: "tenant-0".into(),
            broker: 2,
        },
    ];
    // broker-2 dies 50 ms after committing the second timer, before it is due.
    w.faults = vec![Fault {
        at_ms: 12_050,
        kind: FaultKind::Crash { broker: 2 },
    }];
    let outcome = world::run(&w);
    let on_wake = analysis::fires_of(&outcome, "b0-");
    let elsewhere = analysis::fires_of(&outcome, "b1-");
    let run = report_of("wake", "shipped", &w, &outcome, 1);
    let ceiling = run.spec.config().sleep_ms_max as f64;
    let mut findings = BTreeMap::new();
    let describe = |fires: &[(String, u64, f64, String)]| {
        fires
            .iter()
            .map(|(txn, _, late, by)| json!({"txn": txn, "latenessMs": late, "firedBy": by}))
            .collect::<Vec<_>>()
    };
    findings.insert("scheduledOnBroker1Awake".into(), json!(describe(&on_wake)));
    findings.insert(
        "scheduledOnBroker2ThatDied".into(),
        json!(describe(&elsewhere)),
    );
    findings.insert("ceilingMs".into(), json!(ceiling));
    // At once, whoever fires it: on seeds 28 and 40 of 1-40 another broker's pass came first and
    // fired it 3 ms late (commit 66dfa5c). Which broker fires is not the seed's rule; how late
    // is. Without the wake, broker-1 sleeps up to the ceiling and the others' passes are as far
    // apart.
    let expectations = wake_expectations(&on_wake, &elsewhere, ceiling);
    (vec![run], findings, expectations)
}

/// The wake's two expectations, from the fires of the timer scheduled on the live broker-1 and
/// of the one scheduled on broker-2, which died (txn, deliver instant, lateness ms, fired by).
fn wake_expectations(
    on_wake: &[(String, u64, f64, String)],
    elsewhere: &[(String, u64, f64, String)],
    ceiling: f64,
) -> Vec<Check> {
    let woke_fast = !on_wake.is_empty() && on_wake.iter().all(|(_, _, late, _)| *late < 50.0);
    let net_held = elsewhere.len() == 1
        && elsewhere
            .iter()
            .all(|(_, _, late, by)| *late <= ceiling + 50.0 && by != "broker-2");
    vec![
        expect(
            "the_local_wake_fires_at_once",
            woke_fast,
            format!("scheduled on broker-1: {on_wake:?}"),
        ),
        expect(
            "another_broker_fires_within_the_ceiling",
            net_held,
            format!("scheduled on broker-2, which died: {elsewhere:?}"),
        ),
    ]
}

/// A burst of 50 000 timers due at once on three brokers.
fn burst(seed: u64, options: Options) -> Parts {
    let mut w = RunSpec::new(seed, options.costs);
    w.brokers = 3;
    w.safety_ms = options.duration_s.unwrap_or(30) * 1000;
    w.liveness_ms = 30_000;
    w.bursts = vec![Burst {
        at_ms: 3_000,
        count: 50_000,
        delay_ms: 2_000,
        payload_bytes: 512,
        tenant: "tenant-0".into(),
        broker: 1,
    }];
    let run = execute("burst of 50 000", "shipped", &w, 1);
    let mut findings = BTreeMap::new();
    findings.insert("latenessMs".into(), json!(run.numbers.lateness_ms.short()));
    let expectations = vec![expect(
        "no_stale_segments",
        run.numbers.stale_segments == 0,
        format!("{} stale segments", run.numbers.stale_segments),
    )];
    (vec![run], findings, expectations)
}

/// Fairness: one tenant with 100 000 due timers, another with one due just after them.
fn fairness(seed: u64, options: Options) -> Parts {
    let mut w = RunSpec::new(seed, options.costs);
    w.brokers = 3;
    w.safety_ms = options.duration_s.unwrap_or(30) * 1000;
    w.liveness_ms = 40_000;
    // 100 000 timers of one tenant due at 2 s (a backlog the brokers need seconds to drain), and
    // one timer of another tenant due 100 ms after them, scheduled through a broker's seam.
    w.backlogs = vec![world::Backlog {
        tenant: "tenant-big".into(),
        count: 100_000,
        due_at_ms: 2_000,
        payload_bytes: 512,
    }];
    w.bursts = vec![Burst {
        at_ms: 1_000,
        count: 1,
        delay_ms: 1_100,
        payload_bytes: 256,
        tenant: "tenant-small".into(),
        broker: 2,
    }];
    let outcome = world::run(&w);
    let small = analysis::fires_of(&outcome, "b0-");
    let big = analysis::fires_of(&outcome, "pre0-");
    let run = report_of("fairness", "shipped", &w, &outcome, 1);
    let big_late = Spread::of_values(big.iter().map(|(_, _, late, _)| *late).collect());
    let (small_at, small_late) = small
        .first()
        .map_or((u64::MAX, f64::NAN), |(_, at, late, _)| (*at, *late));
    let mut findings = BTreeMap::new();
    findings.insert("bigTenantLatenessMs".into(), json!(big_late.short()));
    findings.insert("smallTenantLatenessMs".into(), json!(small_late));
    // One pass is at most QUEEN_SWEEPER_CYCLE_MAX_ROWS rows per broker, the brokers' passes
    // running side by side. The small tenant is starved if more than one pass of the big
    // tenant's timers fire before its own.
    let config = run.spec.config();
    let pass = f64::from(config.cycle_max_rows) * f64::from(run.spec.brokers);
    let big_before = big.iter().filter(|(_, at, _, _)| *at < small_at).count() as f64;
    findings.insert(
        "bigTenantTimersFiredBeforeTheSmallOne".into(),
        json!(big_before),
    );
    findings.insert("onePassOfAllBrokers".into(), json!(pass));
    let expectations = vec![
        expect(
            "the_backlog_outlasts_the_small_timer",
            big.iter().filter(|(_, at, _, _)| *at > small_at).count() > 10_000,
            "the big tenant still had more than 10 000 timers to fire when the small one fired"
                .to_owned(),
        ),
        expect(
            "the_small_tenant_waits_at_most_one_pass",
            !small.is_empty() && big_before <= pass,
            format!(
                "{big_before} of the big tenant's timers fired before the small tenant's one (one pass of all brokers is {pass})"
            ),
        ),
    ];
    (vec![run], findings, expectations)
}

/// The swarm: broker count, loads, latencies and faults drawn from the seed.
fn swarm(seed: u64, options: Options) -> RunSpec {
    let mut rng = Rng::new(seed).fork(77);
    let mut w = RunSpec::new(seed, options.costs);
    w.brokers = rng.range(1, 6) as u32;
    w.safety_ms = options.duration_s.unwrap_or(20) * 1000;
    w.liveness_ms = 20_000;
    let lease = rng.range(2_000, 8_000);
    w.knobs = Knobs::new()
        .with(knob::LEASE_MS, lease)
        .with(knob::STATEMENT_TIMEOUT_MS, (lease / 2).min(2_000))
        .with(knob::CLAIM_BATCH, rng.range(10, 300))
        .with(knob::MAX_FIRE_BYTES, rng.range(4_096, 1 << 20))
        .with(knob::KV_EXPIRE_EVERY_MS, rng.range(100, 2_000));
    w.link_latency_ms = (0, rng.range(1, 20));
    w.costs = Costs {
        wal_bytes_per_s: rng.range(2, 64) * 1024 * 1024,
        ..options.costs
    };
    w.timers = Some(TimerLoad {
        per_s: rng.range(20, 600) as u32,
        batch: rng.range(1, 20) as u32,
        delay_ms: (0, rng.range(0, 5_000)),
        payload_bytes: (16, rng.range(16, 8_192)),
        tenants: rng.range(1, 4) as u32,
        queues: rng.range(1, 4) as u32,
        partitions: rng.range(1, 8) as u32,
    });
    if rng.chance(0.6) {
        w.pushes = Some(PushLoad {
            pushers: rng.range(1, 4) as u32,
            per_s_each: rng.range(5, 60) as u32,
            messages_per_push: 5,
            payload_bytes: 1_024,
        });
    }
    if rng.chance(0.5) {
        w.kv = Some(KvLoad {
            per_s: rng.range(10, 200) as u32,
            ttl_ms: (50, 2_000),
            keys: 200,
            // Fixed, not drawn: the seed's other draws (the faults after this) stay as they were.
            wire_writers: 2,
            held_ms: (50, 1_000),
        });
    }
    for _ in 0..rng.range(0, 4) {
        let broker = rng.range(1, u64::from(w.brokers)) as u32;
        let at = rng.range(1_000, w.safety_ms - 1_000);
        let kind = if rng.chance(0.5) {
            FaultKind::Crash { broker }
        } else {
            FaultKind::Cut { broker }
        };
        let heal = match kind {
            FaultKind::Crash { .. } => FaultKind::Restart { broker },
            _ => FaultKind::Heal { broker },
        };
        w.faults.push(Fault { at_ms: at, kind });
        if rng.chance(0.5) {
            w.faults.push(Fault {
                at_ms: (at + rng.range(500, 8_000)).min(w.safety_ms),
                kind: heal,
            });
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_reads_back_from_its_own_name() {
        use clap::ValueEnum as _;
        for scenario in Scenario::all() {
            let name = scenario.name();
            assert_eq!(Scenario::from_str(&name, false), Ok(*scenario), "{name}");
            assert_eq!(
                serde_json::to_string(scenario).expect("serialises"),
                format!("{name:?}")
            );
        }
        assert_eq!(Scenario::Livelock.name(), "livelock");
    }
}
