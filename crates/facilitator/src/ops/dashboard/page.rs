//! The dashboard's HTML: the report page with its inline SVG charts, and the login page.

use std::fmt::Write as _;

use alloy::primitives::U256;

use crate::{
    analytics::{Bucket, Report, ReportParams, RevenueView, VolumeView},
    store::{RenewalIssue, RenewalIssueKind},
};

/// Escapes text for HTML content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Smallest units (6 decimals) as a token amount: `1234500` → `1.2345`, at least 2 decimals.
/// Exact for any `uint256` (a plan's price is one); what is not a decimal amount shows as `0.00`.
pub fn units(v: &str) -> String {
    let n = v
        .parse::<tollgate_protocol::Amount>()
        .map_or(U256::ZERO, tollgate_protocol::Amount::get);
    let million = U256::from(1_000_000u64);
    let mut frac = format!("{:06}", (n % million).to::<u64>());
    while frac.len() > 2 && frac.ends_with('0') {
        frac.pop();
    }
    let whole = (n / million).to_string();
    // Thousands separators.
    let mut grouped = String::new();
    for (i, c) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{grouped}.{frac}")
}

/// `YYYY-MM-DD` and `HH:MM` (UTC) of unix seconds.
fn utc(t: u64) -> (String, String) {
    // `YYYY-MM-DDTHH:MM:SS.mmmZ`
    let stamp = tollgate_protocol::rfc3339_millis(t.saturating_mul(1000));
    (stamp[..10].to_owned(), stamp[11..16].to_owned())
}

fn bucket_label(t: u64, bucket: Bucket) -> String {
    let (date, time) = utc(t);
    match bucket {
        Bucket::Hour => format!("{date} {time}"),
        Bucket::Day => date,
        Bucket::Week => format!("week of {date}"),
    }
}

fn short(addr: &str) -> String {
    if addr.len() > 14 {
        format!("{}…{}", &addr[..8], &addr[addr.len() - 4..])
    } else {
        addr.to_owned()
    }
}

