//! How an x402 settlement ends in the store (pending, failed, dropped, confirmed), and what used
//! an authorization by the token's logs (the transfer of exactly this payment, or another's).

use super::*;

impl X402 {
    /// Records that a settlement is not confirmed yet; answered as a failure naming the
    /// transaction (`invalid_transaction_state`), which a repeat picks up.
    pub(super) async fn x402_pending(
        &self,
        key: B256,
        tx_hash: B256,
    ) -> (ErrorReason, Option<B256>) {
        let at = unix_now();
        let _ = self.core.store.mark_submitted(key, tx_hash, at).await;
        let _ = self.core.store.mark_pending(key, at).await;
        (ErrorReason::InvalidTransactionState, Some(tx_hash))
    }

    pub(super) async fn x402_failed(&self, key: B256, error: &str) {
        if let Err(e) = self.core.store.mark_failed(key, error, unix_now()).await {
            tracing::error!(error = %e, "store unavailable recording a failed settlement");
        }
    }

    pub(super) async fn x402_dropped(
        &self,
        net: &Network,
        tx_hash: B256,
    ) -> Result<bool, (ErrorReason, Option<B256>)> {
        let known = net
            .chain
            .knows_transaction(tx_hash)
            .await
            .map_err(|e| (verify_chain_error(&e), Some(tx_hash)))?;
        if !known {
            tracing::warn!(%tx_hash, "x402 settlement transaction unknown to the node");
        }
        Ok(!known)
    }

    /// Records a confirmed x402 settlement once the receipt shows this authorization used and
    /// its transfer moving exactly this payer's value to this payee.
    pub(super) async fn x402_confirmed(
        &self,
        new: &NewSettlement,
        receipt: &Receipt,
    ) -> Result<B256, (ErrorReason, Option<B256>)> {
        if !transfers_exactly(receipt, new) {
            tracing::error!(tx = %receipt.tx_hash, "settlement receipt lacks this payment's transfer");
            return Err((ErrorReason::UnexpectedSettleError, None));
        }
        // The row is there (recorded before the send, or read under the lock): confirmed in
        // one write. The store refuses a row recorded for another payment.
        let confirm = || {
            self.core.store.confirm_settlement(
                new,
                receipt.tx_hash,
                receipt.block_number,
                None,
                unix_now(),
            )
        };
        let mut confirmed = confirm().await;
        if confirmed.as_ref().is_err_and(StoreError::is_row_not_found) {
            // No row for this very payment: recorded now, unless the key holds another.
            match self.core.store.insert_settlement(new).await {
                Ok(recorded) if recorded.row.new.request_hash != new.request_hash => {
                    return Err((ErrorReason::InvalidTransactionState, None));
                }
                Ok(_) => confirmed = confirm().await,
                Err(e) => {
                    tracing::error!(error = %e, "store unavailable recording a settlement");
                    return Err((ErrorReason::UnexpectedSettleError, Some(receipt.tx_hash)));
                }
            }
        }
        match confirmed {
            Ok(confirmed) => {
                crate::fault::hit("settle.after-confirm");
                let tx = confirmed.row.tx_hash.unwrap_or(receipt.tx_hash);
                // One success per payment, decided by the store (replicas share no lock): the
                // first settler's when it named itself (its retries too), else the caller
                // whose confirmation recorded it. Another caller carrying the same payment at
                // the same time (a repeat balanced to another replica) is told it was settled.
                let ours = match confirmed.row.new.claim_hash {
                    Some(first) => new.claim_hash == Some(first),
                    None => confirmed.first,
                };
                if ours {
                    Ok(tx)
                } else {
                    Err((ErrorReason::DuplicateSettlement, Some(tx)))
                }
            }
            Err(e) => {
                // On chain it is settled, but unrecorded: not answered as a success, so that the
                // retry (which finds the transfer on chain) records it and is answered.
                tracing::error!(error = %e, "store unavailable recording a confirmed settlement");
                Err((ErrorReason::UnexpectedSettleError, Some(receipt.tx_hash)))
            }
        }
    }

    /// The transaction that used this authorization (`AuthorizationUsed(from, nonce)`) at least
    /// `depth` blocks deep, if its transfer is exactly this payment.
    pub(super) async fn find_transfer(
        &self,
        net: &Network,
        new: &NewSettlement,
        depth: u64,
    ) -> Result<Option<Receipt>, ErrorReason> {
        let topics = [
            Some(vec![Token::AuthorizationUsed::SIGNATURE_HASH]),
            Some(vec![new.payer.into_word()]),
            Some(vec![new.nonce]),
            None,
        ];
        let found = net
            .find_at_depth(
                net.spec.token,
                topics,
                self.core.settings.log_lookback_blocks,
                depth,
                |_| true,
            )
            .await
            .map_err(|e| verify_chain_error(&e))?;
        Ok(found.filter(|r| transfers_exactly(r, new)))
    }

    /// What used `new`'s authorization, which the latest state shows used. The logs may lag
    /// behind that state (a node that indexes a block after applying it, or logs read from
    /// another node behind a balancer or after a failover): they are looked at again, backing
    /// off, until they show the use or the confirmation timeout passes. Only a log naming
    /// another transfer (or a cancellation) makes it someone else's.
    pub(super) async fn find_use(
        &self,
        net: &Network,
        new: &NewSettlement,
    ) -> Result<Use, (ErrorReason, Option<B256>)> {
        let topics = [
            Some(vec![
                Token::AuthorizationUsed::SIGNATURE_HASH,
                Token::AuthorizationCanceled::SIGNATURE_HASH,
            ]),
            Some(vec![new.payer.into_word()]),
            Some(vec![new.nonce]),
            None,
        ];
        let deadline = std::time::Instant::now() + self.core.settings.confirmation_timeout;
        let mut pause = std::time::Duration::from_millis(10);
        loop {
            let found = net
                .find_at_depth(
                    net.spec.token,
                    topics.clone(),
                    self.core.settings.log_lookback_blocks,
                    1,
                    |_| true,
                )
                .await
                .map_err(|e| (verify_chain_error(&e), None))?;
            match found {
                Some(r) if transfers_exactly(&r, new) => return Ok(Use::This(r)),
                Some(_) => return Ok(Use::Other),
                None if std::time::Instant::now() >= deadline => return Ok(Use::Unseen),
                None => {}
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(250));
        }
    }
}

/// What used an authorization, by the logs ([`X402::find_use`]).
pub(super) enum Use {
    /// This payment's transfer, in this (mined) transaction.
    This(Receipt),
    /// Another transfer, or a cancellation.
    Other,
    /// No log shows it within the confirmation timeout.
    Unseen,
}

/// Whether `receipt` uses `new`'s authorization and the token's `Transfer` that follows that use
/// (EIP-3009 emits `AuthorizationUsed` then `Transfer`, as USDC does) moves exactly `new`'s value
/// from its payer to its payee.
pub(super) fn transfers_exactly(receipt: &Receipt, new: &NewSettlement) -> bool {
    let logs: Vec<_> = receipt
        .logs
        .iter()
        .filter(|l| l.address == new.token)
        .collect();
    logs.windows(2).any(|pair| {
        Token::AuthorizationUsed::decode_log(pair[0])
            .is_ok_and(|u| u.authorizer == new.payer && u.nonce == new.nonce)
            && Token::Transfer::decode_log(pair[1]).is_ok_and(|t| {
                t.from == new.payer && t.to == new.pay_to && t.value == new.amount.get()
            })
    })
}
