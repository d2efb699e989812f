"""The rule registry: built-in and user rules, registered with `charter.rule`.

A leaf: the table and the decorator only. Every module that looks rules up imports the
`charter._policy.rules` package, which hands this table its loader (`set_builtin_loader`): a
built-in rule registers itself when its module is first imported, and that happens the first
time anything here needs its name (a policy naming it, a rule registered under it). Listing
the rules, and a name that is not registered, load them all first: what a caller sees is the
same as if every built-in had been registered up front.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from charter._model.frozen import Frozen
from charter._policy.params import check_params

__all__ = ["RuleSpec", "Violation", "check_condition", "get_rule", "registered_rules", "rule"]

ENFORCEMENT_POINTS = ("step_execution", "agent_registration")

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    RuleFn = Callable[[Any, Any, Any], Any]
    F = TypeVar("F", bound=RuleFn)


class Violation:
    """A falsy rule result that says why: ``return Violation("command matches 'rm -rf'")``.

    A rule returns True when the step complies and False (or a Violation) when it violates.
    """

    __slots__ = ("detail",)

    def __init__(self, detail: str) -> None:
        self.detail = detail

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Violation({self.detail!r})"


class RuleSpec(Frozen):
    """A registered rule: its function, params schema and the points where it may be enforced.

    `prepare` turns checked params into whatever the function wants on the hot path (compiled
    patterns, selectors); it runs once per policy load and may raise ValueError to refuse.
    """

    __slots__ = (
        "builtin",
        "description",
        "enforcement_points",
        "example_params",
        "fn",
        "name",
        "params_schema",
        "prepare",
    )
    name: str
    description: str
    fn: RuleFn
    params_schema: dict[str, Any]
    enforcement_points: frozenset[str]
    example_params: dict[str, Any] | None
    prepare: Callable[[dict[str, Any]], Any] | None
    builtin: bool

    def __init__(
        self,
        name: str,
        description: str,
        fn: RuleFn,
        params_schema: dict[str, Any] | None = None,
        enforcement_points: frozenset[str] = frozenset({"step_execution"}),
        example_params: dict[str, Any] | None = None,
        prepare: Callable[[dict[str, Any]], Any] | None = None,
        builtin: bool = False,
    ) -> None:
        put = object.__setattr__
        put(self, "name", name)
        put(self, "description", description)
        put(self, "fn", fn)
        put(
            self,
            "params_schema",
            {"type": "object"} if params_schema is None else params_schema,
        )
        put(self, "enforcement_points", enforcement_points)
        put(self, "example_params", example_params)
        put(self, "prepare", prepare)
        put(self, "builtin", builtin)


_lock = threading.Lock()
_rules: dict[str, RuleSpec] = {}

# Loads the built-ins: the module of one rule name (nothing when no built-in has that name),
# or with None all of them. Set by `charter._policy.rules`.
_load_builtin: Callable[[str | None], None] | None = None


def set_builtin_loader(load: Callable[[str | None], None]) -> None:
    """Installed by `charter._policy.rules` (its modules import the registry, not the reverse)."""
    global _load_builtin
    _load_builtin = load


def _ensure(name: str | None) -> None:
    """Register the built-in rule `name` (all of them with None) if it is not yet."""
    load = _load_builtin
    if load is not None and (name is None or name not in _rules):
        load(name)


def rule(
    *,
    name: str,
    description: str,
    params_schema: dict[str, Any] | None = None,
    enforcement_points: Iterable[str] = ("step_execution",),
    example_params: dict[str, Any] | None = None,
    prepare: Callable[[dict[str, Any]], Any] | None = None,
    replace: bool = False,
    _builtin: bool = False,
) -> Callable[[F], F]:
    """Register a rule function ``fn(view, params, ctx) -> bool | Violation``.

    The function must be pure: no I/O, no clock; history comes from ``ctx.history`` and time
    from the behavior's own timestamp. Returns the function unchanged. Refuses (ValueError) a
    name already registered unless ``replace=True``, and unknown enforcement points.
    """
    points = frozenset(enforcement_points)
    unknown = points - set(ENFORCEMENT_POINTS)
    if unknown or not points:
        raise ValueError(
            f"rule {name!r}: enforcement_points must be among {', '.join(ENFORCEMENT_POINTS)}"
        )
    if not name or not name.replace("_", "").isalnum():
        raise ValueError(f"rule name {name!r}: use letters, digits and underscores")

    def register(fn: F) -> F:
        # A built-in is registered before a rule of the same name, so the clash is reported
        # (or the built-in replaced) exactly as if every built-in had been loaded up front.
        _ensure(name)
        spec = RuleSpec(
            name=name,
            description=description,
            fn=fn,
            params_schema=params_schema or {"type": "object"},
            enforcement_points=points,
            example_params=example_params,
            prepare=prepare,
            builtin=_builtin,
        )
        with _lock:
            if name in _rules and not replace:
                raise ValueError(
                    f"rule {name!r} is already registered; pass replace=True to override it"
                )
            _rules[name] = spec
        return fn

    return register


def unregister(name: str) -> None:
    """Remove a user rule (tests); built-in rules cannot be removed."""
    _ensure(name)
    with _lock:
        spec = _rules.get(name)
        if spec is not None and spec.builtin:
            raise ValueError(f"rule {name!r} is built in and cannot be removed")
        _rules.pop(name, None)


def get_rule(name: str) -> RuleSpec:
    """The rule registered as `name`; KeyError naming the closest registered names otherwise."""
    spec = _rules.get(name)
    if spec is None:
        _ensure(name)
        spec = _rules.get(name)
    if spec is None:
        raise KeyError(unknown_rule_message(name))
    return spec


def unknown_rule_message(name: object) -> str:
    import difflib  # only to suggest a name for a typo

    _ensure(None)  # the names listed and suggested include every built-in
    close = difflib.get_close_matches(str(name), list(_rules), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return f"unknown rule_type {name!r}{hint} (registered: {', '.join(sorted(_rules))})"


def registered_rules() -> tuple[RuleSpec, ...]:
    """Every registered rule, sorted by name."""
    _ensure(None)
    with _lock:
        return tuple(sorted(_rules.values(), key=lambda s: s.name))


def check_condition(cond: Any, path: str) -> list[str]:
    """Validate a nested ``{rule_type, params}`` condition (compound rules), recursively."""
    if not isinstance(cond, dict):
        return [f"{path}: expected an object with rule_type and params"]
    errors: list[str] = []
    extra = set(cond) - {"rule_type", "params"}
    for key in sorted(extra):
        errors.append(f"{path}.{key}: unknown key; a condition takes rule_type and params")
    name = cond.get("rule_type")
    if not isinstance(name, str):
        return [*errors, f"{path}.rule_type: required, the name of a registered rule"]
    try:
        spec = get_rule(name)
    except KeyError as exc:
        return [*errors, f"{path}.rule_type: {exc.args[0]}"]
    if "step_execution" not in spec.enforcement_points:
        errors.append(f"{path}.rule_type: {name!r} is a registration rule, not a step rule")
    params = cond.get("params", {})
    errors.extend(check_params(params, spec.params_schema, f"{path}.params", check_condition))
    if not errors and spec.prepare is not None:
        try:
            spec.prepare(params)
        except ValueError as exc:
            errors.append(f"{path}.params: {exc}")
    return errors
