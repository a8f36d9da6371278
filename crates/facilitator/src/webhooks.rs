//! Webhooks: providers' endpoints, and the delivery of the event outbox to them, signed per
//! Standard Webhooks 1.0.
//!
//! **Events** (`{id, type, createdAt, data}`) are written to the store's outbox in the same
//! transaction as the change that causes them, each with a pending delivery to every enabled
//! endpoint of its provider that takes its type:
//!
//! | type | cause | provider |
//! |---|---|---|
//! | `payment.settled`, `payment.failed` | a settlement confirmed / failed for good | the payee |
//! | `subscription.created`, `.renewed`, `.renewal_failed`, `.paused`, `.resumed`, `.cancelled` | the contract's events, indexed by the keeper | the plan's owner |
//! | `allowance.charged` (an on-chain overage batch), `allowance.raised` | the contract's events | the plan's owner |
//! | `allowance.exhausted` | a deduction refused at the cap (once per cycle and cap) | the plan's owner |
//! | `plan.created`, `plan.deprecated` | the contract's events | the plan's owner |
//!
//! An event's id is derived from its cause (a settlement key, a log's transaction and index), so a
//! cause seen twice is one event: the `webhook-id` of all its deliveries.
//!
//! **Delivery** ([`Facilitator::deliver_webhooks_once`], run every 250 ms by
//! [`Facilitator::spawn_webhooks`]): per endpoint, in event order (a later event waits for an
//! earlier one still being retried; endpoints are served concurrently), at least once. `POST url` with `webhook-id`,
//! `webhook-timestamp`, `webhook-signature` (`v1,<base64 HMAC-SHA256>` with the endpoint's
//! secret, and its previous secret during a rotation's overlap). 2xx: delivered. 410: the
//! delivery is dead and the endpoint disabled. Anything else (429, 5xx, other 4xx, a timeout, a
//! refused connection): retried on [`Settings::webhook_retry_schedule`](crate::Settings) (by
//! default the Standard Webhooks one: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h) with ±20% jitter,
//! never sooner than a `Retry-After`; after the last attempt the delivery is dead (dead-lettered)
//! until redelivered by hand. Deliveries survive restarts: the outbox is the store. An endpoint's
//! batch stops after 2 s, so a slow receiver delays the other endpoints' next pass by at most
//! that plus one attempt's timeout.
//!
//! **SSRF guard**: unless [`Settings::webhook_allow_private`](crate::Settings) (dev mode), an
//! endpoint whose host is or resolves to an address that is not public unicast is refused when
//! registered, again at each delivery, and by the delivery client's DNS resolver, so that the
//! connection only goes to an address that passed the check (no DNS rebinding between the check
//! and the connect; redirects are never followed). IPv4: not
//! loopback, private, link-local, shared (CGNAT), unspecified, broadcast, multicast,
//! documentation, benchmarking, IETF-assigned, 6to4-relay or reserved. IPv6 is an allow-list:
//! global unicast (`2000::/3`) outside its special blocks (IETF protocol assignments
//! `2001::/23`, documentation `2001:db8::/32` and `3fff::/20`); the forms that carry an IPv4
//! address the connection really reaches (IPv4-mapped `::ffff:0:0/96`, NAT64 `64:ff9b::/96`,
//! 6to4 `2002::/16`, Teredo `2001::/32`) are judged by that IPv4 address; everything else (the
//! unspecified and loopback addresses, IPv4-compatible `::/96`, IPv4-translated
//! `::ffff:0:0:0/96`, local-use NAT64 `64:ff9b:1::/48`, discard `100::/64`, unique local,
//! site-local, link-local, multicast, …) is refused.
//!
//! **Secrets at rest**: endpoints' signing secrets are stored sealed under the facilitator's
//! `keys.webhook_secrets` key ([`SecretsKeys`], [`Settings::webhook_secrets`](crate::Settings));
//! without that key no endpoint can be added and no secret rotated.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    time::Duration,
};

use alloy::primitives::{Address, B256, hex};
use axum::{Json, extract::State, http::StatusCode};
use serde_json::{Value, json};
use tollgate_protocol::{
    ApiErrorCode,
    api::webhooks::{
        self as api, CreateEndpoint, Delivery as DeliveryView, Endpoint as EndpointView,
        EventFilter, EventRecord, Page, Rotate, UpdateEndpoint,
    },
    webhook::{
        WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP, WebhookEvent, WebhookSecret,
        signature_header,
    },
};

