// One x402 V1 payment, signed once by the real x402 client library (x402@1.2.0
// `createPaymentHeader`, as x402-fetch signs it), sent by many requests at once: the replay attack
// a resource server must survive.
//
// usage: node x402-replay.mjs <url> <privateKeyHex> <copies>
//
// GETs <url>, reads the 402's first `accepts` entry, signs one X-PAYMENT for it, then sends
// <copies> concurrent GETs carrying that same header. Prints one JSON line to stdout:
// {"statuses": [..], "bodies": [..], "paymentResponses": [..]} in request order (a body is the
// parsed JSON or the raw text; paymentResponse the decoded X-PAYMENT-RESPONSE or null).
import { die, requireTool } from "./tools.mjs";

const [url, privateKey, copiesArg] = process.argv.slice(2);
const copies = Number(copiesArg);
if (!url || !privateKey || !Number.isInteger(copies) || copies < 1) {
  die("usage: x402-replay.mjs <url> <privateKeyHex> <copies>");
}

const { createPaymentHeader } = requireTool("x402/client");
const { decodeXPaymentResponse } = requireTool("x402/shared");
const { createSigner } = requireTool("x402/types");

try {
  const first = await fetch(url);
  if (first.status !== 402) die(`expected a 402 from ${url}, got ${first.status}`);
  const terms = await first.json();
  const requirements = terms.accepts?.[0];
  if (!requirements) die(`the 402 offers nothing: ${JSON.stringify(terms)}`);
  const key = privateKey.startsWith("0x") ? privateKey : `0x${privateKey}`;
  const signer = await createSigner(requirements.network, key);
  const header = await createPaymentHeader(signer, terms.x402Version ?? 1, requirements);
  const replies = await Promise.all(
    Array.from({ length: copies }, () => fetch(url, { headers: { "X-PAYMENT": header } })),
  );
  const out = { statuses: [], bodies: [], paymentResponses: [] };
  for (const reply of replies) {
    const text = await reply.text();
    let body;
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
    const settled = reply.headers.get("x-payment-response");
    out.statuses.push(reply.status);
    out.bodies.push(body);
    out.paymentResponses.push(settled ? decodeXPaymentResponse(settled) : null);
  }
  process.stdout.write(`${JSON.stringify(out)}\n`);
} catch (error) {
  die(error?.stack ?? String(error));
}
