//! A view of one network's token kept block by block from its logs, so that an x402 `/verify`
//! that the view can decide costs no round trip to the node.
//!
//! Every `/verify` otherwise runs the payment's transfer as an `eth_call` ([`crate::simulate`]):
//! one round trip to a node that is tens of milliseconds away, on every verification. What that
//! call decides changes only in a few ways, each of which the token logs: a payer's balance
//! (`Transfer`), an authorization's nonce used or cancelled (`AuthorizationUsed`,
//! `AuthorizationCanceled`), and the token's own rules (pausing, blacklisting, an upgrade: any
//! other log). So the view follows the token's logs from the node once per poll
//! ([`POLL`]), and answers a verification itself when it knows everything the transfer would
//! check, as of its last block:
//!
//! - **the nonce**: every use since the view's first block is in it (it reads the last
//!   `log_lookback_blocks` of uses when it starts); an authorization valid before that block
//!   (`validAfter` earlier than the block's timestamp) might have been used before it, and is
//!   simulated. A use in a block the view has not read yet is the one-block staleness any read at
//!   "latest" has; a nonce this facilitator is settling is never answered from the view
//!   ([`View::settling`]), so a payload it settled is refused from the moment it is sent;
//! - **the rules**: a payer and payee pair is answered only after a simulation of a transfer
//!   between them passed, and until the token logs anything but a transfer, an approval or a
//!   nonce's use (which forgets every pair: the next verification of each is simulated again);
//! - **the balance**: read once at the view's block (`balanceOf` at that block's hash), then
//!   moved by every `Transfer` log;
//! - **the signature**: recovered here under the token's configured domain; only the payer's own
//!   key's signature is answered (a smart wallet's is simulated).
//!
//! Anything else, and everything while the view is not fresh (its last successful poll more than
//! [`FRESH`] ago, or none yet), is simulated as before. A reorg (the view's block no longer the
//! node's at its height) starts the view again. The view polls only while verifications come:
//! after [`IDLE`] without one it stops, and the next verification starts it again.
//!
//! What it cannot see: an account that gains code without a token log (an EIP-7702 delegation)
//! after a simulation cleared it is answered by its ECDSA signature, as before the delegation;
//! `/settle` simulates again before it sends, so such a payment fails there, and nothing moves.

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex, Weak},
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{SolCall, SolEvent},
};
use tollgate_chain::{BlockRef, Chain, Error as ChainError, LogFilter, contracts::Token};

/// How often the view asks the node for new blocks.
pub(crate) const POLL: Duration = Duration::from_millis(500);

/// The view answers only while its last successful poll is at most this old.
pub(crate) const FRESH: Duration = Duration::from_secs(1);

/// The view stops polling after this long without a verification.
pub(crate) const IDLE: Duration = Duration::from_secs(60);

/// Most nonce uses kept; past it the view starts again (reading the lookback anew).
const MAX_USES: usize = 1_000_000;

/// Blocks per `eth_getLogs` while the view reads the lookback (hosted nodes cap the range).
const LOGS_CHUNK: u64 = 2_000;

/// FiatToken's `Mint` and `Burn`: each comes with the `Transfer` that moves the balance, and
/// changes nothing else a transfer checks.
const BALANCE_EVENTS: [&str; 2] = ["Mint(address,address,uint256)", "Burn(address,uint256)"];

/// What the view says of a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// It would go through at the view's block.
    Passes,
    /// Its nonce is used (or cancelled) on chain.
    Used,
    /// The payer's balance at the view's block is below its value.
    InsufficientFunds,
}

/// The transfer a verification asks about.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Transfer {
    pub(crate) from: Address,
    pub(crate) to: Address,
    pub(crate) value: U256,
    pub(crate) valid_after: u64,
    pub(crate) valid_before: u64,
    pub(crate) nonce: B256,
}

