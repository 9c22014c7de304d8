"""Why a publish is refused: the working copy's problems, or nothing to publish.

Re-exported by ``limits.publishing.services``, where callers import them from.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError

from sluice import model as sluice_model
from sluice.model import Problem

__all__ = ["InvalidRules", "NothingToPublish", "problem_text"]


class InvalidRules(ValidationError):
    """The working copy cannot be published; ``problems`` say which object and why."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__([problem_text(p) for p in problems], code="invalid_rules")


class NothingToPublish(ValidationError):
    """The rules are those of the version they would replace, and no scheduled
    version would be superseded (cancelling one is a change worth publishing)."""

    def __init__(self, version: int) -> None:
        super().__init__(
            f"Nothing to publish: the rules are the same as version {version}. "
            "Change a rule first.",
            code="unchanged",
        )


def problem_text(problem: Problem) -> str:
    """``policy tier pro · search, limit 1, burst: burst 1 is below the request cost 5``."""
    if problem.kind != "policy":
        return f"{problem.kind} {problem.key}, {problem.field}: {problem.message}"
    scope, _, route = problem.key.rstrip("~").partition("/")
    where = sluice_model.Policy(
        scope=scope, route=route, limits=(), expires_at=None
    ).describe() + (" (override)" if problem.key.endswith("~") else "")
    field = problem.field
    if field.startswith("limits["):
        index, _, rest = field[len("limits[") :].partition("]")
        field = f"limit {int(index) + 1}" + (f", {rest.lstrip('.')}" if rest else "")
    return f"policy {where}, {field}: {problem.message}"
