//! The drain, the cycle and the sub-clocks over an in-memory fake of the `Store` port: no
//! database, no wall clock, no randomness. The fake records every call in order and answers from a
//! script; time-dependent tests run on tokio's paused clock, which the fake can move inside a
//! call to play a slow fire.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use queen_sweeper::clock::tokio_now;
use queen_sweeper::{
    Admission, ClaimRequest, Claimed, ClaimedTimer, ClassLabel, Config, Destination, DrainLimits,
    DrainReport, DrainStop, Drainer, Error, ExpireStep, FailCause, FailOutcome, FailRequest,
    FailRow, FairRound, FireCall, LaneSizes, Maintenance, Metrics, PERMANENT_BACKOFF_MAX,
    PRUNE_CALLS_PER_PASS, PassOutcome as Outcome, Probe, ProbeRequest, RECORD_RETRY_FIRST,
    RECORD_RETRY_MAX, ROLLUP_STEPS_PER_PASS, ROLLUP_TENANTS_PER_STEP, SHARD_COUNT,
    SHED_PRUNE_AFTER, SHED_ROLLUP_AFTER, SegmentOutcome, SegmentResult, ShardOrder, SkipLabel,
    Slot, Store, Sweeper, Switch, SwitchStates, TRANSIENT_BACKOFF, TakeRequest, Taken,
    TakenDestination, TimerRef, UsageStep, identity_shard,
};
use tokio_util::sync::CancellationToken;

/// The sleep floor when no test sets it: the shipped default (5 ms until the experiments at
/// d852934 moved it to 1 ms; these tests are about the floor, not its number).
const FLOOR: Duration = Duration::from_millis(queen_sweeper::knob::MIN_SLEEP_MS.default);
use uuid::Uuid;

// ---------------------------------------------------------------------------------------------
// The fake
// ---------------------------------------------------------------------------------------------

/// A scripted failure: the SQLSTATE the "database" answers with (`None`: no answer at all).
type Sqlstate = Option<&'static str>;

fn db_error(sqlstate: Sqlstate, context: &str) -> Error {
    Error::database(
        sqlstate.map(str::to_owned),
        "scripted failure".to_owned(),
        context.to_owned(),
    )
}

/// One recorded store call, with the arguments the tests look at.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    ReadSwitches,
    WriteSwitch {
        switch: Switch,
        enabled: bool,
    },
    Probe {
        shards: Vec<u8>,
        due_cap: u32,
        kv_cap: u32,
    },
    Claim {
        shards: Vec<u8>,
        lease: Duration,
        max_rows: u32,
        per_tenant: u32,
        /// Keys of the rows handed out.
        returned: Vec<String>,
    },
    Take {
        max_rows: u32,
        max_bytes: u64,
        /// The fairness round the take asked for.
        fair: Option<FairRound>,
        /// It asked to skip the partitions others hold.
        skip_held: bool,
        /// It asked for rows due at least this long ago.
        due_ms_ago: u64,
        /// It asked for rows due less than this long ago.
        due_within_ms: Option<u64>,
        /// Keys of the rows fired (none when the take failed).
        returned: Vec<String>,
        failed: bool,
    },
    Fire {
        call: FireCall,
        failed: bool,
    },
    Fail {
        rows: Vec<FailRow>,
        transient: bool,
        max_attempts: u32,
    },
    Dlq {
        rows: Vec<TimerRef>,
    },
    Expire {
        shards: Vec<u8>,
        max_rows: u32,
        /// `kv_expired_not_pruned` as the observed metrics showed it when this call began.
        alarm_before: Option<i64>,
    },
    Usage {
        after_tenant: Option<String>,
        max_tenants: u32,
    },
}

impl Call {
    fn kind(&self) -> &'static str {
        match self {
            Call::ReadSwitches => "switches",
            Call::WriteSwitch { .. } => "write_switch",
            Call::Probe { .. } => "probe",
            Call::Claim { .. } => "claim",
            Call::Take { .. } => "take",
            Call::Fire { .. } => "fire",
            Call::Fail { .. } => "fail",
            Call::Dlq { .. } => "dlq",
            Call::Expire { .. } => "prune",
            Call::Usage { .. } => "usage",
        }
    }
}

/// How a scripted fire spends time.
#[derive(Debug, Clone, Copy)]
enum Delay {
    /// `tokio::time::advance`: the clock jumps while the call is in progress.
    Advance(Duration),
    /// `tokio::time::sleep`: other futures (a canceller) run while the call is in progress.
    Sleep(Duration),
}

/// What the fake answers. Queues are consumed first; when empty the default answers.
#[derive(Debug)]
struct Script {
    switches: Result<SwitchStates, Sqlstate>,
    probes: VecDeque<Result<Probe, Sqlstate>>,
    probe_default: Probe,
    claims: VecDeque<Result<Vec<ClaimedTimer>, Sqlstate>>,
    /// Failures the next takes answer, before the pool.
    take_errors: VecDeque<Sqlstate>,
    /// A probe asked for the prune's alarm fails with this (the KV file is missing).
    kv_probe_error: Option<Sqlstate>,
    /// Rows handed out, up to `max_rows`, once `claims` is empty.
    pool: VecDeque<ClaimedTimer>,
    /// A segment holding any of these keys comes back stale.
    stale_keys: HashSet<String>,
    /// A fire call holding this key fails with this SQLSTATE.
    poison: Vec<(String, Sqlstate)>,
    fire_delay: Option<Delay>,
    /// A take sleeps this long per row it takes (after `fire_delay`), so a big take lasts
    /// longer than a small one.
    take_row_delay: Option<Duration>,
    /// `fail` reports these keys exhausted.
    exhausted_keys: HashSet<String>,
    /// `fail` answers with no SQLSTATE (the connection is gone) before this instant.
    fail_down_until: Option<tokio::time::Instant>,
    /// When each `fail` call was made.
    fail_times: Vec<tokio::time::Instant>,
    expire_steps: VecDeque<Result<ExpireStep, Sqlstate>>,
    expire_default: ExpireStep,
    usage_steps: VecDeque<Result<UsageStep, Sqlstate>>,
    usage_default: UsageStep,
    /// Metrics the fake reads at the start of calls (to see what was published before them).
    observe: Option<Metrics>,
    next_offset: u64,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            switches: Ok(SwitchStates {
                schedule_enabled: true,
                fire_enabled: true,
            }),
            probes: VecDeque::new(),
            probe_default: nothing_due(),
            claims: VecDeque::new(),
            take_errors: VecDeque::new(),
            kv_probe_error: None,
            pool: VecDeque::new(),
            stale_keys: HashSet::new(),
            poison: Vec::new(),
            fire_delay: None,
            take_row_delay: None,
            exhausted_keys: HashSet::new(),
            fail_down_until: None,
            fail_times: Vec::new(),
            expire_steps: VecDeque::new(),
            expire_default: ExpireStep {
                done: true,
                ..ExpireStep::default()
            },
            usage_steps: VecDeque::new(),
            usage_default: UsageStep {
                done: true,
                ..UsageStep::default()
            },
            observe: None,
            next_offset: 0,
        }
    }
}

#[derive(Debug, Default)]
struct FakeStore {
    script: Mutex<Script>,
    log: Mutex<Vec<Call>>,
}

impl FakeStore {
    fn new() -> FakeStore {
        FakeStore::default()
    }

    fn script(&self) -> MutexGuard<'_, Script> {
        self.script.lock().expect("script lock")
    }

    fn record(&self, call: Call) {
        self.log.lock().expect("log lock").push(call);
    }

    fn calls(&self) -> Vec<Call> {
        self.log.lock().expect("log lock").clone()
    }

    /// The calls so far, clearing the log.
    fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut *self.log.lock().expect("log lock"))
    }

    fn kinds(&self) -> Vec<&'static str> {
        kinds(&self.calls())
    }
}

fn kinds(calls: &[Call]) -> Vec<&'static str> {
    calls.iter().map(Call::kind).collect()
}

impl Store for FakeStore {
    /// Answers the scripted probe, carrying the script's switches as the database has them.
    async fn probe(
        &self,
        _slot: &Slot<Maintenance>,
        request: &ProbeRequest,
    ) -> Result<Probe, Error> {
        self.record(Call::Probe {
            shards: request.shards.as_slice().to_vec(),
            due_cap: request.due_cap,
            kv_cap: request.kv_cap,
        });
        let mut script = self.script();
        if let (Some(state), true) = (script.kv_probe_error, request.kv_cap > 0) {
            return Err(db_error(state, "probe"));
        }
        let answer = script
            .probes
            .pop_front()
            .unwrap_or(Ok(script.probe_default));
        let switches = script.switches;
        answer
            .and_then(|probe| {
                Ok(Probe {
                    switches: switches?,
                    ..probe
                })
            })
            .map_err(|state| db_error(state, "probe"))
    }

    async fn claim(
        &self,
        _slot: &Slot<Maintenance>,
        request: &ClaimRequest,
    ) -> Result<Claimed, Error> {
        let ClaimRequest {
            shards,
            lease,
            max_rows,
            per_tenant,
            ..
        } = request.clone();
        let answer = {
            let mut script = self.script();
            match script.claims.pop_front() {
                Some(answer) => answer,
                None => {
                    let n = script.pool.len().min(max_rows as usize);
                    Ok(script.pool.drain(..n).collect())
                }
            }
        };
        let returned = match &answer {
            Ok(rows) => rows.iter().map(|r| r.timer_key.clone()).collect(),
            Err(_) => Vec::new(),
        };
        self.record(Call::Claim {
            shards: shards.as_slice().to_vec(),
            lease,
            max_rows,
            per_tenant,
            returned,
        });
        answer
            .map(|rows| Claimed {
                rows,
                fair_after: None,
            })
            .map_err(|state| db_error(state, "claim"))
    }

    /// Takes from the pool like a claim, up to the row budget and the byte cap (a first row over
    /// the cap goes alone); a take holding a poison key fails whole and leaves the pool as it was.
    async fn take(&self, _slot: &Slot<Maintenance>, request: &TakeRequest) -> Result<Taken, Error> {
        let (answer, delay, row_delay) = {
            let mut script = self.script();
            let answer = match script.take_errors.pop_front() {
                Some(state) => Err(state),
                None => {
                    let mut rows = Vec::new();
                    let mut bytes = 0;
                    while rows.len() < request.max_rows as usize {
                        let Some(next) = script.pool.front() else {
                            break;
                        };
                        let size =
                            next.payload_bytes + next.timer_key.len() as u64 + request.row_overhead;
                        if !rows.is_empty() && bytes + size > request.max_bytes {
                            break;
                        }
                        bytes += size;
                        rows.push(script.pool.pop_front().expect("peeked"));
                    }
                    let poison = script.poison.iter().find_map(|(key, state)| {
                        rows.iter().any(|r| &r.timer_key == key).then_some(*state)
                    });
                    match poison {
                        Some(state) => {
                            for row in rows.into_iter().rev() {
                                script.pool.push_front(row);
                            }
                            Err(state)
                        }
                        None => Ok(rows),
                    }
                }
            };
            let per_row = script
                .take_row_delay
                .map(|d| d * answer.as_ref().map_or(0, |rows| rows.len() as u32));
            (answer, script.fire_delay, per_row)
        };
        let takes_before = self.calls().iter().filter(|c| c.kind() == "take").count();
        self.record(Call::Take {
            max_rows: request.max_rows,
            max_bytes: request.max_bytes,
            fair: request.fair.clone(),
            skip_held: request.skip_held_partitions,
            due_ms_ago: request.due_ms_ago,
            due_within_ms: request.due_within_ms,
            returned: answer
                .as_ref()
                .map(|rows| rows.iter().map(|r| r.timer_key.clone()).collect())
                .unwrap_or_default(),
            failed: answer.is_err(),
        });
        match delay {
            Some(Delay::Advance(d)) => tokio::time::advance(d).await,
            Some(Delay::Sleep(d)) => tokio::time::sleep(d).await,
            None => {}
        }
        if let Some(d) = row_delay {
            tokio::time::sleep(d).await;
        }
        let rows = answer.map_err(|state| db_error(state, "take"))?;
        let mut destinations: Vec<TakenDestination> = Vec::new();
        for row in rows {
            match destinations
                .iter_mut()
                .find(|d| d.destination == row.destination)
            {
                Some(d) => d.late_ms.push(row.late_ms),
                None => destinations.push(TakenDestination {
                    destination: row.destination.clone(),
                    first_offset: 0,
                    late_ms: vec![row.late_ms],
                }),
            }
        }
        Ok(Taken {
            destinations,
            // As the SQL: a round that ran names the tenant it ended at.
            fair_after: request
                .fair
                .as_ref()
                .map(|_| format!("tenant-{takes_before}")),
        })
    }

