// Verifies a Standard Webhooks delivery with the reference JavaScript library
// (standardwebhooks@1.1.1), against the system clock and the library's 5-minute tolerance.
//
// usage: node webhook-verify.mjs <secret> <msgId> <timestampSecs> <signatureHeader> < body
//
// Calls `new Webhook(secret).verify(body, headers)`. Exits 0 and prints `valid` when it accepts;
// exits 1 and prints `invalid: <the library's message>` when it throws WebhookVerificationError;
// exits 2 on anything else (bad usage, an unusable secret), so that a broken call is never
// mistaken for a refused delivery.
import { readFileSync } from "node:fs";
import path from "node:path";
import { requireTool } from "./tools.mjs";

function fail(message) {
  process.stderr.write(`${path.basename(process.argv[1])}: ${message}\n`);
  process.exit(2);
}

const args = process.argv.slice(2);
if (args.length !== 4) {
  fail("usage: webhook-verify.mjs <secret> <msgId> <timestampSecs> <signatureHeader> < body");
}
const [secret, msgId, timestamp, signature] = args;

const { Webhook, WebhookVerificationError } = requireTool("standardwebhooks");

let webhook;
let body;
try {
  webhook = new Webhook(secret);
  body = readFileSync(0);
} catch (error) {
  fail(error?.stack ?? String(error));
}

try {
  webhook.verify(
    body,
    { "webhook-id": msgId, "webhook-timestamp": timestamp, "webhook-signature": signature },
    { jsonParse: false },
  );
  process.stdout.write("valid\n");
  process.exit(0);
} catch (error) {
  if (error instanceof WebhookVerificationError) {
    process.stdout.write(`invalid: ${error.message}\n`);
    process.exit(1);
  }
  fail(error?.stack ?? String(error));
}
