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
/// without its own (written before findings carried them) falls back to `date` and `rig`. A
/// block's value is the one the decision rule gives; when it gives none, the value in force,
/// with a `decision: none` line that `apply-blocks` refuses.
pub fn blocks(findings: &[Finding], rig: &Rig, date: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let this_rig = rig.describe();
    for finding in findings.iter().filter(|f| f.measured_shipped) {
        let date = or_default(&finding.measured_on, date);
        let rig = or_default(&finding.rig, &this_rig);
        let value = finding
            .decision
            .as_ref()
            .and_then(|d| d.value)
            .unwrap_or(finding.shipped);
        let setting = &finding.setting;
        let mut lines = vec![
            format!("-- [measured {date}] {setting} = {value}"),
            format!("--   rig:      {rig}; {}", finding.load),
        ];
        // Read by `soak blocks --check` (crate::currency): a block without it is stale.
        if !finding.commit.is_empty() {
            lines.push(format!("--   commit:   {}", finding.commit));
        }
        lines.push(format!("--   symptom:  {}", finding.symptom));
        match &finding.decision {
            Some(decision) => {
                let runs = if finding.reps > 1 {
                    format!("{} runs per value. ", finding.reps)
                } else {
                    String::new()
                };
                lines.push(format!("--   observed: {runs}{}", finding.observed));
                lines.push(match decision.value {
                    Some(v) => format!(
                        "--   decision: {v}, by the rule at the top of 001_log_schema.sql (shipped was {}): {}.",
                        finding.shipped, decision.reason
                    ),
                    None => format!(
                        "--   decision: none; {} stays in force: {}.",
                        finding.shipped, decision.reason
                    ),
                });
            }
            None => {
                let edge = match finding.threshold {
                    Some(t) => format!(" Edge of the symptom: {t}."),
                    None => String::new(),
                };
                let verdict = if finding.shipped_ok {
                    "the shipped value is on the safe side"
                } else {
                    "THE SHIPPED VALUE SHOWS THE SYMPTOM"
                };
                lines.push(format!(
                    "--   observed: {}.{edge} {verdict}.",
                    finding.observed
                ));
            }
        }
        out.push(Block {
            lines,
            setting: setting.clone(),
            value,
        });
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

/// What a block's `decision:` line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// A block from before blocks carried decisions: it records the value in force.
    Unstated,
    /// The rule gave this value.
    Value(u64),
    /// The rule gave none, for this reason.
    Refused(String),
}

impl Block {
    pub fn decided(&self) -> Decided {
        let Some(rest) = self
            .lines
            .iter()
            .find_map(|l| l.strip_prefix("--   decision: "))
        else {
            return Decided::Unstated;
        };
        if let Some(reason) = rest.strip_prefix("none") {
            return Decided::Refused(reason.trim_start_matches(';').trim().to_owned());
        }
        match rest
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
        {
            Some(v) => Decided::Value(v),
            None => Decided::Refused(format!("unreadable decision line: {rest}")),
        }
    }
}

/// Where `apply` writes.
#[derive(Debug, Clone, Copy)]
pub struct Targets<'a> {
    /// The `.sql` files with the markers and blocks.
    pub sql_dir: &'a Path,
    /// The sweeper's `config.rs`, whose `knobs!` table holds the defaults.
    pub config: &'a Path,
    /// The API's `config.rs` (`sweeper/broker/src/api/config.rs`), whose `Knob` constants hold
    /// the defaults of the settings the broker process reads.
    pub api_config: &'a Path,
    /// Apply the blocks that can be, and list the refused ones, instead of writing nothing.
    pub partial: bool,
}

