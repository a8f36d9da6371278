//! Property tests of the facilitator's money arithmetic:
//!
//! - the metering ledger, model-based: random sequences of deductions (with and without
//!   idempotency keys, replays with the same and with another amount, stale heads), cap raises,
//!   cycle ends and on-chain charges run against a real store (SQLite in a temporary directory;
//!   PostgreSQL too, at `TOLLGATE_TEST_DATABASE_URL`) and against a plain model here;
//!   after every step the store answers as the model does and its ledger equals the model's;
//! - the dashboard's `units()`: exact for every `uint256`, in the shape `1,234.50`.

use std::{collections::BTreeMap, future::Future, str::FromStr};

use alloy::primitives::{Address, B256, U256};
use proptest::{
    prelude::*,
    sample::Index,
    test_runner::{Config, TestCaseError, TestRunner},
};
use sqlx::{
    Connection,
    postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions},
    sqlite::{SqlitePool, SqlitePoolOptions},
};
use tollgate_facilitator::{
    dashboard::units,
    metering::charge_reference,
    store::{
        AllowanceCycle, ChargeOutcome, ChargeState, DeductOutcome, Deduction, MAX_METERED,
        NewCharge, PostgresStore, SqliteStore, Store,
    },
};

const NETWORK: &str = "base-sepolia";
const T0: u64 = 1_700_000_000;
const PROVIDER: Address = Address::repeat_byte(0x51);
const RELAYER: Address = Address::repeat_byte(0x52);
/// A cap as the ledger stores it: saturated at `i64::MAX` units.
const STORED_MAX: u64 = i64::MAX as u64;

// ---------------------------------------------------------------------------------------------
// The model.

/// What a step does. Indices pick among what the model holds at that point.
#[derive(Clone, Debug)]
enum Op {
    /// A deduction of the current cycle, as the facilitator makes it: with the cap it read from
    /// the chain, or a lower one from a stale cache; or against the previous cycle (a head read
    /// just before the cycle ended).
    Deduct {
        amount: u64,
        key: Option<u8>,
        stale_cap: bool,
        stale_cycle: bool,
    },
    /// An earlier keyed deduction sent again: same key, same amount.
    Replay { pick: Index },
    /// An earlier key with another amount.
    ReplayOther { pick: Index, amount: u64 },
    /// The subscriber raises `maxOverage` by `by` on-chain; the facilitator relays it and
    /// records the cap (`tell_store`), or the store learns it with the next deduction.
    Raise { by: u64, tell_store: bool },
    /// The cycle ends: the keeper closes its ledger, and the chain moves to the next cycle.
    NextCycle,
    /// A charge of part of a cycle's unbilled usage (or more than it, or with a stale index).
    Bill {
        previous: bool,
        part: Index,
        over: bool,
        stale_index: bool,
    },
    /// A charge finishes on-chain (again, when already finished).
    Finish { pick: Index, confirmed: bool },
}

/// A charge as the model knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Charge {
    reference: B256,
    cycle: u32,
    amount: u64,
    state: ChargeState,
}

/// The ledger as it must be, and the chain as the facilitator sees it.
#[derive(Debug)]
struct Model {
    id: B256,
    /// PostgreSQL's deduction takes the cycle's row (creating it, raising its cap) before it
    /// looks at the idempotency key and keeps that on a replay; SQLite looks at the key first.
    upsert_on_replay: bool,
    /// The chain: the current cycle and its cap (`maxOverage`, unbounded `u64` here).
    cycle: u32,
    chain_cap: u64,
    rows: BTreeMap<u32, AllowanceCycle>,
    /// Idempotency key → (cycle, amount) of the deduction that used it.
    keys: BTreeMap<String, (u32, u64)>,
    /// Every applied deduction: (cycle, amount, key), in order.
    applied: Vec<(u32, u64, Option<String>)>,
    charges: Vec<Charge>,
}

