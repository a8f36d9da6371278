//! The status URL of a settlement, and the recovery that drives unfinished settlements to their
//! end: always by asking the chain for the payment's `PaymentSettled` event.

use alloy::{primitives::B256, sol_types::SolEvent};
use tollgate_chain::{Receipt, contracts::PaymentRouter};
use tollgate_protocol::SettlementStatus;

use super::{Outcome, check_claim, proofs::stored_proof};
use crate::{
    error::{Error, Result},
    facilitator::{Network, unix_now},
    settle::Settlements,
    store::{NewSettlement, Settlement, SettlementKind},
};

impl Settlements {
    /// The status URL: the proof once confirmed, pending otherwise (driving it forward). A
    /// settlement bound to a claim answers only with its `token` (`keccak256(claim)`). Only
    /// `/authorize` (router) settlements have one: any other key (an x402 `/settle`, which has
    /// no proof) is answered 404 as an unknown key is, so the answer tells nothing apart.
    pub async fn status(&self, key: B256, token: Option<B256>) -> Result<Outcome> {
        let row = self
            .core
            .store
            .settlement(key)
            .await?
            .filter(|row| row.new.kind == SettlementKind::Router)
            .ok_or_else(no_settlement)?;
        check_claim(&row, token)?;
        self.drive_settlement(row).await
    }

    /// Drives a stored router settlement forward: the proof once confirmed, pending otherwise.
    async fn drive_settlement(&self, row: Settlement) -> Result<Outcome> {
        if row.new.kind != SettlementKind::Router {
            // Not this path's to drive (an x402 settlement finishes in its `/settle`).
            return Err(no_settlement());
        }
        if row.status == SettlementStatus::Confirmed {
            return stored_proof(&row);
        }
        let net = self
            .core
            .network(&row.new.network)
            .ok_or_else(|| Error::internal("stored settlement names an unconfigured network"))?;
        let key = row.new.key;
        let _guard = self.core.locks.lock(key).await;
        // Another request (or the reconciler) may have moved it on while this one waited: a
        // dropped transaction is sent again once, not once per waiter.
        let row = self.core.store.settlement(key).await?.unwrap_or(row);
        match row.status {
            SettlementStatus::Submitted | SettlementStatus::Pending => {
                if let Some(receipt) = self.find_settlement_event(net, &row.new).await? {
                    return self.confirm(net, &row.new, &receipt).await;
                }
                match row.tx_hash {
                    Some(h) if self.dropped(net, h).await? => self.send_again(net, &row).await,
                    tx_hash => Ok(Outcome::Pending { key, tx_hash }),
                }
            }
            _ => self.resume(net, row).await,
        }
    }

    /// Drives unfinished `/authorize` settlements (left by a crash or a slow chain) to their end:
    /// confirmed with a proof, or failed once their authorization expired unused. Rows younger
    /// than twice the confirmation timeout are left to their request. Returns how many finished.
    pub async fn reconcile(&self) -> usize {
        let rows = match self.core.store.unfinished(100).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "reconcile: store unavailable");
                return 0;
            }
        };
        let settle_after = 2 * self.core.settings.confirmation_timeout.as_secs().max(1);
        let mut finished = 0;
        for row in rows {
            if row.new.kind != SettlementKind::Router
                || unix_now() < row.new.created_at + settle_after
            {
                continue;
            }
            let key = row.new.key;
            match self.drive_settlement(row).await {
                Ok(Outcome::Confirmed { .. }) => finished += 1,
                Ok(Outcome::Pending { .. }) => {}
                Err(e) if e.is_client_error() => finished += 1,
                Err(e) => {
                    tracing::warn!(%key, error = %e, "reconcile: settlement still unresolved")
                }
            }
        }
        if finished > 0 {
            tracing::info!(finished, "reconciled unfinished settlements");
        }
        finished
    }

    /// Finds this payment's `PaymentSettled` event on-chain (by memo, payer and payee), checking
    /// amount and fee, with the receipt of its transaction at the configured depth.
    pub(super) async fn find_settlement_event(
        &self,
        net: &Network,
        new: &NewSettlement,
    ) -> Result<Option<Receipt>> {
        self.settlement_event_at(net, new, net.spec.confirmations)
            .await
    }

    /// This payment's `PaymentSettled` at least `depth` blocks deep, within the lookback.
    pub(super) async fn settlement_event_at(
        &self,
        net: &Network,
        new: &NewSettlement,
        depth: u64,
    ) -> Result<Option<Receipt>> {
        let topics = [
            Some(vec![PaymentRouter::PaymentSettled::SIGNATURE_HASH]),
            Some(vec![new.memo]),
            Some(vec![new.payer.into_word()]),
            Some(vec![new.pay_to.into_word()]),
        ];
        let same_terms = |l: &tollgate_chain::ChainLog| {
            PaymentRouter::PaymentSettled::decode_log(&l.log)
                .is_ok_and(|ev| ev.amount == new.amount.get() && ev.fee == new.fee.get())
        };
        net.find_at_depth(
            net.spec.router,
            topics,
            self.core.settings.log_lookback_blocks,
            depth,
            same_terms,
        )
        .await
        .map_err(Error::from)
    }

    /// Whether the node still has `tx_hash` (mined or waiting); one it does not know was
    /// dropped, or reorged out and not queued again.
    pub(super) async fn dropped(&self, net: &Network, tx_hash: B256) -> Result<bool> {
        let known = net.chain.knows_transaction(tx_hash).await?;
        if !known {
            tracing::warn!(%tx_hash, "settlement transaction unknown to the node");
        }
        Ok(!known)
    }
}

/// 404 for a key without a router settlement.
fn no_settlement() -> Error {
    Error::NotFound("no settlement with this key".into())
}
