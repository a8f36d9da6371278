//! The keeper's index: the Subscriptions contract's logs, read from the stored cursor up to the
//! confirmed head, as subscriptions to renew and as webhook events.

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::SolEvent,
};
use tollgate_chain::{LogFilter, contracts::Subscriptions};

use super::{KeeperError, LOG_RANGE};
use crate::{
    facilitator::{Facilitator, Network, unix_now},
    store::{Renewal, RenewalOutcome, Subject, SubscriptionEvent, event_id},
};

impl Facilitator {
    /// Indexes subscription events from the stored cursor up to the confirmed head.
    pub(super) async fn index_subscriptions(
        &self,
        net: &Network,
        subs: Address,
    ) -> Result<usize, KeeperError> {
        let store = &self.inner.store;
        let name = net.spec.name.as_str();
        let latest = net.chain.block_number().await?;
        let head = latest.saturating_sub(net.spec.confirmations.max(1) - 1);
        let mut from = store.keeper_cursor(name).await?;
        let mut found = 0;
        while from <= head {
            let to = head.min(from.saturating_add(LOG_RANGE - 1));
            let filter = LogFilter {
                from_block: from,
                to_block: Some(to),
                addresses: vec![subs],
                topics: [Some(indexed_topics()), None, None, None],
            };
            let logs = net.chain.logs(&filter).await?;
            let events: Vec<SubscriptionEvent> = logs
                .iter()
                .filter(|l| l.log.address == subs)
                .flat_map(|l| decode_indexed(name, l, &logs))
                .collect();
            found += events
                .iter()
                .filter(|e| !matches!(e, SubscriptionEvent::Notify { .. }))
                .count();
            store
                .index_subscription_events(name, &events, to + 1, unix_now())
                .await?;
            from = to + 1;
        }
        if found > 0 {
            tracing::info!(
                network = name,
                events = found,
                "keeper: indexed subscription events"
            );
        }
        Ok(found)
    }
}

/// The Subscriptions events the keeper reads: those that index subscriptions and those that
/// become webhook events.
fn indexed_topics() -> Vec<B256> {
    use Subscriptions as S;
    vec![
        S::SubscriptionCreated::SIGNATURE_HASH,
        S::SubscriptionResumed::SIGNATURE_HASH,
        S::SubscriptionRenewed::SIGNATURE_HASH,
        S::RenewalFailed::SIGNATURE_HASH,
        S::SubscriptionPaused::SIGNATURE_HASH,
        S::SubscriptionCancelled::SIGNATURE_HASH,
        S::AllowanceRaised::SIGNATURE_HASH,
        S::OverageCharged::SIGNATURE_HASH,
        S::PlanCreated::SIGNATURE_HASH,
        S::PlanRetired::SIGNATURE_HASH,
    ]
}

/// The amount `SubscriptionRenewed` reports for cycle 1 of `id` beside `created` (its
/// `SubscriptionCreated`): the first cycle, paid by the same `subscribe` transaction, hence
/// read in the same block range.
fn first_cycle(
    logs: &[tollgate_chain::ChainLog],
    created: &tollgate_chain::ChainLog,
    id: B256,
) -> Option<U256> {
    logs.iter()
        .filter(|l| l.tx_hash == created.tx_hash && l.log.address == created.log.address)
        .find_map(|l| {
            Subscriptions::SubscriptionRenewed::decode_log(&l.log)
                .ok()
                .filter(|ev| ev.id == id && ev.cycle == 1)
        })
        .map(|ev| ev.amount)
}

