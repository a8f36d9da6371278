// The x402 V2 reference facilitator: `x402Facilitator` from @x402/core@2.27.0 with the exact EVM
// scheme of @x402/evm@2.27.0 (registerExactEvmScheme, which registers V2 for the given CAIP-2
// network and V1 for every V1 network name it knows), settling with a viem wallet on the given
// JSON-RPC. Served over express at POST /verify, POST /settle and GET /supported the way the
// package's own example does (examples/typescript/facilitator/basic in coinbase/x402): 400 on a
// body without paymentPayload/paymentRequirements, 500 with {error} on a thrown error, and a settle
// aborted by a hook answered as {success: false, errorReason, network}.
//
// usage: node x402v2-facilitator.mjs --rpc-url URL --private-key HEX --network eip155:N
//          [--port P] [--nonce-manager] [--poll-ms MS]
// Each flag may instead come from the environment: PORT, RPC_URL, FACILITATOR_PRIVATE_KEY,
// NETWORK, NONCE_MANAGER=1, POLL_MS. Port 0 (the default) picks a free port.
//
// "As shipped" (no flags): the example's viem client, no nonce manager, viem's default receipt
// polling (4 s for a chain without a block time). --nonce-manager gives the account viem's
// `nonceManager` (concurrent settles get distinct nonces); --poll-ms sets the client's
// pollingInterval (the "50 ms polling").
//
// The V1 kinds only settle when the chain's id matches the V1 name (e.g. anvil --chain-id 84532
// serves "base-sepolia"); the signer talks to the one RPC it is given.
//
// Prints `LISTENING <port>` on stdout once it accepts connections. With X402_LOG_BODIES=1 every
// request body and answer is written to stderr as one JSON line
// {"log":"x402v2-facilitator","method","path","body","status","answer"}.
import { parseArgs } from "node:util";
import { die, requireTool } from "./tools.mjs";

const { values } = parseArgs({
  options: {
    port: { type: "string" },
    "rpc-url": { type: "string" },
    "private-key": { type: "string" },
    network: { type: "string" },
    "nonce-manager": { type: "boolean" },
    "poll-ms": { type: "string" },
  },
});
const env = process.env;
const opt = (flag, variable, fallback) => {
  const value = values[flag] ?? env[variable] ?? fallback;
  if (value === undefined || value === "") die(`--${flag} (or ${variable}) is required`);
  return value;
};
const port = Number(opt("port", "PORT", "0"));
const rpcUrl = opt("rpc-url", "RPC_URL");
const rawKey = opt("private-key", "FACILITATOR_PRIVATE_KEY");
const privateKey = rawKey.startsWith("0x") ? rawKey : `0x${rawKey}`;
const network = opt("network", "NETWORK");
const match = /^eip155:(\d+)$/.exec(network);
if (!match) die(`--network must be a CAIP-2 EVM id such as eip155:84532, got ${network}`);
const chainId = Number(match[1]);
const useNonceManager = values["nonce-manager"] ?? env.NONCE_MANAGER === "1";
const pollRaw = values["poll-ms"] ?? env.POLL_MS;
if (pollRaw !== undefined && !/^\d+$/.test(pollRaw)) die(`--poll-ms must be an integer, got ${pollRaw}`);
const pollingInterval = pollRaw === undefined ? undefined : Number(pollRaw);
const logBodies = env.X402_LOG_BODIES === "1";

const express = requireTool("express");
const { x402Facilitator } = requireTool("@x402/core/facilitator");
const { toFacilitatorEvmSigner } = requireTool("@x402/evm");
const { registerExactEvmScheme } = requireTool("@x402/evm/exact/facilitator");
const { createWalletClient, defineChain, http, publicActions, nonceManager } = requireTool("viem");
const { privateKeyToAccount } = requireTool("viem/accounts");

const chain = defineChain({
  id: chainId,
  name: `chain ${chainId}`,
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [rpcUrl] } },
});
const account = privateKeyToAccount(privateKey, useNonceManager ? { nonceManager } : undefined);
const viemClient = createWalletClient({
  account,
  chain,
  transport: http(rpcUrl),
  ...(pollingInterval === undefined ? {} : { pollingInterval }),
}).extend(publicActions);

// The signer exactly as the reference example builds it.
const evmSigner = toFacilitatorEvmSigner({
  getCode: (args) => viemClient.getCode(args),
  address: account.address,
  readContract: (args) => viemClient.readContract({ ...args, args: args.args || [] }),
  verifyTypedData: (args) => viemClient.verifyTypedData(args),
  writeContract: (args) => viemClient.writeContract({ ...args, args: args.args || [] }),
  sendTransaction: (args) => viemClient.sendTransaction(args),
  waitForTransactionReceipt: (args) => viemClient.waitForTransactionReceipt(args),
});

const facilitator = registerExactEvmScheme(new x402Facilitator(), {
  signer: evmSigner,
  networks: network,
});

const app = express();
app.use(express.json({ limit: "1mb" }));

if (logBodies) {
  app.use((req, res, next) => {
    const json = res.json.bind(res);
    res.json = (answer) => {
      process.stderr.write(
        `${JSON.stringify({
          log: "x402v2-facilitator",
          method: req.method,
          path: req.path,
          body: req.method === "GET" ? null : req.body,
          status: res.statusCode,
          answer,
        })}\n`,
      );
      return json(answer);
    };
    next();
  });
}

const errorMessage = (error) => (error instanceof Error ? error.message : "Unknown error");

app.post("/verify", async (req, res) => {
  try {
    const { paymentPayload, paymentRequirements } = req.body ?? {};
    if (!paymentPayload || !paymentRequirements) {
      return res.status(400).json({ error: "Missing paymentPayload or paymentRequirements" });
    }
    res.json(await facilitator.verify(paymentPayload, paymentRequirements));
  } catch (error) {
    process.stderr.write(`verify error: ${error?.stack ?? error}\n`);
    res.status(500).json({ error: errorMessage(error) });
  }
});

app.post("/settle", async (req, res) => {
  try {
    const { paymentPayload, paymentRequirements } = req.body ?? {};
    if (!paymentPayload || !paymentRequirements) {
      return res.status(400).json({ error: "Missing paymentPayload or paymentRequirements" });
    }
    res.json(await facilitator.settle(paymentPayload, paymentRequirements));
  } catch (error) {
    process.stderr.write(`settle error: ${error?.stack ?? error}\n`);
    if (error instanceof Error && error.message.includes("Settlement aborted:")) {
      return res.json({
        success: false,
        errorReason: error.message.replace("Settlement aborted: ", ""),
        network: req.body?.paymentPayload?.network || "unknown",
      });
    }
    res.status(500).json({ error: errorMessage(error) });
  }
});

app.get("/supported", (_req, res) => {
  try {
    res.json(facilitator.getSupported());
  } catch (error) {
    res.status(500).json({ error: errorMessage(error) });
  }
});

const server = app.listen(port, "127.0.0.1", () => {
  process.stdout.write(`LISTENING ${server.address().port}\n`);
});
server.on("error", (error) => die(error.stack ?? String(error)));
for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
