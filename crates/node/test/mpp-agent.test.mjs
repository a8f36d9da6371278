// The JS `Agent` pays an unmodified mppx EVM `charge` server (mppx@0.11.0,
// <repo>/tests/interop/mpp-server.mjs, loading mppx and viem from <repo>/.tools/mpp) that settles
// through `tollgate dev`'s facilitator (devnet as base-sepolia). mppx offers x402 V2
// (`PAYMENT-REQUIRED`) beside its MPP challenge, and the agent, offered both, pays x402: a V2
// `PAYMENT-SIGNATURE`, which mppx takes. Served once, the price moved once payer to payee on the
// chain; the very header replayed (the facilitator's /verify refuses the spent nonce) and the
// header with its signed value raised (mppx's amount check) are refused as verification-failed
// and move nothing. Without node's pinned mppx the test fails with the install command.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { Agent } from "../index.js";
import { balance, repo, rpc, startDev, tools } from "./support.mjs";

const PROBLEMS = "https://paymentauth.org/problems/";
const PRICE = 250000n;
const WEATHER = { report: { weather: "sunny", temperature: 70 } };
const payTo = "0x00000000000000000000000000000000000a11ce";

let dev;
let server;

/**
 * Spawns `mpp-server.mjs` with `args`; resolves, once it prints `LISTENING <port>`, to its base
 * URL and `stop()`.
 */
async function mppServer(args) {
  const child = spawn(process.execPath, [join(repo, "tests/interop/mpp-server.mjs"), ...args], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stderr.on("data", (chunk) => {
    stderr += chunk;
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      await once(child, "exit");
    }
  };
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`mpp-server.mjs did not listen: ${stderr}`)), 30_000);
    child.stdout.on("data", (chunk) => {
      stdout += chunk;
      const m = /^LISTENING (\d+)$/m.exec(stdout);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`mpp-server.mjs exited (${code}): ${stderr}`));
    });
  }).catch(async (error) => {
    await stop();
    throw error;
  });
  return { url: `http://127.0.0.1:${port}`, stderr: () => stderr, stop };
}

before(async () => {
  // Never skipped: without the pinned peer, this fails with the install command (and without
  // the tollgate binary, startDev fails with the build command).
  for (const p of ["mppx", "viem"]) {
    const manifest = join(tools, "mpp/node_modules", p, "package.json");
    assert.ok(
      existsSync(manifest),
      `this test needs the pinned npm package ${p} (in .tools/mpp), and ${manifest} is missing: run scripts/install-tools`,
    );
  }
  dev = await startDev();
  // The token's EIP-712 domain and decimals, as the facilitator publishes them.
  const wk = await (await fetch(`${dev.facilitatorUrl}/.well-known/tollgate`)).json();
  const token = wk.networks[dev.network];
  server = await mppServer([
    "--facilitator",
    dev.facilitatorUrl,
    "--pay-to",
    payTo,
    "--chain-id",
    String(dev.chainId),
    "--asset",
    dev.contracts.token,
    "--token-name",
    token.tokenName,
    "--token-version",
    token.tokenVersion,
    "--price",
    String(PRICE),
    "--decimals",
    String(token.decimals),
  ]);
});

after(async () => {
  await server?.stop();
  await dev?.stop();
});

test("the Agent pays an mppx EVM charge server by x402 V2 once; replay and tamper are refused", async () => {
  const payer = dev.payers[0];
  const url = `${server.url}/weather`;
  const stats = async () => (await (await fetch(`${server.url}/stats`)).json()).served;
  const balances = async () => [await balance(dev, payer.address), await balance(dev, payTo)];
  const start = await balances();

  // mppx offers both protocols on its 402.
  const offer = await fetch(url);
  assert.equal(offer.status, 402);
  assert.match(offer.headers.get("www-authenticate") ?? "", /^Payment /);
  assert.ok(offer.headers.get("payment-required"), "mppx offers x402 V2 beside MPP");

  const agent = new Agent({
    key: payer.privateKey,
    policy: { maxPerRequest: "0.25", budget: "1.00", tokens: [dev.contracts.token], payees: [payTo] },
    facilitators: [dev.facilitatorUrl],
  });
  const response = await agent.pay(url);
  assert.equal(response.status, 200, server.stderr());
  assert.deepEqual(await response.json(), WEATHER);

  // Paid by x402 V2, not by an MPP credential.
  const p = response.payment;
  assert.equal(p.kind, "x402", JSON.stringify(p));
  assert.equal(p.x402Version, 2, JSON.stringify(p));
  assert.equal(p.headerName, "payment-signature");
  assert.equal(p.amount, String(PRICE));
  assert.equal(p.payTo.toLowerCase(), payTo);
  assert.equal(p.mppReceipt ?? null, null);
  assert.equal(p.settlement?.success, true, JSON.stringify(p));
  assert.equal(p.settlement.network, `eip155:${dev.chainId}`);
  const tx = await rpc(dev.rpcUrl, "eth_getTransactionReceipt", [p.settlement.transaction]);
  assert.equal(tx.status, "0x1", "the settlement transaction is mined and succeeded");
  assert.equal(tx.to.toLowerCase(), dev.contracts.token.toLowerCase(), "settled by the token's EIP-3009");
  assert.equal(agent.spent, "0.250000");

  // Served once; the price moved once, payer to payee.
  assert.equal(await stats(), 1);
  const paid = await balances();
  assert.equal(paid[0], start[0] - PRICE);
  assert.equal(paid[1], start[1] + PRICE);

  // The header the agent sent, replayed verbatim: mppx keeps no replay store, and the
  // facilitator's /verify refuses the spent nonce. A 402 problem with fresh offers, no receipt.
  const replay = await fetch(url, { headers: { [p.headerName]: p.header } });
  assert.equal(replay.status, 402);
  assert.match(replay.headers.get("content-type") ?? "", /^application\/problem\+json/);
  assert.match(replay.headers.get("www-authenticate") ?? "", /^Payment /);
  assert.ok(replay.headers.get("payment-required"));
  assert.equal(replay.headers.get("payment-receipt"), null);
  assert.equal(replay.headers.get("payment-response"), null);
  const problem = await replay.json();
  assert.equal(problem.type, `${PROBLEMS}verification-failed`, JSON.stringify(problem));
  assert.equal(problem.detail, "Payment verification failed: invalid_transaction_state.");

  // The same header with its signed value raised (and a fresh nonce, so that only the tampering
  // can refuse it): mppx compares the value with its price before the facilitator sees it.
  const sent = JSON.parse(Buffer.from(p.header, "base64").toString());
  assert.equal(sent.x402Version, 2);
  sent.payload.authorization.value = String(PRICE + 1n);
  sent.payload.authorization.nonce = `0x${"56".repeat(32)}`;
  const tamper = await fetch(url, {
    headers: { [p.headerName]: Buffer.from(JSON.stringify(sent)).toString("base64") },
  });
  assert.equal(tamper.status, 402);
  assert.match(tamper.headers.get("www-authenticate") ?? "", /^Payment /);
  assert.equal(tamper.headers.get("payment-receipt"), null);
  const refused = await tamper.json();
  assert.equal(refused.type, `${PROBLEMS}verification-failed`, JSON.stringify(refused));
  assert.equal(refused.detail, "Payment verification failed: EVM authorization amount mismatch.");

  // Nothing moved, nothing served.
  assert.equal(await stats(), 1);
  assert.deepEqual(await balances(), paid);
});
