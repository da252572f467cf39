//! A throwaway PostgreSQL cluster from the installed server binaries.
//!
//! Used by the test tier (one cluster per test process) and by the soak (its local provider).
//! `initdb` and `postgres` refuse to run as root, so when this process is root the cluster runs as
//! the `postgres` OS user, in a directory that user owns. The server's output goes to a log file
//! in the cluster directory; every failure to start says what was searched and what failed, and
//! quotes the end of that log.

#![allow(unsafe_code)] // geteuid, getpwnam, chown, kill and prctl through libc; each call is commented.

use std::ffi::CString;
use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// Only a unix socket in the cluster's private directory (the test tier).
    UnixSocket,
    /// The unix socket and TCP on 127.0.0.1:port (the soak, so it can report a plain URL).
    Loopback {
        /// The TCP port.
        port: u16,
    },
}

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Where it listens.
    pub listen: Listen,
    /// `false` turns off fsync, synchronous commit and full-page writes: right for tests, wrong
    /// for a soak that measures WAL and commit latency.
    pub durable: bool,
    /// Extra `-c name=value` settings for the server.
    pub settings: Vec<(String, String)>,
    /// How long to wait for the server to accept connections.
    pub start_timeout: Duration,
    /// Where the server's log is copied when the cluster stops, before its directory goes.
    pub keep_log: Option<PathBuf>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            listen: Listen::UnixSocket,
            durable: false,
            settings: Vec::new(),
            start_timeout: Duration::from_secs(60),
            keep_log: None,
        }
    }
}

/// The superuser the cluster is initialised with.
pub const SUPERUSER: &str = "postgres";
/// Port of the unix socket when listening on the socket only (the name of the socket file).
const SOCKET_ONLY_PORT: u16 = 5432;
/// Poll interval while waiting for the server to start or stop.
const POLL: Duration = Duration::from_millis(25);
/// How long a fast shutdown may take before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);
/// Prefix of cluster directories under the temporary directory.
const DIR_PREFIX: &str = "queen-pg-";

/// A running throwaway cluster. Dropping it stops the server and removes its directory.
#[derive(Debug)]
pub struct LocalCluster {
    child: Option<Child>,
    dir: PathBuf,
    socket_dir: PathBuf,
    port: u16,
    bin_dir: PathBuf,
    version: String,
    keep_log: Option<PathBuf>,
}

impl LocalCluster {
    /// Finds the server binaries, initialises a cluster in a fresh directory and starts it.
    ///
    /// The server gets `PR_SET_PDEATHSIG`: if the thread that calls this exits, the server is
    /// told to shut down. Call it from a thread that lives as long as the cluster should.
    pub fn start(options: &ClusterOptions) -> Result<LocalCluster, String> {
        let bin_dir = find_bin_dir()?;
        let owner = Owner::for_this_process()?;
        remove_stale_dirs();
        let dir = make_private_dir(&owner)?;
        let socket_dir = dir.join("socket");
        let data_dir = dir.join("data");
        fs::create_dir(&socket_dir)
            .map_err(|e| format!("cannot create {}: {e}", socket_dir.display()))?;
        owner.chown(&socket_dir)?;
        let version = server_version(&bin_dir)?;
        let mut cluster = LocalCluster {
            child: None,
            dir,
            socket_dir,
            port: match options.listen {
                Listen::UnixSocket => SOCKET_ONLY_PORT,
                Listen::Loopback { port } => port,
            },
            bin_dir,
            version,
            keep_log: options.keep_log.clone(),
        };
        cluster.initdb(&owner, &data_dir, options)?;
        cluster.spawn_server(&owner, &data_dir, options)?;
        cluster.wait_until_ready(options.start_timeout)?;
        Ok(cluster)
    }

    /// A connection URL for `database` as the superuser, over the private unix socket.
    pub fn socket_url(&self, database: &str) -> String {
        format!(
            "postgres://{SUPERUSER}@localhost:{}/{database}?host={}",
            self.port,
            percent_encode_path(&self.socket_dir)
        )
    }

    /// A connection URL over TCP on 127.0.0.1 (only when started with [`Listen::Loopback`]).
    /// A URL over TCP on 127.0.0.1 (with [`Listen::Loopback`]).
    pub fn tcp_url(&self, database: &str) -> String {
        format!("postgres://{SUPERUSER}@127.0.0.1:{}/{database}", self.port)
    }

