"""Who changed what: the Actor of every service call, and the one audited write.

Every service that changes rows goes through the same three steps, inside its
transaction: :func:`row_lock` (lock the stored row, check the caller's revision,
keep its audited state), the change itself, then :func:`audited_save` or
:func:`audited_delete` (bump the revision, write, append the audit entry with
before and after). :func:`audit_record` appends entries that are not a row's
change (a publish, a token issued). Every entry is linked into the hash chain
(``limits.core.chain``) as it is appended.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, transaction
from django.utils import timezone

from limits.choices import AuditAction
from limits.core.chain import chain_head, chain_lock, entry_seal
from limits.core.checkpoints import checkpoint_due
from limits.models import AuditEntry
from sluice.identity import TrustedProxies, client_ip

__all__ = [
    "Actor",
    "RowDeleted",
    "StaleRevision",
    "audit_record",
    "audited_delete",
    "audited_save",
    "request_ip",
    "row_lock",
    "serialize_for_audit",
]

Serializer = Callable[[Any], dict[str, Any]]

SYSTEM = "system"


class StaleRevision(Exception):
    """The object changed since the caller read it (HTTP 412)."""

    def __init__(self, obj: models.Model, current: int) -> None:
        super().__init__(
            f"This {obj._meta.verbose_name} changed since you read it (it is at revision "
            f"{current} now): fetch it again and retry."
        )
        self.current = current


class RowDeleted(ObjectDoesNotExist):
    """The object was deleted since the caller read it (HTTP 404, never a 500)."""

    def __init__(self, obj: models.Model) -> None:
        super().__init__(
            f"This {obj._meta.verbose_name} was deleted meanwhile (by another request)."
        )


@dataclass(frozen=True, slots=True)
class Actor:
    """The person or process behind a change, and where the change came from."""

    user: Any = None  #: a Django user, or None for the system (Celery, commands)
    request_id: str = ""
    ip: str | None = None
    name: str = ""  #: for the system: which process, e.g. "celery beat"

    @classmethod
    def system(cls, name: str = SYSTEM) -> Actor:
        return cls(name=name)

    @classmethod
    def from_request(cls, request: Any) -> Actor:
        """The signed-in user of ``request``, its request id and client address."""
        user = (
            request.user
            if getattr(request, "user", None) and request.user.is_authenticated
            else None
        )
        return cls(
            user=user,
            request_id=getattr(request, "id", ""),
            ip=request_ip(request.META),
        )

    @property
    def username(self) -> str:
        return (
            self.user.get_username() if self.user is not None else (self.name or SYSTEM)
        )


def request_ip(meta: Mapping[str, Any]) -> str | None:
    """The client address of a request to the control plane: ``REMOTE_ADDR``, or the
    ``X-Forwarded-For`` hop before ``SLUICE_TRUSTED_PROXIES`` (addresses or networks).

    Decided by the client's own :func:`sluice.identity.client_ip`, so a proxy list
    means the same to the audit log as to every gateway.
    """
    return client_ip(
        meta.get("REMOTE_ADDR") or None,
        meta.get("HTTP_X_FORWARDED_FOR") or None,
        _trusted_proxies(tuple(settings.SLUICE_TRUSTED_PROXIES)),
    )


@functools.lru_cache(maxsize=4)
def _trusted_proxies(proxies: tuple[str, ...]) -> TrustedProxies:
    return TrustedProxies(proxies)


def serialize_for_audit(
    obj: models.Model, *, leave_out: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The object's fields as JSON values; relations by slug; a policy with its limits;
    without the fields ``leave_out`` names (a cache, say, that is no one's change)."""
    data: dict[str, Any] = {}
    for field in obj._meta.concrete_fields:
        if field.name in ("created_at", "updated_at", *leave_out):
            continue
        if field.is_relation:
            related = getattr(obj, field.name)
            data[field.name] = getattr(related, "slug", related.pk) if related else None
        else:
            data[field.name] = field.value_from_object(obj)
    if hasattr(obj, "limits") and obj.pk:
        # Read from the database, never a prefetched list: "after" is what was written.
        stored = obj.limits.model._default_manager.filter(policy_id=obj.pk)
        data["limits"] = [serialize_for_audit(limit) for limit in stored]
        for limit in data["limits"]:
            limit.pop("policy", None)
    return json.loads(json.dumps(data, cls=DjangoJSONEncoder))


