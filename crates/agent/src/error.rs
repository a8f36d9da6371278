//! The agent's one error type.

use std::path::PathBuf;

use alloy::primitives::{Address, B256};
use tollgate_protocol::{Amount, ApiErrorCode};

use crate::Payment;

/// Everything [`Agent::pay`](crate::Agent::pay), the subscription calls and the constructors can
/// fail with.
///
/// Errors raised after a payment left the process carry the [`Payment`]s sent for the request,
/// so a caller always knows what it may have paid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key is not a valid secp256k1 private key (32 bytes of hex). The key itself is never
    /// part of the error.
    #[error("invalid private key: expected 32 bytes of hex")]
    InvalidKey,
    /// The key file could not be read.
    #[error("cannot read key file {path}")]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The request URL does not parse.
    #[error("invalid URL")]
    InvalidUrl(#[from] url::ParseError),
    /// The spending policy refuses the payment; nothing was signed.
    #[error("payment refused by the spending policy: {what}")]
    PolicyViolation {
        /// What the policy refused.
        what: Refusal,
    },
    /// The 402 offers nothing this agent can pay (no `exact` option on a network and token it
    /// can sign for); nothing was signed.
    #[error("no acceptable payment option in the 402 ({offered} offered)")]
    NoAcceptableOption {
        /// How many options the 402 listed.
        offered: usize,
    },
    /// The 402 speaks a protocol version other than x402 V1.
    #[error("unsupported payment protocol version {version}; only x402 V1 is supported")]
    UnsupportedVersion {
        /// The version the server sent.
        version: String,
    },
    /// The 402 body is not a payment-required body (too large, not JSON, no `accepts`).
    #[error("malformed 402 Payment Required body")]
    MalformedPaymentRequired(#[source] Malformed),
    /// The facilitator refused the payment because the wallet's token balance is too low
    /// (HTTP 402 `InsufficientFunds` from `/authorize`, or an x402 `insufficient_funds`).
    #[error("insufficient funds: {message}")]
    InsufficientFunds {
        /// The facilitator's or server's explanation.
        message: String,
    },
    /// The server kept declining the payment as `InvalidPaymentProof`: it declined the proof
    /// the agent recovered and sent again (the automatic retry), or the facilitator reported the
    /// payment failed and the policy allowed no other. Persistent failures call for checking the
    /// facilitator's status. Carries every payment made for the request.
    #[error("the server declined the payment proof twice (InvalidPaymentProof)")]
    InvalidPaymentProof {
        /// The payments sent for this request.
        payments: Vec<Payment>,
    },
    /// The server answered 402 again after the payment, for another reason; the agent does not
    /// pay twice for one request.
    #[error("the server answered 402 after payment: {reason}")]
    PaymentRejected {
        /// The 402's `error`.
        reason: String,
        /// The payments sent for this request.
        payments: Vec<Payment>,
    },
    /// The payment was sent and its settlement is still pending after the agent's bounded
    /// wait: the server held it for this agent (503 `SettlementPending`, or the MCP twin) and
    /// the agent resent the same payment with its retry token until the wait ran out. Nothing
    /// was served; the payment may still complete. Never paid again for this request: send the
    /// same payment again with [`Payment::retry_token`](crate::Payment::retry_token) later.
    #[error("the payment's settlement is still pending (transaction {})", transaction.map_or_else(|| "unknown".to_owned(), |t| t.to_string()))]
    SettlementPending {
        /// The settlement transaction, when the server named one.
        transaction: Option<B256>,
        /// The payments sent for this request (the last one is pending).
        payments: Vec<Payment>,
    },
    /// The server answered the paid request with neither the resource nor a refusal the agent
    /// can read (a 5xx or 4xx other than 402, with no settlement): nothing shows that the
    /// payment moved, so the agent does not report it paid. Carries the status and the payments
    /// sent (an x402 authorization sent may still be settled until it expires).
    #[error("the server answered {status} to the paid request{}", code.as_ref().map_or_else(String::new, |c| format!(" ({c})")))]
    NotServed {
        /// The HTTP status.
        status: u16,
        /// The answer's `{"error": {"code"}}`, if any.
        code: Option<String>,
        /// The payments sent for this request.
        payments: Vec<Payment>,
    },
    /// The subscription is paused or cancelled: the server refused `X-Service-Sub` and offered
    /// no one-time option to fall back on (or the request named the subscription itself and
    /// did not ask to fall back), or
    /// [`Agent::raise_allowance`](crate::Agent::raise_allowance) was asked to raise a cancelled
    /// subscription.
    #[error("SubscriptionNotActive")]
    SubscriptionNotActive,
    /// The subscription's overage allowance is used up for this cycle: the server refused the
    /// request served on it (a metered route), and the agent could not raise the cap within its
    /// policy ([`SpendPolicy::raise_overage_to`](crate::SpendPolicy::raise_overage_to)). Raise
    /// the cap ([`Agent::raise_allowance`](crate::Agent::raise_allowance)) or wait for the next
    /// cycle.
    #[error("AllowanceExhausted")]
    AllowanceExhausted,
    /// The server refused the `X-Service-Sub` the request carried for another reason than the
    /// spec's `SubscriptionNotActive` or `AllowanceExhausted` (the route sells no subscription,
    /// say), and the request did not ask to fall back to a one-time payment
    /// ([`PayRequest::fallback_one_time`](crate::PayRequest::fallback_one_time)); nothing was
    /// paid.
    #[error("the server refused X-Service-Sub: {reason}")]
    SubscriptionRefused {
        /// The 402's `error`.
        reason: String,
    },
    /// The agent's state file ([`AgentBuilder::state_file`](crate::AgentBuilder::state_file))
    /// cannot be read or written, or is another agent's.
    #[error("agent state file {path}")]
    StateFile {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The plan accepts no new subscriptions.
    #[error("PlanDeprecated")]
    PlanDeprecated,
    /// No subscription with this id on the facilitator's network.
    #[error("no subscription {id}")]
    UnknownSubscription {
        /// The id asked for.
        id: B256,
    },
    /// The subscription belongs to another subscriber; nothing was signed.
    #[error("subscription {id} belongs to {subscriber}, not to this agent")]
    NotSubscriber {
        /// The subscription.
        id: B256,
        /// Its subscriber.
        subscriber: Address,
    },
    /// The requested overage cap is not above the subscription's current one (the facilitator's
    /// and contract's `AllowanceNotRaised`); a cap can only be raised.
    #[error("AllowanceNotRaised: {requested} is not above the current cap {cap}")]
    AllowanceNotRaised {
        /// The current cap (as last read).
        cap: Amount,
        /// The cap asked for.
        requested: Amount,
    },
    /// `Agent::subscribe` or `Agent::raise_allowance` has no facilitator to go through (none
    /// given, none configured), or the one given is not among the configured ones.
    #[error("no usable facilitator to subscribe through")]
    NoFacilitator,
    /// The facilitator serves no subscriptions on the network asked for (or, none asked for,
    /// on exactly one network).
    #[error("the facilitator serves no subscriptions on {network}")]
    NoSubscriptionNetwork {
        /// The network asked for, or `"any network"`.
        network: String,
    },
    /// A network value of no network's form (a 402's, a plan's or the caller's): refused
    /// before anything is signed for it.
    #[error(transparent)]
    MalformedNetwork(#[from] tollgate_protocol::NetworkError),
    /// The facilitator refused or failed the settlement, or answered something that is not a
    /// valid proof for this payment.
    #[error("facilitator error {status} {code}: {message}")]
    Facilitator {
        /// HTTP status (0 when the answer was a 2xx that failed the agent's checks).
        status: u16,
        /// The error code (`{"error": {"code"}}`), or the agent's reason (`Unreadable`: the
        /// answer was not the expected shape; `ProofMismatch`, `WrongSubscription`, …: a 2xx
        /// that failed the agent's checks).
        code: ApiErrorCode,
        /// The explanation.
        message: String,
    },
    /// An MPP `charge` challenge in a token whose EIP-712 domain (name and version) the agent
    /// cannot learn: no facilitator discovery document it reads settles that token on that
    /// chain, no JSON-RPC endpoint it knows for the chain answers the token's
    /// `eip712Domain()` or `name()` and `version()`, and none was configured
    /// ([`AgentBuilder::token_domain`](crate::AgentBuilder::token_domain)). Nothing was signed.
    #[error(
        "cannot pay the MPP charge: the EIP-712 name and version of token {token} on chain \
         {chain_id} are unknown (no facilitator the agent reads settles it, no RPC for the chain \
         answered; configure them with AgentBuilder::token_domain)"
    )]
    UnknownTokenDomain {
        /// The challenge's chain.
        chain_id: u64,
        /// The challenge's `currency`.
        token: Address,
    },
    /// An MPP challenge the agent will not sign for its time: already expired by the chain's
    /// clock, or valid longer than the agent signs for (its `validBefore` is the challenge's
    /// `expires`). Nothing was signed.
    #[error(
        "refusing the MPP challenge: {why} (expires {expires}, now {now} by the chain's clock)"
    )]
    ChallengeRefused {
        /// The challenge's `expires` (RFC 3339).
        expires: String,
        /// The chain's clock when it was refused (unix seconds).
        now: u64,
        /// Why.
        why: &'static str,
    },
    /// The server refused the MPP credential the agent sent, with an RFC 9457
    /// `application/problem+json` answer (`https://paymentauth.org/problems/…`); the agent does
    /// not pay twice for one request. Carries the payment sent (its authorization may still be
    /// settled until it expires).
    #[error("the server refused the MPP credential ({}): {}", problem.kind, problem.detail)]
    PaymentProblem {
        /// The problem: its `kind` is the type URI, its `detail` the explanation.
        problem: Box<tollgate_protocol::mpp::Problem>,
        /// The payments sent for this request.
        payments: Vec<Payment>,
    },
    /// Transport failure talking to the server or the facilitator.
    #[error("HTTP request failed")]
    Http(#[from] reqwest::Error),
    /// A response body exceeded the agent's limit.
    #[error("response body larger than {limit} bytes")]
    ResponseTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The facilitator refused to act now (429 `RateLimited`): the subscriber's relayed
    /// lifecycle calls (pause, resume, cancel) are at the facilitator's bound, or this client is
    /// over its per-client rate. Nothing was done; sign and send the call again once
    /// `retry_after` has passed.
    #[error(
        "rate limited by the facilitator: {message}{}",
        retry_after.map_or_else(String::new, |d| format!(" (retry after {} s)", d.as_secs()))
    )]
    RateLimited {
        /// When the facilitator takes the call again (its `Retry-After`), when it said.
        retry_after: Option<std::time::Duration>,
        /// The facilitator's explanation.
        message: String,
    },
    /// A bounded wait ran out (the settlement did not confirm in time).
    #[error("timed out waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: &'static str,
    },
    /// Signing failed.
    #[error("signing failed")]
    Signing(#[source] tollgate_chain::Error),
    /// The MCP server could not be reached or answered outside the protocol.
    #[error("MCP: {message}")]
    Mcp {
        /// What failed.
        message: String,
    },
}

