//! Providers' webhook endpoints: registering, listing, changing, deleting them and rotating
//! their signing secrets, their deliveries and events; every operation is the owner's only.

use alloy::primitives::{Address, B256, hex};
use tollgate_protocol::{
    ApiErrorCode,
    api::webhooks::{CreateEndpoint, EventFilter, UpdateEndpoint},
    webhook::{EventType, WebhookSecret},
};

use super::{DEFAULT_ROTATION_OVERLAP_SECS, SecretsKeys, reseal::seal_plaintext};
use crate::{
    error::{Error, Result},
    facilitator::unix_now,
    store::{Delivery, Endpoint, Event},
    webhooks::Webhooks,
};

/// Most endpoints per provider.
const MAX_ENDPOINTS: usize = 20;
/// Longest accepted URL.
const MAX_URL: usize = 2048;
/// Longest accepted description.
const MAX_DESCRIPTION: usize = 500;

/// Longest rotation overlap: 7 days.
const MAX_OVERLAP_SECS: u64 = 7 * 24 * 3600;

/// The stored form of an event filter: `*`, or the known types sorted and comma-separated.
fn parse_filter(f: Option<EventFilter>) -> Result<String> {
    let list = match f {
        None => return Ok("*".into()),
        Some(EventFilter::One(s)) if s == "*" => return Ok("*".into()),
        Some(EventFilter::One(s)) => vec![s],
        Some(EventFilter::List(v)) => v,
    };
    if list.is_empty() {
        return Err(Error::InvalidField(
            "events: at least one event type, or \"*\"".into(),
        ));
    }
    if list.iter().any(|t| t == "*") {
        return Ok("*".into());
    }
    for t in &list {
        if t.parse::<EventType>().is_err() {
            return Err(Error::InvalidField(format!(
                "events: unknown event type {t:?} (known: {})",
                EventType::list(", ")
            )));
        }
    }
    let mut list = list;
    list.sort();
    list.dedup();
    Ok(list.join(","))
}

fn not_found(id: &str) -> Error {
    Error::NotFound(format!("no webhook endpoint {id:.80}"))
}

fn check_description(description: &str) -> Result<()> {
    if description.len() > MAX_DESCRIPTION {
        return Err(Error::InvalidField(format!(
            "description: at most {MAX_DESCRIPTION} bytes"
        )));
    }
    Ok(())
}

