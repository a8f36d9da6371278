//! [`PaymentGateLayer`]: the spec's `paymentGate` middleware, as a tower layer.

mod mpp;

use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, header, request::Parts};
use serde::Serialize;
use tollgate_protocol::{
    Amount, ApiErrorCode, ErrorCode, PaymentRequired, SubscriptionReceipt, XPayment, XPaymentError,
    decode_x_payment,
    x402::{ErrorReason, PaymentPayload, SettlementResponseHeader, v2::PaymentPayloadV2},
};
use tower_layer::Layer;
use tower_service::Service;

use alloy::primitives::B256;

use crate::{
    DeductError, Expected, Gate, Offer, Pricing, SubscriptionError, VerifiedSubscription,
    X_SERVICE_SUB, X402Failure, gate::path_of, parse_subscription_id,
};

pub use tollgate_protocol::headers::{
    PAYMENT_RECEIPT, PAYMENT_REQUIRED, PAYMENT_RESPONSE, PAYMENT_SIGNATURE, X_PAYMENT,
    X_PAYMENT_RESPONSE, X_PAYMENT_RETRY, X_SERVICE_RECEIPT, X_SERVICE_SCHEMES,
};

/// The `error` of a first 402 (no payment sent): a stable code, as every 402 `error` is (see
/// [`PaymentGateLayer`]'s table); the prose is in `message`. The wire spelling of
/// [`ApiErrorCode::PaymentRequired`].
pub const PAYMENT_REQUIRED_REASON: &str = ApiErrorCode::PaymentRequired.as_str();
/// The `error` of a 402 answering an x402 payment of a version other than 1 and 2. The wire
/// spelling of [`ApiErrorCode::UnsupportedVersion`].
pub const UNSUPPORTED_VERSION_REASON: &str = ApiErrorCode::UnsupportedVersion.as_str();
/// The `message` of a first 402.
const PAYMENT_REQUIRED_MESSAGE: &str =
    "payment is required: X-PAYMENT (x402 V1, or a Tollgate proof) or PAYMENT-SIGNATURE (x402 V2)";
/// The `message` of a 402 answering an x402 payment of an unknown version.
const UNSUPPORTED_VERSION_MESSAGE: &str = "this x402Version is not supported: this server accepts x402 V1 (X-PAYMENT) and V2 (PAYMENT-SIGNATURE)";
/// How long a client should wait after a 503 (seconds).
const RETRY_AFTER_SECS: &str = "5";

