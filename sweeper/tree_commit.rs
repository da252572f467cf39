// Shared by `sweeper/build_commit.rs` (the build script of the broker and the soak) and the soak's
// `rig.rs`, through `include!`: one reading of which commit a working tree is at.

/// The working tree's commit as `git` in the current directory sees it: the short hash, with
/// ` (dirty)` when tracked files differ from it; `None` outside a repository.
fn tree_commit_here() -> Option<String> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let hash = git(&["rev-parse", "--short=7", "HEAD"])?;
    Some(
        match git(&["status", "--porcelain", "--untracked-files=no"]) {
            Some(changes) if changes.is_empty() => hash,
            _ => format!("{hash} (dirty)"),
        },
    )
}
