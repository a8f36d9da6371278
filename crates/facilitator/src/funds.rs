//! Relayer funds: the gas each relayer holds on each network, watched against a floor.
//!
//! A relayer pays the gas of every transaction it sends, and a relayer that runs dry stops every
//! payment it is given. So:
//!
//! - **Before a payment is recorded**, the relayer it goes out from must hold the gas of one
//!   settlement ([`SETTLEMENT_GAS`](crate::check::SETTLEMENT_GAS) at the network's current max
//!   fee, [`Chain::max_fee_per_gas`](tollgate_chain::Chain::max_fee_per_gas)). One that does not
//!   is passed over for another this replica holds; when none can pay, the payment is answered
//!   `503 Unavailable` with `Retry-After` before anything is written or sent: the payer's
//!   authorization stays unused, and the same payment may be sent again once a relayer is funded
//!   (or to another replica). The same holds while the fee market is above the network's
//!   `max_fee_gwei`.
//! - **Below the floor** ([`Settings::relayer_floor_settlements`](crate::Settings) settlements'
//!   gas, 100 by default, as `tollgate facilitator --check` counts it), a relayer is reported
//!   before it runs dry: `/readyz` names it (the replica stays ready while a relayer can pay one
//!   settlement; one none of whose relayers can is not ready, so a load balancer sends payments to
//!   another), the gauges `tollgate_relayer_balance_wei` and `tollgate_relayer_below_floor` say
//!   so, and one `relayer.low_balance` webhook event goes to the operator's endpoints (those of
//!   the provider account `fees.fee_recipient`), once per fall below the floor.
//!
//! Balances are read at most every [`FUNDS_TTL`] per relayer and network (one `eth_getBalance`);
//! between reads, each payment given to a relayer lowers its known balance by the settlement's
//! most possible gas cost, so a burst cannot overdraw it on a stale reading.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use alloy::primitives::{Address, U256};
use tollgate_chain::Error as ChainError;
use tollgate_protocol::webhook::{EventData, EventType, events::RelayerLowBalance};

use crate::{
    error::{Error, Result},
    facilitator::{Core, Network, unix_now},
    store::{NewEvent, event_id},
};

/// How long a relayer's balance reading is used before it is read again.
pub const FUNDS_TTL: Duration = Duration::from_secs(5);
/// Default [`Settings::relayer_floor_settlements`](crate::Settings).
pub const DEFAULT_FLOOR_SETTLEMENTS: u64 = crate::check::DEFAULT_FLOOR_SETTLEMENTS;
/// The webhook event of a relayer fallen below the floor.
pub const LOW_BALANCE_EVENT: &str = EventType::RelayerLowBalance.as_str();
/// What a payment refused for want of relayer gas tells the client to wait.
pub(crate) const DRY_RETRY_AFTER_SECS: u64 = 30;

/// One relayer's known balance on one network.
#[derive(Clone, Copy, Debug)]
struct Known {
    /// Its balance as last read, less what payments given to it since may spend.
    balance: U256,
    read_at: Instant,
    /// The floor at the last reading (settlements' gas at the max fee then).
    floor: U256,
    /// One settlement's most possible gas cost at the last reading.
    settlement: U256,
    /// Whether the last reading was below the floor (a fall is reported once, when a reading
    /// first finds it there).
    low: bool,
}

/// A relayer on a network: (network name, relayer).
type RelayerKey = (String, Address);

/// What is known of every relayer's funds: per (network, relayer).
#[derive(Debug, Default)]
pub(crate) struct Funds {
    known: Mutex<HashMap<RelayerKey, Known>>,
    /// Per (network, relayer), held while its balance is read: the requests that find its
    /// reading stale together wait for one `eth_getBalance` instead of each asking (one lock
    /// each, so a slow node of one network never holds up another's readings).
    reading: Mutex<HashMap<RelayerKey, Arc<tokio::sync::Mutex<()>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A relayer's standing on one network, as `/readyz` and the gauges report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Standing {
    pub(crate) relayer: Address,
    pub(crate) balance: U256,
    pub(crate) floor: U256,
    /// Whether the last reading was below the floor.
    pub(crate) low: bool,
    /// Whether it can pay one settlement.
    pub(crate) can_pay: bool,
}

