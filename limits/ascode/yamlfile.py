"""Rules files as YAML: written byte-stable, read back with the line of every member.

:func:`rules_yaml` writes a rule set's documents in one fixed order and layout
(mappings by slug, limits one per line, defaults left out), so the same rules
give the same bytes on every machine and a change reads as a small diff in git.
:func:`yaml_read` (``sluice.yamlread``, shared with the client's
``sluice.rules_from_file``) parses a file and returns its data with the line of
every path in it, and refuses what YAML would silently accept (a key given twice)
and what would let a few bytes cost a worker seconds and memory (anchors and
aliases, whose expansion grows tenfold per line: the "billion laughs").
"""

from __future__ import annotations

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

__all__ = ["HEADER", "LineProblem", "YamlData", "rules_yaml", "yaml_read"]

HEADER = (
    "# Sluice rate-limit rules (format: docs/rules-as-code.md, schema:\n"
    "# docs/rules.schema.json). Review a change with `manage.py rules diff FILE`,\n"
    "# propose it with `manage.py rules apply FILE`.\n"
)


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