/// One network's view (see the module).
#[derive(Debug)]
pub(crate) struct View {
    chain: Arc<dyn Chain>,
    token: Address,
    lookback: u64,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// The last block whose logs were applied; `None` until the view has read the lookback.
    head: Option<BlockRef>,
    /// When the last poll that reached the node's head began.
    fresh_at: Option<Instant>,
    /// The timestamp of the first block read: every nonce use since is in `used`.
    since: u64,
    used: HashSet<(Address, B256)>,
    /// Balances read at a block of the view, moved by every `Transfer` since.
    balances: HashMap<Address, U256>,
    /// Balances to read at the next poll.
    wanted: HashSet<Address>,
    /// Payer and payee pairs whose transfer a simulation passed, since the token last logged
    /// anything that may change its rules.
    cleared: HashSet<(Address, Address)>,
    /// Moves on whenever `cleared` is forgotten: a simulation that began before cannot clear.
    generation: u64,
    /// Nonces this facilitator has begun to settle: simulated, never answered from the view.
    settling: HashSet<(Address, B256)>,
    /// The last verification that asked, and whether a poller runs.
    asked_at: Option<Instant>,
    polling: bool,
    /// The node cannot serve the view (no block headers or calls at a block): never again.
    unsupported: bool,
}

impl State {
    /// Forgets everything learned from the chain: the next poll reads the lookback again.
    fn restart(&mut self) {
        self.head = None;
        self.fresh_at = None;
        self.used.clear();
        self.forget_rules();
    }

    /// Forgets the pairs and balances (the token may have changed a rule).
    fn forget_rules(&mut self) {
        self.cleared.clear();
        self.balances.clear();
        self.generation += 1;
    }
}

impl View {
    /// The view of `token` on `chain`, reading the last `lookback` blocks' nonce uses when it
    /// starts; `on: false` never answers (every payment is simulated).
    pub(crate) fn new(chain: Arc<dyn Chain>, token: Address, lookback: u64, on: bool) -> Self {
        let state = State {
            unsupported: !on,
            ..State::default()
        };
        Self {
            chain,
            token,
            lookback,
            state: Arc::new(Mutex::new(state)),
        }
    }

    /// What the view says of `t`, signed by its payer's own key (the caller recovered it), at the
    /// view's block; `None` when it cannot say (simulate). Starts the view when it is not running.
    fn answer(&self, t: &Transfer) -> Option<Answer> {
        let mut s = lock(&self.state);
        s.asked_at = Some(Instant::now());
        if s.unsupported {
            return None;
        }
        if !s.polling {
            s.polling = self.start(Arc::downgrade(&self.state));
        }
        let head = s.head?;
        if s.fresh_at.is_none_or(|at| at.elapsed() > FRESH) {
            return None;
        }
        if s.settling.contains(&(t.from, t.nonce)) {
            return None;
        }
        if s.used.contains(&(t.from, t.nonce)) {
            return Some(Answer::Used);
        }
        // Used before the view's first block, perhaps.
        if t.valid_after < s.since {
            return None;
        }
        if !s.cleared.contains(&(t.from, t.to)) {
            return None;
        }
        if !(head.timestamp > t.valid_after && head.timestamp < t.valid_before) {
            return None;
        }
        match s.balances.get(&t.from) {
            Some(b) if *b >= t.value => Some(Answer::Passes),
            Some(_) => Some(Answer::InsufficientFunds),
            None => {
                s.wanted.insert(t.from);
                None
            }
        }
    }

    /// [`View::answer`], for a transfer whose signature `signed_by_payer` checks (recovered under
    /// the token's domain): asked only when the answer depends on it (a used nonce is refused
    /// first, as the token refuses it), outside the view's lock. `None` when the signature is
    /// not the payer's own key's (the simulation names it, or asks the payer's wallet).
    pub(crate) fn answer_signed(
        &self,
        t: &Transfer,
        signed_by_payer: impl FnOnce() -> bool,
    ) -> Option<Answer> {
        match self.answer(t)? {
            Answer::Used => Some(Answer::Used),
            other => signed_by_payer().then_some(other),
        }
    }

