//! `tollgate gateway --config FILE`: a paying reverse proxy in front of any HTTP API.

use std::path::PathBuf;

use anyhow::Context as _;
use tollgate_gateway::Config;

/// Flags of `tollgate gateway`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Gates an upstream HTTP API by route prefix and price, with no code in the API: requests without
a valid payment get 402 with the terms (payable by Tollgate agents and by x402 V1 clients);
paid requests are proxied with their headers and streamed bodies, and the response carries
X-PAYMENT-RESPONSE. See examples/gateway.toml for every key.

Paths are priced and forwarded in one canonical form (escapes of unreserved characters decoded,
// collapsed); dot segments and encoded separators get 400 InvalidPath, and a path that reaches
another route once case is folded or ;parameters dropped (/v1/QUOTE) gets 400 AmbiguousPath.

  tollgate gateway --config examples/gateway.toml")]
pub(crate) struct Args {
    /// The gateway's TOML config file.
    #[arg(long, short, value_name = "FILE")]
    config: PathBuf,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let config = Config::load(&args.config)?;
    let secret = match &config.gate.memo_secret_env {
        Some(var) => {
            let hex = std::env::var(var)
                .with_context(|| format!("gate.memo_secret_env: {var} is not set"))?;
            let bytes: alloy::primitives::B256 = hex
                .trim()
                .parse()
                .with_context(|| format!("{var}: expected 32 bytes as 0x-hex"))?;
            Some(bytes.0)
        }
        None => {
            tracing::warn!("gate.memo_secret_env unset: a random memo secret (one replica only)");
            None
        }
    };
    let app = tollgate_gateway::router(&config, secret).await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    tracing::info!(listen = %listener.local_addr()?, upstream = %config.upstream, routes = config.routes.len(), "gateway listening");
    tollgate_gateway::serve(app, listener, &config.limits()?, crate::shutdown_signal()).await?;
    Ok(())
}
