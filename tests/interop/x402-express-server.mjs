// An unmodified x402 V1 resource server (x402-express@1.2.0) selling GET /weather, settling
// through the facilitator it is given (e.g. a Tollgate facilitator).
//
// usage: node x402-express-server.mjs --port P --facilitator URL --pay-to 0x.. --network NAME
//          --asset 0x.. --token-name NAME --token-version V --price UNITS [--delay-ms MS]
// Each flag may instead come from the environment: PORT, FACILITATOR_URL, PAY_TO, NETWORK,
// ASSET, TOKEN_NAME, TOKEN_VERSION, PRICE_UNITS, DELAY_MS. Port 0 picks a free port. With
// --delay-ms the paid handler takes that long (x402-express verifies, runs the handler, then
// settles, so concurrent replays of one payment all reach /settle).
//
// Prints `LISTENING <port>` on stdout once it accepts connections. GET /stats (not gated) reports
// how many times the paid handler ran.
import { parseArgs } from "node:util";
import { die, requireTool } from "./tools.mjs";

const { values } = parseArgs({
  options: {
    port: { type: "string" },
    facilitator: { type: "string" },
    "pay-to": { type: "string" },
    network: { type: "string" },
    asset: { type: "string" },
    "token-name": { type: "string" },
    "token-version": { type: "string" },
    price: { type: "string" },
    "delay-ms": { type: "string" },
  },
});
const env = process.env;
const opt = (flag, variable, fallback) => {
  const value = values[flag] ?? env[variable] ?? fallback;
  if (value === undefined || value === "") die(`--${flag} (or ${variable}) is required`);
  return value;
};
const port = Number(opt("port", "PORT", "0"));
const facilitatorUrl = opt("facilitator", "FACILITATOR_URL").replace(/\/+$/, "");
const payTo = opt("pay-to", "PAY_TO");
const network = opt("network", "NETWORK", "base-sepolia");
const asset = opt("asset", "ASSET");
const tokenName = opt("token-name", "TOKEN_NAME", "USD Coin");
const tokenVersion = opt("token-version", "TOKEN_VERSION", "2");
const price = opt("price", "PRICE_UNITS");
if (!/^\d+$/.test(price)) die(`--price must be an integer number of units, got ${price}`);
const delayMs = Number(opt("delay-ms", "DELAY_MS", "0"));

const express = requireTool("express");
const { paymentMiddleware } = requireTool("x402-express");

const app = express();
let served = 0;

app.use(
  paymentMiddleware(
    payTo,
    {
      "GET /weather": {
        // The asset object form: the devnet's token is not the registry's USDC for the network.
        price: {
          amount: price,
          asset: {
            address: asset,
            decimals: 6,
            eip712: { name: tokenName, version: tokenVersion },
          },
        },
        network,
        config: { description: "Today's weather", mimeType: "application/json" },
      },
    },
    { url: facilitatorUrl },
  ),
);

app.get("/weather", async (_req, res) => {
  served += 1;
  if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
  res.json({ report: { weather: "sunny", temperature: 70 } });
});

app.get("/stats", (_req, res) => {
  res.json({ served });
});

const server = app.listen(port, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
server.on("error", (error) => die(error.stack ?? String(error)));
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
