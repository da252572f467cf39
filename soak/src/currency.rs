//! `soak blocks --check`: which dated blocks still describe the code in force.
//!
//! A block names the commit it was measured at. It is current while none of the files its
//! setting governs (the map below, kept beside the experiments that measure them) has changed
//! since that commit; otherwise the number it records was measured on other code, and the
//! experiment must run again. A block that names no commit (written before blocks did) is
//! stale by definition: nothing tells what it was measured on.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::blocks::{self, Block};

/// The drain: the probe, the claim, the take, the fire, and the appends they make.
const DRAIN: &[&str] = &[
    "sweeper/src/cycle.rs",
    "sweeper/src/drain",
    "sweeper/src/pg.rs",
    "sql/002_log_push.sql",
    "sql/011_timers_probe_claim.sql",
    "sql/012_timers_fire.sql",
    "sql/015_timers_take.sql",
    "sql/016_sweeper_probe.sql",
];

/// The sleep between passes: its floor, its ceiling, the empty-claim band, the wake; and the drain,
/// whose own lane waits the band's lower end between takes while its bulk lane runs.
const SLEEP: &[&str] = &[
    "sweeper/src/cycle.rs",
    "sweeper/src/drain",
    "sweeper/src/sleep.rs",
    "sweeper/src/waker.rs",
    "sql/011_timers_probe_claim.sql",
    "sql/016_sweeper_probe.sql",
];

/// The KV prune.
const PRUNE: &[&str] = &[
    "sweeper/src/subclock.rs",
    "sweeper/src/admission.rs",
    "sql/020_kv.sql",
    "sql/030_kv_sweeper.sql",
];

/// The usage rollup.
const ROLLUP: &[&str] = &[
    "sweeper/src/subclock.rs",
    "sql/021_quota.sql",
    "sql/030_kv_sweeper.sql",
];

/// The timers table and the statements that rewrite its rows.
const TIMERS_TABLE: &[&str] = &[
    "sql/010_timers_schema.sql",
    "sql/012_timers_fire.sql",
    "sql/014_timers_apply.sql",
    "sql/015_timers_take.sql",
];

/// The idempotency keys of schedule calls: their table and calls, and the handler that takes
/// them inside the schedule's transaction.
const IDEMPOTENCY: &[&str] = &[
    "sql/060_api_idempotency.sql",
    "sweeper/broker/src/api/timers.rs",
    "sweeper/broker/src/queries.rs",
];

/// The files (or folders) whose change can move each measured setting's edge. A setting with a
/// block and no entry here is an error of `--check`, so the map cannot fall behind the blocks.
pub const GOVERNS: &[(&str, &[&str])] = &[
    ("QUEEN_SWEEPER_LEASE_MS", DRAIN),
    ("QUEEN_SWEEPER_CLAIM_BATCH", DRAIN),
    ("QUEEN_SWEEPER_BULK_BATCH", DRAIN),
    ("QUEEN_SWEEPER_CYCLE_MAX_ROWS", DRAIN),
    ("QUEEN_SWEEPER_MAX_FIRE_BYTES", DRAIN),
    ("QUEEN_SWEEPER_MAX_SLEEP_MS", SLEEP),
    ("QUEEN_SWEEPER_MIN_SLEEP_MS", SLEEP),
    ("QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS", SLEEP),
    ("QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS", SLEEP),
    ("QUEEN_KV_EXPIRE_EVERY_MS", PRUNE),
    ("QUEEN_KV_EXPIRE_BATCH", PRUNE),
    ("QUEEN_KV_USAGE_EVERY_MS", ROLLUP),
    ("log_timers fillfactor", TIMERS_TABLE),
    ("log_timers autovacuum_vacuum_threshold", TIMERS_TABLE),
    ("QUEEN_API_IDEMPOTENCY_WINDOW_S", IDEMPOTENCY),
];

/// The files `setting` governs, if the map names it.
pub fn governed(setting: &str) -> Option<&'static [&'static str]> {
    GOVERNS
        .iter()
        .find(|(name, _)| *name == setting)
        .map(|(_, files)| *files)
}

/// What `--check` found for one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Currency {
    pub setting: String,
    pub value: u64,
    /// The block's `[measured DATE]`.
    pub measured_on: String,
    /// The commit the block names (None: it names none).
    pub commit: Option<String>,
    pub file: PathBuf,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No governed file changed since the block's commit.
    Current,
    /// The block names no commit.
    NoCommit,
    /// A governed file changed in a commit the block's commit does not contain.
    ChangedSince { commit: String, files: Vec<String> },
    /// A governed file has changes not committed yet.
    Uncommitted { files: Vec<String> },
    /// The block's commit is not in this repository (a shallow clone, or a commit not kept).
    UnknownCommit,
    /// Measured on the code in force, but its rule gave no value (its sides conflict at every
    /// measured value): the value in force stays until a person decides.
    Undecided { reason: String },
}

