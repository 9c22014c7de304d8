"""Who changed what: the Actor of every service call and the audit records it leaves."""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models

from limits.choices import AuditAction
from limits.models import AuditEntry

__all__ = ["Actor", "audit_record", "client_ip", "serialize_for_audit"]

SYSTEM = "system"


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
            user=user, request_id=getattr(request, "id", ""), ip=client_ip(request.META)
        )

    @property
    def username(self) -> str:
        return (
            self.user.get_username() if self.user is not None else (self.name or SYSTEM)
        )


def client_ip(meta: dict[str, Any]) -> str | None:
    """The client address: REMOTE_ADDR, or the X-Forwarded-For hop before trusted proxies."""
    remote = meta.get("REMOTE_ADDR") or None
    trusted = set(settings.SLUICE_TRUSTED_PROXIES)
    if remote not in trusted:
        return _valid_ip(remote)
    hops = [
        hop.strip()
        for hop in meta.get("HTTP_X_FORWARDED_FOR", "").split(",")
        if hop.strip()
    ]
    for hop in reversed(hops):
        if hop not in trusted:
            return _valid_ip(hop)
    return _valid_ip(remote)


def _valid_ip(value: str | None) -> str | None:
    try:
        return str(ipaddress.ip_address(value)) if value else None
    except ValueError:
        return None


def serialize_for_audit(obj: models.Model) -> dict[str, Any]:
    """The object's fields as JSON values; relations by slug; a policy with its limits."""
    data: dict[str, Any] = {}
    for field in obj._meta.concrete_fields:
        if field.name in ("created_at", "updated_at"):
            continue
        if field.is_relation:
            related = getattr(obj, field.name)
            data[field.name] = getattr(related, "slug", related.pk) if related else None
        else:
            data[field.name] = field.value_from_object(obj)
    if hasattr(obj, "limits") and obj.pk:
        data["limits"] = [serialize_for_audit(limit) for limit in obj.limits.all()]
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
    """Append one entry to the audit log; call it inside the transaction of the change."""
    if obj is not None:
        object_type = object_type or obj._meta.model_name
        object_id = object_id or str(obj.pk)
        object_repr = object_repr or str(obj)[:300]
    return AuditEntry.objects.create(
        action=action,
        actor=actor.username,
        actor_id=actor.user.pk if actor.user is not None else None,
        request_id=actor.request_id,
        source_ip=actor.ip,
        object_type=object_type,
        object_id=object_id,
        object_repr=object_repr,
        before=before,
        after=after,
        reason=reason,
    )
