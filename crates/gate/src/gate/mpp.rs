//! MPP beside x402: the `WWW-Authenticate: Payment` challenge of a 402
//! ([`Gate::mpp_challenge`]) and the settlement of an `Authorization: Payment` credential of the
//! EVM `charge` method paid by an ERC-3009 authorization ([`Gate::settle_mpp`]), as the
//! Payment HTTP authentication scheme's drafts and their reference SDK, `mppx`, spell them.
//!
//! A challenge is stateless: its id is an HMAC, under a key derived from the memo secret (the
//! same on every replica), of everything it says, its route binding (`opaque`: the method, the
//! resource and a random salt) included. The salt makes each challenge unique, so its id is
//! known to the one client it was given to: the ERC-3009 nonce the client signs is the hash of
//! the id and realm, and nobody who sees the authorization on chain can rebuild the credential.
//!
//! A credential is checked against its challenge (issued here, for this method, resource, price,
//! token, payee and chain, unexpired by the chain's clock) and its challenge against the
//! payment (payee, exact amount, nonce), then settled as its x402 V1 twin: the same once-only
//! lock, the same facilitator calls, the same hold of a pending settlement, and the same
//! refusal of a replay. The credential itself is the payer's retry token: the very credential
//! sent again after a pending answer picks up the outcome and is served once.

use alloy::primitives::{B256, keccak256};
use tollgate_protocol::{
    Amount,
    mpp::{
        self, Challenge, ChallengeKey, ChargeRequest, Credential, EvmMethodDetails, Opaque,
        ProblemType, Receipt,
    },
    x402::{ErrorReason, RetryToken, SettleResponse},
};

use super::{Gate, Offer, x402::Resend};
use crate::{X402Failure, memo::MemoSecret};

/// The keys of a challenge's route binding (`opaque`).
const BOUND_METHOD: &str = "method";
const BOUND_RESOURCE: &str = "resource";
const BOUND_SALT: &str = "salt";

/// Why an MPP credential was not settled ([`Gate::settle_mpp`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MppFailure {
    /// Refused, nothing sent: the draft's problem type and why (the problem's `detail`).
    #[error("MPP credential refused ({}): {detail}", problem.uri())]
    Refused {
        /// The problem type of the 402.
        problem: ProblemType,
        /// What was wrong, for people.
        detail: String,
    },
    /// Its settlement failed as an x402 payment's does: unavailable (a 503) or pending (a 503;
    /// the same credential again picks up the outcome).
    #[error(transparent)]
    Settlement(X402Failure),
}

impl MppFailure {
    fn refused(problem: ProblemType, detail: impl Into<String>) -> Self {
        Self::Refused {
            problem,
            detail: detail.into(),
        }
    }
}

/// The HMAC key of this gate's challenges, derived from its memo secret.
pub(super) fn challenge_key(secret: &MemoSecret) -> ChallengeKey {
    let key = keccak256([b"tollgate-gate/mpp/challenge".as_slice(), &secret.0].concat());
    ChallengeKey::new(key.0)
}

impl Gate {
    /// The MPP `request` of the EVM `charge` method for `price`: amount, token, payee, chain.
    /// `None` when the gate does not know its chain id ([`Gate::caip2`]).
    pub fn mpp_request(&self, price: Amount) -> Option<ChargeRequest> {
        let chain_id = self.caip2()?.chain_id().ok()?;
        Some(ChargeRequest {
            amount: price,
            currency: self.inner.token,
            recipient: self.inner.pay_to,
            method_details: EvmMethodDetails::authorization(chain_id, self.inner.token_decimals),
            description: None,
            external_id: None,
        })
    }

