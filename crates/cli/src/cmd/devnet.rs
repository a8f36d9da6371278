//! `tollgate devnet`: the embedded devnet behind a JSON-RPC listener.

use std::{path::PathBuf, sync::Arc};

use anyhow::Context as _;
use tollgate_devnet::{Devnet, DevnetConfig, server};
use tollgate_server::{Limits, ServerConfig};

/// Flags of `tollgate devnet`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
The devnet executes the real Tollgate contracts in an embedded EVM (revm). On start it derives the
dev accounts of the standard test mnemonic (anvil's), funds each with 10,000 ETH and 1,000,000
tokens, deploys Token, PaymentRouter and Subscriptions at fixed addresses, and writes
STATE_DIR/devnet.json. Every block is journaled to STATE_DIR/devnet.journal (fsynced); a restart
with the same state directory restores all balances, nonces, plans and subscriptions.

Examples:
  tollgate devnet
  tollgate devnet --port 0 --state-dir /tmp/tg
  tollgate devnet --network base-sepolia --chain-id 84532
  tollgate devnet --header-read-timeout-secs 5 --request-timeout-secs 10
  curl -s -X POST -H 'content-type: application/json' \\
       -d '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_blockNumber\"}' http://127.0.0.1:8545")]
pub(crate) struct Args {
    /// Port of the JSON-RPC listener on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 8545)]
    port: u16,
    /// Directory for the journal and devnet.json.
    #[arg(long, default_value = ".tollgate/devnet", env = "TOLLGATE_STATE_DIR")]
    state_dir: PathBuf,
    /// Chain id.
    #[arg(long, default_value_t = 31337)]
    chain_id: u64,
    /// Network name that gates and clients use for this chain.
    #[arg(long, default_value = "tollgate-devnet")]
    network: String,
    #[command(flatten)]
    server: ServerArgs,
}

/// The HTTP limits of a listener: the `[server]` section of the facilitator's and the gateway's
/// configs, as flags, with the same defaults.
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Server limits (as [server] in the facilitator's config)")]
pub(crate) struct ServerArgs {
    /// A request's header must arrive within this time, or the connection is closed (slow and
    /// idle clients).
    #[arg(long, value_name = "SECS", default_value_t = ServerConfig::default().header_read_timeout_secs)]
    header_read_timeout_secs: u64,
    /// A request, its body included, must be answered within this time (408 otherwise).
    #[arg(long, value_name = "SECS", default_value_t = ServerConfig::default().request_timeout_secs)]
    request_timeout_secs: u64,
    /// Largest request header section in bytes, at least 8192 (431 otherwise).
    #[arg(long, value_name = "BYTES", default_value_t = ServerConfig::default().max_header_bytes)]
    max_header_bytes: usize,
    /// Most header fields in a request (431 otherwise).
    #[arg(long, value_name = "N", default_value_t = ServerConfig::default().max_headers)]
    max_headers: usize,
    /// Most connections served at once.
    #[arg(long, value_name = "N", default_value_t = ServerConfig::default().max_connections)]
    max_connections: usize,
    /// Requests per second per client (0: no rate limit). Loopback and private-network clients
    /// are exempt unless --rate-limit-private.
    #[arg(long, value_name = "N", default_value_t = ServerConfig::default().rate_per_second)]
    rate_per_second: u32,
    /// Requests at once per client.
    #[arg(long, value_name = "N", default_value_t = ServerConfig::default().rate_burst)]
    rate_burst: u32,
    /// Rate limit loopback and private-network clients too.
    #[arg(long)]
    rate_limit_private: bool,
}

impl ServerArgs {
    /// The limits, or the first flag out of range.
    pub(crate) fn limits(&self) -> anyhow::Result<Limits> {
        let mut config = ServerConfig::default();
        config.header_read_timeout_secs = self.header_read_timeout_secs;
        config.request_timeout_secs = self.request_timeout_secs;
        config.max_header_bytes = self.max_header_bytes;
        config.max_headers = self.max_headers;
        config.max_connections = self.max_connections;
        config.rate_per_second = self.rate_per_second;
        config.rate_burst = self.rate_burst;
        config.rate_limit_private = self.rate_limit_private;
        config
            .limits()
            .map_err(|e| anyhow::anyhow!("--{} {}", e.field.replace('_', "-"), e.reason))
    }
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let limits = args.server.limits()?;
    let devnet = Devnet::start(DevnetConfig {
        chain_id: args.chain_id,
        network: args.network,
        state_dir: Some(args.state_dir.clone()),
        ..Default::default()
    })
    .with_context(|| format!("starting the devnet in {}", args.state_dir.display()))?;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", args.port))
        .await
        .with_context(|| format!("binding 127.0.0.1:{}", args.port))?;
    let url = format!("http://{}", listener.local_addr()?);
    let info = devnet.info(Some(url.clone()));
    let path = args.state_dir.join("devnet.json");
    super::write_atomically(&path, &serde_json::to_vec_pretty(&info)?)
        .with_context(|| format!("writing {}", path.display()))?;
    print_summary(&devnet, &url, &path);
    server::serve_with(
        Arc::clone(&devnet),
        listener,
        &limits,
        crate::shutdown_signal(),
    )
    .await?;
    Ok(())
}

#[allow(clippy::print_stderr)]
fn print_summary(devnet: &Devnet, url: &str, path: &std::path::Path) {
    let c = devnet.deployment();
    let cfg = devnet.config();
    eprintln!("Tollgate devnet ready");
    eprintln!(
        "  network        {} (chain id {})",
        cfg.network, cfg.chain_id
    );
    eprintln!("  JSON-RPC       {url}");
    eprintln!(
        "  token          {}  ({} / EIP-712 version {}, 6 decimals)",
        c.token, cfg.token.name, cfg.token.version
    );
    eprintln!("  router         {}", c.router);
    eprintln!("  subscriptions  {}", c.subscriptions);
    eprintln!("  accounts       (10,000 ETH and 1,000,000 tokens each; well-known test keys)");
    for (i, a) in devnet.accounts().iter().enumerate() {
        eprintln!("    [{i}] {}  {}", a.address, a.private_key);
    }
    eprintln!("  summary        {}", path.display());
    eprintln!("Press Ctrl-C to stop; state persists in the state directory.");
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        server: ServerArgs,
    }

    fn limits(flags: &[&str]) -> anyhow::Result<Limits> {
        let cli = Cli::try_parse_from(std::iter::once("devnet").chain(flags.iter().copied()))?;
        cli.server.limits()
    }

    #[test]
    fn server_flags_default_to_the_services_limits_and_are_checked() {
        assert_eq!(limits(&[]).unwrap(), Limits::default());
        let set = limits(&[
            "--header-read-timeout-secs",
            "3",
            "--request-timeout-secs",
            "4",
            "--max-header-bytes",
            "9000",
            "--max-headers",
            "20",
            "--rate-per-second",
            "0",
        ])
        .unwrap();
        assert_eq!(set.header_read_timeout, std::time::Duration::from_secs(3));
        assert_eq!(set.request_timeout, std::time::Duration::from_secs(4));
        assert_eq!((set.max_header_bytes, set.max_headers), (9000, 20));
        assert_eq!(set.rate_limit, None);
        let err = limits(&["--request-timeout-secs", "0"]).unwrap_err();
        assert_eq!(err.to_string(), "--request-timeout-secs must be positive");
        let err = limits(&["--max-header-bytes", "100"]).unwrap_err();
        assert!(err.to_string().starts_with("--max-header-bytes"), "{err}");
    }
}