def audit_record(
    *,
    actor: Actor,
    action: AuditAction,
    obj: models.Model | None = None,
    object_type: str = "",
    object_id: str = "",
    object_repr: str = "",
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    reason: str = "",
) -> AuditEntry:
    """Append one entry to the audit log, linked to the one before it; call it inside
    the transaction of the change (the chain stays locked until it commits)."""
    if obj is not None:
        object_type = object_type or obj._meta.model_name
        object_id = object_id or str(obj.pk)
        object_repr = object_repr or str(obj)[:300]
    entry = AuditEntry(
        created_at=timezone.now(),
        action=str(action),
        actor=actor.username,
        actor_id=actor.user.pk if actor.user is not None else None,
        request_id=actor.request_id,
        source_ip=_stored_ip(actor.ip),
        object_type=object_type,
        object_id=object_id,
        object_repr=object_repr,
        before=_as_stored(before),
        after=_as_stored(after),
        reason=reason,
    )
    with transaction.atomic(savepoint=False):  # no savepoint's two round trips
        chain_lock()
        entry.prev_hash = chain_head()
        entry_seal(entry)
        entry.save(force_insert=True)
    checkpoint_due(entry)
    return entry


def _as_stored(value: dict[str, Any] | None) -> Any:
    """``value`` as it reads back from the JSON column, so its hash is the stored one's."""
    return (
        None if value is None else json.loads(json.dumps(value, cls=DjangoJSONEncoder))
    )


def _stored_ip(ip: str | None) -> str | None:
    """The address as Postgres prints it back (IPv6 compressed, lower case)."""
    return AuditEntry._meta.get_field("source_ip").to_python(ip) if ip else None


def row_lock(
    obj: models.Model,
    *,
    expected_revision: int | None = None,
    serialize: Serializer = serialize_for_audit,
) -> dict[str, Any] | None:
    """Lock the stored row of ``obj`` until the transaction ends; return its audited
    state, as stored (None for an object not saved yet).

    Raise :class:`StaleRevision` when ``expected_revision`` is given and the stored
    row is at another one (someone else changed it since the caller read it), and
    :class:`RowDeleted` when the row is gone (someone deleted it meanwhile).
    """
    if obj.pk is None:
        return None
    chain_lock()  # before the row lock: every audited write locks in this order
    stored = type(obj)._default_manager.select_for_update().filter(pk=obj.pk).first()
    if stored is None:  # deleted by another transaction since the caller read it
        raise RowDeleted(obj)
    if expected_revision is not None and stored.revision != expected_revision:
        raise StaleRevision(obj, stored.revision)
    return serialize(stored)


def audited_save(
    obj: models.Model,
    *,
    actor: Actor,
    before: dict[str, Any] | None,
    reason: str = "",
    action: AuditAction | None = None,
    serialize: Serializer = serialize_for_audit,
    write: Callable[[], Any] | None = None,
) -> AuditEntry:
    """Save ``obj`` (``write``, when saving it takes more than ``obj.save()``) and audit
    the change from ``before`` (what :func:`row_lock` returned) to its new state.

    An existing row's revision is bumped first. The action is create or update
    unless given.
    """
    if before is not None and hasattr(obj, "revision"):
        obj.revision += 1
    (write or obj.save)()
    return audit_record(
        actor=actor,
        action=action
        or (AuditAction.UPDATE if before is not None else AuditAction.CREATE),
        obj=obj,
        before=before,
        after=serialize(obj),
        reason=reason,
    )


def audited_delete(
    obj: models.Model,
    *,
    actor: Actor,
    before: dict[str, Any] | None,
    reason: str = "",
) -> AuditEntry:
    """Delete ``obj`` and audit it with its last state ``before``."""
    shown, pk = str(obj)[:300], obj.pk
    obj.delete()
    return audit_record(
        actor=actor,
        action=AuditAction.DELETE,
        object_type=obj._meta.model_name or "",
        object_id=str(pk),
        object_repr=shown,
        before=before,
        reason=reason,
    )