impl Webhooks {
    /// Checks an endpoint URL: absolute http(s), and (unless private targets are allowed) a
    /// host that is not, and does not resolve to, a private address.
    async fn check_url(&self, url: &str) -> Result<()> {
        if url.len() > MAX_URL {
            return Err(Error::InvalidField(format!("url: at most {MAX_URL} bytes")));
        }
        let parsed = url::Url::parse(url).map_err(|e| Error::InvalidField(format!("url: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(Error::InvalidField("url: an absolute http(s) URL".into()));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(Error::InvalidField("url: no credentials in the URL".into()));
        }
        self.check_target(&parsed)
            .await
            .map_err(|why| Error::invalid(ApiErrorCode::TargetNotAllowed, format!("url: {why}")))
    }

    /// The configured keys; without them no secret can be written (503 `WebhooksNotConfigured`).
    fn secrets_keys(&self) -> Result<&SecretsKeys> {
        self.core
            .settings()
            .webhook_secrets
            .as_ref()
            .ok_or(Error::WebhooksNotConfigured)
    }

    /// Registers an endpoint for `provider`: the endpoint and its signing secret, in plaintext
    /// this once (stored sealed).
    pub(crate) async fn create_endpoint(
        &self,
        provider: Address,
        req: CreateEndpoint,
    ) -> Result<(Endpoint, String)> {
        self.check_url(&req.url).await?;
        let events = parse_filter(req.events)?;
        let description = req.description.unwrap_or_default();
        check_description(&description)?;
        let existing = self.core.store().webhook_endpoints(provider).await?;
        if existing.len() >= MAX_ENDPOINTS {
            return Err(Error::invalid(
                ApiErrorCode::TooManyEndpoints,
                format!("at most {MAX_ENDPOINTS} webhook endpoints per provider"),
            ));
        }
        let keys = self.secrets_keys()?;
        let now = unix_now();
        let id = format!("we_{}", hex::encode(&B256::random()[..12]));
        let secret = WebhookSecret::generate().expose_secret();
        let endpoint = Endpoint {
            provider,
            url: req.url,
            events,
            description,
            secret: keys.seal(&id, &secret).map_err(Error::internal)?,
            id,
            old_secret: None,
            old_secret_expires_at: None,
            enabled: true,
            disabled_reason: None,
            created_at: now,
            updated_at: now,
        };
        self.core.store().insert_webhook_endpoint(&endpoint).await?;
        tracing::info!(%provider, endpoint = %endpoint.id, "webhook endpoint added");
        Ok((endpoint, secret))
    }

    /// `provider`'s endpoints.
    pub(crate) async fn endpoints(&self, provider: Address) -> Result<Vec<Endpoint>> {
        Ok(self.core.store().webhook_endpoints(provider).await?)
    }

    /// `provider`'s endpoint `id`; 404 when it has none by that id.
    pub(crate) async fn owned_endpoint(&self, provider: Address, id: &str) -> Result<Endpoint> {
        self.core
            .store()
            .webhook_endpoint(Some(provider), id)
            .await?
            .ok_or_else(|| not_found(id))
    }

    /// Changes url, events, description and enabled as `req` says (re-enabling clears the reason
    /// it was disabled).
    pub(crate) async fn update_endpoint(
        &self,
        provider: Address,
        id: &str,
        req: UpdateEndpoint,
    ) -> Result<Endpoint> {
        let mut e = self.owned_endpoint(provider, id).await?;
        if let Some(url) = req.url {
            self.check_url(&url).await?;
            e.url = url;
        }
        if req.events.is_some() {
            e.events = parse_filter(req.events)?;
        }
        if let Some(d) = req.description {
            check_description(&d)?;
            e.description = d;
        }
        if let Some(enabled) = req.enabled {
            e.enabled = enabled;
            e.disabled_reason = if enabled {
                None
            } else {
                Some("disabled by the provider".into())
            };
        }
        e.updated_at = unix_now();
        if let Some(keys) = &self.core.settings().webhook_secrets {
            // A secret an older version stored in plaintext is sealed on this write too.
            seal_plaintext(keys, &mut e).map_err(Error::internal)?;
        }
        if !self.core.store().update_webhook_endpoint(&e).await? {
            return Err(not_found(id));
        }
        Ok(e)
    }

    /// Deletes `provider`'s endpoint `id`.
    pub(crate) async fn delete_endpoint(&self, provider: Address, id: &str) -> Result<()> {
        if self
            .core
            .store()
            .delete_webhook_endpoint(provider, id)
            .await?
        {
            tracing::info!(%provider, endpoint = %id, "webhook endpoint deleted");
            Ok(())
        } else {
            Err(not_found(id))
        }
    }

    /// Gives endpoint `id` a new secret (returned in plaintext this once); the old one keeps
    /// signing (deliveries carry both signatures) for `overlap_secs` (default 24 h, at most 7
    /// days).
    pub(crate) async fn rotate_secret(
        &self,
        provider: Address,
        id: &str,
        overlap_secs: Option<u64>,
    ) -> Result<(Endpoint, String)> {
        let overlap = overlap_secs
            .unwrap_or(DEFAULT_ROTATION_OVERLAP_SECS)
            .min(MAX_OVERLAP_SECS);
        let keys = self.secrets_keys()?;
        let mut e = self.owned_endpoint(provider, id).await?;
        let now = unix_now();
        let secret = WebhookSecret::generate().expose_secret();
        // The previous secret moves to `old_secret` as stored: the seal is bound to the endpoint,
        // not to the column.
        e.old_secret = Some(std::mem::replace(
            &mut e.secret,
            keys.seal(&e.id, &secret).map_err(Error::internal)?,
        ));
        e.old_secret_expires_at = Some(now + overlap);
        seal_plaintext(keys, &mut e).map_err(Error::internal)?;
        e.updated_at = now;
        if !self.core.store().update_webhook_endpoint(&e).await? {
            return Err(not_found(id));
        }
        tracing::info!(%provider, endpoint = %id, overlap, "webhook secret rotated");
        Ok((e, secret))
    }

    /// The latest `limit` deliveries to `provider`'s endpoint `id`.
    pub(crate) async fn deliveries(
        &self,
        provider: Address,
        id: &str,
        limit: u32,
    ) -> Result<Vec<Delivery>> {
        self.owned_endpoint(provider, id).await?;
        Ok(self.core.store().deliveries(provider, id, limit).await?)
    }

    /// Puts the delivery of `event_id` to endpoint `id` back to pending, due now.
    pub(crate) async fn redeliver(
        &self,
        provider: Address,
        id: &str,
        event_id: &str,
    ) -> Result<()> {
        if self
            .core
            .store()
            .redeliver(provider, id, event_id, unix_now())
            .await?
        {
            Ok(())
        } else {
            Err(Error::NotFound(format!(
                "no delivery of event {event_id:.80} to endpoint {id:.80}"
            )))
        }
    }

    /// `provider`'s events after `seq` `after`, oldest first.
    pub(crate) async fn events(
        &self,
        provider: Address,
        after: u64,
        limit: u32,
    ) -> Result<Vec<Event>> {
        Ok(self.core.store().events(provider, after, limit).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_checked_and_normalised() {
        assert_eq!(parse_filter(None).unwrap(), "*");
        let f = EventFilter::List(vec!["plan.created".into(), "payment.settled".into()]);
        assert_eq!(
            parse_filter(Some(f)).unwrap(),
            "payment.settled,plan.created"
        );
        assert!(parse_filter(Some(EventFilter::List(vec!["nope".into()]))).is_err());
        assert!(parse_filter(Some(EventFilter::List(vec![]))).is_err());
    }
}
