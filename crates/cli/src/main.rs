//! `tollgate`: the Tollgate command line. Each subcommand parses its flags and calls the libraries.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod amount;
mod cmd;

/// Tollgate: payment-gated HTTP on x402 (V1), with subscriptions, metered allowances, webhooks and
/// analytics.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, propagate_version = true)]
struct Cli {
    /// More logs on stderr: -v for info, -vv for debug. The client commands (pay, subscribe,
    /// subscription) log warnings only unless given -v; the servers log info. TOLLGATE_LOG (or
    /// RUST_LOG), a log filter, overrides it.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole product locally: the devnet, a facilitator and a demo gated API, with a
    /// "try this" guide.
    Dev(cmd::dev::Args),
    /// Run the embedded EVM devnet (contracts deployed, dev accounts funded) with a JSON-RPC
    /// listener on 127.0.0.1.
    Devnet(cmd::devnet::Args),
    /// Run a paying reverse proxy that gates any upstream HTTP API by route prefix and price
    /// (and serves priced MCP tools).
    Gateway(cmd::gateway::Args),
    /// Run the facilitator: settles signed payments, issues payment proofs, serves the x402 V1
    /// and V2 facilitator API.
    Facilitator(cmd::facilitator::Args),
    /// Request a URL, paying for it if the server answers 402 (a Tollgate gate, x402 V1 or V2);
    /// the body goes to stdout, a payment summary to stderr.
    Pay(cmd::pay::Args),
    /// Subscribe to a plan through a facilitator (the first cycle is billed on confirmation), or
    /// raise a subscription's overage cap (`--raise`); the subscription goes to stdout as JSON.
    Subscribe(cmd::subscribe::Args),
    /// Your subscriptions, gasless through the facilitator: `list`, `show`, `pause`, `resume`,
    /// `cancel` (the subscription id as the argument).
    Subscription(cmd::subscription::Args),
    /// Provider self-service: `register` signs the facilitator's challenge with the wallet and
    /// prints the provider API key.
    Provider(cmd::provider::Args),
    /// Subscription plans through the facilitator: `create`, `show`, `deprecate`.
    Plan(cmd::plan::Args),
    /// Deploy PaymentRouter and Subscriptions for a network's USDC at deterministic (CREATE2)
    /// addresses; a second run finds them and sends nothing.
    Deploy(cmd::deploy::Args),
    /// Webhook endpoints through the facilitator: `create`, `list`, `show`, `update`, `delete`,
    /// `rotate`, `deliveries`, `redeliver`, and the `events` log.
    Webhooks(cmd::webhooks::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The client commands report on stderr themselves (one summary line): their logs are for -v.
    let client = matches!(
        cli.command,
        Command::Pay(_) | Command::Subscribe(_) | Command::Subscription(_)
    );
    init_tracing(log_level(client, cli.verbose));
    tollgate_chain::install_crypto_provider();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Dev(args) => cmd::dev::run(args).await,
            Command::Devnet(args) => cmd::devnet::run(args).await,
            Command::Facilitator(args) => cmd::facilitator::run(args).await,
            Command::Gateway(args) => cmd::gateway::run(args).await,
            Command::Provider(args) => cmd::provider::run(args).await,
            Command::Plan(args) => cmd::plan::run(args).await,
            Command::Webhooks(args) => cmd::webhooks::run(args).await,
            Command::Deploy(args) => cmd::deploy::run(args).await,
            // `pay` reports its own errors, with its own exit codes.
            Command::Pay(args) => return Ok(cmd::pay::run(args).await),
            Command::Subscribe(args) => return Ok(cmd::subscribe::run(args).await),
            Command::Subscription(args) => return Ok(cmd::subscription::run(args).await),
        }
        .map(|()| ExitCode::SUCCESS)
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The default log level: `warn` for a client command, `info` for the others, one step more per
/// `-v`.
fn log_level(client: bool, verbose: u8) -> &'static str {
    const LEVELS: [&str; 4] = ["warn", "info", "debug", "trace"];
    let base = if client { 0 } else { 1 };
    LEVELS[(base + usize::from(verbose)).min(LEVELS.len() - 1)]
}

fn init_tracing(level: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("TOLLGATE_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(level));
    use std::io::IsTerminal as _;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_writer(std::io::stderr)
        .init();
}

/// Resolves when the process is asked to stop (Ctrl-C or SIGTERM).
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use super::log_level;

    #[test]
    fn client_commands_log_warnings_unless_verbose() {
        assert_eq!(log_level(true, 0), "warn");
        assert_eq!(log_level(true, 1), "info");
        assert_eq!(log_level(false, 0), "info");
        assert_eq!(log_level(false, 1), "debug");
        assert_eq!(log_level(false, 9), "trace");
    }
}
