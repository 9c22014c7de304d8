"""Services for API and gateway tokens: issue (secret shown once), revoke, authenticate."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from limits.choices import AuditAction
from limits.core.audit import Actor, audit_record
from limits.core.chain import chain_lock
from limits.core.store import redis_client
from limits.gateways.keys import gateway_token_key
from limits.gateways.window import poll_window_reset
from limits.models import ApiToken, GatewayToken, hash_secret
from limits.models.tokens import Token

__all__ = [
    "api_token_authenticate",
    "gateway_token_authenticate",
    "token_create",
    "token_revoke",
]

#: last_used_at is refreshed at most this often, so that using a token is not a write per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)

#: How long Redis vouches for a gateway token before Postgres is asked again. Revocation
#: deletes the entry at once; this bounds the damage if that delete was lost.
GATEWAY_TOKEN_CACHE_SECONDS = 300


@transaction.atomic
def token_create(*, token: Token, actor: Actor) -> str:
    """Save ``token`` with a new secret and audit it; return the secret (shown once)."""
    secret = token.issue_secret()
    token.full_clean()
    token.save()
    audit_record(
        actor=actor,
        action=AuditAction.TOKEN_CREATE,
        obj=token,
        after={"name": token.name, "prefix": token.prefix, **_owner(token)},
    )
    return secret


@transaction.atomic
def token_revoke(*, token: Token, actor: Actor, reason: str = "") -> None:
    """Revoke ``token`` from now on; audited. Revoking twice changes nothing."""
    if not token.is_active:
        return
    chain_lock()  # before the token's row is written (limits.core.chain: lock order)
    token.revoke()
    token.save(update_fields=["revoked_at"])
    if isinstance(token, GatewayToken):
        key = gateway_token_key(token.key_hash)
        transaction.on_commit(lambda: _forget_gateway_token(key))
    shown = {"name": token.name, "prefix": token.prefix, **_owner(token)}
    audit_record(
        actor=actor,
        action=AuditAction.TOKEN_REVOKE,
        obj=token,
        before={**shown, "revoked_at": None},
        after={**shown, "revoked_at": token.revoked_at},
        reason=reason,
    )


def _forget_gateway_token(key: str) -> None:
    """Drop a revoked token from Redis and from this process's poll window."""
    redis_client().delete(key)
    poll_window_reset()


def _owner(token: Token) -> dict[str, str]:
    if not isinstance(token, ApiToken):
        return {}
    return {"user": token.user.get_username() if token.user is not None else None}


def api_token_authenticate(secret: str) -> ApiToken | None:
    """The active API token with this secret, or None; records when it was last used."""
    token = (
        ApiToken.objects.select_related("user")
        .filter(key_hash=hash_secret(secret), revoked_at__isnull=True)
        .first()
    )
    if token is None or token.user is None or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def gateway_token_authenticate(secret: str) -> str | None:
    """The prefix of the active gateway token with this secret, or None.

    Answers from Redis when it can, so a gateway's poll costs no database query;
    a miss is checked in Postgres (and records ``last_used_at``) then cached.
    """
    key = gateway_token_key(hash_secret(secret))
    cached = redis_client().get(key)
    if cached is not None:
        return cached.decode()
    token = GatewayToken.objects.filter(
        key_hash=hash_secret(secret), revoked_at__isnull=True
    ).first()
    if token is None:
        return None
    GatewayToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    redis_client().set(key, token.prefix, ex=GATEWAY_TOKEN_CACHE_SECONDS)
    return token.prefix
