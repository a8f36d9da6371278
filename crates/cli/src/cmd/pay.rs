//! `tollgate pay URL`: request a resource, paying for it if the server asks (the agent SDK).

use std::{io::Write as _, path::PathBuf, process::ExitCode, time::Instant};

use anyhow::Context as _;
use tollgate_agent::{
    Agent, Amount, Error, PaidResponse, PayRequest, Payment, PaymentKind, SpendPolicy,
    X_SERVICE_SUB,
};

use crate::amount::{self, tokens};

/// Exit codes of `tollgate pay`.
mod exit {
    pub(super) const HTTP_ERROR: u8 = 1;
    pub(super) const USAGE: u8 = 2;
    pub(super) const REFUSED: u8 = 3;
    pub(super) const PAYMENT_FAILED: u8 = 4;
    pub(super) const NETWORK: u8 = 5;
}

/// The end of `tollgate pay --help` (`{notation}`: the amount notation).
const AFTER_HELP: &str = "\
Sends the request; if the server answers 402 Payment Required, pays the cheapest acceptable
option (through the Tollgate facilitator the 402 names, or as a plain x402 V1 payment) and sends
it again with X-PAYMENT.

Payment protocols: x402 (V1 body, or V2 PAYMENT-REQUIRED) and MPP (the Payment HTTP auth scheme:
a WWW-Authenticate: Payment challenge, method evm, intent charge, paid with an ERC-3009
authorization in Authorization: Payment ..., once; the server's Payment-Receipt is reported). A
402 that offers both is paid with x402: x402 settles through a facilitator the agent can read and
check (discovery, the chain's clock, proofs) and is the protocol of the 402's body; MPP adds
nothing there. MPP is paid only when the 402 has no x402 terms, under the same limits (--max,
--budget, --network), and only in a token whose EIP-712 name and version the agent learns from a
--facilitator settling it on the challenge's chain (an MPP challenge does not carry them): the
challenge's chain clock is that facilitator's too.

Output: the response body goes to stdout as it came, with a final newline added to a text body
(valid UTF-8) that lacks one, never to a binary body. One summary line goes to stderr (`paid
0.500000 (500000 units) on NETWORK to PAYEE from PAYER; tx HASH; 200 OK in 95 ms`, or `served on
subscription ID …`). Logs are warnings only; -v shows the agent's steps. With --json, stdout is
one JSON object instead: status, the headers that matter (content-type, x-payment-response,
payment-response, x-service-receipt, payment-receipt, retry-after), payment (kind, amount and
fee in units, network, token, payer, payTo, memo, txHash, subscriptionId, x402Version, the
decoded settlement header, the decoded MPP receipt as mppReceipt) and earlierPayments, and the body as `body` (text) or `bodyHex` (binary).

Subscribing: the SDK's agents (Rust SpendPolicy, JavaScript policy) prefer to subscribe by
default, as the spec asks of a client that sees subscriptionScheme true, within their budget a
cycle and never bounded by the per-request cap; this one-shot command subscribes only when asked.
With --subscribe: when the 402 offers a subscription plan (service.subscriptionScheme, a planId)
billing at most --max-per-cycle a cycle, subscribes once through the facilitator the 402 names
(the first cycle is billed, with --max-overage as the overage cap) and sends the request with
X-Service-Sub. The subscription is remembered in the agent's state file (--state; default: beside
--key-file, `agent.key` -> `agent.state.json`), so later runs with --subscribe reuse it instead of
subscribing again. A subscription that is not active any more is forgotten.

A subscription named in the request (-H 'X-Service-Sub: 0x...') is never silently turned into a
one-time payment: when the server refuses it, the command fails with the spec's name
(SubscriptionNotActive, AllowanceExhausted) and pays nothing, unless --fallback-one-time is
given. On AllowanceExhausted (a metered route), with --raise-overage-to the agent raises the
subscription's overage cap to that amount (within --budget) and sends the request once more.

{notation}

Exit codes:
  0  success (the final response has a 1xx-3xx status)
  1  the server answered an HTTP error status (4xx/5xx) — after payment, if one was made
  2  usage error (bad flags, no key, bad key)
  3  payment refused by the spending policy, or no acceptable option in the 402
  4  payment failed (facilitator or chain refused it, insufficient funds, payment declined)
  5  network error or timeout

Environment: TOLLGATE_KEY (hex private key, when neither --key nor --key-file is given),
TOLLGATE_LOG (log filter, over -v).

Examples:
  TOLLGATE_KEY=0x... tollgate pay http://127.0.0.1:8080/v1/quote --max 0.50
  tollgate pay http://127.0.0.1:8080/v1/report --key-file agent.key --subscribe --max-per-cycle 5.00";

/// Flags of `tollgate pay`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP.replace("{notation}", amount::NOTATION))]
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
    /// The most to pay for this request (one-time payments).
    #[arg(long, default_value = "1.00", value_name = "AMOUNT", value_parser = amount::parse)]
    max: Amount,
    /// The most to pay in total (this command pays once; a second time only if the server
    /// declines the proof and the facilitator reports the first payment failed); default: the
    /// larger of --max and --max-per-cycle (with --subscribe), plus --raise-overage-to.
    #[arg(long, value_name = "AMOUNT", value_parser = amount::parse)]
    budget: Option<Amount>,
    /// Only pay on this network (repeatable).
    #[arg(long = "network", value_name = "NAME")]
    networks: Vec<String>,
    /// Only pay through this Tollgate facilitator (base URL, repeatable); its discovery document
    /// also gives an MPP challenge's token domain and chain clock. Default: any facilitator a 402
    /// names.
    #[arg(long = "facilitator", value_name = "URL")]
    facilitators: Vec<String>,
    /// Subscribe when the 402 offers a plan within --max-per-cycle (once: the subscription is
    /// remembered in --state and reused by later runs).
    #[arg(long)]
    subscribe: bool,
    /// The most a plan may bill per cycle, to subscribe to it (default: --max).
    #[arg(long, value_name = "AMOUNT", value_parser = amount::parse, requires = "subscribe")]
    max_per_cycle: Option<Amount>,
    /// The overage cap per cycle to subscribe with (default 0.00).
    #[arg(long, value_name = "AMOUNT", value_parser = amount::parse, requires = "subscribe")]
    max_overage: Option<Amount>,
    /// On AllowanceExhausted, raise the subscription's overage cap to this amount (once) and
    /// send the request again.
    #[arg(long, value_name = "AMOUNT", value_parser = amount::parse)]
    raise_overage_to: Option<Amount>,
    /// When the server refuses the subscription named by -H 'X-Service-Sub: ...', pay one-time
    /// instead of failing.
    #[arg(long)]
    fallback_one_time: bool,
    /// The agent's state file, where held subscriptions are remembered (default: beside
    /// --key-file, `agent.key` -> `agent.state.json`; without --key-file, none).
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,
    /// Print one JSON object on stdout (status, headers, payment, body) instead of the body.
    #[arg(long)]
    json: bool,
}

