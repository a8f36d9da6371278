//! The devnet's standard Ethereum JSON-RPC listener (HTTP POST, single and batch requests), enough
//! for alloy, viem and curl. Malformed requests get JSON-RPC error objects, never a crash or a hang;
//! slow or oversized requests meet the services' HTTP limits ([`serve_with`]).

use std::{future::Future, sync::Arc};

use alloy::{
    consensus::{Receipt as ConsensusReceipt, ReceiptEnvelope, ReceiptWithBloom, Transaction as _},
    eips::{BlockNumberOrTag, Encodable2718},
    primitives::{Address, B256, Bytes, U64, U256, logs_bloom},
    rpc::types::{
        Block, BlockTransactions, Filter, FilterBlockOption, Header as RpcHeader, Log as RpcLog,
        Transaction, TransactionReceipt, TransactionRequest,
    },
};
use axum::{
    Router,
    body::Bytes as Body,
    extract::{DefaultBodyLimit, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::post,
};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tollgate_chain::{Error, LogFilter};
use tollgate_server::Limits;

use crate::{BASE_FEE, BlockView, CoreView, Devnet, Simulation, TxEntry};

/// Largest request body accepted (1 MiB).
const MAX_BODY: usize = 1 << 20;
/// Most requests in one batch.
const MAX_BATCH: usize = 1000;
/// Widest block range one `eth_getLogs` may scan.
const MAX_LOG_RANGE: u64 = 100_000;

/// The JSON-RPC router (POST `/`).
pub fn router(devnet: Arc<Devnet>) -> Router {
    Router::new()
        .route("/", post(handle))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(devnet)
}

/// Serves JSON-RPC on `listener` under the default [`Limits`] (the facilitator's defaults) until
/// `shutdown` resolves.
pub async fn serve(
    devnet: Arc<Devnet>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(devnet, listener, &Limits::default(), shutdown).await
}

/// Serves JSON-RPC on `listener` under `limits` until `shutdown` resolves, through
/// [`tollgate_server::serve`] as the facilitator and the gateway are: a header must arrive within
/// the header read timeout (a slow or idle connection is closed), headers are capped in size and
/// count (431), a request, its body included, must be answered within the request timeout (408),
/// connections are capped and clients rate limited. Requests in flight finish on shutdown.
pub async fn serve_with(
    devnet: Arc<Devnet>,
    listener: tokio::net::TcpListener,
    limits: &Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    tollgate_server::serve(listener, router(devnet), limits, shutdown).await
}

async fn handle(State(devnet): State<Arc<Devnet>>, body: Body) -> Response {
    let reply = match serde_json::from_slice::<Value>(&body) {
        Err(e) => failure(Value::Null, -32700, format!("parse error: {e}"), None),
        Ok(Value::Array(batch)) if batch.is_empty() => {
            failure(Value::Null, -32600, "empty batch".into(), None)
        }
        Ok(Value::Array(batch)) if batch.len() > MAX_BATCH => failure(
            Value::Null,
            -32600,
            format!("batch of more than {MAX_BATCH} requests"),
            None,
        ),
        Ok(Value::Array(batch)) => {
            Value::Array(batch.into_iter().map(|r| dispatch(&devnet, r)).collect())
        }
        Ok(single) => dispatch(&devnet, single),
    };
    // Time travel and mining answer once their journal records are durable, so the next request
    // sees the new block (and a crash cannot undo what was acknowledged).
    if mutates_clock(&body)
        && let Err(e) = devnet.flush().await
    {
        let reply = failure(Value::Null, -32000, e.to_string(), None);
        return (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            reply.to_string(),
        )
            .into_response();
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        reply.to_string(),
    )
        .into_response()
}

fn mutates_clock(body: &[u8]) -> bool {
    let text = String::from_utf8_lossy(body);
    [
        "evm_mine",
        "anvil_mine",
        "evm_increaseTime",
        "anvil_increaseTime",
    ]
    .iter()
    .any(|m| text.contains(m))
}

/// A JSON-RPC error: code, message, optional data.
struct RpcFailure(i64, String, Option<Value>);

type RpcResult = Result<Value, RpcFailure>;

fn failure(id: Value, code: i64, message: String, data: Option<Value>) -> Value {
    let mut error = json!({ "code": code, "message": message });
    if let Some(d) = data {
        error["data"] = d;
    }
    json!({ "jsonrpc": "2.0", "id": id, "error": error })
}

fn invalid_params(msg: impl std::fmt::Display) -> RpcFailure {
    RpcFailure(-32602, format!("invalid params: {msg}"), None)
}

fn dispatch(devnet: &Devnet, request: Value) -> Value {
    let Value::Object(mut req) = request else {
        return failure(
            Value::Null,
            -32600,
            "invalid request: not an object".into(),
            None,
        );
    };
    let id = req.remove("id").unwrap_or(Value::Null);
    if !matches!(id, Value::Null | Value::Number(_) | Value::String(_)) {
        return failure(Value::Null, -32600, "invalid request: bad id".into(), None);
    }
    let Some(Value::String(method)) = req.remove("method") else {
        return failure(id, -32600, "invalid request: missing method".into(), None);
    };
    let params = match req.remove("params") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(p)) => p,
        Some(_) => return failure(id, -32602, "invalid params: expected an array".into(), None),
    };
    match call(devnet, &method, &params) {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(RpcFailure(code, message, data)) => failure(id, code, message, data),
    }
}

