//! The delivery worker: sends the outbox's due deliveries to their endpoints, signed, in event
//! order per endpoint, and records each attempt (see the [module docs](super)).

use std::time::Duration;

use alloy::primitives::B256;
use tollgate_protocol::webhook::{
    WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP, WebhookSecret, signature_header,
};

use super::{DeliveryReport, SealError, WebhookHandle, is_sealed};
use crate::{
    facilitator::{since_epoch, unix_now},
    store::{Attempt, Delivery, Endpoint, Event},
    webhooks::Webhooks,
};

/// How often the delivery worker looks for due deliveries.
const POLL: Duration = Duration::from_millis(250);
/// Endpoints attempted at once.
const CONCURRENCY: usize = 32;
/// Most deliveries sent to one endpoint in one go.
const BATCH: u32 = 256;
/// After this long, an endpoint's batch stops (so that a slow receiver does not hold up the
/// others' next pass for long); the rest goes in the next pass.
const BATCH_TIME: Duration = Duration::from_secs(2);
/// The delivered body of an event: its [`WebhookEvent`](tollgate_protocol::webhook::WebhookEvent),
/// `{id, type, createdAt, data}`.
fn body(e: &Event) -> String {
    // A `WebhookEvent` always serializes (its data is typed, or any JSON value).
    serde_json::to_string(&e.new.webhook_event()).unwrap_or_default()
}

