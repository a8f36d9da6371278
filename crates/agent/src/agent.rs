//! [`Agent`]: a key, a spending policy, and the one-time payment sequence.

use std::{
    collections::HashMap,
    fmt,
    path::Path,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use alloy::{
    primitives::{Address, B256, U256, bytes::Bytes},
    signers::local::Secp256k1Signer,
};
use reqwest::{StatusCode, header::HeaderValue};
use tollgate_chain::authorization::{
    ReceiveWithAuthorization, TransferWithAuthorization, router_nonce, sign, token_domain,
};
use tollgate_client::{Authorization, Discovered, FacilitatorClient};
use tollgate_protocol::{
    Amount, ApiErrorCode, AuthorizeRequest, AuthorizeResponse, Eip3009Authorization, ErrorCode,
    SignedPayment,
    api::{authorize::settlement_key, discovery::WellKnown},
    network,
    x402::{
        ExactEvmAuthorization, ExactEvmPayload, PaymentPayload, PaymentRequirements, SCHEME_EXACT,
        SettlementResponseHeader, X402_VERSION,
    },
};

use crate::{
    Error, PaidResponse, PayRequest, Payment, PaymentKind, Result, SpendPolicy,
    error::{Malformed, Refusal},
    facilitator,
    on_subscription::{Held, OnSubscription},
    policy::{Budget, Reservation},
    terms::{self, Offer, Terms},
};

pub use tollgate_protocol::headers::{X_PAYMENT, X_PAYMENT_RESPONSE};

/// The largest 402 body the agent reads (a hostile server cannot make it buffer more).
pub const DEFAULT_MAX_402_BODY: usize = 64 * 1024;
/// The largest final response body the agent reads by default.
pub const DEFAULT_MAX_BODY: usize = 16 * 1024 * 1024;
/// The longest validity the agent gives a router authorization, whatever the terms say.
const MAX_ROUTER_VALIDITY_SECS: u64 = 300;
/// The shortest validity the agent gives any authorization (room for settlement).
const MIN_VALIDITY_SECS: u64 = 30;
/// The longest validity the agent gives an x402 authorization.
const MAX_X402_VALIDITY_SECS: u64 = 3600;
/// How far back `validAfter` is set (clock skew between the agent and the chain).
const VALID_AFTER_SKEW_SECS: u64 = 600;

/// A paying client: a local key, a mandatory [`SpendPolicy`], and the budget spent so far.
///
/// Cheap to clone; clones share the key, the budget, the facilitator cache and the subscriptions
/// held, so the budget holds across every clone and every concurrent [`Agent::pay`]. The key
/// never appears in `Debug` output or logs.
#[derive(Clone)]
pub struct Agent {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) signer: Secp256k1Signer,
    pub(crate) address: Address,
    pub(crate) policy: SpendPolicy,
    pub(crate) budget: Arc<Budget>,
    pub(crate) http: reqwest::Client,
    chain_ids: HashMap<String, u64>,
    pub(crate) facilitators: Option<Vec<String>>,
    pub(crate) settle_timeout: Duration,
    pub(crate) max_402_body: usize,
    max_body: usize,
    /// One client per facilitator base URL (with its discovery cache).
    clients: Mutex<HashMap<String, FacilitatorClient>>,
    pub(crate) held: Held,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("address", &self.inner.address)
            .field("policy", &self.inner.policy)
            .field("spent", &self.inner.budget.used())
            .finish_non_exhaustive()
    }
}

/// Parses a hex private key (32 bytes, `0x` optional, surrounding whitespace ignored).
pub fn signer_from_hex(key: &str) -> Result<Secp256k1Signer> {
    let bytes: B256 = key.trim().parse().map_err(|_| Error::InvalidKey)?;
    Secp256k1Signer::from_bytes(&bytes).map_err(|_| Error::InvalidKey)
}

/// Reads a hex private key from a file (as [`signer_from_hex`]).
pub fn signer_from_file(path: impl AsRef<Path>) -> Result<Secp256k1Signer> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| Error::KeyFile {
        path: path.to_owned(),
        source,
    })?;
    signer_from_hex(&text)
}

impl Agent {
    /// A builder for an agent paying with `signer` under `policy`.
    pub fn builder(signer: Secp256k1Signer, policy: SpendPolicy) -> AgentBuilder {
        AgentBuilder {
            signer,
            policy,
            chain_ids: HashMap::new(),
            facilitators: None,
            request_timeout: Duration::from_secs(30),
            settle_timeout: Duration::from_secs(60),
            max_402_body: DEFAULT_MAX_402_BODY,
            max_body: DEFAULT_MAX_BODY,
        }
    }

