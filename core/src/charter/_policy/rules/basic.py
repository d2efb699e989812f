"""Stateless step rules: deny, allow_only and the field rules."""

from __future__ import annotations

import fnmatch
import operator
import re
from collections.abc import Callable

from charter._model.behavior import Behavior
from charter._model.context import RuleContext
from charter._model.frozen import Frozen
from charter._model.paths import FieldPath, iter_strings
from charter._policy.regex import compile_re2, search_function
from charter._policy.registry import Violation, rule
from charter._policy.rules._fields import FIELD_SCHEMA, field_of, if_missing_schema

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

Verdict = bool | Violation


def _prepare_deny(params: dict[str, Any]) -> str:
    return str(params.get("reason") or "this step is not allowed")


@rule(
    name="deny",
    description="Every step the policy matches is a violation; scope it with `match`.",
    params_schema={
        "type": "object",
        "properties": {"reason": {"type": "string", "description": "Shown when it fires."}},
    },
    example_params={"reason": "deleting records is not allowed for this agent"},
    prepare=_prepare_deny,
    _builtin=True,
)
def deny(view: Behavior, reason: str, ctx: RuleContext) -> Verdict:
    return Violation(reason)


class _AllowOnly(Frozen):
    __slots__ = ("listed", "pattern")
    pattern: re.Pattern[str] | None
    listed: tuple[str, ...] | None

    def __init__(self, pattern: re.Pattern[str] | None, listed: tuple[str, ...] | None) -> None:
        object.__setattr__(self, "pattern", pattern)
        object.__setattr__(self, "listed", listed)


def _prepare_allow_only(params: dict[str, Any]) -> _AllowOnly:
    tools = params.get("tools")
    if tools is None:
        return _AllowOnly(None, None)
    pattern = re.compile("|".join(fnmatch.translate(t) for t in tools)) if tools else None
    return _AllowOnly(pattern, tuple(tools))


@rule(
    name="allow_only",
    description=(
        "The step's step_name must be one of `tools` (shell-style globs), or one of the agent's "
        "declared tools when `tools` is omitted; with neither, every step violates."
    ),
    params_schema={
        "type": "object",
        "properties": {"tools": {"type": "array", "items": {"type": "string", "minLength": 1}}},
    },
    example_params={"tools": ["search_*", "get_weather"]},
    prepare=_prepare_allow_only,
    _builtin=True,
)
def allow_only(view: Behavior, p: _AllowOnly, ctx: RuleContext) -> Verdict:
    if p.listed is not None:
        if p.pattern is not None and p.pattern.match(view.step_name):
            return True
        return Violation(f"{view.step_name!r} is not an allowed tool")
    declared = ctx.declared_tools
    if declared is None:
        return Violation("the agent declared no tools and the policy lists none")
    if view.step_name in declared:
        return True
    return Violation(f"{view.step_name!r} is not among the agent's declared tools")


class _Matches(Frozen):
    __slots__ = ("comply_if_missing", "forbid", "ignore_case", "path", "pattern", "search")
    path: FieldPath
    search: Callable[[str], bool]
    pattern: str
    forbid: bool
    comply_if_missing: bool
    ignore_case: bool

    def __init__(
        self,
        path: FieldPath,
        search: Callable[[str], bool],
        pattern: str,
        forbid: bool,
        comply_if_missing: bool,
        ignore_case: bool = False,
    ) -> None:
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "search", search)
        object.__setattr__(self, "pattern", pattern)
        object.__setattr__(self, "forbid", forbid)
        object.__setattr__(self, "comply_if_missing", comply_if_missing)
        object.__setattr__(self, "ignore_case", ignore_case)


def _prepare_matches(params: dict[str, Any]) -> _Matches:
    forbid = params.get("mode", "forbid") == "forbid"
    missing = params.get("if_missing", "comply" if forbid else "violate")
    fold = bool(params.get("ignore_case", False))
    return _Matches(
        field_of(params),
        search_function(compile_re2(params["pattern"], fold)),
        params["pattern"],
        forbid,
        missing == "comply",
        fold,
    )


@rule(
    name="field_matches",
    description=(
        "RE2 search on the strings at `field` (lists and nested objects are searched). "
        "mode forbid: no string may match; mode require: every string must match."
    ),
    params_schema={
        "type": "object",
        "required": ["field", "pattern"],
        "properties": {
            "field": FIELD_SCHEMA,
            "pattern": {"type": "string", "format": "re2", "minLength": 1},
            "mode": {"type": "string", "enum": ["forbid", "require"]},
            "ignore_case": {"type": "boolean"},
            "if_missing": if_missing_schema("comply for forbid, violate for require"),
        },
    },
    example_params={"field": "input.command", "pattern": r"\brm\s+-rf\s+/", "mode": "forbid"},
    prepare=_prepare_matches,
    _builtin=True,
)
def field_matches(view: Behavior, p: _Matches, ctx: RuleContext) -> Verdict:
    values = p.path.resolve(view)
    if not values:
        return p.comply_if_missing or Violation(f"{p.path.text} is missing")
    search = p.search
    texts = values if len(values) == 1 and type(values[0]) is str else iter_strings(values)
    for text in texts:
        hit = search(text)
        if p.forbid and hit:
            return Violation(f"{p.path.text} matches forbidden pattern '{_short(p.pattern)}'")
        if not p.forbid and not hit:
            return Violation(
                f"{p.path.text} value {text[:80]!r} does not match '{_short(p.pattern)}'"
            )
    return True


