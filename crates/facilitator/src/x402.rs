//! The x402 V1 facilitator API, so that x402 resource servers we did not write (e.g.
//! `x402-express`) can use a Tollgate facilitator unchanged: `POST /verify`, `POST /settle`,
//! `GET /supported`, with the exact coinbase/x402 V1 shapes and reason codes.
//!
//! Settlement here is a direct EIP-3009 `transferWithAuthorization` to `payTo`, submitted by a
//! relayer: the payer signed the transfer to the payee, so no fee can be taken on this path (the
//! relayer pays the gas).
//!
//! The money rules of `/settle` ([`X402::settle`]): one authorization (chain, token,
//! payer, nonce) moves money once and is answered `success` once; a repeat is
//! `duplicate_settlement` naming the original transaction (unless it comes from the first
//! settler, named by its `Idempotency-Key`); a payload differing from the settled one in any
//! signed field or requirement is never answered with it; the signature is checked under the
//! token's configured EIP-712 domain; and a success is answered only after the receipt shows
//! this authorization used and its `Transfer` of exactly this value from this payer to this
//! payee.
//!
//! A payer may be a smart-contract wallet (EIP-1271), as FiatToken v2.2 takes it: a signature
//! that does not recover to the payer is the payer's when the payer has code and its
//! `isValidSignature` accepts it over the authorization's digest. Only the payer's own ECDSA
//! signature (a plain one) goes in a batch with a fixed gas limit; a wallet's is sent alone with
//! its gas estimated, since what its check costs is the wallet's.

use alloy::{
    primitives::{Address, B256, Bytes, FixedBytes, U256},
    sol,
    sol_types::{SolEvent, SolStruct},
};
use tollgate_chain::{
    Confirmation, Error as ChainError, Receipt, Revert, TxRequest, WaitOptions,
    authorization::{TransferWithAuthorization, parse_signature, recover},
    contracts::{self, PaymentRouter, Token},
};
use tollgate_protocol::{
    Amount, SettlementStatus,
    x402::{
        ErrorReason, PaymentPayload, PaymentRequirements, SettleRequest, SettleResponse,
        VerifyRequest, VerifyResponse, check_exact_evm,
    },
};

use std::sync::Arc;

use crate::{
    batch::{Batched, Ticket},
    facilitator::Core,
    facilitator::{Network, unix_now},
    metrics::{SettlementOutcome, SettlementPath},
    settle::settlement_key,
    store::{NewSettlement, Settlement, SettlementKind, StoreError},
    view,
};

mod outcome;

use outcome::{Use, transfers_exactly};

/// The gas limit of an x402 settlement signed by a 65-byte (EOA) signature: USDC's and the
/// devnet token's `transferWithAuthorization` use about 60–90k; the unused rest is not charged.
const EOA_TRANSFER_GAS: u64 = 200_000;

sol! {
    /// EIP-1271: a contract account's signature check.
    interface IERC1271 {
        function isValidSignature(bytes32 hash, bytes signature)
            external
            view
            returns (bytes4 magicValue);
    }
}

/// What `isValidSignature` answers for a valid signature (its selector).
const ERC1271_MAGIC_VALUE: FixedBytes<4> = FixedBytes([0x16, 0x26, 0xba, 0x7e]);

/// Who signed an EIP-3009 authorization for its payer, as FiatToken v2.2's `SignatureChecker`
/// decides it ([`account_signer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Signer {
    /// The payer's own key: a plain (65-byte ECDSA) signature recovering to the payer.
    Key,
    /// The payer is a contract (a smart wallet) whose `isValidSignature` accepts it.
    Wallet,
    /// Neither: not the payer's signature.
    Nobody,
}

/// What a simulation of a payload's transfer says.
enum Simulated {
    /// It would go through.
    Passes,
    /// The authorization's nonce is used (by a transfer mined or still pending).
    Used,
    /// It would not, for this reason.
    Refused(ErrorReason),
}

/// A payload's transfer, as the router's `settleTransfers` takes it.
fn router_transfer(payload: &PaymentPayload) -> PaymentRouter::Transfer {
    let auth = &payload.payload.authorization;
    PaymentRouter::Transfer {
        from: auth.from,
        to: auth.to,
        value: auth.value.get(),
        validAfter: auth.valid_after.get(),
        validBefore: auth.valid_before.get(),
        nonce: auth.nonce,
        signature: payload.payload.signature.clone(),
    }
}

/// The calldata of a payload's `transferWithAuthorization`.
fn transfer_call(payload: &PaymentPayload) -> Bytes {
    crate::simulate::token_transfer_call(&router_transfer(payload))
}