    /// An agent with default settings and a hex private key.
    pub fn from_hex_key(key: &str, policy: SpendPolicy) -> Result<Self> {
        Self::builder(signer_from_hex(key)?, policy).build()
    }

    /// An agent with default settings and a hex private key read from `path`.
    pub fn from_key_file(path: impl AsRef<Path>, policy: SpendPolicy) -> Result<Self> {
        Self::builder(signer_from_file(path)?, policy).build()
    }

    /// The paying address.
    pub fn address(&self) -> Address {
        self.inner.address
    }

    /// The policy.
    pub fn policy(&self) -> &SpendPolicy {
        &self.inner.policy
    }

    /// Spent so far, including payments in flight.
    pub fn spent(&self) -> Amount {
        self.inner.budget.used()
    }

    /// What is left of the total budget.
    pub fn remaining(&self) -> Amount {
        self.inner.budget.remaining()
    }

    /// Requests `request`, paying for it if the server answers 402: the spec's one-time
    /// sequence.
    ///
    /// 1. Send the request. Anything but a 402 is returned as is, with no payment.
    /// 2. Read the 402 (at most 64 KiB): the Tollgate superset body, or a generic x402 V1 body.
    /// 3. If the policy allows subscribing ([`SpendPolicy::subscriptions`]) and the 402 offers a
    ///    plan it allows (`service.subscriptionScheme` with a `planId`, at most `max_per_cycle` a
    ///    cycle, through a facilitator the agent may use), serve the request on a subscription:
    ///    the one the agent holds for the plan ([`Agent::use_subscription`], or one it created
    ///    earlier), else one [`Agent::subscribe`] creates now (once, however many payments for
    ///    the plan run concurrently). The request goes again with `X-Service-Sub` and the
    ///    answer is returned with a [`PaymentKind::Subscription`] receipt. A 402
    ///    `AllowanceExhausted` is [`Error::AllowanceExhausted`]; a 402 `SubscriptionNotActive`
    ///    makes the agent forget the subscription (unless the facilitator reports it ACTIVE
    ///    for the plan) and go on with the one-time path below, on the fresh terms, if they
    ///    offer one. A subscription that cannot be created for a reason known before anything
    ///    is created (the policy, a deprecated plan, a facilitator refusal, insufficient
    ///    funds) also falls back to the one-time path. One `pay` subscribes at most once.
    ///    A subscription created for this very request and then refused while the facilitator
    ///    reports it ACTIVE ends in [`Error::PaymentRejected`] instead: paying one-time as well
    ///    would pay twice for one request.
    /// 4. Otherwise choose the cheapest `exact` option the [`SpendPolicy`] allows and reserve its
    ///    price in the budget.
    /// 5. Pay it. An option naming a facilitator (`service.facilitator`) is paid through it:
    ///    read its `/.well-known/tollgate` (cached; it publishes the chain's clock, by which the
    ///    authorization's validity window is set), sign a `ReceiveWithAuthorization` to its
    ///    router whose nonce commits to payTo, memo and fee, `POST /authorize` with a random
    ///    `claim`, wait for the proof (polling a pending settlement for a bounded time). Any
    ///    other option is paid as plain x402: a `TransferWithAuthorization` to payTo, its window
    ///    set by the agent's clock as x402 clients do. If the facilitator refuses the window
    ///    (the chain's clock jumped since the document was read, as a devnet's does), the agent
    ///    reads the document afresh and starts over once from an unpaid request (fresh terms).
    /// 6. Send the request again with `X-PAYMENT`.
    /// 7. If the server answers 402 with `InvalidPaymentProof` (the spec's automatic retry), the
    ///    agent does not pay again: it recovers the proof of the payment already made from the
    ///    facilitator's status URL (with its claim) and sends that once more (a plain x402
    ///    payment: the same signed payload, which the token takes at most once). A second
    ///    payment is made only when the facilitator reports the first one failed, and only
    ///    within the policy; it is reported in [`PaidResponse::earlier_payments`]. A second
    ///    `InvalidPaymentProof` to the same payment is [`Error::InvalidPaymentProof`] with every
    ///    payment made; any other 402 after paying is an error too, never another payment.
    ///
    /// A reservation is released when the payment fails before the signature leaves the
    /// process, or when the facilitator refuses it as expired; once sent otherwise, it counts
    /// as spent (the authorization can be settled until it expires).
    pub async fn pay(&self, request: PayRequest) -> Result<PaidResponse> {
        let response = self.send(&request, None).await?;
        if response.status() != StatusCode::PAYMENT_REQUIRED {
            return self.finish(response, None).await;
        }
        let mut terms = self.read_terms(response).await?;
        // Every payment made for this request that did not buy it.
        let mut made: Vec<Payment> = Vec::new();
        if let Some((key, offer)) = self.plan_offer(&terms) {
            match self
                .pay_on_subscription(&request, terms, key, &offer)
                .await?
            {
                OnSubscription::Served(response) => return Ok(*response),
                OnSubscription::OneTime { terms: fresh, paid } => {
                    terms = fresh;
                    made.extend(paid.map(|p| *p));
                }
            }
        }
        let mut clock_read_again = false;
        let mut paid_again = false;
        'pay: loop {
            let (offer, route, reservation) = match self.choose(&terms) {
                Ok(chosen) => chosen,
                Err(e) if paid_again => {
                    tracing::warn!(error = %e, "the first payment failed; the policy refuses another");
                    return Err(Error::InvalidPaymentProof { payments: made });
                }
                Err(e) => return Err(e),
            };
            let (mut attempt, mut reservation) = match route {
                Route::Tollgate { facilitator, memo } => {
                    match self
                        .pay_facilitator(&offer.requirements, &facilitator, memo, reservation)
                        .await
                    {
                        Ok(a) => (a, None),
                        Err(e) if !clock_read_again && window_refused(&e) => {
                            // Signed by a stale idea of the chain's clock: nothing was settled.
                            // Read the clock afresh and start over with fresh terms (the memo
                            // may be spent on a failed settlement).
                            tracing::warn!(error = %e, "validity window refused; reading the chain's clock again");
                            clock_read_again = true;
                            self.forget_well_known(&facilitator);
                            let response = self.send(&request, None).await?;
                            if response.status() != StatusCode::PAYMENT_REQUIRED {
                                return self.finish_after(response, None, made).await;
                            }
                            terms = self.read_terms(response).await?;
                            continue 'pay;
                        }
                        Err(e) => return Err(e),
                    }
                }
                Route::X402 { chain_id } => {
                    let p = self.sign_x402(&offer.requirements, chain_id)?;
                    (
                        Attempt {
                            payment: p,
                            settled: None,
                        },
                        Some(reservation),
                    )
                }
            };
            let mut resent = false;
            loop {
                let response = self
                    .send(&request, Some((X_PAYMENT, &attempt.payment.header)))
                    .await;
                if let Some(reservation) = reservation.take() {
                    match &response {
                        // Refused before anything was sent: the signature never left.
                        Err(Error::Http(e)) if e.is_connect() => drop(reservation),
                        _ => reservation.commit(),
                    }
                }
                let payment = &mut attempt.payment;
                let response = response.inspect_err(|e| {
                    tracing::warn!(
                        error = %e, amount = %payment.amount, pay_to = %payment.pay_to,
                        tx = ?payment.tx_hash, "the paid request failed after paying"
                    );
                })?;
                if response.status() != StatusCode::PAYMENT_REQUIRED {
                    payment.settlement = settlement_header(&response);
                    if payment.tx_hash.is_none() {
                        payment.tx_hash = payment
                            .settlement
                            .as_ref()
                            .and_then(|s| s.transaction.parse().ok());
                    }
                    tracing::info!(
                        amount = %payment.amount, network = %payment.network, pay_to = %payment.pay_to,
                        tx = ?payment.tx_hash, status = %response.status(), resent, "paid"
                    );
                    return self
                        .finish_after(response, Some(attempt.payment), made)
                        .await;
                }
                let retry = match self.read_terms(response).await {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::warn!(error = %e, "unreadable 402 after payment");
                        made.push(attempt.payment);
                        return Err(Error::PaymentRejected {
                            reason: "unreadable 402 body after payment".into(),
                            payments: made,
                        });
                    }
                };
                let reason = retry.error.clone().unwrap_or_default();
                tracing::warn!(%reason, resent, payments = made.len() + 1, "402 after payment");
                match spec_code(&reason) {
                    Some(ErrorCode::InvalidPaymentProof) if !resent => {
                        match self.recover(&attempt).await {
                            Recovered::Proof(header) => {
                                attempt.payment.header = header;
                                resent = true;
                            }
                            Recovered::Failed(why) if !paid_again => {
                                tracing::warn!(%why, "the facilitator reports the payment failed; paying the fresh terms");
                                made.push(attempt.payment);
                                paid_again = true;
                                terms = retry;
                                continue 'pay;
                            }
                            Recovered::Failed(why) => {
                                tracing::warn!(%why, "the facilitator reports the payment failed");
                                made.push(attempt.payment);
                                return Err(Error::InvalidPaymentProof { payments: made });
                            }
                        }
                    }
                    code => {
                        made.push(attempt.payment);
                        return Err(match code {
                            Some(ErrorCode::InvalidPaymentProof) => {
                                Error::InvalidPaymentProof { payments: made }
                            }
                            Some(ErrorCode::InsufficientFunds) => {
                                Error::InsufficientFunds { message: reason }
                            }
                            Some(ErrorCode::SubscriptionNotActive) => Error::SubscriptionNotActive,
                            Some(ErrorCode::AllowanceExhausted) => Error::AllowanceExhausted,
                            _ => Error::PaymentRejected {
                                reason,
                                payments: made,
                            },
                        });
                    }
                }
            }
        }
    }

    /// The proof to send again for `attempt` after the server declined it: recovered from the
    /// facilitator's status URL (with the claim) for a Tollgate payment, checked against the
    /// payment; the proof already held when the facilitator cannot be asked (it is the
    /// facilitator's signed word that the payment settled). [`Recovered::Failed`] only when the
    /// facilitator reports the settlement failed. A plain x402 payment is sent again as it was:
    /// the same signed authorization, which the token takes at most once.
    async fn recover(&self, attempt: &Attempt) -> Recovered {
        let held = attempt.payment.header.clone();
        let Some(settled) = &attempt.settled else {
            return Recovered::Proof(held);
        };
        let answer = match self.facilitator_client(&settled.base) {
            Ok(client) => client
                .settlement_at(&settled.status_url)
                .await
                .map_err(facilitator::error_from),
            Err(e) => Err(e),
        };
        match answer {
            Ok(Authorization::Confirmed(confirmed)) => {
                let checked = match self.well_known(&settled.base).await {
                    Ok(wk) => {
                        self.check_proof(&confirmed, &settled.requirements, settled.memo, &wk)
                    }
                    Err(e) => Err(e),
                };
                match checked {
                    Ok(()) => {
                        tracing::info!(tx = %confirmed.payment.tx_hash, "proof recovered from the status URL; sending it again");
                        Recovered::Proof(confirmed.proof)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the recovered proof does not check; sending the one held");
                        Recovered::Proof(held)
                    }
                }
            }
            Err(Error::Facilitator {
                status: 422,
                code,
                message,
            }) => Recovered::Failed(format!("{code}: {message}")),
            Ok(Authorization::Pending(_)) => Recovered::Proof(held),
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the settlement's status; sending the proof held");
                Recovered::Proof(held)
            }
        }
    }

    /// [`Agent::finish`], reporting `earlier` payments made for the request too.
    async fn finish_after(
        &self,
        response: reqwest::Response,
        payment: Option<Payment>,
        earlier: Vec<Payment>,
    ) -> Result<PaidResponse> {
        let mut paid = self.finish(response, payment).await?;
        paid.earlier_payments = earlier;
        Ok(paid)
    }

    /// Sends `request`, with `credential` (`X-PAYMENT` or `X-Service-Sub` and its value) if any.
    pub(crate) async fn send(
        &self,
        request: &PayRequest,
        credential: Option<(&'static str, &str)>,
    ) -> Result<reqwest::Response> {
        let mut headers = request.headers.clone();
        if let Some((name, value)) = credential {
            let value = HeaderValue::from_str(value).map_err(|_| Error::Facilitator {
                status: 0,
                code: "InvalidProof".into(),
                message: format!("the {name} value is not a valid header value"),
            })?;
            headers.insert(name, value);
        }
        let mut builder = self
            .inner
            .http
            .request(request.method.clone(), request.url.clone())
            .headers(headers);
        if let Some(body) = &request.body {
            builder = builder.body(body.clone());
        }
        Ok(builder.send().await?)
    }

    pub(crate) async fn finish(
        &self,
        response: reqwest::Response,
        payment: Option<Payment>,
    ) -> Result<PaidResponse> {
        let status = response.status();
        let headers = response.headers().clone();
        let limit = self.inner.max_body;
        let body = read_limited(response, limit)
            .await?
            .ok_or(Error::ResponseTooLarge { limit })?;
        Ok(PaidResponse {
            status,
            headers,
            body: Bytes::from(body),
            payment,
            earlier_payments: Vec::new(),
        })
    }

    pub(crate) async fn read_terms(&self, response: reqwest::Response) -> Result<Terms> {
        let limit = self.inner.max_402_body;
        let body = read_limited(response, limit)
            .await?
            .ok_or(Error::MalformedPaymentRequired(Malformed::TooLarge {
                limit,
            }))?;
        terms::parse(&body)
    }

    /// The cheapest option the policy allows, with its price reserved.
    fn choose(&self, terms: &Terms) -> Result<(Offer, Route, Reservation)> {
        let mut payable: Vec<(Offer, Route)> = terms
            .offers
            .iter()
            .filter(|o| o.requirements.scheme == SCHEME_EXACT)
            .filter_map(|o| self.route(o).map(|r| (o.clone(), r)))
            .collect();
        if payable.is_empty() {
            return Err(Error::NoAcceptableOption {
                offered: terms.offered,
            });
        }
        // Cheapest first; at equal price, through a facilitator (a proof, no settlement by the
        // server).
        payable.sort_by_key(|(o, r)| {
            (
                o.requirements.max_amount_required,
                !matches!(r, Route::Tollgate { .. }),
            )
        });
        let mut first_refusal = None;
        for (offer, route) in payable {
            let r = &offer.requirements;
            match self
                .inner
                .policy
                .check(&r.network, r.asset, r.pay_to, r.max_amount_required)
            {
                Ok(()) => {
                    let reservation = self
                        .inner
                        .budget
                        .reserve(r.max_amount_required)
                        .map_err(|what| Error::PolicyViolation { what })?;
                    return Ok((offer, route, reservation));
                }
                Err(refusal) => {
                    first_refusal.get_or_insert(refusal);
                }
            }
        }
        Err(Error::PolicyViolation {
            what: first_refusal.unwrap_or(Refusal::OverBudget {
                price: Amount::ZERO,
                remaining: self.remaining(),
            }),
        })
    }

    /// How this agent can pay `offer`, if at all.
    fn route(&self, offer: &Offer) -> Option<Route> {
        if let (Some(memo), Some(base)) = (offer.memo, &offer.facilitator)
            && let Some(facilitator) = self.usable_facilitator(base)
        {
            return Some(Route::Tollgate { facilitator, memo });
        }
        offer.requirements.eip712_extra()?;
        let r = &offer.requirements;
        let chain_id = self.inner.chain_ids.get(&r.network).copied().or_else(|| {
            network::lookup(&r.network)
                .filter(|n| n.evm)
                .map(|n| n.chain_id)
        })?;
        Some(Route::X402 { chain_id })
    }

    /// `base` without a trailing `/`, if the agent may go through it: an http(s) URL among the
    /// configured facilitators (any, when none are configured).
    pub(crate) fn usable_facilitator(&self, base: &str) -> Option<String> {
        let base = base.trim_end_matches('/');
        let trusted = self
            .inner
            .facilitators
            .as_ref()
            .is_none_or(|list| list.iter().any(|f| f.trim_end_matches('/') == base));
        let http = url::Url::parse(base)
            .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
        (trusted && http).then(|| base.to_owned())
    }

    /// The client of the facilitator at `base` (one per base URL, sharing the agent's HTTP
    /// client and keeping its discovery document until forgotten).
    pub(crate) fn facilitator_client(&self, base: &str) -> Result<FacilitatorClient> {
        // A cache: a poisoned map is still a valid map.
        let mut clients = self.inner.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = clients.get(base) {
            return Ok(client.clone());
        }
        let client = facilitator::client(&self.inner.http, base, self.inner.max_402_body)?;
        clients.insert(base.to_owned(), client.clone());
        Ok(client)
    }

    /// The facilitator's `/.well-known/tollgate`, read once and kept (until
    /// [`forget_well_known`](Self::forget_well_known)).
    pub(crate) async fn well_known(&self, base: &str) -> Result<Arc<Discovered>> {
        self.facilitator_client(base)?
            .discovery()
            .await
            .map_err(facilitator::error_from)
    }

    /// Reads the facilitator's document afresh next time.
    fn forget_well_known(&self, base: &str) {
        if let Ok(client) = self.facilitator_client(base) {
            client.forget_discovery();
        }
    }

    /// Pays through a Tollgate facilitator and returns the receipt with the proof, and where
    /// the facilitator reports the settlement.
    async fn pay_facilitator(
        &self,
        r: &PaymentRequirements,
        base: &str,
        memo: B256,
        reservation: Reservation,
    ) -> Result<Attempt> {
        let wk = self.well_known(base).await?;
        let refuse = |code: &str, message: String| Error::Facilitator {
            status: 0,
            code: code.into(),
            message,
        };
        let net = wk.network(&r.network).ok_or_else(|| {
            refuse(
                "UnsupportedNetwork",
                format!("{base} does not settle {}", r.network),
            )
        })?;
        if net.token != r.asset {
            return Err(refuse(
                "UnsupportedToken",
                format!(
                    "{base} settles {} on {}, not {}",
                    net.token, r.network, r.asset
                ),
            ));
        }
        let amount = r.max_amount_required;
        if amount <= net.fee {
            return Err(refuse(
                "AmountBelowFee",
                format!(
                    "price {amount} does not exceed the facilitator's fee {}",
                    net.fee
                ),
            ));
        }
        // The chain's clock, not the agent's: the facilitator and the token check the window by it
        // (a devnet may be days ahead after time travel).
        let now = wk.chain_now(net, unix_now());
        let validity = r
            .max_timeout_seconds
            .clamp(MIN_VALIDITY_SECS, MAX_ROUTER_VALIDITY_SECS);
        let authorization = ReceiveWithAuthorization {
            from: self.inner.address,
            to: net.router,
            value: amount.get(),
            validAfter: U256::from(now.saturating_sub(VALID_AFTER_SKEW_SECS)),
            validBefore: U256::from(now + validity),
            nonce: router_nonce(r.pay_to, memo, net.fee.get()),
        };
        let domain = token_domain(
            net.token_name.clone(),
            net.token_version.clone(),
            net.chain_id,
            net.token,
        );
        let signature =
            sign(&self.inner.signer, &authorization, &domain).map_err(Error::Signing)?;
        let signed_payment = SignedPayment {
            network: r.network.clone(),
            token: r.asset,
            pay_to: r.pay_to,
            amount,
            memo,
            authorization: Eip3009Authorization {
                from: authorization.from,
                to: authorization.to,
                value: amount,
                valid_after: Amount(authorization.validAfter),
                valid_before: Amount(authorization.validBefore),
                nonce: authorization.nonce,
                signature,
            },
        };
        // Only this agent can collect the proof, even from someone who copies the authorization
        // off the chain; kept across the resends of this one payment, and for recovering its
        // proof from the status URL.
        let claim = B256::random();
        let client = self.facilitator_client(base)?;
        let status_url = client.status_url(
            settlement_key(
                net.chain_id,
                net.token,
                self.inner.address,
                authorization.nonce,
            ),
            claim,
        );
        let request = AuthorizeRequest {
            signed_payment,
            resource: Some(r.resource.clone()).filter(|r| !r.is_empty()),
            claim: Some(claim),
        };
        let posted = facilitator::until_answered(
            "/authorize",
            Instant::now() + self.inner.settle_timeout,
            || client.authorize(&request),
        )
        .await;
        let first = match posted.result {
            Ok(first) => Ok(first),
            Err(e) if e.transport().is_some() => {
                if !posted.never_sent {
                    reservation.commit();
                }
                return Err(facilitator::error_from(e));
            }
            Err(e) => Err(facilitator::error_from(e)),
        };
        let confirmed = match first {
            Ok(first) => self.await_proof(&client, first).await,
            Err(e) => Err(e),
        };
        match &confirmed {
            // Refused as expired by the chain's clock: it can never be settled.
            Err(Error::Facilitator {
                code: ApiErrorCode::AuthorizationExpired,
                ..
            }) => {
                drop(reservation);
            }
            Err(Error::Facilitator {
                code: ApiErrorCode::NonceMismatch,
                ..
            }) => {
                // The fee changed: read the terms afresh next time.
                client.forget_discovery();
                reservation.commit();
            }
            _ => reservation.commit(),
        }
        let confirmed = confirmed?;
        self.check_proof(&confirmed, r, memo, &wk)?;
        let payment = Payment {
            kind: PaymentKind::Tollgate,
            amount,
            fee: Some(confirmed.payment.fee),
            network: r.network.clone(),
            token: r.asset,
            payer: self.inner.address,
            pay_to: r.pay_to,
            memo: Some(memo),
            tx_hash: Some(confirmed.payment.tx_hash),
            header: confirmed.proof,
            proof: Some(confirmed.payment),
            settlement: None,
        };
        Ok(Attempt {
            payment,
            settled: Some(Settled {
                base: base.to_owned(),
                status_url,
                requirements: r.clone(),
                memo,
            }),
        })
    }

    /// The proof from an `/authorize` answer, polling its status URL while pending.
    async fn await_proof(
        &self,
        client: &FacilitatorClient,
        first: Authorization,
    ) -> Result<AuthorizeResponse> {
        let deadline = Instant::now() + self.inner.settle_timeout;
        let mut delay = Duration::ZERO;
        let mut answer = first;
        loop {
            let pending = match answer {
                Authorization::Confirmed(r) => return Ok(*r),
                Authorization::Pending(p) => p,
            };
            delay = facilitator::backoff(delay);
            if Instant::now() + delay > deadline {
                return Err(Error::Timeout {
                    what: "settlement confirmation",
                });
            }
            tracing::debug!(tx = ?pending.tx_hash, "settlement pending");
            tokio::time::sleep(delay).await;
            // A lost answer or a facilitator restarting does not end the wait: the status URL
            // answers again until the deadline.
            answer = loop {
                match client.settlement_at(&pending.status_url).await {
                    Ok(a) => break a,
                    Err(e) if facilitator::unavailable_now(&e) => {
                        tracing::debug!(status = ?e.status(), "status URL unavailable");
                    }
                    Err(e) if e.transport().is_some() => {
                        tracing::debug!(error = %e, "status URL unreachable");
                    }
                    Err(e) => return Err(facilitator::error_from(e)),
                }
                delay = facilitator::backoff(delay);
                if Instant::now() + delay > deadline {
                    return Err(Error::Timeout {
                        what: "settlement confirmation",
                    });
                }
                tokio::time::sleep(delay).await;
            };
        }
    }

    /// The proof must be for exactly this payment and signed by the facilitator's proof key.
    fn check_proof(
        &self,
        confirmed: &AuthorizeResponse,
        r: &PaymentRequirements,
        memo: B256,
        wk: &WellKnown,
    ) -> Result<()> {
        let p = &confirmed.payment;
        let matches = p.payer == self.inner.address
            && p.pay_to == r.pay_to
            && p.amount == r.max_amount_required
            && p.memo == memo
            && p.token == r.asset;
        let signed = tollgate_chain::proof::recover(p).is_ok_and(|s| {
            s == p.signer && (wk.proof_signers.is_empty() || wk.proof_signers.contains(&s))
        });
        if matches && signed {
            Ok(())
        } else {
            Err(Error::Facilitator {
                status: 200,
                code: "ProofMismatch".into(),
                message:
                    "the facilitator's proof is not for this payment or not signed by its proof key"
                        .into(),
            })
        }
    }

    /// Signs an x402 V1 `exact` payment as x402 clients do.
    fn sign_x402(&self, r: &PaymentRequirements, chain_id: u64) -> Result<Payment> {
        let extra = r
            .eip712_extra()
            .ok_or(Error::NoAcceptableOption { offered: 1 })?;
        let now = unix_now();
        let validity = r
            .max_timeout_seconds
            .clamp(MIN_VALIDITY_SECS, MAX_X402_VALIDITY_SECS);
        let authorization = TransferWithAuthorization {
            from: self.inner.address,
            to: r.pay_to,
            value: r.max_amount_required.get(),
            validAfter: U256::from(now.saturating_sub(VALID_AFTER_SKEW_SECS)),
            validBefore: U256::from(now + validity),
            nonce: B256::random(),
        };
        let domain = token_domain(extra.name, extra.version, chain_id, r.asset);
        let signature =
            sign(&self.inner.signer, &authorization, &domain).map_err(Error::Signing)?;
        let payload = PaymentPayload {
            x402_version: X402_VERSION,
            scheme: SCHEME_EXACT.into(),
            network: r.network.clone(),
            payload: ExactEvmPayload {
                signature,
                authorization: ExactEvmAuthorization {
                    from: authorization.from,
                    to: authorization.to,
                    value: r.max_amount_required,
                    valid_after: Amount(authorization.validAfter),
                    valid_before: Amount(authorization.validBefore),
                    nonce: authorization.nonce,
                },
            },
        };
        Ok(Payment {
            kind: PaymentKind::X402,
            amount: r.max_amount_required,
            fee: None,
            network: r.network.clone(),
            token: r.asset,
            payer: self.inner.address,
            pay_to: r.pay_to,
            memo: None,
            tx_hash: None,
            proof: None,
            header: payload.encode_header(),
            settlement: None,
        })
    }
}

