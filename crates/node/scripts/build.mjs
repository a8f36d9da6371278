// Builds the native addon with @napi-rs/cli (pinned in the repository's scripts/install-tools,
// found in <repo>/.tools) into native/: the .node file, its loader (binding.js) and the
// generated types (binding.d.ts).
//
//   node scripts/build.mjs            debug build
//   node scripts/build.mjs --release  release build (what `npm pack` ships; prepack runs it)
//
// TOLLGATE_NODE_PROFILE=debug makes --release a debug build (the test suite packs the debug
// addon it already built instead of compiling a release one). TOLLGATE_NODE_SHARED_TARGET=1
// builds the addon in the workspace's own target/<profile>/ (scripts/cargo-host.sh) instead of
// the target/<triple>/ that napi asks for, reusing what the workspace build compiled (the test
// suite sets it). TOLLGATE_TOOLS_DIR overrides where @napi-rs/cli is looked for.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const crate = resolve(here, "..");
const repo = resolve(crate, "../..");
const tools = process.env.TOLLGATE_TOOLS_DIR ?? join(repo, ".tools");
const cli = join(tools, "node_modules/@napi-rs/cli/dist/cli.js");
if (!existsSync(cli)) {
  console.error(`@napi-rs/cli is missing (${cli}): run scripts/install-tools`);
  process.exit(1);
}
const release =
  process.argv.includes("--release") && process.env.TOLLGATE_NODE_PROFILE !== "debug";
const args = [
  cli,
  "build",
  "--platform",
  "--output-dir",
  "native",
  "--js",
  "binding.js",
  "--dts",
  "binding.d.ts",
  "--package-json-path",
  join(crate, "package.json"),
  "--manifest-path",
  join(crate, "Cargo.toml"),
];
if (release) args.push("--release");
console.error(`building the native addon (${release ? "release" : "debug"})...`);
const started = Date.now();
const env = { ...process.env };
if (process.env.TOLLGATE_NODE_SHARED_TARGET === "1") env.CARGO = join(here, "cargo-host.sh");
// napi's own output goes to stderr: `npm pack --json` runs this (prepack), and its stdout must be
// npm's JSON alone (a line of napi's there once broke the pack test's parse).
const run = spawnSync(process.execPath, args, { cwd: crate, stdio: ["inherit", 2, "inherit"], env });
if (run.status !== 0) process.exit(run.status ?? 1);
console.error(`built native/ in ${((Date.now() - started) / 1000).toFixed(1)} s`);