use crate::{
    error::{ApiJson, ApiPath, ApiQuery, Error, Result},
    facilitator::{Facilitator, unix_now},
    providers::Provider,
    store::{Attempt, Delivery, DeliveryState, Endpoint, EndpointSecrets, Event, StoreError},
};

mod secrets;

pub use secrets::{SEALED_PREFIX, SECRETS_KEY_LEN, SealError, SecretsKey, SecretsKeys, is_sealed};

/// Every event type, as the API names them.
pub const EVENT_TYPES: [&str; 13] = [
    "payment.settled",
    "payment.failed",
    "subscription.created",
    "subscription.renewed",
    "subscription.renewal_failed",
    "subscription.paused",
    "subscription.resumed",
    "subscription.cancelled",
    "allowance.charged",
    "allowance.exhausted",
    "allowance.raised",
    "plan.created",
    "plan.deprecated",
];

/// The Standard Webhooks retry schedule: the delays before attempts 2, 3, … (the first attempt
/// is immediate); about 28 hours in all.
pub const DEFAULT_RETRY_SCHEDULE: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];
/// Default per-attempt timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default overlap of a secret rotation: the old secret keeps signing this long.
pub const DEFAULT_ROTATION_OVERLAP_SECS: u64 = 24 * 3600;
/// How often the delivery worker looks for due deliveries.
const POLL: Duration = Duration::from_millis(250);
/// Endpoints attempted at once.
const CONCURRENCY: usize = 32;
/// Most deliveries sent to one endpoint in one go.
const BATCH: u32 = 256;
/// After this long, an endpoint's batch stops (so that a slow receiver does not hold up the
/// others' next pass for long); the rest goes in the next pass.
const BATCH_TIME: Duration = Duration::from_secs(2);
/// Most endpoints per provider.
const MAX_ENDPOINTS: usize = 20;
/// Longest accepted URL and description.
const MAX_URL: usize = 2048;
const MAX_DESCRIPTION: usize = 500;

/// What one delivery pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeliveryReport {
    /// Delivered (2xx).
    pub delivered: usize,
    /// Failed, to be retried.
    pub retried: usize,
    /// Failed for the last time, or 410: dead.
    pub dead: usize,
}

/// The delivery worker; aborted when dropped.
#[derive(Debug)]
pub struct WebhookHandle(tokio::task::JoinHandle<()>);

impl DeliveryReport {
    fn add(&mut self, other: Self) {
        self.delivered += other.delivered;
        self.retried += other.retried;
        self.dead += other.dead;
    }
}

impl Drop for WebhookHandle {
    fn drop(&mut self) {
        self.0.abort();
    }
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
    {
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
}

/// The delivered body of an event: `{id, type, createdAt, data}`.
fn body(e: &Event) -> Value {
    let data: Value = serde_json::from_str(&e.new.data).unwrap_or(Value::Null);
    json!({ "id": e.new.id, "type": e.new.r#type, "createdAt": e.new.created_at, "data": data })
}

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
        if !EVENT_TYPES.contains(&t.as_str()) {
            return Err(Error::InvalidField(format!(
                "events: unknown event type {t:?} (known: {})",
                EVENT_TYPES.join(", ")
            )));
        }
    }
    let mut list = list;
    list.sort();
    list.dedup();
    Ok(list.join(","))
}

impl Facilitator {
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

    /// The SSRF guard: `Err(why)` when the URL's host is, or resolves to, an address this
    /// facilitator must not call.
    async fn check_target(&self, url: &url::Url) -> Result<(), String> {
        if self.settings().webhook_allow_private {
            return Ok(());
        }
        let ip = match url.host() {
            Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
            Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
            Some(url::Host::Domain(d)) => {
                return GuardedResolver {
                    allow_private: false,
                }
                .resolve_checked(d)
                .await
                .map(drop);
            }
            None => return Err("no host".into()),
        };
        if is_public(&ip) {
            Ok(())
        } else {
            Err(format!(
                "{ip} is a private, loopback or reserved address (allowed only in dev mode)"
            ))
        }
    }

