//! Each family of typed calls against the real facilitator.

use std::time::Duration;

use alloy::primitives::B256;
use tollgate_client::{Error, FacilitatorClient};
use tollgate_protocol::{
    Amount, ApiErrorCode,
    api::{
        analytics::ReportParams,
        plans::CreatePlanRequest,
        webhooks::{CreateEndpoint, EventFilter, Page, Rotate, UpdateEndpoint},
    },
};

use crate::support::{Harness, NETWORK, PROVIDER};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_is_read_once_cached_and_forgotten_on_demand() {
    let h = Harness::new().await;
    let f = h.client();
    let d = f.discovery().await.unwrap();
    let net = d.network(NETWORK).expect("the network is published");
    assert_eq!(net.router, h.fixture.deployment.router);
    assert_eq!(net.subscriptions, Some(h.fixture.deployment.subscriptions));
    assert!(net.chain_time.is_some());
    assert_eq!(d.proof_signers, vec![h.facilitator.proof_signer()]);
    assert_eq!(d.facilitator, h.url);

    // Cached: a second caller and a known signer cost no request.
    f.discovery().await.unwrap();
    let (known, _) = f.is_signer(h.facilitator.proof_signer()).await.unwrap();
    assert!(known);
    assert_eq!(h.answers("/.well-known/tollgate"), 1);
    // Forgotten: read again.
    f.forget_discovery();
    f.discovery().await.unwrap();
    assert_eq!(h.answers("/.well-known/tollgate"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_signer_refreshes_at_most_once_per_interval_and_a_stale_copy_is_served() {
    let h = Harness::new().await;
    let f = FacilitatorClient::builder(&h.url)
        .discovery_cache(Some(Duration::ZERO), Duration::from_secs(3600))
        .build()
        .unwrap();
    f.discovery().await.unwrap();
    // Expired, but fetched within the minimum interval: the copy is served.
    let (known, _) = f
        .is_signer(alloy::primitives::Address::repeat_byte(1))
        .await
        .unwrap();
    assert!(!known);
    f.discovery().await.unwrap();
    assert_eq!(h.answers("/.well-known/tollgate"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_facilitator_gone_down_leaves_the_stale_copy_in_use() {
    let mut h = Harness::new().await;
    let f = FacilitatorClient::builder(&h.url)
        .discovery_cache(Some(Duration::ZERO), Duration::ZERO)
        .build()
        .unwrap();
    let before = f.discovery().await.unwrap();
    h.stop().await;
    assert!(f.fetch_discovery().await.unwrap_err().is_unavailable());
    // Expired and unreachable: the copy held is served rather than an error.
    assert_eq!(f.discovery().await.unwrap(), before);
    // Without a copy, the error.
    let fresh = FacilitatorClient::new(&h.url).unwrap();
    assert!(fresh.discovery().await.unwrap_err().is_unavailable());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_round_trip_and_refusals_are_typed() {
    let h = Harness::new().await;
    let key = h.register().await;
    let provider = FacilitatorClient::builder(&h.url)
        .api_key(&key)
        .build()
        .unwrap();
    let req = CreatePlanRequest {
        network: NETWORK.parse().unwrap(),
        amount: Amount::from_units(5_000_000),
        interval: 3600,
        pay_to: None,
        idempotency_key: "monthly".into(),
    };
    let plan = provider.create_plan(&req).await.unwrap();
    assert_eq!(plan.provider, h.fixture.accounts[PROVIDER].address);
    assert_eq!(plan.pay_to, h.fixture.accounts[PROVIDER].address);
    assert_eq!((plan.amount, plan.interval), (req.amount, 3600));
    // The same idempotency key: the same plan.
    assert_eq!(provider.create_plan(&req).await.unwrap(), plan);
    // Anyone can read it.
    assert_eq!(h.client().plan(plan.plan_id, None).await.unwrap(), plan);
    let gone = provider
        .deprecate_plan(plan.plan_id, Some(NETWORK))
        .await
        .unwrap();
    assert!(gone.deprecated);

    // A provider call without a key is refused before sending.
    let e = h.client().create_plan(&req).await.unwrap_err();
    assert!(matches!(e, Error::MissingApiKey), "{e:?}");
    assert!(e.never_sent());
    // A wrong key: 401 Unauthorized, a refusal.
    let wrong = FacilitatorClient::builder(&h.url)
        .api_key(format!("tg_{}", "5a".repeat(32)))
        .build()
        .unwrap();
    let e = wrong.create_plan(&req).await.unwrap_err();
    assert_eq!(e.status(), Some(401));
    assert_eq!(e.code(), Some(&ApiErrorCode::Unauthorized));
    assert!(e.is_refusal() && !e.is_unavailable());
    // An unknown plan: 404 NotFound.
    let e = h
        .client()
        .plan(B256::repeat_byte(7), None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&ApiErrorCode::NotFound));
    // The key revoked: refused from then on.
    let revoked = provider.revoke_api_key().await.unwrap();
    assert!(revoked.revoked);
    let e = provider.plan(plan.plan_id, None).await.map(|_| ());
    assert!(e.is_ok(), "reading a plan needs no key");
    let e = provider
        .deprecate_plan(plan.plan_id, None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&ApiErrorCode::Unauthorized));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_events_and_analytics_read_as_typed() {
    let h = Harness::new().await;
    let key = h.register().await;
    let f = FacilitatorClient::builder(&h.url)
        .api_key(&key)
        .build()
        .unwrap();
    let created = f
        .create_endpoint(&CreateEndpoint {
            url: "http://127.0.0.1:9/hook".into(),
            events: Some(EventFilter::from_comma_list("plan.created,payment.settled")),
            description: Some("test".into()),
        })
        .await
        .unwrap();
    assert!(created.secret.as_deref().unwrap().starts_with("whsec_"));
    assert_eq!(created.events, ["payment.settled", "plan.created"]);
    let listed = f.endpoints().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].secret, None);
    let changed = f
        .update_endpoint(
            &created.id,
            &UpdateEndpoint {
                enabled: Some(false),
                ..UpdateEndpoint::default()
            },
        )
        .await
        .unwrap();
    assert!(!changed.enabled);
    let rotated = f
        .rotate_endpoint_secret(
            &created.id,
            &Rotate {
                overlap_secs: Some(60),
            },
        )
        .await
        .unwrap();
    assert_ne!(rotated.secret, created.secret);
    assert!(rotated.previous_secret_expires_at.is_some());
    assert!(
        f.deliveries(&created.id, &Page::default())
            .await
            .unwrap()
            .is_empty()
    );
    let e = f
        .update_endpoint(
            &created.id,
            &UpdateEndpoint {
                events: Some(EventFilter::from_comma_list("nope")),
                ..UpdateEndpoint::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&ApiErrorCode::InvalidField));
    assert!(e.body().unwrap().message().contains("unknown event type"));
    // An id with a `/` stays one path segment.
    let e = f.endpoint("we_x/../../analytics").await.unwrap_err();
    assert_eq!(e.code(), Some(&ApiErrorCode::NotFound));

    // A plan makes a `plan.created` event (indexed by the keeper).
    let plan = f
        .create_plan(&CreatePlanRequest {
            network: NETWORK.parse().unwrap(),
            amount: Amount::from_units(1_000_000),
            interval: 3600,
            pay_to: None,
            idempotency_key: "p".into(),
        })
        .await
        .unwrap();
    h.facilitator.run_keeper_once().await;
    let events = f.events(&Page::default()).await.unwrap();
    let created_event = events
        .iter()
        .find_map(|e| match &e.event.data {
            tollgate_protocol::webhook::EventData::PlanCreated(p) => Some(p),
            _ => None,
        })
        .expect("plan.created");
    assert_eq!(created_event.plan_id, plan.plan_id);

    let report = f.analytics(&ReportParams::default()).await.unwrap();
    assert_eq!(report.webhooks.len(), 1);
    let e = f
        .analytics(&ReportParams {
            range: Some("1y".into()),
            ..ReportParams::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&ApiErrorCode::InvalidQuery));

    f.delete_endpoint(&created.id).await.unwrap();
    assert!(f.endpoints().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_facilitator_that_is_not_there_is_unavailable_and_never_reached() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let f = FacilitatorClient::new(&url).unwrap();
    let e = f.supported().await.unwrap_err();
    assert!(e.is_unavailable() && !e.is_refusal(), "{e:?}");
    assert!(e.never_sent(), "{e:?}");
    assert!(matches!(
        FacilitatorClient::new("ftp://example.com"),
        Err(Error::InvalidUrl { .. })
    ));
}