/// Whether a settlement's transfer may go in a batch with others.
enum Sending {
    /// In the next batch (or alone, when no other waits with it).
    Together,
    /// Handed to the next batch already, while its row was being recorded.
    Queued(Ticket),
    /// Alone: it did not go through in a batch.
    Alone,
}

/// What verification established about a payload.
struct Verified<'a> {
    net: &'a Network,
    key: B256,
    /// Signed by the payer's own key (a plain signature, which may go in a batch); known when
    /// checked without simulating (`/settle`), `false` otherwise.
    plain: bool,
}

/// The x402 facilitator API, V1 and V2: verify a payment against its requirements, settle it
/// (`transferWithAuthorization` to `payTo`, once per authorization), and what is supported. A
/// service of the [`Facilitator`](crate::Facilitator).
#[derive(Clone, Debug)]
pub struct X402 {
    pub(crate) core: Arc<Core>,
}

impl X402 {
    pub(crate) fn new(core: Arc<Core>) -> Self {
        Self { core }
    }

    /// Verifies an x402 V1 `exact` payment without settling it.
    pub async fn verify(&self, req: &VerifyRequest) -> VerifyResponse {
        let payer = Some(req.payment_payload.payload.authorization.from);
        match self
            .x402_check(&req.payment_payload, &req.payment_requirements, true)
            .await
        {
            Ok(_) => VerifyResponse::valid(req.payment_payload.payload.authorization.from),
            Err(reason) => VerifyResponse::invalid(reason, payer),
        }
    }

