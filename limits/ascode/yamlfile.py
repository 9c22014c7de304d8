"""Rules files as YAML: written byte-stable, read back with the line of every member.

:func:`rules_yaml` writes a rule set's documents in one fixed order and layout
(mappings by slug, limits one per line, defaults left out), so the same rules
give the same bytes on every machine and a change reads as a small diff in git.
:func:`yaml_read` (:mod:`sluice.yamlread`, the client's, so that a file gets the
same errors at the same lines wherever it is read) parses a file and returns its
data with the line of every path in it, within a budget of characters, values
and nesting whoever sends it (the API, whose bodies are also bounded, or
``manage.py rules``, which reads any file).
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Iterable
from typing import Any

import yaml

from limits.rules.documents import (
    Document,
    RuleDocuments,
    limit_document,
    limit_value,
)
from limits.rules.schema import FORMAT
from sluice.yamlread import LineProblem, YamlData, yaml_read

__all__ = [
    "HEADER",
    "LineProblem",
    "YamlData",
    "rules_yaml",
    "rules_yaml_write",
    "yaml_read",
]

HEADER = (
    "# Sluice rate-limit rules (format: docs/rules-as-code.md, schema:\n"
    "# docs/rules.schema.json). Review a change with `manage.py rules diff FILE`,\n"
    "# propose it with `manage.py rules apply FILE`.\n"
)

Path = tuple[str | int, ...]

#: Characters of a rules file: the rules of 100,000 tenants take about 6 million.
MAX_CHARS = 32 * 1024 * 1024
#: Nodes (mappings, lists, scalars) of a rules file: 100,000 tenants take about 1.5 million.
MAX_NODES = 8_000_000
#: Levels of nesting: a rules file has 5 (policies, a policy, limits, a limit, a value).
MAX_DEPTH = 32


class _FlowMap(dict):
    """A mapping written on one line: ``{dimension: tenant, rate: 5, ...}``."""


class _FlowList(list):
    """A list written on one line: ``[GET, HEAD]``."""


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """PyYAML's safe dumper (libyaml's when built with it), with one-line limits and
    lists of words."""


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

#: Documents dumped at a time: the text is written in pieces of this many, so
#: memory does not grow with the file.
_CHUNK = 2000


def rules_yaml(docs: RuleDocuments) -> str:
    """The rules file of ``docs``: the same documents always give the same text."""
    out = io.StringIO()
    rules_yaml_write(docs, out.write)
    return out.getvalue()


def rules_yaml_write(docs: RuleDocuments, write: Callable[[str], Any]) -> None:
    """Write the rules file of ``docs`` piece by piece to ``write``.

    Each section is dumped in chunks, each chunk as the only member of its section
    with the section's line cut off: an emitter indents by nesting only, so the
    pieces are the bytes one dump of the whole file gives.
    """
    write(HEADER)
    write(_dump({"format": FORMAT}))
    tiers = sorted(docs.tiers.items(), key=lambda item: (item[1]["position"], item[0]))
    _section(write, "tiers", ((slug, _tier(doc)) for slug, doc in tiers))
    tenants = ((slug, _tenant(docs.tenants[slug])) for slug in sorted(docs.tenants))
    _section(write, "tenants", tenants)
    routes = ((slug, _route(docs.routes[slug])) for slug in sorted(docs.routes))
    _section(write, "routes", routes)
    keys = sorted(docs.policies, key=_policy_order)
    _section(write, "policies", (_policy(docs.policies[key]) for key in keys))


def _section(write: Callable[[str], Any], name: str, items: Iterable[Any]) -> None:
    wrote, items = False, iter(items)
    while chunk := list(itertools.islice(items, _CHUNK)):
        body = dict(chunk) if name != "policies" else list(chunk)
        text = _dump({name: body})
        write(text if not wrote else text[text.index("\n") + 1 :])
        wrote = True
    if not wrote:
        write(_dump({name: {} if name != "policies" else []}))


def _dump(data: dict) -> str:
    return yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=10**6,
    )


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
    for member in ("time_zone", "billing_day"):  # written only when not the default
        if member in doc:
            out[member] = doc[member]
    return out


def _route(doc: Document) -> dict:
    out: dict[str, Any] = {
        "methods": _FlowList(doc["methods"]),
        "path": doc["path"],
        "cost": doc["cost"],
        "failure_mode": doc["failure_mode"],
    }
    if doc.get("max_cost") is not None:
        out["max_cost"] = doc["max_cost"]
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
