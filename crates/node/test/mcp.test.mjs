// Paid MCP tools: `tollgate gateway` with an `[mcp]` section in front of a small upstream, against
// `tollgate dev`. An unmodified MCP client (@modelcontextprotocol/sdk) calls a free tool and a
// paid one: the paid one answers with x402's payment-required result, and the client pays it the
// way x402's MCP client does (the payload made by the unmodified @x402/core client, sent in
// `_meta["x402/payment"]`). The JS Agent pays a paid tool once per call; a replay is refused; a
// call the gateway cannot settle (its facilitator gone) rejects with NotServed, never paid.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { Agent } from "../index.js";
import { balance, listen, requireTool, startDev, tollgateBin } from "./support.mjs";

const { Client } = requireTool("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = requireTool("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { x402Client } = requireTool("@x402/core/client");
const { registerExactEvmScheme } = requireTool("@x402/evm/exact/client");
const { privateKeyToAccount } = requireTool("viem/accounts");

const PRICE = 20000n;
let dev;
let upstream;
let gateway;
let mcpUrl;
let calls = 0;
const payTo = "0x0000000000000000000000000000000000000c0c";

before(async () => {
  dev = await startDev();
  upstream = await listen((req, res) => {
    calls += 1;
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ path: req.url, body: Buffer.concat(chunks).toString() }));
    });
  });
  const config = join(dev.dir, "gateway.toml");
  writeFileSync(
    config,
    `listen = "127.0.0.1:0"
upstream = "${upstream.url}"
[gate]
network = "${dev.network}"
token = "${dev.contracts.token}"
pay_to = "${payTo}"
facilitator = "${dev.facilitatorUrl}"
memo_store = "sqlite://${join(dev.dir, "gateway-memos.db")}"
[[routes]]
prefix = "/healthz"
free = true
[mcp]
[[mcp.tools]]
name = "analysis"
description = "A financial analysis"
upstream_path = "/v1/analysis"
price = "${PRICE}"
[[mcp.tools]]
name = "ping"
description = "Free"
upstream_path = "/v1/ping"
method = "GET"
`,
  );
  ({ child: gateway, mcpUrl } = await startGateway(config));
});

/** Runs `tollgate gateway --config <config>`; resolves to the child and its MCP URL. */
async function startGateway(config) {
  const child = spawn(tollgateBin(), ["gateway", "--config", config], {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, NO_COLOR: "1", TOLLGATE_LOG: "info" },
  });
  let stderr = "";
  const url = await new Promise((resolve, reject) => {
    child.stderr.on("data", (chunk) => {
      stderr += chunk;
      const m = /gateway listening listen=(\S+)/.exec(stderr);
      if (m) resolve(`http://${m[1]}/mcp`);
    });
    child.on("exit", () => reject(new Error(`tollgate gateway exited: ${stderr}`)));
  });
  return { child, mcpUrl: url };
}

after(async () => {
  gateway?.kill("SIGTERM");
  await upstream?.close();
  await dev?.stop();
});

async function connect() {
  const client = new Client({ name: "unmodified-mcp-client", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl)));
  return client;
}

