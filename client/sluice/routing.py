"""Route path patterns (``/v1/orders/{id}``) and the table that matches requests to routes.

The control plane validates patterns with :func:`parse_path_pattern` and gateways
match with :class:`RouteTable`, so a pattern that publishes is a pattern that
matches. Matching walks a segment tree: its cost depends on the path's depth,
not on how many routes exist.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from .rules import Route

__all__ = ["HTTP_METHODS", "PatternError", "RouteTable", "parse_path_pattern"]

HTTP_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")

_PARAM = re.compile(r"^\{([a-z_][a-z0-9_]*)\}$")
_LITERAL = re.compile(r"^[A-Za-z0-9._~!$&'()*+,;=:@%-]+$")


class PatternError(ValueError):
    """A path pattern that cannot be parsed; the message says why."""


def parse_path_pattern(pattern: str) -> tuple[str | None, ...]:
    """Split a pattern into segments: a literal string, or None for a ``{param}``.

    Raise PatternError for a pattern that does not start with ``/``, has an empty
    segment, a malformed or repeated parameter, or characters not allowed in a path.
    """
    if not pattern.startswith("/"):
        raise PatternError("must start with '/'")
    if pattern == "/":
        return ()
    parts = pattern[1:].split("/")
    segments: list[str | None] = []
    names: set[str] = set()
    for index, part in enumerate(parts, start=1):
        segments.append(_parse_segment(part, index, names))
    return tuple(segments)


def _parse_segment(part: str, index: int, names: set[str]) -> str | None:
    if not part:
        raise PatternError(f"segment {index} is empty (double or trailing '/')")
    param = _PARAM.match(part)
    if param:
        if param.group(1) in names:
            raise PatternError(f"parameter {{{param.group(1)}}} appears twice")
        names.add(param.group(1))
        return None
    if "{" in part or "}" in part:
        raise PatternError(
            f"segment {index} '{part}' is not a parameter like {{id}} "
            "(a parameter takes a whole segment, lower-case letters, digits and _)"
        )
    if not _LITERAL.match(part):
        raise PatternError(
            f"segment {index} '{part}' has characters not allowed in a path"
        )
    return part


@dataclass(slots=True)
class _Node:
    literals: dict[str, _Node] = field(default_factory=dict)
    param: _Node | None = None
    routes: dict[str, Route] = field(default_factory=dict)  # method -> route


class RouteTable:
    """Match (method, path) to a route; literal segments win over parameters."""

    def __init__(self, routes: Iterable[Route]) -> None:
        self._root = _Node()
        for route in routes:
            self._add(route)

    def _add(self, route: Route) -> None:
        node = self._root
        for segment in parse_path_pattern(route.path):
            if segment is None:
                node.param = node.param or _Node()
                node = node.param
            else:
                node = node.literals.setdefault(segment, _Node())
        for method in route.methods:
            other = node.routes.get(method)
            if other is not None:
                raise PatternError(
                    f"{method} {route.path} is claimed by both '{other.slug}' and '{route.slug}'"
                )
            node.routes[method] = route

    def match(self, method: str | None, path: str) -> Route | None:
        """Return the route for a request, or None; HEAD falls back to GET.

        Without a method (a gateway that sends the path alone), the path decides
        when it matches exactly one route, whatever that route's methods; a path
        that several routes share matches none, since only the method could
        choose between them (:meth:`candidates` names them).
        """
        leaves = self._leaves(path)
        if method is None:
            found = _distinct(leaves)
            return found[0] if len(found) == 1 else None
        for leaf in leaves:  # most literal first
            route = leaf.routes.get(method)
            if route is None and method == "HEAD":
                route = leaf.routes.get("GET")
            if route is not None:
                return route
        return None

    def candidates(self, path: str) -> tuple[Route, ...]:
        """Every route whose pattern matches ``path``, whatever its methods, most literal first."""
        return _distinct(self._leaves(path))

    def _leaves(self, path: str) -> list[_Node]:
        segments = path.strip("/").split("/") if path.strip("/") else []
        leaves: list[_Node] = []
        _collect(self._root, segments, 0, leaves)
        return leaves


def _distinct(leaves: list[_Node]) -> tuple[Route, ...]:
    """The routes of ``leaves`` in order, each once (a route claims one leaf per method)."""
    return tuple({id(r): r for leaf in leaves for r in leaf.routes.values()}.values())


def _collect(node: _Node, segments: list[str], index: int, leaves: list[_Node]) -> None:
    """Append every leaf matching ``segments``, literal branches before parameters."""
    if index == len(segments):
        if node.routes:
            leaves.append(node)
        return
    child = node.literals.get(segments[index])
    if child is not None:
        _collect(child, segments, index + 1, leaves)
    if node.param is not None:
        _collect(node.param, segments, index + 1, leaves)
