"""Reads of published versions that more than one caller needs (admin, API, bundle,
changelog, explain): the active version is told here and nowhere else."""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db.models import Max, QuerySet, Subquery
from django.db.models.fields.json import KeyTransform

from limits.diff.diffing import EMPTY_RULES, RulesDiff, rules_diff
from limits.models import Snapshot
from limits.rules.compiling import rules_compile, rules_require_routable
from sluice import model as sluice_model
from sluice.model import Rules

__all__ = [
    "ACTIVE",
    "WORKING_COPY",
    "rules_of",
    "snapshot_active_version",
    "snapshot_diff",
    "snapshot_document",
    "snapshot_get_active",
    "snapshot_in_force_at",
    "snapshot_list",
    "snapshot_rules",
    "snapshot_scheduled",
]

#: Heavy columns that lists never need.
_HEAVY = ("content", "content_gzip", "diff")
_PARSED: OrderedDict[str, sluice_model.Snapshot] = OrderedDict()
_PARSED_MAX = 4


def _activated() -> QuerySet[Snapshot]:
    """Versions that have taken effect; the highest of them is the active one."""
    return Snapshot.objects.filter(activated_at__isnull=False)


def snapshot_get_active(*, light: bool = False) -> Snapshot | None:
    """The version gateways enforce now: the highest that has been activated.

    Its diff and gzip bytes are read only if used (a first version's diff holds
    every change: 120,000 at 100,000 tenants); with ``light``, its content too."""
    rows = _activated().defer("content_gzip", "diff")
    return (rows.defer(*_HEAVY) if light else rows).order_by("-version").first()


def snapshot_in_force_at(moment: datetime) -> Snapshot | None:
    """The version gateways enforced at ``moment`` (None before the first one took effect).

    Gateways switch at a version's effective time by themselves, so this is the
    highest version effective by then that was not cancelled before taking
    effect (superseded without ever being activated).
    """
    return (
        Snapshot.objects.filter(effective_at__lte=moment)
        .exclude(activated_at__isnull=True, superseded_at__isnull=False)
        .defer("content_gzip", "diff")
        .order_by("-version")
        .first()
    )


def snapshot_active_version() -> int | None:
    """The number of the active version (None before the first publish); one query."""
    return _activated().aggregate(version=Max("version"))["version"]


def snapshot_scheduled() -> QuerySet[Snapshot]:
    """Versions waiting to take effect, in the order they will (effective time, version)."""
    return Snapshot.objects.filter(
        activated_at__isnull=True, superseded_at__isnull=True
    ).order_by("effective_at", "version")


def snapshot_list() -> QuerySet[Snapshot]:
    """Every version, newest first, without its bytes, annotated with ``active_version``
    (so that ``row.status(row.active_version)`` costs no query) and ``change_counts``."""
    active = _activated().order_by("-version").values("version")[:1]
    return (
        Snapshot.objects.defer(*_HEAVY)
        .annotate(
            active_version=Subquery(active),
            change_counts=KeyTransform("counts", "diff"),
        )
        .order_by("-version")
    )


def snapshot_document(row: Snapshot) -> sluice_model.Snapshot:
    """The parsed document of a stored version; parsed once per process (rows never change)."""
    cached = _PARSED.get(row.hash)
    if cached is None:
        # validated when it was published, and its hash is checked on the bytes
        cached = sluice_model.Snapshot.from_bytes(bytes(row.content), canonical=True)
        _PARSED[row.hash] = cached
        while len(_PARSED) > _PARSED_MAX:
            _PARSED.popitem(last=False)
    return cached


def snapshot_rules(row: Snapshot) -> sluice_model.Rules:
    """The rules of a stored version (parsed once per process and version)."""
    return snapshot_document(row).rules


#: Names :func:`snapshot_diff` accepts besides version numbers.
ACTIVE, WORKING_COPY = "active", "working"


def snapshot_diff(
    *, old: int | str = ACTIVE, new: int | str = WORKING_COPY
) -> RulesDiff:
    """Diff two versions by number, or ``"active"`` and ``"working"`` (the working copy).

    Raise ValidationError for a version that does not exist.
    """
    return rules_diff(rules_of(old), rules_of(new) or EMPTY_RULES, at=effective_of(new))


def effective_of(ref: int | str) -> datetime | None:
    """When the rules a diff side names apply: a version's effective time; None (now)
    for the active version and the working copy."""
    if ref in (ACTIVE, WORKING_COPY):
        return None
    return (
        Snapshot.objects.filter(version=ref)
        .values_list("effective_at", flat=True)
        .first()
    )


def rules_of(ref: int | str) -> Rules | None:
    """The rules a diff side names; None for "active" before the first publish."""
    if ref == WORKING_COPY:
        return rules_require_routable(rules_compile())
    if ref == ACTIVE:
        row = snapshot_get_active(light=True)
    else:
        row = Snapshot.objects.defer("content_gzip", "diff").filter(version=ref).first()
        if row is None:
            raise ValidationError(f"There is no version {ref}.")
    return snapshot_rules(row) if row else None
