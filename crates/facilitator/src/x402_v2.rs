//! The x402 V2 facilitator API beside V1 (`POST /verify`, `POST /settle` with V2 bodies), so that
//! V2 resource servers such as `@x402/express` settle through a Tollgate facilitator.
//!
//! A V2 request is mapped onto its V1 twin ([`X402::x402_v1_twin`]): its CAIP-2 network
//! onto the configured network of that chain, its requirements and payload onto V1's, once the
//! payload's `accepted` is found to be the server's requirement. It then runs through the V1 path
//! unchanged ([`crate::x402`]): the same checks, the same settlement rows and locks, the same
//! money rules. Answers name the network by its CAIP-2 id.
//!
//! The `payment-identifier` extension is an idempotency key at `/settle`: the same payload again
//! under its id gets the first outcome (it names the settler, as `Idempotency-Key` does; the
//! header wins when both are sent); another payload under an id already bound is refused
//! (`payment_identifier_conflict`) unless the first one's settlement failed. Only a payload that
//! passes the checks binds an id, and the binding is atomic, so of concurrent payloads under one
//! id exactly one settles.

use alloy::primitives::{B256, keccak256};
use tollgate_protocol::{
    network,
    x402::{
        ErrorReason, SettleResponse, VerifyRequest, VerifyResponse,
        v2::{VerifyRequestV2, payment_identifier_conflict},
    },
};

use tollgate_protocol::SettlementStatus;

use crate::{
    facilitator::{Network, unix_now},
    x402::X402,
};

impl X402 {
    /// Verifies an x402 V2 `exact` payment without settling it ([`X402::verify`] on
    /// its V1 twin).
    pub async fn verify_v2(&self, req: &VerifyRequestV2) -> VerifyResponse {
        let payer = Some(req.payment_payload.payload.authorization.from);
        match self.x402_v1_twin(req) {
            Ok(v1) => self.verify(&v1).await,
            Err(reason) => VerifyResponse::invalid(reason, payer),
        }
    }

    /// Settles an x402 V2 `exact` payment ([`X402::settle`] on its V1 twin), with
    /// its `payment-identifier` as an idempotency key; `settler` (the `Idempotency-Key` header's
    /// hash) takes precedence.
    pub async fn settle_v2(&self, req: &VerifyRequestV2, settler: Option<B256>) -> SettleResponse {
        let caip2 = req.payment_requirements.network.clone();
        let auth = &req.payment_payload.payload.authorization;
        let fail = |reason| SettleResponse::failure(reason, caip2.clone(), Some(auth.from), None);
        let v1 = match self.x402_v1_twin(req) {
            Ok(twin) => twin,
            Err(reason) => return fail(reason),
        };
        let id = match req.payment_payload.payment_identifier() {
            Ok(id) => id,
            Err(_) => return fail(ErrorReason::InvalidPayload),
        };
        let id_hash = id.map(|id| {
            keccak256(
                [
                    b"tollgate/x402/v2/payment-identifier".as_slice(),
                    auth.from.as_slice(),
                    id.as_bytes(),
                ]
                .concat(),
            )
        });
        let settler = settler.or(id_hash);
        let mut answer = self.settle_bound(&v1, settler, id_hash).await;
        answer.network = caip2.into_string();
        answer
    }

    /// Binds a payment identifier to the settlement `key`: bound to it already, newly, or moved
    /// from a payload whose settlement failed; otherwise a conflict. A bound payload with no
    /// settlement row yet is in flight (it passed the checks): another payload waits for
    /// nothing and is refused, so that two payloads under one id never both settle.
    pub(crate) async fn bind_payment_identifier(
        &self,
        id_hash: B256,
        key: B256,
    ) -> Result<(), ErrorReason> {
        let store = &self.core.store;
        let unavailable = |e: tollgate_store::StoreError| {
            tracing::error!(error = %e, "store unavailable binding a payment identifier");
            ErrorReason::UnexpectedSettleError
        };
        let bound = store
            .bind_payment_identifier(id_hash, key, unix_now())
            .await
            .map_err(unavailable)?;
        if bound == key {
            return Ok(());
        }
        let first = store.settlement(bound).await.map_err(unavailable)?;
        let movable = first.is_some_and(|row| row.status == SettlementStatus::Failed);
        if movable
            && store
                .rebind_payment_identifier(id_hash, bound, key, unix_now())
                .await
                .map_err(unavailable)?
        {
            return Ok(());
        }
        Err(payment_identifier_conflict())
    }

    /// The V1 request a V2 one stands for, on the configured network of its CAIP-2 id.
    fn x402_v1_twin(&self, req: &VerifyRequestV2) -> Result<VerifyRequest, ErrorReason> {
        let (payload, requirements) = (&req.payment_payload, &req.payment_requirements);
        if req.x402_version != 2 || payload.x402_version != 2 {
            return Err(ErrorReason::InvalidX402Version);
        }
        let net = self
            .network_by_caip2(&requirements.network, requirements.asset)
            .ok_or(ErrorReason::InvalidNetwork)?;
        // The client signed for `accepted`: it must be the requirement the server settles.
        if !requirements.is_accepted_as(&payload.accepted) {
            return Err(ErrorReason::InvalidPaymentRequirements);
        }
        let name = &net.name;
        let v1 = VerifyRequest::new(
            payload.to_v1(name),
            requirements.to_v1(name, payload.resource.as_ref()),
        );
        Ok(v1)
    }

    /// Whether this replica can send the settlement of `req` now: it holds a relayer, and (on
    /// a network it serves) one with a settlement's gas at fees under the cap
    /// ([`Core::funded_relayer`](crate::facilitator::Core::funded_relayer)). A network it does not serve is left to the settlement
    /// to refuse.
    pub(crate) async fn can_send(
        &self,
        req: &tollgate_protocol::x402::v2::AnyVerifyRequest,
    ) -> crate::error::Result<()> {
        use tollgate_protocol::x402::v2::AnyVerifyRequest;
        let net = match req {
            AnyVerifyRequest::V1(r) => self.core.network(&r.payment_requirements.network),
            AnyVerifyRequest::V2(r) => self.network_by_caip2(
                &r.payment_requirements.network,
                r.payment_requirements.asset,
            ),
        };
        match net {
            Some(net) => self.core.check_funded(net).await,
            None => self.core.relayer().await.map(|_| ()).map_err(Into::into),
        }
    }

    /// The configured network a CAIP-2 id names: the one under the chain's x402 V1 name, else
    /// the first (by name) on that chain settling `asset`.
    fn network_by_caip2(&self, caip2: &str, asset: alloy::primitives::Address) -> Option<&Network> {
        if !caip2.starts_with("eip155:") {
            return None;
        }
        let chain_id = network::chain_id_of(caip2).ok()?;
        if let Some(known) = network::by_chain_id(chain_id)
            && let Some(net) = self.core.network(known.name)
            && net.spec.chain_id == chain_id
            && net.spec.token == asset
        {
            return Some(net);
        }
        let mut candidates: Vec<&Network> = self
            .core
            .networks
            .values()
            .filter(|n| n.spec.chain_id == chain_id && n.spec.token == asset)
            .collect();
        candidates.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
        candidates.into_iter().next()
    }
}
