"""Capability grants: the tools a task may use and the arguments it may give them.

A grant is a small document, validated whole (every problem reported at once):

    tools:
      read_inbox: {}                               # any arguments
      send_email:
        args:
          to: {source: user}                       # must come from the user's request
          subject: {pattern: '.{0,200}'}
      pay_invoice:
        args:
          amount: {min: 0, max: 500}
          currency: {values: [EUR, USD]}

A task's grant is a stack of layers (operator, integration, task, planner, narrowings): a step
is granted only when every layer grants it, so combining grants intersects them and adding a
layer can only narrow. The `capabilities` rule judges steps against the stack; this module
parses, validates, describes and compares grants, and reads and writes their recorded form.
"""

from __future__ import annotations

import fnmatch
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from charter._model.paths import ROOTS, SCALAR_ROOTS, FieldPath, parse_path
from charter._policy.regex import compile_re2, fullmatch_function
from charter._policy.rules._indexes import GRANT_META, GRANT_STEP

# decimal loads with the first number a grant compares: most processes never compare one.
if TYPE_CHECKING:
    from decimal import Decimal

__all__ = [
    "GRANT_META",
    "GRANT_STEP",
    "SOURCES",
    "SOURCE_WORDS",
    "ArgConstraint",
    "Grant",
    "GrantError",
    "GrantLayer",
    "ToolGrant",
    "as_number",
    "layers_from_meta",
    "layers_meta",
    "uncovered",
]


SOURCES = ("user", "operator", "internal", "external", "trusted")
"""Value sources a constraint can demand, each a trust level meaning "at least this level":
``user`` (a user message of the task), ``operator`` (the user's messages or the operator's
trusted values), ``internal`` (content at internal or above, or operator values), ``external``
(any content: every value is at least external), and ``trusted``, the older word for
``internal`` (what `value_provenance` counts as trusted content by default)."""

SOURCE_WORDS = {
    "user": "the user's request",
    "operator": "the user's request or the operator's trusted values",
    "internal": "trusted content (internal or above)",
    "external": "any content",
    "trusted": "trusted content",
}
"""How a refusal and a grant's description name each source."""

_TOP_KEYS = ("tools", "description")
_TOOL_KEYS = ("args", "description")
_CONSTRAINT_KEYS = ("values", "pattern", "source", "min", "max", "required")
_GLOB = frozenset("*?[")
_MAX_NUMBER_TEXT = 64


class GrantError(ValueError):
    """A grant document that cannot be used; `problems` lists each one with its location."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


def as_number(value: Any) -> Decimal | None:
    """`value` as an exact number: ints, finite floats, and strings written as a plain
    decimal number (``-12``, ``40.50``); None for anything else (booleans included)."""
    if isinstance(value, bool):
        return None
    from decimal import Decimal, InvalidOperation

    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        return Decimal(repr(value)) if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > _MAX_NUMBER_TEXT:
            return None
        body = text[1:] if text[0] in "+-" else text
        whole, dot, frac = body.partition(".")
        if not whole.isascii() or not frac.isascii():
            return None
        if not (whole.isdigit() or (dot and not whole)) or (dot and not frac.isdigit()):
            return None
        try:
            return Decimal(text)
        except InvalidOperation:  # pragma: no cover - the scan above admits only numbers
            return None
    return None


def _scalar_key(value: Any) -> Any:
    """How an allowed value compares: numbers by value (40 == 40.0), the rest exactly."""
    number = as_number(value) if not isinstance(value, str) else None
    if number is not None:
        return ("n", number)
    return (type(value).__name__, value)


@dataclass(frozen=True, slots=True)
class ArgConstraint:
    """What the values at one field of a granted tool's step must satisfy (all that is set)."""

    key: str
    path: FieldPath
    values: frozenset[Any] | None = None
    pattern: str | None = None
    source: str | None = None
    minimum: Decimal | None = None
    maximum: Decimal | None = None
    required: bool = False
    fullmatch: Any = field(default=None, compare=False, repr=False)  # text -> bool

    def allows_value(self, value: Any) -> bool:
        """Whether `value` is one of `values` (numbers by value; a number written as text
        matches the number)."""
        assert self.values is not None
        if _scalar_key(value) in self.values:
            return True
        number = as_number(value) if isinstance(value, str) else None
        return number is not None and ("n", number) in self.values

    def describe(self) -> str:
        parts: list[str] = []
        if self.values is not None:
            parts.append("one of " + ", ".join(sorted(_shown(v) for _, v in self.values)))
        if self.pattern is not None:
            parts.append(f"matching {self.pattern!r}")
        if self.source is not None:
            parts.append(f"from {SOURCE_WORDS[self.source]}")
        if self.minimum is not None:
            parts.append(f">= {self.minimum}")
        if self.maximum is not None:
            parts.append(f"<= {self.maximum}")
        if self.required:
            parts.append("required")
        return f"{self.key}: {', '.join(parts)}"


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    from decimal import Decimal

    return str(value) if isinstance(value, Decimal) else json.dumps(value)


