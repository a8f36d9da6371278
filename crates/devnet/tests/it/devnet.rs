//! The embedded devnet's own guarantees: the journal restores state exactly across restarts, a
//! torn tail is dropped, a foreign journal is refused, and time travel moves the clock.

use std::{path::Path, sync::Arc};

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::SolCall,
};
use tollgate_chain::{
    Chain, Error, TxRequest, WaitOptions,
    contracts::{self, SubscriptionState, Subscriptions, Token},
};
use tollgate_devnet::{Devnet, DevnetConfig};

const DAY: u64 = 86_400;

fn start(dir: &Path) -> Arc<Devnet> {
    Devnet::start(DevnetConfig {
        state_dir: Some(dir.to_owned()),
        ..Default::default()
    })
    .unwrap()
}

async fn token_balance(chain: &dyn Chain, token: Address, who: Address) -> U256 {
    contracts::read(chain, token, &Token::balanceOfCall { account: who })
        .await
        .unwrap()
}

/// Everything observable that the journal must restore.
#[derive(Debug, PartialEq, Eq)]
struct Snapshot {
    block: u64,
    timestamp: u64,
    block_hash: Option<B256>,
    balances: Vec<(U256, U256, u64)>,
    plan_amount: U256,
    subscription: (u8, u64),
}

async fn snapshot(devnet: &Devnet, plan: B256, sub: B256) -> Snapshot {
    let d = devnet.deployment();
    let mut balances = Vec::new();
    for a in devnet.accounts() {
        balances.push((
            token_balance(devnet, d.token, a.address).await,
            devnet.balance(a.address).await.unwrap(),
            devnet.nonce(a.address).await.unwrap(),
        ));
    }
    let block = devnet.block_number().await.unwrap();
    let p = contracts::read(
        devnet,
        d.subscriptions,
        &Subscriptions::plansCall { planId: plan },
    )
    .await
    .unwrap();
    let s = contracts::read(
        devnet,
        d.subscriptions,
        &Subscriptions::statusCall { id: sub },
    )
    .await
    .unwrap();
    Snapshot {
        block,
        timestamp: devnet.timestamp().await.unwrap(),
        block_hash: devnet.block_hash(block),
        balances,
        plan_amount: p.amount,
        subscription: (s.state, s.paidThrough),
    }
}

async fn send(chain: &dyn Chain, from: Address, to: Address, data: Vec<u8>) -> B256 {
    let confirmed = chain
        .send_and_wait(TxRequest::call(from, to, data), WaitOptions::default())
        .await
        .unwrap();
    confirmed
        .receipt()
        .expect("devnet confirms at once")
        .tx_hash
}

/// A transfer, a router settlement, time travel, a plan and a subscription (with its first billing), then a restart:
/// every balance, nonce, block, plan and subscription is as before.
#[tokio::test]
async fn restart_restores_state_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let devnet = start(dir.path());
    let d = devnet.deployment();
    let a = devnet.accounts().to_vec();

    let transfer = send(
        &*devnet,
        a[1].address,
        d.token,
        Token::transferCall {
            to: a[2].address,
            value: U256::from(1_234_567),
        }
        .abi_encode(),
    )
    .await;
    // A one-time settlement through the router (the facilitator's path), fee to account 0.
    let payment = tollgate_chain::authorization::RouterPayment {
        from: a[6].address,
        pay_to: a[7].address,
        amount: U256::from(500_000),
        fee: U256::from(1_000),
        memo: B256::repeat_byte(0x4d),
        valid_after: U256::ZERO,
        valid_before: U256::from(u64::MAX),
    };
    let domain =
        tollgate_chain::authorization::token_domain("USD Coin", "2", devnet.chain_id(), d.token);
    let signature = tollgate_chain::authorization::sign(
        &a[6].signer(),
        &payment.authorization(d.router),
        &domain,
    )
    .unwrap();
    send(
        &*devnet,
        a[0].address,
        d.router,
        payment.settle_call(signature).abi_encode(),
    )
    .await;
    devnet.advance_time(30 * DAY).await.unwrap();
    let salt = B256::repeat_byte(7);
    send(
        &*devnet,
        a[3].address,
        d.subscriptions,
        Subscriptions::createPlanCall {
            token: d.token,
            payTo: a[3].address,
            amount: U256::from(10_000_000),
            interval: 30 * DAY,
            operator: a[0].address,
            salt,
        }
        .abi_encode(),
    )
    .await;
    let plan = contracts::read(
        &*devnet,
        d.subscriptions,
        &Subscriptions::planIdForCall {
            provider: a[3].address,
            salt,
        },
    )
    .await
    .unwrap();
    send(
        &*devnet,
        a[4].address,
        d.token,
        Token::approveCall {
            spender: d.subscriptions,
            value: U256::MAX,
        }
        .abi_encode(),
    )
    .await;
    let sub = contracts::read(
        &*devnet,
        d.subscriptions,
        &Subscriptions::subscriptionIdForCall {
            planId: plan,
            subscriber: a[4].address,
            nonce: U256::ZERO,
        },
    )
    .await
    .unwrap();
    send(
        &*devnet,
        a[4].address,
        d.subscriptions,
        Subscriptions::subscribeCall {
            planId: plan,
            maxOverage: U256::from(5_000_000),
        }
        .abi_encode(),
    )
    .await;

    let before = snapshot(&devnet, plan, sub).await;
    assert_eq!(before.subscription.0, 1, "subscription is ACTIVE");
    assert_eq!(
        before.balances[2].0,
        tollgate_devnet::DEV_TOKENS + U256::from(1_234_567)
    );
    assert!(before.timestamp >= devnet.genesis_timestamp() + 30 * DAY);
    drop(devnet);

    let devnet = start(dir.path());
    let after = snapshot(&devnet, plan, sub).await;
    assert_eq!(before, after);
    let receipt = devnet
        .receipt(transfer)
        .await
        .unwrap()
        .expect("receipt survives the restart");
    assert!(receipt.success);
    assert_eq!(
        contracts::SubscriptionState::from_u8(after.subscription.0),
        SubscriptionState::Active
    );

    // New work continues on top of the restored chain.
    send(
        &*devnet,
        a[1].address,
        d.token,
        Token::transferCall {
            to: a[2].address,
            value: U256::from(1),
        }
        .abi_encode(),
    )
    .await;
    assert_eq!(devnet.block_number().await.unwrap(), after.block + 1);
}

