//! [`Agent::pay`]: the spec's one-time payment sequence, and the choice of the offer to pay.

use alloy::primitives::B256;
use reqwest::StatusCode;
use tollgate_protocol::{Amount, ApiErrorCode, ErrorCode, network, x402::SCHEME_EXACT};

use super::{
    Agent,
    http::{Settled, settlement_header},
    recover::{Attempt, Recovered},
    spec_code,
};
use crate::{
    Error, PaidResponse, PayRequest, Payment, Result,
    error::Refusal,
    on_subscription::{OnSubscription, X_SERVICE_SUB},
    policy::Reservation,
    terms::{Offer, Terms},
};

impl Agent {
    /// Requests `request`, paying for it if the server answers 402: the spec's one-time
    /// sequence.
    ///
    /// 1. Send the request. Anything but a 402 is returned as is, with no payment.
    /// 2. Read the 402 (at most 64 KiB): the Tollgate superset body, or a generic x402 V1 body
    ///    (or the x402 V2 `PAYMENT-REQUIRED` header). A 402 with no x402 terms the agent reads
    ///    but an MPP challenge (`WWW-Authenticate: Payment …`, method `evm`, intent `charge`,
    ///    credential type `authorization`) is paid with MPP instead ([MPP](#mpp) below); a 402
    ///    offering both is paid with x402.
    /// 3. If the request names a subscription itself (an `X-Service-Sub` header), the 402 is
    ///    that subscription's refusal: `AllowanceExhausted` raises the overage cap to the
    ///    policy's ceiling when it allows a higher one
    ///    ([`SpendPolicy::raise_overage_to`](crate::SpendPolicy::raise_overage_to)) and sends the
    ///    request once more. A refusal that stands is [`Error::SubscriptionNotActive`],
    ///    [`Error::AllowanceExhausted`] or [`Error::SubscriptionRefused`], and nothing is paid:
    ///    the agent never turns a named subscription into a one-time payment unless the request
    ///    asks for it ([`PayRequest::fallback_one_time`]); then it pays one-time (step 4 on),
    ///    without `X-Service-Sub`.
    ///
    ///    Otherwise, if the policy allows subscribing ([`SpendPolicy::subscriptions`]) and the 402 offers a
    ///    plan it allows (`service.subscriptionScheme` with a `planId`, at most `max_per_cycle` a
    ///    cycle, through a facilitator the agent may use), serve the request on a subscription:
    ///    the one the agent holds for the plan ([`Agent::use_subscription`], one it created
    ///    earlier, one its state file remembers), else an ACTIVE one the facilitator lists for
    ///    the agent ([`Agent::subscriptions`]), else one [`Agent::subscribe`] creates now (once, however many payments for
    ///    the plan run concurrently). The request goes again with `X-Service-Sub` and the
    ///    answer is returned with a [`PaymentKind::Subscription`] receipt. A 402
    ///    `AllowanceExhausted` raises the cap within the policy as above and sends the request
    ///    once more, else it is [`Error::AllowanceExhausted`]; a 402 `SubscriptionNotActive`
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
    ///    set by the chain's clock of the facilitator the offer names (or that the agent read for
    ///    the network before), else by the local clock as x402 clients do, with a fresh retry
    ///    token sent beside it (`X-PAYMENT-RETRY`). If the facilitator refuses the window
    ///    (the chain's clock jumped since the document was read, as a devnet's does), the agent
    ///    reads the document afresh and starts over once from an unpaid request (fresh terms).
    /// 6. Send the request again with `X-PAYMENT`. A 503 `SettlementPending` with
    ///    `X-PAYMENT-RETRY` (the server holds the payment while its settlement confirms) is
    ///    followed by the same payment with that token after `Retry-After`, until another answer
    ///    or [`AgentBuilder::settle_timeout`](crate::AgentBuilder::settle_timeout), then
    ///    [`Error::SettlementPending`]: never a second payment. An answer that is neither served
    ///    (2xx) nor shows the payment moved (a transaction from the proof or the settlement
    ///    header) is [`Error::NotServed`], never a receipt.
    /// 7. If the server answers 402 with `InvalidPaymentProof` (the spec's automatic retry), the
    ///    agent does not pay again: it recovers the proof of the payment already made from the
    ///    facilitator's status URL (with its claim) and sends that once more (a plain x402
    ///    payment: the same signed payload, which the token takes at most once). A second
    ///    payment is made only when the facilitator reports the first one failed, and only
    ///    within the policy; it is reported in [`PaidResponse::earlier_payments`]. A second
    ///    `InvalidPaymentProof` to the same payment is [`Error::InvalidPaymentProof`] with every
    ///    payment made; any other 402 after paying is an error too, never another payment.
    ///
    /// # MPP
    ///
    /// An MPP-only 402's cheapest EVM `charge` challenge the policy allows is paid with an
    /// ERC-3009 `authorization` credential, as mppx signs it: a `TransferWithAuthorization` of
    /// exactly the challenge's `amount` to its `recipient`, nonce `keccak256(id ‖ realm)`,
    /// `validAfter` 0 and `validBefore` the challenge's `expires`. The same [`SpendPolicy`]
    /// applies (per-request cap, budget, payees, tokens, and networks: the chain is known by a
    /// facilitator's name for it, one taught with
    /// [`AgentBuilder::network`](crate::AgentBuilder::network), x402's, or its CAIP-2 id). The
    /// chain's clock is that of a facilitator the agent reads serving the chain (else the local
    /// clock): a challenge already expired by it is refused ([`Error::ChallengeRefused`]), as is
    /// one expiring more than an hour ahead, which the agent would have to sign for that long.
    /// The token's EIP-712 name and version, which a challenge does not carry, come from
    /// [`AgentBuilder::token_domain`](crate::AgentBuilder::token_domain), else from a
    /// facilitator's discovery document settling that token on that chain, else from the
    /// token's `eip712Domain()` over the chain's JSON-RPC endpoint a facilitator publishes;
    /// else the challenge is refused ([`Error::UnknownTokenDomain`]). Refusals sign and send
    /// nothing.
    ///
    /// The credential goes once, in `Authorization: Payment …` with a retry token
    /// (`X-PAYMENT-RETRY`); a 503 pending answer is followed by the same credential as in step 6,
    /// never a new one. The answer's `Payment-Receipt` is decoded into
    /// [`Payment::mpp_receipt`](crate::Payment::mpp_receipt) (its `reference` the
    /// [`Payment::tx_hash`](crate::Payment::tx_hash)) of a [`PaymentKind::Mpp`] payment. A
    /// refusal with an `application/problem+json` body is [`Error::PaymentProblem`] (its type URI
    /// and detail); the agent never pays twice for one request.
    ///
    /// A reservation is released when the payment fails before the signature leaves the
    /// process, or when the facilitator refuses it as expired; once sent otherwise, it counts
    /// as spent (the authorization can be settled until it expires).
    ///
    /// [`SpendPolicy`]: crate::SpendPolicy
    /// [`SpendPolicy::subscriptions`]: crate::SpendPolicy::subscriptions
    /// [`PaymentKind::Subscription`]: crate::PaymentKind::Subscription
    /// [`PaymentKind::Mpp`]: crate::PaymentKind::Mpp
    pub async fn pay(&self, request: PayRequest) -> Result<PaidResponse> {
        let response = self.send(&request, None).await?;
        if response.status() != StatusCode::PAYMENT_REQUIRED {
            let on_subscription = self.served_on_named(&request, &response);
            return self.finish(response, on_subscription).await;
        }
        // x402 first: its terms name the facilitator whose discovery, chain clock and proofs the
        // agent reads and checks; an MPP challenge is paid only when the 402 has no x402 terms.
        let challenges = super::mpp::challenges(response.headers());
        let terms = self.read_terms(response).await;
        let x402 = terms.as_ref().is_ok_and(|t| !t.offers.is_empty());
        // A subscription the request names is never turned into a one-time payment unasked.
        let may_pay_one_time =
            !request.headers.contains_key(X_SERVICE_SUB) || request.fallback_one_time;
        if !x402 && !challenges.is_empty() && may_pay_one_time {
            tracing::debug!(
                challenges = challenges.len(),
                "the 402 has no x402 terms the agent reads; paying its MPP challenge"
            );
            let mut request = request;
            request.headers.remove(X_SERVICE_SUB);
            return self.pay_mpp(&request, challenges).await;
        }
        let mut terms = terms?;
        // Every payment made for this request that did not buy it.
        let mut made: Vec<Payment> = Vec::new();
        let mut request = request;
        if request.headers.contains_key(X_SERVICE_SUB) {
            match self.pay_on_named(&request, terms).await? {
                OnSubscription::Served(response) => return Ok(*response),
                OnSubscription::OneTime { terms: fresh, .. } => {
                    terms = fresh;
                    request.headers.remove(X_SERVICE_SUB);
                }
            }
        } else if let Some((key, offer)) = self.plan_offer(&terms) {
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
            let (offer, route, reservation) = match self.choose(&terms, true) {
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
                    let now = self.x402_now(&offer).await;
                    let p =
                        self.sign_x402(&offer.requirements, chain_id, offer.v2.as_ref(), now)?;
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
                let response = self.send_payment(&request, &attempt.payment).await;
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
                let response = match self.until_settled(&request, payment, response).await? {
                    Settled::Answered(response) => response,
                    Settled::StillPending { transaction } => {
                        made.push(attempt.payment);
                        return Err(Error::SettlementPending {
                            transaction,
                            payments: made,
                        });
                    }
                };
                if response.status() != StatusCode::PAYMENT_REQUIRED {
                    payment.settlement = settlement_header(&response, payment.x402_version);
                    if payment.tx_hash.is_none() {
                        payment.tx_hash = payment
                            .settlement
                            .as_ref()
                            .filter(|s| s.success)
                            .and_then(|s| s.transaction.parse().ok());
                    }
                    let status = response.status();
                    if !status.is_success() && payment.tx_hash.is_none() {
                        // Neither served nor shown to have moved: never reported paid.
                        let code = error_code(response).await;
                        tracing::warn!(
                            %status, code = ?code, amount = %payment.amount, pay_to = %payment.pay_to,
                            "the paid request was not served and nothing shows the payment moved"
                        );
                        made.push(attempt.payment);
                        return Err(Error::NotServed {
                            status: status.as_u16(),
                            code,
                            payments: made,
                        });
                    }
                    tracing::info!(
                        amount = %payment.amount, network = %payment.network, pay_to = %payment.pay_to,
                        tx = ?payment.tx_hash, x402_version = ?payment.x402_version,
                        status = %response.status(), resent, "paid"
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

    /// The cheapest option the policy allows, with its price reserved; paid through a
    /// facilitator only when `proofs` (an MCP tool takes x402 payloads only).
    pub(super) fn choose(
        &self,
        terms: &Terms,
        proofs: bool,
    ) -> Result<(Offer, Route, Reservation)> {
        let mut payable: Vec<(Offer, Route)> = terms
            .offers
            .iter()
            .filter(|o| o.requirements.scheme == SCHEME_EXACT)
            .filter_map(|o| self.route(o, proofs).map(|r| (o.clone(), r)))
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
    fn route(&self, offer: &Offer, proofs: bool) -> Option<Route> {
        if proofs
            && let (Some(memo), Some(base)) = (offer.memo, &offer.facilitator)
            && let Some(facilitator) = self.usable_facilitator(base)
        {
            return Some(Route::Tollgate { facilitator, memo });
        }
        offer.requirements.eip712_extra()?;
        let r = &offer.requirements;
        let chain_id = self
            .inner
            .chain_ids
            .get(r.network.as_str())
            .copied()
            .or_else(|| network::chain_id_of(&r.network).ok())?;
        Some(Route::X402 { chain_id })
    }
}

/// The `{"error": {"code"}}` of an error answer, if it has one (read within 64 KiB).
async fn error_code(response: reqwest::Response) -> Option<String> {
    const LIMIT: usize = 64 * 1024;
    if response.content_length().is_some_and(|n| n > LIMIT as u64) {
        return None;
    }
    let body = response.bytes().await.ok()?;
    let v: serde_json::Value = serde_json::from_slice(body.get(..LIMIT.min(body.len()))?).ok()?;
    v.get("error")?
        .get("code")?
        .as_str()
        .map(|c| c.chars().take(64).collect())
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
pub(super) enum Route {
    /// Through the facilitator at this base URL.
    Tollgate { facilitator: String, memo: B256 },
    /// As plain x402 on this chain.
    X402 { chain_id: u64 },
}
