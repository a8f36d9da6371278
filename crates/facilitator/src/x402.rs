//! The x402 V1 facilitator API, so that x402 resource servers we did not write (e.g.
//! `x402-express`) can use a Tollgate facilitator unchanged: `POST /verify`, `POST /settle`,
//! `GET /supported`, with the exact coinbase/x402 V1 shapes and reason codes.
//!
//! Settlement here is a direct EIP-3009 `transferWithAuthorization` to `payTo`, submitted by a
//! relayer: the payer signed the transfer to the payee, so no fee can be taken on this path (the
//! relayer pays the gas). `/settle` is idempotent per (chain, token, payer, nonce) and checks the
//! receipt's `Transfer` log, not just the call's success.

use alloy::{
    primitives::B256,
    sol_types::{SolCall, SolEvent},
};
use axum::{Json, extract::State};
use tollgate_chain::{
    Confirmation, Error as ChainError, Receipt, Revert, TxRequest, WaitOptions,
    authorization::{TransferWithAuthorization, recover, token_domain},
    contracts::{self, Token},
};
use tollgate_protocol::{
    Amount, SettlementStatus,
    x402::{
        ErrorReason, PaymentPayload, PaymentRequirements, SettleRequest, SettleResponse,
        SupportedKind, SupportedResponse, VerifyRequest, VerifyResponse, check_exact_evm,
    },
};

use crate::{
    error::ApiJson,
    facilitator::{Facilitator, Network, unix_now},
    metrics::{SettlementOutcome, SettlementPath},
    settle::settlement_key,
    store::{NewSettlement, SettlementKind},
};

/// `POST /verify`.
pub(crate) async fn verify(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<VerifyRequest>,
) -> Json<VerifyResponse> {
    Json(f.x402_verify(&req).await)
}

/// `POST /settle`.
pub(crate) async fn settle(
    State(f): State<Facilitator>,
    ApiJson(req): ApiJson<SettleRequest>,
) -> Json<SettleResponse> {
    Json(f.x402_settle(&req).await)
}

/// `GET /supported`: one `exact` kind per configured network.
pub(crate) async fn supported(State(f): State<Facilitator>) -> Json<SupportedResponse> {
    let kinds = f
        .networks()
        .into_iter()
        .map(|n| SupportedKind::exact(n.name))
        .collect();
    Json(SupportedResponse { kinds })
}

/// What verification established about a payload.
struct Verified<'a> {
    net: &'a Network,
    key: B256,
}

