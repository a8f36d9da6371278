// An unmodified x402 V2 resource server on Hono (@x402/hono@2.27.0 `paymentMiddleware` with an
// `x402ResourceServer` over `HTTPFacilitatorClient({url})` and @x402/evm's exact server scheme),
// served by @hono/node-server: the same GET /weather and GET /stats as x402v2-express-server.mjs,
// with the same flags (see x402v2-server-common.mjs).
//
// Prints `LISTENING <port>` on stdout once it accepts connections.
import { die, requireTool } from "./tools.mjs";
import { paymentSetup, serverOptions, WEATHER } from "./x402v2-server-common.mjs";

const options = serverOptions();
const { Hono } = requireTool("hono");
const { serve } = requireTool("@hono/node-server");
const { paymentMiddleware } = requireTool("@x402/hono");

const { routes, server: resourceServer } = paymentSetup(options);
const app = new Hono();
let served = 0;

app.use(paymentMiddleware(routes, resourceServer));

app.get("/weather", async (c) => {
  served += 1;
  if (options.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, options.delayMs));
  return c.json(WEATHER);
});

app.get("/stats", (c) => c.json({ served }));

const server = serve({ fetch: app.fetch, port: options.port, hostname: "127.0.0.1" }, (info) => {
  process.stdout.write(`LISTENING ${info.port}\n`);
});
server.on("error", (error) => die(error.stack ?? String(error)));
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
