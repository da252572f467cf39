//! Phase C: the usage rollup and the KV prune, each on its own gate.
//!
//! A phase whose cost tracks space rather than work is not paced by the phase that tracks work:
//! the prune runs every `QUEEN_KV_EXPIRE_EVERY_MS`, the rollup every `QUEEN_KV_USAGE_EVERY_MS`,
//! whatever the fire is doing.
//!
//! Priority, from the top: fire, rollup, prune. Under pressure (consecutive passes that ended on a
//! budget or a capped backlog) the sweeper sheds from the bottom: first the prune (its cost is
//! purely disk; reads stay correct), then the rollup (precision, not delivery). The fire is never
//! shed.
//!
//! A SQLSTATE class 42 error (the function is missing or the schema is wrong) switches that phase
//! off for the life of the process, with one warning naming the function and the fix; the loop
//! keeps firing timers. Other errors skip the phase until its next gate.

use std::time::Duration;

use tokio::time::Instant;

use crate::admission::Admission;
use crate::classify::Class;
use crate::config::Config;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::port::Store;
use crate::types::{ExpiredKv, ShardOrder};

/// Expired-but-present KV rows the alarm counts up to, on every pass (the probe carries it) and
/// after every prune call. Not measured: bounds the count's cost to this many index entries.
pub const KV_ALARM_CAP: u32 = 10_000;

/// Consecutive pressured passes after which the prune is shed. Not measured.
pub const SHED_PRUNE_AFTER: u32 = 1;
/// Consecutive pressured passes after which the rollup is shed too. Not measured.
pub const SHED_ROLLUP_AFTER: u32 = 3;
/// Prune calls per pass at most (each deletes up to `QUEEN_KV_EXPIRE_BATCH`). Not measured.
pub const PRUNE_CALLS_PER_PASS: u32 = 16;
/// Tenants per rollup step. Not measured.
pub const ROLLUP_TENANTS_PER_STEP: u32 = 500;
/// Rollup steps per pass; a rollup that is not done continues at the next pass. Not measured.
pub const ROLLUP_STEPS_PER_PASS: u32 = 8;

/// One slow phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowPhase {
    /// The usage rollup (`queen.kv_usage_step_v1`).
    Rollup,
    /// The KV prune (`queen.kv_expire_step_v1`).
    Prune,
}

impl SlowPhase {
    /// The phase's label in metrics and logs.
    pub fn name(self) -> &'static str {
        match self {
            SlowPhase::Rollup => "rollup",
            SlowPhase::Prune => "prune",
        }
    }

    fn function(self) -> &'static str {
        match self {
            SlowPhase::Rollup => "queen.kv_usage_step_v1",
            SlowPhase::Prune => "queen.kv_expire_step_v1",
        }
    }
}

#[derive(Debug)]
struct Gate {
    every: Duration,
    next_at: Instant,
    /// Switched off for the life of the process (class 42).
    off: bool,
}

impl Gate {
    fn open(&self, now: Instant) -> bool {
        !self.off && now >= self.next_at
    }
}

/// What phase C is told by the rest of the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubclockInputs {
    /// The pass's clock reading.
    pub now: Instant,
    /// Consecutive passes that ended on a budget or a capped backlog: sheds from the bottom.
    pub pressure: u32,
    /// Expired-but-present KV rows the probe counted (`None`: not asked, or the probe failed).
    /// The prune runs only when this is not `Some(0)`.
    pub kv_expired: Option<u64>,
}

/// What phase C did in one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SubclockReport {
    /// Rollup calls made.
    pub rollup_steps: u32,
    /// Prune calls made.
    pub prune_calls: u32,
    /// KV rows the prune deleted.
    pub pruned: u64,
    /// The rollup was due but shed under pressure.
    pub rollup_shed: bool,
    /// The prune was due but shed under pressure.
    pub prune_shed: bool,
    /// The prune was due but the probe saw nothing expired: no call was made.
    pub prune_idle: bool,
}

/// The two gates and the rollup's cursor.
#[derive(Debug)]
pub struct SubClocks {
    rollup: Gate,
    prune: Gate,
    prune_batch: u32,
    /// Where an unfinished rollup resumes.
    rollup_cursor: Option<String>,
    rollup_in_progress: bool,
}

impl SubClocks {
    /// Gates for a broker starting at `now`. The prune's first run is now; the rollup's is
    /// jittered over its period (`jitter` in [0, 1]) so brokers started together do not all
    /// roll up at once.
    pub fn new(config: &Config, now: Instant, jitter: f64) -> SubClocks {
        let jitter = if jitter.is_nan() {
            0.5
        } else {
            jitter.clamp(0.0, 1.0)
        };
        SubClocks {
            rollup: Gate {
                every: config.kv_usage_every(),
                next_at: now + config.kv_usage_every().mul_f64(jitter),
                off: false,
            },
            prune: Gate {
                every: config.kv_expire_every(),
                next_at: now,
                off: false,
            },
            prune_batch: config.kv_expire_batch,
            rollup_cursor: None,
            rollup_in_progress: false,
        }
    }

    /// Whether `phase` is switched off for the life of the process (class 42).
    pub fn is_off(&self, phase: SlowPhase) -> bool {
        match phase {
            SlowPhase::Rollup => self.rollup.off,
            SlowPhase::Prune => self.prune.off,
        }
    }