/// The `i`th parameter, deserialized; absent optional parameters are `None`.
fn param<T: DeserializeOwned>(params: &[Value], i: usize) -> Result<Option<T>, RpcFailure> {
    match params.get(i) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| invalid_params(format!("parameter {i}: {e}"))),
    }
}

fn required<T: DeserializeOwned>(params: &[Value], i: usize) -> Result<T, RpcFailure> {
    param(params, i)?.ok_or_else(|| invalid_params(format!("missing parameter {i}")))
}

fn to_value<T: serde::Serialize>(v: T) -> RpcResult {
    serde_json::to_value(v).map_err(|e| RpcFailure(-32603, format!("internal error: {e}"), None))
}

fn quantity(v: u64) -> Value {
    Value::String(format!("{v:#x}"))
}

/// Only the latest state is kept (no archive): other blocks are refused plainly.
fn check_state_block(view: &CoreView<'_>, params: &[Value], i: usize) -> Result<(), RpcFailure> {
    let tag: Option<BlockNumberOrTag> = match params.get(i) {
        Some(Value::Object(o)) => {
            // EIP-1898 block object: {blockNumber} or {blockHash}.
            if let Some(n) = o.get("blockNumber") {
                Some(serde_json::from_value(n.clone()).map_err(invalid_params)?)
            } else if let Some(h) = o.get("blockHash") {
                let hash: B256 = serde_json::from_value(h.clone()).map_err(invalid_params)?;
                let latest = view.latest();
                return match view.block_by_hash(hash) {
                    Some(b) if b.header.number == latest => Ok(()),
                    _ => Err(historical()),
                };
            } else {
                None
            }
        }
        _ => param(params, i)?,
    };
    match tag {
        None
        | Some(
            BlockNumberOrTag::Latest
            | BlockNumberOrTag::Pending
            | BlockNumberOrTag::Safe
            | BlockNumberOrTag::Finalized,
        ) => Ok(()),
        Some(BlockNumberOrTag::Number(n)) if n == view.latest() => Ok(()),
        Some(_) => Err(historical()),
    }
}

fn historical() -> RpcFailure {
    RpcFailure(
        -32000,
        "historical state is not available on the devnet: query the latest block".into(),
        None,
    )
}

fn resolve_block(view: &CoreView<'_>, tag: BlockNumberOrTag) -> u64 {
    match tag {
        BlockNumberOrTag::Number(n) => n,
        BlockNumberOrTag::Earliest => 0,
        _ => view.latest(),
    }
}

