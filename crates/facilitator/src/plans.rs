//! Plans published through the facilitator with a provider's API key.
//!
//! The facilitator's plan relayer (its first relayer key) sends `Subscriptions.createPlan` with
//! itself as the operator and `salt = keccak256(abi.encode(provider, idempotencyKey))`, so the
//! plan id, `planIdFor(relayer, salt)`, is known before anything is sent and a retry with the same
//! idempotency key finds the same plan instead of creating another. Ownership (plan id → the
//! provider) is recorded in the store before the transaction is sent; only the owner may
//! deprecate. A deprecated plan takes no new subscriptions; existing ones keep running until
//! cancelled.

use alloy::{
    primitives::{Address, B256, keccak256},
    sol_types::{SolCall, SolValue},
};
use tollgate_chain::{
    Confirmation, Error as ChainError, TxRequest, WaitOptions,
    contracts::{self, Revert, Subscriptions},
};
use tollgate_protocol::{
    Amount, ApiErrorCode,
    api::plans::{CreatePlanRequest, Plan},
};

use std::sync::Arc;

use crate::{
    error::{Error, Result},
    facilitator::Core,
    facilitator::{Network, unix_now},
    store::PlanOwner,
};

/// Longest idempotency key accepted, in bytes.
const MAX_IDEMPOTENCY_KEY: usize = 200;

/// The salt of a provider's plan: `keccak256(abi.encode(provider, idempotencyKey))`.
pub(crate) fn plan_salt(provider: Address, idempotency_key: &str) -> B256 {
    keccak256((provider, idempotency_key.to_owned()).abi_encode_params())
}

/// `Subscriptions.planIdFor(creator, salt)`, computed locally.
pub(crate) fn plan_id_for(creator: Address, salt: B256) -> B256 {
    keccak256((creator, salt).abi_encode_params())
}

/// 404: no plan `plan_id` on `net`.
fn no_plan(plan_id: B256, net: &Network) -> Error {
    Error::NotFound(format!("no plan {plan_id} on {}", net.spec.name))
}

/// Plans and providers: publishing and deprecating plans on-chain through the facilitator's
/// relayer, provider self-registration with a signed challenge, and API keys. A service of the
/// [`Facilitator`](crate::Facilitator).
#[derive(Clone, Debug)]
pub struct Plans {
    pub(crate) core: Arc<Core>,
}

