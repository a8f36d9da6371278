// A Hono app gated by `paymentGate` (from `tollgate/hono`) against `tollgate dev`: one-time
// payments by the JS Agent, a subscription flow (subscribe, be served on it), a metered route to
// AllowanceExhausted, deductAllowance, and the spec's error names (PlanDeprecated,
// SubscriptionNotActive, AllowanceExhausted).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Agent, buildPaymentRequired, deductAllowance } from "../index.js";
import { paymentGate } from "../hono.js";
import { balance, fee, repo, requireTool, run, startDev, tollgateBin } from "./support.mjs";

const { Hono } = requireTool("hono");
const { serve } = requireTool("@hono/node-server");

let dev;
let url;
let server;
let gates;
const served = { report: 0, process: 0 };
const payTo = "0x0000000000000000000000000000000000000b0b";

before(async () => {
  dev = await startDev();
  const common = { facilitator: dev.facilitatorUrl, description: "Reports" };
  gates = {
    // Sold one-time to anyone, and to the demo plan's subscribers (paid to the plan's provider).
    report: paymentGate({
      ...common,
      payTo: dev.provider.address,
      pricing: [
        { type: "subscription", plan: dev.planId },
        { type: "one-time", amount: "1.00" },
      ],
    }),
    // Subscribers only, metered at 0.10 per call from their overage allowance.
    process: paymentGate({
      ...common,
      payTo: dev.provider.address,
      apiKey: dev.apiKey,
      metered: "0.10",
      pricing: [{ type: "subscription", plan: dev.planId }],
    }),
    quote: paymentGate({ ...common, payTo, pricing: [{ type: "one-time", amount: "0.05" }] }),
  };
  const app = new Hono();
  app.use("/api/report", gates.report);
  app.use("/api/process", gates.process);
  app.use("/api/quote", gates.quote);
  app.get("/api/report", (c) => {
    served.report += 1;
    return c.json({ report: "daily", subscription: c.get("tollgate").subscription });
  });
  app.post("/api/process", (c) => {
    served.process += 1;
    return c.json({ processed: true });
  });
  app.get("/api/quote", (c) => c.json({ quote: 7 }));
  await new Promise((resolve) => {
    server = serve({ fetch: app.fetch, port: 0, hostname: "127.0.0.1" }, (info) => {
      url = `http://127.0.0.1:${info.port}`;
      resolve();
    });
  });
});

after(async () => {
  await new Promise((r) => (server ? server.close(r) : r()));
  await dev?.stop();
});

test("one-time through Hono: 402 with the plan offer, then paid once", async () => {
  const r = await fetch(`${url}/api/report`);
  assert.equal(r.status, 402);
  const body = await r.json();
  const offer = body.accepts[0];
  assert.equal(offer.scheme, "exact");
  assert.equal(offer.amount, "1000000");
  assert.equal(offer.service.subscriptionScheme, true);
  assert.equal(offer.service.planId, dev.planId);
  assert.equal(offer.plan.amount, "5000000");
  assert.ok(r.headers.get("payment-required"));

  const payer = dev.payers[0];
  const agent = new Agent({ key: payer.privateKey, policy: { maxPerRequest: "0.05", budget: "1.00" } });
  const before = [await balance(dev, payer.address), await balance(dev, payTo)];
  const paid = await agent.pay(`${url}/api/quote`);
  assert.equal(paid.status, 200);
  assert.deepEqual(await paid.json(), { quote: 7 });
  assert.equal(paid.payment.kind, "tollgate");
  assert.ok(paid.headers.get("x-payment-response"));
  assert.equal(await balance(dev, payer.address), before[0] - 50000n);
  assert.equal(await balance(dev, payTo), before[1] + 50000n - (await fee(dev)));
  const replay = await fetch(`${url}/api/quote`, { headers: { "x-payment": paid.payment.header } });
  assert.equal(replay.status, 402);
});

test("the Rust agent (tollgate pay) and x402-fetch pay the Hono app too", async () => {
  const payer = dev.payers[1];
  const before = [await balance(dev, payer.address), await balance(dev, payTo)];
  const out = await run(tollgateBin(), ["pay", `${url}/api/quote`, "--key", payer.privateKey, "--max", "0.05"], {
    env: { ...process.env, NO_COLOR: "1" },
  });
  assert.equal(out.code, 0, out.stderr);
  assert.deepEqual(JSON.parse(out.stdout), { quote: 7 });
  const f = await fee(dev);
  assert.equal(await balance(dev, payTo), before[1] + 50000n - f);
  const v1 = await run(process.execPath, [`${repo}/tests/interop/x402-fetch-pay.mjs`, `${url}/api/quote`, payer.privateKey, "1000000", "--replay"]);
  assert.equal(v1.code, 0, v1.stderr);
  const result = JSON.parse(v1.stdout.trim().split("\n").at(-1));
  assert.equal(result.status, 200, JSON.stringify(result));
  assert.equal(result.replay.status, 402, "replay refused");
  assert.equal(await balance(dev, payTo), before[1] + 100000n - f, "x402: the whole price, no fee");
  assert.equal(await balance(dev, payer.address), before[0] - 100000n);
});

