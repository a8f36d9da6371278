//! `POST /authorize`: validate a client-signed transfer, settle it through the PaymentRouter, wait
//! for confirmation, and issue the signed proof.
//!
//! Money safety rests on the chain: an EIP-3009 nonce can be used once, and it commits to payTo,
//! memo and fee, so whatever happens here (a crash between broadcast and reply, two replicas, a
//! front-runner) at most one transfer exists per authorization, and it pays exactly what the payer
//! signed. The store adds idempotency (the same request gets the same proof) and the status of
//! settlements still pending. Recovery always asks the chain: if the nonce is used, the matching
//! `PaymentSettled` event is the settlement.

use alloy::{
    primitives::{Address, B256, U256, keccak256},
    sol_types::{SolCall, SolValue},
};
use tollgate_chain::{
    Confirmation, Error as ChainError, Revert, TxRequest, WaitOptions,
    authorization::{ReceiveWithAuthorization, recover, router_nonce},
    contracts::{self, PaymentRouter, Token},
};
use tollgate_protocol::{
    Amount, ApiErrorCode, AuthorizeRequest, PaymentProof, SettlementStatus, SignedPayment,
};

use std::sync::Arc;

use crate::{
    error::{Error, Relayed, Result},
    facilitator::Core,
    facilitator::{Network, unix_now},
    metrics::{SettlementOutcome, SettlementPath},
    store::{NewSettlement, Settlement, SettlementKind},
};

mod proofs;
mod status;

/// What `/authorize` (or its status URL) answers.
#[derive(Debug)]
pub enum Outcome {
    /// Confirmed: the proof (base64) and its fields.
    Confirmed {
        /// `X-PAYMENT` form.
        proof: String,
        /// Decoded.
        payment: Box<PaymentProof>,
    },
    /// Broadcast, not yet confirmed.
    Pending {
        /// The settlement's key (its status URL is `/settlements/{key}`).
        key: B256,
        /// The transaction, if broadcast.
        tx_hash: Option<B256>,
    },
}

/// The idempotency key of an EIP-3009 authorization: one per (chain, token, payer, nonce).
pub fn settlement_key(
    chain_id: u64,
    token: alloy::primitives::Address,
    from: alloy::primitives::Address,
    nonce: B256,
) -> B256 {
    keccak256((U256::from(chain_id), token, from, nonce).abi_encode())
}

/// The gas limit of a router settlement signed by a 65-byte (EOA) signature: the devnet's uses
/// about 68k, one over USDC about 100–130k; the unused rest is not charged.
/// The floor `tollgate facilitator --check` keeps relayers above is counted in it.
pub(crate) const ROUTER_SETTLE_GAS: u64 = 300_000;

/// Circle's FiatToken's blacklist, read to name the account a blacklisted refusal is about.
#[allow(missing_docs, unreachable_pub)]
mod blacklistable {
    alloy::sol! {
        interface Blacklistable {
            function isBlacklisted(address account) external view returns (bool);
        }
    }
}
use blacklistable::Blacklistable;

