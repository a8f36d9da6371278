//! Billing metered usage on-chain: the keeper's batches of `chargeOverage`, the closing of a
//! cycle before its renewal, and the crash-safe sending of each charge (see [the module
//! docs](super)).

use alloy::{
    primitives::{Address, B256, U256, keccak256},
    sol_types::{SolCall, SolValue},
};
use tollgate_chain::{
    Confirmation, Error as ChainError, Revert, TxRequest, WaitOptions, contracts,
};

use crate::{
    facilitator::{Network, unix_now},
    store::{AllowanceCycle, ChargeOutcome, MAX_METERED, NewCharge, OverageCharge, StoreError},
    subscriptions::Subscriptions,
};

/// Cycles billed per keeper run and network.
const BILL_BATCH: u32 = 512;

/// The on-chain idempotency reference of the `index`-th charge (from 0) of `(id, cycle)`:
/// `keccak256(abi.encode("tollgate.overage", id, cycle, index))`.
pub fn charge_reference(id: B256, cycle: u32, index: u32) -> B256 {
    keccak256(("tollgate.overage".to_owned(), id, cycle, index).abi_encode_params())
}

/// What a keeper run's metering pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MeteringReport {
    /// Charges confirmed on-chain.
    pub charged: usize,
    /// Charges that failed for good (recorded as unpaid).
    pub unpaid: usize,
    /// Charges sent but not confirmed in time (sent again next run).
    pub pending: usize,
    /// Errors (chain or store); the next run retries.
    pub errors: usize,
}