    async fn x402_check<'a>(
        &'a self,
        payload: &PaymentPayload,
        req: &PaymentRequirements,
        simulate: bool,
    ) -> Result<Verified<'a>, ErrorReason> {
        if payload.x402_version != 1 {
            return Err(ErrorReason::InvalidX402Version);
        }
        let net = self
            .core
            .network(&req.network)
            .ok_or(ErrorReason::InvalidNetwork)?;
        if req.asset != net.spec.token {
            return Err(ErrorReason::InvalidPaymentRequirements);
        }
        let now = net.now().await;
        check_exact_evm(payload, req, now)?;
        let auth = &payload.payload.authorization;
        // As `/authorize` does: an authorization valid for longer than the configured bound is
        // refused (x402 clients sign `maxTimeoutSeconds` ahead).
        let max = self.core.settings.max_validity_secs;
        if auth.valid_before.get() > U256::from(now.saturating_add(max)) {
            return Err(ErrorReason::InvalidExactEvmPayloadAuthorizationValidBefore);
        }
        // The signature is checked under the token's real EIP-712 domain (configured per
        // network), never one the client or server supplies: requirements naming another domain
        // describe a payment the token would refuse.
        if let Some(extra) = req.eip712_extra()
            && (extra.name != net.spec.token_name || extra.version != net.spec.token_version)
        {
            return Err(ErrorReason::InvalidPaymentRequirements);
        }
        if simulate {
            // One `eth_call` runs the transfer itself: signature, validity window, nonce and
            // balance as the token checks them. The signature's form is checked here (65
            // bytes, v, no malleable s: what `/settle` accepts); its signer by the token, under
            // its real domain, so the recovery (most of a verification's own CPU) is not done
            // twice. A refusal the token does not name is named by recovering it then. A
            // smart wallet's signature is in the wallet's own form: the token asks the wallet.
            if parse_signature(&payload.payload.signature).is_err() {
                match net.chain.code(auth.from).await {
                    Ok(code) if !code.is_empty() => {}
                    Ok(_) => return Err(ErrorReason::InvalidExactEvmPayloadSignature),
                    Err(e) => return Err(verify_chain_error(&e)),
                }
            }
            // The token's view answers without a round trip when it knows everything the
            // transfer checks; otherwise the simulation does, and clears the pair for the view.
            match x402_viewed(net, payload) {
                Some(view::Answer::Passes) => {}
                Some(view::Answer::Used) => return Err(ErrorReason::InvalidTransactionState),
                Some(view::Answer::InsufficientFunds) => {
                    return Err(ErrorReason::InsufficientFunds);
                }
                None => {
                    let generation = net.view.generation();
                    match self.x402_simulate(net, payload, None).await {
                        Simulated::Passes => net.view.cleared(auth.from, auth.to, generation),
                        Simulated::Used => return Err(ErrorReason::InvalidTransactionState),
                        Simulated::Refused(reason) => return Err(reason),
                    }
                }
            }
        }
        let plain = if simulate {
            false
        } else {
            match signer(net, payload).await {
                Ok(Signer::Key) => true,
                Ok(Signer::Wallet) => false,
                Ok(Signer::Nobody) => return Err(ErrorReason::InvalidExactEvmPayloadSignature),
                Err(e) => return Err(verify_chain_error(&e)),
            }
        };
        Ok(Verified {
            net,
            key: settlement_key(net.spec.chain_id, net.spec.token, auth.from, auth.nonce),
            plain,
        })
    }

    /// Settles an x402 V1 `exact` payment: a direct `transferWithAuthorization` to `payTo`.
    ///
    /// One authorization (chain, token, payer, nonce) is settled once and answered `success`
    /// once: the first `/settle` that carries the payment to confirmation gets it, and every
    /// other one (a concurrent or later repeat of the same payload, as a replaying client makes
    /// an x402 resource server send) gets `duplicate_settlement` naming the original transaction,
    /// so a server that settles after verifying serves each payment once, as with x402's
    /// reference facilitator. A payload that differs from the settled one in any signed field or
    /// in its requirements is never answered with that settlement (`invalid_transaction_state`).
    ///
    /// `settler` (the hash of the caller's `Idempotency-Key`) makes retries of the first settler
    /// safe: a repeat with the same payload and the same key gets the first outcome again (the
    /// Tollgate gate sends one derived from its secret, so a lost answer costs nothing).
    pub async fn settle(&self, req: &SettleRequest, settler: Option<B256>) -> SettleResponse {
        self.settle_bound(req, settler, None).await
    }

    /// [`settle`](Self::settle) that first binds the V2 `payment-identifier`
    /// `id_hash` to this payment, once the payment passed its checks (see
    /// [`crate::x402_v2`]).
    pub(crate) async fn settle_bound(
        &self,
        req: &SettleRequest,
        settler: Option<B256>,
        id_hash: Option<B256>,
    ) -> SettleResponse {
        let started = std::time::Instant::now();
        let response = self.x402_settle_inner(req, settler, id_hash).await;
        let outcome = if response.success {
            SettlementOutcome::Confirmed
        } else if response.transaction.is_empty() {
            SettlementOutcome::Rejected
        } else {
            SettlementOutcome::Failed
        };
        self.core
            .metrics
            .settlement(SettlementPath::X402, outcome, started.elapsed());
        response
    }

    async fn x402_settle_inner(
        &self,
        req: &SettleRequest,
        settler: Option<B256>,
        id_hash: Option<B256>,
    ) -> SettleResponse {
        let payload = &req.payment_payload;
        let auth = &payload.payload.authorization;
        let network = payload.network.clone();
        let fail = |reason: ErrorReason, tx: Option<B256>| {
            SettleResponse::failure(reason, network.clone(), Some(auth.from), tx)
        };

        // Checks that do not depend on the chain's state first, so a repeat of a settled
        // payment is answered from the store.
        let verified = match self
            .x402_check(payload, &req.payment_requirements, false)
            .await
        {
            Ok(v) => v,
            Err(reason) => return fail(reason, None),
        };
        // Only a payment that passed the checks binds its identifier: a refused one leaves it
        // free for the client's next payload, and one that binds it is on its way to a row.
        // The chain's checks count: a transfer the token would refuse (too little balance)
        // binds nothing. A used nonce is not a refusal here: the payload may be this id's own
        // settlement, answered from the store below.
        if let Some(id_hash) = id_hash {
            if let Simulated::Refused(reason) =
                self.x402_simulate(verified.net, payload, None).await
            {
                return fail(reason, None);
            }
            if let Err(reason) = self.bind_payment_identifier(id_hash, verified.key).await {
                return fail(reason, None);
            }
        }
        let net = verified.net;
        // From here this nonce may be on its way to a block: `/verify` simulates it.
        net.view.settling(auth.from, auth.nonce);
        let request = serde_json::to_string(req).unwrap_or_default();
        let new = NewSettlement {
            key: verified.key,
            kind: SettlementKind::X402,
            request_hash: alloy::primitives::keccak256(request.as_bytes()),
            network: net.spec.name.clone(),
            chain_id: net.spec.chain_id,
            token: net.spec.token,
            payer: auth.from,
            pay_to: auth.to,
            amount: auth.value,
            fee: Amount::ZERO,
            memo: B256::ZERO,
            nonce: auth.nonce,
            valid_before: auth.valid_before.get().try_into().unwrap_or(u64::MAX),
            request,
            resource: crate::analytics::resource_label(&req.payment_requirements.resource),
            claim_hash: settler,
            created_at: unix_now(),
        };
        let _guard = self.core.locks.lock(new.key).await;
        let row = match self.core.store.settlement(new.key).await {
            Ok(row) => row,
            Err(e) => {
                tracing::error!(error = %e, "store unavailable during /settle");
                return fail(ErrorReason::UnexpectedSettleError, None);
            }
        };
        let result = match row {
            Some(row) => self.x402_resume(net, &new, row).await,
            None => self.x402_first(net, &new, payload, verified.plain).await,
        };
        match result {
            Ok(tx) => SettleResponse::success(tx, network, auth.from),
            Err((reason, tx)) => fail(reason, tx),
        }
    }

    /// A settlement this store has not seen: checks the nonce, records, broadcasts, waits.
    /// `plain`: signed by the payer's own key ([`Signer::Key`]).
    async fn x402_first(
        &self,
        net: &Network,
        new: &NewSettlement,
        payload: &PaymentPayload,
        plain: bool,
    ) -> Result<B256, (ErrorReason, Option<B256>)> {
        // A replica without a relayer account records nothing: the payment stays free for a
        // replica that can send it.
        let relayer = match self.core.funded_relayer(net).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "/settle on a replica that cannot send");
                return Err((ErrorReason::UnexpectedSettleError, None));
            }
        };
        // The transfer simulated from the relayer before anything is written: a payment that
        // cannot go through leaves no row, and the send below needs no second simulation.
        match self.x402_simulate(net, payload, Some(relayer)).await {
            Simulated::Passes => {}
            Simulated::Used => return self.x402_used_before_recorded(net, new).await,
            Simulated::Refused(reason) => return Err((reason, None)),
        }
        // A plain signature's transfer is handed to the next batch while its row is recorded
        // (it goes only once it is: an insert that fails or finds another payment's row
        // withdraws it).
        let ticket = plain.then(|| net.batches.enqueue(relayer, router_transfer(payload)));
        match self.core.store.insert_settlement(new).await {
            // Another payload with this payer and nonce recorded first (at another replica,
            // which holds no lock of ours): not this payment, and nothing is sent for it.
            Ok(recorded)
                if recorded.row.new.kind != SettlementKind::X402
                    || recorded.row.new.request_hash != new.request_hash =>
            {
                return Err((ErrorReason::InvalidTransactionState, None));
            }
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e, "store unavailable during /settle");
                return Err((ErrorReason::UnexpectedSettleError, None));
            }
        }
        crate::fault::hit("settle.after-insert");
        let sending = ticket.map_or(Sending::Together, Sending::Queued);
        self.x402_send(net, new, payload, plain, Some(relayer), sending)
            .await
    }

    /// Broadcasts the `transferWithAuthorization` of a recorded settlement and waits for it.
    /// `simulated`: the relayer whose simulation of this transfer just passed (the first
    /// send); `None` simulates again first (a resend, when the chain may have moved on).
    /// `sending`: whether it may go in a batch with others ([`crate::batch`]); only a `plain`
    /// one (signed by the payer's own key) does.
    async fn x402_send(
        &self,
        net: &Network,
        new: &NewSettlement,
        payload: &PaymentPayload,
        plain: bool,
        simulated: Option<Address>,
        sending: Sending,
    ) -> Result<B256, (ErrorReason, Option<B256>)> {
        let data = transfer_call(payload);
        let relayer = match simulated {
            Some(r) => r,
            None => self
                .core
                .relayer()
                .await
                .map_err(|_| (ErrorReason::UnexpectedSettleError, None))?,
        };
        // One simulation (an `eth_call`) instead of a gas estimate's search: a revert is known
        // before anything is sent, and the node runs the transfer once, not a dozen times.
        // A plain signature's transfer has a fixed cost well under the limit below (an unused
        // limit costs nothing); a smart wallet's (EIP-1271), whatever its signature's length,
        // is estimated: its check costs what the wallet makes it cost.
        let simulation = match simulated {
            Some(_) => Ok(Default::default()),
            None => {
                net.chain
                    .call(Some(relayer), net.spec.token, data.clone())
                    .await
            }
        };
        // A plain signature's transfer may go with others in one transaction. One that waited
        // alone is sent below, holding its slot among the transactions on their way.
        let mut slot = None;
        let batched = match sending {
            Sending::Queued(ticket) => Some(ticket.recorded().await),
            Sending::Together if simulation.is_ok() && plain => {
                Some(net.batches.settle(relayer, router_transfer(payload)).await)
            }
            _ => None,
        };
        if let Some(batched) = batched {
            match batched {
                Batched::Alone(permit) => slot = permit,
                Batched::Sent(confirmation) => {
                    return self
                        .x402_mined(net, new, payload, plain, confirmation)
                        .await;
                }
                // Perhaps mined all the same: simulated again, and sent alone if it can go.
                Batched::Failed => {
                    return Box::pin(self.x402_send(
                        net,
                        new,
                        payload,
                        plain,
                        None,
                        Sending::Alone,
                    ))
                    .await;
                }
                // Recorded after its batch left: in the next one.
                Batched::Late => {
                    return Box::pin(self.x402_send(
                        net,
                        new,
                        payload,
                        plain,
                        Some(relayer),
                        Sending::Together,
                    ))
                    .await;
                }
            }
        }
        let sent = match simulation {
            Ok(_) => {
                let mut tx = TxRequest::call(relayer, net.spec.token, data);
                if plain {
                    tx.gas = Some(EOA_TRANSFER_GAS);
                }
                net.chain.send(tx).await
            }
            Err(e) => Err(e),
        };
        let tx_hash = match sent {
            Ok(h) => h,
            Err(ChainError::Revert(r)) => {
                if matches!(
                    r,
                    Revert::AuthorizationAlreadyUsed { .. } | Revert::AuthorizationUsedOrCanceled
                ) {
                    // Used meanwhile: by this payment (a transaction sent before a crash or
                    // reorg, or a batch mined while this waited for its confirmations), by
                    // another payload with the same nonce, or cancelled by its signer (USDC
                    // says "used or canceled": the logs say which).
                    return self.x402_used(net, new).await;
                }
                let reason = revert_reason(&r);
                self.x402_failed(new.key, &format!("{reason}: {r}")).await;
                return Err((reason, None));
            }
            Err(e) => return Err((verify_chain_error(&e), None)),
        };
        crate::fault::hit("settle.after-broadcast");
        let waited = self.x402_wait(net, new, payload, plain, tx_hash).await;
        drop(slot);
        waited
    }

    /// Waits for a settlement transaction: confirmed and checked, or still pending.
    async fn x402_wait(
        &self,
        net: &Network,
        new: &NewSettlement,
        payload: &PaymentPayload,
        plain: bool,
        tx_hash: B256,
    ) -> Result<B256, (ErrorReason, Option<B256>)> {
        let opts = WaitOptions {
            confirmations: net.spec.confirmations,
            timeout: self.core.settings.confirmation_timeout,
        };
        match net.chain.wait(tx_hash, opts).await {
            Ok(confirmation) => {
                self.x402_mined(net, new, payload, plain, confirmation)
                    .await
            }
            Err(e) => Err((verify_chain_error(&e), Some(tx_hash))),
        }
    }

    /// What a settlement's transaction (alone or a batch) came to: this payment's transfer
    /// in its receipt (confirmed), elsewhere, not made, or still pending.
    async fn x402_mined(
        &self,
        net: &Network,
        new: &NewSettlement,
        payload: &PaymentPayload,
        plain: bool,
        confirmation: Confirmation,
    ) -> Result<B256, (ErrorReason, Option<B256>)> {
        let receipt = match confirmation {
            Confirmation::Confirmed(receipt) => receipt,
            Confirmation::Pending { tx_hash } => {
                return Err(self.x402_pending(new.key, tx_hash).await);
            }
        };
        if receipt.success && transfers_exactly(&receipt, new) {
            return self.x402_confirmed(new, &receipt).await;
        }
        // Reverted, or a batch whose transfer of this payment failed: perhaps another
        // transaction carrying this payment came first.
        if let Ok(Some(r)) = self.find_transfer(net, new, net.spec.confirmations).await {
            return self.x402_confirmed(new, &r).await;
        }
        if receipt.to == Some(net.spec.router) {
            // A batch that did not carry it (its nonce used meanwhile, the payer's balance
            // spent by another payment in the batch, the batch out of gas or refused as a
            // whole): simulated again and, if it can still go through, sent alone.
            return Box::pin(self.x402_send(net, new, payload, plain, None, Sending::Alone)).await;
        }
        if receipt.success {
            tracing::error!(tx = %receipt.tx_hash, "settlement receipt lacks this payment's transfer");
            return Err((ErrorReason::UnexpectedSettleError, None));
        }
        self.x402_failed(new.key, "unexpected_settle_error: the transfer reverted")
            .await;
        Err((ErrorReason::UnexpectedSettleError, Some(receipt.tx_hash)))
    }

    /// A stored settlement with this key: answered only for the very payload it records.
    async fn x402_resume(
        &self,
        net: &Network,
        new: &NewSettlement,
        row: Settlement,
    ) -> Result<B256, (ErrorReason, Option<B256>)> {
        if row.new.kind != SettlementKind::X402 || row.new.request_hash != new.request_hash {
            // Another payload (or requirements) with this payer and nonce: whatever became of
            // that one, it is not this payment.
            return Err((ErrorReason::InvalidTransactionState, None));
        }
        match row.status {
            SettlementStatus::Confirmed => {
                let tx = row.tx_hash;
                match (row.new.claim_hash, new.claim_hash) {
                    // The first settler retrying (its answer was lost): the first outcome.
                    (Some(first), Some(again)) if first == again && tx.is_some() => {
                        Ok(tx.unwrap_or_default())
                    }
                    _ => Err((ErrorReason::DuplicateSettlement, tx)),
                }
            }
            SettlementStatus::Failed => {
                let reason = row
                    .error
                    .as_deref()
                    .and_then(|e| e.split_once(": "))
                    .map_or(ErrorReason::UnexpectedSettleError, |(code, _)| {
                        ErrorReason::parse(code)
                    });
                Err((reason, None))
            }
            SettlementStatus::Received
            | SettlementStatus::Submitted
            | SettlementStatus::Pending => {
                // Left by a crash or a slow chain: drive it to its end. The success belongs to
                // the first settler when it named itself; otherwise to whoever finishes it.
                let driven = self.x402_drive(net, &row).await;
                match (driven, row.new.claim_hash) {
                    (Ok(tx), Some(first)) if new.claim_hash != Some(first) => {
                        Err((ErrorReason::DuplicateSettlement, Some(tx)))
                    }
                    (driven, _) => driven,
                }
            }
        }
    }

    /// Drives an unfinished settlement to its end: confirmed (its transaction), pending, or
    /// failed.
    async fn x402_drive(
        &self,
        net: &Network,
        row: &Settlement,
    ) -> Result<B256, (ErrorReason, Option<B256>)> {
        let payload = &serde_json::from_str::<SettleRequest>(&row.new.request)
            .map_err(|e| {
                tracing::error!(error = %e, "stored x402 settlement unreadable");
                (ErrorReason::UnexpectedSettleError, None)
            })?
            .payment_payload;
        let plain = signed_by_key(net, payload);
        if let Ok(Some(receipt)) = self
            .find_transfer(net, &row.new, net.spec.confirmations)
            .await
        {
            return self.x402_confirmed(&row.new, &receipt).await;
        }
        match row.tx_hash {
            Some(h) if !self.x402_dropped(net, h).await? => {
                self.x402_wait(net, &row.new, payload, plain, h).await
            }
            _ if net.now().await >= row.new.valid_before => {
                self.x402_failed(
                    row.new.key,
                    "payment_expired: expired before it was settled",
                )
                .await;
                Err((ErrorReason::PaymentExpired, None))
            }
            // Never broadcast (a crash after recording), or dropped by the node: the token takes
            // an authorization once, so sending it again cannot pay twice.
            _ => {
                self.x402_send(net, &row.new, payload, plain, None, Sending::Together)
                    .await
            }
        }
    }

    /// Runs the payload's `transferWithAuthorization` as an `eth_call` from `from` (no sender:
    /// EIP-3009's transfer does not depend on it), or with the others waiting in one router
    /// call ([`crate::simulate`]), which answers the same. A revert the token names is mapped
    /// to its reason; one it does not (a token reverting with strings, as USDC does) is named
    /// from the nonce's state and the payer's balance, read only then.
    async fn x402_simulate(
        &self,
        net: &Network,
        payload: &PaymentPayload,
        from: Option<Address>,
    ) -> Simulated {
        let revert = match net
            .simulations
            .simulate(from, router_transfer(payload))
            .await
        {
            Ok(_) => return Simulated::Passes,
            Err(ChainError::Revert(
                Revert::AuthorizationAlreadyUsed { .. } | Revert::AuthorizationUsedOrCanceled,
            )) => {
                return Simulated::Used;
            }
            Err(ChainError::Revert(r)) => r,
            Err(e) => return Simulated::Refused(verify_chain_error(&e)),
        };
        let named = revert_reason(&revert);
        if matches!(revert, Revert::Blacklisted | Revert::TokenPaused) {
            let auth = &payload.payload.authorization;
            tracing::info!(%revert, payer = %auth.from, pay_to = %auth.to, "the token refuses an x402 payment");
        }
        if named != ErrorReason::UnexpectedSettleError {
            return Simulated::Refused(named);
        }
        match signer(net, payload).await {
            Ok(Signer::Nobody) => {
                return Simulated::Refused(ErrorReason::InvalidExactEvmPayloadSignature);
            }
            Ok(Signer::Key | Signer::Wallet) => {}
            Err(e) => return Simulated::Refused(verify_chain_error(&e)),
        }
        let auth = &payload.payload.authorization;
        let token = net.spec.token;
        let state = Token::authorizationStateCall {
            authorizer: auth.from,
            nonce: auth.nonce,
        };
        match contracts::read(&*net.chain, token, &state).await {
            Ok(true) => return Simulated::Used,
            Ok(false) => {}
            Err(e) => return Simulated::Refused(verify_chain_error(&e)),
        }
        let balance = Token::balanceOfCall { account: auth.from };
        match contracts::read(&*net.chain, token, &balance).await {
            Ok(b) if b < auth.value.get() => Simulated::Refused(ErrorReason::InsufficientFunds),
            Ok(_) => {
                tracing::warn!(%revert, "the token refuses an x402 transfer that passed every check");
                Simulated::Refused(named)
            }
            Err(e) => Simulated::Refused(verify_chain_error(&e)),
        }
    }

    /// The authorization's nonce turned out used: this payment if its transfer is on chain
    /// (pending while shallow), a failure when another transaction used (or cancelled) it.
    async fn x402_used(
        &self,
        net: &Network,
        new: &NewSettlement,
    ) -> Result<B256, (ErrorReason, Option<B256>)> {
        // The transfer that used it may still be on its way into a block (a simulation sees
        // the node's pending state, its logs only blocks).
        let mined = self
            .core
            .used_at_latest(net, new.payer, new.nonce)
            .await
            .map_err(|e| (verify_chain_error(&e), None))?;
        if !mined {
            // Still only in the node's pending state: not refused (nothing recorded as
            // failed); a repeat of the payload drives the row on.
            return Err((ErrorReason::UnexpectedSettleError, None));
        }
        match self.find_use(net, new).await? {
            Use::This(_) => {}
            Use::Other => {
                self.x402_failed(
                    new.key,
                    "invalid_transaction_state: the authorization was used by another transfer",
                )
                .await;
                return Err((ErrorReason::InvalidTransactionState, None));
            }
            // Used, yet no log says by what: not concluded (nothing recorded as failed); a
            // repeat of the payload drives the row on.
            Use::Unseen => return Err((ErrorReason::UnexpectedSettleError, None)),
        }
        match self.find_transfer(net, new, net.spec.confirmations).await {
            Ok(Some(receipt)) => self.x402_confirmed(new, &receipt).await,
            Ok(None) => match self.find_transfer(net, new, 1).await {
                Ok(Some(shallow)) => Err(self.x402_pending(new.key, shallow.tx_hash).await),
                Ok(None) => Err((ErrorReason::UnexpectedSettleError, None)),
                Err(reason) => Err((reason, None)),
            },
            Err(reason) => Err((reason, None)),
        }
    }

    /// The authorization of a payment this store had no row for turned out used. No transfer
    /// is sent before its row is recorded, so a row there now is this fleet's own settlement of
    /// it, begun at another replica (a repeat balanced there, or the first settler's retry of a
    /// lost answer): that one is resumed, and answered as any repeat is. With no row it was
    /// settled (or cancelled) outside this facilitator: never ours to answer as a success; the
    /// transaction is named, once mined, only when its transfer is exactly this payment.
    async fn x402_used_before_recorded(
        &self,
        net: &Network,
        new: &NewSettlement,
    ) -> Result<B256, (ErrorReason, Option<B256>)> {
        match self.core.store.settlement(new.key).await {
            Ok(Some(row)) => return Box::pin(self.x402_resume(net, new, row)).await,
            Ok(None) => {}
            Err(e) => {
                tracing::error!(error = %e, "store unavailable during /settle");
                return Err((ErrorReason::UnexpectedSettleError, None));
            }
        }
        // The transfer that used it may still be only in the node's pending block.
        match self.core.used_at_latest(net, new.payer, new.nonce).await {
            Ok(true) => {}
            Ok(false) => return Err((ErrorReason::InvalidTransactionState, None)),
            Err(e) => return Err((verify_chain_error(&e), None)),
        }
        match self.find_use(net, new).await? {
            Use::This(receipt) => Err((ErrorReason::DuplicateSettlement, Some(receipt.tx_hash))),
            Use::Other | Use::Unseen => Err((ErrorReason::InvalidTransactionState, None)),
        }
    }
}

