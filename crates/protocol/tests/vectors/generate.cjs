const fs = require("fs");
const path = require("path");
const out = process.argv[2];
const NOW_MS = 1750000000000;
Date.now = () => NOW_MS;
const { processPriceToAtomicAmount, toJsonSafe } = require("x402/shared");
const { exact } = require("x402/schemes");
const { createPaymentHeader } = require("x402/client");
const types = require("x402/types");
const { getAddress } = require("viem");

(async () => {
  const network = "base-sepolia";
  const { maxAmountRequired, asset } = processPriceToAtomicAmount("$0.01", network);
  // As x402-express@1.x builds an entry (legacy/x402-express/src/index.ts).
  const requirements = {
    scheme: "exact",
    network,
    maxAmountRequired,
    resource: "https://api.example.com/weather",
    description: "Access to weather data",
    mimeType: "application/json",
    payTo: getAddress("0x209693bc6afc0c5328ba36faf03c514ef312287c"),
    maxTimeoutSeconds: 60,
    asset: getAddress(asset.address),
    outputSchema: { input: { type: "http", method: "GET", discoverable: true }, output: undefined },
    extra: asset.eip712,
  };
  types.PaymentRequirementsSchema.parse(requirements);
  const body402 = { x402Version: 1, error: "X-PAYMENT header is required", accepts: toJsonSafe([requirements]) };
  // anvil account 0
  const signer = await types.createSigner(network, "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80");
  const header = await createPaymentHeader(signer, 1, requirements);
  const payload = exact.evm.decodePayment(header);
  const verifyRequest = { x402Version: payload.x402Version, paymentPayload: toJsonSafe(payload), paymentRequirements: toJsonSafe(requirements) };
  types.VerifyRequestSchema.parse(verifyRequest);
  const from = payload.payload.authorization.from;
  const verifyValid = { isValid: true, invalidReason: undefined, payer: from };
  const verifyInvalid = { isValid: false, invalidReason: "invalid_exact_evm_payload_signature", payer: from };
  const tx = "0x9c3b7e0d4f2a1b6c8e5d7f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c";
  const settleOk = { success: true, transaction: tx, network, payer: from };
  const settleFail = { success: false, network, transaction: "", errorReason: "invalid_exact_evm_payload_authorization_valid_before", payer: from };
  types.VerifyResponseSchema.parse(verifyValid);
  types.VerifyResponseSchema.parse(verifyInvalid);
  types.SettleResponseSchema.parse(settleOk);
  const supported = { kinds: [
    { x402Version: 1, scheme: "exact", network: "base-sepolia" },
    { x402Version: 1, scheme: "exact", network: "solana-devnet", extra: { feePayer: "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4" } },
  ] };
  types.SupportedPaymentKindsResponseSchema.parse(supported);
  const w = (name, v) => fs.writeFileSync(path.join(out, name), typeof v === "string" ? v + "\n" : JSON.stringify(v, null, 2) + "\n");
  w("payment_required.json", body402);
  w("x_payment.b64", header);
  w("payment_payload.json", payload);
  w("verify_request.json", verifyRequest);
  w("settle_request.json", verifyRequest);
  w("verify_response_valid.json", verifyValid);
  w("verify_response_invalid.json", verifyInvalid);
  w("settle_response_success.json", settleOk);
  w("settle_response_failure.json", settleFail);
  w("supported_response.json", supported);
  w("x_payment_response.b64", types.settleResponseHeader(settleOk));
  console.log("ok", header.length);
})().catch(e => { console.error(e); process.exit(1); });
