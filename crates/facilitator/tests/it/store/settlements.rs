//! A settlement row's life: the round trip, idempotent and concurrent inserts, the rules of
//! each status, the first proof winning, and unknown keys.

use super::*;

pub(super) async fn round_trip(db: Db) {
    let extreme = NewSettlement {
        key: B256::repeat_byte(0xff),
        request_hash: B256::repeat_byte(0xee),
        amount: Amount::from(U256::MAX),
        fee: Amount::from(U256::MAX - U256::from(1)),
        memo: B256::repeat_byte(0x01),
        nonce: B256::ZERO,
        valid_before: u64::MAX,
        chain_id: i64::MAX as u64,
        // The longest network name (a settlement's event carries it as a `Network`).
        network: "n".repeat(tollgate_protocol::network::MAX_NETWORK_LEN),
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

pub(super) async fn idempotent_insert(db: Db) {
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

pub(super) async fn concurrent_inserts_make_one_row(db: Db) {
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

pub(super) async fn submitted_and_pending_rules(db: Db) {
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

pub(super) async fn failed_rules(db: Db) {
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

pub(super) async fn confirmed_is_final(db: Db) {
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

pub(super) async fn first_proof_wins_under_concurrency(db: Db) {
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

pub(super) async fn unknown_keys(db: Db) {
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
