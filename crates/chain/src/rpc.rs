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
//! - Fees: EIP-1559, `2 × latest base fee + eth_maxPriorityFeePerGas`, cached for a second.
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

use std::{
    borrow::Cow,
    collections::HashMap,
    fmt,
    future::IntoFuture,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use alloy::{
    consensus::TxEip1559,
    eips::{BlockId, BlockNumberOrTag, Encodable2718},
    network::TransactionBuilder,
    primitives::{Address, B256, Bytes, TxKind, U256},
    providers::{Provider, RootProvider},
    rpc::{
        client::RpcClient,
        json_rpc::{RequestPacket, ResponsePacket},
        types::{Filter, TransactionReceipt, TransactionRequest},
    },
    transports::{
        RpcError, TransportError, TransportErrorKind, TransportFut, TransportResult,
        utils::guess_local_url,
    },
};
use async_trait::async_trait;
use reqwest::Url;
use serde_json::Value;
use tracing::Instrument as _;

use crate::{
    Chain, ChainLog, Confirmation, Error, LogFilter, Receipt, Result, TxRequest, WaitOptions,
    Wallet, contracts::Revert,
};

/// Priority fee used when the node does not implement `eth_maxPriorityFeePerGas` (1 gwei).
const FALLBACK_PRIORITY_FEE: u128 = 1_000_000_000;
/// How long a fee estimate is reused.
const FEE_TTL: Duration = Duration::from_secs(1);
/// Most block timestamps remembered (by block hash) before the cache is cleared.
const TIMESTAMP_CACHE: usize = 4096;

/// How an [`RpcChain`] talks to its node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcOptions {
    /// The chain id the node must report; `None` accepts whatever it reports.
    pub chain_id: Option<u64>,
    /// Bound on every single request (default 10 s).
    pub request_timeout: Duration,
    /// How often [`Chain::wait`] polls for a receipt (default 50 ms).
    pub poll_interval: Duration,
    /// Gas limit as a percentage of the node's estimate (default 125).
    pub gas_multiplier_percent: u64,
}

impl Default for RpcOptions {
    fn default() -> Self {
        Self {
            chain_id: None,
            request_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_millis(50),
            gas_multiplier_percent: 125,
        }
    }
}

/// EIP-1559 fees for the next transactions.
#[derive(Clone, Copy, Debug)]
struct Fees {
    max_fee_per_gas: u128,
    max_priority_fee_per_gas: u128,
}

/// A sender's next nonce, when known; guarded by the sender's send lock.
type NonceSlot = Arc<tokio::sync::Mutex<Option<u64>>>;