impl Model {
    fn new(id: B256, cap: u64, upsert_on_replay: bool) -> Self {
        Self {
            id,
            upsert_on_replay,
            cycle: 1,
            chain_cap: cap,
            rows: BTreeMap::new(),
            keys: BTreeMap::new(),
            applied: Vec::new(),
            charges: Vec::new(),
        }
    }

    /// `upsert_cycle`: the row, created empty, its cap raised to `cap` (saturated) when higher.
    fn upsert(&mut self, cycle: u32, cap: u64) -> &mut AllowanceCycle {
        let cap = cap.min(STORED_MAX);
        let id = self.id;
        let row = self.rows.entry(cycle).or_insert_with(|| AllowanceCycle {
            network: NETWORK.to_owned(),
            id,
            cycle,
            cap,
            used: 0,
            billed: 0,
            charged: 0,
            unpaid: 0,
            deductions: 0,
            charges: 0,
            closed: false,
            first_unbilled_at: None,
        });
        row.cap = row.cap.max(cap);
        row
    }

    fn deduct(&mut self, d: &Deduction) -> DeductOutcome {
        if let Some(key) = &d.key
            && let Some(&(cycle, amount)) = self.keys.get(key)
        {
            if amount != d.amount {
                return DeductOutcome::KeyConflict;
            }
            if self.upsert_on_replay {
                self.upsert(d.cycle, d.cap);
            }
            return DeductOutcome::Replayed(self.rows[&cycle].clone());
        }
        let row = self.upsert(d.cycle, d.cap);
        if row.closed {
            return DeductOutcome::Closed(row.clone());
        }
        if d.amount > row.cap - row.used {
            return DeductOutcome::Exhausted(row.clone());
        }
        row.used += d.amount;
        row.deductions += 1;
        row.first_unbilled_at = row.first_unbilled_at.or(Some(d.at));
        let row = row.clone();
        if let Some(key) = &d.key {
            self.keys.insert(key.clone(), (d.cycle, d.amount));
        }
        self.applied.push((d.cycle, d.amount, d.key.clone()));
        DeductOutcome::Applied(row)
    }

    /// `begin_charge`: whether it starts.
    fn bill(&mut self, c: &NewCharge) -> bool {
        let Some(row) = self.rows.get_mut(&c.cycle) else {
            return false;
        };
        if row.charges != c.index || c.amount > row.used - row.billed {
            return false;
        }
        row.first_unbilled_at = (row.used > row.billed + c.amount).then_some(c.at);
        row.billed += c.amount;
        row.charges += 1;
        self.charges.push(Charge {
            reference: c.reference,
            cycle: c.cycle,
            amount: c.amount,
            state: ChargeState::Pending,
        });
        true
    }

    /// `finish_charge`: whether this call finished it.
    fn finish(&mut self, i: usize, confirmed: bool) -> bool {
        let c = &mut self.charges[i];
        if c.state != ChargeState::Pending {
            return false;
        }
        c.state = if confirmed {
            ChargeState::Confirmed
        } else {
            ChargeState::Failed
        };
        let row = self.rows.get_mut(&c.cycle).expect("a charge has its cycle");
        if confirmed {
            row.charged += c.amount;
        } else {
            row.unpaid += c.amount;
        }
        true
    }
}

// ---------------------------------------------------------------------------------------------
// Strategies.

fn any_amount() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 1..=20u64,
        2 => 1..=1_000u64,
        1 => Just(MAX_METERED),
        1 => (MAX_METERED - 16)..=MAX_METERED,
    ]
}

