//! One soak run: a fresh database, N brokers, the loads, a sampler every second with progress on
//! stderr, then the measurements. Every loop is bounded in count and in time and stops by itself.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use queen_harness::{Knobs, Spread};
use queen_sim::naive::NaiveForms;
use queen_sweeper::Config;
use queen_sweeper::clock;
use queen_sweeper::{Payload, TimerOp};
use serde::{Deserialize, Serialize};
use sqlx::Connection;

use crate::bench::cpu;
use crate::brokers::{Broker, Counters, Scheduled};
use crate::db::{Cutoff, RunDb, Sizes};
use crate::error::Error;
use crate::healthz::{HealthPolls, Poll, Poller};
use crate::hostile::{BadInputDone, BadInputs, SlowClients, SlowClientsDone};

/// What a run puts on the database.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Workload {
    pub label: String,
    pub brokers: u32,
    /// Brokers as `queen-sweeper serve` processes instead of in this process.
    pub broker_processes: bool,
    /// SIGKILL one broker process this many seconds in.
    pub kill_one_at_s: Option<u64>,
    /// Sweeper knobs for every broker.
    pub knobs: Knobs,
    pub seconds: u64,
    /// After the load stops, how long the brokers get to fire what is due.
    pub drain_limit_s: u64,
    pub timers_per_s: u32,
    pub timer_delay_ms: (u64, u64),
    pub payload_bytes: u32,
    pub tenants: u32,
    pub queues: u32,
    pub partitions: u32,
    /// Timers already due when the brokers start.
    pub backlog: u32,
    /// Timers due far in the future, present for the whole run.
    pub pending_future: u32,
    pub pushers: u32,
    pub pushes_per_s_each: u32,
    pub push_batch: u32,
    pub push_payload_bytes: u32,
    pub kv_per_s: u32,
    pub kv_ttl_ms: (u64, u64),
    pub kv_keys: u32,
    /// `fillfactor` of queen.log_timers and queen.kv for this run, if not the schema's.
    pub fillfactor: Option<u32>,
    /// Schedule with plain SQL (as another broker would: no local wake) instead of the seams.
    pub schedule_without_wake: bool,
    /// Instead of a steady stream: every `burst_every_s` seconds, `timers_per_s × burst_every_s`
    /// timers in one call, all due `timer_delay_ms.0` later.
    pub burst_every_s: Option<u64>,
    /// Timers already due whose rows another transaction holds locked (`FOR UPDATE`) for the
    /// whole load phase, as a client transaction rescheduling a due timer, or a broker's claim
    /// stalled mid-transaction, would. Every probe counts them due; every claim skips them.
    /// They are not in the lateness (their delay is the run's length by construction) and fire
    /// when the lock goes, before the drain.
    #[serde(default)]
    pub hold_due_locked: u32,
    /// The seed's naive drain (claim the whole pass, then fire) instead of the shipped one; only
    /// for in-process brokers (the production binary cannot name it).
    #[serde(default)]
    pub naive_claim_then_fire: bool,
    /// The seed's naive sleep (the floor after an empty claim) instead of the band; in-process
    /// brokers only.
    #[serde(default)]
    pub naive_floor_after_empty_claim: bool,
    /// Timer payloads (streamed, and since 2026-12-07 the backlog's too) and push payloads of
    /// pseudo-random bytes, so the WAL carries every byte (as the simulation charges it);
    /// otherwise a repeated character, which compresses to almost nothing.
    #[serde(default)]
    pub incompressible_payloads: bool,
    /// The stream's tenants start at this index (`t{offset}`...), so a stream can be a tenant of
    /// its own beside a backlog (whose tenants start at `t0`).
    #[serde(default)]
    pub stream_tenant_offset: u32,
    /// `(second, rounds)`: at this second of the load, terminate every broker backend
    /// (`pg_terminate_backend`) `rounds` times, [`TERMINATE_ROUND_GAP`] apart, as an operator or
    /// a failover does; the run then reports how fast the drain came back ([`Recovery`]).
    #[serde(default)]
    pub terminate_at_s: Option<(u64, u32)>,
    /// Another session holds a REPEATABLE READ snapshot open, idle, for the whole load (the
    /// operations accident of an idle-in-transaction client): vacuum cannot remove the dead
    /// rows the fire leaves behind while it is held.
    #[serde(default)]
    pub hold_snapshot: bool,
    /// At this second of the load, crash PostgreSQL: one backend SIGKILLs itself, so the
    /// postmaster ends every connection and replays its WAL before it accepts any again (what an
    /// immediate restart does, without needing the server's data directory). The brokers'
    /// `/healthz` is polled through the run ([`crate::healthz`]), and the drain's recovery is
    /// measured from the crash.
    #[serde(default)]
    pub crash_server_at_s: Option<u64>,
    /// Hostile clients held against every broker process for the whole load: each sends a
    /// schedule's headers and a few bytes of its body, then one byte a second, and connects again
    /// when the broker closes it ([`crate::hostile`]).
    #[serde(default)]
    pub slow_clients_per_broker: u32,
    /// Rounds of the API's bad-input table sent to the broker processes during the load, each row
    /// to the next broker, a round every half second or so ([`crate::hostile::BadInputs`]).
    #[serde(default)]
    pub bad_input_rounds: u32,
    /// Autovacuum settings for this run, if not the server's and the schema's defaults.
    #[serde(default)]
    pub autovacuum: Option<Autovacuum>,
    /// Every schedule call carries an `Idempotency-Key` of its own, and a call that fails is
    /// retried with its key and body until it is answered, as a careful client does (broker
    /// processes only).
    #[serde(default)]
    pub keyed: Option<Keyed>,
}

/// Keyed schedule calls ([`Workload::keyed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Keyed {
    /// `QUEEN_API_IDEMPOTENCY_WINDOW_S` of the broker processes.
    pub window_s: u64,
    /// Before the load, fill the key table as this load leaves it once it has run a whole
    /// window: a key per schedule call (one per 10 ms tick) for `window_s` seconds, created
    /// evenly over the last window, so the oldest expire during the run as they would.
    pub backfill: bool,
}

impl Keyed {
    /// The keys a full window of `w`'s calls leaves in the table (a call per 10 ms tick).
    pub fn keys_in_window(&self, w: &Workload) -> u64 {
        if w.timers_per_s == 0 {
            return 0;
        }
        self.window_s * u64::from(w.timers_per_s).min(100)
    }
}

/// The variable of the API's idempotency window.
pub const IDEMPOTENCY_WINDOW: &str = "QUEEN_API_IDEMPOTENCY_WINDOW_S";

/// How long a failed keyed call waits before its next retry, and how long it keeps retrying.
const KEYED_RETRY_GAP: Duration = Duration::from_millis(100);
pub const KEYED_RETRY_FOR: Duration = Duration::from_secs(60);

/// How eagerly dead timer rows are vacuumed during a run: per table on `queen.log_timers`, and
/// the server's naptime (set with `ALTER SYSTEM` for the run, reset after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Autovacuum {
    /// `autovacuum_naptime`: how often the launcher looks at each database, seconds.
    pub naptime_s: u32,
    /// `autovacuum_vacuum_threshold`, with a scale factor of 0: dead rows that start a vacuum.
    pub vacuum_threshold: u32,
    /// `autovacuum_vacuum_cost_delay`, ms (0: vacuum at full speed).
    pub cost_delay_ms: u32,
}

/// The gap between rounds of backend termination.
pub const TERMINATE_ROUND_GAP: Duration = Duration::from_millis(250);

impl Workload {
    /// A modest mixed load: 3 brokers, 300 timers/s due 0-2 s ahead, 4 pushers, KV churn.
    pub fn canonical(seconds: u64) -> Workload {
        Workload {
            label: "canonical".into(),
            brokers: 3,
            broker_processes: false,
            kill_one_at_s: None,
            knobs: Knobs::new(),
            seconds,
            drain_limit_s: 20,
            timers_per_s: 300,
            timer_delay_ms: (0, 2_000),
            payload_bytes: 512,
            tenants: 3,
            queues: 4,
            partitions: 8,
            backlog: 0,
            pending_future: 0,
            pushers: 4,
            pushes_per_s_each: 50,
            push_batch: 10,
            push_payload_bytes: 512,
            kv_per_s: 100,
            kv_ttl_ms: (500, 5_000),
            kv_keys: 2_000,
            fillfactor: None,
            schedule_without_wake: false,
            burst_every_s: None,
            hold_due_locked: 0,
            naive_claim_then_fire: false,
            naive_floor_after_empty_claim: false,
            incompressible_payloads: false,
            stream_tenant_offset: 0,
            terminate_at_s: None,
            hold_snapshot: false,
            crash_server_at_s: None,
            slow_clients_per_broker: 0,
            bad_input_rounds: 0,
            autovacuum: None,
            keyed: None,
        }
    }

