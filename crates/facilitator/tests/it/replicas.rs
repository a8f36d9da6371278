//! Several facilitator replicas on one store: leases in the store (both databases), relayer
//! accounts leased to one replica each and passed on when a replica dies, one keeper, and every
//! payment settled once whichever replica takes it.

use std::{sync::Arc, time::Duration};

use alloy::primitives::{Address, B256, U256};
use tokio::{net::TcpListener, task::JoinHandle};
use tollgate_facilitator::{Facilitator, Settings, store::Store};
use tollgate_testkit::{
    Backend,
    harness::{self, FEE, TestNet},
};

use crate::support::NETWORK;

/// Long enough that a loaded CI machine (two cores, every test at once) cannot stall a replica's
/// renewals (every TTL/3) past its lease, which would move accounts between the checks below.
const TTL: Duration = Duration::from_millis(3000);

/// The lease table's rules, on one store: exclusive, renewable, fenced, released, lapsing.
async fn lease_rules(store: Arc<dyn Store>) {
    let ttl = Duration::from_secs(30);
    let a = store.acquire_lease("relayer:x", "a", ttl).await.unwrap();
    assert_eq!(a, Some(1), "the first tenure's token");
    assert_eq!(
        store.acquire_lease("relayer:x", "b", ttl).await.unwrap(),
        None,
        "held by a"
    );
    assert_eq!(
        store.acquire_lease("relayer:x", "a", ttl).await.unwrap(),
        Some(1),
        "the holder renews under the same token"
    );
    assert!(store.renew_lease("relayer:x", "a", 1, ttl).await.unwrap());
    assert!(
        !store.renew_lease("relayer:x", "b", 1, ttl).await.unwrap(),
        "not b's"
    );

    // Released: another holder takes it at once, under a new token; the old one is fenced off.
    assert!(store.release_lease("relayer:x", "a", 1).await.unwrap());
    assert_eq!(
        store.acquire_lease("relayer:x", "b", ttl).await.unwrap(),
        Some(2)
    );
    assert!(!store.renew_lease("relayer:x", "a", 1, ttl).await.unwrap());
    assert!(
        !store.release_lease("relayer:x", "a", 1).await.unwrap(),
        "a's tenure is over"
    );

    // Taken over from a holder known to be dead: at once, under a new token, only from the
    // tenure named.
    assert_eq!(
        store
            .take_over_lease("relayer:x", "c", "b", 1, ttl)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .take_over_lease("relayer:x", "c", "a", 2, ttl)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .take_over_lease("relayer:x", "c", "b", 2, ttl)
            .await
            .unwrap(),
        Some(3)
    );
    assert!(!store.renew_lease("relayer:x", "b", 2, ttl).await.unwrap());
    assert!(store.release_lease("relayer:x", "c", 3).await.unwrap());
    assert_eq!(
        store.acquire_lease("relayer:x", "b", ttl).await.unwrap(),
        Some(4)
    );

    // Lapsed: taken by the next comer after the TTL, not before.
    let short = Duration::from_millis(300);
    assert_eq!(
        store.acquire_lease("keeper", "a", short).await.unwrap(),
        Some(1)
    );
    assert_eq!(
        store.acquire_lease("keeper", "b", short).await.unwrap(),
        None
    );
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert!(
        !store.renew_lease("keeper", "a", 1, short).await.unwrap(),
        "lapsed"
    );
    assert_eq!(
        store.acquire_lease("keeper", "b", ttl).await.unwrap(),
        Some(2)
    );
    // The same holder taking its own lapsed lease again starts a new tenure too.
    assert_eq!(store.acquire_lease("l", "a", short).await.unwrap(), Some(1));
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(store.acquire_lease("l", "a", ttl).await.unwrap(), Some(2));

    let listed = store.leases("relayer:").await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].holder.as_str(), listed[0].token, listed[0].live),
        ("b", 4, true)
    );

    // Many takers at once: exactly one gets it.
    let takers = (0..16).map(|i| {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            store
                .acquire_lease("race", &format!("t{i}"), ttl)
                .await
                .unwrap()
        })
    });
    let mut won = 0;
    for t in takers {
        won += usize::from(t.await.unwrap().is_some());
    }
    assert_eq!(won, 1, "one taker of sixteen holds the lease");

    // Pruning: only leases of the prefix lapsed longer than asked go; running ones stay.
    assert_eq!(
        store
            .acquire_lease("replica:gone", "gone", short)
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        store
            .acquire_lease("replica:live", "live", ttl)
            .await
            .unwrap(),
        Some(1)
    );
    let long_ago = Duration::from_millis(200);
    assert_eq!(store.prune_leases("replica:", long_ago).await.unwrap(), 0);
    tokio::time::sleep(Duration::from_millis(650)).await;
    assert_eq!(store.prune_leases("replica:", long_ago).await.unwrap(), 1);
    let left: Vec<String> = store
        .leases("")
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert!(left.contains(&"replica:live".to_owned()), "{left:?}");
    assert!(!left.contains(&"replica:gone".to_owned()), "{left:?}");
    assert!(
        left.contains(&"l".to_owned()),
        "another prefix's lapsed lease stays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    lease_rules(harness::sqlite_store(&dir, "leases.db").await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_on_postgres() {
    let url = tollgate_testkit::peer::database_url();
    let (pg, schema) = harness::PgSchema::create(&url, "tg_lease").await.unwrap();
    lease_rules(pg).await;
    schema.drop_schema().await.unwrap();
}