fn any_cap() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..=100u64,
        2 => 0..=5_000u64,
        1 => Just(MAX_METERED),
        1 => Just(u64::MAX),
    ]
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (any_amount(), prop::option::of(0..4u8), prop::bool::weighted(0.2), prop::bool::weighted(0.1))
            .prop_map(|(amount, key, stale_cap, stale_cycle)| Op::Deduct {
                amount,
                key,
                stale_cap,
                stale_cycle,
            }),
        2 => any::<Index>().prop_map(|pick| Op::Replay { pick }),
        1 => (any::<Index>(), any_amount()).prop_map(|(pick, amount)| Op::ReplayOther { pick, amount }),
        2 => (prop_oneof![1..=50u64, 1..=2_000u64, Just(u64::MAX)], any::<bool>())
            .prop_map(|(by, tell_store)| Op::Raise { by, tell_store }),
        1 => Just(Op::NextCycle),
        2 => (prop::bool::weighted(0.3), any::<Index>(), prop::bool::weighted(0.1), prop::bool::weighted(0.1))
            .prop_map(|(previous, part, over, stale_index)| Op::Bill {
                previous,
                part,
                over,
                stale_index,
            }),
        2 => (any::<Index>(), any::<bool>()).prop_map(|(pick, confirmed)| Op::Finish { pick, confirmed }),
    ]
}

fn any_case() -> impl Strategy<Value = (u64, Vec<Op>)> {
    (any_cap(), prop::collection::vec(any_op(), 1..=30))
}

// ---------------------------------------------------------------------------------------------
// The run.