fn chain_error(e: Error) -> RpcFailure {
    match e {
        Error::InvalidInput(m) => RpcFailure(-32602, m, None),
        Error::Rejected(m) => RpcFailure(-32000, m, None),
        other => RpcFailure(-32000, other.to_string(), None),
    }
}

fn revert_failure(data: &Bytes) -> RpcFailure {
    let reason = tollgate_chain::Revert::decode(data);
    RpcFailure(
        3,
        format!("execution reverted: {reason}"),
        Some(Value::String(data.to_string())),
    )
}

fn call(devnet: &Devnet, method: &str, params: &[Value]) -> RpcResult {
    match method {
        "eth_chainId" => Ok(quantity(devnet.config().chain_id)),
        "net_version" => Ok(Value::String(devnet.config().chain_id.to_string())),
        "web3_clientVersion" => Ok(Value::String(format!(
            "tollgate-devnet/{}",
            env!("CARGO_PKG_VERSION")
        ))),
        "net_listening" => Ok(Value::Bool(true)),
        "eth_syncing" => Ok(Value::Bool(false)),
        "eth_accounts" => Ok(Value::Array(Vec::new())),
        "eth_blockNumber" => Ok(quantity(devnet.latest_block())),
        "eth_gasPrice" => Ok(quantity(BASE_FEE)),
        "eth_maxPriorityFeePerGas" => Ok(quantity(0)),
        "eth_feeHistory" => fee_history(devnet, params),
        "eth_getBalance" => devnet.with_core(|v| {
            let address: Address = required(params, 0)?;
            check_state_block(v, params, 1)?;
            to_value(v.account(address).balance)
        }),
        "eth_getTransactionCount" => devnet.with_core(|v| {
            let address: Address = required(params, 0)?;
            let pending = matches!(
                param::<BlockNumberOrTag>(params, 1),
                Ok(Some(BlockNumberOrTag::Pending))
            );
            if !pending {
                check_state_block(v, params, 1)?;
            }
            let n = if pending {
                v.pending_nonce(address)
            } else {
                v.account(address).nonce
            };
            Ok(quantity(n))
        }),
        "eth_getCode" => devnet.with_core(|v| {
            let address: Address = required(params, 0)?;
            check_state_block(v, params, 1)?;
            to_value(v.code(address))
        }),
        "eth_getStorageAt" => devnet.with_core(|v| {
            let address: Address = required(params, 0)?;
            let slot: U256 = required(params, 1)?;
            check_state_block(v, params, 2)?;
            to_value(B256::from(v.storage(address, slot)))
        }),
        "eth_call" | "eth_estimateGas" => {
            let tx: TransactionRequest = required(params, 0)?;
            devnet.with_core(|v| check_state_block(v, params, 1))?;
            let to = match tx.to {
                Some(alloy::primitives::TxKind::Call(a)) => Some(a),
                _ => None,
            };
            let data = tx.input.input().cloned().unwrap_or_default();
            let value = tx.value.unwrap_or_default();
            if method == "eth_call" {
                match devnet
                    .simulate(tx.from, to, data, value, tx.gas)
                    .map_err(chain_error)?
                {
                    Simulation::Success { output, .. } => to_value(output),
                    Simulation::Revert(data) => Err(revert_failure(&data)),
                    Simulation::Halt(reason) => Err(RpcFailure(
                        -32000,
                        format!("execution halted: {reason}"),
                        None,
                    )),
                }
            } else {
                match devnet
                    .simulate(tx.from, to, data.clone(), value, None)
                    .map_err(chain_error)?
                {
                    Simulation::Revert(data) => Err(revert_failure(&data)),
                    Simulation::Halt(reason) => Err(RpcFailure(
                        -32000,
                        format!("execution halted: {reason}"),
                        None,
                    )),
                    Simulation::Success { .. } => devnet
                        .estimate_gas(tx.from, to, data, value)
                        .map(quantity)
                        .map_err(chain_error),
                }
            }
        }
        "eth_sendRawTransaction" => {
            let raw: Bytes = required(params, 0)?;
            devnet
                .send_raw(&raw)
                .map_err(chain_error)
                .and_then(to_value)
        }
        "eth_getTransactionReceipt" => {
            let hash: B256 = required(params, 0)?;
            devnet.with_core(|v| match v.tx(&hash) {
                None => Ok(Value::Null),
                Some(entry) => to_value(rpc_receipt(v, hash, entry)),
            })
        }
        "eth_getTransactionByHash" => {
            let hash: B256 = required(params, 0)?;
            devnet.with_core(|v| match v.tx(&hash) {
                None => Ok(Value::Null),
                Some(entry) => to_value(rpc_transaction(v, entry)),
            })
        }
        "eth_getBlockByNumber" | "eth_getBlockByHash" => {
            let full: bool = param(params, 1)?.unwrap_or(false);
            devnet.with_core(|v| {
                let block = if method == "eth_getBlockByNumber" {
                    let tag: BlockNumberOrTag = required(params, 0)?;
                    v.block(resolve_block(v, tag))
                } else {
                    v.block_by_hash(required(params, 0)?)
                };
                match block {
                    None => Ok(Value::Null),
                    Some(b) => to_value(rpc_block(v, &b, full)),
                }
            })
        }
        "eth_getLogs" => {
            let filter: Filter = required(params, 0)?;
            devnet.with_core(|v| {
                let latest = v.latest();
                let (from, to) = match filter.block_option {
                    FilterBlockOption::AtBlockHash(h) => match v.block_by_hash(h) {
                        Some(b) => (b.header.number, b.header.number),
                        None => return Err(RpcFailure(-32000, format!("unknown block {h}"), None)),
                    },
                    FilterBlockOption::Range {
                        from_block,
                        to_block,
                    } => (
                        from_block.map_or(latest, |t| resolve_block(v, t)),
                        to_block.map_or(latest, |t| resolve_block(v, t)).min(latest),
                    ),
                };
                if to >= from && to - from > MAX_LOG_RANGE {
                    return Err(RpcFailure(
                        -32005,
                        format!("query exceeds {MAX_LOG_RANGE} blocks"),
                        None,
                    ));
                }
                let mut topics: [Option<Vec<B256>>; 4] = Default::default();
                for (i, t) in filter.topics.iter().enumerate() {
                    if !t.is_empty() {
                        topics[i] = Some(t.iter().copied().collect());
                    }
                }
                let ours = LogFilter {
                    from_block: from,
                    to_block: Some(to),
                    addresses: filter.address.iter().copied().collect(),
                    topics,
                };
                let logs: Vec<RpcLog> = v
                    .logs(&ours)
                    .into_iter()
                    .map(|l| {
                        let block = v.block(l.block_number).expect("log block is visible");
                        RpcLog {
                            inner: l.log,
                            block_hash: Some(block.hash),
                            block_number: Some(l.block_number),
                            block_timestamp: Some(block.header.timestamp),
                            transaction_hash: Some(l.tx_hash),
                            transaction_index: Some(0),
                            log_index: Some(l.log_index),
                            removed: false,
                        }
                    })
                    .collect();
                to_value(logs)
            })
        }
        "evm_increaseTime" | "anvil_increaseTime" => {
            let seconds: U64 = required(params, 0)?;
            Ok(quantity(devnet.increase_time(seconds.to())))
        }
        "evm_mine" | "anvil_mine" => {
            devnet.mine();
            Ok(Value::String("0x0".into()))
        }
        _ => Err(RpcFailure(
            -32601,
            format!("method not found: {method}"),
            None,
        )),
    }
}

