// The paywall in a real browser: Debian's headless Chromium (driven by the pinned playwright-core)
// opens `tollgate dev`'s gated `/v1/quote` (the Rust gate) and gets the 402 as a page; a test
// wallet injected into the page (an EIP-1193 `window.ethereum` whose signatures are made by a
// real key, in this process) pays it: the page signs the EIP-3009 authorization, posts it to the
// facilitator, and requests the resource again with the proof. Balances are read from the chain;
// screenshots go to target/test-artifacts/paywall/. Programs (fetch, curl, agents) still get JSON.
import assert from "node:assert/strict";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { balance, fee, repo, requireTool, rpc, startDev } from "./support.mjs";

const { chromium } = requireTool("playwright-core");
const { privateKeyToAccount } = requireTool("viem/accounts");

const CHROMIUM = process.env.TOLLGATE_CHROMIUM ?? "/usr/bin/chromium";
const ARTIFACTS = join(repo, "target/test-artifacts/paywall");

let dev;
let browser;

before(async () => {
  assert.ok(existsSync(CHROMIUM), `${CHROMIUM} is missing: run scripts/install-chromium`);
  dev = await startDev();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
    timeout: 60_000,
  });
  mkdirSync(ARTIFACTS, { recursive: true });
});

after(async () => {
  await browser?.close();
  await dev?.stop();
});

test("programs get JSON, never the page", async () => {
  const url = `${dev.apiUrl}/v1/quote`;
  for (const accept of [undefined, "*/*", "application/json", "application/json, text/html;q=0.9"]) {
    const r = await fetch(url, accept ? { headers: { accept } } : {});
    assert.equal(r.status, 402);
    assert.match(r.headers.get("content-type"), /^application\/json/, `Accept: ${accept}`);
    assert.equal((await r.json()).x402Version, 1);
  }
});

/** A browser context with a test wallet: window.ethereum in the page, signing here with `account`'s real key. */
async function walletContext(account) {
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  await context.exposeBinding("__testWallet", async (_source, method, params) => {
    if (method === "eth_requestAccounts" || method === "eth_accounts") return [account.address];
    if (method === "eth_signTypedData_v4") {
      const typed = JSON.parse(params[1]);
      const { EIP712Domain: _domain, ...types } = typed.types;
      return account.signTypedData({ domain: typed.domain, types, primaryType: typed.primaryType, message: typed.message });
    }
    throw new Error(`the test wallet does not do ${method}`);
  });
  await context.addInitScript(() => {
    window.ethereum = {
      isTestWallet: true,
      request: ({ method, params }) => window.__testWallet(method, params ?? []),
    };
  });
  return context;
}

/** Opens /v1/quote as a page, pays it with the wallet of `payer`, and checks the balances. */
async function payFromThePage(payer, shot) {
  const context = await walletContext(privateKeyToAccount(payer.privateKey));
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  try {
    const url = `${dev.apiUrl}/v1/quote`;
    const response = await page.goto(url);
    assert.equal(response.status(), 402, "same status");
    const headers = response.headers();
    assert.match(headers["content-type"], /^text\/html/);
    assert.ok(headers["payment-required"], "same headers: the V2 terms ride along");
    assert.equal((await page.locator("[data-price]").textContent()).trim(), "0.50");
    const terms = JSON.parse(await page.locator("#tollgate-terms").textContent());
    assert.equal(terms.terms.accepts[0].amount, "500000");
    if (shot) await page.screenshot({ path: join(ARTIFACTS, "paywall-402.png"), fullPage: true });

    const before = [await balance(dev, payer.address), await balance(dev, dev.provider.address)];
    await page.locator("#pay").click();
    await page.waitForSelector("body[data-paid]", { timeout: 30_000 });
    assert.equal(await page.getAttribute("body", "data-paid"), "true", await page.locator("#status").textContent());
    const shown = JSON.parse(await page.locator("#result").textContent());
    assert.equal(shown.source, "tollgate demo");
    assert.match(await page.locator("#status").textContent(), /Paid: transaction 0x[0-9a-f]{64}/);
    if (shot) await page.screenshot({ path: join(ARTIFACTS, "paywall-paid.png"), fullPage: true });
    assert.deepEqual(errors, []);

    const f = await fee(dev);
    assert.equal(await balance(dev, payer.address), before[0] - 500000n);
    assert.equal(await balance(dev, dev.provider.address), before[1] + 500000n - f);
  } finally {
    await context.close();
  }
}

test("a browser gets the paywall and pays with its wallet", async () => {
  await payFromThePage(dev.payers[0], true);
});

test("after the devnet's time travel, the page still pays: it signs by the chain's clock", async () => {
  // The page (and the gate's cached discovery) were last read a week of chain time ago: a window
  // signed by the browser's clock, or by that stale reading, would be refused as expired.
  await payFromThePage(dev.payers[1], false);
  await rpc(dev.rpcUrl, "evm_increaseTime", [7 * 24 * 3600]);
  await rpc(dev.rpcUrl, "evm_mine", []);
  await payFromThePage(dev.payers[1], false);
});

test("without a wallet the page says how to pay and pays nothing", async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  try {
    const response = await page.goto(`${dev.apiUrl}/v1/quote`);
    assert.equal(response.status(), 402);
    assert.match(await page.locator("#status").textContent(), /wallet/);
    assert.equal(await page.locator("#pay").isDisabled(), true);
    await page.screenshot({ path: join(ARTIFACTS, "paywall-no-wallet.png"), fullPage: true });
  } finally {
    await context.close();
  }
});
