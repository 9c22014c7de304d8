"""A receiver for Sluice webhooks, in the standard library only: verify, then trust.

Sluice signs webhooks the Standard Webhooks way (standardwebhooks.com): a
receiver built on the ``standardwebhooks`` package (or Svix's libraries) needs
none of this file. Without a library, ``verify_webhook`` is the part to copy.

Run it (``python docs/webhook_receiver.py --secret whsec_... --port 9000``) and
register ``http://<host>:9000/`` as a webhook endpoint. The test suite imports
this file and checks it against real deliveries, so it stays correct.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, HTTPServer

TOLERANCE_SECONDS = 300  # reject events signed longer ago (or later) than this: replays


class InvalidSignature(Exception):
    pass


def signing_key(secret: str) -> bytes:
    """The key of a ``whsec_...`` secret: the base64 after the prefix, decoded.

    Secrets issued before Sluice followed Standard Webhooks use the URL-safe
    alphabet (``-`` and ``_``) without padding; they are read the same way.
    """
    text = secret.removeprefix("whsec_").replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error:
        raise InvalidSignature("the secret is not a whsec_ secret") from None


def verify_webhook(
    *,
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    tolerance: int = TOLERANCE_SECONDS,
    now: float | None = None,
) -> dict:
    """Return the event of ``body`` if its Standard Webhooks headers sign it.

    ``webhook-signature`` is ``v1,<base64>`` (several may follow, space-separated);
    each is HMAC-SHA256, keyed with the secret's bytes, over
    ``"<webhook-id>.<webhook-timestamp>." + body``, the raw bytes as received.
    Raise InvalidSignature otherwise.
    """
    lower = {name.lower(): value for name, value in headers.items()}
    message_id = lower.get("webhook-id", "")
    timestamp = lower.get("webhook-timestamp", "")
    signatures = lower.get("webhook-signature", "").split()
    if not message_id or not timestamp.isdigit() or not signatures:
        raise InvalidSignature("missing or malformed webhook-* headers")
    if abs((time.time() if now is None else now) - int(timestamp)) > tolerance:
        raise InvalidSignature("timestamp outside the tolerance: a replay?")
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(signing_key(secret), signed, hashlib.sha256).digest()
    expected = base64.b64encode(digest).decode()
    for signature in signatures:
        version, _, value = signature.partition(",")
        if version == "v1" and hmac.compare_digest(expected, value):
            return json.loads(body)
    raise InvalidSignature("signature mismatch")


def handler_for(secret: str, seen: set[str]) -> type[BaseHTTPRequestHandler]:
    """A request handler that verifies, drops duplicates by event id, and prints."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                event = verify_webhook(secret=secret, headers=self.headers, body=body)
            except InvalidSignature as exc:
                self.send_error(400, str(exc))
                return
            if event["id"] not in seen:  # a resend or retry carries the same id
                seen.add(event["id"])
                print(json.dumps(event, indent=2))
            self.send_response(204)
            self.end_headers()

    return Handler


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args()
    server = HTTPServer(("127.0.0.1", args.port), handler_for(args.secret, set()))
    server.serve_forever()