    async fn fire(
        &self,
        _slot: &Slot<Maintenance>,
        call: &FireCall,
    ) -> Result<Vec<SegmentOutcome>, Error> {
        let (answer, delay) = {
            let mut script = self.script();
            let holds = |key: &str| {
                call.segments
                    .iter()
                    .any(|s| s.timers.iter().any(|t| t.timer_key == key))
            };
            let poison = script
                .poison
                .iter()
                .find(|(key, _)| holds(key))
                .map(|(_, state)| *state);
            let answer = match poison {
                Some(state) => Err(state),
                None => {
                    let mut outcomes = Vec::new();
                    for (index, segment) in call.segments.iter().enumerate() {
                        let stale = segment
                            .timers
                            .iter()
                            .any(|t| script.stale_keys.contains(&t.timer_key));
                        let result = if stale {
                            SegmentResult::Stale
                        } else {
                            let first_offset = script.next_offset;
                            script.next_offset += segment.timers.len() as u64;
                            SegmentResult::Fired { first_offset }
                        };
                        outcomes.push(SegmentOutcome {
                            segment: index,
                            result,
                            timers: segment.timers.len() as u32,
                        });
                    }
                    // The contract allows any order; answer backwards so the drain has to map
                    // outcomes by index.
                    outcomes.reverse();
                    Ok(outcomes)
                }
            };
            (answer, script.fire_delay)
        };
        self.record(Call::Fire {
            call: call.clone(),
            failed: answer.is_err(),
        });
        match delay {
            Some(Delay::Advance(d)) => tokio::time::advance(d).await,
            Some(Delay::Sleep(d)) => tokio::time::sleep(d).await,
            None => {}
        }
        answer.map_err(|state| db_error(state, "fire"))
    }

    async fn fail(
        &self,
        _slot: &Slot<Maintenance>,
        request: &FailRequest,
    ) -> Result<Vec<FailOutcome>, Error> {
        let (rows, transient) = (&request.rows, request.cause == FailCause::Transient);
        self.record(Call::Fail {
            rows: rows.clone(),
            transient,
            max_attempts: request.max_attempts,
        });
        let mut script = self.script();
        let now = tokio_now();
        script.fail_times.push(now);
        if script.fail_down_until.is_some_and(|until| now < until) {
            return Err(db_error(None, "fail"));
        }
        Ok(rows
            .iter()
            .map(|row| FailOutcome {
                tenant: row.timer.tenant.clone(),
                queue: row.timer.queue.clone(),
                timer_key: row.timer.timer_key.clone(),
                attempts: u32::from(!transient),
                // As the SQL: a failure that spends no attempt cannot exhaust one.
                exhausted: !transient && script.exhausted_keys.contains(&row.timer.timer_key),
            })
            .collect())
    }

    async fn dlq(&self, _slot: &Slot<Maintenance>, rows: &[TimerRef]) -> Result<u64, Error> {
        self.record(Call::Dlq {
            rows: rows.to_vec(),
        });
        Ok(rows.len() as u64)
    }

    async fn kv_expire_step(
        &self,
        _slot: &Slot<Maintenance>,
        shards: &ShardOrder,
        max_rows: u32,
    ) -> Result<ExpireStep, Error> {
        let mut script = self.script();
        let alarm_before = script
            .observe
            .as_ref()
            .map(|m| m.kv_expired_not_pruned.get());
        self.record(Call::Expire {
            shards: shards.as_slice().to_vec(),
            max_rows,
            alarm_before,
        });
        let answer = script
            .expire_steps
            .pop_front()
            .unwrap_or(Ok(script.expire_default));
        answer.map_err(|state| db_error(state, "prune"))
    }

    async fn usage_step(
        &self,
        _slot: &Slot<Maintenance>,
        after_tenant: Option<&str>,
        max_tenants: u32,
    ) -> Result<UsageStep, Error> {
        self.record(Call::Usage {
            after_tenant: after_tenant.map(str::to_owned),
            max_tenants,
        });
        let mut script = self.script();
        let answer = script
            .usage_steps
            .pop_front()
            .unwrap_or_else(|| Ok(script.usage_default.clone()));
        answer.map_err(|state| db_error(state, "usage"))
    }

    async fn read_switches(&self, _slot: &Slot<Maintenance>) -> Result<SwitchStates, Error> {
        self.record(Call::ReadSwitches);
        self.script()
            .switches
            .map_err(|state| db_error(state, "switches"))
    }

    async fn write_switch(
        &self,
        _slot: &Slot<Maintenance>,
        switch: Switch,
        enabled: bool,
    ) -> Result<(), Error> {
        self.record(Call::WriteSwitch { switch, enabled });
        let mut script = self.script();
        if let Ok(states) = &mut script.switches {
            match switch {
                Switch::Schedule => states.schedule_enabled = enabled,
                Switch::Fire => states.fire_enabled = enabled,
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A test config on the leased path (claim, then fire by token), which most tests here exercise;
/// `QUEEN_SWEEPER_FIRE_TAKE` in `vars` overrides it.
fn config(vars: &[(&str, &str)]) -> Config {
    let mut all = vec![("QUEEN_SWEEPER_FIRE_TAKE", "0")];
    all.extend(vars.iter().copied());
    Config::from_vars(all).expect("a valid test config")
}

/// A test config on the shipped path: every batch taken in one transaction.
fn take_config(vars: &[(&str, &str)]) -> Config {
    let mut all = vars.to_vec();
    all.push(("QUEEN_SWEEPER_FIRE_TAKE", "1"));
    Config::from_vars(all).expect("a valid test config")
}

/// Both switches on (the fake's probe replaces them with the script's).
const SWITCHES_ON: SwitchStates = SwitchStates {
    schedule_enabled: true,
    fire_enabled: true,
};

/// Nothing due; the alarm not reported, so the prune runs on its gate alone.
fn nothing_due() -> Probe {
    Probe {
        next_in_ms: None,
        due: 0,
        due_capped: false,
        late_ms: 0,
        switches: SWITCHES_ON,
        kv_expired: None,
    }
}

fn due(n: u32) -> Probe {
    Probe {
        next_in_ms: Some(0),
        due: n,
        due_capped: false,
        late_ms: 0,
        switches: SWITCHES_ON,
        kv_expired: None,
    }
}

fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn timer(
    tenant: &str,
    queue: &str,
    partition: &str,
    key: &str,
    attempts: u32,
    payload_bytes: u64,
) -> ClaimedTimer {
    let id = format!("{tenant}/{queue}/{key}");
    ClaimedTimer {
        destination: Destination {
            tenant: tenant.into(),
            queue: queue.into(),
            partition: partition.into(),
        },
        timer_key: key.into(),
        token: Uuid::from_u128((u128::from(fnv(&id)) << 64) | u128::from(fnv(&id.repeat(2)))),
        attempts,
        late_ms: 7,
        payload_bytes,
    }
}

/// `n` small timers of one destination, keys `{prefix}{i}`.
fn batch(prefix: &str, n: usize) -> Vec<ClaimedTimer> {
    (0..n)
        .map(|i| timer("t", "q", "p", &format!("{prefix}{i}"), 0, 10))
        .collect()
}

fn claims_max_rows(calls: &[Call]) -> Vec<u32> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::Claim { max_rows, .. } => Some(*max_rows),
            _ => None,
        })
        .collect()
}

fn fires(calls: &[Call]) -> Vec<(FireCall, bool)> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::Fire { call, failed } => Some((call.clone(), *failed)),
            _ => None,
        })
        .collect()
}

fn fail_calls(calls: &[Call]) -> Vec<(Vec<FailRow>, bool, u32)> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::Fail {
                rows,
                transient,
                max_attempts,
            } => Some((rows.clone(), *transient, *max_attempts)),
            _ => None,
        })
        .collect()
}

fn keys_of(call: &FireCall) -> Vec<String> {
    call.segments
        .iter()
        .flat_map(|s| s.timers.iter().map(|t| t.timer_key.clone()))
        .collect()
}

fn segment_keys(call: &FireCall) -> Vec<Vec<&str>> {
    call.segments
        .iter()
        .map(|s| s.timers.iter().map(|t| t.timer_key.as_str()).collect())
        .collect()
}

/// No claim starts while rows of an earlier claim are neither fired nor failed.
fn assert_no_claim_while_rows_unfired(calls: &[Call]) {
    let mut outstanding: Vec<String> = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        match call {
            Call::Claim { returned, .. } => {
                assert!(
                    outstanding.is_empty(),
                    "call {i} claims while {outstanding:?} are unfired: {:?}",
                    kinds(calls)
                );
                outstanding = returned.clone();
            }
            Call::Fire {
                call,
                failed: false,
            } => {
                let keys = keys_of(call);
                outstanding.retain(|k| !keys.contains(k));
            }
            Call::Fail { rows, .. } => {
                outstanding.retain(|k| !rows.iter().any(|r| &r.timer.timer_key == k));
            }
            _ => {}
        }
    }
    assert!(
        outstanding.is_empty(),
        "the pass ended with {outstanding:?} unfired"
    );
}

fn failures(metrics: &Metrics, class: &'static str) -> u64 {
    metrics.failures.get_or_create(&ClassLabel { class }).get()
}

fn skipped(metrics: &Metrics, phase: &'static str, reason: &'static str) -> u64 {
    metrics
        .phase_skipped
        .get_or_create(&SkipLabel { phase, reason })
        .get()
}

/// One drain pass over `fake` with fresh lanes and metrics.
async fn drain_once(
    fake: &FakeStore,
    config: &Config,
    shutdown: &CancellationToken,
) -> (DrainReport, Metrics) {
    let admission = Admission::new(LaneSizes::default());
    let metrics = Metrics::new();
    let drainer = Drainer {
        store: fake,
        admission: &admission,
        metrics: &metrics,
        shutdown,
    };
    let report = drainer
        .drain(
            &ShardOrder::starting_at(0),
            &DrainLimits::from_config(config),
            &mut FairRound::default(),
        )
        .await;
    assert_eq!(
        admission.maintenance_available(),
        LaneSizes::default().maintenance,
        "every slot is returned after the pass"
    );
    (report, metrics)
}

fn sweeper(fake: FakeStore, vars: &[(&str, &str)]) -> Sweeper<FakeStore> {
    Sweeper::with_jitter(Arc::new(fake), config(vars), "id", Box::new(|| 0.5))
}

const LEASE_1S: [(&str, &str); 2] = [
    ("QUEEN_SWEEPER_LEASE_MS", "1000"),
    ("QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS", "500"),
];

// ---------------------------------------------------------------------------------------------
// Drain
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn drain_fires_each_claimed_batch_before_claiming_the_next() {
    let fake = FakeStore::new();
    fake.script().pool.extend(batch("k", 5));
    let config = config(&[("QUEEN_SWEEPER_CLAIM_BATCH", "2")]);

    let (report, metrics) = drain_once(&fake, &config, &CancellationToken::new()).await;

    assert_eq!(
        fake.kinds(),
        ["claim", "fire", "claim", "fire", "claim", "fire", "claim"]
    );
    assert_no_claim_while_rows_unfired(&fake.calls());
    // Each fire holds exactly the rows of the claim before it.
    let calls = fake.calls();
    for pair in calls.windows(2) {
        if let [Call::Claim { returned, .. }, Call::Fire { call, .. }] = pair {
            assert_eq!(&keys_of(call), returned);
        }
    }
    assert_eq!(claims_max_rows(&calls), [2, 2, 2, 2]);
    assert!(calls.iter().all(|c| match c {
        Call::Claim {
            per_tenant, lease, ..
        } => *per_tenant == 2 && *lease == config.lease(),
        _ => true,
    }));
    assert_eq!(report.stop, DrainStop::NothingToClaim);
    assert_eq!((report.claims, report.claimed, report.fired), (4, 5, 5));
    assert_eq!(report.fire_calls, 3);
    assert!(
        !report.first_claim_empty(),
        "rows were claimed in this pass"
    );
    assert_eq!(metrics.timers_result("fired"), 5);
    assert_eq!(metrics.segments_result("fired"), 3);
    assert_eq!(
        metrics.empty_claims.get(),
        0,
        "only a pass's first empty claim counts"
    );
    assert_eq!(metrics.queries_of("claim"), 4);
    assert_eq!(metrics.queries_of("fire"), 3);
}

