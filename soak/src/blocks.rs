//! Dated blocks in the house formula of `sql/001_log_schema.sql`, and `apply-blocks`, which puts
//! them in place of the `[not measured]` markers.
//!
//! A block:
//!
//! ```text
//! -- [measured 2026-12-02] QUEEN_SWEEPER_LEASE_MS = 30000
//! --   rig:      2 cores, 24 GiB, PostgreSQL 15.18 (...), local; 3 brokers, a backlog of ...
//! --   commit:   9058d0a
//! --   symptom:  a fire that outlives its lease under push load: ...
//! --   observed: stale segments + failed calls per value: 200: 14; ...; 30000: 0. Edge: 1000.
//! ```
//!
//! Only findings whose sweep ran the shipped value become blocks: a number the run did not
//! measure never gets one.

use std::path::{Path, PathBuf};

use crate::experiments::Finding;
use crate::rig::Rig;

/// One dated block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub setting: String,
    pub value: u64,
    pub lines: Vec<String>,
}

impl Block {
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }
}

/// The blocks for `findings`, each dated and described by the run that measured it; a finding
/// without its own (written before findings carried them) falls back to `date` and `rig`.
pub fn blocks(findings: &[Finding], rig: &Rig, date: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let this_rig = rig.describe();
    for finding in findings.iter().filter(|f| f.measured_shipped) {
        let date = or_default(&finding.measured_on, date);
        let rig = or_default(&finding.rig, &this_rig);
        let edge = match finding.threshold {
            Some(t) => format!(" Edge of the symptom: {t}."),
            None => String::new(),
        };
        let verdict = if finding.shipped_ok {
            "the shipped value is on the safe side"
        } else {
            "THE SHIPPED VALUE SHOWS THE SYMPTOM"
        };
        let mut settings = vec![finding.setting.clone()];
        // One sweep of the empty-claim band measures both of its ends.
        if finding.setting == "QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS" {
            settings.push("QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS".into());
        }
        for setting in settings {
            let value = if setting == "QUEEN_SWEEPER_EMPTY_CLAIM_MAX_MS" {
                finding.shipped * 8
            } else {
                finding.shipped
            };
            let mut lines = vec![
                format!("-- [measured {date}] {setting} = {value}"),
                format!("--   rig:      {rig}; {}", finding.load),
            ];
            // Read by `soak blocks --check` (crate::currency): a block without it is stale.
            if !finding.commit.is_empty() {
                lines.push(format!("--   commit:   {}", finding.commit));
            }
            lines.push(format!("--   symptom:  {}", finding.symptom));
            lines.push(format!(
                "--   observed: {}.{edge} {verdict}.",
                finding.observed
            ));
            out.push(Block {
                lines,
                setting,
                value,
            });
        }
    }
    out
}

fn or_default<'a>(own: &'a str, fallback: &'a str) -> &'a str {
    if own.is_empty() { fallback } else { own }
}

/// `blocks.sql`: every block, with a header saying where they came from.
pub fn file_text(blocks: &[Block], rig: &Rig, date: &str) -> String {
    let mut text = format!(
        "-- Dated blocks from `soak experiments`, written on {date} by rig {}; each block names the\n-- day and the rig it was measured on (a run with --only keeps the other settings' blocks).\n-- Apply them with `soak apply-blocks <this directory>`.\n\n",
        rig.label()
    );
    for block in blocks {
        text.push_str(&block.text());
        text.push_str("\n\n");
    }
    text
}

/// The blocks in force in a `.sql` file of `sql/`: like [`parse`], but a `--   ` line outside a
/// block (the house formula's own example, prose) is prose, not an error.
pub fn find_in_sql(text: &str) -> Result<Vec<Block>, String> {
    let mut kept = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.starts_with("-- [measured ") {
            in_block = true;
        } else if !line.starts_with("--   ") {
            in_block = false;
        }
        if in_block || !line.starts_with("--   ") {
            kept.push(line);
        }
    }
    parse(&kept.join("\n"))
}

/// Parses `blocks.sql`.
pub fn parse(text: &str) -> Result<Vec<Block>, String> {
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("-- [measured ") {
            if let Some(done) = current.take() {
                blocks.push(done);
            }
            let (_, assignment) = rest
                .split_once("] ")
                .ok_or_else(|| format!("malformed block header: {line}"))?;
            let (setting, value) = assignment
                .rsplit_once(" = ")
                .ok_or_else(|| format!("malformed block header: {line}"))?;
            let value = value
                .trim()
                .parse()
                .map_err(|_| format!("block value is not a number: {line}"))?;
            current = Some(Block {
                setting: setting.trim().to_owned(),
                value,
                lines: vec![line.to_owned()],
            });
        } else if line.starts_with("--   ") {
            current
                .as_mut()
                .ok_or_else(|| format!("a block line outside a block: {line}"))?
                .lines
                .push(line.to_owned());
        } else if let Some(done) = current.take() {
            blocks.push(done);
        }
    }
    if let Some(done) = current {
        blocks.push(done);
    }
    Ok(blocks)
}