    /// Delivers until nothing is due: each pass takes every endpoint with a due delivery and
    /// sends its due deliveries in event order (concurrently across endpoints), stopping at an
    /// endpoint's first failure so that a later event never overtakes an earlier one.
    pub async fn deliver_webhooks_once(&self) -> DeliveryReport {
        let mut report = DeliveryReport::default();
        loop {
            let due = match self.store().due_deliveries(unix_now(), 256).await {
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

    /// Spawns the delivery worker ([`deliver_webhooks_once`](Self::deliver_webhooks_once) every
    /// 250 ms) until the handle is dropped.
    pub fn spawn_webhooks(&self) -> WebhookHandle {
        let f = self.clone();
        WebhookHandle(tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let r = f.deliver_webhooks_once().await;
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
        let mut report = DeliveryReport::default();
        let store = self.store();
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
        for d in batch {
            if started.elapsed() > BATCH_TIME {
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
                let schedule = &self.settings().webhook_retry_schedule;
                match schedule.get(usize::try_from(attempts).unwrap_or(usize::MAX) - 1) {
                    Some(delay) => {
                        let wait = jitter(*delay).max(retry_after.unwrap_or_default());
                        Attempt::Retry {
                            status,
                            error,
                            next_attempt_at: unix_now() + wait.as_secs(),
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
        let payload = body(event).to_string();
        let signature = signature_header(&secrets, &event.new.id, now, payload.as_bytes());
        let sent = self
            .inner
            .webhook_http
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
}

struct Failure {
    error: String,
    retry_after: Option<Duration>,
    status: Option<u16>,
}

/// `delay` ± 20%, at random.
fn jitter(delay: Duration) -> Duration {
    let r = u64::from_le_bytes(B256::random()[..8].try_into().unwrap_or([0; 8]));
    let permille = 800 + r % 401; // 800..=1200
    delay * u32::try_from(permille).unwrap_or(1000) / 1000
}

/// Whether `ip` is a public unicast address a webhook may be sent to (the SSRF guard's rule;
/// see the module docs).
fn is_public(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: &Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast (deprecated)
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || a >= 240)
}

/// An allow-list: global unicast outside the special blocks, or a form whose embedded IPv4
/// address is public.
fn is_public_v6(ip: &Ipv6Addr) -> bool {
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match ip.segments() {
        // IPv4-mapped (::ffff:a.b.c.d): a dual-stack socket connects to a.b.c.d over IPv4.
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => is_public_v4(&v4(hi, lo)),
        // NAT64's well-known prefix (64:ff9b::a.b.c.d, RFC 6052): the gateway connects to a.b.c.d.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => is_public_v4(&v4(hi, lo)),
        // 6to4 (2002:AABB:CCDD::/48, RFC 3056): a relay reaches the site at AA.BB.CC.DD.
        [0x2002, hi, lo, ..] => is_public_v4(&v4(hi, lo)),
        // Teredo (2001:0:SSSS:SSSS:…:CCCC:CCCC, RFC 4380): the server's IPv4 address, and the
        // client's inverted in the last 32 bits; both must be public.
        [0x2001, 0, shi, slo, _, _, chi, clo] => {
            is_public_v4(&v4(shi, slo)) && is_public_v4(&v4(!chi, !clo))
        }
        // The rest of the IETF protocol assignments (2001::/23: benchmarking 2001:2::/48,
        // ORCHID 2001:10::/28 and 2001:20::/28, AMT, anycast services): never a receiver.
        [0x2001, b, ..] if b < 0x200 => false,
        // Documentation (2001:db8::/32, 3fff::/20).
        [0x2001, 0xdb8, ..] => false,
        [0x3fff, b, ..] if b < 0x1000 => false,
        // Global unicast (2000::/3). Everything outside it is refused: ::, ::1, IPv4-compatible
        // ::/96, IPv4-translated ::ffff:0:0:0/96, local-use NAT64 64:ff9b:1::/48 (where the IPv4
        // address sits is the operator's choice), discard 100::/64, unique local fc00::/7,
        // site-local fec0::/10, link-local fe80::/10, multicast ff00::/8, and the reserved rest.
        [first, ..] => first & 0xe000 == 0x2000,
    }
}

/// The delivery client's DNS resolver: the system's, refusing a name that resolves to any
/// address the SSRF guard refuses. The connection therefore only ever goes to addresses that
/// were checked when it was made, whatever the name resolved to a moment before (DNS rebinding).
#[derive(Clone, Copy, Debug)]
pub(crate) struct GuardedResolver {
    /// Dev mode: let private addresses through ([`Settings::webhook_allow_private`](crate::Settings)).
    pub(crate) allow_private: bool,
}

impl GuardedResolver {
    /// Resolves `host` and checks every address.
    pub(crate) async fn resolve_checked(&self, host: &str) -> Result<Vec<SocketAddr>, String> {
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, 0))
            .await
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .collect();
        if addrs.is_empty() {
            return Err(format!("{host} resolves to nothing"));
        }
        if !self.allow_private
            && let Some(a) = addrs.iter().find(|a| !is_public(&a.ip()))
        {
            return Err(format!(
                "{host} resolves to {}, a private, loopback or reserved address (allowed only in dev mode)",
                a.ip()
            ));
        }
        Ok(addrs)
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let this = *self;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = this.resolve_checked(&host).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Seals whichever of `e`'s secrets is still plaintext (stored by an older version).
fn seal_plaintext(keys: &SecretsKeys, e: &mut Endpoint) -> Result<(), SealError> {
    if !is_sealed(&e.secret) {
        e.secret = keys.seal(&e.id, &e.secret)?;
    }
    if let Some(old) = e.old_secret.as_mut()
        && !is_sealed(old)
    {
        *old = keys.seal(&e.id, old)?;
    }
    Ok(())
}

/// Why the stored webhook secrets do not fit the configured key
/// ([`Facilitator::seal_webhook_secrets`]). Never contains a secret or key material.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretsError {
    /// Secrets are stored encrypted, but no key is configured.
    #[error(
        "the store holds encrypted signing secrets of {endpoints} webhook endpoint(s), but \
         `keys.webhook_secrets` is not set: configure the key they were encrypted with"
    )]
    KeyMissing {
        /// How many endpoints have an encrypted secret.
        endpoints: usize,
    },
    /// Secrets stored in plaintext by an older version, and no key to encrypt them with.
    #[error(
        "the store holds plaintext signing secrets of {endpoints} webhook endpoint(s) (written by \
         an older version), but `keys.webhook_secrets` is not set: set it to a 32-byte key (64 hex \
         digits, e.g. from `openssl rand -hex 32`) and they are encrypted at startup"
    )]
    PlaintextWithoutKey {
        /// How many endpoints there are.
        endpoints: usize,
    },
    /// A stored secret does not open under the configured keys.
    #[error("webhook endpoint {endpoint}: {source}")]
    Seal {
        /// The endpoint.
        endpoint: String,
        /// Why.
        #[source]
        source: SealError,
    },
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl Facilitator {
    /// The configured keys; without them no secret can be written (503 `WebhooksNotConfigured`).
    fn secrets_keys(&self) -> Result<&SecretsKeys> {
        self.settings()
            .webhook_secrets
            .as_ref()
            .ok_or(Error::WebhooksNotConfigured)
    }

    /// The secrets deliveries to `endpoint` are signed with at `now`, opened.
    fn signing_secrets(&self, endpoint: &Endpoint, now: u64) -> Result<Vec<WebhookSecret>, String> {
        let keys = self.settings().webhook_secrets.as_ref();
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

    /// Brings the stored webhook secrets in line with the configured keys; run at startup,
    /// before serving. Every secret still in plaintext (stored by a version before encryption
    /// at rest) or sealed under a previous key (`keys.webhook_secrets_previous`) is sealed
    /// under the current key; every other one is checked to open. Returns how many endpoints
    /// were rewritten.
    ///
    /// Fails, naming the setting, when the store holds secrets but no key is configured, or a
    /// secret was sealed under a key that is not configured (a wrong key) or does not open:
    /// deliveries are never signed with a secret that could not be read.
    pub async fn seal_webhook_secrets(&self) -> Result<usize, SecretsError> {
        let all = self.store().webhook_secrets().await?;
        let Some(keys) = &self.settings().webhook_secrets else {
            let sealed = all
                .iter()
                .filter(|e| is_sealed(&e.secret) || e.old_secret.as_deref().is_some_and(is_sealed))
                .count();
            return match (all.len(), sealed) {
                (0, _) => Ok(0),
                (_, 0) => Err(SecretsError::PlaintextWithoutKey {
                    endpoints: all.len(),
                }),
                (_, endpoints) => Err(SecretsError::KeyMissing { endpoints }),
            };
        };
        let mut rewritten = 0;
        for old in &all {
            let reseal = |stored: &str| -> Result<Option<String>, SecretsError> {
                let wrap = |source| SecretsError::Seal {
                    endpoint: old.id.clone(),
                    source,
                };
                if keys.needs_reseal(&old.id, stored).map_err(wrap)? {
                    let plain = keys.open(&old.id, stored).map_err(wrap)?;
                    Ok(Some(keys.seal(&old.id, &plain).map_err(wrap)?))
                } else {
                    Ok(None)
                }
            };
            let secret = reseal(&old.secret)?;
            let old_secret = match old.old_secret.as_deref() {
                Some(s) => reseal(s)?,
                None => None,
            };
            if secret.is_none() && old_secret.is_none() {
                continue;
            }
            let new = EndpointSecrets {
                id: old.id.clone(),
                secret: secret.unwrap_or_else(|| old.secret.clone()),
                old_secret: old_secret.or_else(|| old.old_secret.clone()),
            };
            // A rotation in between (another replica) wrote sealed secrets already.
            if self.store().replace_webhook_secrets(old, &new).await? {
                rewritten += 1;
            }
        }
        if rewritten > 0 {
            tracing::info!(
                endpoints = rewritten,
                key = keys.current().id(),
                "webhook signing secrets encrypted under the current keys.webhook_secrets"
            );
        }
        Ok(rewritten)
    }
}

fn parse_page(p: &Page) -> (u64, u32) {
    (p.after.unwrap_or(0), p.limit.unwrap_or(100).clamp(1, 1000))
}

fn not_found(id: &str) -> Error {
    Error::NotFound(format!("no webhook endpoint {id:.80}"))
}

/// `POST /webhooks/endpoints`.
pub(crate) async fn create(
    State(f): State<Facilitator>,
    provider: Provider,
    ApiJson(req): ApiJson<CreateEndpoint>,
) -> Result<(StatusCode, Json<EndpointView>)> {
    f.check_url(&req.url).await?;
    let events = parse_filter(req.events)?;
    let description = req.description.unwrap_or_default();
    if description.len() > MAX_DESCRIPTION {
        return Err(Error::InvalidField(format!(
            "description: at most {MAX_DESCRIPTION} bytes"
        )));
    }
    let existing = f.store().webhook_endpoints(provider.address).await?;
    if existing.len() >= MAX_ENDPOINTS {
        return Err(Error::invalid(
            ApiErrorCode::TooManyEndpoints,
            format!("at most {MAX_ENDPOINTS} webhook endpoints per provider"),
        ));
    }
    let keys = f.secrets_keys()?;
    let now = unix_now();
    let id = format!("we_{}", hex::encode(&B256::random()[..12]));
    let secret = WebhookSecret::generate().expose_secret();
    let endpoint = Endpoint {
        provider: provider.address,
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
    f.store().insert_webhook_endpoint(&endpoint).await?;
    tracing::info!(provider = %provider.address, endpoint = %endpoint.id, "webhook endpoint added");
    Ok((
        StatusCode::CREATED,
        Json(endpoint_view(&endpoint, Some(secret))),
    ))
}

/// `GET /webhooks/endpoints`.
pub(crate) async fn list(
    State(f): State<Facilitator>,
    provider: Provider,
) -> Result<Json<Vec<EndpointView>>> {
    let all = f.store().webhook_endpoints(provider.address).await?;
    Ok(Json(all.iter().map(|e| endpoint_view(e, None)).collect()))
}

async fn owned(f: &Facilitator, provider: Address, id: &str) -> Result<Endpoint> {
    f.store()
        .webhook_endpoint(Some(provider), id)
        .await?
        .ok_or_else(|| not_found(id))
}

/// `GET /webhooks/endpoints/{id}`.
pub(crate) async fn show(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    provider: Provider,
) -> Result<Json<EndpointView>> {
    let e = owned(&f, provider.address, &id).await?;
    Ok(Json(endpoint_view(&e, None)))
}

/// `PATCH /webhooks/endpoints/{id}`: url, events, description, enabled (re-enabling clears the
/// reason it was disabled).
pub(crate) async fn update(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    provider: Provider,
    ApiJson(req): ApiJson<UpdateEndpoint>,
) -> Result<Json<EndpointView>> {
    let mut e = owned(&f, provider.address, &id).await?;
    if let Some(url) = req.url {
        f.check_url(&url).await?;
        e.url = url;
    }
    if req.events.is_some() {
        e.events = parse_filter(req.events)?;
    }
    if let Some(d) = req.description {
        if d.len() > MAX_DESCRIPTION {
            return Err(Error::InvalidField(format!(
                "description: at most {MAX_DESCRIPTION} bytes"
            )));
        }
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
    if let Some(keys) = &f.settings().webhook_secrets {
        // A secret an older version stored in plaintext is sealed on this write too.
        seal_plaintext(keys, &mut e).map_err(Error::internal)?;
    }
    if !f.store().update_webhook_endpoint(&e).await? {
        return Err(not_found(&id));
    }
    Ok(Json(endpoint_view(&e, None)))
}

/// `DELETE /webhooks/endpoints/{id}`.
pub(crate) async fn delete(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    provider: Provider,
) -> Result<StatusCode> {
    if f.store()
        .delete_webhook_endpoint(provider.address, &id)
        .await?
    {
        tracing::info!(provider = %provider.address, endpoint = %id, "webhook endpoint deleted");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(&id))
    }
}

/// `POST /webhooks/endpoints/{id}/rotate {overlapSecs?}`: a new secret; the old one keeps
/// signing (deliveries carry both signatures) for the overlap (default 24 h, at most 7 days).
pub(crate) async fn rotate(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    provider: Provider,
    body: axum::body::Bytes,
) -> Result<Json<EndpointView>> {
    // The body is optional: none, or `{overlapSecs}`.
    let req: Rotate = if body.iter().all(u8::is_ascii_whitespace) {
        Rotate::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| Error::InvalidField(e.to_string()))?
    };
    let overlap = req
        .overlap_secs
        .unwrap_or(DEFAULT_ROTATION_OVERLAP_SECS)
        .min(7 * 24 * 3600);
    let keys = f.secrets_keys()?;
    let mut e = owned(&f, provider.address, &id).await?;
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
    if !f.store().update_webhook_endpoint(&e).await? {
        return Err(not_found(&id));
    }
    tracing::info!(provider = %provider.address, endpoint = %id, overlap, "webhook secret rotated");
    Ok(Json(endpoint_view(&e, Some(secret))))
}

/// `GET /webhooks/endpoints/{id}/deliveries?limit=`.
pub(crate) async fn deliveries(
    State(f): State<Facilitator>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(p): ApiQuery<Page>,
    provider: Provider,
) -> Result<Json<Vec<DeliveryView>>> {
    owned(&f, provider.address, &id).await?;
    let (_, limit) = parse_page(&p);
    let all = f.store().deliveries(provider.address, &id, limit).await?;
    Ok(Json(all.iter().map(delivery_view).collect()))
}

/// `POST /webhooks/endpoints/{id}/deliveries/{eventId}/redeliver`: back to pending, now.
pub(crate) async fn redeliver(
    State(f): State<Facilitator>,
    ApiPath((id, event_id)): ApiPath<(String, String)>,
    provider: Provider,
) -> Result<StatusCode> {
    if f.store()
        .redeliver(provider.address, &id, &event_id, unix_now())
        .await?
    {
        Ok(StatusCode::ACCEPTED)
    } else {
        Err(Error::NotFound(format!(
            "no delivery of event {event_id:.80} to endpoint {id:.80}"
        )))
    }
}

/// `GET /events?after=&limit=`: the provider's events, oldest first (`after` is a `seq`).
pub(crate) async fn events(
    State(f): State<Facilitator>,
    ApiQuery(p): ApiQuery<Page>,
    provider: Provider,
) -> Result<Json<Vec<EventRecord>>> {
    let (after, limit) = parse_page(&p);
    let all = f.store().events(provider.address, after, limit).await?;
    Ok(Json(
        all.iter()
            .map(|e| EventRecord {
                seq: e.seq,
                event: WebhookEvent {
                    id: e.new.id.clone(),
                    r#type: e.new.r#type.clone(),
                    created_at: e.new.created_at,
                    data: serde_json::from_str(&e.new.data).unwrap_or(Value::Null),
                },
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_reserved_addresses_are_refused() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "192.88.99.1",
            "198.18.0.1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(!is_public(&ip), "{ip}");
        }
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700::1111"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(is_public(&ip), "{ip}");
        }
    }

    /// Issue 13: every IPv6 form that maps to a refused IPv4 address or is not global unicast.
    #[test]
    fn ipv6_forms_of_refused_addresses_are_refused() {
        for ip in [
            // The six.
            "::ffff:0:7f00:1", // IPv4-translated 127.0.0.1
            "fec0::1",         // site-local
            "100::1",          // discard-only
            "::127.0.0.1",     // IPv4-compatible 127.0.0.1
            "64:ff9b::7f00:1", // NAT64 of 127.0.0.1
            "2002:7f00:1::1",  // 6to4 of 127.0.0.1
            // IPv4-mapped, -translated and -compatible, of refused and of public addresses.
            "::ffff:169.254.169.254",
            "::ffff:100.64.0.1",
            "::ffff:0.0.0.0",
            "::ffff:0:a00:1",
            "::ffff:0:808:808",
            "::a00:1",
            "::808:808",
            "::",
            "::1",
            // NAT64: well-known prefix of refused addresses; the local-use prefix always.
            "64:ff9b::a00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::c0a8:101",
            "64:ff9b:1::808:808",
            "64:ff9b:1:7f00:1::",
            // 6to4 of refused addresses.
            "2002:a00:1::1",
            "2002:c0a8:101::1",
            "2002:a9fe:a9fe::1",
            "2002::1",
            // Teredo: a refused server, or a refused client (inverted: 127.0.0.1 = 80ff:fffe).
            "2001:0:7f00:1::1",
            "2001:0:808:808:0:0:80ff:fffe",
            "2001:0:808:808:0:0:f5ff:fffe",
            // Other IETF protocol assignments: benchmarking, ORCHID, ORCHIDv2, AMT, anycast.
            "2001:2::1",
            "2001:10::1",
            "2001:20::1",
            "2001:3::1",
            "2001:1::1",
            // Documentation.
            "2001:db8::1",
            "3fff::1",
            "3fff:fff::1",
            // Not global unicast.
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "febf::1",
            "fec0:1::1",
            "feff::1",
            "ff02::1",
            "ff0e::1",
            "5f00::1",
            "4000::1",
            "8000::1",
            "1000::1",
            "100::",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(!is_public(&ip), "{ip} must be refused");
        }
        for ip in [
            "2606:4700::1111",
            "2a00:1450:4001::200e",
            "2001:4860:4860::8888",
            "3ffe::1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            // Teredo with a public server and client (8.8.8.8 inverted is f7f7:f7f7).
            "2001:0:808:808:0:0:f7f7:f7f7",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(is_public(&ip), "{ip} is public");
        }
    }

    /// At delivery the client's resolver refuses a name that resolves to a refused address,
    /// so what is connected to is what was checked.
    #[tokio::test]
    async fn the_delivery_resolver_refuses_names_of_private_addresses() {
        let guarded = GuardedResolver {
            allow_private: false,
        };
        let e = guarded.resolve_checked("localhost").await.unwrap_err();
        assert!(e.contains("localhost resolves to"), "{e}");
        let name: reqwest::dns::Name = "localhost".parse().unwrap();
        assert!(
            reqwest::dns::Resolve::resolve(&guarded, name)
                .await
                .is_err(),
            "the client's resolver refuses it too"
        );
        let dev = GuardedResolver {
            allow_private: true,
        };
        assert!(!dev.resolve_checked("localhost").await.unwrap().is_empty());
    }

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
