//! The x402 V1 path: [`Gate::settle_x402`] settles a plain x402 `exact` payment through the
//! facilitator's `/verify` and `/settle`, at most once, under a lock in the memo store; a
//! payment whose settlement is pending is held for its payer's retry token.

use std::time::Duration;

use alloy::primitives::{Address, B256, keccak256};
use tokio::time::Instant;
use tollgate_protocol::{
    Amount,
    x402::{
        self, ErrorReason, PaymentPayload, PaymentRequirements, RetryToken, SettleResponse,
        VerifyRequest,
    },
};

use super::{Gate, Offer};
use crate::{FacilitatorError, StoreError, memo::MemoSecret};

/// Why an x402 V1 payment was not settled ([`Gate::settle_x402`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum X402Failure {
    /// Refused, with the x402 reason code (the 402's `error`).
    #[error("x402 payment refused: {0}")]
    Refused(ErrorReason),
    /// The facilitator could not be asked (a 503).
    #[error("the facilitator is unavailable")]
    FacilitatorUnavailable(#[source] FacilitatorError),
    /// The memo store could not take the once-only lock (a 503).
    #[error("the memo store is unavailable")]
    StoreUnavailable(#[source] StoreError),
    /// Sent to be settled, outcome not known yet after the gate's hold
    /// ([`GateBuilder::pending_hold`](crate::GateBuilder::pending_hold)): a 503. The payment is
    /// kept for its payer: the same payment sent again with `retry_token` picks up the outcome
    /// and is served once, never charged again; without it, it is refused (the payment is
    /// public once broadcast, so anyone could present it).
    #[error("the payment is being settled (transaction {})", transaction.map_or_else(|| "unknown".to_owned(), |t| t.to_string()))]
    Pending {
        /// The settlement transaction, when the facilitator named one.
        transaction: Option<B256>,
        /// The token that entitles a retry to the payment: given to the request that holds it
        /// (the one it presented, or a fresh one); `None` to a request that does not (an x402
        /// V2 `payment-identifier` resend, which is answered the outcome without holding it).
        retry_token: Option<RetryToken>,
    },
}

/// How long the mark of a pending payment outlives its authorization's `validBefore`: its payer
/// can collect its outcome that long after the authorization could last be settled.
const HELD_GRACE_SECS: u64 = 3600;

/// The reason x402's V2 reference facilitators answer a settlement sent but not confirmed with.
const SETTLEMENT_PENDING: &str = "settlement_pending";

/// How often a held request asks the facilitator again for a pending settlement's outcome.
const HOLD_POLL: Duration = Duration::from_millis(500);

impl Gate {
    /// Settles an x402 V1 `exact` payment before the request it pays for is
    /// served: checks it against this gate's own requirements for this resource (its window by
    /// the chain's clock), takes the once-only lock on (network, token, payer, nonce) in the
    /// memo store, then asks the facilitator to `/verify` and `/settle` it, naming this gate as
    /// the settler (an `Idempotency-Key` derived from the memo secret, the same on every
    /// replica).
    ///
    /// The lock is kept once settled (a replay is refused with `duplicate_settlement`) and
    /// released when the payment was refused or nothing was sent, so that the client may retry.
    ///
    /// A settlement that was sent but not confirmed is held for its payer. The request is held
    /// open, asking the facilitator again, for up to
    /// [`GateBuilder::pending_hold`](crate::GateBuilder::pending_hold); still pending, it is
    /// answered [`X402Failure::Pending`] with a [`RetryToken`]: `retry` if the request presented
    /// one (a Tollgate client chooses its own, so that a lost answer cannot lose it), a fresh one
    /// otherwise. Only a request presenting the same payment (every signed byte) with that token
    /// is served the outcome, once; whoever else presents the payment (rebuilt from the
    /// broadcast transaction, or with a forged signature) is refused `duplicate_settlement` and
    /// leaves the payer's hold as it was.
    pub async fn settle_x402(
        &self,
        payload: &PaymentPayload,
        offer: &Offer<'_>,
        price: Amount,
        retry: Option<RetryToken>,
    ) -> Result<SettleResponse, X402Failure> {
        self.settle_x402_as(payload, offer, price, Resend::No, retry)
            .await
    }

    /// [`settle_x402`](Self::settle_x402), where `resend` says whether a payment already locked
    /// is a resend its client is entitled to (an x402 V2 `payment-identifier` retry of the very
    /// payload that took the lock): it gets the first outcome from the facilitator instead of
    /// `duplicate_settlement`, and leaves the lock and any hold as they were.
    pub(super) async fn settle_x402_as(
        &self,
        payload: &PaymentPayload,
        offer: &Offer<'_>,
        price: Amount,
        resend: Resend,
        retry: Option<RetryToken>,
    ) -> Result<SettleResponse, X402Failure> {
        let i = &self.inner;
        let requirements = self.requirements(x402::SCHEME_EXACT, price, offer);
        self.check_window(payload, &requirements).await?;
        let auth = &payload.payload.authorization;
        let key = x402_lock_key(self.wire_network(), i.token, auth.from, auth.nonce);
        let until = u64::try_from(auth.valid_before.get()).unwrap_or(u64::MAX);
        let held_until = until.saturating_add(HELD_GRACE_SECS);
        self.maybe_prune(super::unix_now());
        let unavailable = X402Failure::StoreUnavailable;
        let first = i.store.claim(key, until).await.map_err(unavailable)?;
        let settler = settler_key(&i.secret, key);
        let digest = payload_digest(payload);
        let token = if first {
            // The payer's request: its hold is marked at once, under its token (its own, or
            // one made here), so that a retry after a lost answer finds it.
            let token = retry.unwrap_or_else(RetryToken::random);
            if let Err(e) = i
                .store
                .claim(held_key(key, &token, digest), held_until)
                .await
            {
                // Nothing sent: the payment is free again.
                if let Err(e) = i.store.release(key).await {
                    tracing::warn!(error = %e, "cannot release the x402 once-only lock");
                }
                return Err(unavailable(e));
            }
            token
        } else {
            // Not the first: the payer's retry with its token (taking the hold, so that of
            // several at once one works it), a resend by its payment identifier (answered the
            // first outcome, holding nothing), or anybody else (refused).
            let taken = match retry {
                Some(token) => i
                    .store
                    .take(held_key(key, &token, digest))
                    .await
                    .map_err(unavailable)?
                    .then_some(token),
                None => None,
            };
            match (taken, resend) {
                (Some(token), _) => token,
                (None, Resend::SameIdentifier) => {
                    return self
                        .verify_and_settle(payload, requirements, &settler, false)
                        .await;
                }
                (None, Resend::No) => {
                    return Err(X402Failure::Refused(ErrorReason::DuplicateSettlement));
                }
            }
        };
        let held = held_key(key, &token, digest);
        let mut result = self
            .verify_and_settle(payload, requirements.clone(), &settler, first)
            .await;
        if matches!(result, Err(X402Failure::Pending { .. })) {
            result = self.hold(payload, requirements, &settler, result).await;
        }
        match result {
            Ok(settled) => {
                // Served by whoever holds the payment: a first request whose payer retried
                // meanwhile (its answer taken for lost) leaves the serving to that retry.
                let serve = if first {
                    i.store.take(held).await
                } else {
                    Ok(true)
                };
                match serve {
                    Ok(true) => Ok(settled),
                    Ok(false) => {
                        tracing::info!(
                            "an x402 payment settled while its payer's retry held it; the retry is served"
                        );
                        Err(X402Failure::Pending {
                            transaction: settled.tx_hash(),
                            retry_token: Some(token),
                        })
                    }
                    Err(e) => {
                        // Paid, and still held under its token: the payer's retry is served.
                        tracing::warn!(error = %e, "cannot take the hold of a settled x402 payment; its payer's retry is served");
                        Err(X402Failure::Pending {
                            transaction: settled.tx_hash(),
                            retry_token: Some(token),
                        })
                    }
                }
            }
            Err(X402Failure::Pending { transaction, .. }) => {
                if !first && let Err(e) = i.store.claim(held, held_until).await {
                    tracing::warn!(error = %e, "cannot put back the hold of a pending x402 payment");
                }
                Err(X402Failure::Pending {
                    transaction,
                    retry_token: Some(token),
                })
            }
            Err(e) => {
                if matches!(e, X402Failure::Refused(_)) || first {
                    // Refused, or nothing known to be sent: the payment is free again.
                    for k in [held, key] {
                        let freed = if k == held {
                            i.store.take(k).await.map(|_| ())
                        } else {
                            i.store.release(k).await
                        };
                        if let Err(e) = freed {
                            tracing::warn!(error = %e, "cannot update the x402 once-only lock");
                        }
                    }
                } else if let Err(e) = i.store.claim(held, held_until).await {
                    // A retry that could not ask: the payment stays held for the next one.
                    tracing::warn!(error = %e, "cannot put back the hold of a pending x402 payment");
                }
                Err(e)
            }
        }
    }

    /// Checks the payment against `requirements` by the chain's clock; a window refused by the
    /// cached clock is checked once more by the clock read afresh (the chain may have jumped).
    async fn check_window(
        &self,
        payload: &PaymentPayload,
        requirements: &PaymentRequirements,
    ) -> Result<(), X402Failure> {
        let checked = x402::check_exact_evm(payload, requirements, self.chain_now(false).await);
        match checked {
            Err(
                ErrorReason::InvalidExactEvmPayloadAuthorizationValidBefore
                | ErrorReason::InvalidExactEvmPayloadAuthorizationValidAfter,
            ) => x402::check_exact_evm(payload, requirements, self.chain_now(true).await),
            other => other,
        }
        .map_err(X402Failure::Refused)
    }

    /// Holds a request whose settlement is pending: asks the facilitator again (the settler's
    /// idempotency key picks up the first settlement) until an outcome or the hold's end. Each
    /// ask is cut at the hold's end; the facilitator goes on, and the next ask picks it up.
    async fn hold(
        &self,
        payload: &PaymentPayload,
        requirements: PaymentRequirements,
        settler: &str,
        pending: Result<SettleResponse, X402Failure>,
    ) -> Result<SettleResponse, X402Failure> {
        let end = Instant::now() + self.inner.pending_hold;
        let mut result = pending;
        while matches!(result, Err(X402Failure::Pending { .. })) {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(HOLD_POLL.min(left)).await;
            let left = end.saturating_duration_since(Instant::now());
            let asked = tokio::time::timeout(
                left,
                self.verify_and_settle(payload, requirements.clone(), settler, false),
            )
            .await;
            match asked {
                // Cut at the hold's end: still pending, as far as anyone knows.
                Err(_) => break,
                Ok(Err(X402Failure::Pending {
                    transaction: None, ..
                })) => {
                    // Lost answer: keep the transaction named earlier, if any.
                }
                Ok(r) => result = r,
            }
        }
        result
    }

    /// `/verify` (for a payment seen the first time) then `/settle`. Once `/settle` was sent, an
    /// answer that is not a verdict is [`X402Failure::Pending`]: the payment may be on its way.
    async fn verify_and_settle(
        &self,
        payload: &PaymentPayload,
        requirements: PaymentRequirements,
        settler: &str,
        first: bool,
    ) -> Result<SettleResponse, X402Failure> {
        let f = &self.inner.facilitator;
        let req = VerifyRequest::new(payload.clone(), requirements);
        if first {
            let verdict = f.verify(&req).await.map_err(|e| {
                if e.is_refusal() {
                    tracing::warn!(error = %e, "the facilitator refused an x402 payment");
                    X402Failure::Refused(ErrorReason::InvalidPayment)
                } else {
                    X402Failure::FacilitatorUnavailable(e)
                }
            })?;
            if !verdict.is_valid {
                return Err(X402Failure::Refused(
                    verdict
                        .invalid_reason
                        .unwrap_or(ErrorReason::InvalidPayment),
                ));
            }
        }
        let settled = match f.settle(&req, Some(settler)).await {
            Ok(s) => s,
            Err(e) if e.is_refusal() => {
                tracing::warn!(error = %e, "the facilitator refused an x402 settlement");
                return Err(X402Failure::Refused(ErrorReason::InvalidPayment));
            }
            Err(e) => {
                tracing::warn!(error = %e, "no answer from the facilitator's /settle: the payment is pending");
                return Err(X402Failure::Pending {
                    transaction: None,
                    retry_token: None,
                });
            }
        };
        if settled.success {
            return Ok(settled);
        }
        let reason = settled
            .error_reason
            .clone()
            .unwrap_or(ErrorReason::UnexpectedSettleError);
        match (reason, settled.tx_hash()) {
            // Sent, not confirmed yet: Tollgate's facilitator answers a slow settlement so, and
            // x402's V2 reference facilitators answer `settlement_pending`.
            (ErrorReason::InvalidTransactionState, Some(tx)) => Err(X402Failure::Pending {
                transaction: Some(tx),
                retry_token: None,
            }),
            (ErrorReason::Other(code), Some(tx)) if code == SETTLEMENT_PENDING => {
                Err(X402Failure::Pending {
                    transaction: Some(tx),
                    retry_token: None,
                })
            }
            (reason, _) => Err(X402Failure::Refused(reason)),
        }
    }
}

/// Whether a payment that finds its once-only lock taken is a resend its client is entitled to
/// ([`Gate::settle_x402_as`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Resend {
    /// A repeat is a replay: `duplicate_settlement`.
    No,
    /// The same payload again under the payment identifier it was first sent with.
    SameIdentifier,
}