/// Puts every block of `dir/blocks.sql` in place of its setting's marker (or older block) in the
/// `.sql` files, and writes the value it decided as the knob's default in `config.rs`, together:
/// the two never disagree. Refused, with the reason: a block whose rule gave no value, a block
/// whose value differs from the one in force without a decision behind it, a changed value for a
/// setting that is not a knob (its number lives in SQL and changes by hand), a value the knob's
/// bounds or the other defaults reject. Without `partial`, one refusal writes nothing.
pub fn apply(dir: &Path, to: Targets<'_>) -> Result<Vec<String>, String> {
    let blocks_path = dir.join("blocks.sql");
    let text = std::fs::read_to_string(&blocks_path)
        .map_err(|e| format!("cannot read {}: {e}", blocks_path.display()))?;
    let blocks = parse(&text)?;
    if blocks.is_empty() {
        return Err(format!("{} holds no blocks", blocks_path.display()));
    }
    let mut contents = sql_files(to.sql_dir)?;
    let mut config = std::fs::read_to_string(to.config)
        .map_err(|e| format!("cannot read {}: {e}", to.config.display()))?;
    let mut api_config = std::fs::read_to_string(to.api_config)
        .map_err(|e| format!("cannot read {}: {e}", to.api_config.display()))?;
    let mut applied = Vec::new();
    let mut refused = Vec::new();
    for block in &blocks {
        let configs = Configs {
            sweeper: &mut config,
            api: &mut api_config,
        };
        match apply_one(block, &mut contents, configs, to.sql_dir) {
            Ok(line) => applied.push(line),
            Err(why) => refused.push(format!("{}: {why}", block.setting)),
        }
    }
    if !refused.is_empty() && !to.partial {
        return Err(format!(
            "nothing written; refused:\n  {}\n(--partial applies the others)",
            refused.join("\n  ")
        ));
    }
    for (path, content) in contents {
        std::fs::write(&path, content)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    std::fs::write(to.config, config)
        .map_err(|e| format!("cannot write {}: {e}", to.config.display()))?;
    std::fs::write(to.api_config, api_config)
        .map_err(|e| format!("cannot write {}: {e}", to.api_config.display()))?;
    applied.extend(refused.into_iter().map(|r| format!("REFUSED {r}")));
    Ok(applied)
}

/// The texts of the two files that hold knob defaults.
struct Configs<'a> {
    sweeper: &'a mut String,
    api: &'a mut String,
}

/// One block into the texts of the `.sql` files and of the `config.rs` that holds its knob.
fn apply_one(
    block: &Block,
    contents: &mut [(PathBuf, String)],
    configs: Configs<'_>,
    sql_dir: &Path,
) -> Result<String, String> {
    let decided = block.decided();
    if let Decided::Refused(reason) = &decided {
        return record_undecided(block, reason, contents, sql_dir);
    }
    let sweeper_knob = queen_sweeper::knob::ALL
        .iter()
        .any(|k| k.var == block.setting);
    let api = api_knob(configs.api, &block.setting);
    let is_knob = sweeper_knob || api.is_some();
    let in_force = in_force_in(contents, block, sql_dir)?;
    let changes = in_force != block.value;
    if changes {
        if decided == Decided::Unstated {
            return Err(format!(
                "the block measured {} but the value in force is {in_force}, and it names no decision; change the value in code first",
                block.value
            ));
        }
        if !is_knob {
            return Err(format!(
                "the rule decided {} where {in_force} is in force; this setting's number lives in SQL: change it there by hand, then apply",
                block.value
            ));
        }
        match api {
            Some(knob) => knob.accepts(&block.setting, block.value)?,
            None => crate::experiments::valid_default(&block.setting, block.value)?,
        }
    }
    let (config, new_config) = match api {
        Some(_) => {
            let new = set_api_default(configs.api, &block.setting, block.value)?;
            (configs.api, Some(new))
        }
        None if sweeper_knob => {
            let new = set_default(configs.sweeper, &block.setting, block.value)?;
            (configs.sweeper, Some(new))
        }
        None => (configs.sweeper, None),
    };
    let path = write_block(contents, block, sql_dir)?;
    if let Some(c) = new_config {
        *config = c;
    }
    let change = if changes {
        format!(" (was {in_force}; the default in config.rs too)")
    } else {
        String::new()
    };
    Ok(format!(
        "{} = {} in {}{change}",
        block.setting,
        block.value,
        path.display()
    ))
}