/// What one log of the Subscriptions contract means for the index and for webhooks (`logs`: the
/// range it was read in, where a subscription's first cycle is found).
fn decode_indexed(
    network: &str,
    l: &tollgate_chain::ChainLog,
    logs: &[tollgate_chain::ChainLog],
) -> Vec<SubscriptionEvent> {
    use Subscriptions as S;
    let id = event_id(&[
        network.as_bytes(),
        l.tx_hash.as_slice(),
        &l.log_index.to_be_bytes(),
    ]);
    let base =
        serde_json::json!({ "network": network, "txHash": l.tx_hash, "block": l.block_number });
    let notify = |subject: Subject, kind: &'static str, extra: serde_json::Value| {
        let mut data = base.clone();
        if let (Some(d), Some(x)) = (data.as_object_mut(), extra.as_object()) {
            d.extend(x.clone());
        }
        SubscriptionEvent::Notify {
            id: id.clone(),
            subject,
            kind,
            data: data.to_string(),
        }
    };
    let log = &l.log;
    if let Ok(ev) = S::SubscriptionCreated::decode_log(log) {
        let mut data = serde_json::json!({
            "subscriptionId": ev.id, "planId": ev.planId, "subscriber": ev.subscriber,
            "maxOverage": ev.maxOverage.to_string(), "paidThrough": ev.paidThrough,
        });
        // What the first cycle paid (revenue: `crate::analytics`).
        if let (Some(amount), Some(d)) = (first_cycle(logs, l, ev.id), data.as_object_mut()) {
            d.insert("amount".into(), amount.to_string().into());
        }
        return vec![
            SubscriptionEvent::Created {
                id: ev.id,
                plan_id: ev.planId,
                subscriber: ev.subscriber,
                paid_through: ev.paidThrough,
            },
            notify(Subject::Subscription(ev.id), "subscription.created", data),
        ];
    }
    if let Ok(ev) = S::SubscriptionResumed::decode_log(log) {
        return vec![
            SubscriptionEvent::Resumed {
                id: ev.id,
                paid_through: ev.paidThrough,
            },
            notify(
                Subject::Subscription(ev.id),
                "subscription.resumed",
                serde_json::json!({ "subscriptionId": ev.id, "paidThrough": ev.paidThrough }),
            ),
        ];
    }
    let one = if let Ok(ev) = S::SubscriptionRenewed::decode_log(log) {
        // Cycle 1 is the first billing, part of `subscription.created`.
        (ev.cycle > 1).then(|| {
            notify(
                Subject::Subscription(ev.id),
                "subscription.renewed",
                serde_json::json!({
                    "subscriptionId": ev.id, "cycle": ev.cycle, "amount": ev.amount.to_string(),
                    "paidThrough": ev.paidThrough,
                }),
            )
        })
    } else if let Ok(ev) = S::RenewalFailed::decode_log(log) {
        Some(notify(
            Subject::Subscription(ev.id),
            "subscription.renewal_failed",
            serde_json::json!({ "subscriptionId": ev.id, "cycle": ev.cycle }),
        ))
    } else if let Ok(ev) = S::SubscriptionPaused::decode_log(log) {
        Some(notify(
            Subject::Subscription(ev.id),
            "subscription.paused",
            serde_json::json!({ "subscriptionId": ev.id }),
        ))
    } else if let Ok(ev) = S::SubscriptionCancelled::decode_log(log) {
        Some(notify(
            Subject::Subscription(ev.id),
            "subscription.cancelled",
            serde_json::json!({ "subscriptionId": ev.id }),
        ))
    } else if let Ok(ev) = S::AllowanceRaised::decode_log(log) {
        Some(notify(
            Subject::Subscription(ev.id),
            "allowance.raised",
            serde_json::json!({ "subscriptionId": ev.id, "maxOverage": ev.maxOverage.to_string() }),
        ))
    } else if let Ok(ev) = S::OverageCharged::decode_log(log) {
        Some(notify(
            Subject::Subscription(ev.id),
            "allowance.charged",
            serde_json::json!({
                "subscriptionId": ev.id, "cycle": ev.cycle, "amount": ev.amount.to_string(),
                "used": ev.used.to_string(), "reference": ev.r#ref,
            }),
        ))
    } else if let Ok(ev) = S::PlanCreated::decode_log(log) {
        Some(notify(
            Subject::Plan(ev.planId),
            "plan.created",
            serde_json::json!({
                "planId": ev.planId, "token": ev.token, "payTo": ev.payTo,
                "amount": ev.amount.to_string(), "interval": ev.interval,
            }),
        ))
    } else if let Ok(ev) = S::PlanRetired::decode_log(log) {
        Some(notify(
            Subject::Plan(ev.planId),
            "plan.deprecated",
            serde_json::json!({ "planId": ev.planId }),
        ))
    } else {
        None
    };
    let renewal = |cycle: u32, id: B256, outcome: RenewalOutcome| {
        SubscriptionEvent::Renewed(Renewal {
            network: network.to_owned(),
            id,
            cycle,
            outcome,
            tx_hash: l.tx_hash,
            block: l.block_number,
            at: unix_now(),
        })
    };
    let recorded = if let Ok(ev) = S::SubscriptionRenewed::decode_log(log) {
        (ev.cycle > 1).then(|| renewal(ev.cycle, ev.id, RenewalOutcome::Renewed))
    } else if let Ok(ev) = S::RenewalFailed::decode_log(log) {
        Some(renewal(ev.cycle, ev.id, RenewalOutcome::Failed))
    } else {
        None
    };
    recorded.into_iter().chain(one).collect()
}