/// A [`Chain`] over an EVM node's JSON-RPC endpoint. Create it with [`RpcChain::connect`].
pub struct RpcChain {
    provider: RootProvider,
    /// The endpoint without path, query or credentials (hosted nodes put API keys there).
    endpoint: String,
    chain_id: u64,
    wallet: Wallet,
    options: RpcOptions,
    nonces: Mutex<HashMap<Address, NonceSlot>>,
    fees: Mutex<Option<(Instant, Fees)>>,
    timestamps: Mutex<HashMap<B256, u64>>,
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
        let parsed: Url = url
            .parse()
            .map_err(|e| Error::InvalidInput(format!("node URL: {e}")))?;
        let endpoint = redacted(&parsed);
        // HTTPS nodes: reqwest is built without a bundled crypto provider; install ring once per
        // process (an error only means one is installed already).
        crate::install_crypto_provider();
        let is_local = guess_local_url(&parsed);
        let transport = NodeTransport {
            client: reqwest::Client::new(),
            url: Arc::new(parsed),
            endpoint: endpoint.clone().into(),
        };
        let provider = RootProvider::new(RpcClient::new(transport, is_local));
        let mut chain = Self {
            provider,
            endpoint,
            chain_id: 0,
            wallet,
            options,
            nonces: Mutex::default(),
            fees: Mutex::default(),
            timestamps: Mutex::default(),
        };
        let reported = chain
            .request("eth_chainId", chain.provider.get_chain_id())
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
        Ok(chain)
    }

    /// The endpoint, without path or query (which may carry credentials).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Bounds a request by the request timeout and maps its error.
    async fn request<T>(
        &self,
        method: &str,
        call: impl IntoFuture<Output = TransportResult<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.options.request_timeout, call.into_future()).await {
            Ok(result) => result.map_err(map_rpc_error),
            Err(_) => Err(Error::Unavailable(format!(
                "{method} to {}: no answer within {:?}",
                self.endpoint, self.options.request_timeout
            ))),
        }
    }

    async fn latest_header_fees(&self) -> Result<(u64, Option<u64>)> {
        let block = self
            .request(
                "eth_getBlockByNumber",
                self.provider.get_block_by_number(BlockNumberOrTag::Latest),
            )
            .await?
            .ok_or_else(|| Error::Unavailable("the node has no latest block".into()))?;
        Ok((block.header.timestamp, block.header.base_fee_per_gas))
    }

    /// EIP-1559 fees: twice the latest base fee plus the node's suggested tip; cached briefly.
    async fn fees(&self) -> Result<Fees> {
        if let Some((at, fees)) = *lock(&self.fees)
            && at.elapsed() < FEE_TTL
        {
            return Ok(fees);
        }
        let priority = match self
            .request(
                "eth_maxPriorityFeePerGas",
                self.provider.get_max_priority_fee_per_gas(),
            )
            .await
        {
            Ok(p) => p,
            Err(Error::Rpc { .. }) => FALLBACK_PRIORITY_FEE,
            Err(e) => return Err(e),
        };
        let (_, base_fee) = self.latest_header_fees().await?;
        let base_fee = match base_fee {
            Some(b) => u128::from(b),
            // A node without EIP-1559 blocks: its gas price stands in for the base fee.
            None => {
                self.request("eth_gasPrice", self.provider.get_gas_price())
                    .await?
            }
        };
        let fees = Fees {
            max_fee_per_gas: base_fee.saturating_mul(2).saturating_add(priority),
            max_priority_fee_per_gas: priority,
        };
        *lock(&self.fees) = Some((Instant::now(), fees));
        Ok(fees)
    }

    fn nonce_slot(&self, from: Address) -> NonceSlot {
        lock(&self.nonces).entry(from).or_default().clone()
    }

    /// Drops every cached next nonce not in use by a send right now.
    fn forget_nonces(&self) {
        for slot in lock(&self.nonces).values() {
            if let Ok(mut next) = slot.try_lock() {
                *next = None;
            }
        }
    }

    async fn pending_count(&self, account: Address) -> Result<u64> {
        self.request(
            "eth_getTransactionCount",
            self.provider.get_transaction_count(account).pending(),
        )
        .await
    }

    async fn estimate_gas(&self, tx: &TxRequest) -> Result<u64> {
        let mut request = TransactionRequest::default()
            .with_from(tx.from)
            .with_input(tx.data.clone())
            .with_value(tx.value);
        request.to = Some(tx.to.map_or(TxKind::Create, TxKind::Call));
        let estimate = self
            .request("eth_estimateGas", self.provider.estimate_gas(request))
            .await?;
        Ok(estimate.saturating_mul(self.options.gas_multiplier_percent) / 100)
    }

    /// Signs `unsigned` (with `nonce`) and broadcasts it; `Ok(Err(e))` is a node refusal.
    async fn broadcast(&self, from: Address, mut unsigned: TxEip1559, nonce: u64) -> Result<B256> {
        unsigned.nonce = nonce;
        let envelope = self.wallet.sign(from, unsigned)?;
        let hash = *envelope.tx_hash();
        let raw = envelope.encoded_2718();
        let result: Result<B256> = self
            .request(
                "eth_sendRawTransaction",
                self.provider
                    .raw_request(Cow::Borrowed("eth_sendRawTransaction"), (Bytes::from(raw),)),
            )
            .await;
        match result {
            Ok(returned) => {
                if returned != hash {
                    tracing::warn!(%hash, %returned, "the node reported another hash for our transaction");
                }
                Ok(hash)
            }
            Err(Error::Rejected(m)) if is_already_known(&m) => Ok(hash),
            Err(e) => Err(e),
        }
    }

    /// The timestamp of the block `hash` (cached: a block's timestamp never changes).
    async fn block_timestamp(&self, hash: B256) -> Result<u64> {
        if let Some(t) = lock(&self.timestamps).get(&hash) {
            return Ok(*t);
        }
        let header = self
            .request("eth_getBlockByHash", self.provider.get_header_by_hash(hash))
            .await?
            .ok_or_else(|| Error::Unavailable(format!("block {hash} is unknown to the node")))?;
        self.remember_timestamp(hash, header.timestamp);
        Ok(header.timestamp)
    }

    fn remember_timestamp(&self, hash: B256, timestamp: u64) {
        let mut cache = lock(&self.timestamps);
        if cache.len() >= TIMESTAMP_CACHE {
            cache.clear();
        }
        cache.insert(hash, timestamp);
    }

    async fn convert_receipt(&self, r: TransactionReceipt) -> Result<Option<Receipt>> {
        // A receipt without a block is not mined (some nodes answer for pending transactions).
        let (Some(block_number), Some(block_hash)) = (r.block_number, r.block_hash) else {
            return Ok(None);
        };
        let logs = r.inner.logs();
        let block_timestamp = match logs.iter().find_map(|l| l.block_timestamp) {
            Some(t) => t,
            None => self.block_timestamp(block_hash).await?,
        };
        Ok(Some(Receipt {
            tx_hash: r.transaction_hash,
            block_number,
            block_hash,
            block_timestamp,
            from: r.from,
            to: r.to,
            contract_address: r.contract_address,
            success: r.status(),
            gas_used: r.gas_used,
            effective_gas_price: r.effective_gas_price,
            logs: logs.iter().map(|l| l.inner.clone()).collect(),
        }))
    }

    /// One wait step: the receipt when it has the requested depth and is still in the same block.
    async fn confirmed(&self, tx_hash: B256, confirmations: u64) -> Result<Option<Receipt>> {
        let Some(receipt) = self.receipt(tx_hash).await? else {
            return Ok(None);
        };
        if confirmations <= 1 {
            // Included is deep enough.
            return Ok(Some(receipt));
        }
        let latest = self.block_number().await?;
        if latest
            .saturating_add(1)
            .saturating_sub(receipt.block_number)
            < confirmations.max(1)
        {
            return Ok(None);
        }
        // The depth is reached: make sure the transaction was not reorged out meanwhile.
        match self.receipt(tx_hash).await? {
            Some(again) if again.block_hash == receipt.block_hash => Ok(Some(again)),
            _ => Ok(None),
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
        self.request(
            "eth_call",
            self.provider.call(request).block(BlockId::latest()),
        )
        .await
    }

    async fn send(&self, tx: TxRequest) -> Result<B256> {
        if !self.wallet.contains(&tx.from) {
            return Err(Error::UnknownSigner(tx.from));
        }
        let gas = match tx.gas {
            Some(g) => g,
            None => self.estimate_gas(&tx).await?,
        };
        let fees = self.fees().await?;
        let unsigned = TxEip1559 {
            chain_id: self.chain_id,
            nonce: 0,
            gas_limit: gas,
            max_fee_per_gas: fees.max_fee_per_gas,
            max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
            to: tx.to.map_or(TxKind::Create, TxKind::Call),
            value: tx.value,
            input: tx.data,
            access_list: Default::default(),
        };

        let slot = self.nonce_slot(tx.from);
        let mut next = slot.lock().await;
        let nonce = match *next {
            Some(n) => n,
            None => self.pending_count(tx.from).await?,
        };
        let result = match self.broadcast(tx.from, unsigned.clone(), nonce).await {
            Err(Error::Rejected(m)) if is_nonce_too_low(&m) => {
                let fresh = self.pending_count(tx.from).await?;
                tracing::debug!(from = %tx.from, stale = nonce, fresh, "nonce too low; retrying with a fresh nonce");
                self.broadcast(tx.from, unsigned, fresh)
                    .await
                    .map(|h| (h, fresh))
            }
            other => other.map(|h| (h, nonce)),
        };
        match result {
            Ok((hash, used)) => {
                *next = Some(used + 1);
                Ok(hash)
            }
            Err(e) => {
                // The cached nonce or fees may be what the node refused: read both afresh next time.
                *next = None;
                *lock(&self.fees) = None;
                Err(e)
            }
        }
    }

    async fn receipt(&self, tx_hash: B256) -> Result<Option<Receipt>> {
        let receipt = self
            .request(
                "eth_getTransactionReceipt",
                self.provider.get_transaction_receipt(tx_hash),
            )
            .await?;
        match receipt {
            Some(r) => self.convert_receipt(r).await,
            None => Ok(None),
        }
    }

    async fn knows_transaction(&self, tx_hash: B256) -> Result<bool> {
        let tx = self
            .request(
                "eth_getTransactionByHash",
                self.provider.get_transaction_by_hash(tx_hash),
            )
            .await?;
        Ok(tx.is_some())
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
        let poll = async {
            // Most nodes (anvil, L2 sequencers) include a transaction within milliseconds: poll
            // soon, then back off to the configured interval.
            let mut delay = Duration::from_millis(2).min(self.options.poll_interval);
            loop {
                match self.confirmed(tx_hash, opts.confirmations).await {
                    Ok(Some(receipt)) => return Ok(receipt),
                    Ok(None) => {}
                    // A node that is briefly unreachable is not a failed wait: keep polling.
                    Err(Error::Unavailable(e)) => {
                        tracing::debug!(%tx_hash, error = %e, "receipt poll failed")
                    }
                    Err(e) => return Err(e),
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(self.options.poll_interval);
            }
        };
        match tokio::time::timeout(opts.timeout, poll).await {
            Ok(Ok(receipt)) => Ok(Confirmation::Confirmed(receipt)),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                // Perhaps the node dropped it: then the cached next nonce would leave a gap that
                // stalls every later transaction of the sender. Read nonces afresh (the node's
                // pending count, which includes what it still holds) for the next sends.
                self.forget_nonces();
                Ok(Confirmation::Pending { tx_hash })
            }
        }
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

/// The HTTP transport to a node: JSON-RPC packets POSTed to the full URL (reqwest turns its user
/// info into `Authorization: Basic`), as alloy's `Http<reqwest::Client>` does, except that the
/// URL is never logged nor put in an error: the span names the [`redacted`] endpoint and
/// reqwest's errors lose their URL.
#[derive(Clone)]
struct NodeTransport {
    client: reqwest::Client,
    /// The full URL, credentials included: only ever handed to reqwest.
    url: Arc<Url>,
    /// [`redacted`] URL.
    endpoint: Arc<str>,
}

impl fmt::Debug for NodeTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeTransport")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl NodeTransport {
    async fn post(self, packet: RequestPacket) -> TransportResult<ResponsePacket> {
        // reqwest's errors carry the request URL (and print it): drop it.
        let transport = |e: reqwest::Error| TransportErrorKind::custom(e.without_url());
        let body = serde_json::to_vec(&packet).map_err(TransportError::ser_err)?;
        let response = self
            .client
            .post(Url::clone(&self.url))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .headers(packet.headers())
            .body(body)
            .send()
            .await
            .map_err(transport)?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
            .map(Duration::from_secs);
        tracing::debug!(%status, "node answered");
        let body = match response.bytes().await {
            Ok(body) => body,
            Err(e) if !status.is_success() => {
                return Err(TransportErrorKind::http_error_with_retry_after(
                    status.as_u16(),
                    format!("<failed to read the body: {}>", e.without_url()),
                    retry_after,
                ));
            }
            Err(e) => return Err(transport(e)),
        };
        tracing::trace!(body = %String::from_utf8_lossy(&body), "node's answer");
        if !status.is_success() {
            // A JSON-RPC error in a non-2xx answer is still the node's answer.
            return match serde_json::from_slice::<ResponsePacket>(&body) {
                Ok(packet) if packet.is_error() => Ok(packet),
                _ => Err(TransportErrorKind::http_error_with_retry_after(
                    status.as_u16(),
                    String::from_utf8_lossy(&body).into_owned(),
                    retry_after,
                )),
            };
        }
        serde_json::from_slice(&body)
            .map_err(|e| TransportError::deser_err(e, String::from_utf8_lossy(&body)))
    }
}

impl tower_service::Service<RequestPacket> for NodeTransport {
    type Response = ResponsePacket;
    type Error = TransportError;
    type Future = TransportFut<'static>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::result::Result<(), TransportError>> {
        // reqwest's client is always ready.
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, packet: RequestPacket) -> Self::Future {
        let span = tracing::debug_span!("node", endpoint = %self.endpoint);
        Box::pin(self.clone().post(packet).instrument(span))
    }
}

