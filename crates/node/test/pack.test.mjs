// The newcomer's path: `npm pack` the package, `npm install` the tarball into an empty folder,
// paste the README's Express and agent examples verbatim, and get a 402 then a 200 paid by the
// agent; the package's types check an example with tsc --noEmit.
//
// The tarball is built with the debug addon the suite already compiled (TOLLGATE_NODE_PROFILE=
// debug makes prepack skip the release build); a user's `npm pack` builds a release one.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { balance, crate, run, startDev } from "./support.mjs";

/** The code block after `<!-- example: NAME -->` in the README. */
function example(name) {
  const readme = readFileSync(join(crate, "README.md"), "utf8");
  const marker = `<!-- example: ${name} -->`;
  const at = readme.indexOf(marker);
  assert.ok(at >= 0, `README has no ${marker}`);
  const block = /```js\n([\s\S]*?)```/.exec(readme.slice(at));
  assert.ok(block, `no js block after ${marker}`);
  return block[1];
}

async function freePort() {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  return port;
}

const npm = process.platform === "win32" ? "npm.cmd" : "npm";
let dev;
let dir;

before(async () => {
  dev = await startDev();
  dir = mkdtempSync(join(tmpdir(), "tollgate-newcomer-"));
});

after(async () => {
  await dev?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("npm pack, install into an empty folder, the README's examples: 402 then 200", async () => {
  const packDir = join(dir, "pack");
  mkdirSync(packDir);
  const packed = await run(npm, ["pack", "--pack-destination", packDir, "--json"], {
    cwd: crate,
    env: { ...process.env, TOLLGATE_NODE_PROFILE: "debug" },
  });
  assert.equal(packed.code, 0, packed.stderr);
  const tarball = join(packDir, readdirSync(packDir).find((f) => f.endsWith(".tgz")));
  let manifest;
  try {
    manifest = JSON.parse(packed.stdout);
  } catch (e) {
    assert.fail(`npm pack --json printed more than its JSON (${e.message}):\n${packed.stdout.slice(0, 3000)}`);
  }
  const files = manifest[0].files.map((f) => f.path);
  for (const f of ["index.js", "index.d.ts", "hono.js", "hono.d.ts", "native/binding.js", "native/binding.d.ts"]) {
    assert.ok(files.includes(f), `${f} in the tarball: ${files}`);
  }
  assert.ok(files.some((f) => f.startsWith("native/") && f.endsWith(".node")), `the addon in the tarball: ${files}`);

  // An empty folder; the tarball and express (the same pinned version, from npm's cache).
  const app = join(dir, "app");
  mkdirSync(app, { recursive: true });
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "newcomer", private: true }));
  const install = await run(
    npm,
    ["install", "--no-audit", "--no-fund", "--prefer-offline", tarball, "express@4.22.3", "@types/express@5.0.6", "typescript@5.9.3"],
    { cwd: app },
  );
  assert.equal(install.code, 0, install.stderr);

  writeFileSync(join(app, "server.js"), example("express"));
  writeFileSync(join(app, "agent.js"), example("agent"));
  const port = await freePort();
  const server = spawn(process.execPath, ["server.js"], {
    cwd: app,
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, PORT: String(port), TOLLGATE_FACILITATOR: dev.facilitatorUrl, PAY_TO: dev.provider.address },
  });
  try {
    const url = `http://127.0.0.1:${port}/api/quote`;
    let unpaid;
    for (let i = 0; i < 100 && !unpaid; i += 1) {
      unpaid = await fetch(url).catch(() => undefined);
      if (!unpaid) await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(unpaid.status, 402);
    assert.equal((await unpaid.json()).accepts[0].amount, "500000");

    const payer = dev.payers[0];
    const before = await balance(dev, payer.address);
    const agent = await run(process.execPath, ["agent.js"], {
      cwd: app,
      env: { ...process.env, AGENT_KEY: payer.privateKey, URL: url },
    });
    assert.equal(agent.code, 0, agent.stderr);
    assert.match(agent.stdout, /^200 \{ quote: 42 \}/m);
    assert.match(agent.stdout, /paid 500000 units, tx 0x[0-9a-f]{64}/);
    assert.equal(await balance(dev, payer.address), before - 500000n);
  } finally {
    server.kill("SIGTERM");
  }

  // The types: the example TypeScript program checks against the installed package.
  copyFileSync(join(crate, "examples/express.ts"), join(app, "express.ts"));
  writeFileSync(
    join(app, "tsconfig.json"),
    readFileSync(join(crate, "examples/tsconfig.json"), "utf8"),
  );
  const tsc = await run(process.execPath, [join(app, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.json"], {
    cwd: app,
  });
  assert.equal(tsc.code, 0, `${tsc.stdout}${tsc.stderr}`);
});