/// Renewals needing attention: paused by a failed renewal and unpaid, or stuck (no longer tried
/// by the keeper), each with its subscription, subscriber, cycle and cause.
fn renewal_issues(o: &mut String, issues: &[RenewalIssue]) {
    let failed = issues
        .iter()
        .filter(|i| i.kind == RenewalIssueKind::Failed)
        .count();
    let stuck = issues.len() - failed;
    let _ = write!(
        o,
        r#"<section class="panel"><h2>Renewals needing attention</h2><p class="sub"><span data-metric="renewals.failed" data-value="{failed}">{failed}</span> failed (paused, cycle unpaid) · <span data-metric="renewals.stuck" data-value="{stuck}">{stuck}</span> stuck (no longer tried until the subscription changes).</p>"#
    );
    if issues.is_empty() {
        o.push_str("</section>");
        return;
    }
    o.push_str(r#"<div class="scroll"><table><thead><tr><th>Subscription</th><th>Subscriber</th><th>Cycle</th><th>Renewal</th><th>Attempts</th><th>Cause</th><th>Since (UTC)</th></tr></thead><tbody>"#);
    for i in issues {
        let (kind, cause) = match i.kind {
            RenewalIssueKind::Failed => {
                ("failed", format!("RenewalFailed in {}", short(&i.detail)))
            }
            RenewalIssueKind::Stuck => ("stuck", i.detail.clone()),
        };
        let (d, t) = utc(i.at);
        let (id, subscriber) = (i.id.to_string(), i.subscriber.to_checksum(None));
        let _ = write!(
            o,
            r#"<tr data-subscription="{id}" data-issue="{kind}" data-cycle="{}"><td><code title="{id}">{}</code> <span class="sub">{}</span></td><td><code title="{subscriber}">{}</code></td><td class="num">{}</td><td>{kind}</td><td class="num">{}</td><td>{}</td><td>{d} {t}</td></tr>"#,
            i.cycle,
            short(&id),
            esc(&i.network),
            short(&subscriber),
            i.cycle,
            i.attempts,
            esc(&cause),
        );
    }
    o.push_str("</tbody></table></div></section>");
}

/// A bar chart over time: one `<rect>` per bucket, its value on it.
fn time_chart(
    out: &mut String,
    metric: &str,
    title: &str,
    bucket: Bucket,
    points: &[(u64, String)],
) {
    let max = points
        .iter()
        .map(|(_, v)| v.parse::<u128>().unwrap_or(0))
        .max()
        .unwrap_or(0)
        .max(1);
    let n = points.len().max(1);
    // Bars only in the SVG (stretched to the box); labels are HTML, so text keeps its size on a
    // phone and on a wide screen alike.
    let (w, h) = (1000.0_f64, 200.0_f64);
    let slot = w / n as f64;
    let bar = (slot * 0.8).max(0.5);
    let _ = write!(
        out,
        r#"<div class="tick">max {}</div><svg class="chart" viewBox="0 0 {w} {h}" preserveAspectRatio="none" role="img" aria-label="{}"><line x1="0" y1="{h}" x2="{w}" y2="{h}" class="axis"/>"#,
        units(&max.to_string()),
        esc(title)
    );
    for (i, (t, v)) in points.iter().enumerate() {
        let value = v.parse::<u128>().unwrap_or(0);
        let bh = h * (value as f64 / max as f64);
        let x = i as f64 * slot + (slot - bar) / 2.0;
        let _ = write!(
            out,
            r#"<rect data-metric="{metric}" data-key="{t}" data-value="{value}" x="{x:.2}" y="{:.2}" width="{bar:.2}" height="{bh:.2}"><title>{}: {}</title></rect>"#,
            h - bh,
            esc(&bucket_label(*t, bucket)),
            units(v),
        );
    }
    out.push_str("</svg>");
    if let (Some((first, _)), Some((last, _))) = (points.first(), points.last()) {
        let _ = write!(
            out,
            r#"<div class="ticks"><span>{}</span><span>{}</span></div>"#,
            esc(&bucket_label(*first, bucket)),
            esc(&bucket_label(*last, bucket)),
        );
    }
}

/// A ranked list drawn as horizontal bars: one `<rect>` per entry, its gross on it.
fn ranked_chart(out: &mut String, metric: &str, entries: &[(String, String, &VolumeView)]) {
    if entries.is_empty() {
        out.push_str(r#"<p class="empty">Nothing settled in this range.</p>"#);
        return;
    }
    let max = entries
        .iter()
        .map(|(_, _, v)| v.gross.parse::<u128>().unwrap_or(0))
        .max()
        .unwrap_or(0)
        .max(1);
    out.push_str(r#"<ul class="ranked">"#);
    for (key, label, v) in entries {
        let gross = v.gross.parse::<u128>().unwrap_or(0);
        let pct = 100.0 * gross as f64 / max as f64;
        let _ = write!(
            out,
            r#"<li><div class="label" title="{key}"><span>{label}</span><span class="num">{} · {} paid</span></div><svg viewBox="0 0 100 6" preserveAspectRatio="none" class="bar" aria-hidden="true"><rect data-metric="{metric}" data-key="{key}" data-value="{gross}" x="0" y="0" width="{pct:.2}" height="6"/></svg></li>"#,
            units(&v.gross),
            v.payments,
            key = esc(key),
            label = esc(label),
        );
    }
    out.push_str("</ul>");
}

/// Revenue by kind as horizontal bars, each kind's share of the gross on it.
fn kinds_chart(out: &mut String, r: &RevenueView) {
    let kinds = [
        ("oneTime", "One-time payments", &r.one_time),
        (
            "subscriptionFirstCycle",
            "Subscriptions: first cycles",
            &r.subscription_first_cycle,
        ),
        ("renewal", "Renewals", &r.renewal),
        ("overage", "Overage", &r.overage),
    ];
    let max = kinds
        .iter()
        .map(|(_, _, v)| v.parse::<u128>().unwrap_or(0))
        .max()
        .unwrap_or(0)
        .max(1);
    out.push_str(r#"<ul class="ranked">"#);
    for (key, label, v) in kinds {
        let value = v.parse::<u128>().unwrap_or(0);
        let pct = 100.0 * value as f64 / max as f64;
        let _ = write!(
            out,
            r#"<li><div class="label"><span>{}</span><span class="num">{}</span></div><svg viewBox="0 0 100 6" preserveAspectRatio="none" class="bar" aria-hidden="true"><rect data-metric="revenue.kind" data-key="{key}" data-value="{value}" x="0" y="0" width="{pct:.2}" height="6"/></svg></li>"#,
            esc(label),
            units(v),
        );
    }
    out.push_str("</ul>");
}

fn card(out: &mut String, metric: &str, label: &str, value: &str, shown: &str) {
    let _ = write!(
        out,
        r#"<div class="card"><div class="k">{}</div><div class="v" data-metric="{metric}" data-value="{}">{}</div></div>"#,
        esc(label),
        esc(value),
        esc(shown)
    );
}

/// The page for `report`, with range links carrying `params`, and the renewals that need the
/// provider's attention (`issues`: failed and stuck, [`crate::keeper`]).
pub fn render(report: &Report, params: &ReportParams, issues: &[RenewalIssue]) -> String {
    let mut o = String::with_capacity(32 * 1024);
    let provider = &report.provider;
    let (from_d, from_t) = utc(report.from);
    let (to_d, to_t) = utc(report.to);
    let _ = write!(
        o,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,"><title>Tollgate dashboard</title><style>{STYLE}</style></head><body><header><div><h1>Tollgate</h1><p class="sub">Provider <code title="{provider}">{}</code> · {from_d} {from_t} → {to_d} {to_t} UTC · by {}</p></div><nav>"#,
        short(provider),
        report.bucket.name(),
    );
    for range in ["24h", "7d", "30d", "90d"] {
        let current = params.range.as_deref().unwrap_or("30d") == range && params.from.is_none();
        let _ = write!(
            o,
            r#"<a href="/dashboard?range={range}"{}>{range}</a>"#,
            if current {
                r#" aria-current="page""#
            } else {
                ""
            }
        );
    }
    o.push_str(r#"<form method="post" action="/dashboard/logout"><button type="submit">Log out</button></form></nav></header><main>"#);

    // Headline figures.
    let r = &report.revenue;
    let v = &report.volume;
    let s = &report.subscriptions;
    let m = &report.metered;
    o.push_str(r#"<section class="cards">"#);
    card(
        &mut o,
        "revenue.total",
        "Gross volume",
        &r.total.gross,
        &units(&r.total.gross),
    );
    card(
        &mut o,
        "total.gross",
        "One-time payments",
        &v.total.gross,
        &units(&v.total.gross),
    );
    card(
        &mut o,
        "total.net",
        "One-time, net of fees",
        &v.total.net,
        &units(&v.total.net),
    );
    card(
        &mut o,
        "total.fees",
        "Fees",
        &v.total.fees,
        &units(&v.total.fees),
    );
    let payments = v.total.payments.to_string();
    card(&mut o, "total.payments", "Payments", &payments, &payments);
    let failed = v.failed.to_string();
    card(&mut o, "total.failed", "Failed", &failed, &failed);
    card(
        &mut o,
        "subscriptions.recurringRevenue",
        "Recurring revenue / 30 d",
        &s.recurring_revenue,
        &units(&s.recurring_revenue),
    );
    card(
        &mut o,
        "metered.total",
        "Metered usage",
        &m.used,
        &units(&m.used),
    );
    o.push_str("</section>");

    // Volume over time: all revenue, then one-time payments alone.
    o.push_str(r#"<section class="panel wide"><h2>Volume over time</h2>"#);
    let points: Vec<(u64, String)> = r
        .series
        .iter()
        .map(|p| (p.start, p.revenue.gross.clone()))
        .collect();
    time_chart(
        &mut o,
        "revenue.gross",
        "Gross volume per bucket",
        report.bucket,
        &points,
    );
    o.push_str(r#"<h2>One-time payments over time</h2>"#);
    let points: Vec<(u64, String)> = v
        .series
        .iter()
        .map(|p| (p.start, p.volume.gross.clone()))
        .collect();
    time_chart(
        &mut o,
        "volume.gross",
        "One-time volume per bucket",
        report.bucket,
        &points,
    );
    o.push_str("</section>");

    // Revenue by kind.
    o.push_str(r#"<section class="panel"><h2>Revenue by kind</h2>"#);
    kinds_chart(&mut o, &r.total);
    let _ = write!(
        o,
        r#"<p class="sub">Not revenue: {} failed payments, {} failed renewals, {} overage unpaid.</p></section>"#,
        r.failed.payments,
        r.failed.renewals,
        units(&r.failed.overage),
    );

    // Top resources and payers.
    o.push_str(r#"<section class="panel"><h2>Top resources</h2>"#);
    let resources: Vec<(String, String, &VolumeView)> = v
        .by_resource
        .iter()
        .map(|r| {
            let label = if r.key.is_empty() {
                "(not reported)".to_owned()
            } else {
                r.key.clone()
            };
            (r.key.clone(), label, &r.volume)
        })
        .collect();
    ranked_chart(&mut o, "resource.gross", &resources);
    o.push_str(r#"</section><section class="panel"><h2>Top payers</h2>"#);
    let payers: Vec<(String, String, &VolumeView)> = v
        .by_payer
        .iter()
        .map(|r| (r.key.clone(), short(&r.key), &r.volume))
        .collect();
    ranked_chart(&mut o, "payer.gross", &payers);
    o.push_str("</section>");

    // Subscriptions by state.
    o.push_str(r#"<section class="panel"><h2>Subscriptions</h2>"#);
    let states = [
        ("active", s.active),
        ("paused", s.paused),
        ("cancelled", s.cancelled),
    ];
    let max = states.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1);
    o.push_str(r#"<svg class="chart short" viewBox="0 0 300 110" role="img" aria-label="Subscriptions by state">"#);
    for (i, (state, n)) in states.iter().enumerate() {
        let w = 200.0 * *n as f64 / max as f64;
        let y = 8 + i * 34;
        let _ = write!(
            o,
            r#"<text x="0" y="{}" class="tick">{state}</text><rect class="{state}" data-metric="subscriptions.{state}" data-value="{n}" x="70" y="{y}" width="{w:.2}" height="22"/><text x="{:.2}" y="{}" class="tick">{n}</text>"#,
            y + 16,
            76.0 + w,
            y + 16,
        );
    }
    o.push_str("</svg>");
    let _ = write!(
        o,
        r#"<p class="sub">In range: {} new, {} renewed, {} paused, {} resumed, {} cancelled, {} renewals failed.</p>"#,
        s.new,
        s.renewed,
        s.paused_in_range,
        s.resumed_in_range,
        s.cancelled_in_range,
        s.renewal_failed
    );
    if !s.by_plan.is_empty() {
        o.push_str(r#"<div class="scroll"><table><thead><tr><th>Plan</th><th>Price</th><th>Active</th><th>Paused</th><th>Cancelled</th><th>Per 30 d</th></tr></thead><tbody>"#);
        for p in &s.by_plan {
            let price = match (&p.amount, p.interval_secs) {
                (Some(a), Some(i)) => format!("{} / {} d", units(a), i as f64 / 86_400.0),
                _ => "—".to_owned(),
            };
            let _ = write!(
                o,
                r#"<tr><td><code title="{plan}">{}</code></td><td>{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td></tr>"#,
                short(&p.plan_id.to_string()),
                esc(&price),
                p.active,
                p.paused,
                p.cancelled,
                units(&p.recurring_revenue),
                plan = p.plan_id,
            );
        }
        o.push_str("</tbody></table></div>");
    }
    o.push_str("</section>");

    renewal_issues(&mut o, issues);

    // Metered usage.
    o.push_str(r#"<section class="panel"><h2>Metered usage</h2>"#);
    let points: Vec<(u64, String)> = m.series.iter().map(|p| (p.start, p.used.clone())).collect();
    time_chart(
        &mut o,
        "metered.used",
        "Metered usage per bucket",
        report.bucket,
        &points,
    );
    let _ = write!(
        o,
        r#"<p class="sub">{} deductions · {} charged on-chain · {} unpaid · {} refused at the cap · {} raises.</p></section>"#,
        m.deductions,
        units(&m.charged),
        units(&m.unpaid),
        m.exhausted,
        m.raised
    );

    // Recent payments.
    o.push_str(r#"<section class="panel wide"><h2>Recent payments</h2>"#);
    if report.recent_payments.is_empty() {
        o.push_str(r#"<p class="empty">No payments yet.</p>"#);
    } else {
        o.push_str(r#"<div class="scroll"><table><thead><tr><th>When (UTC)</th><th>Payer</th><th>Resource</th><th>Amount</th><th>Status</th><th>Transaction</th></tr></thead><tbody>"#);
        for p in &report.recent_payments {
            let (d, t) = utc(p.at);
            let payer = &p.payer;
            let tx = p
                .tx_hash
                .map(|h| format!(r#"<code title="{h}">{}</code>"#, short(&h.to_string())))
                .unwrap_or_else(|| "—".to_owned());
            let _ = write!(
                o,
                r#"<tr><td>{d} {t}</td><td><code title="{payer}">{}</code></td><td class="res">{}</td><td class="num" data-metric="payment.amount" data-key="{key}" data-value="{amount}">{}</td><td><span class="st {status}">{status}</span></td><td>{tx}</td></tr>"#,
                short(payer),
                esc(p.resource.as_deref().unwrap_or("—")),
                units(&p.amount),
                key = p.key,
                amount = esc(&p.amount),
                status = esc(&p.status),
            );
        }
        o.push_str("</tbody></table></div>");
    }
    o.push_str("</section>");

    // Webhook delivery health.
    o.push_str(r#"<section class="panel wide"><h2>Webhook delivery</h2>"#);
    if report.webhooks.is_empty() {
        o.push_str(r#"<p class="empty">No endpoints. Add one with <code>tollgate webhooks create</code>.</p>"#);
    } else {
        o.push_str(r#"<div class="scroll"><table><thead><tr><th>Endpoint</th><th>State</th><th>Delivered</th><th>Pending</th><th>Retrying</th><th>Dead</th></tr></thead><tbody>"#);
        for e in &report.webhooks {
            let state = if e.enabled {
                "enabled".to_owned()
            } else {
                format!(
                    "disabled{}",
                    e.disabled_reason
                        .as_deref()
                        .map(|r| format!(": {r}"))
                        .unwrap_or_default()
                )
            };
            let _ = write!(
                o,
                r#"<tr><td class="res">{}</td><td>{}</td><td class="num" data-metric="webhook.delivered" data-key="{id}" data-value="{d}">{d}</td><td class="num" data-metric="webhook.pending" data-key="{id}" data-value="{p}">{p}</td><td class="num">{r}</td><td class="num" data-metric="webhook.dead" data-key="{id}" data-value="{x}">{x}</td></tr>"#,
                esc(&e.url),
                esc(&state),
                id = esc(&e.id),
                d = e.delivered,
                p = e.pending,
                r = e.retrying,
                x = e.dead,
            );
        }
        o.push_str("</tbody></table></div>");
    }
    o.push_str(r#"</section></main><footer>The same figures as JSON: <code>GET /analytics</code> with your API key.</footer></body></html>"#);
    o
}

pub(super) fn login_page(error: Option<&str>, next: &str) -> String {
    let error = error
        .map(|e| format!(r#"<p class="error" role="alert">{}</p>"#, esc(e)))
        .unwrap_or_default();
    let next = esc(next);
    format!(
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,"><title>Tollgate dashboard: log in</title><style>{STYLE}</style></head><body><main class="login"><h1>Tollgate</h1><p class="sub">Log in with your provider API key (<code>tg_…</code>, from <code>tollgate provider register</code>).</p>{error}<form method="post" action="/dashboard/login"><input type="hidden" name="next" value="{next}"><label for="apiKey">API key</label><input id="apiKey" name="apiKey" type="password" autocomplete="current-password" required><button type="submit">Log in</button></form></main></body></html>"#
    )
}

const STYLE: &str = "\
:root{color-scheme:light dark;--fg:#1b1f24;--mut:#5b6470;--bg:#f6f7f9;--panel:#fff;--line:#dde1e6;--acc:#2f6feb;--ok:#1f883d;--warn:#bf8700;--bad:#cf222e}\
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--mut:#9aa4ae;--bg:#0d1117;--panel:#161b22;--line:#30363d;--acc:#4c8dff}}\
*{box-sizing:border-box}body{margin:0;font:15px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:var(--fg);background:var(--bg)}\
header{display:flex;flex-wrap:wrap;gap:.75rem;justify-content:space-between;align-items:center;padding:1rem 1.25rem;border-bottom:1px solid var(--line);background:var(--panel)}\
h1{font-size:1.25rem;margin:0}h2{font-size:1rem;margin:0 0 .75rem}.sub{color:var(--mut);margin:.25rem 0 0;font-size:.875rem}\
nav{display:flex;flex-wrap:wrap;gap:.25rem;align-items:center}nav a{padding:.3rem .6rem;border:1px solid var(--line);border-radius:6px;color:var(--fg);text-decoration:none}\
nav a[aria-current]{background:var(--acc);border-color:var(--acc);color:#fff}nav form{margin:0 0 0 .5rem}\
button{font:inherit;padding:.35rem .8rem;border-radius:6px;border:1px solid var(--line);background:var(--panel);color:var(--fg);cursor:pointer}\
main{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,26rem),1fr));gap:1rem;padding:1rem 1.25rem;max-width:1400px;margin:0 auto}\
.cards{grid-column:1/-1;display:grid;grid-template-columns:repeat(auto-fit,minmax(9.5rem,1fr));gap:.75rem}\
.card,.panel{background:var(--panel);border:1px solid var(--line);border-radius:10px;padding:.9rem 1rem;min-width:0}\
.card .k{color:var(--mut);font-size:.8rem}.card .v{font-size:1.35rem;font-weight:600;font-variant-numeric:tabular-nums;overflow-wrap:anywhere}\
.wide{grid-column:1/-1}.ticks+h2{margin-top:1rem}.chart{width:100%;height:180px;display:block}.chart.short{height:auto}.ticks{display:flex;justify-content:space-between;gap:1rem}.ticks,.tick{color:var(--mut);font-size:.75rem}\
.chart rect{fill:var(--acc)}.chart rect.paused{fill:var(--warn)}.chart rect.cancelled{fill:var(--bad)}.chart rect.active{fill:var(--ok)}\
.axis{stroke:var(--line);stroke-width:2;vector-effect:non-scaling-stroke}svg .tick{fill:var(--mut);font-size:14px}\
.ranked{list-style:none;margin:0;padding:0;display:grid;gap:.55rem}.ranked .label{display:flex;justify-content:space-between;gap:.5rem;font-size:.85rem}\
.ranked .label span:first-child{overflow:hidden;text-overflow:ellipsis;white-space:nowrap;min-width:0}.bar{width:100%;height:8px;display:block;background:var(--bg);border-radius:4px}.bar rect{fill:var(--acc)}\
.num{font-variant-numeric:tabular-nums;text-align:right;white-space:nowrap}.scroll{overflow-x:auto}\
table{border-collapse:collapse;width:100%;font-size:.85rem}th,td{padding:.4rem .5rem;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}th{color:var(--mut);font-weight:500}\
td.res{min-width:9rem;max-width:18rem;overflow-wrap:anywhere}code{font-size:.85em}.empty{color:var(--mut)}\
.st{padding:.05rem .4rem;border-radius:4px;font-size:.8rem;border:1px solid var(--line)}.st.confirmed{color:var(--ok)}.st.failed{color:var(--bad)}\
footer{color:var(--mut);font-size:.8rem;text-align:center;padding:1rem}\
.login{display:block;max-width:24rem;margin:10vh auto;background:var(--panel);border:1px solid var(--line);border-radius:10px;padding:1.5rem}\
.login form{display:grid;gap:.5rem;margin-top:1rem}.login input{font:inherit;padding:.5rem;border:1px solid var(--line);border-radius:6px;background:var(--bg);color:var(--fg)}\
.error{color:var(--bad)}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_show_as_token_units() {
        assert_eq!(units("0"), "0.00");
        assert_eq!(units("1234500"), "1.2345");
        assert_eq!(units("1000000000123"), "1,000,000.000123");
        assert_eq!(units("100000"), "0.10");
    }

    #[test]
    fn dates_are_utc_civil() {
        assert_eq!(utc(0), ("1970-01-01".into(), "00:00".into()));
        assert_eq!(
            utc(1_795_392_000 + 3_660),
            ("2026-11-23".into(), "01:01".into())
        );
        assert_eq!(utc(951_782_400), ("2000-02-29".into(), "00:00".into()));
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }
}
