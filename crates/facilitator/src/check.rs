//! Checking a [`Config`] against its chains before serving (`tollgate facilitator --check`): every
//! RPC endpoint reachable and on the configured chain id, the token, router and subscriptions
//! contracts present (the router's and subscriptions' runtime code the one our contracts deploy),
//! the token's EIP-712 domain the configured one, every relayer funded above a floor, and a
//! `public_rpc_url` where subscriptions are sold.
//!
//! [`check`] returns a [`Report`]: one [`Finding`] per check, each with its [`Status`] and, when
//! not ok, the change that fixes it. [`start::build`](crate::start::build) runs the same checks
//! and refuses to start on the [`fatal`](Finding::fatal) ones (a node of another chain, a
//! contract missing); the others it logs as warnings.
//!
//! The relayer floor: a settlement is sent with a gas limit of [`SETTLEMENT_GAS`], and a node
//! accepts it only from an account that can pay that limit at the current gas price. A relayer
//! holding less than [`CheckOptions::floor_settlements`] such settlements (100 by default) at the
//! node's `eth_gasPrice` fails the check; when the gas price cannot be read (the embedded
//! devnet), only an empty relayer does.

use std::{fmt, sync::Arc, time::Duration};

use alloy::{
    primitives::{Address, Bytes, U256},
    sol_types::SolCall,
};
use tollgate_chain::{
    Chain, Wallet,
    authorization::subscriptions_domain,
    contracts::{PaymentRouter, Token},
    deploy::{create2_address, expected_runtime_code, router_init_code, subscriptions_init_code},
    rpc::{RpcChain, RpcOptions},
};

use crate::config::{Config, Network, ResolvedKeys, RpcEndpoint, RpcUrl};

/// The gas limit a settlement is sent with (the router settlement's; see the settlement module):
/// a relayer must hold this much gas at the current price for a node to accept one.
pub const SETTLEMENT_GAS: u64 = crate::settle::ROUTER_SETTLE_GAS;

/// Default [`CheckOptions::floor_settlements`].
pub const DEFAULT_FLOOR_SETTLEMENTS: u64 = 100;

/// How the checks run.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckOptions {
    /// A relayer must hold the gas of this many settlements ([`SETTLEMENT_GAS`] each) at the
    /// current gas price. Default [`DEFAULT_FLOOR_SETTLEMENTS`].
    pub floor_settlements: u64,
    /// Bound on each request to a node (default 5 s).
    pub timeout: Duration,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            floor_settlements: DEFAULT_FLOOR_SETTLEMENTS,
            timeout: Duration::from_secs(5),
        }
    }
}

/// The outcome of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// As it should be.
    Ok,
    /// Works, but not as well as it could (the facilitator serves).
    Warn,
    /// Wrong: something the facilitator needs does not work.
    Fail,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ok => "ok",
            Self::Warn => "warn",
            Self::Fail => "FAIL",
        })
    }
}

/// What a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Check {
    /// An RPC endpoint (`rpc_url`, `rpc_fallback_urls`): reachable, on the configured chain id.
    Endpoint,
    /// The token contract is present.
    Token,
    /// The token's EIP-712 `name()` and `version()` are `token_name` and `token_version`.
    TokenDomain,
    /// The router is present, settles the configured token, and runs our `PaymentRouter`.
    Router,
    /// The subscriptions contract is present and runs our `Subscriptions`.
    Subscriptions,
    /// A relayer holds gas above the floor.
    Relayer,
    /// `public_rpc_url` is set (and on the chain) where subscriptions are sold.
    PublicRpcUrl,
}

/// One check's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// The network checked.
    pub network: String,
    /// What was checked.
    pub check: Check,
    /// The config key concerned: `networks[0].router`, `keys.relayers[1]`.
    pub key: String,
    /// The outcome.
    pub status: Status,
    /// What was found.
    pub message: String,
    /// The change that fixes it (`None` when ok).
    pub fix: Option<String>,
    /// Whether the facilitator refuses to start on it (a node of another chain, a contract
    /// missing).
    pub fatal: bool,
}

