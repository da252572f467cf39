//! Every limit of the HTTP API, from the environment, with documented defaults and a loud
//! [`ApiConfig::validate`], in the manner of [`crate::config`]: a bad value stops the start with
//! the variable's name, the value and what is allowed.
//!
//! None of the defaults is measured yet; `sql/001_log_schema.sql` carries one `[not measured]`
//! marker per knob (a unit test checks), which a soak on a test rig replaces with a dated block.
//!
//! The variables live under `QUEEN_TIMERS_` and `QUEEN_API_`, prefixes [`crate::config`] does not
//! own, and an unknown variable under them is an error here for the same reason it is there: a
//! misspelt limit silently keeping its default is how a guess outlives its fix.

use std::collections::BTreeMap;
use std::time::Duration;

use queen_sweeper::{CLIENT_GRACE, Config, Error, Knob};

/// Prefixes of the variables this module owns.
const OWNED_PREFIXES: &[&str] = &["QUEEN_TIMERS_", "QUEEN_API_"];

/// Bytes a request needs around one payload: the op's other fields and the batch's brackets. A
/// schedule's own fields are bounded by `QUEEN_API_MAX_KEY_BYTES` (512 by default, four of them)
/// and a 20-digit delay; 4 KiB covers that with room to spare.
pub const ENVELOPE_BYTES: u64 = 4096;

/// The API's variables that are not numeric limits: who may call it. [`super::auth`] reads and
/// checks them; they are named here because this module owns the `QUEEN_API_` prefix and refuses
/// a variable under it that it does not know.
pub mod auth_var {
    /// A file of `<tenant> <token>` lines. Default: none.
    pub const TOKENS_FILE: &str = "QUEEN_API_TOKENS_FILE";
    /// `<tenant>:<token>,<tenant>:<token>`. Default: none.
    pub const TOKENS: &str = "QUEEN_API_TOKENS";
    /// `1`: `/metrics` and `/healthz` want a valid token too. Default `0`: open to monitoring.
    pub const AUTH_MONITORING: &str = "QUEEN_API_AUTH_MONITORING";
    /// `1`: serve without tokens on an address that is not loopback. Default `0`: refuse to.
    pub const ALLOW_NO_AUTH: &str = "QUEEN_API_ALLOW_NO_AUTH";

    pub const ALL: &[&str] = &[TOKENS_FILE, TOKENS, AUTH_MONITORING, ALLOW_NO_AUTH];
}

/// The knobs of the API. Durations are milliseconds or seconds as named, sizes bytes.
pub mod knob {
    use queen_sweeper::Knob;

    const HOUR_MS: u64 = 3_600_000;
    const MIB: u64 = 1024 * 1024;
    /// Ten years: `log_timers_apply_v1` refuses delays beyond it as unit mistakes.
    const TEN_YEARS_S: u64 = 315_360_000;

