//! Sweeper knob overrides of a sim run or a soak workload, each checked against the sweeper's
//! knob table when it is set, so a misspelt variable fails where it is written, not when a
//! broker starts. In JSON they are `[["VAR", "value"], ...]`, the shape the reports have always
//! had, so every report written before the type existed still loads.

use queen_sweeper::{Config, Knob, knob};
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Knob overrides in the order they were set; setting a knob again replaces it and moves it
/// last.
#[derive(Debug, Clone, Default)]
pub struct Knobs {
    set: Vec<(Knob, u64)>,
}

impl PartialEq for Knobs {
    fn eq(&self, other: &Knobs) -> bool {
        self.iter().eq(other.iter())
    }
}

/// The knob whose variable is `var`.
pub fn find(var: &str) -> Result<Knob, Error> {
    knob::ALL
        .iter()
        .find(|knob| knob.var == var)
        .copied()
        .ok_or_else(|| Error::UnknownKnob {
            var: var.to_owned(),
            known: knob::ALL
                .iter()
                .map(|knob| knob.var)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

impl Knobs {
    /// No override: every knob at its default.
    pub fn new() -> Knobs {
        Knobs::default()
    }

    /// Sets `knob` to `value`; an error names the knob, the value and its bounds.
    pub fn set(&mut self, knob: Knob, value: u64) -> Result<(), Error> {
        if !(knob.min..=knob.max).contains(&value) {
            return Err(Error::KnobValue(knob.out_of_range(&value.to_string())));
        }
        self.set.retain(|(k, _)| k.var != knob.var);
        self.set.push((knob, value));
        Ok(())
    }

    /// [`Knobs::set`] for values written in code.
    ///
    /// # Panics
    /// When `value` is outside the knob's bounds: the code that wrote it is wrong.
    pub fn with(mut self, knob: Knob, value: u64) -> Knobs {
        if let Err(error) = self.set(knob, value) {
            panic!("{error}");
        }
        self
    }

    /// [`Knobs::with`] by the knob's variable.
    ///
    /// # Panics
    /// When `var` is not in the sweeper's knob table or `value` is outside its bounds.
    pub fn with_var(self, var: &str, value: u64) -> Knobs {
        match find(var) {
            Ok(knob) => self.with(knob, value),
            Err(error) => panic!("{error}"),
        }
    }

    /// The overrides, in the order they were set.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.set.iter().map(|(knob, value)| (knob.var, *value))
    }

    /// The overrides as environment variables, for a broker process.
    pub fn env(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        self.iter().map(|(var, value)| (var, value.to_string()))
    }

    /// No override set.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// The sweeper's configuration with these overrides; the error lists every relation the
    /// overrides break (a lease shorter than twice the statement timeout, ...).
    pub fn config(&self) -> Result<Config, queen_sweeper::Error> {
        Config::from_vars(self.env())
    }
}

impl Serialize for Knobs {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.env())
    }
}

impl<'de> Deserialize<'de> for Knobs {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Knobs, D::Error> {
        let pairs = Vec::<(String, String)>::deserialize(deserializer)?;
        let mut knobs = Knobs::new();
        for (var, raw) in pairs {
            let knob = find(&var).map_err(serde::de::Error::custom)?;
            let value = knob.parse(&raw).map_err(serde::de::Error::custom)?;
            knobs.set(knob, value).map_err(serde::de::Error::custom)?;
        }
        Ok(knobs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_write_the_json_shape_reports_have_always_had() {
        let knobs = Knobs::new()
            .with(knob::LEASE_MS, 2_000)
            .with(knob::STATEMENT_TIMEOUT_MS, 1_000);
        let text = serde_json::to_string(&knobs).expect("serialises");
        assert_eq!(
            text,
            r#"[["QUEEN_SWEEPER_LEASE_MS","2000"],["QUEEN_SWEEPER_STATEMENT_TIMEOUT_MS","1000"]]"#
        );
        assert_eq!(serde_json::from_str::<Knobs>(&text).expect("reads"), knobs);
    }

    #[test]
    fn setting_a_knob_again_replaces_it_and_moves_it_last() {
        let knobs = Knobs::new()
            .with(knob::LEASE_MS, 2_000)
            .with(knob::CLAIM_BATCH, 10)
            .with(knob::LEASE_MS, 4_000);
        let set: Vec<_> = knobs.iter().collect();
        assert_eq!(
            set,
            vec![
                ("QUEEN_SWEEPER_CLAIM_BATCH", 10),
                ("QUEEN_SWEEPER_LEASE_MS", 4_000)
            ]
        );
    }

    #[test]
    fn an_unknown_variable_is_refused_naming_the_known_ones() {
        let error = serde_json::from_str::<Knobs>(r#"[["QUEEN_SWEEPER_LEASE","2000"]]"#)
            .expect_err("misspelt");
        assert!(
            error
                .to_string()
                .contains("QUEEN_SWEEPER_LEASE is not a sweeper knob")
        );
        assert!(error.to_string().contains("QUEEN_SWEEPER_LEASE_MS"));
    }

    #[test]
    fn a_value_out_of_bounds_is_refused_at_the_edge() {
        let mut knobs = Knobs::new();
        assert!(knobs.set(knob::LEASE_MS, knob::LEASE_MS.min).is_ok());
        let error = knobs
            .set(knob::LEASE_MS, knob::LEASE_MS.min - 1)
            .expect_err("below the floor");
        assert!(error.to_string().contains("out of range"), "{error}");
        assert!(serde_json::from_str::<Knobs>(r#"[["QUEEN_SWEEPER_LEASE_MS","99"]]"#).is_err());
    }

    #[test]
    fn the_config_carries_the_overrides() {
        let config = Knobs::new()
            .with(knob::LEASE_MS, 4_000)
            .with(knob::STATEMENT_TIMEOUT_MS, 2_000)
            .config()
            .expect("valid");
        assert_eq!(config.lease_ms, 4_000);
        assert_eq!(config.statement_timeout_ms, 2_000);
    }
}
