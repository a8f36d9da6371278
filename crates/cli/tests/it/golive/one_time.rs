//! The chapter's block run verbatim: deploy, check, serve, and one-time payments by `tollgate pay`,
//! unmodified x402 clients from npm and the npm package's README agent example, with the gas
//! measured against the chapter's figures.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_go_live_on_base_sepolia_deploys_serves_and_is_paid_in_usdc() {
    let Deployed {
        net,
        chain,
        node,
        rpc_url: _,
        dir,
        mut w,
        hits,
        deployer,
        relayer,
        payer,
        pay_to,
        plan,
        gw,
        nonce0,
        estimate,
        deploy_gas,
    } = deploy_and_check().await;
    let usdc_balance = |who: Address| {
        let chain = Arc::clone(&chain);
        async move { usdc_of(&*chain, who).await }
    };
    // Served: the facilitator, the gateway in front of the API.
    w.spawn(
        "tollgate facilitator --config facilitator.toml",
        "facilitator",
    );
    w.run("cat > gateway.toml").await.ok();
    w.spawn("tollgate gateway --config gateway.toml", "gateway");
    let offer = w
        .run_until(
            "curl -si http://$GW/v1/quote",
            Duration::from_secs(60),
            |o| o.code == 0 && o.stdout.starts_with("HTTP/1.1 402"),
            |o| o.code == 7, // not listening yet
        )
        .await;
    assert!(
        offer
            .stdout
            .to_lowercase()
            .contains(&USDC_BASE_SEPOLIA.to_string().to_lowercase()),
        "the 402 asks for USDC: {}",
        offer.stdout
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);

    // Paid: the payer's USDC to the payee, less the fee to the fee recipient; no gas paid by
    // either.
    let (payer0, payee0, fees0) = (
        usdc_balance(payer.address).await,
        usdc_balance(pay_to).await,
        usdc_balance(deployer.address).await,
    );
    assert_eq!(payee0, U256::ZERO);
    let payer_eth = chain.balance(payer.address).await.unwrap();
    let relayer_block = node.block_number().await;
    let relayer_nonce = chain.nonce(relayer.address).await.unwrap();
    let paid = w.run("tollgate pay http://$GW/v1/quote").await;
    assert_eq!(paid.code, 0, "{paid:?}\n{}", w.logs());
    assert!(
        paid.stdout.contains(r#"{"served":"/v1/quote"}"#),
        "{paid:?}"
    );
    assert!(paid.stderr.contains("paid 0.100000"), "{}", paid.stderr);
    w.done();
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(
        usdc_balance(payer.address).await,
        payer0 - U256::from(PRICE),
        "the payer paid the price"
    );
    assert_eq!(
        usdc_balance(pay_to).await,
        U256::from(PRICE - FEE),
        "the payee got the price less the fee"
    );
    assert_eq!(
        usdc_balance(deployer.address).await,
        fees0 + U256::from(FEE),
        "the fee recipient got the fee"
    );
    assert_eq!(chain.balance(payer.address).await.unwrap(), payer_eth);
    assert_eq!(chain.balance(pay_to).await.unwrap(), U256::ZERO);

    // What it cost: one relayer transaction, the router payment.
    assert_eq!(
        chain.nonce(relayer.address).await.unwrap(),
        relayer_nonce + 1,
        "one settlement"
    );
    let sent = node.gas_used_by(relayer.address, relayer_block).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].1, plan.router.address, "sent to the router");
    let payment_gas = sent[0].2;
    eprintln!(
        "gas: deployment estimate {estimate}, deployment used {deploy_gas}, router payment on \
         FiatToken v2.2 {payment_gas} ({})",
        sent[0].0
    );
    assert_about("takes the fee) uses", payment_gas);
    assert_about("deploying both contracts uses", deploy_gas);
    // What 0.01 ETH pays for at 0.01 gwei.
    assert_about(
        "0.01 ETH pays for",
        10_u64.pow(16) / (payment_gas * 10_u64.pow(7)),
    );

    // Unmodified x402 clients from npm pay the same gateway on FiatToken, V1 (`x402-fetch`) and
    // V2 (`@x402/fetch`): the full price to the payee (x402 takes no fee), one relayer
    // transaction each, `transferWithAuthorization` on USDC itself.
    let packages = ["x402", "x402-fetch", "viem", "@x402/fetch", "@x402/evm"];
    {
        let scripts = crate::interop::scripts_with(&packages);
        let url = format!("http://{gw}/v1/quote");
        let clients = [
            ("x402-fetch-pay.mjs", 3, vec![PRICE.to_string()]),
            ("x402v2-fetch-pay.mjs", 4, vec![]),
        ];
        for (script, who, extra) in clients {
            let client = net.accounts[who].clone();
            let (client0, payee0) = (
                usdc_balance(client.address).await,
                usdc_balance(pay_to).await,
            );
            let block = node.block_number().await;
            let nonce = chain.nonce(relayer.address).await.unwrap();
            let mut cmd = Command::new(tollgate_testkit::peer::node());
            cmd.arg(scripts.join(script))
                .arg(&url)
                .arg(client.private_key.to_string())
                .args(&extra)
                .stdin(Stdio::null())
                .kill_on_drop(true);
            let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
                .await
                .unwrap_or_else(|_| panic!("{script} timed out"))
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{script} failed: {}\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr),
                w.logs()
            );
            let line: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
            assert_eq!(line["status"], 200, "{script}: {line}");
            assert_eq!(line["body"]["served"], "/v1/quote", "{script}: {line}");
            assert_eq!(line["paymentResponse"]["success"], true, "{script}: {line}");
            assert_eq!(
                usdc_balance(client.address).await,
                client0 - U256::from(PRICE),
                "{script}: the client paid the price"
            );
            assert_eq!(
                usdc_balance(pay_to).await,
                payee0 + U256::from(PRICE),
                "{script}: the payee got all of it"
            );
            assert_eq!(chain.nonce(relayer.address).await.unwrap(), nonce + 1);
            let sent = node.gas_used_by(relayer.address, block).await;
            assert_eq!(sent.len(), 1, "{sent:?}");
            assert_eq!(
                sent[0].1, USDC_BASE_SEPOLIA,
                "{script}: sent to USDC itself"
            );
            eprintln!(
                "gas: x402 settlement ({script}) on FiatToken v2.2 {} ({})",
                sent[0].2, sent[0].0
            );
            assert_about("no fee) uses", sent[0].2);
        }
        assert_eq!(hits.load(Ordering::SeqCst), 3);

        // The project's npm package: its README's agent example, verbatim, pays the gateway
        // through the facilitator (the router, with the fee), as `tollgate pay` did.
        let client = net.accounts[5].clone();
        let (client0, payee0, fees0) = (
            usdc_balance(client.address).await,
            usdc_balance(pay_to).await,
            usdc_balance(deployer.address).await,
        );
        let block = node.block_number().await;
        let out = npm_agent_example(&url, &client.private_key.to_string()).await;
        assert!(out.starts_with("200 "), "{out}");
        assert!(out.contains("/v1/quote"), "{out}");
        assert!(out.contains(&format!("paid {PRICE} units, tx 0x")), "{out}");
        assert_eq!(
            usdc_balance(client.address).await,
            client0 - U256::from(PRICE)
        );
        assert_eq!(usdc_balance(pay_to).await, payee0 + U256::from(PRICE - FEE));
        assert_eq!(
            usdc_balance(deployer.address).await,
            fees0 + U256::from(FEE)
        );
        let sent = node.gas_used_by(relayer.address, block).await;
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(sent[0].1, plan.router.address, "sent to the router");
        eprintln!(
            "gas: router payment (the npm package's Agent) on FiatToken v2.2 {} ({})",
            sent[0].2, sent[0].0
        );
        assert_about("held no USDC yet and", sent[0].2);
        assert_eq!(hits.load(Ordering::SeqCst), 4);
    }

    // A config written again for the deployment (a lost facilitator.toml): nothing sent; the
    // Subscriptions block is not known to this run, which says so in the config and on stderr,
    // and the config still passes the check.
    let rewritten = w
        .bash(
            "tollgate deploy --rpc-url $RPC_URL --key env:TOLLGATE_DEPLOYER_KEY \
             --network base-sepolia --listen $FAC --write-config again.toml",
        )
        .await
        .ok();
    assert!(
        rewritten.stderr.contains("nothing to send")
            && rewritten.stderr.contains("set start_block in again.toml"),
        "{}",
        rewritten.stderr
    );
    assert_eq!(chain.nonce(deployer.address).await.unwrap(), nonce0 + 2);
    let again = std::fs::read_to_string(dir.path().join("again.toml")).unwrap();
    assert!(again.contains("# start_block = 0\n"), "{again}");
    assert!(!again.contains("\nstart_block"), "{again}");
    assert!(again.contains("# public_rpc_url = "), "{again}");
    let check = w
        .bash("tollgate facilitator --config again.toml --check")
        .await;
    assert_eq!(check.code, 0, "{check:?}");
    drop(w);
}

