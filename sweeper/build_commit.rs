//! The build script of the broker and the soak: the commit a binary was built from, as the
//! compile-time variable `QUEEN_BUILD_COMMIT` (the short hash, with ` (dirty)` when tracked files
//! differed from it; `unknown` outside a repository). A report names the code that measured, not
//! whatever the working tree holds when the binary runs.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

include!("tree_commit.rs");

fn main() {
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        // A commit, a checkout or an add moves these.
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{branch}");
        }
    }
    // An edit not yet added moves none of them: the sources the binaries are built from.
    if let Some(top) = git(&["rev-parse", "--show-toplevel"]) {
        for source in ["sql", "sweeper", "sim", "soak", "Cargo.lock"] {
            let path = Path::new(&top).join(source);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    let commit = tree_commit_here().unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=QUEEN_BUILD_COMMIT={commit}");
}
