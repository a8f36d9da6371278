//! The JSON-RPC backend: [`RpcChain`] speaks standard Ethereum JSON-RPC to any EVM node (anvil in
//! tests, Base in production).
//!
//! - Transactions are signed here with the [`Wallet`]'s keys and broadcast with
//!   `eth_sendRawTransaction`; the node never holds a key.
//! - Relayer nonces: a per-sender async lock guards a cached next nonce (read once from the
//!   pending transaction count) across signing and broadcast, so concurrent sends from one key
//!   never collide. A failed broadcast drops the cache; "nonce too low" re-reads it and retries
//!   once; a wait that times out drops every cache (the node may have dropped the transaction,
//!   and a cached nonce past it would stall the sender behind the gap).
//! - Fees: EIP-1559 from `eth_feeHistory`: `2 × next base fee + the median tip of the last
//!   blocks`, cached for a second, never above [`RpcOptions::max_fee_per_gas`] when set. A
//!   transaction a base-fee rise priced out while it waited is sent again with the same nonce at a
//!   bumped fee ([`Chain::wait`] does it, and follows every version to the one mined).
//! - A node answering `429 Too Many Requests` is asked again after a pause (its `Retry-After`,
//!   else an exponential backoff), a few times, within the request's timeout.
//! - Gas: estimated with a margin, which also simulates the call: a transaction that would revert
//!   is refused with [`Error::Revert`] before broadcast.
//! - Every request is bounded by [`RpcOptions::request_timeout`]; [`Chain::wait`] by its own
//!   timeout, after which it reports [`Confirmation::Pending`], and it re-checks the inclusion
//!   block after the requested depth so a reorged-out transaction is waited for again.
//! - Credentials in the node URL (a password in the user info, a token in the path, a key in the
//!   query, as hosted nodes take them) are sent to the node and nowhere else: logs, spans, errors
//!   and `Debug` name the node by `scheme://host:port` only (see [`RpcChain::endpoint`]). alloy's
//!   own HTTP transport records the whole URL in a debug-level span and reqwest's errors print
//!   it, so the requests go through a transport of our own here instead.
//!
//! This module holds [`RpcChain`] and its reads; `calls` the `eth_call`s (batched when they come
//! together); `send` the fees, gas and relayer nonces;
//! `receipts` the receipts and the wait for depth; `transport` the HTTP transport; `errors` the
//! reading of the node's errors ([`map_rpc_error`]).

mod calls;
mod errors;
mod receipts;
mod send;
mod transport;

use std::{
    borrow::Cow,
    collections::{BTreeMap, HashMap},
    fmt,
    future::IntoFuture,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use alloy::{
    eips::BlockNumberOrTag,
    network::TransactionBuilder,
    primitives::{Address, B256, Bytes, U256},
    providers::{Provider, RootProvider},
    rpc::{
        client::RpcClient,
        types::{Filter, TransactionRequest},
    },
    transports::{TransportResult, utils::guess_local_url},
};
use async_trait::async_trait;
use reqwest::Url;
use serde_json::Value;

use errors::is_method_missing;
pub use errors::map_rpc_error;
use send::{Fees, NonceSlot, SentSlot};
use transport::{NodeTransport, redacted};

use crate::{
    BlockRef, Chain, ChainLog, Confirmation, Error, LogFilter, Receipt, Result, TxRequest,
    WaitOptions, Wallet,
};

/// How an [`RpcChain`] talks to its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcOptions {
    /// The chain id the node must report; `None` accepts whatever it reports.
    pub chain_id: Option<u64>,
    /// Bound on every single request (default 10 s).
    pub request_timeout: Duration,
    /// How often [`Chain::wait`] polls for a receipt once past its first quick polls (default
    /// 50 ms); on a chain whose blocks come slower than every 400 ms, an eighth of the block
    /// time instead (at most 1 s), learnt from the blocks the fees are read from.
    pub poll_interval: Duration,
    /// Gas limit as a percentage of the node's estimate (default 125).
    pub gas_multiplier_percent: u64,
    /// The most a transaction may offer per gas (its max fee), in wei; `None` (the default)
    /// offers what the fee market asks. A base fee above it sends nothing
    /// ([`Error::FeeCapExceeded`]); a transaction priced out later is re-priced up to it.
    pub max_fee_per_gas: Option<u128>,
}

impl Default for RpcOptions {
    fn default() -> Self {
        Self {
            chain_id: None,
            request_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_millis(50),
            gas_multiplier_percent: 125,
            max_fee_per_gas: None,
        }
    }
}

