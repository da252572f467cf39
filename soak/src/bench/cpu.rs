//! PostgreSQL's CPU, read from `/proc` the way `floor.md` did by hand: the user and system time
//! of the server's processes, plus what the postmaster collected from the backends that exited
//! (its `cutime` and `cstime`), so the total only grows.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use queen_sweeper::clock;

/// Where the server's processes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The postmaster with this pid (as this process sees it) and its children.
    Postmaster(u32),
    /// Every process named `postgres` (the server runs in another pid namespace, as in Docker).
    AllNamedPostgres,
}

impl Scope {
    /// Finds the postmaster through a backend: `pg_backend_pid()` is the backend's pid, and its
    /// parent is the postmaster, when both are visible in this pid namespace.
    pub async fn locate(pool: &sqlx::PgPool) -> Scope {
        let pid: Option<i32> = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(pool)
            .await
            .ok();
        let parent = pid
            .and_then(|pid| u32::try_from(pid).ok())
            .and_then(read_stat)
            .filter(|s| s.comm == "postgres")
            .map(|s| s.ppid)
            .filter(|ppid| read_stat(*ppid).is_some_and(|s| s.comm == "postgres"));
        parent.map_or(Scope::AllNamedPostgres, Scope::Postmaster)
    }

    /// For reports.
    pub fn describe(self) -> String {
        match self {
            Scope::Postmaster(pid) => format!("the postmaster (pid {pid}) and its children"),
            Scope::AllNamedPostgres => {
                "every process named postgres on the host (the server's pids were not visible)"
                    .to_owned()
            }
        }
    }

    /// CPU seconds the server has used so far; `None` when `/proc` cannot be read.
    pub fn cpu_seconds(self) -> Option<f64> {
        let ticks = clock_ticks()?;
        let mut total = 0u64;
        let mut seen = false;
        for entry in std::fs::read_dir("/proc").ok()? {
            let Some(pid) = entry
                .ok()
                .and_then(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
            else {
                continue;
            };
            let Some(stat) = read_stat(pid) else { continue };
            let ours = match self {
                Scope::Postmaster(root) => pid == root || stat.ppid == root,
                Scope::AllNamedPostgres => stat.comm == "postgres",
            };
            if ours {
                seen = true;
                total += stat.cpu_ticks;
            }
        }
        seen.then(|| total as f64 / ticks)
    }
}

/// CPU seconds every core of the machine has spent busy so far (the first line of
/// `/proc/stat`: user, nice, system, irq, softirq and steal; not idle or iowait).
pub fn machine_busy_seconds() -> Option<f64> {
    parse_machine_busy_ticks(&std::fs::read_to_string("/proc/stat").ok()?)
        .map(|ticks| ticks as f64 / clock_ticks().unwrap_or(100.0))
}

fn parse_machine_busy_ticks(text: &str) -> Option<u64> {
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice, counted in user].
    let busy = [0, 1, 2, 5, 6, 7];
    (fields.len() >= 8).then(|| busy.iter().map(|&i| fields[i]).sum())
}

/// Bytes the machine's disks have written so far (`/proc/diskstats`, sectors of 512 bytes),
/// whole disks only: partitions, device-mapper, loop and RAM devices would count a write twice
/// or are not storage.
pub fn disk_bytes_written() -> Option<u64> {
    let disks: Vec<String> = std::fs::read_dir("/sys/block")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    parse_disk_bytes_written(&std::fs::read_to_string("/proc/diskstats").ok()?, &disks)
}

fn parse_disk_bytes_written(text: &str, disks: &[String]) -> Option<u64> {
    let counted = |name: &str| {
        disks.iter().any(|d| d == name)
            && !["loop", "ram", "zram", "dm-", "md"]
                .iter()
                .any(|p| name.starts_with(p))
    };
    let mut total = 0u64;
    let mut seen = false;
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // major minor name reads merged sectors-read ms writes merged sectors-written ...
        if fields.len() >= 10 && counted(fields[2]) {
            total += fields[9].parse::<u64>().ok()? * 512;
            seen = true;
        }
    }
    seen.then_some(total)
}

fn clock_ticks() -> Option<f64> {
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    #[allow(unsafe_code)]
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then_some(ticks as f64)
}

#[derive(Debug, PartialEq)]
struct Stat {
    comm: String,
    ppid: u32,
    /// utime + stime + cutime + cstime.
    cpu_ticks: u64,
}

fn read_stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// `/proc/<pid>/stat`: `pid (comm) state ppid ...`, the command in parentheses may hold spaces
/// and parentheses, so the fields are counted from the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // After the command: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    Some(Stat {
        comm,
        ppid: u32::try_from(field(1)?).ok()?,
        cpu_ticks: field(11)? + field(12)? + field(13)? + field(14)?,
    })
}

