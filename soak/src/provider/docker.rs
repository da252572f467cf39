//! The Docker provider: a PostgreSQL container started through testcontainers.
//!
//! In order, each step bounded:
//! 1. ask the engine for its version ([`ENGINE_ANSWER_TIMEOUT`]): no engine answering is the
//!    common case on a machine without Docker, and it fails here in about a millisecond, in one
//!    line that names where the engine was looked for;
//! 2. make sure the image is there: the locally built one ([`LOCAL_IMAGE`], from
//!    `soak/docker/build-image.sh`) cannot be pulled, so its absence says how to build it; any
//!    other image is pulled ([`PULL_TIMEOUT`]);
//! 3. start the container ([`START_TIMEOUT`]) with PostgreSQL on a free loopback port: with host
//!    networking the server listens on 127.0.0.1:port of this machine itself, so every byte of
//!    the soak's traffic stays on the loopback; with bridge networking the container's 5432 is
//!    published on 127.0.0.1:port;
//! 4. connect until the server accepts ([`READY_TIMEOUT`]), watching that the container still
//!    runs, and quoting the end of its log when it stopped.
//!
//! The container is removed when the [`Database`] is dropped.

use std::time::Duration;

use sqlx::Connection;
use testcontainers::bollard::errors::Error as EngineError;
use testcontainers::core::ContainerPort;
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use super::{Database, DockerOptions, ProviderKind};

/// The image `soak/docker/build-image.sh` builds (initdb done at build time; no registry needed).
pub const LOCAL_IMAGE: &str = "queen-soak-postgres";
/// PostgreSQL's port inside the container when it has a network of its own (bridge mode).
const BRIDGE_CONTAINER_PORT: u16 = 5432;
/// How long the engine may take to answer `GET /version`: a local engine answers in about 1 ms.
const ENGINE_ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long pulling an image from a registry may take (only for images other than [`LOCAL_IMAGE`]).
const PULL_TIMEOUT: Duration = Duration::from_secs(300);
/// How long creating and starting the container may take (about 0.1 s measured here).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the server may take to accept connections once the container runs: about 0.3 s with
/// [`LOCAL_IMAGE`]; the official image runs initdb at first start, which takes seconds.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between connection attempts while waiting for the server.
const READY_POLL: Duration = Duration::from_millis(25);
/// Bound on one connection attempt (a refused one returns at once).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// `/dev/shm` of the container. Docker's default, 64 MiB, is less than PostgreSQL's parallel
/// queries may ask of dynamic shared memory under the soak's 300 connections.
const SHM_BYTES: u64 = 256 * 1024 * 1024;
/// As the local provider: room for the soak's brokers, pools and probes.
const MAX_CONNECTIONS: &str = "300";

