// Signs a Standard Webhooks delivery with the reference JavaScript library (standardwebhooks@1.1.1).
//
// usage: node webhook-sign.mjs <msgId> <timestampSecs> <secret> [<secret>...] < body
//
// Prints the webhook-signature header value to stdout: `new Webhook(secret).sign(msgId, date,
// body)` for each secret (`whsec_…`), space-separated, as a sender does during a secret rotation.
import { readFileSync } from "node:fs";
import { die, requireTool } from "./tools.mjs";

const [msgId, timestamp, ...secrets] = process.argv.slice(2);
if (!msgId || !/^[0-9]+$/.test(timestamp ?? "") || secrets.length === 0) {
  die("usage: webhook-sign.mjs <msgId> <timestampSecs> <secret> [<secret>...] < body");
}

const { Webhook } = requireTool("standardwebhooks");

try {
  const body = readFileSync(0);
  const date = new Date(Number(timestamp) * 1000);
  const header = secrets.map((secret) => new Webhook(secret).sign(msgId, date, body)).join(" ");
  process.stdout.write(`${header}\n`);
} catch (error) {
  die(error?.stack ?? String(error));
}