/// Runs `tollgate pay`; the exit code says how it ended.
pub(crate) async fn run(args: Args) -> ExitCode {
    let named = named_subscription(&args.headers).map(str::to_owned);
    let json = args.json;
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
            summarize(&response, started, named.as_deref());
            let mut out = std::io::stdout().lock();
            let written = if json {
                writeln!(out, "{}", render(&response))
            } else {
                write_body(&mut out, &response.body)
            };
            if let Err(e) = written.and_then(|()| out.flush()) {
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
            | Error::PaymentRejected { payments, .. }
            | Error::PaymentProblem { payments, .. } = &e
            {
                for p in payments {
                    report(&format!("{} (not accepted by the server)", paid_line(p)));
                }
            }
            if let Error::SettlementPending { payments, .. } | Error::NotServed { payments, .. } =
                &e
            {
                // Sent, not shown to have moved: never "paid".
                for p in payments {
                    report(&format!(
                        "{} (not served; not known to have moved)",
                        payment_line(p, "sent")
                    ));
                }
            }
            report(&format!("error: {}", chain(&e)));
            if let Some(hint) = hint(&e) {
                report(&format!("hint: {hint}"));
            }
            ExitCode::from(exit_code(&e))
        }
    }
}

fn prepare(args: Args) -> anyhow::Result<(Agent, PayRequest)> {
    let signer = read_signer(args.key.as_deref(), args.key_file.as_deref())?;
    let names_subscription = named_subscription(&args.headers).is_some();
    let per_cycle = args.max_per_cycle.unwrap_or(args.max);
    let raise = args.raise_overage_to.unwrap_or(Amount::ZERO);
    let budget = args.budget.unwrap_or_else(|| {
        let first = if args.subscribe {
            args.max.max(per_cycle)
        } else {
            args.max
        };
        Amount(first.get().saturating_add(raise.get()))
    });
    let mut policy = SpendPolicy::new(args.max, budget);
    // With a subscription named in the request, the subscription policy only bounds raising
    // its cap: the agent subscribes on its own only for requests that name none.
    if args.subscribe || names_subscription {
        let overage = args.max_overage.unwrap_or(Amount::ZERO);
        policy = policy.subscriptions(per_cycle, overage);
        if args.raise_overage_to.is_some() {
            policy = policy.raise_overage_to(raise);
        }
    } else {
        // The SDK's agents prefer to subscribe by default; a one-shot command commits to
        // renewals only when asked (--subscribe).
        policy = policy.no_subscriptions();
    }
    if !args.networks.is_empty() {
        policy = policy.networks(args.networks);
    }
    let mut builder = Agent::builder(signer, policy);
    if !args.facilitators.is_empty() {
        builder = builder.facilitators(args.facilitators);
    }
    if args.subscribe {
        match args.state.or_else(|| {
            args.key_file
                .as_deref()
                .map(tollgate_agent::default_state_file)
        }) {
            Some(state) => builder = builder.state_file(state),
            None => report(
                "note: no --state and no --key-file: a subscription made now is not remembered \
                 for later runs",
            ),
        }
    }
    let agent = builder.build()?;
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
    if args.fallback_one_time {
        request = request.fallback_one_time();
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

/// The usage-error exit code, shared with `tollgate subscribe` and `tollgate subscription`.
pub(crate) const USAGE_EXIT: u8 = exit::USAGE;
/// The exit code of a refusal by the facilitator or the chain.
pub(crate) const PAYMENT_FAILED_EXIT: u8 = exit::PAYMENT_FAILED;
/// The exit code of a network error.
pub(crate) const NETWORK_EXIT: u8 = exit::NETWORK;

pub(crate) fn exit_code(e: &Error) -> u8 {
    match e {
        Error::PolicyViolation { .. } | Error::NoAcceptableOption { .. } => exit::REFUSED,
        Error::Http(_) | Error::Timeout { .. } => exit::NETWORK,
        Error::InvalidKey | Error::KeyFile { .. } | Error::InvalidUrl(_) => exit::USAGE,
        Error::NoFacilitator | Error::NoSubscriptionNetwork { .. } => exit::REFUSED,
        Error::UnknownTokenDomain { .. } | Error::ChallengeRefused { .. } => exit::REFUSED,
        _ => exit::PAYMENT_FAILED,
    }
}

/// What to do about a refused subscription.
fn hint(e: &Error) -> Option<&'static str> {
    match e {
        Error::AllowanceExhausted => Some(
            "the subscription's overage cap is used up this cycle: raise it with `tollgate \
             subscribe --raise ID --max-overage AMOUNT` (or pass --raise-overage-to AMOUNT), or \
             wait for the next cycle",
        ),
        Error::SubscriptionNotActive => Some(
            "the subscription is paused or cancelled: `tollgate subscription resume ID`, \
             subscribe again, or pass --fallback-one-time to pay one-time",
        ),
        Error::SubscriptionRefused { .. } => {
            Some("pass --fallback-one-time to pay one-time instead")
        }
        Error::SettlementPending { .. } => Some(
            "the server holds the payment for this agent while the chain confirms it; do not pay \
             again: it settles or expires on its own (check the transaction or the payer's balance)",
        ),
        _ => None,
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

/// The subscription id an `-H 'X-Service-Sub: …'` names, if one does.
fn named_subscription(headers: &[String]) -> Option<&str> {
    headers.iter().find_map(|h| {
        let (name, value) = h.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case(X_SERVICE_SUB)
            .then(|| value.trim())
    })
}

/// One line per payment made for the request (every one, an earlier one that did not buy the
/// response included), the last with the final status.
fn summarize(response: &PaidResponse, started: Instant, named: Option<&str>) {
    let elapsed = started.elapsed().as_millis();
    for p in &response.earlier_payments {
        report(&format!("{} (did not buy the response)", paid_line(p)));
    }
    let Some(p) = &response.payment else {
        match named {
            Some(id) if response.status.is_success() => report(&format!(
                "{} served on subscription {id} in {elapsed} ms",
                response.status
            )),
            _ => report(&format!(
                "{} (no payment asked) in {elapsed} ms",
                response.status
            )),
        }
        return;
    };
    report(&format!(
        "{}; {} in {elapsed} ms",
        paid_line(p),
        response.status
    ));
}

/// `paid 0.500000 (500000 units) on NETWORK to PAYEE from PAYER; tx HASH` (plain x402 payments
/// add `; x402 V1` or `; x402 V2`, the version paid in), or for a request
/// served on a subscription `subscribed ID: first cycle …` (created for it) or `served on
/// subscription ID` (held already).
fn paid_line(p: &Payment) -> String {
    payment_line(p, "paid")
}

/// [`paid_line`] with another verb for a one-time payment: `sent 0.500000 …` for one sent but not
/// shown to have moved.
fn payment_line(p: &Payment, verb: &str) -> String {
    let tx = p
        .tx_hash
        .map_or_else(|| "unknown".to_owned(), |t| t.to_string());
    match p.kind {
        PaymentKind::Subscription { id } if p.amount == Amount::ZERO => {
            let metered = p
                .metered
                .filter(|m| *m != Amount::ZERO)
                .map(|m| format!(" (metered {}, {m} units)", tokens(m)))
                .unwrap_or_default();
            format!(
                "served on subscription {id}{metered} on {} from {}",
                p.network, p.payer
            )
        }
        PaymentKind::Subscription { id } => format!(
            "subscribed {id}: first cycle {} ({} units) on {} to {} from {}; tx {tx}",
            tokens(p.amount),
            p.amount,
            p.network,
            p.pay_to,
            p.payer,
        ),
        PaymentKind::X402 => format!(
            "{verb} {} ({} units) on {} to {} from {}; tx {tx}; x402 V{}",
            tokens(p.amount),
            p.amount,
            p.network,
            p.pay_to,
            p.payer,
            p.x402_version.unwrap_or(1),
        ),
        PaymentKind::Mpp => {
            let receipt = p.mpp_receipt.as_ref().map_or_else(
                || "; no receipt".to_owned(),
                |r| {
                    format!(
                        "; receipt {} {} at {}{}",
                        r.method,
                        r.reference,
                        r.timestamp,
                        r.challenge_id
                            .as_ref()
                            .map(|id| format!(" for challenge {id}"))
                            .unwrap_or_default()
                    )
                },
            );
            format!(
                "{verb} {} ({} units) on {} to {} from {}; tx {tx}; MPP{receipt}",
                tokens(p.amount),
                p.amount,
                p.network,
                p.pay_to,
                p.payer,
            )
        }
        _ => format!(
            "{verb} {} ({} units) on {} to {} from {}; tx {tx}",
            tokens(p.amount),
            p.amount,
            p.network,
            p.pay_to,
            p.payer,
        ),
    }
}

/// The body as it came, and a final newline after text (valid UTF-8) that lacks one, so that the
/// shell's prompt starts on a line of its own; binary bodies are left as they are.
fn write_body(out: &mut impl std::io::Write, body: &[u8]) -> std::io::Result<()> {
    out.write_all(body)?;
    if is_text(body) && !body.ends_with(b"\n") {
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Whether a body is text: non-empty valid UTF-8 without NUL bytes.
fn is_text(body: &[u8]) -> bool {
    !body.is_empty() && !body.contains(&0) && std::str::from_utf8(body).is_ok()
}

/// The response headers `--json` shows.
const SHOWN_HEADERS: [&str; 6] = [
    "content-type",
    tollgate_protocol::headers::X_PAYMENT_RESPONSE,
    tollgate_protocol::headers::PAYMENT_RESPONSE,
    "x-service-receipt",
    tollgate_protocol::headers::PAYMENT_RECEIPT,
    "retry-after",
];

/// `--json`: the response and what paid for it, as one object.
fn render(response: &PaidResponse) -> serde_json::Value {
    let headers: serde_json::Map<String, serde_json::Value> = SHOWN_HEADERS
        .iter()
        .filter_map(|name| {
            let value = response.headers.get(*name)?.to_str().ok()?;
            Some(((*name).to_owned(), value.into()))
        })
        .collect();
    let mut out = serde_json::json!({
        "status": response.status.as_u16(),
        "headers": headers,
        "payment": response.payment.as_ref().map(render_payment),
        "earlierPayments": response.earlier_payments.iter().map(render_payment).collect::<Vec<_>>(),
    });
    let body = &response.body;
    if body.is_empty() || is_text(body) {
        out["body"] = String::from_utf8_lossy(body).into();
    } else {
        out["bodyHex"] = alloy::hex::encode(body).into();
    }
    out
}

/// A payment as `--json` shows it (amounts in the token's smallest unit).
fn render_payment(p: &Payment) -> serde_json::Value {
    let (kind, subscription) = match p.kind {
        PaymentKind::Tollgate => ("tollgate", None),
        PaymentKind::X402 => ("x402", None),
        PaymentKind::Subscription { id } => ("subscription", Some(id)),
        PaymentKind::Mpp => ("mpp", None),
        _ => ("other", None),
    };
    serde_json::json!({
        "kind": kind,
        "amount": p.amount,
        "fee": p.fee,
        "network": p.network,
        "token": p.token,
        "payer": p.payer,
        "payTo": p.pay_to,
        "memo": p.memo,
        "txHash": p.tx_hash,
        "subscriptionId": subscription,
        "x402Version": p.x402_version,
        "settlement": p.settlement,
        "mppReceipt": p.mpp_receipt,
    })
}

pub(crate) fn report(line: &str) {
    // stderr is where diagnostics go; if it is closed there is nowhere to report that.
    let _ = writeln!(std::io::stderr(), "{line}");
}