/// A record cut short by a crash is dropped on start; the rest of the chain is intact.
#[tokio::test]
async fn torn_tail_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let devnet = start(dir.path());
    let d = devnet.deployment();
    let a = devnet.accounts().to_vec();
    send(
        &*devnet,
        a[1].address,
        d.token,
        Token::transferCall {
            to: a[2].address,
            value: U256::from(99),
        }
        .abi_encode(),
    )
    .await;
    let block = devnet.block_number().await.unwrap();
    drop(devnet);

    let journal = dir.path().join("devnet.journal");
    let mut bytes = std::fs::read(&journal).unwrap();
    // Half a record: a length promising more than follows.
    bytes.extend_from_slice(&[200, 0, 0, 0, 1, 2, 3, 4, 9, 9]);
    std::fs::write(&journal, &bytes).unwrap();

    let devnet = start(dir.path());
    assert_eq!(devnet.block_number().await.unwrap(), block);
    assert_eq!(
        token_balance(&*devnet, d.token, a[2].address).await,
        tollgate_devnet::DEV_TOKENS + U256::from(99)
    );
    assert!(
        std::fs::metadata(&journal).unwrap().len() < bytes.len() as u64,
        "the torn tail was truncated"
    );
}

/// A state directory made for another chain id is refused with a clear error.
#[tokio::test]
async fn foreign_journal_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(start(dir.path()));
    let err = Devnet::start(DevnetConfig {
        chain_id: 84532,
        state_dir: Some(dir.path().to_owned()),
        ..Default::default()
    })
    .unwrap_err();
    assert!(matches!(err, Error::JournalMismatch(_)), "{err}");
    assert!(err.to_string().contains("31337"), "{err}");
}

/// Concurrent sends from one key never collide: every one is mined with a distinct nonce.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_from_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let devnet = start(dir.path());
    let d = devnet.deployment();
    let a = devnet.accounts().to_vec();
    let nonce = devnet.nonce(a[1].address).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..64u64 {
        let devnet = devnet.clone();
        let (from, to) = (a[1].address, a[2].address);
        tasks.push(tokio::spawn(async move {
            let data = Token::transferCall {
                to,
                value: U256::from(i + 1),
            }
            .abi_encode();
            devnet
                .send_and_wait(TxRequest::call(from, d.token, data), WaitOptions::default())
                .await
        }));
    }
    for t in tasks {
        assert!(t.await.unwrap().unwrap().receipt().unwrap().success);
    }
    assert_eq!(devnet.nonce(a[1].address).await.unwrap(), nonce + 64);
    assert_eq!(
        token_balance(&*devnet, d.token, a[2].address).await,
        tollgate_devnet::DEV_TOKENS + U256::from(64 * 65 / 2)
    );
}