impl Currency {
    pub fn is_current(&self) -> bool {
        self.verdict == Verdict::Current
    }

    /// One line for the report and CI's log.
    pub fn line(&self) -> String {
        let at = match &self.commit {
            Some(c) => format!("measured {} at {c}", self.measured_on),
            None => format!("measured {}", self.measured_on),
        };
        let why = match &self.verdict {
            Verdict::Current => "no governed file changed since".to_owned(),
            Verdict::NoCommit => "the block names no commit".to_owned(),
            Verdict::ChangedSince { commit, files } => {
                format!("{} changed since, last at {commit}", files.join(", "))
            }
            Verdict::Uncommitted { files } => {
                format!("{} changed and not committed", files.join(", "))
            }
            Verdict::UnknownCommit => "its commit is not in this repository".to_owned(),
            Verdict::Undecided { reason } => {
                format!("no governed file changed since, but the rule gave no value: {reason}")
            }
        };
        format!(
            "{} {} = {} ({at}, {}): {why}",
            match self.verdict {
                Verdict::Current => "current",
                Verdict::Undecided { .. } => "UNDECIDED",
                _ => "STALE",
            },
            self.setting,
            self.value,
            self.file.display()
        )
    }
}

/// The commit a block names: its `--   commit:` line, without a `(dirty)` note.
pub fn block_commit(block: &Block) -> Option<String> {
    block.lines.iter().find_map(|line| {
        let rest = line.strip_prefix("--   commit:")?.trim();
        let hash = rest.split_whitespace().next()?;
        (!hash.is_empty()).then(|| hash.to_owned())
    })
}

/// The date in a block's header, `-- [measured DATE] ...`.
fn block_date(block: &Block) -> String {
    block
        .lines
        .first()
        .and_then(|l| l.strip_prefix("-- [measured "))
        .and_then(|r| r.split_once(']'))
        .map_or_else(String::new, |(d, _)| d.to_owned())
}