/// What the network's token view says of the payload's transfer ([`crate::view`]): only for a
/// signature of the payer's own key, recovered here under the token's configured domain.
fn x402_viewed(net: &Network, payload: &PaymentPayload) -> Option<view::Answer> {
    let auth = &payload.payload.authorization;
    let transfer = view::Transfer {
        from: auth.from,
        to: auth.to,
        value: auth.value.get(),
        valid_after: auth.valid_after.get().try_into().ok()?,
        valid_before: auth.valid_before.get().try_into().unwrap_or(u64::MAX),
        nonce: auth.nonce,
    };
    net.view
        .answer_signed(&transfer, || signed_by_key(net, payload))
}

/// The `TransferWithAuthorization` a payload's signature signs.
fn typed(payload: &PaymentPayload) -> TransferWithAuthorization {
    let auth = &payload.payload.authorization;
    TransferWithAuthorization {
        from: auth.from,
        to: auth.to,
        value: auth.value.get(),
        validAfter: auth.valid_after.get(),
        validBefore: auth.valid_before.get(),
        nonce: auth.nonce,
    }
}

/// Whether the payload's signature is its payer's own key's: a plain 65-byte signature that
/// recovers to the payer under the token's configured EIP-712 domain.
fn signed_by_key(net: &Network, payload: &PaymentPayload) -> bool {
    let signed = recover(&typed(payload), &net.domain, &payload.payload.signature);
    signed.is_ok_and(|signer| signer == payload.payload.authorization.from)
}