    /// The chain's clock as of the view's block, and when the view read it: `None` unless the
    /// view is fresh (then it saves a reading of the latest block of its own).
    pub(crate) fn clock(&self) -> Option<(u64, Instant)> {
        let s = lock(&self.state);
        let (head, at) = (s.head?, s.fresh_at?);
        (at.elapsed() <= FRESH).then_some((head.timestamp, at))
    }

    /// Where the view's knowledge of the token's rules stands: pass it to [`View::cleared`]
    /// after a simulation begun now.
    pub(crate) fn generation(&self) -> u64 {
        lock(&self.state).generation
    }

    /// A simulation of a transfer from `from` to `to`, begun at `generation`, passed: the pair's
    /// next verifications may be answered by the view (once it knows `from`'s balance).
    pub(crate) fn cleared(&self, from: Address, to: Address, generation: u64) {
        let mut s = lock(&self.state);
        if s.generation == generation && s.head.is_some() {
            s.cleared.insert((from, to));
            if !s.balances.contains_key(&from) {
                s.wanted.insert(from);
            }
        }
    }

    /// This facilitator begins to settle `from`'s authorization `nonce`: its verifications are
    /// simulated from now on (the view learns of the use only once it is mined and read).
    pub(crate) fn settling(&self, from: Address, nonce: B256) {
        let mut s = lock(&self.state);
        if s.settling.len() >= MAX_USES {
            s.settling.clear();
            s.forget_rules();
        }
        s.settling.insert((from, nonce));
    }

    /// Starts the view's poller on the current runtime; `false` when there is none.
    fn start(&self, state: Weak<Mutex<State>>) -> bool {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let (chain, token, lookback) = (Arc::clone(&self.chain), self.token, self.lookback);
        rt.spawn(async move {
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(state) = state.upgrade() else { return };
                {
                    let mut s = lock(&state);
                    if s.asked_at.is_none_or(|at| at.elapsed() > IDLE) {
                        // Idle: stop, and start afresh when asked again (the node's calls are
                        // billed; a view nobody asks is not worth them).
                        s.polling = false;
                        s.restart();
                        return;
                    }
                }
                let began = Instant::now();
                match poll(&chain, token, lookback, &state).await {
                    Ok(()) => lock(&state).fresh_at = Some(began),
                    Err(ChainError::Unsupported(what)) => {
                        tracing::debug!(
                            what,
                            "the node cannot serve the token view; /verify simulates every payment"
                        );
                        let mut s = lock(&state);
                        s.unsupported = true;
                        s.polling = false;
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "the token view could not follow the node")
                    }
                }
            }
        });
        true
    }
}

