//! Where the soak's PostgreSQL comes from, tried in order and reported:
//!
//! 1. a URL (`--database-url` or `DATABASE_URL`): an existing server, used as it is;
//! 2. Docker, through testcontainers, when a Docker engine answers ([`docker`]);
//! 3. a throwaway local cluster from the installed server binaries (the test tier's
//!    [`LocalCluster`], durable, on a loopback port, as the `postgres` OS user when root).
//!
//! `--provider` forces one. A provider that cannot start says why in one line.

pub mod docker;

use std::str::FromStr;

use queen_testdb::cluster::{ClusterOptions, Listen, LocalCluster};
use serde::Serialize;
use sqlx::Connection;

use crate::error::{self, Error};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProviderKind {
    Url,
    Docker,
    Local,
}

/// Parsed by clap, whose parsers answer a message: hence `String`, not [`Error`].
impl FromStr for ProviderKind {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "url" => Ok(ProviderKind::Url),
            "docker" | "testcontainers" => Ok(ProviderKind::Docker),
            "local" => Ok(ProviderKind::Local),
            other => Err(format!(
                "unknown provider {other:?}: use url, docker or local"
            )),
        }
    }
}

/// A database the soak may use, and whatever keeps it alive.
pub struct Database {
    pub url: String,
    pub provider: ProviderKind,
    /// One line: what was started or used.
    pub description: String,
    /// Process id of the postmaster when the soak started it here (for its RSS).
    pub postmaster_pid: Option<u32>,
    _keep_alive: Box<dyn std::any::Any + Send>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("provider", &self.provider)
            .field("description", &self.description)
            .finish()
    }
}

/// Settings that shape the Docker provider.
///
/// The default is the image `soak/docker/build-image.sh` builds offline from the Debian mirror,
/// `queen-soak-postgres:15` (initdb done at build time, so a container accepts connections in
/// about 0.3 s), on the host network: PostgreSQL listens on a free port of 127.0.0.1 itself, so
/// every byte of the soak's traffic stays on the loopback. Where a registry is reachable, the
/// official image works as well: `--docker-image postgres --docker-tag 15` (it runs initdb at its
/// first start, which takes seconds).
#[derive(Debug, Clone)]
pub struct DockerOptions {
    /// Image name, e.g. `queen-soak-postgres` or `postgres`.
    pub image: String,
    pub tag: String,
    /// `true`: the host's network, the server on 127.0.0.1:port. `false`: a bridge network, the
    /// container's 5432 published on 127.0.0.1:port (needs a dockerd with a bridge).
    pub host_network: bool,
}

impl Default for DockerOptions {
    fn default() -> Self {
        DockerOptions {
            image: docker::LOCAL_IMAGE.into(),
            tag: "15".into(),
            host_network: true,
        }
    }
}

/// Provides a database: `forced` or the first that works, in order.
pub async fn provide(
    forced: Option<ProviderKind>,
    url: Option<String>,
    docker_options: &DockerOptions,
) -> Result<Database, Error> {
    let order: Vec<ProviderKind> = match forced {
        Some(kind) => vec![kind],
        None if url.is_some() => vec![ProviderKind::Url],
        None => vec![ProviderKind::Docker, ProviderKind::Local],
    };
    let mut reasons = Vec::new();
    for kind in order {
        let attempt = match kind {
            ProviderKind::Url => match &url {
                Some(url) => from_url(url).await,
                None => Err(Error::Usage(
                    "--provider url needs --database-url or DATABASE_URL".to_owned(),
                )),
            },
            ProviderKind::Docker => docker::start(docker_options).await.map_err(Error::Docker),
            ProviderKind::Local => local().await,
        };
        match attempt {
            Ok(database) => {
                for reason in &reasons {
                    eprintln!("soak: {reason}");
                }
                return Ok(database);
            }
            Err(reason) if forced.is_none() => {
                let reason = error::one_line(&reason);
                reasons.push(format!("provider {kind:?} skipped: {reason}"));
            }
            Err(reason) => {
                return Err(Error::Provider {
                    kind,
                    source: Box::new(reason),
                });
            }
        }
    }
    Err(Error::NoProvider(reasons))
}