/// Who signed the payload for its payer ([`account_signer`] over its
/// `TransferWithAuthorization`).
async fn signer(net: &Network, payload: &PaymentPayload) -> Result<Signer, ChainError> {
    let digest = typed(payload).eip712_signing_hash(&net.domain);
    let auth = &payload.payload.authorization;
    account_signer(net, auth.from, digest, &payload.payload.signature).await
}

/// Who signed `digest` (an authorization's EIP-712 digest under the token's configured domain)
/// for `from`, as FiatToken v2.2's `SignatureChecker` decides it: `from`'s own key (a plain
/// 65-byte signature recovering to it), else, when `from` has code (a smart wallet), its
/// EIP-1271 `isValidSignature`. A wallet that reverts or answers anything but EIP-1271's magic
/// value refuses it. Only a signature that does not recover to `from` costs chain reads (its
/// code, then the wallet's answer). For any EIP-3009 authorization (x402's
/// `TransferWithAuthorization`, the router's `ReceiveWithAuthorization`).
pub(crate) async fn account_signer(
    net: &Network,
    from: Address,
    digest: B256,
    signature: &Bytes,
) -> Result<Signer, ChainError> {
    let key = parse_signature(signature)
        .ok()
        .and_then(|s| s.recover_address_from_prehash(&digest).ok());
    if key == Some(from) {
        return Ok(Signer::Key);
    }
    if net.chain.code(from).await?.is_empty() {
        return Ok(Signer::Nobody);
    }
    let call = IERC1271::isValidSignatureCall {
        hash: digest,
        signature: signature.clone(),
    };
    match contracts::read(&*net.chain, from, &call).await {
        Ok(magic) if magic == ERC1271_MAGIC_VALUE => Ok(Signer::Wallet),
        Ok(_) | Err(ChainError::Revert(_) | ChainError::InvalidInput(_)) => Ok(Signer::Nobody),
        Err(e) => Err(e),
    }
}

