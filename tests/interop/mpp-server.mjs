// An unmodified MPP resource server (mppx@0.11.0 `Mppx.create` from mppx/server with its EVM
// `charge` method, `evm.charge`, paid by an ERC-3009 `authorization` credential) selling
// GET /weather on Node's http server, settling through the x402 facilitator it is given
// (`x402: {facilitator}`: mppx sends x402 V2 `POST /verify` then `POST /settle`). No express:
// mppx's optional express peer wants express >=5.
//
// usage: node mpp-server.mjs --facilitator URL --pay-to 0x.. --chain-id N --asset 0x..
//          --price UNITS [--decimals D] [--token-name NAME] [--token-version V] [--port P]
//          [--realm REALM] [--secret-key KEY]
//
// | flag | env | default |
// |---|---|---|
// | --port P | PORT | 0 (a free port) |
// | --facilitator URL | FACILITATOR_URL | required |
// | --pay-to 0x.. | PAY_TO | required |
// | --chain-id N | CHAIN_ID | 84532 |
// | --asset 0x.. (the token, `currency`) | ASSET | required |
// | --token-name NAME (its EIP-712 domain) | TOKEN_NAME | USD Coin |
// | --token-version V | TOKEN_VERSION | 2 |
// | --price UNITS (atomic) | PRICE_UNITS | required |
// | --decimals D | DECIMALS | 6 |
// | --realm REALM | MPP_REALM | mppx's default: the request's hostname |
// | --secret-key KEY (>= 32 bytes; the challenge HMAC key) | MPP_SECRET_KEY | a fixed test key |
//
// mppx prices a route in display units: the atomic price is handed to it as
// formatUnits(price, decimals), which mppx turns back into the same atomic amount. Every
// challenge expires after mppx's default 5 minutes.
//
// Prints `LISTENING <port>` on stdout once it accepts connections. GET /stats (not gated) reports
// how many times the paid handler ran. Exits on SIGTERM/SIGINT.
import http from "node:http";
import { parseArgs } from "node:util";
import { die, importMpp, WEATHER } from "./mpp-tools.mjs";

const { values } = parseArgs({
  options: {
    port: { type: "string" },
    facilitator: { type: "string" },
    "pay-to": { type: "string" },
    "chain-id": { type: "string" },
    asset: { type: "string" },
    "token-name": { type: "string" },
    "token-version": { type: "string" },
    price: { type: "string" },
    decimals: { type: "string" },
    realm: { type: "string" },
    "secret-key": { type: "string" },
  },
});
const opt = (flag, variable, fallback) => {
  const value = values[flag] ?? process.env[variable] ?? fallback;
  if (value === undefined || value === "") die(`--${flag} (or ${variable}) is required`);
  return value;
};
const options = {
  port: Number(opt("port", "PORT", "0")),
  facilitatorUrl: opt("facilitator", "FACILITATOR_URL").replace(/\/+$/, ""),
  payTo: opt("pay-to", "PAY_TO"),
  chainId: opt("chain-id", "CHAIN_ID", "84532"),
  asset: opt("asset", "ASSET"),
  tokenName: opt("token-name", "TOKEN_NAME", "USD Coin"),
  tokenVersion: opt("token-version", "TOKEN_VERSION", "2"),
  price: opt("price", "PRICE_UNITS"),
  decimals: opt("decimals", "DECIMALS", "6"),
  realm: values.realm ?? process.env.MPP_REALM,
  secretKey: opt("secret-key", "MPP_SECRET_KEY", "tollgate-interop-mpp-secret-key-0123456789"),
};
for (const flag of ["price", "chain-id", "decimals"]) {
  const value = options[flag === "chain-id" ? "chainId" : flag];
  if (!/^\d+$/.test(value)) die(`--${flag} must be a non-negative integer, got ${value}`);
}
if (Buffer.byteLength(options.secretKey) < 32) die("--secret-key must be at least 32 bytes");

const { Mppx, evm } = await importMpp("mppx/server");
const { formatUnits } = await importMpp("viem");

const mppx = Mppx.create({
  secretKey: options.secretKey,
  ...(options.realm ? { realm: options.realm } : {}),
  methods: [
    evm.charge({
      chainId: Number(options.chainId),
      currency: options.asset,
      decimals: Number(options.decimals),
      authorization: { name: options.tokenName, version: options.tokenVersion },
      recipient: options.payTo,
      x402: { facilitator: options.facilitatorUrl },
    }),
  ],
});
const amount = formatUnits(BigInt(options.price), Number(options.decimals));
const charge = Mppx.toNodeListener(mppx.charge({ amount, description: "Today's weather" }));

let served = 0;
const json = (res, status, body) => {
  res.statusCode = status;
  res.setHeader("content-type", "application/json");
  res.end(JSON.stringify(body));
};

const server = http.createServer(async (req, res) => {
  try {
    const { pathname } = new URL(req.url, "http://127.0.0.1");
    if (req.method === "GET" && pathname === "/stats") return json(res, 200, { served });
    if (req.method !== "GET" || pathname !== "/weather") {
      return json(res, 404, { error: "not found" });
    }
    // mppx writes the 402 (a fresh challenge and a problem+json body) itself; on success it has
    // set Payment-Receipt on `res`.
    const result = await charge(req, res);
    if (result.status === 402) return;
    served += 1;
    json(res, 200, WEATHER);
  } catch (error) {
    process.stderr.write(`mpp-server.mjs: ${error?.stack ?? error}\n`);
    if (!res.headersSent) json(res, 500, { error: String(error) });
    else res.end();
  }
});
server.listen(options.port, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
server.on("error", (error) => die(error.stack ?? String(error)));
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections?.();
  });
}
