// An Express app gated by `paymentGate` against `tollgate dev` (devnet + facilitator), paid by
// the JS Agent (the Tollgate proof path), by the Rust agent (`tollgate pay`), by x402-fetch
// (x402 V1) and by @x402/fetch (x402 V2); replayed and tampered payments refused. Balances are
// read from the chain.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { Agent, paymentGate, parsePaymentProof, verifyPaymentProof } from "../index.js";
import { balance, fee, listen, randomKey, repo, requireTool, run, startDev, tollgateBin } from "./support.mjs";

const express = requireTool("express");

let dev;
let app;
let served = 0;
const payTo = "0x00000000000000000000000000000000000a11ce";

before(async () => {
  dev = await startDev();
  const gate = paymentGate({
    pricing: [{ type: "one-time", amount: "0.25" }],
    facilitator: dev.facilitatorUrl,
    payTo,
    description: "A quote",
    mimeType: "application/json",
  });
  const server = express();
  server.use("/api", gate);
  server.get("/api/quote", (req, res) => {
    served += 1;
    res.json({ quote: 42, paid: req.tollgate.paid });
  });
  server.get("/free", (_req, res) => res.send("free"));
  app = await listen(server);
});

after(async () => {
  await app?.close();
  await dev?.stop();
});

test("an unpaid request gets the V1 superset body and the V2 header", async () => {
  const r = await fetch(`${app.url}/api/quote`);
  assert.equal(r.status, 402);
  const body = await r.json();
  assert.equal(body.version, "1");
  assert.equal(body.x402Version, 1);
  assert.equal(body.error, "PaymentRequired");
  assert.equal(body.accepts[0].amount, "250000");
  assert.equal(body.accepts[0].payTo.toLowerCase(), payTo);
  assert.equal(body.accepts[0].network, "base-sepolia");
  assert.equal(body.accepts[0].resource, `${app.url}/api/quote`);
  const v2 = JSON.parse(Buffer.from(r.headers.get("payment-required"), "base64").toString());
  assert.equal(v2.x402Version, 2);
  assert.equal(v2.accepts[0].network, "eip155:84532");
  assert.equal(v2.accepts[0].amount, "250000");
  assert.equal((await fetch(`${app.url}/free`)).status, 200);
  assert.equal(served, 0);
});

test("the JS agent pays through the facilitator, once; replay and tamper are refused", async () => {
  const payer = dev.payers[0];
  const before = [await balance(dev, payer.address), await balance(dev, payTo)];
  const agent = new Agent({ key: payer.privateKey, policy: { maxPerRequest: "0.25", budget: "1.00" } });
  const r = await agent.pay(`${app.url}/api/quote`);
  assert.equal(r.status, 200);
  assert.deepEqual(await r.json(), { quote: 42, paid: true });
  assert.equal(r.payment.kind, "tollgate", "the proof path is preferred");
  assert.equal(r.payment.amount, "250000");
  assert.equal(agent.spent, "0.250000");
  assert.ok(r.headers.get("x-payment-response"));
  assert.ok(r.headers.get("payment-response"));
  const f = await fee(dev);
  assert.equal(await balance(dev, payer.address), before[0] - 250000n);
  assert.equal(await balance(dev, payTo), before[1] + 250000n - f);

  // The proof is a real one: parse and verify it (statelessly) against the facilitator.
  const proof = parsePaymentProof(r.payment.header);
  assert.equal(proof.amount, "250000");
  assert.equal(proof.payTo.toLowerCase(), payTo);
  assert.equal(proof.txHash, r.payment.txHash);
  assert.equal(
    await verifyPaymentProof(r.payment.header, { facilitator: dev.facilitatorUrl, payTo, amount: "0.25" }),
    true,
  );
  assert.equal(await verifyPaymentProof(proof, { facilitator: dev.facilitatorUrl, amount: "0.26" }), false);

  // Replayed: refused, nothing moves, the handler does not run.
  const servedBefore = served;
  const replay = await fetch(`${app.url}/api/quote`, { headers: { "x-payment": r.payment.header } });
  assert.equal(replay.status, 402);
  assert.equal((await replay.json()).reason, "replayed");
  // Tampered (the amount raised in the signed proof): refused.
  const tampered = { ...proof, amount: "2500000" };
  const header = Buffer.from(JSON.stringify(tampered)).toString("base64");
  const t = await fetch(`${app.url}/api/quote`, { headers: { "x-payment": header } });
  assert.equal(t.status, 402);
  assert.equal((await t.json()).error, "InvalidPaymentProof");
  assert.equal(served, servedBefore);
  assert.equal(await balance(dev, payTo), before[1] + 250000n - f);
});