fn fee_history(devnet: &Devnet, params: &[Value]) -> RpcResult {
    let count: U64 = required(params, 0)?;
    let newest: BlockNumberOrTag = required(params, 1)?;
    let percentiles: Option<Vec<f64>> = param(params, 2)?;
    devnet.with_core(|v| {
        let newest = resolve_block(v, newest).min(v.latest());
        let count = count.to::<u64>().clamp(0, 1024).min(newest + 1);
        let oldest = newest + 1 - count;
        let mut ratios = Vec::new();
        let mut rewards = Vec::new();
        for n in oldest..=newest {
            let used = v.block(n).map_or(0, |b| b.header.gas_used);
            ratios.push(used as f64 / crate::BLOCK_GAS_LIMIT as f64);
            if let Some(p) = &percentiles {
                rewards.push(vec![quantity(0); p.len()]);
            }
        }
        let mut out = json!({
            "oldestBlock": quantity(oldest),
            "baseFeePerGas": vec![quantity(BASE_FEE); count as usize + 1],
            "gasUsedRatio": ratios,
        });
        if percentiles.is_some() {
            out["reward"] = json!(rewards);
        }
        Ok(out)
    })
}

fn rpc_transaction(view: &CoreView<'_>, entry: &TxEntry) -> Transaction {
    let block = view
        .block(entry.block)
        .expect("an included transaction's block is visible");
    Transaction {
        inner: alloy::consensus::transaction::Recovered::new_unchecked(
            entry.envelope.clone(),
            entry.sender,
        ),
        block_hash: Some(block.hash),
        block_number: Some(entry.block),
        transaction_index: Some(0),
        effective_gas_price: Some(entry.effective_gas_price),
        block_timestamp: Some(block.header.timestamp),
    }
}

