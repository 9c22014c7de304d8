"""One route per method and path, kept by the database (``limits.models.RouteClaim``).

The services check routes before saving them, but two requests saving at the
same moment each check before the other has written. The claim table's unique
constraint is the guard they cannot both pass: it is deferred (so one change may
swap two routes' paths), and :func:`route_claims_checked` checks it when the
writes are done, turning a collision into :class:`RouteClaimed`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction

from limits.models import RouteClaim

__all__ = ["ROUTE_CLAIM_CONSTRAINT", "RouteClaimed", "route_claims_checked"]

ROUTE_CLAIM_CONSTRAINT = "limits_routeclaim_unique_method_path_shape"
#: PostgreSQL's detail of a unique violation: "Key (method, path_shape)=(GET, /v1/x) ..."
_KEY = re.compile(r"=\((?P<method>[^,]+), (?P<shape>.*)\) already exists")


class RouteClaimed(ValidationError):
    """Routes refused by the database: another route claims one of their methods and
    paths (saved at the same moment, or by a change published meanwhile). The API
    answers 409 with this message; the admin shows it on the form."""


@contextmanager
def route_claims_checked() -> Iterator[None]:
    """Run the route writes of the block, then check their claims; raise
    RouteClaimed (nothing of the block written) when another route holds one."""
    try:
        with transaction.atomic():
            yield
            with connection.cursor() as cursor:
                cursor.execute(f"SET CONSTRAINTS {ROUTE_CLAIM_CONSTRAINT} IMMEDIATE")
                cursor.execute(f"SET CONSTRAINTS {ROUTE_CLAIM_CONSTRAINT} DEFERRED")
    except IntegrityError as exc:
        if _constraint(exc) != ROUTE_CLAIM_CONSTRAINT:
            raise
        raise RouteClaimed({"path_pattern": _message(exc)}) from exc


def _constraint(exc: IntegrityError) -> str | None:
    diag = getattr(exc.__cause__, "diag", None)
    return getattr(diag, "constraint_name", None)


def _message(exc: IntegrityError) -> str:
    detail = getattr(getattr(exc.__cause__, "diag", None), "message_detail", "") or ""
    found = _KEY.search(detail)
    if found is None:
        return "Another route claims one of these methods and paths."
    method, shape = found["method"], found["shape"]
    holder = RouteClaim.objects.filter(method=method, path_shape=shape).first()
    held_by = f" by route '{holder.route.slug}'" if holder else ""
    return (
        f"{method} {shape} is claimed{held_by} already (saved at the same moment as "
        "this change): one method and path belong to one route. Reload and retry."
    )
