"""An unmodified x402 V2 client from PyPI (x402 2.25.0) paying one GET.

usage: $REPO/.tools/py/bin/python x402v2_client.py <url> <privateKeyHex> [--replay] [--tamper]

The client is the package's httpx integration: an ``x402Client`` with
``register_exact_evm_client`` (the exact EVM scheme for "eip155:*" in V2 and every V1 network
name) and an ``EthAccountSigner`` over an eth-account key, behind ``x402AsyncTransport`` (what
``x402HttpxClient`` builds) wrapping a recording httpx transport. Its spend controls are set to
``{"allowed_assets": True}``: by default x402 2.25 pays only the registry's default assets (USDC at
its canonical address per network) and the devnet's token is not one of them. Nothing else is
configured.

Prints one JSON line to stdout, the same shape as x402v2-fetch-pay.mjs:
  {"status", "body", "paymentResponse", "paymentRequired", "x402Version", "sentHeader",
   "sentPayload", "offered"}
body is the parsed JSON body (or the raw text), paymentResponse the decoded PAYMENT-RESPONSE
header (or X-PAYMENT-RESPONSE when only that is present; null if neither), paymentRequired the
decoded PAYMENT-REQUIRED header of the final answer (null if absent), x402Version the version of
the payload sent, sentHeader the header name used, sentPayload that header decoded, offered the
first 402's decoded terms.
  --replay  sends the recorded payment header verbatim once more: "replay": {status, body,
            paymentResponse, paymentRequired}.
  --tamper  has the same client sign a fresh payment for the same terms, changes only
            payload.authorization.value (+1) and sends it: "tamper": {...}.
Exits non-zero with a message on stderr on any error.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys

import httpx
from eth_account import Account
from x402 import x402Client
from x402.http import x402HTTPClient
from x402.http.clients.httpx import x402AsyncTransport
from x402.mechanisms.evm import EthAccountSigner
from x402.mechanisms.evm.exact.register import register_exact_evm_client

PAYMENT_HEADERS = ("PAYMENT-SIGNATURE", "X-PAYMENT")


def die(message: str) -> None:
    """Prints `message` to stderr and exits non-zero."""
    sys.stderr.write(f"{os.path.basename(sys.argv[0])}: {message}\n")
    sys.exit(1)


def decode_base64_json(value: str) -> object:
    """Decodes a base64 (standard alphabet) JSON header value."""
    return json.loads(base64.b64decode(value).decode("utf-8"))


def summarize(response: httpx.Response) -> dict:
    """Reads a response into {status, body, paymentResponse, paymentRequired}."""
    try:
        body = response.json()
    except ValueError:
        body = response.text
    settled = response.headers.get("payment-response") or response.headers.get(
        "x-payment-response"
    )
    required = response.headers.get("payment-required")
    return {
        "status": response.status_code,
        "body": body,
        "paymentResponse": decode_base64_json(settled) if settled else None,
        "paymentRequired": decode_base64_json(required) if required else None,
    }


class RecordingTransport(httpx.AsyncBaseTransport):
    """The default httpx transport, remembering the first 402 and the payment header sent."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.first_402: httpx.Response | None = None
        self.sent: tuple[str, str] | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for name in PAYMENT_HEADERS:
            value = request.headers.get(name)
            if value:
                self.sent = (name, value)
        response = await self.inner.handle_async_request(request)
        if response.status_code == 402 and self.first_402 is None:
            await response.aread()
            self.first_402 = response
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def run(url: str, private_key: str, replay: bool, tamper: bool) -> dict:
    client = x402Client()
    register_exact_evm_client(client, EthAccountSigner(Account.from_key(private_key)))
    client.set_spend_controls({"allowed_assets": True})
    http_client = x402HTTPClient(client)
    recorder = RecordingTransport()
    async with httpx.AsyncClient(transport=x402AsyncTransport(client, recorder)) as paying:
        result = summarize(await paying.get(url))

    offered = None
    if recorder.first_402 is not None:
        header = recorder.first_402.headers.get("payment-required")
        if header:
            offered = decode_base64_json(header)
        else:
            try:
                offered = recorder.first_402.json()
            except ValueError:
                offered = None
    sent_payload = decode_base64_json(recorder.sent[1]) if recorder.sent else None
    result.update(
        {
            "x402Version": sent_payload.get("x402Version") if sent_payload else None,
            "sentHeader": recorder.sent[0] if recorder.sent else None,
            "sentPayload": sent_payload,
            "offered": offered,
        }
    )

    async with httpx.AsyncClient() as plain:
        if replay:
            if not recorder.sent:
                die(f"nothing to replay: no payment header was sent (status {result['status']})")
            name, value = recorder.sent
            result["replay"] = summarize(await plain.get(url, headers={name: value}))
        if tamper:
            if not recorder.sent or recorder.first_402 is None:
                die(f"nothing to tamper: no payment was made (status {result['status']})")
            first = recorder.first_402
            body = None
            try:
                body = first.json()
            except ValueError:
                pass
            terms = http_client.get_payment_required_response(first.headers.get, body)
            fresh = await client.create_payment_payload(terms)
            ((name, value),) = http_client.encode_payment_signature_header(fresh).items()
            payload = decode_base64_json(value)
            authorization = payload.get("payload", {}).get("authorization")
            if not authorization:
                die(f"the payload has no authorization: {json.dumps(payload)}")
            authorization["value"] = str(int(authorization["value"]) + 1)
            tampered = base64.b64encode(
                json.dumps(payload, separators=(",", ":")).encode("utf-8")
            ).decode("ascii")
            result["tamper"] = summarize(await plain.get(url, headers={name: tampered}))
            result["tamper"]["sentPayload"] = payload
    return result


def main() -> None:
    args = sys.argv[1:]
    flags = {arg for arg in args if arg.startswith("--")}
    positional = [arg for arg in args if not arg.startswith("--")]
    if len(positional) != 2 or flags - {"--replay", "--tamper"}:
        die("usage: x402v2_client.py <url> <privateKeyHex> [--replay] [--tamper]")
    url, key = positional
    key = key if key.startswith("0x") else f"0x{key}"
    try:
        result = asyncio.run(run(url, key, "--replay" in flags, "--tamper" in flags))
    except SystemExit:
        raise
    except Exception as error:  # noqa: BLE001 - any failure is reported and exits non-zero
        die(f"{type(error).__name__}: {error}")
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
