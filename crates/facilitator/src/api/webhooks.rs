//! Webhook endpoints, their deliveries and the event log: `/webhooks/endpoints…` and
//! `GET /events` ([`crate::webhooks`]), with the wire views of stored endpoints, deliveries and
//! events.

use axum::{Json, extract::State, http::StatusCode};
use tollgate_protocol::api::webhooks::{
    self as api, CreateEndpoint, Delivery as DeliveryView, Endpoint as EndpointView, EventRecord,
    Page, Rotate, UpdateEndpoint,
};

use crate::{
    api::{
        Routes,
        extract::{ApiJson, ApiPath, ApiQuery, NOT_AN_OBJECT, is_json_object},
        providers::Provider,
    },
    error::{Error, Result},
    facilitator::{Facilitator, unix_now},
    openapi::builder::{op, string},
    store::{Delivery, DeliveryState, Endpoint, Event},
};

/// The routes of webhook endpoints, their deliveries and the event log, each with its OpenAPI
/// operation.
pub(super) fn routes(r: &mut Routes) {
    let endpoint_id = || string("The endpoint id (`we_…`).");
    r.get(
        "/webhooks/endpoints",
        list,
        op(
            "listWebhookEndpoints",
            "webhooks",
            "The provider's webhook endpoints (secrets are not shown).",
        )
        .secured()
        .ok_list::<EndpointView>(200, "The endpoints.")
        .errors(&[503]),
    );
    r.post(
        "/webhooks/endpoints",
        create,
        op(
            "createWebhookEndpoint",
            "webhooks",
            "Add an endpoint; answers 201 with its `secret` (`whsec_…`), shown this once.",
        )
        .description("Loopback and private targets are refused outside dev mode.")
        .secured()
        .body::<CreateEndpoint>()
        .ok::<EndpointView>(201, "Created, with its secret.")
        .errors(&[422, 503]),
    );
    r.get(
        "/webhooks/endpoints/{id}",
        show,
        op("showWebhookEndpoint", "webhooks", "One endpoint.")
            .secured()
            .path("id", "The endpoint id.", endpoint_id())
            .ok::<EndpointView>(200, "The endpoint.")
            .errors(&[503]),
    );
    r.patch(
        "/webhooks/endpoints/{id}",
        update,
        op(
            "updateWebhookEndpoint",
            "webhooks",
            "Change `url`, `events`, `description` or `enabled` (re-enabling a disabled endpoint).",
        )
        .secured()
        .path("id", "The endpoint id.", endpoint_id())
        .body::<UpdateEndpoint>()
        .ok::<EndpointView>(200, "The endpoint.")
        .errors(&[422, 503]),
    );
    r.delete(
        "/webhooks/endpoints/{id}",
        delete,
        op(
            "deleteWebhookEndpoint",
            "webhooks",
            "Delete the endpoint and its pending deliveries.",
        )
        .secured()
        .path("id", "The endpoint id.", endpoint_id())
        .empty(204, "Deleted.")
        .errors(&[503]),
    );
    r.post("/webhooks/endpoints/{id}/rotate", rotate, op("rotateWebhookSecret", "webhooks", "A new secret (shown once); the previous one keeps signing deliveries, beside it, for `overlapSecs` (default 86400, at most 7 days).")
        .secured()
        .path("id", "The endpoint id.", endpoint_id())
        .optional_body::<Rotate>()
        .ok::<EndpointView>(200, "The endpoint with its new secret.")
        .errors(&[422, 503]));
    r.get("/webhooks/endpoints/{id}/deliveries", deliveries, op("listWebhookDeliveries", "webhooks", "The endpoint's latest deliveries: event, state (pending, delivered, dead), attempts, next attempt, last status and error.")
        .secured()
        .path("id", "The endpoint id.", endpoint_id())
        .query::<Page>()
        .ok_list::<DeliveryView>(200, "The deliveries.")
        .errors(&[503]));
    r.post(
        "/webhooks/endpoints/{id}/deliveries/{event_id}/redeliver",
        redeliver,
        op(
            "redeliverWebhook",
            "webhooks",
            "Put a delivery (dead or delivered) back to pending, due now.",
        )
        .secured()
        .path("id", "The endpoint id.", endpoint_id())
        .path(
            "event_id",
            "The event id (`evt_…`).",
            string("The event id (`evt_…`)."),
        )
        .empty(202, "Due now.")
        .errors(&[503]),
    );
    r.get("/events", events, op("listEvents", "webhooks", "The provider's events, oldest first, after `after` (a `seq`), at most `limit` (default 100).")
        .secured()
        .query::<Page>()
        .ok_list::<EventRecord>(200, "The events.")
        .errors(&[503]));
}

/// An endpoint as the API shows it, with `secret` (its plaintext: only when created or rotated).
fn endpoint_view(e: &Endpoint, secret: Option<String>) -> EndpointView {
    EndpointView {
        id: e.id.clone(),
        url: e.url.clone(),
        events: e.events.split(',').map(str::to_owned).collect(),
        description: e.description.clone(),
        enabled: e.enabled,
        disabled_reason: e.disabled_reason.clone(),
        secret,
        previous_secret_expires_at: e.old_secret_expires_at.filter(|t| *t > unix_now()),
        created_at: e.created_at,
        updated_at: e.updated_at,
    }
}

