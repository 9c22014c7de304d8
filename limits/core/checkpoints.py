"""Signed checkpoints of the audit chain's head, written out of the database.

A checkpoint says "the log had ``count`` entries, the last one ``entry`` of hash
``head``", signed with the control plane's Ed25519 key (``limits.core.signing``),
which anyone can check with the published public keys. Checkpoints go where the
database's writers cannot reach: appended as JSON lines to
``SLUICE_AUDIT_CHECKPOINT_FILE`` (when set), and logged as an ``audit.checkpoint``
line on stdout for a log shipper. One is taken every
``SLUICE_AUDIT_CHECKPOINT_EVERY`` entries (an id that is a multiple of it), every
``SLUICE_AUDIT_CHECKPOINT_INTERVAL`` seconds by Celery beat, and by
``manage.py audit_checkpoint``. ``manage.py audit_verify --checkpoint FILE``
then proves that the chain still reaches each one: nothing cut off since.

Signed bytes: ``b"sluice-audit-checkpoint\\n"`` and the canonical JSON of the
checkpoint without ``signature`` (the prefix keeps a checkpoint from ever passing
for a gateway bundle, which the same key signs).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from limits.core.signing import public_keyring, signing_key
from limits.models import AuditEntry
from sluice.model import canonical_json
from sluice.signing import KeyRing, key_id

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "checkpoint_due",
    "checkpoint_take",
    "checkpoint_write",
    "checkpoints_read",
]

logger = logging.getLogger("sluice.audit")

_CONTEXT = b"sluice-audit-checkpoint\n"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read, or a checkpoint whose signature fails."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The head of the audit chain at one moment, signed."""

    entry: int  #: the id of the last entry
    count: int  #: entries up to and including it
    head: str  #: its hash
    taken_at: str  #: ISO 8601, UTC
    kid: str  #: the signing key's id
    signature: str = ""  #: base64 Ed25519 over the context and the other fields

    def signed_bytes(self) -> bytes:
        fields = asdict(self)
        del fields["signature"]
        return _CONTEXT + canonical_json(fields)

    def to_line(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def checkpoint_take() -> Checkpoint | None:
    """A signed checkpoint of the chain as committed now; None while the log is empty."""
    last = AuditEntry.objects.order_by("-id").values("id", "hash").first()
    if last is None:
        return None
    key = signing_key()
    unsigned = Checkpoint(
        entry=last["id"],
        count=AuditEntry.objects.filter(id__lte=last["id"]).count(),
        head=last["hash"],
        taken_at=timezone.now().isoformat(),
        kid=key_id(key),
    )
    signature = base64.b64encode(key.sign(unsigned.signed_bytes())).decode("ascii")
    return Checkpoint(**{**asdict(unsigned), "signature": signature})


def checkpoint_write(checkpoint: Checkpoint) -> None:
    """Append ``checkpoint`` to the checkpoint file (when set) and log it."""
    line = checkpoint.to_line()
    path = settings.SLUICE_AUDIT_CHECKPOINT_FILE
    if path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
    logger.info("audit.checkpoint: %s", line)


def checkpoint_due(entry: AuditEntry) -> None:
    """After the commit of every ``SLUICE_AUDIT_CHECKPOINT_EVERY``-th entry (by id),
    write a checkpoint; a failure to write is logged, never the writer's error."""
    every = settings.SLUICE_AUDIT_CHECKPOINT_EVERY
    if every > 0 and entry.pk % every == 0:
        transaction.on_commit(_write_now)


def _write_now() -> None:
    try:
        checkpoint = checkpoint_take()
        if checkpoint is not None:
            checkpoint_write(checkpoint)
    except Exception:  # the change is committed: a lost checkpoint is only a log line
        logger.exception("audit.checkpoint_failed")


def checkpoints_read(path: Path, keys: KeyRing | None = None) -> list[Checkpoint]:
    """Every checkpoint of a file, each signature checked against ``keys`` (the
    published ones by default); CheckpointError naming the line that fails."""
    ring = public_keyring() if keys is None else keys
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    checkpoints = [
        _verified(line, ring, f"{path}:{number}")
        for number, line in enumerate(lines, 1)
        if line.strip()
    ]
    if not checkpoints:
        raise CheckpointError(f"{path}: no checkpoint in it")
    return checkpoints


def _verified(line: str, ring: KeyRing, where: str) -> Checkpoint:
    try:
        data: Any = json.loads(line)
        checkpoint = Checkpoint(**data)
        signature = base64.b64decode(checkpoint.signature, validate=True)
        ring.key(checkpoint.kid).verify(signature, checkpoint.signed_bytes())
    except KeyError:
        raise CheckpointError(f"{where}: signed with an unknown key") from None
    except (ValueError, TypeError, binascii.Error, InvalidSignature):
        raise CheckpointError(
            f"{where}: not a checkpoint signed by the control plane"
        ) from None
    return checkpoint
