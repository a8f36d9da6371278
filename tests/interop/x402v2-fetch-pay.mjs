// An unmodified x402 V2 client (@x402/fetch@2.27.0 `wrapFetchWithPayment` over an `x402Client`
// with @x402/evm@2.27.0's `registerExactEvmScheme`: the exact EVM scheme for "eip155:*" in V2 and
// for every V1 network name) paying one GET.
//
// usage: node x402v2-fetch-pay.mjs <url> <privateKeyHex> [--replay] [--tamper] [--payment-id ID]
//
// Prints one JSON line to stdout:
//   {"status", "body", "paymentResponse", "paymentRequired", "x402Version", "sentHeader",
//    "sentPayload", "offered", "paymentIdSent"}
// where body is the parsed JSON body (or the raw text), paymentResponse the decoded
// PAYMENT-RESPONSE header (or X-PAYMENT-RESPONSE when only that is present; null if neither),
// paymentRequired the decoded PAYMENT-REQUIRED header of that final answer (null if absent),
// x402Version the version of the payload the client sent, sentHeader the header name it used
// ("PAYMENT-SIGNATURE" or "X-PAYMENT"), sentPayload that header decoded, and offered the
// payment-required terms the client paid against (the first 402's PAYMENT-REQUIRED header, or its
// body for a V1 402).
//   --replay      sends the recorded payment header verbatim once more: "replay": {status, body,
//                 paymentResponse, paymentRequired}.
//   --tamper      has the same client sign a fresh payment for the same terms, changes only
//                 payload.authorization.value (+1) and sends it, so the refusal can come from
//                 nothing but the tampering (not a spent nonce): "tamper": {...}.
//   --payment-id  makes the client send the payment-identifier extension with that id, the way
//                 the reference example does it (appendPaymentIdentifierToExtensions in an
//                 onBeforePaymentCreation hook). As in the reference client the id is only sent
//                 when the 402 declares the extension; "paymentIdSent" tells whether it was.
// The client is configured with `spendControls: {allowedAssets: true}` (see below); nothing else is
// changed. Exits non-zero with a message on any error, including the client refusing to pay.
import { die, requireTool } from "./tools.mjs";

const args = process.argv.slice(2);
const positional = [];
let replay = false;
let tamper = false;
let paymentId = null;
for (let i = 0; i < args.length; i += 1) {
  const arg = args[i];
  if (arg === "--replay") replay = true;
  else if (arg === "--tamper") tamper = true;
  else if (arg === "--payment-id") {
    paymentId = args[i + 1];
    i += 1;
    if (!paymentId) die("--payment-id needs a value");
  } else if (arg.startsWith("--")) die(`unknown flag ${arg}`);
  else positional.push(arg);
}
const [url, privateKey] = positional;
if (!url || !privateKey || positional.length !== 2) {
  die("usage: x402v2-fetch-pay.mjs <url> <privateKeyHex> [--replay] [--tamper] [--payment-id ID]");
}

const { wrapFetchWithPayment, x402Client, x402HTTPClient } = requireTool("@x402/fetch");
const { decodePaymentResponseHeader, decodePaymentRequiredHeader } = requireTool("@x402/core/http");
const { registerExactEvmScheme } = requireTool("@x402/evm/exact/client");
const { appendPaymentIdentifierToExtensions, PAYMENT_IDENTIFIER } = requireTool(
  "@x402/extensions/payment-identifier",
);
const { privateKeyToAccount } = requireTool("viem/accounts");

const decodeBase64Json = (value) => JSON.parse(Buffer.from(value, "base64").toString("utf8"));

/** Reads a response into {status, body, paymentResponse, paymentRequired}. */
async function summarize(response) {
  const text = await response.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  const settled =
    response.headers.get("payment-response") ?? response.headers.get("x-payment-response");
  const required = response.headers.get("payment-required");
  return {
    status: response.status,
    body,
    paymentResponse: settled ? decodePaymentResponseHeader(settled) : null,
    paymentRequired: required ? decodePaymentRequiredHeader(required) : null,
  };
}

try {
  const signer = privateKeyToAccount(privateKey.startsWith("0x") ? privateKey : `0x${privateKey}`);
  const client = registerExactEvmScheme(new x402Client(), { signer });
  // @x402/core 2.27's default spend controls pay only the registry's default assets (USDC at its
  // canonical address per network) up to $1; the devnet's token is not one of them, so opt in to
  // any asset through the client's own configuration (what x402-fetch's maxValue argument is to
  // the V1 script).
  client.setSpendControls({ allowedAssets: true });
  if (paymentId) {
    client.onBeforePaymentCreation(async ({ paymentRequired }) => {
      if (paymentRequired.extensions) {
        appendPaymentIdentifierToExtensions(paymentRequired.extensions, paymentId);
      }
    });
  }
  let offered = null;
  client.onAfterPaymentCreation(async ({ paymentRequired }) => {
    offered ??= structuredClone(paymentRequired);
  });

  // The global fetch, recording the payment header @x402/fetch attaches to its retry.
  let sent = null;
  const recordingFetch = (input, init) => {
    const request = input instanceof Request ? input : new Request(input, init);
    for (const name of ["PAYMENT-SIGNATURE", "X-PAYMENT"]) {
      const value = request.headers.get(name);
      if (value) sent = { name, value };
    }
    return fetch(request);
  };
  const pay = wrapFetchWithPayment(recordingFetch, client);
  const result = await summarize(await pay(url, { method: "GET" }));
  const sentPayload = sent ? decodeBase64Json(sent.value) : null;
  Object.assign(result, {
    x402Version: sentPayload?.x402Version ?? null,
    sentHeader: sent?.name ?? null,
    sentPayload,
    offered,
    paymentIdSent: Boolean(sentPayload?.extensions?.[PAYMENT_IDENTIFIER]?.info?.id),
  });

  if (replay) {
    if (!sent) die(`nothing to replay: no payment header was sent (status ${result.status})`);
    result.replay = await summarize(
      await fetch(url, { method: "GET", headers: { [sent.name]: sent.value } }),
    );
  }
  if (tamper) {
    if (!sent || !offered) die(`nothing to tamper: no payment was made (status ${result.status})`);
    const fresh = await client.createPaymentPayload(structuredClone(offered));
    const authorization = fresh.payload?.authorization;
    if (!authorization) die(`the payload has no authorization: ${JSON.stringify(fresh)}`);
    authorization.value = (BigInt(authorization.value) + 1n).toString();
    const headers = new x402HTTPClient(client).encodePaymentSignatureHeader(fresh);
    result.tamper = await summarize(await fetch(url, { method: "GET", headers }));
    result.tamper.sentPayload = fresh;
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
} catch (error) {
  die(error?.stack ?? String(error));
}
