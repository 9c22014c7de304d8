"""A receiver for Sluice webhooks, in the standard library only: verify, then trust.

Run it (``python docs/webhook_receiver.py --secret whsec_... --port 9000``) and
register ``http://<host>:9000/`` as a webhook endpoint. ``verify_signature`` is
the part to copy into your own service; the test suite imports this file and
checks it against real deliveries, so it stays correct.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

TOLERANCE_SECONDS = 300  # reject events signed longer ago than this: replays


class InvalidSignature(Exception):
    pass


def verify_signature(
    *,
    secret: str,
    header: str,
    body: bytes,
    tolerance: int = TOLERANCE_SECONDS,
    now: float | None = None,
) -> dict:
    """Return the event of ``body`` if ``header`` (``Sluice-Signature``) signs it.

    The header is ``t=<unix seconds>,v1=<hex>`` (more ``v1`` entries may follow);
    the signature is HMAC-SHA256 with the endpoint's secret over ``"<t>." + body``,
    the raw bytes as received. Raise InvalidSignature otherwise.
    """
    parts = [part.split("=", 1) for part in header.split(",") if "=" in part]
    timestamps = [value for key, value in parts if key.strip() == "t"]
    signatures = [value for key, value in parts if key.strip() == "v1"]
    if len(timestamps) != 1 or not timestamps[0].isdigit() or not signatures:
        raise InvalidSignature("malformed Sluice-Signature header")
    timestamp = int(timestamps[0])
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        raise InvalidSignature("timestamp outside the tolerance: a replay?")
    signed = timestamps[0].encode() + b"." + body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(expected, sig) for sig in signatures):
        raise InvalidSignature("signature mismatch")
    return json.loads(body)


def handler_for(secret: str, seen: set[str]) -> type[BaseHTTPRequestHandler]:
    """A request handler that verifies, drops duplicates by event id, and prints."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                header = self.headers.get("Sluice-Signature", "")
                event = verify_signature(secret=secret, header=header, body=body)
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