test("an unmodified MCP client: a free tool, and a paid one paid through x402's MCP transport", async () => {
  const client = await connect();
  try {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), ["analysis", "ping"]);

    const free = await client.callTool({ name: "ping", arguments: { x: "1" } });
    assert.ok(!free.isError, JSON.stringify(free));
    assert.deepEqual(JSON.parse(free.content[0].text), { path: "/v1/ping?x=1", body: "" });

    const before = calls;
    const unpaid = await client.callTool({ name: "analysis", arguments: { ticker: "AAPL" } });
    assert.equal(unpaid.isError, true);
    const required = unpaid.structuredContent;
    assert.equal(required.x402Version, 2);
    assert.equal(required.resource.url, "mcp://tool/analysis");
    assert.equal(required.accepts[0].amount, String(PRICE));
    assert.deepEqual(JSON.parse(unpaid.content[0].text), required);
    assert.equal(calls, before, "not run unpaid");

    // What x402's MCP client does: the payload from the unmodified x402 client, in _meta.
    const payer = dev.payers[0];
    const x402 = registerExactEvmScheme(new x402Client(), { signer: privateKeyToAccount(payer.privateKey) });
    x402.setSpendControls({ allowedAssets: true });
    const payload = await x402.createPaymentPayload(required);
    const balances = [await balance(dev, payer.address), await balance(dev, payTo)];
    const paid = await client.callTool({
      name: "analysis",
      arguments: { ticker: "AAPL" },
      _meta: { "x402/payment": payload },
    });
    assert.ok(!paid.isError, JSON.stringify(paid));
    assert.deepEqual(JSON.parse(paid.content[0].text), { path: "/v1/analysis", body: '{"ticker":"AAPL"}' });
    const settled = paid._meta["x402/payment-response"];
    assert.equal(settled.success, true);
    assert.equal(settled.network, "eip155:84532");
    assert.equal(await balance(dev, payer.address), balances[0] - PRICE);
    assert.equal(await balance(dev, payTo), balances[1] + PRICE);

    // The same payment again (no payment-identifier): refused, not run, nothing moves.
    const ran = calls;
    const replay = await client.callTool({
      name: "analysis",
      arguments: { ticker: "AAPL" },
      _meta: { "x402/payment": payload },
    });
    assert.equal(replay.isError, true);
    assert.equal(replay.structuredContent.error, "duplicate_settlement");
    // Tampered: the value raised after signing.
    const fresh = await x402.createPaymentPayload(required);
    fresh.payload.authorization.value = String(PRICE + 1n);
    const tampered = await client.callTool({ name: "analysis", arguments: {}, _meta: { "x402/payment": fresh } });
    assert.equal(tampered.isError, true);
    assert.equal(calls, ran);
    assert.equal(await balance(dev, payTo), balances[1] + PRICE);
  } finally {
    await client.close();
  }
});

test("the JS Agent pays an MCP tool once per call, within its policy", async () => {
  const payer = dev.payers[1];
  const agent = new Agent({ key: payer.privateKey, policy: { maxPerRequest: "0.02", budget: "0.04" } });
  const before = await balance(dev, payTo);
  const free = await agent.callTool(mcpUrl, "ping", {});
  assert.equal(free.isError, false);
  assert.equal(free.payment, null);
  for (let i = 1; i <= 2; i += 1) {
    const r = await agent.callTool(mcpUrl, "analysis", { ticker: "MSFT" });
    assert.equal(r.isError, false, JSON.stringify(r));
    assert.equal(r.payment.x402Version, 2);
    assert.equal(r.payment.settlement.success, true);
    assert.equal(await balance(dev, payTo), before + PRICE * BigInt(i));
  }
  assert.equal(agent.spent, "0.040000");
  // The budget is spent: the third call pays nothing.
  await assert.rejects(agent.callTool(mcpUrl, "analysis", {}), { name: "PolicyViolation" });
  assert.equal(await balance(dev, payTo), before + 2n * PRICE);
});

test("a paid MCP call the gateway cannot settle rejects with NotServed, never paid", async () => {
  // A gateway whose facilitator is gone (nothing listens there): its payment-required needs
  // none, its settlement does.
  const gone = await listen(() => {});
  const deadUrl = gone.url;
  await gone.close();
  const config = join(dev.dir, "gateway-no-facilitator.toml");
  writeFileSync(
    config,
    `listen = "127.0.0.1:0"
upstream = "${upstream.url}"
[gate]
network = "${dev.network}"
token = "${dev.contracts.token}"
pay_to = "${payTo}"
facilitator = "${deadUrl}"
memo_store = "sqlite://${join(dev.dir, "gateway-no-facilitator.db")}"
[[routes]]
prefix = "/healthz"
free = true
[mcp]
[[mcp.tools]]
name = "analysis"
upstream_path = "/v1/analysis"
price = "${PRICE}"
`,
  );
  const { child, mcpUrl: url } = await startGateway(config);
  try {
    const payer = dev.payers[0];
    const agent = new Agent({ key: payer.privateKey, policy: { maxPerRequest: "0.02", budget: "0.04" } });
    const before = await balance(dev, payer.address);
    const ran = calls;
    await assert.rejects(agent.callTool(url, "analysis", {}), (e) => {
      assert.equal(e.name, "NotServed", e.message);
      assert.equal(e.code, "NotServed");
      assert.equal(e.status, 503);
      assert.match(e.message, /FacilitatorUnavailable/);
      return true;
    });
    assert.equal(calls, ran, "the tool did not run");
    assert.equal(await balance(dev, payer.address), before, "nothing moved");
  } finally {
    child.kill("SIGTERM");
  }
});