/// A second connection to the store's database, to read the usage records behind its back.
enum Raw {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Raw {
    /// The usage records of `id`: (cycle, amount, key), in order.
    async fn records(&self, id: B256) -> Vec<(u32, u64, Option<String>)> {
        const SQLITE: &str = "SELECT cycle, amount, idempotency_key FROM usage_records \
             WHERE network = ?1 AND id = ?2 ORDER BY cycle, seq";
        const POSTGRES: &str = "SELECT cycle, amount, idempotency_key FROM usage_records \
             WHERE network = $1 AND id = $2 ORDER BY cycle, seq";
        let id = id.to_string();
        let rows: Vec<(i64, i64, Option<String>)> = match self {
            Self::Sqlite(pool) => sqlx::query_as(SQLITE)
                .bind(NETWORK)
                .bind(&id)
                .fetch_all(pool)
                .await
                .unwrap(),
            Self::Postgres(pool) => sqlx::query_as(POSTGRES)
                .bind(NETWORK)
                .bind(&id)
                .fetch_all(pool)
                .await
                .unwrap(),
        };
        rows.into_iter()
            .map(|(c, a, k)| (u32::try_from(c).unwrap(), u64::try_from(a).unwrap(), k))
            .collect()
    }
}

/// Runs `ops` on `store` and on the model, comparing after every step.
async fn run_case(
    store: &dyn Store,
    raw: &Raw,
    id: B256,
    cap: u64,
    ops: &[Op],
    upsert_on_replay: bool,
) -> Result<(), TestCaseError> {
    let mut m = Model::new(id, cap, upsert_on_replay);
    for (step, op) in ops.iter().enumerate() {
        let at = T0 + step as u64;
        let deduction = |cycle: u32, cap: u64, amount: u64, key: Option<String>| Deduction {
            network: NETWORK.to_owned(),
            id,
            cycle,
            cap,
            amount,
            key,
            provider: Some(PROVIDER),
            at,
        };
        match op {
            Op::Deduct {
                amount,
                key,
                stale_cap,
                stale_cycle,
            } => {
                let cycle = if *stale_cycle && m.cycle > 1 {
                    m.cycle - 1
                } else {
                    m.cycle
                };
                let cap = if *stale_cap {
                    m.chain_cap / 2
                } else {
                    m.chain_cap
                };
                let key = key.map(|k| format!("key-{k}"));
                let d = deduction(cycle, cap, *amount, key);
                let expected = m.deduct(&d);
                let got = store.deduct_allowance(&d).await.unwrap();
                prop_assert_eq!(got, expected, "step {}: {:?}", step, op);
            }
            Op::Replay { pick } | Op::ReplayOther { pick, .. } => {
                if m.keys.is_empty() {
                    continue;
                }
                let (key, &(_, earlier)) = m.keys.iter().nth(pick.index(m.keys.len())).unwrap();
                let amount = match op {
                    Op::ReplayOther { amount, .. } if *amount != earlier => *amount,
                    Op::ReplayOther { .. } => earlier % MAX_METERED + 1,
                    _ => earlier,
                };
                let d = deduction(m.cycle, m.chain_cap, amount, Some(key.clone()));
                let expected = m.deduct(&d);
                if amount == earlier {
                    prop_assert!(matches!(expected, DeductOutcome::Replayed(_)));
                } else {
                    prop_assert_eq!(&expected, &DeductOutcome::KeyConflict);
                }
                let got = store.deduct_allowance(&d).await.unwrap();
                prop_assert_eq!(got, expected, "step {}: {:?}", step, op);
            }
            Op::Raise { by, tell_store } => {
                m.chain_cap = m.chain_cap.saturating_add(*by);
                if *tell_store {
                    let (cycle, cap) = (m.cycle, m.chain_cap);
                    let expected = m.upsert(cycle, cap).clone();
                    let got = store
                        .upsert_allowance_cycle(NETWORK, id, cycle, cap, false, at)
                        .await
                        .unwrap();
                    prop_assert_eq!(got, expected, "step {}: {:?}", step, op);
                }
            }
            Op::NextCycle => {
                let (cycle, cap) = (m.cycle, m.chain_cap);
                let row = m.upsert(cycle, cap);
                row.closed = true;
                let expected = row.clone();
                let got = store
                    .upsert_allowance_cycle(NETWORK, id, cycle, cap, true, at)
                    .await
                    .unwrap();
                prop_assert_eq!(got, expected, "step {}: {:?}", step, op);
                m.cycle += 1;
            }
            Op::Bill {
                previous,
                part,
                over,
                stale_index,
            } => {
                let cycle = if *previous && m.cycle > 1 {
                    m.cycle - 1
                } else {
                    m.cycle
                };
                let (charges, unbilled) = m
                    .rows
                    .get(&cycle)
                    .map_or((0, 0), |r| (r.charges, r.unbilled()));
                // At most `MAX_METERED`, as `NewCharge` requires (the store saturates beyond).
                let amount = if unbilled == 0 || (*over && unbilled < MAX_METERED) {
                    unbilled + 1
                } else {
                    1 + part.index(usize::try_from(unbilled).unwrap_or(usize::MAX)) as u64
                };
                let index = if *stale_index { charges + 1 } else { charges };
                let c = NewCharge {
                    network: NETWORK.to_owned(),
                    id,
                    cycle,
                    index,
                    reference: charge_reference(id, cycle, index),
                    amount,
                    relayer: RELAYER,
                    at,
                };
                let expected = m.bill(&c);
                let got = store.begin_charge(&c).await.unwrap();
                prop_assert_eq!(got, expected, "step {}: {:?}", step, op);
            }
            Op::Finish { pick, confirmed } => {
                if m.charges.is_empty() {
                    continue;
                }
                let i = pick.index(m.charges.len());
                let reference = m.charges[i].reference;
                let expected = m.finish(i, *confirmed);
                let outcome = if *confirmed {
                    ChargeOutcome::Confirmed {
                        tx_hash: Some(B256::repeat_byte(0xee)),
                    }
                } else {
                    ChargeOutcome::Failed {
                        error: "InsufficientFunds".into(),
                    }
                };
                let got = store
                    .finish_charge(NETWORK, reference, &outcome, at)
                    .await
                    .unwrap();
                prop_assert_eq!(got, expected, "step {}: {:?}", step, op);
            }
        }
        check_ledger(store, raw, &m, step).await?;
    }
    Ok(())
}

/// The store's ledger equals the model's, and the invariants hold on it.
async fn check_ledger(
    store: &dyn Store,
    raw: &Raw,
    m: &Model,
    step: usize,
) -> Result<(), TestCaseError> {
    for cycle in 1..=m.cycle {
        let got = store.allowance_cycle(NETWORK, m.id, cycle).await.unwrap();
        prop_assert_eq!(
            got.as_ref(),
            m.rows.get(&cycle),
            "step {}: cycle {}",
            step,
            cycle
        );
        if let Some(row) = got {
            prop_assert!(row.used <= row.cap, "used above the cap: {:?}", row);
            prop_assert!(
                row.charged + row.unpaid <= row.billed && row.billed <= row.used,
                "charged + unpaid <= billed <= used: {:?}",
                row
            );
            let (sum, n) = m
                .applied
                .iter()
                .filter(|(c, _, _)| *c == cycle)
                .fold((0u64, 0u64), |(s, n), (_, a, _)| (s + a, n + 1));
            prop_assert_eq!(row.used, sum, "used is the sum of the applied deductions");
            prop_assert_eq!(row.deductions, n);
            let charges = store.overage_charges(NETWORK, m.id, cycle).await.unwrap();
            let got: Vec<_> = charges
                .iter()
                .map(|c| (c.reference, c.amount, c.state))
                .collect();
            let want: Vec<_> = m
                .charges
                .iter()
                .filter(|c| c.cycle == cycle)
                .map(|c| (c.reference, c.amount, c.state))
                .collect();
            prop_assert_eq!(got, want, "step {}: charges of cycle {}", step, cycle);
        }
    }
    let latest = store.latest_allowance_cycle(NETWORK, m.id).await.unwrap();
    prop_assert_eq!(latest.as_ref(), m.rows.values().next_back());
    // The usage records: one per applied deduction, none for a replay, each key at most once.
    let mut want = m.applied.clone();
    want.sort_by_key(|(c, _, _)| *c);
    prop_assert_eq!(
        raw.records(m.id).await,
        want,
        "step {}: usage records",
        step
    );
    let mut keys: Vec<&String> = m
        .applied
        .iter()
        .filter_map(|(_, _, k)| k.as_ref())
        .collect();
    let n = keys.len();
    keys.sort();
    keys.dedup();
    prop_assert_eq!(keys.len(), n, "a key deducted twice");
    Ok(())
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        // Regression files beside this file, as the `proptest!` macro would keep them.
        source_file: Some(file!()),
        ..Config::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A fresh id per case (one PostgreSQL schema serves every case).
fn case_id() -> B256 {
    B256::random()
}

fn run<F, Fut>(runner: &mut TestRunner, rt: &tokio::runtime::Runtime, case: F)
where
    F: Fn(u64, Vec<Op>) -> Fut,
    Fut: Future<Output = Result<(), TestCaseError>>,
{
    let result = runner.run(&any_case(), |(cap, ops)| rt.block_on(case(cap, ops)));
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// On SQLite, a store of its own per case (a temporary directory).
#[test]
fn ledger_matches_the_model_on_sqlite() {
    let rt = runtime();
    let mut runner = TestRunner::new(config(64));
    run(&mut runner, &rt, |cap, ops| async move {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("facilitator.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let raw = SqlitePoolOptions::new()
            .max_connections(1)
            .connect(&url)
            .await
            .unwrap();
        let outcome = run_case(
            &store,
            &Raw::Sqlite(raw.clone()),
            case_id(),
            cap,
            &ops,
            false,
        )
        .await;
        raw.close().await;
        store.close().await;
        outcome
    });
}

/// On PostgreSQL (`TOLLGATE_TEST_DATABASE_URL`; unset, the test fails): one schema for the run (dropped
/// afterwards), a subscription of its own per case.
#[test]
fn ledger_matches_the_model_on_postgres() {
    let url = tollgate_testkit::peer::database_url();
    let rt = runtime();
    let schema = format!("tg_props_{}_{}", std::process::id(), T0);
    let (store, raw) = rt.block_on(async {
        let store = PostgresStore::connect_with_schema(&url, &schema)
            .await
            .unwrap();
        store.migrate().await.unwrap();
        let options = PgConnectOptions::from_str(&url).unwrap();
        let raw = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(options.options([("search_path", schema.as_str())]))
            .await
            .unwrap();
        (store, raw)
    });
    let raw = Raw::Postgres(raw);
    let mut runner = TestRunner::new(config(32));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(&mut runner, &rt, |cap, ops| {
            let (store, raw) = (&store, &raw);
            async move { run_case(store, raw, case_id(), cap, &ops, true).await }
        });
    }));
    rt.block_on(async {
        if let Raw::Postgres(pool) = &raw {
            pool.close().await;
        }
        store.close().await;
        let options = PgConnectOptions::from_str(&url).unwrap();
        let mut conn = PgConnection::connect_with(&options).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA \"{schema}\" CASCADE"
        )))
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
    });
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