    /// The naive forms the workload's brokers run (none: the shipped cycle).
    pub fn naive_forms(&self) -> NaiveForms {
        NaiveForms {
            claim_then_fire: self.naive_claim_then_fire,
            floor_after_empty_claim: self.naive_floor_after_empty_claim,
        }
    }

    pub fn config(&self) -> Result<Config, Error> {
        self.knobs.config().map_err(|source| Error::Knobs {
            label: self.label.clone(),
            source,
        })
    }

    /// A workload with nothing in it, to be filled by an experiment.
    pub fn quiet(label: &str, seconds: u64) -> Workload {
        Workload {
            label: label.to_owned(),
            timers_per_s: 0,
            pushers: 0,
            kv_per_s: 0,
            ..Workload::canonical(seconds)
        }
    }

    /// Sets the knob whose variable is `var`, replacing an earlier value.
    ///
    /// # Panics
    /// When `var` is not a sweeper knob or `value` is outside its bounds: experiments name
    /// their knobs in code, and every sweep's workloads are built by a test.
    pub fn knob(mut self, var: &str, value: u64) -> Workload {
        self.knobs = self.knobs.with_var(var, value);
        self
    }

    /// One line for reports and dated blocks: brokers and load.
    pub fn describe(&self) -> String {
        let mut parts = vec![format!(
            "{} broker{}",
            self.brokers,
            if self.brokers == 1 { "" } else { "s" }
        )];
        if self.backlog > 0 {
            parts.push(format!("a backlog of {} timers", self.backlog));
        }
        if self.timers_per_s > 0 {
            let shape = match self.burst_every_s {
                Some(every) => format!(
                    "{} timers every {every} s in one burst",
                    u64::from(self.timers_per_s) * every
                ),
                None => format!("{} timers/s", self.timers_per_s),
            };
            parts.push(shape);
        }
        if self.backlog > 0 || self.timers_per_s > 0 {
            let kind = if self.incompressible_payloads {
                " incompressible"
            } else {
                ""
            };
            parts.push(format!("{} B{kind} payloads", self.payload_bytes));
        }
        if self.backlog > 0 && self.timers_per_s > 0 && self.stream_tenant_offset > 0 {
            parts.push("the stream a tenant of its own".to_owned());
        }
        if self.pushers > 0 {
            parts.push(format!(
                "{} pushers × {}/s × {} messages of {} B",
                self.pushers, self.pushes_per_s_each, self.push_batch, self.push_payload_bytes
            ));
        }
        if self.kv_per_s > 0 {
            parts.push(format!(
                "{} KV puts/s, TTL {}-{} ms",
                self.kv_per_s, self.kv_ttl_ms.0, self.kv_ttl_ms.1
            ));
        }
        if self.hold_snapshot {
            parts.push("a snapshot held open by an idle transaction".to_owned());
        }
        if self.hold_due_locked > 0 {
            parts.push(format!(
                "{} due timers held locked by another transaction",
                self.hold_due_locked
            ));
        }
        if let Some(keyed) = self.keyed {
            let mut words = format!(
                "every call keyed and retried every {} ms until answered",
                KEYED_RETRY_GAP.as_millis()
            );
            if keyed.backfill {
                words.push_str(&format!(
                    ", the key table holding a full window ({} keys)",
                    keyed.keys_in_window(self)
                ));
            }
            parts.push(words);
        }
        if self.crash_server_at_s.is_some() {
            parts.push("the server crashed mid-load".to_owned());
        }
        let mut knobs: Vec<String> = self.knobs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if let Some(keyed) = self.keyed {
            knobs.push(format!("{IDEMPOTENCY_WINDOW}={}", keyed.window_s));
        }
        if !knobs.is_empty() {
            parts.push(knobs.join(" "));
        }
        parts.join(", ")
    }
}

impl RunResult {
    /// Timers fired per second between the first and the last fire (the drain rate of a
    /// backlog, not diluted by idle seconds), from database timestamps.
    pub fn busy_fired_per_s(&self) -> f64 {
        (self.counters.fired as f64 / self.fire_span_s.max(1e-3)).round()
    }

    /// The backlog's own drain rate (timers/s between its first and its last fire, database
    /// timestamps), not diluted by a stream fired beside it; the busy rate without a backlog.
    pub fn backlog_fired_per_s(&self) -> f64 {
        match self.backlog_fire_span_s {
            Some(span) if self.workload.backlog > 0 => {
                (f64::from(self.workload.backlog) / span.max(1e-3)).round()
            }
            _ => self.busy_fired_per_s(),
        }
    }

    /// How fast the expired-but-present KV rows grew over the second half of the run (rows/s).
    pub fn expired_not_pruned_growth(&self) -> f64 {
        let half = self.series.len() / 2;
        match (self.series.get(half), self.series.last()) {
            (Some(a), Some(b)) if b.t_s > a.t_s => {
                ((b.expired_not_pruned - a.expired_not_pruned) as f64 / (b.t_s - a.t_s) as f64
                    * 10.0)
                    .round()
                    / 10.0
            }
            _ => 0.0,
        }
    }
}

/// A histogram of microseconds up to an hour, 3 significant figures: every latency of a run.
pub(crate) fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

/// Values in ms, keyed by a whole second: one histogram (µs) of them all, and one per second.
pub(crate) fn per_second(
    values: impl Iterator<Item = (u64, f64)>,
) -> (Histogram<u64>, BTreeMap<u64, Histogram<u64>>) {
    let mut overall = histogram();
    let mut by_second: BTreeMap<u64, Histogram<u64>> = BTreeMap::new();
    for (second, ms) in values {
        let micros = (ms.max(0.0) * 1000.0) as u64 + 1;
        overall.saturating_record(micros);
        by_second
            .entry(second)
            .or_insert_with(histogram)
            .saturating_record(micros);
    }
    (overall, by_second)
}

/// One second of a run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, serde::Deserialize)]
pub struct Sample {
    pub t_s: u64,
    pub fired_per_s: f64,
    pub stale_segments: u64,
    pub empty_claims_per_s: f64,
    pub probe_claim_per_s: f64,
    pub wal_bytes_per_s: f64,
    pub push_p99_ms: f64,
    pub pushes_per_s: f64,
    pub lateness_p99_ms: f64,
    pub timers_bytes: i64,
    pub kv_bytes: i64,
    pub pending_timers: i64,
    /// Dead row versions in queen.log_timers.
    #[serde(default)]
    pub timers_dead_rows: i64,
    pub expired_not_pruned: i64,
    /// Bytes the machine's disks wrote in this second (WAL, and the heap's writeback).
    #[serde(default)]
    pub disk_bytes_per_s: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RunResult {
    pub workload: Workload,
    pub seconds: f64,
    pub counters: Counters,
    pub fired_per_s: f64,
    pub lateness_ms: Spread,
    /// The lateness of the streamed timers alone (not the backlog's), when there were any.
    #[serde(default)]
    pub stream_lateness_ms: Option<Spread>,
    pub push_latency_ms: Spread,
    /// Schedule calls answered with their results, send to answer (through a broker's HTTP API,
    /// or by SQL).
    #[serde(default)]
    pub schedule_latency_ms: Spread,
    pub wal_bytes_per_s: f64,
    /// Calls per second per broker, by kind.
    pub queries_per_s_per_broker: BTreeMap<String, f64>,
    pub sizes_end: Sizes,
    pub duplicates: i64,
    pub never_fired: i64,
    pub fired_early: i64,
    /// Peak resident KiB of broker processes (process mode).
    pub broker_peak_rss_kib: Option<u64>,
    /// Seconds from the first to the last fired message (database timestamps).
    pub fire_span_s: f64,
    /// From the backlog's first fired timer to its last, seconds (None: no backlog).
    #[serde(default)]
    pub backlog_fire_span_s: Option<f64>,
    /// The load's start, epoch seconds (the origin of `series` and of the lateness seconds).
    #[serde(default)]
    pub start_epoch_s: f64,
    /// The first and the last fired message, epoch seconds (database timestamps).
    #[serde(default)]
    pub fire_window_epoch_s: Option<(f64, f64)>,
    /// The earliest and the latest promised delivery instant, epoch seconds.
    #[serde(default)]
    pub due_window_epoch_s: Option<(f64, f64)>,
    /// What a SIGKILL cost, when the run killed a broker.
    #[serde(default)]
    pub kill: Option<KillEffect>,
    /// How the drain came back after its backends were terminated, when the run did that.
    #[serde(default)]
    pub recovery: Option<Recovery>,
    /// Schedule calls that failed (their timers are no promise), and the first one's error.
    #[serde(default)]
    pub schedule_failures: u64,
    #[serde(default)]
    pub first_schedule_error: Option<String>,
    /// The cores busy from the first fire to the last: the server's and the machine's.
    #[serde(default)]
    pub cpu_while_firing: Option<CpuSplit>,
    /// The brokers' `/healthz` through the run, when the run crashed the server.
    #[serde(default)]
    pub healthz: Option<HealthPolls>,
    /// In a run that crashed the server: the client connections of the run's database that began
    /// before the crash and were still there after the drain (0: the crash ended them all).
    #[serde(default)]
    pub crash_survivors: Option<i64>,
    /// What the hostile slow clients did, when the run had them.
    #[serde(default)]
    pub slow_clients: Option<SlowClientsDone>,
    /// What the brokers answered to the bad-input table, when the run sent it.
    #[serde(default)]
    pub bad_input: Option<BadInputDone>,
    /// The keyed schedule calls, when the workload keyed them.
    #[serde(default)]
    pub keyed: Option<KeyedCalls>,
    pub series: Vec<Sample>,
}

/// What a run's keyed schedule calls did ([`Workload::keyed`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KeyedCalls {
    /// Calls answered, on their first try or a retry.
    pub answered: u64,
    /// Calls that failed at least once and were retried.
    pub retried: u64,
    /// Answers that replayed an earlier call's results: a reply lost after its work committed.
    pub replayed: u64,
    /// Calls still unanswered when their retries ran out.
    pub abandoned: u64,
    /// The longest a retried call took from its first send to its answer, ms: how long its key
    /// had to outlive the call for the retry to find it.
    pub longest_retry_ms: f64,
    /// Rows of queen.api_idempotency at the load's end, and its bytes (heap, indexes, TOAST).
    pub table_rows: i64,
    pub table_bytes: i64,
}

