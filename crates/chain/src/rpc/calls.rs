//! `eth_call`s sent together. The calls that come while earlier ones are on their way go to the
//! node as one JSON-RPC batch: the node parses one HTTP request and one JSON document for all of
//! them, and the facilitator sends one. Under load (concurrent x402 verifications, each one
//! simulated transfer) this halves the node's CPU per call (measured on anvil: ~290 µs per call
//! alone, ~150 µs in batches of 16); when calls come one at a time, each goes alone at once, as
//! before.
//!
//! A worker task takes the waiting calls (up to [`MAX_BATCH`]) whenever fewer than
//! [`IN_FLIGHT`] batches are on their way. A call goes alone when no other waits with it. A
//! node that refuses batches, or leaves a call out of its answer, has those calls sent again
//! one by one: an `eth_call` changes nothing, so asking again is safe. Each call is still
//! counted, and bounded by the request timeout, by its caller ([`super::RpcChain`]); hosted
//! nodes bill a batch per call in it.

use std::{sync::Arc, time::Duration};

use alloy::{
    eips::BlockId,
    primitives::Bytes,
    providers::{Provider, RootProvider},
    rpc::{client::BatchRequest, types::TransactionRequest},
    transports::{RpcError, TransportErrorKind, TransportResult},
};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::worker::WorkerQueue;

/// Most calls in one batch (hosted nodes cap batches; 50 is a common limit).
pub(super) const MAX_BATCH: usize = 32;

/// Batches on their way at once. While they are, the calls that come wait for the next batch:
/// fewer in flight make bigger batches, more let a distant node (a hosted one, tens of
/// milliseconds away) take more calls per second. With 4, a node 50 ms away still takes up to
/// 4 × 32 calls per 50 ms (2,560/s) from one facilitator; on anvil under 16 concurrent
/// verifications the batches hold 2 to 3 calls.
pub(super) const IN_FLIGHT: usize = 4;

/// A call waiting for its batch.
struct Waiting {
    request: TransactionRequest,
    reply: oneshot::Sender<TransportResult<Bytes>>,
}

/// The queue of an [`super::RpcChain`]'s `eth_call`s, and its worker.
#[derive(Debug)]
pub(super) struct Calls {
    provider: RootProvider,
    /// The worker's queue (see [`work`]).
    queue: WorkerQueue<Waiting>,
}

impl Calls {
    /// `timeout`: how long a batch may take. Past it, the batch is dropped (its callers have
    /// given up by then, each bounded by the same timeout) and its slot freed, so a node that
    /// hangs cannot hold the batches back once it answers again.
    pub(super) fn new(provider: RootProvider, timeout: Duration) -> Self {
        let worker = provider.clone();
        Self {
            provider,
            queue: WorkerQueue::new(move |rx| work(worker.clone(), timeout, rx)),
        }
    }

    /// Runs `request` at the latest block, in the next batch.
    pub(super) async fn call(&self, request: TransactionRequest) -> TransportResult<Bytes> {
        let (reply, answer) = oneshot::channel();
        match self.queue.push(Waiting { request, reply }) {
            Ok(()) => answer
                .await
                .unwrap_or_else(|_| Err(TransportErrorKind::backend_gone())),
            // No worker can take it (none can be started here): alone.
            Err(waiting) => call_alone(&self.provider, waiting.request).await,
        }
    }
}

/// The worker: takes the waiting calls whenever a batch may go, until its queue is dropped.
async fn work(
    provider: RootProvider,
    timeout: Duration,
    mut queue: mpsc::UnboundedReceiver<Waiting>,
) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut calls = Vec::with_capacity(MAX_BATCH);
    loop {
        // The slot first: while none is free, calls gather in the queue for the next batch.
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        if queue.recv_many(&mut calls, MAX_BATCH).await == 0 {
            return;
        }
        let batch = std::mem::replace(&mut calls, Vec::with_capacity(MAX_BATCH));
        let provider = provider.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(timeout, send(&provider, batch)).await;
            drop(slot);
        });
    }
}

/// Sends `calls` (one alone, several as a batch) and answers each.
async fn send(provider: &RootProvider, mut calls: Vec<Waiting>) {
    if calls.len() == 1 {
        let Waiting { request, reply } = calls.remove(0);
        let _ = reply.send(call_alone(provider, request).await);
        return;
    }
    let mut batch = BatchRequest::new(provider.client());
    let mut answers = Vec::with_capacity(calls.len());
    for call in &calls {
        answers.push(batch.add_call::<_, Bytes>("eth_call", &(&call.request, BlockId::latest())));
    }
    let sent = batch.send().await;
    let mut again = Vec::new();
    for (call, answer) in calls.into_iter().zip(answers) {
        let answered = match (&sent, answer) {
            (Ok(()), Ok(waiter)) => Some(waiter.await),
            (Ok(()), Err(e)) => Some(Err(e)),
            // The node refused the batch as a whole (some take no batches).
            (Err(_), _) => None,
        };
        match answered {
            Some(Err(RpcError::Transport(TransportErrorKind::MissingBatchResponse(_)))) | None => {
                again.push(call);
            }
            Some(result) => {
                let _ = call.reply.send(result);
            }
        }
    }
    // Left out of the node's answer: each alone, side by side.
    let mut alone = tokio::task::JoinSet::new();
    for Waiting { request, reply } in again {
        let provider = provider.clone();
        alone.spawn(async move {
            let _ = reply.send(call_alone(&provider, request).await);
        });
    }
    alone.join_all().await;
}

/// One `eth_call` at the latest block, in a request of its own.
async fn call_alone(
    provider: &RootProvider,
    request: TransactionRequest,
) -> TransportResult<Bytes> {
    provider.call(request).block(BlockId::latest()).await
}
