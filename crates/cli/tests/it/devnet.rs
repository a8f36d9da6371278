//! `tollgate devnet` as a process: JSON-RPC, devnet.json, and durability across SIGKILL.

use std::{
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use alloy::{
    primitives::{Address, U256},
    sol_types::SolCall,
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    process::{Child, Command},
};
use tollgate_chain::{
    Chain, TxRequest, WaitOptions,
    accounts::dev_accounts,
    contracts::{self, Token},
};
use tollgate_devnet::{DEV_TOKENS, DevnetInfo};

pub(crate) struct Running {
    pub(crate) child: Child,
    pub(crate) info: DevnetInfo,
}

pub(crate) async fn spawn_devnet(dir: &Path, extra: &[&str]) -> Running {
    let summary = dir.join("devnet.json");
    let _ = std::fs::remove_file(&summary);
    let child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["devnet", "--port", "0", "--state-dir"])
        .arg(dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn tollgate devnet");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(bytes) = std::fs::read(&summary)
            && let Ok(info) = serde_json::from_slice::<DevnetInfo>(&bytes)
        {
            return Running { child, info };
        }
        assert!(
            Instant::now() < deadline,
            "tollgate devnet did not write devnet.json"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn raw_post(url: &str, body: &str) -> String {
    let addr = url.trim_start_matches("http://");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

/// devnet.json carries what the issue lists, and the listener answers standard and malformed
/// JSON-RPC alike without dying.
#[tokio::test]
async fn devnet_json_and_malformed_rpc() {
    let dir = tempfile::tempdir().unwrap();
    let run = spawn_devnet(
        dir.path(),
        &["--network", "base-sepolia", "--chain-id", "84532"],
    )
    .await;
    let raw: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("devnet.json")).unwrap()).unwrap();
    assert_eq!(raw["chainId"], 84532);
    assert_eq!(raw["network"], "base-sepolia");
    for key in ["token", "router", "subscriptions"] {
        assert!(
            raw["contracts"][key].as_str().unwrap().starts_with("0x"),
            "{key}"
        );
    }
    assert_eq!(raw["accounts"].as_array().unwrap().len(), 10);
    assert!(raw["accounts"][0]["privateKey"].as_str().unwrap().len() == 66);
    let url = run.info.rpc_url.clone().unwrap();

    let ok = raw_post(&url, r#"{"jsonrpc":"2.0","id":7,"method":"eth_chainId"}"#).await;
    assert!(ok.contains(r#""result":"0x14a34""#), "{ok}");
    for (body, code) in [
        ("{not json", "-32700"),
        ("[]", "-32600"),
        ("42", "-32600"),
        (r#"{"jsonrpc":"2.0","id":1}"#, "-32600"),
        (r#"{"jsonrpc":"2.0","id":1,"method":"eth_nope"}"#, "-32601"),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x12"]}"#,
            "-32602",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_sendRawTransaction","params":["0xdeadbeef"]}"#,
            "-32602",
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":"x"}"#,
            "-32602",
        ),
    ] {
        let reply = raw_post(&url, body).await;
        assert!(reply.starts_with("HTTP/1.1 200"), "{body}: {reply}");
        assert!(reply.contains(code), "{body} should give {code}: {reply}");
    }
    // A batch mixes results and errors, in order.
    let batch = raw_post(&url, r#"[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"},{"jsonrpc":"2.0","id":2,"method":"nope"}]"#).await;
    assert!(
        batch.contains(r#""id":1"#) && batch.contains("-32601"),
        "{batch}"
    );
    // Still alive.
    assert!(
        raw_post(&url, r#"{"jsonrpc":"2.0","id":1,"method":"net_version"}"#)
            .await
            .contains("84532")
    );
}

/// Every transaction whose receipt a client saw survives a SIGKILL of the process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_transactions_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut run = spawn_devnet(dir.path(), &[]).await;
    let accounts = dev_accounts(10);
    let url = run.info.rpc_url.clone().unwrap();
    let chain = std::sync::Arc::new(
        tollgate_testkit::connect(&url, 31337, &accounts)
            .await
            .unwrap(),
    );
    let token = run.info.contracts.token;
    let to = Address::repeat_byte(0x77);
    let mut tasks = Vec::new();
    for i in 0..40u64 {
        let chain = chain.clone();
        let from = accounts[1 + (i as usize % 3)].address;
        tasks.push(tokio::spawn(async move {
            let data = Token::transferCall {
                to,
                value: U256::from(1_000 + i),
            }
            .abi_encode();
            chain
                .send_and_wait(TxRequest::call(from, token, data), WaitOptions::default())
                .await
                .unwrap()
        }));
    }
    let mut hashes = Vec::new();
    for t in tasks {
        hashes.push(t.await.unwrap().receipt().expect("confirmed").tx_hash);
    }
    run.child.start_kill().unwrap();
    run.child.wait().await.unwrap();

    let run = spawn_devnet(dir.path(), &[]).await;
    let url = run.info.rpc_url.clone().unwrap();
    let chain = tollgate_testkit::connect(&url, 31337, &accounts)
        .await
        .unwrap();
    for h in &hashes {
        let r = chain
            .receipt(*h)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("receipt {h} lost by the crash"));
        assert!(r.success);
    }
    let expected: u64 = (0..40).map(|i| 1_000 + i).sum();
    let balance = contracts::read(&chain, token, &Token::balanceOfCall { account: to })
        .await
        .unwrap();
    assert_eq!(balance, U256::from(expected));
    let sender_balance = contracts::read(
        &chain,
        token,
        &Token::balanceOfCall {
            account: accounts[1].address,
        },
    )
    .await
    .unwrap();
    assert!(sender_balance < DEV_TOKENS);
}