/// Every dated block in the `.sql` files of `sql_dir`, judged against the history of the git
/// repository at `repo` (the paths in [`GOVERNS`] are relative to it).
pub fn check(repo: &Path, sql_dir: &Path) -> Result<Vec<Currency>, String> {
    let mut out = Vec::new();
    for (file, text) in blocks::sql_files(sql_dir)? {
        let found = blocks::find_in_sql(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        for block in found {
            let governed = governed(&block.setting).ok_or_else(|| {
                format!(
                    "{}: {} has a block but soak/src/currency.rs names no files it governs; add it to GOVERNS",
                    file.display(),
                    block.setting
                )
            })?;
            let commit = block_commit(&block);
            let verdict = match (&commit, block.decided()) {
                (None, _) => Verdict::NoCommit,
                (Some(c), decided) => match (judge(repo, c, governed)?, decided) {
                    (Verdict::Current, blocks::Decided::Refused(reason)) => {
                        Verdict::Undecided { reason }
                    }
                    (verdict, _) => verdict,
                },
            };
            out.push(Currency {
                setting: block.setting.clone(),
                value: block.value,
                measured_on: block_date(&block),
                commit,
                file: file.clone(),
                verdict,
            });
        }
    }
    Ok(out)
}

/// Whether any of `governed` changed its code after `commit` (committed, or in the working
/// tree). A change of comments only (`--` lines in SQL, `//` lines in Rust) is not a change of
/// the code measured: applying a block rewrites the comments of the file it lands in.
fn judge(repo: &Path, commit: &str, governed: &[&str]) -> Result<Verdict, String> {
    if git(repo, &["cat-file", "-e", &format!("{commit}^{{commit}}")]).is_err() {
        return Ok(Verdict::UnknownCommit);
    }
    let uncommitted = code_changes(repo, &["HEAD"], governed)?;
    if !uncommitted.is_empty() {
        return Ok(Verdict::Uncommitted { files: uncommitted });
    }
    let files = code_changes(repo, &[commit, "HEAD"], governed)?;
    if files.is_empty() {
        return Ok(Verdict::Current);
    }
    let range = format!("{commit}..HEAD");
    let files_args: Vec<&str> = files.iter().map(String::as_str).collect();
    let last = git(
        repo,
        &[&["log", "-1", "--format=%h", &range, "--"], &files_args[..]].concat(),
    )?;
    Ok(Verdict::ChangedSince {
        commit: last,
        files,
    })
}

/// The files of `paths` whose diff between `revs` (one rev: against the working tree) touches a
/// line that is not a comment or blank.
fn code_changes(repo: &Path, revs: &[&str], paths: &[&str]) -> Result<Vec<String>, String> {
    let names = git(
        repo,
        &[&["diff", "--name-only"], revs, &["--"], paths].concat(),
    )?;
    let mut changed = Vec::new();
    for file in names.lines() {
        let diff = git(repo, &[&["diff", "-U0"], revs, &["--", file]].concat())?;
        if touches_code(&diff, file) {
            changed.push(file.to_owned());
        }
    }
    Ok(changed)
}

/// Whether a unified diff of `file` adds or removes a line of code (not a comment, not blank).
fn touches_code(diff: &str, file: &str) -> bool {
    let comment = if file.ends_with(".sql") { "--" } else { "//" };
    // Lines before a file's first hunk header are its `diff`, `index`, `---` and `+++` lines.
    let mut in_hunk = false;
    diff.lines()
        .filter(|l| {
            if l.starts_with("diff ") {
                in_hunk = false;
            } else if l.starts_with("@@") {
                in_hunk = true;
                return false;
            }
            in_hunk
        })
        .filter_map(|l| l.strip_prefix('+').or_else(|| l.strip_prefix('-')))
        .map(str::trim)
        .any(|l| !l.is_empty() && !l.starts_with(comment))
}

/// Runs git in `repo`; its stdout, or what it said on failure.
fn git(repo: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lines_of_code_count_as_a_change() {
        let sql = "--- a/x.sql\n+++ b/x.sql\n@@ -1 +1 @@\n--- [measured 2026] X = 1\n+-- [measured 2027] X = 2\n+\n";
        assert!(!touches_code(sql, "sql/x.sql"));
        assert!(touches_code("@@ -1 +1 @@\n+SELECT 2;\n", "sql/x.sql"));
        assert!(!touches_code("@@ -1 +1 @@\n-// old\n+// new\n", "a.rs"));
        assert!(touches_code("@@ -1 +1 @@\n-    x: 200,\n", "a.rs"));
        // A `--` line in Rust is code; a `++` line added to SQL is too.
        assert!(touches_code(
            "@@ -1 +1 @@\n+-- not a comment here\n",
            "a.rs"
        ));
        assert!(touches_code("@@ -1 +1 @@\n+++x;\n", "sql/x.sql"));
    }

    /// A throwaway repository with `sql/` and one governed file.
    struct Repo(PathBuf);

    impl Repo {
        fn new(name: &str) -> Repo {
            let dir =
                std::env::temp_dir().join(format!("queen-currency-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("sql")).expect("temp dir");
            std::fs::create_dir_all(dir.join("sweeper/src")).expect("temp dir");
            let repo = Repo(dir);
            repo.run(&["init", "-q"]);
            repo
        }

        fn run(&self, args: &[&str]) -> String {
            git(
                &self.0,
                &[
                    &[
                        "-c",
                        "user.name=t",
                        "-c",
                        "user.email=t@t",
                        "-c",
                        "commit.gpgsign=false",
                    ],
                    args,
                ]
                .concat(),
            )
            .expect("git")
        }

        fn write(&self, path: &str, text: &str) {
            std::fs::write(self.0.join(path), text).expect("write");
        }

        fn commit(&self, message: &str) -> String {
            self.run(&["add", "-A"]);
            self.run(&["commit", "-q", "-m", message]);
            self.run(&["rev-parse", "--short=7", "HEAD"])
        }

        fn block(&self, commit: Option<&str>) {
            let commit_line =
                commit.map_or_else(String::new, |c| format!("--   commit:   {c} (dirty)\n"));
            self.write(
                "sql/001.sql",
                &format!(
                    "-- [measured 2026-12-05] QUEEN_SWEEPER_MAX_SLEEP_MS = 1000\n--   rig:      r\n{commit_line}--   observed: o.\nSELECT 1;\n"
                ),
            );
        }

        fn verdicts(&self) -> Vec<Verdict> {
            check(&self.0, &self.0.join("sql"))
                .expect("check")
                .into_iter()
                .map(|c| c.verdict)
                .collect()
        }
    }

    impl Drop for Repo {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_block_is_current_until_a_file_its_setting_governs_changes() {
        let repo = Repo::new("governs");
        repo.write("sweeper/src/sleep.rs", "fn v1() {}\n");
        repo.write("sweeper/src/other.rs", "fn v1() {}\n");
        let measured = repo.commit("the code measured");
        repo.block(Some(&measured));
        repo.commit("its block");
        assert_eq!(repo.verdicts(), [Verdict::Current]);

        // A file the setting does not govern changes: still current.
        repo.write("sweeper/src/other.rs", "fn v2() {}\n");
        repo.commit("elsewhere");
        assert_eq!(repo.verdicts(), [Verdict::Current]);

        // A governed file's comments change: still current (a block applied rewrites comments).
        repo.write("sweeper/src/sleep.rs", "// why v1\nfn v1() {}\n\n");
        repo.commit("comments");
        assert_eq!(repo.verdicts(), [Verdict::Current]);

        // A governed file's code changes in the working tree, then in a commit: stale.
        repo.write("sweeper/src/sleep.rs", "// why v1\nfn v2() {}\n");
        assert_eq!(
            repo.verdicts(),
            [Verdict::Uncommitted {
                files: vec!["sweeper/src/sleep.rs".into()]
            }]
        );
        let changed = repo.commit("the sleep changes");
        assert_eq!(
            repo.verdicts(),
            [Verdict::ChangedSince {
                commit: changed.clone(),
                files: vec!["sweeper/src/sleep.rs".into()]
            }]
        );

        // Measured again at the new code: current again.
        repo.block(Some(&changed));
        repo.commit("the new block");
        assert_eq!(repo.verdicts(), [Verdict::Current]);
    }

    #[test]
    fn a_block_whose_rule_gave_no_value_is_undecided_not_current() {
        let repo = Repo::new("undecided");
        repo.write("sweeper/src/sleep.rs", "fn v1() {}\n");
        let measured = repo.commit("the code measured");
        repo.write(
            "sql/001.sql",
            &format!(
                "-- [measured 2026-12-07] QUEEN_SWEEPER_MAX_SLEEP_MS = 1000\n--   rig:      r\n--   commit:   {measured}\n--   observed: o.\n--   decision: none; 1000 stays in force: both sides conflict.\nSELECT 1;\n"
            ),
        );
        repo.commit("its block");
        let found = check(&repo.0, &repo.0.join("sql")).expect("check");
        assert_eq!(
            found[0].verdict,
            Verdict::Undecided {
                reason: "1000 stays in force: both sides conflict.".into()
            }
        );
        assert!(!found[0].is_current());
        assert!(
            found[0].line().starts_with("UNDECIDED "),
            "{}",
            found[0].line()
        );

        // Once its code changes, it is stale like any other block.
        repo.write("sweeper/src/sleep.rs", "fn v2() {}\n");
        repo.commit("the sleep changes");
        assert!(matches!(repo.verdicts()[0], Verdict::ChangedSince { .. }));
    }

    #[test]
    fn a_block_without_a_commit_or_with_one_unknown_here_is_stale() {
        let repo = Repo::new("nocommit");
        repo.write("sweeper/src/sleep.rs", "// v1\n");
        repo.block(None);
        repo.commit("an old block");
        assert_eq!(repo.verdicts(), [Verdict::NoCommit]);
        repo.block(Some("0123456"));
        repo.commit("a block from elsewhere");
        assert_eq!(repo.verdicts(), [Verdict::UnknownCommit]);
        let line = check(&repo.0, &repo.0.join("sql")).expect("check")[0].line();
        assert!(
            line.starts_with(
                "STALE QUEEN_SWEEPER_MAX_SLEEP_MS = 1000 (measured 2026-12-05 at 0123456"
            ),
            "{line}"
        );
    }

    #[test]
    fn a_block_for_a_setting_the_map_does_not_name_is_refused() {
        let repo = Repo::new("unmapped");
        repo.write(
            "sql/001.sql",
            "-- [measured 2026-12-05] QUEEN_NEW_KNOB = 3\n--   commit:   abc1234\n",
        );
        repo.commit("a block");
        let err = check(&repo.0, &repo.0.join("sql")).expect_err("unmapped");
        assert!(
            err.contains("QUEEN_NEW_KNOB") && err.contains("GOVERNS"),
            "{err}"
        );
    }

    #[test]
    fn every_governed_path_exists_in_this_repository() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for (setting, files) in GOVERNS {
            for file in *files {
                assert!(root.join(file).exists(), "{setting}: {file} does not exist");
            }
        }
    }

    #[test]
    fn every_block_in_sql_has_its_governed_files() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for entry in std::fs::read_dir(root.join("sql")).expect("sql/") {
            let path = entry.expect("entry").path();
            let text = std::fs::read_to_string(&path).expect("read");
            for block in blocks::find_in_sql(&text).expect("the blocks in sql/ parse") {
                assert!(
                    governed(&block.setting).is_some(),
                    "{}: {}",
                    path.display(),
                    block.setting
                );
            }
        }
    }
}
