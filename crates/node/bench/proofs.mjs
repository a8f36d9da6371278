// Pays 402 offers of a Tollgate gate through the facilitator's /authorize, as the agent does
// (an EIP-3009 ReceiveWithAuthorization to the router, its nonce committing to payTo, memo and
// fee), and returns the proofs (X-PAYMENT values) without sending them to the gate.
import { requireTool } from "../test/support.mjs";

const { privateKeyToAccount } = requireTool("viem/accounts");
const { encodeAbiParameters, keccak256 } = requireTool("viem");

const TYPES = {
  ReceiveWithAuthorization: [
    { name: "from", type: "address" },
    { name: "to", type: "address" },
    { name: "value", type: "uint256" },
    { name: "validAfter", type: "uint256" },
    { name: "validBefore", type: "uint256" },
    { name: "nonce", type: "bytes32" },
  ],
};

export async function proofsFor(dev, offers, key) {
  const wk = await (await fetch(`${dev.facilitatorUrl}/.well-known/tollgate`)).json();
  const net = wk.networks[dev.network];
  const account = privateKeyToAccount(key);
  const out = [];
  for (const offer of offers) {
    const nonce = keccak256(
      encodeAbiParameters(
        [{ type: "address" }, { type: "bytes32" }, { type: "uint256" }],
        [offer.payTo, offer.memo, BigInt(net.fee)],
      ),
    );
    const now = Math.floor(Date.now() / 1000) + ((net.chainTime ?? 0) ? net.chainTime - Math.floor(Date.now() / 1000) : 0);
    const message = {
      from: account.address,
      to: net.router,
      value: BigInt(offer.amount),
      validAfter: BigInt(now - 60),
      validBefore: BigInt(now + 600),
      nonce,
    };
    const signature = await account.signTypedData({
      domain: { name: net.tokenName, version: net.tokenVersion, chainId: net.chainId, verifyingContract: net.token },
      types: TYPES,
      primaryType: "ReceiveWithAuthorization",
      message,
    });
    const r = await fetch(`${dev.facilitatorUrl}/authorize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        signedPayment: {
          network: dev.network,
          token: offer.token,
          payTo: offer.payTo,
          amount: offer.amount,
          memo: offer.memo,
          authorization: {
            from: account.address,
            to: net.router,
            value: String(message.value),
            validAfter: String(message.validAfter),
            validBefore: String(message.validBefore),
            nonce,
            signature,
          },
        },
      }),
    });
    const answer = await r.json();
    if (!r.ok) throw new Error(`/authorize: ${JSON.stringify(answer)}`);
    out.push(answer.proof);
  }
  return out;
}