impl Facilitator {
    /// Verifies an x402 V1 `exact` payment without settling it.
    pub async fn x402_verify(&self, req: &VerifyRequest) -> VerifyResponse {
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
        check_nonce: bool,
    ) -> Result<Verified<'a>, ErrorReason> {
        if payload.x402_version != 1 {
            return Err(ErrorReason::InvalidX402Version);
        }
        let net = self
            .network(&req.network)
            .ok_or(ErrorReason::InvalidNetwork)?;
        if req.asset != net.spec.token {
            return Err(ErrorReason::InvalidPaymentRequirements);
        }
        let now = net.now().await;
        check_exact_evm(payload, req, now)?;
        let auth = &payload.payload.authorization;
        let (name, version) = match req.eip712_extra() {
            Some(extra) => (extra.name, extra.version),
            None => (net.spec.token_name.clone(), net.spec.token_version.clone()),
        };
        let domain = token_domain(name, version, net.spec.chain_id, net.spec.token);
        let typed = TransferWithAuthorization {
            from: auth.from,
            to: auth.to,
            value: auth.value.get(),
            validAfter: auth.valid_after.get(),
            validBefore: auth.valid_before.get(),
            nonce: auth.nonce,
        };
        match recover(&typed, &domain, &payload.payload.signature) {
            Ok(signer) if signer == auth.from => {}
            _ => return Err(ErrorReason::InvalidExactEvmPayloadSignature),
        }
        let chain = &*net.chain;
        let balance = contracts::read(
            chain,
            net.spec.token,
            &Token::balanceOfCall { account: auth.from },
        )
        .await
        .map_err(|e| verify_chain_error(&e))?;
        if balance < auth.value.get() {
            return Err(ErrorReason::InsufficientFunds);
        }
        if check_nonce {
            let used = contracts::read(
                chain,
                net.spec.token,
                &Token::authorizationStateCall {
                    authorizer: auth.from,
                    nonce: auth.nonce,
                },
            )
            .await
            .map_err(|e| verify_chain_error(&e))?;
            if used {
                return Err(ErrorReason::InvalidTransactionState);
            }
        }
        Ok(Verified {
            net,
            key: settlement_key(net.spec.chain_id, net.spec.token, auth.from, auth.nonce),
        })
    }

    /// Settles an x402 V1 `exact` payment: a direct `transferWithAuthorization` to `payTo`.
    /// Idempotent per (chain, token, payer, nonce).
    pub async fn x402_settle(&self, req: &SettleRequest) -> SettleResponse {
        let started = std::time::Instant::now();
        let response = self.x402_settle_inner(req).await;
        let outcome = if response.success {
            SettlementOutcome::Confirmed
        } else if response.transaction.is_empty() {
            SettlementOutcome::Rejected
        } else {
            SettlementOutcome::Failed
        };
        self.inner
            .metrics
            .settlement(SettlementPath::X402, outcome, started.elapsed());
        response
    }

    async fn x402_settle_inner(&self, req: &SettleRequest) -> SettleResponse {
        let payload = &req.payment_payload;
        let auth = &payload.payload.authorization;
        let network = payload.network.clone();
        let fail = |reason: ErrorReason, tx: Option<B256>| {
            SettleResponse::failure(reason, network.clone(), Some(auth.from), tx)
        };

        // Checks that do not depend on the nonce's state first, so a replay of a settled
        // payment is answered from the store.
        let verified = match self
            .x402_check(payload, &req.payment_requirements, false)
            .await
        {
            Ok(v) => v,
            Err(reason) => return fail(reason, None),
        };
        let net = verified.net;
        let key = verified.key;
        let _guard = self.inner.locks.lock(key).await;
        match self.inner.store.settlement(key).await {
            Ok(Some(row)) if row.status == SettlementStatus::Confirmed => {
                if let Some(tx) = row.tx_hash {
                    return SettleResponse::success(tx, network, auth.from);
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::error!(error = %e, "store unavailable during /settle");
                return fail(ErrorReason::UnexpectedSettleError, None);
            }
        }
        let request = serde_json::to_string(req).unwrap_or_default();
        let new = NewSettlement {
            key,
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
            claim_hash: None,
            created_at: unix_now(),
        };

        // The nonce used already: settled by us earlier (crash) or by someone else.
        let used = match contracts::read(
            &*net.chain,
            net.spec.token,
            &Token::authorizationStateCall {
                authorizer: auth.from,
                nonce: auth.nonce,
            },
        )
        .await
        {
            Ok(u) => u,
            Err(e) => return fail(verify_chain_error(&e), None),
        };
        if used {
            return match self.find_transfer(net, &new).await {
                Ok(Some(receipt)) => self.x402_confirmed(&new, &receipt, network).await,
                Ok(None) => fail(ErrorReason::InvalidTransactionState, None),
                Err(reason) => fail(reason, None),
            };
        }
        if let Err(e) = self.inner.store.insert_settlement(&new).await {
            tracing::error!(error = %e, "store unavailable during /settle");
            return fail(ErrorReason::UnexpectedSettleError, None);
        }
        crate::fault::hit("settle.after-insert");
        let call = Token::transferWithAuthorization_0Call {
            from: auth.from,
            to: auth.to,
            value: auth.value.get(),
            validAfter: auth.valid_after.get(),
            validBefore: auth.valid_before.get(),
            nonce: auth.nonce,
            signature: payload.payload.signature.clone(),
        };
        let tx = TxRequest::call(self.relayer(), net.spec.token, call.abi_encode());
        let tx_hash = match net.chain.send(tx).await {
            Ok(h) => h,
            Err(ChainError::Revert(r)) => {
                let reason = revert_reason(&r);
                let _ = self
                    .inner
                    .store
                    .mark_failed(key, &format!("{reason}: {r}"), unix_now())
                    .await;
                return fail(reason, None);
            }
            Err(e) => return fail(verify_chain_error(&e), None),
        };
        crate::fault::hit("settle.after-broadcast");
        let opts = WaitOptions {
            confirmations: net.spec.confirmations,
            timeout: self.inner.settings.confirmation_timeout,
        };
        match net.chain.wait(tx_hash, opts).await {
            Ok(Confirmation::Confirmed(receipt)) if receipt.success => {
                self.x402_confirmed(&new, &receipt, network).await
            }
            Ok(Confirmation::Confirmed(receipt)) => {
                if let Ok(Some(r)) = self.find_transfer(net, &new).await {
                    return self.x402_confirmed(&new, &r, network).await;
                }
                let _ = self
                    .inner
                    .store
                    .mark_failed(
                        key,
                        "unexpected_settle_error: the transfer reverted",
                        unix_now(),
                    )
                    .await;
                fail(ErrorReason::UnexpectedSettleError, Some(receipt.tx_hash))
            }
            Ok(Confirmation::Pending { tx_hash }) => {
                let at = unix_now();
                let _ = self.inner.store.mark_submitted(key, tx_hash, at).await;
                let _ = self.inner.store.mark_pending(key, at).await;
                // Not a failure of the payment: settling again later returns the confirmed hash.
                fail(ErrorReason::InvalidTransactionState, Some(tx_hash))
            }
            Err(e) => fail(verify_chain_error(&e), Some(tx_hash)),
        }
    }

    /// Records a confirmed x402 settlement after checking the receipt's `Transfer` log.
    async fn x402_confirmed(
        &self,
        new: &NewSettlement,
        receipt: &Receipt,
        network: String,
    ) -> SettleResponse {
        let transferred = receipt
            .logs
            .iter()
            .filter(|l| l.address == new.token)
            .any(|l| {
                Token::Transfer::decode_log(l).is_ok_and(|t| {
                    t.from == new.payer && t.to == new.pay_to && t.value == new.amount.get()
                })
            });
        if !transferred {
            tracing::error!(tx = %receipt.tx_hash, "settlement receipt lacks the expected Transfer log");
            return SettleResponse::failure(
                ErrorReason::UnexpectedSettleError,
                network,
                Some(new.payer),
                Some(receipt.tx_hash),
            );
        }
        if let Err(e) = self.inner.store.insert_settlement(new).await {
            tracing::error!(error = %e, "store unavailable recording a settlement");
        }
        match self
            .inner
            .store
            .mark_confirmed(
                new.key,
                receipt.tx_hash,
                receipt.block_number,
                None,
                unix_now(),
            )
            .await
        {
            Ok(row) => {
                crate::fault::hit("settle.after-confirm");
                SettleResponse::success(row.tx_hash.unwrap_or(receipt.tx_hash), network, new.payer)
            }
            Err(e) => {
                // On-chain it is settled; the record can be rebuilt from the chain on retry.
                tracing::error!(error = %e, "store unavailable recording a confirmed settlement");
                SettleResponse::success(receipt.tx_hash, network, new.payer)
            }
        }
    }

    /// Finds the transaction that used this authorization (`AuthorizationUsed(from, nonce)`).
    async fn find_transfer(
        &self,
        net: &Network,
        new: &NewSettlement,
    ) -> Result<Option<Receipt>, ErrorReason> {
        let topics = [
            Some(vec![Token::AuthorizationUsed::SIGNATURE_HASH]),
            Some(vec![new.payer.into_word()]),
            Some(vec![new.nonce]),
            None,
        ];
        net.find_confirmed(
            net.spec.token,
            topics,
            self.inner.settings.log_lookback_blocks,
            |_| true,
        )
        .await
        .map_err(|e| verify_chain_error(&e))
    }
}

fn revert_reason(r: &Revert) -> ErrorReason {
    match r {
        Revert::InsufficientFunds { .. } => ErrorReason::InsufficientFunds,
        Revert::InvalidSignature => ErrorReason::InvalidExactEvmPayloadSignature,
        Revert::AuthorizationExpired { .. } => {
            ErrorReason::InvalidExactEvmPayloadAuthorizationValidBefore
        }
        Revert::AuthorizationNotYetValid { .. } => {
            ErrorReason::InvalidExactEvmPayloadAuthorizationValidAfter
        }
        Revert::AuthorizationAlreadyUsed { .. } => ErrorReason::InvalidTransactionState,
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