/// Cores in use over a window (CPU seconds over its length): the server's processes, and the
/// whole machine (the server, the brokers, the load and anything else running).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuSplit {
    pub seconds: f64,
    pub server_cores: f64,
    pub machine_cores: f64,
}

impl CpuSplit {
    /// Cuts the window `[from, to]` (epoch seconds) out of the two traces.
    pub fn of(server: &[(f64, f64)], machine: &[(f64, f64)], from: f64, to: f64) -> Option<Self> {
        let seconds = to - from;
        if seconds <= 0.0 {
            return None;
        }
        let round = |x: f64| (x * 100.0).round() / 100.0;
        Some(CpuSplit {
            seconds: round(seconds),
            server_cores: round(cpu::used_between(server, from, to)? / seconds),
            machine_cores: round(cpu::used_between(machine, from, to)? / seconds),
        })
    }

    /// The cores the server did not use: the clients (brokers, load) and the rest.
    pub fn other_cores(&self) -> f64 {
        ((self.machine_cores - self.server_cores).max(0.0) * 100.0).round() / 100.0
    }
}

/// The timers a SIGKILL could have delayed: those due before the kill and fired after it
/// (whatever the killed broker held, or was about to take, is among them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillEffect {
    /// The instant the signal was sent, seconds into the run.
    pub at_s: f64,
    /// Timers due at or before the kill that fired after it.
    pub overdue_at_kill: u64,
    /// From the kill to the last of them firing, ms (0 when there were none).
    pub last_fired_after_kill_ms: f64,
    /// Their lateness (fire minus due), ms.
    pub lateness_ms: Spread,
}

/// The drain around rounds of backend termination, from the database's fire timestamps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recovery {
    /// The first and the last round, seconds after the load's start.
    pub first_round_s: f64,
    pub last_round_s: f64,
    /// Timers fired per second over the [`RATE_WINDOW_S`] before the first round.
    pub rate_before_per_s: f64,
    /// The slowest one-second window from the last round until the rate was back (or the end
    /// of the search, or of the work: a window past the last fire does not count), timers/s.
    pub slowest_after_per_s: f64,
    /// From the last round to the start of the first one-second window that fired at least
    /// [`RECOVERED_SHARE`] of the rate before; `None` when none did within [`RECOVERY_SEARCH_S`]
    /// or before the work ran out.
    pub back_after_ms: Option<f64>,
}

/// The window before the first round whose rate is the reference.
pub const RATE_WINDOW_S: f64 = 1.0;
/// The share of the rate before at which the drain counts as back.
pub const RECOVERED_SHARE: f64 = 0.8;
/// How long after the last round the recovery is looked for.
pub const RECOVERY_SEARCH_S: f64 = 10.0;
/// The step the one-second window slides by.
const RECOVERY_STEP_S: f64 = 0.05;

impl Recovery {
    /// The recovery in `fired` (epoch seconds, sorted) around `rounds` (epoch seconds, in
    /// order), with `start` the load's start. Pure.
    pub fn of(fired: &[f64], rounds: &[f64], start: f64) -> Option<Recovery> {
        let (&first, &last) = (rounds.first()?, rounds.last()?);
        let count = |from: f64, to: f64| {
            (fired.partition_point(|&t| t < to) - fired.partition_point(|&t| t < from)) as f64
        };
        let before = count(first - RATE_WINDOW_S, first) / RATE_WINDOW_S;
        let mut slowest = f64::INFINITY;
        let mut back = None;
        let steps = (RECOVERY_SEARCH_S / RECOVERY_STEP_S) as u32;
        let end = fired.last().copied().unwrap_or(last);
        for step in 0..=steps {
            let from = last + f64::from(step) * RECOVERY_STEP_S;
            // A window past the last fire measures the end of the work, not the drain.
            if from + 1.0 > end {
                break;
            }
            let rate = count(from, from + 1.0);
            slowest = slowest.min(rate);
            if rate >= RECOVERED_SHARE * before {
                back = Some((from - last) * 1000.0);
                break;
            }
        }
        let round = |x: f64| (x * 10.0).round() / 10.0;
        let slowest = if slowest.is_finite() { slowest } else { 0.0 };
        Some(Recovery {
            first_round_s: round(first - start),
            last_round_s: round(last - start),
            rate_before_per_s: round(before),
            slowest_after_per_s: round(slowest),
            back_after_ms: back.map(f64::round),
        })
    }
}

/// What the load generators share with the sampler.
#[derive(Debug)]
struct Shared {
    promised_txns: Vec<String>,
    promised_at_us: Vec<i64>,
    schedule_failures: u64,
    /// The first refused schedule's error, for the run's result.
    first_schedule_error: Option<String>,
    /// The run has SIGKILLed its first broker: schedules go to the others.
    first_broker_killed: bool,
    /// Every push of the run.
    push_latency_us: Histogram<u64>,
    /// Every schedule call that was answered with its results (SQL or HTTP), whole.
    schedule_latency_us: Histogram<u64>,
    /// The pushes since the sampler last looked.
    push_second: Histogram<u64>,
    pushes_total: u64,
    /// Keyed schedule calls, when the workload keys them.
    keyed: KeyedCalls,
    stop: bool,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            promised_txns: Vec::new(),
            promised_at_us: Vec::new(),
            schedule_failures: 0,
            first_schedule_error: None,
            first_broker_killed: false,
            push_latency_us: histogram(),
            schedule_latency_us: histogram(),
            push_second: histogram(),
            pushes_total: 0,
            keyed: KeyedCalls::default(),
            stop: false,
        }
    }
}

/// The load phase while it runs: the load tasks and what they share with the sampler.
#[derive(Debug)]
struct Load {
    shared: Arc<Mutex<Shared>>,
    tasks: Vec<tokio::task::JoinHandle<Result<(), Error>>>,
    /// When the load started, for the sampler's seconds and the run's length.
    started: std::time::Instant,
    /// The same instant on the wall clock, for the lateness the database measures.
    start_epoch_s: f64,
}

/// What the load phase leaves once its tasks are done.
#[derive(Debug)]
struct Loaded {
    /// The timers the brokers promised, with the instant each promised (epoch µs).
    promised_txns: Vec<String>,
    promised_at_us: Vec<i64>,
    push_latency_us: Histogram<u64>,
    schedule_latency_us: Histogram<u64>,
    schedule_failures: u64,
    first_schedule_error: Option<String>,
    keyed: KeyedCalls,
}