    /// Runs whichever phases are due, shedding from the bottom under pressure.
    pub async fn run<S: Store>(
        &mut self,
        store: &S,
        admission: &Admission,
        metrics: &Metrics,
        shards: &ShardOrder,
        inputs: SubclockInputs,
    ) -> SubclockReport {
        let SubclockInputs {
            now,
            pressure,
            kv_expired,
        } = inputs;
        let mut report = SubclockReport::default();
        if self.rollup.open(now) || (self.rollup_in_progress && !self.rollup.off) {
            if pressure >= SHED_ROLLUP_AFTER {
                report.rollup_shed = true;
                metrics.skipped(SlowPhase::Rollup.name(), "shed");
            } else {
                report.rollup_steps = self.rollup(store, admission, metrics, now).await;
            }
        }
        if self.prune.open(now) {
            if pressure >= SHED_PRUNE_AFTER {
                report.prune_shed = true;
                metrics.skipped(SlowPhase::Prune.name(), "shed");
            } else if kv_expired == Some(0) {
                // Nothing to prune: no call, and the gate moves on as if it ran.
                report.prune_idle = true;
                self.prune.next_at = now + self.prune.every;
            } else {
                let (calls, deleted) = self.prune(store, admission, metrics, shards, now).await;
                report.prune_calls = calls;
                report.pruned = deleted;
            }
        }
        report
    }

    async fn rollup<S: Store>(
        &mut self,
        store: &S,
        admission: &Admission,
        metrics: &Metrics,
        now: Instant,
    ) -> u32 {
        let mut steps = 0;
        while steps < ROLLUP_STEPS_PER_PASS {
            let slot = admission.maintenance().await;
            metrics.query("usage");
            steps += 1;
            match store
                .usage_step(
                    &slot,
                    self.rollup_cursor.as_deref(),
                    ROLLUP_TENANTS_PER_STEP,
                )
                .await
            {
                Ok(step) => {
                    self.rollup_cursor = step.last_tenant.clone();
                    if step.done {
                        self.rollup_cursor = None;
                        self.rollup_in_progress = false;
                        self.rollup.next_at = now + self.rollup.every;
                        return steps;
                    }
                    self.rollup_in_progress = true;
                }
                Err(error) => {
                    self.phase_failed(SlowPhase::Rollup, &error, metrics, now);
                    return steps;
                }
            }
        }
        steps
    }

    async fn prune<S: Store>(
        &mut self,
        store: &S,
        admission: &Admission,
        metrics: &Metrics,
        shards: &ShardOrder,
        now: Instant,
    ) -> (u32, u64) {
        let (mut calls, mut deleted) = (0, 0);
        self.prune.next_at = now + self.prune.every;
        while calls < PRUNE_CALLS_PER_PASS {
            let slot = admission.maintenance().await;
            metrics.query("prune");
            calls += 1;
            match store.kv_expire_step(&slot, shards, self.prune_batch).await {
                Ok(step) => {
                    // The alarm is published on every call, including those that delete nothing.
                    metrics.publish_kv_alarm(ExpiredKv {
                        expired: step.unpruned,
                        capped: step.unpruned_capped,
                        lag_ms: step.lag_ms,
                    });
                    deleted += step.deleted;
                    if step.done || step.deleted == 0 {
                        break;
                    }
                }
                Err(error) => {
                    self.phase_failed(SlowPhase::Prune, &error, metrics, now);
                    break;
                }
            }
        }
        (calls, deleted)
    }

    /// Switches `phase` off for the life of the process after a configuration error (class 42)
    /// that surfaced outside the phase's own call (the probe's KV part).
    pub fn switch_off(&mut self, phase: SlowPhase, error: &Error, metrics: &Metrics) {
        assert_eq!(
            error.class(),
            Class::Config,
            "only class 42 switches a phase off"
        );
        let gate = match phase {
            SlowPhase::Rollup => &mut self.rollup,
            SlowPhase::Prune => &mut self.prune,
        };
        gate.off = true;
        metrics.skipped(phase.name(), "off");
        tracing::error!(
            %error,
            "the {} is switched off for the life of this process: {} is missing or unusable (a configuration error). Timers keep firing. Fix: apply sql/030_kv_sweeper.sql (`queen-sweeper run` applies sql/ at start unless --no-apply-schema) and check the sweeper's role may execute {}, then restart",
            phase.name(),
            phase.function(),
            phase.function()
        );
    }

    fn phase_failed(&mut self, phase: SlowPhase, error: &Error, metrics: &Metrics, now: Instant) {
        let class = error.class();
        metrics.failed(class);
        if class == Class::Config {
            self.switch_off(phase, error, metrics);
        } else {
            let gate = match phase {
                SlowPhase::Rollup => &mut self.rollup,
                SlowPhase::Prune => &mut self.prune,
            };
            gate.next_at = now + gate.every;
            if phase == SlowPhase::Rollup {
                // An unfinished rollup resumes from its cursor, but at the next gate, not the
                // next pass: the error may be the database asking for room.
                self.rollup_in_progress = false;
            }
            tracing::warn!(%error, phase = phase.name(), "slow phase failed; retrying at its next gate");
        }
    }
}