/// A [`Chain`] over an EVM node's JSON-RPC endpoint. Create it with [`RpcChain::connect`].
pub struct RpcChain {
    provider: RootProvider,
    /// `eth_call`s, sent together when they come together.
    calls_out: calls::Calls,
    /// The endpoint without path, query or credentials (hosted nodes put API keys there).
    endpoint: String,
    chain_id: u64,
    wallet: Wallet,
    options: RpcOptions,
    /// Whether the node's chain id was checked ([`RpcChain::connect_lazy`] defers it).
    checked: AtomicBool,
    nonces: Mutex<HashMap<Address, NonceSlot>>,
    fees: Mutex<Option<(Instant, Fees)>>,
    /// Held while the fees are read from the node, so that the requests that find them stale
    /// together wait for one reading instead of each asking (on a node 80 ms away, every send
    /// of those 80 ms would). Holds when the last reading was tried, and its error if it failed.
    fees_reading: tokio::sync::Mutex<Option<(Instant, Option<Error>)>>,
    /// Our transactions not yet seen mined, by the hash of each version sent.
    sent: Mutex<HashMap<B256, SentSlot>>,
    timestamps: Mutex<HashMap<B256, u64>>,
    /// Requests sent, by JSON-RPC method ([`RpcChain::calls`]).
    calls: Mutex<BTreeMap<&'static str, u64>>,
    /// HTTP requests sent ([`RpcChain::http_requests`]).
    posts: Arc<AtomicU64>,
    /// The blocks seen, for the chain's block time (receipt polling follows it).
    block_clock: Mutex<Option<receipts::BlockClock>>,
    /// Per confirmation depth, how long waits for it took lately (receipt polling follows it).
    waits: Mutex<Vec<(u64, Duration)>>,
}

impl fmt::Debug for RpcChain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RpcChain")
            .field("endpoint", &self.endpoint)
            .field("chain_id", &self.chain_id)
            .field("wallet", &self.wallet)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // The guarded maps hold plain caches: a panic elsewhere cannot leave them inconsistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
impl RpcChain {
    /// Connects to the node at `url` (http or https), reads its chain id and checks it against
    /// `options.chain_id`. Transactions are signed with `wallet`'s keys.
    pub async fn connect(url: &str, wallet: Wallet, options: RpcOptions) -> Result<Self> {
        let mut chain = Self::new(url, wallet, options)?;
        let reported = chain
            .bounded("eth_chainId", chain.provider.get_chain_id())
            .await?;
        if let Some(expected) = chain.options.chain_id
            && expected != reported
        {
            return Err(Error::Rejected(format!(
                "the node at {} serves chain id {reported}, expected {expected}",
                chain.endpoint
            )));
        }
        chain.chain_id = reported;
        chain.checked.store(true, Ordering::Release);
        Ok(chain)
    }

    /// Like [`connect`](Self::connect) for a node that may be down now (a fallback node):
    /// nothing is sent until the first request, which checks the node's chain id against
    /// `chain_id` first; until that check passes, every request fails as
    /// [`Error::Unavailable`] (a node of another chain is never used).
    pub fn connect_lazy(
        url: &str,
        chain_id: u64,
        wallet: Wallet,
        options: RpcOptions,
    ) -> Result<Self> {
        let mut chain = Self::new(
            url,
            wallet,
            RpcOptions {
                chain_id: Some(chain_id),
                ..options
            },
        )?;
        chain.chain_id = chain_id;
        Ok(chain)
    }

    fn new(url: &str, wallet: Wallet, options: RpcOptions) -> Result<Self> {
        let parsed: Url = url
            .parse()
            .map_err(|e| Error::InvalidInput(format!("node URL: {e}")))?;
        let endpoint = redacted(&parsed);
        // HTTPS nodes: reqwest is built without a bundled crypto provider; install ring once per
        // process (an error only means one is installed already).
        crate::install_crypto_provider();
        let is_local = guess_local_url(&parsed);
        let posts = Arc::new(AtomicU64::new(0));
        let transport = NodeTransport {
            client: reqwest::Client::new(),
            url: Arc::new(parsed),
            endpoint: endpoint.clone().into(),
            posts: Arc::clone(&posts),
        };
        let provider = RootProvider::new(RpcClient::new(transport, is_local));
        Ok(Self {
            calls_out: calls::Calls::new(provider.clone(), options.request_timeout),
            provider,
            endpoint,
            chain_id: 0,
            wallet,
            options,
            checked: AtomicBool::new(false),
            nonces: Mutex::default(),
            fees: Mutex::default(),
            fees_reading: tokio::sync::Mutex::default(),
            sent: Mutex::default(),
            timestamps: Mutex::default(),
            calls: Mutex::default(),
            posts,
            block_clock: Mutex::default(),
            waits: Mutex::default(),
        })
    }

