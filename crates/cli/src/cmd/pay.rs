//! `tollgate pay URL`: request a resource, paying for it if the server asks (the agent SDK).

use std::{io::Write as _, path::PathBuf, process::ExitCode, time::Instant};

use anyhow::Context as _;
use tollgate_agent::{Agent, Amount, Error, PaidResponse, PayRequest, Payment, SpendPolicy};

/// Exit codes of `tollgate pay`.
mod exit {
    pub(super) const HTTP_ERROR: u8 = 1;
    pub(super) const USAGE: u8 = 2;
    pub(super) const REFUSED: u8 = 3;
    pub(super) const PAYMENT_FAILED: u8 = 4;
    pub(super) const NETWORK: u8 = 5;
}

/// Flags of `tollgate pay`.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Sends the request; if the server answers 402 Payment Required, pays the cheapest acceptable
option (through the Tollgate facilitator the 402 names, or as a plain x402 V1 payment) and sends
it again with X-PAYMENT. The response body goes to stdout, a payment summary to stderr.

Amounts are in whole tokens with up to 6 decimals (1.00 = 1000000 units).

Exit codes:
  0  success (the final response has a 1xx-3xx status)
  1  the server answered an HTTP error status (4xx/5xx) — after payment, if one was made
  2  usage error (bad flags, no key, bad key)
  3  payment refused by the spending policy, or no acceptable option in the 402
  4  payment failed (facilitator or chain refused it, insufficient funds, payment declined)
  5  network error or timeout

Environment: TOLLGATE_KEY (hex private key, when neither --key nor --key-file is given),
TOLLGATE_LOG (log filter).

Example:
  TOLLGATE_KEY=0x... tollgate pay http://127.0.0.1:8080/v1/quote --max 0.50")]
pub(crate) struct Args {
    /// The URL to request.
    url: String,
    /// HTTP method.
    #[arg(
        short = 'X',
        long = "request",
        default_value = "GET",
        value_name = "METHOD"
    )]
    method: String,
    /// A request header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,
    /// The request body.
    #[arg(short = 'd', long = "data", value_name = "BODY")]
    data: Option<String>,
    /// The payer's private key (hex). Prefer --key-file or TOLLGATE_KEY: flags show in `ps`.
    #[arg(long, value_name = "HEX", conflicts_with = "key_file")]
    key: Option<String>,
    /// A file holding the payer's private key (hex).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// The most to pay for this request, in tokens.
    #[arg(long, default_value = "1.00", value_name = "AMOUNT", value_parser = parse_tokens)]
    max: Amount,
    /// The most to pay in total (this command pays once; a second time only if the server
    /// declines the proof and the facilitator reports the first payment failed); default: --max.
    #[arg(long, value_name = "AMOUNT", value_parser = parse_tokens)]
    budget: Option<Amount>,
    /// Only pay on this network (repeatable).
    #[arg(long = "network", value_name = "NAME")]
    networks: Vec<String>,
}

