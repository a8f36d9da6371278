//! `GET /subscriptions?subscriber=`: every subscription of one subscriber, for that subscriber
//! only (an EIP-191 signature of [`ListSubscriptionsQuery::message`] with a short deadline).
//!
//! Complete whether or not the keeper runs: the ids come from the `SubscriptionCreated` logs of
//! the subscriptions contract filtered by the subscriber (its third indexed topic), read from the
//! store's index below the keeper's cursor and from the chain from the cursor to the head (the
//! cursor starts at the network's `start_block`, so a facilitator whose keeper never ran reads
//! them all from the chain). Each subscription is then read from the chain.

use std::collections::BTreeMap;

use alloy::{
    primitives::{Address, B256, Bytes, Signature},
    sol_types::SolEvent,
};
use tollgate_chain::{LogFilter, contracts};
use tollgate_protocol::{
    ApiErrorCode, SubscriptionView,
    api::subscriptions::{LIST_MAX_VALIDITY_SECS, ListSubscriptionsQuery},
};

use crate::{
    error::{Error, Result},
    facilitator::Network,
    keeper::LOG_RANGE,
    subscriptions::Subscriptions,
};

impl Subscriptions {
    /// The subscriptions of the subscriber who signed `q` (see [`self`]), by id.
    pub(crate) async fn list(&self, q: &ListSubscriptionsQuery) -> Result<Vec<SubscriptionView>> {
        let subscriber: Address = q
            .subscriber
            .parse()
            .map_err(|_| Error::InvalidQuery("subscriber: expected an address".into()))?;
        let signature: Bytes = q.signature.parse().map_err(|_| {
            Error::InvalidQuery("signature: expected 0x-hex (65 bytes, r ‖ s ‖ v)".into())
        })?;
        let (net, subs) = self.subscriptions_network(q.network.as_deref())?;
        let now = net.now().await;
        if q.deadline < now {
            return Err(Error::invalid(
                ApiErrorCode::SignatureExpired,
                format!("deadline {} has passed (now {now})", q.deadline),
            ));
        }
        if q.deadline > now.saturating_add(LIST_MAX_VALIDITY_SECS) {
            return Err(Error::invalid(
                ApiErrorCode::DeadlineTooFar,
                format!("deadline: at most {LIST_MAX_VALIDITY_SECS} seconds ahead (now {now})"),
            ));
        }
        let message =
            ListSubscriptionsQuery::message(subscriber, net.spec.chain_id, subs, q.deadline);
        let signer = Signature::from_raw(&signature)
            .ok()
            .and_then(|s| s.recover_address_from_msg(message.as_bytes()).ok());
        if signer != Some(subscriber) {
            return Err(Error::Unauthorized(
                "signature: not the subscriber's personal_sign signature of the listing message \
                 (see ListSubscriptionsQuery::message)"
                    .into(),
            ));
        }

        let mut views = Vec::new();
        for (id, tx_hash) in self.subscription_ids(net, subs, subscriber).await? {
            if let Some(mut view) = self.subscription_view(net, subs, id).await? {
                view.tx_hash = view.tx_hash.or(tx_hash);
                views.push(view);
            }
        }
        Ok(views)
    }

    /// The ids of `subscriber`'s subscriptions, with their creating transaction when read from
    /// the chain.
    async fn subscription_ids(
        &self,
        net: &Network,
        subs: Address,
        subscriber: Address,
    ) -> Result<BTreeMap<B256, Option<B256>>> {
        let name = net.spec.name.as_str();
        // The cursor first: the index holds everything below it, even if the keeper moves on.
        let mut from = self.core.store().keeper_cursor(name).await?;
        let mut ids: BTreeMap<B256, Option<B256>> = self
            .core
            .store()
            .subscriptions_of(name, subscriber)
            .await?
            .into_iter()
            .map(|s| (s.id, None))
            .collect();
        let head = net.chain.block_number().await?;
        while from <= head {
            let to = head.min(from.saturating_add(LOG_RANGE - 1));
            let filter = LogFilter {
                from_block: from,
                to_block: Some(to),
                addresses: vec![subs],
                topics: [
                    Some(vec![
                        contracts::Subscriptions::SubscriptionCreated::SIGNATURE_HASH,
                    ]),
                    None,
                    None,
                    Some(vec![subscriber.into_word()]),
                ],
            };
            for l in net.chain.logs(&filter).await? {
                if l.log.address != subs {
                    continue;
                }
                if let Ok(ev) = contracts::Subscriptions::SubscriptionCreated::decode_log(&l.log)
                    && ev.subscriber == subscriber
                {
                    ids.insert(ev.id, Some(l.tx_hash));
                }
            }
            from = to + 1;
        }
        Ok(ids)
    }
}