@dataclass(frozen=True, slots=True)
class ToolGrant:
    """One granted tool (a step name or a shell-style glob) and its argument constraints."""

    name: str
    args: tuple[ArgConstraint, ...] = ()

    @property
    def is_glob(self) -> bool:
        return any(c in _GLOB for c in self.name)

    def matches(self, step_name: str) -> bool:
        return fnmatch.fnmatchcase(step_name, self.name) if self.is_glob else step_name == self.name

    def covers(self, name: str) -> bool:
        """Whether every step name `name` (a name or a glob) stands for is granted here:
        decided conservatively (a glob is covered by the same glob, by '*', or by a plain
        prefix glob it starts with)."""
        if not any(c in _GLOB for c in name):
            return self.matches(name)
        if name == self.name or self.name == "*":
            return True
        prefix = self.name[:-1]
        return (
            self.name.endswith("*")
            and not any(c in _GLOB for c in prefix)
            and name.startswith(prefix)
        )

    def describe(self) -> str:
        if not self.args:
            return self.name
        return f"{self.name} ({'; '.join(a.describe() for a in self.args)})"


class Grant:
    """A validated grant document. Build with `Grant.from_document` or `Grant.load`.

    `document` is the canonical I-JSON form kept in the audit trail; `tools` the parsed
    entries in document order. An empty ``tools`` mapping grants nothing.
    """

    __slots__ = ("_exact", "_globs", "description", "document", "tools")

    def __init__(
        self, tools: Sequence[ToolGrant], document: dict[str, Any], description: str | None
    ) -> None:
        self.tools = tuple(tools)
        self.document = document
        self.description = description
        self._exact: dict[str, list[ToolGrant]] = {}
        self._globs = tuple(t for t in self.tools if t.is_glob)
        for t in self.tools:
            if not t.is_glob:
                self._exact.setdefault(t.name, []).append(t)

    def __repr__(self) -> str:
        return f"Grant({self.describe()!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Grant) and other.document == self.document

    def __hash__(self) -> int:
        return hash(json.dumps(self.document, sort_keys=True))

    @classmethod
    def empty(cls) -> Grant:
        """The grant that grants nothing."""
        return cls((), {"tools": {}}, None)

    @classmethod
    def from_document(cls, document: Any, where: str = "grant") -> Grant:
        """Validate `document` (a mapping, a Grant, or JSON text); raises GrantError listing
        every problem with its location (``grant.tools.send_email.args.to.min``)."""
        if isinstance(document, Grant):
            return document
        if isinstance(document, str):
            try:
                document = json.loads(document)
            except ValueError as exc:
                raise GrantError([f"{where}: not valid JSON ({exc})"]) from None
        problems: list[str] = []
        grant = _parse(document, where, problems)
        if problems or grant is None:
            raise GrantError(problems or [f"{where}: not a grant"])
        return grant

    def for_step(self, step_name: str) -> list[ToolGrant]:
        """The entries that grant `step_name`, exact names first, then globs in order."""
        found = list(self._exact.get(step_name, ()))
        found.extend(t for t in self._globs if t.matches(step_name))
        return found

    def covers(self, name: str) -> bool:
        return any(t.covers(name) for t in self.tools)

    def names(self) -> list[str]:
        return [t.name for t in self.tools]

    def describe(self) -> str:
        """One line: the granted tools and their constraints, or "nothing"."""
        if not self.tools:
            return "nothing"
        return ", ".join(t.describe() for t in self.tools)