    /// The port (the unix socket's name carries it too).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The cluster's private directory (data, socket, log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the server binaries in use are.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// `postgres --version` of the binaries in use.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The server's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Process id of the postmaster.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Fast shutdown, then kill after [`STOP_TIMEOUT`]; removes the directory. Idempotent.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child);
        }
        if let Some(kept) = &self.keep_log
            && let Err(error) = fs::copy(self.log_path(), kept)
        {
            eprintln!(
                "queen test cluster: could not keep the server log at {}: {error}",
                kept.display()
            );
        }
        if self.dir.exists()
            && let Err(error) = fs::remove_dir_all(&self.dir)
        {
            eprintln!(
                "queen test cluster: could not remove {}: {error}",
                self.dir.display()
            );
        }
    }

    fn initdb(
        &self,
        owner: &Owner,
        data_dir: &Path,
        options: &ClusterOptions,
    ) -> Result<(), String> {
        let log_path = self.dir.join("initdb.log");
        let log = create_log(&log_path, owner)?;
        let mut command = Command::new(self.bin_dir.join("initdb"));
        command
            .arg("--pgdata")
            .arg(data_dir)
            .args([
                "--username",
                SUPERUSER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
            ])
            .arg("--no-instructions")
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        if !options.durable {
            command.arg("--no-sync");
        }
        owner.apply(&mut command);
        let status = command
            .status()
            .map_err(|e| format!("cannot run {}: {e}", self.bin_dir.join("initdb").display()))?;
        if !status.success() {
            return Err(format!(
                "initdb {} failed ({status}) as {}; its log ends with:\n{}",
                data_dir.display(),
                owner.describe(),
                log_tail(&log_path)
            ));
        }
        Ok(())
    }

    fn spawn_server(
        &mut self,
        owner: &Owner,
        data_dir: &Path,
        options: &ClusterOptions,
    ) -> Result<(), String> {
        let log = create_log(&self.log_path(), owner)?;
        let listen_addresses = match options.listen {
            Listen::UnixSocket => "",
            Listen::Loopback { .. } => "127.0.0.1",
        };
        let mut settings: Vec<(String, String)> = vec![
            ("listen_addresses".into(), listen_addresses.into()),
            (
                "unix_socket_directories".into(),
                self.socket_dir.display().to_string(),
            ),
            ("port".into(), self.port.to_string()),
            ("max_connections".into(), "200".into()),
            ("logging_collector".into(), "off".into()),
        ];
        if !options.durable {
            for (name, value) in [
                ("fsync", "off"),
                ("synchronous_commit", "off"),
                ("full_page_writes", "off"),
            ] {
                settings.push((name.into(), value.into()));
            }
        }
        settings.extend(options.settings.iter().cloned());

        let mut command = Command::new(self.bin_dir.join("postgres"));
        command.arg("-D").arg(data_dir);
        for (name, value) in &settings {
            command.arg("-c").arg(format!("{name}={value}"));
        }
        command
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        owner.apply(&mut command);
        // SAFETY: prctl and getppid are async-signal-safe and touch no memory of the parent.
        // The closure runs after the uid change, so the death signal survives it.
        unsafe {
            let parent = libc::getpid();
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    return Err(std::io::Error::other(
                        "the parent exited before the server started",
                    ));
                }
                Ok(())
            });
        }
        let child = command.spawn().map_err(|e| {
            format!(
                "cannot run {}: {e}",
                self.bin_dir.join("postgres").display()
            )
        })?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits for the socket file and then for `pg_isready`-equivalent: the postmaster writes
    /// "ready to accept connections" to its log. Polls; reads no clock.
    fn wait_until_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let polls = (timeout.as_millis() / POLL.as_millis()).max(1);
        for _ in 0..polls {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(format!(
                    "postgres exited during start-up ({status}); {} ends with:\n{}",
                    self.log_path().display(),
                    log_tail(&self.log_path())
                ));
            }
            let log = fs::read_to_string(self.log_path()).unwrap_or_default();
            if log.contains("database system is ready to accept connections") {
                return Ok(());
            }
            std::thread::sleep(POLL);
        }
        Err(format!(
            "postgres did not become ready within {} ms; {} ends with:\n{}",
            timeout.as_millis(),
            self.log_path().display(),
            log_tail(&self.log_path())
        ))
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

fn stop_child(child: &mut Child) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill with a pid we spawned and still own (not yet reaped).
    unsafe {
        libc::kill(pid, libc::SIGINT);
    }
    let polls = STOP_TIMEOUT.as_millis() / POLL.as_millis();
    for _ in 0..polls {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(POLL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Directories searched for `initdb` and `postgres`, in order: `PATH`, `pg_config --bindir`,
/// then `/usr/lib/postgresql/*/bin` from the newest version down.
pub fn candidate_bin_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect())
        .unwrap_or_default();
    if let Ok(output) = Command::new("pg_config").arg("--bindir").output()
        && output.status.success()
    {
        let bindir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if !bindir.is_empty() {
            dirs.push(PathBuf::from(bindir));
        }
    }
    let mut versioned: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((major, entry.path().join("bin")))
        })
        .collect();
    versioned.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    dirs.extend(versioned.into_iter().map(|(_, dir)| dir));
    dirs
}

