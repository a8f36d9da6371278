//! Deterministic deployment of `PaymentRouter` and `Subscriptions` on a real chain: CREATE2 through
//! the standard deterministic deployment proxy ([`CREATE2_PROXY`]), so that a chain, a token and a
//! fee recipient have one deployment, found again (and nothing sent) by a second run.

use alloy::{
    primitives::{Address, B256, Bytes, keccak256},
    sol_types::SolConstructor,
};

use crate::{
    Chain, Confirmation, Deployment, Error, Receipt, Result, TxRequest, WaitOptions,
    contracts::{PaymentRouter, Subscriptions},
};

/// The deterministic deployment proxy ("Arachnid's" CREATE2 factory): a call with data
/// `salt ‖ init_code` deploys at `keccak256(0xff ‖ proxy ‖ salt ‖ keccak256(init_code))[12..]`.
/// Present on anvil, Base and Base Sepolia (not on the embedded devnet).
pub const CREATE2_PROXY: Address =
    alloy::primitives::address!("4e59b44847b379578588920cA78FbF26c0B4956C");

/// The salt of every Tollgate deployment: `keccak256("tollgate/v1")`. The addresses then depend only
/// on the chain and the init code (token and fee recipient).
pub fn salt() -> B256 {
    keccak256("tollgate/v1")
}

/// The init code of a `PaymentRouter` for `token` paying fees to `fee_recipient`.
pub fn router_init_code(token: Address, fee_recipient: Address) -> Bytes {
    let args = PaymentRouter::constructorCall {
        token_: token,
        feeRecipient_: fee_recipient,
    }
    .abi_encode();
    [PaymentRouter::BYTECODE.as_ref(), &args].concat().into()
}

/// The init code of a `Subscriptions` contract (its constructor takes no arguments; plans name
/// their token).
pub fn subscriptions_init_code() -> Bytes {
    Subscriptions::BYTECODE.clone()
}

/// The code put at [`CREATE2_PROXY`] for [`expected_runtime_code`]'s call: with calldata
/// `salt ‖ init_code`, it creates as the proxy does (CREATE2, so at the same address), then returns
/// the created account's code instead of its address.
///
/// ```text
/// 60 20 36 03           len = calldatasize - 32
/// 80 60 20 60 00 37     calldatacopy(0, 32, len)
/// 60 00 35 90           salt (calldata[0..32]) under len
/// 60 00 60 00 f5        addr = create2(0, 0, len, salt)
/// 80 3b                 size = extcodesize(addr)
/// 80 60 00 60 00 84 3c  extcodecopy(addr, 0, 0, size)
/// 60 00 f3              return(0, size)
/// ```
const CREATE_AND_RETURN_CODE: [u8; 31] = [
    0x60, 0x20, 0x36, 0x03, 0x80, 0x60, 0x20, 0x60, 0x00, 0x37, 0x60, 0x00, 0x35, 0x90, 0x60, 0x00,
    0x60, 0x00, 0xf5, 0x80, 0x3b, 0x80, 0x60, 0x00, 0x60, 0x00, 0x84, 0x3c, 0x60, 0x00, 0xf3,
];

/// Where a Tollgate deployment of `init_code` lands: CREATE2 through [`CREATE2_PROXY`] with
/// [`salt`].
pub fn create2_address(init_code: &[u8]) -> Address {
    CREATE2_PROXY.create2(salt(), keccak256(init_code))
}

/// The runtime code a Tollgate deployment of `init_code` leaves on `chain`: the creation run
/// through the deterministic deployment proxy with [`salt`], so at [`create2_address`] (the
/// contracts' immutables include their own address: `Subscriptions`' EIP-712 domain), in an
/// `eth_call` against the latest state with state overrides ([`Chain::call_with_code`]: the
/// proxy's code replaced by one that returns the created code, the target account emptied, so
/// the answer is the same before and after the deployment). A deployment is verified when the code
/// at its address equals this. An empty answer means the creation failed (the constructor
/// reverted); a backend that cannot override state (the embedded devnet) answers
/// [`crate::Error::Unsupported`].
pub async fn expected_runtime_code(chain: &dyn Chain, init_code: Bytes) -> Result<Bytes> {
    let target = create2_address(&init_code);
    let data: Bytes = [salt().as_slice(), &init_code].concat().into();
    let accounts = vec![
        (CREATE2_PROXY, Bytes::from_static(&CREATE_AND_RETURN_CODE)),
        (target, Bytes::new()),
    ];
    chain.call_with_code(CREATE2_PROXY, data, accounts).await
}

/// One contract of a [`Plan`]: where it lands and what creates it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// Its CREATE2 address ([`create2_address`] of the init code).
    pub address: Address,
    /// Its init code (creation code and constructor arguments).
    pub init_code: Bytes,
}

impl Planned {
    fn new(init_code: Bytes) -> Self {
        Self {
            address: create2_address(&init_code),
            init_code,
        }
    }

    /// The transaction from `from` that deploys it: a call of [`CREATE2_PROXY`] with
    /// `salt ‖ init_code`.
    pub fn tx(&self, from: Address) -> TxRequest {
        let data: Bytes = [salt().as_slice(), &self.init_code].concat().into();
        TxRequest::call(from, CREATE2_PROXY, data)
    }
}

/// The deterministic deployment for one token and fee recipient (on any chain carrying
/// [`CREATE2_PROXY`]): a `PaymentRouter` and a `Subscriptions` contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The token the router settles in.
    pub token: Address,
    /// The router's fee recipient.
    pub fee_recipient: Address,
    /// The `PaymentRouter`.
    pub router: Planned,
    /// The `Subscriptions` contract.
    pub subscriptions: Planned,
}