/// A tower [`Layer`] that gates the services it wraps behind payment: [`Gate::payment_gate`].
///
/// Each request is decided before the inner service sees it:
///
/// | request | answer |
/// |---|---|
/// | no `X-PAYMENT` | 402, fresh terms, `error: "PaymentRequired"`, `reason: "payment_required"` |
/// | `X-PAYMENT` with a Tollgate proof that pays for this method, path and price | the inner service's response, plus `X-PAYMENT-RESPONSE` and `PAYMENT-RESPONSE` |
/// | a proof that does not ([`crate::InvalidProof`]) | 402, fresh terms, `error: "InvalidPaymentProof"`, `reason` (its [`crate::InvalidProof::code`]) and `message` |
/// | no `X-PAYMENT`, `X-Service-Sub: <id>` of an ACTIVE subscription to one of the route's plans, paid through now (the chain's clock, plus [`crate::GateBuilder::subscription_grace`]) | the inner service's response, with the [`VerifiedSubscription`] in the request's extensions (no memo, no `X-PAYMENT-RESPONSE`) |
/// | `X-Service-Sub` with a malformed, unknown, paused, cancelled, overdue or foreign-plan id, or on a route not sold by subscription | 402, fresh terms, `error: "SubscriptionNotActive"`, `reason` ([`SubscriptionError::code`]) and `message` |
/// | on a [`metered`](PaymentGateLayer::metered) route, an ACTIVE subscription whose deduction would cross its cycle's overage cap | 402, fresh terms, `error: "AllowanceExhausted"`, `reason: "allowance_exhausted"`; nothing deducted, the inner service not called |
/// | `X-Service-Sub` on a route priced by subscription, of a gate that cannot check subscriptions (neither [`crate::GateBuilder::plan`] nor [`crate::GateBuilder::subscriptions`]) | **500** `{"error": {"code": "SubscriptionsNotConfigured"}}` and a `tracing::error!` |
/// | `X-PAYMENT` with an x402 V1 `exact` payload | settled through the facilitator (`/verify`, `/settle`) first, then as a valid proof; refused: 402, `error: "InvalidPaymentProof"` (`"InsufficientFunds"` for `insufficient_funds`) with the x402 reason code in `reason` (`duplicate_settlement` for a replay) |
/// | an x402 payment whose settlement was sent but not confirmed yet | held open for the outcome up to [`crate::GateBuilder::pending_hold`]; then **503** `SettlementPending` with `Retry-After` and `X-PAYMENT-RETRY: <token>` (the one the request sent, or a fresh one): the payment is held for its payer; the same payment again **with that `X-PAYMENT-RETRY`** picks up the outcome and is served once |
/// | an x402 payment that is held or settled, without its retry token (an observer's copy rebuilt from the chain, a forged signature, a generic client's blind retry) | 402, `error: "InvalidPaymentProof"`, `reason: "duplicate_settlement"`; the payer's hold is untouched |
/// | `PAYMENT-SIGNATURE` with an x402 V2 `exact` payload whose `accepted` is this route's requirement | settled as its V1 twin, under the same lock, then as a V1 payment; refused likewise (`payment_identifier_conflict` for an id bound to another payload). With a `payment-identifier`, the same payload again is answered its first outcome ([`Gate::settle_x402_v2`]) |
/// | both `X-PAYMENT` and `PAYMENT-SIGNATURE` | 402, `error: "InvalidPaymentProof"`, `reason: "multiple_payment_headers"` |
/// | on a route with [`mpp`](PaymentGateLayer::mpp) on: any 402 | also `WWW-Authenticate: Payment` with a fresh challenge of MPP's EVM `charge` for the one-time price ([`Gate::mpp_challenge`]) |
/// | `Authorization: Payment <credential>` of that challenge, on such a route | settled once as its x402 twin ([`Gate::settle_mpp`]), then served with `Payment-Receipt` (and the x402 settlement headers) |
/// | a credential that does not ([`crate::MppFailure::Refused`]): malformed, another server's or route's, expired, another amount, used | 402 `application/problem+json` of the draft's problem type (`malformed-credential`, `invalid-challenge`, `payment-expired`, `invalid-payload`, `verification-failed`) with a fresh challenge; nothing moved |
/// | an x402 payload of another `x402Version` | 402, `error: "UnsupportedVersion"`, `reason: "invalid_x402_version"` |
/// | a garbled, oversized or wrongly encoded `X-PAYMENT` | 402, `error: "InvalidPaymentProof"`, `reason` ([`ProofError::code`](crate::ProofError::code)) |
/// | the facilitator, chain or memo store cannot be reached | **503** with `Retry-After` and `{"error": {"code", "message"}}`, and a `tracing::error!`: the payment could not be checked, not found wrong, so no memo is spent and the client should retry the same payment rather than pay again |
///
/// `X-PAYMENT` takes precedence over `X-Service-Sub` when both are sent (the one-time path is
/// unchanged). Subscription statuses are cached; see [`crate::GateBuilder::subscriptions`].
///
/// Every 402 body is the superset of [`Gate::build_payment_required`] (x402 V1 clients read it),
/// and carries the x402 V2 `PAYMENT-REQUIRED` header ([`Gate::payment_required_v2`]) when the
/// gate knows its chain id; a paid response carries both `X-PAYMENT-RESPONSE` (V1 network name)
/// and `PAYMENT-RESPONSE` (CAIP-2). Nothing refused reaches the inner service. Its `error` is always one of the stable codes
/// above (the spec's names, `PaymentRequired` or `UnsupportedVersion`), `reason` the
/// machine-readable detail (snake_case: an x402 reason code or the gate's own) and `message`
/// the prose for people.
///
/// Bodies: the inner service may take any request body; its response body must be buildable
/// `From<String>` (the 402 and 503 bodies), which `axum::body::Body`,
/// `http_body_util::Full<Bytes>` and `String` are. With axum, use it as
/// `Router::route_layer` (only matched routes pay; unknown paths still 404) or `Router::layer`.
/// Memos bind the path the layer sees: put the layer where paths are whole (on the outer router,
/// after `nest`), or set [`crate::GateBuilder::public_url`] and accept the nested path in the
/// 402's `resource`.
#[derive(Clone)]
pub struct PaymentGateLayer {
    gate: Gate,
    config: Arc<Config>,
}

