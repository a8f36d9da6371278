//! [`RpcChain`] against anvil and against the devnet's JSON-RPC server, with the contracts deployed
//! as the testkit's fixtures deploy them.

use std::{sync::Arc, time::Duration};

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::{SolCall, SolEvent},
};
use tollgate_chain::{
    Chain, Confirmation, Error, LogFilter, Revert, TxRequest, WaitOptions, Wallet,
    contracts::{Token, deployment_addresses, read},
    rpc::{RpcChain, RpcOptions},
};
use tollgate_devnet::DEV_TOKENS;
use tollgate_testkit::{Anvil, Backend, Fixture};

fn transfer(from: Address, token: Address, to: Address, amount: u64) -> TxRequest {
    TxRequest::call(
        from,
        token,
        Token::transferCall {
            to,
            value: U256::from(amount),
        }
        .abi_encode(),
    )
}

async fn token_balance(chain: &dyn Chain, token: Address, account: Address) -> U256 {
    read(chain, token, &Token::balanceOfCall { account })
        .await
        .expect("balanceOf")
}

/// The checks every RPC backend must pass.
async fn smoke(backend: Backend) {
    let fx = Fixture::new(backend).await.expect("fixture");
    let chain = fx.chain.as_ref();
    let token = fx.deployment.token;
    let [a0, a1, a2, a3] = [0, 1, 2, 3].map(|i| fx.accounts[i].address);

    // Same genesis as the embedded devnet: same deployer, addresses and balances.
    assert_eq!(fx.deployment, deployment_addresses(a0, 0), "{backend:?}");
    for a in &fx.accounts {
        assert_eq!(
            token_balance(chain, token, a.address).await,
            DEV_TOKENS,
            "{backend:?}"
        );
    }
    assert!(!chain.code(token).await.unwrap().is_empty());
    let mut signers = fx.accounts.iter().map(|a| a.address).collect::<Vec<_>>();
    signers.sort();
    assert_eq!(chain.signers(), signers);

    // A transfer, its receipt and its Transfer log.
    let confirmation = chain
        .send_and_wait(transfer(a1, token, a2, 1_500_000), WaitOptions::default())
        .await
        .expect("transfer");
    let receipt = confirmation.receipt().expect("confirmed").clone();
    assert!(receipt.success);
    assert_eq!((receipt.from, receipt.to), (a1, Some(token)));
    assert!(receipt.gas_used > 21_000 && receipt.effective_gas_price > 0);
    assert!(receipt.block_timestamp > 0);
    let log = receipt
        .logs
        .iter()
        .find(|l| l.address == token)
        .expect("a token log");
    let event = Token::Transfer::decode_log(log).expect("a Transfer log");
    assert_eq!(
        (event.from, event.to, event.value),
        (a1, a2, U256::from(1_500_000))
    );
    assert_eq!(
        token_balance(chain, token, a1).await,
        DEV_TOKENS - U256::from(1_500_000)
    );
    assert_eq!(
        token_balance(chain, token, a2).await,
        DEV_TOKENS + U256::from(1_500_000)
    );
    assert_eq!(
        chain.receipt(receipt.tx_hash).await.unwrap(),
        Some(receipt.clone())
    );

    // The same log through eth_getLogs.
    let filter = LogFilter {
        from_block: receipt.block_number,
        to_block: Some(receipt.block_number),
        addresses: vec![token],
        topics: [
            Some(vec![Token::Transfer::SIGNATURE_HASH]),
            None,
            None,
            None,
        ],
    };
    let logs = chain.logs(&filter).await.unwrap();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_eq!(
        (logs[0].tx_hash, logs[0].block_number),
        (receipt.tx_hash, receipt.block_number)
    );
    assert_eq!(&logs[0].log, log);

    // A transfer beyond the balance is refused before broadcast, with the decoded custom error.
    let nonce_before = chain.nonce(a3).await.unwrap();
    let too_much = DEV_TOKENS.to::<u64>() + 1;
    match chain.send(transfer(a3, token, a2, too_much)).await {
        Err(Error::Revert(Revert::InsufficientFunds {
            account,
            balance,
            needed,
        })) => {
            assert_eq!(
                (account, balance, needed),
                (a3, DEV_TOKENS, U256::from(too_much))
            );
        }
        other => panic!("{backend:?}: expected InsufficientFunds, got {other:?}"),
    }
    assert_eq!(
        chain.nonce(a3).await.unwrap(),
        nonce_before,
        "nothing was broadcast"
    );
    let call = Token::transferCall {
        to: a2,
        value: U256::from(too_much),
    }
    .abi_encode();
    assert!(matches!(
        chain.call(Some(a3), token, call.into()).await,
        Err(Error::Revert(Revert::InsufficientFunds { .. }))
    ));

    // Unknown signer.
    assert!(matches!(
        chain
            .send(transfer(Address::repeat_byte(7), token, a2, 1))
            .await,
        Err(Error::UnknownSigner(_))
    ));

    // A wait for a transaction the node never saw: Pending, never an error.
    let fake = B256::repeat_byte(0xab);
    for timeout in [Duration::ZERO, Duration::from_millis(120)] {
        let pending = chain
            .wait(
                fake,
                WaitOptions {
                    confirmations: 1,
                    timeout,
                },
            )
            .await
            .unwrap();
        assert_eq!(
            pending,
            Confirmation::Pending { tx_hash: fake },
            "{backend:?} {timeout:?}"
        );
    }
    assert_eq!(chain.receipt(fake).await.unwrap(), None);

    // Time travel moves the chain's clock by at least the amount, and mines.
    let (t0, n0) = (
        chain.timestamp().await.unwrap(),
        chain.block_number().await.unwrap(),
    );
    chain.advance_time(3_600).await.unwrap();
    assert!(chain.timestamp().await.unwrap() >= t0 + 3_600);
    assert!(chain.block_number().await.unwrap() > n0);
}

