//! The spending policy every agent carries, and the in-process budget that enforces it.

use std::sync::{Arc, Mutex};

use alloy::primitives::{Address, U256};
use tollgate_protocol::{Amount, network};

use crate::error::Refusal;

/// What an agent may pay. Mandatory: there is no agent without one.
///
/// Amounts are in the token's smallest unit (6 decimals: `1_000_000` is 1.00 token). The
/// allow-lists are off when `None`; `Some(vec![])` allows nothing.
///
/// Subscriptions are bounded by the total budget (the first cycle is reserved in it) and by a
/// cap per cycle, never by the per-request cap. By default the agent prefers to subscribe, as the
/// spec asks of a client that sees `subscriptionScheme: true`: when a 402 offers a plan whose
/// cycle costs at most the total budget, [`Agent::pay`](crate::Agent::pay) subscribes (with no
/// overage allowance) rather than paying one-time. [`SpendPolicy::subscriptions`] sets another
/// cap per cycle and an overage allowance; [`SpendPolicy::no_subscriptions`] makes the agent
/// pay one-time only.
///
/// ```
/// use tollgate_agent::{Amount, SpendPolicy};
///
/// // 0.50 per request, 20.00 in total; subscribe to plans of at most 5.00 a cycle (no overage)
/// // when a 402 offers one.
/// let policy = SpendPolicy::new(Amount::from_units(500_000), Amount::from_units(20_000_000))
///     .subscriptions(Amount::from_units(5_000_000), Amount::ZERO);
/// assert_eq!(policy.subscriptions.unwrap().max_per_cycle, Amount::from_units(5_000_000));
///
/// // The default: plans of up to the whole budget a cycle.
/// let default = SpendPolicy::new(Amount::from_units(500_000), Amount::from_units(20_000_000));
/// assert_eq!(default.subscriptions.unwrap().max_per_cycle, Amount::from_units(20_000_000));
/// assert!(default.no_subscriptions().subscriptions.is_none());
/// ```
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
    /// Whether [`Agent::pay`](crate::Agent::pay) subscribes when a 402 offers a plan, and to
    /// what. The default: plans of up to the total budget a cycle, no overage allowance
    /// ([`SubscriptionPolicy::within`]); `None` ([`SpendPolicy::no_subscriptions`]): it never
    /// does and pays one-time.
    pub subscriptions: Option<SubscriptionPolicy>,
}

/// How the agent subscribes on its own initiative ([`SpendPolicy::subscriptions`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubscriptionPolicy {
    /// The most a plan may bill per cycle, for [`Agent::pay`](crate::Agent::pay)'s subscriptions
    /// and [`Agent::subscribe`](crate::Agent::subscribe)'s alike (the per-request cap never
    /// applies to a subscription).
    pub max_per_cycle: Amount,
    /// The overage cap per cycle the agent subscribes with.
    pub max_overage: Amount,
    /// The highest overage cap the agent raises one of its subscriptions to on its own, when a
    /// metered route answers `AllowanceExhausted` ([`SpendPolicy::raise_overage_to`]); at or
    /// below the subscription's cap (the default: `max_overage`), it never raises.
    pub overage_ceiling: Amount,
}

impl SubscriptionPolicy {
    /// The default: plans of up to `total_budget` a cycle, no overage allowance, no raise.
    pub fn within(total_budget: Amount) -> Self {
        Self {
            max_per_cycle: total_budget,
            max_overage: Amount::ZERO,
            overage_ceiling: Amount::ZERO,
        }
    }
}

impl SpendPolicy {
    /// A policy with these caps, no allow-lists, and the default subscriptions
    /// ([`SubscriptionPolicy::within`] the total budget).
    pub fn new(per_request_cap: Amount, total_budget: Amount) -> Self {
        Self {
            per_request_cap,
            total_budget,
            networks: None,
            tokens: None,
            payees: None,
            subscriptions: Some(SubscriptionPolicy::within(total_budget)),
        }
    }

    /// Never subscribes on its own: [`Agent::pay`](crate::Agent::pay) pays one-time even when a
    /// 402 prefers a plan. [`Agent::subscribe`](crate::Agent::subscribe) still subscribes when
    /// asked, to plans of up to the total budget a cycle.
    pub fn no_subscriptions(mut self) -> Self {
        self.subscriptions = None;
        self
    }