#[tokio::test]
async fn an_empty_first_claim_stops_the_drain_and_is_reported_as_first_claim_empty() {
    let fake = FakeStore::new();

    let (report, metrics) = drain_once(&fake, &config(&[]), &CancellationToken::new()).await;

    assert_eq!(fake.kinds(), ["claim"]);
    assert_eq!(report.stop, DrainStop::NothingToClaim);
    assert_eq!(
        (report.claims, report.claimed, report.fire_calls),
        (1, 0, 0)
    );
    assert!(report.first_claim_empty());
    assert_eq!(metrics.empty_claims.get(), 1);
}

#[tokio::test]
async fn the_row_budget_stops_the_drain_and_no_claim_asks_past_the_remaining_budget() {
    // Partial claims: 3 + 3 + 3 of batches of 4, then the last row of a budget of 10.
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        for prefix in ["a", "b", "c"] {
            script.claims.push_back(Ok(batch(prefix, 3)));
        }
        script.pool.extend(batch("z", 100));
    }
    let config = config(&[
        ("QUEEN_SWEEPER_CYCLE_MAX_ROWS", "10"),
        ("QUEEN_SWEEPER_CLAIM_BATCH", "4"),
    ]);

    let (report, _) = drain_once(&fake, &config, &CancellationToken::new()).await;

    assert_eq!(claims_max_rows(&fake.calls()), [4, 4, 4, 1]);
    assert_eq!(report.stop, DrainStop::RowBudget);
    assert_eq!((report.claims, report.claimed, report.fired), (4, 10, 10));
    assert_eq!(
        fake.kinds().last(),
        Some(&"fire"),
        "the last claimed rows are fired before stopping"
    );
    assert_no_claim_while_rows_unfired(&fake.calls());

    // Full claims: the budget is reached exactly and no fifth claim is made.
    let fake = FakeStore::new();
    fake.script().pool.extend(batch("z", 100));
    let config = crate::config(&[
        ("QUEEN_SWEEPER_CYCLE_MAX_ROWS", "8"),
        ("QUEEN_SWEEPER_CLAIM_BATCH", "4"),
    ]);
    let (report, _) = drain_once(&fake, &config, &CancellationToken::new()).await;
    assert_eq!(claims_max_rows(&fake.calls()), [4, 4]);
    assert_eq!(report.stop, DrainStop::RowBudget);
    assert_eq!(fake.script().pool.len(), 92);
}

#[tokio::test(start_paused = true)]
async fn the_drain_stops_claiming_once_half_the_lease_is_spent() {
    // Lease 1000 ms, so the budget is 500 ms; each fire takes `fire_ms` of the paused clock.
    for (fire_ms, claims) in [(300, 2), (250, 2), (240, 3), (499, 2), (500, 1), (600, 1)] {
        let fake = FakeStore::new();
        {
            let mut script = fake.script();
            script.pool.extend(batch("k", 100));
            script.fire_delay = Some(Delay::Advance(Duration::from_millis(fire_ms)));
        }
        let mut vars = LEASE_1S.to_vec();
        vars.push(("QUEEN_SWEEPER_CLAIM_BATCH", "2"));
        let started = tokio_now();

        let (report, _) = drain_once(&fake, &config(&vars), &CancellationToken::new()).await;

        let spent = tokio_now() - started;
        assert_eq!(report.stop, DrainStop::LeaseBudget, "fire {fire_ms} ms");
        assert_eq!(report.claims, claims, "fire {fire_ms} ms");
        assert_eq!(report.fire_calls, claims, "fire {fire_ms} ms");
        assert_eq!(report.fired, u64::from(claims) * 2, "fire {fire_ms} ms");
        assert_eq!(
            spent,
            Duration::from_millis(fire_ms * u64::from(claims)),
            "fire {fire_ms} ms"
        );
        assert!(spent >= Duration::from_millis(500));
        assert!(
            spent - Duration::from_millis(fire_ms) < Duration::from_millis(500),
            "the last claim started before half the lease was spent (fire {fire_ms} ms)"
        );
        assert_eq!(fake.kinds().last(), Some(&"fire"));
        // Every claim asked for the configured lease.
        assert!(fake.calls().iter().all(|c| match c {
            Call::Claim { lease, .. } => *lease == Duration::from_millis(1000),
            _ => true,
        }));
    }
}

#[tokio::test]
async fn a_batch_over_max_fire_bytes_is_split_into_fire_calls_under_the_cap() {
    // payload + 2 key + ROW_OVERHEAD_BYTES = 502 bytes a timer: at most two fit 1024 bytes.
    let rows: Vec<ClaimedTimer> = (0..7)
        .map(|i| {
            timer(
                "t",
                "q",
                &format!("p{}", i % 2),
                &format!("k{i}"),
                0,
                502 - 2 - queen_sweeper::ROW_OVERHEAD_BYTES,
            )
        })
        .collect();
    assert!(rows.iter().all(|r| queen_sweeper::fire_bytes(r) == 502));
    let fake = FakeStore::new();
    fake.script().pool.extend(rows.clone());
    let config = config(&[
        ("QUEEN_SWEEPER_MAX_FIRE_BYTES", "1024"),
        ("QUEEN_SWEEPER_CLAIM_BATCH", "8"),
    ]);

    let (report, _) = drain_once(&fake, &config, &CancellationToken::new()).await;

    let calls = fake.calls();
    let fired = fires(&calls);
    assert!(
        fired.len() >= 4,
        "7 timers of which 2 fit a call need 4 calls, got {}",
        fired.len()
    );
    assert_eq!(report.fire_calls as usize, fired.len());
    let mut seen = Vec::new();
    for (call, failed) in &fired {
        assert!(!failed);
        assert!(
            call.bytes() <= 1024,
            "a fire call of {} bytes",
            call.bytes()
        );
        let destinations: HashSet<&Destination> =
            call.segments.iter().map(|s| &s.destination).collect();
        assert_eq!(destinations.len(), call.segments.len());
        for segment in &call.segments {
            assert_eq!(segment.bytes, 502 * segment.timers.len() as u64);
        }
        seen.extend(keys_of(call));
    }
    seen.sort();
    let mut expected: Vec<String> = rows.iter().map(|r| r.timer_key.clone()).collect();
    expected.sort();
    assert_eq!(seen, expected, "every claimed timer is fired exactly once");
    let mut expected_kinds = vec!["claim"];
    expected_kinds.extend(std::iter::repeat_n("fire", fired.len()));
    expected_kinds.push("claim");
    assert_eq!(fake.kinds(), expected_kinds);
    assert_eq!(report.fired, 7);
}

#[tokio::test]
async fn stale_segments_are_counted_in_the_report_and_in_metrics() {
    let rows = vec![
        timer("t", "q", "a", "a1", 0, 10),
        timer("t", "q", "b", "b1", 0, 10),
        timer("t", "q", "c", "c1", 0, 10),
        timer("t", "q", "a", "a2", 0, 10),
        timer("t", "q", "b", "b2", 0, 10),
        timer("t", "q", "b", "b3", 0, 10),
    ];
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.pool.extend(rows);
        script.stale_keys.insert("b2".into());
    }

    let (report, metrics) = drain_once(&fake, &config(&[]), &CancellationToken::new()).await;

    assert_eq!(report.fire_calls, 1);
    assert_eq!(report.stale_segments, 1);
    assert_eq!(report.stale_timers, 3);
    assert_eq!(report.fired, 3);
    assert_eq!(metrics.segments_result("stale"), 1);
    assert_eq!(metrics.segments_result("fired"), 2);
    assert_eq!(metrics.timers_result("stale"), 3);
    assert_eq!(metrics.timers_result("fired"), 3);
    assert_eq!(
        fail_calls(&fake.calls()).len(),
        0,
        "a stale segment is not a failure"
    );
}

// ---------------------------------------------------------------------------------------------
// Failures
// ---------------------------------------------------------------------------------------------

/// Three destinations, claim order interleaved: a1 b1 c1 a2 b2.
fn three_destinations() -> Vec<ClaimedTimer> {
    vec![
        timer("acme", "orders", "a", "a1", 0, 10),
        timer("acme", "orders", "b", "b1", 2, 10),
        timer("acme", "orders", "c", "c1", 1, 10),
        timer("acme", "orders", "a", "a2", 3, 10),
        timer("acme", "orders", "b", "b2", 0, 10),
    ]
}

#[tokio::test]
async fn a_transient_fire_error_fails_every_row_of_the_call_as_transient_without_replay() {
    for (state, label) in [
        (Some("40001"), "40001"),
        (Some("57014"), "57014"),
        (None, "no sqlstate"),
    ] {
        let rows = three_destinations();
        let fake = FakeStore::new();
        {
            let mut script = fake.script();
            script.pool.extend(rows.clone());
            script.poison.push(("b1".into(), state));
        }

        let (report, metrics) = drain_once(&fake, &config(&[]), &CancellationToken::new()).await;

        let calls = fake.calls();
        assert_eq!(
            kinds(&calls),
            ["claim", "fire", "fail", "claim"],
            "{label}: no replay"
        );
        assert_eq!(fires(&calls)[0].0.segments.len(), 3);
        let fails = fail_calls(&calls);
        let (failed_rows, transient, max_attempts) = &fails[0];
        assert!(transient, "{label}");
        assert_eq!(*max_attempts, 5);
        let mut failed: Vec<&str> = failed_rows
            .iter()
            .map(|r| r.timer.timer_key.as_str())
            .collect();
        failed.sort_unstable();
        assert_eq!(failed, ["a1", "a2", "b1", "b2", "c1"], "{label}");
        for row in failed_rows {
            let claimed = rows
                .iter()
                .find(|r| r.timer_key == row.timer.timer_key)
                .unwrap();
            assert_eq!(row.timer, claimed.timer_ref());
            assert_eq!(
                row.backoff,
                queen_sweeper::backoff(claimed.attempts, FailCause::Transient)
            );
            assert_eq!(row.backoff, TRANSIENT_BACKOFF);
        }
        assert_eq!(report.transient_failures, 1, "{label}");
        assert_eq!(report.failed_timers, 5);
        assert_eq!(report.fired, 0);
        assert_eq!(report.dead_lettered, 0);
        assert_eq!(failures(&metrics, "transient"), 1);
        assert_eq!(failures(&metrics, "permanent"), 0);
    }
}

/// A fire that fails on a lost connection, and a database that stays away for `down`: every
/// `fail` call before then fails too. Answers the fail calls, their times, and when the database
/// came back.
async fn fire_and_record_while_down(
    down: Duration,
) -> (
    Vec<(Vec<FailRow>, bool, u32)>,
    Vec<tokio::time::Instant>,
    tokio::time::Instant,
) {
    let fake = FakeStore::new();
    let back = tokio_now() + down;
    {
        let mut script = fake.script();
        script.pool.extend(three_destinations());
        script.poison.push(("b1".into(), None));
        script.fail_down_until = Some(back);
    }
    drain_once(&fake, &config(&[]), &CancellationToken::new()).await;
    let times = fake.script().fail_times.clone();
    (fail_calls(&fake.calls()), times, back)
}