/// The wire view of a stored delivery.
fn delivery_view(d: &Delivery) -> DeliveryView {
    DeliveryView {
        event_id: d.event.new.id.clone(),
        r#type: d.event.new.r#type.clone(),
        state: match d.state {
            DeliveryState::Pending => api::DeliveryState::Pending,
            DeliveryState::Delivered => api::DeliveryState::Delivered,
            DeliveryState::Dead => api::DeliveryState::Dead,
        },
        attempts: d.attempts,
        next_attempt_at: d.next_attempt_at,
        last_status: d.last_status,
        last_error: d.last_error.clone(),
        updated_at: d.updated_at,
    }
}

/// The wire view of a stored event.
fn event_record(e: &Event) -> EventRecord {
    EventRecord {
        seq: e.seq,
        event: e.new.webhook_event(),
    }
}

/// `(after, limit)`: `limit` defaults to 100, within 1..=1000.
fn parse_page(p: &Page) -> (u64, u32) {
    (p.after.unwrap_or(0), p.limit.unwrap_or(100).clamp(1, 1000))
}

/// `POST /webhooks/endpoints`.
pub(super) async fn create(
    State(f): State<Facilitator>,
    provider: Provider,
    ApiJson(req): ApiJson<CreateEndpoint>,
) -> Result<(StatusCode, Json<EndpointView>)> {
    let (endpoint, secret) = f.webhooks().create_endpoint(provider.address, req).await?;
    Ok((
        StatusCode::CREATED,
        Json(endpoint_view(&endpoint, Some(secret))),
    ))
}

/// `GET /webhooks/endpoints`.
pub(super) async fn list(
    State(f): State<Facilitator>,
    provider: Provider,
) -> Result<Json<Vec<EndpointView>>> {
    let all = f.webhooks().endpoints(provider.address).await?;
    Ok(Json(all.iter().map(|e| endpoint_view(e, None)).collect()))
}

/// `GET /webhooks/endpoints/{id}`.
pub(super) async fn show(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    provider: Provider,
) -> Result<Json<EndpointView>> {
    let e = f.webhooks().owned_endpoint(provider.address, &id).await?;
    Ok(Json(endpoint_view(&e, None)))
}

/// `PATCH /webhooks/endpoints/{id}`: url, events, description, enabled (re-enabling clears the
/// reason it was disabled).
pub(super) async fn update(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    provider: Provider,
    ApiJson(req): ApiJson<UpdateEndpoint>,
) -> Result<Json<EndpointView>> {
    let e = f
        .webhooks()
        .update_endpoint(provider.address, &id, req)
        .await?;
    Ok(Json(endpoint_view(&e, None)))
}

/// `DELETE /webhooks/endpoints/{id}`.
pub(super) async fn delete(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    provider: Provider,
) -> Result<StatusCode> {
    f.webhooks().delete_endpoint(provider.address, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /webhooks/endpoints/{id}/rotate {overlapSecs?}`: a new secret; the old one keeps
/// signing (deliveries carry both signatures) for the overlap (default 24 h, at most 7 days).
pub(super) async fn rotate(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    provider: Provider,
    body: axum::body::Bytes,
) -> Result<Json<EndpointView>> {
    // The body is optional: none, or `{overlapSecs}`.
    let req: Rotate = if body.iter().all(u8::is_ascii_whitespace) {
        Rotate::default()
    } else {
        if !is_json_object(&body) {
            return Err(Error::InvalidField(NOT_AN_OBJECT.to_owned()));
        }
        serde_json::from_slice(&body).map_err(|e| Error::InvalidField(e.to_string()))?
    };
    let (e, secret) = f
        .webhooks()
        .rotate_secret(provider.address, &id, req.overlap_secs)
        .await?;
    Ok(Json(endpoint_view(&e, Some(secret))))
}

/// `GET /webhooks/endpoints/{id}/deliveries?limit=`.
pub(super) async fn deliveries(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(p): ApiQuery<Page>,
    provider: Provider,
) -> Result<Json<Vec<DeliveryView>>> {
    let (_, limit) = parse_page(&p);
    let all = f
        .webhooks()
        .deliveries(provider.address, &id, limit)
        .await?;
    Ok(Json(all.iter().map(delivery_view).collect()))
}

/// `POST /webhooks/endpoints/{id}/deliveries/{eventId}/redeliver`: back to pending, now.
pub(super) async fn redeliver(
    State(f): State<Facilitator>,
    ApiPath((id, event_id)): ApiPath<(String, String)>,
    provider: Provider,
) -> Result<StatusCode> {
    f.webhooks()
        .redeliver(provider.address, &id, &event_id)
        .await?;
    Ok(StatusCode::ACCEPTED)
}

/// `GET /events?after=&limit=`: the provider's events, oldest first (`after` is a `seq`).
pub(super) async fn events(
    State(f): State<Facilitator>,
    ApiQuery(p): ApiQuery<Page>,
    provider: Provider,
) -> Result<Json<Vec<EventRecord>>> {
    let (after, limit) = parse_page(&p);
    let all = f.webhooks().events(provider.address, after, limit).await?;
    Ok(Json(all.iter().map(event_record).collect()))
}