/// A replica served on loopback, with its own chain connection (its own nonce cache), on the
/// shared store. Aborting its task kills it: nothing is released.
struct Replica {
    f: Facilitator,
    url: String,
    task: JoinHandle<std::io::Result<()>>,
}

async fn replica(net: &TestNet, store: Arc<dyn Store>, id: &str, relayers: &[usize]) -> Replica {
    let url = net.fixture.rpc_url().expect("an RPC backend");
    let chain = tollgate_testkit::connect(url, net.chain_id(), &net.fixture.accounts)
        .await
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let public = format!("http://{}", listener.local_addr().unwrap());
    let settings = Settings {
        public_url: public.clone(),
        lease_ttl: TTL,
        replica_id: Some(id.to_owned()),
        ..Settings::default()
    };
    let spec = harness::network_spec(NETWORK, net.chain_id(), &net.fixture.deployment, 1);
    let f = Facilitator::new(
        settings,
        vec![(spec, Arc::new(chain))],
        relayers.iter().map(|&i| net.address(i)).collect(),
        net.account(harness::PROOF_KEY).private_key,
        store,
    )
    .unwrap();
    let task = tokio::spawn(tollgate_facilitator::serve(
        f.clone(),
        listener,
        std::future::pending(),
    ));
    Replica {
        f,
        url: public,
        task,
    }
}