/// Why a 402 body could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Malformed {
    /// Larger than the agent reads.
    #[error("402 body larger than {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// Not JSON, or JSON of another shape.
    #[error("402 body is not a payment-required body")]
    Json(#[source] serde_json::Error),
    /// No `accepts` array.
    #[error("402 body has no accepts array")]
    NoAccepts,
    /// An x402 V2 `PAYMENT-REQUIRED` header that could not be read.
    #[error("the PAYMENT-REQUIRED header is not an x402 V2 payment-required message")]
    V2(#[source] tollgate_protocol::x402::v2::V2DecodeError),
}

/// What a [`SpendPolicy`](crate::SpendPolicy) refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The price exceeds the per-request cap.
    #[error("price {price} exceeds the per-request cap {cap}")]
    OverCap {
        /// The price asked.
        price: Amount,
        /// The cap.
        cap: Amount,
    },
    /// The price exceeds what is left of the total budget.
    #[error("price {price} exceeds the remaining budget {remaining}")]
    OverBudget {
        /// The price asked.
        price: Amount,
        /// What is left.
        remaining: Amount,
    },
    /// The network is not in the allow-list.
    #[error("network {0} is not allowed")]
    Network(String),
    /// The token is not in the allow-list.
    #[error("token {0} is not allowed")]
    Token(Address),
    /// The payee is not in the allow-list.
    #[error("payee {0} is not allowed")]
    Payee(Address),
}

/// Result alias for the agent.
pub type Result<T, E = Error> = std::result::Result<T, E>;