/// Replaces the `[not measured]` marker (or an older dated block) of every block's setting in
/// the `.sql` files of `sql_dir`. Refuses a block whose value differs from the marker's: a
/// measurement records the number in force; changing a number is a code change.
pub fn apply(dir: &Path, sql_dir: &Path) -> Result<Vec<String>, String> {
    let blocks_path = dir.join("blocks.sql");
    let text = std::fs::read_to_string(&blocks_path)
        .map_err(|e| format!("cannot read {}: {e}", blocks_path.display()))?;
    let blocks = parse(&text)?;
    if blocks.is_empty() {
        return Err(format!("{} holds no blocks", blocks_path.display()));
    }
    let mut contents = sql_files(sql_dir)?;
    let mut applied = Vec::new();
    for block in &blocks {
        let mut found = false;
        for (path, content) in &mut contents {
            if let Some(replaced) = replace_in(content, block)? {
                *content = replaced;
                applied.push(format!(
                    "{} = {} in {}",
                    block.setting,
                    block.value,
                    path.display()
                ));
                found = true;
                break;
            }
        }
        if !found {
            return Err(format!(
                "no marker for {} in {}",
                block.setting,
                sql_dir.display()
            ));
        }
    }
    for (path, content) in contents {
        std::fs::write(&path, content)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(applied)
}

/// Every `.sql` file of `sql_dir` with its text, in name order.
pub fn sql_files(sql_dir: &Path) -> Result<Vec<(PathBuf, String)>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(sql_dir)
        .map_err(|e| format!("cannot read {}: {e}", sql_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            std::fs::read_to_string(&p)
                .map(|c| (p.clone(), c))
                .map_err(|e| format!("cannot read {}: {e}", p.display()))
        })
        .collect()
}

