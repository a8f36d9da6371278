//! The MPP path: a 402 that offers no x402 terms but an MPP ("Payment" HTTP authentication)
//! EVM `charge` challenge, paid with an ERC-3009 `authorization` credential as mppx@0.11.0 signs
//! it (`validAfter` 0, `validBefore` the challenge's `expires`, the nonce bound to the challenge),
//! under the same spending policy and budget as x402 payments.

use alloy::{
    primitives::{Address, U256},
    sol,
    sol_types::SolCall as _,
};
use reqwest::{StatusCode, header::HeaderMap};
use tollgate_chain::authorization::{TransferWithAuthorization, sign, token_domain};
use tollgate_client::read_limited;
use tollgate_protocol::{
    headers::{PAYMENT_RECEIPT, WWW_AUTHENTICATE},
    mpp::{
        AuthorizationPayload, Challenge, ChargeRequest, Credential, INTENT_CHARGE, METHOD_EVM,
        Problem, Receipt,
    },
    network,
    x402::RetryToken,
};

use super::{Agent, http::Settled, unix_now};
use crate::{Error, PaidResponse, PayRequest, Payment, PaymentKind, Result, policy::Reservation};

/// The longest validity the agent signs an MPP authorization for (its `validBefore` is the
/// challenge's `expires`): a challenge that expires later is refused, not shortened (the server
/// checks the window against the challenge).
const MAX_MPP_VALIDITY_SECS: u64 = 3600;
/// The window of a challenge without `expires`, as mppx clients sign it.
const DEFAULT_MPP_VALIDITY_SECS: u64 = 300;
/// The largest JSON-RPC answer read when asking a token for its EIP-712 domain.
const MAX_RPC_ANSWER: usize = 64 * 1024;

sol! {
    /// What the agent reads of a token over JSON-RPC: its EIP-5267 domain, or its name and
    /// version.
    interface ITokenDomain {
        function eip712Domain() external view returns (bytes1 fields, string name, string version, uint256 chainId, address verifyingContract, bytes32 salt, uint256[] extensions);
        function name() external view returns (string);
        function version() external view returns (string);
    }
}

/// The `Payment` challenges of a 402's `WWW-Authenticate` headers that parse (a malformed one is
/// skipped, as other auth schemes are).
pub(super) fn challenges(headers: &HeaderMap) -> Vec<Challenge> {
    let values = headers
        .get_all(WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok());
    Challenge::parse_all(values)
        .into_iter()
        .filter_map(|c| {
            c.inspect_err(|e| tracing::debug!(error = %e, "skipping a malformed MPP challenge"))
                .ok()
        })
        .collect()
}

/// What the agent knows of a chain from the facilitators it reads.
struct ChainView {
    /// The network's name (a facilitator's, else one the agent was taught, x402's, or CAIP-2).
    network: String,
    /// "Now" by the chain's clock (a facilitator's `chainTime`), else the local clock.
    now: u64,
    /// The token's EIP-712 name and version, from a facilitator settling it on the chain.
    domain: Option<(String, String)>,
    /// A public JSON-RPC endpoint of the chain a facilitator publishes.
    rpc: Option<String>,
}

impl Agent {
    /// Pays the cheapest EVM `charge` challenge of `challenges` the policy allows (an ERC-3009
    /// `authorization` credential, sent once in `Authorization: Payment …`), and returns the
    /// answer with the server's `Payment-Receipt`.
    pub(super) async fn pay_mpp(
        &self,
        request: &PayRequest,
        challenges: Vec<Challenge>,
    ) -> Result<PaidResponse> {
        let offered = challenges.len();
        let mut charges: Vec<(Challenge, ChargeRequest)> = challenges
            .into_iter()
            .filter(|c| c.method == METHOD_EVM && c.intent == INTENT_CHARGE)
            .filter_map(|c| {
                let charge = c.charge_request().ok()?;
                (charge.accepts_authorization() && !charge.has_splits()).then_some((c, charge))
            })
            .collect();
        charges.sort_by_key(|(_, charge)| charge.amount);
        let mut first_refusal = None;
        for (challenge, charge) in charges {
            match self.sign_mpp(&challenge, &charge).await {
                Ok((payment, reservation)) => {
                    return self
                        .send_mpp(request, &challenge, payment, reservation)
                        .await;
                }
                Err(e) => {
                    tracing::info!(error = %e, challenge = %challenge.id, "not paying the MPP challenge");
                    first_refusal.get_or_insert(e);
                }
            }
        }
        Err(first_refusal.unwrap_or(Error::NoAcceptableOption { offered }))
    }

