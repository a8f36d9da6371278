//! Several nodes of one chain behind one [`Chain`]: [`FailoverChain`].
//!
//! Every call goes to the first healthy node, in configuration order (the primary while it is
//! up). A node that cannot be reached ([`Error::Unavailable`]: refused, timed out, a transport
//! error) or fails internally (JSON-RPC `-32603`, `-32005`) is marked down for [`FailoverOptions::cool_down`] and the call is made again on the next
//! one, so that a node outage is a failover, not an error. A node's own answers (a revert, a
//! JSON-RPC error, a refused transaction) are answers, never retried elsewhere. A node marked
//! down is tried again once its cool-down ends (a passive health check: the first call after it
//! is the probe); when every node is down, the one that has been down longest is tried anyway.
//!
//! - **Sends**: a transaction whose broadcast failed on one node is signed again on the next with
//!   that node's view of the sender's nonce; a broadcast that reached the first node before it
//!   failed then exists twice with one nonce (one is dropped) or with two (the second does
//!   nothing: every call Tollgate relays is single-use on-chain, an EIP-3009 nonce or a
//!   subscription cycle). The sender's cached nonces are dropped on every failover.
//! - **Receipts**: each one comes from the node that answered, with the depth counted against
//!   that node's own head, so a node behind the others never confirms a block it does not have.
//! - **Waits**: a wait goes on in slices of a few seconds, the nodes' health checked between
//!   them, so one that loses its node goes on against the next for the rest of its time.

use std::{
    fmt,
    future::Future,
    pin::Pin,
    sync::Mutex,
    time::{Duration, Instant},
};

use alloy::primitives::{Address, B256, Bytes, U256};
use async_trait::async_trait;

use crate::{
    BlockRef, Chain, ChainLog, Confirmation, Error, LogFilter, Receipt, Result, TxRequest,
    WaitOptions,
};

/// How a [`FailoverChain`] treats a node that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailoverOptions {
    /// How long a node that could not be reached is skipped (default 5 s).
    pub cool_down: Duration,
}

impl Default for FailoverOptions {
    fn default() -> Self {
        Self {
            cool_down: Duration::from_secs(5),
        }
    }
}

/// One node and its health.
struct Node {
    chain: std::sync::Arc<dyn Chain>,
    /// Skipped until then, after a failure.
    down_until: Mutex<Option<Instant>>,
}

/// A [`Chain`] over several nodes of one chain, failing over between them (see the
/// [module docs](self)).
pub struct FailoverChain {
    nodes: Vec<Node>,
    chain_id: u64,
    options: FailoverOptions,
}

impl fmt::Debug for FailoverChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailoverChain")
            .field(
                "nodes",
                &self.nodes.iter().map(|n| &n.chain).collect::<Vec<_>>(),
            )
            .field("chain_id", &self.chain_id)
            .finish_non_exhaustive()
    }
}

impl FailoverChain {
    /// Fails over between `nodes` (at least one), in order of preference. Every node must serve
    /// the same chain and hold the same signers.
    pub fn new(nodes: Vec<std::sync::Arc<dyn Chain>>, options: FailoverOptions) -> Result<Self> {
        let Some(first) = nodes.first() else {
            return Err(Error::InvalidInput("a failover chain needs a node".into()));
        };
        let chain_id = first.chain_id();
        if let Some(other) = nodes.iter().find(|n| n.chain_id() != chain_id) {
            return Err(Error::InvalidInput(format!(
                "nodes of different chains: {chain_id} and {}",
                other.chain_id()
            )));
        }
        Ok(Self {
            nodes: nodes
                .into_iter()
                .map(|chain| Node {
                    chain,
                    down_until: Mutex::new(None),
                })
                .collect(),
            chain_id,
            options,
        })
    }

    /// Whether each node is up (not in its cool-down), in order.
    pub fn health(&self) -> Vec<bool> {
        let now = Instant::now();
        self.nodes
            .iter()
            .map(|n| lock(&n.down_until).is_none_or(|t| t <= now))
            .collect()
    }

