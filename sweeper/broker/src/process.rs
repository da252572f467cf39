//! `run` and `serve`: one broker's life, from its arguments to a clean stop.
//!
//! Knobs come from the environment (`QUEEN_SWEEPER_*`, `QUEEN_KV_*`, and for `serve` the API's
//! `QUEEN_TIMERS_*` and `QUEEN_API_*`); a bad one stops the start with a message naming it. So
//! does a bad API token, and serving without tokens on an address other hosts can reach
//! ([`api::auth`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use queen_sweeper::{Admission, Config, LaneSizes, Metrics, PgStore, Sweeper};
use tokio_util::sync::CancellationToken;

use crate::api::auth::{Auth, AuthSettings, Listening, listen_rule};
use crate::api::config::ApiConfig;
use crate::api::{self, ApiState};
use crate::queries::PgApi;

/// Why a broker could not start or did not stop cleanly. Printed as one line.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// A setting is wrong; the message names every problem.
    #[error("invalid configuration:\n{0}")]
    Config(#[source] queen_sweeper::Error),
    /// The database did not accept the broker.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The URL, without its password.
        url: String,
        /// What the driver said.
        #[source]
        source: queen_sweeper::Error,
    },
    /// `sql/` could not be applied.
    #[error("cannot apply the schema to {url}: {source}")]
    Schema {
        /// The URL, without its password.
        url: String,
        /// What the database said.
        #[source]
        source: queen_sweeper::Error,
    },
    /// The address is taken or not ours.
    #[error("cannot listen on {address}{purpose}: {source}")]
    Listen {
        /// The address asked for.
        address: SocketAddr,
        /// What it was for (empty for the API).
        purpose: &'static str,
        /// The operating system's answer.
        #[source]
        source: std::io::Error,
    },
    /// The API's tokens are wrong, or it would serve without them where it must not.
    #[error("refusing to serve the API:\n{0}")]
    Auth(String),
    /// The sweeper's task ended without being told to (a panic inside it).
    #[error("the sweeper stopped unexpectedly: {0}")]
    SweeperStopped(#[source] tokio::task::JoinError),
}

/// What both commands take.
#[derive(Debug, clap::Args)]
pub struct BrokerArgs {
    /// PostgreSQL URL, e.g. postgres://user@127.0.0.1:5432/queen
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// This broker's name; its sweeper starts at a shard derived from it. Default: host-pid.
    #[arg(long)]
    identity: Option<String>,
    /// Do not apply sql/ at start (the schema is managed elsewhere).
    #[arg(long)]
    no_apply_schema: bool,
    /// Connections in the sweeper's pool.
    #[arg(long, default_value_t = 4)]
    pool_size: u32,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// Where to serve /metrics (Prometheus text) and /healthz.
    #[arg(long, default_value = "127.0.0.1:9187")]
    metrics_addr: SocketAddr,
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// Where to serve the HTTP API, /metrics and /healthz, e.g. 127.0.0.1:8080. Without tokens,
    /// only a loopback address unless --insecure-no-auth.
    #[arg(long)]
    listen: SocketAddr,
    /// A file of API bearer tokens, one "<tenant> <token>" a line ("*" for the operator); or
    /// QUEEN_API_TOKENS_FILE.
    #[arg(long)]
    tokens_file: Option<PathBuf>,
    /// Serve the API without tokens on an address that is not loopback; or
    /// QUEEN_API_ALLOW_NO_AUTH=1.
    #[arg(long)]
    insecure_no_auth: bool,
}

/// A connected broker with its schema in place.
struct Broker {
    config: Config,
    identity: String,
    shown_url: String,
    store: PgStore,
}

/// Connects the sweeper's pool and applies `sql/` unless told not to.
async fn open_broker(args: &BrokerArgs, config: Config) -> Result<Broker, BrokerError> {
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let shown_url = redact(&args.database_url);
    let store = PgStore::connect(&args.database_url, &config, &identity, args.pool_size)
        .await
        .map_err(|source| BrokerError::Connect {
            url: shown_url.clone(),
            source,
        })?;
    if args.no_apply_schema {
        tracing::info!("not applying sql/ (--no-apply-schema)");
    } else {
        queen_sweeper::apply_schema(store.pool())
            .await
            .map_err(|source| BrokerError::Schema {
                url: shown_url.clone(),
                source,
            })?;
        tracing::info!(files = queen_sweeper::SQL_FILES.len(), "schema applied");
    }
    match queen_sweeper::server_advice(store.pool()).await {
        Ok(advice) => {
            for line in advice {
                tracing::warn!("{line}");
            }
        }
        Err(error) => tracing::debug!(%error, "could not read the server's autovacuum settings"),
    }
    for line in config.describe() {
        tracing::debug!(setting = %line);
    }
    Ok(Broker {
        config,
        identity,
        shown_url,
        store,
    })
}

/// `queen-sweeper run`: the sweeper alone, with `/metrics` and `/healthz`.
pub async fn run(args: RunArgs) -> Result<(), BrokerError> {
    let config = Config::from_env().map_err(BrokerError::Config)?;
    let Broker {
        config,
        identity,
        shown_url,
        store,
    } = open_broker(&args.broker, config).await?;
    let metrics = Metrics::new();
    let sweeper =
        Sweeper::new(Arc::new(store), config, identity.clone()).with_metrics(metrics.clone());
    let shutdown = sweeper.shutdown_token();
    let listener = tokio::net::TcpListener::bind(args.metrics_addr)
        .await
        .map_err(|source| BrokerError::Listen {
            address: args.metrics_addr,
            purpose: " for metrics",
            source,
        })?;
    tracing::info!(%identity, metrics = %args.metrics_addr, url = %shown_url, "queen-sweeper running");
    let server = tokio::spawn(serve_metrics(listener, metrics, shutdown.clone()));
    tokio::spawn(cancel_on_signal(
        shutdown.clone(),
        "shutting down: no new claims; finishing the fire in flight",
    ));

    sweeper.run().await;
    shutdown.cancel();
    let _ = server.await;
    tracing::info!("stopped cleanly");
    Ok(())
}

