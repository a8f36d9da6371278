//! x402 transfers settled together. On a chain that makes a block per transaction (anvil,
//! automining) the node's cost is per block, and grows with the chain; on any chain each
//! transaction pays its own base cost and its own receipt polls. So the transfers that come while
//! earlier ones are on their way go in one transaction: the `PaymentRouter`'s
//! `settleTransfers`, which calls the token's own `transferWithAuthorization` for each, with
//! bounded gas, skipping one that fails.
//!
//! A worker per network takes the waiting transfers (up to [`MAX_BATCH`]) when no transaction
//! is on its way, or when fewer than [`IN_FLIGHT`] are and enough wait to fill half a batch
//! or the first has waited [`HOLD`],
//! a transaction being on its way until it is mined (or its wait times out). So the transfers
//! that come while a transaction is mined go together in the next. One transfer that waits
//! alone is handed back to its caller,
//! which sends it alone, as before batching, holding its slot until its own wait ends. Several
//! go as one transaction, which the worker sends and waits for once; each caller gets the
//! batch's receipt.
//!
//! A transfer may be handed over before its row is recorded ([`Batches::enqueue`]): a batch
//! never goes before the rows of all its transfers are, and the batch that leaves while one is
//! being recorded waits for it (up to [`RECORD_WAIT`]) rather than leave it for the next. A
//! simulation that ends when the node has mined a block tends to end just as the batch on its
//! way is mined and the next one leaves: recorded first, it would miss that one by the insert's
//! few milliseconds and wait a whole block more.
//!
//! Only transfers signed by their payer's own key are handed over ([`crate::x402`] decides): a
//! smart wallet's (EIP-1271) check costs what the wallet makes it cost, so its transfer is sent
//! alone with its gas estimated.
//!
//! Nothing here decides that a payment was settled: each caller looks in the receipt for its
//! own payment's `AuthorizationUsed` and `Transfer`, emitted by the token. A payment that failed
//! in the batch (or a batch that failed as a whole) is simulated again and, if it can still go
//! through, sent alone: the token takes an authorization once, so sending it again cannot pay
//! twice.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use alloy::{primitives::Address, sol_types::SolCall};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot};
use tollgate_chain::{
    Chain, Confirmation, TxRequest, WaitOptions, contracts::PaymentRouter, worker::WorkerQueue,
};

/// Most transfers in one transaction. Each may use up to the router's `TRANSFER_GAS` (200k; a
/// plain signature's transfer uses 60–90k), so a full batch's limit is ~7M gas, under the
/// block gas limits of the chains x402 runs on.
pub(crate) const MAX_BATCH: usize = 32;

/// Most transactions on their way at once, per network.
pub(crate) const IN_FLIGHT: usize = 4;

/// While one transaction is on its way, another goes only with at least this many transfers;
/// fewer wait for it to be mined. Under light load a transaction is on its way at a time and
/// the transfers that come meanwhile go together in the next (on anvil under 8 concurrent
/// settlements, batches of ~7); under heavy load on a slow chain (2 s blocks) up to
/// [`IN_FLIGHT`] × [`MAX_BATCH`] transfers go per block from one replica.
pub(crate) const FULL: usize = MAX_BATCH / 2;

/// Longest a transfer waits for the transaction on its way before it goes in another (when
/// fewer than [`IN_FLIGHT`] are): on a slow chain (2 s blocks) a payment is sent within this of
/// coming, as before batching, rather than a block later; on anvil a transaction is mined
/// long before.
pub(crate) const HOLD: Duration = Duration::from_millis(250);

/// Longest a batch that is ready to go waits for the rows of its transfers handed over before
/// they were recorded ([`Batches::enqueue`]); one recorded later goes in another batch. A row's
/// insert is a local write (group-committed), a few milliseconds.
pub(crate) const RECORD_WAIT: Duration = Duration::from_millis(25);

/// Gas the router's `TRANSFER_GAS` per transfer leaves around it (the loop, the calldata read,
/// the call's own cost).
const GAS_PER_TRANSFER: u64 = 200_000 + 15_000;
/// Gas of the router call itself.
const GAS_BASE: u64 = 60_000;

/// A transfer waiting for its transaction.
struct Waiting {
    /// When it was handed over.
    at: Instant,
    relayer: Address,
    transfer: PaymentRouter::Transfer,
    reply: oneshot::Sender<Batched>,
    /// Resolves once its row is recorded (`None`: recorded when handed over); dropped unsent,
    /// the transfer is withdrawn.
    recorded: Option<oneshot::Receiver<()>>,
}

