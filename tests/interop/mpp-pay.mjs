// An unmodified MPP client (mppx@0.11.0 `Mppx.create` from mppx/client with its EVM `charge`
// method, `evm.charge({account, authorization})`: it answers a `WWW-Authenticate: Payment`
// challenge with an ERC-3009 `authorization` credential in `Authorization: Payment`) paying one
// GET.
//
// usage: node mpp-pay.mjs <url> <privateKeyHex> [--token-name N] [--token-version V]
//          [--chain-id ID] [--replay] [--tamper] [--other-resource URL2]
//
//   --token-name / --token-version  the token's EIP-712 domain (an MPP challenge does not carry
//                 it; default "USD Coin" / "2")
//   --chain-id    the only chain the client pays on (mppx's `networks` allowlist; default: any)
//
// Prints one JSON line to stdout:
//   {"status", "body", "receipt", "challenge", "credential", "payload"}
// where body is the parsed JSON body (or the raw text; a refusal is application/problem+json),
// receipt the decoded Payment-Receipt header (null if absent), challenge the challenge the client
// paid ({id, realm, method, intent, request (decoded), expires, description, ...}, as echoed in
// its credential), credential the `Authorization` header value it sent (null if it paid
// nothing) and payload that credential's payload ({type: "authorization", from, to, value,
// validAfter, validBefore, nonce, signature}). The header is recorded by the fetch handed to
// mppx (`Mppx.create({fetch})`); mppx itself is not changed.
//   --replay          sends the recorded Authorization header verbatim once more:
//                     "replay": {status, problem, wwwAuthenticate, receipt}
//   --tamper          decodes the credential's wire JSON, raises payload.value by 1 (the echoed
//                     challenge and the signature kept byte for byte),
//                     re-encodes it and sends it: "tamper": {status, problem, wwwAuthenticate,
//                     receipt, credential}
//   --other-resource  sends the recorded Authorization header to URL2: "other": {...}
// In those, problem is the parsed body (problem+json on a refusal) and wwwAuthenticate whether
// the answer carried a (fresh) Payment challenge. Exits non-zero with a message on any error,
// including mppx refusing to pay.
import { die, importMpp } from "./mpp-tools.mjs";

const args = process.argv.slice(2);
const positional = [];
const flags = { replay: false, tamper: false };
const valued = {
  "--token-name": "tokenName",
  "--token-version": "tokenVersion",
  "--chain-id": "chainId",
  "--other-resource": "other",
};
for (let i = 0; i < args.length; i += 1) {
  const arg = args[i];
  if (arg === "--replay") flags.replay = true;
  else if (arg === "--tamper") flags.tamper = true;
  else if (arg in valued) {
    const value = args[i + 1];
    if (value === undefined) die(`${arg} needs a value`);
    flags[valued[arg]] = value;
    i += 1;
  } else if (arg.startsWith("--")) die(`unknown flag ${arg}`);
  else positional.push(arg);
}
const [url, privateKey] = positional;
if (!url || !privateKey || positional.length !== 2) {
  die(
    "usage: mpp-pay.mjs <url> <privateKeyHex> [--token-name N] [--token-version V] " +
      "[--chain-id ID] [--replay] [--tamper] [--other-resource URL2]",
  );
}
if (flags.chainId !== undefined && !/^\d+$/.test(flags.chainId)) {
  die(`--chain-id must be an integer, got ${flags.chainId}`);
}

const { Mppx, evm } = await importMpp("mppx/client");
const { Credential, Receipt } = await importMpp("mppx");
const { privateKeyToAccount } = await importMpp("viem/accounts");

/** Reads a response into {status, body, receipt, wwwAuthenticate}. */
async function summarize(response) {
  const text = await response.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  let receipt = null;
  if (response.headers.get("payment-receipt")) receipt = Receipt.fromResponse(response);
  const challenge = response.headers.get("www-authenticate");
  return {
    status: response.status,
    body,
    receipt,
    wwwAuthenticate: Boolean(challenge && /^\s*payment\s/i.test(challenge)),
  };
}

/** A refused (or not) follow-up request: its status, problem body, receipt and challenge. */
async function probe(target, authorization) {
  const { status, body, receipt, wwwAuthenticate } = await summarize(
    await fetch(target, { method: "GET", headers: { authorization } }),
  );
  return { status, problem: body, wwwAuthenticate, receipt };
}

try {
  const account = privateKeyToAccount(privateKey.startsWith("0x") ? privateKey : `0x${privateKey}`);
  // The global fetch, recording the Authorization header mppx attaches to its paid retry.
  let sent = null;
  const recordingFetch = (input, init) => {
    const request = input instanceof Request ? input : new Request(input, init);
    const value = request.headers.get("authorization");
    if (value) sent = value;
    return fetch(request);
  };
  const mppx = Mppx.create({
    polyfill: false,
    fetch: recordingFetch,
    methods: [
      evm.charge({
        account,
        authorization: {
          name: flags.tokenName ?? "USD Coin",
          version: flags.tokenVersion ?? "2",
        },
        ...(flags.chainId !== undefined ? { networks: [Number(flags.chainId)] } : {}),
      }),
    ],
  });
  const response = await mppx.fetch(url, { method: "GET" });
  const { status, body, receipt } = await summarize(response);
  let challenge = null;
  let payload = null;
  if (sent) {
    // mppx's own decoding: the echoed challenge with its `request` decoded, and the payload.
    ({ challenge, payload } = Credential.deserialize(sent));
  }
  const result = { status, body, receipt, challenge, credential: sent, payload };

  const need = (what) => {
    if (!sent) {
      die(`nothing to ${what}: no credential was sent (status ${status}: ${JSON.stringify(body)})`);
    }
  };
  if (flags.replay) {
    need("replay");
    result.replay = await probe(url, sent);
  }
  if (flags.tamper) {
    need("tamper");
    // The wire JSON itself, so that nothing but payload.value changes (the challenge echoed
    // byte for byte, the signature kept).
    const [scheme, token] = sent.trim().split(/\s+/);
    const wire = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
    wire.payload.value = (BigInt(wire.payload.value) + 1n).toString();
    const tampered = `${scheme} ${Buffer.from(JSON.stringify(wire)).toString("base64url")}`;
    result.tamper = { ...(await probe(url, tampered)), credential: tampered };
  }
  if (flags.other !== undefined) {
    need("send elsewhere");
    result.other = await probe(flags.other, sent);
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
} catch (error) {
  die(error?.stack ?? String(error));
}
