"""Reading YAML with the line of every member: the parser of rules files, both sides.

The control plane (``limits.ascode``) and the client (:mod:`.rulesfile`) read
rules files with :func:`yaml_read`, so a file gets the same syntax errors with
the same lines wherever it is read. It refuses what YAML would silently accept
(a key given twice) and what would let a few bytes cost a worker seconds and
memory (anchors and aliases, whose expansion grows tenfold per line: the
"billion laughs"). PyYAML is imported here only: ``pip install sluice-client[yaml]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import yaml

__all__ = ["LineProblem", "Path", "YamlData", "dotted", "yaml_read"]

Path = tuple[str | int, ...]


def dotted(path: Path) -> str:
    """``policies[3].limits[0].burst``: a path the way people read it."""
    text = ""
    for part in path:
        text += (
            f"[{part}]"
            if isinstance(part, int)
            else (f".{part}" if text else str(part))
        )
    return text or "(the file)"


@dataclass(frozen=True)
class LineProblem:
    """A problem at a line of the file (1-based)."""

    line: int
    path: Path
    message: str

    def shown(self, name: str) -> str:
        """``rules.yaml:14: policies[3].limits[0].burst: ...``"""
        return f"{name}:{self.line}: {dotted(self.path)}: {self.message}"


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


class _NoAliasLoader(yaml.SafeLoader):  # type: ignore[misc]
    """PyYAML's safe loader, refusing anchors and aliases before composing them.

    A rules file never needs them, and an alias is expanded into a copy of what it
    names on construction, so nested aliases grow without limit.
    """

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.composer.ComposerError(
                None,
                None,
                "anchors and aliases (&name, *name) are not allowed in a rules file",
                event.start_mark,
            )
        return super().compose_node(parent, index)


def _parse(text: str) -> tuple[Any, Any]:
    loader = _NoAliasLoader(text)
    try:
        node = loader.get_single_node()
        return node, (loader.construct_document(node) if node is not None else None)
    finally:
        loader.dispose()


def _walk(node: Any, path: Path, lines: dict[Path, int]) -> Iterator[LineProblem]:
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