impl Finding {
    fn ok(network: &Network, check: Check, key: String, message: String) -> Self {
        Self {
            network: network.name.clone(),
            check,
            key,
            status: Status::Ok,
            message,
            fix: None,
            fatal: false,
        }
    }

    fn bad(
        network: &Network,
        check: Check,
        status: Status,
        key: String,
        message: String,
        fix: String,
    ) -> Self {
        Self {
            network: network.name.clone(),
            check,
            key,
            status,
            message,
            fix: Some(fix),
            fatal: false,
        }
    }

    fn refuses_start(mut self) -> Self {
        self.fatal = true;
        self
    }
}

impl fmt::Display for Finding {
    /// `networks[0].router: no contract at 0x… on chain 84532: deploy …`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)?;
        if let Some(fix) = &self.fix {
            write!(f, ": {fix}")?;
        }
        Ok(())
    }
}

/// Every finding of a [`check`], in config order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// The findings.
    pub findings: Vec<Finding>,
}

impl Report {
    /// Whether no check failed (warnings pass).
    pub fn passed(&self) -> bool {
        self.findings.iter().all(|f| f.status != Status::Fail)
    }

    /// The findings the facilitator refuses to start on.
    pub fn fatal(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.fatal)
    }
}

impl fmt::Display for Report {
    /// One line per finding: `ok   networks[0].token: …`, `FAIL networks[0].router: …`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for finding in &self.findings {
            writeln!(f, "{:<4} {finding}", finding.status.to_string())?;
        }
        Ok(())
    }
}

/// Checks every network of `config` against its chain, with the relayers of `keys`. Never fails:
/// whatever cannot be read is a failed finding. A network on the `embedded` devnet cannot be
/// checked here (only `tollgate dev` runs one) and fails.
pub async fn check(config: &Config, keys: &ResolvedKeys, options: &CheckOptions) -> Report {
    let relayers: Vec<Address> = keys.relayers.iter().map(|k| k.address()).collect();
    let mut report = Report::default();
    for (i, network) in config.networks.iter().enumerate() {
        let (findings, reader) = endpoints(i, network, options).await;
        report.findings.extend(findings);
        match (&network.rpc, reader) {
            (RpcEndpoint::Embedded, _) => report.findings.push(
                Finding::bad(
                    network,
                    Check::Endpoint,
                    Status::Fail,
                    format!("networks[{i}].rpc_url"),
                    "\"embedded\" is the devnet only `tollgate dev` runs".into(),
                    "set rpc_url to a node's JSON-RPC URL".into(),
                )
                .refuses_start(),
            ),
            (RpcEndpoint::Url(_), Some((chain, url))) => {
                let gas_price = gas_price(&url, options.timeout).await;
                report.findings.extend(
                    contracts_and_relayers(
                        i,
                        network,
                        &chain,
                        config.fees.fee_recipient,
                        &relayers,
                        gas_price,
                        options,
                    )
                    .await,
                );
            }
            (RpcEndpoint::Url(_), None) => {} // no node to read from: said per endpoint
        }
    }
    report
}