#[derive(Clone, Debug)]
struct Config {
    paywall: bool,
    payment_identifier: bool,
    mpp: bool,
    pricing: Vec<Pricing>,
    one_time: Option<Amount>,
    plans: Vec<B256>,
    metered: Option<Amount>,
    description: String,
    mime_type: String,
}

impl fmt::Debug for PaymentGateLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PaymentGateLayer")
            .field("gate", &self.gate)
            .field("config", &self.config)
            .finish()
    }
}

impl Gate {
    /// The spec's `paymentGate`: a tower layer that answers 402 unless the request pays one of
    /// `pricing` (see [`PaymentGateLayer`]). The first [`Pricing::OneTime`] is the per-request
    /// price; an empty `pricing` gates everything shut (every request gets a 402 with no option).
    ///
    /// ```no_run
    /// # async fn demo(gate: tollgate_gate::Gate) {
    /// use axum::{Router, routing::get};
    /// use tollgate_gate::Pricing;
    /// let app: Router = Router::new()
    ///     .route("/v1/quote", get(|| async { "42" }))
    ///     .route_layer(gate.payment_gate([Pricing::one_time(500_000u64)]));
    /// # }
    /// ```
    pub fn payment_gate(&self, pricing: impl IntoIterator<Item = Pricing>) -> PaymentGateLayer {
        let pricing: Vec<Pricing> = pricing.into_iter().collect();
        let one_time = pricing.iter().find_map(|p| match p {
            Pricing::OneTime { amount } => Some(*amount),
            Pricing::Subscription { .. } => None,
        });
        let plans: Vec<B256> = pricing
            .iter()
            .filter_map(|p| match p {
                Pricing::Subscription { plan } => Some(*plan),
                Pricing::OneTime { .. } => None,
            })
            .collect();
        if !plans.is_empty() && !self.checks_subscriptions() {
            tracing::error!(
                "a route is priced by subscription but the gate cannot check subscriptions \
                 (GateBuilder::plan or GateBuilder::subscriptions): X-Service-Sub requests will \
                 get 500"
            );
        }
        PaymentGateLayer {
            gate: self.clone(),
            config: Arc::new(Config {
                paywall: true,
                payment_identifier: true,
                mpp: false,
                pricing,
                one_time,
                plans,
                metered: None,
                description: String::new(),
                mime_type: String::new(),
            }),
        }
    }
}

impl PaymentGateLayer {
    /// The `description` of the 402's entries.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.config).description = description.into();
        self
    }

    /// Meters subscribers: each request served on a subscription first deducts `amount` (the
    /// token's smallest unit) from its overage allowance ([`Gate::deduct_allowance`], which
    /// needs [`crate::GateBuilder::api_key`]). The deduction that would cross the cycle's cap is
    /// refused, and so is the request: 402 with fresh terms and `error: "AllowanceExhausted"`,
    /// until the subscriber raises its cap or the next cycle begins. The deduction is made when
    /// the request is admitted, so no response is ever served beyond the cap; a handler that
    /// wants to charge only for successful work calls [`Gate::deduct_allowance`] itself instead.
    /// One-time payments on the same route pay their price as usual.
    pub fn metered(mut self, amount: impl Into<Amount>) -> Self {
        Arc::make_mut(&mut self.config).metered = Some(amount.into());
        self
    }

    /// Whether a browser (a request whose `Accept` prefers `text/html`) gets the 402 as a page
    /// that shows the terms and pays with the browser's wallet (on by default; see
    /// [`crate::paywall`]). Other clients always get JSON.
    pub fn paywall(mut self, enabled: bool) -> Self {
        Arc::make_mut(&mut self.config).paywall = enabled;
        self
    }

    /// Whether x402 V2's `payment-identifier` is honoured (on by default): the route's V2 402
    /// declares it, and the same payload sent again under its id is answered its first outcome
    /// (served again, charged once; see [`Gate::settle_x402_v2`]). Off, the extension is not
    /// declared and ids are ignored: every repeat of a payment is refused as a replay, so each
    /// payment is served at most once.
    pub fn payment_identifier(mut self, enabled: bool) -> Self {
        Arc::make_mut(&mut self.config).payment_identifier = enabled;
        self
    }

    /// Whether the route also offers MPP (off by default): the Payment HTTP authentication
    /// scheme's EVM `charge` on the same one-time price, token, chain and payee, paid by an
    /// ERC-3009 authorization as x402's `exact` is. Every 402 then carries a
    /// `WWW-Authenticate: Payment` challenge beside the x402 terms, and a request with
    /// `Authorization: Payment <credential>` is settled once ([`Gate::settle_mpp`]) and served
    /// with a `Payment-Receipt`. x402 clients see the same 402 body and headers as before, and
    /// an `Authorization` of another scheme is left to the inner service. A route without a
    /// one-time price offers no MPP.
    pub fn mpp(mut self, enabled: bool) -> Self {
        Arc::make_mut(&mut self.config).mpp = enabled;
        self
    }

    /// The `mimeType` of the 402's entries (e.g. `application/json`).
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        Arc::make_mut(&mut self.config).mime_type = mime_type.into();
        self
    }
}

