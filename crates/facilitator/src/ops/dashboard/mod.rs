//! `GET /dashboard`: the provider's analytics as one server-rendered page — gross volume (one-time
//! payments, subscription first cycles, renewals and overage) over time and by kind, top
//! resources and payers, subscriptions by state, the renewals needing attention (failed, or
//! stuck: [`crate::keeper`]), metered usage, recent payments and webhook delivery health — with
//! the charts drawn as inline SVG. No script, no external asset: the page works offline and
//! under a `Content-Security-Policy` that forbids both.
//!
//! Authentication is the provider's API key, either as `Authorization: Bearer <key>` (like every
//! provider endpoint) or through the login form (`GET/POST /dashboard/login`), which opens a
//! session: a random token in a `Secure; HttpOnly; SameSite=Strict` cookie, stored hashed, ended
//! by `POST /dashboard/logout`, by its expiry (12 hours) or by revoking the key.
//!
//! The page takes the query parameters of `GET /analytics` (`range`, `bucket`, `from`, `to`) and
//! shows exactly the figures that endpoint returns for them: every figure a chart draws is also
//! written on its element as `data-metric`, `data-key` and `data-value` (smallest units), so a
//! browser test can hold the page to the JSON.

use alloy::primitives::{Address, B256, hex, keccak256};
use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, Uri, header},
    response::{IntoResponse, Response},
};

use crate::{
    analytics::ReportParams,
    api::{Routes, extract::ApiQuery, providers::bearer_provider},
    error::{Error, Result},
    facilitator::{Facilitator, unix_now},
    openapi::builder::{self, op},
    providers,
};

mod page;

use page::login_page;

/// The routes of the dashboard and its login, each with its OpenAPI operation.
pub(crate) fn routes(r: &mut Routes) {
    r.get("/dashboard", show, op("dashboard", "analytics", "The analytics dashboard (HTML, inline SVG charts, no script).")
        .description("Bearer API key or the login session cookie; without either, 303 to `/dashboard/login`. Takes `/analytics`'s `range`, `bucket`, `from`, `to`.")
        .secured_or_session()
        .query::<ReportParams>()
        .respond(200, builder::html("The dashboard."))
        .empty(303, "Not logged in: to `/dashboard/login`.")
        .errors(&[503]));
    r.get(
        "/dashboard/login",
        login_form,
        op("dashboardLoginForm", "analytics", "The login form (HTML).")
            .respond(200, builder::html("The form.")),
    );
    r.post("/dashboard/login", login, op("dashboardLogin", "analytics", "Logs in with an API key (form field `apiKey`).")
        .description("Sets the `tollgate_session` cookie (Secure, HttpOnly, SameSite=Strict, 12 h) and answers 303 to `/dashboard`; 401 with the form again for an unknown or revoked key.")
        .form_body()
        .empty(303, "Logged in.")
        .respond(401, builder::html("Unknown or revoked key: the form again."))
        .errors(&[413, 503]));
    r.post(
        "/dashboard/logout",
        logout,
        op(
            "dashboardLogout",
            "analytics",
            "Ends the session and clears its cookie; 303 to `/dashboard/login`.",
        )
        .empty(303, "Logged out."),
    );
}
pub use page::{render, units};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "tollgate_session";
/// How long a login lasts (seconds).
pub const SESSION_TTL_SECS: u64 = 12 * 3_600;

/// Most renewals needing attention the page lists.
const RENEWAL_ISSUES: u32 = 100;

const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Who is looking: a provider by its Bearer key or its session cookie.
async fn viewer(f: &Facilitator, headers: &HeaderMap) -> Result<Option<Address>> {
    if headers.contains_key(header::AUTHORIZATION) {
        return bearer_provider(f, headers).await.map(|p| Some(p.address));
    }
    let Some(token) = session_token(headers) else {
        return Ok(None);
    };
    Ok(f.store()
        .dashboard_session(keccak256(token.as_bytes()), unix_now())
        .await?)
}

/// The session token from the `Cookie` header, if any.
fn session_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == SESSION_COOKIE)
        .map(|(_, v)| v.to_owned())
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// An HTML response with the page's security headers.
fn html(status: StatusCode, body: String) -> Response {
    let mut res = (status, body).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    res
}

