//! The Tollgate path: paying an offer through the facilitator it names (its router, its proof),
//! and the facilitators the agent may use.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use alloy::primitives::{B256, U256};
use tollgate_chain::authorization::{ReceiveWithAuthorization, router_nonce, sign, token_domain};
use tollgate_client::{Authorization, Discovered, FacilitatorClient};
use tollgate_protocol::{
    Amount, ApiErrorCode, AuthorizeRequest, AuthorizeResponse, Eip3009Authorization, SignedPayment,
    api::{authorize::settlement_key, discovery::WellKnown},
    x402::PaymentRequirements,
};

use super::{
    Agent, MIN_VALIDITY_SECS, VALID_AFTER_SKEW_SECS,
    recover::{Attempt, Settled},
    unix_now,
};
use crate::{Error, Payment, PaymentKind, Result, facilitator, policy::Reservation};

/// The longest validity the agent gives a router authorization, whatever the terms say.
const MAX_ROUTER_VALIDITY_SECS: u64 = 300;

impl Agent {
    /// `base` without a trailing `/`, if the agent may go through it: an http(s) URL among the
    /// configured facilitators (any, when none are configured).
    pub(crate) fn usable_facilitator(&self, base: &str) -> Option<String> {
        let base = base.trim_end_matches('/');
        let trusted = self
            .inner
            .facilitators
            .as_ref()
            .is_none_or(|list| list.iter().any(|f| f.trim_end_matches('/') == base));
        let http = url::Url::parse(base)
            .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host());
        (trusted && http).then(|| base.to_owned())
    }

    /// The client of the facilitator at `base` (one per base URL, sharing the agent's HTTP
    /// client and keeping its discovery document until forgotten).
    pub(crate) fn facilitator_client(&self, base: &str) -> Result<FacilitatorClient> {
        // A cache: a poisoned map is still a valid map.
        let mut clients = self.inner.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(client) = clients.get(base) {
            return Ok(client.clone());
        }
        let client = facilitator::client(&self.inner.http, base, self.inner.max_402_body)?;
        clients.insert(base.to_owned(), client.clone());
        Ok(client)
    }

    /// The facilitator's `/.well-known/tollgate`, read once and kept (until
    /// [`forget_well_known`](Self::forget_well_known)).
    pub(crate) async fn well_known(&self, base: &str) -> Result<Arc<Discovered>> {
        self.facilitator_client(base)?
            .discovery()
            .await
            .map_err(facilitator::error_from)
    }

    /// Reads the facilitator's document afresh next time.
    pub(crate) fn forget_well_known(&self, base: &str) {
        if let Ok(client) = self.facilitator_client(base) {
            client.forget_discovery();
        }
    }

    /// Pays through a Tollgate facilitator and returns the receipt with the proof, and where
    /// the facilitator reports the settlement.
    pub(super) async fn pay_facilitator(
        &self,
        r: &PaymentRequirements,
        base: &str,
        memo: B256,
        reservation: Reservation,
    ) -> Result<Attempt> {
        let wk = self.well_known(base).await?;
        let refuse = |code: &str, message: String| Error::Facilitator {
            status: 0,
            code: code.into(),
            message,
        };
        let net = wk.network(&r.network).ok_or_else(|| {
            refuse(
                "UnsupportedNetwork",
                format!("{base} does not settle {}", r.network),
            )
        })?;
        if net.token != r.asset {
            return Err(refuse(
                "UnsupportedToken",
                format!(
                    "{base} settles {} on {}, not {}",
                    net.token, r.network, r.asset
                ),
            ));
        }
        let amount = r.max_amount_required;
        if amount <= net.fee {
            return Err(refuse(
                "AmountBelowFee",
                format!(
                    "price {amount} does not exceed the facilitator's fee {}",
                    net.fee
                ),
            ));
        }
        // The chain's clock, not the agent's: the facilitator and the token check the window by it
        // (a devnet may be days ahead after time travel).
        let now = wk.chain_now(net, unix_now());
        let validity = r
            .max_timeout_seconds
            .clamp(MIN_VALIDITY_SECS, MAX_ROUTER_VALIDITY_SECS);
        let authorization = ReceiveWithAuthorization {
            from: self.inner.address,
            to: net.router,
            value: amount.get(),
            validAfter: U256::from(now.saturating_sub(VALID_AFTER_SKEW_SECS)),
            validBefore: U256::from(now + validity),
            nonce: router_nonce(r.pay_to, memo, net.fee.get()),
        };
        let domain = token_domain(
            net.token_name.clone(),
            net.token_version.clone(),
            net.chain_id,
            net.token,
        );
        let signature =
            sign(&self.inner.signer, &authorization, &domain).map_err(Error::Signing)?;
        let signed_payment = SignedPayment {
            network: r.network.parse()?,
            token: r.asset,
            pay_to: r.pay_to,
            amount,
            memo,
            authorization: Eip3009Authorization {
                from: authorization.from,
                to: authorization.to,
                value: amount,
                valid_after: Amount(authorization.validAfter),
                valid_before: Amount(authorization.validBefore),
                nonce: authorization.nonce,
                signature,
            },
        };
        // Only this agent can collect the proof, even from someone who copies the authorization
        // off the chain; kept across the resends of this one payment, and for recovering its
        // proof from the status URL.
        let claim = B256::random();
        let client = self.facilitator_client(base)?;
        let status_url = client.status_url(
            settlement_key(
                net.chain_id,
                net.token,
                self.inner.address,
                authorization.nonce,
            ),
            claim,
        );
        let request = AuthorizeRequest {
            signed_payment,
            resource: Some(r.resource.clone()).filter(|r| !r.is_empty()),
            claim: Some(claim),
        };
        let posted = facilitator::until_answered(
            "/authorize",
            Instant::now() + self.inner.settle_timeout,
            || client.authorize(&request),
        )
        .await;
        let first = match posted.result {
            Ok(first) => Ok(first),
            Err(e) if e.transport().is_some() => {
                if !posted.never_sent {
                    reservation.commit();
                }
                return Err(facilitator::error_from(e));
            }
            Err(e) => Err(facilitator::error_from(e)),
        };
        let confirmed = match first {
            Ok(first) => self.await_proof(&client, first).await,
            Err(e) => Err(e),
        };
        match &confirmed {
            // Refused as expired by the chain's clock: it can never be settled.
            Err(Error::Facilitator {
                code: ApiErrorCode::AuthorizationExpired,
                ..
            }) => {
                drop(reservation);
            }
            Err(Error::Facilitator {
                code: ApiErrorCode::NonceMismatch,
                ..
            }) => {
                // The fee changed: read the terms afresh next time.
                client.forget_discovery();
                reservation.commit();
            }
            _ => reservation.commit(),
        }
        let confirmed = confirmed?;
        self.check_proof(&confirmed, r, memo, &wk)?;
        let payment = Payment {
            kind: PaymentKind::Tollgate,
            amount,
            fee: Some(confirmed.payment.fee),
            network: r.network.to_string(),
            token: r.asset,
            payer: self.inner.address,
            pay_to: r.pay_to,
            memo: Some(memo),
            tx_hash: Some(confirmed.payment.tx_hash),
            header: confirmed.proof,
            proof: Some(confirmed.payment),
            settlement: None,
            x402_version: Some(1),
            retry_token: None,
            metered: None,
            mpp_receipt: None,
        };
        Ok(Attempt {
            payment,
            settled: Some(Settled {
                base: base.to_owned(),
                status_url,
                requirements: r.clone(),
                memo,
            }),
        })
    }

    /// The proof from an `/authorize` answer, polling its status URL while pending.
    async fn await_proof(
        &self,
        client: &FacilitatorClient,
        first: Authorization,
    ) -> Result<AuthorizeResponse> {
        let deadline = Instant::now() + self.inner.settle_timeout;
        let mut delay = Duration::ZERO;
        let mut answer = first;
        loop {
            let pending = match answer {
                Authorization::Confirmed(r) => return Ok(*r),
                Authorization::Pending(p) => p,
            };
            delay = facilitator::backoff(delay);
            if Instant::now() + delay > deadline {
                return Err(Error::Timeout {
                    what: "settlement confirmation",
                });
            }
            tracing::debug!(tx = ?pending.tx_hash, "settlement pending");
            tokio::time::sleep(delay).await;
            // A lost answer or a facilitator restarting does not end the wait: the status URL
            // answers again until the deadline.
            answer = loop {
                match client.settlement_at(&pending.status_url).await {
                    Ok(a) => break a,
                    Err(e) if facilitator::unavailable_now(&e) => {
                        tracing::debug!(status = ?e.status(), "status URL unavailable");
                    }
                    Err(e) if e.transport().is_some() => {
                        tracing::debug!(error = %e, "status URL unreachable");
                    }
                    Err(e) => return Err(facilitator::error_from(e)),
                }
                delay = facilitator::backoff(delay);
                if Instant::now() + delay > deadline {
                    return Err(Error::Timeout {
                        what: "settlement confirmation",
                    });
                }
                tokio::time::sleep(delay).await;
            };
        }
    }

    /// The proof must be for exactly this payment and signed by the facilitator's proof key.
    pub(super) fn check_proof(
        &self,
        confirmed: &AuthorizeResponse,
        r: &PaymentRequirements,
        memo: B256,
        wk: &WellKnown,
    ) -> Result<()> {
        let p = &confirmed.payment;
        let matches = p.payer == self.inner.address
            && p.pay_to == r.pay_to
            && p.amount == r.max_amount_required
            && p.memo == memo
            && p.token == r.asset;
        let signed = tollgate_chain::proof::recover(p).is_ok_and(|s| {
            s == p.signer && (wk.proof_signers.is_empty() || wk.proof_signers.contains(&s))
        });
        if matches && signed {
            Ok(())
        } else {
            Err(Error::Facilitator {
                status: 200,
                code: "ProofMismatch".into(),
                message:
                    "the facilitator's proof is not for this payment or not signed by its proof key"
                        .into(),
            })
        }
    }
}
