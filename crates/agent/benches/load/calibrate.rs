//! `--devnet-only`: how much memory the in-process devnet itself keeps per settlement (its
//! blocks, transactions, receipts and state stay in memory, as a node's history stays on its
//! disk), to tell the chain's growth apart from the gate's, the facilitator's and the agents'.
//!
//! N `transferWithAuthorization` transactions (the token transfer under every router
//! settlement, with fewer logs than a router settlement) from the same payers, sent by the same
//! relayers at concurrency 64 straight to the devnet, each waited for as the facilitator does.

use std::{sync::Arc, time::Duration};

use alloy::{
    primitives::{Address, B256, U256},
    sol_types::SolCall as _,
};
use tollgate_chain::{
    Chain, TxRequest, WaitOptions,
    authorization::{TransferWithAuthorization, sign, token_domain},
    contracts::Token,
};
use tollgate_devnet::{Devnet, DevnetConfig};

use crate::{mib, proc_status_kib};

const TASKS: usize = 64;

pub async fn devnet_only(n: usize) {
    let dir = tempfile::tempdir().expect("temp dir");
    let before = proc_status_kib("VmRSS:");
    let devnet = Devnet::start(DevnetConfig {
        state_dir: Some(dir.path().join("devnet")),
        accounts: 18,
        ..DevnetConfig::default()
    })
    .expect("devnet");
    let started = proc_status_kib("VmRSS:");
    let d = devnet.deployment();
    let domain = token_domain("USD Coin", "2", devnet.chain_id(), d.token);
    let accounts = Arc::new(devnet.accounts().to_vec());
    let payee = Address::repeat_byte(0xee);
    let t0 = std::time::Instant::now();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let devnet = Arc::clone(&devnet);
        let accounts = Arc::clone(&accounts);
        let domain = domain.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = t;
            while i < n {
                let payer = accounts[10 + i % 8].signer();
                let relayer = accounts[1 + i % 4].address;
                let auth = TransferWithAuthorization {
                    from: payer.address(),
                    to: payee,
                    value: U256::from(499_000),
                    validAfter: U256::ZERO,
                    validBefore: U256::from(u64::MAX),
                    nonce: B256::from(U256::from(i as u64 + 1)),
                };
                let signature = sign(&payer, &auth, &domain).expect("sign");
                let call = Token::transferWithAuthorization_0Call {
                    from: auth.from,
                    to: auth.to,
                    value: auth.value,
                    validAfter: auth.validAfter,
                    validBefore: auth.validBefore,
                    nonce: auth.nonce,
                    signature,
                };
                let tx = TxRequest {
                    gas: Some(120_000),
                    ..TxRequest::call(relayer, d.token, call.abi_encode())
                };
                let hash = devnet.send(tx).await.expect("send");
                let done = devnet
                    .wait(
                        hash,
                        WaitOptions {
                            confirmations: 1,
                            timeout: Duration::from_secs(60),
                        },
                    )
                    .await
                    .expect("wait");
                assert!(done.receipt().is_some_and(|r| r.success), "reverted");
                i += TASKS;
            }
        }));
    }
    for t in tasks {
        t.await.expect("task");
    }
    let secs = t0.elapsed().as_secs_f64();
    let after = proc_status_kib("VmRSS:");
    let hwm = proc_status_kib("VmHWM:");
    println!("devnet alone: {n} transferWithAuthorization settlements in {secs:.2} s");
    println!(
        "  RSS before / after start / after: {:.0} / {:.0} / {:.0} MiB (VmHWM {:.0} MiB)",
        mib(before),
        mib(started),
        mib(after),
        mib(hwm)
    );
    println!(
        "  growth per settlement: {:.2} KiB",
        after.saturating_sub(started) as f64 / n.max(1) as f64
    );
}