impl Funds {
    /// Registers the gauges of `relayers` on `networks`.
    pub(crate) fn register_gauges(
        self: &Arc<Self>,
        metrics: &crate::metrics::Metrics,
        networks: &[String],
        relayers: &[Address],
    ) {
        for network in networks {
            for relayer in relayers {
                let key = (network.clone(), *relayer);
                let address = format!("{relayer:#x}");
                let labels = [("network", network.as_str()), ("relayer", address.as_str())];
                let funds = Arc::clone(self);
                let k = key.clone();
                let _ = metrics.gauge(
                    "tollgate_relayer_balance_wei",
                    "A relayer's gas balance on a network, as last read (NaN before the first \
                     reading).",
                    &labels,
                    move || {
                        lock(&funds.known)
                            .get(&k)
                            .map_or(f64::NAN, |k| f64::from(k.balance))
                    },
                );
                let funds = Arc::clone(self);
                let _ = metrics.gauge(
                    "tollgate_relayer_below_floor",
                    "1 while a relayer holds less gas than the floor (relayer_floor_settlements \
                     settlements at the current max fee), 0 above it, NaN before the first \
                     reading.",
                    &labels,
                    move || {
                        lock(&funds.known)
                            .get(&key)
                            .map_or(f64::NAN, |k| f64::from(u8::from(k.low)))
                    },
                );
            }
        }
    }
}

impl Core {
    /// The relayer a payment on `net` goes out from: one this replica holds (in turn) that can
    /// pay one settlement's gas now. None can: `503` ([`Error::RelayersDry`]) before anything is
    /// written; the fee market above the network's cap: the chain's `Unavailable`.
    pub(crate) async fn funded_relayer(&self, net: &Network) -> Result<Address> {
        self.pick_relayer(net, true).await
    }

    /// Whether a payment on `net` could go out now ([`funded_relayer`](Self::funded_relayer)'s
    /// refusals), without taking a relayer's turn or its gas: a check before the work that
    /// picks the relayer.
    pub(crate) async fn check_funded(&self, net: &Network) -> Result<()> {
        self.pick_relayer(net, false).await.map(|_| ())
    }

    /// A held relayer that can pay one settlement on `net`; with `take`, the next in turn, its
    /// known balance lowered by the settlement's cost.
    async fn pick_relayer(&self, net: &Network, take: bool) -> Result<Address> {
        let first = match self.held_relayers().first() {
            Some(r) if !take => *r,
            _ => self.relayer().await?,
        };
        let price = match net.chain.max_fee_per_gas().await {
            Ok(p) => U256::from(p),
            // A backend that cannot price a transaction: its funds cannot be judged here (the
            // node refuses a transaction its sender cannot pay).
            Err(ChainError::Unsupported(_)) => return Ok(first),
            Err(e) => return Err(e.into()),
        };
        let held = self.held_relayers();
        let start = held.iter().position(|r| *r == first).unwrap_or(0);
        let mut dry = Vec::new();
        for i in 0..held.len().max(1) {
            let relayer = held
                .get((start + i) % held.len().max(1))
                .copied()
                .unwrap_or(first);
            match self.take_gas(net, relayer, price, take).await {
                Ok(true) => return Ok(relayer),
                Ok(false) => dry.push(relayer),
                Err(e) => return Err(e.into()),
            }
        }
        let standing = self.standing(net).await;
        let holds = standing
            .iter()
            .map(|s| format!("{} holds {}", s.relayer, ether(s.balance)))
            .collect::<Vec<_>>()
            .join(", ");
        tracing::error!(network = %net.spec.name, relayers = ?dry, "every relayer is out of gas: payments are refused until one is funded");
        Err(Error::RelayersDry(format!(
            "no relayer of this replica can pay a settlement's gas on {} ({holds}; one \
             settlement may cost {}): nothing was written or sent; send the payment again in \
             {DRY_RETRY_AFTER_SECS} s (or to another replica)",
            net.spec.name,
            ether(U256::from(crate::check::SETTLEMENT_GAS) * price)
        )))
    }

    /// Whether `relayer` can pay one settlement on `net` at `price` per gas; if so and `take`,
    /// its known balance is lowered by that cost until the next reading.
    async fn take_gas(
        &self,
        net: &Network,
        relayer: Address,
        price: U256,
        take: bool,
    ) -> tollgate_chain::Result<bool> {
        let settlement = U256::from(crate::check::SETTLEMENT_GAS) * price;
        let known = self.read_funds(net, relayer, price, false).await?;
        if known.balance < settlement {
            return Ok(false);
        }
        if !take {
            return Ok(true);
        }
        let key = (net.spec.name.clone(), relayer);
        if let Some(k) = lock(&self.funds.known).get_mut(&key) {
            k.balance = k.balance.saturating_sub(settlement);
        }
        Ok(true)
    }