impl<S> Layer<S> for PaymentGateLayer {
    type Service = PaymentGate<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PaymentGate {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service [`PaymentGateLayer`] wraps around `S`.
#[derive(Clone)]
pub struct PaymentGate<S> {
    inner: S,
    layer: PaymentGateLayer,
}

impl<S> fmt::Debug for PaymentGate<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PaymentGate")
            .field("layer", &self.layer)
            .finish_non_exhaustive()
    }
}

/// The future of [`PaymentGate`].
pub type ResponseFuture<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for PaymentGate<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: From<String> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        // The inner service was driven to readiness by `poll_ready`: keep that one for this
        // request and leave a fresh clone in its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let layer = self.layer.clone();
        Box::pin(async move {
            if layer.config.paywall && crate::paywall::prefers_html(req.headers()) {
                // The page needs the facilitator's router and fee: warm the discovery cache
                // (a failure only leaves the page without wallet payment).
                let _ = layer.gate.facilitator_client().discovery().await;
            }
            match layer.authorize(req).await {
                Ok((req, receipt)) => {
                    let mut res = inner.call(req).await?;
                    res.headers_mut().extend(receipt);
                    Ok(res)
                }
                Err(refused) => Ok(refused.map(ResBody::from)),
            }
        })
    }
}

/// The 402 body: the superset body plus, after a failed attempt, why.
#[derive(Serialize)]
struct Body402 {
    #[serde(flatten)]
    body: PaymentRequired,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

/// A payment to settle through the facilitator, of either x402 version.
#[derive(Clone, Copy)]
enum X402<'a> {
    V1(&'a PaymentPayload),
    V2(&'a PaymentPayloadV2),
}

/// What the layer decided about a request ([`PaymentGateLayer::admit`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum Admission {
    /// Serve the request, and add `response_headers` to its response (`X-PAYMENT-RESPONSE` and
    /// `PAYMENT-RESPONSE` for a payment; `X-Service-Receipt` for a subscriber).
    Admitted {
        /// Headers for the response.
        response_headers: http::HeaderMap,
        /// The subscription the request is served on, if any.
        subscription: Option<VerifiedSubscription>,
    },
    /// Do not serve the request: answer this (a 402 with fresh terms, a 503 or a 500).
    Refused(Response<String>),
}

impl PaymentGateLayer {
    /// The layer's whole decision about a request, for hosts that are not tower services (the
    /// Node.js binding's Express and Hono middleware): the same checks, payments, metering and
    /// answers as the service, without a body. A refusal changed nothing (no memo spent, nothing
    /// deducted); an admission has settled or deducted what the request pays.
    pub async fn admit(&self, parts: Parts) -> Admission {
        match self.authorize(Request::from_parts(parts, ())).await {
            Ok((req, response_headers)) => {
                let subscription = req.extensions().get::<VerifiedSubscription>().cloned();
                Admission::Admitted {
                    response_headers,
                    subscription,
                }
            }
            Err(refused) => Admission::Refused(refused),
        }
    }

