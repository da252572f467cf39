//! Every knob of the sweeper, from the environment, with documented defaults and a loud
//! [`Config::validate`]: a bad value fails at start, naming the variable, the value and what is
//! allowed.
//!
//! A default that the soak has measured carries a dated block in `sql/001_log_schema.sql` (the
//! setting, the date, the rig, the symptom, the number observed); one that has not still carries
//! its `[not measured]` marker there.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::Error;
use crate::floors::FloorPolicy;

/// Prefixes of the variables this module owns; an unknown variable under them is a typo and an
/// error (a misspelt knob silently keeping its default is how a guess outlives its fix).
const OWNED_PREFIXES: &[&str] = &["QUEEN_SWEEPER_", "QUEEN_KV_EXPIRE_", "QUEEN_KV_USAGE_"];

/// The variable that must not exist.
pub const FORBIDDEN_SHARDS_VAR: &str = "QUEEN_SWEEPER_SHARDS";

/// One knob: its variable, its default, its unit and bounds, and what it is for.
#[derive(Debug, Clone, Copy)]
pub struct Knob {
    /// The environment variable.
    pub var: &'static str,
    /// The value when the variable is unset.
    pub default: u64,
    /// The smallest value allowed.
    pub min: u64,
    /// The largest value allowed.
    pub max: u64,
    /// What it is for, in the validation message.
    pub help: &'static str,
}