    pub const MAX_PAYLOAD_BYTES: Knob = Knob {
        var: "QUEEN_TIMERS_MAX_PAYLOAD_BYTES",
        default: 256 * 1024,
        min: 1,
        max: 64 * MIB,
        help: "bytes of one timer's payload (JSON measured as the text sent, base64 as decoded bytes); over it is a 413",
    };
    pub const MAX_OPS_PER_CALL: Knob = Knob {
        var: "QUEEN_TIMERS_MAX_OPS_PER_CALL",
        default: 1_000,
        min: 1,
        max: 100_000,
        help: "operations in one POST /api/v1/timers; they share one transaction",
    };
    pub const MAX_HORIZON_S: Knob = Knob {
        var: "QUEEN_TIMERS_MAX_HORIZON_S",
        default: 365 * 24 * 3600,
        min: 1,
        max: TEN_YEARS_S,
        help: "how far ahead (and, for a negative delay, behind) a timer may be scheduled, in seconds",
    };
    pub const MAX_BODY_BYTES: Knob = Knob {
        var: "QUEEN_API_MAX_BODY_BYTES",
        default: 4 * MIB,
        min: 1024,
        max: 1024 * MIB,
        help: "bytes of one request body; over it is a 413",
    };
    pub const MAX_KEY_BYTES: Knob = Knob {
        var: "QUEEN_API_MAX_KEY_BYTES",
        default: 512,
        min: 1,
        // A B-tree entry must fit a third of an 8 KiB page (2704 bytes). The widest key is
        // (tenant, queue, timer key) or (tenant, namespace, key): three names of at most 800
        // bytes plus their headers stay under it.
        max: 800,
        help: "bytes of a tenant, queue, timer key, partition, txn, namespace or KV key",
    };
    pub const MAX_IN_FLIGHT: Knob = Knob {
        var: "QUEEN_API_MAX_IN_FLIGHT",
        default: 64,
        min: 1,
        max: 100_000,
        help: "API requests served at once; one more is refused with a 503 and Retry-After, never queued",
    };
    pub const POOL_SIZE: Knob = Knob {
        var: "QUEEN_API_POOL_SIZE",
        default: 8,
        min: 1,
        max: 1_000,
        help: "database connections of the API, a pool apart from the sweeper's",
    };
    pub const REQUEST_TIMEOUT_MS: Knob = Knob {
        var: "QUEEN_API_REQUEST_TIMEOUT_MS",
        default: 15_000,
        min: 100,
        max: HOUR_MS,
        help: "a request not answered within this once its body is read (a stalled database) gets a 503 and Retry-After",
    };
    /// 5 s: a request's headers are a few hundred bytes, one round trip even on a 1 s link with a
    /// retransmit; a client slower than that is holding a connection, not sending. Not measured.
    pub const HEADER_READ_TIMEOUT_MS: Knob = Knob {
        var: "QUEEN_API_HEADER_READ_TIMEOUT_MS",
        default: 5_000,
        min: 100,
        max: HOUR_MS,
        help: "a connection whose request headers are not all read within this is closed; so is a keep-alive connection idle this long (answers advertise a second less as Keep-Alive: timeout=N; under 2 s keep-alive is off)",
    };
    /// 10 s: a body at the default 4 MiB limit arrives in about 8.4 s at 4 Mbit/s, the slowest
    /// link we serve a full batch over. Not measured.
    pub const BODY_READ_TIMEOUT_MS: Knob = Knob {
        var: "QUEEN_API_BODY_READ_TIMEOUT_MS",
        default: 10_000,
        min: 100,
        max: HOUR_MS,
        help: "a request body not all read within this is a 408; it holds no in-flight slot while read",
    };
    /// 1 h, measured (the block in `sql/001_log_schema.sql`, `soak experiments --only
    /// IDEMPOTENCY`, 2026-12-07 at 99425d9): a crash left a keyed call's outcome unknown for
    /// 1.2 s, so a window of 1 s lets a retry schedule twice and 10 s is the edge; a table holding
    /// a full hour of 100 keyed calls/s is 503 MiB and keeps the keyed p99 at 12.6 ms (14.0 at a
    /// 1 s window; 24.7 at 4 h, 2 GB). The hour is for clients that retry through outages far
    /// longer than the rig's crash.
    pub const IDEMPOTENCY_WINDOW_S: Knob = Knob {
        var: "QUEEN_API_IDEMPOTENCY_WINDOW_S",
        default: 3_600,
        min: 1,
        max: 7 * 24 * 3_600,
        help: "a schedule retried with the same Idempotency-Key within this many seconds answers the first call's results and schedules nothing",
    };

    /// Every knob, in documentation order.
    pub const ALL: &[Knob] = &[
        MAX_PAYLOAD_BYTES,
        MAX_OPS_PER_CALL,
        MAX_HORIZON_S,
        MAX_BODY_BYTES,
        MAX_KEY_BYTES,
        MAX_IN_FLIGHT,
        POOL_SIZE,
        REQUEST_TIMEOUT_MS,
        HEADER_READ_TIMEOUT_MS,
        BODY_READ_TIMEOUT_MS,
        IDEMPOTENCY_WINDOW_S,
    ];
}

/// The validated limits of the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiConfig {
    pub max_payload_bytes: u64,
    pub max_ops_per_call: u32,
    pub max_horizon_s: u64,
    pub max_body_bytes: u64,
    pub max_key_bytes: u32,
    pub max_in_flight: u32,
    pub pool_size: u32,
    pub request_timeout_ms: u64,
    pub header_read_timeout_ms: u64,
    pub body_read_timeout_ms: u64,
    pub idempotency_window_s: u64,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig::from_values(|knob| knob.default)
    }
}

