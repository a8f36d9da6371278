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
        extract::{ApiJson, ApiPath, ApiQuery, NOT_AN_OBJECT, is_json_object},
        providers::Provider,
    },
    error::{Error, Result},
    facilitator::{Facilitator, unix_now},
    store::{Delivery, DeliveryState, Endpoint, Event},
};

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
    let (endpoint, secret) = f.create_webhook_endpoint(provider.address, req).await?;
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
    let all = f.webhook_endpoints(provider.address).await?;
    Ok(Json(all.iter().map(|e| endpoint_view(e, None)).collect()))
}

/// `GET /webhooks/endpoints/{id}`.
pub(super) async fn show(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    provider: Provider,
) -> Result<Json<EndpointView>> {
    let e = f.owned_webhook_endpoint(provider.address, &id).await?;
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
        .update_webhook_endpoint(provider.address, &id, req)
        .await?;
    Ok(Json(endpoint_view(&e, None)))
}

/// `DELETE /webhooks/endpoints/{id}`.
pub(super) async fn delete(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    provider: Provider,
) -> Result<StatusCode> {
    f.delete_webhook_endpoint(provider.address, &id).await?;
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
        .rotate_webhook_secret(provider.address, &id, req.overlap_secs)
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
    let all = f.webhook_deliveries(provider.address, &id, limit).await?;
    Ok(Json(all.iter().map(delivery_view).collect()))
}

/// `POST /webhooks/endpoints/{id}/deliveries/{eventId}/redeliver`: back to pending, now.
pub(super) async fn redeliver(
    State(f): State<Facilitator>,
    ApiPath((id, event_id)): ApiPath<(String, String)>,
    provider: Provider,
) -> Result<StatusCode> {
    f.redeliver_webhook(provider.address, &id, &event_id)
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
    let all = f.webhook_events(provider.address, after, limit).await?;
    Ok(Json(all.iter().map(event_record).collect()))
}
