//! Per-client rate limiting: one GCRA cell per client address (an IPv6 client by its /64), so a
//! client gets `burst` requests at once and then `per_second` on average.

use std::{
    collections::HashMap,
    net::{IpAddr, SocketAddr},
    sync::Mutex,
    time::{Duration, Instant},
};

use axum::{
    extract::{ConnectInfo, Request},
    http::{HeaderValue, StatusCode, header},
    middleware::Next,
    response::Response,
};
use serde::Deserialize;

/// Requests allowed per client.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimit {
    /// The sustained rate, in requests per second (at least 1).
    pub per_second: u32,
    /// Requests allowed at once after a quiet period (at least 1).
    pub burst: u32,
    /// What identifies a client.
    pub client: ClientAddress,
    /// Whether loopback and private-network clients (RFC 1918, CGNAT, link-local, IPv6 unique
    /// local) are limited too. Off by default: such a client is the operator's own, or a reverse
    /// proxy or ingress speaking for many clients (set [`ClientAddress::XForwardedFor`] behind
    /// one, so that they are told apart and limited).
    pub limit_private: bool,
}

impl RateLimit {
    /// `per_second` on average with bursts of `burst`, per peer address, private addresses exempt.
    pub fn per_second(per_second: u32, burst: u32) -> Self {
        Self {
            per_second: per_second.max(1),
            burst: burst.max(1),
            client: ClientAddress::Peer,
            limit_private: false,
        }
    }

    /// The same limit, keyed by `client`.
    pub fn client(self, client: ClientAddress) -> Self {
        Self { client, ..self }
    }

    /// The same limit, applied to loopback and private-network clients too.
    pub fn limit_private(self, yes: bool) -> Self {
        Self {
            limit_private: yes,
            ..self
        }
    }
}

impl Default for RateLimit {
    /// 50 requests per second with bursts of 100, per peer address, private addresses exempt.
    fn default() -> Self {
        Self::per_second(50, 100)
    }
}

/// What identifies a client for [`RateLimit`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ClientAddress {
    /// The TCP peer's address. Right when clients connect directly.
    #[default]
    Peer,
    /// The last address in `X-Forwarded-For` (the one your reverse proxy appended), the peer's
    /// when there is none. Use it only behind a proxy that sets the header: a direct client
    /// could otherwise choose its own key.
    XForwardedFor,
}

/// Expired cells are first swept once the map holds this many.
const SWEEP_AT: usize = 4096;

pub(crate) struct Limiter {
    limit: RateLimit,
    /// Time per request.
    interval: Duration,
    /// How far ahead of now a client's theoretical arrival time may run.
    tolerance: Duration,
    cells: Mutex<Cells>,
}

/// Each client's theoretical arrival time, and the size at which expired ones are swept next
/// (doubling while most are live, so a flood of clients costs amortized O(1) per request).
struct Cells {
    tat: HashMap<IpAddr, Instant>,
    sweep_at: usize,
}

impl Limiter {
    pub(crate) fn new(limit: RateLimit) -> Self {
        let interval = Duration::from_secs(1) / limit.per_second.max(1);
        let tolerance = interval * (limit.burst.max(1) - 1);
        Self {
            limit,
            interval,
            tolerance,
            cells: Mutex::new(Cells {
                tat: HashMap::new(),
                sweep_at: SWEEP_AT,
            }),
        }
    }

    pub(crate) async fn admit(&self, req: Request, next: Next) -> Response {
        if let Some(client) = self.client_of(&req)
            && let Err(wait) = self.take(client, Instant::now())
        {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            tracing::debug!(%client, retry_after = secs, "rate limited");
            let mut response = crate::refusal(
                StatusCode::TOO_MANY_REQUESTS,
                tollgate_protocol::ApiErrorCode::RateLimited,
                &format!("too many requests from this client; retry in {secs} s"),
            );
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            return response;
        }
        next.run(req).await
    }

    /// The key of the request's client, or `None` when it is not limited.
    fn client_of(&self, req: &Request) -> Option<IpAddr> {
        client_key(req, self.limit.client, self.limit.limit_private)
    }