/// Probes every endpoint of `network` (`rpc_url`, `rpc_fallback_urls`, `public_rpc_url`) at
/// once: one finding each, and the first node on the right chain to read it through (with its
/// URL).
pub(crate) async fn endpoints(
    i: usize,
    network: &Network,
    options: &CheckOptions,
) -> (Vec<Finding>, Option<(Arc<dyn Chain>, RpcUrl)>) {
    let RpcEndpoint::Url(primary) = &network.rpc else {
        return (public_rpc_url(i, network, None), None);
    };
    let mut probes = tokio::task::JoinSet::new();
    let mut keys = vec![(format!("networks[{i}].rpc_url"), primary.clone())];
    keys.extend(
        network
            .rpc_fallbacks
            .iter()
            .enumerate()
            .map(|(j, u)| (format!("networks[{i}].rpc_fallback_urls[{j}]"), u.clone())),
    );
    if let Some(public) = &network.public_rpc_url {
        keys.push((
            format!("networks[{i}].public_rpc_url"),
            public.as_str().into(),
        ));
    }
    let wallet = Wallet::from_keys(std::iter::empty())
        .unwrap_or_else(|_| unreachable!("a wallet of no keys has no bad key"));
    for (n, (_, url)) in keys.iter().enumerate() {
        let url = url.expose_secret().to_owned();
        let wallet = wallet.clone();
        let rpc = RpcOptions {
            chain_id: None,
            request_timeout: options.timeout,
            ..RpcOptions::default()
        };
        probes.spawn(async move { (n, RpcChain::connect(&url, wallet, rpc).await) });
    }
    let mut answers: Vec<_> = probes.join_all().await;
    answers.sort_by_key(|(n, _)| *n);
    let mut findings = Vec::new();
    let mut reader: Option<(Arc<dyn Chain>, RpcUrl)> = None;
    let mut public = None;
    for ((key, url), (_, answer)) in keys.into_iter().zip(answers) {
        let is_public = key.ends_with("public_rpc_url");
        let what = if is_public {
            Check::PublicRpcUrl
        } else {
            Check::Endpoint
        };
        let finding = match answer {
            Err(e) => Finding::bad(
                network,
                what,
                if is_public {
                    Status::Warn
                } else {
                    Status::Fail
                },
                key,
                format!("{url} cannot be reached ({e})"),
                "start the node or fix the URL".into(),
            ),
            Ok(chain) if chain.chain_id() != network.chain_id => {
                let finding = Finding::bad(
                    network,
                    what,
                    Status::Fail,
                    key,
                    format!(
                        "{url} serves chain id {}, not {}",
                        chain.chain_id(),
                        network.chain_id
                    ),
                    format!(
                        "point it at a node of chain {} (or fix networks[{i}].chain_id/name if chain {} is meant)",
                        network.chain_id,
                        chain.chain_id()
                    ),
                );
                // A node of another chain is never used; the public one is only published.
                if is_public {
                    finding
                } else {
                    finding.refuses_start()
                }
            }
            Ok(chain) => {
                if !is_public && reader.is_none() {
                    reader = Some((Arc::new(chain), url.clone()));
                }
                Finding::ok(
                    network,
                    what,
                    key,
                    format!("{url} answers on chain id {}", network.chain_id),
                )
            }
        };
        if is_public {
            public = Some(finding);
        } else {
            findings.push(finding);
        }
    }
    findings.extend(public_rpc_url(i, network, public));
    (findings, reader)
}

/// The `public_rpc_url` finding: its probe, or a warning when subscriptions are sold without it.
fn public_rpc_url(i: usize, network: &Network, probed: Option<Finding>) -> Vec<Finding> {
    match (probed, network.subscriptions) {
        (Some(f), _) => vec![f],
        (None, Some(_)) => vec![Finding::bad(
            network,
            Check::PublicRpcUrl,
            Status::Warn,
            format!("networks[{i}].public_rpc_url"),
            "not set, but subscriptions are sold: gates and gateways without an RPC URL of their own cannot check them".into(),
            format!(
                "set networks[{i}].public_rpc_url to a public JSON-RPC URL of chain {} (no credentials)",
                network.chain_id
            ),
        )],
        (None, None) => Vec::new(),
    }
}

/// The node's `eth_gasPrice`, `None` when it cannot be read.
pub(crate) async fn gas_price(url: &RpcUrl, timeout: Duration) -> Option<U256> {
    let url = url.expose_secret();
    if !url.starts_with("http") {
        return None;
    }
    tollgate_chain::install_crypto_provider();
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"eth_gasPrice","params":[]}"#;
    let response = reqwest::Client::new()
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(&body[..])
        .timeout(timeout)
        .send()
        .await
        .ok()?;
    let bytes = response.bytes().await.ok()?;
    let answer: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    answer["result"].as_str()?.parse().ok()
}

