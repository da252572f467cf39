//! What a measurement was taken on: the machine and the server, for every report and every
//! dated block.

use serde::Serialize;
use sqlx::PgPool;

use crate::error::Error;

/// The commit the measuring code was built from, as `git` in the working directory sees it:
/// the short hash, with ` (dirty)` when tracked files differ from it; `unknown` outside a
/// repository. Every number a report prints names this.
pub fn source_commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short=7", "HEAD"]) {
        Some(hash) => match git(&["status", "--porcelain", "--untracked-files=no"]) {
            Some(changes) if changes.is_empty() => hash,
            _ => format!("{hash} (dirty)"),
        },
        None => "unknown".to_owned(),
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
