"""The POSIX TZ rule of an IANA time zone, read from the machine's tzdata.

A snapshot carries each zone its tenants' calendars name as a rule
(``rules.zones``), so every gateway of a fleet computes the same calendar
boundaries whatever tzdata it has. Whoever writes a snapshot (the control
plane's compile, :mod:`.rulesfile` reading a rules file) finds the rule here:
the footer of the zone's TZif file (version 2 and later), its last line, e.g.
``CET-1CEST,M3.5.0,M10.5.0/3`` for Europe/Paris. It states the zone's current
rules, which is what boundaries from now on need.
"""

from __future__ import annotations

import functools
import importlib.resources
import zoneinfo
from pathlib import Path

__all__ = ["zone_rule"]


@functools.cache
def zone_rule(name: str) -> str:
    """The POSIX TZ rule of the IANA zone ``name``; LookupError when no TZif file of
    that name (version 2 or later) is on zoneinfo's search path or in tzdata."""
    data = _tzif(name)
    if data is None or not data.startswith(b"TZif") or data[4:5] in (b"\0", b""):
        raise LookupError(name)
    # Version 2+ files end with "\n<rule>\n".
    rule = data.rstrip(b"\n").rpartition(b"\n")[2]
    if not rule or not rule.isascii() or not rule.decode().isprintable():
        raise LookupError(name)
    return rule.decode()


def _tzif(name: str) -> bytes | None:
    """The bytes of the zone's TZif file, where ``zoneinfo`` would look for it."""
    parts = name.split("/")
    if not name or name.startswith("/") or "\\" in name or {"", ".", ".."} & set(parts):
        return None
    for root in zoneinfo.TZPATH:
        path = Path(root, *parts)
        if path.is_file():
            return path.read_bytes()
    try:  # the tzdata package: zoneinfo's fallback (absent on Debian machines)
        package = ".".join(["tzdata", "zoneinfo", *parts[:-1]])
        return importlib.resources.files(package).joinpath(parts[-1]).read_bytes()
    except (ImportError, OSError, ValueError):
        return None
