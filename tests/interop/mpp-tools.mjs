// Loads mppx and its viem from the tree of their own that scripts/install-tools puts into
// <repo>/.tools/mpp (mppx@0.11.0's optional peers conflict with the x402 V1 peers in
// <repo>/.tools/node_modules). TOLLGATE_TOOLS_DIR overrides <repo>/.tools, as in tools.mjs.
//
// mppx ships ES modules only, so `require` (tools.mjs's way) cannot load it on Node 20. A module is
// found the way Node's ESM resolver would from inside that tree: the package's `exports` entry for
// the subpath, under the `import` condition (else `default`), imported by file URL. mppx's own
// imports (viem, ox, zod) then resolve inside .tools/mpp/node_modules, so there is one viem.
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const toolsDir = process.env.TOLLGATE_TOOLS_DIR ?? path.resolve(here, "../../.tools");
const modules = path.join(toolsDir, "mpp", "node_modules");

/** Prints `message` to stderr and exits non-zero. */
export function die(message) {
  process.stderr.write(`${path.basename(process.argv[1])}: ${message}\n`);
  process.exit(1);
}

if (!existsSync(path.join(modules, "mppx", "package.json"))) {
  die(`${modules}/mppx is missing: run scripts/install-tools first`);
}

/** The file an `exports` entry names for ESM importers. */
function exportTarget(entry) {
  if (typeof entry === "string") return entry;
  if (entry && typeof entry === "object") {
    for (const condition of ["import", "node", "default"]) {
      const target = entry[condition] === undefined ? undefined : exportTarget(entry[condition]);
      if (target) return target;
    }
  }
  return undefined;
}

/** Imports `specifier` (e.g. "mppx/server", "viem/accounts") from the pinned .tools/mpp tree. */
export async function importMpp(specifier) {
  const parts = specifier.split("/");
  const name = specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0];
  const subpath = specifier === name ? "." : `.${specifier.slice(name.length)}`;
  const root = path.join(modules, name);
  const manifest = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8"));
  const target = exportTarget(manifest.exports?.[subpath]);
  if (!target) die(`${name}@${manifest.version} exports no ${subpath}`);
  return import(pathToFileURL(path.join(root, target)).href);
}

/** What the paid `GET /weather` answers: the body every interop server returns. */
export const WEATHER = { report: { weather: "sunny", temperature: 70 } };
