//! [`Chain`] for [`Devnet`]: the seam the facilitator, gates and agents use, served from the
//! core in process (reads see only what is durable).

use alloy::{
    consensus::TxEip1559,
    primitives::{Address, B256, Bytes, TxKind, U256},
};
use async_trait::async_trait;
use tollgate_chain::{
    Chain, ChainLog, Confirmation, Error, LogFilter, Receipt, Result, TxRequest, WaitOptions,
};

use crate::{BASE_FEE, Devnet, handle::lock};

#[async_trait]
impl Chain for Devnet {
    fn chain_id(&self) -> u64 {
        self.config.chain_id
    }

    fn signers(&self) -> Vec<Address> {
        lock(&self.wallet).addresses()
    }

    async fn block_number(&self) -> Result<u64> {
        Ok(self.latest_block())
    }

    async fn timestamp(&self) -> Result<u64> {
        Ok(self.with_core(|v| {
            v.block(v.latest())
                .map(|b| b.header.timestamp)
                .unwrap_or_default()
        }))
    }

    async fn balance(&self, account: Address) -> Result<U256> {
        Ok(lock(&self.core).account(account).balance)
    }

    async fn nonce(&self, account: Address) -> Result<u64> {
        Ok(lock(&self.core).pending_nonce(account))
    }

    async fn code(&self, account: Address) -> Result<Bytes> {
        Ok(lock(&self.core).code(account))
    }

    async fn call(&self, from: Option<Address>, to: Address, data: Bytes) -> Result<Bytes> {
        self.simulate(from, Some(to), data, U256::ZERO, None)?
            .into_result()
            .map(|(out, _)| out)
    }

    async fn max_fee_per_gas(&self) -> Result<u128> {
        // What `send` offers: the devnet's base fee never changes.
        Ok(u128::from(BASE_FEE) * 2)
    }

    async fn send(&self, tx: TxRequest) -> Result<B256> {
        let wallet = lock(&self.wallet).clone();
        if !wallet.contains(&tx.from) {
            return Err(Error::UnknownSigner(tx.from));
        }
        let gas = match tx.gas {
            Some(g) => g,
            None => self.estimate_gas(Some(tx.from), tx.to, tx.data.clone(), tx.value)?,
        };
        let send_lock = self.signer_lock(tx.from);
        let _guard = send_lock.lock().await;
        let nonce = lock(&self.core).pending_nonce(tx.from);
        let unsigned = TxEip1559 {
            chain_id: self.config.chain_id,
            nonce,
            gas_limit: gas,
            max_fee_per_gas: u128::from(BASE_FEE) * 2,
            max_priority_fee_per_gas: 0,
            to: tx.to.map_or(TxKind::Create, TxKind::Call),
            value: tx.value,
            input: tx.data,
            access_list: Default::default(),
        };
        let envelope = wallet.sign(tx.from, unsigned)?;
        self.submit(envelope, tx.from)
    }

    async fn receipt(&self, tx_hash: B256) -> Result<Option<Receipt>> {
        let durable = self.durable_seq();
        let core = lock(&self.core);
        Ok(core
            .txs
            .get(&tx_hash)
            .filter(|t| t.seq <= durable)
            .and_then(|_| core.receipt(&tx_hash)))
    }

    async fn knows_transaction(&self, tx_hash: B256) -> Result<bool> {
        let core = lock(&self.core);
        Ok(core.txs.contains_key(&tx_hash)
            || core
                .queued
                .values()
                .any(|q| q.values().any(|(_, h)| *h == tx_hash)))
    }

    async fn logs(&self, filter: &LogFilter) -> Result<Vec<ChainLog>> {
        Ok(self.with_core(|v| v.logs(filter)))
    }

    async fn wait(&self, tx_hash: B256, opts: WaitOptions) -> Result<Confirmation> {
        let deadline = tokio::time::Instant::now() + opts.timeout;
        let mut rx = self.durable.clone();
        loop {
            let durable = *rx.borrow_and_update();
            {
                let core = lock(&self.core);
                // The devnet is final at inclusion (one producer, no reorgs), so any requested
                // depth is met once the block is durable.
                if core.txs.get(&tx_hash).is_some_and(|t| t.seq <= durable) {
                    return Ok(Confirmation::Confirmed(
                        core.receipt(&tx_hash).expect("entry exists"),
                    ));
                }
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::Stopped),
                Err(_) => return Ok(Confirmation::Pending { tx_hash }),
            }
        }
    }

    async fn advance_time(&self, seconds: u64) -> Result<()> {
        Devnet::advance_time(self, seconds).await
    }
}
