//! The x402 V1 path: [`Gate::settle_x402`] settles a plain x402 `exact` payment through the
//! facilitator's `/verify` and `/settle`, at most once, under a lock in the memo store.

use alloy::primitives::{Address, B256, keccak256};
use tollgate_protocol::{
    Amount,
    x402::{self, ErrorReason, PaymentPayload, PaymentRequirements, SettleResponse, VerifyRequest},
};

use super::{Gate, Offer, unix_now};
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
    /// Sent to be settled, outcome not known yet (the chain is slow, or the facilitator's answer
    /// was lost): a 503. The payment is kept for this request: sending the same `X-PAYMENT`
    /// again picks up the outcome and is served once, never charged again.
    #[error("the payment is being settled (transaction {})", transaction.map_or_else(|| "unknown".to_owned(), |t| t.to_string()))]
    Pending {
        /// The settlement transaction, when the facilitator named one.
        transaction: Option<B256>,
    },
}

impl Gate {
    /// Settles an x402 V1 `exact` payment before the request it pays for is
    /// served: checks it against this gate's own requirements for this resource, takes the
    /// once-only lock on (network, token, payer, nonce) in the memo store, then asks the
    /// facilitator to `/verify` and `/settle` it, naming this gate as the settler (an
    /// `Idempotency-Key` derived from the memo secret, the same on every replica).
    ///
    /// The lock is kept once settled (a replay is refused with `duplicate_settlement`) and
    /// released when the payment was refused or nothing was sent, so that the client may retry.
    /// When the settlement was sent but its outcome is not known (the facilitator answered
    /// "pending", or its answer was lost), the lock is kept and the payment marked pending: the
    /// client's retry with the same `X-PAYMENT` (one of them, if several race) picks up the
    /// outcome from the facilitator and is served; it is never asked to pay again.
    pub async fn settle_x402(
        &self,
        payload: &PaymentPayload,
        offer: &Offer<'_>,
        price: Amount,
    ) -> Result<SettleResponse, X402Failure> {
        self.settle_x402_as(payload, offer, price, Resend::No).await
    }

    /// [`settle_x402`](Self::settle_x402), where `resend` says whether a payment already locked
    /// is a resend its client is entitled to (an x402 V2 `payment-identifier` retry of the very
    /// payload that took the lock): it gets the first outcome from the facilitator instead of
    /// `duplicate_settlement`, and leaves the lock as its owner left it.
    pub(super) async fn settle_x402_as(
        &self,
        payload: &PaymentPayload,
        offer: &Offer<'_>,
        price: Amount,
        resend: Resend,
    ) -> Result<SettleResponse, X402Failure> {
        let i = &self.inner;
        let requirements = self.requirements(x402::SCHEME_EXACT, price, offer);
        let now = unix_now();
        x402::check_exact_evm(payload, &requirements, now).map_err(X402Failure::Refused)?;
        let auth = &payload.payload.authorization;
        let key = x402_lock_key(self.wire_network(), i.token, auth.from, auth.nonce);
        let pending = pending_key(key);
        let until = u64::try_from(auth.valid_before.get()).unwrap_or(u64::MAX);
        self.maybe_prune(now);
        let first = i
            .store
            .claim(key, until)
            .await
            .map_err(X402Failure::StoreUnavailable)?;
        // Not the first: a retry of a payment left pending (taken up by exactly one request,
        // which then owns the lock), a resend by its payment identifier (answered the first
        // outcome, owning nothing), or a replay (refused).
        let owner = first
            || i.store
                .take(pending)
                .await
                .map_err(X402Failure::StoreUnavailable)?;
        if !owner && resend == Resend::No {
            return Err(X402Failure::Refused(ErrorReason::DuplicateSettlement));
        }
        let settler = settler_key(&i.secret, key);
        let result = self
            .verify_and_settle(payload, requirements, &settler, first)
            .await;
        if !owner {
            return result;
        }
        let kept = match &result {
            Ok(_) => Ok(()),
            Err(X402Failure::Pending { .. }) => i.store.claim(pending, until).await.map(|_| ()),
            Err(_) => i.store.release(key).await,
        };
        if let Err(e) = kept {
            tracing::warn!(error = %e, "cannot update the x402 once-only lock");
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
                return Err(X402Failure::Pending { transaction: None });
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
            // Sent, not confirmed yet (Tollgate's facilitator answers a slow settlement so).
            (ErrorReason::InvalidTransactionState, Some(tx)) => Err(X402Failure::Pending {
                transaction: Some(tx),
            }),
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

/// Where a payment whose settlement is pending is marked, beside its once-only key.
fn pending_key(key: B256) -> B256 {
    keccak256([b"tollgate-gate/x402/pending".as_slice(), key.as_slice()].concat())
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