/// `queen-sweeper serve`: a whole broker, the sweeper and the API that schedules into it and
/// wakes it.
pub async fn serve(args: ServeArgs) -> Result<(), BrokerError> {
    let config = Config::from_env().map_err(BrokerError::Config)?;
    let limits = ApiConfig::from_env(&config).map_err(BrokerError::Config)?;
    // Tokens before the port: an address we must not serve open is never bound.
    let auth = authentication(&args, &limits)?;
    // Listen before touching the database: a taken port is the cheapest mistake to report.
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| BrokerError::Listen {
            address: args.listen,
            purpose: "",
            source,
        })?;
    let broker = open_broker(&args.broker, config).await?;
    let db = PgApi::connect(
        &args.broker.database_url,
        &broker.config,
        &broker.identity,
        limits.pool_size,
    )
    .await
    .map_err(|source| BrokerError::Connect {
        url: broker.shown_url.clone(),
        source,
    })?;
    for line in limits.describe() {
        tracing::debug!(setting = %line);
    }

    let metrics = Metrics::new();
    let sweeper = Sweeper::new(
        Arc::new(broker.store),
        broker.config,
        broker.identity.clone(),
    )
    .with_metrics(metrics.clone());
    let state = ApiState::new(api::Parts {
        db,
        seam: sweeper.seam(),
        switches: sweeper.switches().clone(),
        admission: Admission::new(LaneSizes::default()),
        sweeper_metrics: metrics,
        limits,
        auth,
    });
    tracing::info!(identity = %broker.identity, listen = %args.listen, url = %broker.shown_url, "queen-sweeper serving");
    serve_until_signal(listener, state, sweeper).await
}

/// Reads and checks the API's tokens, and whether `--listen` may be served with what was given;
/// says which it is, never a token.
fn authentication(args: &ServeArgs, limits: &ApiConfig) -> Result<Auth, BrokerError> {
    let settings = AuthSettings::from_vars(
        std::env::vars(),
        args.tokens_file.clone(),
        args.insecure_no_auth,
    )
    .map_err(BrokerError::Auth)?;
    let auth = Auth::load(&settings, limits).map_err(BrokerError::Auth)?;
    let listening = listen_rule(args.listen, auth.tokens.is_some(), auth.allow_no_auth)
        .map_err(BrokerError::Auth)?;
    match listening {
        Listening::WithTokens => tracing::info!(
            tokens = %auth.tokens.as_ref().map_or_else(String::new, |tokens| tokens.describe()),
            monitoring_needs_a_token = auth.monitoring_closed,
            "API bearer tokens required"
        ),
        Listening::OpenByChoice => tracing::warn!(
            listen = %args.listen,
            "the API is served WITHOUT tokens on an address other hosts may reach (--insecure-no-auth): anyone who reaches it may act as any tenant"
        ),
        Listening::OpenOnLoopback => tracing::info!(
            listen = %args.listen,
            "the API is served without tokens, on loopback only"
        ),
    }
    Ok(auth)
}

/// Runs the sweeper and the API until a signal; then the API drains first (a schedule answered
/// during the drain still has a sweeper to wake), and the sweeper stops after it.
async fn serve_until_signal(
    listener: tokio::net::TcpListener,
    state: ApiState,
    sweeper: Sweeper<PgStore>,
) -> Result<(), BrokerError> {
    let stop_sweeper = sweeper.shutdown_token();
    let stop_api = CancellationToken::new();
    tokio::spawn(cancel_on_signal(
        stop_api.clone(),
        "shutting down: no new connections; finishing the requests in flight",
    ));
    let mut sweeping = tokio::spawn(sweeper.run());
    let api = api::server::serve(listener, state, stop_api.clone());
    tokio::pin!(api);
    tokio::select! {
        _ = &mut api => {}
        stopped = &mut sweeping => {
            // The loop ends only when told to; ending on its own is a panic inside it.
            stop_api.cancel();
            api.await;
            return match stopped {
                Err(panic) => Err(BrokerError::SweeperStopped(panic)),
                Ok(()) => {
                    tracing::warn!("the sweeper stopped before the API; stopping");
                    Ok(())
                }
            };
        }
    }
    tracing::info!("requests drained; no new claims; finishing the fire in flight");
    stop_sweeper.cancel();
    sweeping.await.map_err(BrokerError::SweeperStopped)?;
    tracing::info!("stopped cleanly");
    Ok(())
}

async fn serve_metrics(
    listener: tokio::net::TcpListener,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || std::future::ready(metrics.render())),
        )
        .route("/healthz", get(|| std::future::ready("ok")));
    if let Err(error) = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
    {
        tracing::error!(%error, "metrics server failed");
    }
}

/// Ctrl-C or SIGTERM: cancels `shutdown`, saying what stops first.
async fn cancel_on_signal(shutdown: CancellationToken, stopping: &'static str) {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; Ctrl-C still works");
                let _ = tokio::signal::ctrl_c().await;
                tracing::info!("{stopping}");
                shutdown.cancel();
                return;
            }
        };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("{stopping}");
    shutdown.cancel();
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "broker".to_owned()
    } else {
        host
    };
    format!("{host}-{}", std::process::id())
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "the given database URL".to_owned();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}@{host}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_never_reach_a_message() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u@h:5432/db"
        );
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
        assert_eq!(redact("nonsense"), "the given database URL");
    }
}
