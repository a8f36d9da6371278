//! The x402 V1 reason codes a facilitator answers with ([`ErrorReason`]).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! reasons {
    ($($(#[doc = $doc:literal])* $variant:ident = $wire:literal,)*) => {
        /// An x402 V1 facilitator reason code (`invalidReason` of `/verify`, `errorReason` of
        /// `/settle`), spelled as `ErrorReasons` in `x402@1.2.0`
        /// (`typescript/packages/x402/src/types/verify/x402Specs.ts`). A code this list does not
        /// know is kept verbatim in [`ErrorReason::Other`].
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorReason {
            $($(#[doc = $doc])* $variant,)*
            /// A code not in x402 V1's list, kept as received.
            Other(String),
        }

        impl ErrorReason {
            /// Every code x402 V1 lists, in its order.
            pub const KNOWN: &'static [&'static str] = &[$($wire,)*];

            /// The wire spelling.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $wire,)*
                    Self::Other(s) => s,
                }
            }

            /// From the wire spelling; unknown codes become [`ErrorReason::Other`].
            pub fn parse(s: &str) -> Self {
                match s {
                    $($wire => Self::$variant,)*
                    other => Self::Other(other.to_owned()),
                }
            }
        }
    };
}

reasons! {
    /// The payer's balance is below `maxAmountRequired`.
    InsufficientFunds = "insufficient_funds",
    /// `validAfter` is in the future.
    InvalidExactEvmPayloadAuthorizationValidAfter = "invalid_exact_evm_payload_authorization_valid_after",
    /// `validBefore` is past, or too close to now.
    InvalidExactEvmPayloadAuthorizationValidBefore = "invalid_exact_evm_payload_authorization_valid_before",
    /// `value` is below `maxAmountRequired`.
    InvalidExactEvmPayloadAuthorizationValue = "invalid_exact_evm_payload_authorization_value",
    /// The signature does not recover to `from`.
    InvalidExactEvmPayloadSignature = "invalid_exact_evm_payload_signature",
    /// A smart-wallet signature from an undeployed wallet without ERC-6492 deployment data.
    InvalidExactEvmPayloadUndeployedSmartWallet = "invalid_exact_evm_payload_undeployed_smart_wallet",
    /// `to` is not `payTo`.
    InvalidExactEvmPayloadRecipientMismatch = "invalid_exact_evm_payload_recipient_mismatch",
    /// Solana: the transaction is malformed.
    InvalidExactSvmPayloadTransaction = "invalid_exact_svm_payload_transaction",
    /// Solana: the amount differs from the requirements.
    InvalidExactSvmPayloadTransactionAmountMismatch = "invalid_exact_svm_payload_transaction_amount_mismatch",
    /// Solana: bad create-ATA instruction.
    InvalidExactSvmPayloadTransactionCreateAtaInstruction = "invalid_exact_svm_payload_transaction_create_ata_instruction",
    /// Solana: create-ATA for the wrong payee.
    InvalidExactSvmPayloadTransactionCreateAtaInstructionIncorrectPayee = "invalid_exact_svm_payload_transaction_create_ata_instruction_incorrect_payee",
    /// Solana: create-ATA for the wrong asset.
    InvalidExactSvmPayloadTransactionCreateAtaInstructionIncorrectAsset = "invalid_exact_svm_payload_transaction_create_ata_instruction_incorrect_asset",
    /// Solana: bad instructions.
    InvalidExactSvmPayloadTransactionInstructions = "invalid_exact_svm_payload_transaction_instructions",
    /// Solana: wrong number of instructions.
    InvalidExactSvmPayloadTransactionInstructionsLength = "invalid_exact_svm_payload_transaction_instructions_length",
    /// Solana: bad compute-limit instruction.
    InvalidExactSvmPayloadTransactionInstructionsComputeLimitInstruction = "invalid_exact_svm_payload_transaction_instructions_compute_limit_instruction",
    /// Solana: bad compute-price instruction.
    InvalidExactSvmPayloadTransactionInstructionsComputePriceInstruction = "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction",
    /// Solana: compute price too high.
    InvalidExactSvmPayloadTransactionInstructionsComputePriceInstructionTooHigh = "invalid_exact_svm_payload_transaction_instructions_compute_price_instruction_too_high",
    /// Solana: not an SPL `transferChecked`.
    InvalidExactSvmPayloadTransactionInstructionNotSplTokenTransferChecked = "invalid_exact_svm_payload_transaction_instruction_not_spl_token_transfer_checked",
    /// Solana: not a Token-2022 `transferChecked`.
    InvalidExactSvmPayloadTransactionInstructionNotToken2022TransferChecked = "invalid_exact_svm_payload_transaction_instruction_not_token_2022_transfer_checked",
    /// Solana: the fee payer appears in instruction accounts.
    InvalidExactSvmPayloadTransactionFeePayerIncludedInInstructionAccounts = "invalid_exact_svm_payload_transaction_fee_payer_included_in_instruction_accounts",
    /// Solana: the fee payer would transfer funds.
    InvalidExactSvmPayloadTransactionFeePayerTransferringFunds = "invalid_exact_svm_payload_transaction_fee_payer_transferring_funds",
    /// Solana: not a transfer instruction.
    InvalidExactSvmPayloadTransactionNotATransferInstruction = "invalid_exact_svm_payload_transaction_not_a_transfer_instruction",
    /// Solana: receiver token account missing.
    InvalidExactSvmPayloadTransactionReceiverAtaNotFound = "invalid_exact_svm_payload_transaction_receiver_ata_not_found",
    /// Solana: sender token account missing.
    InvalidExactSvmPayloadTransactionSenderAtaNotFound = "invalid_exact_svm_payload_transaction_sender_ata_not_found",
    /// Solana: simulation failed.
    InvalidExactSvmPayloadTransactionSimulationFailed = "invalid_exact_svm_payload_transaction_simulation_failed",
    /// Solana: transfer to the wrong token account.
    InvalidExactSvmPayloadTransactionTransferToIncorrectAta = "invalid_exact_svm_payload_transaction_transfer_to_incorrect_ata",
    /// Unknown or mismatched network.
    InvalidNetwork = "invalid_network",
    /// The payload is malformed.
    InvalidPayload = "invalid_payload",
    /// The requirements are malformed.
    InvalidPaymentRequirements = "invalid_payment_requirements",
    /// Scheme/network combination not handled.
    InvalidScheme = "invalid_scheme",
    /// The payment is invalid (generic).
    InvalidPayment = "invalid_payment",
    /// The payment expired.
    PaymentExpired = "payment_expired",
    /// A scheme other than `exact`.
    UnsupportedScheme = "unsupported_scheme",
    /// An `x402Version` other than 1.
    InvalidX402Version = "invalid_x402_version",
    /// The settlement transaction reverted.
    InvalidTransactionState = "invalid_transaction_state",
    /// Solana: block height exceeded before confirmation.
    SettleExactSvmBlockHeightExceeded = "settle_exact_svm_block_height_exceeded",
    /// Solana: confirmation timed out.
    SettleExactSvmTransactionConfirmationTimedOut = "settle_exact_svm_transaction_confirmation_timed_out",
    /// Settlement failed unexpectedly.
    UnexpectedSettleError = "unexpected_settle_error",
    /// Verification failed unexpectedly.
    UnexpectedVerifyError = "unexpected_verify_error",
    /// The same payment was already settled.
    DuplicateSettlement = "duplicate_settlement",
}

impl fmt::Display for ErrorReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for ErrorReason {}

impl Serialize for ErrorReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorReason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(Self::parse(&s))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reasons_round_trip_and_unknown_ones_survive() {
        for s in ErrorReason::KNOWN {
            let r = ErrorReason::parse(s);
            assert!(!matches!(r, ErrorReason::Other(_)), "{s}");
            assert_eq!(r.as_str(), *s);
            assert_eq!(serde_json::to_value(&r).unwrap(), json!(s));
            assert_eq!(serde_json::from_value::<ErrorReason>(json!(s)).unwrap(), r);
        }
        let other: ErrorReason = serde_json::from_value(json!("permit2_invalid_spender")).unwrap();
        assert_eq!(other, ErrorReason::Other("permit2_invalid_spender".into()));
        assert_eq!(
            serde_json::to_value(&other).unwrap(),
            json!("permit2_invalid_spender")
        );
        assert_eq!(
            ErrorReason::InvalidExactEvmPayloadRecipientMismatch.to_string(),
            "invalid_exact_evm_payload_recipient_mismatch"
        );
    }
}