impl Load {
    /// Starts the schedule, push and KV loads the workload asks for.
    fn start(db: &RunDb, w: &Workload, brokers: &Arc<tokio::sync::RwLock<Vec<Broker>>>) -> Load {
        let shared = Arc::new(Mutex::new(Shared::new()));
        let started = clock::monotonic_now();
        let start_epoch_s = clock::wall_since_epoch().as_secs_f64();
        let mut tasks = Vec::new();
        if w.timers_per_s > 0 {
            tasks.push(tokio::spawn(schedule_load(
                w.clone(),
                db.url.clone(),
                brokers.clone(),
                shared.clone(),
            )));
        }
        for p in 0..w.pushers {
            tasks.push(tokio::spawn(push_load(
                db.url.clone(),
                w.clone(),
                p,
                shared.clone(),
            )));
        }
        if w.kv_per_s > 0 {
            tasks.push(tokio::spawn(kv_load(
                db.url.clone(),
                w.clone(),
                shared.clone(),
            )));
        }
        Load {
            shared,
            tasks,
            started,
            start_epoch_s,
        }
    }

    /// Tells the loads to stop, waits for them, and hands over what they recorded.
    async fn stop(self) -> Result<Loaded, Error> {
        self.shared.lock().expect("not poisoned").stop = true;
        for task in self.tasks {
            task.await.map_err(Error::LoadPanicked)??;
        }
        let mut s = self.shared.lock().expect("not poisoned");
        Ok(Loaded {
            promised_txns: std::mem::take(&mut s.promised_txns),
            promised_at_us: std::mem::take(&mut s.promised_at_us),
            push_latency_us: std::mem::replace(&mut s.push_latency_us, histogram()),
            schedule_latency_us: std::mem::replace(&mut s.schedule_latency_us, histogram()),
            schedule_failures: s.schedule_failures,
            first_schedule_error: s.first_schedule_error.take(),
            keyed: std::mem::take(&mut s.keyed),
        })
    }
}

/// What the sampler did to the brokers, epoch seconds.
#[derive(Debug, Default)]
struct Faults {
    killed_at_epoch_s: Option<f64>,
    terminated_at_epoch_s: Vec<f64>,
    crashed_at_epoch_s: Option<f64>,
}

/// What a run measured from its own side, for [`Run::finish`] to join with the database's.
#[derive(Debug)]
struct Measured {
    series: Vec<Sample>,
    seconds: f64,
    start_epoch_s: f64,
    counters: Counters,
    push_latency_us: Histogram<u64>,
    schedule_latency_us: Histogram<u64>,
    broker_peak_rss_kib: Option<u64>,
    /// What the sampler did to the brokers, and when.
    faults: Faults,
    schedule_failures: u64,
    first_schedule_error: Option<String>,
    healthz_polls: Option<Vec<Poll>>,
    keyed: KeyedCalls,
    /// Up to when the run's fires count (the drain limit's instant, when it was reached).
    cutoff: Cutoff,
}

#[derive(Debug)]
pub struct Run<'a> {
    pub server_url: &'a str,
    pub sweeper_binary: Option<&'a std::path::Path>,
    pub quiet: bool,
}

