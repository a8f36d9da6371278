// What the two x402 V2 resource-server scripts (x402v2-express-server.mjs, x402v2-hono-server.mjs)
// share: their flags and the route table and x402ResourceServer they hand to the framework's
// unmodified paymentMiddleware.
//
// Flags (each may instead come from the environment):
//   --port P (PORT, default 0: a free port)      --facilitator URL (FACILITATOR_URL)
//   --pay-to 0x.. (PAY_TO)                        --network eip155:N (NETWORK, default eip155:84532)
//   --asset 0x.. (ASSET)                          --token-name NAME (TOKEN_NAME, default "USD Coin")
//   --token-version V (TOKEN_VERSION, default 2)  --price UNITS (PRICE_UNITS, atomic units)
//   --delay-ms MS (DELAY_MS, default 0)           --payment-identifier (PAYMENT_IDENTIFIER=1):
//                                                 declare the payment-identifier extension
//                                                 (not required) on the route
import { parseArgs } from "node:util";
import { die, requireTool } from "./tools.mjs";

/** Parses the shared flags. */
export function serverOptions() {
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
      "payment-identifier": { type: "boolean" },
    },
  });
  const env = process.env;
  const opt = (flag, variable, fallback) => {
    const value = values[flag] ?? env[variable] ?? fallback;
    if (value === undefined || value === "") die(`--${flag} (or ${variable}) is required`);
    return value;
  };
  const options = {
    port: Number(opt("port", "PORT", "0")),
    facilitatorUrl: opt("facilitator", "FACILITATOR_URL").replace(/\/+$/, ""),
    payTo: opt("pay-to", "PAY_TO"),
    network: opt("network", "NETWORK", "eip155:84532"),
    asset: opt("asset", "ASSET"),
    tokenName: opt("token-name", "TOKEN_NAME", "USD Coin"),
    tokenVersion: opt("token-version", "TOKEN_VERSION", "2"),
    price: opt("price", "PRICE_UNITS"),
    delayMs: Number(opt("delay-ms", "DELAY_MS", "0")),
    paymentIdentifier: values["payment-identifier"] ?? env.PAYMENT_IDENTIFIER === "1",
  };
  if (!/^\d+$/.test(options.price)) {
    die(`--price must be an integer number of atomic units, got ${options.price}`);
  }
  if (!/^eip155:\d+$/.test(options.network)) {
    die(`--network must be a CAIP-2 EVM id such as eip155:84532, got ${options.network}`);
  }
  return options;
}

/**
 * The route table ("GET /weather" paid, in the asset-amount price form: the devnet's token is not
 * the registry's USDC for the network) and the x402ResourceServer talking to the facilitator.
 */
export function paymentSetup(options) {
  const { x402ResourceServer, HTTPFacilitatorClient } = requireTool("@x402/core/server");
  const { ExactEvmScheme } = requireTool("@x402/evm/exact/server");
  const { declarePaymentIdentifierExtension, PAYMENT_IDENTIFIER } = requireTool(
    "@x402/extensions/payment-identifier",
  );
  const route = {
    accepts: {
      scheme: "exact",
      payTo: options.payTo,
      price: {
        amount: options.price,
        asset: options.asset,
        extra: { name: options.tokenName, version: options.tokenVersion },
      },
      network: options.network,
    },
    description: "Today's weather",
    mimeType: "application/json",
  };
  if (options.paymentIdentifier) {
    route.extensions = { [PAYMENT_IDENTIFIER]: declarePaymentIdentifierExtension(false) };
  }
  const facilitator = new HTTPFacilitatorClient({ url: options.facilitatorUrl });
  const server = new x402ResourceServer(facilitator).register(
    options.network,
    new ExactEvmScheme(),
  );
  return { routes: { "GET /weather": route }, server };
}

/** The paid handler's body. */
export const WEATHER = { report: { weather: "sunny", temperature: 70 } };