    /// The decision: the request with the headers its response carries (the settlement of a
    /// payment: `X-PAYMENT-RESPONSE`, `PAYMENT-RESPONSE`, and `Payment-Receipt` for MPP; a
    /// subscriber's `X-Service-Receipt`), or the refusal.
    async fn authorize<B>(
        &self,
        req: Request<B>,
    ) -> Result<(Request<B>, HeaderMap), Response<String>> {
        match self.config.one_time.filter(|_| self.config.mpp) {
            Some(price) => self.authorize_with_mpp(req, price).await,
            None => self.authorize_x402(req).await,
        }
    }

    /// [`authorize`](Self::authorize) for every payment but MPP's.
    async fn authorize_x402<B>(
        &self,
        req: Request<B>,
    ) -> Result<(Request<B>, HeaderMap), Response<String>> {
        let (mut parts, body) = req.into_parts();
        let mut receipt = HeaderMap::new();
        if !parts.headers.contains_key(PAYMENT_SIGNATURE)
            && !parts.headers.contains_key(X_PAYMENT)
            && parts.headers.contains_key(X_SERVICE_SUB)
        {
            let sub = self.subscriber(&parts).await?;
            let metered = match self.config.metered {
                Some(amount) => {
                    self.meter(&parts, &sub, amount).await?;
                    amount
                }
                None => Amount::ZERO,
            };
            let value = SubscriptionReceipt {
                subscription_id: sub.id,
                network: self.gate.network().to_owned(),
                token: self.gate.token(),
                pay_to: self.gate.pay_to(),
                metered,
            }
            .encode();
            if let Ok(value) = HeaderValue::from_str(&value) {
                receipt.insert(X_SERVICE_RECEIPT, value);
            }
            parts.extensions.insert(sub);
            return Ok((Request::from_parts(parts, body), receipt));
        }
        let paid = self.decide(&parts).await?;
        self.settlement_headers(paid, &mut receipt)
            .map_err(|e| *e)?;
        Ok((Request::from_parts(parts, body), receipt))
    }

    /// The headers of a paid response: `X-PAYMENT-RESPONSE` (the settlement, the V1 network
    /// name) and, when the gate knows its chain id, `PAYMENT-RESPONSE` (CAIP-2); a 500 if they
    /// cannot be encoded.
    fn settlement_headers(
        &self,
        mut paid: SettlementResponseHeader,
        headers: &mut HeaderMap,
    ) -> Result<(), Box<Response<String>>> {
        let encoded = |paid: &SettlementResponseHeader| {
            HeaderValue::from_str(&paid.encode()).map_err(|_| {
                Box::new(self.unavailable(
                    ApiErrorCode::InternalError,
                    "cannot encode X-PAYMENT-RESPONSE",
                ))
            })
        };
        headers.insert(X_PAYMENT_RESPONSE, encoded(&paid)?);
        if let Some(caip2) = self.gate.caip2() {
            caip2.as_str().clone_into(&mut paid.network);
            headers.insert(PAYMENT_RESPONSE, encoded(&paid)?);
        }
        Ok(())
    }

