//! What the agent sends and what it hands back.

use alloy::primitives::{Address, B256, bytes::Bytes};
use reqwest::{
    Method, StatusCode, Url,
    header::{HeaderMap, HeaderName, HeaderValue},
};
use tollgate_protocol::{
    Amount, PaymentProof,
    mpp::Receipt as MppReceipt,
    x402::{RetryToken, SettlementResponseHeader},
};

use crate::Result;

/// A request to a (possibly) gated resource. Unlike a `reqwest::Request` it can be sent again,
/// which paying needs: the request goes out once unpaid and once with `X-PAYMENT` (or
/// `X-Service-Sub`).
#[derive(Clone, Debug)]
pub struct PayRequest {
    /// The method.
    pub method: Method,
    /// The URL.
    pub url: Url,
    /// Headers sent with every attempt (`X-PAYMENT` and `X-Service-Sub` are set by the agent).
    pub headers: HeaderMap,
    /// The body, if any.
    pub body: Option<Bytes>,
    /// When the request names a subscription itself (an `X-Service-Sub` header) and the server
    /// refuses it: pay one-time instead (`true`), or fail with the refusal's name (`false`, the
    /// default: [`Error::SubscriptionNotActive`](crate::Error::SubscriptionNotActive),
    /// [`Error::AllowanceExhausted`](crate::Error::AllowanceExhausted),
    /// [`Error::SubscriptionRefused`](crate::Error::SubscriptionRefused)), paying nothing.
    pub fallback_one_time: bool,
}

impl PayRequest {
    /// A request with no headers and no body.
    pub fn new(method: Method, url: Url) -> Self {
        Self {
            method,
            url,
            headers: HeaderMap::new(),
            body: None,
            fallback_one_time: false,
        }
    }

    /// `GET url`.
    pub fn get(url: &str) -> Result<Self> {
        Ok(Self::new(Method::GET, Url::parse(url)?))
    }

    /// `POST url` with `body`.
    pub fn post(url: &str, body: impl Into<Bytes>) -> Result<Self> {
        Ok(Self::new(Method::POST, Url::parse(url)?).body(body))
    }

    /// Adds a header.
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.append(name, value);
        self
    }

    /// Pays one-time when the server refuses the subscription the request names
    /// ([`PayRequest::fallback_one_time`](field@PayRequest::fallback_one_time)).
    pub fn fallback_one_time(mut self) -> Self {
        self.fallback_one_time = true;
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = Some(body.into());
        self
    }
}

/// The final answer to a [`PayRequest`], with what was paid for it.
#[derive(Clone, Debug)]
pub struct PaidResponse {
    /// The HTTP status of the final answer.
    pub status: StatusCode,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body.
    pub body: Bytes,
    /// The payment that bought it; `None` when the resource answered without asking for one.
    pub payment: Option<Payment>,
    /// Payments made for this same request before `payment`, which did not buy it: one the
    /// facilitator reported failed after the server declined its proof, or a subscription the
    /// server then refused. Empty in the usual case: the agent pays once per request.
    pub earlier_payments: Vec<Payment>,
}

impl PaidResponse {
    /// Every payment made for this request, in order: [`PaidResponse::earlier_payments`], then
    /// [`PaidResponse::payment`].
    pub fn payments(&self) -> impl Iterator<Item = &Payment> {
        self.earlier_payments.iter().chain(&self.payment)
    }

    /// The body as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.body)
    }
}

/// How a payment was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PaymentKind {
    /// Through a Tollgate facilitator's router: `/authorize` settled it and returned a proof.
    Tollgate,
    /// A plain x402 V1 `exact` payload to `payTo`, settled by the server.
    X402,
    /// Served on a subscription: the request was sent with `X-Service-Sub: id`. The
    /// [`Payment`]'s `amount` is the first cycle when [`Agent::pay`](crate::Agent::pay)
    /// subscribed for this request (and `tx_hash` the transaction that created the
    /// subscription), zero when it reused a subscription it held.
    Subscription {
        /// The subscription.
        id: B256,
    },
    /// An MPP credential (`Authorization: Payment …`, the "Payment" HTTP authentication
    /// scheme) answering the server's EVM `charge` challenge: an ERC-3009
    /// `transferWithAuthorization` to the challenge's recipient, settled by the server. Paid only
    /// when the 402 offers no x402 terms; [`Payment::mpp_receipt`] holds the server's
    /// `Payment-Receipt`.
    Mpp,
}

/// A receipt: what was paid, to whom, and the evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payment {
    /// How it was paid.
    pub kind: PaymentKind,
    /// The gross amount, in the token's smallest unit.
    pub amount: Amount,
    /// The facilitator's fee out of `amount` (Tollgate payments).
    pub fee: Option<Amount>,
    /// The network name.
    pub network: String,
    /// The token.
    pub token: Address,
    /// The agent's address.
    pub payer: Address,
    /// The recipient named in the terms.
    pub pay_to: Address,
    /// The request reference (Tollgate payments).
    pub memo: Option<B256>,
    /// The settlement transaction, when known (from the proof or `X-PAYMENT-RESPONSE`).
    pub tx_hash: Option<B256>,
    /// The facilitator's proof (Tollgate payments).
    pub proof: Option<PaymentProof>,
    /// The `X-PAYMENT` value sent (the subscription id sent as `X-Service-Sub`, for
    /// [`PaymentKind::Subscription`]; the `Authorization` value, `Payment <credential>`, for
    /// [`PaymentKind::Mpp`]).
    pub header: String,
    /// The server's `X-PAYMENT-RESPONSE` (or x402 V2 `PAYMENT-RESPONSE`), when it sent one.
    pub settlement: Option<SettlementResponseHeader>,
    /// The x402 version the payment was sent in: `Some(1)` for a Tollgate proof or an x402 V1
    /// payload (`X-PAYMENT`), `Some(2)` for an x402 V2 payload (`PAYMENT-SIGNATURE`), `None`
    /// for a subscription or an MPP credential.
    pub x402_version: Option<u8>,
    /// The retry token of an x402 payment (sent with it as `X-PAYMENT-RETRY`, or MCP's
    /// `_meta["tollgate/payment-retry"]`): a server holding the payment while its settlement is
    /// pending serves it only to a resend that carries it (an MPP credential is sent with one
    /// too). `None` for proofs and subscriptions.
    pub retry_token: Option<RetryToken>,
    /// For [`PaymentKind::Subscription`]: what the request took from the subscription's overage
    /// allowance (a metered route's price, zero elsewhere), as the server's `X-Service-Receipt`
    /// says; `None` for other payments, or when the server did not say.
    pub metered: Option<Amount>,
    /// For [`PaymentKind::Mpp`]: the server's decoded `Payment-Receipt` (method, reference,
    /// timestamp), its `challengeId` the id of the challenge paid when the receipt names none
    /// (mppx 0.11 names none). Its `reference` is the settlement transaction, also in
    /// [`Payment::tx_hash`]. `None` for other payments, or when the server sent no readable
    /// receipt.
    pub mpp_receipt: Option<MppReceipt>,
}

impl Payment {
    /// The request header the payment travels in: `Authorization` for an MPP credential,
    /// `PAYMENT-SIGNATURE` for x402 V2, else `X-PAYMENT`.
    pub fn header_name(&self) -> &'static str {
        if self.kind == PaymentKind::Mpp {
            "authorization"
        } else if self.x402_version == Some(2) {
            tollgate_protocol::headers::PAYMENT_SIGNATURE
        } else {
            tollgate_protocol::headers::X_PAYMENT
        }
    }
}
