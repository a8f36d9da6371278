//! A queue served by one worker task, started on the first caller's runtime (and again if that
//! runtime has gone since): how an [`crate::rpc::RpcChain`] gathers `eth_call`s into JSON-RPC
//! batches, and how the facilitator gathers x402 transfers into one transaction.
//!
//! Started lazily rather than when its owner is built, so that an owner built outside a runtime,
//! or used from several runtimes one after the other (each test has its own), always finds a
//! worker alive on the runtime it runs on.

use std::{fmt, future::Future, sync::Mutex};

use tokio::sync::mpsc;

/// A queue of `T` and the worker that serves it.
pub struct WorkerQueue<T> {
    /// Starts a worker on the current runtime, serving the given receiver until it is closed.
    start: Box<dyn Fn(mpsc::UnboundedReceiver<T>) + Send + Sync>,
    queue: Mutex<Option<mpsc::UnboundedSender<T>>>,
}

impl<T> fmt::Debug for WorkerQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerQueue").finish_non_exhaustive()
    }
}

impl<T: Send + 'static> WorkerQueue<T> {
    /// A queue whose worker is `work(receiver)`, spawned on the runtime of the first
    /// [`push`](Self::push). The worker ends when the queue is dropped (its receiver yields
    /// `None`).
    pub fn new<F, Fut>(work: F) -> Self
    where
        F: Fn(mpsc::UnboundedReceiver<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Self {
            start: Box::new(move |rx| {
                tokio::spawn(work(rx));
            }),
            queue: Mutex::new(None),
        }
    }

    /// Queues `item` for the worker, starting one if there is none or its runtime has shut
    /// down. Gives `item` back when no worker can be started (no runtime here).
    pub fn push(&self, item: T) -> Result<(), T> {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let item = match queue.as_ref() {
            Some(worker) => match worker.send(item) {
                Ok(()) => return Ok(()),
                // The worker's runtime has shut down: start another on this one.
                Err(mpsc::error::SendError(item)) => item,
            },
            None => item,
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(item);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        (self.start)(rx);
        let sent = tx.send(item);
        *queue = Some(tx);
        sent.map_err(|mpsc::error::SendError(item)| item)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::oneshot;

    use super::*;

    type Doubling = WorkerQueue<(u64, oneshot::Sender<u64>)>;

    fn doubling() -> Doubling {
        WorkerQueue::new(
            |mut rx: mpsc::UnboundedReceiver<(u64, oneshot::Sender<u64>)>| async move {
                while let Some((n, reply)) = rx.recv().await {
                    let _ = reply.send(n * 2);
                }
            },
        )
    }

    async fn ask(queue: &Doubling, n: u64) -> Option<u64> {
        let (reply, answer) = oneshot::channel();
        queue.push((n, reply)).ok()?;
        answer.await.ok()
    }

    #[test]
    fn a_worker_is_started_again_on_the_next_runtime() {
        let queue = Arc::new(doubling());
        for n in 1..=3 {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let q = Arc::clone(&queue);
            assert_eq!(
                runtime.block_on(async move { ask(&q, n).await }),
                Some(n * 2)
            );
            // The runtime, and the worker on it, end here.
        }
    }

    #[test]
    fn without_a_runtime_the_item_is_given_back() {
        let (reply, _answer) = oneshot::channel();
        let (n, _) = doubling().push((7, reply)).unwrap_err();
        assert_eq!(n, 7);
    }
}