/// Runs `tollgate pay`; the exit code says how it ended.
pub(crate) async fn run(args: Args) -> ExitCode {
    let (agent, request) = match prepare(args) {
        Ok(v) => v,
        Err(e) => {
            report(&format!("error: {e:#}"));
            return ExitCode::from(exit::USAGE);
        }
    };
    let started = Instant::now();
    match agent.pay(request).await {
        Ok(response) => {
            summarize(&response, started);
            let mut out = std::io::stdout().lock();
            if let Err(e) = out.write_all(&response.body).and_then(|()| out.flush()) {
                report(&format!("error: writing the body: {e}"));
                return ExitCode::FAILURE;
            }
            if response.status.is_client_error() || response.status.is_server_error() {
                ExitCode::from(exit::HTTP_ERROR)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            if let Error::InvalidPaymentProof { payments }
            | Error::PaymentRejected { payments, .. } = &e
            {
                for p in payments {
                    report(&format!("{} (not accepted by the server)", paid_line(p)));
                }
            }
            report(&format!("error: {}", chain(&e)));
            ExitCode::from(exit_code(&e))
        }
    }
}

fn prepare(args: Args) -> anyhow::Result<(Agent, PayRequest)> {
    let signer = read_signer(args.key.as_deref(), args.key_file.as_deref())?;
    let mut policy = SpendPolicy::new(args.max, args.budget.unwrap_or(args.max));
    if !args.networks.is_empty() {
        policy = policy.networks(args.networks);
    }
    let agent = Agent::builder(signer, policy).build()?;
    let method = tollgate_agent::Method::from_bytes(args.method.to_ascii_uppercase().as_bytes())
        .with_context(|| format!("invalid method {:?}", args.method))?;
    let url = tollgate_agent::Url::parse(&args.url)
        .with_context(|| format!("invalid URL {:?}", args.url))?;
    let mut request = PayRequest::new(method, url);
    for h in &args.headers {
        let (name, value) = h
            .split_once(':')
            .with_context(|| format!("header {h:?} is not `Name: value`"))?;
        request = request.header(
            name.trim()
                .parse()
                .with_context(|| format!("invalid header name {name:?}"))?,
            value
                .trim()
                .parse()
                .with_context(|| format!("invalid header value in {h:?}"))?,
        );
    }
    if let Some(data) = args.data {
        request = request.body(data.into_bytes());
    }
    Ok((agent, request))
}

/// The key from `--key`, `--key-file` or `TOLLGATE_KEY`, in that order.
pub(crate) fn read_signer(
    key: Option<&str>,
    key_file: Option<&std::path::Path>,
) -> anyhow::Result<tollgate_agent::Secp256k1Signer> {
    Ok(match (key, key_file) {
        (Some(hex), _) => tollgate_agent::signer_from_hex(hex)?,
        (None, Some(path)) => tollgate_agent::signer_from_file(path)?,
        (None, None) => match std::env::var("TOLLGATE_KEY") {
            Ok(hex) => tollgate_agent::signer_from_hex(&hex).context("TOLLGATE_KEY")?,
            Err(_) => anyhow::bail!("no key: pass --key-file FILE, --key HEX or set TOLLGATE_KEY"),
        },
    })
}

/// The usage-error exit code, shared with `tollgate subscribe`.
pub(crate) const USAGE_EXIT: u8 = exit::USAGE;

/// `1`, `0.5`, `1.000001` tokens (6 decimals) to units.
pub(crate) fn parse_tokens(s: &str) -> Result<Amount, String> {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && frac.is_empty() || !digits(whole) || !digits(frac) || frac.len() > 6 {
        return Err(format!(
            "{s:?} is not an amount in tokens with at most 6 decimals (e.g. 0.50)"
        ));
    }
    let units = format!("{whole}{frac:0<6}");
    let units = units.trim_start_matches('0');
    if units.is_empty() {
        return Ok(Amount::ZERO);
    }
    units.parse().map_err(|e| format!("{s:?}: {e}"))
}

pub(crate) fn exit_code(e: &Error) -> u8 {
    match e {
        Error::PolicyViolation { .. } | Error::NoAcceptableOption { .. } => exit::REFUSED,
        Error::Http(_) | Error::Timeout { .. } => exit::NETWORK,
        Error::InvalidKey | Error::KeyFile { .. } | Error::InvalidUrl(_) => exit::USAGE,
        Error::NoFacilitator | Error::NoSubscriptionNetwork { .. } => exit::REFUSED,
        _ => exit::PAYMENT_FAILED,
    }
}

/// The error and its causes on one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// One line per payment made for the request (every one, an earlier one that did not buy the
/// response included), the last with the final status.
fn summarize(response: &PaidResponse, started: Instant) {
    let elapsed = started.elapsed().as_millis();
    for p in &response.earlier_payments {
        report(&format!("{} (did not buy the response)", paid_line(p)));
    }
    let Some(p) = &response.payment else {
        report(&format!(
            "{} (no payment asked) in {elapsed} ms",
            response.status
        ));
        return;
    };
    report(&format!(
        "{}; {} in {elapsed} ms",
        paid_line(p),
        response.status
    ));
}

/// `paid 0.500000 (500000 units) on NETWORK to PAYEE from PAYER; tx HASH`.
fn paid_line(p: &Payment) -> String {
    let tx = p
        .tx_hash
        .map_or_else(|| "unknown".to_owned(), |t| t.to_string());
    format!(
        "paid {} ({} units) on {} to {} from {}; tx {tx}",
        tokens(p.amount),
        p.amount,
        p.network,
        p.pay_to,
        p.payer,
    )
}

/// Units as tokens, 6 decimals.
fn tokens(a: Amount) -> String {
    let s = format!("{:0>7}", a.to_string());
    let (whole, frac) = s.split_at(s.len() - 6);
    format!("{whole}.{frac}")
}

pub(crate) fn report(line: &str) {
    // stderr is where diagnostics go; if it is closed there is nowhere to report that.
    let _ = writeln!(std::io::stderr(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_amounts() {
        assert_eq!(parse_tokens("1.00"), Ok(Amount::from_units(1_000_000)));
        assert_eq!(parse_tokens("0.5"), Ok(Amount::from_units(500_000)));
        assert_eq!(parse_tokens("2"), Ok(Amount::from_units(2_000_000)));
        assert_eq!(parse_tokens(".000001"), Ok(Amount::from_units(1)));
        assert_eq!(parse_tokens("0"), Ok(Amount::ZERO));
        for bad in ["", ".", "1.0000001", "-1", "1e6", "0x10", "1,5"] {
            assert!(parse_tokens(bad).is_err(), "{bad:?}");
        }
        assert_eq!(tokens(Amount::from_units(500_000)), "0.500000");
        assert_eq!(tokens(Amount::from_units(12_345_678)), "12.345678");
    }
}
