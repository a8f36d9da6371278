//! The keeper's index: the Subscriptions contract's logs, read from the stored cursor up to the
//! confirmed head, as subscriptions to renew and as webhook events.

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::SolEvent,
};
use tollgate_chain::{LogFilter, contracts};
use tollgate_protocol::{
    Amount,
    webhook::{
        EventData,
        events::{self, ChainSource},
    },
};

use super::{KeeperError, LOG_RANGE};
use crate::{
    facilitator::{Network, unix_now},
    store::{Renewal, RenewalOutcome, Subject, SubscriptionEvent, event_id},
    subscriptions::Subscriptions,
};

impl Subscriptions {
    /// Indexes subscription events from the stored cursor up to the confirmed head.
    pub(super) async fn index_subscriptions(
        &self,
        net: &Network,
        subs: Address,
    ) -> Result<usize, KeeperError> {
        let store = &self.core.store;
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
                .flat_map(|l| decode_indexed(&net.name, l, &logs))
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
    use contracts::Subscriptions as S;
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
            contracts::Subscriptions::SubscriptionRenewed::decode_log(&l.log)
                .ok()
                .filter(|ev| ev.id == id && ev.cycle == 1)
        })
        .map(|ev| ev.amount)
}

/// What one log of the Subscriptions contract means for the index and for webhooks (`logs`: the
/// range it was read in, where a subscription's first cycle is found).
fn decode_indexed(
    network: &tollgate_protocol::Network,
    l: &tollgate_chain::ChainLog,
    logs: &[tollgate_chain::ChainLog],
) -> Vec<SubscriptionEvent> {
    use contracts::Subscriptions as S;
    let id = event_id(&[
        network.as_bytes(),
        l.tx_hash.as_slice(),
        &l.log_index.to_be_bytes(),
    ]);
    let source = ChainSource {
        network: network.clone(),
        tx_hash: l.tx_hash,
        block: l.block_number,
    };
    let notify = |subject: Subject, data: EventData| SubscriptionEvent::Notify {
        id: id.clone(),
        subject,
        data: Box::new(data),
    };
    let log = &l.log;
    if let Ok(ev) = S::SubscriptionCreated::decode_log(log) {
        let data = EventData::SubscriptionCreated(events::SubscriptionCreated {
            source,
            subscription_id: ev.id,
            plan_id: ev.planId,
            subscriber: ev.subscriber,
            max_overage: ev.maxOverage.into(),
            paid_through: ev.paidThrough,
            // What the first cycle paid (revenue: `crate::analytics`).
            amount: first_cycle(logs, l, ev.id).map(Amount::from),
        });
        return vec![
            SubscriptionEvent::Created {
                id: ev.id,
                plan_id: ev.planId,
                subscriber: ev.subscriber,
                paid_through: ev.paidThrough,
            },
            notify(Subject::Subscription(ev.id), data),
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
                EventData::SubscriptionResumed(events::SubscriptionResumed {
                    source,
                    subscription_id: ev.id,
                    paid_through: ev.paidThrough,
                }),
            ),
        ];
    }
    let of_subscription = |id: B256, data: EventData| notify(Subject::Subscription(id), data);
    let one = if let Ok(ev) = S::SubscriptionRenewed::decode_log(log) {
        // Cycle 1 is the first billing, part of `subscription.created`.
        (ev.cycle > 1).then(|| {
            of_subscription(
                ev.id,
                EventData::SubscriptionRenewed(events::SubscriptionRenewed {
                    source,
                    subscription_id: ev.id,
                    cycle: ev.cycle,
                    amount: ev.amount.into(),
                    paid_through: ev.paidThrough,
                }),
            )
        })
    } else if let Ok(ev) = S::RenewalFailed::decode_log(log) {
        Some(of_subscription(
            ev.id,
            EventData::SubscriptionRenewalFailed(events::SubscriptionRenewalFailed {
                source,
                subscription_id: ev.id,
                cycle: ev.cycle,
            }),
        ))
    } else if let Ok(ev) = S::SubscriptionPaused::decode_log(log) {
        Some(of_subscription(
            ev.id,
            EventData::SubscriptionPaused(events::SubscriptionPaused {
                source,
                subscription_id: ev.id,
            }),
        ))
    } else if let Ok(ev) = S::SubscriptionCancelled::decode_log(log) {
        Some(of_subscription(
            ev.id,
            EventData::SubscriptionCancelled(events::SubscriptionCancelled {
                source,
                subscription_id: ev.id,
            }),
        ))
    } else if let Ok(ev) = S::AllowanceRaised::decode_log(log) {
        Some(of_subscription(
            ev.id,
            EventData::AllowanceRaised(events::AllowanceRaised {
                source,
                subscription_id: ev.id,
                max_overage: ev.maxOverage.into(),
            }),
        ))
    } else if let Ok(ev) = S::OverageCharged::decode_log(log) {
        Some(of_subscription(
            ev.id,
            EventData::AllowanceCharged(events::AllowanceCharged {
                source,
                subscription_id: ev.id,
                cycle: ev.cycle,
                amount: ev.amount.into(),
                used: ev.used.into(),
                reference: ev.r#ref,
            }),
        ))
    } else if let Ok(ev) = S::PlanCreated::decode_log(log) {
        Some(notify(
            Subject::Plan(ev.planId),
            EventData::PlanCreated(events::PlanCreated {
                source,
                plan_id: ev.planId,
                token: ev.token,
                pay_to: ev.payTo,
                amount: ev.amount.into(),
                interval: ev.interval,
            }),
        ))
    } else if let Ok(ev) = S::PlanRetired::decode_log(log) {
        Some(notify(
            Subject::Plan(ev.planId),
            EventData::PlanDeprecated(events::PlanDeprecated {
                source,
                plan_id: ev.planId,
            }),
        ))
    } else {
        None
    };
    let renewal = |cycle: u32, id: B256, outcome: RenewalOutcome| {
        SubscriptionEvent::Renewed(Renewal {
            network: network.to_string(),
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

#[cfg(test)]
mod tests {
    use alloy::primitives::{Log, address};
    use serde_json::Value;

    use super::*;

    const NETWORK: &str = "base-sepolia";
    const TOKEN: Address = address!("0x036cbd53842c5426634e7929541ec2318f3dcf7e");

    /// The golden event of `kind` (`crates/protocol/tests/vectors/webhooks/`).
    fn golden(kind: &str) -> Value {
        let path = format!(
            "{}/../protocol/tests/vectors/webhooks/{kind}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
    }

    /// `event` as the contract logs it, in the goldens' transaction and block.
    fn chain_log(event: &impl SolEvent, log_index: u64) -> tollgate_chain::ChainLog {
        tollgate_chain::ChainLog {
            log: Log {
                address: Address::repeat_byte(0xcc),
                data: event.encode_log_data(),
            },
            block_number: 1234,
            tx_hash: B256::repeat_byte(0x11),
            log_index,
        }
    }

    /// The webhook event the keeper records for the first log of `logs`: its type and data.
    fn notified(logs: &[tollgate_chain::ChainLog]) -> (String, Value) {
        decode_indexed(&NETWORK.parse().unwrap(), &logs[0], logs)
            .into_iter()
            .find_map(|e| match e {
                SubscriptionEvent::Notify { data, .. } => Some((
                    data.type_name().to_owned(),
                    serde_json::to_value(&*data).unwrap()["data"].clone(),
                )),
                _ => None,
            })
            .expect("a webhook event")
    }

    /// Every event the keeper indexes is its golden vector's `data`, field for field.
    #[test]
    fn indexed_events_match_the_golden_vectors() {
        use contracts::Subscriptions as S;
        let (sub, plan) = (B256::repeat_byte(0x22), B256::repeat_byte(0x33));
        let created = S::SubscriptionCreated {
            id: sub,
            planId: plan,
            subscriber: Address::repeat_byte(0x44),
            maxOverage: U256::from(2_000_000),
            paidThrough: 1_702_592_000,
        };
        let first = S::SubscriptionRenewed {
            id: sub,
            cycle: 1,
            amount: U256::from(10_000_000),
            paidThrough: 1_702_592_000,
        };
        let cases: Vec<(&str, Vec<tollgate_chain::ChainLog>)> = vec![
            (
                "subscription.created",
                vec![chain_log(&created, 0), chain_log(&first, 1)],
            ),
            (
                "subscription.renewed",
                vec![chain_log(
                    &S::SubscriptionRenewed {
                        id: sub,
                        cycle: 2,
                        amount: U256::from(10_000_000),
                        paidThrough: 1_705_184_000,
                    },
                    0,
                )],
            ),
            (
                "subscription.renewal_failed",
                vec![chain_log(&S::RenewalFailed { id: sub, cycle: 3 }, 0)],
            ),
            (
                "subscription.paused",
                vec![chain_log(&S::SubscriptionPaused { id: sub }, 0)],
            ),
            (
                "subscription.resumed",
                vec![chain_log(
                    &S::SubscriptionResumed {
                        id: sub,
                        paidThrough: 1_707_776_000,
                    },
                    0,
                )],
            ),
            (
                "subscription.cancelled",
                vec![chain_log(&S::SubscriptionCancelled { id: sub }, 0)],
            ),
            (
                "allowance.charged",
                vec![chain_log(
                    &S::OverageCharged {
                        id: sub,
                        cycle: 2,
                        amount: U256::from(150_000),
                        used: U256::from(150_000),
                        r#ref: B256::repeat_byte(0xaa),
                    },
                    0,
                )],
            ),
            (
                "allowance.raised",
                vec![chain_log(
                    &S::AllowanceRaised {
                        id: sub,
                        maxOverage: U256::from(5_000_000),
                    },
                    0,
                )],
            ),
            (
                "plan.created",
                vec![chain_log(
                    &S::PlanCreated {
                        planId: plan,
                        provider: Address::repeat_byte(0x55),
                        token: TOKEN,
                        payTo: Address::repeat_byte(0x55),
                        amount: U256::from(10_000_000),
                        interval: 2_592_000,
                        operator: Address::repeat_byte(0xcc),
                    },
                    0,
                )],
            ),
            (
                "plan.deprecated",
                vec![chain_log(&S::PlanRetired { planId: plan }, 0)],
            ),
        ];
        for (kind, logs) in cases {
            let golden = golden(kind);
            assert_eq!(golden["type"], kind);
            assert_eq!(
                notified(&logs),
                (kind.to_owned(), golden["data"].clone()),
                "{kind}"
            );
        }
    }
}