    /// `relayer`'s known funds on `net`, read from the chain when the reading is older than
    /// [`FUNDS_TTL`] (or `fresh`); a fall below the floor is reported here.
    async fn read_funds(
        &self,
        net: &Network,
        relayer: Address,
        price: U256,
        fresh: bool,
    ) -> tollgate_chain::Result<Known> {
        let key = (net.spec.name.clone(), relayer);
        let current = || {
            lock(&self.funds.known)
                .get(&key)
                .copied()
                .filter(|k| !fresh && k.read_at.elapsed() < FUNDS_TTL)
        };
        if let Some(k) = current() {
            return Ok(k);
        }
        // One reading at a time per relayer: a request that waited for another's takes it.
        let asked = Instant::now();
        let gate = Arc::clone(lock(&self.funds.reading).entry(key.clone()).or_default());
        let _reading = gate.lock().await;
        let before = lock(&self.funds.known).get(&key).copied();
        if let Some(k) = before
            && (k.read_at >= asked || current().is_some())
        {
            return Ok(k);
        }
        let balance = net.chain.balance(relayer).await?;
        let settlement = U256::from(crate::check::SETTLEMENT_GAS) * price;
        let floor = settlement * U256::from(self.settings.relayer_floor_settlements);
        let known = Known {
            balance,
            read_at: Instant::now(),
            floor,
            settlement,
            low: balance < floor,
        };
        lock(&self.funds.known).insert(key, known);
        // Judged by readings only: a known balance lowered by the payments given out since
        // (`take_gas`) is an estimate, not a fall.
        let was_low = before.is_some_and(|b| b.low);
        if known.low && !was_low {
            self.report_low(net, relayer, &known).await;
        }
        if !known.low && was_low {
            tracing::info!(network = %net.spec.name, %relayer, balance = %ether(balance), "relayer funded above the floor again");
        }
        Ok(known)
    }

    /// Logs, and records the `relayer.low_balance` event for the operator's endpoints.
    async fn report_low(&self, net: &Network, relayer: Address, known: &Known) {
        let left = if known.settlement.is_zero() {
            U256::MAX
        } else {
            known.balance / known.settlement
        };
        tracing::warn!(
            network = %net.spec.name, %relayer, balance = %ether(known.balance),
            floor = %ether(known.floor), settlements_left = %left,
            "relayer below the floor: fund it before it runs dry (payments it cannot pay are refused with 503)"
        );
        let Some(operator) = self.settings.operator else {
            return;
        };
        let now = unix_now();
        // Once per fall: a replica reports each fall it sees; several replicas, or a restart,
        // within the hour are one event.
        let hour = (now / 3600).to_be_bytes();
        let data = EventData::RelayerLowBalance(RelayerLowBalance {
            network: net.name.clone(),
            relayer,
            balance: known.balance.into(),
            floor: known.floor.into(),
            settlements_left: left.into(),
        });
        let id = event_id(&[
            LOW_BALANCE_EVENT.as_bytes(),
            net.spec.name.as_bytes(),
            relayer.as_slice(),
            &hour,
        ]);
        let event = NewEvent::new(id, operator, &data, now);
        if let Err(e) = self.store.record_event(&event).await {
            tracing::warn!(error = %e, "could not record the relayer.low_balance event");
        }
    }

    /// Every held relayer's standing on `net` (read afresh when stale); for `/readyz`.
    pub(crate) async fn standing(&self, net: &Network) -> Vec<Standing> {
        let Ok(price) = net.chain.max_fee_per_gas().await else {
            return Vec::new();
        };
        let price = U256::from(price);
        let mut out = Vec::new();
        for relayer in self.held_relayers() {
            if let Ok(k) = self.read_funds(net, relayer, price, false).await {
                out.push(Standing {
                    relayer,
                    balance: k.balance,
                    floor: k.floor,
                    low: k.low,
                    can_pay: k.balance >= k.settlement,
                });
            }
        }
        out
    }

    /// Reads every held relayer's funds on every network afresh (reporting falls below the
    /// floor), so that a quiet facilitator still notices; run periodically by [`crate::serve`].
    pub(crate) async fn watch_funds(&self) {
        for net in self.networks.values() {
            let Ok(price) = net.chain.max_fee_per_gas().await else {
                continue;
            };
            for relayer in self.held_relayers() {
                if let Err(e) = self.read_funds(net, relayer, U256::from(price), true).await {
                    tracing::debug!(network = %net.spec.name, %relayer, error = %e, "relayer balance unreadable");
                }
            }
        }
    }
}

/// Wei as ether, for messages (as `--check` writes it).
pub(crate) use crate::check::ether;