    /// Checks the node's chain id once ([`connect_lazy`](Self::connect_lazy)).
    async fn check_chain_id(&self) -> Result<()> {
        let reported = self
            .bounded("eth_chainId", self.provider.get_chain_id())
            .await?;
        if reported != self.chain_id {
            tracing::error!(node = %self.endpoint, reported, expected = self.chain_id, "the node serves another chain; it is not used");
            return Err(Error::Unavailable(format!(
                "the node at {} serves chain id {reported}, expected {}",
                self.endpoint, self.chain_id
            )));
        }
        self.checked.store(true, Ordering::Release);
        Ok(())
    }

    /// The endpoint, without path or query (which may carry credentials).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The requests sent to the node so far, by JSON-RPC method (each counted when sent,
    /// answered or not). Hosted nodes bill and rate-limit per call: this is what the
    /// facilitator's work costs there (the benches report it per settlement).
    pub fn calls(&self) -> BTreeMap<&'static str, u64> {
        lock(&self.calls).clone()
    }

    /// The HTTP requests sent to the node so far: fewer than [`calls`](Self::calls) when
    /// concurrent `eth_call`s went together as JSON-RPC batches.
    pub fn http_requests(&self) -> u64 {
        self.posts.load(Ordering::Relaxed)
    }

    /// Bounds a request by the request timeout and maps its error; the node's chain id is
    /// checked first when it was not yet.
    async fn request<T>(
        &self,
        method: &'static str,
        call: impl IntoFuture<Output = TransportResult<T>>,
    ) -> Result<T> {
        if !self.checked.load(Ordering::Acquire) {
            self.check_chain_id().await?;
        }
        self.bounded(method, call).await
    }

    /// A request bounded by the request timeout, its error mapped.
    async fn bounded<T>(
        &self,
        method: &'static str,
        call: impl IntoFuture<Output = TransportResult<T>>,
    ) -> Result<T> {
        *lock(&self.calls).entry(method).or_default() += 1;
        match tokio::time::timeout(self.options.request_timeout, call.into_future()).await {
            Ok(result) => result.map_err(map_rpc_error),
            Err(_) => Err(Error::Unavailable(format!(
                "{method} to {}: no answer within {:?}",
                self.endpoint, self.options.request_timeout
            ))),
        }
    }
}

#[async_trait]
impl Chain for RpcChain {
    fn chain_id(&self) -> u64 {
        self.chain_id
    }

    fn signers(&self) -> Vec<Address> {
        self.wallet.addresses()
    }

    async fn block_number(&self) -> Result<u64> {
        self.request("eth_blockNumber", self.provider.get_block_number())
            .await
    }

    async fn timestamp(&self) -> Result<u64> {
        self.latest_header_fees().await.map(|(t, _)| t)
    }

    async fn balance(&self, account: Address) -> Result<U256> {
        self.request(
            "eth_getBalance",
            self.provider.get_balance(account).latest(),
        )
        .await
    }

    async fn nonce(&self, account: Address) -> Result<u64> {
        self.pending_count(account).await
    }

    async fn code(&self, account: Address) -> Result<Bytes> {
        self.request("eth_getCode", self.provider.get_code_at(account).latest())
            .await
    }

    async fn call(&self, from: Option<Address>, to: Address, data: Bytes) -> Result<Bytes> {
        let mut request = TransactionRequest::default().with_to(to).with_input(data);
        if let Some(from) = from {
            request = request.with_from(from);
        }
        self.request("eth_call", self.calls_out.call(request)).await
    }

    async fn block_ref(&self, number: Option<u64>) -> Result<Option<BlockRef>> {
        let tag = number.map_or(BlockNumberOrTag::Latest, BlockNumberOrTag::Number);
        let block = self
            .request(
                "eth_getBlockByNumber",
                self.provider.get_block_by_number(tag),
            )
            .await?;
        Ok(block.map(|b| {
            // Only the latest block moves the chain's clock (an older one would reset the block
            // time it measures).
            if number.is_none() {
                self.observe_block(b.header.number, b.header.timestamp);
            }
            BlockRef {
                number: b.header.number,
                hash: b.header.hash,
                parent_hash: b.header.parent_hash,
                timestamp: b.header.timestamp,
            }
        }))
    }

    async fn call_at(&self, to: Address, data: Bytes, block: B256) -> Result<Bytes> {
        let request = TransactionRequest::default().with_to(to).with_input(data);
        // `requireCanonical`: a block reorged out is an error, not a state to read.
        let at =
            alloy::eips::BlockId::Hash(alloy::eips::RpcBlockHash::from_hash(block, Some(true)));
        self.request("eth_call", self.provider.call(request).block(at))
            .await
    }