/// The value in force of `block`'s setting: what its marker or block in the `.sql` files says.
fn in_force_in(
    contents: &[(PathBuf, String)],
    block: &Block,
    sql_dir: &Path,
) -> Result<u64, String> {
    contents
        .iter()
        .find_map(|(_, content)| value_in_force(content, &block.setting))
        .ok_or_else(|| format!("no marker or block in {}", sql_dir.display()))
}

/// `block` in place of its setting's marker or older block, in the first file that has one;
/// that file's path.
fn write_block(
    contents: &mut [(PathBuf, String)],
    block: &Block,
    sql_dir: &Path,
) -> Result<PathBuf, String> {
    for (path, content) in contents.iter_mut() {
        if let Some(replaced) = replace_in(content, block)? {
            *content = replaced;
            return Ok(path.clone());
        }
    }
    Err(format!("no marker in {}", sql_dir.display()))
}

/// A block whose rule gave no value: it replaces the older block (whose numbers this run
/// measured again) when it was measured at the value in force, and the default stays; `soak
/// blocks --check` lists it as undecided until a person decides. A block measured at another
/// value than the one in force is refused: its numbers describe a default that is not shipped.
fn record_undecided(
    block: &Block,
    reason: &str,
    contents: &mut [(PathBuf, String)],
    sql_dir: &Path,
) -> Result<String, String> {
    let in_force = in_force_in(contents, block, sql_dir)?;
    if in_force != block.value {
        return Err(format!(
            "the decision rule gave no value ({reason}), and the block was measured at {}, not at the value in force, {in_force}",
            block.value
        ));
    }
    let path = write_block(contents, block, sql_dir)?;
    Ok(format!(
        "{UNDECIDED}{} = {} in {}, the value in force kept: the decision rule gave no value ({reason})",
        block.setting,
        block.value,
        path.display()
    ))
}

/// How `apply` starts the line of a block it recorded without a decision.
pub const UNDECIDED: &str = "UNDECIDED ";

/// The value a setting's marker or block in `content` records, if it has one.
fn value_in_force(content: &str, setting: &str) -> Option<u64> {
    content.lines().find_map(|line| marker_value(line, setting))
}

/// `-- [not measured] NAME = 5: ...` or `-- [measured DATE] NAME = 5`: the 5, for `setting`.
fn marker_value(line: &str, setting: &str) -> Option<u64> {
    let rest = line.strip_prefix("-- [not measured] ").or_else(|| {
        line.strip_prefix("-- [measured ")
            .and_then(|r| r.split_once("] ").map(|(_, a)| a))
    })?;
    let rest = rest.strip_prefix(setting)?.strip_prefix(" = ")?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// `config.rs` with `var`'s default in its `knobs!` table set to `value` (the text unchanged
/// when the default is already that number).
pub fn set_default(config: &str, var: &str, value: u64) -> Result<String, String> {
    let needle = format!("= \"{var}\", ");
    let mut found = 0;
    let mut out = Vec::new();
    for line in config.lines() {
        let Some(at) = line.find(&needle) else {
            out.push(line.to_owned());
            continue;
        };
        found += 1;
        let start = at + needle.len();
        let end = line[start..]
            .find(", [")
            .map(|e| start + e)
            .ok_or_else(|| format!("{var}: its line in config.rs has no bounds: {line}"))?;
        let current = evaluate(&line[start..end])
            .ok_or_else(|| format!("{var}: cannot read its default {:?}", &line[start..end]))?;
        if current == value {
            out.push(line.to_owned());
        } else {
            out.push(format!(
                "{}{}{}",
                &line[..start],
                grouped(value),
                &line[end..]
            ));
        }
    }
    if found != 1 {
        return Err(format!(
            "{var}: config.rs names it {found} times in its knobs table, not once"
        ));
    }
    let mut text = out.join("\n");
    if config.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// The API's knobs as this soak was built with them (`sweeper/broker/src/api/config.rs`): the
/// defaults and bounds of the settings the broker process reads, which the soak does not link.
pub const API_CONFIG: &str = include_str!("../../sweeper/broker/src/api/config.rs");

/// An API knob's default and bounds, as its `Knob { var, default, min, max, .. }` constant
/// writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiKnob {
    pub default: u64,
    pub min: u64,
    pub max: u64,
}

impl ApiKnob {
    /// Whether `value` lies within the knob's bounds; the error names them.
    pub fn accepts(&self, var: &str, value: u64) -> Result<(), String> {
        if (self.min..=self.max).contains(&value) {
            Ok(())
        } else {
            Err(format!(
                "{var} = {value} is outside its bounds [{}, {}]",
                self.min, self.max
            ))
        }
    }
}

/// The lines of `var`'s `Knob { .. }` constant in an API `config.rs` text: from its `var:` line
/// to the closing `};`.
fn api_knob_lines<'a>(config: &'a str, var: &str) -> Option<(usize, Vec<&'a str>)> {
    let needle = format!("var: \"{var}\",");
    let lines: Vec<&str> = config.lines().collect();
    let at = lines.iter().position(|l| l.trim() == needle)?;
    let end = lines[at..].iter().position(|l| l.trim() == "};")? + at;
    Some((at, lines[at..end].to_vec()))
}