/// A background sampler of the server's CPU: (epoch seconds, CPU seconds) every 250 ms, so a
/// window known only afterwards (a run's first and last fire) can be cut out of it.
#[derive(Debug)]
pub struct Trace {
    samples: Arc<Mutex<Vec<(f64, f64)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Trace {
    pub fn start(scope: Scope) -> Trace {
        Trace::of(move || scope.cpu_seconds())
    }

    /// Samples `read` (CPU seconds so far) instead of the server's.
    pub fn of(read: impl Fn() -> Option<f64> + Send + 'static) -> Trace {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let out = Arc::clone(&samples);
        let task = tokio::spawn(async move {
            // Bounded: a bench run is minutes long; a day of samples is the ceiling.
            for _ in 0..(4 * 86_400) {
                if let Some(cpu) = read() {
                    let at = clock::wall_since_epoch().as_secs_f64();
                    out.lock().expect("not poisoned").push((at, cpu));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        Trace { samples, task }
    }

    pub fn stop(self) -> Vec<(f64, f64)> {
        self.task.abort();
        std::mem::take(&mut *self.samples.lock().expect("not poisoned"))
    }
}

/// CPU seconds used between `from` and `to` (epoch seconds), interpolated between samples;
/// `None` when the samples do not cover the window.
pub fn used_between(samples: &[(f64, f64)], from: f64, to: f64) -> Option<f64> {
    Some(at(samples, to)? - at(samples, from)?)
}

fn at(samples: &[(f64, f64)], t: f64) -> Option<f64> {
    let after = samples.iter().position(|(s, _)| *s >= t)?;
    if after == 0 {
        return (samples[0].0 == t).then_some(samples[0].1);
    }
    let (t0, c0) = samples[after - 1];
    let (t1, c1) = samples[after];
    Some(c0 + (c1 - c0) * (t - t0) / (t1 - t0).max(1e-9))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disks_written_are_whole_disks_in_sectors_of_512_bytes() {
        let stats = "   7 0 loop0 5 0 10 0 7 0 999 0 0 0 0\n 254 0 vda 41 19 53 17 318 48 2000 96 0 46 125\n 254 1 vda1 41 19 53 17 318 48 1500 96 0 46 125\n 253 0 zram0 0 0 0 0 9 0 77 0 0 0 0\n";
        let disks: Vec<String> = ["loop0", "vda", "zram0"].map(String::from).to_vec();
        assert_eq!(parse_disk_bytes_written(stats, &disks), Some(2_000 * 512));
        assert_eq!(parse_disk_bytes_written(stats, &["loop0".to_owned()]), None);
    }

    #[test]
    fn the_machine_is_busy_in_everything_but_idle_and_iowait() {
        let stat = "cpu  100 2 30 5000 70 4 5 6 0 0\ncpu0 50 1 15 2500 35 2 2 3 0 0\n";
        assert_eq!(
            parse_machine_busy_ticks(stat),
            Some(100 + 2 + 30 + 4 + 5 + 6)
        );
        assert_eq!(parse_machine_busy_ticks("cpu0 1 2 3 4 5 6 7 8\n"), None);
        assert_eq!(parse_machine_busy_ticks("cpu  1 2 3\n"), None);
    }

    #[test]
    fn a_stat_line_is_read_from_the_last_parenthesis() {
        let line = "4242 (postgres: a (b) c) S 17 4242 4242 0 -1 4194560 300 0 0 0 120 30 7 3 20 0 1 0 100 0 0";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                comm: "postgres: a (b) c".into(),
                ppid: 17,
                cpu_ticks: 120 + 30 + 7 + 3,
            })
        );
        assert_eq!(parse_stat("4242 postgres S"), None);
    }

    #[test]
    fn the_cpu_of_a_window_is_interpolated_between_samples() {
        let samples = [(10.0, 1.0), (11.0, 2.0), (12.0, 4.0)];
        assert_eq!(used_between(&samples, 10.5, 11.5), Some(3.0 - 1.5));
        assert_eq!(used_between(&samples, 10.0, 12.0), Some(3.0));
        // A window the samples do not cover has no answer.
        assert_eq!(used_between(&samples, 9.0, 11.0), None);
        assert_eq!(used_between(&samples, 11.0, 12.5), None);
    }

    #[test]
    fn this_process_is_visible_in_proc() {
        let me = read_stat(std::process::id()).expect("our own stat is readable");
        assert!(me.ppid > 0);
    }
}
