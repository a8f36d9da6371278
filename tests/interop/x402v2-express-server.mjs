// An unmodified x402 V2 resource server (@x402/express@2.27.0 `paymentMiddleware` with an
// `x402ResourceServer` over `HTTPFacilitatorClient({url})` and @x402/evm's exact server scheme for
// the given CAIP-2 network) selling GET /weather, settling through the facilitator it is given
// (Tollgate's or the reference one, x402v2-facilitator.mjs).
//
// usage: node x402v2-express-server.mjs --facilitator URL --pay-to 0x.. --asset 0x..
//          --price UNITS [--port P] [--network eip155:N] [--token-name NAME]
//          [--token-version V] [--delay-ms MS] [--payment-identifier]
// Flags and their environment fallbacks: see x402v2-server-common.mjs. @x402/express verifies,
// runs the handler with its response buffered, then settles (a failed settle answers 402 and
// drops the body); with --delay-ms the paid handler takes that long.
//
// Prints `LISTENING <port>` on stdout once it accepts connections. GET /stats (not gated) reports
// how many times the paid handler ran.
import { die, requireTool } from "./tools.mjs";
import { paymentSetup, serverOptions, WEATHER } from "./x402v2-server-common.mjs";

const options = serverOptions();
const express = requireTool("express");
const { paymentMiddleware } = requireTool("@x402/express");

const { routes, server: resourceServer } = paymentSetup(options);
const app = express();
let served = 0;

app.use(paymentMiddleware(routes, resourceServer));

app.get("/weather", async (_req, res) => {
  served += 1;
  if (options.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, options.delayMs));
  res.json(WEATHER);
});

app.get("/stats", (_req, res) => {
  res.json({ served });
});

const server = app.listen(options.port, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
server.on("error", (error) => die(error.stack ?? String(error)));
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