/// Starts a PostgreSQL container and waits until it accepts connections.
pub async fn start(options: &DockerOptions) -> Result<Database, String> {
    let engine = engine_version().await?;
    let descriptor = format!("{}:{}", options.image, options.tag);
    ensure_image(options, &descriptor).await?;
    let port = super::free_loopback_port().map_err(|e| crate::error::one_line(&e))?;
    let request = container_request(options, port);
    let container = tokio::time::timeout(START_TIMEOUT, request.start())
        .await
        .map_err(|_| {
            format!(
                "container of {descriptor} did not start within {} s",
                START_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| format!("cannot start a container of {descriptor}: {}", one_line(&e)))?;
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    if !options.host_network {
        check_published(&container, port).await?;
    }
    wait_until_accepting(&container, &url).await?;
    let network = if options.host_network {
        "host network"
    } else {
        "bridge network, port published"
    };
    let short_id: String = container.id().chars().take(12).collect();
    Ok(Database {
        url,
        provider: ProviderKind::Docker,
        description: format!(
            "container {short_id} of {descriptor} ({network}) on 127.0.0.1:{port}, {engine}"
        ),
        postmaster_pid: None,
        _keep_alive: Box::new(RemoveOnDrop(Some(container))),
    })
}

/// Asks the engine testcontainers would use for its version: "Docker 20.10.24 (API 1.41)".
async fn engine_version() -> Result<String, String> {
    let not_answering = |reason: String| {
        format!(
            "no Docker engine answers at {}: {reason}",
            engine_location()
        )
    };
    let ask = async {
        let engine = testcontainers::core::client::docker_client_instance()
            .await
            .map_err(|e| one_line(&e))?;
        engine.version().await.map_err(|e| one_line(&e))
    };
    let version = tokio::time::timeout(ENGINE_ANSWER_TIMEOUT, ask)
        .await
        .map_err(|_| {
            not_answering(format!(
                "no answer within {} s",
                ENGINE_ANSWER_TIMEOUT.as_secs()
            ))
        })?
        .map_err(not_answering)?;
    Ok(format!(
        "Docker {} (API {})",
        version.version.as_deref().unwrap_or("of unknown version"),
        version.api_version.as_deref().unwrap_or("unknown")
    ))
}

/// Where testcontainers looks for the engine, for messages: `DOCKER_HOST`, else the first of
/// /var/run/docker.sock and the rootless sockets that exists (the error names which one).
fn engine_location() -> String {
    match std::env::var("DOCKER_HOST") {
        Ok(host) => format!("DOCKER_HOST={host:?}"),
        Err(_) => "the default socket (DOCKER_HOST unset)".to_owned(),
    }
}

/// Fails with how to build [`LOCAL_IMAGE`] when it is missing; pulls any other missing image.
async fn ensure_image(options: &DockerOptions, descriptor: &str) -> Result<(), String> {
    let engine = testcontainers::core::client::docker_client_instance()
        .await
        .map_err(|e| one_line(&e))?;
    let inspected = tokio::time::timeout(ENGINE_ANSWER_TIMEOUT, engine.inspect_image(descriptor))
        .await
        .map_err(|_| {
            format!(
                "the Docker engine did not say within {} s whether it has {descriptor}",
                ENGINE_ANSWER_TIMEOUT.as_secs()
            )
        })?;
    match inspected {
        Ok(_) => Ok(()),
        Err(EngineError::DockerResponseServerError {
            status_code: 404, ..
        }) if options.image == LOCAL_IMAGE => Err(format!(
            "image {descriptor} is not in the Docker engine: build it with soak/docker/build-image.sh (offline, from the Debian mirror)"
        )),
        Err(EngineError::DockerResponseServerError {
            status_code: 404, ..
        }) => tokio::time::timeout(
            PULL_TIMEOUT,
            GenericImage::new(options.image.as_str(), options.tag.as_str()).pull_image(),
        )
        .await
        .map_err(|_| {
            format!(
                "pulling {descriptor} took more than {} s",
                PULL_TIMEOUT.as_secs()
            )
        })?
        .map(|_| ())
        .map_err(|e| {
            format!(
                "image {descriptor} is not in the Docker engine and cannot be pulled: {}",
                one_line(&e)
            )
        }),
        Err(e) => Err(format!(
            "cannot inspect image {descriptor}: {}",
            one_line(&e)
        )),
    }
}

/// The container: the same command line suits [`LOCAL_IMAGE`] and the official `postgres` image
/// (both take `-c` options as arguments; `POSTGRES_HOST_AUTH_METHOD` is the official image's).
fn container_request(
    options: &DockerOptions,
    port: u16,
) -> testcontainers::ContainerRequest<GenericImage> {
    let image = GenericImage::new(options.image.as_str(), options.tag.as_str());
    let (container_port, listen_addresses) = if options.host_network {
        (port, "127.0.0.1")
    } else {
        // Its own network namespace: listen on its interface; the host side is 127.0.0.1 only.
        (BRIDGE_CONTAINER_PORT, "*")
    };
    let listen = format!("listen_addresses={listen_addresses}");
    let max_connections = format!("max_connections={MAX_CONNECTIONS}");
    let request = image
        .with_env_var("PGPORT", container_port.to_string())
        .with_env_var("POSTGRES_HOST_AUTH_METHOD", "trust")
        .with_cmd(["-c", listen.as_str(), "-c", max_connections.as_str()])
        .with_shm_size(SHM_BYTES)
        .with_label("org.queen-soak.port", port.to_string())
        .with_startup_timeout(START_TIMEOUT);
    if options.host_network {
        request.with_network("host")
    } else {
        request
            .with_mapped_port(port, ContainerPort::Tcp(BRIDGE_CONTAINER_PORT))
            .with_host_config_modifier(publish_on_loopback_only)
    }
}

/// Testcontainers publishes on every interface; the soak's traffic must stay on 127.0.0.1.
fn publish_on_loopback_only(host_config: &mut testcontainers::bollard::models::HostConfig) {
    for bindings in host_config
        .port_bindings
        .iter_mut()
        .flat_map(|ports| ports.values_mut())
        .flatten()
    {
        for binding in bindings {
            binding.host_ip = Some("127.0.0.1".to_owned());
        }
    }
}

/// In bridge mode, that the engine published the container's 5432 on `port`: a dockerd without a
/// bridge network (CI's runs with `--bridge=none`) starts the container with no port at all.
async fn check_published(
    container: &ContainerAsync<GenericImage>,
    port: u16,
) -> Result<(), String> {
    let published = tokio::time::timeout(
        ENGINE_ANSWER_TIMEOUT,
        container.get_host_port_ipv4(BRIDGE_CONTAINER_PORT),
    )
    .await
    .map_err(|_| {
        format!(
            "the Docker engine did not list the container's ports within {} s",
            ENGINE_ANSWER_TIMEOUT.as_secs()
        )
    })?;
    match published {
        Ok(host_port) if host_port == port => Ok(()),
        Ok(host_port) => Err(format!(
            "the engine published the container's {BRIDGE_CONTAINER_PORT} on {host_port}, not on the requested {port}"
        )),
        Err(e) => Err(format!(
            "the engine published no port for the container's {BRIDGE_CONTAINER_PORT} ({}); a dockerd without a bridge network (--bridge=none) cannot: use host networking",
            one_line(&e)
        )),
    }
}

/// Connects until the server accepts, for at most [`READY_TIMEOUT`]; a container that stops
/// meanwhile fails at once with the last line of its log.
async fn wait_until_accepting(
    container: &ContainerAsync<GenericImage>,
    url: &str,
) -> Result<(), String> {
    let polls = (READY_TIMEOUT.as_millis() / READY_POLL.as_millis()).max(1);
    let mut last_error = String::from("no attempt");
    for _ in 0..polls {
        match tokio::time::timeout(CONNECT_TIMEOUT, sqlx::PgConnection::connect(url)).await {
            Ok(Ok(connection)) => {
                let _ = connection.close().await;
                return Ok(());
            }
            Ok(Err(e)) => last_error = one_line(&e),
            Err(_) => {
                last_error = format!(
                    "a connection attempt took more than {} s",
                    CONNECT_TIMEOUT.as_secs()
                );
            }
        }
        if !container.is_running().await.unwrap_or(false) {
            return Err(format!(
                "the container stopped before accepting connections; its log ends with: {}",
                last_log_line(container).await
            ));
        }
        tokio::time::sleep(READY_POLL).await;
    }
    Err(format!(
        "the server in the container did not accept connections at {url} within {} s (last: {last_error}); its log ends with: {}",
        READY_TIMEOUT.as_secs(),
        last_log_line(container).await
    ))
}

async fn last_log_line(container: &ContainerAsync<GenericImage>) -> String {
    let read = tokio::time::timeout(ENGINE_ANSWER_TIMEOUT, container.stderr_to_vec()).await;
    match read {
        Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes)
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty())
            .unwrap_or("(empty)")
            .trim()
            .to_owned(),
        Ok(Err(e)) => format!("(cannot read it: {})", one_line(&e)),
        Err(_) => "(the engine did not hand it over in time)".to_owned(),
    }
}

/// An error and its sources on one line: the provider chain prints one line per provider.
fn one_line(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Keeps the container and removes it when dropped. Testcontainers removes it in its own `Drop`,
/// which needs a tokio runtime; dropped outside one, this lends it a small one.
struct RemoveOnDrop(Option<ContainerAsync<GenericImage>>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let Some(container) = self.0.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(container);
            return;
        }
        match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => {
                let _entered = runtime.enter();
                drop(container);
            }
            Err(e) => eprintln!(
                "soak: cannot remove the PostgreSQL container (no runtime: {e}); remove it with `docker rm -f`"
            ),
        }
    }
}
