// An unmodified x402 V1 client (x402-fetch@1.2.0) paying one GET.
//
// usage: node x402-fetch-pay.mjs <url> <privateKeyHex> <maxValueUnits> [--replay]
//
// Prints one JSON line to stdout: {"status", "body", "paymentResponse"}, where body is the parsed
// JSON body (or the raw text if it is not JSON) and paymentResponse the decoded
// X-PAYMENT-RESPONSE header (null if absent). With --replay, the X-PAYMENT header x402-fetch sent
// is then sent once more, verbatim, and the line also carries
// "replay": {"status", "body", "paymentResponse"} of that second request. Exits non-zero with a message on any error,
// including the client refusing to pay (e.g. a 402 whose `accepts` fails its schema).
import { die, requireTool } from "./tools.mjs";

const [url, privateKey, maxValueUnits, ...rest] = process.argv.slice(2);
const replay = rest.includes("--replay");
if (!url || !privateKey || !maxValueUnits || rest.some((arg) => arg !== "--replay")) {
  die("usage: x402-fetch-pay.mjs <url> <privateKeyHex> <maxValueUnits> [--replay]");
}

const { wrapFetchWithPayment } = requireTool("x402-fetch");
const { decodeXPaymentResponse } = requireTool("x402/shared");
const { privateKeyToAccount } = requireTool("viem/accounts");

/** Reads a response into {status, body, paymentResponse}. */
async function summarize(response) {
  const text = await response.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  const header = response.headers.get("x-payment-response");
  const paymentResponse = header ? decodeXPaymentResponse(header) : null;
  return { status: response.status, body, paymentResponse };
}

try {
  const account = privateKeyToAccount(privateKey.startsWith("0x") ? privateKey : `0x${privateKey}`);
  // The global fetch, recording the X-PAYMENT header x402-fetch attaches to its retry.
  let sentPayment = null;
  const recordingFetch = (input, init) => {
    const header = init?.headers?.["X-PAYMENT"];
    if (header) sentPayment = header;
    return fetch(input, init);
  };
  // The third argument raises x402-fetch's default cap of 0.1 token (100000 units).
  const pay = wrapFetchWithPayment(recordingFetch, account, BigInt(maxValueUnits));
  const result = await summarize(await pay(url, { method: "GET" }));
  if (replay) {
    if (!sentPayment) die(`nothing to replay: no X-PAYMENT was sent (status ${result.status})`);
    result.replay = await summarize(
      await fetch(url, { method: "GET", headers: { "X-PAYMENT": sentPayment } }),
    );
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
} catch (error) {
  die(error?.stack ?? String(error));
}