// ---------------------------------------------------------------------------------------------
// The dashboard's amounts.

fn any_u256() -> impl Strategy<Value = U256> {
    prop_oneof![
        any::<[u64; 4]>().prop_map(U256::from_limbs),
        any::<u128>().prop_map(U256::from),
        any::<u64>().prop_map(U256::from),
        (0..=1_000_000_000u64).prop_map(U256::from),
        Just(U256::from(u128::MAX)),
        Just(U256::from(u128::MAX) + U256::from(1u8)),
        Just(U256::MAX),
    ]
}

/// `1,234.56` back to units, exactly (`None` when it is not of that shape).
fn unformat(shown: &str) -> Option<U256> {
    let (whole, frac) = shown.split_once('.')?;
    let groups: Vec<&str> = whole.split(',').collect();
    let shaped = groups.iter().enumerate().all(|(i, g)| {
        g.bytes().all(|b| b.is_ascii_digit())
            && if i == 0 {
                (1..=3).contains(&g.len()) && (g.len() == 1 || !g.starts_with('0'))
            } else {
                g.len() == 3
            }
    });
    let frac_ok = (2..=6).contains(&frac.len())
        && frac.bytes().all(|b| b.is_ascii_digit())
        && (frac.len() == 2 || !frac.ends_with('0'));
    if !shaped || !frac_ok {
        return None;
    }
    let digits = format!("{}{frac:0<6}", groups.concat());
    U256::from_str_radix(&digits, 10).ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every `uint256` of units shows as the exact token amount, `1,234.50`-shaped.
    #[test]
    fn units_are_exact(v in any_u256()) {
        let shown = units(&v.to_string());
        prop_assert_eq!(unformat(&shown), Some(v), "{}", shown);
    }

    /// The same through `u128`, the analytics sums' type.
    #[test]
    fn units_are_exact_for_u128(v in any::<u128>()) {
        let shown = units(&v.to_string());
        prop_assert_eq!(unformat(&shown), Some(U256::from(v)), "{}", shown);
    }

    /// `remaining()` and `unbilled()` never underflow, and add up on a consistent ledger.
    #[test]
    fn ledger_helpers_saturate(cap in any::<u64>(), used in any::<u64>(), billed in any::<u64>()) {
        let row = AllowanceCycle {
            network: NETWORK.to_owned(),
            id: B256::ZERO,
            cycle: 1,
            cap,
            used,
            billed,
            charged: 0,
            unpaid: 0,
            deductions: 0,
            charges: 0,
            closed: false,
            first_unbilled_at: None,
        };
        prop_assert_eq!(row.remaining(), cap.saturating_sub(used));
        prop_assert_eq!(row.unbilled(), used.saturating_sub(billed));
        if used <= cap {
            prop_assert_eq!(row.remaining() + used, cap);
        }
        if billed <= used {
            prop_assert_eq!(row.unbilled() + billed, used);
        }
    }
}
