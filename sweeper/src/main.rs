//! `queen-sweeper`: one broker as a process.
//!
//! ```text
//! queen-sweeper run   --database-url URL [--metrics-addr 127.0.0.1:9187] [--identity NAME]
//!                     [--no-apply-schema] [--pool-size N]
//! queen-sweeper serve --database-url URL --listen ADDR [--identity NAME]
//!                     [--no-apply-schema] [--pool-size N]
//! ```
//!
//! `run` is the sweeper alone, with `/metrics` and `/healthz`. `serve` is a whole broker: the same
//! sweeper plus the HTTP API (`queen_sweeper::api`) on `--listen`, which serves `/metrics` and
//! `/healthz` too.
//!
//! Knobs come from the environment (`QUEEN_SWEEPER_*`, `QUEEN_KV_*`, and for `serve` the API's
//! `QUEEN_TIMERS_*` and `QUEEN_API_*`); a bad one stops the start with a message naming it. On
//! Ctrl-C or SIGTERM, `serve` stops accepting connections and finishes the requests in flight,
//! then the sweeper stops claiming and finishes the fire in flight, and the process exits 0.
//! Errors are one line on stderr, never a backtrace.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use queen_sweeper::admission::{Admission, LaneSizes};
use queen_sweeper::api::limits::ApiConfig;
use queen_sweeper::api::{self, ApiState};
use queen_sweeper::config::Config;
use queen_sweeper::cycle::Sweeper;
use queen_sweeper::metrics::Metrics;
use queen_sweeper::schema;
use queen_sweeper::store::pg::PgStore;
use queen_sweeper::store::pg_api::PgApi;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Parser)]
#[command(
    name = "queen-sweeper",
    version,
    about = "The sweeper of the Queen broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one broker's sweeper until Ctrl-C or SIGTERM.
    Run(RunArgs),
    /// Run one broker, the sweeper and the HTTP API on --listen, until Ctrl-C or SIGTERM.
    Serve(ServeArgs),
}

/// What both commands take.
#[derive(Debug, clap::Args)]
struct BrokerArgs {
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
struct RunArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// Where to serve /metrics (Prometheus text) and /healthz.
    #[arg(long, default_value = "127.0.0.1:9187")]
    metrics_addr: SocketAddr,
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    #[command(flatten)]
    broker: BrokerArgs,
    /// Where to serve the HTTP API, /metrics and /healthz, e.g. 127.0.0.1:8080.
    #[arg(long)]
    listen: SocketAddr,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("queen-sweeper: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = match cli.command {
        Command::Run(args) => runtime.block_on(run(args)),
        Command::Serve(args) => runtime.block_on(serve(args)),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("queen-sweeper: {message}");
            ExitCode::FAILURE
        }
    }
}

/// A connected broker with its schema in place.
struct Broker {
    config: Config,
    identity: String,
    shown_url: String,
    store: PgStore,
}

/// Connects the sweeper's pool and applies `sql/` unless told not to.
async fn open_broker(args: &BrokerArgs, config: Config) -> Result<Broker, String> {
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let shown_url = redact(&args.database_url);
    let store = PgStore::connect(&args.database_url, &config, &identity, args.pool_size)
        .await
        .map_err(|e| format!("cannot connect to {shown_url}: {e}"))?;
    if args.no_apply_schema {
        tracing::info!("not applying sql/ (--no-apply-schema)");
    } else {
        schema::apply(store.pool())
            .await
            .map_err(|e| format!("cannot apply the schema to {shown_url}: {e}"))?;
        tracing::info!(files = schema::FILES.len(), "schema applied");
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

async fn run(args: RunArgs) -> Result<(), String> {
    let config = Config::from_env().map_err(|e| format!("invalid configuration:\n{e}"))?;
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
        .map_err(|e| format!("cannot listen on {} for metrics: {e}", args.metrics_addr))?;
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

/// A whole broker: the sweeper, and the API that schedules into it and wakes it.
async fn serve(args: ServeArgs) -> Result<(), String> {
    let invalid = |e: queen_sweeper::Error| format!("invalid configuration:\n{e}");
    let config = Config::from_env().map_err(invalid)?;
    let limits = ApiConfig::from_env(&config).map_err(invalid)?;
    // Listen before touching the database: a taken port is the cheapest mistake to report.
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let broker = open_broker(&args.broker, config).await?;
    let db = PgApi::connect(
        &args.broker.database_url,
        &broker.config,
        &broker.identity,
        limits.pool_size,
    )
    .await
    .map_err(|e| format!("cannot connect to {}: {e}", broker.shown_url))?;
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
    });
    tracing::info!(identity = %broker.identity, listen = %args.listen, url = %broker.shown_url, "queen-sweeper serving");
    serve_until_signal(listener, state, sweeper).await
}

/// Runs the sweeper and the API until a signal; then the API drains first (a schedule answered
/// during the drain still has a sweeper to wake), and the sweeper stops after it.
async fn serve_until_signal(
    listener: tokio::net::TcpListener,
    state: ApiState,
    sweeper: Sweeper<PgStore>,
) -> Result<(), String> {
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
            return Err(format!("the sweeper stopped unexpectedly: {stopped:?}"));
        }
    }
    tracing::info!("requests drained; no new claims; finishing the fire in flight");
    stop_sweeper.cancel();
    sweeping
        .await
        .map_err(|e| format!("the sweeper failed while stopping: {e}"))?;
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
