//! The memo store on PostgreSQL (`TOLLGATE_TEST_DATABASE_URL`; unset, the tests fail): atomic
//! across concurrent claims, pruned, and shared by two gates (replicas with one secret).

use std::sync::Arc;

use alloy::primitives::B256;
use tollgate_gate::{MemoStore, store::DatabaseMemoStore};

use tollgate_testkit::peer::database_url;

use crate::support::{App, Harness};

/// A schema of this test's own, created empty.
async fn schema(url: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let schema = format!(
        "tg_gate_it_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    run_sql(
        url,
        format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"),
    )
    .await;
    schema
}

async fn drop_schema(url: &str, schema: &str) {
    run_sql(url, format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await;
}

async fn run_sql(url: &str, sql: String) {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_claims_are_atomic_and_pruned() {
    let url = database_url();
    let schema = schema(&url).await;
    let store = Arc::new(
        DatabaseMemoStore::open_in_schema(&url, &schema)
            .await
            .unwrap(),
    );
    let key = B256::repeat_byte(1);
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let s = Arc::clone(&store);
            tokio::spawn(async move { s.claim(key, 1_000).await.unwrap() })
        })
        .collect();
    let mut wins = 0;
    for t in tasks {
        wins += usize::from(t.await.unwrap());
    }
    assert_eq!(wins, 1);
    assert!(store.claim(B256::repeat_byte(2), 5_000).await.unwrap());
    assert_eq!(store.prune(1_000).await.unwrap(), 1);
    assert!(
        store.claim(key, 1_000).await.unwrap(),
        "pruned, so claimable"
    );
    store.release(key).await.unwrap();
    assert!(store.claim(key, 1_000).await.unwrap());
    let takes: Vec<_> = (0..20)
        .map(|_| {
            let s = Arc::clone(&store);
            tokio::spawn(async move { s.take(key).await.unwrap() })
        })
        .collect();
    let mut taken = 0;
    for t in takes {
        taken += usize::from(t.await.unwrap());
    }
    assert_eq!(taken, 1, "one of 20 concurrent takes");
    assert!(!store.take(key).await.unwrap(), "taken once");
    store.close().await;
    drop_schema(&url, &schema).await;
}

/// Replicas starting at once on a fresh database all open the memo store (each creates the
/// table if missing; PostgreSQL alone would fail all but one with a catalog unique violation).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_starting_at_once_all_open_the_store() {
    let url = database_url();
    // A few rounds, each on a fresh schema: the race is a matter of timing.
    for _ in 0..5 {
        let schema = schema(&url).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(12));
        let opens: Vec<_> = (0..12)
            .map(|_| {
                let (url, schema, barrier) = (url.clone(), schema.clone(), Arc::clone(&barrier));
                tokio::spawn(async move {
                    barrier.wait().await;
                    DatabaseMemoStore::open_in_schema(&url, &schema).await
                })
            })
            .collect();
        let mut stores = Vec::new();
        for o in opens {
            stores.push(o.await.unwrap().expect("every replica opens the store"));
        }
        for s in stores {
            s.close().await;
        }
        drop_schema(&url, &schema).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_share_one_memo_set() {
    let url = database_url();
    let h = Harness::new().await;
    let schema = schema(&url).await;
    let store = Arc::new(
        DatabaseMemoStore::open_in_schema(&url, &schema)
            .await
            .unwrap(),
    );
    let replica = || {
        h.gate_builder()
            .memo_secret([0x77; 32])
            .memo_store(Arc::clone(&store) as Arc<dyn MemoStore>)
            .build()
    };
    let (a, b) = (replica().await.unwrap(), replica().await.unwrap());
    let (app_a, app_b) = (App::serve(&a).await, App::serve(&b).await);
    let r = app_a.get("/v1/quote", &[]).await;
    let (proof, _) = h.pay_402(&r.body).await;
    // Issued by A, paid at B: one secret, so B accepts it; then A refuses the replay.
    assert_eq!(app_b.pay("/v1/quote", &proof).await.status, 200);
    let again = app_a.pay("/v1/quote", &proof).await;
    assert_eq!(again.status, 402);
    assert_eq!(again.body["reason"], "replayed");
    assert_eq!(app_a.hits() + app_b.hits(), 1);
    store.close().await;
    drop_schema(&url, &schema).await;
}
