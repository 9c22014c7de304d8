"""Rules files as YAML: written byte-stable, read back with the line of every member.

:func:`rules_yaml` writes a rule set's documents in one fixed order and layout
(mappings by slug, limits one per line, defaults left out), so the same rules
give the same bytes on every machine and a change reads as a small diff in git.
:func:`yaml_read` parses a file and returns its data with the line of every
path in it, and refuses what YAML would silently accept (a key given twice) and
what would let a few bytes cost a worker seconds and memory (anchors and aliases,
whose expansion grows tenfold per line: the "billion laughs").
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import yaml

from limits.rules.documents import (
    Document,
    RuleDocuments,
    limit_document,
    limit_value,
)
from limits.rules.schema import FORMAT

__all__ = ["HEADER", "LineProblem", "YamlData", "rules_yaml", "yaml_read"]

HEADER = (
    "# Sluice rate-limit rules (format: docs/rules-as-code.md, schema:\n"
    "# docs/rules.schema.json). Review a change with `manage.py rules diff FILE`,\n"
    "# propose it with `manage.py rules apply FILE`.\n"
)

Path = tuple[str | int, ...]


class _FlowMap(dict):
    """A mapping written on one line: ``{dimension: tenant, rate: 5, ...}``."""


class _FlowList(list):
    """A list written on one line: ``[GET, HEAD]``."""


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, with one-line limits and lists of words."""


_Dumper.add_representer(
    _FlowMap,
    lambda dumper, data: dumper.represent_mapping(
        "tag:yaml.org,2002:map", list(data.items()), flow_style=True
    ),
)
_Dumper.add_representer(
    _FlowList,
    lambda dumper, data: dumper.represent_sequence(
        "tag:yaml.org,2002:seq", data, flow_style=True
    ),
)


def rules_yaml(docs: RuleDocuments) -> str:
    """The rules file of ``docs``: the same documents always give the same text."""
    data = {
        "format": FORMAT,
        "tiers": {
            slug: _tier(doc)
            for slug, doc in sorted(
                docs.tiers.items(), key=lambda item: (item[1]["position"], item[0])
            )
        },
        "tenants": {slug: _tenant(docs.tenants[slug]) for slug in sorted(docs.tenants)},
        "routes": {slug: _route(docs.routes[slug]) for slug in sorted(docs.routes)},
        "policies": [
            _policy(docs.policies[key])
            for key in sorted(docs.policies, key=_policy_order)
        ],
    }
    body = yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=10**6,
    )
    return HEADER + body


def _policy_order(key: str) -> tuple:
    """Default first, then tiers, then tenants; all routes before single routes."""
    override = key.endswith("~")
    scope, _, route = key.rstrip("~").partition("/")
    kind, _, subject = scope.partition(":")
    rank = {"default": 0, "tier": 1, "tenant": 2}[kind]
    return (rank, subject, route != "*", route, override)


def _tier(doc: Document) -> dict:
    out: dict[str, Any] = {"name": doc["name"], "position": doc["position"]}
    if doc.get("description"):
        out["description"] = doc["description"]
    return out


def _tenant(doc: Document) -> dict:
    out: dict[str, Any] = {"name": doc["name"], "tier": doc["tier"]}
    if doc.get("contacts"):
        out["contacts"] = _FlowList(doc["contacts"])
    return out


def _route(doc: Document) -> dict:
    out: dict[str, Any] = {
        "methods": _FlowList(doc["methods"]),
        "path": doc["path"],
        "cost": doc["cost"],
        "failure_mode": doc["failure_mode"],
    }
    if doc.get("description"):
        out["description"] = doc["description"]
    return out


def _policy(doc: Document) -> dict:
    out: dict[str, Any] = {"scope": doc["scope"], "route": doc["route"]}
    if doc.get("expires_at"):
        out["expires_at"] = doc["expires_at"]
    if doc.get("reason"):
        out["reason"] = doc["reason"]
    out["limits"] = [
        _FlowMap(limit_document(limit_value(limit), short=True))
        for limit in doc["limits"]
    ]
    return out


# -- reading ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LineProblem:
    """A problem at a line of the file (1-based)."""

    line: int
    path: Path
    message: str


@dataclass(frozen=True)
class YamlData:
    """A parsed file: its data, and the line where each path starts."""

    data: Any
    lines: dict[Path, int]
    problems: list[LineProblem]

    def line_of(self, path: Path) -> int:
        """The line of ``path``, or of its nearest ancestor the file has."""
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path, 1)


def yaml_read(text: str) -> YamlData:
    """Parse ``text``; syntax errors and repeated keys come back as problems."""
    try:
        node, data = _parse(text)
        lines: dict[Path, int] = {}
        problems = list(_walk(node, (), lines)) if node is not None else []
        return YamlData(_plain(data), lines, problems)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        message = f"not valid YAML: {exc.problem or exc.context}"
    except yaml.YAMLError as exc:  # e.g. a control character: no position to give
        line, message = 1, f"not valid YAML: {exc}"
    except RecursionError:
        line, message = 1, "nested too deeply to be a rules file"
    return YamlData(None, {}, [LineProblem(line, (), message)])


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing anchors and aliases before composing them.

    A rules file never needs them, and an alias is expanded into a copy of what it
    names on construction, so nested aliases grow without limit.
    """

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.composer.ComposerError(
                None,
                None,
                "anchors and aliases (&name, *name) are not allowed in a rules file",
                event.start_mark,
            )
        return super().compose_node(parent, index)


def _parse(text: str) -> tuple[yaml.Node | None, Any]:
    loader = _NoAliasLoader(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    finally:
        loader.dispose()


def _walk(node: yaml.Node, path: Path, lines: dict[Path, int]) -> Iterator[LineProblem]:
    """Record the line of every path under ``node``; yield keys given twice."""
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            line = key_node.start_mark.line + 1
            if key in seen:
                shown = ".".join(map(str, (*path, key)))
                yield LineProblem(
                    line,
                    (*path, key),
                    f"{shown} is given twice (first on line {seen[key]})",
                )
                continue
            seen[key] = line
            lines[(*path, key)] = line
            yield from _walk(value_node, (*path, key), lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[(*path, index)] = item.start_mark.line + 1
            yield from _walk(item, (*path, index), lines)


def _plain(data: Any) -> Any:
    """YAML's own types made JSON's: an unquoted time becomes the string it was."""
    if isinstance(data, dict):
        return {
            str(k) if not isinstance(k, str) else k: _plain(v) for k, v in data.items()
        }
    if isinstance(data, list):
        return [_plain(v) for v in data]
    if isinstance(data, datetime):
        if data.tzinfo is None:
            return data.isoformat()
        return data.isoformat().replace("+00:00", "Z")
    if isinstance(data, date):
        return data.isoformat()
    return data
