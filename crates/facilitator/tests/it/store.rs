//! The store's money-safety contract, run against real databases: every case runs on SQLite (a
//! temporary file) and on PostgreSQL (a schema of its own, dropped afterwards) at
//! `TOLLGATE_TEST_DATABASE_URL`, e.g. `postgres://postgres@127.0.0.1:5432/test` (unset, the
//! PostgreSQL cases fail).

use std::{
    future::Future,
    str::FromStr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

use alloy::primitives::{Address, B256, U256};
use sqlx::{
    Connection,
    postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions},
    sqlite::{SqlitePool, SqlitePoolOptions},
};
use tempfile::TempDir;
use tollgate_facilitator::store::{
    self, NewSettlement, PostgresStore, Settlement, SettlementKind, SqliteStore, Store, StoreError,
};
use tollgate_protocol::{Amount, SettlementStatus};

const T0: u64 = 1_700_000_000;
const PAYER: &str = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed";
const PAY_TO: &str = "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359";
const TOKEN: &str = "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB";

/// A store under test, and a separate pool on the same database for looking behind its back.
struct Db {
    store: Arc<dyn Store>,
    raw: Raw,
}

enum Raw {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Raw {
    async fn execute(&self, sql: &'static str) -> Result<u64, sqlx::Error> {
        Ok(match self {
            Self::Sqlite(pool) => sqlx::query(sql).execute(pool).await?.rows_affected(),
            Self::Postgres(pool) => sqlx::query(sql).execute(pool).await?.rows_affected(),
        })
    }

    async fn scalar(&self, sql: &'static str) -> String {
        match self {
            Self::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
            Self::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
        }
    }

    async fn count(&self, sql: &'static str) -> i64 {
        match self {
            Self::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
            Self::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await.unwrap(),
        }
    }
}

fn sqlite_url(dir: &TempDir) -> String {
    // A directory that does not exist yet: `connect` creates it.
    format!(
        "sqlite://{}",
        dir.path().join("state/facilitator.db").display()
    )
}

async fn run_sqlite<F, Fut>(case: F)
where
    F: FnOnce(Db) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir);
    let store = SqliteStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let raw = SqlitePoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap();
    case(Db {
        store: Arc::new(store.clone()),
        raw: Raw::Sqlite(raw.clone()),
    })
    .await;
    raw.close().await;
    store.close().await;
}

fn unique_schema() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "tg_test_{}_{}_{}",
        std::process::id(),
        nanos,
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

async fn run_postgres<F, Fut>(case: F)
where
    F: FnOnce(Db) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let url = tollgate_testkit::peer::database_url();
    let schema = unique_schema();
    let store = PostgresStore::connect_with_schema(&url, &schema)
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let options = PgConnectOptions::from_str(&url).unwrap();
    let raw = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options.clone().options([("search_path", schema.as_str())]))
        .await
        .unwrap();
    // In a task of its own, so that the schema is dropped even when the case panics.
    let outcome = tokio::spawn(case(Db {
        store: Arc::new(store.clone()),
        raw: Raw::Postgres(raw.clone()),
    }))
    .await;
    raw.close().await;
    store.close().await;
    let mut conn = PgConnection::connect_with(&options).await.unwrap();
    let drop_schema = format!("DROP SCHEMA \"{schema}\" CASCADE");
    sqlx::raw_sql(sqlx::AssertSqlSafe(drop_schema))
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Each case once per backend: `sqlite::<case>` and `postgres::<case>`.
macro_rules! on_both {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::run_sqlite(super::$case).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    super::run_postgres(super::$case).await;
                }
            )*
        }
    };
}

on_both!(
    round_trip,
    idempotent_insert,
    concurrent_inserts_make_one_row,
    submitted_and_pending_rules,
    failed_rules,
    confirmed_is_final,
    first_proof_wins_under_concurrency,
    unknown_keys,
    a_confirmation_records_its_event_for_the_endpoints_taking_it,
    payments_written_at_once_are_each_recorded_once,
    unfinished_oldest_first_and_counts,
    api_keys,
    migrate_twice_and_ping,
    corrupt_rows_are_errors,
);

fn h(n: u64) -> B256 {
    B256::from(U256::from(n))
}

