//! x402 transfers simulated together. Every `/verify`, and every `/settle` before it records
//! anything, runs the payment's `transferWithAuthorization` as an `eth_call`; under load most of
//! the node's work is those calls, and each costs the node a call's own overhead besides the
//! transfer. So the simulations that come while earlier ones are on their way go to the node as
//! **one** `eth_call`: the `PaymentRouter`'s `simulateTransfers`, which runs each transfer in a
//! sub-call that always reverts (so none sees another's effects: two payloads with one nonce
//! both pass, as each would alone) and returns what each reverted with.
//!
//! A worker per network takes the waiting simulations (up to [`MAX_BATCH`]) whenever fewer than
//! [`IN_FLIGHT`] router calls are on their way; one that waits alone goes alone, as the token's
//! own call, at once. What a batch answers is what the transfer's own call answers: passing, or
//! the token's revert data, decoded as that call's would be. A transfer that ran out of the
//! router's gas per transfer (`TRANSFER_GAS`, a heavy EIP-1271 wallet) is simulated again alone,
//! with the node's gas cap, and so is every transfer of a batch the node could not answer. A
//! router deployed before `simulateTransfers` reverts the batch as a whole: every simulation on
//! that network goes alone since.
//!
//! Only a 65-byte signature's transfer is simulated in a batch: a longer one (a smart wallet's)
//! may need more gas than a sub-call gets. A smart wallet's 65-byte signature (an owner's ECDSA
//! one, checked by the wallet's EIP-1271 `isValidSignature`) may be batched here: one whose check
//! runs out of the sub-call's gas is simulated again alone, as above. Settling, only the payer's
//! own key's transfer goes in a batch ([`crate::batch`], decided by [`crate::x402`]).

use std::sync::{
    Arc,
    atomic::{AtomicBool, Ordering},
};

use alloy::{
    primitives::{Address, Bytes},
    sol_types::{SolCall, SolError},
};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tollgate_chain::{
    Chain, Error as ChainError, Result as ChainResult,
    contracts::{PaymentRouter, Revert, Token},
    worker::WorkerQueue,
};

/// Most transfers in one `simulateTransfers` call: 32 × `TRANSFER_GAS` (200k) is 6.4M gas, under
/// the `eth_call` gas caps of common nodes (anvil's block gas limit, geth's 50M).
pub(crate) const MAX_BATCH: usize = 32;

/// Router calls on their way at once, per network. Fewer make bigger batches (the node's cost
/// per simulation falls with the batch's size); more let a distant node take more simulations
/// per second from one facilitator.
pub(crate) const IN_FLIGHT: usize = 2;

/// A simulation waiting for its batch.
struct Waiting {
    transfer: PaymentRouter::Transfer,
    /// The simulation's sender when it goes alone.
    from: Option<Address>,
    reply: oneshot::Sender<ChainResult<()>>,
}

/// One network's simulations.
#[derive(Debug)]
pub(crate) struct Simulations {
    target: Target,
    queue: WorkerQueue<Waiting>,
    /// Set when a batch reverted as a whole: the router on this network has no
    /// `simulateTransfers` (deployed before it); every simulation goes alone since.
    off: Arc<AtomicBool>,
}

/// Where a network's simulations go.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) chain: Arc<dyn Chain>,
    pub(crate) token: Address,
    pub(crate) router: Address,
}

impl Simulations {
    pub(crate) fn new(target: Target) -> Self {
        let off = Arc::new(AtomicBool::new(false));
        let (worker, worker_off) = (target.clone(), Arc::clone(&off));
        Self {
            target,
            queue: WorkerQueue::new(move |rx| work(worker.clone(), Arc::clone(&worker_off), rx)),
            off,
        }
    }

    /// Runs `transfer` (the token's `transferWithAuthorization`) at the latest state, changing
    /// nothing: `Ok` if it would go through, the token's revert otherwise, as an `eth_call` of
    /// it from `from` would answer.
    pub(crate) async fn simulate(
        &self,
        from: Option<Address>,
        transfer: PaymentRouter::Transfer,
    ) -> ChainResult<()> {
        if transfer.signature.len() != 65 || self.off.load(Ordering::Relaxed) {
            return alone(&self.target, from, &transfer).await;
        }
        let (reply, answer) = oneshot::channel();
        match self.queue.push(Waiting {
            transfer,
            from,
            reply,
        }) {
            Ok(()) => answer.await.unwrap_or_else(|_| {
                Err(ChainError::Unavailable(
                    "the simulation's batch was dropped".into(),
                ))
            }),
            // No worker can take it (no runtime to start one on): alone.
            Err(waiting) => alone(&self.target, from, &waiting.transfer).await,
        }
    }
}

