//! Webhook secrets at rest: encrypted and bound to their row, sealed at startup, rotated, and
//! refused without the right key.

use super::*;

/// Raw access to the `webhook_endpoints` table, beside the store.
enum Raw {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool, String),
}

impl Raw {
    fn table(&self) -> String {
        match self {
            Self::Sqlite(_) => "webhook_endpoints".into(),
            Self::Postgres(_, schema) => format!("\"{schema}\".webhook_endpoints"),
        }
    }

    /// `(secret, old_secret)` of endpoint `id`, as stored.
    async fn secrets(&self, id: &str) -> (String, Option<String>) {
        let sql = format!(
            "SELECT secret, old_secret FROM {} WHERE id = '{id}'",
            self.table()
        );
        match self {
            Self::Sqlite(pool) => sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_one(pool)
                .await
                .unwrap(),
            Self::Postgres(pool, _) => sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .fetch_one(pool)
                .await
                .unwrap(),
        }
    }

    /// Copies endpoint `from`'s stored secret into endpoint `to`'s row.
    async fn copy_secret(&self, from: &str, to: &str) {
        let t = self.table();
        let sql = format!(
            "UPDATE {t} SET secret = (SELECT secret FROM {t} WHERE id = '{from}') WHERE id = '{to}'"
        );
        match self {
            Self::Sqlite(pool) => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                    .execute(pool)
                    .await
                    .unwrap();
            }
            Self::Postgres(pool, _) => {
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                    .execute(pool)
                    .await
                    .unwrap();
            }
        }
    }
}

/// A facilitator over `h`'s chain and store with other webhook-secrets keys (a restart with
/// another configuration).
fn restarted(h: &Harness, keys: Option<SecretsKeys>) -> Facilitator {
    let mut settings = Settings::default();
    dev_mode(&mut settings);
    settings.webhook_secrets = keys;
    Facilitator::new(
        settings,
        vec![(
            h.facilitator.networks().remove(0),
            Arc::clone(&h.fixture.chain),
        )],
        vec![h.account(RELAYER).address],
        h.account(PROOF_KEY).private_key,
        Arc::clone(h.facilitator.store()),
    )
    .unwrap()
}

/// Checks the last delivery `rx` got verifies with each of `secrets` (alone).
fn signed_with(rx: &Receiver, secrets: &[&str]) {
    let got = rx.got.lock().unwrap().clone();
    let (headers, body, _) = got.last().expect("a delivery");
    let header = |n: &str| headers[n].to_str().unwrap().to_owned();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for secret in secrets {
        verify(
            &[WebhookSecret::parse(secret).unwrap()],
            &header("webhook-id"),
            &header("webhook-timestamp"),
            &header("webhook-signature"),
            body,
            now,
            300,
        )
        .expect("signed with the endpoint's secret");
    }
}

