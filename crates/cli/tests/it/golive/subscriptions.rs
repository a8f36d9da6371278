//! Subscriptions on the go-live deployment, the subscriber's whole lifecycle with the CLI.

use super::*;

/// Webhook deliveries as received: headers and body.
type Deliveries = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

async fn serve_hooks() -> (String, Deliveries) {
    let got: Deliveries = Arc::default();
    let kept = Arc::clone(&got);
    let app = Router::new().route(
        "/hooks",
        post(move |headers: HeaderMap, body: Bytes| {
            let kept = Arc::clone(&kept);
            async move {
                kept.lock().unwrap().push((headers, body));
                StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hooks", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, got)
}

fn served(out: &Output, path: &str) -> bool {
    out.code == 0 && out.stdout.contains(&format!(r#"{{"served":"{path}"}}"#))
}

fn refused(out: &Output, reason: &str) -> bool {
    out.code == 4 && out.stderr.contains(reason)
}

fn units(v: &Value) -> U256 {
    v.as_str()
        .unwrap_or_else(|| panic!("an amount: {v}"))
        .parse()
        .unwrap()
}

/// The plan's amount a cycle: 1.00 USDC.
const PLAN_AMOUNT: u64 = 1_000_000;
/// The plan's cycle: a week.
const INTERVAL: u64 = 604_800;
/// A metered call: 0.10 from the overage allowance.
const METERED: u64 = 100_000;

/// Subscriptions through the go-live deployment: after the chapter's `tollgate deploy` and with
/// `tollgate facilitator` (its keeper every second, webhooks on) and `tollgate gateway` running as
/// processes on FiatToken v2.2 (2 s blocks, 2 confirmations), a fresh provider key registers and
/// publishes a plan with the CLI, a gateway sells it (a plan route and a metered one); the
/// subscriber subscribes with `tollgate subscribe` (gasless: USDC's EIP-2612 `permit`), is served
/// on the subscription, meters its overage to the cap, raises it, is charged the overage on chain
/// and renewed by the keeper after a week (anvil time travel), pauses, resumes and cancels, all
/// with the CLI. At the end, the USDC that left the subscriber is what reached the payee, is what
/// the chain's `Transfer` events, the webhooks (each delivered once, signed) and the analytics
/// report, each amount billed once; the subscriber spent no ETH.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_live_subscriptions_on_fiat_token_through_the_cli_and_the_gateway() {
    let Deployed {
        net: _net,
        chain,
        node,
        rpc_url,
        dir,
        mut w,
        hits,
        deployer: _,
        relayer,
        payer,
        pay_to,
        plan: deployment,
        gw: _,
        nonce0: _,
        estimate: _,
        deploy_gas: _,
    } = deploy_and_check().await;
    let chain = &*chain;
    let subscriber = payer.address;
    let (hook, deliveries) = serve_hooks().await;

    // The operator turns on what subscriptions need in the config `tollgate deploy` wrote: a
    // key sealing webhook secrets, loopback webhook targets (the test's receiver), and a keeper
    // running every second.
    let config_path = dir.path().join("facilitator.toml");
    let config = std::fs::read_to_string(&config_path).unwrap();
    let proof_line = "proof = \"env:TOLLGATE_PROOF_KEY\"\n";
    assert!(config.contains(proof_line), "{config}");
    let config = config.replace(
        proof_line,
        &format!("{proof_line}webhook_secrets = \"env:TOLLGATE_WEBHOOK_SECRETS\"\n"),
    ) + "\n[subscriptions]\nkeeper_interval_secs = 1\n\n[webhooks]\nallow_private_targets = true\n";
    std::fs::write(&config_path, config).unwrap();
    w.env.insert(
        "TOLLGATE_WEBHOOK_SECRETS".to_owned(),
        alloy::hex::encode(keccak256(b"tollgate go-live webhook secrets")),
    );
    w.spawn(
        "tollgate facilitator --config facilitator.toml",
        "facilitator",
    );
    w.env.insert("HOOK".to_owned(), hook);
    w.env.insert("RPC".to_owned(), rpc_url);
    w.sh_until(
        "curl -sf http://$FAC/readyz",
        Duration::from_secs(60),
        |o| o.code == 0,
        |o| o.code == 7 || o.code == 22, // not listening, or not ready yet
    )
    .await;

    // The provider: a fresh key, registered with a signature; its plan pays $PAY_TO.
    w.sh("openssl rand -hex 32 > provider.key").await.ok();
    let register = w
        .sh("tollgate provider register --facilitator http://$FAC --key-file provider.key > api-key")
        .await
        .ok();
    let provider: Address = register
        .stderr
        .split("registered provider ")
        .nth(1)
        .and_then(|rest| rest.get(..42))
        .unwrap_or_else(|| panic!("no address in: {}", register.stderr))
        .parse()
        .unwrap();
    let api_key = std::fs::read_to_string(dir.path().join("api-key")).unwrap();
    w.env
        .insert("TOLLGATE_API_KEY".to_owned(), api_key.trim().to_owned());
    let endpoint = w
        .sh("tollgate webhooks create --facilitator http://$FAC --url $HOOK")
        .await
        .ok()
        .json();
    let secret = endpoint["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{endpoint}");
    let plan = w
        .sh(&format!(
            "tollgate plan create --facilitator http://$FAC --network base-sepolia --amount 1.00 \
             --interval {INTERVAL} --pay-to $PAY_TO --idempotency-key weekly"
        ))
        .await
        .ok()
        .json();
    assert_eq!(plan["amount"], PLAN_AMOUNT.to_string(), "{plan}");
    let plan_id = plan["planId"].as_str().unwrap().to_owned();
    w.env.insert("PLAN".to_owned(), plan_id.clone());

    // The gateway: the chapter's, with the plan's routes and the provider's API key (metering).
    let readme_gateway = w.next("cat > gateway.toml");
    let gateway = readme_gateway
        .replace(
            "facilitator = \"http://$FAC\"\n",
            "facilitator = \"http://$FAC\"\napi_key_env = \"TOLLGATE_API_KEY\"\n",
        )
        .replace(
            "\nEOF",
            "\n[[routes]]\nprefix = \"/v1/report\"\nplan = \"$PLAN\"\n\
             [[routes]]\nprefix = \"/v1/process\"\nplan = \"$PLAN\"\nmetered = \"0.10\"\nEOF",
        );
    assert!(
        gateway.contains("api_key_env") && gateway.contains("metered"),
        "{gateway}"
    );
    w.sh(&gateway).await.ok();
    w.spawn("tollgate gateway --config gateway.toml &", "gateway");
    let offer = w
        .sh_until(
            "curl -si http://$GW/v1/report",
            Duration::from_secs(60),
            |o| o.code == 0 && o.stdout.starts_with("HTTP/1.1 402"),
            |o| o.code == 7,
        )
        .await;
    assert!(
        offer.stdout.contains(&plan_id),
        "the 402 offers the plan: {}",
        offer.stdout
    );

    // Subscribed with the CLI: a permit and an intent signed, the first cycle billed.
    let (subscriber0, payee0) = (
        usdc_of(chain, subscriber).await,
        usdc_of(chain, pay_to).await,
    );
    assert_eq!(payee0, U256::ZERO);
    let subscriber_eth = chain.balance(subscriber).await.unwrap();
    let permit_nonce = || async {
        contracts::read(
            chain,
            USDC_BASE_SEPOLIA,
            &Token::noncesCall { owner: subscriber },
        )
        .await
        .unwrap()
    };
    let allowance = || async {
        contracts::read(
            chain,
            USDC_BASE_SEPOLIA,
            &Token::allowanceCall {
                owner: subscriber,
                spender: deployment.subscriptions.address,
            },
        )
        .await
        .unwrap()
    };
    assert_eq!(permit_nonce().await, U256::ZERO);
    assert_eq!(allowance().await, U256::ZERO);
    let block0 = node.block_number().await;
    let sub = w
        .sh("tollgate subscribe --plan $PLAN --max 1.00 --max-overage 0.30 --facilitator http://$FAC")
        .await
        .ok()
        .json();
    assert_eq!(sub["status"], "ACTIVE", "{sub}");
    assert_eq!(sub["planId"], plan_id.as_str(), "{sub}");
    assert_eq!(sub["allowance"]["cap"], "300000", "{sub}");
    let sub_id = sub["id"].as_str().unwrap().to_owned();
    let first_paid_through = sub["paidThrough"].as_u64().unwrap();
    w.env.insert("SUB".to_owned(), sub_id.clone());
    let mut paid = PLAN_AMOUNT;
    // Gasless: the CLI's permit, consumed on chain (FiatToken's nonce), let the Subscriptions
    // contract take 12 cycles of the plan and the overage cap; it took the first cycle.
    assert_eq!(permit_nonce().await, U256::from(1), "one permit used");
    let permitted = U256::from(12 * (PLAN_AMOUNT + 300_000));
    assert_eq!(allowance().await, permitted - U256::from(paid));
    assert_eq!(
        usdc_of(chain, subscriber).await,
        subscriber0 - U256::from(paid)
    );
    assert_eq!(usdc_of(chain, pay_to).await, U256::from(paid));

    // Served on it; metered to the cap; raised; served again. Metering moves nothing yet.
    let report = w
        .sh("tollgate pay http://$GW/v1/report -H \"X-Service-Sub: $SUB\"")
        .await;
    assert!(served(&report, "/v1/report"), "{report:?}\n{}", w.logs());
    assert!(!report.stderr.contains("paid "), "{}", report.stderr);
    let process = "tollgate pay http://$GW/v1/process -H \"X-Service-Sub: $SUB\"";
    for _ in 0..3 {
        let out = w.sh(process).await;
        assert!(served(&out, "/v1/process"), "{out:?}\n{}", w.logs());
    }
    let exhausted = w.sh(process).await;
    assert!(refused(&exhausted, "AllowanceExhausted"), "{exhausted:?}");
    let raised = w
        .sh("tollgate subscribe --raise $SUB --max-overage 0.50 --max 0.20 --facilitator http://$FAC")
        .await
        .ok()
        .json();
    assert_eq!(raised["allowance"]["cap"], "500000", "{raised}");
    let again = w.sh(process).await;
    assert!(served(&again, "/v1/process"), "{again:?}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        5,
        "the upstream served each admitted request"
    );
    assert_eq!(
        usdc_of(chain, subscriber).await,
        subscriber0 - U256::from(paid)
    );

    // A week later: the keeper charges the overage on chain, then renews.
    for method in [
        format!(r#""evm_increaseTime","params":[{INTERVAL}]"#),
        r#""evm_mine","params":[]"#.to_owned(),
    ] {
        let out = w
            .sh(&format!(
                r#"curl -s -H 'content-type: application/json' -d '{{"jsonrpc":"2.0","id":1,"method":{method}}}' $RPC"#
            ))
            .await
            .ok();
        assert!(out.stdout.contains("\"result\""), "{out:?}");
    }
    let renewed = w
        .sh_until(
            "tollgate subscription show $SUB --facilitator http://$FAC",
            Duration::from_secs(60),
            |o| {
                o.code == 0
                    && serde_json::from_str::<Value>(&o.stdout).is_ok_and(|s| {
                        s["paidThrough"]
                            .as_u64()
                            .is_some_and(|p| p >= first_paid_through + INTERVAL)
                    })
            },
            |o| o.code == 0 && o.json()["paidThrough"].as_u64() == Some(first_paid_through),
        )
        .await;
    assert_eq!(renewed.json()["status"], "ACTIVE");
    paid += 4 * METERED + PLAN_AMOUNT;
    let started = Instant::now();
    while usdc_of(chain, subscriber).await != subscriber0 - U256::from(paid) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the overage and the renewal: paid {} of {paid}\n{}",
            subscriber0 - usdc_of(chain, subscriber).await,
            w.logs()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Paused: refused; resumed: served; cancelled: refused.
    let report = "tollgate pay http://$GW/v1/report -H \"X-Service-Sub: $SUB\"";
    let paused = w
        .sh("tollgate subscription pause $SUB --facilitator http://$FAC")
        .await
        .ok()
        .json();
    assert_eq!(paused["status"], "PAUSED", "{paused}");
    w.sh_until(
        report,
        Duration::from_secs(15),
        |o| refused(o, "SubscriptionNotActive"),
        |o| served(o, "/v1/report"), // until the gate's cache hears of it
    )
    .await;
    let resumed = w
        .sh("tollgate subscription resume $SUB --facilitator http://$FAC")
        .await
        .ok()
        .json();
    assert_eq!(resumed["status"], "ACTIVE", "{resumed}");
    w.sh_until(
        report,
        Duration::from_secs(15),
        |o| served(o, "/v1/report"),
        |o| refused(o, "SubscriptionNotActive"),
    )
    .await;
    let cancelled = w
        .sh("tollgate subscription cancel $SUB --facilitator http://$FAC")
        .await
        .ok()
        .json();
    assert_eq!(cancelled["status"], "CANCELLED", "{cancelled}");
    w.sh_until(
        report,
        Duration::from_secs(15),
        |o| refused(o, "SubscriptionNotActive"),
        |o| served(o, "/v1/report"),
    )
    .await;

    // The chain: what left the subscriber reached the payee, nothing more (the keeper, running
    // every second through the pause, resume and cancel, billed nothing again); the subscriber,
    // the provider and the payee spent no ETH; the relayer paid every transaction.
    assert_eq!(
        usdc_of(chain, subscriber).await,
        subscriber0 - U256::from(paid)
    );
    assert_eq!(usdc_of(chain, pay_to).await, U256::from(paid));
    assert_eq!(
        chain.balance(subscriber).await.unwrap(),
        subscriber_eth,
        "no gas"
    );
    assert_eq!(chain.balance(provider).await.unwrap(), U256::ZERO);
    assert_eq!(chain.balance(pay_to).await.unwrap(), U256::ZERO);
    assert_eq!(
        chain.nonce(subscriber).await.unwrap(),
        0,
        "the subscriber sent nothing"
    );
    assert!(chain.nonce(relayer.address).await.unwrap() > 0);
    assert_eq!(
        allowance().await,
        permitted - U256::from(paid),
        "every billing went through the permitted allowance"
    );
    assert_eq!(
        permit_nonce().await,
        U256::from(1),
        "the raise needed no permit"
    );

    // The chain's USDC Transfer events out of the subscriber since it subscribed: each to the
    // payee, one per billing.
    let transfer = keccak256(b"Transfer(address,address,uint256)");
    let logs = node
        .call(
            "eth_getLogs",
            json!([{
                "fromBlock": format!("{block0:#x}"),
                "toBlock": "latest",
                "address": USDC_BASE_SEPOLIA,
                "topics": [transfer, subscriber.into_word()],
            }]),
        )
        .await;
    let mut transfers: Vec<U256> = logs
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let to = Address::from_word(l["topics"][2].as_str().unwrap().parse().unwrap());
            assert_eq!(to, pay_to, "{l}");
            l["data"].as_str().unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(
        transfers,
        [PLAN_AMOUNT, 4 * METERED, PLAN_AMOUNT].map(U256::from),
        "the first cycle, the overage charged before the renewal, the renewal"
    );
    transfers.sort();
    assert_eq!(
        transfers.iter().sum::<U256>(),
        U256::from(paid),
        "{transfers:?}"
    );

    // The webhooks: each event once, signed; the billings they report are the transfers.
    let expected = BTreeMap::from([
        ("allowance.exhausted", 1),
        ("allowance.raised", 1),
        ("plan.created", 1),
        ("subscription.cancelled", 1),
        ("subscription.created", 1),
        ("subscription.paused", 1),
        ("subscription.renewed", 1),
        ("subscription.resumed", 1),
    ]);
    let started = Instant::now();
    let (seen, mut billed) = loop {
        let mut ids = std::collections::BTreeSet::new();
        let mut seen = BTreeMap::<String, usize>::new();
        let mut billed = Vec::new();
        for (headers, body) in deliveries.lock().unwrap().iter() {
            let delivery = tollgate_gate::verify_webhook(headers, body, &secret)
                .unwrap_or_else(|e| panic!("a bad signature ({e}): {body:?}"));
            let event = delivery.event().unwrap();
            assert!(ids.insert(event.id.clone()), "delivered twice: {body:?}");
            let json: Value = serde_json::from_slice(body).unwrap();
            if matches!(
                event.type_name(),
                "subscription.created" | "subscription.renewed" | "allowance.charged"
            ) {
                billed.push(units(&json["data"]["amount"]));
            }
            if event.type_name() != "allowance.charged" {
                *seen.entry(event.type_name().to_owned()).or_default() += 1;
            }
        }
        let done = seen
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect::<BTreeMap<_, _>>()
            == expected
            && billed.iter().sum::<U256>() == U256::from(paid);
        if done || started.elapsed() > Duration::from_secs(30) {
            break (seen, billed);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let seen: BTreeMap<&str, usize> = seen.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(seen, expected, "webhooks received");
    billed.sort();
    eprintln!("billed on chain (USDC Transfer events): {transfers:?}; by webhook: {billed:?}");
    assert_eq!(
        billed, transfers,
        "each billing reported once, as it moved on chain"
    );

    // The analytics: the same money, by kind, and the lifecycle's counts.
    let a = w
        .sh("curl -sf -H \"authorization: Bearer $TOLLGATE_API_KEY\" \"http://$FAC/analytics?range=24h\"")
        .await
        .ok()
        .json();
    let revenue = &a["revenue"]["total"];
    assert_eq!(
        units(&revenue["subscriptionFirstCycle"]),
        U256::from(PLAN_AMOUNT),
        "{a}"
    );
    assert_eq!(units(&revenue["renewal"]), U256::from(PLAN_AMOUNT), "{a}");
    assert_eq!(units(&revenue["overage"]), U256::from(4 * METERED), "{a}");
    assert_eq!(units(&revenue["gross"]), U256::from(paid), "{a}");
    let s = &a["subscriptions"];
    for (field, n) in [
        ("new", 1),
        ("renewed", 1),
        ("renewalFailed", 0),
        ("pausedInRange", 1),
        ("resumedInRange", 1),
        ("cancelledInRange", 1),
        ("cancelled", 1),
    ] {
        assert_eq!(s[field], n, "{field}: {s}");
    }
    assert_eq!(units(&a["metered"]["used"]), U256::from(4 * METERED), "{a}");
    assert_eq!(
        units(&a["metered"]["charged"]),
        U256::from(4 * METERED),
        "{a}"
    );
    assert_eq!(a["metered"]["raised"], 1, "{a}");
    drop(w);
}
