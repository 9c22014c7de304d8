"""The JSON Schema of rules files and of the documents change requests carry.

One schema, defined here and published as ``docs/rules.schema.json`` (a test
keeps the two equal): a rules file is an object with ``format``, ``tiers``,
``tenants``, ``routes`` and ``policies``; its ``$defs`` describe one document of
each kind, which the API's change-request edits are checked against too.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator

from sluice.model import (
    DEFAULT_LEASE_MS,
    DEFAULT_TIMEOUT,
    HTTP_METHODS,
    MAX_LEASE_MS,
    MAX_PUBLIC_DESCRIPTION,
    MAX_PUBLIC_NAME,
    MAX_SHARDS,
    MAX_TIMEOUT,
)

__all__ = ["FORMAT", "MAX_INTEGER", "RULES_SCHEMA", "schema_errors", "schema_json"]

#: The version of the file format; a file names it in ``format``.
FORMAT = 1

#: The largest number the rule tables' integer columns hold (Postgres ``integer``);
#: the models' fields check the same bound (Django adds it to every IntegerField).
MAX_INTEGER = 2**31 - 1

_SLUG = r"[a-z0-9][a-z0-9_-]{0,62}"
_ROUTE_SLUG = r"[a-z0-9][a-z0-9._-]{0,62}"
_DIMENSIONS = ["tenant", "user", "api_key", "ip"]


def _object(required: list[str], properties: dict[str, Any], **extra: Any) -> dict:
    return {
        "type": "object",
        "required": required,
        "additionalProperties": False,
        "properties": properties,
        **extra,
    }


_LIMIT_COMMON = {
    "dimension": {"enum": _DIMENSIONS, "description": "What the limit counts per."},
    "shadow": {
        "type": "boolean",
        "default": False,
        "description": "Evaluate and report, never reject.",
    },
    "public_name": {
        "type": "string",
        "maxLength": MAX_PUBLIC_NAME,
        "default": "",
        "description": "The limit's name in a 429; empty: derived (Rate limit per user).",
    },
    "public_description": {
        "type": "string",
        "maxLength": MAX_PUBLIC_DESCRIPTION,
        "default": "",
        "description": "The limit in a 429's detail; empty: derived from the numbers.",
    },
}

_PERIOD = {"enum": ["second", "minute", "hour", "day"]}
_COST = {
    "type": ["integer", "null"],
    "minimum": 1,
    "maximum": MAX_INTEGER,
    "default": None,
}

RULES_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://sluice.dev/schemas/rules.schema.json",
    "title": "Sluice rules file",
    "description": "The whole rule set of a Sluice control plane, as `manage.py rules "
    "export` writes it (docs/rules-as-code.md).",
    **_object(
        ["format", "tiers", "tenants", "routes", "policies"],
        {
            "format": {"const": FORMAT, "description": "The file format's version."},
            "tiers": {
                "type": "object",
                "propertyNames": {"$ref": "#/$defs/slug"},
                "additionalProperties": {"$ref": "#/$defs/tier"},
            },
            "tenants": {
                "type": "object",
                "propertyNames": {"$ref": "#/$defs/slug"},
                "additionalProperties": {"$ref": "#/$defs/tenant"},
            },
            "routes": {
                "type": "object",
                "propertyNames": {"$ref": "#/$defs/route_slug"},
                "additionalProperties": {"$ref": "#/$defs/route"},
            },
            "policies": {"type": "array", "items": {"$ref": "#/$defs/policy"}},
        },
    ),
    "$defs": {
        "slug": {"type": "string", "pattern": f"^{_SLUG}$"},
        "route_slug": {"type": "string", "pattern": f"^{_ROUTE_SLUG}$"},
        "tier": _object(
            ["name"],
            {
                "name": {"type": "string", "minLength": 1, "maxLength": 100},
                "description": {"type": "string", "default": ""},
                "position": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_INTEGER,
                    "default": 0,
                    "description": "Order in lists: free before pro.",
                },
            },
        ),
        "tenant": _object(
            ["name", "tier"],
            {
                "name": {"type": "string", "minLength": 1, "maxLength": 200},
                "tier": {"$ref": "#/$defs/slug"},
                "contacts": {
                    "type": "array",
                    "items": {"type": "string", "format": "email"},
                    "default": [],
                    "description": "Who is told about limit changes.",
                },
                "time_zone": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 64,
                    "default": "UTC",
                    "description": "IANA time zone (Europe/Paris): calendar quotas "
                    "reset at local midnight.",
                },
                "billing_day": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 31,
                    "default": 1,
                    "description": "Day of the month billing cycles start on (31: the "
                    "last day of shorter months).",
                },
            },
        ),
        "route": _object(
            ["methods", "path"],
            {
                "methods": {
                    "type": "array",
                    "items": {"enum": list(HTTP_METHODS)},
                    "minItems": 1,
                    "uniqueItems": True,
                },
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 300,
                    "description": "Such as /v1/orders/{id}.",
                },
                "cost": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_INTEGER,
                    "default": 1,
                },
                "failure_mode": {
                    "enum": ["open", "closed", "local"],
                    "default": "open",
                },
                "max_cost": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_INTEGER,
                    "description": "The largest cost a request may declare (a "
                    "header the gateway sets, Envoy's hits_addend); above it a "
                    "request counts as this much. Absent: requests cannot change "
                    "the route's cost.",
                },
                "description": {"type": "string", "maxLength": 200, "default": ""},
            },
        ),
        "policy": _object(
            ["scope", "route", "limits"],
            {
                "scope": {
                    "type": "string",
                    "pattern": f"^(default|tier:{_SLUG}|tenant:{_SLUG})$",
                    "description": "default, tier:<slug> or tenant:<slug>.",
                },
                "route": {
                    "type": "string",
                    "pattern": rf"^(\*|{_ROUTE_SLUG})$",
                    "description": "A route slug, or * for every route.",
                },
                "expires_at": {
                    "type": ["string", "null"],
                    "format": "date-time",
                    "description": "Temporary tenant overrides only: when it stops "
                    "applying (ISO 8601 with a zone).",
                },
                "reason": {"type": "string", "default": ""},
                "limits": {
                    "type": "array",
                    "minItems": 1,
                    "items": {"$ref": "#/$defs/limit"},
                },
            },
        ),
        "limit": {
            "type": "object",
            "if": {"required": ["max_inflight"]},
            "then": {"$ref": "#/$defs/concurrent_limit"},
            "else": {
                "if": {
                    "required": ["kind"],
                    "properties": {"kind": {"const": "sliding_window"}},
                },
                "then": {"$ref": "#/$defs/sliding_window_limit"},
                "else": {
                    "if": {
                        "required": ["kind"],
                        "properties": {"kind": {"const": "calendar_quota"}},
                    },
                    "then": {"$ref": "#/$defs/calendar_quota_limit"},
                    "else": {"$ref": "#/$defs/rate_limit"},
                },
            },
        },
        "rate_limit": _object(
            ["dimension", "rate", "period", "burst"],
            {
                **_LIMIT_COMMON,
                "rate": {"type": "integer", "minimum": 1, "maximum": MAX_INTEGER},
                "period": _PERIOD,
                "burst": {"type": "integer", "minimum": 1, "maximum": MAX_INTEGER},
                "cost": _COST,
                "shards": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_SHARDS,
                    "default": 1,
                },
                "lease": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": MAX_INTEGER,
                    "default": 0,
                },
                "lease_ms": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LEASE_MS,
                    "default": DEFAULT_LEASE_MS,
                },
            },
            description="A token bucket: rate tokens per period, burst deep.",
        ),
        "sliding_window_limit": _object(
            ["kind", "dimension", "limit", "window"],
            {
                "kind": {"const": "sliding_window"},
                **_LIMIT_COMMON,
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_INTEGER},
                "window": _PERIOD,
                "cost": _COST,
            },
            description="A sliding-window counter: at most limit in any window "
            "(no burst, shards or lease).",
        ),
        "calendar_quota_limit": _object(
            ["kind", "dimension", "limit", "per"],
            {
                "kind": {"const": "calendar_quota"},
                **_LIMIT_COMMON,
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_INTEGER},
                "per": {"enum": ["day", "month"]},
                "cycle": {
                    "enum": ["calendar", "billing"],
                    "default": "calendar",
                    "description": "billing (per month only): from the tenant's "
                    "billing_day to the same day next month.",
                },
                "cost": _COST,
            },
            description="A calendar quota: at most limit per day or month in the "
            "tenant's time zone, reset at the boundary (no period, burst, shards or "
            "lease).",
            **{
                "if": {
                    "required": ["cycle"],
                    "properties": {"cycle": {"const": "billing"}},
                },
                "then": {"properties": {"per": {"const": "month"}}},
            },
        ),
        "concurrent_limit": _object(
            ["dimension", "max_inflight"],
            {
                **_LIMIT_COMMON,
                "max_inflight": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_INTEGER,
                },
                "timeout": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_TIMEOUT,
                    "default": DEFAULT_TIMEOUT,
                },
            },
            description="At most max_inflight requests in flight at once per key.",
        ),
    },
}


def schema_json() -> str:
    """The schema as ``docs/rules.schema.json`` holds it."""
    return json.dumps(RULES_SCHEMA, indent=2, ensure_ascii=False) + "\n"


@functools.lru_cache(maxsize=8)
def _validator(definition: str | None) -> Draft202012Validator:
    schema = RULES_SCHEMA
    if definition is not None:  # one document: the same definitions, another root
        schema = {
            "$schema": RULES_SCHEMA["$schema"],
            "$defs": RULES_SCHEMA["$defs"],
            "$ref": f"#/$defs/{definition}",
        }
    return Draft202012Validator(schema)


@functools.lru_cache(maxsize=8)
def _fast_validator(definition: str | None) -> Any:
    return jsonschema_rs.validator_for(_validator(definition).schema)


def schema_errors(
    data: Any, *, definition: str | None = None
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(path, message) for every way ``data`` breaks the schema: the whole file, or
    one document of ``definition`` ("tier", "tenant", "route", "policy").

    A file of 100,000 tenants takes jsonschema a minute; jsonschema-rs says in a
    second whether there is anything to tell, and jsonschema, whose messages and
    paths these are, tells it (it is never laxer: its regular expressions' ``$``
    matches before a final newline, which jsonschema-rs's refuses)."""
    if _fast_validator(definition).is_valid(data):
        return
    errors = _validator(definition).iter_errors(data)
    for error in sorted(errors, key=lambda e: [str(p) for p in e.absolute_path]):
        path = tuple(error.absolute_path)
        if "propertyNames" in error.schema_path:  # the key itself is at fault
            path += (error.instance,)
        yield path, _message(error)


def _message(error: Any) -> str:
    """jsonschema's message, said the way the rest of Sluice says it."""
    if error.validator == "additionalProperties":
        unknown = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        return f"unknown member(s): {', '.join(unknown)}"
    if error.validator == "required":
        return error.message.replace("is a required property", "is missing")
    if error.validator == "pattern" and error.path and error.path[-1] == "scope":
        return f"{error.instance!r} is not default, tier:<slug> or tenant:<slug>"
    if error.validator == "pattern":
        return f"{error.instance!r} is not a valid name (lower-case letters, digits, - and _)"
    return error.message
