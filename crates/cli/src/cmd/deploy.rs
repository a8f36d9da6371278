//! `tollgate deploy`: `PaymentRouter` and `Subscriptions` for a network's USDC at deterministic
//! (CREATE2) addresses, through the chain layer's [`tollgate_chain::deploy`].

use std::{io::Write as _, path::PathBuf, time::Duration};

use alloy::primitives::{Address, U256};
use anyhow::{Context as _, bail};
use serde_json::json;
use tollgate_chain::{
    Chain, WaitOptions, Wallet,
    contracts::{Token, read},
    deploy::{CREATE2_PROXY, Deployed, Plan, deploy, is_deployed},
    rpc::{RpcChain, RpcOptions},
};
use tollgate_facilitator::config::{KeySource, SecretSource};
use tollgate_protocol::network::{self, USDC_EIP712_VERSION};

/// Flags of `tollgate deploy`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Deploys PaymentRouter (for the token and fee recipient) and Subscriptions with CREATE2 through the
standard deterministic deployment proxy (0x4e59b44847b379578588920cA78FbF26c0B4956C, present on
Base, Base Sepolia and anvil; not on the embedded devnet of `tollgate devnet`/`tollgate dev`, which
has its contracts already). The addresses depend only on the chain, the token and the fee
recipient: one deployment is shared, and a run that finds it sends nothing.

Before sending, it checks the node's chain id against --network, the token's EIP-712 name and
version on chain against the network registry (a custom network needs --token; its name and
version are read and printed), and the deployer's gas balance against the estimate. It then
waits for --confirmations, checks the code at each address, and prints the deployment as JSON on
stdout (progress on stderr). --dry-run prints the plan and the gas estimate and sends nothing.

--write-config PATH writes a facilitator config for the deployment (keys as env:
TOLLGATE_RELAYER_KEY and TOLLGATE_PROOF_KEY; the RPC URL as given, so mind an API key in it;
--public-rpc-url as the URL published for gates; start_block the Subscriptions deployment's
block when this run deploys it) that `tollgate facilitator --config PATH` starts with; an
existing file is kept unless --force.

--key is \"env:VAR\" (the variable holds the key as hex), \"file:PATH\" (a file holding it; not
group/world-writable) or an inline 0x key (development only).

Example:
  TOLLGATE_DEPLOYER_KEY=0x... tollgate deploy --rpc-url https://sepolia.base.org \\
      --key env:TOLLGATE_DEPLOYER_KEY --network base-sepolia --confirmations 2 \\
      --write-config facilitator.toml")]
pub(crate) struct Args {
    /// The node's JSON-RPC URL.
    #[arg(long, value_name = "URL")]
    rpc_url: String,
    /// The deployer's key: env:VAR, file:PATH or an inline 0x key. Pays the gas.
    #[arg(long, value_name = "SOURCE")]
    key: String,
    /// The network: an x402 V1 name (base, base-sepolia, …) or a custom name (with --token).
    #[arg(long, value_name = "NAME")]
    network: String,
    /// The token (default: the registry's USDC for the network).
    #[arg(long, value_name = "ADDR")]
    token: Option<Address>,
    /// The router's fee recipient, fixed at deployment (default: the deployer).
    #[arg(long, value_name = "ADDR")]
    fee_recipient: Option<Address>,
    /// Blocks each deployment must be buried under (1 = its own block).
    #[arg(long, value_name = "N", default_value_t = 1)]
    confirmations: u64,
    /// How long to wait for each deployment, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    timeout_secs: u64,
    /// Print the plan and the gas estimate; send nothing.
    #[arg(long)]
    dry_run: bool,
    /// Write a facilitator config for the deployment to PATH.
    #[arg(long, value_name = "PATH")]
    write_config: Option<PathBuf>,
    /// Overwrite the --write-config file if it exists.
    #[arg(long, requires = "write_config")]
    force: bool,
    /// The listen address written into the --write-config file.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8402")]
    listen: std::net::SocketAddr,
    /// A public JSON-RPC URL of the chain (no credentials), written into the --write-config
    /// file as the network's public_rpc_url: published for gates and gateways that check
    /// subscriptions.
    #[arg(long, value_name = "URL", requires = "write_config")]
    public_rpc_url: Option<String>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    if let Some(path) = &args.write_config
        && path.exists()
        && !args.force
    {
        bail!("{} exists: pass --force to overwrite it", path.display());
    }
    let signer = read_key(&args.key).context("--key")?;
    let deployer = signer.address();
    let wallet = Wallet::from_keys([signer.to_bytes()])?;
    let chain = RpcChain::connect(&args.rpc_url, wallet, RpcOptions::default())
        .await
        .context("connecting to --rpc-url")?;
    let chain_id = chain.chain_id();