/// Issue 13: the secrets column holds ciphertext bound to its row, never the secret; deliveries
/// are still signed with the plaintext secrets, through a rotation.
async fn secrets_are_encrypted_at_rest(h: &Harness, raw: &Raw) {
    let key = key_for(h, PROVIDER).await;
    let (rx, url) = Receiver::start(vec![]).await;
    let (s, ep) = call(
        h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url, "events": ["plan.created"] })),
    )
    .await;
    assert_eq!(s, 201, "{ep}");
    let id = ep["id"].as_str().unwrap().to_owned();
    let first = ep["secret"].as_str().unwrap().to_owned();
    let body = |s: &str| s.trim_start_matches("whsec_").to_owned();
    let (stored, old) = raw.secrets(&id).await;
    assert!(stored.starts_with("enc1:"), "{stored}");
    assert!(!stored.contains(&body(&first)), "the secret is not stored");
    assert_eq!(old, None);

    let (s, rotated) = call(
        h,
        "POST",
        &format!("/webhooks/endpoints/{id}/rotate"),
        Some(&key),
        None,
    )
    .await;
    assert_eq!(s, 200, "{rotated}");
    let second = rotated["secret"].as_str().unwrap().to_owned();
    let (stored, old) = raw.secrets(&id).await;
    let old = old.expect("the previous secret is kept for the overlap");
    assert!(stored.starts_with("enc1:") && old.starts_with("enc1:"));
    for column in [&stored, &old] {
        for secret in [&first, &second] {
            assert!(!column.contains(&body(secret)), "no secret in {column}");
        }
    }

    // Delivered, signed with both secrets (the rotation's overlap).
    record(h, h.account(PROVIDER).address, 1, "sealed").await;
    assert_eq!(h.facilitator.deliver_webhooks_once().await.delivered, 1);
    signed_with(&rx, &[&first, &second]);

    // A sealed secret copied into another endpoint's row does not open there: that endpoint's
    // deliveries fail (never signed with a wrong secret), and startup refuses the store.
    let (s, other) = call(
        h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url, "events": ["plan.deprecated"] })),
    )
    .await;
    assert_eq!(s, 201, "{other}");
    let other = other["id"].as_str().unwrap().to_owned();
    raw.copy_secret(&id, &other).await;
    h.facilitator
        .store()
        .record_event(&NewEvent {
            id: "evt_moved".into(),
            provider: h.account(PROVIDER).address,
            r#type: "plan.deprecated".into(),
            data: "{}".into(),
            created_at: 1,
        })
        .await
        .unwrap();
    let r = h.facilitator.deliver_webhooks_once().await;
    assert_eq!((r.delivered, r.retried), (0, 1), "{r:?}");
    let d = h
        .facilitator
        .store()
        .deliveries(h.account(PROVIDER).address, &other, 1)
        .await
        .unwrap();
    let error = d[0].last_error.as_deref().unwrap_or_default();
    assert!(error.contains("does not decrypt"), "{error}");
    let e = h.facilitator.seal_webhook_secrets().await.unwrap_err();
    assert!(
        matches!(&e, SecretsError::Seal { endpoint, source: SealError::Tampered } if *endpoint == other),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_secrets_are_encrypted_at_rest_in_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("facilitator.db").display());
    let store = store::open(&url).await.unwrap();
    let fixture = tollgate_testkit::Fixture::new(Backend::Devnet)
        .await
        .unwrap();
    let chain = Arc::clone(&fixture.chain);
    let h = Harness::assemble(fixture, chain, 1, Some(store), dev_mode).await;
    let raw = Raw::Sqlite(sqlx::SqlitePool::connect(&url).await.unwrap());
    secrets_are_encrypted_at_rest(&h, &raw).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_secrets_are_encrypted_at_rest_in_postgres() {
    let url = tollgate_testkit::peer::database_url();
    let schema = format!("tg_it_sealed_{}", std::process::id());
    let pg = store::PostgresStore::connect_with_schema(&url, &schema)
        .await
        .unwrap();
    store::Store::migrate(&pg).await.unwrap();
    let fixture = tollgate_testkit::Fixture::new(Backend::Devnet)
        .await
        .unwrap();
    let chain = Arc::clone(&fixture.chain);
    let h = Harness::assemble(fixture, chain, 1, Some(Arc::new(pg)), dev_mode).await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let raw = Raw::Postgres(pool.clone(), schema.clone());
    secrets_are_encrypted_at_rest(&h, &raw).await;
    drop(h);
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await
    .unwrap();
}