    /// Sets how [`Agent::pay`](crate::Agent::pay) subscribes: when a 402 offers a plan
    /// (`service.subscriptionScheme` with a `planId`) billing at most `max_per_cycle` a cycle,
    /// through a facilitator the agent may use, the agent subscribes once with `max_overage` as
    /// the overage cap, and serves this and later requests for the plan with `X-Service-Sub`.
    ///
    /// The first cycle is reserved in the total budget like any payment. Renewals are collected
    /// on-chain by the provider, outside this process, and are not counted in the budget: they
    /// are bounded by `max_per_cycle` (plus `max_overage`) per cycle and by the standing permit
    /// ([`PERMIT_CYCLES`](crate::PERMIT_CYCLES)).
    pub fn subscriptions(mut self, max_per_cycle: Amount, max_overage: Amount) -> Self {
        self.subscriptions = Some(SubscriptionPolicy {
            max_per_cycle,
            max_overage,
            overage_ceiling: max_overage,
        });
        self
    }

    /// Lets [`Agent::pay`](crate::Agent::pay) raise a subscription's overage cap, up to
    /// `ceiling` a cycle, when a metered route answers `AllowanceExhausted`: it raises the cap to
    /// `ceiling` once ([`Agent::raise_allowance`](crate::Agent::raise_allowance), the increase
    /// reserved in the total budget) and sends the request again once. Applies to the
    /// subscriptions the agent holds and to one a request names itself (`X-Service-Sub`).
    ///
    /// Only with subscriptions enabled: call it after [`SpendPolicy::subscriptions`] (without
    /// them, there is nothing to raise and it changes nothing).
    ///
    /// ```
    /// use tollgate_agent::{Amount, SpendPolicy};
    ///
    /// let policy = SpendPolicy::new(Amount::from_units(500_000), Amount::from_units(20_000_000))
    ///     .subscriptions(Amount::from_units(5_000_000), Amount::from_units(1_000_000))
    ///     .raise_overage_to(Amount::from_units(3_000_000));
    /// assert_eq!(policy.subscriptions.unwrap().overage_ceiling, Amount::from_units(3_000_000));
    /// ```
    pub fn raise_overage_to(mut self, ceiling: Amount) -> Self {
        if let Some(s) = &mut self.subscriptions {
            s.overage_ceiling = ceiling;
        }
        self
    }

    /// The most a subscription cycle may cost: [`SubscriptionPolicy::max_per_cycle`] when
    /// subscriptions are enabled, else the total budget; never the per-request cap.
    pub(crate) fn cycle_cap(&self) -> Amount {
        self.subscriptions
            .map_or(self.total_budget, |s| s.max_per_cycle)
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

    /// Whether the network allow-list lets the agent pay on `network_name` (always, without
    /// one).
    pub(crate) fn allows_network(&self, network_name: &str) -> bool {
        self.networks.as_ref().is_none_or(|allowed| {
            allowed
                .iter()
                .any(|n| network::same_network(n, network_name))
        })
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
        self.check_capped(network_name, token, pay_to, price, self.per_request_cap)
    }

    /// As [`check`](Self::check), against `cap` instead of the per-request cap.
    pub(crate) fn check_capped(
        &self,
        network_name: &str,
        token: Address,
        pay_to: Address,
        price: Amount,
        cap: Amount,
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
        if price > cap {
            return Err(Refusal::OverCap { price, cap });
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
    fn subscriptions_are_bounded_per_cycle_and_by_the_budget_never_per_request() {
        let p = SpendPolicy::new(Amount::from_units(100), Amount::from_units(1_000));
        // By default: preferred, within the budget a cycle, no overage.
        assert_eq!(
            p.subscriptions,
            Some(SubscriptionPolicy::within(Amount::from_units(1_000)))
        );
        assert_eq!(p.cycle_cap(), Amount::from_units(1_000));
        // Without subscribing on its own, an explicit subscription is still bounded by the
        // budget, not by the per-request cap.
        assert_eq!(
            p.clone().no_subscriptions().cycle_cap(),
            Amount::from_units(1_000)
        );
        let p = p.subscriptions(Amount::from_units(500), Amount::from_units(50));
        assert_eq!(p.cycle_cap(), Amount::from_units(500));
        let (token, payee) = (Address::repeat_byte(1), Address::repeat_byte(2));
        assert_eq!(
            p.check_capped("base", token, payee, Amount::from_units(500), p.cycle_cap()),
            Ok(())
        );
        assert_eq!(
            p.check_capped("base", token, payee, Amount::from_units(501), p.cycle_cap()),
            Err(Refusal::OverCap {
                price: Amount::from_units(501),
                cap: Amount::from_units(500)
            })
        );
        // One-time payments keep the per-request cap.
        assert!(
            p.check("base", token, payee, Amount::from_units(101))
                .is_err()
        );
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
