"""Reading YAML with the line of every member: the parser of rules files, both sides.

The control plane (``limits.ascode``) and the client (:mod:`.rulesfile`) read
rules files with :func:`yaml_read`, so a file gets the same syntax errors with
the same lines wherever it is read. It refuses what YAML would silently accept
(a key given twice) and what would let a few bytes cost a worker seconds and
memory (anchors and aliases, whose expansion grows tenfold per line: the
"billion laughs"). PyYAML is imported here only: ``pip install sluice-client[yaml]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import yaml

__all__ = [
    "MAX_CHARS",
    "MAX_DEPTH",
    "MAX_NODES",
    "LineProblem",
    "Path",
    "YamlData",
    "dotted",
    "yaml_read",
]

Path = tuple[str | int, ...]

#: Characters of a rules file: the rules of 100,000 tenants take about 6 million.
MAX_CHARS = 32 * 1024 * 1024
#: Values (mappings, lists, scalars) of a rules file: 100,000 tenants take about 1.5 million.
MAX_NODES = 8_000_000
#: Levels of nesting: a rules file has 5 (policies, a policy, limits, a limit, a value).
MAX_DEPTH = 32


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


@dataclass
class YamlData:
    """A parsed file: its data, and the line where each path starts.

    Only the lines of the first two levels (a section, a tenant, a policy) are kept
    while reading, so a large file costs little more than its data; the line of a
    deeper member is found by reading the text again, which only a problem needs.
    """

    data: Any
    lines: dict[Path, int]
    problems: list[LineProblem]
    text: str | None = None

    def line_of(self, path: Path) -> int:
        """The line of ``path``, or of its nearest ancestor the file has."""
        if len(path) > _KEPT_DEPTH and path not in self.lines and self.text:
            self.lines = _Events(self.text, depth=None).read()[1]
            self.text = None
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path, 1)


#: How deep ``yaml_read`` records lines: the file, its sections, their documents.
_KEPT_DEPTH = 2


def yaml_read(text: str) -> YamlData:
    """Parse ``text``; syntax errors, repeated keys, anchors and aliases, and a file
    over the budget (:data:`MAX_CHARS`, :data:`MAX_NODES`, :data:`MAX_DEPTH`) come
    back as problems, at their line."""
    if len(text) > MAX_CHARS:
        message = (
            f"{len(text):,} characters: a rules file may have at most {MAX_CHARS:,}"
        )
        return YamlData(None, {}, [LineProblem(1, (), message)])
    try:
        data, lines, problems = _Events(text, depth=_KEPT_DEPTH).read()
        return YamlData(data, lines, problems, text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        message = f"not valid YAML: {exc.problem or exc.context}"
    except yaml.YAMLError as exc:  # e.g. a control character: no position to give
        line, message = 1, f"not valid YAML: {exc}"
    except RecursionError:
        line, message = 1, "nested too deeply to be a rules file"
    return YamlData(None, {}, [LineProblem(line, (), message)])


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MAP, _SEQ = (
    "tag:yaml.org,2002:map",
    "tag:yaml.org,2002:seq",
)  # libyaml when built with it
#: The safe loader's implicit types (tag, pattern) by the first character of a plain
#: scalar ("" for the empty one); it has none for any character (key None).
_RESOLVERS = _Loader.yaml_implicit_resolvers
#: Resolved plain scalars kept per file: the repeated ones come first and often.
_PLAIN_KEPT = 4096
_UNSEEN = object()
_NO_ALIASES = "anchors and aliases (&name, *name) are not allowed in a rules file"


class _Events:
    """Builds plain data from the parser's events, one at a time: no node graph
    (PyYAML's composer holds the whole file twice over), the lines of paths down to
    ``depth`` (None: all), keys given twice and anchors refused as they come.

    An anchor or alias is refused before anything is built from it: an alias is
    expanded into a copy of what it names on construction, so nested aliases grow
    without limit (the "billion laughs")."""

    def __init__(self, text: str, *, depth: int | None) -> None:
        self.loader = _Loader(text)
        self.depth = depth
        self.lines: dict[Path, int] = {}
        self.problems: list[LineProblem] = []
        self.nodes = 0
        self.plain: dict[str, Any] = {}  #: plain scalars resolved so far, by text

    def read(self) -> tuple[Any, dict[Path, int], list[LineProblem]]:
        loader = self.loader
        try:
            loader.get_event()  # stream start
            if loader.check_event(yaml.StreamEndEvent):
                return None, self.lines, self.problems
            loader.get_event()  # document start
            data = self._value(())
            loader.get_event()  # document end
            if not loader.check_event(yaml.StreamEndEvent):
                event = loader.peek_event()
                raise yaml.composer.ComposerError(
                    "expected a single document in the stream",
                    None,
                    "but found another document",
                    event.start_mark,
                )
            return data, self.lines, self.problems
        finally:
            loader.dispose()

    def _value(self, path: Path) -> Any:
        return self._node(self.loader.get_event(), path)

    def _node(self, event: yaml.Event, path: Path, *, key: bool = False) -> Any:
        """The value that starts with ``event`` (already taken from the parser: the
        loops below take each event once instead of peeking at it first)."""
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.composer.ComposerError(None, None, _NO_ALIASES, event.start_mark)
        self.nodes += (
            1  # the budget, checked as the file is read: nothing built past it
        )
        if self.nodes > MAX_NODES:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"more than {MAX_NODES:,} values: too many for a rules file",
                event.start_mark,
            )
        if len(path) >= MAX_DEPTH:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"nested deeper than {MAX_DEPTH} levels: not a rules file",
                event.start_mark,
            )
        if not key and (self.depth is None or len(path) <= self.depth):
            self.lines.setdefault(path, event.start_mark.line + 1)
        if isinstance(event, yaml.ScalarEvent):
            return self._scalar(event)
        if event.tag not in (None, "!", _MAP, _SEQ):  # !!set, !!omap, !!python/...
            raise yaml.constructor.ConstructorError(
                None, None, f"the tag {event.tag!r} is not allowed", event.start_mark
            )
        if key:
            raise yaml.composer.ComposerError(
                None, None, "a key must be a plain value", event.start_mark
            )
        if isinstance(event, yaml.SequenceStartEvent):
            items: list[Any] = []
            get_event = self.loader.get_event
            while not isinstance(event := get_event(), yaml.SequenceEndEvent):
                items.append(self._node(event, (*path, len(items))))
            return items
        return self._mapping(path)

    def _mapping(self, path: Path) -> dict[Any, Any]:
        found: dict[Any, Any] = {}
        seen: dict[Any, int] = {}
        get_event = self.loader.get_event
        while not isinstance(event := get_event(), yaml.MappingEndEvent):
            line = event.start_mark.line + 1
            key = self._node(event, path, key=True)
            key = key if isinstance(key, str) else str(key)
            member = (*path, key)
            if key not in seen and (self.depth is None or len(member) <= self.depth):
                self.lines[member] = line
            value = self._value(member)
            if key in seen:
                shown = ".".join(map(str, member))
                self.problems.append(
                    LineProblem(
                        line,
                        member,
                        f"{shown} is given twice (first on line {seen[key]})",
                    )
                )
                continue
            seen[key] = line
            found[key] = value
        return found

    def _scalar(self, event: yaml.ScalarEvent) -> Any:
        """The value of a scalar as PyYAML's safe loader makes it, then JSON's: an
        unquoted time becomes the string it was.

        What an untagged scalar means depends on its text alone, so the common
        cases skip PyYAML's resolver and constructor (half the reading time of a
        large file): a quoted or block scalar is its text, and so is a plain one
        that matches no implicit type's pattern; the others (numbers, booleans,
        null, times) are constructed once per text (a file repeats them)."""
        value = event.value
        if event.tag is None:
            if not event.implicit[0]:
                return value
            for _, pattern in _RESOLVERS.get(value[:1], ()):
                if pattern.match(value):
                    break
            else:  # no implicit type matches: a string
                return value
            known = self.plain.get(value, _UNSEEN)
            if known is _UNSEEN:
                known = self._construct(event)
                if len(self.plain) < _PLAIN_KEPT:
                    self.plain[value] = known
            return known
        return self._construct(event)

    def _construct(self, event: yaml.ScalarEvent) -> Any:
        loader = self.loader
        tag = event.tag
        if tag is None or tag == "!":
            tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
        node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark)
        construct = loader.yaml_constructors.get(tag, loader.yaml_constructors[None])
        return _plain(construct(loader, node))  # not construct_object: it caches nodes


def _plain(data: Any) -> Any:
    """A scalar of YAML's own types made JSON's."""
    if isinstance(data, datetime):
        if data.tzinfo is None:
            return data.isoformat()
        return data.isoformat().replace("+00:00", "Z")
    if isinstance(data, date):
        return data.isoformat()
    return data