#[tokio::test]
async fn anvil_smoke() {
    smoke(Backend::Anvil).await;
}

#[tokio::test]
async fn devnet_rpc_smoke() {
    smoke(Backend::DevnetRpc).await;
}

/// Concurrent sends from one key get consecutive nonces and all mine.
async fn concurrent_sends(backend: Backend) {
    const SENDS: usize = 20;
    let fx = Fixture::new(backend).await.expect("fixture");
    let token = fx.deployment.token;
    let (from, to) = (fx.accounts[4].address, fx.accounts[5].address);
    let start = fx.chain.nonce(from).await.unwrap();
    let tasks: Vec<_> = (0..SENDS)
        .map(|i| {
            let chain = Arc::clone(&fx.chain);
            tokio::spawn(async move {
                chain
                    .send_and_wait(
                        transfer(from, token, to, 1 + i as u64),
                        WaitOptions::default(),
                    )
                    .await
            })
        })
        .collect();
    let mut hashes = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(Confirmation::Confirmed(r)) => {
                assert!(r.success);
                hashes.push(r.tx_hash);
            }
            other => panic!("{backend:?}: {other:?}"),
        }
    }
    hashes.sort();
    hashes.dedup();
    assert_eq!(hashes.len(), SENDS);
    assert_eq!(fx.chain.nonce(from).await.unwrap(), start + SENDS as u64);
    let sent: u64 = (1..=SENDS as u64).sum();
    assert_eq!(
        token_balance(fx.chain.as_ref(), token, to).await,
        DEV_TOKENS + U256::from(sent)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anvil_concurrent_sends_from_one_key() {
    concurrent_sends(Backend::Anvil).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devnet_rpc_concurrent_sends_from_one_key() {
    concurrent_sends(Backend::DevnetRpc).await;
}

#[tokio::test]
async fn anvil_nonce_cache_recovers_from_outside_sends() {
    let fx = Fixture::new(Backend::Anvil).await.expect("fixture");
    let token = fx.deployment.token;
    let (from, to) = (fx.accounts[6].address, fx.accounts[7].address);
    fx.chain
        .send_and_wait(transfer(from, token, to, 1), WaitOptions::default())
        .await
        .unwrap();
    // A second client with the same key moves the nonce behind the first one's cache.
    let other = tollgate_testkit::connect(fx.rpc_url().unwrap(), 31337, &fx.accounts)
        .await
        .unwrap();
    other
        .send_and_wait(transfer(from, token, to, 2), WaitOptions::default())
        .await
        .unwrap();
    // The first client's cached nonce is now too low: it re-reads the nonce and retries.
    let c = fx
        .chain
        .send_and_wait(transfer(from, token, to, 3), WaitOptions::default())
        .await
        .unwrap();
    assert!(c.receipt().unwrap().success);
    assert_eq!(
        token_balance(fx.chain.as_ref(), token, to).await,
        DEV_TOKENS + U256::from(6)
    );
}

#[tokio::test]
async fn anvil_confirmation_depth() {
    let fx = Fixture::new(Backend::Anvil).await.expect("fixture");
    let token = fx.deployment.token;
    let (from, to) = (fx.accounts[8].address, fx.accounts[9].address);
    let hash = fx.chain.send(transfer(from, token, to, 1)).await.unwrap();
    // anvil automines: included at once, but no block on top of it yet.
    let shallow = WaitOptions {
        confirmations: 2,
        timeout: Duration::from_millis(300),
    };
    assert_eq!(
        fx.chain.wait(hash, shallow).await.unwrap(),
        Confirmation::Pending { tx_hash: hash }
    );
    // One more block gives the second confirmation.
    let chain = Arc::clone(&fx.chain);
    let waiter = tokio::spawn(async move {
        chain
            .wait(
                hash,
                WaitOptions {
                    confirmations: 2,
                    timeout: Duration::from_secs(10),
                },
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    fx.chain.advance_time(1).await.unwrap();
    let receipt = waiter.await.unwrap().unwrap();
    assert_eq!(receipt.receipt().map(|r| r.tx_hash), Some(hash));
}

#[tokio::test]
async fn wrong_chain_id_is_rejected() {
    let anvil = Anvil::spawn_with(4242).await.expect("anvil");
    let options = RpcOptions {
        chain_id: Some(8453),
        ..RpcOptions::default()
    };
    let err = RpcChain::connect(anvil.url(), Wallet::default(), options)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Rejected(m) if m.contains("4242") && m.contains("8453")),
        "{err}"
    );
    let ok = RpcChain::connect(anvil.url(), Wallet::default(), RpcOptions::default())
        .await
        .unwrap();
    assert_eq!(ok.chain_id(), 4242);
}

#[tokio::test]
async fn anvil_is_killed_on_drop() {
    let anvil = Anvil::spawn().await.expect("anvil");
    let url = anvil.url().to_owned();
    drop(anvil);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let options = RpcOptions {
        request_timeout: Duration::from_secs(1),
        ..RpcOptions::default()
    };
    let err = RpcChain::connect(&url, Wallet::default(), options)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable(_)), "{err}");
}

#[tokio::test]
async fn devnet_fixture_matches() {
    let fx = Fixture::new(Backend::Devnet).await.expect("fixture");
    assert_eq!(
        fx.deployment,
        deployment_addresses(fx.accounts[0].address, 0)
    );
    let balance = token_balance(
        fx.chain.as_ref(),
        fx.deployment.token,
        fx.accounts[9].address,
    )
    .await;
    assert_eq!(balance, DEV_TOKENS);
}

/// `eth_call`s made at once go to the node in fewer HTTP requests (JSON-RPC batches), and each
/// caller still gets its own answer: a balance, or the revert of its own call.
async fn concurrent_calls_share_requests(backend: Backend) {
    let fx = Fixture::new(backend).await.expect("fixture");
    let url = fx.rpc_url().expect("an RPC backend");
    let chain = Arc::new(
        tollgate_testkit::connect(url, fx.chain.chain_id(), &fx.accounts)
            .await
            .unwrap(),
    );
    let token = fx.deployment.token;
    let [rich, poor] = [fx.accounts[1].address, Address::repeat_byte(0x99)];
    let (calls, posts) = (chain.calls(), chain.http_requests());
    // Every task waits until all 120 are running before it calls: spawned one after another on
    // a loaded machine, they could otherwise each find the node's answer to the last already
    // back, and nothing to batch with.
    let start = Arc::new(tokio::sync::Barrier::new(120));
    let tasks: Vec<_> = (0..120u64)
        .map(|i| {
            let (chain, start) = (Arc::clone(&chain), Arc::clone(&start));
            tokio::spawn(async move {
                start.wait().await;
                if i % 3 == 0 {
                    // A transfer that cannot go through: the token's revert, for this call only.
                    let call = Token::transferCall {
                        to: rich,
                        value: U256::from(1 + i),
                    };
                    let reverted = chain
                        .call(Some(poor), token, call.abi_encode().into())
                        .await;
                    assert!(matches!(reverted, Err(Error::Revert(_))), "{reverted:?}");
                } else {
                    let account = if i % 3 == 1 { rich } else { poor };
                    let expected = if account == rich {
                        DEV_TOKENS
                    } else {
                        U256::ZERO
                    };
                    assert_eq!(token_balance(&*chain, token, account).await, expected);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let sent = chain.calls()["eth_call"] - calls.get("eth_call").copied().unwrap_or(0);
    let posted = chain.http_requests() - posts;
    assert_eq!(sent, 120, "each call counted");
    assert!(
        posted < 120,
        "{posted} HTTP requests for 120 calls made at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anvil_concurrent_calls_share_requests() {
    concurrent_calls_share_requests(Backend::Anvil).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devnet_rpc_concurrent_calls_share_requests() {
    concurrent_calls_share_requests(Backend::DevnetRpc).await;
}
