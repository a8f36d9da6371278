//! A provider's webhook endpoints, their deliveries and its event log (provider API key):
//! `GET`/`POST /webhooks/endpoints`, `GET`/`PATCH`/`DELETE /webhooks/endpoints/{id}`,
//! `POST /webhooks/endpoints/{id}/rotate`, `GET /webhooks/endpoints/{id}/deliveries?limit=`,
//! `POST /webhooks/endpoints/{id}/deliveries/{eventId}/redeliver`, `GET /events?after=&limit=`.

use serde::{Deserialize, Serialize};

use crate::webhook::WebhookEvent;

/// Which event types an endpoint takes: `"*"` (all), one type, or a list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum EventFilter {
    /// `"*"` for all, or one event type.
    One(String),
    /// Event types (a `"*"` among them means all).
    List(Vec<String>),
}

impl EventFilter {
    /// Every event type: `"*"`.
    pub fn all() -> Self {
        Self::One("*".into())
    }

    /// From a comma-separated list (`"*"` alone for all), blanks dropped.
    pub fn from_comma_list(list: &str) -> Self {
        if list.trim() == "*" {
            return Self::all();
        }
        Self::List(
            list.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }
}

/// The body of `POST /webhooks/endpoints`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateEndpoint {
    /// Where events are POSTed (absolute http(s); no private address outside dev mode).
    #[cfg_attr(feature = "openapi", schema(format = "uri", max_length = 2048))]
    pub url: String,
    /// The event types it takes (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<EventFilter>,
    /// Free text (at most 500 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 500))]
    pub description: Option<String>,
}

/// The body of `PATCH /webhooks/endpoints/{id}`: what to change.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateEndpoint {
    /// A new URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(format = "uri", max_length = 2048))]
    pub url: Option<String>,
    /// New event types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<EventFilter>,
    /// A new description (at most 500 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 500))]
    pub description: Option<String>,
    /// Enable or disable it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// The body of `POST /webhooks/endpoints/{id}/rotate`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Rotate {
    /// How long the old secret keeps signing beside the new one, in seconds (default 86400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_secs: Option<u64>,
}

/// The query of the listing calls (`/events`, `/webhooks/endpoints/{id}/deliveries`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Page {
    /// Only events after this sequence number (`/events`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<u64>,
    /// How many (default 100, at most 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// An endpoint as the API shows it; its signing secret only when created or rotated.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// `we_…`.
    pub id: String,
    /// Where events are POSTed.
    pub url: String,
    /// The event types it takes (`["*"]` for all).
    pub events: Vec<String>,
    /// Free text.
    pub description: String,
    /// Whether deliveries go out.
    pub enabled: bool,
    /// Why not (e.g. the receiver answered 410).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    /// The signing secret (`whsec_…`), when created or rotated: shown this once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// Until when (unix seconds) the previous secret signs too, during a rotation's overlap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_secret_expires_at: Option<u64>,
    /// Unix seconds.
    pub created_at: u64,
    /// Unix seconds.
    pub updated_at: u64,
}

/// Where a delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DeliveryState {
    /// To be attempted (again).
    Pending,
    /// The receiver answered 2xx.
    Delivered,
    /// Every attempt failed, or the receiver answered 410: no more automatic attempts.
    Dead,
}

/// One event's delivery to an endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    /// The event (`evt_…`).
    pub event_id: String,
    /// Its type.
    #[serde(rename = "type")]
    pub r#type: String,
    /// Where it stands.
    pub state: DeliveryState,
    /// Attempts made.
    pub attempts: u32,
    /// When the next attempt is due (unix seconds).
    pub next_attempt_at: u64,
    /// The last attempt's HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_status: Option<u16>,
    /// The last attempt's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Unix seconds.
    pub updated_at: u64,
}

/// One entry of `GET /events`: the event as delivered, with its sequence number.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EventRecord {
    /// The provider's event sequence number (`?after=` pages by it).
    pub seq: u64,
    /// The event, `{id, type, createdAt, data}`.
    #[serde(flatten)]
    pub event: WebhookEvent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_and_events_have_the_documented_shapes() {
        assert_eq!(serde_json::to_value(EventFilter::all()).unwrap(), "*");
        assert_eq!(
            serde_json::to_value(EventFilter::from_comma_list("a.b, c.d,")).unwrap(),
            serde_json::json!(["a.b", "c.d"])
        );
        let json = serde_json::json!({
            "id": "evt_1", "type": "example.event", "createdAt": 7, "data": {"x": 1}, "seq": 3
        });
        let e: EventRecord = serde_json::from_value(json.clone()).unwrap();
        assert_eq!((e.seq, e.event.created_at), (3, 7));
        assert_eq!(serde_json::to_value(&e).unwrap(), json);
        assert_eq!(
            serde_json::to_value(DeliveryState::Delivered).unwrap(),
            "delivered"
        );
    }
}