/// The checks made through a node of the chain: contracts, the token's domain, the relayers.
pub(crate) async fn contracts_and_relayers(
    i: usize,
    n: &Network,
    chain: &Arc<dyn Chain>,
    fee_recipient: Option<Address>,
    relayers: &[Address],
    gas_price: Option<U256>,
    options: &CheckOptions,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    let chain_id = n.chain_id;
    let key = |field: &str| format!("networks[{i}].{field}");
    let unreadable = |check: Check, key: String, e: tollgate_chain::Error| {
        Finding::bad(
            n,
            check,
            Status::Fail,
            key,
            format!("cannot be read: {e}"),
            "make the node reachable".into(),
        )
    };

    // The token.
    match chain.code(n.token).await {
        Err(e) => findings.push(unreadable(Check::Token, key("token"), e)),
        Ok(code) if code.is_empty() => findings.push(
            Finding::bad(
                n,
                Check::Token,
                Status::Fail,
                key("token"),
                format!("no contract at {} on chain {chain_id}", n.token),
                format!("set networks[{i}].token to the token's address on chain {chain_id}"),
            )
            .refuses_start(),
        ),
        Ok(_) => {
            findings.push(Finding::ok(
                n,
                Check::Token,
                key("token"),
                format!("contract at {}", n.token),
            ));
            let name = read_string(chain, n.token, Token::nameCall {}.abi_encode()).await;
            let version = read_string(chain, n.token, Token::versionCall {}.abi_encode()).await;
            findings.push(match (name, version) {
                (Ok(name), Ok(version)) if name == n.token_name && version == n.token_version => {
                    Finding::ok(
                        n,
                        Check::TokenDomain,
                        key("token_name"),
                        format!("EIP-712 domain name {name:?}, version {version:?}"),
                    )
                }
                (Ok(name), Ok(version)) => Finding::bad(
                    n,
                    Check::TokenDomain,
                    Status::Fail,
                    key("token_name"),
                    format!(
                        "the token's EIP-712 domain is name {name:?}, version {version:?}, not {:?}, {:?} (every signature would be refused)",
                        n.token_name, n.token_version
                    ),
                    format!("set token_name = {name:?} and token_version = {version:?}"),
                ),
                (Err(e), _) | (_, Err(e)) => Finding::bad(
                    n,
                    Check::TokenDomain,
                    Status::Fail,
                    key("token_name"),
                    format!("the token's name() and version() cannot be read: {e}"),
                    format!("set networks[{i}].token to an EIP-3009 token (USDC)"),
                ),
            });
        }
    }

    // The router.
    findings.push(router(i, n, chain, fee_recipient).await);

    // The subscriptions contract.
    if let Some(subscriptions) = n.subscriptions {
        findings.push(match chain.code(subscriptions).await {
            Err(e) => unreadable(Check::Subscriptions, key("subscriptions"), e),
            Ok(code) if code.is_empty() => Finding::bad(
                n,
                Check::Subscriptions,
                Status::Fail,
                key("subscriptions"),
                format!("no contract at {subscriptions} on chain {chain_id}"),
                format!(
                    "deploy one with `tollgate deploy --network {} --rpc-url URL --key SOURCE` and set networks[{i}].subscriptions to the address it prints, or remove the key",
            n.name
                ),
            )
            .refuses_start(),
            Ok(code) => subscriptions_code(i, n, chain, subscriptions, &code).await,
        });
    }

    // The relayers.
    let floor =
        gas_price.map(|p| U256::from(options.floor_settlements) * U256::from(SETTLEMENT_GAS) * p);
    for (j, &relayer) in relayers.iter().enumerate() {
        let key = format!("keys.relayers[{j}]");
        findings.push(match chain.balance(relayer).await {
            Err(e) => unreadable(Check::Relayer, key, e),
            Ok(balance) => {
                let (low, floor_text) = match (floor, gas_price) {
                    (Some(floor), Some(price)) => (
                        (balance < floor).then(|| floor - balance),
                        format!(
                            "the floor of {} ({} settlements x {SETTLEMENT_GAS} gas at {} wei/gas)",
                            ether(floor),
                            options.floor_settlements,
                            price
                        ),
                    ),
                    _ => (
                        balance.is_zero().then_some(U256::from(1)),
                        "the floor of any gas at all (gas price unknown)".into(),
                    ),
                };
                if let Some(missing) = low {
                    Finding::bad(
                        n,
                        Check::Relayer,
                        Status::Fail,
                        key,
                        format!(
                            "{relayer} holds {} on chain {chain_id}, below {floor_text}",
                            ether(balance)
                        ),
                        format!(
                            "send {relayer} at least {} of chain {chain_id}'s native currency",
                            ether(missing)
                        ),
                    )
                } else {
                    Finding::ok(
                        n,
                        Check::Relayer,
                        key,
                        format!("{relayer} holds {}, above {floor_text}", ether(balance)),
                    )
                }
            }
        });
    }
    findings
}

