//! Payment proofs: issued and stored when a settlement confirms, answered again from the store,
//! and checked for gates that prefer to ask (`POST /proofs/verify`).

use alloy::sol_types::SolEvent;
use tollgate_chain::{Receipt, contracts::PaymentRouter};
use tollgate_protocol::{PaymentProof, SettlementStatus, api::authorize::VerifyProofResponse};

use super::{Outcome, settlement_key};
use crate::{
    error::{Error, Result},
    facilitator::{Network, unix_now},
    settle::Settlements,
    store::{NewSettlement, Settlement},
};

impl Settlements {
    /// Checks the receipt carries this payment's `PaymentSettled`, issues and stores the proof.
    pub(super) async fn confirm(
        &self,
        net: &Network,
        new: &NewSettlement,
        receipt: &Receipt,
    ) -> Result<Outcome> {
        let settled = receipt
            .logs
            .iter()
            .filter(|l| l.address == net.spec.router)
            .any(|l| {
                PaymentRouter::PaymentSettled::decode_log(l).is_ok_and(|ev| {
                    ev.memo == new.memo
                        && ev.from == new.payer
                        && ev.payTo == new.pay_to
                        && ev.amount == new.amount.get()
                        && ev.fee == new.fee.get()
                })
            });
        if !settled {
            return Err(Error::internal(format!(
                "receipt {} lacks the expected PaymentSettled event",
                receipt.tx_hash
            )));
        }
        crate::fault::hit("authorize.after-receipt");
        let issued_at = unix_now().max(receipt.block_timestamp);
        let mut proof = PaymentProof {
            version: 1,
            network: net.name.clone(),
            chain_id: net.spec.chain_id,
            token: net.spec.token,
            payer: new.payer,
            pay_to: new.pay_to,
            amount: new.amount,
            fee: new.fee,
            memo: new.memo,
            tx_hash: receipt.tx_hash,
            block: receipt.block_number,
            issued_at,
            expiry: issued_at + self.core.settings.proof_ttl_secs,
            signer: alloy::primitives::Address::ZERO,
            signature: Default::default(),
        };
        tollgate_chain::proof::sign(&self.core.proof_signer, &mut proof)
            .map_err(Error::internal)?;
        let encoded = proof.encode();
        let stored = self
            .core
            .store
            .mark_confirmed(
                new,
                receipt.tx_hash,
                receipt.block_number,
                Some(&encoded),
                unix_now(),
            )
            .await?;
        crate::fault::hit("authorize.after-confirm");
        // First proof wins: a concurrent replica may have confirmed it already.
        stored_proof(&stored)
    }

    /// Checks a proof (`X-PAYMENT` form) for a gate that prefers to ask: its signature against
    /// this facilitator's proof signer, its expiry, and that this facilitator issued it for a
    /// confirmed settlement. An invalid proof is a `valid: false` answer, not an error.
    pub(crate) async fn verify_proof(&self, encoded: &str) -> Result<VerifyProofResponse> {
        let invalid = |reason: String, payment: Option<PaymentProof>| VerifyProofResponse {
            valid: false,
            reason: Some(reason),
            payment,
        };
        let proof = match PaymentProof::decode(encoded) {
            Ok(p) => p,
            Err(e) => return Ok(invalid(e.to_string(), None)),
        };
        match tollgate_chain::proof::recover(&proof) {
            Ok(signer) if signer == self.core.proof_signer() && proof.signer == signer => {}
            Ok(_) => {
                return Ok(invalid(
                    "not signed by this facilitator's proof key".into(),
                    Some(proof),
                ));
            }
            Err(e) => return Ok(invalid(format!("signature: {e}"), Some(proof))),
        }
        if proof.expiry <= unix_now() {
            return Ok(invalid("the proof has expired".into(), Some(proof)));
        }
        let key = settlement_key(
            proof.chain_id,
            proof.token,
            proof.payer,
            tollgate_chain::authorization::router_nonce(proof.pay_to, proof.memo, proof.fee.get()),
        );
        match self.core.store().settlement(key).await? {
            Some(row)
                if row.status == SettlementStatus::Confirmed
                    && row.tx_hash == Some(proof.tx_hash) =>
            {
                Ok(VerifyProofResponse {
                    valid: true,
                    reason: None,
                    payment: Some(proof),
                })
            }
            _ => Ok(invalid(
                "no confirmed settlement matches this proof".into(),
                Some(proof),
            )),
        }
    }
}

/// The stored proof of a confirmed settlement.
pub(super) fn stored_proof(row: &Settlement) -> Result<Outcome> {
    let proof = row
        .proof
        .clone()
        .ok_or_else(|| Error::internal("confirmed settlement without a proof"))?;
    let payment = PaymentProof::decode(&proof).map_err(Error::internal)?;
    Ok(Outcome::Confirmed {
        proof,
        payment: Box::new(payment),
    })
}
