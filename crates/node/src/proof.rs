//! The spec's free functions on payment proofs: [`parse_payment_proof`] and
//! [`verify_payment_proof`] (a stateless check; a gate's own check also spends the proof's memo:
//! `NativeGate::verify_payment_proof`).

use napi_derive::napi;
use serde_json::Value;
use tollgate_client::FacilitatorClient;
use tollgate_protocol::{PaymentProof, network};

use crate::{address, amount, error::named, id};

/// The spec's `parsePaymentProof`: decodes an `X-PAYMENT` value holding a Tollgate payment
/// proof into its fields (camelCase, amounts as unit strings). Throws `InvalidPaymentProof`
/// for anything else (garbage, an x402 payload).
#[napi]
pub fn parse_payment_proof(header: String) -> napi::Result<Value> {
    let proof =
        tollgate_gate::parse_payment_proof(&header).map_err(|e| named("InvalidPaymentProof", e))?;
    serde_json::to_value(proof).map_err(|e| named("InternalError", e))
}

/// What a proof must show ([`verify_payment_proof`]); every field optional but the trust
/// anchor: `facilitator` (its published proof signers are trusted) or `signers`.
#[napi(object)]
#[derive(Debug, Default)]
pub struct ProofExpectations {
    /// The facilitator whose published signers (`/.well-known/tollgate`) are trusted.
    pub facilitator: Option<String>,
    /// Signer addresses trusted instead.
    pub signers: Option<Vec<String>>,
    /// The network (a V1 name or CAIP-2 id).
    pub network: Option<String>,
    /// The token.
    pub token: Option<String>,
    /// The payee.
    pub pay_to: Option<String>,
    /// The least amount (tokens or `"units:N"`).
    pub amount: Option<String>,
    /// The memo the 402 issued.
    pub memo: Option<String>,
}

/// The spec's `verifyPaymentProof`: whether `proof` (an `X-PAYMENT` value or a parsed proof)
/// is signed by a trusted signer, unexpired, and matches every expectation given. Stateless:
/// it does not spend the proof (a gate's `verifyPaymentProof` does). Throws when the
/// facilitator cannot be reached, or when no trust anchor is given.
#[napi]
pub async fn verify_payment_proof(
    proof: Value,
    expected: Option<ProofExpectations>,
) -> napi::Result<bool> {
    let proof: PaymentProof = match proof {
        Value::String(header) => match tollgate_gate::parse_payment_proof(&header) {
            Ok(p) => p,
            Err(_) => return Ok(false),
        },
        other => match serde_json::from_value(other) {
            Ok(p) => p,
            Err(_) => return Ok(false),
        },
    };
    let e = expected.unwrap_or_default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let matches = proof.expiry > now
        && e.network
            .as_deref()
            .is_none_or(|n| network::same_network(n, &proof.network))
        && match &e.token {
            Some(t) => address("token", t)? == proof.token,
            None => true,
        }
        && match &e.pay_to {
            Some(t) => address("payTo", t)? == proof.pay_to,
            None => true,
        }
        && match &e.amount {
            Some(a) => proof.amount >= amount("amount", a)?,
            None => true,
        }
        && match &e.memo {
            Some(m) => id("memo", m)? == proof.memo,
            None => true,
        };
    if !matches {
        return Ok(false);
    }
    let signer = match tollgate_chain::proof::recover(&proof) {
        Ok(s) if s == proof.signer => s,
        _ => return Ok(false),
    };
    match (&e.signers, &e.facilitator) {
        (Some(signers), _) => {
            for s in signers {
                if address("signers", s)? == signer {
                    return Ok(true);
                }
            }
            Ok(false)
        }
        (None, Some(url)) => {
            let client = FacilitatorClient::builder(url.clone())
                .build()
                .map_err(|e| named("InvalidArgument", format!("facilitator: {e}")))?;
            let (known, _) = client
                .is_signer(signer)
                .await
                .map_err(|e| named("FacilitatorUnavailable", e))?;
            Ok(known)
        }
        (None, None) => Err(named(
            "InvalidArgument",
            "expected.facilitator or expected.signers is required: a proof is only as good as \
             its signer",
        )),
    }
}