async fn from_url(url: &str) -> Result<Database, Error> {
    let connection = sqlx::PgConnection::connect(url)
        .await
        .map_err(Error::db("cannot connect"))?;
    let _ = connection.close().await;
    Ok(Database {
        url: url.to_owned(),
        provider: ProviderKind::Url,
        description: "an existing server from the given URL".to_owned(),
        postmaster_pid: None,
        _keep_alive: Box::new(()),
    })
}

/// Settings of the local cluster: durable (fsync and synchronous commit on, as a rig would run),
/// with room for the soak's connections, and a log worth keeping: statements and autovacuums over
/// a second, lock waits over `deadlock_timeout` (1 s), checkpoints. The log is kept at
/// [`kept_log`] when the cluster stops, so a stall seen in a report can be read afterwards.
fn local_options(port: u16) -> ClusterOptions {
    ClusterOptions {
        listen: Listen::Loopback { port },
        durable: true,
        settings: [
            ("max_connections", "300"),
            ("log_min_duration_statement", "1000"),
            ("log_autovacuum_min_duration", "1000"),
            ("log_lock_waits", "on"),
            ("log_checkpoints", "on"),
        ]
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect(),
        keep_log: Some(kept_log(port)),
        ..ClusterOptions::default()
    }
}

/// Where the log of the local cluster on `port` is kept once it stops.
pub fn kept_log(port: u16) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("queen-soak-server-{port}.log"))
}

/// Starts a local cluster on a thread that lives as long as the process (the server is bound to
/// its starting thread by PR_SET_PDEATHSIG).
async fn local() -> Result<Database, Error> {
    let port = free_loopback_port()?;
    let (sender, receiver) = tokio::sync::oneshot::channel();
    let keeper = std::thread::Builder::new()
        .name("soak-postgres".into())
        .spawn(move || {
            match LocalCluster::start(&local_options(port)) {
                Ok(cluster) => {
                    let info = (
                        cluster.tcp_url("postgres"),
                        cluster.version().to_owned(),
                        cluster.pid(),
                    );
                    let (keep_sender, keep_receiver) = std::sync::mpsc::channel::<()>();
                    let _ = sender.send(Ok((info, keep_sender)));
                    // Hold the cluster until the soak drops its Database (the channel closes).
                    let _ = keep_receiver.recv();
                    drop(cluster);
                }
                Err(e) => {
                    let _ = sender.send(Err(e));
                }
            }
        })
        .map_err(Error::ClusterThread)?;
    let ((url, version, pid), keep) = receiver
        .await
        .map_err(|_| Error::Cluster("the cluster thread died".to_owned()))?
        .map_err(Error::Cluster)?;
    Ok(Database {
        url,
        provider: ProviderKind::Local,
        description: format!(
            "a throwaway local cluster ({version}) on 127.0.0.1:{port}, its log kept at {} when it stops",
            kept_log(port).display()
        ),
        postmaster_pid: pid,
        _keep_alive: Box::new(KeepAlive {
            keep: Some(keep),
            keeper: Some(keeper),
        }),
    })
}

/// Dropping it tells the cluster thread to stop the server and remove its directory, and waits
/// for that to finish (a fast shutdown, bounded by the cluster's stop timeout).
struct KeepAlive {
    keep: Option<std::sync::mpsc::Sender<()>>,
    keeper: Option<std::thread::JoinHandle<()>>,
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        drop(self.keep.take());
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
    }
}

/// A loopback port free this instant (the OS picks it; it is free again once this returns).
pub fn free_loopback_port() -> Result<u16, Error> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(Error::Port)?;
    listener.local_addr().map(|a| a.port()).map_err(Error::Port)
}