    // The network and its token, checked against the chain.
    let known = network::lookup(&args.network);
    if let Some(n) = known {
        if !n.evm {
            bail!("{} is not an EVM network", n.name);
        }
        if n.chain_id != chain_id {
            bail!(
                "the node's chain id is {chain_id}, not {}'s {}: wrong --rpc-url or --network",
                n.name,
                n.chain_id
            );
        }
    }
    let token = match (args.token, known.and_then(|n| n.usdc)) {
        (Some(t), _) | (None, Some(t)) => t,
        (None, None) => bail!(
            "{} is not in the network registry: pass --token",
            args.network
        ),
    };
    if chain.code(token).await?.is_empty() {
        bail!("no contract at the token address {token} on chain {chain_id}");
    }
    let token_name = read(&chain, token, &Token::nameCall {})
        .await
        .with_context(|| format!("reading the token's name() at {token}"))?;
    let token_version = read(&chain, token, &Token::versionCall {})
        .await
        .with_context(|| format!("reading the token's EIP-712 version() at {token}"))?;
    status(format_args!(
        "chain {chain_id}, token {token}: EIP-712 name {token_name:?}, version {token_version:?}"
    ));
    if let Some(n) = known {
        let expected = n.usdc_name.unwrap_or_default();
        let matches = token_name == expected && token_version == USDC_EIP712_VERSION;
        if !matches && n.usdc == Some(token) {
            bail!(
                "the token at {token} has EIP-712 name {token_name:?} and version \
                 {token_version:?}; the registry says {expected:?} and {USDC_EIP712_VERSION:?} \
                 for {}: wrong chain?",
                n.name
            );
        }
        if !matches {
            status(format_args!(
                "warning: --token is not {}'s USDC ({expected:?}, version \
                 {USDC_EIP712_VERSION:?}); the config names the token's own domain",
                n.name
            ));
        }
    }

    let fee_recipient = args.fee_recipient.unwrap_or(deployer);
    let plan = Plan::new(token, fee_recipient);
    if chain.code(CREATE2_PROXY).await?.is_empty() {
        bail!(
            "chain {chain_id} has no deterministic deployment proxy at {CREATE2_PROXY} \
             (the embedded devnet has none: it has its contracts already)"
        );
    }

    // What is there, what is to send and what it costs.
    let mut to_send = Vec::new();
    let mut gas_total = 0u64;
    let mut max_fee = 0u128;
    let mut contracts = serde_json::Map::new();
    for (name, planned) in plan.contracts() {
        let present = is_deployed(&chain, planned)
            .await
            .with_context(|| format!("checking {name} at {}", planned.address))?;
        let mut entry = json!({ "address": planned.address, "present": present });
        if !present {
            let (gas, fee) = chain
                .gas_cost(&planned.tx(deployer))
                .await
                .with_context(|| format!("estimating {name}'s deployment"))?;
            gas_total = gas_total.saturating_add(gas);
            max_fee = max_fee.max(fee);
            entry["gas"] = json!(gas);
            to_send.push(name);
        }
        contracts.insert(name.to_owned(), entry);
    }
    let max_cost = U256::from(gas_total) * U256::from(max_fee);
    let balance = chain.balance(deployer).await?;
    let mut out = json!({
        "network": args.network,
        "chainId": chain_id,
        "token": token,
        "tokenName": token_name,
        "tokenVersion": token_version,
        "feeRecipient": fee_recipient,
        "deployer": deployer,
        "router": plan.router.address,
        "subscriptions": plan.subscriptions.address,
        "contracts": contracts,
        "gasEstimate": gas_total,
        "maxFeePerGas": max_fee.to_string(),
        "maxCostWei": max_cost.to_string(),
        "deployerBalanceWei": balance.to_string(),
    });
    if args.dry_run {
        out["dryRun"] = json!(true);
        status(format_args!(
            "dry run: would deploy {} (gas {gas_total}, at most {max_cost} wei); nothing sent",
            if to_send.is_empty() {
                "nothing (all present)".to_owned()
            } else {
                to_send.join(" and ")
            }
        ));
        return print(&out);
    }
    if !to_send.is_empty() && balance < max_cost {
        bail!(
            "the deployer {deployer} holds {balance} wei; deploying {} may cost up to \
             {max_cost} wei (gas {gas_total} at {max_fee} wei): fund it first",
            to_send.join(" and ")
        );
    }

    if to_send.is_empty() {
        status(format_args!("already deployed: nothing to send"));
    } else {
        status(format_args!(
            "deploying {} from {deployer} ({} confirmation(s))",
            to_send.join(" and "),
            args.confirmations
        ));
    }
    let opts = WaitOptions {
        confirmations: args.confirmations.max(1),
        timeout: Duration::from_secs(args.timeout_secs),
    };
    let done = deploy(&chain, deployer, &plan, opts).await?;
    let mut start_block = None;
    for ((name, planned), d) in plan.contracts().into_iter().zip(&done) {
        match d {
            Deployed::Present => status(format_args!("{name}: at {}", planned.address)),
            Deployed::Sent(r) => {
                status(format_args!(
                    "{name}: deployed at {} (tx {}, block {})",
                    planned.address, r.tx_hash, r.block_number
                ));
                out["contracts"][name]["tx"] = json!(r.tx_hash);
                out["contracts"][name]["block"] = json!(r.block_number);
                if name == "Subscriptions" {
                    start_block = Some(r.block_number);
                }
            }
        }
        out["contracts"][name]["verified"] = json!(true);
    }
    if let Some(path) = &args.write_config {
        if start_block.is_none() {
            status(format_args!(
                "warning: Subscriptions was deployed by an earlier run, so its block is unknown \
                 here: set start_block in {} to that block (the first run printed it as \
                 contracts.Subscriptions.block; a block explorer shows it), or the renewal \
                 keeper reads the contract's logs from block 0",
                path.display()
            ));
        }
        let config = facilitator_config(
            &args,
            &plan,
            chain_id,
            &token_name,
            &token_version,
            start_block,
        );
        write_config(path, &config, args.force)
            .with_context(|| format!("writing {}", path.display()))?;
        status(format_args!("wrote {}", path.display()));
        out["config"] = json!(path);
    }
    print(&out)
}

