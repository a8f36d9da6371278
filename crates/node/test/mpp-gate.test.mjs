// The unmodified MPP reference client (mppx@0.11.0, <repo>/tests/interop/mpp-pay.mjs, loading
// mppx and viem from <repo>/.tools/mpp) pays an Express app gated by `paymentGate({mpp: true})`
// against `tollgate dev` (devnet + facilitator, as base-sepolia): served once, the price moved
// once payer to payee on the chain, the very credential replayed refused as used
// (invalid-challenge) and the one with its signed value raised refused (verification-failed),
// neither moving anything. Without node's pinned mppx the test fails with the install command.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { paymentGate } from "../index.js";
import { balance, listen, repo, requireTool, rpc, run, startDev, tools } from "./support.mjs";

const express = requireTool("express");
const PROBLEMS = "https://paymentauth.org/problems/";
const payTo = "0x00000000000000000000000000000000000a11ce";

let dev;
let app;
let served = 0;

before(async () => {
  dev = await startDev();
  const gate = paymentGate({
    pricing: [{ type: "one-time", amount: "0.25" }],
    facilitator: dev.facilitatorUrl,
    payTo,
    description: "A quote",
    mimeType: "application/json",
    mpp: true,
  });
  const server = express();
  server.use("/api", gate);
  server.get("/api/quote", (_req, res) => {
    served += 1;
    res.json({ quote: 42 });
  });
  app = await listen(server);
});

after(async () => {
  await app?.close();
  await dev?.stop();
});

test("the mppx client pays paymentGate({mpp: true}) once; replay and tamper are refused", async () => {
  // Never skipped: without the pinned peer, this fails with the install command.
  for (const p of ["mppx", "viem"]) {
    const manifest = join(tools, "mpp/node_modules", p, "package.json");
    assert.ok(
      existsSync(manifest),
      `this test needs the pinned npm package ${p} (in .tools/mpp), and ${manifest} is missing: run scripts/install-tools`,
    );
  }
  const payer = dev.payers[0];
  const url = `${app.url}/api/quote`;
  const before = [await balance(dev, payer.address), await balance(dev, payTo)];
  const { code, stdout, stderr } = await run(process.execPath, [
    join(repo, "tests/interop/mpp-pay.mjs"),
    url,
    payer.privateKey,
    "--token-name",
    "USD Coin",
    "--token-version",
    "2",
    "--chain-id",
    String(dev.chainId),
    "--replay",
    "--tamper",
  ]);
  assert.equal(code, 0, `mpp-pay.mjs failed: ${stderr}\n${stdout}`);
  const out = JSON.parse(stdout.trim().split("\n").at(-1));

  // Paid by an MPP credential answering the gate's EVM charge challenge, and served.
  assert.equal(out.status, 200, stdout);
  assert.deepEqual(out.body, { quote: 42 });
  assert.match(out.credential, /^Payment /);
  assert.equal(out.challenge.method, "evm");
  assert.equal(out.challenge.intent, "charge");
  assert.equal(out.challenge.realm, new URL(app.url).host);
  assert.equal(out.challenge.request.amount, "250000");
  assert.equal(out.challenge.request.recipient.toLowerCase(), payTo);
  assert.equal(out.challenge.request.currency.toLowerCase(), dev.contracts.token.toLowerCase());
  assert.equal(out.challenge.request.methodDetails.chainId, dev.chainId);
  assert.equal(out.receipt.status, "success", stdout);
  assert.equal(out.receipt.method, "evm");
  const tx = await rpc(dev.rpcUrl, "eth_getTransactionReceipt", [out.receipt.reference]);
  assert.equal(tx.status, "0x1", "the receipt's transaction is mined and succeeded");
  assert.equal(tx.to.toLowerCase(), dev.contracts.token.toLowerCase(), "settled by the token's EIP-3009");

  // The same credential again, and with its signed value raised: refused the MPP way, a 402
  // problem with a fresh challenge and no receipt.
  for (const [which, type] of [
    ["replay", "invalid-challenge"],
    ["tamper", "verification-failed"],
  ]) {
    const answer = out[which];
    assert.equal(answer.status, 402, `${which}: ${stdout}`);
    assert.equal(answer.problem.type, `${PROBLEMS}${type}`, `${which}: ${stdout}`);
    assert.equal(answer.wwwAuthenticate, true, which);
    assert.equal(answer.receipt, null, which);
  }

  // Served once; the price moved once, payer to payee.
  assert.equal(served, 1);
  assert.equal(await balance(dev, payer.address), before[0] - 250000n);
  assert.equal(await balance(dev, payTo), before[1] + 250000n);
});
