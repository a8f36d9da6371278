//! `tollgate gateway --config FILE`: a paying reverse proxy in front of any HTTP API.

use std::path::PathBuf;

use anyhow::Context as _;
use tollgate_gateway::{Config, Secrets};

/// Flags of `tollgate gateway`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Gates an upstream HTTP API by route prefix and price, with no code in the API: requests without
a valid payment get 402 with the terms (payable by Tollgate agents and by x402 V1 and V2
clients; browsers get a page that pays with their wallet, unless the route says paywall = false);
paid requests are proxied with their headers and streamed bodies, and the response carries
X-PAYMENT-RESPONSE and PAYMENT-RESPONSE. See examples/gateway.toml for every key.

Routes are priced per request (price = \"500000\", smallest units), by subscription
(plan = \"0x…\": subscribers pass with X-Service-Sub; others get a 402 offering the plan and the
route's price, if any) or metered (metered = \"0.10\" or \"units:100000\" with a plan: deducted
from the subscriber's allowance per request, 402 AllowanceExhausted at the cap). Plan terms and
the chain come from the facilitator's discovery; metered routes need the provider's API key in
the variable named by gate.api_key_env, and gate.rpc_url_env overrides the published chain URL.
The memo store's directory (.tollgate/ by default) is created at start.

Flags over the file (each also read from its environment variable): --facilitator
(TOLLGATE_FACILITATOR) for gate.facilitator, --upstream (TOLLGATE_UPSTREAM_URL) for upstream,
--listen (TOLLGATE_GATEWAY_LISTEN; port 0 picks a free one, logged) for listen. `tollgate dev`
writes TOLLGATE_FACILITATOR in STATE_DIR/dev.env, so after `. .tollgate/dev/dev.env` the example
settles through that facilitator, whatever its --port-base. An override is logged.

An [mcp] section serves MCP tools over streamable HTTP (at /mcp by default), each a call to the
upstream, free or priced per call ([[mcp.tools]] price) on x402's MCP transport.

Paths are priced and forwarded in one canonical form (escapes of unreserved characters decoded,
// collapsed); dot segments and encoded separators get 400 InvalidPath, and a path that reaches
another route once case is folded or ;parameters dropped (/v1/QUOTE) gets 400 AmbiguousPath.

  tollgate gateway --config examples/gateway.toml
  . .tollgate/dev/dev.env && tollgate gateway --config examples/gateway.toml --upstream http://127.0.0.1:9001")]
pub(crate) struct Args {
    /// The gateway's TOML config file.
    #[arg(long, short, value_name = "FILE")]
    config: PathBuf,
    /// The facilitator's base URL, over the file's gate.facilitator.
    #[arg(long, value_name = "URL", env = "TOLLGATE_FACILITATOR")]
    facilitator: Option<String>,
    /// The upstream API's base URL, over the file's upstream.
    #[arg(long, value_name = "URL", env = "TOLLGATE_UPSTREAM_URL")]
    upstream: Option<String>,
    /// Where to listen, over the file's listen (port 0: a free port).
    #[arg(long, value_name = "ADDR", env = "TOLLGATE_GATEWAY_LISTEN")]
    listen: Option<std::net::SocketAddr>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let mut config = Config::load(&args.config)?;
    if let Some(url) = args.facilitator {
        tracing::info!(facilitator = %url, "gate.facilitator from --facilitator (TOLLGATE_FACILITATOR)");
        config.gate.facilitator = url;
    }
    if let Some(url) = args.upstream {
        anyhow::ensure!(
            url.starts_with("http://") || url.starts_with("https://"),
            "--upstream (TOLLGATE_UPSTREAM_URL): {url:?} is not an http(s) URL"
        );
        tracing::info!(upstream = %url, "upstream from --upstream (TOLLGATE_UPSTREAM_URL)");
        config.upstream = url;
    }
    if let Some(listen) = args.listen {
        tracing::info!(%listen, "listen from --listen (TOLLGATE_GATEWAY_LISTEN)");
        config.listen = listen;
    }
    let secrets = secrets(&config)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    // Port 0 picks a free port: the 402's resource URLs name the one bound.
    config.listen = listener.local_addr()?;
    let app = tollgate_gateway::router(&config, &secrets).await?;
    tracing::info!(listen = %listener.local_addr()?, upstream = %config.upstream, routes = config.routes.len(), "gateway listening");
    tollgate_gateway::serve(app, listener, &config.limits()?, crate::shutdown_signal()).await?;
    Ok(())
}

/// The values `[gate]` names by environment variable: the memo secret, the API key, the RPC URL.
fn secrets(config: &Config) -> anyhow::Result<Secrets> {
    let g = &config.gate;
    let var = |key: &str, name: &str| {
        std::env::var(name).with_context(|| format!("gate.{key}: {name} is not set"))
    };
    let mut secrets = Secrets::new();
    match &g.memo_secret_env {
        Some(name) => {
            let hex = var("memo_secret_env", name)?;
            let bytes: alloy::primitives::B256 = hex
                .trim()
                .parse()
                .with_context(|| format!("{name}: expected 32 bytes as 0x-hex"))?;
            secrets = secrets.memo_secret(bytes.0);
        }
        None => {
            tracing::warn!("gate.memo_secret_env unset: a random memo secret (one replica only)");
        }
    }
    if let Some(name) = &g.api_key_env {
        secrets = secrets.api_key(var("api_key_env", name)?.trim());
    }
    if let Some(name) = &g.rpc_url_env {
        secrets = secrets.rpc_url(var("rpc_url_env", name)?.trim());
    }
    Ok(secrets)
}