/// Secrets an older version stored in plaintext still sign, and are encrypted at startup; a
/// restart without the key, or with another key, refuses to start naming the setting (and would
/// not deliver); a key rotation through `keys.webhook_secrets_previous` re-encrypts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_secrets_are_sealed_at_startup_and_a_wrong_key_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("facilitator.db").display());
    let store = store::open(&url).await.unwrap();
    let fixture = tollgate_testkit::Fixture::new(Backend::Devnet)
        .await
        .unwrap();
    let chain = Arc::clone(&fixture.chain);
    let h = Harness::assemble(fixture, chain, 1, Some(store), dev_mode).await;
    let raw = Raw::Sqlite(sqlx::SqlitePool::connect(&url).await.unwrap());
    let provider = h.account(PROVIDER).address;
    let (rx, hook) = Receiver::start(vec![]).await;
    let (current, previous) = (
        WebhookSecret::generate().expose_secret(),
        WebhookSecret::generate().expose_secret(),
    );
    let id = "we_legacy".to_owned();
    h.facilitator
        .store()
        .insert_webhook_endpoint(&Endpoint {
            id: id.clone(),
            provider,
            url: hook,
            events: "*".into(),
            description: String::new(),
            secret: current.clone(),
            old_secret: Some(previous.clone()),
            old_secret_expires_at: Some(u64::MAX / 2),
            enabled: true,
            disabled_reason: None,
            created_at: 1,
            updated_at: 1,
        })
        .await
        .unwrap();

    // Without a key, a store with (plaintext) secrets does not start.
    let e = restarted(&h, None)
        .seal_webhook_secrets()
        .await
        .unwrap_err();
    assert!(
        matches!(e, SecretsError::PlaintextWithoutKey { endpoints: 1 }),
        "{e}"
    );
    assert!(e.to_string().contains("keys.webhook_secrets"), "{e}");

    // Before startup sealing, the plaintext row still signs.
    record(&h, provider, 1, "legacy").await;
    assert_eq!(h.facilitator.deliver_webhooks_once().await.delivered, 1);
    signed_with(&rx, &[&current, &previous]);

    // Startup: sealed in place, and deliveries sign as before.
    assert_eq!(h.facilitator.seal_webhook_secrets().await.unwrap(), 1);
    assert_eq!(
        h.facilitator.seal_webhook_secrets().await.unwrap(),
        0,
        "once"
    );
    let (stored, old) = raw.secrets(&id).await;
    let old = old.unwrap();
    assert!(stored.starts_with("enc1:") && old.starts_with("enc1:"));
    assert!(!stored.contains(&current[6..]) && !old.contains(&previous[6..]));
    record(&h, provider, 1, "sealed").await;
    assert_eq!(h.facilitator.deliver_webhooks_once().await.delivered, 1);
    signed_with(&rx, &[&current, &previous]);

    // A restart without the key, or with another one: refused, naming the setting; and such a
    // facilitator does not deliver (nothing signed with a wrong secret).
    let e = restarted(&h, None)
        .seal_webhook_secrets()
        .await
        .unwrap_err();
    assert!(
        matches!(e, SecretsError::KeyMissing { endpoints: 1 }),
        "{e}"
    );
    assert!(
        e.to_string().contains("`keys.webhook_secrets` is not set"),
        "{e}"
    );
    let other = SecretsKey::from_bytes([0x77; 32]);
    let wrong = restarted(&h, Some(SecretsKeys::new(other.clone())));
    let e = wrong.seal_webhook_secrets().await.unwrap_err();
    assert!(
        matches!(
            &e,
            SecretsError::Seal {
                source: SealError::UnknownKey { .. },
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("keys.webhook_secrets"), "{e}");
    let seen = rx.seen().len();
    record(&h, provider, 1, "wrong").await;
    let r = wrong.deliver_webhooks_once().await;
    assert_eq!((r.delivered, r.retried), (0, 1), "{r:?}");
    assert_eq!(rx.seen().len(), seen, "nothing sent");
    let d = h
        .facilitator
        .store()
        .deliveries(provider, &id, 1)
        .await
        .unwrap();
    assert!(
        d[0].last_error
            .as_deref()
            .unwrap_or_default()
            .contains("keys.webhook_secrets"),
        "{:?}",
        d[0].last_error
    );

    // Key rotation: the new key with the old one as previous re-seals every row; then the old
    // key alone no longer opens them, and the new key alone does.
    let rotated = restarted(
        &h,
        Some(SecretsKeys::new(other.clone()).with_previous([secrets_key()])),
    );
    assert_eq!(rotated.seal_webhook_secrets().await.unwrap(), 1);
    assert!(
        raw.secrets(&id)
            .await
            .0
            .starts_with(&format!("enc1:{}:", other.id()))
    );
    assert!(h.facilitator.seal_webhook_secrets().await.is_err());
    let after = restarted(&h, Some(SecretsKeys::new(other)));
    assert_eq!(after.seal_webhook_secrets().await.unwrap(), 0);
    drain(&after).await;
    signed_with(&rx, &[&current, &previous]);
}

/// Without `keys.webhook_secrets` no endpoint can be added (no secret would be stored in
/// plaintext): 503 `WebhooksNotConfigured`, naming the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_key_endpoints_cannot_be_added() {
    let h = Harness::with(Backend::Devnet, |s| {
        dev_mode(s);
        s.webhook_secrets = None;
    })
    .await;
    let key = key_for(&h, PROVIDER).await;
    let (_, url) = Receiver::start(vec![]).await;
    let (s, v) = add_endpoint(&h, &key, &url).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (503, Some("WebhooksNotConfigured")),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("keys.webhook_secrets")
    );
    assert!(
        h.facilitator
            .store()
            .webhook_secrets()
            .await
            .unwrap()
            .is_empty()
    );
}

