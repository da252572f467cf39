//! Builds the newest calibration in `sim/calibration/` into `sim`: the model's costs as
//! `soak calibrate` measured them. Files are named `<date>-<rig>.json`, so the newest is the last
//! by name.

use std::path::{Path, PathBuf};

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let dir = Path::new(&manifest).join("calibration");
    println!("cargo:rerun-if-changed={}", dir.display());
    let newest: Option<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "json"))
        .max();
    let Some(newest) = newest else {
        panic!(
            "{} holds no calibration (*.json): run `soak calibrate`, which writes one there",
            dir.display()
        );
    };
    println!("cargo:rerun-if-changed={}", newest.display());
    let name = newest
        .file_name()
        .and_then(|n| n.to_str())
        .expect("a calibration's name is UTF-8");
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("builtin_calibration.rs");
    std::fs::write(
        out,
        format!(
            "/// The built-in calibration's file name in `sim/calibration/`.\npub const NAME: &str = {name:?};\n/// Its text.\npub const TEXT: &str = include_str!({:?});\n",
            newest.display().to_string()
        ),
    )
    .expect("OUT_DIR is writable");
}