test("a subscription from JS, served on it, metered to AllowanceExhausted", async () => {
  const payer = dev.payers[1];
  // The policy of a newcomer: no word about subscriptions. The plan (5.00 a cycle) is over the
  // per-request cap and within the budget: subscribing is bounded by the budget, not by the cap.
  const agent = new Agent({ key: payer.privateKey, policy: { maxPerRequest: "1.00", budget: "20.00" } });
  const before = [await balance(dev, payer.address), await balance(dev, dev.provider.address)];
  const sub = await agent.subscribe({ planId: dev.planId, maxOverage: "0.20", facilitator: dev.facilitatorUrl });
  assert.match(sub.id, /^0x[0-9a-f]{64}$/);
  assert.equal(sub.status, "ACTIVE");
  assert.equal(sub.allowanceCap, "200000");
  assert.equal(await balance(dev, payer.address), before[0] - 5000000n, "the first cycle is billed");
  assert.equal(await balance(dev, dev.provider.address), before[1] + 5000000n);

  // Served on the subscription: no payment asked.
  const served0 = served.report;
  const r = await agent.pay(new Request(`${url}/api/report`, { headers: { "x-service-sub": sub.id } }));
  assert.equal(r.status, 200);
  assert.deepEqual(await r.json(), { report: "daily", subscription: sub.id });
  // Served on the subscription the request names: nothing paid now, and the payment says so.
  assert.equal(r.payment?.kind, "subscription", JSON.stringify(r.payment));
  assert.equal(r.payment.subscriptionId, sub.id);
  assert.equal(r.payment.amount, "0");
  assert.equal(r.payment.metered, "0");
  assert.equal(served.report, served0 + 1);

  // Metered: two calls of 0.10 fit the 0.20 cap; the third is AllowanceExhausted.
  for (let i = 0; i < 2; i += 1) {
    const m = await agent.pay(new Request(`${url}/api/process`, { method: "POST", headers: { "x-service-sub": sub.id } }));
    assert.equal(m.status, 200);
    assert.equal(m.payment.metered, "100000", "the receipt names what the call took from the allowance");
  }
  await assert.rejects(
    agent.pay(new Request(`${url}/api/process`, { method: "POST", headers: { "x-service-sub": sub.id } })),
    { name: "AllowanceExhausted" },
  );
  const raw = await fetch(`${url}/api/process`, { method: "POST", headers: { "x-service-sub": sub.id } });
  assert.equal(raw.status, 402);
  assert.equal((await raw.json()).error, "AllowanceExhausted");
  assert.equal(served.process, 2);
  // deductAllowance (the spec's call) agrees: nothing is left.
  await assert.rejects(gates.process.deductAllowance(sub.id, "0.10"), { name: "AllowanceExhausted" });
  await assert.rejects(
    deductAllowance(sub.id, "units:1", { facilitator: dev.facilitatorUrl, apiKey: dev.apiKey }),
    { name: "AllowanceExhausted" },
  );
  // A subscription id nobody holds is SubscriptionNotActive, not served.
  const unknown = `0x${"ab".repeat(32)}`;
  await assert.rejects(
    agent.pay(new Request(`${url}/api/report`, { headers: { "x-service-sub": unknown } })),
    { name: "SubscriptionNotActive" },
  );
});

test("deductAllowance deducts exactly, and buildPaymentRequired builds the spec's body", async () => {
  const payer = dev.payers[0];
  const agent = new Agent({
    key: payer.privateKey,
    policy: { maxPerRequest: "5.00", budget: "10.00" },
  });
  const sub = await agent.subscribe({ planId: dev.planId, maxOverage: "0.30", facilitator: dev.facilitatorUrl });
  const usage = await deductAllowance(sub.id, "0.10", { facilitator: dev.facilitatorUrl, apiKey: dev.apiKey });
  assert.equal(usage.used, "100000");
  assert.equal(usage.remaining, "200000");
  const again = await gates.process.deductAllowance(sub.id, "units:50000");
  assert.equal(again.remaining, "150000");

  const body = await buildPaymentRequired({
    facilitator: dev.facilitatorUrl,
    payTo: dev.provider.address,
    plan: dev.planId,
    resource: `${url}/api/report`,
  });
  assert.equal(body.version, "1");
  assert.equal(body.accepts[0].scheme, "subscription");
  assert.equal(body.accepts[0].service.planId, dev.planId);
  assert.equal(body.accepts[0].plan.amount, "5000000");
  const oneTime = await gates.report.buildPaymentRequired({ amount: "0.50", resource: `${url}/x` });
  assert.equal(oneTime.accepts[0].amount, "500000");
  assert.equal(oneTime.accepts[0].resource, `${url}/x`);
});

test("a deprecated plan is PlanDeprecated, and nothing is paid", async () => {
  const headers = { authorization: `Bearer ${dev.apiKey}`, "content-type": "application/json" };
  const created = await fetch(`${dev.facilitatorUrl}/plans`, {
    method: "POST",
    headers,
    body: JSON.stringify({ network: dev.network, amount: "1000000", idempotencyKey: "node-test-deprecated" }),
  });
  assert.ok(created.ok, await created.clone().text());
  const { planId } = await created.json();
  const dep = await fetch(`${dev.facilitatorUrl}/plans/${planId}/deprecate`, { method: "POST", headers });
  assert.ok(dep.ok, await dep.clone().text());
  const payer = dev.payers[0];
  const before = await balance(dev, payer.address);
  const agent = new Agent({ key: payer.privateKey, policy: { maxPerRequest: "5.00", budget: "10.00" } });
  await assert.rejects(
    agent.subscribe({ planId, maxOverage: "0.10", facilitator: dev.facilitatorUrl }),
    { name: "PlanDeprecated" },
  );
  assert.equal(await balance(dev, payer.address), before);
});
