// Loads a server-rendered dashboard page in Debian's headless Chromium (driven by the pinned
// playwright-core, no browser download) and reports what a person would see, for the dashboard
// browser test. scripts/install-tools installs playwright-core, scripts/install-chromium chromium.
//
// usage: node inspect.mjs --url URL --out DIR (--bearer KEY | --login KEY)
//                         [--chromium PATH] [--timeout MS]
//
//   --url URL        the page to inspect
//   --out DIR        where the screenshots go (created if missing)
//   --bearer KEY     send `Authorization: Bearer KEY` on every request
//   --login KEY      open URL without auth, expect a login form (input[name=apiKey] and a submit
//                    button), fill in KEY, submit it and inspect the page that follows
//   --chromium PATH  the browser (default /usr/bin/chromium)
//   --timeout MS     limit for each navigation and wait (default 15000)
//
// The page is loaded twice, each time in a fresh browser context (so --login logs in twice): a
// laptop viewport (1366x900) and a phone (390x844, mobile, touch, device scale factor 2). For
// each it waits for `load` and then for network idle, takes a full-page screenshot
// (DIR/dashboard-laptop.png, DIR/dashboard-phone.png) and records what is on the page.
//
// Prints one JSON line to stdout: {"laptop": R, "phone": R}, where R is
//   {"title", "url" (final URL), "consoleErrors", "metrics", "scrollWidth", "clientWidth",
//    "screenshot" (path), "cookies", "loginErrors"}
// - consoleErrors: strings, each prefixed by its kind: "console error: ", "console warning: ",
//   "pageerror: ", "requestfailed: ", "response <status>: " (responses with status >= 400),
//   "networkidle: " (network idle not reached in time; the page is inspected anyway) and, for
//   --login, "login: " (the page after submitting still shows the login form). With --login they
//   cover everything from the form's submission on.
// - loginErrors: with --login, the same kinds of entries collected while the login form loaded
//   (e.g. a "response 401: " if the server serves the form with that status); null with --bearer.
// - metrics: every element carrying data-metric, in document order, as
//   {"metric", "key", "value"} from its data-metric, data-key and data-value attributes
//   (strings as written; null when the attribute is absent).
// - scrollWidth / clientWidth: of document.documentElement; scrollWidth > clientWidth means the
//   page overflows horizontally.
// - cookies: with --login, the context's cookies as {"name", "httpOnly", "secure", "sameSite",
//   "path"}; null with --bearer.
//
// Exits 0 once both pages were inspected, whatever they logged (the caller judges); exits 1 with
// a message on stderr when a page could not be inspected at all (bad usage, browser launch or
// navigation failure, login form missing).
import { createRequire } from "node:module";
import { existsSync, mkdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const USAGE =
  "usage: inspect.mjs --url URL --out DIR (--bearer KEY | --login KEY)" +
  " [--chromium PATH] [--timeout MS]";

/** Prints `message` to stderr and exits non-zero. */
function die(message) {
  process.stderr.write(`${path.basename(process.argv[1])}: ${message}\n`);
  process.exit(1);
}

// ES module resolution ignores NODE_PATH, so playwright-core is loaded through a `require` rooted
// at the tools directory. TOLLGATE_TOOLS_DIR overrides the location (as in tests/interop/).
const here = path.dirname(fileURLToPath(import.meta.url));
const toolsDir = process.env.TOLLGATE_TOOLS_DIR ?? path.resolve(here, "../../.tools");
const modules = path.join(toolsDir, "node_modules");
if (!existsSync(modules)) die(`${modules} is missing: run scripts/install-tools first`);
const requireTool = createRequire(path.join(modules, "/"));

let options;
try {
  ({ values: options } = parseArgs({
    options: {
      url: { type: "string" },
      out: { type: "string" },
      bearer: { type: "string" },
      login: { type: "string" },
      chromium: { type: "string", default: "/usr/bin/chromium" },
      timeout: { type: "string", default: "15000" },
    },
    strict: true,
    allowPositionals: false,
  }));
} catch (error) {
  die(`${error.message}\n${USAGE}`);
}
if (!options.url || !options.out) die(USAGE);
if ((options.bearer === undefined) === (options.login === undefined)) {
  die(`give exactly one of --bearer and --login\n${USAGE}`);
}
const timeout = Number(options.timeout);
if (!Number.isInteger(timeout) || timeout <= 0) {
  die(`--timeout: not a positive integer: ${options.timeout}`);
}
if (!existsSync(options.chromium)) {
  die(`${options.chromium} not found: run scripts/install-chromium first`);
}

const outDir = path.resolve(options.out);
mkdirSync(outDir, { recursive: true });

// The machine is offline: without the background-networking flags Chromium keeps trying to reach
// Google's services and logs every refused connection.
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

const DEVICES = {
  laptop: { viewport: { width: 1366, height: 900 } },
  phone: {
    viewport: { width: 390, height: 844 },
    isMobile: true,
    hasTouch: true,
    deviceScaleFactor: 2,
  },
};

const LOGIN_INPUT = "input[name=apiKey]";
const SUBMIT = "button[type=submit], button:not([type]), input[type=submit]";

/** Failure that means the page could not be inspected at all. */
class InspectError extends Error {}

/** Starts collecting console errors/warnings, page errors and failed requests into `sink.list`. */
function collect(page, sink) {
  page.on("console", (message) => {
    const type = message.type();
    if (type !== "error" && type !== "warning") return;
    const { url, lineNumber } = message.location();
    const where = url ? ` (${url}:${lineNumber + 1})` : "";
    sink.list.push(`console ${type}: ${message.text()}${where}`);
  });
  page.on("pageerror", (error) => {
    sink.list.push(`pageerror: ${error.stack ?? error.message ?? String(error)}`);
  });
  page.on("requestfailed", (request) => {
    const reason = request.failure()?.errorText ?? "unknown";
    sink.list.push(`requestfailed: ${request.method()} ${request.url()} (${reason})`);
  });
  page.on("response", (response) => {
    if (response.status() >= 400) {
      const method = response.request().method();
      sink.list.push(`response ${response.status()}: ${method} ${response.url()}`);
    }
  });
}

/** page.goto that turns a failed navigation into an InspectError. */
async function open(page, url) {
  try {
    return await page.goto(url, { waitUntil: "load", timeout });
  } catch (error) {
    throw new InspectError(`could not load ${url}: ${error.message.split("\n")[0]}`);
  }
}

/**
 * Fills in and submits the login form on the current page; resolves once the page that follows
 * loaded. `beforeSubmit` runs right before the click.
 */
async function logIn(page, key, beforeSubmit) {
  const input = page.locator(LOGIN_INPUT);
  if ((await input.count()) === 0) {
    throw new InspectError(`login form missing: no ${LOGIN_INPUT} on ${page.url()}`);
  }
  const form = page.locator(`form:has(${LOGIN_INPUT})`).first();
  const submit = (
    (await form.count()) > 0 ? form.locator(SUBMIT) : page.locator(SUBMIT)
  ).first();
  if ((await submit.count()) === 0) {
    throw new InspectError(
      `login form missing: no submit button next to ${LOGIN_INPUT} on ${page.url()}`,
    );
  }
  try {
    await input.first().fill(key, { timeout });
    // Wait for the main frame to commit the page that follows (its URL may be the same one).
    const navigated = page.waitForEvent("framenavigated", {
      predicate: (frame) => frame === page.mainFrame(),
      timeout,
    });
    beforeSubmit();
    await submit.click({ timeout });
    await navigated;
    await page.waitForLoadState("load", { timeout });
  } catch (error) {
    throw new InspectError(`login failed on ${page.url()}: ${error.message.split("\n")[0]}`);
  }
}

/** Loads the page on one device in its own context and inspects it. */
async function inspect(browser, name) {
  const contextOptions = { ...DEVICES[name] };
  if (options.bearer !== undefined) {
    contextOptions.extraHTTPHeaders = { Authorization: `Bearer ${options.bearer}` };
  }
  const context = await browser.newContext(contextOptions);
  try {
    const page = await context.newPage();
    const login = options.login !== undefined;
    const loginErrors = [];
    const consoleErrors = [];
    const sink = { list: login ? loginErrors : consoleErrors };
    collect(page, sink);

    await open(page, options.url);
    if (login) {
      // What the submission raises (its POST, the redirect) belongs to the page that follows.
      await logIn(page, options.login, () => {
        sink.list = consoleErrors;
      });
    }
    try {
      await page.waitForLoadState("networkidle", { timeout });
    } catch {
      consoleErrors.push(`networkidle: not reached within ${timeout} ms`);
    }
    if (login && (await page.locator(LOGIN_INPUT).count()) > 0) {
      consoleErrors.push(`login: ${page.url()} still shows the login form after submitting it`);
    }

    // Measure before the screenshot: a full-page capture may resize the viewport meanwhile.
    const facts = await page.evaluate(() => ({
      title: document.title,
      scrollWidth: document.documentElement.scrollWidth,
      clientWidth: document.documentElement.clientWidth,
      metrics: Array.from(document.querySelectorAll("[data-metric]"), (element) => ({
        metric: element.getAttribute("data-metric"),
        key: element.getAttribute("data-key"),
        value: element.getAttribute("data-value"),
      })),
    }));
    const screenshot = path.join(outDir, `dashboard-${name}.png`);
    await page.screenshot({ path: screenshot, fullPage: true, timeout });

    const cookies = login
      ? (await context.cookies()).map(({ name: cookie, httpOnly, secure, sameSite, path: p }) => ({
          name: cookie,
          httpOnly,
          secure,
          sameSite,
          path: p,
        }))
      : null;

    return {
      title: facts.title,
      url: page.url(),
      consoleErrors: [...consoleErrors],
      metrics: facts.metrics,
      scrollWidth: facts.scrollWidth,
      clientWidth: facts.clientWidth,
      screenshot,
      cookies,
      loginErrors: login ? [...loginErrors] : null,
    };
  } finally {
    await context.close().catch(() => {});
  }
}

const { chromium } = requireTool("playwright-core");
let browser;
try {
  browser = await chromium.launch({
    executablePath: options.chromium,
    headless: true,
    args: CHROMIUM_ARGS,
    timeout: 60000,
  });
} catch (error) {
  die(`could not launch ${options.chromium}: ${error.message}`);
}

let result;
try {
  result = {};
  for (const name of Object.keys(DEVICES)) {
    result[name] = await inspect(browser, name);
  }
} catch (error) {
  await browser.close().catch(() => {});
  die(error instanceof InspectError ? error.message : (error?.stack ?? String(error)));
}
await browser.close().catch(() => {});
process.stdout.write(`${JSON.stringify(result)}\n`);