macro_rules! knobs {
    ($($name:ident = $var:literal, $default:expr, [$min:expr, $max:expr], $help:literal;)*) => {
        $(#[doc = $help] pub const $name: Knob = Knob { var: $var, default: $default, min: $min, max: $max, help: $help };)*
        /// Every knob, in documentation order.
        pub const ALL: &[Knob] = &[$($name),*];
    };
}

/// The knobs. Durations are milliseconds, sizes bytes, counts rows.
pub mod knob {
    use super::Knob;

    const HOUR_MS: u64 = 3_600_000;

    knobs! {
        MIN_SLEEP_MS = "QUEEN_SWEEPER_MIN_SLEEP_MS", 1, [1, 60_000],
            "floor of the sleep when work is genuinely available";
        MAX_SLEEP_MS = "QUEEN_SWEEPER_MAX_SLEEP_MS", 1_000, [1, 60_000],
            "ceiling of every sleep: the worst-case delay for a timer scheduled on another broker";
        EMPTY_CLAIM_MIN_MS = "QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS", 15, [1, 60_000],
            "lower end of the jittered band after an empty claim";
        EMPTY_CLAIM_MAX_MS = "QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS", 200, [1, 60_000],
            "upper end of the jittered band after an empty claim";
        LEASE_MS = "QUEEN_SWEEPER_LEASE_MS", 30_000, [100, HOUR_MS],
            "claim lease; a pass stops claiming once it has spent half of it";
        CLAIM_BATCH = "QUEEN_SWEEPER_CLAIM_BATCH", 800, [1, 100_000],
            "rows per claim call";
        BULK_BATCH = "QUEEN_SWEEPER_BULK_BATCH", 20_000, [0, 100_000],
            "rows per take of the bulk lane: once a pass's take comes back full, takes of this many rows, oldest first and with no fairness round, run beside the pass's own on a second connection until one comes back short; 0, or not above QUEEN_SWEEPER_CLAIM_BATCH: off";
        CYCLE_MAX_ROWS = "QUEEN_SWEEPER_CYCLE_MAX_ROWS", 60_000, [1, 10_000_000],
            "rows per drain pass before the probe runs again";
        MAX_FIRE_BYTES = "QUEEN_SWEEPER_MAX_FIRE_BYTES", 33_554_432, [1024, 1024 * 1024 * 1024],
            "bytes per fire transaction; a bigger batch splits into several calls";
        DUE_CAP = "QUEEN_SWEEPER_DUE_CAP", 2_000, [1, 10_000_000],
            "the probe counts due rows up to this number";
        STATEMENT_TIMEOUT_MS = "QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS", 5_000, [10, HOUR_MS],
            "every database call is cancelled server-side after this long";
        MAX_ATTEMPTS = "QUEEN_SWEEPER_MAX_ATTEMPTS", 5, [1, 1_000],
            "failed fires (not counting transient ones) before a timer goes to the DLQ";
        FIRE_TAKE = "QUEEN_SWEEPER_FIRE_TAKE", 1, [0, 1],
            "1: each batch is taken, fired and deleted in one transaction; 0: each batch is claimed with a lease, then fired (the seed's two-phase path, kept to compare)";
        HEAD_RESCAN_MS = "QUEEN_SWEEPER_HEAD_RESCAN_MS", 30_000, [0, HOUR_MS],
            "the probe reads every shard from its start this often, and from its head floor in between (past the dead rows a held snapshot keeps); 0: always from the start";
        HEAD_FLOOR_MARGIN_MS = "QUEEN_SWEEPER_HEAD_FLOOR_MARGIN_MS", 1_000, [0, HOUR_MS],
            "a head floor stays this far below the probe's now: a write slower than this to commit may wait for the next read from the start";
        KV_EXPIRE_EVERY_MS = "QUEEN_KV_EXPIRE_EVERY_MS", 1_000, [1, 24 * HOUR_MS],
            "cadence of the KV prune";
        KV_EXPIRE_BATCH = "QUEEN_KV_EXPIRE_BATCH", 1_000, [1, 1_000_000],
            "rows deleted per prune call";
        KV_USAGE_EVERY_MS = "QUEEN_KV_USAGE_EVERY_MS", 300_000, [1, 24 * HOUR_MS],
            "cadence of the usage rollup";
    }
}

/// The validated knobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `QUEEN_SWEEPER_MIN_SLEEP_MS`.
    pub sleep_ms_min: u64,
    /// `QUEEN_SWEEPER_MAX_SLEEP_MS`.
    pub sleep_ms_max: u64,
    /// `QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS`.
    pub empty_claim_ms_min: u64,
    /// `QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS`.
    pub empty_claim_ms_max: u64,
    /// `QUEEN_SWEEPER_LEASE_MS`.
    pub lease_ms: u64,
    /// `QUEEN_SWEEPER_CLAIM_BATCH`.
    pub claim_batch: u32,
    /// `QUEEN_SWEEPER_BULK_BATCH`.
    pub bulk_batch: u32,
    /// `QUEEN_SWEEPER_CYCLE_MAX_ROWS`.
    pub cycle_max_rows: u32,
    /// `QUEEN_SWEEPER_MAX_FIRE_BYTES`.
    pub max_fire_bytes: u64,
    /// `QUEEN_SWEEPER_DUE_CAP`.
    pub due_cap: u32,
    /// `QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS`.
    pub statement_timeout_ms: u64,
    /// `QUEEN_SWEEPER_MAX_ATTEMPTS`.
    pub max_attempts: u32,
    /// `QUEEN_SWEEPER_FIRE_TAKE`: batches are taken in one transaction (true) or claimed with a
    /// lease, then fired (false).
    pub fire_take: bool,
    /// `QUEEN_SWEEPER_HEAD_RESCAN_MS`.
    pub head_rescan_ms: u64,
    /// `QUEEN_SWEEPER_HEAD_FLOOR_MARGIN_MS`.
    pub head_floor_margin_ms: u64,
    /// `QUEEN_KV_EXPIRE_EVERY_MS`.
    pub kv_expire_every_ms: u64,
    /// `QUEEN_KV_EXPIRE_BATCH`.
    pub kv_expire_batch: u32,
    /// `QUEEN_KV_USAGE_EVERY_MS`.
    pub kv_usage_every_ms: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config::from_values(|knob| knob.default)
    }
}

impl Config {
    /// Reads the process environment and validates.
    pub fn from_env() -> Result<Config, Error> {
        Config::from_vars(std::env::vars())
    }

