//! Writes beyond one row: a confirmation's event and its deliveries, payments written at once
//! (each recorded once), and the unfinished rows oldest first.

use super::*;

/// A confirmation records one `payment.settled` event with it and a pending delivery for each
/// enabled endpoint of the payee that takes the event, and nothing more when repeated (on
/// PostgreSQL all of it is one statement: `settlements::CONFIRM_POSTGRES`).
pub(super) async fn a_confirmation_records_its_event_for_the_endpoints_taking_it(db: Db) {
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
pub(super) async fn payments_written_at_once_are_each_recorded_once(db: Db) {
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

pub(super) async fn unfinished_oldest_first_and_counts(db: Db) {
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
