//! Which calibration the model runs on: by default the newest committed one in
//! `sim/calibration/`, built into `sim` (see `build.rs`); `--calibration FILE` names another.

use std::sync::OnceLock;

use queen_harness::Calibration;

mod builtin {
    include!(concat!(env!("OUT_DIR"), "/builtin_calibration.rs"));
}

/// The built-in calibration's file name, `<date>-<rig>.json`.
pub const BUILTIN_NAME: &str = builtin::NAME;

/// The built-in calibration.
pub fn builtin() -> &'static Calibration {
    static BUILTIN: OnceLock<Calibration> = OnceLock::new();
    BUILTIN.get_or_init(|| {
        Calibration::parse(builtin::TEXT)
            .unwrap_or_else(|e| panic!("sim/calibration/{BUILTIN_NAME} does not parse: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_calibration_parses_and_names_its_rig_and_commit() {
        let c = builtin();
        assert!(BUILTIN_NAME.starts_with(&c.measured_on), "{BUILTIN_NAME}");
        assert!(BUILTIN_NAME.contains(&c.rig_label), "{BUILTIN_NAME}");
        assert!(!c.commit.is_empty() && c.commit != "unknown");
        assert!(c.costs.wal_bytes_per_s > 0 && c.costs.flush_us > 0);
    }
}