/// The router check: present, settling the configured token, paying the configured fee
/// recipient (when one is configured).
async fn router(
    i: usize,
    n: &Network,
    chain: &Arc<dyn Chain>,
    fee_recipient: Option<Address>,
) -> Finding {
    let key = format!("networks[{i}].router");
    let chain_id = n.chain_id;
    let deploy_fix = format!(
        "deploy one with `tollgate deploy --network {} --token {} --rpc-url URL --key SOURCE` and set networks[{i}].router to the router it prints",
        n.name, n.token
    );
    match chain.code(n.router).await {
        Err(e) => Finding::bad(
            n,
            Check::Router,
            Status::Fail,
            key,
            format!("cannot be read: {e}"),
            "make the node reachable".into(),
        ),
        Ok(code) if code.is_empty() => Finding::bad(
            n,
            Check::Router,
            Status::Fail,
            key,
            format!("no contract at {} on chain {chain_id}", n.router),
            deploy_fix,
        )
        .refuses_start(),
        Ok(code) => {
            let token = chain
                .call(
                    None,
                    n.router,
                    PaymentRouter::tokenCall {}.abi_encode().into(),
                )
                .await
                .ok()
                .and_then(|r| PaymentRouter::tokenCall::abi_decode_returns(&r).ok());
            match token {
                Some(token) if token == n.token => {
                    router_code(i, n, chain, &code, fee_recipient, key, deploy_fix).await
                }
                Some(token) => Finding::bad(
                    n,
                    Check::Router,
                    Status::Fail,
                    key,
                    format!(
                        "the router at {} settles token {token}, not the configured {}",
                        n.router, n.token
                    ),
                    deploy_fix,
                ),
                None => Finding::bad(
                    n,
                    Check::Router,
                    Status::Fail,
                    key,
                    format!(
                        "the contract at {} is not a PaymentRouter (no token())",
                        n.router
                    ),
                    deploy_fix,
                ),
            }
        }
    }
}

/// The router's code against the code `PaymentRouter` leaves for its own `token()` and
/// `feeRecipient()` (its only immutables, so the comparison holds wherever it was deployed), and
/// its fee recipient against `fees.fee_recipient` when that is set.
async fn router_code(
    i: usize,
    n: &Network,
    chain: &Arc<dyn Chain>,
    code: &Bytes,
    configured_recipient: Option<Address>,
    key: String,
    deploy_fix: String,
) -> Finding {
    let recipient = chain
        .call(
            None,
            n.router,
            PaymentRouter::feeRecipientCall {}.abi_encode().into(),
        )
        .await
        .ok()
        .and_then(|r| PaymentRouter::feeRecipientCall::abi_decode_returns(&r).ok());
    let Some(recipient) = recipient else {
        return Finding::bad(
            n,
            Check::Router,
            Status::Fail,
            key,
            format!(
                "the contract at {} is not a PaymentRouter (no feeRecipient())",
                n.router
            ),
            deploy_fix,
        );
    };
    if let Some(configured) = configured_recipient
        && configured != recipient
    {
        return Finding::bad(
            n,
            Check::Router,
            Status::Fail,
            key,
            format!(
                "the router at {} pays fees to {recipient}, not fees.fee_recipient {configured}",
                n.router
            ),
            format!(
                "set fees.fee_recipient = \"{recipient}\", or deploy a router paying {configured} and set networks[{i}].router to it"
            ),
        );
    }
    let expected =
        expected_runtime_code(chain.as_ref(), router_init_code(n.token, recipient)).await;
    code_finding(
        n,
        Check::Router,
        key,
        n.router,
        code,
        expected,
        |c| c,
        format!(
            "PaymentRouter at {} settles token {}, fees to {recipient}",
            n.router, n.token
        ),
        deploy_fix,
    )
}

