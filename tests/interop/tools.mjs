// Loads the pinned third-party packages that scripts/install-tools put into <repo>/.tools.
//
// ES module resolution ignores NODE_PATH, so the packages are loaded through a `require` rooted at
// the tools directory (their CommonJS builds). TOLLGATE_TOOLS_DIR overrides the location.
import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const toolsDir = process.env.TOLLGATE_TOOLS_DIR ?? path.resolve(here, "../../.tools");
const modules = path.join(toolsDir, "node_modules");

if (!existsSync(modules)) {
  throw new Error(`${modules} is missing: run scripts/install-tools first`);
}

/** `require` for the packages pinned in scripts/install-tools. */
export const requireTool = createRequire(path.join(modules, "/"));

/** Prints `message` to stderr and exits non-zero. */
export function die(message) {
  process.stderr.write(`${path.basename(process.argv[1])}: ${message}\n`);
  process.exit(1);
}