/// A payment made for a request, with what recovering its proof needs.
#[derive(Debug)]
struct Attempt {
    /// The receipt; its `header` is what `X-PAYMENT` carries.
    payment: Payment,
    /// For a Tollgate payment: where the facilitator reports its settlement.
    settled: Option<Settled>,
}

/// Where a Tollgate payment's settlement is reported, and the terms it pays.
#[derive(Debug)]
struct Settled {
    /// The facilitator's base URL.
    base: String,
    /// `{base}/settlements/{key}?token=keccak256(claim)`.
    status_url: String,
    /// The terms paid.
    requirements: PaymentRequirements,
    /// Their memo.
    memo: B256,
}

/// What [`Agent::recover`] found.
#[derive(Debug)]
enum Recovered {
    /// Send this proof (the same payment's) again.
    Proof(String),
    /// The facilitator reports the settlement failed: the payment did not happen.
    Failed(String),
}

/// Whether the facilitator refused an authorization's validity window (by the chain's clock).
fn window_refused(e: &Error) -> bool {
    matches!(
        e,
        Error::Facilitator {
            code: ApiErrorCode::AuthorizationExpired
                | ApiErrorCode::AuthorizationNotYetValid
                | ApiErrorCode::ValidityTooLong,
            ..
        }
    )
}

