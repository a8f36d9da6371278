//! Signing helpers: payments signed with the dev accounts' keys on a [`Fixture`]'s token, as a
//! Tollgate agent signs them (a router payment) and as an x402 V1 client does (`exact`).

use alloy::sol_types::Eip712Domain;
use tollgate_chain::{
    Address, B256, U256,
    accounts::DevAccount,
    authorization::{
        ReceiveWithAuthorization, TransferWithAuthorization, router_nonce, sign, token_domain,
    },
    contracts::{self, Token},
};
use tollgate_protocol::{
    Amount, Eip3009Authorization, SignedPayment,
    x402::{ExactEvmAuthorization, ExactEvmPayload, PaymentPayload},
};

use crate::{Error, Fixture, Result};

/// The token's EIP-712 name and version (the devnet's genesis and [`crate::anvil_chain`] deploy
/// it so; a [`crate::usdc::fixture`]'s differ: see [`Fixture::token_params`]).
pub const TOKEN_NAME: &str = "USD Coin";
/// See [`TOKEN_NAME`].
pub const TOKEN_VERSION: &str = "2";

/// What a router payment commits to: an agent's `ReceiveWithAuthorization` to the router whose
/// nonce commits to `pay_to`, `memo` and the facilitator's `fee`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouterTerms {
    /// The provider paid.
    pub pay_to: Address,
    /// The amount, in the token's units.
    pub amount: u64,
    /// The 402's memo.
    pub memo: B256,
    /// The facilitator's fee the nonce commits to.
    pub fee: u64,
    /// `validAfter` (unix seconds).
    pub valid_after: u64,
    /// `validBefore` (unix seconds).
    pub valid_before: u64,
}

/// What an x402 V1 `exact` payment commits to: a `transferWithAuthorization` straight to
/// `pay_to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExactTerms {
    /// The recipient.
    pub pay_to: Address,
    /// The amount, in the token's units.
    pub amount: u64,
    /// The EIP-3009 nonce (random in x402 clients).
    pub nonce: B256,
    /// `validAfter` (unix seconds).
    pub valid_after: u64,
    /// `validBefore` (unix seconds).
    pub valid_before: u64,
}

impl Fixture {
    /// Dev account `i`.
    ///
    /// # Panics
    /// If there is no such account (see [`crate::ACCOUNTS`]).
    pub fn account(&self, i: usize) -> &DevAccount {
        &self.accounts[i]
    }

    /// Dev account `i`'s address.
    pub fn address(&self, i: usize) -> Address {
        self.account(i).address
    }

    /// The chain's time or the wall clock, whichever is later (unix seconds): a validity window
    /// around it holds on the chain and in the facilitator's checks.
    pub async fn now(&self) -> Result<u64> {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(self.chain.timestamp().await?.max(wall))
    }

    /// `who`'s balance of the token.
    pub async fn token_balance(&self, who: Address) -> Result<U256> {
        Ok(contracts::read(
            &*self.chain,
            self.deployment.token,
            &Token::balanceOfCall { account: who },
        )
        .await?)
    }

    /// The token's EIP-712 domain: its name and version ([`Fixture::token_params`]), chain id and
    /// address.
    pub fn token_domain(&self) -> Eip712Domain {
        token_domain(
            self.token_params.name.clone(),
            self.token_params.version.clone(),
            self.chain.chain_id(),
            self.deployment.token,
        )
    }

    /// A router payment on `network` signed by dev account `payer`, as a Tollgate agent signs it.
    pub fn sign_router_payment(
        &self,
        network: &str,
        payer: usize,
        terms: &RouterTerms,
    ) -> Result<SignedPayment> {
        let d = self.deployment;
        let payer = self.account(payer);
        let auth = ReceiveWithAuthorization {
            from: payer.address,
            to: d.router,
            value: U256::from(terms.amount),
            validAfter: U256::from(terms.valid_after),
            validBefore: U256::from(terms.valid_before),
            nonce: router_nonce(terms.pay_to, terms.memo, U256::from(terms.fee)),
        };
        let domain = self.token_domain();
        let signature = sign(&payer.signer(), &auth, &domain)?;
        Ok(SignedPayment {
            network: network
                .parse()
                .map_err(|e: tollgate_protocol::NetworkError| Error::Setup(e.into()))?,
            token: d.token,
            pay_to: terms.pay_to,
            amount: Amount::from_units(terms.amount),
            memo: terms.memo,
            authorization: Eip3009Authorization {
                from: payer.address,
                to: d.router,
                value: Amount::from_units(terms.amount),
                valid_after: Amount::from_units(terms.valid_after),
                valid_before: Amount::from_units(terms.valid_before),
                nonce: auth.nonce,
                signature,
            },
        })
    }

    /// An x402 V1 `exact` payment on `network` as x402-fetch signs it: dev account `payer`'s
    /// `transferWithAuthorization` on `terms`.
    pub fn sign_exact(
        &self,
        network: &str,
        payer: usize,
        terms: &ExactTerms,
    ) -> Result<PaymentPayload> {
        let payer = self.account(payer);
        let auth = TransferWithAuthorization {
            from: payer.address,
            to: terms.pay_to,
            value: U256::from(terms.amount),
            validAfter: U256::from(terms.valid_after),
            validBefore: U256::from(terms.valid_before),
            nonce: terms.nonce,
        };
        let domain = self.token_domain();
        let signature = sign(&payer.signer(), &auth, &domain)?;
        Ok(PaymentPayload {
            x402_version: 1,
            scheme: "exact".into(),
            network: tollgate_protocol::Network::parse(network)
                .map_err(|e| Error::Setup(Box::new(e)))?,
            payload: ExactEvmPayload {
                signature,
                authorization: ExactEvmAuthorization {
                    from: payer.address,
                    to: terms.pay_to,
                    value: Amount::from_units(terms.amount),
                    valid_after: Amount::from_units(terms.valid_after),
                    valid_before: Amount::from_units(terms.valid_before),
                    nonce: terms.nonce,
                },
            },
        })
    }
}
