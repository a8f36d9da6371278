//! `tollgate devnet`: the embedded devnet behind a JSON-RPC listener.

use std::{path::PathBuf, sync::Arc};

use anyhow::Context as _;
use tollgate_chain::devnet::{Devnet, DevnetConfig, server};

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
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
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
    server::serve(Arc::clone(&devnet), listener, crate::shutdown_signal()).await?;
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