#[tokio::test(start_paused = true)]
async fn when_recording_a_failure_fails_the_broker_retries_and_releases_its_rows_once_the_database_answers()
 {
    let (fails, times, back) = fire_and_record_while_down(Duration::from_secs(3)).await;

    assert!(
        fails.len() > 2,
        "the record is retried: {} calls",
        fails.len()
    );
    let last = *times.last().unwrap();
    assert!(
        last >= back,
        "the last record is the first after the database came back"
    );
    assert!(
        last - back <= RECORD_RETRY_MAX,
        "the rows are released {:?} after the database answers, within one retry wait {RECORD_RETRY_MAX:?}",
        last - back
    );
    assert!(times.windows(2).all(|w| w[1] - w[0] <= RECORD_RETRY_MAX));
    assert_eq!(times[1] - times[0], RECORD_RETRY_FIRST);
    let (first_rows, _, _) = &fails[0];
    let (released, transient, _) = fails.last().unwrap();
    assert!(transient);
    assert_eq!(
        released.iter().map(|r| &r.timer).collect::<Vec<_>>(),
        first_rows.iter().map(|r| &r.timer).collect::<Vec<_>>(),
        "the same rows, with the same tokens"
    );
    assert!(first_rows.iter().all(|r| r.backoff == TRANSIENT_BACKOFF));
    assert!(
        released.iter().all(|r| r.backoff == Duration::ZERO),
        "a retried record makes the rows due at once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_record_that_keeps_failing_is_given_up_within_half_the_lease() {
    let started = tokio_now();
    let (fails, times, _) = fire_and_record_while_down(Duration::from_secs(3_600)).await;

    let lease = DrainLimits::from_config(&config(&[])).lease;
    let last = *times.last().unwrap();
    assert!(
        last - started <= lease / 2,
        "gave up after {:?}",
        last - started
    );
    assert!(last - started >= lease / 2 - RECORD_RETRY_MAX);
    assert!(fails.len() < 60, "{} calls", fails.len());
}

#[tokio::test]
async fn a_permanent_fire_error_narrows_to_the_one_poison_timer_and_the_others_fire() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.pool.extend(three_destinations());
        script.poison.push(("b1".into(), Some("22023")));
    }

    let (report, metrics) = drain_once(&fake, &config(&[]), &CancellationToken::new()).await;

    let calls = fake.calls();
    assert_eq!(
        kinds(&calls),
        [
            "claim", "fire", "fire", "fire", "fire", "fail", "fire", "fire", "claim"
        ]
    );
    let fired = fires(&calls);
    let shapes: Vec<(Vec<Vec<&str>>, bool)> = fired
        .iter()
        .map(|(call, failed)| (segment_keys(call), *failed))
        .collect();
    assert_eq!(
        shapes,
        [
            (vec![vec!["a1", "a2"], vec!["b1", "b2"], vec!["c1"]], true),
            (vec![vec!["a1", "a2"]], false),
            (vec![vec!["b1", "b2"]], true),
            (vec![vec!["b1"]], true),
            (vec![vec!["b2"]], false),
            (vec![vec!["c1"]], false),
        ],
        "the packed call, then one destination per call, then the poison destination's timers one by one"
    );

    let fails = fail_calls(&calls);
    assert_eq!(fails.len(), 1);
    let (rows, transient, _) = &fails[0];
    assert!(!transient, "the poison timer spends an attempt");
    let failed: Vec<(&str, Duration)> = rows
        .iter()
        .map(|r| (r.timer.timer_key.as_str(), r.backoff))
        .collect();
    assert_eq!(
        failed,
        [("b1", queen_sweeper::backoff(2, FailCause::Counted))],
        "only the poison timer fails; b2, its neighbour, fires"
    );
    assert_eq!(report.fired, 4);
    assert_eq!(report.failed_timers, 1);
    assert_eq!(report.transient_failures, 0);
    assert_eq!(report.fire_calls, 6);
    assert_eq!(
        failures(&metrics, "permanent"),
        3,
        "the packed call, the destination, the timer"
    );
    assert_no_claim_while_rows_unfired(&calls);
}

#[tokio::test]
async fn a_class_42_fire_error_spends_no_attempt_dead_letters_nothing_and_ends_the_pass_at_the_ceiling()
 {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.pool.extend(three_destinations());
        script.pool.extend(batch("later", 3));
        script.poison.push(("b1".into(), Some("42883")));
        script.exhausted_keys.insert("b1".into());
    }

    let (report, metrics) = drain_once(&fake, &config(&[]), &CancellationToken::new()).await;

    let calls = fake.calls();
    assert_eq!(
        kinds(&calls),
        ["claim", "fire", "fail"],
        "no split, no DLQ, and no further claim in this pass"
    );
    let fails = fail_calls(&calls);
    let (rows, transient, _) = &fails[0];
    assert!(transient, "a configuration error spends no attempt");
    assert_eq!(rows.len(), 8, "every timer of the call goes back");
    assert!(rows.iter().all(|r| r.backoff == TRANSIENT_BACKOFF));
    assert_eq!(report.config_failures, 1);
    assert_eq!(report.dead_lettered, 0);
    assert_eq!(
        report.stop,
        DrainStop::CallFailed(queen_sweeper::Class::Config)
    );
    assert_eq!(metrics.fire_config_failures.get(), 1);
    assert_eq!(failures(&metrics, "config"), 1);
}

#[tokio::test]
async fn an_exhausted_row_goes_to_the_dlq_with_exactly_its_timer_ref() {
    let x1 = timer("acme", "billing", "p7", "x1", 4, 10);
    let x2 = timer("acme", "billing", "p7", "x2", 0, 10);
    let y1 = timer("other", "mail", "p1", "y1", 0, 10);
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.pool.extend([x1.clone(), y1, x2]);
        script.poison.push(("x1".into(), Some("22023")));
        script.exhausted_keys.insert("x1".into());
    }

    let (report, metrics) = drain_once(&fake, &config(&[]), &CancellationToken::new()).await;

    let calls = fake.calls();
    assert_eq!(
        kinds(&calls),
        [
            "claim", "fire", "fire", "fire", "fail", "dlq", "fire", "fire", "claim"
        ]
    );
    let dlq: Vec<&Vec<TimerRef>> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Dlq { rows } => Some(rows),
            _ => None,
        })
        .collect();
    assert_eq!(
        dlq,
        [&vec![TimerRef {
            tenant: "acme".into(),
            queue: "billing".into(),
            timer_key: "x1".into(),
            token: x1.token,
        }]]
    );
    assert_eq!(dlq[0][0], x1.timer_ref());
    assert_eq!(report.dead_lettered, 1);
    assert_eq!(metrics.dlq.get(), 1);
    assert_eq!(metrics.queries_of("dlq"), 1);
    assert_eq!(report.fired, 2, "x2 and y1 fired");
    assert_eq!(report.failed_timers, 1, "x1 failed alone");
}

#[tokio::test]
async fn the_backoff_passed_to_fail_follows_the_backoff_function() {
    let attempts = [0, 1, 4, 9, 30];
    let rows: Vec<ClaimedTimer> = attempts
        .iter()
        .map(|&a| timer("t", "q", "p", &format!("k{a}"), a, 10))
        .collect();
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.pool.extend(rows);
        for a in attempts {
            script.poison.push((format!("k{a}"), Some("P0001")));
        }
    }

    drain_once(&fake, &config(&[]), &CancellationToken::new()).await;

    let fails = fail_calls(&fake.calls());
    assert_eq!(fails.len(), attempts.len(), "each poison timer fails alone");
    let backoffs: Vec<Duration> = fails
        .iter()
        .map(|(rows, _, _)| {
            assert_eq!(rows.len(), 1);
            rows[0].backoff
        })
        .collect();
    let expected: Vec<Duration> = attempts
        .iter()
        .map(|&a| queen_sweeper::backoff(a, FailCause::Counted))
        .collect();
    assert_eq!(backoffs, expected);
    assert_eq!(
        backoffs,
        [
            Duration::from_secs(1),
            Duration::from_secs(2),
            Duration::from_secs(16),
            PERMANENT_BACKOFF_MAX,
            PERMANENT_BACKOFF_MAX
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// Shutdown
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_shutdown_before_the_pass_stops_it_without_a_claim() {
    let fake = FakeStore::new();
    fake.script().pool.extend(batch("k", 5));
    let shutdown = CancellationToken::new();
    shutdown.cancel();

    let (report, _) = drain_once(&fake, &config(&[]), &shutdown).await;

    assert_eq!(report.stop, DrainStop::Shutdown);
    assert_eq!(report.claims, 0);
    assert!(fake.calls().is_empty(), "{:?}", fake.kinds());
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_during_a_slow_fire_lets_the_fire_finish_then_stops_without_a_new_claim() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.pool.extend(batch("k", 6));
        script.fire_delay = Some(Delay::Sleep(Duration::from_millis(300)));
    }
    let config = config(&[("QUEEN_SWEEPER_CLAIM_BATCH", "2")]);
    let shutdown = CancellationToken::new();
    let started = tokio_now();

    let ((report, metrics), calls_at_cancel) =
        tokio::join!(drain_once(&fake, &config, &shutdown), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            shutdown.cancel();
            fake.kinds()
        });

    assert_eq!(
        calls_at_cancel,
        ["claim", "fire"],
        "cancelled while the fire was in flight"
    );
    assert_eq!(fake.kinds(), ["claim", "fire"]);
    assert_eq!(report.stop, DrainStop::Shutdown);
    assert_eq!((report.claims, report.fired), (1, 2));
    assert_eq!(metrics.timers_result("fired"), 2);
    assert_eq!(
        tokio_now() - started,
        Duration::from_millis(300),
        "the fire ran to its end"
    );
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_mid_batch_still_fires_every_claimed_row() {
    // Four 502-byte timers under a 1024-byte cap: one claim, two fire calls.
    let rows: Vec<ClaimedTimer> = (0..4)
        .map(|i| {
            timer(
                "t",
                "q",
                "p",
                &format!("k{i}"),
                0,
                502 - 2 - queen_sweeper::ROW_OVERHEAD_BYTES,
            )
        })
        .collect();
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.pool.extend(rows);
        script.pool.extend(batch("later", 4));
        script.fire_delay = Some(Delay::Sleep(Duration::from_millis(300)));
    }
    let config = config(&[
        ("QUEEN_SWEEPER_CLAIM_BATCH", "4"),
        ("QUEEN_SWEEPER_MAX_FIRE_BYTES", "1024"),
    ]);
    let shutdown = CancellationToken::new();

    let ((report, _), ()) = tokio::join!(drain_once(&fake, &config, &shutdown), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        shutdown.cancel();
    });

    assert_eq!(fake.kinds(), ["claim", "fire", "fire"]);
    assert_eq!(report.stop, DrainStop::Shutdown);
    assert_eq!(report.fired, 4, "claimed rows are fired, not abandoned");
    assert_eq!(fake.script().pool.len(), 4, "nothing more was claimed");
}

// ---------------------------------------------------------------------------------------------
// Cycle
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn with_the_fire_switch_off_the_pass_probes_and_prunes_but_never_claims() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.switches = Ok(SwitchStates {
            schedule_enabled: true,
            fire_enabled: false,
        });
        for n in [42, 43, 44] {
            script.probes.push_back(Ok(Probe {
                late_ms: 1234,
                ..due(n)
            }));
        }
        script.pool.extend(batch("k", 10));
    }
    let mut sweeper = sweeper(fake, &[]);

    for (pass, backlog) in [42, 43, 44].into_iter().enumerate() {
        let report = sweeper.pass().await;
        assert!(!sweeper.switches().fire_enabled());
        assert_eq!(report.drain, None, "pass {pass}");
        assert_eq!(sweeper.metrics().due_backlog.get(), backlog);
        assert_eq!(sweeper.metrics().oldest_lateness_ms.get(), 1234);
        assert_eq!(report.outcome, Outcome::NothingDue);
        assert_eq!(report.sleep, Duration::from_millis(1000));
        tokio::time::advance(Duration::from_millis(1100)).await;
    }

    let kinds = sweeper.store().kinds();
    assert_eq!(
        kinds,
        ["probe", "prune", "probe", "prune", "probe", "prune"],
        "the probe and the prune keep their cadence; nothing is claimed"
    );
    assert_eq!(sweeper.store().script().pool.len(), 10);
    assert_eq!(skipped(sweeper.metrics(), "fire", "switched_off"), 3);
}

#[tokio::test]
async fn setting_the_fire_switch_off_writes_the_database_and_the_next_pass_claims_nothing() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probe_default = due(3);
        script.pool.extend(batch("k", 3));
    }
    let mut sweeper = sweeper(fake, &[]);
    let store = Arc::clone(sweeper.store());

    sweeper
        .switches()
        .set(&*store, sweeper.admission(), Switch::Fire, false)
        .await
        .expect("the fake accepts the write");
    let report = sweeper.pass().await;

    assert!(!sweeper.switches().fire_enabled());
    assert!(sweeper.switches().schedule_enabled());
    assert_eq!(report.drain, None);
    assert_eq!(
        store.kinds(),
        ["write_switch", "probe", "prune"],
        "the probe reads back what was written; nothing is claimed"
    );
    assert_eq!(
        store.calls()[0],
        Call::WriteSwitch {
            switch: Switch::Fire,
            enabled: false
        }
    );
    assert_eq!(sweeper.metrics().due_backlog.get(), 3);
}