impl Webhooks {
    /// Delivers until nothing is due: each pass takes every endpoint with a due delivery and
    /// sends its due deliveries in event order (concurrently across endpoints), stopping at an
    /// endpoint's first failure so that a later event never overtakes an earlier one.
    pub async fn deliver_once(&self) -> DeliveryReport {
        let mut report = DeliveryReport::default();
        loop {
            let due = match self.core.store().due_deliveries(unix_now(), 256).await {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(error = %e, "webhooks: store unavailable");
                    return report;
                }
            };
            if due.is_empty() {
                return report;
            }
            let mut tasks = tokio::task::JoinSet::new();
            let mut pass = DeliveryReport::default();
            for d in due {
                if tasks.len() >= CONCURRENCY
                    && let Some(Ok(r)) = tasks.join_next().await
                {
                    pass.add(r);
                }
                let f = self.clone();
                tasks.spawn(async move { f.drain_endpoint(&d.endpoint_id).await });
            }
            while let Some(r) = tasks.join_next().await {
                if let Ok(r) = r {
                    pass.add(r);
                }
            }
            report.add(pass);
            if pass.delivered == 0 && pass.dead == 0 {
                return report;
            }
        }
    }

    /// Spawns the delivery worker ([`deliver_once`](Self::deliver_once) every
    /// 250 ms) until the handle is dropped.
    pub fn spawn(&self) -> WebhookHandle {
        let f = self.clone();
        WebhookHandle(tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let r = f.deliver_once().await;
                if r != DeliveryReport::default() {
                    tracing::debug!(?r, "webhook deliveries");
                }
            }
        }))
    }

    /// Sends one endpoint's due deliveries in order (up to [`BATCH`]) until one fails, then
    /// records every outcome in one transaction (a crash before that only means those deliveries
    /// are sent again, with the same `webhook-id`: at least once).
    async fn drain_endpoint(&self, endpoint_id: &str) -> DeliveryReport {
        // One replica of a fleet drains an endpoint at a time, so that its events go out in
        // order and each attempt once.
        let lease = crate::replica::webhook_lease(endpoint_id);
        let leases = &self.core.leases;
        // Long enough for a whole batch: its time plus one attempt, with room to record it.
        let ttl = (BATCH_TIME + self.core.settings().webhook_timeout + Duration::from_secs(1)) * 3;
        match leases
            .take_for(&self.core, &lease, ttl.max(leases.ttl()))
            .await
        {
            Ok(Some(_)) => {}
            Ok(None) => return DeliveryReport::default(),
            Err(e) => {
                tracing::warn!(error = %e, "webhooks: store unavailable");
                return DeliveryReport::default();
            }
        }
        let report = self.drain_endpoint_held(endpoint_id, &lease).await;
        leases.give_up(&self.core, &lease).await;
        report
    }

    /// [`drain_endpoint`](Self::drain_endpoint) under its lease: an attempt starts only while
    /// the lease will outlast it.
    async fn drain_endpoint_held(&self, endpoint_id: &str, lease: &str) -> DeliveryReport {
        let mut report = DeliveryReport::default();
        let store = self.core.store();
        let (endpoint, batch) = match tokio::try_join!(
            store.webhook_endpoint(None, endpoint_id),
            store.pending_deliveries(endpoint_id, unix_now(), BATCH)
        ) {
            Ok((Some(e), batch)) if e.enabled => (e, batch),
            Ok(_) => return report,
            Err(e) => {
                tracing::warn!(error = %e, "webhooks: store unavailable");
                return report;
            }
        };
        let mut outcomes = Vec::with_capacity(batch.len());
        let started = std::time::Instant::now();
        let span = self.core.settings().webhook_timeout + Duration::from_secs(1);
        for d in batch {
            if started.elapsed() > BATCH_TIME || !self.core.leases.holds_for(lease, span) {
                break;
            }
            let attempts = d.attempts.saturating_add(1);
            let attempt = self.attempt(&endpoint, &d, attempts).await;
            let delivered = matches!(attempt, Attempt::Delivered { .. });
            match &attempt {
                Attempt::Delivered { .. } => report.delivered += 1,
                Attempt::Retry { .. } => report.retried += 1,
                Attempt::Dead { .. } | Attempt::Gone => report.dead += 1,
            }
            outcomes.push((d.event.seq, attempts, attempt));
            if !delivered {
                break;
            }
        }
        if report.delivered > 0 {
            crate::fault::hit("webhook.after-send");
        }
        if let Err(e) = store
            .finish_deliveries(&endpoint.id, &outcomes, unix_now())
            .await
        {
            tracing::warn!(error = %e, "webhooks: cannot record attempts; they will be repeated");
        }
        report
    }

    /// One attempt at one delivery: what it came to (logged; not yet recorded).
    async fn attempt(&self, endpoint: &Endpoint, d: &Delivery, attempts: u32) -> Attempt {
        let attempt = match self.post(endpoint, &d.event).await {
            Ok(status) if (200..300).contains(&status) => Attempt::Delivered { status },
            Ok(410) => Attempt::Gone,
            other => {
                let (status, error, retry_after) = match other {
                    Ok(status) => (Some(status), format!("HTTP {status}"), None),
                    Err(Failure {
                        error,
                        retry_after,
                        status,
                    }) => (status, error, retry_after),
                };
                let schedule = &self.core.settings().webhook_retry_schedule;
                match schedule.get(usize::try_from(attempts).unwrap_or(usize::MAX) - 1) {
                    Some(delay) => {
                        let wait = jitter(*delay).max(retry_after.unwrap_or_default());
                        Attempt::Retry {
                            status,
                            error,
                            next_attempt_at: due_after(since_epoch(), wait),
                        }
                    }
                    None => Attempt::Dead { status, error },
                }
            }
        };
        match &attempt {
            Attempt::Delivered { .. } => {}
            Attempt::Gone => tracing::warn!(
                endpoint = %endpoint.id, event = %d.event.new.id,
                "webhook endpoint answered 410 Gone: disabled"
            ),
            Attempt::Retry {
                error,
                next_attempt_at,
                ..
            } => tracing::info!(
                endpoint = %endpoint.id, event = %d.event.new.id, attempts, %error,
                next_attempt_at, "webhook delivery failed; will retry"
            ),
            Attempt::Dead { error, .. } => tracing::warn!(
                endpoint = %endpoint.id, event = %d.event.new.id, attempts, %error,
                "webhook delivery failed for the last time: dead-lettered"
            ),
        }
        attempt
    }

    /// POSTs the signed event; the status, or why there is none.
    async fn post(&self, endpoint: &Endpoint, event: &Event) -> Result<u16, Failure> {
        let fail = |error: String| Failure {
            error,
            retry_after: None,
            status: None,
        };
        let url = url::Url::parse(&endpoint.url).map_err(|e| fail(format!("url: {e}")))?;
        self.check_target(&url).await.map_err(fail)?;
        let now = unix_now();
        let secrets = self.signing_secrets(endpoint, now).map_err(fail)?;
        let payload = body(event);
        let signature = signature_header(&secrets, &event.new.id, now, payload.as_bytes());
        let sent = self
            .http
            .post(url)
            .header(WEBHOOK_ID, &event.new.id)
            .header(WEBHOOK_TIMESTAMP, now.to_string())
            .header(WEBHOOK_SIGNATURE, signature)
            .header("content-type", "application/json")
            .body(payload)
            .send()
            .await;
        match sent {
            Ok(r) => {
                let status = r.status().as_u16();
                if (200..300).contains(&status) || status == 410 {
                    return Ok(status);
                }
                let retry_after = r
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(|s| Duration::from_secs(s.min(24 * 3600)));
                Err(Failure {
                    error: format!("HTTP {status}"),
                    retry_after,
                    status: Some(status),
                })
            }
            Err(e) if e.is_timeout() => Err(fail("timed out".into())),
            Err(e) if e.is_connect() => Err(fail("connection failed".into())),
            Err(e) => Err(fail(format!("request failed: {e}"))),
        }
    }

    /// The secrets deliveries to `endpoint` are signed with at `now`, opened.
    fn signing_secrets(&self, endpoint: &Endpoint, now: u64) -> Result<Vec<WebhookSecret>, String> {
        let keys = self.core.settings().webhook_secrets.as_ref();
        endpoint
            .signing_secrets(now)
            .into_iter()
            .map(|stored| {
                let plain = match keys {
                    Some(keys) => keys.open(&endpoint.id, stored).map_err(|e| e.to_string())?,
                    None if is_sealed(stored) => return Err(SealError::NoKey.to_string()),
                    None => stored.to_owned(),
                };
                WebhookSecret::parse(&plain).map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, String>>()
            .map_err(|e| format!("the endpoint's signing secret is unusable: {e}"))
    }
}

/// Why an attempt got no 2xx or 410.
struct Failure {
    error: String,
    retry_after: Option<Duration>,
    status: Option<u16>,
}

/// `delay` ± 20%, at random.
/// The whole second (Unix time, as deliveries are scheduled and read) when a retry `wait` from
/// `now` is due: the first at or after `now + wait`, so that it is never due sooner (truncated
/// instead, a `Retry-After: 1` read at 100.999 s would be due at 101, a millisecond later); with
/// no wait, at once.
fn due_after(now: Duration, wait: Duration) -> u64 {
    if wait.is_zero() {
        return now.as_secs();
    }
    let at = now.saturating_add(wait);
    at.as_secs()
        .saturating_add(u64::from(at.subsec_nanos() > 0))
}

fn jitter(delay: Duration) -> Duration {
    let r = u64::from_le_bytes(B256::random()[..8].try_into().unwrap_or([0; 8]));
    let permille = 800 + r % 401; // 800..=1200
    delay * u32::try_from(permille).unwrap_or(1000) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_is_never_due_before_its_wait() {
        let at = Duration::from_millis;
        // Due when the whole-second clock reaches it: never sooner than `now + wait`.
        assert_eq!(due_after(at(100_999), Duration::from_secs(1)), 102);
        assert_eq!(due_after(at(100_000), Duration::from_secs(1)), 101);
        assert_eq!(due_after(at(100_200), Duration::from_millis(800)), 101);
        // No wait: due at once.
        assert_eq!(due_after(at(100_200), Duration::ZERO), 100);
        assert_eq!(due_after(Duration::MAX, Duration::from_secs(1)), u64::MAX);
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        for _ in 0..1000 {
            let d = jitter(Duration::from_secs(100));
            assert!(
                d >= Duration::from_secs(80) && d <= Duration::from_secs(120),
                "{d:?}"
            );
        }
    }
}