/// A call that would revert is refused before broadcast with the decoded custom error.
#[tokio::test]
async fn reverts_are_typed() {
    let dir = tempfile::tempdir().unwrap();
    let devnet = start(dir.path());
    let d = devnet.deployment();
    let a = devnet.accounts().to_vec();
    let too_much = tollgate_devnet::DEV_TOKENS + U256::from(1);
    let err = devnet
        .send(TxRequest::call(
            a[1].address,
            d.token,
            Token::transferCall {
                to: a[2].address,
                value: too_much,
            }
            .abi_encode(),
        ))
        .await
        .unwrap_err();
    match err {
        Error::Revert(tollgate_chain::Revert::InsufficientFunds {
            account, needed, ..
        }) => {
            assert_eq!(account, a[1].address);
            assert_eq!(needed, too_much);
        }
        other => panic!("expected InsufficientFunds, got {other}"),
    }
    // Nothing was mined, and the sender's nonce is untouched.
    assert_eq!(devnet.block_number().await.unwrap(), 0);
    // A key the devnet does not hold cannot send.
    let stranger = Address::repeat_byte(0x42);
    assert!(matches!(
        devnet.send(TxRequest::call(stranger, d.token, vec![])).await,
        Err(Error::UnknownSigner(s)) if s == stranger
    ));
    // Garbage raw transactions are typed errors, not panics.
    assert!(matches!(
        devnet.send_raw(&[0x02, 0xff, 0x00]),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(devnet.send_raw(&[]), Err(Error::InvalidInput(_))));
}

/// `eth_sendRawTransaction` semantics in process: legacy (EIP-155), EIP-2930 and EIP-1559
/// envelopes are accepted and executed; a foreign chain id is refused; a future nonce waits in the
/// pool until the gap is filled; a repeated transaction is idempotent.
#[tokio::test]
async fn raw_transactions_of_every_supported_type() {
    use alloy::{
        consensus::{SignableTransaction, TxEip1559, TxEip2930, TxEnvelope, TxLegacy},
        eips::Encodable2718,
        network::TxSignerSync,
        primitives::TxKind,
    };

    let dir = tempfile::tempdir().unwrap();
    let devnet = start(dir.path());
    let d = devnet.deployment();
    let a = devnet.accounts().to_vec();
    let signer = a[5].signer();
    let to = Address::repeat_byte(0x55);
    let input: alloy::primitives::Bytes = Token::transferCall {
        to,
        value: U256::from(10),
    }
    .abi_encode()
    .into();
    let gas_price = 2 * u128::from(tollgate_devnet::BASE_FEE);
    let chain_id = devnet.chain_id();

    let legacy = |nonce, chain_id| {
        let mut tx = TxLegacy {
            chain_id: Some(chain_id),
            nonce,
            gas_price,
            gas_limit: 100_000,
            to: TxKind::Call(d.token),
            value: U256::ZERO,
            input: input.clone(),
        };
        let sig = signer.sign_transaction_sync(&mut tx).unwrap();
        TxEnvelope::from(tx.into_signed(sig)).encoded_2718()
    };
    let eip2930 = |nonce| {
        let mut tx = TxEip2930 {
            chain_id,
            nonce,
            gas_price,
            gas_limit: 100_000,
            to: TxKind::Call(d.token),
            value: U256::ZERO,
            input: input.clone(),
            access_list: Default::default(),
        };
        let sig = signer.sign_transaction_sync(&mut tx).unwrap();
        TxEnvelope::from(tx.into_signed(sig)).encoded_2718()
    };
    let eip1559 = |nonce| {
        let mut tx = TxEip1559 {
            chain_id,
            nonce,
            gas_limit: 100_000,
            max_fee_per_gas: gas_price,
            max_priority_fee_per_gas: 0,
            to: TxKind::Call(d.token),
            value: U256::ZERO,
            input: input.clone(),
            access_list: Default::default(),
        };
        let sig = signer.sign_transaction_sync(&mut tx).unwrap();
        TxEnvelope::from(tx.into_signed(sig)).encoded_2718()
    };

    let n = devnet.nonce(a[5].address).await.unwrap();
    // Wrong chain id: refused, nothing executed.
    assert!(
        matches!(devnet.send_raw(&legacy(n, 1)), Err(Error::Rejected(m)) if m.contains("chain id"))
    );
    // Out of order: n+2 and n+1 wait for n.
    let h2 = devnet.send_raw(&eip1559(n + 2)).unwrap();
    let h1 = devnet.send_raw(&eip2930(n + 1)).unwrap();
    assert!(
        devnet.receipt(h1).await.unwrap().is_none(),
        "a gapped transaction is not mined"
    );
    let h0 = devnet.send_raw(&legacy(n, chain_id)).unwrap();
    assert_eq!(
        devnet.send_raw(&legacy(n, chain_id)).unwrap(),
        h0,
        "resubmission is idempotent"
    );
    for h in [h0, h1, h2] {
        let c = devnet.wait(h, WaitOptions::default()).await.unwrap();
        assert!(c.receipt().expect("mined").success);
    }
    assert_eq!(devnet.nonce(a[5].address).await.unwrap(), n + 3);
    assert_eq!(token_balance(&*devnet, d.token, to).await, U256::from(30));
    // Stale nonce.
    assert!(
        matches!(devnet.send_raw(&eip1559(n)), Err(Error::Rejected(m)) if m.contains("nonce too low"))
    );
}
