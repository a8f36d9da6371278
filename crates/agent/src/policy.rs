//! The spending policy every agent carries, and the in-process budget that enforces it.

use std::sync::{Arc, Mutex};

use alloy::primitives::{Address, U256};
use tollgate_protocol::{Amount, network};

use crate::error::Refusal;

/// What an agent may pay. Mandatory: there is no agent without one.
///
/// Amounts are in the token's smallest unit (6 decimals: `1_000_000` is 1.00 token). The
/// allow-lists are off when `None`; `Some(vec![])` allows nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpendPolicy {
    /// The most one request may cost.
    pub per_request_cap: Amount,
    /// The most this agent pays in total, over its lifetime in this process.
    pub total_budget: Amount,
    /// Networks the agent pays on (x402 names; `base-mainnet` matches `base`).
    pub networks: Option<Vec<String>>,
    /// Tokens the agent pays with.
    pub tokens: Option<Vec<Address>>,
    /// Recipients the agent pays.
    pub payees: Option<Vec<Address>>,
}

impl SpendPolicy {
    /// A policy with these caps and no allow-lists.
    pub fn new(per_request_cap: Amount, total_budget: Amount) -> Self {
        Self {
            per_request_cap,
            total_budget,
            networks: None,
            tokens: None,
            payees: None,
        }
    }

    /// Only these networks.
    pub fn networks(mut self, networks: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.networks = Some(networks.into_iter().map(Into::into).collect());
        self
    }

    /// Only these tokens.
    pub fn tokens(mut self, tokens: impl IntoIterator<Item = Address>) -> Self {
        self.tokens = Some(tokens.into_iter().collect());
        self
    }

    /// Only these payees.
    pub fn payees(mut self, payees: impl IntoIterator<Item = Address>) -> Self {
        self.payees = Some(payees.into_iter().collect());
        self
    }

    /// Whether an option on `network` in `token` to `pay_to` for `price` passes the allow-lists
    /// and the per-request cap (the budget is checked when reserving).
    pub(crate) fn check(
        &self,
        network_name: &str,
        token: Address,
        pay_to: Address,
        price: Amount,
    ) -> Result<(), Refusal> {
        if let Some(allowed) = &self.networks
            && !allowed
                .iter()
                .any(|n| network::same_network(n, network_name))
        {
            return Err(Refusal::Network(network_name.to_owned()));
        }
        if let Some(allowed) = &self.tokens
            && !allowed.contains(&token)
        {
            return Err(Refusal::Token(token));
        }
        if let Some(allowed) = &self.payees
            && !allowed.contains(&pay_to)
        {
            return Err(Refusal::Payee(pay_to));
        }
        if price > self.per_request_cap {
            return Err(Refusal::OverCap {
                price,
                cap: self.per_request_cap,
            });
        }
        Ok(())
    }
}

/// The budget shared by an agent's clones: what is spent or reserved, under one lock.
#[derive(Debug)]
pub(crate) struct Budget {
    total: U256,
    used: Mutex<U256>,
}

impl Budget {
    pub(crate) fn new(total: Amount) -> Arc<Self> {
        Arc::new(Self {
            total: total.get(),
            used: Mutex::new(U256::ZERO),
        })
    }

    /// Spent or reserved so far.
    pub(crate) fn used(&self) -> Amount {
        Amount(*self.lock())
    }

    /// What is left.
    pub(crate) fn remaining(&self) -> Amount {
        Amount(self.total.saturating_sub(*self.lock()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, U256> {
        // The guarded value is a number updated in one statement: a poisoned lock holds a valid one.
        self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves `price`, or refuses when it does not fit in what is left. Check and update
    /// happen under one lock, so concurrent payments never overshoot the total.
    pub(crate) fn reserve(self: &Arc<Self>, price: Amount) -> Result<Reservation, Refusal> {
        let mut used = self.lock();
        let remaining = self.total.saturating_sub(*used);
        if price.get() > remaining {
            return Err(Refusal::OverBudget {
                price,
                remaining: Amount(remaining),
            });
        }
        *used += price.get();
        Ok(Reservation {
            budget: Arc::clone(self),
            amount: price.get(),
            armed: true,
        })
    }
}

/// A reserved amount: released on drop unless [`Reservation::commit`]ted once the signed payment
/// has left the process.
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: Arc<Budget>,
    amount: U256,
    armed: bool,
}

impl Reservation {
    /// The payment was sent: the amount stays spent.
    pub(crate) fn commit(mut self) {
        self.armed = false;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.armed {
            let mut used = self.budget.lock();
            *used = used.saturating_sub(self.amount);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_never_overshoot_and_release_on_drop() {
        let budget = Budget::new(Amount::from_units(1_000));
        let a = budget.reserve(Amount::from_units(600)).unwrap();
        assert!(matches!(
            budget.reserve(Amount::from_units(600)),
            Err(Refusal::OverBudget { .. })
        ));
        drop(a);
        assert_eq!(budget.used(), Amount::ZERO);
        budget.reserve(Amount::from_units(600)).unwrap().commit();
        assert_eq!(budget.used(), Amount::from_units(600));
        assert_eq!(budget.remaining(), Amount::from_units(400));
        let b = budget.reserve(Amount::from_units(400)).unwrap();
        b.commit();
        assert_eq!(budget.remaining(), Amount::ZERO);
    }

    #[test]
    fn concurrent_reservations_fit_the_total() {
        let budget = Budget::new(Amount::from_units(10));
        let granted: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..32)
                .map(|_| {
                    let b = Arc::clone(&budget);
                    s.spawn(move || b.reserve(Amount::from_units(3)).map(Reservation::commit))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| usize::from(h.join().unwrap().is_ok()))
                .sum()
        });
        assert_eq!(granted, 3);
        assert_eq!(budget.used(), Amount::from_units(9));
    }

    #[test]
    fn allow_lists_and_cap() {
        let token = Address::repeat_byte(1);
        let payee = Address::repeat_byte(2);
        let p = SpendPolicy::new(Amount::from_units(100), Amount::from_units(1_000))
            .networks(["base-mainnet"])
            .tokens([token])
            .payees([payee]);
        assert_eq!(
            p.check("base", token, payee, Amount::from_units(100)),
            Ok(())
        );
        assert_eq!(
            p.check("base-sepolia", token, payee, Amount::from_units(1)),
            Err(Refusal::Network("base-sepolia".into()))
        );
        assert_eq!(
            p.check("base", Address::ZERO, payee, Amount::from_units(1)),
            Err(Refusal::Token(Address::ZERO))
        );
        assert_eq!(
            p.check("base", token, Address::ZERO, Amount::from_units(1)),
            Err(Refusal::Payee(Address::ZERO))
        );
        assert!(matches!(
            p.check("base", token, payee, Amount::from_units(101)),
            Err(Refusal::OverCap { .. })
        ));
    }
}
