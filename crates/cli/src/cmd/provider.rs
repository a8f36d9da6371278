//! `tollgate provider register`: get a provider API key by signing the facilitator's challenge.

use std::{io::Write as _, path::PathBuf};

use alloy::signers::SignerSync as _;
use anyhow::Context as _;
use tollgate_protocol::api::providers::RegisterRequest;

/// Flags of `tollgate provider`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Register this wallet as a provider: sign the facilitator's challenge (EIP-191
    /// personal_sign) and print the API key it returns (to stdout, once).
    #[command(after_help = "\
Asks the facilitator for a challenge naming it, the wallet's address, a nonce and an expiry,
signs it with the wallet (no funds move, no transaction is sent) and registers. The API key
(tg_ + 64 hex digits) is printed to stdout exactly once; store it: the facilitator keeps only
its hash. Use it as --api-key or TOLLGATE_API_KEY for `tollgate plan`.

Environment: TOLLGATE_KEY (hex private key, when neither --key nor --key-file is given).

Example:
  TOLLGATE_KEY=0x... tollgate provider register --facilitator http://127.0.0.1:8402 > api-key")]
    Register(RegisterArgs),
}

#[derive(Debug, clap::Args)]
struct RegisterArgs {
    /// The facilitator's base URL.
    #[arg(long, value_name = "URL")]
    facilitator: String,
    /// The provider's private key (hex). Prefer --key-file or TOLLGATE_KEY: flags show in `ps`.
    #[arg(long, value_name = "HEX", conflicts_with = "key_file")]
    key: Option<String>,
    /// A file holding the provider's private key (hex).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Command::Register(args) => register(args).await,
    }
}

async fn register(args: RegisterArgs) -> anyhow::Result<()> {
    let signer = match (&args.key, &args.key_file) {
        (Some(hex), _) => tollgate_agent::signer_from_hex(hex)?,
        (None, Some(path)) => tollgate_agent::signer_from_file(path)?,
        (None, None) => match std::env::var("TOLLGATE_KEY") {
            Ok(hex) => tollgate_agent::signer_from_hex(&hex).context("TOLLGATE_KEY")?,
            Err(_) => anyhow::bail!("no key: pass --key-file FILE, --key HEX or set TOLLGATE_KEY"),
        },
    };
    let facilitator = super::plan::client(&args.facilitator, None)?;
    let address = signer.address();
    let challenge = facilitator.challenge(address).await?;
    let signature = signer
        .sign_message_sync(challenge.challenge.as_bytes())
        .context("signing the challenge")?;
    let registered = facilitator
        .register(&RegisterRequest {
            address,
            challenge: challenge.challenge,
            signature: signature.as_bytes().into(),
        })
        .await?;
    let key = registered.api_key;
    writeln!(std::io::stdout(), "{key}")?;
    let _ = writeln!(
        std::io::stderr(),
        "registered provider {address}; the API key above is shown once: keep it secret \
         (use it as --api-key or TOLLGATE_API_KEY)"
    );
    Ok(())
}