def _short(pattern: str) -> str:
    # Reasons are shown to people and models and stored with every blocked step: a long
    # pattern would drown the sentence. The policy's name and description say the rest.
    return pattern if len(pattern) <= 60 else pattern[:57] + "..."


class _Membership(Frozen):
    __slots__ = ("comply_if_missing", "fold", "path", "values")
    path: FieldPath
    values: frozenset[Any]
    fold: bool
    comply_if_missing: bool

    def __init__(
        self,
        path: FieldPath,
        values: frozenset[Any],
        fold: bool,
        comply_if_missing: bool,
    ) -> None:
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "fold", fold)
        object.__setattr__(self, "comply_if_missing", comply_if_missing)


def _norm(value: Any, fold: bool) -> Any:
    return value.casefold() if fold and isinstance(value, str) else value


def _membership(default_missing: str) -> Callable[[dict[str, Any]], _Membership]:
    def prepare(params: dict[str, Any]) -> _Membership:
        fold = bool(params.get("ignore_case", False))
        values = frozenset(_norm(v, fold) for v in params["values"])
        missing = params.get("if_missing", default_missing)
        return _Membership(field_of(params), values, fold, missing == "comply")

    return prepare


def _membership_schema(default_missing: str) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["field", "values"],
        "properties": {
            "field": FIELD_SCHEMA,
            "values": {
                "type": "array",
                "minItems": 1,
                "items": {"type": ["string", "number", "boolean", "null"]},
            },
            "ignore_case": {"type": "boolean"},
            "if_missing": if_missing_schema(default_missing),
        },
    }


def _scalars(values: list[Any]) -> list[Any]:
    out: list[Any] = []
    for v in values:
        out.extend(v if isinstance(v, list) else [v])
    return out


@rule(
    name="field_in",
    description="Every value at `field` (list items one by one) must be one of `values`.",
    params_schema=_membership_schema("violate"),
    example_params={"field": "properties.target.host", "values": ["api.example.com"]},
    prepare=_membership("violate"),
    _builtin=True,
)
def field_in(view: Behavior, p: _Membership, ctx: RuleContext) -> Verdict:
    values = _scalars(p.path.resolve(view))
    if not values:
        return p.comply_if_missing or Violation(f"{p.path.text} is missing")
    for v in values:
        if isinstance(v, (dict, list)) or _norm(v, p.fold) not in p.values:
            return Violation(f"{p.path.text} value {v!r:.80} is not an allowed value")
    return True


@rule(
    name="field_not_in",
    description="No value at `field` (list items one by one) may be one of `values`.",
    params_schema=_membership_schema("comply"),
    example_params={"field": "input.table", "values": ["users", "payments"]},
    prepare=_membership("comply"),
    _builtin=True,
)
def field_not_in(view: Behavior, p: _Membership, ctx: RuleContext) -> Verdict:
    values = _scalars(p.path.resolve(view))
    if not values:
        return p.comply_if_missing or Violation(f"{p.path.text} is missing")
    for v in values:
        if not isinstance(v, (dict, list)) and _norm(v, p.fold) in p.values:
            return Violation(f"{p.path.text} value {v!r:.80} is a forbidden value")
    return True


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}


class _Compare(Frozen):
    __slots__ = ("comply_if_missing", "fn", "op", "path", "value")
    path: FieldPath
    op: str
    fn: Callable[[Any, Any], bool]
    value: float
    comply_if_missing: bool

    def __init__(
        self,
        path: FieldPath,
        op: str,
        fn: Callable[[Any, Any], bool],
        value: float,
        comply_if_missing: bool,
    ) -> None:
        object.__setattr__(self, "path", path)
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "fn", fn)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "comply_if_missing", comply_if_missing)


def _prepare_compare(params: dict[str, Any]) -> _Compare:
    op = params["op"]
    return _Compare(
        field_of(params),
        op,
        _OPS[op],
        params["value"],
        params.get("if_missing", "violate") == "comply",
    )


@rule(
    name="field_compare",
    description=(
        "Every number at `field` must satisfy `op value`; a non-numeric value violates, and so "
        "does a missing one unless if_missing is comply."
    ),
    params_schema={
        "type": "object",
        "required": ["field", "op", "value"],
        "properties": {
            "field": FIELD_SCHEMA,
            "op": {"type": "string", "enum": list(_OPS)},
            "value": {"type": "number"},
            "if_missing": if_missing_schema("violate"),
        },
    },
    example_params={"field": "input.amount", "op": "<=", "value": 1000},
    prepare=_prepare_compare,
    _builtin=True,
)
def field_compare(view: Behavior, p: _Compare, ctx: RuleContext) -> Verdict:
    values = _scalars(p.path.resolve(view))
    if not values:
        return p.comply_if_missing or Violation(f"{p.path.text} is missing")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return Violation(f"{p.path.text} value {v!r:.80} is not a number")
        if not p.fn(v, p.value):
            return Violation(f"{p.path.text} is {v}, which is not {p.op} {p.value}")
    return True