    /// The order to try the nodes in now: the healthy ones in configuration order, then the
    /// ones cooling down, soonest back first.
    fn order(&self) -> Vec<usize> {
        let now = Instant::now();
        let mut up = Vec::with_capacity(self.nodes.len());
        let mut down = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            match *lock(&n.down_until) {
                Some(t) if t > now => down.push((t, i)),
                _ => up.push(i),
            }
        }
        down.sort();
        up.extend(down.into_iter().map(|(_, i)| i));
        up
    }

    fn mark_down(&self, i: usize, error: &Error) {
        let mut until = lock(&self.nodes[i].down_until);
        if until.is_none_or(|t| t <= Instant::now()) {
            tracing::warn!(node = ?self.nodes[i].chain, %error, cool_down = ?self.options.cool_down, "chain node unreachable; failing over");
        }
        *until = Some(Instant::now() + self.options.cool_down);
        // The next node's view of the relayers' nonces is read afresh.
        for n in &self.nodes {
            for s in n.chain.signers() {
                n.chain.forget_nonce(s);
            }
        }
    }

    fn mark_up(&self, i: usize) {
        let mut until = lock(&self.nodes[i].down_until);
        if until.take().is_some() {
            tracing::info!(node = ?self.nodes[i].chain, "chain node reachable again");
        }
    }

    /// Runs `call` on the nodes in [`order`](Self::order) until one answers.
    async fn run<'a, T, F>(&'a self, call: F) -> Result<T>
    where
        F: Fn(&'a dyn Chain) -> NodeCall<'a, T>,
    {
        let mut last = None;
        for i in self.order() {
            match call(&*self.nodes[i].chain).await {
                Err(e) if outage(&e) => {
                    self.mark_down(i, &e);
                    last = Some(e);
                }
                other => {
                    self.mark_up(i);
                    return other;
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::Unavailable("no chain node".into())))
    }
}

/// Whether an error means the node is out (rather than answering): unreachable, timed out, or
/// failing internally (JSON-RPC `-32603` internal error, `-32005` limit exceeded).
fn outage(e: &Error) -> bool {
    matches!(
        e,
        Error::Unavailable(_)
            | Error::Rpc {
                code: -32603 | -32005,
                ..
            }
    )
}

/// The longest a wait stays with one node before the nodes' health is checked again.
const WAIT_SLICE: Duration = Duration::from_secs(2);

/// A call on one node (what the [`Chain`] methods return).
type NodeCall<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[async_trait]
impl Chain for FailoverChain {
    fn chain_id(&self) -> u64 {
        self.chain_id
    }

    fn signers(&self) -> Vec<Address> {
        self.nodes[0].chain.signers()
    }

    async fn block_number(&self) -> Result<u64> {
        self.run(|c| c.block_number()).await
    }

    async fn timestamp(&self) -> Result<u64> {
        self.run(|c| c.timestamp()).await
    }

    async fn balance(&self, account: Address) -> Result<U256> {
        self.run(|c| c.balance(account)).await
    }

    async fn nonce(&self, account: Address) -> Result<u64> {
        self.run(|c| c.nonce(account)).await
    }

    async fn code(&self, account: Address) -> Result<Bytes> {
        self.run(|c| c.code(account)).await
    }

    async fn max_fee_per_gas(&self) -> Result<u128> {
        self.run(|c| c.max_fee_per_gas()).await
    }

    async fn call(&self, from: Option<Address>, to: Address, data: Bytes) -> Result<Bytes> {
        self.run(|c| c.call(from, to, data.clone())).await
    }

    async fn block_ref(&self, number: Option<u64>) -> Result<Option<BlockRef>> {
        self.run(|c| c.block_ref(number)).await
    }

    async fn call_at(&self, to: Address, data: Bytes, block: B256) -> Result<Bytes> {
        self.run(|c| c.call_at(to, data.clone(), block)).await
    }

    async fn call_with_code(
        &self,
        to: Address,
        data: Bytes,
        accounts: Vec<(Address, Bytes)>,
    ) -> Result<Bytes> {
        self.run(|c| c.call_with_code(to, data.clone(), accounts.clone()))
            .await
    }

    async fn send(&self, tx: TxRequest) -> Result<B256> {
        self.run(|c| c.send(tx.clone())).await
    }

    async fn receipt(&self, tx_hash: B256) -> Result<Option<Receipt>> {
        self.run(|c| c.receipt(tx_hash)).await
    }

    async fn knows_transaction(&self, tx_hash: B256) -> Result<bool> {
        self.run(|c| c.knows_transaction(tx_hash)).await
    }

    async fn logs(&self, filter: &LogFilter) -> Result<Vec<ChainLog>> {
        self.run(|c| c.logs(filter)).await
    }

    async fn wait(&self, tx_hash: B256, opts: WaitOptions) -> Result<Confirmation> {
        // A node's own wait rides out its failures (it keeps polling through any error: a
        // failed poll is no verdict on the transaction), so a node that went down mid-wait, or
        // fails only its receipts, would hold the whole wait: wait in slices, and between them
        // ask the nodes for the receipt, which fails such a node over.
        let deadline = Instant::now() + opts.timeout;
        loop {
            let slice = deadline
                .saturating_duration_since(Instant::now())
                .min(WAIT_SLICE);
            let outcome = self
                .run(|c| {
                    c.wait(
                        tx_hash,
                        WaitOptions {
                            timeout: slice,
                            ..opts
                        },
                    )
                })
                .await?;
            if matches!(outcome, Confirmation::Confirmed(_)) || Instant::now() >= deadline {
                return Ok(outcome);
            }
            let _ = self.receipt(tx_hash).await;
        }
    }

    fn forget_nonce(&self, account: Address) {
        for n in &self.nodes {
            n.chain.forget_nonce(account);
        }
    }

    async fn advance_time(&self, seconds: u64) -> Result<()> {
        self.run(|c| c.advance_time(seconds)).await
    }
}