    /// Reads `(name, value)` pairs (the environment, or a test's) and validates. Variables not
    /// owned by the sweeper are ignored.
    pub fn from_vars<I, K, V>(vars: I) -> Result<Config, Error>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let vars: BTreeMap<String, String> = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(k, _)| OWNED_PREFIXES.iter().any(|prefix| k.starts_with(prefix)))
            .collect();
        let mut problems = Vec::new();
        if let Some(value) = vars.get(FORBIDDEN_SHARDS_VAR) {
            problems.push(format!(
                "{FORBIDDEN_SHARDS_VAR}={value:?} is set, and it must not exist: the shard count is 64, fixed forever in the schema (hashtextextended(key, 0) & 63), and every broker scans all 64. Shards spread contention; they never partition responsibility, because a broker that owned shards would orphan their timers when it died. Unset it."
            ));
        }
        for name in vars.keys() {
            if name != FORBIDDEN_SHARDS_VAR && !knob::ALL.iter().any(|knob| knob.var == name) {
                let known: Vec<&str> = knob::ALL.iter().map(|knob| knob.var).collect();
                problems.push(format!(
                    "{name} is not a sweeper setting (known: {})",
                    known.join(", ")
                ));
            }
        }
        let mut parsed = BTreeMap::new();
        for knob in knob::ALL {
            match vars.get(knob.var) {
                None => {
                    parsed.insert(knob.var, knob.default);
                }
                Some(raw) => match knob.parse(raw) {
                    Ok(value) => {
                        parsed.insert(knob.var, value);
                    }
                    Err(problem) => problems.push(problem),
                },
            }
        }
        if !problems.is_empty() {
            return Err(Error::Config(problems.join("\n")));
        }
        let config = Config::from_values(|knob| parsed[knob.var]);
        config.validate()?;
        Ok(config)
    }

    fn from_values(value: impl Fn(&Knob) -> u64) -> Config {
        let narrow = |knob: &Knob| u32::try_from(value(knob)).unwrap_or(u32::MAX);
        Config {
            sleep_ms_min: value(&knob::MIN_SLEEP_MS),
            sleep_ms_max: value(&knob::MAX_SLEEP_MS),
            empty_claim_ms_min: value(&knob::EMPTY_CLAIM_MIN_MS),
            empty_claim_ms_max: value(&knob::EMPTY_CLAIM_MAX_MS),
            lease_ms: value(&knob::LEASE_MS),
            claim_batch: narrow(&knob::CLAIM_BATCH),
            bulk_batch: narrow(&knob::BULK_BATCH),
            cycle_max_rows: narrow(&knob::CYCLE_MAX_ROWS),
            max_fire_bytes: value(&knob::MAX_FIRE_BYTES),
            due_cap: narrow(&knob::DUE_CAP),
            statement_timeout_ms: value(&knob::STATEMENT_TIMEOUT_MS),
            max_attempts: narrow(&knob::MAX_ATTEMPTS),
            fire_take: value(&knob::FIRE_TAKE) == 1,
            head_rescan_ms: value(&knob::HEAD_RESCAN_MS),
            head_floor_margin_ms: value(&knob::HEAD_FLOOR_MARGIN_MS),
            kv_expire_every_ms: value(&knob::KV_EXPIRE_EVERY_MS),
            kv_expire_batch: narrow(&knob::KV_EXPIRE_BATCH),
            kv_usage_every_ms: value(&knob::KV_USAGE_EVERY_MS),
        }
    }

    /// Checks every bound and every relation between knobs; the error lists every problem.
    pub fn validate(&self) -> Result<(), Error> {
        let mut problems = self.bound_problems();
        problems.extend(self.relation_problems());
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Config(problems.join("\n")))
        }
    }

    /// Every knob with its value here, in [`knob::ALL`]'s order.
    pub fn values(&self) -> [(&'static Knob, u64); knob::ALL.len()] {
        [
            (&knob::MIN_SLEEP_MS, self.sleep_ms_min),
            (&knob::MAX_SLEEP_MS, self.sleep_ms_max),
            (&knob::EMPTY_CLAIM_MIN_MS, self.empty_claim_ms_min),
            (&knob::EMPTY_CLAIM_MAX_MS, self.empty_claim_ms_max),
            (&knob::LEASE_MS, self.lease_ms),
            (&knob::CLAIM_BATCH, u64::from(self.claim_batch)),
            (&knob::BULK_BATCH, u64::from(self.bulk_batch)),
            (&knob::CYCLE_MAX_ROWS, u64::from(self.cycle_max_rows)),
            (&knob::MAX_FIRE_BYTES, self.max_fire_bytes),
            (&knob::DUE_CAP, u64::from(self.due_cap)),
            (&knob::STATEMENT_TIMEOUT_MS, self.statement_timeout_ms),
            (&knob::MAX_ATTEMPTS, u64::from(self.max_attempts)),
            (&knob::FIRE_TAKE, u64::from(self.fire_take)),
            (&knob::HEAD_RESCAN_MS, self.head_rescan_ms),
            (&knob::HEAD_FLOOR_MARGIN_MS, self.head_floor_margin_ms),
            (&knob::KV_EXPIRE_EVERY_MS, self.kv_expire_every_ms),
            (&knob::KV_EXPIRE_BATCH, u64::from(self.kv_expire_batch)),
            (&knob::KV_USAGE_EVERY_MS, self.kv_usage_every_ms),
        ]
    }

    /// Each knob against its own bounds.
    fn bound_problems(&self) -> Vec<String> {
        self.values()
            .into_iter()
            .filter(|(knob, value)| !(knob.min..=knob.max).contains(value))
            .map(|(knob, value)| knob.out_of_range(&value.to_string()))
            .collect()
    }

    /// The relations between knobs: (holds, left, how it fails, right, why it matters).
    fn relation_problems(&self) -> Vec<String> {
        let relations = [
            (
                self.sleep_ms_min <= self.sleep_ms_max,
                (&knob::MIN_SLEEP_MS, self.sleep_ms_min),
                "is above",
                (&knob::MAX_SLEEP_MS, self.sleep_ms_max),
                "the floor must not exceed the ceiling",
            ),
            (
                self.empty_claim_ms_min <= self.empty_claim_ms_max,
                (&knob::EMPTY_CLAIM_MIN_MS, self.empty_claim_ms_min),
                "is above",
                (&knob::EMPTY_CLAIM_MAX_MS, self.empty_claim_ms_max),
                "the empty-claim band is inverted",
            ),
            (
                self.empty_claim_ms_max <= self.sleep_ms_max,
                (&knob::EMPTY_CLAIM_MAX_MS, self.empty_claim_ms_max),
                "is above",
                (&knob::MAX_SLEEP_MS, self.sleep_ms_max),
                "no sleep may exceed the ceiling, which is the cross-broker delivery bound",
            ),
            (
                self.empty_claim_ms_min >= self.sleep_ms_min,
                (&knob::EMPTY_CLAIM_MIN_MS, self.empty_claim_ms_min),
                "is below",
                (&knob::MIN_SLEEP_MS, self.sleep_ms_min),
                "backing off after an empty claim must not be faster than the floor",
            ),
            (
                self.lease_ms >= 2 * self.statement_timeout_ms,
                (&knob::LEASE_MS, self.lease_ms),
                "is shorter than twice",
                (&knob::STATEMENT_TIMEOUT_MS, self.statement_timeout_ms),
                "a pass stops claiming at half the lease, so a fire that may run for a whole statement timeout would outlive its lease and come back stale",
            ),
            (
                self.claim_batch <= self.cycle_max_rows,
                (&knob::CLAIM_BATCH, u64::from(self.claim_batch)),
                "is above",
                (&knob::CYCLE_MAX_ROWS, u64::from(self.cycle_max_rows)),
                "one claim may not exceed the whole pass",
            ),
        ];
        relations
            .into_iter()
            .filter(|(holds, ..)| !holds)
            .map(|(_, (left, l), how, (right, r), why)| {
                format!("{}={l} {how} {}={r}: {why}", left.var, right.var)
            })
            .collect()
    }

    /// The claim lease.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// The server-side statement timeout.
    pub fn statement_timeout(&self) -> Duration {
        Duration::from_millis(self.statement_timeout_ms)
    }

    /// The head floors' policy: each shard read from its start every `QUEEN_SWEEPER_HEAD_RESCAN_MS`
    /// (the shards in turns; 0: no floors), each floor at least
    /// `QUEEN_SWEEPER_HEAD_FLOOR_MARGIN_MS` below the probe's now.
    pub fn head_floors(&self) -> FloorPolicy {
        FloorPolicy {
            rescan: (self.head_rescan_ms > 0).then(|| Duration::from_millis(self.head_rescan_ms)),
            margin: Duration::from_millis(self.head_floor_margin_ms),
        }
    }

    /// The prune's cadence.
    pub fn kv_expire_every(&self) -> Duration {
        Duration::from_millis(self.kv_expire_every_ms)
    }

    /// The rollup's cadence.
    pub fn kv_usage_every(&self) -> Duration {
        Duration::from_millis(self.kv_usage_every_ms)
    }

    /// The knobs as `VAR=value` lines, for start-up logs and reports.
    pub fn describe(&self) -> Vec<String> {
        self.values()
            .into_iter()
            .map(|(knob, value)| format!("{}={value}", knob.var))
            .collect()
    }
}