def _parse(document: Any, where: str, problems: list[str]) -> Grant | None:
    if not isinstance(document, Mapping):
        problems.append(f"{where}: must be a mapping with `tools` (tool name -> constraints)")
        return None
    for key in document:
        if key not in _TOP_KEYS:
            problems.append(f"{where}.{key}: unknown key; a grant takes {', '.join(_TOP_KEYS)}")
    description = document.get("description")
    if description is not None and not isinstance(description, str):
        problems.append(f"{where}.description: must be text")
        description = None
    raw_tools = document.get("tools")
    if raw_tools is None:
        problems.append(
            f"{where}.tools: required; a mapping of tool name -> constraints ({{}} grants nothing)"
        )
        return None
    if not isinstance(raw_tools, Mapping):
        problems.append(f"{where}.tools: must be a mapping of tool name -> constraints")
        return None
    tools: list[ToolGrant] = []
    doc_tools: dict[str, Any] = {}
    for name, entry in raw_tools.items():
        at = f"{where}.tools.{name}"
        if not isinstance(name, str) or not name.strip():
            problems.append(f"{where}.tools: tool names must be non-empty text, got {name!r}")
            continue
        if len(name) > 255:
            problems.append(f"{at}: a tool name (or glob) has at most 255 characters")
            continue
        tool, doc = _parse_tool(name, entry, at, problems)
        if tool is not None:
            tools.append(tool)
            doc_tools[name] = doc
    out: dict[str, Any] = {"tools": doc_tools}
    if description is not None:
        out["description"] = description
    return Grant(tools, out, description)


def _parse_tool(
    name: str, entry: Any, at: str, problems: list[str]
) -> tuple[ToolGrant | None, dict[str, Any]]:
    if entry is None or entry is True:
        return ToolGrant(name), {}
    if not isinstance(entry, Mapping):
        problems.append(f"{at}: must be a mapping (`{{}}` for any arguments, or `args:`)")
        return None, {}
    before = len(problems)
    for key in entry:
        if key not in _TOOL_KEYS:
            problems.append(
                f"{at}.{key}: unknown key; a tool takes {', '.join(_TOOL_KEYS)} "
                "(argument constraints go under args:)"
            )
    description = entry.get("description")
    if description is not None and not isinstance(description, str):
        problems.append(f"{at}.description: must be text")
    raw_args = entry.get("args")
    args: list[ArgConstraint] = []
    doc_args: dict[str, Any] = {}
    if raw_args is not None:
        if not isinstance(raw_args, Mapping):
            problems.append(
                f"{at}.args: must be a mapping of argument (or field path) -> constraint"
            )
        else:
            for key, raw in raw_args.items():
                constraint, kept = _parse_constraint(key, raw, f"{at}.args.{key}", problems)
                if constraint is not None:
                    args.append(constraint)
                    doc_args[str(key)] = kept
    if len(problems) > before:
        return None, {}
    doc: dict[str, Any] = {}
    if doc_args:
        doc["args"] = doc_args
    if description is not None:
        doc["description"] = description
    return ToolGrant(name, tuple(args)), doc


def _field(key: str) -> FieldPath:
    """An argument name (``to``, ``items[*].sku``) as ``input.<name>``; a path that starts
    at a root of the step (``input.to``, ``properties.target.url``) as it is."""
    head = key.split(".", 1)[0].split("[", 1)[0]
    if head in ROOTS or head in SCALAR_ROOTS:
        return parse_path(key)
    return parse_path("input." + key)