    /// Checks `charge` against the policy, the chain's clock and the budget (its price reserved),
    /// and signs its credential. Nothing leaves the process.
    async fn sign_mpp(
        &self,
        challenge: &Challenge,
        charge: &ChargeRequest,
    ) -> Result<(Payment, Reservation)> {
        let chain_id = charge.method_details.chain_id;
        let token = charge.currency;
        let view = self.chain_view(chain_id, token).await;
        let network = self.policy_network(chain_id, &view.network);
        self.inner
            .policy
            .check(&network, token, charge.recipient, charge.amount)
            .map_err(|what| Error::PolicyViolation { what })?;
        let now = view.now;
        let refuse = |why| Error::ChallengeRefused {
            expires: challenge.expires.clone().unwrap_or_default(),
            now,
            why,
        };
        let valid_before = match challenge.expires_unix() {
            Ok(Some(expires)) => expires,
            Ok(None) => now + DEFAULT_MPP_VALIDITY_SECS,
            Err(_) => return Err(refuse("its expires is no RFC 3339 time")),
        };
        if valid_before <= now {
            return Err(refuse("the challenge has expired"));
        }
        if valid_before - now > MAX_MPP_VALIDITY_SECS {
            return Err(refuse(
                "it asks for an authorization valid longer than the agent signs for (3600 s)",
            ));
        }
        let (name, version) = self.token_domain_of(chain_id, token, &view).await?;
        let reservation = self
            .inner
            .budget
            .reserve(charge.amount)
            .map_err(|what| Error::PolicyViolation { what })?;
        let authorization = TransferWithAuthorization {
            from: self.inner.address,
            to: charge.recipient,
            value: charge.amount.get(),
            validAfter: U256::ZERO,
            validBefore: U256::from(valid_before),
            nonce: challenge.authorization_nonce(),
        };
        let domain = token_domain(name, version, chain_id, token);
        let signature =
            sign(&self.inner.signer, &authorization, &domain).map_err(Error::Signing)?;
        let credential = Credential {
            challenge: challenge.clone(),
            payload: AuthorizationPayload {
                from: authorization.from,
                to: authorization.to,
                value: authorization.value,
                valid_after: authorization.validAfter,
                valid_before: authorization.validBefore,
                nonce: authorization.nonce,
                signature,
            },
            source: Some(Credential::source_for(chain_id, self.inner.address)),
        };
        let payment = Payment {
            kind: PaymentKind::Mpp,
            amount: charge.amount,
            fee: None,
            network,
            token,
            payer: self.inner.address,
            pay_to: charge.recipient,
            memo: None,
            tx_hash: None,
            proof: None,
            header: credential.to_header_value(),
            settlement: None,
            x402_version: None,
            retry_token: Some(RetryToken::random()),
            metered: None,
            mpp_receipt: None,
        };
        Ok((payment, reservation))
    }

    /// Sends the credential once (the same one again only to a 503 that holds it pending, as
    /// x402 payments), and reads the answer: the resource with its receipt, or a typed refusal.
    async fn send_mpp(
        &self,
        request: &PayRequest,
        challenge: &Challenge,
        mut payment: Payment,
        reservation: Reservation,
    ) -> Result<PaidResponse> {
        let response = self.send_payment(request, &payment).await;
        match &response {
            // Refused before anything was sent: the signature never left.
            Err(Error::Http(e)) if e.is_connect() => drop(reservation),
            _ => reservation.commit(),
        }
        let response = response.inspect_err(|e| {
            tracing::warn!(error = %e, amount = %payment.amount, pay_to = %payment.pay_to, "the MPP-paid request failed after paying");
        })?;
        let response = match self.until_settled(request, &mut payment, response).await? {
            Settled::Answered(response) => response,
            Settled::StillPending { transaction } => {
                return Err(Error::SettlementPending {
                    transaction,
                    payments: vec![payment],
                });
            }
        };
        if let Some(value) = response.headers().get(PAYMENT_RECEIPT) {
            match value.to_str().ok().map(Receipt::decode) {
                Some(Ok(mut receipt)) => {
                    payment.tx_hash = receipt.reference.parse().ok();
                    match &receipt.challenge_id {
                        None => receipt.challenge_id = Some(challenge.id.clone()),
                        Some(id) if *id != challenge.id => {
                            tracing::warn!(receipt = %id, paid = %challenge.id, "the MPP receipt names another challenge");
                        }
                        Some(_) => {}
                    }
                    payment.mpp_receipt = Some(receipt);
                }
                _ => tracing::warn!("unreadable Payment-Receipt"),
            }
        }
        let status = response.status();
        if status.is_success()
            || (status != StatusCode::PAYMENT_REQUIRED && payment.tx_hash.is_some())
        {
            tracing::info!(
                amount = %payment.amount, network = %payment.network, pay_to = %payment.pay_to,
                tx = ?payment.tx_hash, %status, "paid (MPP)"
            );
            return self.finish_after(response, Some(payment), Vec::new()).await;
        }
        // Refused, or neither served nor shown to have moved: never reported paid.
        let body = read_limited(response, self.inner.max_402_body)
            .await
            .ok()
            .flatten()
            .unwrap_or_default();
        let payments = vec![payment];
        if let Ok(problem) = serde_json::from_slice::<Problem>(&body) {
            tracing::warn!(%status, kind = %problem.kind, detail = %problem.detail, "the server refused the MPP credential");
            return Err(Error::PaymentProblem {
                problem: Box::new(problem),
                payments,
            });
        }
        if status == StatusCode::PAYMENT_REQUIRED {
            return Err(Error::PaymentRejected {
                reason: "402 after the MPP credential, without a problem".into(),
                payments,
            });
        }
        Err(Error::NotServed {
            status: status.as_u16(),
            code: None,
            payments,
        })
    }

