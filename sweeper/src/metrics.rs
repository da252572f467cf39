//! The sweeper's series, in Prometheus text format (prometheus-client).
//!
//! | series | what |
//! |---|---|
//! | `queen_sweeper_due_backlog` / `_due_capped` | due rows at the last probe (capped count, and whether capped) |
//! | `queen_sweeper_oldest_lateness_ms` | how late the oldest due shard head was at the last probe |
//! | `queen_sweeper_fire_lag_ms` | histogram of claimed timers' lateness at claim |
//! | `queen_sweeper_timers_total{result}` | timers fired or thrown back stale |
//! | `queen_sweeper_segments_total{result}` | segments fired or stale (stale ones are the livelock's signature) |
//! | `queen_sweeper_failures_total{class}` | failed database calls by class |
//! | `queen_sweeper_dlq_total` | timers archived to the DLQ |
//! | `queen_sweeper_fire_config_failures_total` | take or fire calls that failed on the deployment (SQLSTATE class 42); no timer spent an attempt |
//! | `queen_sweeper_fire_pressure` | the fire's pressure level: its batch is halved and its sleep doubled this many times |
//! | `queen_sweeper_phase_seconds{phase}` | time per cycle phase |
//! | `queen_sweeper_sleep_ms` | histogram of planned sleeps |
//! | `queen_sweeper_phase_skipped_total{phase,reason}` | phases shed, switched off, or disabled |
//! | `queen_kv_expired_not_pruned` / `_capped` | expired rows still present at the last probe or prune call, whichever came last (the alarm; fresh on every pass, shed or not) |
//! | `queen_kv_expiry_lag_ms` | how long the oldest unpruned row has been dead |
//! | `queen_sweeper_empty_claims_total` | first claims of a pass that took nothing |
//! | `queen_sweeper_queries_total{kind}` | database calls by kind |

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// `result`: fired or stale.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// The label's value.
    pub result: &'static str,
}

/// `class`: a failure's class.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    /// The label's value.
    pub class: &'static str,
}

/// `phase`: a phase of the cycle.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    /// The label's value.
    pub phase: &'static str,
}

/// `phase` and `reason` of a skipped phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkipLabel {
    /// The phase.
    pub phase: &'static str,
    /// Shed, off, or switched off.
    pub reason: &'static str,
}

/// `kind`: a database call's kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// The label's value.
    pub kind: &'static str,
}

type PhaseHistogram = Family<PhaseLabel, Histogram, fn() -> Histogram>;

/// Every series of one sweeper. Cheap to clone (each series is shared).
#[derive(Debug, Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    /// `queen_sweeper_due_backlog`.
    pub due_backlog: Gauge,
    /// `queen_sweeper_due_capped`.
    pub due_capped: Gauge,
    /// `queen_sweeper_oldest_lateness_ms`.
    pub oldest_lateness_ms: Gauge,
    /// `queen_sweeper_fire_lag_ms`.
    pub fire_lag_ms: Histogram,
    /// `queen_sweeper_timers_total{result}`.
    pub timers: Family<ResultLabel, Counter>,
    /// `queen_sweeper_segments_total{result}`.
    pub segments: Family<ResultLabel, Counter>,
    /// `queen_sweeper_failures_total{class}`.
    pub failures: Family<ClassLabel, Counter>,
    /// `queen_sweeper_dlq_total`.
    pub dlq: Counter,
    /// `queen_sweeper_fire_config_failures_total`.
    pub fire_config_failures: Counter,
    /// `queen_sweeper_fire_pressure`.
    pub fire_pressure: Gauge,
    /// `queen_sweeper_phase_seconds{phase}`.
    pub phase_seconds: PhaseHistogram,
    /// `queen_sweeper_sleep_ms`.
    pub sleep_ms: Histogram,
    /// `queen_sweeper_phase_skipped_total{phase,reason}`.
    pub phase_skipped: Family<SkipLabel, Counter>,
    /// `queen_kv_expired_not_pruned`.
    pub kv_expired_not_pruned: Gauge,
    /// `queen_kv_expired_not_pruned_capped`.
    pub kv_expired_not_pruned_capped: Gauge,
    /// `queen_kv_expiry_lag_ms`.
    pub kv_expiry_lag_ms: Gauge,
    /// `queen_sweeper_empty_claims_total`.
    pub empty_claims: Counter,
    /// `queen_sweeper_queries_total{kind}`.
    pub queries: Family<KindLabel, Counter>,
}

