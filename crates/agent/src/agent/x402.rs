//! The plain x402 path: an `exact` payment signed to the offer's `payTo`, as x402 clients sign
//! it, sent as an x402 V1 payload (`X-PAYMENT`) or, for an offer read from a V2
//! `PAYMENT-REQUIRED`, as a V2 one (`PAYMENT-SIGNATURE`) that repeats the accepted entry.

use alloy::primitives::{B256, U256};
use tollgate_chain::authorization::{TransferWithAuthorization, sign, token_domain};
use tollgate_protocol::{
    Amount,
    x402::{
        ExactEvmAuthorization, ExactEvmPayload, PaymentPayload, PaymentRequirements, RetryToken,
        SCHEME_EXACT, X402_VERSION,
        v2::{self, PAYMENT_IDENTIFIER, PaymentPayloadV2},
    },
};

use super::{Agent, MIN_VALIDITY_SECS, VALID_AFTER_SKEW_SECS, unix_now};
use crate::{
    Error, Payment, PaymentKind, Result,
    terms::{Offer, V2Offer},
};

/// The longest validity the agent gives an x402 authorization.
const MAX_X402_VALIDITY_SECS: u64 = 3600;

impl Agent {
    /// "Now" for an x402 authorization's window: the chain's clock, as the facilitator that
    /// settles the offer publishes it (`service.facilitator`'s `chainTime`, the offset the agent
    /// keeps for `/authorize` too), so that a window the facilitator accepts is the one signed
    /// even when the chain runs ahead of this machine (a devnet after time travel). The local
    /// clock, as x402 clients use, for an offer that names no facilitator the agent may use or
    /// whose facilitator cannot be read.
    pub(super) async fn x402_now(&self, offer: &Offer) -> u64 {
        let local = unix_now();
        let network = &offer.requirements.network;
        let Some(base) = offer
            .facilitator
            .as_deref()
            .and_then(|f| self.usable_facilitator(f))
        else {
            // An offer that names none (a generic x402 server): the clock of a facilitator this
            // agent has read for the network, if any.
            return self.known_chain_now(network, local).unwrap_or(local);
        };
        match self.well_known(&base).await {
            Ok(wk) => wk
                .network(&offer.requirements.network)
                .map_or(local, |net| wk.chain_now(net, local)),
            Err(e) => {
                tracing::debug!(error = %e, facilitator = %base, "no chain clock: signing the x402 window by the local clock");
                local
            }
        }
    }

    /// "Now" on `network` by the discovery document of a facilitator the agent already holds
    /// (read for an earlier payment or subscription), if one serves it.
    fn known_chain_now(&self, network: &str, local: u64) -> Option<u64> {
        // A cache: a poisoned map is still a valid map.
        let clients = self.inner.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients.values().find_map(|c| {
            let d = c.cached_discovery()?;
            let net = d.network(network)?;
            Some(d.chain_now(net, local))
        })
    }

    /// Signs an `exact` payment as x402 clients do, its window from `now` ([`Agent::x402_now`]):
    /// V1, or V2 for an offer read from a V2 402 (with a fresh `payment-identifier` when the
    /// 402 declares the extension, so that a resend of the same payment is answered its first
    /// outcome). The payment gets a fresh [`RetryToken`], sent with it.
    pub(super) fn sign_x402(
        &self,
        r: &PaymentRequirements,
        chain_id: u64,
        v2: Option<&V2Offer>,
        now: u64,
    ) -> Result<Payment> {
        let extra = r
            .eip712_extra()
            .ok_or(Error::NoAcceptableOption { offered: 1 })?;
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
        let (header, x402_version) = match v2 {
            None => (payload.encode_header(), X402_VERSION),
            Some(offer) => {
                let extensions = offer.payment_identifier.then(|| {
                    let id = format!("pay_{}", alloy::hex::encode(B256::random().0));
                    serde_json::Map::from_iter([(
                        PAYMENT_IDENTIFIER.to_owned(),
                        serde_json::json!({ "info": { "required": false, "id": id } }),
                    )])
                });
                let v2 = PaymentPayloadV2 {
                    x402_version: v2::X402_VERSION_2,
                    resource: Some(offer.resource.clone()),
                    accepted: offer.accepted.clone(),
                    payload: payload.payload,
                    extensions,
                };
                (v2.encode_header(), v2::X402_VERSION_2)
            }
        };
        Ok(Payment {
            kind: PaymentKind::X402,
            amount: r.max_amount_required,
            fee: None,
            network: r.network.to_string(),
            token: r.asset,
            payer: self.inner.address,
            pay_to: r.pay_to,
            memo: None,
            tx_hash: None,
            proof: None,
            header,
            settlement: None,
            x402_version: Some(x402_version),
            retry_token: Some(RetryToken::random()),
            metered: None,
            mpp_receipt: None,
        })
    }
}