fn new_settlement(n: u64) -> NewSettlement {
    NewSettlement {
        key: h(1_000_000 + n),
        kind: SettlementKind::Router,
        request_hash: h(2_000_000 + n),
        network: "base-sepolia".into(),
        chain_id: 84_532,
        token: Address::parse_checksummed(TOKEN, None).unwrap(),
        payer: Address::parse_checksummed(PAYER, None).unwrap(),
        pay_to: Address::parse_checksummed(PAY_TO, None).unwrap(),
        amount: Amount::from_units(500_000),
        fee: Amount::from_units(5_000),
        memo: h(3_000_000 + n),
        nonce: h(4_000_000 + n),
        valid_before: T0 + 3_600,
        request: format!(r#"{{"n":{n},"payload":{{"signature":"0xab"}}}}"#),
        resource: None,
        claim_hash: None,
        created_at: T0 + n,
    }
}

fn received(new: &NewSettlement) -> Settlement {
    Settlement {
        new: new.clone(),
        status: SettlementStatus::Received,
        tx_hash: None,
        block: None,
        proof: None,
        error: None,
        updated_at: new.created_at,
    }
}

async fn get(db: &Db, key: B256) -> Settlement {
    db.store.settlement(key).await.unwrap().expect("row exists")
}

async fn round_trip(db: Db) {
    let extreme = NewSettlement {
        key: B256::repeat_byte(0xff),
        request_hash: B256::repeat_byte(0xee),
        amount: Amount::from(U256::MAX),
        fee: Amount::from(U256::MAX - U256::from(1)),
        memo: B256::repeat_byte(0x01),
        nonce: B256::ZERO,
        valid_before: u64::MAX,
        chain_id: i64::MAX as u64,
        network: "ünïcode-net \"quoted\" 'single'".into(),
        request: "{\"a\": [1, 2.5, null],  \"b\": \"\\u00e9\"}\n".into(),
        ..new_settlement(1)
    };
    let plain = NewSettlement {
        kind: SettlementKind::X402,
        fee: Amount::ZERO,
        memo: B256::ZERO,
        valid_before: 0,
        ..new_settlement(2)
    };
    for new in [&extreme, &plain] {
        let recorded = db.store.insert_settlement(new).await.unwrap();
        assert!(recorded.inserted);
        let inserted = recorded.row;
        assert_eq!(inserted, received(new));
        assert_eq!(get(&db, new.key).await, inserted);
    }

    let tx = B256::repeat_byte(0x7a);
    db.store
        .mark_submitted(extreme.key, tx, T0 + 10)
        .await
        .unwrap();
    let proof = "eyJ2ZXJzaW9uIjoxfQ==";
    let confirmed = db
        .store
        .mark_confirmed(&extreme, tx, i64::MAX as u64, Some(proof), T0 + 20)
        .await
        .unwrap();
    let expected = Settlement {
        status: SettlementStatus::Confirmed,
        tx_hash: Some(tx),
        block: Some(i64::MAX as u64),
        proof: Some(proof.into()),
        updated_at: T0 + 20,
        ..received(&extreme)
    };
    assert_eq!(confirmed, expected);
    let stored = get(&db, extreme.key).await;
    assert_eq!(stored, expected);
    assert_eq!(stored.new.amount.get(), U256::MAX);
    assert_eq!(stored.new.payer.to_checksum(None), PAYER);
    assert_eq!(stored.new.pay_to.to_checksum(None), PAY_TO);
    assert_eq!(stored.new.token.to_checksum(None), TOKEN);

    // The x402 path confirms without a proof.
    let confirmed = db
        .store
        .mark_confirmed(&plain, tx, 7, None, T0 + 30)
        .await
        .unwrap();
    assert_eq!(confirmed.proof, None);
    assert_eq!(get(&db, plain.key).await, confirmed);

    // The stored spelling: lowercase hex, decimal money.
    assert_eq!(
        db.raw.scalar("SELECT payer FROM settlements WHERE key = '0xffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff'").await,
        PAYER.to_lowercase()
    );
    assert_eq!(
        db.raw.scalar("SELECT amount FROM settlements WHERE key = '0xffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff'").await,
        U256::MAX.to_string()
    );
}

async fn idempotent_insert(db: Db) {
    let first = new_settlement(1);
    let recorded = db.store.insert_settlement(&first).await.unwrap();
    assert!(recorded.inserted, "the first insert records the row");
    let stored = recorded.row;
    let repeat = db.store.insert_settlement(&first).await.unwrap();
    assert!(!repeat.inserted, "a repeat finds it");
    assert_eq!(repeat.row, stored);

    // The same key with another request: the first row comes back, for the caller to refuse.
    let other = NewSettlement {
        request_hash: h(99),
        amount: Amount::from_units(1),
        created_at: T0 + 500,
        ..first.clone()
    };
    let again = db.store.insert_settlement(&other).await.unwrap();
    assert!(!again.inserted);
    let again = again.row;
    assert_eq!(again, stored);
    assert_ne!(again.new.request_hash, other.request_hash);

    // A later insert does not reset a row that moved on.
    db.store
        .mark_submitted(first.key, h(5), T0 + 5)
        .await
        .unwrap();
    let moved = db.store.insert_settlement(&first).await.unwrap().row;
    assert_eq!(moved.status, SettlementStatus::Submitted);
    assert_eq!(moved.tx_hash, Some(h(5)));
    assert_eq!(db.raw.count("SELECT COUNT(*) FROM settlements").await, 1);
}

async fn concurrent_inserts_make_one_row(db: Db) {
    let base = new_settlement(7);
    let tasks: Vec<_> = (0..50u64)
        .map(|i| {
            let store = db.store.clone();
            let new = NewSettlement {
                request_hash: h(10_000 + i),
                created_at: T0 + i,
                ..base.clone()
            };
            tokio::spawn(async move { store.insert_settlement(&new).await.unwrap() })
        })
        .collect();
    let mut rows = Vec::new();
    let mut inserted = 0;
    for task in tasks {
        let recorded = task.await.unwrap();
        inserted += usize::from(recorded.inserted);
        rows.push(recorded.row);
    }
    assert_eq!(inserted, 1, "exactly one caller inserts");
    assert!(
        rows.iter().all(|r| *r == rows[0]),
        "every caller gets the stored row"
    );
    assert_eq!(get(&db, base.key).await, rows[0]);
    assert_eq!(db.raw.count("SELECT COUNT(*) FROM settlements").await, 1);
}

async fn submitted_and_pending_rules(db: Db) {
    let new = new_settlement(1);
    db.store.insert_settlement(&new).await.unwrap();

    // received -> pending is allowed; pending -> submitted (a replacement) too.
    db.store.mark_pending(new.key, T0 + 1).await.unwrap();
    assert_eq!(get(&db, new.key).await.status, SettlementStatus::Pending);
    db.store
        .mark_submitted(new.key, h(1), T0 + 2)
        .await
        .unwrap();
    let s = get(&db, new.key).await;
    assert_eq!(
        (s.status, s.tx_hash, s.updated_at),
        (SettlementStatus::Submitted, Some(h(1)), T0 + 2)
    );

    // The same hash again changes nothing, not even updated_at.
    db.store
        .mark_submitted(new.key, h(1), T0 + 3)
        .await
        .unwrap();
    assert_eq!(get(&db, new.key).await, s);

    // submitted -> pending keeps the hash; the same hash does not pull it back to submitted.
    db.store.mark_pending(new.key, T0 + 4).await.unwrap();
    let p = get(&db, new.key).await;
    assert_eq!(
        (p.status, p.tx_hash, p.updated_at),
        (SettlementStatus::Pending, Some(h(1)), T0 + 4)
    );
    db.store
        .mark_submitted(new.key, h(1), T0 + 5)
        .await
        .unwrap();
    assert_eq!(get(&db, new.key).await, p);
    db.store.mark_pending(new.key, T0 + 6).await.unwrap();
    assert_eq!(
        get(&db, new.key).await,
        p,
        "pending -> pending changes nothing"
    );

    // A replacement transaction is recorded.
    db.store
        .mark_submitted(new.key, h(2), T0 + 7)
        .await
        .unwrap();
    let r = get(&db, new.key).await;
    assert_eq!(
        (r.status, r.tx_hash, r.updated_at),
        (SettlementStatus::Submitted, Some(h(2)), T0 + 7)
    );
    assert_eq!(r.new, new);
}

async fn failed_rules(db: Db) {
    let new = new_settlement(1);
    db.store.insert_settlement(&new).await.unwrap();
    db.store
        .mark_submitted(new.key, h(1), T0 + 1)
        .await
        .unwrap();
    db.store
        .mark_failed(new.key, "InsufficientFunds: balance 0", T0 + 2)
        .await
        .unwrap();
    let failed = get(&db, new.key).await;
    assert_eq!(failed.status, SettlementStatus::Failed);
    assert_eq!(
        failed.error.as_deref(),
        Some("InsufficientFunds: balance 0")
    );
    assert_eq!(failed.tx_hash, Some(h(1)));
    assert_eq!(failed.updated_at, T0 + 2);

    // Failed is final for everything but a confirmation; the first error stays.
    db.store
        .mark_failed(new.key, "another reason", T0 + 3)
        .await
        .unwrap();
    db.store
        .mark_submitted(new.key, h(2), T0 + 4)
        .await
        .unwrap();
    db.store.mark_pending(new.key, T0 + 5).await.unwrap();
    assert_eq!(get(&db, new.key).await, failed);

    // The chain is the truth: a transaction that did land confirms a failed row.
    let confirmed = db
        .store
        .mark_confirmed(&new, h(1), 42, Some("proof"), T0 + 6)
        .await
        .unwrap();
    assert_eq!(confirmed.status, SettlementStatus::Confirmed);
    assert_eq!(confirmed.error, None);
    assert_eq!(confirmed.block, Some(42));

    // A received row can fail before any broadcast.
    let early = new_settlement(2);
    db.store.insert_settlement(&early).await.unwrap();
    db.store
        .mark_failed(early.key, "refused", T0 + 7)
        .await
        .unwrap();
    let s = get(&db, early.key).await;
    assert_eq!(
        (s.status, s.tx_hash, s.error.as_deref()),
        (SettlementStatus::Failed, None, Some("refused"))
    );
}

async fn confirmed_is_final(db: Db) {
    let new = new_settlement(1);
    db.store.insert_settlement(&new).await.unwrap();
    db.store
        .mark_submitted(new.key, h(1), T0 + 1)
        .await
        .unwrap();
    let first = db
        .store
        .mark_confirmed(&new, h(1), 100, Some("first"), T0 + 2)
        .await
        .unwrap();
    assert_eq!(get(&db, new.key).await, first);

    db.store
        .mark_submitted(new.key, h(2), T0 + 3)
        .await
        .unwrap();
    db.store.mark_pending(new.key, T0 + 4).await.unwrap();
    db.store
        .mark_failed(new.key, "late failure", T0 + 5)
        .await
        .unwrap();
    let second = db
        .store
        .mark_confirmed(&new, h(3), 200, Some("second"), T0 + 6)
        .await
        .unwrap();
    assert_eq!(second, first, "the first confirmation wins");
    assert_eq!(get(&db, new.key).await, first);
    let second = db
        .store
        .mark_confirmed(&new, h(3), 200, None, T0 + 7)
        .await
        .unwrap();
    assert_eq!(second, first);
    assert!(db.store.unfinished(10).await.unwrap().is_empty());
}

async fn first_proof_wins_under_concurrency(db: Db) {
    let new = new_settlement(1);
    db.store.insert_settlement(&new).await.unwrap();
    db.store
        .mark_submitted(new.key, h(1), T0 + 1)
        .await
        .unwrap();
    let tasks: Vec<_> = (0..20u64)
        .map(|i| {
            let (store, new) = (db.store.clone(), new.clone());
            tokio::spawn(async move {
                let proof = format!("proof-{i}");
                store
                    .mark_confirmed(&new, h(100 + i), 1_000 + i, Some(&proof), T0 + 10 + i)
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut rows = Vec::new();
    for task in tasks {
        rows.push(task.await.unwrap());
    }
    assert!(
        rows.iter().all(|r| *r == rows[0]),
        "every caller sees the one stored proof: {rows:#?}"
    );
    let stored = get(&db, new.key).await;
    assert_eq!(stored, rows[0]);
    // The winner's values belong together.
    let i = stored.block.unwrap() - 1_000;
    assert!(i < 20);
    assert_eq!(stored.tx_hash, Some(h(100 + i)));
    assert_eq!(stored.proof, Some(format!("proof-{i}")));
    assert_eq!(stored.updated_at, T0 + 10 + i);
}

async fn unknown_keys(db: Db) {
    let key = h(404);
    assert_eq!(db.store.settlement(key).await.unwrap(), None);
    db.store.mark_submitted(key, h(1), T0).await.unwrap();
    db.store.mark_pending(key, T0).await.unwrap();
    db.store.mark_failed(key, "x", T0).await.unwrap();
    assert!(matches!(
        db.store
            .mark_confirmed(
                &NewSettlement {
                    key,
                    ..new_settlement(404)
                },
                h(1),
                1,
                Some("p"),
                T0
            )
            .await,
        Err(StoreError::Database(sqlx::Error::RowNotFound))
    ));
    assert_eq!(
        db.raw.count("SELECT COUNT(*) FROM settlements").await,
        0,
        "nothing was created"
    );

    // A key recorded for another request, or with another fee, is not this payment's to
    // confirm: refused, and the row, the events and the rollups stay as they were.
    let new = new_settlement(1);
    db.store.insert_settlement(&new).await.unwrap();
    let others = [
        NewSettlement {
            request_hash: h(9),
            ..new.clone()
        },
        NewSettlement {
            fee: Amount::from_units(1),
            ..new.clone()
        },
    ];
    for other in &others {
        assert!(matches!(
            db.store
                .mark_confirmed(other, h(1), 1, Some("p"), T0 + 1)
                .await,
            Err(StoreError::Database(sqlx::Error::RowNotFound))
        ));
    }
    assert_eq!(
        db.store.settlement(new.key).await.unwrap(),
        Some(received(&new))
    );
    for count in [
        "SELECT COUNT(*) FROM events",
        "SELECT COUNT(*) FROM volume_rollups",
        "SELECT COUNT(*) FROM payer_rollups",
    ] {
        assert_eq!(db.raw.count(count).await, 0, "{count}");
    }
}

/// A confirmation records one `payment.settled` event with it and a pending delivery for each
/// enabled endpoint of the payee that takes the event, and nothing more when repeated (on
/// PostgreSQL all of it is one statement: `settlements::CONFIRM_POSTGRES`).
async fn a_confirmation_records_its_event_for_the_endpoints_taking_it(db: Db) {
    let new = new_settlement(1);
    let other = Address::repeat_byte(0x77);
    let endpoints = [
        ("all", new.pay_to, "*", true),
        (
            "settled",
            new.pay_to,
            "payment.failed,payment.settled",
            true,
        ),
        ("failed", new.pay_to, "payment.failed", true),
        ("off", new.pay_to, "*", false),
        ("elsewhere", other, "*", true),
    ];
    for (id, provider, events, enabled) in endpoints {
        db.store
            .insert_webhook_endpoint(&store::Endpoint {
                id: id.into(),
                provider,
                url: format!("https://hooks.example/{id}"),
                events: events.into(),
                description: String::new(),
                secret: "sealed".into(),
                old_secret: None,
                old_secret_expires_at: None,
                enabled,
                disabled_reason: None,
                created_at: T0,
                updated_at: T0,
            })
            .await
            .unwrap();
    }
    db.store.insert_settlement(&new).await.unwrap();
    for at in [T0 + 6, T0 + 7] {
        db.store
            .mark_confirmed(&new, h(1), 42, Some("proof"), at)
            .await
            .unwrap();
    }
    let events = db.store.events(new.pay_to, 0, 10).await.unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    let e = &events[0].new;
    assert_eq!(
        (e.r#type.as_str(), e.created_at),
        ("payment.settled", T0 + 6)
    );
    let data: serde_json::Value = serde_json::from_str(&e.data).unwrap();
    assert_eq!(data["txHash"], serde_json::json!(h(1)));
    assert_eq!(data["block"], 42);
    assert_eq!(data["payer"], serde_json::json!(new.payer));
    assert_eq!(data["fee"], serde_json::json!(new.fee));
    for (id, provider, _, _) in endpoints {
        let deliveries = db.store.deliveries(provider, id, 10).await.unwrap();
        let expected = usize::from(id == "all" || id == "settled");
        assert_eq!(deliveries.len(), expected, "{id}: {deliveries:?}");
        if let Some(d) = deliveries.first() {
            assert_eq!((d.event.seq, d.next_attempt_at), (events[0].seq, T0 + 6));
        }
    }
}

/// Many payments written at once, which each batch runs as few statements as it can (one
/// multi-row insert, and on PostgreSQL one multi-row confirmation): each key is inserted by
/// exactly one caller, every caller gets the stored row, a repeat in the same batch and a
/// confirmation of another request get their own answers, and what the confirmations record
/// adds up: one event and one delivery per payment, the rollups summed per row.
async fn payments_written_at_once_are_each_recorded_once(db: Db) {
    const N: u64 = 150;
    let pay_to = Address::parse_checksummed(PAY_TO, None).unwrap();
    db.store
        .insert_webhook_endpoint(&store::Endpoint {
            id: "all".into(),
            provider: pay_to,
            url: "https://hooks.example/all".into(),
            events: "*".into(),
            description: String::new(),
            secret: "sealed".into(),
            old_secret: None,
            old_secret_expires_at: None,
            enabled: true,
            disabled_reason: None,
            created_at: T0,
            updated_at: T0,
        })
        .await
        .unwrap();
    let news: Vec<NewSettlement> = (0..N)
        .map(|n| NewSettlement {
            payer: Address::repeat_byte(1 + (n % 3) as u8),
            resource: Some(format!("https://api.example/r{}", n % 2)),
            amount: Amount::from_units(1_000 + n),
            ..new_settlement(n)
        })
        .collect();

    // Each payment inserted three times at once: twice itself, once under other terms.
    let mut inserts = Vec::new();
    for (n, new) in (0u64..).zip(&news) {
        let other = NewSettlement {
            request_hash: h(900_000 + n),
            ..new.clone()
        };
        for new in [new.clone(), new.clone(), other] {
            let store = db.store.clone();
            inserts.push(tokio::spawn(async move {
                let recorded = store.insert_settlement(&new).await.unwrap();
                (new, recorded)
            }));
        }
    }
    let mut stored = std::collections::HashMap::new();
    let mut inserted = std::collections::HashMap::new();
    for task in inserts {
        let (new, recorded) = task.await.unwrap();
        if recorded.inserted {
            *inserted.entry(new.key).or_insert(0) += 1;
            assert_eq!(recorded.row, received(&new), "the inserter's own row");
        }
        let row = stored
            .entry(new.key)
            .or_insert_with(|| recorded.row.clone());
        assert_eq!(*row, recorded.row, "every caller gets the stored row");
    }
    assert_eq!(inserted.len(), N as usize);
    assert!(inserted.values().all(|&n| n == 1), "one insert per key");

    // Each confirmed twice at once (the first proof wins), and once for another request.
    let mut confirms = Vec::new();
    for (n, row) in (0u64..).zip(stored.values()) {
        for (i, new) in [
            row.new.clone(),
            row.new.clone(),
            NewSettlement {
                request_hash: h(800_000 + n),
                ..row.new.clone()
            },
        ]
        .into_iter()
        .enumerate()
        {
            let store = db.store.clone();
            let block = 1_000 + 10 * n + i as u64;
            confirms.push(tokio::spawn(async move {
                let proof = format!("proof-{block}");
                let confirmed = store
                    .mark_confirmed(&new, h(block), block, Some(&proof), T0 + 100)
                    .await;
                (new, i, confirmed)
            }));
        }
    }
    let mut confirmed = std::collections::HashMap::new();
    for task in confirms {
        let (new, i, outcome) = task.await.unwrap();
        if i == 2 {
            assert!(
                matches!(outcome, Err(StoreError::Database(sqlx::Error::RowNotFound))),
                "another request's confirmation: {outcome:?}"
            );
            continue;
        }
        let row = outcome.unwrap();
        assert_eq!((row.status, &row.new), (SettlementStatus::Confirmed, &new));
        let first = confirmed.entry(new.key).or_insert_with(|| row.clone());
        assert_eq!(*first, row, "both confirmations see the first proof");
        assert_eq!(row.proof, Some(format!("proof-{}", row.block.unwrap())));
    }
    assert_eq!(confirmed.len(), N as usize);
    for row in confirmed.values() {
        assert_eq!(get(&db, row.new.key).await, *row);
    }

    let count = |sql| db.raw.count(sql);
    assert_eq!(count("SELECT COUNT(*) FROM events").await, N as i64);
    assert_eq!(
        count("SELECT COUNT(*) FROM webhook_deliveries").await,
        N as i64
    );
    let gross: u64 = stored
        .values()
        .map(|s| u64::try_from(s.new.amount.get()).unwrap())
        .sum();
    let fees: u64 = stored
        .values()
        .map(|s| u64::try_from(s.new.fee.get()).unwrap())
        .sum();
    // One hour, two resources, three payers: a rollup row each.
    assert_eq!(count("SELECT COUNT(*) FROM volume_rollups").await, 2);
    assert_eq!(count("SELECT COUNT(*) FROM payer_rollups").await, 3);
    for (sql, expected) in [
        (
            "SELECT CAST(SUM(payments) AS BIGINT) FROM volume_rollups",
            N,
        ),
        ("SELECT CAST(SUM(payments) AS BIGINT) FROM payer_rollups", N),
        (
            "SELECT CAST(SUM(gross) AS BIGINT) FROM volume_rollups",
            gross,
        ),
        (
            "SELECT CAST(SUM(gross) AS BIGINT) FROM payer_rollups",
            gross,
        ),
        ("SELECT CAST(SUM(fees) AS BIGINT) FROM volume_rollups", fees),
        ("SELECT CAST(SUM(fees) AS BIGINT) FROM payer_rollups", fees),
    ] {
        assert_eq!(count(sql).await, expected as i64, "{sql}");
    }
}

async fn unfinished_oldest_first_and_counts(db: Db) {
    // created_at out of insertion order; two rows share a timestamp (ties break by key).
    let plan: [(u64, u64, SettlementStatus); 8] = [
        (1, 50, SettlementStatus::Received),
        (2, 10, SettlementStatus::Submitted),
        (3, 40, SettlementStatus::Confirmed),
        (4, 30, SettlementStatus::Pending),
        (5, 20, SettlementStatus::Failed),
        (6, 5, SettlementStatus::Received),
        (7, 30, SettlementStatus::Received),
        (8, 60, SettlementStatus::Pending),
    ];
    for (n, created, status) in plan {
        let new = NewSettlement {
            created_at: T0 + created,
            ..new_settlement(n)
        };
        db.store.insert_settlement(&new).await.unwrap();
        match status {
            SettlementStatus::Received => {}
            SettlementStatus::Submitted => db
                .store
                .mark_submitted(new.key, h(n), T0 + 100)
                .await
                .unwrap(),
            SettlementStatus::Pending => db.store.mark_pending(new.key, T0 + 100).await.unwrap(),
            SettlementStatus::Confirmed => {
                db.store
                    .mark_confirmed(&new, h(n), 1, None, T0 + 100)
                    .await
                    .unwrap();
            }
            SettlementStatus::Failed => db.store.mark_failed(new.key, "e", T0 + 100).await.unwrap(),
        }
    }
    let keys = |rows: Vec<Settlement>| rows.iter().map(|r| r.new.key).collect::<Vec<_>>();
    let expected: Vec<B256> = [6, 2, 4, 7, 1, 8].map(|n| new_settlement(n).key).to_vec();
    assert_eq!(keys(db.store.unfinished(100).await.unwrap()), expected);
    assert_eq!(keys(db.store.unfinished(2).await.unwrap()), expected[..2]);
    assert!(db.store.unfinished(0).await.unwrap().is_empty());

    assert_eq!(
        db.store.count_by_status().await.unwrap(),
        vec![
            (SettlementStatus::Received, 3),
            (SettlementStatus::Submitted, 1),
            (SettlementStatus::Pending, 2),
            (SettlementStatus::Confirmed, 1),
            (SettlementStatus::Failed, 1),
        ]
    );
}

async fn api_keys(db: Db) {
    let provider = Address::parse_checksummed(PAY_TO, None).unwrap();
    let key = B256::repeat_byte(0x42);
    assert_eq!(db.store.api_key_provider(key).await.unwrap(), None);
    db.store
        .insert_api_key(key, provider, "ci key", T0)
        .await
        .unwrap();
    assert_eq!(
        db.store.api_key_provider(key).await.unwrap(),
        Some(provider)
    );
    assert_eq!(
        db.store
            .api_key_provider(key)
            .await
            .unwrap()
            .unwrap()
            .to_checksum(None),
        PAY_TO
    );

    // A repeat keeps the first owner.
    db.store
        .insert_api_key(key, Address::repeat_byte(9), "other", T0 + 1)
        .await
        .unwrap();
    assert_eq!(
        db.store.api_key_provider(key).await.unwrap(),
        Some(provider)
    );

    assert!(db.store.revoke_api_key(key, T0 + 2).await.unwrap());
    assert_eq!(db.store.api_key_provider(key).await.unwrap(), None);
    assert!(
        !db.store.revoke_api_key(key, T0 + 3).await.unwrap(),
        "already revoked"
    );
    assert!(
        !db.store.revoke_api_key(h(1), T0 + 3).await.unwrap(),
        "unknown"
    );

    // Re-adding a revoked key does not bring it back.
    db.store
        .insert_api_key(key, provider, "ci key", T0 + 4)
        .await
        .unwrap();
    assert_eq!(db.store.api_key_provider(key).await.unwrap(), None);

    // Another key of the same provider is independent.
    let other = B256::repeat_byte(0x43);
    db.store
        .insert_api_key(other, provider, "", T0 + 5)
        .await
        .unwrap();
    assert_eq!(
        db.store.api_key_provider(other).await.unwrap(),
        Some(provider)
    );
}

async fn migrate_twice_and_ping(db: Db) {
    let new = new_settlement(1);
    db.store.insert_settlement(&new).await.unwrap();
    db.store.migrate().await.unwrap();
    db.store.migrate().await.unwrap();
    db.store.ping().await.unwrap();
    assert_eq!(get(&db, new.key).await, received(&new));
}

async fn corrupt_rows_are_errors(db: Db) {
    let bad = new_settlement(1);
    let good = new_settlement(2);
    db.store.insert_settlement(&bad).await.unwrap();
    db.store.insert_settlement(&good).await.unwrap();
    let corruptions: [&'static str; 5] = [
        "UPDATE settlements SET amount = '12x' WHERE key = '0x00000000000000000000000000000000000000000000000000000000000f4241'",
        "UPDATE settlements SET amount = '0500000' WHERE key = '0x00000000000000000000000000000000000000000000000000000000000f4241'",
        "UPDATE settlements SET payer = '0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed' WHERE key = '0x00000000000000000000000000000000000000000000000000000000000f4241'",
        "UPDATE settlements SET tx_hash = '0x1234' WHERE key = '0x00000000000000000000000000000000000000000000000000000000000f4241'",
        "UPDATE settlements SET memo = 'memo' WHERE key = '0x00000000000000000000000000000000000000000000000000000000000f4241'",
    ];
    for sql in corruptions {
        assert_eq!(db.raw.execute(sql).await.unwrap(), 1, "{sql}");
        assert!(
            matches!(
                db.store.settlement(bad.key).await,
                Err(StoreError::Corrupt(_))
            ),
            "{sql}"
        );
        assert!(
            matches!(db.store.unfinished(10).await, Err(StoreError::Corrupt(_))),
            "{sql}"
        );
        // Restore the row for the next corruption.
        db.raw.execute("DELETE FROM settlements WHERE key = '0x00000000000000000000000000000000000000000000000000000000000f4241'").await.unwrap();
        db.store.insert_settlement(&bad).await.unwrap();
    }
    assert_eq!(get(&db, good.key).await, received(&good));
    // The schema refuses what it can.
    assert!(
        db.raw
            .execute("UPDATE settlements SET status = 'bogus'")
            .await
            .is_err()
    );
    assert!(
        db.raw
            .execute("UPDATE settlements SET kind = 'other'")
            .await
            .is_err()
    );
}

#[test]
fn keys_in_corruption_sql_match() {
    assert_eq!(
        format!("{:x}", new_settlement(1).key),
        "00000000000000000000000000000000000000000000000000000000000f4241"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_reopen_keeps_rows() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir);
    let new = new_settlement(1);
    let confirmed = {
        let store = SqliteStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        store.insert_settlement(&new).await.unwrap();
        store.insert_settlement(&new_settlement(2)).await.unwrap();
        store
            .insert_api_key(h(9), new.payer, "k", T0)
            .await
            .unwrap();
        let confirmed = store
            .mark_confirmed(&new, h(1), 5, Some("proof"), T0 + 1)
            .await
            .unwrap();
        store.close().await;
        confirmed
    };
    let store = store::open(&url).await.unwrap(); // migrates again
    assert_eq!(store.settlement(new.key).await.unwrap(), Some(confirmed));
    assert_eq!(store.unfinished(10).await.unwrap().len(), 1);
    assert_eq!(store.api_key_provider(h(9)).await.unwrap(), Some(new.payer));

    // WAL is a property of the file.
    let raw = SqlitePool::connect(&url).await.unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&raw)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    raw.close().await;
}

#[tokio::test]
async fn sqlite_in_memory_for_unit_tests() {
    let store = SqliteStore::connect("sqlite::memory:").await.unwrap();
    store.migrate().await.unwrap();
    let new = new_settlement(1);
    store.insert_settlement(&new).await.unwrap();
    assert_eq!(
        store.settlement(new.key).await.unwrap(),
        Some(received(&new))
    );
    // Another in-memory store is another database.
    let other = SqliteStore::connect("sqlite::memory:").await.unwrap();
    other.migrate().await.unwrap();
    assert_eq!(other.settlement(new.key).await.unwrap(), None);
}

#[tokio::test]
async fn open_refuses_unknown_urls() {
    assert!(matches!(
        store::open("mysql://localhost/x").await,
        Err(StoreError::UnsupportedUrl(_))
    ));
    assert!(matches!(
        SqliteStore::connect("postgres://x").await,
        Err(StoreError::UnsupportedUrl(_))
    ));
}

#[tokio::test]
async fn postgres_schema_names_are_checked() {
    let url = tollgate_testkit::peer::database_url();
    let long = "a".repeat(64);
    for bad in [
        "",
        "Upper",
        "1abc",
        "a-b",
        "x\"; DROP TABLE y; --",
        long.as_str(),
    ] {
        assert!(
            matches!(
                PostgresStore::connect_with_schema(&url, bad).await,
                Err(StoreError::Database(sqlx::Error::Configuration(_)))
            ),
            "{bad:?}"
        );
    }
}