/// The subscriptions contract's code against the code `Subscriptions` leaves. Its immutables
/// include its EIP-712 domain separator, which names its own address: the expected code is
/// computed at the deterministic deployment's address, whose separator is replaced by the one
/// of the configured address (a contract deployed elsewhere, by CREATE, compares equal).
async fn subscriptions_code(
    i: usize,
    n: &Network,
    chain: &Arc<dyn Chain>,
    subscriptions: Address,
    code: &Bytes,
) -> Finding {
    let init = subscriptions_init_code();
    let at = create2_address(&init);
    let expected = expected_runtime_code(chain.as_ref(), init).await;
    let theirs = subscriptions_domain(n.chain_id, at).separator();
    let ours = subscriptions_domain(n.chain_id, subscriptions).separator();
    let relocate = |code: Bytes| {
        let mut code = code.to_vec();
        let mut k = 0;
        while k + 32 <= code.len() {
            if code[k..k + 32] == theirs[..] {
                code[k..k + 32].copy_from_slice(ours.as_slice());
                k += 32;
            } else {
                k += 1;
            }
        }
        Bytes::from(code)
    };
    code_finding(
        n,
        Check::Subscriptions,
        format!("networks[{i}].subscriptions"),
        subscriptions,
        code,
        expected,
        relocate,
        format!("Subscriptions at {subscriptions}"),
        format!(
            "deploy one with `tollgate deploy --network {} --rpc-url URL --key SOURCE` and set networks[{i}].subscriptions to the address it prints, or remove the key",
            n.name
        ),
    )
}

/// The finding of a code comparison: ok when `code` is the expected one (after `adjust`), a
/// warning when the node cannot simulate the deployment (the code is then not compared).
#[allow(clippy::too_many_arguments)]
fn code_finding(
    n: &Network,
    check: Check,
    key: String,
    at: Address,
    code: &Bytes,
    expected: tollgate_chain::Result<Bytes>,
    adjust: impl FnOnce(Bytes) -> Bytes,
    ok: String,
    fix: String,
) -> Finding {
    match expected {
        Ok(expected) if !expected.is_empty() => {
            if adjust(expected) == *code {
                Finding::ok(n, check, key, format!("{ok}, with the expected code"))
            } else {
                Finding::bad(
                    n,
                    check,
                    Status::Fail,
                    key,
                    format!(
                        "the code at {at} is not the one our contract leaves ({} bytes)",
                        code.len()
                    ),
                    fix,
                )
            }
        }
        Ok(_) | Err(_) => Finding::bad(
            n,
            check,
            Status::Warn,
            key,
            format!(
                "{ok}; its code not compared (the node cannot simulate the deployment: no eth_call with state overrides)"
            ),
            "check against a node that supports eth_call state overrides (anvil, geth, reth)"
                .into(),
        ),
    }
}

/// A `string`-returning view call.
async fn read_string(
    chain: &Arc<dyn Chain>,
    to: Address,
    data: Vec<u8>,
) -> Result<String, tollgate_chain::Error> {
    let out: Bytes = chain.call(None, to, data.into()).await?;
    Token::nameCall::abi_decode_returns(&out)
        .map_err(|e| tollgate_chain::Error::InvalidInput(format!("not a string: {e}")))
}

/// `amount` wei as ether with up to 6 decimals (`0.03 ETH`).
pub(crate) fn ether(amount: U256) -> String {
    let micro = amount / U256::from(1_000_000_000_000u64);
    let whole = micro / U256::from(1_000_000u64);
    let frac = (micro % U256::from(1_000_000u64)).to::<u64>();
    let frac = format!("{frac:06}");
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        if whole.is_zero() && !amount.is_zero() {
            return format!("{amount} wei");
        }
        format!("{whole} ETH")
    } else {
        format!("{whole}.{frac} ETH")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ether_is_readable() {
        assert_eq!(ether(U256::ZERO), "0 ETH");
        assert_eq!(ether(U256::from(30_000_000_000_000_000u64)), "0.03 ETH");
        assert_eq!(ether(U256::from(5u64)), "5 wei");
        assert_eq!(ether(U256::from(10u64).pow(U256::from(22))), "10000 ETH");
    }
}