test("the agent's policy and funds are enforced with the spec's error names", async () => {
  const poor = new Agent({
    key: randomKey(),
    policy: { maxPerRequest: "0.25", budget: "1.00" },
  });
  await assert.rejects(poor.pay(`${app.url}/api/quote`), { name: "InsufficientFunds" });
  const stingy = new Agent({ key: dev.payers[0].privateKey, policy: { maxPerRequest: "0.10", budget: "1.00" } });
  await assert.rejects(stingy.pay(`${app.url}/api/quote`), { name: "PolicyViolation" });
  assert.equal(stingy.spent, "0.000000");
  assert.throws(
    () => new Agent({ key: "0x01", policy: { maxPerRequest: "0.10", budget: "1" } }),
    { name: "InvalidArgument" },
  );
});

test("the Rust agent (tollgate pay) pays the Express app", async () => {
  const payer = dev.payers[1];
  const before = await balance(dev, payer.address);
  const out = await run(tollgateBin(), ["pay", `${app.url}/api/quote`, "--key", payer.privateKey, "--max", "0.25"], {
    env: { ...process.env, NO_COLOR: "1" },
  });
  assert.equal(out.code, 0, out.stderr);
  assert.match(out.stderr, /paid 0\.250000 \(250000 units\)/);
  assert.deepEqual(JSON.parse(out.stdout), { quote: 42, paid: true });
  assert.equal(await balance(dev, payer.address), before - 250000n);
});

test("x402-fetch (V1) and @x402/fetch (V2) pay the Express app; their replays are refused", async () => {
  const scripts = `${repo}/tests/interop`;
  for (const [script, args, version] of [
    ["x402-fetch-pay.mjs", ["1000000", "--replay"], 1],
    ["x402v2-fetch-pay.mjs", ["--replay", "--tamper"], 2],
  ]) {
    const payer = dev.payers[1];
    const before = [await balance(dev, payer.address), await balance(dev, payTo)];
    const servedBefore = served;
    const out = await run(process.execPath, [`${scripts}/${script}`, `${app.url}/api/quote`, payer.privateKey, ...args]);
    assert.equal(out.code, 0, out.stderr);
    const result = JSON.parse(out.stdout.trim().split("\n").at(-1));
    assert.equal(result.status, 200, JSON.stringify(result));
    assert.equal(result.paymentResponse.success, true);
    if (version === 2) assert.equal(result.x402Version, 2);
    assert.equal(result.replay.status, 402, "replay refused");
    if (result.tamper) assert.equal(result.tamper.status, 402, "tamper refused");
    assert.equal(served, servedBefore + 1, "served once");
    assert.equal(await balance(dev, payer.address), before[0] - 250000n);
    assert.equal(await balance(dev, payTo), before[1] + 250000n, "x402: the whole price, no fee");
  }
});

test("a gate whose facilitator cannot be reached answers 503 with Retry-After, not 402", async () => {
  // Port 1 (tcpmux): below the ephemeral range no test binds from, so nothing answers there.
  const gate = paymentGate({ pricing: [{ type: "one-time", amount: "0.25" }], facilitator: "http://127.0.0.1:1", payTo });
  const server = express();
  server.use("/api", gate);
  server.get("/api/quote", (_req, res) => res.json({ quote: 1 }));
  const app503 = await listen(server);
  try {
    const r = await fetch(`${app503.url}/api/quote`);
    assert.equal(r.status, 503);
    assert.equal(r.headers.get("retry-after"), "5");
    assert.equal((await r.json()).error.code, "FacilitatorUnavailable");
  } finally {
    await app503.close();
  }
});