/// Runs the agent example of the npm package's README (`crates/node/README.md`, the block after
/// `<!-- example: agent -->`) verbatim with node, `require('tollgate')` resolving to the package
/// in `crates/node`, with `AGENT_KEY` and `URL` set; its stdout. The native addon is built first
/// when it is missing, as `scripts/test` builds it (in the workspace's target directory).
async fn npm_agent_example(url: &str, key: &str) -> String {
    let package = crate::interop::repo_root().join("crates/node");
    if !package.join("native/binding.js").is_file() {
        eprintln!("building the npm package's native addon (crates/node/scripts/build.mjs)");
        let built = tokio::time::timeout(
            Duration::from_secs(1800),
            Command::new(tollgate_testkit::peer::node())
                .arg(package.join("scripts/build.mjs"))
                .env("TOLLGATE_NODE_SHARED_TARGET", "1")
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .status(),
        )
        .await
        .expect("the addon built in time")
        .unwrap();
        assert!(built.success(), "crates/node/scripts/build.mjs failed");
    }
    let readme = std::fs::read_to_string(package.join("README.md")).unwrap();
    let example = readme
        .split_once("<!-- example: agent -->")
        .expect("crates/node/README.md marks its agent example")
        .1
        .trim_start()
        .strip_prefix("```js\n")
        .expect("a ```js block after the marker");
    let example = &example[..example.find("\n```").expect("the block's end")];
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("node_modules")).unwrap();
    std::os::unix::fs::symlink(&package, dir.path().join("node_modules/tollgate")).unwrap();
    std::fs::write(dir.path().join("agent.js"), example).unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        Command::new(tollgate_testkit::peer::node())
            .arg("agent.js")
            .current_dir(dir.path())
            .env("AGENT_KEY", key)
            .env("URL", url)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the npm agent example finished in time")
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the npm agent example failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "$ node agent.js (crates/node/README.md)\n  {}",
        stdout.trim()
    );
    stdout
}