impl Knob {
    /// Parses a raw value, bounds included; the error names the variable, the value and the
    /// allowed range. The broker's API limits use it too.
    pub fn parse(&self, raw: &str) -> std::result::Result<u64, String> {
        let trimmed = raw.trim();
        if trimmed.starts_with('-') {
            return Err(self.out_of_range(raw));
        }
        let value: u64 = trimmed.parse().map_err(|_| {
            format!(
                "{}={raw:?} is not a whole number; allowed: an integer in {}..={} ({})",
                self.var, self.min, self.max, self.help
            )
        })?;
        if (self.min..=self.max).contains(&value) {
            Ok(value)
        } else {
            Err(self.out_of_range(raw))
        }
    }

    /// The message for a value outside the knob's bounds.
    pub fn out_of_range(&self, raw: &str) -> String {
        format!(
            "{}={raw:?} is out of range; allowed: an integer in {}..={} ({})",
            self.var, self.min, self.max, self.help
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<Config, String> {
        Config::from_vars(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn no_variables_gives_the_documented_defaults() {
        let c = config(&[]).expect("defaults are valid");
        assert_eq!(c, Config::default());
        // The floor was 5 ms until the experiments at d852934 (reports/2026-12-05-2c-24g-pg15):
        // its drain edge at 5 ms did not clear 50 ms's range, and the decision rule's margin
        // moved it one step, to 1 ms (probes 41/s per broker there, within 2× of the least).
        assert_eq!((c.sleep_ms_min, c.sleep_ms_max), (1, 1000));
        // The band's lower end was 25 ms until the experiments at 084692f: with the bulk lane,
        // bursts were 29.9 ms late (p99) at 5 ms and 68.7 at 25 (2× the least is 59.8); 15 ms
        // calls 145 times a second against 371 at 5. Its upper end is undecided since a5b8b88.
        assert_eq!((c.empty_claim_ms_min, c.empty_claim_ms_max), (15, 200));
        // CYCLE_MAX_ROWS was 5 000 until the experiments at 398d97f
        // (reports/2026-12-07-2c-24g-pg15): the drain was within 10% of its best only at 60 000
        // rows, and the small tenant's p99 stayed flat at every pass length. Measured again at
        // d7e48d1, 60 000 stays by least change (safe on both sides), though 5 000 drained as
        // fast there.
        // CLAIM_BATCH was 200 until the experiments at 084692f: with the bulk lane the drain was
        // 38 978 timers/s at 200 and 46 243 at 800, and a small tenant's p99 stayed 26-31 ms up
        // to 2 000 rows. BULK_BATCH (5 000 when it came in at 10baf7c) moved to 20 000 there;
        // measured again at a5b8b88 with pushes timed from their schedule, it is undecided.
        assert_eq!(
            (c.lease_ms, c.claim_batch, c.bulk_batch, c.cycle_max_rows),
            (30_000, 800, 20_000, 60_000)
        );
        // 8 MiB in the design. One run per point found push p99 four times worse at 8 MiB than
        // at 1 MiB (reports/2026-12-02-2c-24g-pg15), so it was 1 MiB; three runs per point at
        // d852934 (reports/2026-12-05-2c-24g-pg15) found push p99 within 2× of no sweeper at
        // every size (medians 4.1 ms at 1 MiB, 3.6 at 8 MiB) and the drain of 64 KiB payloads at
        // 5 148 timers/s at 1 MiB against 17 988 at 8 MiB: the decision rule gave 8 MiB. Those
        // 64 KiB payloads compressed, and no 200-row take passed 12.9 MiB. With 256 KiB
        // incompressible payloads at 234963c (51 MiB takes), push p99 was 38.6 ms at 8 MiB
        // against 3.6 with no sweeper, 6.9 at 32 MiB: the rule gives 32 MiB. Those pushes were
        // timed from their send, which hid a stalled pusher's skipped pushes; timed from their
        // schedule (run at a5b8b88), 32 MiB reads 761 ms and 4 MiB 16.2, and the rule decides
        // nothing (the drain at 4 MiB is 79% of its best): 32 MiB stays, undecided.
        assert_eq!(c.max_fire_bytes, 32 * 1024 * 1024);
        assert_eq!(c.due_cap, 2_000);
        assert_eq!(
            (c.kv_expire_every_ms, c.kv_expire_batch, c.kv_usage_every_ms),
            (1_000, 1_000, 300_000)
        );
    }

    #[test]
    fn a_valid_value_is_taken() {
        let c = config(&[
            ("QUEEN_SWEEPER_LEASE_MS", "60000"),
            ("QUEEN_KV_EXPIRE_BATCH", " 250 "),
        ])
        .unwrap();
        assert_eq!(c.lease_ms, 60_000);
        assert_eq!(c.kv_expire_batch, 250);
    }

    #[test]
    fn unrelated_variables_are_ignored() {
        assert!(config(&[("PATH", "/bin"), ("QUEEN_TEST_DATABASE_URL", "x")]).is_ok());
    }

    #[test]
    fn zero_names_the_variable_the_value_and_the_range() {
        let e = config(&[("QUEEN_SWEEPER_CLAIM_BATCH", "0")]).unwrap_err();
        assert!(e.contains("QUEEN_SWEEPER_CLAIM_BATCH=\"0\""), "{e}");
        assert!(e.contains("1..=100000"), "{e}");
    }

    #[test]
    fn negative_and_non_numeric_values_are_rejected_by_name() {
        let e = config(&[("QUEEN_SWEEPER_MAX_SLEEP_MS", "-5")]).unwrap_err();
        assert!(
            e.contains("QUEEN_SWEEPER_MAX_SLEEP_MS=\"-5\" is out of range"),
            "{e}"
        );
        let e = config(&[("QUEEN_KV_USAGE_EVERY_MS", "5m")]).unwrap_err();
        assert!(
            e.contains("QUEEN_KV_USAGE_EVERY_MS=\"5m\" is not a whole number"),
            "{e}"
        );
        let e = config(&[("QUEEN_SWEEPER_DUE_CAP", "")]).unwrap_err();
        assert!(e.contains("QUEEN_SWEEPER_DUE_CAP"), "{e}");
        let e = config(&[("QUEEN_SWEEPER_LEASE_MS", "99999999999999999999999")]).unwrap_err();
        assert!(e.contains("QUEEN_SWEEPER_LEASE_MS"), "{e}");
    }

    #[test]
    fn min_above_max_is_rejected() {
        let e = config(&[("QUEEN_SWEEPER_MIN_SLEEP_MS", "2000")]).unwrap_err();
        assert!(e.contains("the floor must not exceed the ceiling"), "{e}");
        let e = config(&[
            ("QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS", "150"),
            ("QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS", "100"),
        ])
        .unwrap_err();
        assert!(e.contains("band is inverted"), "{e}");
    }

    #[test]
    fn an_empty_claim_band_above_the_ceiling_is_rejected() {
        let e = config(&[("QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS", "1500")]).unwrap_err();
        assert!(e.contains("no sleep may exceed the ceiling"), "{e}");
    }

    #[test]
    fn a_lease_shorter_than_twice_the_statement_timeout_is_rejected() {
        let e = config(&[
            ("QUEEN_SWEEPER_LEASE_MS", "9999"),
            ("QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS", "5000"),
        ])
        .unwrap_err();
        assert!(e.contains("QUEEN_SWEEPER_LEASE_MS=9999 is shorter than twice QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS=5000"), "{e}");
        assert!(
            config(&[
                ("QUEEN_SWEEPER_LEASE_MS", "10000"),
                ("QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS", "5000")
            ])
            .is_ok()
        );
    }

    #[test]
    fn a_claim_batch_above_the_pass_budget_is_rejected() {
        let e = config(&[
            ("QUEEN_SWEEPER_CLAIM_BATCH", "600"),
            ("QUEEN_SWEEPER_CYCLE_MAX_ROWS", "500"),
        ])
        .unwrap_err();
        assert!(e.contains("one claim may not exceed the whole pass"), "{e}");
    }

    #[test]
    fn setting_the_shard_count_is_an_error_that_explains_why() {
        let e = config(&[("QUEEN_SWEEPER_SHARDS", "16")]).unwrap_err();
        assert!(
            e.contains("QUEEN_SWEEPER_SHARDS=\"16\" is set, and it must not exist"),
            "{e}"
        );
        assert!(e.contains("every broker scans all 64"), "{e}");
        assert!(e.contains("orphan"), "{e}");
    }

    #[test]
    fn a_misspelt_knob_is_an_error_not_a_silent_default() {
        let e = config(&[("QUEEN_SWEEPER_LEASE", "1000")]).unwrap_err();
        assert!(
            e.contains("QUEEN_SWEEPER_LEASE is not a sweeper setting"),
            "{e}"
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let e = config(&[
            ("QUEEN_SWEEPER_CLAIM_BATCH", "x"),
            ("QUEEN_KV_EXPIRE_BATCH", "0"),
        ])
        .unwrap_err();
        assert!(
            e.contains("QUEEN_SWEEPER_CLAIM_BATCH") && e.contains("QUEEN_KV_EXPIRE_BATCH"),
            "{e}"
        );
    }

    #[test]
    fn the_values_name_every_knob_once_in_documentation_order() {
        // describe() labels each value with the knob beside it: a knob missing here would shift
        // every later label (it did: the two head knobs were missing, and the start-up log called
        // the prune's cadence QUEEN_SWEEPER_HEAD_RESCAN_MS).
        let named: Vec<&str> = Config::default()
            .values()
            .iter()
            .map(|(k, _)| k.var)
            .collect();
        let all: Vec<&str> = knob::ALL.iter().map(|k| k.var).collect();
        assert_eq!(named, all);
        let config = Config {
            head_rescan_ms: 1234,
            kv_usage_every_ms: 4321,
            ..Config::default()
        };
        let lines = config.describe();
        assert!(
            lines.contains(&"QUEEN_SWEEPER_HEAD_RESCAN_MS=1234".to_string()),
            "{lines:?}"
        );
        assert!(
            lines.contains(&"QUEEN_KV_USAGE_EVERY_MS=4321".to_string()),
            "{lines:?}"
        );
    }

    #[test]
    fn every_knob_default_is_inside_its_own_range() {
        for knob in knob::ALL {
            assert!(
                (knob.min..=knob.max).contains(&knob.default),
                "{}",
                knob.var
            );
        }
    }

    #[test]
    fn every_knob_has_a_not_measured_marker_in_the_log_schema() {
        let sql = crate::schema::FILES[0].text;
        for knob in knob::ALL {
            let marker = format!("] {} = {}", knob.var, knob.default);
            assert!(
                sql.contains(&marker),
                "001_log_schema.sql lacks a marker for {}",
                knob.var
            );
        }
    }
}