    /// What the facilitators the agent reads know of chain `chain_id` (the configured ones, and
    /// any it read earlier): the entry settling `token` there first, else any entry on the chain.
    async fn chain_view(&self, chain_id: u64, token: Address) -> ChainView {
        let local = unix_now();
        let mut bases = self.inner.facilitators.clone().unwrap_or_default();
        {
            // A cache: a poisoned map is still a valid map.
            let clients = self.inner.clients.lock().unwrap_or_else(|e| e.into_inner());
            for (base, client) in clients.iter() {
                if client.cached_discovery().is_some() && !bases.contains(base) {
                    bases.push(base.clone());
                }
            }
        }
        let mut found: Option<ChainView> = None;
        for base in bases {
            let Some(base) = self.usable_facilitator(&base) else {
                continue;
            };
            let wk = match self.well_known(&base).await {
                Ok(wk) => wk,
                Err(e) => {
                    tracing::debug!(error = %e, facilitator = %base, "cannot read the facilitator for an MPP challenge");
                    continue;
                }
            };
            let entry = wk
                .networks
                .iter()
                .filter(|(_, net)| net.chain_id == chain_id)
                .min_by_key(|(_, net)| net.token != token);
            let Some((name, net)) = entry else {
                continue;
            };
            let view = ChainView {
                network: name.clone(),
                now: wk.chain_now(net, local),
                domain: (net.token == token)
                    .then(|| (net.token_name.clone(), net.token_version.clone())),
                rpc: net.rpc_url.clone(),
            };
            if view.domain.is_some() {
                return view;
            }
            found.get_or_insert(view);
        }
        found.unwrap_or_else(|| ChainView {
            network: self.network_name(chain_id),
            now: local,
            domain: None,
            rpc: None,
        })
    }

    /// A name of chain `chain_id` for the policy's network allow-list: `primary` (a facilitator's
    /// name for it) if the list allows it, else another name of the chain it allows (one taught
    /// with [`AgentBuilder::network`](crate::AgentBuilder::network), x402's, CAIP-2), else
    /// `primary` (which the policy then refuses).
    fn policy_network(&self, chain_id: u64, primary: &str) -> String {
        let policy = &self.inner.policy;
        if policy.allows_network(primary) {
            return primary.to_owned();
        }
        let taught = self
            .inner
            .chain_ids
            .iter()
            .filter(|(_, id)| **id == chain_id)
            .map(|(name, _)| name.clone());
        taught
            .chain(network::by_chain_id(chain_id).map(|n| n.name.to_owned()))
            .chain([network::caip2(chain_id)])
            .find(|name| policy.allows_network(name))
            .unwrap_or_else(|| primary.to_owned())
    }

    /// The name of chain `chain_id` when no facilitator names it: one taught with
    /// [`AgentBuilder::network`](crate::AgentBuilder::network), else x402's, else its CAIP-2 id.
    fn network_name(&self, chain_id: u64) -> String {
        self.inner
            .chain_ids
            .iter()
            .filter(|(_, id)| **id == chain_id)
            .map(|(name, _)| name.clone())
            .min()
            .or_else(|| network::by_chain_id(chain_id).map(|n| n.name.to_owned()))
            .unwrap_or_else(|| network::caip2(chain_id))
    }