impl Run<'_> {
    /// Runs `workload` on a fresh database, and drops the database afterwards.
    pub async fn execute(&self, workload: &Workload, db_label: &str) -> Result<RunResult, Error> {
        let db = RunDb::create(self.server_url, db_label).await?;
        let result = self.on(&db, workload).await;
        if workload.autovacuum.is_some() {
            set_naptime(&db, None).await?;
        }
        db.drop_now().await?;
        result
    }

    /// The run's phases in order: prepare the database, start the brokers, load and sample,
    /// stop the loads, drain, stop the brokers, then measure.
    async fn on(&self, db: &RunDb, w: &Workload) -> Result<RunResult, Error> {
        let config = w.config()?;
        let server_cpu = cpu::Trace::start(cpu::Scope::locate(&db.pool).await);
        let machine_cpu = cpu::Trace::of(cpu::machine_busy_seconds);
        let held = prepare(db, w).await?;
        let snapshot = match w.hold_snapshot {
            true => Some(hold_snapshot(db).await?),
            false => None,
        };
        let brokers = self.start_brokers(db, w, &config).await?;
        // The hostile clients and the health poller reach the broker processes by HTTP.
        let addresses: Vec<String> = brokers.iter().filter_map(Broker::listen).collect();
        let poller = w
            .crash_server_at_s
            .map(|_| Poller::start(addresses.clone()));
        let slow = (w.slow_clients_per_broker > 0)
            .then(|| SlowClients::start(&addresses, w.slow_clients_per_broker));
        let bad_inputs =
            (w.bad_input_rounds > 0).then(|| BadInputs::start(&addresses, w.bad_input_rounds));
        let brokers = Arc::new(tokio::sync::RwLock::new(brokers));
        let load = Load::start(db, w, &brokers);
        let (started, start_epoch_s) = (load.started, load.start_epoch_s);
        let (series, faults) = self.sample(db, w, &brokers, &load.shared, started).await?;
        let loaded = load.stop().await?;
        let slow_clients = slow.map(SlowClients::stop);
        let bad_input = match bad_inputs {
            Some(sender) => Some(sender.stop().await),
            None => None,
        };
        for holder in held.into_iter().chain(snapshot) {
            release_held(holder).await?;
        }
        let cutoff = self.drain(db, w, &brokers).await?;
        let healthz_polls = poller.map(Poller::stop);
        let seconds = (clock::monotonic_now() - started).as_secs_f64();
        let (counters, broker_peak_rss_kib) = stop_brokers(&brokers).await;
        db.record_expected(&loaded.promised_txns, &loaded.promised_at_us)
            .await?;
        let measured = Measured {
            series,
            seconds,
            start_epoch_s,
            counters,
            push_latency_us: loaded.push_latency_us,
            schedule_latency_us: loaded.schedule_latency_us,
            broker_peak_rss_kib,
            faults,
            schedule_failures: loaded.schedule_failures,
            first_schedule_error: loaded.first_schedule_error,
            healthz_polls,
            keyed: loaded.keyed,
            cutoff,
        };
        let mut result = self.finish(db, w, measured).await?;
        result.slow_clients = slow_clients;
        result.bad_input = bad_input;
        let (server, machine) = (server_cpu.stop(), machine_cpu.stop());
        result.cpu_while_firing = result
            .fire_window_epoch_s
            .and_then(|(from, to)| CpuSplit::of(&server, &machine, from, to));
        Ok(result)
    }

    /// Starts the workload's brokers: `queen-sweeper serve` processes or in this process.
    async fn start_brokers(
        &self,
        db: &RunDb,
        w: &Workload,
        config: &Config,
    ) -> Result<Vec<Broker>, Error> {
        let mut brokers = Vec::new();
        let api_env: Vec<(&str, String)> = w
            .keyed
            .map(|k| (IDEMPOTENCY_WINDOW, k.window_s.to_string()))
            .into_iter()
            .collect();
        for i in 1..=w.brokers {
            let identity = format!("soak-broker-{i}");
            brokers.push(match (w.broker_processes, self.sweeper_binary) {
                (true, _) if w.naive_forms() != NaiveForms::default() => return Err(Error::Broker("the naive forms run only in in-process brokers (the production binary cannot name them)".into())),
                (false, _) if w.keyed.is_some() => return Err(Error::Broker("keyed schedules go through the broker processes' API (broker_processes)".into())),
                (true, Some(binary)) => Broker::process(binary, &db.url, (&w.knobs, &api_env), &identity).await?,
                (true, None) => return Err(Error::Broker("broker processes need the queen-sweeper binary next to soak (cargo build --release -p queen-broker)".into())),
                (false, _) => {
                    Broker::in_process(&db.url, config.clone(), &identity, w.naive_forms()).await?
                }
            });
        }
        Ok(brokers)
    }

    /// Joins what the run measured with what the database measured: lateness, delivery
    /// faults, sizes, the fire span.
    async fn finish(
        &self,
        db: &RunDb,
        w: &Workload,
        measured: Measured,
    ) -> Result<RunResult, Error> {
        let Measured {
            mut series,
            seconds,
            start_epoch_s,
            counters,
            push_latency_us,
            schedule_latency_us,
            broker_peak_rss_kib,
            faults,
            schedule_failures,
            first_schedule_error,
            healthz_polls,
            keyed,
            cutoff,
        } = measured;
        let late = db.lateness(start_epoch_s, cutoff).await?;
        let overall = lateness_into(&late, &mut series);
        let stream_lateness_ms = match db.stream_lateness().await? {
            stream if stream.is_empty() => None,
            stream => {
                let mut h = histogram();
                for late_ms in stream {
                    h.saturating_record((late_ms.max(0.0) * 1000.0) as u64 + 1);
                }
                Some(Spread::of(&h, 1000.0))
            }
        };
        let (duplicates, never_fired, fired_early) = db.delivery_faults(cutoff).await?;
        let fire_window_epoch_s = db.fire_window_epoch_s(cutoff).await?;
        let wal: f64 =
            series.iter().map(|s| s.wal_bytes_per_s).sum::<f64>() / series.len().max(1) as f64;
        let queries_per_s_per_broker = counters
            .queries
            .iter()
            .map(|(kind, n)| {
                (
                    kind.clone(),
                    (*n as f64 / seconds.max(1e-9) / f64::from(w.brokers.max(1)) * 100.0).round()
                        / 100.0,
                )
            })
            .collect();
        Ok(RunResult {
            workload: w.clone(),
            seconds: (seconds * 10.0).round() / 10.0,
            fired_per_s: (counters.fired as f64 / seconds.max(1e-9) * 10.0).round() / 10.0,
            counters,
            lateness_ms: Spread::of(&overall, 1000.0),
            stream_lateness_ms,
            push_latency_ms: Spread::of(&push_latency_us, 1000.0),
            schedule_latency_ms: Spread::of(&schedule_latency_us, 1000.0),
            wal_bytes_per_s: wal.round(),
            queries_per_s_per_broker,
            sizes_end: db.sizes().await?,
            duplicates,
            never_fired,
            fired_early,
            broker_peak_rss_kib,
            fire_span_s: fire_window_epoch_s.map_or(0.0, |(first, last)| last - first),
            backlog_fire_span_s: db
                .backlog_fire_window_epoch_s()
                .await?
                .map(|(first, last)| last - first),
            start_epoch_s,
            fire_window_epoch_s,
            due_window_epoch_s: db.due_window_epoch_s().await?,
            schedule_failures,
            first_schedule_error,
            kill: match faults.killed_at_epoch_s {
                Some(at) => Some(kill_effect(db, at, start_epoch_s).await?),
                None => None,
            },
            recovery: match (&faults.terminated_at_epoch_s[..], faults.crashed_at_epoch_s) {
                ([], None) => None,
                ([], Some(crash)) => {
                    Recovery::of(&db.fired_epochs().await?, &[crash], start_epoch_s)
                }
                (rounds, _) => Recovery::of(&db.fired_epochs().await?, rounds, start_epoch_s),
            },
            healthz: healthz_polls.map(|polls| HealthPolls::of(&polls, faults.crashed_at_epoch_s)),
            slow_clients: None,
            bad_input: None,
            crash_survivors: match faults.crashed_at_epoch_s {
                Some(at) => Some(db.connections_begun_before(at).await?),
                None => None,
            },
            cpu_while_firing: None,
            keyed: match w.keyed {
                Some(_) => {
                    let (table_rows, table_bytes) = db.key_table().await?;
                    Some(KeyedCalls {
                        table_rows,
                        table_bytes,
                        ..keyed
                    })
                }
                None => None,
            },
            series,
        })
    }

    /// Samples once a second for the run's length; prints progress every five seconds; kills
    /// a broker or terminates the brokers' backends when asked to, and returns when.
    async fn sample(
        &self,
        db: &RunDb,
        w: &Workload,
        brokers: &tokio::sync::RwLock<Vec<Broker>>,
        shared: &Mutex<Shared>,
        started: std::time::Instant,
    ) -> Result<(Vec<Sample>, Faults), Error> {
        let mut series = Vec::with_capacity(w.seconds as usize);
        let mut faults = Faults::default();
        let crashes = w.crash_server_at_s.is_some();
        let mut last_lsn = db.wal_lsn().await?;
        let mut last_disk = cpu::disk_bytes_written();
        let mut last = Counters::default();
        let mut last_fired = 0;
        let mut last_pushes = 0;
        for t in 1..=w.seconds {
            let due = started + Duration::from_secs(t);
            tokio::time::sleep(due.saturating_duration_since(clock::monotonic_now())).await;
            if w.kill_one_at_s == Some(t)
                && let Some(victim) = brokers.write().await.first_mut()
            {
                victim.kill()?;
                faults.killed_at_epoch_s = Some(clock::wall_since_epoch().as_secs_f64());
                shared.lock().expect("not poisoned").first_broker_killed = true;
                eprintln!("soak: t={t}s SIGKILL to broker 1");
            }
            if let Some((at, rounds)) = w.terminate_at_s
                && at == t
            {
                for round in 0..rounds {
                    if round > 0 {
                        tokio::time::sleep(TERMINATE_ROUND_GAP).await;
                    }
                    let ended = db.terminate_brokers().await?;
                    faults
                        .terminated_at_epoch_s
                        .push(clock::wall_since_epoch().as_secs_f64());
                    eprintln!(
                        "soak: t={t}s terminated {ended} broker backends (round {}/{rounds})",
                        round + 1
                    );
                }
            }
            if w.crash_server_at_s == Some(t) {
                let outcome = db.crash_server().await;
                faults.crashed_at_epoch_s = Some(clock::wall_since_epoch().as_secs_f64());
                eprintln!("soak: t={t}s crashed PostgreSQL ({outcome})");
            }
            let mut now = Counters::default();
            for broker in brokers.read().await.iter() {
                now.add(&broker.counters().await);
            }
            // A killed broker's counters go with it: a run that kills counts fires in the
            // database, so the total never drops.
            let fired = if w.kill_one_at_s.is_some() {
                through_outage(crashes, async || db.fired_count().await).await?
            } else {
                now.fired
            };
            let lsn = through_outage(crashes, async || db.wal_lsn().await).await?;
            let disk = cpu::disk_bytes_written();
            let sizes = through_outage(crashes, async || db.sizes().await).await?;
            let (push_p99, pushes) = {
                let mut s = shared.lock().expect("not poisoned");
                let second = std::mem::replace(&mut s.push_second, histogram());
                (Spread::of(&second, 1000.0).p99, s.pushes_total)
            };
            // The calls a broker repeats while it looks for work, as the simulation counts
            // them: the probe, the claim and the take (the take was left out until 2026-12-04).
            let calls = |c: &Counters| {
                c.queries
                    .iter()
                    .filter(|(kind, _)| queen_sim::analysis::is_polling_call(kind))
                    .map(|(_, n)| n)
                    .sum::<u64>()
            };
            let sample = Sample {
                t_s: t,
                fired_per_s: fired.saturating_sub(last_fired) as f64,
                stale_segments: now.stale_segments.saturating_sub(last.stale_segments),
                empty_claims_per_s: now.empty_claims.saturating_sub(last.empty_claims) as f64,
                probe_claim_per_s: calls(&now).saturating_sub(calls(&last)) as f64,
                wal_bytes_per_s: (lsn - last_lsn) as f64,
                push_p99_ms: push_p99,
                pushes_per_s: pushes.saturating_sub(last_pushes) as f64,
                lateness_p99_ms: 0.0,
                timers_bytes: sizes.timers_bytes + sizes.timers_index_bytes,
                kv_bytes: sizes.kv_bytes + sizes.kv_index_bytes,
                pending_timers: sizes.pending_timers,
                timers_dead_rows: sizes.timers_dead_rows,
                expired_not_pruned: now.expired_not_pruned,
                disk_bytes_per_s: match (disk, last_disk) {
                    (Some(now), Some(before)) => now.saturating_sub(before) as f64,
                    _ => 0.0,
                },
            };
            if !self.quiet && t % 5 == 0 {
                print_progress(w, fired, &now, &sample);
            }
            last_fired = fired;
            last_lsn = lsn;
            last_disk = disk;
            last = now;
            last_pushes = pushes;
            series.push(sample);
        }
        Ok((series, faults))
    }

    /// After the load: waits (bounded) until nothing due is left unfired, and answers up to
    /// when fires count.
    async fn drain(
        &self,
        db: &RunDb,
        w: &Workload,
        brokers: &tokio::sync::RwLock<Vec<Broker>>,
    ) -> Result<Cutoff, Error> {
        // A drain limit of 0 asks for no drain (the RSS runs stop with their backlog still due),
        // which is not worth a warning.
        if w.drain_limit_s == 0 || brokers.read().await.is_empty() {
            return Ok(Cutoff::Drained);
        }
        let polls = w.drain_limit_s * 10;
        let crashes = w.crash_server_at_s.is_some();
        for _ in 0..polls {
            let probe: serde_json::Value = through_outage(crashes, async || {
                sqlx::query_scalar(
                    "SELECT queen.log_timers_due_v1(ARRAY(SELECT generate_series(0, 63)), now(), 1)",
                )
                .fetch_one(&db.pool)
                .await
                .map_err(Error::db("cannot probe for due timers"))
            })
            .await?;
            let due = probe["due"].as_i64().unwrap_or(0);
            let next = probe["nextInMs"].as_i64();
            if due == 0 && next.is_none_or(|n| n > 60_000) {
                return Ok(Cutoff::Drained);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        eprintln!(
            "soak: {}: timers still due after the {} s drain limit (fires after it are not counted)",
            w.label, w.drain_limit_s
        );
        Ok(Cutoff::GaveUpAt {
            epoch_s: clock::wall_since_epoch().as_secs_f64(),
        })
    }
}

/// Sets the server's `autovacuum_naptime` (`None`: back to its configured value) and reloads.
async fn set_naptime(db: &RunDb, seconds: Option<u32>) -> Result<(), Error> {
    let set = match seconds {
        Some(s) => format!("ALTER SYSTEM SET autovacuum_naptime = '{s}s'"),
        None => "ALTER SYSTEM RESET autovacuum_naptime".to_owned(),
    };
    for statement in [set.as_str(), "SELECT pg_reload_conf()"] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(statement.to_owned()))
            .execute(&db.pool)
            .await
            .map_err(Error::db("cannot set autovacuum_naptime"))?;
    }
    Ok(())
}