/// The file with `block` in place of its setting's marker or older block, if the file has one.
fn replace_in(content: &str, block: &Block) -> Result<Option<String>, String> {
    let lines: Vec<&str> = content.lines().collect();
    let marker = |line: &str| -> Option<u64> {
        let rest = line.strip_prefix("-- [not measured] ").or_else(|| {
            line.strip_prefix("-- [measured ")
                .and_then(|r| r.split_once("] ").map(|(_, a)| a))
        })?;
        let rest = rest.strip_prefix(&block.setting)?.strip_prefix(" = ")?;
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let Some(start) = lines.iter().position(|l| marker(l).is_some()) else {
        return Ok(None);
    };
    let in_force = marker(lines[start]).expect("just matched");
    if in_force != block.value {
        return Err(format!(
            "{}: the block measured {} but the value in force is {in_force}; change the value in code first",
            block.setting, block.value
        ));
    }
    let mut end = start + 1;
    if lines[start].starts_with("-- [measured ") {
        while end < lines.len() && lines[end].starts_with("--   ") {
            end += 1;
        }
    }
    let mut out: Vec<String> = lines[..start].iter().map(|l| (*l).to_owned()).collect();
    out.extend(block.lines.iter().cloned());
    out.extend(lines[end..].iter().map(|l| (*l).to_owned()));
    let mut text = out.join("\n");
    if content.ends_with('\n') {
        text.push('\n');
    }
    Ok(Some(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(setting: &str, value: u64) -> Block {
        Block {
            setting: setting.into(),
            value,
            lines: vec![
                format!("-- [measured 2026-12-02] {setting} = {value}"),
                "--   rig:      2 cores".into(),
                "--   symptom:  s".into(),
                "--   observed: o".into(),
            ],
        }
    }

    #[test]
    fn a_block_replaces_its_marker_and_nothing_else() {
        let sql = "-- header\n-- [not measured] QUEEN_SWEEPER_LEASE_MS = 30000: a guess.\n-- [not measured] QUEEN_SWEEPER_CLAIM_BATCH = 200: a guess.\nSELECT 1;\n";
        let out = replace_in(sql, &block("QUEEN_SWEEPER_LEASE_MS", 30_000))
            .unwrap()
            .unwrap();
        assert_eq!(
            out,
            "-- header\n-- [measured 2026-12-02] QUEEN_SWEEPER_LEASE_MS = 30000\n--   rig:      2 cores\n--   symptom:  s\n--   observed: o\n-- [not measured] QUEEN_SWEEPER_CLAIM_BATCH = 200: a guess.\nSELECT 1;\n"
        );
    }

    #[test]
    fn a_newer_block_replaces_an_older_one_whole() {
        let sql = "-- [measured 2026-01-01] log_timers fillfactor = 90\n--   rig:      old\n--   symptom:  old\n--   observed: old\nALTER TABLE x;\n";
        let out = replace_in(sql, &block("log_timers fillfactor", 90))
            .unwrap()
            .unwrap();
        assert!(out.starts_with(
            "-- [measured 2026-12-02] log_timers fillfactor = 90\n--   rig:      2 cores"
        ));
        assert!(out.ends_with("--   observed: o\nALTER TABLE x;\n"));
        assert!(!out.contains("old"));
    }

    #[test]
    fn a_block_for_another_value_than_the_one_in_force_is_refused() {
        let sql = "-- [not measured] QUEEN_SWEEPER_LEASE_MS = 30000: a guess.\n";
        let error = replace_in(sql, &block("QUEEN_SWEEPER_LEASE_MS", 10_000)).unwrap_err();
        assert!(error.contains("value in force is 30000"), "{error}");
    }

    #[test]
    fn a_setting_whose_name_prefixes_another_does_not_match_it() {
        let sql = "-- [not measured] QUEEN_SWEEPER_EMPTY_CLAIM_MIN_MS = 25: a guess.\n";
        assert_eq!(
            replace_in(sql, &block("QUEEN_SWEEPER_EMPTY_CLAIM_M", 25)).unwrap(),
            None
        );
    }

    fn rig() -> crate::rig::Rig {
        crate::rig::Rig {
            cores: 2,
            memory_gib: 24,
            server_version: "PostgreSQL 15.18".into(),
            server_major: 15,
            shared_buffers: "128MB".into(),
            synchronous_commit: "on".into(),
            max_connections: "300".into(),
            fsync: "on".into(),
            provider: "local".into(),
        }
    }

    fn finding(setting: &str, measured_on: &str, rig: &str) -> Finding {
        Finding {
            setting: setting.into(),
            shipped: 30_000,
            symptom: "s".into(),
            observed: "o".into(),
            threshold: Some(200),
            shipped_ok: true,
            load: "load".into(),
            measured_shipped: true,
            measured_on: measured_on.into(),
            rig: rig.into(),
            commit: String::new(),
            points: Vec::new(),
        }
    }

    #[test]
    fn a_block_names_the_commit_its_finding_was_measured_at() {
        let mut f = finding("QUEEN_SWEEPER_LEASE_MS", "2026-12-05", "rig");
        f.commit = "abc1234 (dirty)".into();
        let out = blocks(&[f], &rig(), "2026-12-05");
        assert_eq!(out[0].lines[2], "--   commit:   abc1234 (dirty)");
        assert_eq!(
            crate::currency::block_commit(&out[0]).as_deref(),
            Some("abc1234")
        );
        // A finding from before findings carried commits gets no such line.
        let old = blocks(
            &[finding("QUEEN_SWEEPER_LEASE_MS", "2026-12-02", "rig")],
            &rig(),
            "x",
        );
        assert!(old[0].lines.iter().all(|l| !l.contains("commit:")));
    }

    #[test]
    fn a_finding_kept_from_an_earlier_run_keeps_its_own_date_and_rig() {
        let findings = [
            finding("QUEEN_SWEEPER_LEASE_MS", "2026-12-02", "old rig"),
            finding("QUEEN_SWEEPER_CLAIM_BATCH", "", ""),
        ];
        let out = blocks(&findings, &rig(), "2026-12-03");
        assert_eq!(
            out[0].lines[0],
            "-- [measured 2026-12-02] QUEEN_SWEEPER_LEASE_MS = 30000"
        );
        assert_eq!(out[0].lines[1], "--   rig:      old rig; load");
        // Without its own, a finding is this run's.
        assert_eq!(
            out[1].lines[0],
            "-- [measured 2026-12-03] QUEEN_SWEEPER_CLAIM_BATCH = 30000"
        );
        assert!(out[1].lines[1].starts_with(&format!("--   rig:      {}; ", rig().describe())));
    }

    #[test]
    fn blocks_in_force_are_found_among_prose_and_examples() {
        let sql = "-- The formula:\n--   -- [measured 2026-12-02] X = 1\n--   prose\n\n-- [measured 2026-12-05] QUEEN_SWEEPER_LEASE_MS = 30000\n--   rig:      r\n--   commit:   abc1234\nSELECT 1;\n--   more prose\n";
        let found = find_in_sql(sql).expect("found");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].setting, "QUEEN_SWEEPER_LEASE_MS");
        assert_eq!(found[0].lines.len(), 3);
        assert!(find_in_sql("-- [measured 2026-12-05] no value\n").is_err());
    }

    #[test]
    fn blocks_round_trip_through_their_file() {
        let rig = rig();
        let written = vec![
            block("QUEEN_SWEEPER_LEASE_MS", 30_000),
            block("log_timers fillfactor", 90),
        ];
        assert_eq!(
            parse(&file_text(&written, &rig, "2026-12-02")).unwrap(),
            written
        );
    }
}