/// Where a payment whose settlement is pending is held for its payer, beside its once-only
/// key: bound to the retry token and to every byte of the payload ([`payload_digest`]), so that
/// neither a request without the token nor the token with another payload (a forged signature)
/// can take it.
fn held_key(key: B256, token: &RetryToken, digest: B256) -> B256 {
    keccak256(
        [
            b"tollgate-gate/x402/held".as_slice(),
            key.as_slice(),
            token.as_bytes(),
            digest.as_slice(),
        ]
        .concat(),
    )
}

/// The hash of a payload as it reads (its canonical JSON): two payloads that differ in any
/// field, the signature included, differ here.
fn payload_digest(payload: &PaymentPayload) -> B256 {
    keccak256(serde_json::to_vec(payload).unwrap_or_default())
}

/// The `Idempotency-Key` this gate settles `key` under: secret (derived from the memo secret, so
/// nobody else can pick up its outcome) and the same on every replica that shares the secret.
fn settler_key(secret: &MemoSecret, key: B256) -> String {
    let mut buf = Vec::with_capacity(96);
    buf.extend_from_slice(b"tollgate-gate/x402/settler");
    buf.extend_from_slice(&secret.0);
    buf.extend_from_slice(key.as_slice());
    keccak256(&buf).to_string()
}

/// The once-only key of an x402 authorization: its network, token, payer and nonce.
fn x402_lock_key(network: &str, token: Address, from: Address, nonce: B256) -> B256 {
    let mut buf = Vec::with_capacity(128);
    buf.extend_from_slice(b"tollgate-gate/x402/v1");
    buf.extend_from_slice(&(network.len() as u32).to_be_bytes());
    buf.extend_from_slice(network.as_bytes());
    buf.extend_from_slice(token.as_slice());
    buf.extend_from_slice(from.as_slice());
    buf.extend_from_slice(nonce.as_slice());
    keccak256(&buf)
}
