//! `queen-sweeper`: one broker as a process.
//!
//! ```text
//! queen-sweeper run   --database-url URL [--metrics-addr 127.0.0.1:9187] [--identity NAME]
//!                     [--no-apply-schema] [--pool-size N]
//! queen-sweeper serve --database-url URL --listen ADDR [--identity NAME]
//!                     [--no-apply-schema] [--pool-size N]
//!                     [--tokens-file PATH] [--insecure-no-auth]
//! ```
//!
//! `run` is the sweeper alone, with `/metrics` and `/healthz`. `serve` is a whole broker: the same
//! sweeper plus the HTTP API (`queen_broker::api`) on `--listen`, which serves `/metrics` and
//! `/healthz` too. With tokens (`--tokens-file`, `QUEEN_API_TOKENS`) every API call needs a bearer
//! token; without them `serve` listens only on a loopback address, unless `--insecure-no-auth`.
//!
//! Knobs come from the environment (`QUEEN_SWEEPER_*`, `QUEEN_KV_*`, and for `serve` the API's
//! `QUEEN_TIMERS_*` and `QUEEN_API_*`); a bad one stops the start with a message naming it. On
//! Ctrl-C or SIGTERM, `serve` stops accepting connections and finishes the requests in flight,
//! then the sweeper stops claiming and finishes the fire in flight, and the process exits 0.
//! Errors are one line on stderr, never a backtrace.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use queen_broker::process::{RunArgs, ServeArgs, run, serve};

#[derive(Debug, Parser)]
#[command(
    name = "queen-sweeper",
    version = queen_broker::VERSION,
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
        Err(error) => {
            eprintln!("queen-sweeper: {error}");
            ExitCode::FAILURE
        }
    }
}