fn phase_histogram() -> Histogram {
    // 100 µs .. ~100 s
    Histogram::new(exponential_buckets(0.0001, 2.0, 20))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Every series, registered and at zero.
    pub fn new() -> Metrics {
        let metrics = Metrics::unregistered();
        let mut registry = Registry::default();
        metrics.register_fire(&mut registry);
        metrics.register_cycle(&mut registry);
        Metrics {
            registry: Arc::new(registry),
            ..metrics
        }
    }

    fn unregistered() -> Metrics {
        Metrics {
            registry: Arc::new(Registry::default()),
            due_backlog: Gauge::default(),
            due_capped: Gauge::default(),
            oldest_lateness_ms: Gauge::default(),
            // 1 ms .. ~9 min
            fire_lag_ms: Histogram::new(exponential_buckets(1.0, 2.0, 20)),
            timers: Family::default(),
            segments: Family::default(),
            failures: Family::default(),
            dlq: Counter::default(),
            fire_config_failures: Counter::default(),
            fire_pressure: Gauge::default(),
            phase_seconds: Family::new_with_constructor(phase_histogram),
            // 1 ms .. ~65 s
            sleep_ms: Histogram::new(exponential_buckets(1.0, 2.0, 17)),
            phase_skipped: Family::default(),
            kv_expired_not_pruned: Gauge::default(),
            kv_expired_not_pruned_capped: Gauge::default(),
            kv_expiry_lag_ms: Gauge::default(),
            empty_claims: Counter::default(),
            queries: Family::default(),
        }
    }

    /// Registers the fire's series: backlog, lateness, results, failures, the DLQ.
    fn register_fire(&self, r: &mut Registry) {
        r.register(
            "queen_sweeper_due_backlog",
            "Due rows at the last probe (capped)",
            self.due_backlog.clone(),
        );
        r.register(
            "queen_sweeper_due_capped",
            "1 when the last probe's due count hit its cap",
            self.due_capped.clone(),
        );
        r.register(
            "queen_sweeper_oldest_lateness_ms",
            "How late the oldest due timer was at the last probe",
            self.oldest_lateness_ms.clone(),
        );
        r.register(
            "queen_sweeper_fire_lag_ms",
            "Lateness of claimed timers at claim",
            self.fire_lag_ms.clone(),
        );
        r.register(
            "queen_sweeper_timers",
            "Timers by fire result (fired, stale)",
            self.timers.clone(),
        );
        r.register(
            "queen_sweeper_segments",
            "Fire segments by result (fired, stale)",
            self.segments.clone(),
        );
        r.register(
            "queen_sweeper_failures",
            "Failed database calls by class",
            self.failures.clone(),
        );
        r.register(
            "queen_sweeper_dlq",
            "Timers archived to the DLQ",
            self.dlq.clone(),
        );
        r.register(
            "queen_sweeper_fire_config_failures",
            "Take or fire calls that failed on the deployment (SQLSTATE class 42); no timer spent an attempt",
            self.fire_config_failures.clone(),
        );
        r.register(
            "queen_sweeper_fire_pressure",
            "Times the fire's batch is halved and its sleep doubled under pressure",
            self.fire_pressure.clone(),
        );
    }

    /// Registers the cycle's series: phases, sleeps, skips, the prune's alarm, calls.
    fn register_cycle(&self, r: &mut Registry) {
        r.register(
            "queen_sweeper_phase_seconds",
            "Time per cycle phase",
            self.phase_seconds.clone(),
        );
        r.register(
            "queen_sweeper_sleep_ms",
            "Planned sleeps",
            self.sleep_ms.clone(),
        );
        r.register(
            "queen_sweeper_phase_skipped",
            "Phases shed or switched off",
            self.phase_skipped.clone(),
        );
        r.register(
            "queen_kv_expired_not_pruned",
            "Expired KV rows still present after the last prune call",
            self.kv_expired_not_pruned.clone(),
        );
        r.register(
            "queen_kv_expired_not_pruned_capped",
            "1 when the expired-not-pruned count hit its cap",
            self.kv_expired_not_pruned_capped.clone(),
        );
        r.register(
            "queen_kv_expiry_lag_ms",
            "How long the oldest unpruned KV row has been dead",
            self.kv_expiry_lag_ms.clone(),
        );
        r.register(
            "queen_sweeper_empty_claims",
            "First claims of a pass that took nothing",
            self.empty_claims.clone(),
        );
        r.register(
            "queen_sweeper_queries",
            "Database calls by kind",
            self.queries.clone(),
        );
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }

    /// Every series without the closing `# EOF`, so that a process can append series of its own
    /// before closing the exposition (the broker's HTTP API does).
    pub fn encode_series(&self, text: &mut String) -> std::fmt::Result {
        prometheus_client::encoding::text::encode_registry(text, &self.registry)
    }

    /// Publishes the prune's alarm (from the probe on every pass, and after every prune call).
    pub fn publish_kv_alarm(&self, alarm: crate::types::ExpiredKv) {
        self.kv_expired_not_pruned
            .set(i64::try_from(alarm.expired).unwrap_or(i64::MAX));
        self.kv_expired_not_pruned_capped
            .set(i64::from(alarm.capped));
        self.kv_expiry_lag_ms
            .set(i64::try_from(alarm.lag_ms).unwrap_or(i64::MAX));
    }

    /// Counts one database call of `kind`.
    pub fn query(&self, kind: &'static str) {
        self.queries.get_or_create(&KindLabel { kind }).inc();
    }

    /// Counts a skipped phase.
    pub fn skipped(&self, phase: &'static str, reason: &'static str) {
        self.phase_skipped
            .get_or_create(&SkipLabel { phase, reason })
            .inc();
    }

    /// Counts a failed call by class.
    pub fn failed(&self, class: crate::classify::Class) {
        self.failures
            .get_or_create(&ClassLabel {
                class: class.as_str(),
            })
            .inc();
    }

    /// Timers counted with `result`.
    pub fn timers_result(&self, result: &'static str) -> u64 {
        self.timers.get_or_create(&ResultLabel { result }).get()
    }

    /// Segments counted with `result`.
    pub fn segments_result(&self, result: &'static str) -> u64 {
        self.segments.get_or_create(&ResultLabel { result }).get()
    }

    /// Calls counted of `kind`.
    pub fn queries_of(&self, kind: &'static str) -> u64 {
        self.queries.get_or_create(&KindLabel { kind }).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_documented_series_is_rendered() {
        let metrics = Metrics::new();
        metrics.query("probe");
        metrics.skipped("prune", "shed");
        metrics.failed(crate::classify::Class::Transient);
        metrics
            .timers
            .get_or_create(&ResultLabel { result: "fired" })
            .inc_by(3);
        metrics
            .segments
            .get_or_create(&ResultLabel { result: "stale" })
            .inc();
        metrics
            .phase_seconds
            .get_or_create(&PhaseLabel { phase: "probe" })
            .observe(0.002);
        let text = metrics.render();
        for series in [
            "queen_sweeper_due_backlog",
            "queen_sweeper_due_capped",
            "queen_sweeper_oldest_lateness_ms",
            "queen_sweeper_fire_lag_ms_bucket",
            "queen_sweeper_timers_total{result=\"fired\"} 3",
            "queen_sweeper_segments_total{result=\"stale\"} 1",
            "queen_sweeper_failures_total{class=\"transient\"} 1",
            "queen_sweeper_dlq_total",
            "queen_sweeper_phase_seconds_bucket{le=",
            "queen_sweeper_sleep_ms_bucket",
            "queen_sweeper_phase_skipped_total{phase=\"prune\",reason=\"shed\"} 1",
            "queen_kv_expired_not_pruned ",
            "queen_kv_expired_not_pruned_capped",
            "queen_kv_expiry_lag_ms",
            "queen_sweeper_empty_claims_total",
            "queen_sweeper_queries_total{kind=\"probe\"} 1",
        ] {
            assert!(text.contains(series), "missing {series:?} in:\n{text}");
        }
    }
}
