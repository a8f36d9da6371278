// Express gated by this package's `paymentGate` against the same Express app gated by the
// reference `x402-express` (1.2.0), one run, one machine, one `tollgate dev` (release binary):
//
//   - unpaid requests (the 402), at 32 connections;
//   - paid requests with plain x402 V1 payments (signed by the `x402` package beforehand, not
//     timed), settled through the same Tollgate facilitator by both gates, at 16 connections;
//   - paid requests with Tollgate proofs (paid through the facilitator beforehand, not timed:
//     the gate checks them offline), which x402-express cannot take;
//   - the native `verifyPaymentProof` from Node (stateless, trusted signers given).
//
//   node crates/node/bench/express.mjs        (after `node crates/node/scripts/build.mjs --release`
//                                              and `cargo build --release -p tollgate-cli`)
//   BENCH_N=2000 BENCH_PAID_N=600 ...         sizes
import { Agent as HttpAgent, request } from "node:http";
import { performance } from "node:perf_hooks";

import { paymentGate, verifyPaymentProof } from "../index.js";
import { proofsFor } from "./proofs.mjs";
import { listen, repo, requireTool, startDev } from "../test/support.mjs";

const express = requireTool("express");
const { paymentMiddleware } = requireTool("x402-express");
const { createPaymentHeader } = requireTool("x402/client");
const { createSigner } = requireTool("x402/types");

const N = Number(process.env.BENCH_N ?? 4000);
const PAID_N = Number(process.env.BENCH_PAID_N ?? 600);
const PRICE = "0.01";
const PRICE_UNITS = 10000;
process.env.TOLLGATE_BIN ??= `${repo}/target/release/tollgate`;

/** `n` GETs of `url` at `c` connections; `headers(i)` per request. */
async function drive(label, url, n, c, headers = () => ({}), ok = (s) => s === 200) {
  const agent = new HttpAgent({ keepAlive: true, maxSockets: c });
  const latencies = [];
  let failures = 0;
  let next = 0;
  const one = (i) =>
    new Promise((resolve) => {
      const started = performance.now();
      const req = request(url, { agent, headers: headers(i) }, (res) => {
        res.resume();
        res.on("end", () => {
          latencies.push(performance.now() - started);
          if (!ok(res.statusCode)) failures += 1;
          resolve();
        });
      });
      req.on("error", () => {
        failures += 1;
        resolve();
      });
      req.end();
    });
  const started = performance.now();
  await Promise.all(
    Array.from({ length: c }, async () => {
      while (next < n) await one(next++);
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  agent.destroy();
  latencies.sort((a, b) => a - b);
  const pct = (p) => latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))];
  const rate = (n - failures) / seconds;
  console.log(
    `  ${label.padEnd(52)} n=${String(n).padEnd(5)} c=${String(c).padEnd(3)} ${rate.toFixed(0).padStart(7)} ok/s` +
      `   p50 ${pct(0.5).toFixed(2).padStart(7)} ms   p99 ${pct(0.99).toFixed(2).padStart(7)} ms   failures ${failures}`,
  );
  return rate;
}

/** Express serving `GET /api/data` behind `middleware`, mounted at `mount` (x402-express matches
 * its routes against the whole path, so it goes on the root). */
async function serve(middleware, mount = "/api") {
  const app = express();
  app.use(mount, middleware);
  app.get("/api/data", (_req, res) => res.json({ data: 42 }));
  return listen(app);
}

const dev = await startDev();
try {
  const payTo = dev.provider.address;
  const ours = await serve(paymentGate({ pricing: [{ type: "one-time", amount: PRICE }], facilitator: dev.facilitatorUrl, payTo }));
  const theirs = await serve(
    paymentMiddleware(
      payTo,
      {
        "GET /api/data": {
          price: { amount: String(PRICE_UNITS), asset: { address: dev.contracts.token, decimals: 6, eip712: { name: "USD Coin", version: "2" } } },
          network: "base-sepolia",
        },
      },
      { url: dev.facilitatorUrl },
    ),
    "/",
  );
  const ourUrl = `${ours.url}/api/data`;
  const theirUrl = `${theirs.url}/api/data`;
  console.log(`tollgate dev: ${process.env.TOLLGATE_BIN}; the addon: native/ (build it with --release)`);

  console.log("unpaid (402):");
  const unpaidOurs = await drive("Express + paymentGate (tollgate)", ourUrl, N, 32, () => ({}), (s) => s === 402);
  const unpaidTheirs = await drive("Express + x402-express 1.2.0", theirUrl, N, 32, () => ({}), (s) => s === 402);

  // Pre-signed x402 V1 payments, distinct nonces, against each server's own terms.
  const signer = await createSigner("base-sepolia", dev.payers[0].privateKey);
  const sign = async (url, count) => {
    const terms = await (await fetch(url)).json();
    const requirements = terms.accepts.find((a) => a.scheme === "exact");
    const out = [];
    for (let i = 0; i < count; i += 1) out.push(await createPaymentHeader(signer, 1, requirements));
    return out;
  };
  console.log(`signing ${2 * PAID_N} x402 payments (not timed)...`);
  const ourPayments = await sign(ourUrl, PAID_N);
  const theirPayments = await sign(theirUrl, PAID_N);
  console.log("paid, x402 V1 payloads settled through the Tollgate facilitator:");
  const paidOurs = await drive("Express + paymentGate (tollgate)", ourUrl, PAID_N, 16, (i) => ({ "x-payment": ourPayments[i] }));
  const paidTheirs = await drive("Express + x402-express 1.2.0", theirUrl, PAID_N, 16, (i) => ({ "x-payment": theirPayments[i] }));

  // Tollgate proofs, paid beforehand through the facilitator's /authorize (not timed) and
  // checked offline by the gate (the memo store spends each once).
  console.log(`paying ${PAID_N} Tollgate proofs through the facilitator (not timed)...`);
  const offers = [];
  for (let i = 0; i < PAID_N; i += 1) offers.push((await (await fetch(ourUrl)).json()).accepts[0]);
  const headers = await proofsFor(dev, offers, dev.payers[1].privateKey);
  console.log("paid, Tollgate proofs (x402-express takes none):");
  const paidProofs = await drive("Express + paymentGate (tollgate), proofs", ourUrl, headers.length, 16, (i) => ({ "x-payment": headers[i] }));

  // The native stateless verifyPaymentProof from Node.
  const wk = await (await fetch(`${dev.facilitatorUrl}/.well-known/tollgate`)).json();
  const expected = { signers: wk.proofSigners, amount: PRICE };
  const V = Number(process.env.BENCH_VERIFY_N ?? 20000);
  assertTrue(await verifyPaymentProof(headers[0], expected));
  const started = performance.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < V) {
        next += 1;
        await verifyPaymentProof(headers[next % headers.length], expected);
      }
    }),
  );
  const verifies = V / ((performance.now() - started) / 1000);
  console.log(`  native verifyPaymentProof from Node (16 in flight)          n=${V}  ${verifies.toFixed(0)}/s`);

  console.log(
    `ratios (tollgate / x402-express): unpaid ${(unpaidOurs / unpaidTheirs).toFixed(1)}x, ` +
      `paid x402 ${(paidOurs / paidTheirs).toFixed(1)}x, paid with Tollgate proofs ${(paidProofs / paidTheirs).toFixed(1)}x`,
  );
  await ours.close();
  await theirs.close();
} finally {
  await dev.stop();
}

function assertTrue(v) {
  if (!v) throw new Error("a proof the bench made did not verify");
}