/// What became of a transfer handed to the batches.
pub(crate) enum Batched {
    /// It waited alone: the caller sends it alone, holding this slot until its wait ends (or
    /// holding none when batching is off).
    Alone(Option<Slot>),
    /// It went in a batch, and this is the batch transaction's wait (confirmed, or pending).
    Sent(Confirmation),
    /// It went in a batch that could not be sent or waited for (the node's error is logged
    /// here); the batch may have been mined meanwhile.
    Failed,
    /// Its row was not recorded within [`RECORD_WAIT`] of its batch leaving: nothing was sent
    /// for it; it goes in another.
    Late,
}

/// A transfer handed to the batches before its row is recorded ([`Batches::enqueue`]).
/// Dropped before [`Ticket::recorded`], it is withdrawn: never sent.
pub(crate) struct Ticket {
    recorded: Option<oneshot::Sender<()>>,
    answer: Result<oneshot::Receiver<Batched>, Option<Slot>>,
}

impl Ticket {
    /// Its row is recorded: the transfer may go. What became of it.
    pub(crate) async fn recorded(mut self) -> Batched {
        if let Some(recorded) = self.recorded.take() {
            let _ = recorded.send(());
        }
        match self.answer {
            Ok(answer) => answer.await.unwrap_or(Batched::Failed),
            Err(slot) => Batched::Alone(slot),
        }
    }
}

/// One network's batches.
#[derive(Debug)]
pub(crate) struct Batches {
    queue: WorkerQueue<Waiting>,
    /// Set when a batch failed as a whole: the router on this network cannot settle batches
    /// (a `PaymentRouter` deployed before `settleTransfers`); every transfer goes alone since.
    off: Arc<AtomicBool>,
}

/// Where a network's batches go and how long they are waited for.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) chain: Arc<dyn Chain>,
    pub(crate) router: Address,
    pub(crate) wait: WaitOptions,
}

impl Batches {
    pub(crate) fn new(target: Target) -> Self {
        let off = Arc::new(AtomicBool::new(false));
        let worker_off = Arc::clone(&off);
        Self {
            queue: WorkerQueue::new(move |rx| work(target.clone(), Arc::clone(&worker_off), rx)),
            off,
        }
    }

    /// Hands `transfer` (simulated from `relayer`, which the batch may be sent from, and its
    /// row recorded) to the next batch.
    pub(crate) async fn settle(
        &self,
        relayer: Address,
        transfer: PaymentRouter::Transfer,
    ) -> Batched {
        self.hand_over(relayer, transfer, None).recorded().await
    }

    /// Hands `transfer` (simulated from `relayer`) to the next batch before its row is
    /// recorded: it goes once [`Ticket::recorded`] says so.
    pub(crate) fn enqueue(&self, relayer: Address, transfer: PaymentRouter::Transfer) -> Ticket {
        let (recorded, gate) = oneshot::channel();
        self.hand_over(relayer, transfer, Some((recorded, gate)))
    }

    fn hand_over(
        &self,
        relayer: Address,
        transfer: PaymentRouter::Transfer,
        gate: Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>,
    ) -> Ticket {
        let (recorded, gate) = gate.unzip();
        if self.off.load(Ordering::Relaxed) {
            return Ticket {
                recorded,
                answer: Err(None),
            };
        }
        let (reply, answer) = oneshot::channel();
        let answer = match self.queue.push(Waiting {
            at: Instant::now(),
            relayer,
            transfer,
            reply,
            recorded: gate,
        }) {
            // A worker gone mid-batch (its runtime shutting down) answers nothing; the batch may
            // have been sent.
            Ok(()) => Ok(answer),
            Err(_) => Err(None),
        };
        Ticket { recorded, answer }
    }
}

/// A transaction's place among those on their way; freeing it wakes the worker.
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
    freed: Arc<Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Stored when the worker is not waiting: its next wait returns at once.
        self.freed.notify_one();
    }
}