/// How long the soak's own reads wait for a crashed server to take connections again.
const OUTAGE_LIMIT: Duration = Duration::from_secs(60);

/// One of the soak's own reads; in a run that crashes the server (`tolerate`), retried every
/// 200 ms through the recovery, for at most [`OUTAGE_LIMIT`], instead of failing the run.
async fn through_outage<T>(
    tolerate: bool,
    mut read: impl AsyncFnMut() -> Result<T, Error>,
) -> Result<T, Error> {
    let deadline = clock::monotonic_now() + OUTAGE_LIMIT;
    loop {
        match read().await {
            Ok(value) => return Ok(value),
            Err(_) if tolerate && clock::monotonic_now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Progress on stderr: the run's totals so far and its latest second.
fn print_progress(w: &Workload, fired: u64, totals: &Counters, sample: &Sample) {
    eprintln!(
        "soak: {} t={}s/{}s fired {} ({:.0}/s) stale segments {} push p99 {:.1} ms WAL {:.1} MB/s pending {} expired-not-pruned {}",
        w.label,
        sample.t_s,
        w.seconds,
        fired,
        sample.fired_per_s,
        totals.stale_segments,
        sample.push_p99_ms,
        sample.wal_bytes_per_s / 1e6,
        sample.pending_timers,
        sample.expired_not_pruned
    );
}

/// Puts what the workload wants on the database before any broker starts: the tables'
/// fillfactor, the future and due backlogs, fresh statistics, and the due rows held locked
/// (returned, open, for [`release_held`]).
/// The lateness of every fired timer, as one histogram (µs); each sample gets the p99 of the
/// timers fired in its second.
fn lateness_into(late: &[(f64, f64)], series: &mut [Sample]) -> Histogram<u64> {
    let (overall, by_second) = per_second(
        late.iter()
            .map(|(second, ms)| (second.max(0.0) as u64, *ms)),
    );
    for sample in series {
        if let Some(h) = by_second.get(&sample.t_s) {
            sample.lateness_p99_ms = Spread::of(h, 1000.0).p99;
        }
    }
    overall
}

/// The timers due before the kill at `at` (epoch seconds) that fired after it.
async fn kill_effect(db: &RunDb, at: f64, start_epoch_s: f64) -> Result<KillEffect, Error> {
    let late = db.overdue_at(at).await?;
    let mut h = histogram();
    let mut last_after_ms: f64 = 0.0;
    for (after_ms, late_ms) in &late {
        h.saturating_record((late_ms.max(0.0) * 1000.0) as u64 + 1);
        last_after_ms = last_after_ms.max(*after_ms);
    }
    Ok(KillEffect {
        at_s: ((at - start_epoch_s) * 10.0).round() / 10.0,
        overdue_at_kill: late.len() as u64,
        last_fired_after_kill_ms: last_after_ms.round(),
        lateness_ms: Spread::of(&h, 1000.0),
    })
}

async fn prepare(db: &RunDb, w: &Workload) -> Result<Option<sqlx::PgConnection>, Error> {
    if w.crash_server_at_s.is_some() {
        // Crash recovery empties unlogged tables: the promises must outlive the crash, or the
        // delivery checks would compare the fires with nothing.
        sqlx::raw_sql("ALTER TABLE soak_expected SET LOGGED")
            .execute(&db.pool)
            .await
            .map_err(Error::db("cannot make the soak's promises crash-safe"))?;
    }
    if let Some(a) = w.autovacuum {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE queen.log_timers SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = {}, autovacuum_vacuum_cost_delay = {})",
            a.vacuum_threshold, a.cost_delay_ms
        )))
        .execute(&db.pool)
        .await
        .map_err(Error::db("cannot set the timers' autovacuum"))?;
        set_naptime(db, Some(a.naptime_s)).await?;
    }
    if let Some(fillfactor) = w.fillfactor {
        for table in ["queen.log_timers", "queen.kv"] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "ALTER TABLE {table} SET (fillfactor = {fillfactor})"
            )))
            .execute(&db.pool)
            .await
            .map_err(Error::db(format!("cannot set the fillfactor of {table}")))?;
        }
    }
    if w.pending_future > 0 {
        db.backlog_unpromised(
            w.pending_future,
            7 * 24 * 3_600_000,
            w.payload_bytes,
            (w.tenants, w.queues, w.partitions),
            "future",
        )
        .await?;
    }
    if w.backlog > 0 {
        db.backlog_of(
            w.backlog,
            -1,
            (w.payload_bytes, w.incompressible_payloads),
            (w.tenants, w.queues, w.partitions),
            "backlog",
        )
        .await?;
    }
    if let Some(keyed) = w.keyed.filter(|k| k.backfill) {
        let ops = u64::from(w.timers_per_s).div_ceil(100).max(1);
        db.backfill_keys(keyed.keys_in_window(w), keyed.window_s, w.tenants, ops)
            .await?;
    }
    sqlx::query("ANALYZE")
        .execute(&db.pool)
        .await
        .map_err(Error::db("cannot ANALYZE"))?;
    // Locked before any broker exists, so no claim can take them first.
    match w.hold_due_locked {
        0 => Ok(None),
        n => Ok(Some(hold_due_locked(db, w, n).await?)),
    }
}

/// Ends a holding transaction (of due rows locked, or of a snapshot), so the brokers can fire
/// the rows and vacuum can remove the dead ones.
async fn release_held(mut holder: sqlx::PgConnection) -> Result<(), Error> {
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut holder)
        .await
        .map_err(Error::db("cannot end the holding transaction"))?;
    let _ = holder.close().await;
    Ok(())
}

/// Reads every broker's counters (summed) and peak RSS (the largest), then stops them all.
async fn stop_brokers(brokers: &tokio::sync::RwLock<Vec<Broker>>) -> (Counters, Option<u64>) {
    let mut counters = Counters::default();
    let mut peak_rss = None;
    for broker in brokers.read().await.iter() {
        counters.add(&broker.counters().await);
        if let Some((_, peak)) = broker.pid().and_then(crate::rig::rss_kib) {
            peak_rss = Some(peak_rss.unwrap_or(0).max(peak));
        }
    }
    for broker in std::mem::take(&mut *brokers.write().await) {
        broker.stop().await;
    }
    (counters, peak_rss)
}

/// Inserts `n` due timers (kept out of the lateness) and returns a connection whose open
/// transaction holds every one of their rows locked.
/// Opens a REPEATABLE READ transaction and takes its snapshot, then leaves it idle: the
/// server's xmin horizon stays at this instant until [`release_held`].
async fn hold_snapshot(db: &RunDb) -> Result<sqlx::PgConnection, Error> {
    let fail = || Error::db("cannot hold a snapshot open");
    let mut holder = sqlx::PgConnection::connect(&db.url).await.map_err(fail())?;
    sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM queen.log_timers")
        .execute(&mut holder)
        .await
        .map_err(fail())?;
    Ok(holder)
}

async fn hold_due_locked(db: &RunDb, w: &Workload, n: u32) -> Result<sqlx::PgConnection, Error> {
    db.backlog_unpromised(
        n,
        -1,
        w.payload_bytes,
        (w.tenants, w.queues, w.partitions),
        "held",
    )
    .await?;
    let fail = || Error::db("cannot hold the due rows locked");
    let mut holder = sqlx::PgConnection::connect(&db.url).await.map_err(fail())?;
    sqlx::raw_sql("BEGIN")
        .execute(&mut holder)
        .await
        .map_err(fail())?;
    let locked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT 1 FROM queen.log_timers WHERE starts_with(txn, 'held-') FOR UPDATE) l",
    )
    .fetch_one(&mut holder)
    .await
    .map_err(fail())?;
    if locked != i64::from(n) {
        return Err(Error::HeldRows { locked, wanted: n });
    }
    Ok(holder)
}

