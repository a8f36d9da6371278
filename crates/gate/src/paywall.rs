//! The paywall: what a browser gets instead of the JSON 402 (the same status and headers). A page
//! that shows the price and the plan offer, explains how an agent pays, embeds the terms as JSON,
//! and, with an EIP-1193 wallet in the page (`window.ethereum`), pays: it signs the EIP-3009
//! `ReceiveWithAuthorization` to the facilitator's router (its nonce committing to the payee,
//! the memo and the fee), posts it to the facilitator's `/authorize` with a random claim, and
//! requests the resource again with the proof in `X-PAYMENT`, showing what comes back.
//!
//! Served only when the request's `Accept` prefers `text/html` to `application/json` (browsers
//! navigating); agents, `fetch` and curl (`*/*`, `application/json`) always get JSON. Disabled
//! per route with [`PaymentGateLayer::paywall`](crate::PaymentGateLayer::paywall).

use alloy::primitives::Address;
use http::HeaderMap;
use serde::Serialize;
use serde_json::Value;
use tollgate_chain::authorization::router_nonce;
use tollgate_protocol::{Amount, PaymentRequired};

use crate::Gate;

/// The page's security headers, as the facilitator's dashboard sends them: a Content Security
/// Policy that runs only the page's own script (by its hash), connects only to this origin (the
/// paid request) and the facilitator (`/authorize`), and lets no other site frame the page
/// (`frame-ancestors 'none'`, against clickjacking the pay button); `nosniff`, no referrer, and
/// no caching (the terms and memos are per request).
pub(crate) fn secure(gate: &Gate, headers: &mut HeaderMap) {
    use http::{HeaderValue, header};
    let csp = format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'unsafe-inline'; img-src data:; \
         connect-src 'self' {}; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
        script_hash(),
        origin(gate.facilitator_url()),
    );
    if let Ok(csp) = HeaderValue::from_str(&csp) {
        headers.insert(header::CONTENT_SECURITY_POLICY, csp);
    }
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// The base64 SHA-256 of the page's one executable script, for its CSP.
fn script_hash() -> &'static str {
    static HASH: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        use base64::Engine as _;
        use sha2::Digest as _;
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(page_script()))
    });
    &HASH
}

/// The text of the page's executable `<script>` (the one without a `type`).
fn page_script() -> &'static str {
    const OPEN: &str = "<script>";
    let start = PAGE.find(OPEN).map_or(0, |i| i + OPEN.len());
    let end = PAGE[start..].find("</script>").map_or(start, |i| start + i);
    &PAGE[start..end]
}

/// The origin (`scheme://host[:port]`) of an absolute URL.
fn origin(url: &str) -> &str {
    let rest = url.find("://").map_or(0, |i| i + 3);
    let end = url[rest..].find('/').map_or(url.len(), |i| rest + i);
    &url[..end]
}

/// Whether a request's `Accept` prefers `text/html` to `application/json` (q-values compared;
/// media ranges count for what they match; ties go to JSON).
pub(crate) fn prefers_html(headers: &HeaderMap) -> bool {
    let mut html = 0u16;
    let mut json = 0u16;
    for value in headers.get_all(http::header::ACCEPT) {
        let Ok(value) = value.to_str() else { continue };
        for range in value.split(',') {
            let mut parts = range.split(';');
            let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            // No q: 1. A malformed q makes the range count for nothing.
            let q = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .map_or(Some(1000), |q| qvalue(q.trim()))
                .unwrap_or(0);
            let (for_html, for_json) = match media.as_str() {
                "text/html" | "application/xhtml+xml" => (true, false),
                "application/json" => (false, true),
                "text/*" => (true, false),
                "application/*" | "*/*" => (media == "*/*", true),
                _ => (false, false),
            };
            if for_html {
                html = html.max(q);
            }
            if for_json {
                json = json.max(q);
            }
        }
    }
    html > json
}