/// Why a simulated settlement was refused.
enum Refusal {
    /// The authorization's nonce is used (or cancelled).
    Used,
    /// The token refuses an account of the payment: this one, when it says which.
    Blacklisted(Option<(&'static str, Address)>),
    /// The token is paused.
    Paused,
    /// The payer holds too little.
    Funds {
        /// What it holds.
        balance: U256,
    },
    /// Anything else the contracts refused.
    Other(Revert),
}

/// The router's `settle` call for a signed payment.
fn settle_call(sp: &SignedPayment, fee: Amount) -> PaymentRouter::settleCall {
    let auth = &sp.authorization;
    PaymentRouter::settleCall {
        from: auth.from,
        payTo: sp.pay_to,
        amount: sp.amount.get(),
        fee: fee.get(),
        memo: sp.memo,
        validAfter: auth.valid_after.get(),
        validBefore: auth.valid_before.get(),
        signature: auth.signature.clone(),
    }
}

/// The EIP-3009 authorization a signed payment's signature is over.
fn typed_authorization(sp: &SignedPayment) -> ReceiveWithAuthorization {
    let auth = &sp.authorization;
    ReceiveWithAuthorization {
        from: auth.from,
        to: auth.to,
        value: auth.value.get(),
        validAfter: auth.valid_after.get(),
        validBefore: auth.valid_before.get(),
        nonce: auth.nonce,
    }
}

/// Whether the payment's signature recovers to its payer (the payer's own key; no node call).
fn signed_by_own_key(net: &Network, sp: &SignedPayment) -> bool {
    recover(
        &typed_authorization(sp),
        &net.domain,
        &sp.authorization.signature,
    )
    .is_ok_and(|a| a == sp.authorization.from)
}

fn field(path: &str, msg: impl std::fmt::Display) -> String {
    format!("{path}: {msg}")
}

fn u64_of(a: Amount) -> u64 {
    a.get().try_into().unwrap_or(u64::MAX)
}

/// Settlement with a proof (the spec's `POST /authorize`): validates a signed payment, settles
/// it through the network's PaymentRouter and answers the signed proof; the status URL of one
/// still pending ([`status`](Self::status)), proof verification, and the reconciliation of the
/// unfinished ones ([`reconcile`](Self::reconcile)). A service of the [`Facilitator`](crate::Facilitator).
#[derive(Clone, Debug)]
pub struct Settlements {
    pub(crate) core: Arc<Core>,
}

impl Settlements {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        Self { core }
    }

    /// Settles a signed payment (the spec's `/authorize`). Idempotent: the same payment again,
    /// also concurrently, yields the same proof and one transfer. `req.resource` (the URL paid
    /// for, as the client reports it) labels the settlement in analytics; the first one recorded
    /// stays. With `req.claim`, the first request binds the settlement to it: a repeat with
    /// another claim (or none) is refused with 403 `ClaimMismatch`.
    pub async fn authorize(&self, req: &AuthorizeRequest) -> Result<Outcome> {
        let started = std::time::Instant::now();
        let result = self.authorize_inner(req).await;
        let outcome = match &result {
            Ok(Outcome::Confirmed { .. }) => SettlementOutcome::Confirmed,
            Ok(Outcome::Pending { .. }) => SettlementOutcome::Pending,
            Err(e) if e.is_server_error() => SettlementOutcome::Failed,
            Err(_) => SettlementOutcome::Rejected,
        };
        self.core
            .metrics
            .settlement(SettlementPath::Router, outcome, started.elapsed());
        result
    }

    async fn authorize_inner(&self, req: &AuthorizeRequest) -> Result<Outcome> {
        let sp = &req.signed_payment;
        let net = self.core.network(&sp.network).ok_or_else(|| {
            Error::invalid(
                ApiErrorCode::UnknownNetwork,
                field(
                    "signedPayment.network",
                    format!("{:?} is not served by this facilitator", sp.network),
                ),
            )
        })?;
        let mut new = self.validate(net, sp).await?;
        new.resource = req
            .resource
            .as_deref()
            .and_then(crate::analytics::resource_label);
        new.claim_hash = req.claim.map(keccak256);
        let _guard = self.core.locks.lock(new.key).await;

        // A fresh payment, the common case, is simulated and recorded without reading its row
        // first: the insert says whether the key was taken. A payment seen before is answered
        // from its row, found by the insert, or read when a check refuses it (a settled one
        // is refused as used).
        let relayer = match self.core.funded_relayer(net).await {
            Ok(relayer) => relayer,
            // A replica that cannot send (no relayer held, none with a settlement's gas, fees
            // above the cap) records nothing: the payment goes to one that can, or comes back.
            // What is recorded already it still answers.
            Err(e) => return self.seen_before_or(net, &new, e).await,
        };
        // Money checks before anything is written or broadcast: the settlement itself, run as
        // one `eth_call` from the relayer (the payer's balance, the nonce, the signature and
        // window as the token checks them, the router's own checks).
        let call = settle_call(sp, new.fee);
        let refusal = match net
            .chain
            .call(Some(relayer), net.spec.router, call.abi_encode().into())
            .await
        {
            Ok(_) => None,
            Err(ChainError::Revert(r)) => Some(r),
            // The node cannot be asked: a payment settled before is still answered from its
            // row (a client asking again after a lost answer), anything else waits for it.
            Err(e) => return self.seen_before_or(net, &new, e.into()).await,
        };
        if let Some(revert) = refusal {
            if let Some(row) = self.core.store.settlement(new.key).await? {
                return self.seen_before(net, row, &new).await;
            }
            match self.named_refusal(net, sp, revert).await? {
                Refusal::Used => {
                    // Someone (a front-runner, another replica, a crashed earlier run) used the
                    // nonce: if the settlement is on-chain (or about to be), it is this payment.
                    return match self.find_settlement_event(net, &new).await? {
                        Some(receipt) => {
                            let row = self.core.store.insert_settlement(&new).await?.row;
                            check_claim(&row, new.claim_hash)?;
                            self.confirm(net, &row.new, &receipt).await
                        }
                        None => Err(Error::AuthorizationUsed),
                    };
                }
                Refusal::Funds { balance } => {
                    return Err(Error::InsufficientFunds(format!(
                        "payer {} holds {balance}, the payment needs {}",
                        sp.authorization.from, sp.amount
                    )));
                }
                // A token's compliance controls: refused before anything is recorded, as a
                // payer's balance is (lifted, the same payment may be sent again).
                Refusal::Blacklisted(Some((who, account))) => {
                    return Err(Error::AccountBlacklisted(format!(
                        "the token refuses the transfer: the {who} {account} is blacklisted"
                    )));
                }
                Refusal::Blacklisted(None) => {
                    return Err(Error::AccountBlacklisted(format!(
                        "the token refuses the transfer: an account of the payment (the router {} \
                         or its fee recipient) is blacklisted",
                        net.spec.router
                    )));
                }
                Refusal::Paused => {
                    return Err(Error::TokenPaused(format!(
                        "the token {} is paused and moves nothing until it is unpaused; send the \
                         payment again then",
                        net.spec.token
                    )));
                }
                Refusal::Other(revert) => {
                    // Refused for another reason: recorded as failed, as a refused broadcast is.
                    let row = self.core.store.insert_settlement(&new).await?.row;
                    return self.refused(net, &row.new, revert).await;
                }
            }
        }
        let recorded = self.core.store.insert_settlement(&new).await?;
        if !recorded.inserted {
            // Recorded meanwhile (another replica) or before (a payment whose settlement has
            // not used its nonce yet): driven on from its row, never sent twice from here.
            return self.seen_before(net, recorded.row, &new).await;
        }
        crate::fault::hit("authorize.after-insert");
        self.broadcast_and_wait(net, &recorded.row.new, sp, Some(relayer))
            .await
    }

    /// A payment that cannot go further here (no relayer, no node): answered from its row if
    /// one is recorded, else `err`.
    async fn seen_before_or(
        &self,
        net: &Network,
        new: &NewSettlement,
        err: Error,
    ) -> Result<Outcome> {
        match self.core.store.settlement(new.key).await? {
            Some(row) => self.seen_before(net, row, new).await,
            None => Err(err),
        }
    }

    /// A payment whose key is recorded: the same terms are answered from the row (the stored
    /// proof, or the settlement driven on); other terms under the key are a conflict.
    async fn seen_before(
        &self,
        net: &Network,
        row: Settlement,
        new: &NewSettlement,
    ) -> Result<Outcome> {
        if row.new.request_hash != new.request_hash {
            return Err(Error::IdempotencyConflict(
                "this authorization (payer and nonce) was already submitted with different terms"
                    .into(),
            ));
        }
        check_claim(&row, new.claim_hash)?;
        self.resume(net, row).await
    }

    /// Names a simulated settlement's refusal: from the revert when the contracts (or USDC's
    /// strings, decoded) name it, reading only what the message needs (the blacklisted account,
    /// the balance), else (a string nothing names) from the nonce's state and the payer's
    /// balance, read only then.
    async fn named_refusal(
        &self,
        net: &Network,
        sp: &SignedPayment,
        revert: Revert,
    ) -> Result<Refusal> {
        let auth = &sp.authorization;
        match revert {
            Revert::AuthorizationAlreadyUsed { .. } | Revert::AuthorizationUsedOrCanceled => {
                return Ok(Refusal::Used);
            }
            Revert::InsufficientFunds { balance, .. } => return Ok(Refusal::Funds { balance }),
            Revert::TokenPaused => return Ok(Refusal::Paused),
            Revert::Blacklisted => {
                for (who, account) in [("payer", auth.from), ("payee", sp.pay_to)] {
                    let listed = Blacklistable::isBlacklistedCall { account };
                    if contracts::read(&*net.chain, net.spec.token, &listed).await? {
                        return Ok(Refusal::Blacklisted(Some((who, account))));
                    }
                }
                return Ok(Refusal::Blacklisted(None));
            }
            // The balance is read below, for the message.
            Revert::TransferExceedsBalance | Revert::Message(_) | Revert::Unknown(_) => {}
            named => return Ok(Refusal::Other(named)),
        }
        let state = Token::authorizationStateCall {
            authorizer: auth.from,
            nonce: auth.nonce,
        };
        if contracts::read(&*net.chain, net.spec.token, &state).await? {
            return Ok(Refusal::Used);
        }
        let balance = Token::balanceOfCall { account: auth.from };
        let balance = contracts::read(&*net.chain, net.spec.token, &balance).await?;
        if balance < sp.amount.get() {
            return Ok(Refusal::Funds { balance });
        }
        Ok(Refusal::Other(revert))
    }

    /// Every check that needs no write; returns the row to record.
    async fn validate(&self, net: &Network, sp: &SignedPayment) -> Result<NewSettlement> {
        let spec = &net.spec;
        let auth = &sp.authorization;
        let fee = self.core.settings.fee;
        if sp.token != spec.token {
            return Err(Error::invalid(
                ApiErrorCode::UnsupportedToken,
                field(
                    "signedPayment.token",
                    format!(
                        "{} is not the token settled on {} ({})",
                        sp.token, spec.name, spec.token
                    ),
                ),
            ));
        }
        if auth.to != spec.router {
            return Err(Error::invalid(
                ApiErrorCode::InvalidAuthorization,
                field(
                    "signedPayment.authorization.to",
                    format!("must be the router {}", spec.router),
                ),
            ));
        }
        if auth.value != sp.amount {
            return Err(Error::invalid(
                ApiErrorCode::InvalidAuthorization,
                field(
                    "signedPayment.authorization.value",
                    format!("{} differs from amount {}", auth.value, sp.amount),
                ),
            ));
        }
        if sp.amount.get() <= fee {
            return Err(Error::invalid(
                ApiErrorCode::AmountBelowFee,
                field(
                    "signedPayment.amount",
                    format!("{} does not exceed the facilitator's fee {fee}", sp.amount),
                ),
            ));
        }
        if sp.pay_to.is_zero() {
            return Err(Error::invalid(
                ApiErrorCode::InvalidAuthorization,
                field("signedPayment.payTo", "must not be the zero address"),
            ));
        }
        // The router would keep the payment, and nothing can take it out (the router's own
        // `settle` does not refuse it: halmos found it; issue 35).
        if sp.pay_to == spec.router {
            return Err(Error::invalid(
                ApiErrorCode::InvalidAuthorization,
                field(
                    "signedPayment.payTo",
                    format!(
                        "must not be the router {}: it would keep the payment",
                        spec.router
                    ),
                ),
            ));
        }
        let expected = router_nonce(sp.pay_to, sp.memo, fee);
        if auth.nonce != expected {
            return Err(Error::invalid(
                ApiErrorCode::NonceMismatch,
                field(
                    "signedPayment.authorization.nonce",
                    format!(
                        "must be keccak256(abi.encode(payTo, memo, fee)) with fee {fee}: expected {expected}"
                    ),
                ),
            ));
        }
        let now = net.now().await;
        let valid_before = u64_of(auth.valid_before);
        if valid_before <= now {
            return Err(Error::invalid(
                ApiErrorCode::AuthorizationExpired,
                field(
                    "signedPayment.authorization.validBefore",
                    format!("{valid_before} is not after now ({now})"),
                ),
            ));
        }
        let max = self.core.settings.max_validity_secs;
        if valid_before - now > max {
            return Err(Error::invalid(
                ApiErrorCode::ValidityTooLong,
                field(
                    "signedPayment.authorization.validBefore",
                    format!("must be at most {max} s from now ({now})"),
                ),
            ));
        }
        if u64_of(auth.valid_after) >= now {
            return Err(Error::invalid(
                ApiErrorCode::AuthorizationNotYetValid,
                field(
                    "signedPayment.authorization.validAfter",
                    format!("{} is not before now ({now})", auth.valid_after),
                ),
            ));
        }
        let typed = typed_authorization(sp);
        // The payer's own key, or a smart wallet's EIP-1271 answer (FiatToken v2.2 takes both).
        let digest = alloy::sol_types::SolStruct::eip712_signing_hash(&typed, &net.domain);
        let signer = crate::x402::account_signer(net, auth.from, digest, &auth.signature).await?;
        if signer == crate::x402::Signer::Nobody {
            let recovered = recover(&typed, &net.domain, &auth.signature)
                .map_or_else(|e| e.to_string(), |a| format!("signed by {a}"));
            return Err(Error::invalid(
                ApiErrorCode::InvalidSignature,
                field(
                    "signedPayment.authorization.signature",
                    format!(
                        "{recovered}, not by {} nor accepted by it (EIP-1271) (check the EIP-712 domain: {} / {} on chain {}, token {})",
                        auth.from, spec.token_name, spec.token_version, spec.chain_id, spec.token
                    ),
                ),
            ));
        }
        let request = serde_json::to_string(sp).map_err(Error::internal)?;
        Ok(NewSettlement {
            key: crate::settle::settlement_key(spec.chain_id, spec.token, auth.from, auth.nonce),
            kind: SettlementKind::Router,
            request_hash: keccak256(request.as_bytes()),
            network: spec.name.clone(),
            chain_id: spec.chain_id,
            token: spec.token,
            payer: auth.from,
            pay_to: sp.pay_to,
            amount: sp.amount,
            fee: Amount(fee),
            memo: sp.memo,
            nonce: auth.nonce,
            valid_before,
            request,
            resource: None,
            claim_hash: None,
            created_at: unix_now(),
        })
    }

    /// Broadcasts the router settlement and waits boundedly. `simulated`: the relayer whose
    /// simulation of it just passed (the first send); `None` estimates (and so simulates) again.
    async fn broadcast_and_wait(
        &self,
        net: &Network,
        new: &NewSettlement,
        sp: &SignedPayment,
        simulated: Option<Address>,
    ) -> Result<Outcome> {
        let call = settle_call(sp, new.fee);
        let relayer = match simulated {
            Some(r) => r,
            None => self.core.relayer().await?,
        };
        let mut tx = TxRequest::call(relayer, net.spec.router, call.abi_encode());
        if simulated.is_some() && signed_by_own_key(net, sp) {
            // Just simulated: no gas estimate (whose search runs the settlement a dozen times
            // on the node). The payer's own key's settlement has a fixed cost well under this
            // limit (an unused limit costs nothing); a smart wallet's is estimated (the wallet
            // decides what its signature check costs), even with a 65-byte signature.
            tx.gas = Some(ROUTER_SETTLE_GAS);
        }
        let tx_hash = match net.chain.send(tx).await {
            Ok(h) => h,
            Err(ChainError::Revert(revert)) => return self.refused(net, new, revert).await,
            Err(e) => return Err(e.into()),
        };
        crate::fault::hit("authorize.after-broadcast");
        self.wait_and_confirm(net, new, tx_hash).await
    }

    /// A settlement refused at simulation: either the nonce was used meanwhile (recover), or the
    /// payment cannot go through (no write beyond the row's failure; nothing moved).
    async fn refused(&self, net: &Network, new: &NewSettlement, revert: Revert) -> Result<Outcome> {
        if matches!(
            revert,
            Revert::AuthorizationAlreadyUsed { .. } | Revert::AuthorizationUsedOrCanceled
        ) {
            // Used by a settlement at the configured depth: this payment. Used by one not yet
            // deep enough, or not yet mined (another transaction carrying the same authorization:
            // one this facilitator sent before it was reorged out, another replica's, one of a
            // replica that died): pending, not failed.
            if !self.core.used_at_latest(net, new.payer, new.nonce).await? {
                // Still only in the node's pending state after the whole wait: neither
                // settled nor refused. The row stays as it is; the status URL and the
                // reconciler drive it on (found mined, or sent again if the node dropped it).
                return Ok(Outcome::Pending {
                    key: new.key,
                    tx_hash: None,
                });
            }
            if let Some(receipt) = self.find_settlement_event(net, new).await? {
                return self.confirm(net, new, &receipt).await;
            }
            if let Some(shallow) = self.settlement_event_at(net, new, 1).await? {
                let at = unix_now();
                self.core
                    .store
                    .mark_submitted(new.key, shallow.tx_hash, at)
                    .await?;
                self.core.store.mark_pending(new.key, at).await?;
                return Ok(Outcome::Pending {
                    key: new.key,
                    tx_hash: Some(shallow.tx_hash),
                });
            }
        }
        let error = Error::Revert(revert);
        let answer = error.to_api();
        self.core
            .store
            .mark_failed(
                new.key,
                &format!("{}: {}", answer.code, answer.message),
                unix_now(),
            )
            .await?;
        Err(error)
    }

    async fn wait_and_confirm(
        &self,
        net: &Network,
        new: &NewSettlement,
        tx_hash: B256,
    ) -> Result<Outcome> {
        let opts = WaitOptions {
            confirmations: net.spec.confirmations,
            timeout: self.core.settings.confirmation_timeout,
        };
        match net.chain.wait(tx_hash, opts).await? {
            Confirmation::Confirmed(receipt) if receipt.success => {
                self.confirm(net, new, &receipt).await
            }
            Confirmation::Confirmed(receipt) => {
                // Reverted on-chain: perhaps another transaction used the nonce first.
                if let Some(r) = self.find_settlement_event(net, new).await? {
                    return self.confirm(net, new, &r).await;
                }
                self.core
                    .store
                    .mark_failed(
                        new.key,
                        &format!(
                            "SettlementReverted: transaction {} reverted",
                            receipt.tx_hash
                        ),
                        unix_now(),
                    )
                    .await?;
                Err(Error::Reverted {
                    kind: Relayed::Settlement,
                    tx_hash: receipt.tx_hash,
                })
            }
            Confirmation::Pending { tx_hash } => {
                let at = unix_now();
                self.core.store.mark_submitted(new.key, tx_hash, at).await?;
                self.core.store.mark_pending(new.key, at).await?;
                Ok(Outcome::Pending {
                    key: new.key,
                    tx_hash: Some(tx_hash),
                })
            }
        }
    }

    /// Picks up a stored settlement: answers a confirmed one from the store, and drives any
    /// other one to its end through the chain.
    async fn resume(&self, net: &Network, row: Settlement) -> Result<Outcome> {
        match row.status {
            SettlementStatus::Confirmed => proofs::stored_proof(&row),
            SettlementStatus::Failed => {
                let (code, message) = row
                    .error
                    .as_deref()
                    .and_then(|e| e.split_once(": "))
                    .unwrap_or(("SettlementFailed", "the settlement failed"));
                Err(Error::SettlementFailed {
                    code: ApiErrorCode::from(code),
                    message: message.to_owned(),
                })
            }
            SettlementStatus::Submitted | SettlementStatus::Pending => {
                if let Some(receipt) = self.find_settlement_event(net, &row.new).await? {
                    return self.confirm(net, &row.new, &receipt).await;
                }
                match row.tx_hash {
                    // The node no longer knows the transaction and no settlement event exists:
                    // the authorization is unused, so it is sent again while it is valid. The
                    // token takes each authorization once, so this can never settle twice.
                    Some(h) if self.dropped(net, h).await? => self.send_again(net, &row).await,
                    Some(h) => self.wait_and_confirm(net, &row.new, h).await,
                    None => Ok(Outcome::Pending {
                        key: row.new.key,
                        tx_hash: None,
                    }),
                }
            }
            SettlementStatus::Received => {
                // Recorded, then the process stopped before the outcome was: ask the chain.
                if let Some(receipt) = self.find_settlement_event(net, &row.new).await? {
                    return self.confirm(net, &row.new, &receipt).await;
                }
                self.send_again(net, &row).await
            }
        }
    }

    /// Broadcasts a stored settlement whose authorization is unused on chain, unless it expired.
    async fn send_again(&self, net: &Network, row: &Settlement) -> Result<Outcome> {
        let sp: SignedPayment = serde_json::from_str(&row.new.request).map_err(Error::internal)?;
        if net.now().await >= row.new.valid_before {
            self.core
                .store
                .mark_failed(
                    row.new.key,
                    "AuthorizationExpired: expired before it was settled",
                    unix_now(),
                )
                .await?;
            return Err(Error::invalid(
                ApiErrorCode::AuthorizationExpired,
                "the authorization expired before it was settled",
            ));
        }
        self.broadcast_and_wait(net, &row.new, &sp, None).await
    }
}

/// A settlement bound to a claim is answered only to the holder of that claim (`presented` is
/// `keccak256(claim)`): whoever copies the signed authorization from the chain cannot collect
/// its proof.
fn check_claim(row: &Settlement, presented: Option<B256>) -> Result<()> {
    match row.new.claim_hash {
        Some(bound) if presented != Some(bound) => Err(Error::ClaimMismatch),
        _ => Ok(()),
    }
}