/// How sending one charge ended.
enum Sent {
    Finished(bool),
    Pending,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum MeteringError {
    #[error("chain: {0}")]
    Chain(#[from] ChainError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl From<MeteringError> for crate::error::Error {
    fn from(e: MeteringError) -> Self {
        match e {
            MeteringError::Chain(e) => Self::Chain(e),
            MeteringError::Store(e) => Self::Store(e),
        }
    }
}

impl Subscriptions {
    /// The keeper's metering pass over one network: sends pending charges again (after a crash
    /// or a slow confirmation), then bills every cycle due a batch.
    pub(crate) async fn settle_overage(&self, net: &Network, subs: Address) -> MeteringReport {
        let mut report = MeteringReport::default();
        let name = net.spec.name.as_str();
        let settings = self.core.settings();
        let result: Result<(), MeteringError> = async {
            for charge in self.core.store().pending_charges(name, BILL_BATCH).await? {
                self.tally(&mut report, self.send_charge(net, subs, &charge).await);
            }
            let cutoff = unix_now().saturating_sub(settings.overage_batch_interval.as_secs());
            let due = self
                .core
                .store()
                .cycles_to_bill(name, settings.overage_batch_amount, cutoff, BILL_BATCH)
                .await?;
            for row in due {
                let sent = self.bill(net, subs, &row).await;
                self.tally(&mut report, sent);
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(network = name, error = %e, "metering: store unavailable");
            report.errors += 1;
        }
        report
    }

    fn count(report: &mut MeteringReport, sent: Option<Sent>) {
        match sent {
            Some(Sent::Finished(true)) => report.charged += 1,
            Some(Sent::Finished(false)) => report.unpaid += 1,
            Some(Sent::Pending) => report.pending += 1,
            None => {}
        }
    }

    fn tally(&self, report: &mut MeteringReport, sent: Result<Option<Sent>, MeteringError>) {
        match sent {
            Ok(sent) => Self::count(report, sent),
            Err(e) => {
                tracing::warn!(error = %e, "metering: charge attempt failed; retrying next run");
                report.errors += 1;
            }
        }
    }

    /// Closes the ending cycle `cycle` of `id` (cap `cap`) and settles all of its usage, before
    /// the keeper renews the subscription. `Ok(true)` when nothing of the cycle is left pending.
    pub(crate) async fn close_cycle(
        &self,
        net: &Network,
        subs: Address,
        id: B256,
        cycle: u32,
        cap: U256,
        report: &mut MeteringReport,
    ) -> Result<bool, MeteringError> {
        let name = net.spec.name.as_str();
        let cap = u64::try_from(cap).unwrap_or(MAX_METERED);
        let row = self
            .core
            .store()
            .upsert_allowance_cycle(name, id, cycle, cap, true, unix_now())
            .await?;
        let mut settled = true;
        for charge in self.core.store().overage_charges(name, id, cycle).await? {
            if charge.state == crate::store::ChargeState::Pending {
                let sent = self.send_charge(net, subs, &charge).await?;
                settled &= !matches!(sent, Some(Sent::Pending));
                Self::count(report, sent);
            }
        }
        if !settled {
            return Ok(false);
        }
        if row.unbilled() > 0 {
            // Re-read: a deduction may have landed between the select and the close.
            let row = self
                .core
                .store()
                .allowance_cycle(name, id, cycle)
                .await?
                .unwrap_or(row);
            let sent = self.bill(net, subs, &row).await?;
            let pending = matches!(sent, Some(Sent::Pending));
            Self::count(report, sent);
            if pending {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Starts and sends one charge of a cycle's unbilled usage. `None` when there was nothing to
    /// bill or another charge started first.
    async fn bill(
        &self,
        net: &Network,
        subs: Address,
        row: &AllowanceCycle,
    ) -> Result<Option<Sent>, MeteringError> {
        let amount = row.unbilled();
        if amount == 0 {
            return Ok(None);
        }
        let name = net.spec.name.as_str();
        let chain = net.chain.as_ref();
        let sub = contracts::read(
            chain,
            subs,
            &contracts::Subscriptions::subscriptionsCall { id: row.id },
        )
        .await?;
        let owner = self.core.store().plan_owner(name, sub.planId).await?;
        let reference = charge_reference(row.id, row.cycle, row.charges);
        let charge = NewCharge {
            network: name.to_owned(),
            id: row.id,
            cycle: row.cycle,
            index: row.charges,
            reference,
            amount,
            relayer: owner.as_ref().map_or(Address::ZERO, |o| o.relayer),
            at: unix_now(),
        };
        if !self.core.store().begin_charge(&charge).await? {
            return Ok(None);
        }
        crate::fault::hit("charge.after-begin");
        let pending = OverageCharge {
            network: charge.network,
            reference,
            id: row.id,
            cycle: row.cycle,
            amount,
            relayer: charge.relayer,
            state: crate::store::ChargeState::Pending,
            tx_hash: None,
            error: None,
        };
        // Settled elsewhere since (the cycle moved on, or no plan of ours): owed, not collectable.
        let refused = if owner.is_none() {
            Some("NotOperator: the plan was not created through this facilitator".to_owned())
        } else if sub.cycle != row.cycle {
            Some(format!(
                "WrongCycle: the subscription is in cycle {}",
                sub.cycle
            ))
        } else {
            None
        };
        if let Some(error) = refused {
            return self
                .finish(name, &pending, ChargeOutcome::Failed { error })
                .await
                .map(Some);
        }
        self.send_charge(net, subs, &pending).await
    }

    /// Sends a pending charge (again) and records how it ended.
    async fn send_charge(
        &self,
        net: &Network,
        subs: Address,
        c: &OverageCharge,
    ) -> Result<Option<Sent>, MeteringError> {
        let name = net.spec.name.as_str();
        // Sent from the plan's operator only, whose nonces are its lease holder's to use; the
        // keeper runs where that lease is held, so a charge skipped here is sent there.
        if !self.core.holds_relayer(c.relayer).await {
            tracing::warn!(relayer = %c.relayer, "overage charge left to the replica holding its relayer");
            return Ok(None);
        }
        let call = contracts::Subscriptions::chargeOverageCall {
            id: c.id,
            cycle: c.cycle,
            amount: U256::from(c.amount),
            r#ref: c.reference,
        };
        let tx = TxRequest::call(c.relayer, subs, call.abi_encode());
        let opts = WaitOptions {
            confirmations: net.spec.confirmations.max(1),
            timeout: self.core.settings().confirmation_timeout,
        };
        let outcome = match net.chain.send_and_wait(tx, opts).await {
            Ok(Confirmation::Confirmed(r)) if r.success => {
                crate::fault::hit("charge.after-receipt");
                ChargeOutcome::Confirmed {
                    tx_hash: Some(r.tx_hash),
                }
            }
            // Reverted on-chain after a clean simulation: a race; the next run decides.
            Ok(Confirmation::Confirmed(_)) | Ok(Confirmation::Pending { .. }) => {
                return Ok(Some(Sent::Pending));
            }
            Err(ChainError::Revert(Revert::ChargeAlreadyApplied { .. })) => {
                ChargeOutcome::Confirmed { tx_hash: None }
            }
            Err(ChainError::Revert(r)) => ChargeOutcome::Failed {
                error: format!("{}: {r}", r.name()),
            },
            Err(e) => return Err(e.into()),
        };
        self.finish(name, c, outcome).await.map(Some)
    }

    async fn finish(
        &self,
        network: &str,
        c: &OverageCharge,
        outcome: ChargeOutcome,
    ) -> Result<Sent, MeteringError> {
        self.core
            .store()
            .finish_charge(network, c.reference, &outcome, unix_now())
            .await?;
        let ok = matches!(outcome, ChargeOutcome::Confirmed { .. });
        match &outcome {
            ChargeOutcome::Confirmed { tx_hash } => tracing::info!(
                network, id = %c.id, cycle = c.cycle, amount = c.amount, tx_hash = ?tx_hash,
                "metering: overage charged"
            ),
            ChargeOutcome::Failed { error } => tracing::warn!(
                network, id = %c.id, cycle = c.cycle, amount = c.amount, %error,
                "metering: overage charge failed; recorded as unpaid"
            ),
        }
        Ok(Sent::Finished(ok))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_differ_per_subscription_cycle_and_index() {
        let id = B256::repeat_byte(1);
        let r = charge_reference(id, 1, 0);
        assert_ne!(r, charge_reference(id, 1, 1));
        assert_ne!(r, charge_reference(id, 2, 0));
        assert_ne!(r, charge_reference(B256::repeat_byte(2), 1, 0));
        assert_eq!(r, charge_reference(id, 1, 0));
    }
}