/// x402's reason for a token's (or the router's) refusal. x402 has no code for a token's
/// compliance controls: a blacklisted account or a paused token is `invalid_payment` (the logs and
/// a settlement's stored failure say which).
fn revert_reason(r: &Revert) -> ErrorReason {
    match r {
        Revert::InsufficientFunds { .. } | Revert::TransferExceedsBalance => {
            ErrorReason::InsufficientFunds
        }
        Revert::Blacklisted | Revert::TokenPaused => ErrorReason::InvalidPayment,
        Revert::InvalidSignature => ErrorReason::InvalidExactEvmPayloadSignature,
        Revert::AuthorizationExpired { .. } => {
            ErrorReason::InvalidExactEvmPayloadAuthorizationValidBefore
        }
        Revert::AuthorizationNotYetValid { .. } => {
            ErrorReason::InvalidExactEvmPayloadAuthorizationValidAfter
        }
        Revert::AuthorizationAlreadyUsed { .. } | Revert::AuthorizationUsedOrCanceled => {
            ErrorReason::InvalidTransactionState
        }
        _ => ErrorReason::UnexpectedSettleError,
    }
}

fn verify_chain_error(e: &ChainError) -> ErrorReason {
    tracing::warn!(error = %e, "chain error during x402 verification or settlement");
    match e {
        ChainError::Revert(r) => revert_reason(r),
        _ => ErrorReason::UnexpectedVerifyError,
    }
}
