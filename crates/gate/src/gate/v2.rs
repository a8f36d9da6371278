//! x402 V2 beside V1: the `PAYMENT-REQUIRED` header of every 402
//! ([`Gate::payment_required_v2`]) and the settlement of a `PAYMENT-SIGNATURE` payment
//! ([`Gate::settle_x402_v2`]). A V2 payment is mapped onto its V1 twin once its `accepted`
//! requirement is found to be this gate's own, so it takes the same once-only lock and the same
//! facilitator calls as V1: the same replay and tamper refusals.
//!
//! The `payment-identifier` extension (declared in every V2 402, not required) makes a client's
//! retries idempotent: the same payload again under its id is answered with the first outcome
//! (served again, charged once); another payload under an id already bound is refused
//! (`payment_identifier_conflict`). Ids are bound per payer and forgotten once the payment they
//! name was refused, so that the client may pay again under the same id.

use alloy::primitives::{Address, B256, keccak256};
use serde_json::{Map, Value, json};
use tollgate_protocol::{
    Amount, PaymentRequired,
    x402::{
        ErrorReason, RetryToken, SCHEME_EXACT, SettleResponse,
        v2::{
            self, PAYMENT_IDENTIFIER, PaymentPayloadV2, PaymentRequiredV2, PaymentRequirementsV2,
            ResourceInfo,
        },
    },
};

use super::{Gate, Offer, x402::Resend};
use crate::{X402Failure, memo::MemoSecret};

impl Gate {
    /// The x402 V2 twin of a 402 body, for the `PAYMENT-REQUIRED` header: its `exact` entries on
    /// the network's CAIP-2 id (`amount`, `asset`, `payTo`, `maxTimeoutSeconds`, `extra` with the
    /// token's EIP-712 name and version), the resource, `error`, and the extensions:
    /// `payment-identifier` (optional) and, when the body offers a plan,
    /// [`v2::SUBSCRIPTION_EXTENSION`] with the V1 `service` object and the plan terms.
    ///
    /// `None` when the gate does not know its chain id ([`Gate::caip2`]).
    pub fn payment_required_v2(
        &self,
        body: &PaymentRequired,
        offer: &Offer<'_>,
    ) -> Option<PaymentRequiredV2> {
        let caip2 = self.caip2()?;
        let accepts = body
            .accepts
            .iter()
            .filter(|o| o.requirements.scheme == SCHEME_EXACT)
            .map(|o| PaymentRequirementsV2::from_v1(&o.requirements, caip2))
            .collect();
        let mut extensions = Map::new();
        extensions.insert(
            PAYMENT_IDENTIFIER.to_owned(),
            v2::payment_identifier_extension(false),
        );
        extensions.insert(
            v2::FACILITATOR_EXTENSION.to_owned(),
            json!({ "info": { "facilitator": self.facilitator_url() } }),
        );
        let plans: Vec<Value> = body
            .accepts
            .iter()
            .filter_map(|o| {
                let service = o.service.as_ref().filter(|s| s.plan_id.is_some())?;
                let mut info = serde_json::to_value(service).ok()?;
                if let (Value::Object(map), Some(plan)) = (&mut info, &o.plan) {
                    map.insert("plan".into(), serde_json::to_value(plan).ok()?);
                }
                Some(info)
            })
            .collect();
        if let Some(first) = plans.first() {
            extensions.insert(
                v2::SUBSCRIPTION_EXTENSION.to_owned(),
                json!({ "info": { "offer": first, "offers": plans } }),
            );
        }
        Some(PaymentRequiredV2 {
            x402_version: v2::X402_VERSION_2,
            error: Some(body.error.clone()),
            resource: ResourceInfo {
                url: offer.resource_url.to_owned(),
                description: Some(offer.description.to_owned()).filter(|d| !d.is_empty()),
                mime_type: Some(offer.mime_type.to_owned()).filter(|m| !m.is_empty()),
            },
            accepts,
            extensions: Some(extensions),
        })
    }

