// What the package's tests share: `tollgate dev` (devnet + facilitator, the real binary) on free
// ports in a temporary directory, token balances read from the chain, servers on 127.0.0.1:0,
// and the third-party peers from <repo>/.tools.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const crate = resolve(here, "..");
export const repo = resolve(crate, "../..");
export const tools = process.env.TOLLGATE_TOOLS_DIR ?? join(repo, ".tools");

/** Requires a pinned third-party package from <repo>/.tools. */
export const requireTool = createRequire(join(tools, "node_modules", "noop.js"));

/** The `tollgate` binary: TOLLGATE_BIN, else the workspace's debug build. */
export function tollgateBin() {
  const bin = process.env.TOLLGATE_BIN ?? join(repo, "target/debug/tollgate");
  if (!existsSync(bin)) throw new Error(`${bin} is missing: cargo build -p tollgate-cli`);
  return bin;
}

/**
 * Starts `tollgate dev` as base-sepolia (chain id 84532, so x402 clients pay it) on free ports;
 * resolves to dev.json's contents plus `stop()`.
 */
export async function startDev() {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-node-test-"));
  const child = spawn(
    tollgateBin(),
    ["dev", "--port-base", "0", "--state-dir", dir, "--network", "base-sepolia", "--chain-id", "84532"],
    { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, NO_COLOR: "1", TOLLGATE_LOG: "warn" } },
  );
  let stderr = "";
  child.stderr.on("data", (chunk) => {
    stderr += chunk;
  });
  const deadline = Date.now() + 60_000;
  let info;
  while (!info) {
    if (child.exitCode !== null) throw new Error(`tollgate dev exited: ${stderr}`);
    if (Date.now() > deadline) throw new Error(`tollgate dev did not write dev.json: ${stderr}`);
    try {
      info = JSON.parse(readFileSync(join(dir, "dev.json"), "utf8"));
    } catch {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  const account = (role) => info.accounts.find((a) => a.role === role);
  return {
    ...info,
    dir,
    provider: account("provider"),
    payers: info.accounts.filter((a) => a.role === "payer"),
    async stop() {
      child.kill("SIGTERM");
      if (child.exitCode === null) await once(child, "exit");
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A JSON-RPC call to the chain. */
export async function rpc(url, method, params) {
  const r = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  const body = await r.json();
  if (body.error) throw new Error(`${method}: ${JSON.stringify(body.error)}`);
  return body.result;
}

/** The token balance of `account` (smallest units, a BigInt). */
export async function balance(dev, account) {
  const data = `0x70a08231${account.slice(2).toLowerCase().padStart(64, "0")}`;
  const out = await rpc(dev.rpcUrl, "eth_call", [{ to: dev.contracts.token, data }, "latest"]);
  return BigInt(out);
}

/** The facilitator's fee on the network (smallest units, a BigInt). */
export async function fee(dev) {
  const wk = await (await fetch(`${dev.facilitatorUrl}/.well-known/tollgate`)).json();
  return BigInt(wk.networks[dev.network].fee);
}

/** Listens on 127.0.0.1:0 with a node `http` request listener; resolves to its base URL. */
export async function listen(handler) {
  const http = await import("node:http");
  const server = http.createServer(handler);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const url = `http://127.0.0.1:${server.address().port}`;
  return { url, close: () => new Promise((r) => server.close(r)) };
}

/** A fresh random private key (an account with no tokens). */
export function randomKey() {
  const bytes = new Uint8Array(32);
  crypto.getRandomValues(bytes);
  return `0x${Buffer.from(bytes).toString("hex")}`;
}

/** Runs a command; resolves to {code, stdout, stderr}. */
export async function run(cmd, args, options = {}) {
  const child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], ...options });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c) => {
    stdout += c;
  });
  child.stderr.on("data", (c) => {
    stderr += c;
  });
  const [code] = await once(child, "exit");
  return { code, stdout, stderr };
}