#[tokio::test]
async fn nothing_due_sleeps_the_ceiling_without_claiming() {
    let mut sweeper = sweeper(FakeStore::new(), &[]);

    let report = sweeper.pass().await;

    assert_eq!(report.outcome, Outcome::NothingDue);
    assert_eq!(report.sleep, Duration::from_millis(1000));
    assert_eq!(report.drain, None);
    assert!(!sweeper.store().kinds().contains(&"claim"));
}

#[tokio::test]
async fn due_later_sleeps_until_it_is_due() {
    let fake = FakeStore::new();
    fake.script().probe_default = Probe {
        next_in_ms: Some(300),
        ..nothing_due()
    };
    let mut sweeper = sweeper(fake, &[]);

    let report = sweeper.pass().await;

    assert_eq!(report.outcome, Outcome::DueLater { next_in_ms: 300 });
    assert_eq!(report.sleep, Duration::from_millis(300));
    assert!(!sweeper.store().kinds().contains(&"claim"));
}

#[tokio::test]
async fn a_first_empty_claim_sleeps_the_jittered_band_not_the_floor() {
    let fake = FakeStore::new();
    fake.script().probe_default = due(5);
    let mut sweeper = sweeper(
        fake,
        &[
            ("QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS", "25"),
            ("QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS", "200"),
        ],
    );

    let report = sweeper.pass().await;

    let drain = report.drain.expect("the probe said work was due");
    assert!(drain.first_claim_empty());
    assert_eq!(report.outcome, Outcome::FirstClaimEmpty);
    // 25 + 0.5 × (200 − 25), rounded.
    assert_eq!(report.sleep, Duration::from_millis(113));
    assert_eq!(sweeper.metrics().empty_claims.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_drain_stopped_on_a_budget_sleeps_the_floor() {
    // The row budget.
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probe_default = due(10);
        script.pool.extend(batch("k", 10));
    }
    let mut sweeper = crate::sweeper(
        fake,
        &[
            ("QUEEN_SWEEPER_CYCLE_MAX_ROWS", "4"),
            ("QUEEN_SWEEPER_CLAIM_BATCH", "2"),
        ],
    );
    let report = sweeper.pass().await;
    assert_eq!(report.drain.map(|d| d.stop), Some(DrainStop::RowBudget));
    assert_eq!(report.outcome, Outcome::WorkAvailable);
    assert_eq!(report.sleep, FLOOR);

    // The lease budget: fires of 300 ms against a 1000 ms lease.
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probe_default = due(100);
        script.pool.extend(batch("k", 100));
        script.fire_delay = Some(Delay::Advance(Duration::from_millis(300)));
    }
    let mut vars = LEASE_1S.to_vec();
    vars.push(("QUEEN_SWEEPER_CLAIM_BATCH", "2"));
    let mut sweeper = crate::sweeper(fake, &vars);
    let report = sweeper.pass().await;
    let drain = report.drain.unwrap();
    assert_eq!(drain.stop, DrainStop::LeaseBudget);
    assert_eq!(drain.claims, 2);
    // Its 300 ms fires are past a fifth of the 500 ms statement timeout: the fire is under
    // pressure, and the sleep after work is the floor doubled once.
    assert_eq!(
        report.outcome,
        Outcome::DueLater {
            next_in_ms: (FLOOR * 2).as_millis() as u64
        }
    );
    assert_eq!(report.sleep, FLOOR * 2);
}

#[tokio::test(start_paused = true)]
async fn the_starting_shard_rotates_by_one_each_pass_and_every_call_carries_all_64_shards() {
    let fake = FakeStore::new();
    fake.script().probe_default = due(3);
    let mut sweeper = sweeper(fake, &[("QUEEN_KV_EXPIRE_EVERY_MS", "1")]);
    let first = identity_shard("id");
    assert_eq!(sweeper.identity_shard(), first);
    let all: Vec<u8> = (0..SHARD_COUNT).collect();

    for pass in 0..70u32 {
        sweeper
            .store()
            .script()
            .pool
            .extend(batch(&format!("p{pass}-"), 3));
        let report = sweeper.pass().await;
        let expected = ((u32::from(first) + pass) % u32::from(SHARD_COUNT)) as u8;
        assert_eq!(report.start_shard, expected, "pass {pass}");
        let calls = sweeper.store().take_calls();
        let mut carried = 0;
        assert!(calls.contains(&Call::Probe {
            shards: ShardOrder::starting_at(expected).as_slice().to_vec(),
            due_cap: 2000,
            kv_cap: queen_sweeper::KV_ALARM_CAP,
        }));
        for call in &calls {
            let shards = match call {
                Call::Probe { shards, .. }
                | Call::Claim { shards, .. }
                | Call::Expire { shards, .. } => shards,
                _ => continue,
            };
            carried += 1;
            assert_eq!(shards.first(), Some(&expected), "pass {pass}: {call:?}");
            assert_eq!(shards.len(), usize::from(SHARD_COUNT));
            let mut sorted = shards.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, all, "pass {pass}: every shard exactly once");
        }
        // probe, claim (3 rows), claim (empty), prune.
        assert_eq!(carried, 4, "pass {pass}: {:?}", kinds(&calls));
        tokio::time::advance(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn a_probe_error_sleeps_the_ceiling_and_claims_nothing() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probes.push_back(Err(None));
        script.pool.extend(batch("k", 3));
    }
    let mut sweeper = sweeper(fake, &[]);

    let report = sweeper.pass().await;

    assert_eq!(report.probe, None);
    assert_eq!(report.drain, None);
    assert_eq!(report.outcome, Outcome::NothingDue);
    assert_eq!(report.sleep, Duration::from_millis(1000));
    assert!(!sweeper.store().kinds().contains(&"claim"));
    assert_eq!(failures(sweeper.metrics(), "transient"), 1);
}

#[tokio::test]
async fn a_failed_claim_sleeps_the_ceiling() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probe_default = due(3);
        script.claims.push_back(Err(Some("53300")));
    }
    let mut sweeper = sweeper(fake, &[]);

    let report = sweeper.pass().await;

    assert_eq!(
        report.drain.map(|d| d.stop),
        Some(DrainStop::CallFailed(queen_sweeper::Class::Transient))
    );
    assert_eq!(report.outcome, Outcome::NothingDue);
    assert_eq!(report.sleep, Duration::from_millis(1000));
    assert!(!sweeper.store().kinds().contains(&"fire"));
}

#[tokio::test]
async fn a_transient_fire_failure_halves_the_next_claim_batch_and_a_clean_pass_restores_it() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probe_default = due(3);
        script.pool.extend(batch("k", 3));
        script.poison.push(("k0".into(), Some("40001")));
    }
    let mut sweeper = sweeper(fake, &[("QUEEN_SWEEPER_CLAIM_BATCH", "8")]);

    let first = sweeper.pass().await;
    assert_eq!(first.drain.unwrap().transient_failures, 1);
    sweeper.store().script().poison.clear();
    sweeper.store().script().pool.extend(batch("m", 3));
    sweeper.pass().await;
    sweeper.store().script().pool.extend(batch("n", 3));
    sweeper.pass().await;

    assert_eq!(
        claims_max_rows(&sweeper.store().calls()),
        [8, 8, 4, 4, 8, 8],
        "two claims a pass: the batch halves after the transient failure and grows back"
    );
}

// ---------------------------------------------------------------------------------------------
// The take (the fire, version 2) and pressure
// ---------------------------------------------------------------------------------------------

fn take_sweeper(fake: FakeStore, vars: &[(&str, &str)]) -> Sweeper<FakeStore> {
    Sweeper::with_jitter(Arc::new(fake), take_config(vars), "id", Box::new(|| 0.5))
}

fn takes(calls: &[Call]) -> Vec<(u32, usize, bool)> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::Take {
                max_rows,
                returned,
                failed,
                ..
            } => Some((*max_rows, returned.len(), *failed)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn the_shipped_drain_takes_each_batch_in_one_call_with_no_claim_and_no_fire() {
    let fake = FakeStore::new();
    fake.script().pool.extend(batch("k", 250));
    // The pass's own lane alone (the bulk lane is tested on its own).
    let config = take_config(&[
        ("QUEEN_SWEEPER_CLAIM_BATCH", "100"),
        ("QUEEN_SWEEPER_MAX_FIRE_BYTES", "65536"),
        ("QUEEN_SWEEPER_BULK_BATCH", "0"),
    ]);

    let (report, metrics) = drain_once(&fake, &config, &CancellationToken::new()).await;

    let calls = fake.calls();
    assert_eq!(kinds(&calls), ["take", "take", "take", "take"]);
    assert_eq!(
        takes(&calls),
        [
            (100, 100, false),
            (100, 100, false),
            (100, 50, false),
            (100, 0, false)
        ]
    );
    assert!(
        calls
            .iter()
            .all(|c| matches!(c, Call::Take { max_bytes, .. } if *max_bytes == 65536)),
        "every take carries the byte cap"
    );
    assert_eq!((report.takes, report.fired, report.claimed), (4, 250, 250));
    assert_eq!(report.stop, DrainStop::NothingToClaim);
    assert!(!report.first_claim_empty());
    assert_eq!(metrics.timers_result("fired"), 250);
    assert_eq!(metrics.queries_of("take"), 4);
}

#[tokio::test]
async fn every_take_of_a_pass_runs_the_fairness_round_and_moves_it_on() {
    let fake = FakeStore::new();
    fake.script().pool.extend(batch("k", 250));
    // The pass's own lane alone: the bulk lane's takes run no round (tested on their own).
    let config = take_config(&[
        ("QUEEN_SWEEPER_CLAIM_BATCH", "100"),
        ("QUEEN_SWEEPER_BULK_BATCH", "0"),
    ]);

    drain_once(&fake, &config, &CancellationToken::new()).await;

    let rounds: Vec<Option<FairRound>> = fake
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Take { fair, .. } => Some(fair),
            _ => None,
        })
        .collect();
    assert_eq!(rounds.len(), 4);
    for (n, round) in rounds.iter().enumerate() {
        let after = n
            .checked_sub(1)
            .map(|previous| format!("tenant-{previous}"));
        assert_eq!(
            round.as_ref().map(|r| r.after.clone()),
            Some(after),
            "take {n} runs the round from where the previous take left it"
        );
    }
}

#[tokio::test]
async fn an_empty_first_take_is_reported_as_first_claim_empty() {
    let fake = FakeStore::new();
    let (report, metrics) = drain_once(&fake, &take_config(&[]), &CancellationToken::new()).await;
    assert_eq!(kinds(&fake.calls()), ["take"]);
    assert!(report.first_claim_empty());
    assert_eq!(metrics.empty_claims.get(), 1);
}

/// 199 innocent timers and one poison timer, all of one destination, due together.
fn poison_among_innocents(poison_attempts: u32) -> Vec<ClaimedTimer> {
    let mut rows: Vec<ClaimedTimer> = (0..199)
        .map(|i| timer("acme", "orders", "p", &format!("ok{i:03}"), 0, 10))
        .collect();
    rows.insert(
        120,
        timer("acme", "orders", "p", "poison", poison_attempts, 10),
    );
    rows
}

#[tokio::test]
async fn a_take_that_fails_on_a_timer_retries_the_batch_leased_and_only_that_timer_fails() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.pool.extend(poison_among_innocents(0));
        script.poison.push(("poison".into(), Some("P0001")));
    }

    let config = take_config(&[("QUEEN_SWEEPER_CLAIM_BATCH", "200")]);
    let (report, _) = drain_once(&fake, &config, &CancellationToken::new()).await;

    let calls = fake.calls();
    assert_eq!(takes(&calls)[0], (200, 0, true), "the take fails whole");
    let after_take: Vec<&str> = kinds(&calls).into_iter().skip(1).take(4).collect();
    assert_eq!(after_take, ["claim", "fire", "fire", "fire"]);
    let fails = fail_calls(&calls);
    assert_eq!(fails.len(), 1);
    let (rows, transient, _) = &fails[0];
    assert!(!transient);
    assert_eq!(
        rows.iter()
            .map(|r| r.timer.timer_key.as_str())
            .collect::<Vec<_>>(),
        ["poison"],
        "only the poison timer spends an attempt"
    );
    assert_eq!(report.fired, 199, "the 199 innocents fire in the same pass");
    assert_eq!(report.failed_timers, 1);
    assert_eq!(report.dead_lettered, 0);
}