/// The worker: sends what waits whenever the rule of [`FULL`] lets a transaction go, until its
/// queue is dropped.
async fn work(target: Target, off: Arc<AtomicBool>, mut queue: mpsc::UnboundedReceiver<Waiting>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let freed = Arc::new(Notify::new());
    let mut waiting = Vec::with_capacity(MAX_BATCH);
    loop {
        if waiting.is_empty() && queue.recv_many(&mut waiting, MAX_BATCH).await == 0 {
            return;
        }
        while waiting.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(w) => waiting.push(w),
                Err(_) => break,
            }
        }
        let on_their_way = IN_FLIGHT - slots.available_permits();
        let held_until = waiting[0].at + HOLD;
        let may_go = on_their_way == 0
            || (on_their_way < IN_FLIGHT
                && (waiting.len() >= FULL || Instant::now() >= held_until));
        if !may_go {
            // Until a transaction is mined (or its wait ends), more transfers come, or the
            // first waiting has waited long enough.
            let room = MAX_BATCH - waiting.len();
            tokio::select! {
                () = freed.notified() => {}
                () = tokio::time::sleep_until(held_until.into()), if on_their_way < IN_FLIGHT => {}
                n = queue.recv_many(&mut waiting, room), if room > 0 => {
                    if n == 0 {
                        return;
                    }
                }
            }
            continue;
        }
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            continue;
        };
        let slot = Slot {
            _permit: permit,
            freed: Arc::clone(&freed),
        };
        if waiting.len() == 1 || off.load(Ordering::Relaxed) {
            // Alone (or batching turned off meanwhile): sent by its caller under this slot.
            let mut slot = Some(slot);
            for w in waiting.drain(..) {
                let _ = w.reply.send(Batched::Alone(slot.take()));
            }
            continue;
        }
        let batch = std::mem::replace(&mut waiting, Vec::with_capacity(MAX_BATCH));
        let (target, off) = (target.clone(), Arc::clone(&off));
        tokio::spawn(async move {
            let batch = recorded(batch).await;
            if !batch.is_empty() {
                send(&target, &off, batch).await;
            }
            drop(slot);
        });
    }
}

/// The transfers of `batch` that may go: each whose row is recorded, waiting for those being
/// recorded up to [`RECORD_WAIT`]. One withdrawn (its row not recorded: the insert failed, or
/// found another payment's row) is left out, answered by its caller; one recorded later is
/// answered [`Batched::Late`].
async fn recorded(batch: Vec<Waiting>) -> Vec<Waiting> {
    let deadline = tokio::time::Instant::now() + RECORD_WAIT;
    let mut ready = Vec::with_capacity(batch.len());
    for mut w in batch {
        let Some(gate) = w.recorded.take() else {
            ready.push(w);
            continue;
        };
        match tokio::time::timeout_at(deadline, gate).await {
            Ok(Ok(())) => ready.push(w),
            Ok(Err(_)) => {}
            Err(_) => {
                let _ = w.reply.send(Batched::Late);
            }
        }
    }
    ready
}

/// Sends `batch` as one router call from its first transfer's relayer, waits for it, and
/// answers each transfer with the outcome.
async fn send(target: &Target, off: &AtomicBool, batch: Vec<Waiting>) {
    let n = batch.len();
    let relayer = batch[0].relayer;
    let (transfers, replies): (Vec<_>, Vec<_>) =
        batch.into_iter().map(|w| (w.transfer, w.reply)).unzip();
    let data = PaymentRouter::settleTransfersCall { transfers }.abi_encode();
    let mut tx = TxRequest::call(relayer, target.router, data);
    tx.gas = Some(GAS_BASE + GAS_PER_TRANSFER * n as u64);
    let outcome = match target.chain.send(tx).await {
        Ok(hash) => {
            crate::fault::hit("settle.after-broadcast");
            target.chain.wait(hash, target.wait).await
        }
        Err(e) => Err(e),
    };
    match &outcome {
        Ok(Confirmation::Confirmed(r)) if !r.success => {
            tracing::warn!(
                router = %target.router, tx = %r.tx_hash,
                "a batch of x402 settlements reverted as a whole: this router cannot settle \
                 batches (deployed before PaymentRouter.settleTransfers?); settling one by one"
            );
            off.store(true, Ordering::Relaxed);
        }
        Ok(_) => tracing::debug!(transfers = n, "x402 batch sent"),
        Err(e) => tracing::warn!(error = %e, transfers = n, "x402 batch not sent; each goes alone"),
    }
    for reply in replies {
        let _ = reply.send(match &outcome {
            Ok(confirmation) => Batched::Sent(confirmation.clone()),
            Err(_) => Batched::Failed,
        });
    }
}