/// Waits until the live replicas hold every relayer account between them, each at most once,
/// and none more than its share.
async fn wait_spread(replicas: &[&Replica], relayers: &[Address]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut held: Vec<Address> = replicas.iter().flat_map(|r| r.f.held_relayers()).collect();
        let total = held.len();
        held.sort();
        held.dedup();
        assert_eq!(
            held.len(),
            total,
            "a relayer account held by two live replicas"
        );
        // Evened out: no replica holds more than its share while another could hold one.
        let share = relayers.len().div_ceil(replicas.len());
        let even = replicas.iter().all(|r| r.f.held_relayers().len() <= share);
        if held.len() == relayers.len() && even {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "relayer accounts not spread over the replicas: {:?}",
            replicas
                .iter()
                .map(|r| r.f.held_relayers())
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Posts a payment to replica `first`; a 503 (a replica without a relayer account) goes to the
/// next, as the load balancer does.
async fn authorize(
    http: &reqwest::Client,
    replicas: &[&Replica],
    first: usize,
    body: &serde_json::Value,
) -> serde_json::Value {
    for k in 0..replicas.len() {
        let r = replicas[(first + k) % replicas.len()];
        let res = http
            .post(format!("{}/authorize", r.url))
            .json(body)
            .send()
            .await
            .unwrap();
        let status = res.status().as_u16();
        let retry_after = res.headers().get("retry-after").cloned();
        let reply: serde_json::Value = res.json().await.unwrap();
        if status == 503 && reply["error"]["code"] == "Unavailable" {
            assert!(retry_after.is_some(), "a 503 says when to retry");
            assert!(
                r.f.held_relayers().is_empty(),
                "only a replica without relayers refuses: {reply}"
            );
            continue;
        }
        assert_eq!(status, 200, "{reply}");
        return reply;
    }
    panic!("no replica settled the payment");
}

/// Three replicas, two relayer accounts, one PostgreSQL store, anvil: the accounts are spread
/// one per replica and the third says in `/readyz` that it sends nothing; payments taken by any
/// replica settle once (the same payment again, at every replica, moves nothing); a replica
/// killed while holding an account passes it on after the lease TTL; one keeper runs, on the
/// replica holding the first account.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_lease_relayers_and_settle_each_payment_once() {
    let db = tollgate_testkit::peer::database_url();
    let (pg, schema) = harness::PgSchema::create(&db, "tg_replicas").await.unwrap();
    let net = TestNet::builder()
        .backend(Backend::Anvil)
        .start()
        .await
        .unwrap();
    let relayer_accounts = [5, 6];
    let relayers: Vec<Address> = relayer_accounts.iter().map(|&i| net.address(i)).collect();
    let a = replica(&net, pg.clone(), "replica-a", &relayer_accounts).await;
    let b = replica(&net, pg.clone(), "replica-b", &relayer_accounts).await;
    let c = replica(&net, pg.clone(), "replica-c", &relayer_accounts).await;
    let all = [&a, &b, &c];
    wait_spread(&all, &relayers).await;
    let idle = all
        .iter()
        .find(|r| r.f.held_relayers().is_empty())
        .expect("three replicas, two accounts: one holds none");
    let ready: serde_json::Value = net
        .http
        .get(format!("{}/readyz", idle.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["ready"], true, "{ready}");
    let says = ready["checks"]["relayers"].as_str().unwrap();
    assert!(says.starts_with("none of 2 held"), "{says}");
    // Its x402 `/settle` is a 503 before anything is written; another replica settles it.
    let pay_to_x402 = net.address(harness::PAYEE);
    let payload = net
        .x402_payload(NETWORK, 2, pay_to_x402, 20_000, B256::repeat_byte(0x5e))
        .await;
    let requirements = serde_json::json!({
        "scheme": "exact", "network": NETWORK, "maxAmountRequired": "20000",
        "resource": "http://127.0.0.1/x402", "description": "x402", "mimeType": "application/json",
        "payTo": pay_to_x402, "maxTimeoutSeconds": 60, "asset": net.fixture.deployment.token,
        "extra": { "name": "USD Coin", "version": "2" }
    });
    let settle = serde_json::json!({
        "x402Version": 1, "paymentPayload": payload, "paymentRequirements": requirements
    });
    let res = net
        .http
        .post(format!("{}/settle", idle.url))
        .json(&settle)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 503);
    assert!(res.headers().get("retry-after").is_some());
    let x402_before = net.token_balance(pay_to_x402).await;
    let sender = all
        .iter()
        .find(|r| !r.f.held_relayers().is_empty())
        .unwrap();
    let settled: serde_json::Value = net
        .http
        .post(format!("{}/settle", sender.url))
        .json(&settle)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(settled["success"], true, "{settled}");
    assert_eq!(
        net.token_balance(pay_to_x402).await,
        x402_before + U256::from(20_000)
    );

    // Payments spread over the replicas: each settles once.
    let pay_to = net.address(harness::PAYEE);
    let before = net.token_balance(pay_to).await;
    const PRICE: u64 = 50_000;
    let mut proofs = Vec::new();
    let mut bodies = Vec::new();
    for i in 0..9u8 {
        let sp = net
            .signed_payment(
                NETWORK,
                1 + usize::from(i % 3),
                pay_to,
                PRICE,
                B256::repeat_byte(i + 1),
            )
            .await;
        let body = serde_json::json!({ "signedPayment": sp });
        let reply = authorize(&net.http, &all, usize::from(i), &body).await;
        assert_eq!(reply["status"], "confirmed", "{reply}");
        proofs.push(reply["proof"].clone());
        bodies.push(body);
    }
    let paid = U256::from(9 * (PRICE - FEE));
    assert_eq!(net.token_balance(pay_to).await, before + paid);
    // The same payments again, at every replica: the same proofs, nothing moves.
    for (body, proof) in bodies.iter().zip(&proofs) {
        for start in 0..3 {
            let reply = authorize(&net.http, &all, start, body).await;
            assert_eq!(&reply["proof"], proof);
        }
    }
    assert_eq!(net.token_balance(pay_to).await, before + paid);

    // One keeper: the holder of the first relayer account.
    let handles: Vec<_> = all.iter().map(|r| r.f.spawn_keeper()).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let keeper = loop {
        let live: Vec<_> = pg
            .leases("keeper")
            .await
            .unwrap()
            .into_iter()
            .filter(|l| l.live)
            .collect();
        if let [one] = live.as_slice() {
            break one.holder.clone();
        }
        assert!(live.len() <= 1, "two keepers: {live:?}");
        assert!(tokio::time::Instant::now() < deadline, "no keeper");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let first = all
        .iter()
        .find(|r| r.f.held_relayers().contains(&relayers[0]))
        .unwrap();
    assert_eq!(keeper, first.f.replica_id());
    drop(handles);

    // Kill the replica holding the second account (no release): the idle one takes it over
    // once the lease lapses, and settles with it.
    let victim = all
        .iter()
        .position(|r| r.f.held_relayers().contains(&relayers[1]))
        .unwrap();
    all[victim].task.abort();
    let survivors: Vec<&Replica> = all
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, r)| *r)
        .collect();
    wait_spread(&survivors, &relayers).await;
    for i in 0..4u8 {
        let sp = net
            .signed_payment(NETWORK, 1, pay_to, PRICE, B256::repeat_byte(0x80 + i))
            .await;
        let body = serde_json::json!({ "signedPayment": sp });
        let reply = authorize(&net.http, &survivors, usize::from(i), &body).await;
        assert_eq!(reply["status"], "confirmed", "{reply}");
    }
    assert_eq!(
        net.token_balance(pay_to).await,
        before + paid + U256::from(4 * (PRICE - FEE))
    );
    for r in all {
        r.task.abort();
    }
    schema.drop_schema().await.unwrap();
}