/// How an option is paid.
#[derive(Clone, Debug)]
enum Route {
    /// Through the facilitator at this base URL.
    Tollgate { facilitator: String, memo: B256 },
    /// As plain x402 on this chain.
    X402 { chain_id: u64 },
}

/// Builds an [`Agent`].
#[derive(Debug)]
#[must_use]
pub struct AgentBuilder {
    signer: Secp256k1Signer,
    policy: SpendPolicy,
    chain_ids: HashMap<String, u64>,
    facilitators: Option<Vec<String>>,
    request_timeout: Duration,
    settle_timeout: Duration,
    max_402_body: usize,
    max_body: usize,
}

impl AgentBuilder {
    /// Teaches the agent a network x402 V1 does not name (a devnet), for paying generic x402
    /// servers on it; Tollgate facilitators publish their chain ids themselves.
    pub fn network(mut self, name: impl Into<String>, chain_id: u64) -> Self {
        self.chain_ids.insert(name.into(), chain_id);
        self
    }

    /// Only pay through these facilitators (base URLs). Options naming another facilitator are
    /// paid as plain x402 to their `payTo` instead, so the money reaches no address the policy
    /// has not seen (a facilitator names the router the agent signs to). Default: any.
    pub fn facilitators(mut self, urls: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.facilitators = Some(
            urls.into_iter()
                .map(|u| u.into().trim_end_matches('/').to_owned())
                .collect(),
        );
        self
    }