    /// Settles an x402 V2 payment (`PAYMENT-SIGNATURE`) for `offer` at `price`: its `accepted`
    /// must be this gate's own requirement for the resource (as x402 V2 servers match it: every
    /// field, `extra` a subset), then it is settled as its V1 twin by
    /// [`settle_x402`](Self::settle_x402), under the same once-only lock. With a
    /// `payment-identifier`, the same payload again is answered its first outcome (served again,
    /// charged once), another payload under an id already bound to the payer is refused
    /// (`payment_identifier_conflict`), and an id whose payment was refused is free again.
    /// `retry` is the payment's retry token, as for V1.
    pub async fn settle_x402_v2(
        &self,
        payload: &PaymentPayloadV2,
        offer: &Offer<'_>,
        price: Amount,
        retry: Option<RetryToken>,
    ) -> Result<SettleResponse, X402Failure> {
        let refused = |r| Err(X402Failure::Refused(r));
        let Some(caip2) = self.caip2() else {
            return refused(ErrorReason::InvalidNetwork);
        };
        if payload.x402_version != v2::X402_VERSION_2 {
            return refused(ErrorReason::InvalidX402Version);
        }
        let accepted = &payload.accepted;
        if accepted.scheme != SCHEME_EXACT {
            return refused(ErrorReason::UnsupportedScheme);
        }
        if accepted.network != *caip2 {
            return refused(ErrorReason::InvalidNetwork);
        }
        let ours =
            PaymentRequirementsV2::from_v1(&self.requirements(SCHEME_EXACT, price, offer), caip2);
        if !ours.is_accepted_as(accepted) {
            return refused(ErrorReason::InvalidPaymentRequirements);
        }
        let Ok(id) = payload.payment_identifier() else {
            return refused(ErrorReason::InvalidPayload);
        };
        let v1 = payload.to_v1(self.wire_network());
        let Some(id) = id else {
            return self
                .settle_x402_as(&v1, offer, price, Resend::No, retry)
                .await;
        };
        let auth = &v1.payload.authorization;
        let until = u64::try_from(auth.valid_before.get()).unwrap_or(u64::MAX);
        let keys = IdKeys::new(&self.inner.secret, auth.from, id, payload);
        let binding = self.bind(&keys, until).await?;
        let resend = match binding {
            Binding::New => Resend::No,
            Binding::Same => Resend::SameIdentifier,
        };
        let result = self.settle_x402_as(&v1, offer, price, resend, retry).await;
        if binding == Binding::New && matches!(result, Err(X402Failure::Refused(_))) {
            // Refused, nothing moved: the id may name another payment.
            for key in [keys.bound, keys.id] {
                if let Err(e) = self.inner.store.release(key).await {
                    tracing::warn!(error = %e, "cannot release a payment identifier");
                }
            }
        }
        result
    }

    /// Settles an x402 payment given as JSON (as MCP's `_meta["x402/payment"]` carries it): a
    /// V1 payload ([`settle_x402`](Self::settle_x402)) or a V2 one
    /// ([`settle_x402_v2`](Self::settle_x402_v2)); anything else is refused
    /// (`invalid_x402_version`, `invalid_payload`). `retry` is the payment's retry token
    /// (MCP's `_meta["tollgate/payment-retry"]`).
    pub async fn settle_x402_value(
        &self,
        payment: &Value,
        offer: &Offer<'_>,
        price: Amount,
        retry: Option<RetryToken>,
    ) -> Result<SettleResponse, X402Failure> {
        let refused = |r| Err(X402Failure::Refused(r));
        match payment.get("x402Version").and_then(Value::as_u64) {
            Some(1) => match serde_json::from_value(payment.clone()) {
                Ok(p) => self.settle_x402(&p, offer, price, retry).await,
                Err(_) => refused(ErrorReason::InvalidPayload),
            },
            Some(2) => match serde_json::from_value(payment.clone()) {
                Ok(p) => self.settle_x402_v2(&p, offer, price, retry).await,
                Err(_) => refused(ErrorReason::InvalidPayload),
            },
            _ => refused(ErrorReason::InvalidX402Version),
        }
    }

    /// Binds a payment identifier to a payload: new, the same payload again, or a conflict. The
    /// payload's key is claimed first, so that of two concurrent sends of one payload neither
    /// is taken for a conflict.
    async fn bind(&self, keys: &IdKeys, until: u64) -> Result<Binding, X402Failure> {
        let store = &self.inner.store;
        let unavailable = X402Failure::StoreUnavailable;
        if !store.claim(keys.bound, until).await.map_err(unavailable)? {
            return Ok(Binding::Same);
        }
        if store.claim(keys.id, until).await.map_err(unavailable)? {
            return Ok(Binding::New);
        }
        store.release(keys.bound).await.map_err(unavailable)?;
        Err(X402Failure::Refused(v2::payment_identifier_conflict()))
    }
}

/// How a payment identifier relates to the payload it came with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Binding {
    /// Seen for the first time: now bound to this payload.
    New,
    /// Bound to this very payload before.
    Same,
}

/// The memo-store keys of a payment identifier: the id (per payer) and the id with its payload.
struct IdKeys {
    id: B256,
    bound: B256,
}

impl IdKeys {
    fn new(secret: &MemoSecret, payer: Address, id: &str, payload: &PaymentPayloadV2) -> Self {
        let id = keccak256(
            [
                b"tollgate-gate/x402/v2/payment-identifier".as_slice(),
                &secret.0,
                payer.as_slice(),
                id.as_bytes(),
            ]
            .concat(),
        );
        let body = serde_json::to_vec(payload).unwrap_or_default();
        let bound = keccak256([id.as_slice(), keccak256(&body).as_slice()].concat());
        Self { id, bound }
    }
}