/// Through the configuration, as `tollgate facilitator` starts: a store holding sealed webhook
/// secrets does not start without `keys.webhook_secrets` or with another key (the error names
/// the setting), and starts with the right one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_refuses_a_missing_or_wrong_webhook_secrets_key() {
    use tollgate_facilitator::{
        config::Config,
        start::{self, StartError},
    };

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("facilitator.db");
    let store = store::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let fixture = tollgate_testkit::Fixture::new(Backend::Devnet)
        .await
        .unwrap();
    let chain = Arc::clone(&fixture.chain);
    let h = Harness::assemble(fixture, chain, 1, Some(store), dev_mode).await;
    let key = key_for(&h, PROVIDER).await;
    let (_, url) = Receiver::start(vec![]).await;
    let (s, _) = add_endpoint(&h, &key, &url).await;
    assert_eq!(s, 201);

    let d = h.fixture.deployment;
    let config = |keys: &str| {
        Config::from_toml_str(&format!(
            r#"store = "sqlite://{store}"
[keys]
relayers = ["{relayer}"]
proof = "{proof}"
{keys}
[[networks]]
name = "tollgate-devnet"
chain_id = {chain_id}
rpc_url = "embedded"
token = "{token}"
router = "{router}"
subscriptions = "{subs}"
"#,
            store = path.display(),
            relayer = h.account(RELAYER).private_key,
            proof = h.account(PROOF_KEY).private_key,
            chain_id = h.fixture.chain.chain_id(),
            token = d.token,
            router = d.router,
            subs = d.subscriptions,
        ))
        .unwrap()
    };
    let start = |config: Config, env: Option<String>| {
        let chain = Arc::clone(&h.fixture.chain);
        async move {
            let keys = config
                .resolve(|var| (var == "WEBHOOK_KEY").then(|| env.clone()).flatten())
                .unwrap();
            let settings = start::settings(&config);
            start::build(&config, &keys, settings, Some(chain)).await
        }
    };

    let e = start(config(""), None).await.unwrap_err();
    assert!(
        matches!(
            e,
            StartError::WebhookSecrets(SecretsError::KeyMissing { endpoints: 1 })
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("`keys.webhook_secrets` is not set"),
        "{e}"
    );

    let with_env = config("webhook_secrets = \"env:WEBHOOK_KEY\"");
    let wrong = SecretsKey::from_bytes([0x77; 32]).expose_hex();
    let e = start(with_env.clone(), Some(wrong)).await.unwrap_err();
    assert!(
        matches!(
            &e,
            StartError::WebhookSecrets(SecretsError::Seal {
                source: SealError::UnknownKey { .. },
                ..
            })
        ),
        "{e}"
    );
    assert!(e.to_string().contains("keys.webhook_secrets"), "{e}");

    let right = start(with_env, Some(secrets_key().expose_hex()))
        .await
        .unwrap();
    assert_eq!(right.store().webhook_secrets().await.unwrap().len(), 1);
}
