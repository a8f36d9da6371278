//! The SSRF guard: a webhook is only ever sent to a public unicast address (see the
//! [module docs](super) for the rule), checked when an endpoint is registered, again at each
//! delivery, and by the delivery client's DNS resolver ([`GuardedResolver`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::Webhooks;

impl Webhooks {
    /// The SSRF guard: `Err(why)` when the URL's host is, or resolves to, an address this
    /// facilitator must not call.
    pub(super) async fn check_target(&self, url: &url::Url) -> Result<(), String> {
        if self.core.settings().webhook_allow_private {
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
}