#[tokio::test]
async fn a_poison_timer_out_of_attempts_goes_to_the_dlq_alone() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.pool.extend(poison_among_innocents(4));
        script.poison.push(("poison".into(), Some("22P02")));
        script.exhausted_keys.insert("poison".into());
    }

    let (report, metrics) = drain_once(&fake, &take_config(&[]), &CancellationToken::new()).await;

    let dlq: Vec<Vec<String>> = fake
        .calls()
        .iter()
        .filter_map(|c| match c {
            Call::Dlq { rows } => Some(rows.iter().map(|r| r.timer_key.clone()).collect()),
            _ => None,
        })
        .collect();
    assert_eq!(dlq, [vec!["poison".to_owned()]]);
    assert_eq!((report.fired, report.dead_lettered), (199, 1));
    assert_eq!(metrics.dlq.get(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_class_42_take_error_spends_no_attempt_touches_no_row_and_sleeps_the_ceiling() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probe_default = due(5);
        script.pool.extend(batch("k", 5));
        script.take_errors.push_back(Some("42883"));
    }
    let mut sweeper = take_sweeper(fake, &[]);

    let report = sweeper.pass().await;

    let calls = sweeper.store().calls();
    assert_eq!(kinds(&calls), ["probe", "take", "prune"]);
    assert!(fail_calls(&calls).is_empty(), "no attempt is spent");
    let drain = report.drain.unwrap();
    assert_eq!(
        drain.stop,
        DrainStop::CallFailed(queen_sweeper::Class::Config)
    );
    assert_eq!((drain.config_failures, drain.dead_lettered), (1, 0));
    assert_eq!(report.outcome, Outcome::NothingDue);
    assert_eq!(report.sleep, Duration::from_millis(1000));
    assert_eq!(sweeper.metrics().fire_config_failures.get(), 1);

    // The fire keeps trying: the next pass takes again, and fires once the deployment is fixed.
    let next = sweeper.pass().await;
    assert_eq!(next.drain.unwrap().fired, 5);
}

#[tokio::test(start_paused = true)]
async fn slow_takes_halve_the_batch_and_double_the_sleep_down_to_the_slowness_floor_and_fast_ones_undo_it()
 {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probe_default = due(2000);
        script.pool.extend(batch("k", 5000));
        // A fifth of the 5 s statement timeout is 1 s: 1.2 s takes are pressure.
        script.fire_delay = Some(Delay::Advance(Duration::from_millis(1200)));
    }
    let mut sweeper = take_sweeper(
        fake,
        &[
            ("QUEEN_SWEEPER_CLAIM_BATCH", "64"),
            ("QUEEN_SWEEPER_CYCLE_MAX_ROWS", "256"),
        ],
    );

    // Four slow passes: slowness alone stops at SLOW_PRESSURE_LEVELS (2).
    assert_eq!(queen_sweeper::SLOW_PRESSURE_LEVELS, 2);
    let mut pressured = Vec::new();
    for _ in 0..4 {
        let report = sweeper.pass().await;
        pressured.push((report.sleep, sweeper.metrics().fire_pressure.get()));
    }
    sweeper.store().script().fire_delay = None;
    let mut relieved = Vec::new();
    for _ in 0..3 {
        let report = sweeper.pass().await;
        relieved.push((report.sleep, sweeper.metrics().fire_pressure.get()));
    }

    let sizes: Vec<u32> = takes(&sweeper.store().calls())
        .iter()
        .map(|(max_rows, ..)| *max_rows)
        .collect();
    let first_of_pass: Vec<u32> = {
        let mut firsts = Vec::new();
        let mut pass = 0;
        for call in sweeper.store().calls() {
            match call {
                Call::Probe { .. } => pass += 1,
                Call::Take { max_rows, .. } if firsts.len() < pass => firsts.push(max_rows),
                _ => {}
            }
        }
        firsts
    };
    assert_eq!(
        first_of_pass,
        [64, 32, 16, 16, 16, 32, 64],
        "each slow pass halves the next batch down to a quarter; each fast one doubles it back ({sizes:?})"
    );
    assert_eq!(
        pressured,
        [
            (FLOOR * 2, 1),
            (FLOOR * 4, 2),
            (FLOOR * 4, 2),
            (FLOOR * 4, 2)
        ],
        "the sleep after work doubles with each pressured pass, up to four times the floor"
    );
    assert_eq!(
        relieved,
        [(FLOOR * 2, 1), (FLOOR, 0), (FLOOR, 0)],
        "and comes back to the floor"
    );
}

#[tokio::test]
async fn transient_failures_press_past_the_slowness_floor() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probe_default = due(3);
        script.pool.extend(batch("k", 3));
        // Serialization failures are transient: each pass's take fails again.
        script.poison.push(("k0".into(), Some("40001")));
    }
    let mut sweeper = take_sweeper(fake, &[("QUEEN_SWEEPER_CLAIM_BATCH", "64")]);

    let mut levels = Vec::new();
    for _ in 0..4 {
        sweeper.pass().await;
        levels.push(sweeper.metrics().fire_pressure.get());
    }

    assert_eq!(
        levels,
        [1, 2, 3, 4],
        "failures, unlike slowness, keep pressing past level {}",
        queen_sweeper::SLOW_PRESSURE_LEVELS
    );
}

#[tokio::test(start_paused = true)]
async fn a_capped_backlog_with_fast_calls_keeps_the_full_batch_and_the_floor() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probe_default = Probe {
            due_capped: true,
            ..due(2000)
        };
        script.pool.extend(batch("k", 20_000));
    }
    // Passes of 5 000 rows, so three of them stop at their row budget with the backlog left.
    let mut sweeper = take_sweeper(
        fake,
        &[
            ("QUEEN_SWEEPER_CLAIM_BATCH", "100"),
            ("QUEEN_SWEEPER_CYCLE_MAX_ROWS", "5000"),
        ],
    );
    for _ in 0..3 {
        let report = sweeper.pass().await;
        assert_eq!(report.drain.unwrap().stop, DrainStop::RowBudget);
        assert_eq!(report.outcome, Outcome::WorkAvailable);
        assert_eq!(report.sleep, FLOOR);
    }
    // The pass's own takes (the fairness round first) keep their 100 rows; the bulk lane beside
    // them keeps its 5 000.
    let (own, bulk): (Vec<_>, Vec<_>) = lanes(&sweeper.store().calls());
    assert!(own.iter().all(|max_rows| *max_rows == 100), "{own:?}");
    assert!(
        !bulk.is_empty() && bulk.iter().all(|max_rows| *max_rows == 5000),
        "{bulk:?}"
    );
    assert_eq!(sweeper.metrics().fire_pressure.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_full_take_starts_the_bulk_lane_and_the_pass_keeps_taking_small_batches_beside_it() {
    // 150 rows; a take costs 1 ms a row. The pass's first take (10 rows) comes back full, so a
    // bulk take of 100 starts beside the pass's own takes of 10.
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probe_default = due(150);
        script.pool.extend(batch("k", 150));
        script.take_row_delay = Some(Duration::from_millis(1));
    }
    let mut sweeper = take_sweeper(
        fake,
        &[
            ("QUEEN_SWEEPER_CLAIM_BATCH", "10"),
            ("QUEEN_SWEEPER_BULK_BATCH", "100"),
            ("QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS", "25"),
        ],
    );
    let started = tokio_now();
    let report = sweeper.pass().await;
    let drain = report.drain.unwrap();
    let calls = sweeper.store().calls();

    assert_eq!(drain.fired, 150);
    assert_eq!(sweeper.store().script().pool.len(), 0);
    assert_eq!(drain.stop, DrainStop::NothingToClaim);
    // The bulk lane: a full take of 100 (10-110 ms), then a short one that ends it.
    let (own, bulk) = lanes(&calls);
    assert_eq!(bulk, [100, 100]);
    assert_eq!(drain.bulk_takes, 2);
    // Each bulk take asks only for the backlog the pass found: rows due before its first take
    // (the pass began 10 and 110 ms earlier); the own takes ask for everything due.
    let ages: Vec<(bool, u64)> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Take {
                fair, due_ms_ago, ..
            } => Some((fair.is_some(), *due_ms_ago)),
            _ => None,
        })
        .collect();
    assert!(ages.iter().all(|(own, age)| !own || *age == 0), "{ages:?}");
    // The own takes beside it ask only for what fell due since the pass began.
    let windows: Vec<(bool, Option<u64>)> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Take {
                fair: Some(_),
                skip_held,
                due_within_ms,
                ..
            } => Some((*skip_held, *due_within_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(
        windows,
        [
            (false, None),
            (true, Some(10)),
            (true, Some(20)),
            (true, Some(30)),
            (true, Some(40)),
            (true, Some(50)),
            (true, Some(75)),
            (true, Some(100)),
            (false, None)
        ]
    );
    let bulk_ages: Vec<u64> = ages
        .iter()
        .filter(|(own, _)| !own)
        .map(|(_, a)| *a)
        .collect();
    assert_eq!(bulk_ages, [10, 110]);
    // The own lane never waited for the bulk take: its first take (0-10 ms), four more of 10
    // beside the bulk take (10-50 ms), then empty ones 25 ms apart while the bulk lane still
    // ran (50, 75, 100 ms; the third pause ends at 125), then, the bulk lane done, the empty
    // take that ends the pass.
    assert_eq!(own, [10; 9]);
    let own_calls: Vec<(usize, bool)> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Take {
                fair: Some(_),
                skip_held,
                returned,
                ..
            } => Some((returned.len(), *skip_held)),
            _ => None,
        })
        .collect();
    assert_eq!(
        own_calls,
        [
            (10, false),
            (10, true),
            (10, true),
            (10, true),
            (10, true),
            (0, true),
            (0, true),
            (0, true),
            (0, false)
        ],
        "beside the bulk lane, and only there, the own takes skip held partitions"
    );
    let order: Vec<bool> = calls
        .iter()
        .filter_map(|c| match c {
            Call::Take { fair, .. } => Some(fair.is_some()),
            _ => None,
        })
        .collect();
    assert_eq!(
        order[..3],
        [true, true, false],
        "the bulk lane starts after the first full take"
    );
    assert_eq!(tokio_now() - started, Duration::from_millis(125));
    assert_eq!(drain.takes, 11);
    assert_eq!(sweeper.metrics().empty_claims.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_bulk_lane_stops_at_its_first_short_take() {
    // 420 rows: the first take of 10, then bulk takes of 100 beside takes of 10: the bulk lane
    // stops after the first take that comes back under 100, and the own lane drains the rest.
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probe_default = due(420);
        script.pool.extend(batch("k", 420));
        script.take_row_delay = Some(Duration::from_millis(1));
    }
    let mut sweeper = take_sweeper(
        fake,
        &[
            ("QUEEN_SWEEPER_CLAIM_BATCH", "10"),
            ("QUEEN_SWEEPER_BULK_BATCH", "100"),
        ],
    );
    let drain = sweeper.pass().await.drain.unwrap();
    let (own, bulk) = lanes(&sweeper.store().calls());
    assert_eq!(drain.fired, 420);
    assert_eq!(sweeper.store().script().pool.len(), 0);
    let bulk_returned: Vec<usize> = sweeper
        .store()
        .calls()
        .iter()
        .filter_map(|c| match c {
            Call::Take {
                fair: None,
                returned,
                ..
            } => Some(returned.len()),
            _ => None,
        })
        .collect();
    // Every bulk take but the last came back full; the last came back short, and none followed.
    let (last, full) = bulk_returned.split_last().unwrap();
    assert!(*last < 100, "{bulk_returned:?}");
    assert!(
        !full.is_empty() && full.iter().all(|rows| *rows == 100),
        "{bulk_returned:?}"
    );
    assert!(bulk.iter().all(|rows| *rows == 100), "{bulk:?}");
    assert!(own.iter().all(|rows| *rows == 10), "{own:?}");
    assert_eq!(drain.bulk_takes as usize, bulk.len());
}

