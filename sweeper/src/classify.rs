//! SQLSTATE → what the caller should do. Pure: no I/O, no clock.
//!
//! | class | SQLSTATEs | the sweeper |
//! |---|---|---|
//! | [`Class::Transient`] | `40001`, `40P01`, classes `08`, `53`, `57`, `58`, no SQLSTATE at all | backs off, spends no attempt |
//! | [`Class::Config`] | class `42` (a missing function, a wrong column) | spends an attempt, loudly; switches a slow phase off |
//! | [`Class::Permanent`] | everything else, and codes that are not SQLSTATEs | spends an attempt |
//!
//! "No SQLSTATE" is a lost connection, an I/O error or a client-side timeout: the database did not
//! answer, so nothing about the timer itself is known to be wrong. A code that is not five
//! characters of `0-9A-Z` did not come from PostgreSQL; it is treated as permanent, so a timer that
//! keeps producing it ends in the DLQ instead of retrying forever without spending attempts.

/// What a failure means for the work that hit it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// The database could not do it now; it may later. Back off; spend no attempt.
    Transient,
    /// The schema or configuration is wrong (SQLSTATE class 42).
    Config,
    /// This work is wrong or cannot be done. Spend an attempt.
    Permanent,
}

impl Class {
    /// The class's label in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Transient => "transient",
            Class::Config => "config",
            Class::Permanent => "permanent",
        }
    }
}

/// Classifies a SQLSTATE (`None` when the failure carried none).
pub fn classify(sqlstate: Option<&str>) -> Class {
    let Some(code) = sqlstate else {
        return Class::Transient;
    };
    if !is_well_formed(code) {
        return Class::Permanent;
    }
    match (code, &code[..2]) {
        ("40001" | "40P01", _) => Class::Transient,
        (_, "08" | "53" | "57" | "58") => Class::Transient,
        (_, "42") => Class::Config,
        _ => Class::Permanent,
    }
}

fn is_well_formed(code: &str) -> bool {
    code.len() == 5
        && code
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialization_failure_and_deadlock_are_transient() {
        assert_eq!(classify(Some("40001")), Class::Transient);
        assert_eq!(classify(Some("40P01")), Class::Transient);
    }

    #[test]
    fn other_transaction_rollbacks_are_permanent() {
        assert_eq!(classify(Some("40000")), Class::Permanent);
        assert_eq!(classify(Some("40002")), Class::Permanent);
        assert_eq!(classify(Some("40003")), Class::Permanent);
    }

    #[test]
    fn connection_resources_operator_and_system_classes_are_transient() {
        for code in [
            "08000", "08006", "08P01", "53000", "53100", "53200", "53300", "53400", "57000",
            "57014", "57P01", "57P02", "57P03", "58000", "58030", "58P01",
        ] {
            assert_eq!(classify(Some(code)), Class::Transient, "{code}");
        }
    }

    #[test]
    fn no_sqlstate_is_transient() {
        assert_eq!(classify(None), Class::Transient);
    }

    #[test]
    fn class_42_is_config() {
        for code in [
            "42000", "42601", "42501", "42703", "42883", "42P01", "42P07", "428C9",
        ] {
            assert_eq!(classify(Some(code)), Class::Config, "{code}");
        }
    }

    #[test]
    fn data_constraint_and_raised_errors_are_permanent() {
        for code in [
            "22023", "22001", "23505", "23503", "P0001", "XX000", "54000", "25P02", "0A000",
        ] {
            assert_eq!(classify(Some(code)), Class::Permanent, "{code}");
        }
    }

    #[test]
    fn malformed_codes_are_permanent() {
        for code in [
            "",
            "4",
            "4000",
            "400011",
            "40p01",
            "4200a",
            "08 00",
            "\u{e9}8000",
            "42-01",
            "57\n14",
        ] {
            assert_eq!(classify(Some(code)), Class::Permanent, "{code:?}");
        }
    }

    #[test]
    fn every_two_character_class_prefix_maps_as_documented() {
        const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
        for &a in ALPHABET {
            for &b in ALPHABET {
                let code = format!("{}{}000", a as char, b as char);
                let expected = match &code[..2] {
                    "08" | "53" | "57" | "58" => Class::Transient,
                    "42" => Class::Config,
                    _ => Class::Permanent,
                };
                assert_eq!(classify(Some(&code)), expected, "{code}");
            }
        }
    }
}
