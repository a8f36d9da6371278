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

mod schema;
mod settlements;
mod writes;

use schema::{api_keys, corrupt_rows_are_errors, migrate_twice_and_ping};
use settlements::{
    concurrent_inserts_make_one_row, confirmed_is_final, failed_rules,
    first_proof_wins_under_concurrency, idempotent_insert, round_trip, submitted_and_pending_rules,
    unknown_keys,
};
use writes::{
    a_confirmation_records_its_event_for_the_endpoints_taking_it,
    payments_written_at_once_are_each_recorded_once, unfinished_oldest_first_and_counts,
};

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