fn find_bin_dir() -> Result<PathBuf, String> {
    let candidates = candidate_bin_dirs();
    candidates
        .iter()
        .find(|dir| is_executable(&dir.join("initdb")) && is_executable(&dir.join("postgres")))
        .cloned()
        .ok_or_else(|| {
            let searched: Vec<String> = candidates.iter().map(|d| d.display().to_string()).collect();
            format!(
                "no PostgreSQL server binaries (initdb and postgres) found; searched PATH, `pg_config --bindir` and /usr/lib/postgresql/*/bin: [{}]. Install them (Debian: apt-get install -y postgresql-15) or set QUEEN_TEST_DATABASE_URL to an existing server",
                searched.join(", ")
            )
        })
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

fn server_version(bin_dir: &Path) -> Result<String, String> {
    let output = Command::new(bin_dir.join("postgres"))
        .arg("--version")
        .output()
        .map_err(|e| format!("cannot run {}/postgres --version: {e}", bin_dir.display()))?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Who runs the server: this process's user, or `postgres` when this process is root.
#[derive(Debug, Clone, Copy)]
struct Owner {
    /// `Some` when the server must switch to another user.
    switch_to: Option<(u32, u32)>,
}

impl Owner {
    fn for_this_process() -> Result<Owner, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(Owner { switch_to: None });
        }
        let name = CString::new(SUPERUSER).expect("no NUL in a constant");
        // SAFETY: getpwnam returns NULL or a pointer to a static passwd record; we copy the two
        // integers out before any other call could overwrite it.
        let ids = unsafe {
            let entry = libc::getpwnam(name.as_ptr());
            if entry.is_null() {
                None
            } else {
                Some(((*entry).pw_uid, (*entry).pw_gid))
            }
        };
        match ids {
            Some(ids) => Ok(Owner { switch_to: Some(ids) }),
            None => Err(
                "running as root, and initdb/postgres refuse to run as root, but there is no `postgres` OS user to run them as; create it (useradd --system postgres) or run as a non-root user"
                    .to_owned(),
            ),
        }
    }

    fn apply(&self, command: &mut Command) {
        if let Some((uid, gid)) = self.switch_to {
            command.uid(uid).gid(gid).env("HOME", "/tmp");
        }
    }

    fn chown(&self, path: &Path) -> Result<(), String> {
        let Some((uid, gid)) = self.switch_to else {
            return Ok(());
        };
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(|e| {
            format!(
                "cannot give {} to the postgres user (uid {uid}): {e}",
                path.display()
            )
        })
    }

    fn describe(&self) -> String {
        match self.switch_to {
            Some((uid, gid)) => format!("the postgres OS user (uid {uid}, gid {gid})"),
            None => "the current user".to_owned(),
        }
    }
}

fn make_private_dir(owner: &Owner) -> Result<PathBuf, String> {
    let base = std::env::temp_dir();
    // Unique without reading a clock: pid plus a per-process counter.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = base.join(format!("{DIR_PREFIX}{}-{n}", std::process::id()));
    if dir.exists() {
        fs::remove_dir_all(&dir).map_err(|e| format!("cannot clear {}: {e}", dir.display()))?;
    }
    fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot restrict {}: {e}", dir.display()))?;
    owner.chown(&dir)?;
    Ok(dir)
}

/// Removes cluster directories left by processes that no longer exist (killed test runs).
fn remove_stale_dirs() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if pid != std::process::id() as i32 && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

fn create_log(path: &Path, owner: &Owner) -> Result<File, String> {
    let file = File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    owner.chown(path)?;
    Ok(file)
}

/// The last lines of a log, for error messages.
fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path)
        .unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn percent_encode_path(path: &Path) -> String {
    path.display()
        .to_string()
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_paths_are_percent_encoded_for_urls() {
        assert_eq!(
            percent_encode_path(Path::new("/tmp/queen-pg-1/socket")),
            "%2Ftmp%2Fqueen-pg-1%2Fsocket"
        );
    }

    #[test]
    fn a_stopped_cluster_leaves_its_log_where_it_was_asked_to() {
        let kept = std::env::temp_dir().join(format!("queen-kept-log-{}.log", std::process::id()));
        let _ = fs::remove_file(&kept);
        let mut cluster = LocalCluster::start(&ClusterOptions {
            keep_log: Some(kept.clone()),
            ..ClusterOptions::default()
        })
        .expect("a local cluster");
        let dir = cluster.dir.clone();
        cluster.stop();
        assert!(!dir.exists(), "the cluster's directory is removed");
        let log = fs::read_to_string(&kept).expect("the kept log");
        assert!(log.contains("ready to accept connections"), "{log}");
        fs::remove_file(&kept).unwrap();
    }
}