    /// A fresh challenge of the EVM `charge` method for `offer` at `price`, for a 402's
    /// `WWW-Authenticate`: bound to the method and resource, unique (a random salt), expiring
    /// [`memo_ttl`](crate::GateBuilder::memo_ttl) from now by the chain's clock. The realm is the
    /// resource's host. `None` when the gate does not know its chain id.
    pub async fn mpp_challenge(&self, offer: &Offer<'_>, price: Amount) -> Option<Challenge> {
        let request = self.mpp_request(price)?;
        let now = self.chain_now(false).await;
        let expires = now.saturating_add(self.inner.memo_ttl.as_secs());
        let opaque = Opaque(
            [
                (BOUND_METHOD, offer.method.to_owned()),
                (BOUND_RESOURCE, offer.resource_url.to_owned()),
                (BOUND_SALT, B256::random().to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        );
        let description = Some(offer.description).filter(|d| !d.is_empty());
        Some(Challenge::issue(
            &self.inner.mpp_key,
            realm_of(offer.resource_url),
            &request,
            expires.saturating_mul(1000),
            Some(&opaque),
            description,
        ))
    }

    /// Settles an MPP credential for `offer` at `price`: its challenge must be one this gate
    /// issued (the HMAC), for this method and resource, at this price, token, payee and chain,
    /// and unexpired by the chain's clock; its authorization must pay the payee exactly the
    /// amount under the challenge's nonce (and name its signer as `source`, if it names one).
    /// Then it is settled as its x402 V1 twin ([`Gate::settle_x402`]), with the credential as
    /// the retry token: a replay of a served credential is refused (`invalid-challenge`: used),
    /// the same credential after a pending answer is served the outcome once.
    ///
    /// Answers the settlement and the `Payment-Receipt` to send with the paid response.
    pub async fn settle_mpp(
        &self,
        credential: &Credential,
        offer: &Offer<'_>,
        price: Amount,
    ) -> Result<(SettleResponse, Receipt), MppFailure> {
        use ProblemType::{InvalidChallenge, PaymentExpired, VerificationFailed};
        let challenge = &credential.challenge;
        if challenge.method != mpp::METHOD_EVM || challenge.intent != mpp::INTENT_CHARGE {
            return Err(MppFailure::refused(
                InvalidChallenge,
                "this resource is paid by the evm method's charge intent",
            ));
        }
        if !challenge.is_authentic(&self.inner.mpp_key) {
            return Err(MppFailure::refused(
                InvalidChallenge,
                "the challenge was not issued by this server",
            ));
        }
        let bound = challenge.opaque().ok().flatten();
        let bound_to = |k| bound.as_ref().and_then(|o| o.get(k));
        if bound_to(BOUND_METHOD) != Some(offer.method)
            || bound_to(BOUND_RESOURCE) != Some(offer.resource_url)
        {
            return Err(MppFailure::refused(
                InvalidChallenge,
                "the challenge was issued for another method or resource",
            ));
        }
        let Some(ours) = self.mpp_request(price) else {
            return Err(MppFailure::refused(
                InvalidChallenge,
                "this server does not know its chain id",
            ));
        };
        let Ok(request) = challenge.charge_request() else {
            return Err(MppFailure::refused(
                InvalidChallenge,
                "the challenge's request does not decode",
            ));
        };
        if request.amount != ours.amount
            || request.currency != ours.currency
            || request.recipient != ours.recipient
            || request.method_details.chain_id != ours.method_details.chain_id
        {
            return Err(MppFailure::refused(
                InvalidChallenge,
                "the challenge's amount, currency, recipient or chain is not this resource's",
            ));
        }
        let expires = match challenge.expires_unix() {
            Ok(Some(expires)) => expires,
            _ => {
                return Err(MppFailure::refused(
                    InvalidChallenge,
                    "the challenge has no valid expires",
                ));
            }
        };
        // The cached clock first; a refusal is checked once more by the clock read afresh.
        if expires <= self.chain_now(false).await && expires <= self.chain_now(true).await {
            return Err(MppFailure::refused(
                PaymentExpired,
                format!(
                    "the challenge expired at {}",
                    challenge.expires.as_deref().unwrap_or_default()
                ),
            ));
        }
        let payload = &credential.payload;
        let chain_id = ours.method_details.chain_id;
        let mismatch = if payload.to != ours.recipient {
            Some("the authorization's recipient is not the challenge's")
        } else if payload.value != ours.amount.get() {
            Some("the authorization's value is not the challenge's amount")
        } else if payload.nonce != challenge.authorization_nonce() {
            Some("the authorization's nonce is not the challenge's hash")
        } else if credential
            .source
            .as_deref()
            .is_some_and(|s| s != Credential::source_for(chain_id, payload.from))
        {
            Some("the credential's source is not the authorization's signer")
        } else {
            None
        };
        if let Some(detail) = mismatch {
            return Err(MppFailure::refused(VerificationFailed, detail));
        }
        let twin = payload.to_x402_payload(self.wire_network().clone());
        let retry = retry_token(&self.inner.secret, challenge);
        let settled = self
            .settle_x402_as(&twin, offer, price, Resend::No, Some(retry))
            .await
            .map_err(|e| match e {
                X402Failure::Refused(ErrorReason::DuplicateSettlement) => MppFailure::refused(
                    InvalidChallenge,
                    "the challenge was already used: a credential pays for one response",
                ),
                X402Failure::Refused(reason) => MppFailure::refused(
                    VerificationFailed,
                    format!("the payment was refused: {reason}"),
                ),
                e => MppFailure::Settlement(e),
            })?;
        let receipt = Receipt {
            method: mpp::METHOD_EVM.to_owned(),
            reference: settled.transaction.clone(),
            status: "success".to_owned(),
            timestamp: mpp::rfc3339_millis(super::unix_now().saturating_mul(1000)),
            challenge_id: Some(challenge.id.clone()),
            chain_id: Some(chain_id),
            external_id: None,
        };
        Ok((settled, receipt))
    }
}

/// The realm of a resource's challenges: its URL's host (with its port, if any).
fn realm_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split(['/', '?', '#']).next().unwrap_or(rest)
}

/// The retry token of a credential's payment: known to whoever holds the credential (its
/// challenge's id, which only its client was given) and to this gate, nobody else.
fn retry_token(secret: &MemoSecret, challenge: &Challenge) -> RetryToken {
    RetryToken::from(keccak256(
        [
            b"tollgate-gate/mpp/retry".as_slice(),
            &secret.0,
            challenge.id.as_bytes(),
        ]
        .concat(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_realm_is_the_resource_host() {
        assert_eq!(
            realm_of("https://api.example.com/v1/x?y=1"),
            "api.example.com"
        );
        assert_eq!(realm_of("http://127.0.0.1:8080/weather"), "127.0.0.1:8080");
        assert_eq!(realm_of("http://localhost"), "localhost");
    }
}
