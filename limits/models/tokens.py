"""Secrets that machines present: API tokens (automation acting as a user) and gateway tokens.

Only a SHA-256 of each secret is stored; the secret is shown once, at creation.
"""

import hashlib
import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone

__all__ = ["ApiToken", "GatewayToken", "hash_secret"]


def hash_secret(secret: str) -> str:
    """The stored form of a token secret (tokens are long and random: no salt or KDF needed)."""
    return hashlib.sha256(secret.encode()).hexdigest()


class Token(models.Model):
    """What both kinds of token share: a name, a visible prefix, a hash, and a revocation time."""

    PREFIX = ""

    name = models.CharField(
        max_length=100, help_text="What uses it, e.g. 'ci-publisher' or 'gw-eu-1'."
    )
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def issue_secret(self) -> str:
        """Give the token a fresh secret; return it (the only time it is seen in clear)."""
        secret = f"{self.PREFIX}{secrets.token_urlsafe(32)}"
        self.prefix = secret[: len(self.PREFIX) + 8]
        self.key_hash = hash_secret(secret)
        return secret

    def revoke(self) -> None:
        self.revoked_at = timezone.now()


class ApiToken(Token):
    """Lets automation (CI, scripts) call the management API as ``user``, with that user's role.

    A token outlives its user: deleting the user revokes it (audited) and leaves it
    without an owner, so the audit log's token entries keep pointing at a row.
    """

    PREFIX = "slu_"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,  # not blank: a token is issued to someone
        related_name="api_tokens",
        help_text="Empty once the user was deleted (the token is revoked then).",
    )

    class Meta(Token.Meta):
        verbose_name = "API token"


class GatewayToken(Token):
    """Lets a gateway fetch snapshots and report its status; it can do nothing else."""

    PREFIX = "slg_"

    class Meta(Token.Meta):
        verbose_name = "gateway token"
