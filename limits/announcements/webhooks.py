"""Webhooks: how they are posted, and the endpoints tenants register.

Signatures follow Standard Webhooks (``limits.announcements.signing``);
``docs/announcements.md`` has a receiver. Endpoint services validate, write and
audit like ``limits.rules.services``.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from cryptography.fernet import InvalidToken
from django.conf import settings
from django.db import transaction

from limits.announcements.signing import (
    SECRET_PREFIX,
    secret_generate,
    secret_is_legacy,
    signature_headers,
)
from limits.choices import AuditAction, Role
from limits.core.audit import Actor, audited_delete, audited_save, row_lock
from limits.core.egress import public_opener
from limits.core.roles import require_role
from limits.core.secrets import secret_decrypt, secret_encrypt
from limits.models import WebhookEndpoint

__all__ = [
    "PostResult",
    "require_manager",
    "webhook_endpoint_create",
    "webhook_endpoint_delete",
    "webhook_endpoint_rotate_secret",
    "webhook_endpoint_sends_legacy_signature",
    "webhook_endpoint_update",
    "webhook_post",
]


@dataclass(frozen=True)
class PostResult:
    """The outcome of one POST: a status code, or an error, and how long it took."""

    status_code: int | None
    duration_ms: int
    error: str = ""
    excerpt: str = ""

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a delivery: following it would drop the body."""

    def redirect_request(self, *args, **kwargs):
        return None


_OPENER = public_opener(_NoRedirect)


def webhook_post(
    *, url: str, body: bytes, headers: dict[str, str], timeout: float
) -> PostResult:
    """POST ``body`` once; never raises for network or HTTP errors, it reports them."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    started = time.monotonic()
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            excerpt = response.read(500).decode(errors="replace")
            return PostResult(response.status, _since(started), excerpt=excerpt)
    except urllib.error.HTTPError as exc:
        excerpt = exc.read(500).decode(errors="replace")
        return PostResult(exc.code, _since(started), f"HTTP {exc.code}", excerpt)
    except (OSError, ValueError) as exc:  # refused, timeout, DNS, TLS, bad URL, private
        return PostResult(None, _since(started), f"{type(exc).__name__}: {exc}")


def _since(started: float) -> int:
    return round((time.monotonic() - started) * 1000)


def endpoint_headers(
    endpoint: WebhookEndpoint, body: bytes, *, message_id: str
) -> dict[str, str]:
    """Content type and signature headers of event ``message_id`` for ``endpoint``,
    signed now."""
    return {
        "Content-Type": "application/json",
        "User-Agent": "Sluice-Webhooks/1",
        **signature_headers(
            secret=secret_decrypt(endpoint.secret_encrypted),
            message_id=message_id,
            body=body,
            timestamp=int(time.time()),
        ),
    }


def webhook_endpoint_sends_legacy_signature(endpoint: WebhookEndpoint) -> bool | None:
    """Whether ``endpoint``'s secret predates Standard Webhooks, so that its deliveries
    carry the former ``Sluice-Signature`` too (until the secret is rotated); None when
    no configured key decrypts the secret."""
    try:
        return secret_is_legacy(secret_decrypt(endpoint.secret_encrypted))
    except InvalidToken:
        return None


def webhook_timeout() -> float:
    return float(settings.SLUICE_WEBHOOK_TIMEOUT)


def require_manager(actor: Actor) -> None:
    """Product and support manage endpoints; the system (commands, Celery) may too."""
    require_role(actor, Role.PRODUCT, Role.SUPPORT, to="manage webhooks")


def _audited(endpoint: WebhookEndpoint) -> dict:
    """What the audit log keeps of an endpoint: never its secret."""
    return {
        "tenant": endpoint.tenant.slug,
        "url": endpoint.url,
        "description": endpoint.description,
        "is_active": endpoint.is_active,
        "secret_prefix": endpoint.secret_prefix,
    }


def _issue_secret(endpoint: WebhookEndpoint) -> str:
    secret = secret_generate()
    endpoint.secret_prefix = secret[: len(SECRET_PREFIX) + 6]
    endpoint.secret_encrypted = secret_encrypt(secret)
    return secret


@transaction.atomic
def webhook_endpoint_create(*, endpoint: WebhookEndpoint, actor: Actor) -> str:
    """Save a new endpoint with a fresh secret; audited. Return the secret (shown once)."""
    require_manager(actor)
    secret = _issue_secret(endpoint)
    endpoint.full_clean()
    audited_save(endpoint, actor=actor, before=None, serialize=_audited)
    return secret


@transaction.atomic
def webhook_endpoint_update(
    *, endpoint: WebhookEndpoint, actor: Actor, expected_revision: int | None = None
) -> WebhookEndpoint:
    """Save changes to the URL, description or active flag; audited."""
    require_manager(actor)
    before = row_lock(endpoint, expected_revision=expected_revision, serialize=_audited)
    endpoint.full_clean()
    audited_save(endpoint, actor=actor, before=before, serialize=_audited)
    return endpoint


@transaction.atomic
def webhook_endpoint_rotate_secret(*, endpoint: WebhookEndpoint, actor: Actor) -> str:
    """Replace the secret at once (the old one stops signing); audited. Return the new one."""
    require_manager(actor)
    before = row_lock(endpoint, serialize=_audited)
    secret = _issue_secret(endpoint)
    audited_save(
        endpoint,
        actor=actor,
        before=before,
        serialize=_audited,
        action=AuditAction.TOKEN_CREATE,
        reason="webhook secret rotated",
    )
    return secret


@transaction.atomic
def webhook_endpoint_delete(*, endpoint: WebhookEndpoint, actor: Actor) -> None:
    """Delete the endpoint; its delivery log stays (without the endpoint); audited."""
    require_manager(actor)
    before = row_lock(endpoint, serialize=_audited)
    audited_delete(endpoint, actor=actor, before=before)