    /// Takes one request from `client`'s allowance at `now`, or says how long to wait.
    pub(crate) fn take(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut cells = self.cells.lock().unwrap_or_else(|e| e.into_inner());
        if cells.tat.len() >= cells.sweep_at {
            cells.tat.retain(|_, tat| *tat > now);
            cells.sweep_at = (cells.tat.len() * 2).max(SWEEP_AT);
        }
        let tat = cells.tat.get(&client).copied().unwrap_or(now).max(now);
        let ahead = tat - now;
        if ahead > self.tolerance {
            return Err(ahead - self.tolerance);
        }
        cells.tat.insert(client, tat + self.interval);
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn clients(&self) -> usize {
        self.cells.lock().unwrap().tat.len()
    }
}

/// The key a request's client is limited under, as [`RateLimit`] keys it: the peer's address, or
/// with [`ClientAddress::XForwardedFor`] the last `X-Forwarded-For` address (the peer's when
/// there is none); an IPv6 client by its /64. `None` when the request has no peer address
/// (`ConnectInfo`), or when the client is loopback or on a private network and `limit_private`
/// is off (such an address is usually a proxy speaking for many clients).
pub fn client_key(req: &Request, client: ClientAddress, limit_private: bool) -> Option<IpAddr> {
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>()?.0.ip();
    let ip = match client {
        ClientAddress::Peer => peer,
        ClientAddress::XForwardedFor => req
            .headers()
            .get_all("x-forwarded-for")
            .iter()
            .next_back()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(peer),
    };
    let ip = ip.to_canonical();
    if is_private(ip) && !limit_private {
        return None;
    }
    Some(key(ip))
}

/// Loopback, private (10/8, 172.16/12, 192.168/16), CGNAT (100.64/10), link-local, or IPv6
/// unique-local (fc00::/7) and link-local (fe80::/10).
fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_loopback() || (first & 0xfe00) == 0xfc00 || (first & 0xffc0) == 0xfe80
        }
    }
}

/// IPv6 clients by their /64: one subscriber line usually holds a whole /64.
fn key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_burst_then_the_sustained_rate() {
        let l = Limiter::new(RateLimit::per_second(10, 5));
        let t0 = Instant::now();
        for _ in 0..5 {
            l.take(ip("192.0.2.1"), t0).unwrap();
        }
        let wait = l.take(ip("192.0.2.1"), t0).unwrap_err();
        assert_eq!(wait, Duration::from_millis(100));
        // Another client is not affected.
        l.take(ip("192.0.2.2"), t0).unwrap();
        // After one interval, exactly one more.
        let t1 = t0 + Duration::from_millis(100);
        l.take(ip("192.0.2.1"), t1).unwrap();
        assert!(l.take(ip("192.0.2.1"), t1).is_err());
        // A quiet second restores the whole burst, not more.
        let t2 = t1 + Duration::from_secs(1);
        for _ in 0..5 {
            l.take(ip("192.0.2.1"), t2).unwrap();
        }
        assert!(l.take(ip("192.0.2.1"), t2).is_err());
    }

    #[test]
    fn many_small_steps_lose_no_credit() {
        // 1,000 calls 1 ms apart at 100/s with no burst: one every 10 ms, 100 in all.
        let l = Limiter::new(RateLimit::per_second(100, 1));
        let t0 = Instant::now();
        let admitted = (0..1000u64)
            .filter(|i| {
                l.take(ip("192.0.2.9"), t0 + Duration::from_millis(*i))
                    .is_ok()
            })
            .count();
        assert_eq!(admitted, 100);
    }

    #[test]
    fn private_addresses_are_told_apart() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.1.1",
            "::1",
            "fd00::1",
            "fe80::1",
        ] {
            assert!(is_private(ip(private)), "{private}");
        }
        for public in [
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "192.0.2.1",
            "2001:db8::1",
            "::ffff:8.8.8.8",
        ] {
            assert!(!is_private(ip(public)), "{public}");
        }
    }

    #[test]
    fn ipv6_clients_share_their_64() {
        let l = Limiter::new(RateLimit::per_second(1, 1));
        let t0 = Instant::now();
        l.take(key(ip("2001:db8:1:2::1")), t0).unwrap();
        assert!(l.take(key(ip("2001:db8:1:2:ffff::9")), t0).is_err());
        l.take(key(ip("2001:db8:1:3::1")), t0).unwrap();
    }

    #[test]
    fn expired_cells_are_swept() {
        let l = Limiter::new(RateLimit::per_second(1000, 1));
        let t0 = Instant::now();
        for i in 0..SWEEP_AT as u32 {
            l.take(IpAddr::V4(i.into()), t0).unwrap();
        }
        assert_eq!(l.clients(), SWEEP_AT);
        l.take(ip("192.0.2.1"), t0 + Duration::from_secs(1))
            .unwrap();
        assert_eq!(l.clients(), 1);
    }
}