impl ApiConfig {
    /// Reads the process environment and validates against the sweeper's `config`.
    pub fn from_env(config: &Config) -> Result<ApiConfig, Error> {
        ApiConfig::from_vars(std::env::vars(), config)
    }

    /// Reads `(name, value)` pairs and validates. Variables outside the API's prefixes are
    /// ignored.
    pub fn from_vars<I, K, V>(vars: I, config: &Config) -> Result<ApiConfig, Error>
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
        for name in vars.keys() {
            let known_knob = knob::ALL.iter().any(|knob| knob.var == name);
            if !known_knob && !auth_var::ALL.contains(&name.as_str()) {
                let known: Vec<&str> = knob::ALL
                    .iter()
                    .map(|knob| knob.var)
                    .chain(auth_var::ALL.iter().copied())
                    .collect();
                problems.push(format!(
                    "{name} is not an API setting (known: {})",
                    known.join(", ")
                ));
            }
        }
        let mut parsed = BTreeMap::new();
        for knob in knob::ALL {
            let value = match vars.get(knob.var) {
                None => Ok(knob.default),
                Some(raw) => knob.parse(raw),
            };
            match value {
                Ok(value) => {
                    parsed.insert(knob.var, value);
                }
                Err(problem) => problems.push(problem),
            }
        }
        if !problems.is_empty() {
            return Err(Error::Config(problems.join("\n")));
        }
        let limits = ApiConfig::from_values(|knob| parsed[knob.var]);
        limits.validate(config)?;
        Ok(limits)
    }

    fn from_values(value: impl Fn(&Knob) -> u64) -> ApiConfig {
        let narrow = |knob: &Knob| u32::try_from(value(knob)).unwrap_or(u32::MAX);
        ApiConfig {
            max_payload_bytes: value(&knob::MAX_PAYLOAD_BYTES),
            max_ops_per_call: narrow(&knob::MAX_OPS_PER_CALL),
            max_horizon_s: value(&knob::MAX_HORIZON_S),
            max_body_bytes: value(&knob::MAX_BODY_BYTES),
            max_key_bytes: narrow(&knob::MAX_KEY_BYTES),
            max_in_flight: narrow(&knob::MAX_IN_FLIGHT),
            pool_size: narrow(&knob::POOL_SIZE),
            request_timeout_ms: value(&knob::REQUEST_TIMEOUT_MS),
            header_read_timeout_ms: value(&knob::HEADER_READ_TIMEOUT_MS),
            body_read_timeout_ms: value(&knob::BODY_READ_TIMEOUT_MS),
            idempotency_window_s: value(&knob::IDEMPOTENCY_WINDOW_S),
        }
    }

    fn values(&self) -> [u64; 11] {
        [
            self.max_payload_bytes,
            u64::from(self.max_ops_per_call),
            self.max_horizon_s,
            self.max_body_bytes,
            u64::from(self.max_key_bytes),
            u64::from(self.max_in_flight),
            u64::from(self.pool_size),
            self.request_timeout_ms,
            self.header_read_timeout_ms,
            self.body_read_timeout_ms,
            self.idempotency_window_s,
        ]
    }

    /// Checks every bound, and the relations with each other and with the sweeper's `config`;
    /// the error lists every problem.
    pub fn validate(&self, config: &Config) -> Result<(), Error> {
        let mut problems: Vec<String> = knob::ALL
            .iter()
            .zip(self.values())
            .filter(|(knob, value)| !(knob.min..=knob.max).contains(value))
            .map(|(knob, value)| knob.out_of_range(&value.to_string()))
            .collect();
        let smallest_body = self.max_payload_bytes.div_ceil(3) * 4 + ENVELOPE_BYTES;
        if self.max_body_bytes < smallest_body {
            problems.push(format!(
                "{}={} is below {smallest_body}: a payload at {}={}, base64-encoded (4/3) with its op around it ({ENVELOPE_BYTES} bytes), must fit one request, or the payload limit could never be the answer",
                knob::MAX_BODY_BYTES.var,
                self.max_body_bytes,
                knob::MAX_PAYLOAD_BYTES.var,
                self.max_payload_bytes
            ));
        }
        let shortest_request = 2 * config.statement_timeout_ms + CLIENT_GRACE.as_millis() as u64;
        if self.request_timeout_ms < shortest_request {
            problems.push(format!(
                "{}={} is below {shortest_request}: a schedule is two statements (apply, commit), each allowed QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS={} plus the client's {} ms grace, and the request deadline must not cut a healthy one short",
                knob::REQUEST_TIMEOUT_MS.var,
                self.request_timeout_ms,
                config.statement_timeout_ms,
                CLIENT_GRACE.as_millis()
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(Error::Config(problems.join("\n")))
        }
    }

    /// The horizon in milliseconds, the unit of `delayMs`.
    pub fn max_horizon_ms(&self) -> i64 {
        i64::try_from(self.max_horizon_s.saturating_mul(1000)).unwrap_or(i64::MAX)
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    pub fn header_read_timeout(&self) -> Duration {
        Duration::from_millis(self.header_read_timeout_ms)
    }

    pub fn body_read_timeout(&self) -> Duration {
        Duration::from_millis(self.body_read_timeout_ms)
    }

    /// The limits as `VAR=value` lines, for start-up logs.
    pub fn describe(&self) -> Vec<String> {
        knob::ALL
            .iter()
            .zip(self.values())
            .map(|(knob, value)| format!("{}={value}", knob.var))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(vars: &[(&str, &str)]) -> Result<ApiConfig, String> {
        ApiConfig::from_vars(
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            &Config::default(),
        )
        .map_err(|e| e.to_string())
    }

    #[test]
    fn no_variables_gives_the_documented_defaults() {
        let l = limits(&[]).expect("defaults are valid");
        assert_eq!(l, ApiConfig::default());
        assert_eq!(l.max_payload_bytes, 262_144);
        assert_eq!(l.max_ops_per_call, 1_000);
        assert_eq!(l.max_horizon_s, 31_536_000);
        assert_eq!(l.max_body_bytes, 4 * 1024 * 1024);
        assert_eq!(l.max_key_bytes, 512);
        assert_eq!((l.max_in_flight, l.pool_size), (64, 8));
        assert_eq!(l.request_timeout_ms, 15_000);
        assert_eq!(
            (l.header_read_timeout_ms, l.body_read_timeout_ms),
            (5_000, 10_000)
        );
        assert_eq!(l.max_horizon_ms(), 31_536_000_000);
    }

    #[test]
    fn a_valid_value_is_taken_and_sweeper_variables_are_ignored() {
        let l = limits(&[
            ("QUEEN_TIMERS_MAX_OPS_PER_CALL", " 10 "),
            ("QUEEN_SWEEPER_LEASE_MS", "not mine"),
        ])
        .unwrap();
        assert_eq!(l.max_ops_per_call, 10);
    }

    #[test]
    fn a_misspelt_limit_is_an_error_not_a_silent_default() {
        let e = limits(&[("QUEEN_TIMERS_MAX_PAYLOAD", "10")]).unwrap_err();
        assert!(
            e.contains("QUEEN_TIMERS_MAX_PAYLOAD is not an API setting"),
            "{e}"
        );
    }

    #[test]
    fn the_authentication_variables_are_known_and_left_to_auth() {
        let l = limits(&[
            ("QUEEN_API_TOKENS_FILE", "/etc/queen/tokens"),
            ("QUEEN_API_TOKENS", "acme:not-a-limit"),
            ("QUEEN_API_AUTH_MONITORING", "1"),
            ("QUEEN_API_ALLOW_NO_AUTH", "0"),
        ])
        .expect("known variables");
        assert_eq!(l, ApiConfig::default());
        let e = limits(&[("QUEEN_API_TOKEN", "acme:x")]).unwrap_err();
        assert!(e.contains("QUEEN_API_TOKEN is not an API setting"), "{e}");
        assert!(e.contains("QUEEN_API_TOKENS_FILE"), "{e}");
    }

    #[test]
    fn zero_and_junk_name_the_variable_the_value_and_the_range() {
        let e = limits(&[
            ("QUEEN_API_MAX_IN_FLIGHT", "0"),
            ("QUEEN_TIMERS_MAX_HORIZON_S", "1y"),
        ])
        .unwrap_err();
        assert!(
            e.contains("QUEEN_API_MAX_IN_FLIGHT=\"0\" is out of range"),
            "{e}"
        );
        assert!(e.contains("1..=100000"), "{e}");
        assert!(
            e.contains("QUEEN_TIMERS_MAX_HORIZON_S=\"1y\" is not a whole number"),
            "{e}"
        );
    }

    #[test]
    fn a_horizon_beyond_ten_years_is_rejected() {
        let e = limits(&[("QUEEN_TIMERS_MAX_HORIZON_S", "315360001")]).unwrap_err();
        assert!(e.contains("QUEEN_TIMERS_MAX_HORIZON_S"), "{e}");
        assert!(limits(&[("QUEEN_TIMERS_MAX_HORIZON_S", "315360000")]).is_ok());
    }

    #[test]
    fn a_body_limit_that_cannot_carry_a_payload_at_its_limit_is_rejected() {
        // 3000 payload bytes are 4000 base64 characters, plus the 4096-byte envelope.
        let at_edge = [
            ("QUEEN_TIMERS_MAX_PAYLOAD_BYTES", "3000"),
            ("QUEEN_API_MAX_BODY_BYTES", "8096"),
        ];
        assert!(limits(&at_edge).is_ok());
        let e = limits(&[
            ("QUEEN_TIMERS_MAX_PAYLOAD_BYTES", "3000"),
            ("QUEEN_API_MAX_BODY_BYTES", "8095"),
        ])
        .unwrap_err();
        assert!(
            e.contains("QUEEN_API_MAX_BODY_BYTES=8095 is below 8096"),
            "{e}"
        );
    }

    #[test]
    fn a_request_deadline_shorter_than_two_statements_is_rejected() {
        // Statement timeout 5000 ms by default: 2 × 5000 + 2000 ms grace.
        assert!(limits(&[("QUEEN_API_REQUEST_TIMEOUT_MS", "12000")]).is_ok());
        let e = limits(&[("QUEEN_API_REQUEST_TIMEOUT_MS", "11999")]).unwrap_err();
        assert!(
            e.contains("QUEEN_API_REQUEST_TIMEOUT_MS=11999 is below 12000"),
            "{e}"
        );
    }

    #[test]
    fn read_timeouts_outside_their_range_name_the_variable() {
        assert!(limits(&[("QUEEN_API_BODY_READ_TIMEOUT_MS", "100")]).is_ok());
        let e = limits(&[
            ("QUEEN_API_HEADER_READ_TIMEOUT_MS", "99"),
            ("QUEEN_API_BODY_READ_TIMEOUT_MS", "0"),
        ])
        .unwrap_err();
        assert!(
            e.contains("QUEEN_API_HEADER_READ_TIMEOUT_MS=\"99\" is out of range"),
            "{e}"
        );
        assert!(
            e.contains("QUEEN_API_BODY_READ_TIMEOUT_MS=\"0\" is out of range"),
            "{e}"
        );
    }

    #[test]
    fn every_default_is_inside_its_own_range() {
        for knob in knob::ALL {
            assert!(
                (knob.min..=knob.max).contains(&knob.default),
                "{}",
                knob.var
            );
        }
    }

    #[test]
    fn every_limit_has_a_not_measured_marker_in_the_log_schema() {
        let sql = queen_sweeper::SQL_FILES[0].text;
        for knob in knob::ALL {
            let marker = format!("] {} = {}", knob.var, knob.default);
            assert!(
                sql.contains(&marker),
                "001_log_schema.sql lacks a marker for {}",
                knob.var
            );
        }
    }

    #[test]
    fn describe_names_every_limit() {
        let lines = ApiConfig::default().describe();
        assert_eq!(lines.len(), knob::ALL.len());
        assert!(lines.contains(&"QUEEN_API_MAX_IN_FLIGHT=64".to_owned()));
    }
}
