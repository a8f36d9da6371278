// The Agent pays an MPP-only server (a 402 with one `WWW-Authenticate: Payment` EVM charge
// challenge and no x402 terms): once, with the server's decoded Payment-Receipt in
// `payment.mppReceipt`. The server here is written by hand, as the MPP spec reads: it issues an
// HMAC-bound challenge, checks the credential's challenge and settles its ERC-3009 authorization
// through `tollgate dev`'s facilitator (x402 V1 /settle), so the payment really moves.
import assert from "node:assert/strict";
import { createHmac, randomBytes } from "node:crypto";
import { after, before, test } from "node:test";

import { Agent } from "../index.js";
import { balance, listen, startDev } from "./support.mjs";

let dev;
before(async () => {
  dev = await startDev();
});
after(async () => {
  await dev?.stop();
});

const b64url = (s) => Buffer.from(s).toString("base64url");

/** An MPP-only server charging `amount` units to `payTo`; `refuse` answers every credential with that problem. */
async function mppServer({ amount, payTo, refuse }) {
  const key = randomBytes(32);
  const realm = "mpp.test";
  const credentials = [];
  // JCS: keys sorted, no whitespace.
  const request = b64url(
    JSON.stringify({
      amount: String(amount),
      currency: dev.contracts.token,
      methodDetails: { chainId: dev.chainId, credentialTypes: ["authorization"], decimals: 6 },
      recipient: payTo,
    }),
  );
  const challenge = () => {
    const expires = new Date(Date.now() + 300_000).toISOString();
    const id = createHmac("sha256", key)
      .update(`${realm}|evm|charge|${request}|${expires}||`)
      .digest("base64url");
    return { id, expires };
  };
  const problem = (res, type, detail) => {
    const c = challenge();
    res.writeHead(402, {
      "content-type": "application/problem+json",
      "www-authenticate": `Payment id="${c.id}", realm="${realm}", method="evm", intent="charge", request="${request}", expires="${c.expires}"`,
    });
    res.end(JSON.stringify({ type: `https://paymentauth.org/problems/${type}`, title: type, status: 402, detail, challengeId: c.id }));
  };
  const server = await listen(async (req, res) => {
    const auth = req.headers.authorization;
    if (!auth) return problem(res, "payment-required", "Payment is required.");
    credentials.push(auth);
    if (refuse) return problem(res, refuse, "refused by the test");
    const credential = JSON.parse(Buffer.from(auth.replace(/^Payment /, ""), "base64url").toString());
    const c = credential.challenge;
    const id = createHmac("sha256", key)
      .update(`${c.realm}|${c.method}|${c.intent}|${c.request}|${c.expires}||`)
      .digest("base64url");
    if (id !== c.id || c.request !== request) return problem(res, "invalid-challenge", "not issued here");
    const p = credential.payload;
    const requirements = {
      scheme: "exact", network: dev.network, maxAmountRequired: String(amount), resource: "http://mpp.test/",
      description: "", mimeType: "", payTo, maxTimeoutSeconds: 300, asset: dev.contracts.token,
      extra: { name: "USD Coin", version: "2" },
    };
    const payload = {
      x402Version: 1, scheme: "exact", network: dev.network,
      payload: {
        signature: p.signature,
        authorization: { from: p.from, to: p.to, value: p.value, validAfter: p.validAfter, validBefore: p.validBefore, nonce: p.nonce },
      },
    };
    const settled = await (
      await fetch(`${dev.facilitatorUrl}/settle`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ x402Version: 1, paymentPayload: payload, paymentRequirements: requirements }),
      })
    ).json();
    if (!settled.success) return problem(res, "verification-failed", `settlement failed: ${settled.errorReason}`);
    const receipt = { method: "evm", reference: settled.transaction, status: "success", timestamp: new Date().toISOString() };
    res.writeHead(200, { "content-type": "application/json", "payment-receipt": b64url(JSON.stringify(receipt)) });
    res.end(JSON.stringify({ quote: 42 }));
  });
  return { ...server, credentials };
}

test("an MPP-only server is paid once, with its receipt", async () => {
  const payer = dev.payers[0];
  const payTo = dev.provider.address;
  const server = await mppServer({ amount: 250000, payTo });
  try {
    const before = [await balance(dev, payer.address), await balance(dev, payTo)];
    const agent = new Agent({
      key: payer.privateKey,
      policy: { maxPerRequest: "0.25", budget: "1.00" },
      facilitators: [dev.facilitatorUrl],
    });
    const response = await agent.pay(`${server.url}/quote`);
    assert.equal(response.status, 200);
    assert.deepEqual(await response.json(), { quote: 42 });
    const p = response.payment;
    assert.equal(p.kind, "mpp");
    assert.equal(p.headerName, "authorization");
    assert.equal(p.amount, "250000");
    assert.equal(p.mppReceipt.method, "evm");
    assert.equal(p.mppReceipt.reference, p.txHash);
    assert.equal(typeof p.mppReceipt.challengeId, "string");
    assert.equal(server.credentials.length, 1, "sent once");
    assert.equal(await balance(dev, payer.address), before[0] - 250000n);
    assert.equal(await balance(dev, payTo), before[1] + 250000n);
  } finally {
    await server.close();
  }
});

test("refusals are named: over the cap (nothing sent), and the server's problem", async () => {
  const payer = dev.payers[0];
  const server = await mppServer({ amount: 250000, payTo: dev.provider.address, refuse: "verification-failed" });
  try {
    const stingy = new Agent({
      key: payer.privateKey,
      policy: { maxPerRequest: "0.10", budget: "1.00" },
      facilitators: [dev.facilitatorUrl],
    });
    await assert.rejects(stingy.pay(`${server.url}/quote`), { name: "PolicyViolation" });
    assert.equal(server.credentials.length, 0, "nothing sent");
    const agent = new Agent({
      key: payer.privateKey,
      policy: { maxPerRequest: "0.25", budget: "1.00" },
      facilitators: [dev.facilitatorUrl],
    });
    await assert.rejects(agent.pay(`${server.url}/quote`), {
      name: "PaymentProblem",
      problemType: "https://paymentauth.org/problems/verification-failed",
    });
    assert.equal(server.credentials.length, 1, "sent once, never again");
  } finally {
    await server.close();
  }
});
