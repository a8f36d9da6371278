//! The stateless checks of an `exact` EVM payment against its requirements
//! ([`check_exact_evm`]).

use alloy::primitives::U256;

use super::{
    ErrorReason, PaymentPayload, PaymentRequirements, SCHEME_EXACT, VALID_BEFORE_SLACK_SECS,
    X402_VERSION,
};
use crate::{Amount, network};

/// The checks of an `exact` EVM payment against its requirements that need no chain, in the
/// coinbase V1 facilitator's order (`src/schemes/exact/evm/facilitator.ts`), at unix time `now`:
///
/// - `x402Version` is 1 (`invalid_x402_version`);
/// - both schemes are `exact` (`unsupported_scheme`);
/// - the payload's network is the requirements' (`invalid_network`; `base-mainnet` and `base`
///   are one network). coinbase does not compare them; it signs with the payload's chain, so a
///   mismatch could only fail later and less clearly;
/// - `to == payTo` (`invalid_exact_evm_payload_recipient_mismatch`);
/// - `validBefore >= now + 6` (`invalid_exact_evm_payload_authorization_valid_before`);
/// - `validAfter <= now` (`invalid_exact_evm_payload_authorization_valid_after`);
/// - `value >= maxAmountRequired` (`invalid_exact_evm_payload_authorization_value`): coinbase
///   accepts paying more than asked for on EVM (its Solana path insists on equality); x402
///   clients always sign exactly `maxAmountRequired`; a zero `maxAmountRequired` is refused
///   (`invalid_payment_requirements`): it would settle nothing at the relayer's gas cost.
///
/// Left to the caller: the EIP-712 signature (`invalid_exact_evm_payload_signature`), the
/// balance (`insufficient_funds`), nonce reuse, and whether the network and asset are ones it
/// settles.
pub fn check_exact_evm(
    payload: &PaymentPayload,
    requirements: &PaymentRequirements,
    now: u64,
) -> Result<(), ErrorReason> {
    if payload.x402_version != X402_VERSION {
        return Err(ErrorReason::InvalidX402Version);
    }
    if payload.scheme != SCHEME_EXACT || requirements.scheme != SCHEME_EXACT {
        return Err(ErrorReason::UnsupportedScheme);
    }
    if !network::same_network(&payload.network, &requirements.network) {
        return Err(ErrorReason::InvalidNetwork);
    }
    let auth = &payload.payload.authorization;
    if auth.to != requirements.pay_to {
        return Err(ErrorReason::InvalidExactEvmPayloadRecipientMismatch);
    }
    let now_u = U256::from(now);
    if auth.valid_before.get() < now_u.saturating_add(U256::from(VALID_BEFORE_SLACK_SECS)) {
        return Err(ErrorReason::InvalidExactEvmPayloadAuthorizationValidBefore);
    }
    if auth.valid_after.get() > now_u {
        return Err(ErrorReason::InvalidExactEvmPayloadAuthorizationValidAfter);
    }
    if requirements.max_amount_required == Amount::ZERO {
        // A zero price settles nothing and would let anyone make the relayer pay gas for it.
        return Err(ErrorReason::InvalidPaymentRequirements);
    }
    if auth.value < requirements.max_amount_required {
        return Err(ErrorReason::InvalidExactEvmPayloadAuthorizationValue);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use alloy::primitives::Address;

    use crate::fixtures::{NOW, payload, requirements};

    use super::*;

    #[test]
    fn a_fresh_payment_passes() {
        assert_eq!(check_exact_evm(&payload(), &requirements(), NOW), Ok(()));
    }

    #[test]
    fn each_check_has_its_reason() {
        let r = requirements();
        type Mutation = fn(&mut PaymentPayload, &mut PaymentRequirements);
        let cases: Vec<(Mutation, ErrorReason)> = vec![
            (|p, _| p.x402_version = 2, ErrorReason::InvalidX402Version),
            (
                |p, _| p.scheme = "upto".into(),
                ErrorReason::UnsupportedScheme,
            ),
            (
                |_, r| r.scheme = "subscription".into(),
                ErrorReason::UnsupportedScheme,
            ),
            (
                |p, _| p.network = "base".parse().unwrap(),
                ErrorReason::InvalidNetwork,
            ),
            (
                |p, _| p.payload.authorization.to = Address::repeat_byte(9),
                ErrorReason::InvalidExactEvmPayloadRecipientMismatch,
            ),
            (
                |p, _| p.payload.authorization.valid_before = Amount::from_units(NOW + 5),
                ErrorReason::InvalidExactEvmPayloadAuthorizationValidBefore,
            ),
            (
                |p, _| p.payload.authorization.valid_after = Amount::from_units(NOW + 1),
                ErrorReason::InvalidExactEvmPayloadAuthorizationValidAfter,
            ),
            (
                |p, _| p.payload.authorization.value = Amount::from_units(9_999),
                ErrorReason::InvalidExactEvmPayloadAuthorizationValue,
            ),
        ];
        for (i, (mutate, reason)) in cases.into_iter().enumerate() {
            let (mut p, mut r) = (payload(), r.clone());
            mutate(&mut p, &mut r);
            assert_eq!(check_exact_evm(&p, &r, NOW), Err(reason), "case {i}");
        }
    }

    #[test]
    fn boundaries_follow_the_coinbase_facilitator() {
        let r = requirements();
        let mut p = payload();
        // validBefore == now + 6 is still fine; validAfter == now too.
        p.payload.authorization.valid_before = Amount::from_units(NOW + VALID_BEFORE_SLACK_SECS);
        p.payload.authorization.valid_after = Amount::from_units(NOW);
        assert_eq!(check_exact_evm(&p, &r, NOW), Ok(()));
        // Paying more than asked is accepted.
        p.payload.authorization.value = Amount::from_units(10_001);
        assert_eq!(check_exact_evm(&p, &r, NOW), Ok(()));
        // Aliases are one network.
        p.network = "base-mainnet".parse().unwrap();
        let mut r = r;
        r.network = "base".parse().unwrap();
        assert_eq!(check_exact_evm(&p, &r, NOW), Ok(()));
        // A huge validBefore does not overflow.
        p.payload.authorization.valid_before = Amount(U256::MAX);
        assert_eq!(check_exact_evm(&p, &r, u64::MAX), Ok(()));
    }
}
