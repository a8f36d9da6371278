//! Endpoints over the API and the SSRF guard: managed by their owner, private targets refused
//! outside dev mode, IPv6 spellings refused at registration, a name resolving to a private
//! address refused at delivery.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_are_managed_and_private_targets_refused_outside_dev_mode() {
    let h = Harness::new(Backend::Devnet).await;
    let key = key_for(&h, PROVIDER).await;
    for url in [
        "http://127.0.0.1:9/hook",
        "http://10.1.2.3/hook",
        "http://[::1]/hook",
        "http://169.254.169.254/latest",
        "http://localhost/hook",
    ] {
        let (s, v) = add_endpoint(&h, &key, url).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (422, Some("TargetNotAllowed")),
            "{url}: {v}"
        );
    }
    let (s, _) = call(
        &h,
        "POST",
        "/webhooks/endpoints",
        None,
        Some(json!({ "url": "https://example.com" })),
    )
    .await;
    assert_eq!(s, 401);
    let (s, v) = call(&h, "GET", "/webhooks/endpoints", Some(&key), None).await;
    assert_eq!((s, v), (200, json!([])));

    let h = Harness::with(Backend::Devnet, dev_mode).await;
    let key = key_for(&h, PROVIDER).await;
    let other = key_for(&h, OTHER).await;
    let (_, url) = Receiver::start(vec![]).await;
    let (s, v) = call(
        &h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url, "events": ["payment.settled", "nope"] })),
    )
    .await;
    assert_eq!(s, 400, "{v}");
    let (s, created) = call(
        &h,
        "POST",
        "/webhooks/endpoints",
        Some(&key),
        Some(json!({ "url": url, "events": ["payment.settled"], "description": "books" })),
    )
    .await;
    assert_eq!(s, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{secret}");
    WebhookSecret::parse(&secret).unwrap();
    let (s, list) = call(&h, "GET", "/webhooks/endpoints", Some(&key), None).await;
    assert_eq!(s, 200);
    assert_eq!(list[0]["id"], json!(id));
    assert!(
        list[0].get("secret").is_none(),
        "secrets are shown once: {list}"
    );
    let (s, _) = call(
        &h,
        "GET",
        &format!("/webhooks/endpoints/{id}"),
        Some(&other),
        None,
    )
    .await;
    assert_eq!(s, 404, "another provider's endpoint does not exist for it");
    let (s, v) = call(
        &h,
        "PATCH",
        &format!("/webhooks/endpoints/{id}"),
        Some(&key),
        Some(json!({ "events": "*", "enabled": false })),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        (v["events"].clone(), v["enabled"].clone()),
        (json!(["*"]), json!(false))
    );
    let (s, rotated) = call(
        &h,
        "POST",
        &format!("/webhooks/endpoints/{id}/rotate"),
        Some(&key),
        Some(json!({ "overlapSecs": 600 })),
    )
    .await;
    assert_eq!(s, 200, "{rotated}");
    assert_ne!(rotated["secret"], json!(secret));
    assert!(rotated["previousSecretExpiresAt"].as_u64().is_some());
    let (s, _) = call(
        &h,
        "DELETE",
        &format!("/webhooks/endpoints/{id}"),
        Some(&other),
        None,
    )
    .await;
    assert_eq!(s, 404);
    let (s, _) = call(
        &h,
        "DELETE",
        &format!("/webhooks/endpoints/{id}"),
        Some(&key),
        None,
    )
    .await;
    assert_eq!(s, 204);
    let (s, _) = call(
        &h,
        "GET",
        &format!("/webhooks/endpoints/{id}"),
        Some(&key),
        None,
    )
    .await;
    assert_eq!(s, 404);
}

/// Issue 13: IPv6 spellings of loopback and other refused addresses are refused at
/// registration with the existing error code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_forms_of_refused_addresses_are_refused_at_registration() {
    let h = Harness::with(Backend::Devnet, with_key).await;
    let key = key_for(&h, PROVIDER).await;
    for host in [
        "[::ffff:0:7f00:1]",
        "[fec0::1]",
        "[100::1]",
        "[::127.0.0.1]",
        "[64:ff9b::7f00:1]",
        "[2002:7f00:1::1]",
        "[::ffff:127.0.0.1]",
        "[2001:0:808:808::80ff:fffe]",
    ] {
        let url = format!("http://{host}:9/hook");
        let (s, v) = add_endpoint(&h, &key, &url).await;
        assert_eq!(
            (s, v["error"]["code"].as_str()),
            (422, Some("TargetNotAllowed")),
            "{url}: {v}"
        );
    }
    let (s, v) = call(&h, "GET", "/webhooks/endpoints", Some(&key), None).await;
    assert_eq!((s, v), (200, json!([])));
}

/// An endpoint whose name resolves to a private address by the time of delivery (registered
/// while it pointed elsewhere) is refused at delivery: nothing reaches the receiver, and the
/// delivery records why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_a_private_address_is_refused_at_delivery() {
    let h = Harness::with(Backend::Devnet, with_key).await;
    let (rx, url) = Receiver::start(vec![]).await;
    let url = url.replace("127.0.0.1", "localhost");
    let provider = h.account(PROVIDER).address;
    let id = "we_rebound".to_owned();
    let keys = SecretsKeys::new(secrets_key());
    h.facilitator
        .store()
        .insert_webhook_endpoint(&Endpoint {
            secret: keys
                .seal(&id, &WebhookSecret::generate().expose_secret())
                .unwrap(),
            id: id.clone(),
            provider,
            url,
            events: "*".into(),
            description: String::new(),
            old_secret: None,
            old_secret_expires_at: None,
            enabled: true,
            disabled_reason: None,
            created_at: 1,
            updated_at: 1,
        })
        .await
        .unwrap();
    record(&h, provider, 1, "rebound").await;
    let r = h.facilitator.deliver_webhooks_once().await;
    assert_eq!((r.delivered, r.retried), (0, 1), "{r:?}");
    assert!(rx.seen().is_empty(), "nothing reached the receiver");
    let d = h
        .facilitator
        .store()
        .deliveries(provider, &id, 10)
        .await
        .unwrap();
    let error = d[0].last_error.as_deref().unwrap_or_default();
    assert!(error.contains("localhost resolves to"), "{error}");
}