/// One poll: reads the lookback when the view has no block yet, otherwise the logs of the
/// blocks since its block; then the balances wanted, at the view's (new) block.
async fn poll(
    chain: &Arc<dyn Chain>,
    token: Address,
    lookback: u64,
    state: &Mutex<State>,
) -> Result<(), ChainError> {
    let latest = chain
        .block_ref(None)
        .await?
        .ok_or_else(|| ChainError::Unavailable("the node has no latest block".into()))?;
    let head = lock(state).head;
    let head = match head {
        None => {
            let first = latest.number.saturating_sub(lookback);
            let since = chain
                .block_ref(Some(first))
                .await?
                .ok_or_else(|| ChainError::Unavailable(format!("the node has no block {first}")))?;
            let mut used = HashSet::new();
            let mut from = first;
            while from <= latest.number {
                let to = (from + LOGS_CHUNK - 1).min(latest.number);
                for log in chain.logs(&uses(token, from, to)).await? {
                    if let Some(u) = decode_use(&log.log) {
                        used.insert(u);
                    }
                }
                from = to + 1;
            }
            if !canonical(&**chain, &latest).await? {
                return Err(reorged(&latest));
            }
            let mut s = lock(state);
            s.restart();
            s.used = used;
            // From genesis, every use is known.
            s.since = if first == 0 { 0 } else { since.timestamp };
            s.head = Some(latest);
            latest
        }
        Some(head)
            if latest.number < head.number
                || (latest.number == head.number && latest.hash != head.hash) =>
        {
            // Reorged (or another node behind a balancer): start again.
            lock(state).restart();
            return Err(ChainError::Unavailable(format!(
                "the node's block {} is not the view's block {}",
                latest.number, head.number
            )));
        }
        Some(head) if latest.number == head.number => head,
        Some(head) => {
            let logs = chain
                .logs(&LogFilter {
                    from_block: head.number + 1,
                    to_block: Some(latest.number),
                    addresses: vec![token],
                    ..Default::default()
                })
                .await?;
            // The view's block still the node's (the next block's parent, when it is the only
            // new one). A reorg between the two reads above is found by the next poll's check,
            // which starts the view again.
            let next = latest.number == head.number + 1 && latest.parent_hash == head.hash;
            if !(next || canonical(&**chain, &head).await?) {
                // Reorged under the view: start again.
                lock(state).restart();
                return Err(reorged(&head));
            }
            let mut s = lock(state);
            if s.head != Some(head) {
                return Ok(());
            }
            for log in &logs {
                apply(&mut s, &log.log);
            }
            if s.used.len() > MAX_USES {
                s.restart();
                return Ok(());
            }
            s.head = Some(latest);
            latest
        }
    };
    let wanted: Vec<Address> = lock(state).wanted.drain().collect();
    if wanted.is_empty() {
        return Ok(());
    }
    // Together: the node's client sends calls that wait together as one batch.
    let mut reads = tokio::task::JoinSet::new();
    for (i, account) in wanted.iter().enumerate() {
        let (chain, data) = (
            Arc::clone(chain),
            Token::balanceOfCall { account: *account }.abi_encode(),
        );
        reads.spawn(async move { (i, chain.call_at(token, data.into(), head.hash).await) });
    }
    let mut balances: Vec<Option<Result<alloy::primitives::Bytes, ChainError>>> =
        wanted.iter().map(|_| None).collect();
    while let Some(done) = reads.join_next().await {
        if let Ok((i, read)) = done {
            balances[i] = Some(read);
        }
    }
    let mut s = lock(state);
    if s.head != Some(head) {
        // Moved on meanwhile (another poll cannot run, but a restart can): read them next time.
        s.wanted.extend(wanted);
        return Ok(());
    }
    for (account, read) in wanted.into_iter().zip(balances) {
        let read =
            read.unwrap_or_else(|| Err(ChainError::Unavailable("a balance read panicked".into())));
        match read.and_then(|out| {
            Token::balanceOfCall::abi_decode_returns(&out)
                .map_err(|e| ChainError::Unavailable(format!("balanceOf answered {e}")))
        }) {
            Ok(balance) => {
                s.balances.insert(account, balance);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether `block` is still the node's block at its height.
async fn canonical(chain: &dyn Chain, block: &BlockRef) -> Result<bool, ChainError> {
    let now = chain.block_ref(Some(block.number)).await?;
    Ok(now.is_some_and(|b| b.hash == block.hash))
}

fn reorged(block: &BlockRef) -> ChainError {
    ChainError::Unavailable(format!(
        "block {} was reorged while the view read it",
        block.number
    ))
}

/// The token's nonce uses in blocks `from..=to`.
fn uses(token: Address, from: u64, to: u64) -> LogFilter {
    LogFilter {
        from_block: from,
        to_block: Some(to),
        addresses: vec![token],
        topics: [
            Some(vec![
                Token::AuthorizationUsed::SIGNATURE_HASH,
                Token::AuthorizationCanceled::SIGNATURE_HASH,
            ]),
            None,
            None,
            None,
        ],
    }
}

fn decode_use(log: &alloy::primitives::Log) -> Option<(Address, B256)> {
    if let Ok(u) = Token::AuthorizationUsed::decode_log(log) {
        return Some((u.authorizer, u.nonce));
    }
    Token::AuthorizationCanceled::decode_log(log)
        .ok()
        .map(|c| (c.authorizer, c.nonce))
}

/// Applies one of the token's logs to the view.
fn apply(s: &mut State, log: &alloy::primitives::Log) {
    if let Some(u) = decode_use(log) {
        s.settling.remove(&u);
        s.used.insert(u);
    } else if let Ok(t) = Token::Transfer::decode_log(log) {
        if let Some(b) = s.balances.get_mut(&t.from) {
            match b.checked_sub(t.value) {
                Some(left) => *b = left,
                // Not what the chain holds: read it again.
                None => {
                    s.balances.remove(&t.from);
                }
            }
        }
        if let Some(b) = s.balances.get_mut(&t.to) {
            *b = b.saturating_add(t.value);
        }
    } else if Token::Approval::decode_log(log).is_err()
        && !log.topics().first().is_some_and(|t| {
            BALANCE_EVENTS
                .iter()
                .any(|e| alloy::primitives::keccak256(e) == *t)
        })
    {
        // A log the view does not model (a pause, a blacklisting, an upgrade, a mint's
        // configuration…): whatever it changed, every pair is simulated again.
        s.forget_rules();
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use alloy::primitives::{Log, LogData, keccak256};

    use super::*;

    fn log(event: impl SolEvent) -> Log {
        Log {
            address: Address::repeat_byte(0xee),
            data: event.encode_log_data(),
        }
    }

    fn state() -> State {
        let mut s = State::default();
        s.cleared
            .insert((Address::repeat_byte(1), Address::repeat_byte(2)));
        s.balances.insert(Address::repeat_byte(1), U256::from(100));
        s.balances.insert(Address::repeat_byte(2), U256::from(5));
        s
    }

    /// Transfers move the balances the view holds; a nonce's use is recorded and leaves the
    /// settling set; approvals, mints and burns change nothing else; any other log forgets
    /// every pair and balance, and moves the generation on.
    #[test]
    fn each_log_moves_what_it_changes_and_an_unknown_one_forgets_the_rules() {
        let (a, b) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let mut s = state();
        apply(
            &mut s,
            &log(Token::Transfer {
                from: a,
                to: b,
                value: U256::from(30),
            }),
        );
        assert_eq!(s.balances[&a], U256::from(70));
        assert_eq!(s.balances[&b], U256::from(35));
        // More than the view holds: not the chain's balance; read it again.
        apply(
            &mut s,
            &log(Token::Transfer {
                from: b,
                to: a,
                value: U256::from(36),
            }),
        );
        assert!(!s.balances.contains_key(&b));
        assert_eq!(s.balances[&a], U256::from(106));

        let nonce = B256::repeat_byte(9);
        s.settling.insert((a, nonce));
        apply(
            &mut s,
            &log(Token::AuthorizationUsed {
                authorizer: a,
                nonce,
            }),
        );
        assert!(s.used.contains(&(a, nonce)) && !s.settling.contains(&(a, nonce)));
        apply(
            &mut s,
            &log(Token::AuthorizationCanceled {
                authorizer: b,
                nonce,
            }),
        );
        assert!(s.used.contains(&(b, nonce)));

        let generation = s.generation;
        apply(
            &mut s,
            &log(Token::Approval {
                owner: a,
                spender: b,
                value: U256::from(1),
            }),
        );
        for event in BALANCE_EVENTS {
            let topics = vec![keccak256(event), B256::left_padding_from(a.as_slice())];
            let data = LogData::new_unchecked(topics, U256::from(1).to_be_bytes_vec().into());
            apply(
                &mut s,
                &Log {
                    address: Address::repeat_byte(0xee),
                    data,
                },
            );
        }
        assert_eq!(s.generation, generation);
        assert!(s.cleared.contains(&(a, b)));

        // A pause, a blacklisting, an upgrade: whatever it is, every pair is simulated again.
        let paused = LogData::new_unchecked(vec![keccak256("Pause()")], Default::default());
        apply(
            &mut s,
            &Log {
                address: Address::repeat_byte(0xee),
                data: paused,
            },
        );
        assert_eq!(s.generation, generation + 1);
        assert!(s.cleared.is_empty() && s.balances.is_empty());
        assert!(s.used.contains(&(a, nonce)), "uses are facts, kept");
    }
}
