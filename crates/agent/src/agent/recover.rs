//! Recovering the proof of a payment already made, when the server declined the proof sent
//! (the spec's automatic retry), so that the agent does not pay twice.

use alloy::primitives::B256;
use tollgate_client::Authorization;
use tollgate_protocol::x402::PaymentRequirements;

use super::Agent;
use crate::{Error, Payment, facilitator};

impl Agent {
    /// The proof to send again for `attempt` after the server declined it: recovered from the
    /// facilitator's status URL (with the claim) for a Tollgate payment, checked against the
    /// payment; the proof already held when the facilitator cannot be asked (it is the
    /// facilitator's signed word that the payment settled). [`Recovered::Failed`] only when the
    /// facilitator reports the settlement failed. A plain x402 payment is sent again as it was:
    /// the same signed authorization, which the token takes at most once.
    pub(super) async fn recover(&self, attempt: &Attempt) -> Recovered {
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
}

/// A payment made for a request, with what recovering its proof needs.
#[derive(Debug)]
pub(super) struct Attempt {
    /// The receipt; its `header` is what `X-PAYMENT` carries.
    pub(super) payment: Payment,
    /// For a Tollgate payment: where the facilitator reports its settlement.
    pub(super) settled: Option<Settled>,
}

/// Where a Tollgate payment's settlement is reported, and the terms it pays.
#[derive(Debug)]
pub(super) struct Settled {
    /// The facilitator's base URL.
    pub(super) base: String,
    /// `{base}/settlements/{key}?token=keccak256(claim)`.
    pub(super) status_url: String,
    /// The terms paid.
    pub(super) requirements: PaymentRequirements,
    /// Their memo.
    pub(super) memo: B256,
}

/// What [`Agent::recover`] found.
#[derive(Debug)]
pub(super) enum Recovered {
    /// Send this proof (the same payment's) again.
    Proof(String),
    /// The facilitator reports the settlement failed: the payment did not happen.
    Failed(String),
}