/// The deployer's key from `env:VAR`, `file:PATH` or an inline key, as the facilitator's
/// `[keys]` read them.
fn read_key(source: &str) -> anyhow::Result<alloy::signers::local::PrivateKeySigner> {
    let source = SecretSource::parse(source)?;
    let secret = match &source {
        KeySource::Env(var) => {
            let value = std::env::var(var).with_context(|| format!("{var} is not set"))?;
            tollgate_facilitator::config::Secret::from_hex(&value)
                .with_context(|| format!("the key in {var}"))?
        }
        KeySource::File(path) => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt as _;
                let mode = std::fs::metadata(path)
                    .with_context(|| format!("reading {}", path.display()))?
                    .permissions()
                    .mode();
                if mode & 0o022 != 0 {
                    bail!(
                        "{} is writable by group or others (mode {:o}): refused",
                        path.display(),
                        mode & 0o777
                    );
                }
            }
            let value = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            tollgate_facilitator::config::Secret::from_hex(&value)
                .with_context(|| format!("the key in {}", path.display()))?
        }
        KeySource::Literal(secret) => {
            status(format_args!(
                "warning: an inline key shows in `ps` and shell history; prefer env: or file:"
            ));
            secret.clone()
        }
        _ => bail!("unsupported key source"),
    };
    Ok(secret.into_signer())
}

/// A facilitator config (the format of examples/facilitator.toml) for the deployment.
fn facilitator_config(
    args: &Args,
    plan: &Plan,
    chain_id: u64,
    token_name: &str,
    token_version: &str,
    start_block: Option<u64>,
) -> String {
    let store = args
        .write_config
        .as_deref()
        .and_then(|p| std::path::absolute(p).ok())
        .and_then(|p| p.parent().map(|d| d.join("facilitator.db")))
        .unwrap_or_else(|| PathBuf::from(".tollgate/facilitator.db"));
    let start_block = start_block.map_or_else(
        || {
            "# The block Subscriptions was deployed in (deployed by an earlier run): without it, the\n\
             # renewal keeper reads the contract's logs from block 0.\n\
             # start_block = 0\n"
                .to_owned()
        },
        |b| format!("start_block = {b}\n"),
    );
    let public_rpc_url = args.public_rpc_url.as_ref().map_or_else(
        || {
            "# A public JSON-RPC URL of the chain (no credentials), published for gates and gateways\n\
             # that check subscriptions (`tollgate deploy --public-rpc-url`):\n\
             # public_rpc_url = \"https://…\"\n"
                .to_owned()
        },
        |u| format!("public_rpc_url = {u:?}\n"),
    );
    format!(
        r#"# Tollgate facilitator configuration written by `tollgate deploy` (see examples/facilitator.toml
# for every key): `tollgate facilitator --config <this file>`.

listen = "{listen}"
store = "sqlite://{store}"

[keys]
# Relayers pay the settlements' gas; the proof key must differ from every relayer key.
relayers = ["env:TOLLGATE_RELAYER_KEY"]
proof = "env:TOLLGATE_PROOF_KEY"

[fees]
# Informational; the router's fee recipient is fixed at deployment.
fee_recipient = "{fee_recipient}"

[[networks]]
name = {network:?}
chain_id = {chain_id}
rpc_url = {rpc_url:?}
{public_rpc_url}token = "{token}"
token_name = {token_name:?}
token_version = {token_version:?}
router = "{router}"
subscriptions = "{subscriptions}"
confirmations = {confirmations}
{start_block}"#,
        listen = args.listen,
        store = store.display(),
        fee_recipient = plan.fee_recipient,
        network = args.network,
        rpc_url = args.rpc_url,
        token = plan.token,
        router = plan.router.address,
        subscriptions = plan.subscriptions.address,
        confirmations = args.confirmations.max(1),
    )
}

fn write_config(path: &std::path::Path, config: &str, force: bool) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let mut f = options.open(path)?;
    f.write_all(config.as_bytes())?;
    f.sync_all()
}

fn status(message: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "{message}");
}

fn print(out: &serde_json::Value) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut stdout, out)?;
    writeln!(stdout)?;
    Ok(())
}