/// `var`'s default and bounds in an API `config.rs` text; None when it is not an API knob.
pub fn api_knob(config: &str, var: &str) -> Option<ApiKnob> {
    let (_, lines) = api_knob_lines(config, var)?;
    let field = |name: &str| {
        lines.iter().find_map(|l| {
            let expr = l.trim().strip_prefix(name)?.strip_prefix(':')?;
            evaluate(expr.trim().trim_end_matches(','))
        })
    };
    Some(ApiKnob {
        default: field("default")?,
        min: field("min")?,
        max: field("max")?,
    })
}

/// An API `config.rs` text with `var`'s `default:` set to `value` (unchanged when it is already
/// that number).
pub fn set_api_default(config: &str, var: &str, value: u64) -> Result<String, String> {
    let current = api_knob(config, var)
        .ok_or_else(|| format!("{var}: the API's config.rs has no readable Knob for it"))?;
    if current.default == value {
        return Ok(config.to_owned());
    }
    let (at, lines) = api_knob_lines(config, var).expect("read just above");
    let offset = lines
        .iter()
        .position(|l| l.trim_start().starts_with("default:"))
        .expect("api_knob read its default");
    let mut out: Vec<String> = config.lines().map(str::to_owned).collect();
    let line = &out[at + offset];
    let indent = &line[..line.len() - line.trim_start().len()];
    out[at + offset] = format!("{indent}default: {},", grouped(value));
    let mut text = out.join("\n");
    if config.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// A default as written in the table: `5_000`, `1024 * 1024`, `24 * HOUR_MS`.
fn evaluate(expr: &str) -> Option<u64> {
    expr.split('*').try_fold(1u64, |acc, factor| {
        let factor = factor.trim();
        let n = match factor {
            "HOUR_MS" => 3_600_000,
            // The API's config.rs names these.
            "MIB" => 1024 * 1024,
            "TEN_YEARS_S" => 315_360_000,
            digits => digits.replace('_', "").parse().ok()?,
        };
        acc.checked_mul(n)
    })
}

/// `30000` as `30_000`, as the table writes numbers.
fn grouped(value: u64) -> String {
    let digits = value.to_string();
    if digits.len() <= 4 {
        return digits;
    }
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('_');
        }
        out.push(c);
    }
    out
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
/// A value other than the one in force is refused unless the block carries its decision.
fn replace_in(content: &str, block: &Block) -> Result<Option<String>, String> {
    let lines: Vec<&str> = content.lines().collect();
    let Some(start) = lines
        .iter()
        .position(|l| marker_value(l, &block.setting).is_some())
    else {
        return Ok(None);
    };
    let in_force = marker_value(lines[start], &block.setting).expect("just matched");
    if in_force != block.value && !matches!(block.decided(), Decided::Value(_)) {
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
            unit: String::new(),
            reps: 0,
            sides: Vec::new(),
            decision: None,
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

    const CONFIG: &str = "    knobs! {\n        LEASE_MS = \"QUEEN_SWEEPER_LEASE_MS\", 30_000, [100, HOUR_MS],\n            \"claim lease\";\n        CLAIM_BATCH = \"QUEEN_SWEEPER_CLAIM_BATCH\", 200, [1, 100_000],\n            \"rows per claim call\";\n        MAX_FIRE_BYTES = \"QUEEN_SWEEPER_MAX_FIRE_BYTES\", 1024 * 1024, [1024, 1024 * 1024 * 1024],\n            \"bytes\";\n    }\n";

    const API_CONFIG_SAMPLE: &str = "    pub const MAX_IN_FLIGHT: Knob = Knob {\n        var: \"QUEEN_API_MAX_IN_FLIGHT\",\n        default: 64,\n        min: 1,\n        max: 10_000,\n        help: \"slots\",\n    };\n    pub const IDEMPOTENCY_WINDOW_S: Knob = Knob {\n        var: \"QUEEN_API_IDEMPOTENCY_WINDOW_S\",\n        default: 3_600,\n        min: 1,\n        max: 7 * 24 * 3_600,\n        help: \"seconds\",\n    };\n";

    #[test]
    fn an_api_knob_is_read_and_its_default_rewritten_in_its_constant_alone() {
        let window = "QUEEN_API_IDEMPOTENCY_WINDOW_S";
        assert_eq!(
            api_knob(API_CONFIG_SAMPLE, window),
            Some(ApiKnob {
                default: 3_600,
                min: 1,
                max: 604_800
            })
        );
        assert_eq!(api_knob(API_CONFIG_SAMPLE, "QUEEN_SWEEPER_LEASE_MS"), None);
        let out = set_api_default(API_CONFIG_SAMPLE, window, 600).unwrap();
        assert_eq!(api_knob(&out, window).unwrap().default, 600);
        assert!(out.contains("\n        default: 600,\n        min: 1,\n        max: 7 * 24"));
        assert!(
            out.contains("default: 64,"),
            "the other knob keeps its default"
        );
        assert_eq!(
            out.len() + 2,
            API_CONFIG_SAMPLE.len(),
            "only `3_600` became `600`"
        );
        assert!(api_knob(&out, window).unwrap().accepts(window, 0).is_err());
    }

    #[test]
    fn every_knob_of_the_apis_config_is_readable_here() {
        let vars: Vec<&str> = API_CONFIG
            .lines()
            .filter_map(|l| l.trim().strip_prefix("var: \"")?.strip_suffix("\","))
            .collect();
        assert!(vars.len() >= 10, "{vars:?}");
        for var in vars {
            assert!(
                api_knob(API_CONFIG, var).is_some(),
                "{var}: its Knob in sweeper/broker/src/api/config.rs uses a form blocks.rs cannot read"
            );
        }
    }

    #[test]
    fn apply_writes_an_api_knobs_default_in_the_apis_config() {
        let s = Scratch::new(
            "api",
            &[decided(
                "QUEEN_API_IDEMPOTENCY_WINDOW_S",
                600,
                "600, by the rule (shipped was 3600): resolved.",
            )],
        );
        let applied = s.apply(false).expect("applied");
        assert!(applied[0].contains("was 3600"), "{applied:?}");
        assert!(
            s.read("sql/001.sql")
                .contains("] QUEEN_API_IDEMPOTENCY_WINDOW_S = 600\n")
        );
        assert_eq!(
            api_knob(&s.read("api_config.rs"), "QUEEN_API_IDEMPOTENCY_WINDOW_S").map(|k| k.default),
            Some(600)
        );
        assert_eq!(
            s.read("config.rs"),
            CONFIG,
            "the sweeper's config is not the API's"
        );
        let beyond = Scratch::new(
            "api-beyond",
            &[decided(
                "QUEEN_API_IDEMPOTENCY_WINDOW_S",
                999_999_999,
                "999999999, by the rule: resolved.",
            )],
        );
        let error = beyond.apply(false).expect_err("outside the bounds");
        assert!(error.contains("outside its bounds [1, 604800]"), "{error}");
        assert_eq!(beyond.read("api_config.rs"), API_CONFIG_SAMPLE);
    }

    fn decided(setting: &str, value: u64, decision: &str) -> Block {
        let mut b = block(setting, value);
        b.lines.push(format!("--   decision: {decision}"));
        b
    }

    #[test]
    fn a_default_is_rewritten_in_the_knobs_table_and_nowhere_else() {
        let out = set_default(CONFIG, "QUEEN_SWEEPER_CLAIM_BATCH", 800).unwrap();
        assert!(
            out.contains("\"QUEEN_SWEEPER_CLAIM_BATCH\", 800, [1, 100_000],"),
            "{out}"
        );
        assert!(out.contains("\"QUEEN_SWEEPER_LEASE_MS\", 30_000, [100, HOUR_MS],"));
        let out = set_default(CONFIG, "QUEEN_SWEEPER_LEASE_MS", 120_000).unwrap();
        assert!(
            out.contains("\"QUEEN_SWEEPER_LEASE_MS\", 120_000, [100"),
            "{out}"
        );
        // The same value leaves an expression as it was written.
        assert_eq!(
            set_default(CONFIG, "QUEEN_SWEEPER_MAX_FIRE_BYTES", 1_048_576).unwrap(),
            CONFIG
        );
        assert!(set_default(CONFIG, "QUEEN_SWEEPER_NOPE", 1).is_err());
        assert_eq!(grouped(1_048_576), "1_048_576");
        assert_eq!(grouped(5000), "5000");
    }

    #[test]
    fn a_blocks_decision_line_is_read_back() {
        assert_eq!(block("X", 1).decided(), Decided::Unstated);
        assert_eq!(
            decided(
                "X",
                800,
                "800, by the rule (shipped was 200): the edge 800 is resolved."
            )
            .decided(),
            Decided::Value(800)
        );
        assert_eq!(
            decided(
                "X",
                200,
                "none; 200 stays in force: 2000 shows side 2's symptom."
            )
            .decided(),
            Decided::Refused("200 stays in force: 2000 shows side 2's symptom.".into())
        );
    }

    /// A scratch directory with blocks.sql, sql/ and config.rs.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str, blocks: &[Block]) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("soak-apply-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("sql")).unwrap();
            std::fs::write(
                dir.join("sql/001.sql"),
                "-- [not measured] QUEEN_SWEEPER_CLAIM_BATCH = 200: a guess.\n-- [not measured] log_timers fillfactor = 100: a guess.\n-- [not measured] QUEEN_API_IDEMPOTENCY_WINDOW_S = 3600: a guess.\nSELECT 1;\n",
            )
            .unwrap();
            std::fs::write(dir.join("config.rs"), CONFIG).unwrap();
            std::fs::write(dir.join("api_config.rs"), API_CONFIG_SAMPLE).unwrap();
            let text: Vec<String> = blocks.iter().map(Block::text).collect();
            std::fs::write(dir.join("blocks.sql"), text.join("\n\n")).unwrap();
            Scratch(dir)
        }

        fn apply(&self, partial: bool) -> Result<Vec<String>, String> {
            apply(
                &self.0,
                Targets {
                    sql_dir: &self.0.join("sql"),
                    config: &self.0.join("config.rs"),
                    api_config: &self.0.join("api_config.rs"),
                    partial,
                },
            )
        }

        fn read(&self, file: &str) -> String {
            std::fs::read_to_string(self.0.join(file)).unwrap()
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn apply_writes_a_decided_value_to_the_block_and_the_default_together() {
        let s = Scratch::new(
            "together",
            &[decided(
                "QUEEN_SWEEPER_CLAIM_BATCH",
                800,
                "800, by the rule (shipped was 200): resolved.",
            )],
        );
        let applied = s.apply(false).expect("applied");
        assert!(applied[0].contains("was 200"), "{applied:?}");
        assert!(
            s.read("sql/001.sql")
                .contains("] QUEEN_SWEEPER_CLAIM_BATCH = 800\n")
        );
        assert!(
            s.read("config.rs")
                .contains("\"QUEEN_SWEEPER_CLAIM_BATCH\", 800, [1")
        );
    }

    #[test]
    fn apply_refuses_and_writes_nothing_when_a_block_cannot_agree_with_the_code() {
        let cases = [
            (
                decided(
                    "QUEEN_SWEEPER_CLAIM_BATCH",
                    800,
                    "none; 800 stays in force: no value.",
                ),
                "not at the value in force, 200",
            ),
            (
                block("QUEEN_SWEEPER_CLAIM_BATCH", 800),
                "change the value in code first",
            ),
            (
                decided("log_timers fillfactor", 90, "90, by the rule: resolved."),
                "change it there by hand",
            ),
            (
                // Above CYCLE_MAX_ROWS' default of 60 000: the config refuses it.
                decided(
                    "QUEEN_SWEEPER_CLAIM_BATCH",
                    70_000,
                    "70000, by the rule: resolved.",
                ),
                "QUEEN_SWEEPER_CYCLE_MAX_ROWS",
            ),
        ];
        for (i, (b, why)) in cases.into_iter().enumerate() {
            let ok = decided(
                "QUEEN_SWEEPER_CLAIM_BATCH",
                200,
                "200, by the rule: resolved.",
            );
            let s = Scratch::new(&format!("refused{i}"), &[b]);
            let error = s.apply(false).expect_err("refused");
            assert!(error.contains(why), "{why}: {error}");
            assert_eq!(s.read("config.rs"), CONFIG, "nothing written");
            assert!(
                s.read("sql/001.sql")
                    .contains("[not measured] QUEEN_SWEEPER_CLAIM_BATCH")
            );
            drop(ok);
        }
        // --partial: the fillfactor block is refused, the claim batch applied.
        let s = Scratch::new(
            "partial",
            &[
                decided("log_timers fillfactor", 90, "90, by the rule: resolved."),
                decided(
                    "QUEEN_SWEEPER_CLAIM_BATCH",
                    800,
                    "800, by the rule: resolved.",
                ),
            ],
        );
        let applied = s.apply(true).expect("partial");
        assert!(
            applied
                .iter()
                .any(|l| l.starts_with("REFUSED log_timers fillfactor")),
            "{applied:?}"
        );
        assert!(
            s.read("config.rs")
                .contains("\"QUEEN_SWEEPER_CLAIM_BATCH\", 800, [1")
        );
    }

    #[test]
    fn a_block_the_rule_left_undecided_replaces_the_older_numbers_and_keeps_the_default() {
        let s = Scratch::new(
            "undecided",
            &[decided(
                "QUEEN_SWEEPER_CLAIM_BATCH",
                200,
                "none; 200 stays in force: the sides conflict.",
            )],
        );
        let applied = s.apply(false).expect("recorded, not refused");
        assert!(
            applied[0].starts_with("UNDECIDED QUEEN_SWEEPER_CLAIM_BATCH = 200"),
            "{applied:?}"
        );
        assert_eq!(s.read("config.rs"), CONFIG, "the default is not touched");
        let sql = s.read("sql/001.sql");
        assert!(
            sql.contains("--   decision: none; 200 stays in force: the sides conflict."),
            "{sql}"
        );
        assert!(!sql.contains("[not measured] QUEEN_SWEEPER_CLAIM_BATCH"));
    }

    #[test]
    fn every_block_in_sql_records_the_default_the_sweeper_ships() {
        let sql = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql");
        let mut knobs_seen = 0;
        for (file, text) in sql_files(&sql).unwrap() {
            for block in find_in_sql(&text).unwrap() {
                let default = queen_sweeper::knob::ALL
                    .iter()
                    .find(|k| k.var == block.setting)
                    .map(|k| k.default)
                    .or_else(|| api_knob(API_CONFIG, &block.setting).map(|k| k.default));
                if let Some(default) = default {
                    knobs_seen += 1;
                    assert_eq!(
                        block.value,
                        default,
                        "{}: the block of {} says {} but config.rs ships {}; apply-blocks writes both",
                        file.display(),
                        block.setting,
                        block.value,
                        default
                    );
                }
            }
        }
        assert!(
            knobs_seen >= 10,
            "only {knobs_seen} knob blocks found in sql/"
        );
    }
}
