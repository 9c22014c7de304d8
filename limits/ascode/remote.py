"""Another installation's rules API, for promotion: staging's rules diffed against, or
applied to, production.

The other side does the work with its own services (``POST /api/v1/rules/diff``
and ``/rules/apply``, the rules file as the body): its active rules, its
approval rule, its notice period, its audit log under the token's user. This
module only sends the file and reads the answer; the token is an API token of a
user of that installation (``Authorization: Bearer slu_...``), product role to
apply.

The URL is an operator's, typed on the command line, not a user's: it is not held
to the webhooks' public-address rule (``limits.core.egress``); staging and
production usually talk over a private network.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

__all__ = ["Remote", "RemoteError", "remote_rules_apply", "remote_rules_diff"]

#: Seconds to wait for the other side: applying 100,000 tenants takes a minute.
TIMEOUT = 600


class RemoteError(Exception):
    """The other installation refused the file or could not be reached; in words."""


@dataclass(frozen=True)
class Remote:
    """An installation's base URL (``https://sluice.example.com``) and an API token."""

    url: str
    token: str

    def post(self, path: str, body: str, **query: str) -> dict[str, Any]:
        """POST the rules file ``body`` to ``/api/v1/<path>``; the JSON answer."""
        target = f"{self.url.rstrip('/')}/api/v1/{path}"
        if query:
            target += "?" + urlencode(query)
        request = urllib.request.Request(
            target,
            data=body.encode("utf-8"),
            method="POST",
            headers={
                "Content-Type": "application/yaml",
                "Accept": "application/json",
                "Authorization": f"Bearer {self.token}",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise RemoteError(
                f"{target} answered {exc.code}: {_problem(exc)}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            raise RemoteError(f"{target} could not be reached: {exc}") from None


def _problem(exc: urllib.error.HTTPError) -> str:
    """The problem's detail and field messages (RFC 9457), else the body's start."""
    raw = exc.read()
    try:
        problem = json.loads(raw)
    except ValueError:
        return raw[:500].decode("utf-8", "replace")
    said = [str(problem.get("detail") or problem.get("title") or "")]
    for field, messages in (problem.get("fields") or {}).items():
        said += [
            f"{field}: {m}"
            for m in (messages if isinstance(messages, list) else [messages])
        ]
    return "\n  ".join(s for s in said if s)


def remote_rules_diff(remote: Remote, *, text: str, name: str) -> dict[str, Any]:
    """What ``text`` (a rules file) would change on ``remote``: its rules diff, as JSON."""
    return remote.post("rules/diff", text, name=name)


def remote_rules_apply(
    remote: Remote, *, text: str, name: str, title: str, publish: bool
) -> dict[str, Any]:
    """Apply ``text`` on ``remote`` (a change request there, published on request)."""
    query = {"name": name, "publish": "true" if publish else "false"}
    if title:
        query["title"] = title
    return remote.post("rules/apply", text, **query)