    /// The subscription path: `X-Service-Sub` must name an ACTIVE, paid subscription to one of
    /// this route's plans.
    async fn subscriber(&self, parts: &Parts) -> Result<VerifiedSubscription, Response<String>> {
        let mut values = parts.headers.get_all(X_SERVICE_SUB).iter();
        let id = match (values.next(), values.next()) {
            (Some(v), None) => v
                .to_str()
                .map_err(|_| SubscriptionError::Malformed)
                .and_then(parse_subscription_id),
            _ => Err(SubscriptionError::Malformed),
        };
        let result = match id {
            Ok(id) => self.gate.verify_subscription(id, &self.config.plans).await,
            Err(e) => Err(e),
        };
        result.map_err(|e| match e {
            SubscriptionError::NotConfigured => {
                tracing::error!(error = %e, "cannot check a subscription");
                self.error_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ApiErrorCode::SubscriptionsNotConfigured,
                    "this server cannot check subscriptions",
                )
            }
            SubscriptionError::ChainUnavailable(_) => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "cannot check a subscription");
                self.unavailable(ApiErrorCode::ChainUnavailable, &e.to_string())
            }
            e => {
                tracing::debug!(reason = e.code(), "subscription refused");
                self.payment_required(
                    parts,
                    ErrorCode::SubscriptionNotActive.into(),
                    Some(e.code().into()),
                    Some(e.to_string()),
                )
            }
        })
    }

    /// Deducts a metered request's `amount` from the subscription's allowance.
    async fn meter(
        &self,
        parts: &Parts,
        sub: &VerifiedSubscription,
        amount: Amount,
    ) -> Result<(), Response<String>> {
        match self.gate.deduct_allowance(sub.id, amount).await {
            Ok(_) => Ok(()),
            Err(
                e @ (DeductError::AllowanceExhausted { .. }
                | DeductError::SubscriptionNotActive { .. }),
            ) => {
                tracing::debug!(id = %sub.id, code = e.code(), "metered request refused");
                let (code, reason) = match e {
                    DeductError::AllowanceExhausted { .. } => {
                        (ErrorCode::AllowanceExhausted, "allowance_exhausted")
                    }
                    _ => (ErrorCode::SubscriptionNotActive, "subscription_not_active"),
                };
                Err(self.payment_required(
                    parts,
                    code.into(),
                    Some(reason.into()),
                    Some(e.to_string()),
                ))
            }
            Err(e @ DeductError::Unavailable(_)) => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "cannot deduct a metered request");
                Err(self.unavailable(ApiErrorCode::FacilitatorUnavailable, &e.to_string()))
            }
            Err(e) => {
                // The gate's own configuration (no or a revoked API key, a plan of another
                // provider): the subscriber is not at fault, and nothing was deducted.
                tracing::error!(error = %e, "metered request: the facilitator refused the deduction");
                Err(self.error_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    ApiErrorCode::MeteringMisconfigured,
                    "this server cannot meter subscriptions",
                ))
            }
        }
    }

    async fn decide(&self, parts: &Parts) -> Result<SettlementResponseHeader, Response<String>> {
        let invalid = |reason: &str, message: String| {
            self.payment_required(
                parts,
                ErrorCode::InvalidPaymentProof.into(),
                Some(reason.into()),
                Some(message),
            )
        };
        let mut v1 = parts.headers.get_all(X_PAYMENT).iter();
        let mut v2 = parts.headers.get_all(PAYMENT_SIGNATURE).iter();
        let (name, value, more) = match (v1.next(), v2.next()) {
            (None, None) => {
                return Err(self.payment_required(
                    parts,
                    ApiErrorCode::PaymentRequired,
                    Some("payment_required".into()),
                    Some(PAYMENT_REQUIRED_MESSAGE.into()),
                ));
            }
            (Some(_), Some(_)) => {
                return Err(invalid(
                    "multiple_payment_headers",
                    "send one of X-PAYMENT and PAYMENT-SIGNATURE".into(),
                ));
            }
            (Some(value), None) => ("X-PAYMENT", value, v1.next().is_some()),
            (None, Some(value)) => ("PAYMENT-SIGNATURE", value, v2.next().is_some()),
        };
        if more {
            return Err(invalid(
                "multiple_payment_headers",
                format!("send one {name} header"),
            ));
        }
        let Ok(value) = value.to_str() else {
            return Err(invalid(
                "header_not_text",
                format!("{name} is not visible ASCII"),
            ));
        };
        match decode_x_payment(value) {
            Ok(XPayment::Proof(proof)) => {
                let Some(price) = self.config.one_time else {
                    return Err(invalid(
                        "one_time_not_offered",
                        "this resource is not sold per request".into(),
                    ));
                };
                let expected = Expected {
                    method: parts.method.as_str(),
                    resource: parts.uri.path(),
                    price,
                };
                match self.gate.verify_payment_proof(&proof, &expected).await {
                    Ok(paid) => Ok(paid.settlement_header()),
                    Err(e) if e.is_unavailable() => {
                        tracing::error!(error = %e, source = ?std::error::Error::source(&e), "cannot verify a payment proof");
                        Err(self.unavailable(unavailable_code(e.code()), &e.to_string()))
                    }
                    Err(e) => {
                        tracing::debug!(reason = e.code(), "payment proof refused");
                        Err(invalid(e.code(), e.to_string()))
                    }
                }
            }
            Ok(XPayment::X402(payload)) => self.x402(parts, X402::V1(&payload)).await,
            Ok(XPayment::X402V2(payload)) => self.x402(parts, X402::V2(&payload)).await,
            Err(XPaymentError::MalformedPayload(e)) => {
                Err(self.x402_refused(parts, &e.reason(), Some(e.to_string())))
            }
            Err(e @ XPaymentError::MalformedV2Payload(_)) => {
                let message = format!(
                    "{e}: {}",
                    std::error::Error::source(&e)
                        .map(ToString::to_string)
                        .unwrap_or_default()
                );
                Err(self.x402_refused(parts, &ErrorReason::InvalidPayload, Some(message)))
            }
            Ok(XPayment::UnsupportedVersion { .. }) => Err(self.unsupported_version(parts)),
            Err(e) => Err(invalid(e.code(), e.to_string())),
        }
    }

    async fn x402(
        &self,
        parts: &Parts,
        payload: X402<'_>,
    ) -> Result<SettlementResponseHeader, Response<String>> {
        let Some(price) = self.config.one_time else {
            return Err(self.x402_refused(
                parts,
                &ErrorReason::UnsupportedScheme,
                Some("this resource is not sold per request".into()),
            ));
        };
        let url = self.resource_url(parts);
        let offer = self.offer(parts, &url);
        // A malformed token is no token: the request is then the payment's first, or refused.
        let retry = parts
            .headers
            .get(X_PAYMENT_RETRY)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        let settled = match payload {
            X402::V1(p) => self.gate.settle_x402(p, &offer, price, retry).await,
            X402::V2(p) if !self.config.payment_identifier && p.extensions.is_some() => {
                let mut bare = p.clone();
                bare.extensions = None;
                self.gate.settle_x402_v2(&bare, &offer, price, retry).await
            }
            X402::V2(p) => self.gate.settle_x402_v2(p, &offer, price, retry).await,
        };
        match settled {
            Ok(settled) => Ok(SettlementResponseHeader::from(&settled)),
            Err(X402Failure::Refused(reason)) => {
                tracing::debug!(%reason, "x402 payment refused");
                Err(self.x402_refused(parts, &reason, None))
            }
            Err(e @ X402Failure::Pending { retry_token, .. }) => {
                tracing::info!(error = %e, "x402 settlement pending; the payer's retry with its token picks it up");
                let mut res = self.unavailable(
                    ApiErrorCode::SettlementPending,
                    &format!(
                        "{e}: send the same payment header again with the X-PAYMENT-RETRY header \
                         of this answer to be served; do not pay again"
                    ),
                );
                if let Some(token) = retry_token
                    && let Ok(value) = HeaderValue::from_str(&token.to_string())
                {
                    let h = res.headers_mut();
                    h.insert(X_PAYMENT_RETRY, value);
                    // The token is the payer's alone: no cache may keep it.
                    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                }
                Err(res)
            }
            Err(e) => {
                tracing::error!(error = %e, source = ?std::error::Error::source(&e), "cannot settle an x402 payment");
                let code = match e {
                    X402Failure::StoreUnavailable(_) => ApiErrorCode::MemoStoreUnavailable,
                    _ => ApiErrorCode::FacilitatorUnavailable,
                };
                Err(self.unavailable(code, &e.to_string()))
            }
        }
    }

    fn offer<'a>(&'a self, parts: &'a Parts, url: &'a str) -> Offer<'a> {
        Offer {
            method: parts.method.as_str(),
            resource_url: url,
            pricing: &self.config.pricing,
            description: &self.config.description,
            mime_type: &self.config.mime_type,
        }
    }

    /// The absolute URL of the requested resource: the gate's public URL, or the request's
    /// authority (`Host`), over `X-Forwarded-Proto` or http.
    fn resource_url(&self, parts: &Parts) -> String {
        let path = path_of(parts.uri.path());
        if let Some(base) = self.gate.public_url() {
            return format!("{base}{path}");
        }
        let host = parts
            .uri
            .authority()
            .map(|a| a.as_str().to_owned())
            .or_else(|| {
                parts
                    .headers
                    .get(header::HOST)
                    .and_then(|h| h.to_str().ok())
                    .filter(|h| h.parse::<http::uri::Authority>().is_ok())
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| "localhost".to_owned());
        let scheme = match parts
            .headers
            .get("x-forwarded-proto")
            .and_then(|h| h.to_str().ok())
        {
            Some("https") => "https",
            Some("http") => "http",
            _ => parts
                .uri
                .scheme_str()
                .filter(|s| *s == "https")
                .unwrap_or("http"),
        };
        format!("{scheme}://{host}{path}")
    }

    /// A refused x402 payment: `error` the spec's name, `reason` x402's code.
    fn x402_refused(
        &self,
        parts: &Parts,
        reason: &ErrorReason,
        message: Option<String>,
    ) -> Response<String> {
        let error = match reason {
            ErrorReason::InsufficientFunds => ErrorCode::InsufficientFunds,
            _ => ErrorCode::InvalidPaymentProof,
        };
        let message = message.unwrap_or_else(|| format!("the x402 payment was refused: {reason}"));
        self.payment_required(
            parts,
            error.into(),
            Some(reason.as_str().to_owned()),
            Some(message),
        )
    }

    fn unsupported_version(&self, parts: &Parts) -> Response<String> {
        self.payment_required(
            parts,
            ApiErrorCode::UnsupportedVersion,
            Some(ErrorReason::InvalidX402Version.as_str().into()),
            Some(UNSUPPORTED_VERSION_MESSAGE.into()),
        )
    }

    fn payment_required(
        &self,
        parts: &Parts,
        error: ApiErrorCode,
        reason: Option<String>,
        message: Option<String>,
    ) -> Response<String> {
        let url = self.resource_url(parts);
        let offer = self.offer(parts, &url);
        let body = self
            .gate
            .build_payment_required_for(&offer, error.as_str(), &parts.headers);
        let v2 = self
            .gate
            .payment_required_v2(&body, &offer)
            .map(|mut v2| {
                if !self.config.payment_identifier
                    && let Some(extensions) = v2.extensions.as_mut()
                {
                    extensions.remove(tollgate_protocol::x402::v2::PAYMENT_IDENTIFIER);
                }
                v2
            })
            .and_then(|v2| HeaderValue::from_str(&v2.encode_header()).ok());
        let html = self.config.paywall && crate::paywall::prefers_html(&parts.headers);
        let (text, content_type) = if html {
            (
                crate::paywall::render(&self.gate, &body, &url),
                "text/html; charset=utf-8",
            )
        } else {
            let json = serde_json::to_string(&Body402 {
                body,
                reason,
                message,
            })
            .unwrap_or_else(|_| String::from("{}"));
            (json, "application/json")
        };
        let mut res = Response::new(text);
        *res.status_mut() = StatusCode::PAYMENT_REQUIRED;
        let headers = res.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(header::VARY, HeaderValue::from_static("accept"));
        if html {
            crate::paywall::secure(&self.gate, headers);
        }
        if let Some(v2) = v2 {
            headers.insert(PAYMENT_REQUIRED, v2);
        }
        res
    }

    fn unavailable(&self, code: ApiErrorCode, message: &str) -> Response<String> {
        let mut res = self.error_response(StatusCode::SERVICE_UNAVAILABLE, code, message);
        let h = res.headers_mut();
        h.insert(
            header::RETRY_AFTER,
            HeaderValue::from_static(RETRY_AFTER_SECS),
        );
        res
    }
}

impl PaymentGateLayer {
    /// The one place the layer renders a refusal that is not a 402: `{"error": {"code",
    /// "message"}}` with the code as the protocol's [`ApiErrorCode`] spells it.
    fn error_response(
        &self,
        status: StatusCode,
        code: ApiErrorCode,
        message: &str,
    ) -> Response<String> {
        let json = tollgate_protocol::ApiErrorBody::new(code, message).to_json();
        let mut res = Response::new(json);
        *res.status_mut() = status;
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        res
    }
}

fn unavailable_code(reason: &str) -> ApiErrorCode {
    match reason {
        "chain_unavailable" => ApiErrorCode::ChainUnavailable,
        "store_unavailable" => ApiErrorCode::MemoStoreUnavailable,
        _ => ApiErrorCode::FacilitatorUnavailable,
    }
}
