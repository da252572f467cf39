//! What a measurement was taken on: the machine and the server, for every report and every
//! dated block.

use serde::Serialize;
use sqlx::PgPool;

use crate::error::Error;

/// The commit this binary was built from (`sweeper/build_commit.rs`): the short hash, with
/// ` (dirty)` when tracked files differed from it; `unknown` outside a repository. Every number a
/// report prints names this: the code that measured, whatever the working tree holds now.
pub fn source_commit() -> String {
    env!("QUEEN_BUILD_COMMIT").to_owned()
}

/// The working tree's commit as `git` sees it now, in the form of [`source_commit`]; `None`
/// outside a repository.
pub fn tree_commit() -> Option<String> {
    tree_commit_here()
}

include!("../../sweeper/tree_commit.rs");

/// The commit in a `queen-sweeper --version` line (`queen-sweeper 0.1.0 (a667e95)`).
pub fn commit_of_version(line: &str) -> Option<&str> {
    let (_, rest) = line.trim().split_once(" (")?;
    rest.strip_suffix(')')
}

/// Refuses a broker binary built from other code than this soak: its numbers would be named
/// after the soak's commit while another broker made them.
pub fn same_build(broker: &std::path::Path) -> Result<(), Error> {
    let output = std::process::Command::new(broker)
        .arg("--version")
        .output()
        .map_err(|source| Error::Spawn {
            path: broker.to_owned(),
            source,
        })?;
    let line = String::from_utf8_lossy(&output.stdout);
    let theirs = commit_of_version(&line).unwrap_or("no commit");
    let ours = source_commit();
    if theirs == ours {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "{} was built at {theirs}, this soak at {ours}: build both from the same tree (cargo build --release -p queen-broker -p queen-soak)",
            broker.display()
        )))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Rig {
    pub cores: usize,
    pub memory_gib: u64,
    pub server_version: String,
    pub server_major: u32,
    pub shared_buffers: String,
    pub synchronous_commit: String,
    pub max_connections: String,
    pub fsync: String,
    pub provider: String,
}

impl Rig {
    pub async fn read(pool: &PgPool, provider: &str) -> Result<Rig, Error> {
        let setting = |name: &'static str| async move {
            sqlx::query_scalar::<_, String>("SELECT current_setting($1)")
                .bind(name)
                .fetch_one(pool)
                .await
                .map_err(Error::db(format!("cannot read {name}")))
        };
        let server_version: String = sqlx::query_scalar("SELECT version()")
            .fetch_one(pool)
            .await
            .map_err(Error::db("cannot read the server version"))?;
        let num: String = setting("server_version_num").await?;
        Ok(Rig {
            cores: std::thread::available_parallelism().map_or(1, usize::from),
            memory_gib: memory_gib(),
            server_major: num.parse::<u32>().map_or(0, |n| n / 10_000),
            server_version: server_version
                .split(" on ")
                .next()
                .unwrap_or(&server_version)
                .to_owned(),
            shared_buffers: setting("shared_buffers").await?,
            synchronous_commit: setting("synchronous_commit").await?,
            max_connections: setting("max_connections").await?,
            fsync: setting("fsync").await?,
            provider: provider.to_owned(),
        })
    }

    /// A short name for report directories: `2c-24g-pg15`.
    pub fn label(&self) -> String {
        format!(
            "{}c-{}g-pg{}",
            self.cores, self.memory_gib, self.server_major
        )
    }

    /// The rig line of a dated block.
    pub fn describe(&self) -> String {
        format!(
            "{} cores, {} GiB, {} (shared_buffers={}, synchronous_commit={}, fsync={}, max_connections={}), {}",
            self.cores,
            self.memory_gib,
            self.server_version,
            self.shared_buffers,
            self.synchronous_commit,
            self.fsync,
            self.max_connections,
            self.provider
        )
    }
}

fn memory_gib() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| (kib as f64 / 1024.0 / 1024.0).round() as u64)
}

/// Resident memory of a process, current and peak, in KiB (from /proc).
pub fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_versions_commit_is_read_and_a_line_without_one_gives_none() {
        assert_eq!(
            commit_of_version("queen-sweeper 0.1.0 (a667e95)\n"),
            Some("a667e95")
        );
        assert_eq!(
            commit_of_version("queen-sweeper 0.1.0 (a667e95 (dirty))"),
            Some("a667e95 (dirty)")
        );
        assert_eq!(commit_of_version("queen-sweeper 0.1.0"), None);
    }

    #[test]
    fn a_broker_built_from_other_code_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("queen-same-build-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fake = dir.join("queen-sweeper");
        let write = |commit: &str| {
            std::fs::write(
                &fake,
                format!("#!/bin/sh\necho 'queen-sweeper 0.1.0 ({commit})'\n"),
            )
            .unwrap();
            std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
        };
        write("0000000");
        let refused = same_build(&fake).unwrap_err().to_string();
        assert!(refused.contains("built at 0000000"), "{refused}");
        assert!(refused.contains(&source_commit()), "{refused}");
        write(&source_commit());
        same_build(&fake).expect("the same build");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn this_process_has_a_resident_size_and_a_peak_at_least_as_large() {
        let (rss, peak) = rss_kib(std::process::id()).expect("linux /proc");
        assert!(rss > 0 && peak >= rss, "rss {rss} peak {peak}");
    }

    #[test]
    fn a_rig_label_names_cores_memory_and_major() {
        let rig = Rig {
            cores: 2,
            memory_gib: 24,
            server_version: "PostgreSQL 15.18".into(),
            server_major: 15,
            shared_buffers: "128MB".into(),
            synchronous_commit: "on".into(),
            max_connections: "300".into(),
            fsync: "on".into(),
            provider: "local".into(),
        };
        assert_eq!(rig.label(), "2c-24g-pg15");
        assert!(
            rig.describe()
                .starts_with("2 cores, 24 GiB, PostgreSQL 15.18 (shared_buffers=128MB")
        );
    }
}