fn see_other(to: &str) -> Response {
    let mut res = StatusCode::SEE_OTHER.into_response();
    let to = HeaderValue::from_str(to).unwrap_or(HeaderValue::from_static("/dashboard"));
    res.headers_mut().insert(header::LOCATION, to);
    res
}

/// Where to go after logging in: a dashboard URL of this facilitator (path and query), never
/// another site.
fn safe_next(next: &str) -> &str {
    let ok = (next == "/dashboard" || next.starts_with("/dashboard?"))
        && next.bytes().all(|b| b.is_ascii_graphic());
    if ok { next } else { "/dashboard" }
}

fn form_value(body: &[u8], name: &str) -> String {
    url::form_urlencoded::parse(body)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default()
}

/// `GET /dashboard`.
pub(crate) async fn show(
    State(f): State<Facilitator>,
    ApiQuery(params): ApiQuery<ReportParams>,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response> {
    let Some(provider) = viewer(&f, &headers).await? else {
        let here = uri.path_and_query().map_or("/dashboard", |p| p.as_str());
        if here == "/dashboard" {
            return Ok(see_other("/dashboard/login"));
        }
        let next: String = url::form_urlencoded::byte_serialize(here.as_bytes()).collect();
        return Ok(see_other(&format!("/dashboard/login?next={next}")));
    };
    let report = f.analytics().report(provider, &params).await?;
    let issues = f.store().renewal_issues(provider, RENEWAL_ISSUES).await?;
    Ok(html(StatusCode::OK, render(&report, &params, &issues)))
}

/// `GET /dashboard/login` (`next`: the dashboard URL to return to).
pub(crate) async fn login_form(uri: Uri) -> Response {
    let next = form_value(uri.query().unwrap_or_default().as_bytes(), "next");
    html(StatusCode::OK, login_page(None, safe_next(&next)))
}

/// `POST /dashboard/login` (`application/x-www-form-urlencoded`: `apiKey`).
pub(crate) async fn login(State(f): State<Facilitator>, body: Bytes) -> Result<Response> {
    let key = form_value(&body, "apiKey");
    let next = form_value(&body, "next");
    let next = safe_next(&next);
    let key_hash = providers::key_hash(&key);
    if key.is_empty() || f.store().api_key_provider(key_hash).await?.is_none() {
        return Ok(html(
            StatusCode::UNAUTHORIZED,
            login_page(Some("Unknown or revoked API key."), next),
        ));
    }
    let token = hex::encode(B256::random());
    let now = unix_now();
    f.store()
        .insert_dashboard_session(
            keccak256(token.as_bytes()),
            key_hash,
            now + SESSION_TTL_SECS,
            now,
        )
        .await?;
    let mut res = see_other(next);
    let cookie = format!(
        "{SESSION_COOKIE}={token}; Path=/dashboard; Max-Age={SESSION_TTL_SECS}; HttpOnly; \
         Secure; SameSite=Strict"
    );
    res.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&cookie).map_err(Error::internal)?,
    );
    Ok(res)
}

/// `POST /dashboard/logout`.
pub(crate) async fn logout(State(f): State<Facilitator>, headers: HeaderMap) -> Result<Response> {
    if let Some(token) = session_token(&headers) {
        f.store()
            .delete_dashboard_session(keccak256(token.as_bytes()))
            .await?;
    }
    let mut res = see_other("/dashboard/login");
    res.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "tollgate_session=; Path=/dashboard; Max-Age=0; HttpOnly; Secure; SameSite=Strict",
        ),
    );
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_returns_only_to_the_dashboard() {
        assert_eq!(safe_next("/dashboard?range=7d"), "/dashboard?range=7d");
        for evil in [
            "https://evil.example/",
            "//evil.example",
            "/dashboardx",
            "/dashboard?a=\r\n",
            "",
        ] {
            assert_eq!(safe_next(evil), "/dashboard", "{evil}");
        }
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut h = HeaderMap::new();
        let token = "ab".repeat(32);
        h.append(
            header::COOKIE,
            format!("a=1; {SESSION_COOKIE}={token}; b=2")
                .parse()
                .unwrap(),
        );
        assert_eq!(session_token(&h), Some(token));
        let mut bad = HeaderMap::new();
        bad.append(
            header::COOKIE,
            format!("{SESSION_COOKIE}=<script>").parse().unwrap(),
        );
        assert_eq!(session_token(&bad), None);
    }
}