    async fn call_with_code(
        &self,
        to: Address,
        data: Bytes,
        accounts: Vec<(Address, Bytes)>,
    ) -> Result<Bytes> {
        let request = TransactionRequest::default().with_to(to).with_input(data);
        let overrides = accounts.into_iter().fold(
            alloy::rpc::types::state::StateOverridesBuilder::default(),
            |o, (account, code)| {
                o.with_code(account, code)
                    .with_nonce(account, 0)
                    .with_state(account, [])
            },
        );
        let call = self
            .provider
            .call(request)
            .overrides(overrides.build())
            .block(alloy::eips::BlockId::latest());
        self.request("eth_call", call).await
    }

    async fn max_fee_per_gas(&self) -> Result<u128> {
        self.fees().await.map(|f| f.max_fee_per_gas)
    }

    async fn send(&self, tx: TxRequest) -> Result<B256> {
        self.send_transaction(tx).await
    }

    /// The receipt of `tx_hash`, or of the version of it mined when it was sent again at a
    /// higher fee (see [`Chain::wait`]): its `tx_hash` is then that version's.
    async fn receipt(&self, tx_hash: B256) -> Result<Option<Receipt>> {
        for version in self.versions(tx_hash) {
            let receipt = self
                .request(
                    "eth_getTransactionReceipt",
                    self.provider.get_transaction_receipt(version),
                )
                .await?;
            if let Some(r) = receipt
                && let Some(r) = self.convert_receipt(r).await?
            {
                return Ok(Some(r));
            }
        }
        Ok(None)
    }

    async fn knows_transaction(&self, tx_hash: B256) -> Result<bool> {
        for version in self.versions(tx_hash) {
            let tx = self
                .request(
                    "eth_getTransactionByHash",
                    self.provider.get_transaction_by_hash(version),
                )
                .await?;
            if tx.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn logs(&self, filter: &LogFilter) -> Result<Vec<ChainLog>> {
        let mut query = Filter::new().from_block(filter.from_block).to_block(
            filter
                .to_block
                .map_or(BlockNumberOrTag::Latest, BlockNumberOrTag::Number),
        );
        if !filter.addresses.is_empty() {
            query = query.address(filter.addresses.clone());
        }
        for (i, topic) in filter.topics.iter().enumerate() {
            if let Some(values) = topic.as_ref().filter(|v| !v.is_empty()) {
                query.topics[i] = values.clone().into();
            }
        }
        let logs = self
            .request("eth_getLogs", self.provider.get_logs(&query))
            .await?;
        Ok(logs
            .into_iter()
            .filter(|l| !l.removed)
            .filter_map(|l| {
                Some(ChainLog {
                    block_number: l.block_number?,
                    tx_hash: l.transaction_hash?,
                    log_index: l.log_index?,
                    log: l.inner,
                })
            })
            .collect())
    }

    async fn wait(&self, tx_hash: B256, opts: WaitOptions) -> Result<Confirmation> {
        self.wait_confirmed(tx_hash, opts).await
    }

    fn forget_nonce(&self, account: Address) {
        self.forget_nonce_of(account);
    }

    async fn advance_time(&self, seconds: u64) -> Result<()> {
        let unsupported = |e: Error| match e {
            Error::Rpc { code, ref message } if is_method_missing(code, message) => {
                Error::Unsupported("time travel (evm_increaseTime, evm_mine)")
            }
            e => e,
        };
        let before = self.block_number().await?;
        let _: Value = self
            .request(
                "evm_increaseTime",
                self.provider
                    .raw_request(Cow::Borrowed("evm_increaseTime"), (seconds,)),
            )
            .await
            .map_err(unsupported)?;
        let _: Value = self
            .request(
                "evm_mine",
                self.provider.raw_request(Cow::Borrowed("evm_mine"), ()),
            )
            .await
            .map_err(unsupported)?;
        // Return once the mined block is visible (a node may answer `evm_mine` before its new
        // block is served, as a journaling devnet does until the block is durable).
        let deadline = Instant::now() + self.options.request_timeout;
        while self.block_number().await? <= before {
            if Instant::now() >= deadline {
                return Err(Error::Unavailable(format!(
                    "evm_mine on {} left the latest block at {before}",
                    self.endpoint
                )));
            }
            tokio::time::sleep(self.options.poll_interval.min(Duration::from_millis(10))).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unreachable_node_is_unavailable() {
        // Bind then drop a listener: the port is closed, the connection is refused.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = RpcChain::connect(
            &format!("http://127.0.0.1:{port}"),
            Wallet::default(),
            RpcOptions::default(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, Error::Unavailable(_)), "{err:?}");
    }
}
