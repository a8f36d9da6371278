//! Webhooks: providers' endpoints, and the delivery of the event outbox to them, signed per
//! Standard Webhooks 1.0.
//!
//! **Events** (`{id, type, createdAt, data}`: a [`WebhookEvent`], its data one struct per
//! [`EventType`], from `tollgate_protocol::webhook`) are written to the store's outbox in the same
//! transaction as the change that causes them, each with a pending delivery to every enabled
//! endpoint of its provider that takes its type:
//!
//! | type | cause | provider |
//! |---|---|---|
//! | `payment.settled`, `payment.failed` | a settlement confirmed / failed for good | the payee |
//! | `subscription.created`, `.renewed`, `.renewal_failed`, `.paused`, `.resumed`, `.cancelled` | the contract's events, indexed by the keeper | the plan's owner |
//! | `subscription.renewal_stuck` | the keeper's collection of a due cycle refused at simulation [`MAX_REFUSED_COLLECTS`](crate::keeper::MAX_REFUSED_COLLECTS) times (once per stuck episode; see [`crate::keeper`]) | the plan's owner |
//! | `allowance.charged` (an on-chain overage batch), `allowance.raised` | the contract's events | the plan's owner |
//! | `allowance.exhausted` | a deduction refused at the cap (once per cycle and cap) | the plan's owner |
//! | `plan.created`, `plan.deprecated` | the contract's events | the plan's owner |
//! | `relayer.low_balance` | a relayer of the facilitator fell below the gas floor (once per fall; see [`crate::funds`]) | the operator (`fees.fee_recipient`'s provider account) |
//!
//! An event's id is derived from its cause (a settlement key, a log's transaction and index), so a
//! cause seen twice is one event: the `webhook-id` of all its deliveries.
//!
//! **Delivery** ([`Facilitator::deliver_webhooks_once`](crate::Facilitator::deliver_webhooks_once),
//! run every 250 ms by [`Facilitator::spawn_webhooks`](crate::Facilitator::spawn_webhooks)): per
//! endpoint, in event order (a later event waits for an earlier one still being retried;
//! endpoints are served concurrently), at least once. `POST url` with `webhook-id`,
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

use std::{sync::Arc, time::Duration};

use crate::facilitator::Core;

#[cfg(doc)]
use tollgate_protocol::webhook::{EventType, WebhookEvent};

mod delivery;
mod endpoints;
mod reseal;
mod secrets;
mod ssrf;

pub use reseal::SecretsError;
pub use secrets::{SEALED_PREFIX, SECRETS_KEY_LEN, SealError, SecretsKey, SecretsKeys, is_sealed};
pub(crate) use ssrf::GuardedResolver;

/// Webhooks: providers' endpoints, the delivery of the event outbox to them, and the event
/// log. Owns the delivery HTTP client (with the SSRF guard in its resolver). A service of the
/// [`Facilitator`](crate::Facilitator).
#[derive(Clone, Debug)]
pub struct Webhooks {
    pub(crate) core: Arc<Core>,
    /// The client deliveries are posted with.
    pub(crate) http: reqwest::Client,
}

impl Webhooks {
    pub(crate) fn new(core: Arc<Core>, http: reqwest::Client) -> Self {
        Self { core, http }
    }
}

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