/// Schedules `timers_per_s` through the brokers' seams in round robin, a call every 10 ms (or
/// by plain SQL, ringing no wake, when the workload says so).
async fn schedule_load(
    w: Workload,
    url: String,
    brokers: Arc<tokio::sync::RwLock<Vec<Broker>>>,
    shared: Arc<Mutex<Shared>>,
) -> Result<(), Error> {
    let sql = if w.schedule_without_wake {
        Some(Arc::new(plain_sql_store(&url).await?))
    } else {
        None
    };
    let ticks = w.seconds * 100;
    let started = clock::monotonic_now();
    let mut owed = 0.0;
    let mut timers = TimerStream::new();
    // Calls run beside the ticks, a few at a time: awaited one by one, a call slower than its
    // 10 ms tick held the next back, and a 5 000/s load reached about 3 600/s (bench of baf8f2a).
    let in_flight = Arc::new(tokio::sync::Semaphore::new(SCHEDULE_CALLS_IN_FLIGHT));
    let mut calls = tokio::task::JoinSet::new();
    for tick in 0..ticks {
        if shared.lock().expect("not poisoned").stop {
            break;
        }
        let count = timers_at_tick(&w, tick, &mut owed);
        if count > 0 {
            let tenant = format!(
                "t{}",
                u64::from(w.stream_tenant_offset) + tick % u64::from(w.tenants.max(1))
            );
            let (txns, ops) = timers.next(&w, count);
            // A burst goes in calls of at most the API's default size (one call of 20 000 ran
            // past the statement timeout), each aimed at the same instant.
            let due_at = clock::monotonic_now() + Duration::from_millis(w.timer_delay_ms.0);
            let chunk = if w.burst_every_s.is_some() {
                BURST_CALL_OPS
            } else {
                ops.len().max(1)
            };
            for (part, (txns, ops)) in txns.chunks(chunk).zip(ops.chunks(chunk)).enumerate() {
                let permit = Arc::clone(&in_flight)
                    .acquire_owned()
                    .await
                    .expect("the semaphore is never closed");
                let call = ScheduleCall {
                    tick,
                    tenant: tenant.clone(),
                    txns: txns.to_vec(),
                    ops: ops.to_vec(),
                    aim: w.burst_every_s.map(|_| due_at),
                    key: w.keyed.map(|_| format!("call-{tick}-{part}")),
                };
                let (sql, brokers, shared) = (sql.clone(), brokers.clone(), shared.clone());
                calls.spawn(async move {
                    call.run(sql.as_deref(), &brokers, &shared).await;
                    drop(permit);
                });
            }
        }
        let next = started + Duration::from_millis(10 * (tick + 1));
        tokio::time::sleep(next.saturating_duration_since(clock::monotonic_now())).await;
    }
    while let Some(joined) = calls.join_next().await {
        joined.map_err(Error::LoadPanicked)?;
    }
    Ok(())
}

/// Schedule calls of the load in flight at once, at most.
const SCHEDULE_CALLS_IN_FLIGHT: usize = 8;

/// One schedule call of the load, and what it records.
struct ScheduleCall {
    tick: u64,
    tenant: String,
    txns: Vec<String>,
    ops: Vec<TimerOp>,
    /// A burst's instant: the ops are aimed at it once the call's transaction is open (through
    /// a broker process's API, when the call is sent), not when it is queued or started: a call
    /// aimed before it waited for a connection was due that much later, and the agreement's
    /// burst, 20 calls on an in-process broker's pool of 4, was due over 433-483 ms where the
    /// simulation's was due at once (reports/agreement at 44e8abf).
    aim: Option<std::time::Instant>,
    /// The call's `Idempotency-Key`: a failed call is retried with it until it is answered.
    key: Option<String>,
}

impl ScheduleCall {
    /// Makes the call (by SQL, or through the broker whose turn the tick is) and records its
    /// promises, or its failure.
    async fn run(
        self,
        sql: Option<&queen_sweeper::PgStore>,
        brokers: &tokio::sync::RwLock<Vec<Broker>>,
        shared: &Mutex<Shared>,
    ) {
        let sent = clock::monotonic_now();
        let mut tries = 0u32;
        let answer = loop {
            tries += 1;
            let answer = match sql {
                Some(store) => schedule_by_sql(store, &self.tenant, &self.ops, self.aim)
                    .await
                    .map(|promised| Scheduled {
                        promised,
                        replayed: false,
                    }),
                None => {
                    let killed = shared.lock().expect("not poisoned").first_broker_killed;
                    let (tenant, ops, key) = (&self.tenant, &self.ops, self.key.as_deref());
                    let call = (tenant.as_str(), ops.as_slice(), key, self.aim);
                    schedule_by_broker(brokers, killed, self.tick, call).await
                }
            };
            match answer {
                Err(_) if self.key.is_some() && sent.elapsed() < KEYED_RETRY_FOR => {
                    tokio::time::sleep(KEYED_RETRY_GAP).await;
                }
                answer => break answer,
            }
        };
        let took_us = sent.elapsed().as_micros() as u64;
        let mut s = shared.lock().expect("not poisoned");
        if self.key.is_some() {
            let keyed = &mut s.keyed;
            match &answer {
                Ok(answered) => {
                    keyed.answered += 1;
                    keyed.replayed += u64::from(answered.replayed);
                    if tries > 1 {
                        keyed.retried += 1;
                        keyed.longest_retry_ms =
                            keyed.longest_retry_ms.max(took_us as f64 / 1000.0);
                    }
                }
                Err(_) => {
                    keyed.retried += u64::from(tries > 1);
                    keyed.abandoned += 1;
                }
            }
        }
        match answer {
            Ok(Scheduled { promised, .. }) => {
                s.schedule_latency_us.saturating_record(took_us.max(1));
                for (txn, at) in self.txns.into_iter().zip(promised) {
                    if let Some(at) = at {
                        s.promised_txns.push(txn);
                        s.promised_at_us.push(at);
                    }
                }
            }
            Err(e) => {
                s.schedule_failures += 1;
                if s.first_schedule_error.is_none() {
                    let message = crate::error::chain(&e);
                    eprintln!(
                        "soak: a schedule of {} timers failed: {message}",
                        self.ops.len()
                    );
                    s.first_schedule_error = Some(message);
                }
            }
        }
    }
}

/// Operations per schedule call of a burst: the API's default `QUEEN_TIMERS_MAX_OPS_PER_CALL`.
const BURST_CALL_OPS: usize = 1_000;

/// A store of its own for scheduling without a seam: a connection per call in flight, a 5 s
/// statement timeout. With one connection a burst's calls queued for it after they were aimed,
/// and each was due as much later as it had waited: the rig's livelock bursts were due over 1.8 to
/// 2.0 s where the simulation's were due at once (reports/agreement at 7e9c580).
async fn plain_sql_store(url: &str) -> Result<queen_sweeper::PgStore, Error> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(SCHEDULE_CALLS_IN_FLIGHT as u32)
        .connect(url)
        .await
        .map_err(Error::db("cannot connect to schedule by plain SQL"))?;
    Ok(queen_sweeper::PgStore::from_pool(
        pool,
        Duration::from_secs(5),
    ))
}

/// How many timers the 10 ms tick `tick` schedules: a burst's worth on a burst's first tick,
/// else the steady rate's share, carrying the fraction in `owed`.
fn timers_at_tick(w: &Workload, tick: u64, owed: &mut f64) -> u64 {
    match w.burst_every_s {
        Some(every) if tick.is_multiple_of(every.max(1) * 100) => {
            u64::from(w.timers_per_s) * every.max(1)
        }
        Some(_) => 0,
        None => {
            *owed += f64::from(w.timers_per_s) / 100.0;
            let count = owed.floor() as u64;
            *owed -= count as f64;
            count
        }
    }
}

/// The schedule load's timers: numbered in sequence, spread over queues and partitions by
/// number, each delay drawn from a fixed-seed LCG (the same timers every run).
#[derive(Debug)]
struct TimerStream {
    sequence: u64,
    state: u64,
}

impl TimerStream {
    fn new() -> TimerStream {
        TimerStream {
            sequence: 0,
            state: 0x9e37_79b9_7f4a_7c15,
        }
    }