/// The calldata of the token's `transferWithAuthorization` of `t`.
pub(crate) fn token_transfer_call(t: &PaymentRouter::Transfer) -> Bytes {
    Token::transferWithAuthorization_0Call {
        from: t.from,
        to: t.to,
        value: t.value,
        validAfter: t.validAfter,
        validBefore: t.validBefore,
        nonce: t.nonce,
        signature: t.signature.clone(),
    }
    .abi_encode()
    .into()
}

/// One simulation as the token's own call.
async fn alone(
    target: &Target,
    from: Option<Address>,
    transfer: &PaymentRouter::Transfer,
) -> ChainResult<()> {
    target
        .chain
        .call(from, target.token, token_transfer_call(transfer))
        .await
        .map(drop)
}

/// The worker: takes the waiting simulations whenever a router call may go, until its queue is
/// dropped.
async fn work(target: Target, off: Arc<AtomicBool>, mut queue: mpsc::UnboundedReceiver<Waiting>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut waiting = Vec::with_capacity(MAX_BATCH);
    loop {
        // The slot first: while none is free, simulations gather for the next batch.
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        if queue.recv_many(&mut waiting, MAX_BATCH).await == 0 {
            return;
        }
        let batch = std::mem::replace(&mut waiting, Vec::with_capacity(MAX_BATCH));
        let (target, off) = (target.clone(), Arc::clone(&off));
        tokio::spawn(async move {
            send(&target, &off, batch).await;
            drop(slot);
        });
    }
}

/// Simulates `batch` (one alone, several in one router call) and answers each.
async fn send(target: &Target, off: &AtomicBool, batch: Vec<Waiting>) {
    if batch.len() == 1 || off.load(Ordering::Relaxed) {
        return each_alone(target, batch).await;
    }
    let call = PaymentRouter::simulateTransfersCall {
        transfers: batch.iter().map(|w| w.transfer.clone()).collect(),
    };
    let answered = target
        .chain
        .call(batch[0].from, target.router, call.abi_encode().into())
        .await;
    let results = match answered {
        Ok(data) => match PaymentRouter::simulateTransfersCall::abi_decode_returns(&data) {
            Ok(results) if results.len() == batch.len() => results,
            _ => {
                tracing::warn!(
                    router = %target.router,
                    "the router's simulateTransfers answered what it does not return; \
                     simulating each transfer alone from now on"
                );
                off.store(true, Ordering::Relaxed);
                return each_alone(target, batch).await;
            }
        },
        Err(ChainError::Revert(revert)) => {
            tracing::warn!(
                router = %target.router, %revert,
                "the router refuses simulateTransfers (deployed before it?); simulating each \
                 transfer alone from now on"
            );
            off.store(true, Ordering::Relaxed);
            return each_alone(target, batch).await;
        }
        // The node could not answer the batch: each alone (an `eth_call` changes nothing, so
        // asking again is safe), each bounded by the chain's own timeout and failover.
        Err(_) => return each_alone(target, batch).await,
    };
    let mut again = Vec::new();
    for (waiting, data) in batch.into_iter().zip(results) {
        if data.as_ref() == PaymentRouter::Simulated::SELECTOR {
            let _ = waiting.reply.send(Ok(()));
        } else if data.is_empty() {
            // Out of the sub-call's gas (or a revert without data): alone, with the node's cap.
            again.push(waiting);
        } else {
            let _ = waiting
                .reply
                .send(Err(ChainError::Revert(Revert::decode(&data))));
        }
    }
    each_alone(target, again).await;
}

/// Simulates each of `batch` alone, side by side, and answers it.
async fn each_alone(target: &Target, mut batch: Vec<Waiting>) {
    if batch.len() == 1 {
        let Waiting {
            transfer,
            from,
            reply,
        } = batch.remove(0);
        let _ = reply.send(alone(target, from, &transfer).await);
        return;
    }
    let mut alone_set = tokio::task::JoinSet::new();
    for Waiting {
        transfer,
        from,
        reply,
    } in batch
    {
        let target = target.clone();
        alone_set.spawn(async move {
            let _ = reply.send(alone(&target, from, &transfer).await);
        });
    }
    alone_set.join_all().await;
}