    /// Timeout of each HTTP request (default 30 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long to wait for a pending settlement to confirm (default 60 s).
    pub fn settle_timeout(mut self, timeout: Duration) -> Self {
        self.settle_timeout = timeout;
        self
    }

    /// The largest final response body read (default 16 MiB).
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// The agent. Redirects are not followed, so a payment header is never replayed to
    /// another origin.
    pub fn build(self) -> Result<Agent> {
        tollgate_chain::install_crypto_provider();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(self.request_timeout)
            .connect_timeout(self.request_timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("tollgate-agent/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let address = self.signer.address();
        Ok(Agent {
            inner: Arc::new(Inner {
                signer: self.signer,
                address,
                budget: Budget::new(self.policy.total_budget),
                policy: self.policy,
                http,
                chain_ids: self.chain_ids,
                facilitators: self.facilitators,
                settle_timeout: self.settle_timeout,
                max_402_body: self.max_402_body,
                max_body: self.max_body,
                clients: Mutex::new(HashMap::new()),
                held: Held::default(),
            }),
        })
    }
}

/// Reads at most `limit` bytes of body; `None` when it is longer.
pub(crate) async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<Option<Vec<u8>>> {
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

fn settlement_header(response: &reqwest::Response) -> Option<SettlementResponseHeader> {
    let value = response.headers().get(X_PAYMENT_RESPONSE)?.to_str().ok()?;
    SettlementResponseHeader::decode(value).ok()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The spec's error name a 402 `error` carries, if it is one (x402's `insufficient_funds` reads
/// as `InsufficientFunds`).
pub(crate) fn spec_code(reason: &str) -> Option<ErrorCode> {
    ErrorCode::parse(reason)
}
