//! The plain x402 path: an x402 V1 `exact` payment signed to the offer's `payTo`, as x402
//! clients sign it.

use alloy::primitives::{B256, U256};
use tollgate_chain::authorization::{TransferWithAuthorization, sign, token_domain};
use tollgate_protocol::{
    Amount,
    x402::{
        ExactEvmAuthorization, ExactEvmPayload, PaymentPayload, PaymentRequirements, SCHEME_EXACT,
        X402_VERSION,
    },
};

use super::{Agent, MIN_VALIDITY_SECS, VALID_AFTER_SKEW_SECS, unix_now};
use crate::{Error, Payment, PaymentKind, Result};

/// The longest validity the agent gives an x402 authorization.
const MAX_X402_VALIDITY_SECS: u64 = 3600;

impl Agent {
    /// Signs an x402 V1 `exact` payment as x402 clients do.
    pub(super) fn sign_x402(&self, r: &PaymentRequirements, chain_id: u64) -> Result<Payment> {
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
