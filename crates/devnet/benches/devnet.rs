//! Devnet throughput: `transferWithAuthorization` settlements per second through the embedded
//! devnet in process (journal on, fsynced), and signature recoveries per second.
//!
//! ```text
//! cargo bench -p tollgate-devnet --bench devnet                # defaults: 20,000 settlements, 64 clients
//! cargo bench -p tollgate-devnet --bench devnet -- 50000 128   # settlements, concurrent clients
//! ```
//!
//! Each client task sends one relayer-signed transaction per pre-signed authorization (the relayer
//! is one of the ten dev accounts, a libsecp256k1 signer) and waits until its receipt is durable,
//! as a facilitator does. The payers' EIP-3009 signatures are made before the clock starts: they
//! are the clients' work, not the chain's.
#![allow(missing_docs, clippy::print_stdout, clippy::print_stderr)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use alloy::{
    primitives::{B256, Bytes, U256},
    sol_types::SolCall,
};
use tollgate_chain::{
    Chain, TxRequest, WaitOptions,
    authorization::{TransferWithAuthorization, recover, sign, token_domain},
    contracts::Token,
};
use tollgate_devnet::{Devnet, DevnetConfig};

struct Signed {
    auth: TransferWithAuthorization,
    signature: Bytes,
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let total: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let clients: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(64);

    let dir = tempfile::tempdir().expect("tempdir");
    let devnet = Devnet::start(DevnetConfig {
        state_dir: Some(dir.path().to_owned()),
        ..Default::default()
    })
    .expect("devnet");
    let d = devnet.deployment();
    let accounts = devnet.accounts().to_vec();
    let domain = token_domain("USD Coin", "2", devnet.config().chain_id, d.token);

    eprintln!("signing {total} authorizations (not timed)...");
    let started = Instant::now();
    let payers: Vec<_> = accounts.iter().map(|a| a.signer()).collect();
    let payee = alloy::primitives::Address::repeat_byte(0xee);
    let signed: Vec<Signed> = (0..total)
        .map(|i| {
            let payer = &payers[i % payers.len()];
            let auth = TransferWithAuthorization {
                from: payer.address(),
                to: payee,
                value: U256::from(1),
                validAfter: U256::ZERO,
                validBefore: U256::from(u64::MAX),
                nonce: B256::from(U256::from(i as u64 + 1)),
            };
            let signature = sign(payer, &auth, &domain).expect("sign");
            Signed { auth, signature }
        })
        .collect();
    let sign_rate = total as f64 / started.elapsed().as_secs_f64();

    // Signature recoveries per second (EIP-712 digest + ecrecover with libsecp256k1).
    let started = Instant::now();
    let mut recovered = 0usize;
    for s in &signed {
        if recover(&s.auth, &domain, &s.signature).expect("recover") == s.auth.from {
            recovered += 1;
        }
    }
    assert_eq!(recovered, total);
    let recover_rate = total as f64 / started.elapsed().as_secs_f64();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let signed = Arc::new(signed);
    let (elapsed, gas) = runtime.block_on(async {
        let started = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..clients {
            let devnet = devnet.clone();
            let signed = signed.clone();
            let relayer = accounts[c % accounts.len()].address;
            tasks.push(tokio::spawn(async move {
                let mut gas = 0u64;
                let mut i = c;
                while i < signed.len() {
                    let s = &signed[i];
                    let a = &s.auth;
                    let call = Token::transferWithAuthorization_0Call {
                        from: a.from,
                        to: a.to,
                        value: a.value,
                        validAfter: a.validAfter,
                        validBefore: a.validBefore,
                        nonce: a.nonce,
                        signature: s.signature.clone(),
                    };
                    let tx = TxRequest {
                        gas: Some(120_000),
                        ..TxRequest::call(relayer, d.token, call.abi_encode())
                    };
                    let hash = devnet.send(tx).await.expect("send");
                    let confirmed = devnet
                        .wait(
                            hash,
                            WaitOptions {
                                confirmations: 1,
                                timeout: Duration::from_secs(60),
                            },
                        )
                        .await
                        .expect("wait");
                    let receipt = confirmed.receipt().expect("confirmed");
                    assert!(receipt.success, "settlement {i} reverted");
                    gas += receipt.gas_used;
                    i += clients;
                }
                gas
            }));
        }
        let mut gas = 0;
        for t in tasks {
            gas += t.await.expect("task");
        }
        (started.elapsed(), gas)
    });
    let balance = runtime
        .block_on(tollgate_chain::contracts::read(
            &*devnet,
            d.token,
            &Token::balanceOfCall { account: payee },
        ))
        .expect("balance");
    assert_eq!(
        balance,
        U256::from(total),
        "every settlement moved exactly one unit"
    );
    let journal = std::fs::metadata(dir.path().join("devnet.journal"))
        .map(|m| m.len())
        .unwrap_or(0);

    println!("devnet bench ({total} settlements, {clients} concurrent clients, journal fsynced)");
    println!(
        "  transferWithAuthorization settlements/s : {:>10.0}",
        total as f64 / elapsed.as_secs_f64()
    );
    println!(
        "  mean latency per settlement (ms)        : {:>10.3}",
        elapsed.as_secs_f64() * 1e3 * clients as f64 / total as f64
    );
    println!(
        "  gas per settlement                      : {:>10}",
        gas / total as u64
    );
    println!(
        "  journal bytes per settlement            : {:>10}",
        journal / total as u64
    );
    println!(
        "  EIP-712 signature recoveries/s (1 core) : {:>10.0}",
        recover_rate
    );
    println!(
        "  EIP-712 signatures/s (1 core)           : {:>10.0}",
        sign_rate
    );
}