def _parse_constraint(
    key: Any, raw: Any, at: str, problems: list[str]
) -> tuple[ArgConstraint | None, dict[str, Any]]:
    if not isinstance(key, str) or not key:
        problems.append(f"{at}: an argument name must be non-empty text")
        return None, {}
    try:
        path = _field(key)
    except ValueError as exc:
        problems.append(f"{at}: {exc}")
        return None, {}
    if not isinstance(raw, Mapping) or not raw:
        problems.append(
            f"{at}: must be a mapping with at least one of {', '.join(_CONSTRAINT_KEYS)}"
        )
        return None, {}
    before = len(problems)
    for k in raw:
        if k not in _CONSTRAINT_KEYS:
            problems.append(
                f"{at}.{k}: unknown key; a constraint takes {', '.join(_CONSTRAINT_KEYS)}"
            )
    doc: dict[str, Any] = {}
    matcher: Any = None
    values: frozenset[Any] | None = None
    if "values" in raw:
        items = raw["values"]
        if not isinstance(items, list) or not items:
            problems.append(f"{at}.values: must be a non-empty list of allowed values")
        elif not all(_is_scalar(v) for v in items):
            problems.append(f"{at}.values: items must be text, numbers, true/false or null")
        else:
            values = frozenset(_scalar_key(v) for v in items)
            doc["values"] = list(items)
    pattern = raw.get("pattern")
    if "pattern" in raw:
        if not isinstance(pattern, str) or not pattern:
            problems.append(f"{at}.pattern: must be a non-empty RE2 pattern")
            pattern = None
        else:
            try:
                matcher = fullmatch_function(compile_re2(pattern))
                doc["pattern"] = pattern
            except ValueError as exc:
                problems.append(f"{at}.pattern: {exc}")
                pattern = None
    source = raw.get("source")
    if "source" in raw:
        if source not in SOURCES:
            problems.append(
                f"{at}.source: {source!r} is not a value source; use one of {', '.join(SOURCES)}"
            )
            source = None
        else:
            doc["source"] = source
    bounds: dict[str, Decimal | None] = {"min": None, "max": None}
    for name in ("min", "max"):
        if name in raw:
            number = raw[name]
            parsed = None if isinstance(number, str) else as_number(number)
            if parsed is None:
                problems.append(f"{at}.{name}: must be a number")
            else:
                bounds[name] = parsed
                doc[name] = number
    lo, hi = bounds["min"], bounds["max"]
    if lo is not None and hi is not None and lo > hi:
        problems.append(f"{at}: min {lo} is above max {hi}; no value could pass")
    required = raw.get("required", False)
    if not isinstance(required, bool):
        problems.append(f"{at}.required: must be true or false")
        required = False
    elif "required" in raw:
        doc["required"] = required
    if len(problems) > before:
        return None, {}
    return ArgConstraint(key, path, values, pattern, source, lo, hi, required, matcher), doc


def _is_scalar(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (str, bool, int))


# -- layers --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GrantLayer:
    """One grant in a task's stack: where it came from (operator, integration, task,
    planner, narrowed, policy, test), and a `note` saying why it grants nothing when it was
    made empty (a planner that failed). A `pending` layer is a planner's place before it
    ran: it grants nothing until the planner's grant replaces it."""

    source: str
    grant: Grant
    note: str | None = None
    pending: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "grant": self.grant.document}
        if self.note:
            out["note"] = self.note
        if self.pending:
            out["pending"] = True
        return out

    @classmethod
    def from_dict(cls, data: Any) -> GrantLayer:
        """A recorded layer; one that cannot be read grants nothing and says why (a trail
        edited by hand, or written by a newer Charter, must not widen a task's grant)."""
        if not isinstance(data, Mapping):
            return cls("unreadable", Grant.empty(), "a recorded grant layer is not a mapping")
        source = data.get("source")
        source = source if isinstance(source, str) and source else "unreadable"
        try:
            grant = Grant.from_document(data.get("grant"))
        except GrantError as exc:
            return cls(source, Grant.empty(), f"the recorded grant could not be read ({exc})")
        note = data.get("note")
        return cls(
            source, grant, note if isinstance(note, str) else None, data.get("pending") is True
        )

    def describe(self) -> str:
        if self.pending:
            return f"{self.source}: nothing yet ({self.note or 'pending'})"
        text = f"{self.source}: {self.grant.describe()}"
        return f"{text} ({self.note})" if self.note else text


def layers_meta(layers: Sequence[GrantLayer]) -> dict[str, Any]:
    """The I-JSON value kept at ``meta["charter.grant"]`` of a record carrying `layers`."""
    return {"layers": [layer.to_dict() for layer in layers]}


def layers_from_meta(value: Any) -> list[GrantLayer]:
    """The layers of a recorded ``meta["charter.grant"]``; an unreadable value is one layer
    that grants nothing (fail closed)."""
    items = value.get("layers") if isinstance(value, Mapping) else None
    if not isinstance(items, list):
        return [GrantLayer("unreadable", Grant.empty(), "the recorded grant is not readable")]
    return [GrantLayer.from_dict(item) for item in items]


def uncovered(current: Sequence[GrantLayer], new: Grant) -> list[str]:
    """The tools `new` names that the current stack does not grant (a narrowing must not
    name them: it would look like a widening, and could never take effect)."""
    live = [layer for layer in current if not layer.pending]
    return [t.name for t in new.tools if not all(layer.grant.covers(t.name) for layer in live)]
