"""Tenants' time zones: which IANA names the control plane takes, and the snapshot's
``zones`` (the POSIX TZ rule of each zone a calendar names, ``sluice.zonefiles``)."""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterable

from django.core.exceptions import ValidationError

from sluice.model import Calendar
from sluice.zonefiles import zone_rule

__all__ = ["UTC", "validate_time_zone", "zone_rule", "zones_of"]

UTC = "UTC"


def validate_time_zone(value: str) -> None:
    """Refuse what is not an IANA time zone name (``Europe/Paris``) that zoneinfo
    knows and whose rule a snapshot can carry."""
    try:
        zoneinfo.ZoneInfo(value)
        zone_rule(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, LookupError, OSError):
        raise ValidationError(
            "%(value)s is not a known time zone: use an IANA name such as "
            "Europe/Paris, America/New_York or UTC.",
            code="invalid_time_zone",
            params={"value": repr(value)},
        ) from None


def zones_of(calendars: Iterable[Calendar]) -> dict[str, str]:
    """The snapshot's ``zones``: the rule of every zone ``calendars`` name, UTC left
    out as calendars leave it out (every gateway knows its rule)."""
    names = {calendar.zone for calendar in calendars} - {UTC}
    return {name: zone_rule(name) for name in sorted(names)}