impl Plan {
    /// The plan for `token` and `fee_recipient`.
    pub fn new(token: Address, fee_recipient: Address) -> Self {
        Self {
            token,
            fee_recipient,
            router: Planned::new(router_init_code(token, fee_recipient)),
            subscriptions: Planned::new(subscriptions_init_code()),
        }
    }

    /// The contracts, named, in deployment order.
    pub fn contracts(&self) -> [(&'static str, &Planned); 2] {
        [
            ("PaymentRouter", &self.router),
            ("Subscriptions", &self.subscriptions),
        ]
    }

    /// Where the contracts land, with the token.
    pub fn deployment(&self) -> Deployment {
        Deployment {
            token: self.token,
            router: self.router.address,
            subscriptions: self.subscriptions.address,
        }
    }
}

/// What [`deploy`] did for one contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deployed {
    /// It was there already, with the expected code; nothing was sent.
    Present,
    /// This transaction deployed it.
    Sent(Receipt),
}

/// Whether `planned` is on `chain` already: `Ok(true)` when its address holds the expected code,
/// `Ok(false)` when it holds none, an error when it holds other code.
pub async fn is_deployed(chain: &dyn Chain, planned: &Planned) -> Result<bool> {
    let code = chain.code(planned.address).await?;
    if code.is_empty() {
        return Ok(false);
    }
    verify(chain, planned, &code).await?;
    Ok(true)
}

async fn verify(chain: &dyn Chain, planned: &Planned, code: &Bytes) -> Result<()> {
    let expected = expected_runtime_code(chain, planned.init_code.clone()).await?;
    if expected.is_empty() || *code != expected {
        return Err(Error::InvalidInput(format!(
            "the code at {} is not the expected contract's ({} bytes, expected {})",
            planned.address,
            code.len(),
            expected.len()
        )));
    }
    Ok(())
}

/// Deploys what of `plan` is not on `chain` yet, from `from` (one of the backend's signers),
/// through [`CREATE2_PROXY`], waiting `opts` for each; then checks each contract's code against
/// [`expected_runtime_code`]. Contracts already there (with the expected code) are left alone: a
/// second run sends nothing. Returns what it did, in [`Plan::contracts`] order.
pub async fn deploy(
    chain: &dyn Chain,
    from: Address,
    plan: &Plan,
    opts: WaitOptions,
) -> Result<Vec<Deployed>> {
    if chain.code(CREATE2_PROXY).await?.is_empty() {
        return Err(Error::Unsupported(
            "no deterministic deployment proxy at 0x4e59b44847b379578588920cA78FbF26c0B4956C",
        ));
    }
    let mut done = Vec::new();
    for (_, planned) in plan.contracts() {
        if is_deployed(chain, planned).await? {
            done.push(Deployed::Present);
            continue;
        }
        let receipt = match chain.send_and_wait(planned.tx(from), opts).await? {
            Confirmation::Confirmed(r) => r,
            Confirmation::Pending { tx_hash } => {
                return Err(Error::Unavailable(format!(
                    "deployment transaction {tx_hash} not confirmed in time"
                )));
            }
        };
        let code = chain.code(planned.address).await?;
        verify(chain, planned, &code).await?;
        done.push(Deployed::Sent(receipt));
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use alloy::primitives::U256;
    use tollgate_testkit::Anvil;

    use super::*;
    use crate::{
        Wallet,
        accounts::dev_accounts,
        contracts::{TokenParams, deploy},
        rpc::{RpcChain, RpcOptions},
    };

    #[tokio::test]
    async fn expected_runtime_code_is_the_code_a_creation_leaves() {
        let anvil = Anvil::spawn().await.unwrap();
        let accounts = dev_accounts(2);
        let wallet = Wallet::from_keys(accounts.iter().map(|a| a.private_key)).unwrap();
        let options = RpcOptions {
            chain_id: Some(anvil.chain_id()),
            ..RpcOptions::default()
        };
        let chain = RpcChain::connect(anvil.url(), wallet, options)
            .await
            .unwrap();
        let fee = accounts[0].address;
        let d = deploy(&chain, fee, fee, &TokenParams::default(), &[], U256::ZERO)
            .await
            .unwrap();
        let router = expected_runtime_code(&chain, router_init_code(d.token, fee))
            .await
            .unwrap();
        assert_eq!(router, chain.code(d.router).await.unwrap());
        // Subscriptions' immutables name its address: computed for its CREATE2 address, the same
        // before and after it is deployed there through the proxy.
        let init = subscriptions_init_code();
        let subs = expected_runtime_code(&chain, init.clone()).await.unwrap();
        assert!(!subs.is_empty());
        assert_ne!(subs, chain.code(d.subscriptions).await.unwrap());
        let data: Bytes = [salt().as_slice(), &init].concat().into();
        let opts = crate::WaitOptions::default();
        chain
            .send_and_wait(crate::TxRequest::call(fee, CREATE2_PROXY, data), opts)
            .await
            .unwrap();
        assert_eq!(subs, chain.code(create2_address(&init)).await.unwrap());
        assert_eq!(subs, expected_runtime_code(&chain, init).await.unwrap());
        // Another fee recipient: other immutables, other code.
        let other = expected_runtime_code(&chain, router_init_code(d.token, d.token))
            .await
            .unwrap();
        assert_ne!(other, router);
        // The deterministic deployment proxy is there on anvil.
        assert!(!chain.code(CREATE2_PROXY).await.unwrap().is_empty());
    }
}