fn rpc_receipt(view: &CoreView<'_>, hash: B256, entry: &TxEntry) -> TransactionReceipt {
    let block = view
        .block(entry.block)
        .expect("an included transaction's block is visible");
    let logs: Vec<RpcLog> = entry
        .logs
        .iter()
        .enumerate()
        .map(|(i, l)| RpcLog {
            inner: l.clone(),
            block_hash: Some(block.hash),
            block_number: Some(entry.block),
            block_timestamp: Some(block.header.timestamp),
            transaction_hash: Some(hash),
            transaction_index: Some(0),
            log_index: Some(i as u64),
            removed: false,
        })
        .collect();
    let receipt = ReceiptWithBloom::new(
        ConsensusReceipt {
            status: entry.success.into(),
            cumulative_gas_used: entry.gas_used,
            logs,
        },
        logs_bloom(entry.logs.iter()),
    );
    TransactionReceipt {
        inner: ReceiptEnvelope::from_typed(entry.envelope.tx_type(), receipt),
        transaction_hash: hash,
        transaction_index: Some(0),
        block_hash: Some(block.hash),
        block_number: Some(entry.block),
        gas_used: entry.gas_used,
        effective_gas_price: entry.effective_gas_price,
        blob_gas_used: None,
        blob_gas_price: None,
        from: entry.sender,
        to: entry.envelope.to(),
        contract_address: entry.contract_address,
    }
}

fn rpc_block(view: &CoreView<'_>, block: &BlockView<'_>, full: bool) -> Block {
    let transactions = match (block.tx, full) {
        (None, true) => BlockTransactions::Full(Vec::new()),
        (None, false) => BlockTransactions::Hashes(Vec::new()),
        (Some(h), false) => BlockTransactions::Hashes(vec![h]),
        (Some(h), true) => {
            let entry = view
                .tx(&h)
                .expect("a visible block's transaction is visible");
            BlockTransactions::Full(vec![rpc_transaction(view, entry)])
        }
    };
    let size = block
        .tx
        .and_then(|h| view.tx(&h))
        .map_or(0, |e| e.envelope.encode_2718_len())
        + 540;
    Block {
        header: RpcHeader {
            hash: block.hash,
            inner: block.header.clone(),
            total_difficulty: Some(U256::ZERO),
            size: Some(U256::from(size)),
        },
        uncles: Vec::new(),
        transactions,
        withdrawals: None,
    }
}