#[tokio::test(start_paused = true)]
async fn the_bulk_lane_stays_off_below_a_full_take_at_zero_at_or_below_the_claim_batch_and_on_the_leased_path()
 {
    let run = |pool: usize, vars: &'static [(&'static str, &'static str)], take: bool| async move {
        let fake = FakeStore::new();
        {
            let mut script = fake.script();
            script.probe_default = due(pool as u32);
            script.pool.extend(batch("k", pool));
            script.take_row_delay = Some(Duration::from_millis(1));
        }
        let config = if take {
            take_config(vars)
        } else {
            config(vars)
        };
        let mut sweeper = Sweeper::with_jitter(Arc::new(fake), config, "id", Box::new(|| 0.5));
        let drain = sweeper.pass().await.drain.unwrap();
        let (_, bulk) = lanes(&sweeper.store().calls());
        (drain.fired, drain.bulk_takes, bulk.len())
    };
    const BATCH_10: &[(&str, &str)] = &[
        ("QUEEN_SWEEPER_CLAIM_BATCH", "10"),
        ("QUEEN_SWEEPER_BULK_BATCH", "100"),
    ];
    // On: a first take that came back full.
    assert_eq!(run(300, BATCH_10, true).await.0, 300);
    assert!(run(300, BATCH_10, true).await.1 > 0);
    // A first take under its batch: there is no backlog to share.
    assert_eq!(run(7, BATCH_10, true).await, (7, 0, 0));
    // Off by configuration.
    const OFF: &[(&str, &str)] = &[
        ("QUEEN_SWEEPER_CLAIM_BATCH", "10"),
        ("QUEEN_SWEEPER_BULK_BATCH", "0"),
    ];
    assert_eq!(run(300, OFF, true).await, (300, 0, 0));
    const SAME: &[(&str, &str)] = &[
        ("QUEEN_SWEEPER_CLAIM_BATCH", "10"),
        ("QUEEN_SWEEPER_BULK_BATCH", "10"),
    ];
    assert_eq!(run(300, SAME, true).await, (300, 0, 0));
    // The leased path claims and fires; it has no bulk lane.
    assert_eq!(run(300, BATCH_10, false).await, (300, 0, 0));
}

/// The takes' `max_rows`: the pass's own (with a fairness round), then the bulk lane's (none).
fn lanes(calls: &[Call]) -> (Vec<u32>, Vec<u32>) {
    let mut own = Vec::new();
    let mut bulk = Vec::new();
    for call in calls {
        if let Call::Take { max_rows, fair, .. } = call {
            if fair.is_some() {
                own.push(*max_rows);
            } else {
                bulk.push(*max_rows);
            }
        }
    }
    (own, bulk)
}

// ---------------------------------------------------------------------------------------------
// Idle: one call a pass
// ---------------------------------------------------------------------------------------------

/// Nothing due, and the probe saw `expired` expired-but-present KV rows.
fn idle_with_expired(expired: u64) -> Probe {
    Probe {
        kv_expired: Some(queen_sweeper::ExpiredKv {
            expired,
            capped: false,
            lag_ms: 0,
        }),
        ..nothing_due()
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_broker_makes_one_call_a_pass_and_sleeps_the_ceiling() {
    let fake = FakeStore::new();
    fake.script().probe_default = idle_with_expired(0);
    let mut sweeper = take_sweeper(fake, &[]);
    for _ in 0..20 {
        let report = sweeper.pass().await;
        assert_eq!(report.sleep, Duration::from_millis(1000));
        assert!(report.subclocks.prune_idle || report.subclocks.prune_calls == 0);
        tokio::time::advance(report.sleep).await;
    }
    assert_eq!(
        sweeper.store().kinds(),
        ["probe"; 20],
        "20 idle seconds: 20 statements, each carrying the switches and the prune's alarm"
    );
}

#[tokio::test(start_paused = true)]
async fn the_prune_runs_on_its_gate_only_when_the_probe_saw_expired_rows() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probes.push_back(Ok(idle_with_expired(0)));
        script.probes.push_back(Ok(idle_with_expired(7)));
        script.probe_default = idle_with_expired(0);
        script.expire_steps.push_back(pruned(7, true, 0));
    }
    let mut sweeper = take_sweeper(fake, &[]);
    let first = sweeper.pass().await;
    tokio::time::advance(Duration::from_millis(1000)).await;
    let second = sweeper.pass().await;
    assert!(first.subclocks.prune_idle);
    assert_eq!(
        (second.subclocks.prune_calls, second.subclocks.pruned),
        (1, 7)
    );
    assert_eq!(sweeper.store().kinds(), ["probe", "probe", "prune"]);
}

#[tokio::test(start_paused = true)]
async fn the_alarm_keeps_counting_while_the_prune_is_shed() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        for expired in [100, 200, 300, 400] {
            script.probes.push_back(Ok(Probe {
                due_capped: true,
                kv_expired: Some(queen_sweeper::ExpiredKv {
                    expired,
                    capped: false,
                    lag_ms: expired * 10,
                }),
                ..due(2000)
            }));
        }
        script.pool.extend(batch("k", 100_000));
    }
    let mut sweeper = take_sweeper(
        fake,
        &[
            ("QUEEN_SWEEPER_CYCLE_MAX_ROWS", "200"),
            ("QUEEN_SWEEPER_CLAIM_BATCH", "200"),
        ],
    );
    let mut seen = Vec::new();
    for _ in 0..4 {
        let report = sweeper.pass().await;
        tokio::time::advance(Duration::from_millis(1000)).await;
        seen.push((
            report.subclocks.prune_shed,
            sweeper.metrics().kv_expired_not_pruned.get(),
            sweeper.metrics().kv_expiry_lag_ms.get(),
        ));
    }
    assert_eq!(
        seen,
        [
            (true, 100, 1000),
            (true, 200, 2000),
            (true, 300, 3000),
            (true, 400, 4000)
        ],
        "shed on every pass under the capped backlog, the alarm still grows with the table"
    );
    assert!(!sweeper.store().kinds().contains(&"prune"));
}

#[tokio::test(start_paused = true)]
async fn a_missing_kv_sweeper_file_switches_the_prune_off_and_the_probe_goes_on_without_it() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.kv_probe_error = Some(Some("42883"));
        script.probe_default = due(3);
        script.pool.extend(batch("k", 3));
    }
    let mut sweeper = take_sweeper(fake, &[]);
    let first = sweeper.pass().await;
    assert_eq!(first.drain.unwrap().fired, 3, "timers keep firing");
    assert!(sweeper.subclocks_off(queen_sweeper::SlowPhase::Prune));
    tokio::time::advance(Duration::from_millis(1000)).await;
    sweeper.pass().await;
    let probes: Vec<u32> = sweeper
        .store()
        .calls()
        .iter()
        .filter_map(|c| match c {
            Call::Probe { kv_cap, .. } => Some(*kv_cap),
            _ => None,
        })
        .collect();
    assert_eq!(
        probes,
        [queen_sweeper::KV_ALARM_CAP, 0, 0],
        "the failed probe is asked again without the KV part, and so is every later one"
    );
    assert!(!sweeper.store().kinds().contains(&"prune"));
    assert_eq!(skipped(sweeper.metrics(), "prune", "off"), 1);
}

// ---------------------------------------------------------------------------------------------
// Sub-clocks
// ---------------------------------------------------------------------------------------------

fn pruned(deleted: u64, done: bool, unpruned: u64) -> Result<ExpireStep, Sqlstate> {
    Ok(ExpireStep {
        deleted,
        done,
        unpruned,
        unpruned_capped: false,
        lag_ms: unpruned * 10,
    })
}

fn prune_calls(calls: &[Call]) -> Vec<Option<i64>> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::Expire { alarm_before, .. } => Some(*alarm_before),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn the_prune_loops_until_a_step_is_done() {
    let fake = FakeStore::new();
    fake.script().expire_steps.extend([
        pruned(10, false, 50),
        pruned(10, false, 40),
        pruned(3, true, 0),
    ]);
    let mut sweeper = sweeper(fake, &[("QUEEN_KV_EXPIRE_BATCH", "10")]);

    let report = sweeper.pass().await;

    assert_eq!(report.subclocks.prune_calls, 3);
    assert_eq!(report.subclocks.pruned, 23);
    let calls = sweeper.store().calls();
    assert_eq!(prune_calls(&calls).len(), 3);
    assert!(calls.iter().all(|c| match c {
        Call::Expire { max_rows, .. } => *max_rows == 10,
        _ => true,
    }));
    assert_eq!(sweeper.metrics().kv_expired_not_pruned.get(), 0);
}

#[tokio::test]
async fn the_prune_stops_on_a_step_that_deletes_nothing_and_still_publishes_its_alarm() {
    let fake = FakeStore::new();
    fake.script().expire_steps.extend([
        pruned(5, false, 12),
        pruned(0, false, 7),
        pruned(5, false, 2),
    ]);
    let mut sweeper = sweeper(fake, &[]);

    let report = sweeper.pass().await;

    assert_eq!(report.subclocks.prune_calls, 2);
    assert_eq!(report.subclocks.pruned, 5);
    assert_eq!(sweeper.metrics().kv_expired_not_pruned.get(), 7);
    assert_eq!(sweeper.metrics().kv_expiry_lag_ms.get(), 70);
}

#[tokio::test]
async fn the_prune_stops_at_its_per_pass_call_budget() {
    let fake = FakeStore::new();
    fake.script().expire_default = ExpireStep {
        deleted: 1000,
        done: false,
        unpruned: 1_000_000,
        unpruned_capped: true,
        lag_ms: 5,
    };
    let mut sweeper = sweeper(fake, &[]);

    let report = sweeper.pass().await;

    assert_eq!(report.subclocks.prune_calls, PRUNE_CALLS_PER_PASS);
    assert_eq!(
        prune_calls(&sweeper.store().calls()).len(),
        PRUNE_CALLS_PER_PASS as usize
    );
    assert_eq!(
        report.subclocks.pruned,
        1000 * u64::from(PRUNE_CALLS_PER_PASS)
    );
    assert_eq!(sweeper.metrics().kv_expired_not_pruned_capped.get(), 1);
}

#[tokio::test]
async fn the_prune_alarm_is_published_after_every_call_including_one_that_deletes_nothing() {
    let metrics = Metrics::new();
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.observe = Some(metrics.clone());
        script.expire_steps.extend([
            pruned(4, false, 30),
            pruned(4, false, 20),
            pruned(0, false, 9),
        ]);
    }
    let mut sweeper = sweeper(fake, &[]).with_metrics(metrics.clone());
    // A value no call answers, to see that the first call's answer replaces it.
    metrics.kv_expired_not_pruned.set(-1);

    sweeper.pass().await;

    assert_eq!(
        prune_calls(&sweeper.store().calls()),
        [Some(-1), Some(30), Some(20)],
        "each call sees what the previous call published"
    );
    assert_eq!(metrics.kv_expired_not_pruned.get(), 9);

    // The alarm is true even when the very first call deletes nothing.
    let fake = FakeStore::new();
    fake.script().expire_steps.push_back(pruned(0, true, 77));
    let mut sweeper = crate::sweeper(fake, &[]);
    sweeper.pass().await;
    assert_eq!(sweeper.metrics().kv_expired_not_pruned.get(), 77);
}

#[tokio::test(start_paused = true)]
async fn a_class_42_prune_error_switches_the_prune_off_for_good_while_timers_keep_firing() {
    let fake = FakeStore::new();
    fake.script().expire_steps.push_back(Err(Some("42883")));
    let mut sweeper = sweeper(fake, &[]);

    let first = sweeper.pass().await;
    assert_eq!(first.subclocks.prune_calls, 1);
    assert_eq!(skipped(sweeper.metrics(), "prune", "off"), 1);
    assert_eq!(failures(sweeper.metrics(), "config"), 1);

    for pass in 0..6 {
        // Well past the prune's 1 s gate and the 5 s switch refresh.
        tokio::time::advance(Duration::from_millis(2500)).await;
        {
            let store = sweeper.store();
            let mut script = store.script();
            script.probes.push_back(Ok(due(2)));
            script.pool.extend(batch(&format!("p{pass}-"), 2));
        }
        let report = sweeper.pass().await;
        assert_eq!(report.subclocks.prune_calls, 0, "pass {pass}");
        assert_eq!(report.drain.map(|d| d.fired), Some(2), "pass {pass}");
    }

    let calls = sweeper.store().calls();
    assert_eq!(prune_calls(&calls).len(), 1, "no prune call after class 42");
    assert_eq!(fires(&calls).len(), 6);
    assert_eq!(skipped(sweeper.metrics(), "prune", "off"), 1, "one warning");
    assert_eq!(skipped(sweeper.metrics(), "prune", "shed"), 0);
}