    /// The next `count` timers: their transaction ids and the ops that schedule them.
    fn next(&mut self, w: &Workload, count: u64) -> (Vec<String>, Vec<TimerOp>) {
        let mut txns = Vec::with_capacity(count as usize);
        let ops: Vec<TimerOp> = (0..count)
            .map(|_| {
                self.sequence += 1;
                let sequence = self.sequence;
                self.state = self
                    .state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                // A burst is due all at once; a stream spreads over the delay range.
                let span = if w.burst_every_s.is_some() {
                    1
                } else {
                    w.timer_delay_ms.1.saturating_sub(w.timer_delay_ms.0) + 1
                };
                let txn = format!("s{sequence}");
                txns.push(txn.clone());
                TimerOp::Schedule {
                    queue: format!("q{}", sequence % u64::from(w.queues.max(1))),
                    timer_key: txn.clone(),
                    delay_ms: (w.timer_delay_ms.0 + (self.state >> 33) % span) as i64,
                    payload: Payload::Bytes(payload_bytes(w, w.payload_bytes, sequence)),
                    partition: Some(format!("p{}", sequence % u64::from(w.partitions.max(1)))),
                    txn: Some(txn),
                }
            })
            .collect();
        (txns, ops)
    }
}

/// Schedules through the broker whose turn tick `tick` is, round robin over those alive (the
/// first is dead once the run has killed it).
async fn schedule_by_broker(
    brokers: &tokio::sync::RwLock<Vec<Broker>>,
    first_killed: bool,
    tick: u64,
    (tenant, ops, key, aim): (&str, &[TimerOp], Option<&str>, Option<std::time::Instant>),
) -> Result<Scheduled, Error> {
    let brokers = brokers.read().await;
    let skip = usize::from(first_killed && brokers.len() > 1);
    let live = (brokers.len() - skip).max(1);
    match brokers.get(skip + (tick as usize) % live) {
        Some(broker) => broker.schedule(tenant, ops, key, aim).await,
        None => Err(Error::Broker("no broker".into())),
    }
}

/// Applies `ops` (aimed at `aim` once the transaction is open) in a transaction of its own and
/// commits, with no seam: nothing is rung.
async fn schedule_by_sql(
    store: &queen_sweeper::PgStore,
    tenant: &str,
    ops: &[TimerOp],
    aim: Option<std::time::Instant>,
) -> Result<Vec<Option<i64>>, Error> {
    use queen_sweeper::TimerTx as _;
    let mut tx = store
        .begin_timer_tx()
        .await
        .map_err(Error::sweeper("cannot begin a schedule transaction"))?;
    let aimed = crate::brokers::aimed(ops, aim);
    let results = tx
        .apply(tenant, &aimed)
        .await
        .map_err(Error::sweeper("the schedule was refused"))?;
    tx.commit()
        .await
        .map_err(Error::sweeper("cannot commit the schedule"))?;
    Ok(results
        .iter()
        .map(|r| r.deliver_at.as_deref().and_then(crate::brokers::epoch_us))
        .collect())
}

/// A payload of `len` bytes: a repeated character, or (with `incompressible_payloads`)
/// xorshift bytes seeded by `seed`.
fn payload_bytes(w: &Workload, len: u32, seed: u64) -> Vec<u8> {
    if !w.incompressible_payloads {
        return vec![b'x'; len as usize];
    }
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// How long a push took, counted from the instant its schedule meant it to start, not from
/// when it was sent: a push held up behind a stalled one is a push that waited (without this, a
/// pusher blocked 300 ms by a fire records one slow push and skips the fifteen it could not
/// send, and the stall vanishes from the p99; "coordinated omission"). A push is never sent
/// before its instant, so this is never shorter than the call itself.
fn since_intended(intended: std::time::Instant, answered: std::time::Instant) -> Duration {
    answered.saturating_duration_since(intended)
}

/// The instant push `n` of a pusher started at `started` is meant to start.
fn intended_start(started: std::time::Instant, gap: Duration, n: u64) -> std::time::Instant {
    started + gap * u32::try_from(n).unwrap_or(u32::MAX)
}

/// One producer on its own connection, pushing batches at its rate, timing each push from the
/// instant its schedule meant it to start.
async fn push_load(
    url: String,
    w: Workload,
    index: u32,
    shared: Arc<Mutex<Shared>>,
) -> Result<(), Error> {
    let mut connection = sqlx::PgConnection::connect(&url)
        .await
        .map_err(Error::db(format!("pusher {index}")))?;
    let pushes = w.seconds * u64::from(w.pushes_per_s_each);
    let gap = Duration::from_micros(1_000_000 / u64::from(w.pushes_per_s_each.max(1)));
    let payloads: Vec<Vec<u8>> = (0..w.push_batch)
        .map(|i| {
            payload_bytes(
                &w,
                w.push_payload_bytes,
                u64::from(index) << 32 | u64::from(i),
            )
        })
        .collect();
    let started = clock::monotonic_now();
    for n in 0..pushes {
        if shared.lock().expect("not poisoned").stop {
            break;
        }
        let partition = format!(
            "p{}",
            (n + u64::from(index)) % u64::from(w.partitions.max(1))
        );
        let queue = format!("q{}", n % u64::from(w.queues.max(1)));
        let tenant = format!("t{}", n % u64::from(w.tenants.max(1)));
        let intended = intended_start(started, gap, n);
        sqlx::query("SELECT count(*) FROM queen.log_push_v1($1, $2, $3, $4, NULL, now())")
            .bind(&tenant)
            .bind(&queue)
            .bind(&partition)
            .bind(&payloads)
            .execute(&mut connection)
            .await
            .map_err(Error::db(format!("pusher {index}")))?;
        let micros = since_intended(intended, clock::monotonic_now()).as_micros() as u64;
        {
            let mut s = shared.lock().expect("not poisoned");
            s.pushes_total += 1;
            s.push_latency_us.saturating_record(micros.max(1));
            s.push_second.saturating_record(micros.max(1));
        }
        let next = started + gap * (n as u32 + 1);
        tokio::time::sleep(next.saturating_duration_since(clock::monotonic_now())).await;
    }
    Ok(())
}

/// KV writes with TTLs at `kv_per_s`, over `kv_keys` keys.
async fn kv_load(url: String, w: Workload, shared: Arc<Mutex<Shared>>) -> Result<(), Error> {
    let mut connection = sqlx::PgConnection::connect(&url)
        .await
        .map_err(Error::db("kv load"))?;
    let puts = w.seconds * u64::from(w.kv_per_s);
    let gap = Duration::from_micros(1_000_000 / u64::from(w.kv_per_s.max(1)));
    let started = clock::monotonic_now();
    let mut state: u64 = 7;
    for n in 0..puts {
        if shared.lock().expect("not poisoned").stop {
            break;
        }
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let ttl = w.kv_ttl_ms.0 + (state >> 33) % (w.kv_ttl_ms.1.saturating_sub(w.kv_ttl_ms.0) + 1);
        sqlx::query("SELECT queen.kv_put_v2('t0', 'soak', $1, '{\"v\": 1}', $2, now())")
            .bind(format!(
                "key-{}",
                (state >> 17) % u64::from(w.kv_keys.max(1))
            ))
            .bind(ttl as i64)
            .execute(&mut connection)
            .await
            .map_err(Error::db("kv load"))?;
        let next = started + gap * (n as u32 + 1);
        tokio::time::sleep(next.saturating_duration_since(clock::monotonic_now())).await;
    }
    Ok(())
}

#[cfg(test)]
mod push_timing_tests {
    use super::*;

    /// The pusher's loop, with every call taking `call` except the first, which takes `stall`:
    /// the latencies it records.
    fn latencies(gap: Duration, call: Duration, stall: Duration, pushes: u64) -> Vec<Duration> {
        let started = clock::monotonic_now();
        let mut now = started;
        (0..pushes)
            .map(|n| {
                let intended = intended_start(started, gap, n);
                now = now.max(intended);
                now += if n == 0 { stall } else { call };
                since_intended(intended, now)
            })
            .collect()
    }

    #[test]
    fn a_stall_shows_in_every_push_it_held_up_not_only_in_the_one_it_hit() {
        let slow = |ds: &[Duration]| {
            ds.iter()
                .filter(|d| **d >= Duration::from_millis(20))
                .count()
        };
        let held = latencies(
            Duration::from_millis(20),
            Duration::from_millis(1),
            Duration::from_millis(300),
            100,
        );
        assert_eq!(held[0], Duration::from_millis(300));
        // Pushes 1..14 were due while the first was stuck: each waited from its own instant.
        assert_eq!(held[1], Duration::from_millis(281));
        assert_eq!(held[14], Duration::from_millis(34));
        assert_eq!(held[15], Duration::from_millis(15));
        assert_eq!(slow(&held), 15);
        let calm = latencies(
            Duration::from_millis(20),
            Duration::from_millis(1),
            Duration::from_millis(1),
            100,
        );
        assert!(calm.iter().all(|d| *d == Duration::from_millis(1)));
    }
}