/// An RFC 9110 q-value (`1`, `0.8`, `0.125`: at most three decimals) in thousandths.
fn qvalue(q: &str) -> Option<u16> {
    let (whole, frac) = q.split_once('.').unwrap_or((q, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac: u16 = format!("{frac:0<3}").parse().ok()?;
    match whole {
        "0" => Some(frac),
        "1" if frac == 0 => Some(1000),
        _ => None,
    }
}

/// What the page's script needs besides the terms: where to authorize and what to sign.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Pay {
    facilitator: String,
    network: String,
    chain_id: u64,
    router: Address,
    fee: Amount,
    /// The chain's clock at rendering (validity windows follow it, not the browser's).
    chain_time: u64,
    token_name: String,
    token_version: String,
    /// Per memo: the router nonce (`keccak256(abi.encode(payTo, memo, fee))`).
    nonces: serde_json::Map<String, Value>,
}

/// The page for `body`, offered at `resource_url`.
pub(crate) fn render(gate: &Gate, body: &PaymentRequired, resource_url: &str) -> String {
    let pay = pay_data(gate, body);
    let embedded = serde_json::json!({ "terms": body, "pay": pay, "resource": resource_url });
    // Inside <script>: no "</" can close it, no "<!--" open a comment.
    let json = embedded.to_string().replace('<', "\\u003c");
    let offers: String = body.accepts.iter().map(|o| offer_html(o, gate)).collect();
    let description = body
        .accepts
        .first()
        .map(|o| o.requirements.description.as_str())
        .filter(|d| !d.is_empty())
        .unwrap_or("This resource");
    PAGE.replace("{{DESCRIPTION}}", &escape(description))
        .replace("{{RESOURCE}}", &escape(resource_url))
        .replace("{{OFFERS}}", &offers)
        .replace("{{ERROR}}", &escape(&body.error))
        .replace("{{TERMS}}", &json)
}

fn pay_data(gate: &Gate, body: &PaymentRequired) -> Option<Pay> {
    let discovered = gate.facilitator_client().cached_discovery()?;
    let net = discovered.network(gate.network())?;
    let (token_name, token_version) = gate.token_domain();
    let nonces = body
        .accepts
        .iter()
        .filter(|o| o.requirements.scheme == tollgate_protocol::x402::SCHEME_EXACT)
        .map(|o| {
            let nonce = router_nonce(o.requirements.pay_to, o.memo, net.fee.get());
            (o.memo.to_string(), Value::String(nonce.to_string()))
        })
        .collect();
    Some(Pay {
        facilitator: gate.facilitator_url().to_owned(),
        network: gate.network().to_string(),
        chain_id: net.chain_id,
        router: net.router,
        fee: net.fee,
        chain_time: discovered.chain_now(net, crate::gate::unix_now()),
        token_name: token_name.to_owned(),
        token_version: token_version.to_owned(),
        nonces,
    })
}

/// An amount of a 6-decimal token for people: `0.50`.
fn tokens(a: Amount) -> String {
    let s = a.to_tokens(6);
    let trimmed = s.trim_end_matches('0');
    match trimmed.split_once('.') {
        Some((w, f)) if f.len() < 2 => format!("{w}.{f:0<2}"),
        _ => trimmed.to_owned(),
    }
}

fn offer_html(o: &tollgate_protocol::PaymentOption, gate: &Gate) -> String {
    let mut out = String::new();
    if o.requirements.scheme == tollgate_protocol::x402::SCHEME_EXACT {
        out.push_str(&format!(
            "<li class=\"offer\" data-offer=\"one-time\"><strong data-price>{} </strong> per request, \
             paid to <code>{}</code> on {}</li>",
            escape(&tokens(o.amount)),
            o.requirements.pay_to,
            escape(gate.network()),
        ));
    }
    if let Some(plan) = &o.plan {
        let days = plan.interval / 86_400;
        out.push_str(&format!(
            "<li class=\"offer\" data-offer=\"subscription\">or subscribe: <strong>{}</strong> \
             every {} days (plan <code>{}</code>); subscribers send <code>X-Service-Sub</code></li>",
            escape(&tokens(plan.amount)),
            days.max(1),
            plan.plan_id,
        ));
    } else if let Some(plan_id) = o.service.as_ref().and_then(|s| s.plan_id) {
        out.push_str(&format!(
            "<li class=\"offer\" data-offer=\"subscription\">or subscribe to plan <code>{plan_id}</code></li>"
        ));
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

const PAGE: &str = include_str!("paywall.html");

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(value: &str) -> bool {
        let mut h = HeaderMap::new();
        h.insert(http::header::ACCEPT, value.parse().unwrap());
        prefers_html(&h)
    }

    #[test]
    fn only_browsers_prefer_html() {
        assert!(accept(
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
        ));
        assert!(accept("text/html"));
        assert!(accept("application/json;q=0.5, text/html"));
        assert!(!accept("*/*"));
        assert!(!accept("application/json"));
        assert!(!accept("application/json, text/html;q=0.9"));
        assert!(!accept("text/html;q=0.5, */*"));
        assert!(
            !accept("text/html;q=1.5"),
            "a q-value out of range counts for nothing"
        );
        assert!(!prefers_html(&HeaderMap::new()));
        assert_eq!(qvalue("0.125"), Some(125));
        assert_eq!(qvalue("1.000"), Some(1000));
        assert_eq!(qvalue("0.1234"), None);
    }
}