    /// The EIP-712 name and version of `token` on `chain_id`: as configured
    /// ([`AgentBuilder::token_domain`](crate::AgentBuilder::token_domain)), else as a facilitator
    /// settling it publishes them, else as the token answers over the chain's JSON-RPC endpoint a
    /// facilitator publishes; else [`Error::UnknownTokenDomain`].
    async fn token_domain_of(
        &self,
        chain_id: u64,
        token: Address,
        view: &ChainView,
    ) -> Result<(String, String)> {
        if let Some(domain) = self.inner.token_domains.get(&(chain_id, token)) {
            return Ok(domain.clone());
        }
        if let Some(domain) = &view.domain {
            return Ok(domain.clone());
        }
        if let Some(rpc) = &view.rpc
            && let Some(domain) = self.rpc_domain(rpc, chain_id, token).await
        {
            return Ok(domain);
        }
        Err(Error::UnknownTokenDomain { chain_id, token })
    }

    /// The token's EIP-712 name and version as it answers at `rpc`: its EIP-5267
    /// `eip712Domain()` (for this chain and this contract only), else `name()` and `version()`.
    async fn rpc_domain(
        &self,
        rpc: &str,
        chain_id: u64,
        token: Address,
    ) -> Option<(String, String)> {
        use ITokenDomain::{eip712DomainCall, nameCall, versionCall};
        if let Some(answer) = self
            .eth_call(rpc, token, eip712DomainCall {}.abi_encode())
            .await
            && let Ok(d) = eip712DomainCall::abi_decode_returns(&answer)
        {
            if d.chainId != U256::from(chain_id) || d.verifyingContract != token {
                tracing::warn!(%token, chain_id, "the token's eip712Domain() names another chain or contract");
                return None;
            }
            return Some((d.name, d.version));
        }
        let name = self.eth_call(rpc, token, nameCall {}.abi_encode()).await?;
        let version = self
            .eth_call(rpc, token, versionCall {}.abi_encode())
            .await?;
        Some((
            nameCall::abi_decode_returns(&name).ok()?,
            versionCall::abi_decode_returns(&version).ok()?,
        ))
    }

    /// `eth_call` of `data` to `to` at `rpc`, on the latest block: the returned bytes, or `None`
    /// when the call failed or reverted.
    async fn eth_call(&self, rpc: &str, to: Address, data: Vec<u8>) -> Option<Vec<u8>> {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": 1, "method": "eth_call",
            "params": [{ "to": to, "data": alloy::hex::encode_prefixed(data) }, "latest"],
        });
        let answer = self.inner.http.post(rpc).json(&body).send().await;
        let answer = answer
            .inspect_err(|e| tracing::debug!(error = %e, %rpc, "eth_call failed"))
            .ok()?;
        let answer = read_limited(answer, MAX_RPC_ANSWER).await.ok()??;
        let answer: serde_json::Value = serde_json::from_slice(&answer).ok()?;
        let result = answer.get("result")?.as_str()?;
        alloy::hex::decode(result).ok().filter(|r| !r.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use tollgate_testkit::{Backend, Fixture};

    use crate::{Agent, Amount, SpendPolicy};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_the_token_domain_over_json_rpc_for_its_chain_and_contract_only() {
        let fx = Fixture::new(Backend::DevnetRpc).await.unwrap();
        let rpc = fx.rpc_url().unwrap().to_owned();
        let (chain_id, token) = (fx.chain.chain_id(), fx.deployment.token);
        let policy = SpendPolicy::new(Amount::from_units(1), Amount::from_units(1));
        let agent = Agent::builder(fx.accounts[1].signer(), policy)
            .build()
            .unwrap();

        assert_eq!(
            agent.rpc_domain(&rpc, chain_id, token).await,
            Some(("USD Coin".to_owned(), "2".to_owned()))
        );
        // eip712Domain() names another chain: not this token's domain there.
        assert_eq!(agent.rpc_domain(&rpc, chain_id + 1, token).await, None);
        // No token at that address.
        assert_eq!(
            agent
                .rpc_domain(
                    &rpc,
                    chain_id,
                    alloy::primitives::Address::repeat_byte(0x42)
                )
                .await,
            None
        );
    }
}
