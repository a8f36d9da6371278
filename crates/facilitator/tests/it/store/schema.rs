//! API keys, migrations run twice, and corrupt rows read as errors.

use super::*;

pub(super) async fn api_keys(db: Db) {
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

pub(super) async fn migrate_twice_and_ping(db: Db) {
    let new = new_settlement(1);
    db.store.insert_settlement(&new).await.unwrap();
    db.store.migrate().await.unwrap();
    db.store.migrate().await.unwrap();
    db.store.ping().await.unwrap();
    assert_eq!(get(&db, new.key).await, received(&new));
}

pub(super) async fn corrupt_rows_are_errors(db: Db) {
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