/// `scheme://host:port` of a node URL: its path, query and user info may hold credentials.
fn redacted(url: &Url) -> String {
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!(
        "{}://{}{port}",
        url.scheme(),
        url.host_str().unwrap_or_default()
    )
}

/// Maps an alloy RPC error to the chain layer's error: transport failures are
/// [`Error::Unavailable`], JSON-RPC errors are reverts ([`Error::Revert`], with the revert data
/// decoded), refusals of a transaction ([`Error::Rejected`]) or anything else ([`Error::Rpc`]).
pub fn map_rpc_error(err: TransportError) -> Error {
    match err {
        RpcError::ErrorResp(payload) => {
            map_error_payload(payload.code, &payload.message, payload.data.as_deref())
        }
        RpcError::Transport(kind) => Error::Unavailable(transport_message(&kind)),
        RpcError::NullResp => Error::Unavailable("the node answered null".into()),
        RpcError::UnsupportedFeature(what) => Error::Unsupported(what),
        RpcError::DeserError { err, text } => Error::Unavailable(format!(
            "unexpected answer from the node ({err}): {}",
            truncate(&text, 200)
        )),
        e @ (RpcError::SerError(_) | RpcError::LocalUsageError(_)) => {
            Error::InvalidInput(e.to_string())
        }
    }
}