impl Plans {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        Self { core }
    }

    /// The network named (or the only one, when `name` is `None`) with its Subscriptions contract.
    fn plan_network(&self, name: Option<&str>) -> Result<(&Network, Address)> {
        let net = match name {
            Some(name) => self.core.network(name).ok_or_else(|| {
                Error::invalid(
                    ApiErrorCode::UnknownNetwork,
                    format!("network: {name:?} is not served by this facilitator"),
                )
            })?,
            None if self.core.networks.len() == 1 => self
                .core
                .networks
                .values()
                .next()
                .ok_or_else(|| Error::internal("a facilitator with one network has none"))?,
            None => {
                return Err(Error::InvalidField(
                    "network: required when the facilitator serves several networks".into(),
                ));
            }
        };
        let subscriptions = net.spec.subscriptions.ok_or_else(|| {
            Error::invalid(
                ApiErrorCode::SubscriptionsUnavailable,
                format!(
                    "network {}: no Subscriptions contract configured",
                    net.spec.name
                ),
            )
        })?;
        Ok((net, subscriptions))
    }

    /// Reads the plan from the chain; `None` when no plan has this id.
    async fn read_plan(
        &self,
        net: &Network,
        subscriptions: Address,
        plan_id: B256,
    ) -> Result<Option<Plan>> {
        let p = contracts::read(
            &*net.chain,
            subscriptions,
            &Subscriptions::plansCall { planId: plan_id },
        )
        .await?;
        if p.provider == Address::ZERO {
            return Ok(None);
        }
        let owner = self
            .core
            .store()
            .plan_owner(&net.spec.name, plan_id)
            .await?;
        Ok(Some(Plan {
            plan_id,
            network: net.name.clone(),
            token: p.token,
            pay_to: p.payTo,
            amount: Amount(p.amount),
            interval: p.interval,
            deprecated: p.deprecated,
            provider: owner.map_or(p.provider, |o| o.provider),
        }))
    }

    /// Sends `tx` and waits for its confirmation; a revert comes back as
    /// `Err(Ok(revert))`, any other failure as `Err(Err(error))`.
    async fn send_confirmed(
        &self,
        net: &Network,
        tx: TxRequest,
    ) -> Result<(), Result<Revert, Error>> {
        let opts = WaitOptions {
            confirmations: net.spec.confirmations,
            timeout: self.core.settings().confirmation_timeout,
        };
        match net.chain.send_and_wait(tx, opts).await {
            Ok(Confirmation::Confirmed(_)) => Ok(()),
            Ok(Confirmation::Pending { tx_hash }) => Err(Err(Error::Pending { tx_hash })),
            Err(ChainError::Revert(r)) => Err(Ok(r)),
            Err(ChainError::Reverted {
                reason: Some(r), ..
            }) => Err(Ok(r)),
            Err(e) => Err(Err(e.into())),
        }
    }

    /// Publishes a plan for `provider` (`POST /plans`): idempotent by the request's idempotency
    /// key. The plan, and whether this call created it (`false`: an earlier call with the same
    /// key did).
    pub(crate) async fn create(
        &self,
        provider: Address,
        req: &CreatePlanRequest,
    ) -> Result<(Plan, bool)> {
        if req.idempotency_key.is_empty() || req.idempotency_key.len() > MAX_IDEMPOTENCY_KEY {
            return Err(Error::InvalidField(format!(
                "idempotencyKey: 1 to {MAX_IDEMPOTENCY_KEY} bytes"
            )));
        }
        if req.amount.0.is_zero() {
            return Err(Error::invalid(
                ApiErrorCode::InvalidPlan,
                "amount: must be positive",
            ));
        }
        if req.interval == 0 {
            return Err(Error::invalid(
                ApiErrorCode::InvalidPlan,
                "interval: must be positive (seconds)",
            ));
        }
        let pay_to = req.pay_to.unwrap_or(provider);
        if pay_to == Address::ZERO {
            return Err(Error::invalid(
                ApiErrorCode::InvalidPlan,
                "payTo: the zero address cannot be paid",
            ));
        }
        let (net, subscriptions) = self.plan_network(Some(&req.network))?;
        // The first relayer creates every plan, so the id is stable across retries.
        let relayer = *self
            .core
            .relayers
            .first()
            .ok_or_else(|| Error::internal("no relayer"))?;
        // Its nonces are the lease holder's to use: another replica creates the plan.
        if !self.core.holds_relayer(relayer).await {
            return Err(crate::replica::NoRelayer.into());
        }
        let salt = plan_salt(provider, &req.idempotency_key);
        let plan_id = plan_id_for(relayer, salt);
        let _guard = self.core.locks.lock(plan_id).await;

        let owner = self
            .core
            .store()
            .insert_plan(&PlanOwner {
                network: net.spec.name.clone(),
                plan_id,
                provider,
                relayer,
                created_at: unix_now(),
            })
            .await?;
        if owner.provider != provider {
            // The salt commits to the provider, so this takes a hash collision.
            return Err(Error::internal("plan id owned by another provider"));
        }
        if let Some(existing) = self.read_plan(net, subscriptions, plan_id).await? {
            return Ok((existing, false));
        }
        let call = Subscriptions::createPlanCall {
            token: net.spec.token,
            payTo: pay_to,
            amount: req.amount.0,
            interval: req.interval,
            operator: relayer,
            salt,
        };
        let tx = TxRequest::call(relayer, subscriptions, call.abi_encode());
        match self.send_confirmed(net, tx).await {
            Ok(()) | Err(Ok(Revert::PlanExists { .. })) => {}
            Err(Ok(revert)) => return Err(Error::Revert(revert)),
            Err(Err(e)) => return Err(e),
        }
        tracing::info!(%plan_id, %provider, network = %net.spec.name, "plan created");
        let plan = self
            .read_plan(net, subscriptions, plan_id)
            .await?
            .ok_or_else(|| Error::internal("confirmed createPlan left no plan"))?;
        Ok((plan, true))
    }

    /// The plan `plan_id` on the named network (or the only one); 404 when there is none.
    pub(crate) async fn get(&self, network: Option<&str>, plan_id: B256) -> Result<Plan> {
        let (net, subscriptions) = self.plan_network(network)?;
        self.read_plan(net, subscriptions, plan_id)
            .await?
            .ok_or_else(|| no_plan(plan_id, net))
    }

    /// Deprecates `provider`'s plan (`POST /plans/{id}/deprecate`): owner only; idempotent.
    pub(crate) async fn deprecate(
        &self,
        provider: Address,
        network: Option<&str>,
        plan_id: B256,
    ) -> Result<Plan> {
        let (net, subscriptions) = self.plan_network(network)?;
        let Some(plan) = self.read_plan(net, subscriptions, plan_id).await? else {
            return Err(no_plan(plan_id, net));
        };
        let owner = self
            .core
            .store()
            .plan_owner(&net.spec.name, plan_id)
            .await?;
        let Some(owner) = owner.filter(|o| o.provider == provider) else {
            return Err(Error::Forbidden(
                "only the provider that created this plan may deprecate it".into(),
            ));
        };
        if plan.deprecated {
            return Ok(plan);
        }
        let _guard = self.core.locks.lock(plan_id).await;
        let tx = TxRequest::call(
            owner.relayer,
            subscriptions,
            Subscriptions::deprecatePlanCall { planId: plan_id }.abi_encode(),
        );
        if let Err(e) = self.send_confirmed(net, tx).await {
            return Err(match e {
                Ok(revert) => Error::Revert(revert),
                Err(e) => e,
            });
        }
        tracing::info!(%plan_id, %provider, "plan deprecated");
        self.read_plan(net, subscriptions, plan_id)
            .await?
            .ok_or_else(|| Error::internal("deprecated plan vanished"))
    }
}

#[cfg(test)]
mod tests {
    use alloy::primitives::U256;

    use super::*;

    #[test]
    fn salt_and_id_match_solidity_abi_encode() {
        let provider = Address::repeat_byte(0xaa);
        // abi.encode(address, string): head (address, offset 0x40), then length and data.
        let mut expected = Vec::new();
        expected.extend_from_slice(&[0u8; 12]);
        expected.extend_from_slice(provider.as_slice());
        expected.extend_from_slice(&U256::from(0x40).to_be_bytes::<32>());
        expected.extend_from_slice(&U256::from(3).to_be_bytes::<32>());
        let mut data = [0u8; 32];
        data[..3].copy_from_slice(b"abc");
        expected.extend_from_slice(&data);
        assert_eq!(plan_salt(provider, "abc"), keccak256(&expected));

        let salt = B256::repeat_byte(1);
        let mut expected = [0u8; 64];
        expected[12..32].copy_from_slice(provider.as_slice());
        expected[32..].copy_from_slice(salt.as_slice());
        assert_eq!(plan_id_for(provider, salt), keccak256(expected));
    }
}
