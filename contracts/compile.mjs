#!/usr/bin/env node
// Compiles contracts/src/*.sol with the pinned solcjs (from .tools/, see scripts/install-tools)
// through standard JSON, and writes one artifact per deployable contract:
//   <out>/<Name>.json = {"contractName", "abi", "bytecode", "deployedBytecode"}
// Then the test contracts, contracts/test/<Name>.sol (each deploys the contract named as its
// file; they may import "src/..."), in a compile of their own (so they never change what the
// product's contracts compile to), into <out>/test/<Name>.json.
// Usage: node contracts/compile.mjs [--out DIR]   (default DIR: contracts/artifacts)
// Run it through scripts/compile-contracts, which installs the tools and implements --check.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const SOLC_VERSION = "0.8.37";
const CONTRACTS = ["Token", "PaymentRouter", "Subscriptions"];
const SETTINGS = {
  optimizer: { enabled: true, runs: 200 },
  evmVersion: "cancun",
  viaIR: false,
  metadata: { bytecodeHash: "none", appendCBOR: false },
  outputSelection: {
    "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] },
  },
};

const contractsDir = path.dirname(fileURLToPath(import.meta.url));
const repo = path.dirname(contractsDir);
const srcDir = path.join(contractsDir, "src");
const testDir = path.join(contractsDir, "test");

function fail(msg) {
  process.stderr.write(`compile-contracts: error: ${msg}\n`);
  process.exit(1);
}

let outDir = path.join(contractsDir, "artifacts");
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--out" && i + 1 < args.length) outDir = path.resolve(args[++i]);
  else fail(`unknown argument: ${args[i]}`);
}

const requireFromTools = createRequire(path.join(repo, ".tools", "package.json"));
let solc;
try {
  solc = requireFromTools("solc");
} catch (e) {
  fail(`cannot load solc from ${path.join(repo, ".tools")}; run scripts/install-tools (${e.message})`);
}
if (!solc.version().startsWith(`${SOLC_VERSION}+`)) {
  fail(`expected solc ${SOLC_VERSION}, got ${solc.version()}`);
}

// Source unit names are "<dir>/<path>" (relative to contracts/) with forward slashes, in sorted
// order.
function listSol(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir, { withFileTypes: true })
    .flatMap((e) => {
      const p = path.join(dir, e.name);
      if (e.isDirectory()) return listSol(p);
      return e.name.endsWith(".sol") ? [p] : [];
    })
    .sort();
}
function unitOf(file) {
  return path.relative(contractsDir, file).split(path.sep).join("/");
}
function sourcesOf(dir) {
  const sources = {};
  for (const file of listSol(dir)) sources[unitOf(file)] = { content: fs.readFileSync(file, "utf8") };
  return sources;
}

// Compiles `sources` and writes `<dir>/<name>.json` for each [unit, name] of `wanted`.
function build(sources, wanted, dir) {
  const input = { language: "Solidity", sources, settings: SETTINGS };
  const output = JSON.parse(
    solc.compile(JSON.stringify(input), {
      import: (p) => {
        // Test contracts may import the product's sources ("src/...").
        const file = path.join(contractsDir, p);
        if (p.startsWith("src/") && !p.includes("..") && fs.existsSync(file)) {
          return { contents: fs.readFileSync(file, "utf8") };
        }
        return { error: `import not found: ${p} (sources live in contracts/src and contracts/test)` };
      },
    }),
  );

  let errors = 0;
  for (const diag of output.errors ?? []) {
    process.stderr.write(diag.formattedMessage ?? `${diag.severity}: ${diag.message}\n`);
    if (diag.severity === "error") errors++;
  }
  if (errors > 0) fail(`${errors} compiler error(s)`);

  fs.mkdirSync(dir, { recursive: true });
  for (const [unit, name] of wanted) {
    const c = output.contracts?.[unit]?.[name];
    if (!c) fail(`no output for ${unit}:${name}`);
    const bytecode = `0x${c.evm.bytecode.object}`;
    const deployedBytecode = `0x${c.evm.deployedBytecode.object}`;
    if (bytecode.includes("__$") || deployedBytecode.includes("__$")) {
      fail(`${name} has unlinked library references; use internal library functions only`);
    }
    const artifact = { contractName: name, abi: c.abi, bytecode, deployedBytecode };
    const file = path.join(dir, `${name}.json`);
    fs.writeFileSync(file, `${JSON.stringify(artifact, null, 2)}\n`);
    const size = (deployedBytecode.length - 2) / 2;
    const shown = file.startsWith(repo + path.sep) ? path.relative(repo, file) : file;
    process.stderr.write(`compile-contracts: wrote ${shown} (runtime ${size} bytes)\n`);
    if (size > 24576) fail(`${name} runtime size ${size} exceeds the EIP-170 limit of 24576 bytes`);
  }
}

build(
  sourcesOf(srcDir),
  CONTRACTS.map((name) => [`src/${name}.sol`, name]),
  outDir,
);

// The test contracts: contracts/test/<Name>.sol deploys <Name>.
const testSources = sourcesOf(testDir);
const tests = Object.keys(testSources)
  .filter((unit) => unit.split("/").length === 2)
  .map((unit) => [unit, path.basename(unit, ".sol")]);
if (tests.length > 0) build(testSources, tests, path.join(outDir, "test"));