fn transport_message(kind: &TransportErrorKind) -> String {
    match kind {
        TransportErrorKind::Custom(e) => {
            // reqwest's errors keep the useful part (connection refused, ...) in their sources.
            let mut message = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                message.push_str(": ");
                message.push_str(&s.to_string());
                source = s.source();
            }
            message
        }
        other => other.to_string(),
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A JSON-RPC error object as one of our errors.
fn map_error_payload(
    code: i64,
    message: &str,
    data: Option<&serde_json::value::RawValue>,
) -> Error {
    let lower = message.to_ascii_lowercase();
    let data = data.and_then(|raw| serde_json::from_str::<Value>(raw.get()).ok());
    // geth and anvil: code 3 "execution reverted" with the revert bytes as `data` (nested in an
    // object by some nodes); others use -32000/-32015 with "revert" in the message.
    if code == 3 || lower.contains("revert") {
        let bytes = data.as_ref().and_then(revert_data).unwrap_or_default();
        return Error::Revert(Revert::decode(&bytes));
    }
    if is_rejection(&lower) {
        return Error::Rejected(message.to_owned());
    }
    Error::Rpc {
        code,
        message: message.to_owned(),
    }
}

/// The first hex string found in the error data (directly, or nested in objects and arrays).
fn revert_data(value: &Value) -> Option<Bytes> {
    match value {
        Value::String(s) if s.starts_with("0x") => s.parse().ok(),
        Value::Object(o) => o.values().find_map(revert_data),
        Value::Array(a) => a.iter().find_map(revert_data),
        _ => None,
    }
}

/// Node refusals of a transaction before execution (geth, reth, anvil, erigon wording).
fn is_rejection(lower: &str) -> bool {
    const REFUSALS: &[&str] = &[
        "nonce too low",
        "nonce too high",
        "nonce has already been used",
        "underpriced",
        "fee cap",
        "max fee per gas",
        "maxfeepergas",
        "base fee",
        "priority fee",
        "tip higher",
        "insufficient funds",
        "intrinsic gas",
        "gas limit",
        "chain id",
        "chainid",
        "invalid sender",
        "invalid signature",
        "already known",
        "already imported",
        "known transaction",
        "txpool is full",
        "transaction pool is full",
        "oversized",
    ];
    REFUSALS.iter().any(|r| lower.contains(r))
}

fn is_nonce_too_low(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("nonce too low") || lower.contains("nonce has already been used")
}

fn is_already_known(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("already known")
        || lower.contains("already imported")
        || lower.contains("known transaction")
}

fn is_method_missing(code: i64, message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    code == -32601
        || code == -32004
        || lower.contains("method not found")
        || lower.contains("does not exist")
        || lower.contains("not supported")
        || lower.contains("unsupported")
        || lower.contains("not available")
}

#[cfg(test)]
mod tests {
    use alloy::sol_types::SolError;

    use super::*;
    use crate::contracts::Token;

    fn payload(code: i64, message: &str, data: Option<&str>) -> TransportError {
        let mut object = serde_json::json!({ "code": code, "message": message });
        if let Some(d) = data {
            object["data"] = serde_json::from_str(d).unwrap();
        }
        RpcError::ErrorResp(serde_json::from_value(object).unwrap())
    }

    fn insufficient_funds_hex() -> String {
        let data = Token::InsufficientFunds {
            account: Address::repeat_byte(1),
            balance: U256::from(5),
            needed: U256::from(7),
        }
        .abi_encode();
        format!("\"{}\"", alloy::hex::encode_prefixed(data))
    }

    #[test]
    fn revert_with_data_decodes() {
        let hex = insufficient_funds_hex();
        let err = map_rpc_error(payload(
            3,
            "execution reverted: custom error 0x...",
            Some(&hex),
        ));
        assert!(
            matches!(err, Error::Revert(Revert::InsufficientFunds { balance, .. }) if balance == U256::from(5)),
            "{err:?}"
        );
    }

    #[test]
    fn nested_revert_data_decodes() {
        let nested = format!(
            "{{\"message\":\"reverted\",\"data\":{}}}",
            insufficient_funds_hex()
        );
        let err = map_rpc_error(payload(-32015, "VM execution error: revert", Some(&nested)));
        assert!(
            matches!(err, Error::Revert(Revert::InsufficientFunds { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn revert_without_data_is_unknown_empty() {
        let err = map_rpc_error(payload(-32000, "execution reverted", None));
        assert!(
            matches!(err, Error::Revert(Revert::Unknown(ref d)) if d.is_empty()),
            "{err:?}"
        );
    }

    #[test]
    fn refusals_and_other_errors() {
        assert!(matches!(
            map_rpc_error(payload(-32000, "nonce too low", None)),
            Error::Rejected(_)
        ));
        assert!(matches!(
            map_rpc_error(payload(-32000, "replacement transaction underpriced", None)),
            Error::Rejected(_)
        ));
        assert!(matches!(
            map_rpc_error(payload(-32601, "Method not found", None)),
            Error::Rpc { code: -32601, .. }
        ));
        assert!(matches!(
            map_rpc_error(RpcError::NullResp),
            Error::Unavailable(_)
        ));
        assert!(is_method_missing(-32601, "Method not found"));
        assert!(is_nonce_too_low("Nonce too low"));
        assert!(is_already_known("already known"));
    }

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

    #[test]
    fn endpoint_hides_path() {
        let url: Url = "https://user:pw@base.example:8443/v2/SECRET?key=1"
            .parse()
            .unwrap();
        assert_eq!(redacted(&url), "https://base.example:8443");
    }
}