#[tokio::test(start_paused = true)]
async fn a_non_config_prune_error_skips_the_prune_only_until_its_next_gate() {
    let fake = FakeStore::new();
    fake.script().expire_steps.push_back(Err(Some("57014")));
    let mut sweeper = sweeper(fake, &[]);

    sweeper.pass().await;
    tokio::time::advance(Duration::from_millis(500)).await;
    let early = sweeper.pass().await;
    tokio::time::advance(Duration::from_millis(600)).await;
    let later = sweeper.pass().await;

    assert_eq!(early.subclocks.prune_calls, 0, "the gate is still closed");
    assert_eq!(later.subclocks.prune_calls, 1, "the prune is retried");
    assert_eq!(skipped(sweeper.metrics(), "prune", "off"), 0);
}

#[tokio::test(start_paused = true)]
async fn under_pressure_the_prune_is_shed_before_the_rollup_and_the_fire_never_is() {
    const { assert!(SHED_PRUNE_AFTER < SHED_ROLLUP_AFTER) };
    let fake = FakeStore::new();
    fake.script().probe_default = Probe {
        due_capped: true,
        ..due(2000)
    };
    // Both gates open on every pass.
    let mut sweeper = sweeper(
        fake,
        &[
            ("QUEEN_KV_EXPIRE_EVERY_MS", "1"),
            ("QUEEN_KV_USAGE_EVERY_MS", "1"),
        ],
    );

    let mut prune_shed_alone = 0;
    for pressure in 1..=SHED_ROLLUP_AFTER + 1 {
        tokio::time::advance(Duration::from_millis(10)).await;
        sweeper
            .store()
            .script()
            .pool
            .extend(batch(&format!("p{pressure}-"), 3));
        let report = sweeper.pass().await;
        let calls = sweeper.store().take_calls();
        let sub = report.subclocks;

        assert_eq!(
            report.drain.map(|d| d.fired),
            Some(3),
            "pressure {pressure}: the fire runs"
        );
        assert_eq!(
            sub.prune_shed,
            pressure >= SHED_PRUNE_AFTER,
            "pressure {pressure}"
        );
        assert_eq!(
            sub.rollup_shed,
            pressure >= SHED_ROLLUP_AFTER,
            "pressure {pressure}"
        );
        assert_eq!(
            kinds(&calls).contains(&"prune"),
            !sub.prune_shed,
            "pressure {pressure}"
        );
        assert_eq!(
            kinds(&calls).contains(&"usage"),
            !sub.rollup_shed,
            "pressure {pressure}"
        );
        if sub.prune_shed && !sub.rollup_shed {
            prune_shed_alone += 1;
        }
    }
    assert_eq!(
        prune_shed_alone,
        SHED_ROLLUP_AFTER - SHED_PRUNE_AFTER,
        "the prune goes first, the rollup only later"
    );
    assert_eq!(
        skipped(sweeper.metrics(), "prune", "shed"),
        u64::from(SHED_ROLLUP_AFTER + 2 - SHED_PRUNE_AFTER)
    );
    assert_eq!(skipped(sweeper.metrics(), "rollup", "shed"), 2);
    assert_eq!(skipped(sweeper.metrics(), "fire", "shed"), 0);

    // A calm pass resets the pressure: both run again.
    tokio::time::advance(Duration::from_millis(10)).await;
    sweeper.store().script().probes.push_back(Ok(due(3)));
    sweeper.store().script().pool.extend(batch("calm", 3));
    let report = sweeper.pass().await;
    assert!(!report.subclocks.prune_shed && !report.subclocks.rollup_shed);
    assert_eq!(report.subclocks.rollup_steps, 1);
    assert_eq!(report.subclocks.prune_calls, 1);
}

#[tokio::test(start_paused = true)]
async fn the_rollup_resumes_from_the_last_tenant_of_its_previous_step() {
    let fake = FakeStore::new();
    fake.script().usage_steps.extend([
        Ok(UsageStep {
            tenants: 500,
            zeroed: 0,
            done: false,
            last_tenant: Some("t-0500".into()),
        }),
        Ok(UsageStep {
            tenants: 500,
            zeroed: 3,
            done: false,
            last_tenant: Some("t-1000".into()),
        }),
        Ok(UsageStep {
            tenants: 12,
            zeroed: 0,
            done: true,
            last_tenant: Some("t-1012".into()),
        }),
    ]);
    // The rollup's first gate is jittered to half its period: 500 ms here.
    let mut sweeper = sweeper(fake, &[("QUEEN_KV_USAGE_EVERY_MS", "1000")]);
    let before = sweeper.pass().await;
    assert_eq!(before.subclocks.rollup_steps, 0, "the gate is not open yet");
    tokio::time::advance(Duration::from_millis(500)).await;

    let report = sweeper.pass().await;

    assert_eq!(report.subclocks.rollup_steps, 3);
    let usage: Vec<(Option<String>, u32)> = sweeper
        .store()
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Usage {
                after_tenant,
                max_tenants,
            } => Some((after_tenant, max_tenants)),
            _ => None,
        })
        .collect();
    assert_eq!(
        usage,
        [
            (None, ROLLUP_TENANTS_PER_STEP),
            (Some("t-0500".into()), ROLLUP_TENANTS_PER_STEP),
            (Some("t-1000".into()), ROLLUP_TENANTS_PER_STEP),
        ]
    );
}

/// The usage steps the store was asked for.
fn usage_calls(calls: &[Call]) -> usize {
    calls
        .iter()
        .filter(|c| matches!(c, Call::Usage { .. }))
        .count()
}

#[tokio::test(start_paused = true)]
async fn a_long_rollup_takes_its_step_budget_per_pass_resumes_before_its_gate_and_stops_for_good_on_class_42()
 {
    let fake = FakeStore::new();
    fake.script().usage_default = UsageStep {
        tenants: ROLLUP_TENANTS_PER_STEP,
        zeroed: 0,
        done: false,
        last_tenant: Some("t-x".into()),
    };
    // The rollup's first gate is jittered to half its period: 30 s here.
    let mut sweeper = sweeper(fake, &[("QUEEN_KV_USAGE_EVERY_MS", "60000")]);
    tokio::time::advance(Duration::from_secs(30)).await;

    let first = sweeper.pass().await;
    assert_eq!(
        first.subclocks.rollup_steps, ROLLUP_STEPS_PER_PASS,
        "bounded per pass"
    );
    tokio::time::advance(Duration::from_millis(10)).await;
    let resumed = sweeper.pass().await;
    assert_eq!(
        resumed.subclocks.rollup_steps, ROLLUP_STEPS_PER_PASS,
        "an unfinished rollup goes on without waiting for its gate"
    );

    sweeper
        .store()
        .script()
        .usage_steps
        .push_back(Err(Some("42501")));
    let failed = sweeper.pass().await;
    assert_eq!(failed.subclocks.rollup_steps, 1);
    let after_42 = usage_calls(&sweeper.store().calls());
    for _ in 0..3 {
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(sweeper.pass().await.subclocks.rollup_steps, 0);
    }
    assert_eq!(
        usage_calls(&sweeper.store().calls()),
        after_42,
        "off for good"
    );
}

#[tokio::test(start_paused = true)]
async fn a_finished_rollup_waits_its_whole_period_for_the_next() {
    let fake = FakeStore::new();
    let mut sweeper = sweeper(fake, &[("QUEEN_KV_USAGE_EVERY_MS", "1000")]);
    tokio::time::advance(Duration::from_millis(500)).await;
    assert_eq!(
        sweeper.pass().await.subclocks.rollup_steps,
        1,
        "done in one step"
    );

    tokio::time::advance(Duration::from_millis(900)).await;
    assert_eq!(
        sweeper.pass().await.subclocks.rollup_steps,
        0,
        "900 ms later"
    );
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(
        sweeper.pass().await.subclocks.rollup_steps,
        1,
        "1 000 ms later"
    );
}

#[tokio::test(start_paused = true)]
async fn the_prune_keeps_its_cadence_whether_it_ran_or_had_nothing_to_do() {
    // Idle: the probe saw nothing expired, so no call, and the gate moves on as if it ran.
    let fake = FakeStore::new();
    fake.script().probe_default = idle_with_expired(0);
    let mut sweeper = sweeper(fake, &[]);
    let idle = sweeper.pass().await;
    assert!(idle.subclocks.prune_idle);
    sweeper.store().script().probe_default = idle_with_expired(5);
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(
        sweeper.pass().await.subclocks.prune_calls,
        0,
        "the gate is closed"
    );

    // Ran: the next prune waits its period too.
    tokio::time::advance(Duration::from_millis(1000)).await;
    assert_eq!(
        sweeper.pass().await.subclocks.prune_calls,
        1,
        "the gate opened"
    );
    tokio::time::advance(Duration::from_millis(100)).await;
    assert_eq!(
        sweeper.pass().await.subclocks.prune_calls,
        0,
        "closed again"
    );
}

// ---------------------------------------------------------------------------------------------
// Behaviour the code's documentation promises and the code does not keep (see each `ignore`).
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_rollup_that_fails_mid_way_waits_for_its_next_gate() {
    let fake = FakeStore::new();
    fake.script().usage_steps.extend([
        Ok(UsageStep {
            tenants: 500,
            zeroed: 0,
            done: false,
            last_tenant: Some("t-0500".into()),
        }),
        Err(Some("57014")),
    ]);
    // Gate every 1000 ms, first opening at 500 ms (jitter 0.5).
    let mut sweeper = sweeper(fake, &[("QUEEN_KV_USAGE_EVERY_MS", "1000")]);
    tokio::time::advance(Duration::from_millis(500)).await;
    let failed = sweeper.pass().await;
    assert_eq!(
        failed.subclocks.rollup_steps, 2,
        "one step, then the failure"
    );
    assert_eq!(failures(sweeper.metrics(), "transient"), 1);

    // 10 ms later: the gate reopens only at 1500 ms.
    tokio::time::advance(Duration::from_millis(10)).await;
    let next = sweeper.pass().await;

    assert_eq!(
        next.subclocks.rollup_steps, 0,
        "subclock.rs: \"Other errors skip the phase until its next gate\""
    );
}

#[tokio::test(start_paused = true)]
async fn with_the_fire_switch_off_a_capped_backlog_does_not_stop_the_prune() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.switches = Ok(SwitchStates {
            schedule_enabled: true,
            fire_enabled: false,
        });
        // The backlog grows past the probe's cap while nothing fires.
        script.probe_default = Probe {
            due_capped: true,
            ..due(2000)
        };
    }
    let mut sweeper = sweeper(fake, &[]);

    let mut pruned_passes = 0;
    for _ in 0..4 {
        let report = sweeper.pass().await;
        assert_eq!(report.drain, None);
        if report.subclocks.prune_calls > 0 {
            pruned_passes += 1;
        }
        tokio::time::advance(Duration::from_millis(1100)).await;
    }

    assert_eq!(
        pruned_passes, 4,
        "switches.rs / DESIGN §5: with the fire off \"the prune keeps its cadence\""
    );
    assert_eq!(skipped(sweeper.metrics(), "prune", "shed"), 0);
}

#[tokio::test]
async fn a_pass_whose_fires_failed_transiently_sleeps_the_ceiling() {
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probe_default = due(3);
        script.pool.extend(batch("k", 3));
        script.poison.push(("k0".into(), Some("57014")));
    }
    let mut sweeper = sweeper(fake, &[]);

    let report = sweeper.pass().await;

    assert_eq!(report.drain.map(|d| d.transient_failures), Some(1));
    // The database is struggling: the pass backs off to the ceiling (1 000 ms by default), not
    // to the pressure's doubled floor.
    assert_eq!(report.outcome, Outcome::NothingDue);
    assert_eq!(report.sleep, Duration::from_millis(1000));
}

#[tokio::test]
async fn a_pass_that_fired_and_then_found_nothing_to_claim_sleeps_the_floor_not_the_band() {
    // Real work was done: the floor, so the next look comes soon. Only a pass whose first claim
    // was empty (somebody else holds the work) sleeps the jittered band.
    let fake = FakeStore::new();
    {
        let mut script = fake.script();
        script.probe_default = due(3);
        script.pool.extend(batch("k", 3));
    }
    let mut sweeper = sweeper(fake, &[]);

    let report = sweeper.pass().await;

    let drain = report.drain.expect("the pass drained");
    assert_eq!((drain.stop, drain.fired), (DrainStop::NothingToClaim, 3));
    assert!(!drain.first_claim_empty());
    assert_eq!(report.outcome, Outcome::WorkAvailable);
    assert_eq!(report.sleep, FLOOR);
}
