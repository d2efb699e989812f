"""History rules: limits, budgets, approvals, flow, repeats and provenance over the task.

Every rule here reads the task through an index (see `charter._policy.rules._indexes`), never by
scanning `ctx.history.steps`, so judging a step costs about the same at depth 10,000 as at 10.
Open intents (steps allowed and running, not yet recorded) are few and are read directly.

What counts as having happened: only recorded steps whose outcome is `ok`. Blocked, failed and
abandoned steps never trigger a flow rule, never count towards a limit or budget and never
make content trusted. `rate_limit` is the exception by design: it throttles attempts, so by
default it also counts failed and abandoned steps (they reached, or may have reached, their
target); blocked steps never ran and are never counted.

The step being judged is an intent: its own timestamp is the only clock these rules read.

`max_steps`, `rate_limit` and `budget` take a `scope` (see `charter._policy.rules._scope`):
beyond the task they judge the count the runner read from the store for this step
(`RuleContext.shared`), what every other step in the scope holds now, and never the task's
history (it is in that count already). Their windows are then the runner's clock at the
reservation, not step timestamps.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

from charter._model.behavior import TASK_BOUNDARY_KINDS, ActionKind, Behavior, Outcome, Verb
from charter._model.context import RuleContext
from charter._model.frozen import Frozen
from charter._model.ijson import canonical_digest
from charter._model.paths import FieldPath, parse_path
from charter._model.shared import SharedDemand
from charter._model.trust import TRUST_WORDS, Trust, parse_trust, trust_level
from charter._policy.extract import KINDS as EXTRACT_KINDS
from charter._policy.extract import MAX_SCAN, extract
from charter._policy.regex import compile_re2
from charter._policy.registry import Violation, rule
from charter._policy.rules._fields import FIELD_SCHEMA, if_missing_schema
from charter._policy.rules._indexes import (
    CountIndex,
    GateIndex,
    GateOptions,
    ProvenanceIndex,
    RepeatIndex,
    SumIndex,
    TimeIndex,
    TriggerIndex,
    Where,
    index_key,
    micros,
    number_keys,
    numbers_at,
    provenance_keys,
    step_digest,
    trusted_candidates,
)
from charter._policy.rules._scope import SCOPE_SCHEMA, Scope, parse_scope
from charter._policy.selector import SELECTOR_SCHEMA, Selector

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "budget",
    "forbid_after",
    "max_steps",
    "no_repeat",
    "rate_limit",
    "requires_gate",
    "value_provenance",
    "value_trust",
]

Verdict = bool | Violation


def _selector_schema(description: str) -> dict[str, Any]:
    schema = dict(SELECTOR_SCHEMA)
    schema["description"] = description
    return schema


_SELECT = _selector_schema(
    "Which steps are counted: {kinds, verbs, step_names}, independent of the policy's own "
    "`match` (which says which steps are judged). Default: every step kind (not task.*)."
)


def _running(ctx: RuleContext, view: Behavior) -> Iterator[Behavior]:
    """Open intents other than the step being judged (it may be judged again after
    registration; it must not count twice)."""
    for action_id, intent in ctx.history.open_intents.items():
        if action_id != view.action_id:
            yield intent


def _count_running(ctx: RuleContext, view: Behavior, pred: Callable[[Behavior], bool]) -> int:
    if not ctx.history.open_intents:  # the common case, on the hot path
        return 0
    return sum(1 for b in _running(ctx, view) if pred(b))


def _fmt(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:.10g}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


# -- max_steps ---------------------------------------------------------------------------------


_OK_KEEPS = ("ok",)
_ATTEMPT_KEEPS = ("abandoned", "failed", "ok")


class _MaxSteps(Frozen):
    __slots__ = (
        "counter",
        "factory",
        "key",
        "max",
        "scope",
        "select",
    )
    max: int
    select: Selector
    key: str
    factory: Callable[[], CountIndex]
    scope: Scope | None
    counter: str

    def __init__(
        self,
        max: int,
        select: Selector,
        key: str,
        factory: Callable[[], CountIndex],
        scope: Scope | None,
        counter: str,
    ) -> None:
        put = object.__setattr__
        put(self, "max", max)
        put(self, "select", select)
        put(self, "key", key)
        put(self, "factory", factory)
        put(self, "scope", scope)
        put(self, "counter", counter)

    def shared_demand(self, view: Behavior, agent_id: str) -> SharedDemand | None:
        if self.scope is None or not self.select.matches(view):
            return None
        return self.scope.demand(view, agent_id, self.counter, 1, None, _OK_KEEPS, None)


def _prepare_max_steps(params: dict[str, Any]) -> _MaxSteps:
    select = Selector.from_params(params.get("select"))
    return _MaxSteps(
        params["max"],
        select,
        CountIndex.key(select),
        functools.partial(CountIndex, select),
        parse_scope(params.get("scope")),
        index_key("charter.shared.count_ok", select.key),
    )


@rule(
    name="max_steps",
    description=(
        "At most `max` steps matching `select` in the task, counting recorded ok steps, steps "
        "still running and the step being judged; the (max+1)th is violated. A judged step "
        "that `select` does not match is not counted and complies. Charter's own grant "
        "records (step.self PATCH charter.capabilities) are never counted. `scope` agent or "
        "{per: field} counts across every task and process of the agent instead, in the store."
    ),
    params_schema={
        "type": "object",
        "required": ["max"],
        "properties": {
            "max": {"type": "integer", "minimum": 0},
            "select": _SELECT,
            "scope": SCOPE_SCHEMA,
        },
    },
    example_params={"max": 25, "select": {"kinds": ["step.model"]}},
    prepare=_prepare_max_steps,
    _builtin=True,
)
def max_steps(view: Behavior, p: _MaxSteps, ctx: RuleContext) -> Verdict:
    if not p.select.matches(view):
        return True
    if p.scope is not None:
        before = _shared_count(view, p.scope, p.counter, ctx)
        if isinstance(before, Violation):
            return before
        if before + 1 <= p.max:
            return True
        return Violation(
            f"this would be the {_ordinal(int(before) + 1)} matching step across the "
            f"{p.scope.text} (limit {p.max}): {_fmt(before)} counted in the shared store"
        )
    done = ctx.history.index(p.key, p.factory).count
    running = _count_running(ctx, view, p.select.matches)
    if done + running + 1 <= p.max:
        return True
    return Violation(
        f"this would be the {_ordinal(done + running + 1)} matching step in the task "
        f"(limit {p.max}): {done} already happened, {running} still running"
    )


# -- rate_limit --------------------------------------------------------------------------------

_ATTEMPTS = frozenset({Outcome.OK, Outcome.FAILED, Outcome.ABANDONED})
_OK_ONLY = frozenset({Outcome.OK})


class _RateLimit(Frozen):
    __slots__ = (
        "counter",
        "factory",
        "keeps",
        "key",
        "max",
        "scope",
        "select",
        "window_text",
        "window_us",
    )
    max: int
    window_us: int
    window_text: str
    select: Selector
    key: str
    factory: Callable[[], TimeIndex]
    scope: Scope | None
    counter: str
    keeps: tuple[str, ...]

    def __init__(
        self,
        max: int,
        window_us: int,
        window_text: str,
        select: Selector,
        key: str,
        factory: Callable[[], TimeIndex],
        scope: Scope | None,
        counter: str,
        keeps: tuple[str, ...],
    ) -> None:
        put = object.__setattr__
        put(self, "max", max)
        put(self, "window_us", window_us)
        put(self, "window_text", window_text)
        put(self, "select", select)
        put(self, "key", key)
        put(self, "factory", factory)
        put(self, "scope", scope)
        put(self, "counter", counter)
        put(self, "keeps", keeps)

    def shared_demand(self, view: Behavior, agent_id: str) -> SharedDemand | None:
        if self.scope is None or not self.select.matches(view):
            return None
        return self.scope.demand(view, agent_id, self.counter, 1, self.window_us, self.keeps, None)


def _prepare_rate_limit(params: dict[str, Any]) -> _RateLimit:
    seconds = params["window_seconds"]
    window_us = round(seconds * 1_000_000)
    if window_us < 1:
        raise ValueError("window_seconds must be at least one microsecond")
    only_ok = params.get("count", "attempts") == "ok"
    outcomes = _OK_ONLY if only_ok else _ATTEMPTS
    select = Selector.from_params(params.get("select"))
    return _RateLimit(
        params["max"],
        window_us,
        _fmt(seconds),
        select,
        TimeIndex.key(select, outcomes),
        functools.partial(TimeIndex, select, outcomes),
        parse_scope(params.get("scope")),
        index_key("charter.shared.times", select.key, only_ok, window_us),
        _OK_KEEPS if only_ok else _ATTEMPT_KEEPS,
    )


@rule(
    name="rate_limit",
    description=(
        "At most `max` steps matching `select` within any `window_seconds`, judged on the "
        "steps' own timestamps: the judged step's timestamp is now, and a step stamped exactly "
        "`window_seconds` earlier is outside the window (steps stamped later than now are "
        "inside). Counts recorded steps, steps still running and the judged step. count: "
        "attempts (default) counts ok, failed and abandoned steps; ok counts only ok steps. "
        "Blocked steps never ran and never count, nor do Charter's grant records. A judged "
        "step `select` does not match complies. "
        "`scope` agent or {per: field} counts across the agent instead, in the store, with the "
        "window on the runner's clock."
    ),
    params_schema={
        "type": "object",
        "required": ["max", "window_seconds"],
        "properties": {
            "max": {"type": "integer", "minimum": 0},
            "window_seconds": {"type": "number", "exclusiveMinimum": 0},
            "select": _SELECT,
            "count": {
                "type": "string",
                "enum": ["attempts", "ok"],
                "description": "Which recorded steps count (default attempts: not blocked).",
            },
            "scope": SCOPE_SCHEMA,
        },
    },
    example_params={"max": 10, "window_seconds": 60, "select": {"step_names": ["search_*"]}},
    prepare=_prepare_rate_limit,
    _builtin=True,
)
def rate_limit(view: Behavior, p: _RateLimit, ctx: RuleContext) -> Verdict:
    if not p.select.matches(view):
        return True
    if p.scope is not None:
        before = _shared_count(view, p.scope, p.counter, ctx)
        if isinstance(before, Violation):
            return before
        if before + 1 <= p.max:
            return True
        return Violation(
            f"this would be the {_ordinal(int(before) + 1)} matching step within "
            f"{p.window_text} seconds across the {p.scope.text} (limit {p.max}): "
            f"{_fmt(before)} counted in the shared store"
        )
    after = micros(view.timestamp) - p.window_us
    recorded = ctx.history.index(p.key, p.factory).count_after(after)
    running = _count_running(
        ctx, view, lambda b: p.select.matches(b) and micros(b.timestamp) > after
    )
    total = recorded + running + 1
    if total <= p.max:
        return True
    return Violation(
        f"this would be the {_ordinal(total)} matching step within {p.window_text} seconds "
        f"(limit {p.max}): {recorded + running} already in the window"
    )


# -- budget ------------------------------------------------------------------------------------


class _Budget(Frozen):
    __slots__ = (
        "counter",
        "factory",
        "key",
        "limit",
        "path",
        "scope",
        "select",
        "window_text",
        "window_us",
    )
    path: FieldPath
    limit: float
    select: Selector
    key: str
    factory: Callable[[], SumIndex]
    scope: Scope | None
    counter: str
    window_us: int | None
    window_text: str

    def __init__(
        self,
        path: FieldPath,
        limit: float,
        select: Selector,
        key: str,
        factory: Callable[[], SumIndex],
        scope: Scope | None,
        counter: str,
        window_us: int | None,
        window_text: str,
    ) -> None:
        put = object.__setattr__
        put(self, "path", path)
        put(self, "limit", limit)
        put(self, "select", select)
        put(self, "key", key)
        put(self, "factory", factory)
        put(self, "scope", scope)
        put(self, "counter", counter)
        put(self, "window_us", window_us)
        put(self, "window_text", window_text)

    def shared_demand(self, view: Behavior, agent_id: str) -> SharedDemand | None:
        if self.scope is None:
            return None
        if not self.select.matches(view):
            # Judged against the counter, taking nothing from it.
            return self.scope.demand(view, agent_id, self.counter, 0, self.window_us, (), None)
        amount, bad = numbers_at(self.path, view)
        if bad:
            return None
        return self.scope.demand(
            view, agent_id, self.counter, amount, self.window_us, _OK_KEEPS, self.path.text
        )


def _prepare_budget(params: dict[str, Any]) -> _Budget:
    path = parse_path(params["field"])
    select = Selector.from_params(params.get("select"))
    scope = parse_scope(params.get("scope"))
    seconds = params.get("window_seconds")
    window_us: int | None = None
    if seconds is not None:
        if scope is None:
            raise ValueError(
                "window_seconds needs scope agent or {per: <field path>}: a task's budget "
                "counts the whole task (remove window_seconds, or set a scope)"
            )
        window_us = round(seconds * 1_000_000)
        if window_us < 1:
            raise ValueError("window_seconds must be at least one microsecond")
    return _Budget(
        path,
        params["limit"],
        select,
        SumIndex.key(select, path),
        functools.partial(SumIndex, select, path),
        scope,
        index_key("charter.shared.sum_ok", select.key, path.text, window_us),
        window_us,
        "" if seconds is None else _fmt(seconds),
    )


@rule(
    name="budget",
    description=(
        "The sum of the numbers at `field` over recorded ok steps matching `select`, steps "
        "still running and the judged step must stay <= `limit`. Outcome-only values (model "
        "token usage) count once recorded; the judged intent adds what it carries (often "
        "nothing). Once the budget is spent every step the policy matches is violated. "
        "Negative numbers count as 0; a non-number at `field` of the judged step violates. "
        "`scope` agent or {per: field} sums across the agent instead, in the store, over "
        "`window_seconds` when given."
    ),
    params_schema={
        "type": "object",
        "required": ["field", "limit"],
        "properties": {
            "field": FIELD_SCHEMA,
            "limit": {"type": "number", "minimum": 0},
            "select": _SELECT,
            "scope": SCOPE_SCHEMA,
            "window_seconds": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": "With a scope beyond the task: only what was spent within "
                "this many seconds counts (a sliding window), e.g. 86400 for a day.",
            },
        },
    },
    example_params={
        "field": "properties.model.usage.total_tokens",
        "limit": 200000,
        "select": {"kinds": ["step.model"]},
    },
    prepare=_prepare_budget,
    _builtin=True,
)
def budget(view: Behavior, p: _Budget, ctx: RuleContext) -> Verdict:
    if p.scope is not None:
        return _shared_budget(view, p, p.scope, ctx)
    spent = ctx.history.index(p.key, p.factory).total
    running: float = 0
    if ctx.history.open_intents:
        for b in _running(ctx, view):
            if p.select.matches(b):
                running += numbers_at(p.path, b)[0]
    this: float = 0
    if p.select.matches(view):
        this, bad = numbers_at(p.path, view)
        if bad:
            return Violation(f"{p.path.text} value {bad[0]!r:.60} is not a number")
    total = spent + running + this
    if total <= p.limit:
        return True
    return Violation(
        f"{p.path.text} would total {_fmt(total)}, above the budget of {_fmt(p.limit)} "
        f"(spent {_fmt(spent)}, running {_fmt(running)}, this step {_fmt(this)})"
    )


def _shared_budget(view: Behavior, p: _Budget, scope: Scope, ctx: RuleContext) -> Verdict:
    this: float = 0
    if p.select.matches(view):
        this, bad = numbers_at(p.path, view)
        if bad:
            return Violation(f"{p.path.text} value {bad[0]!r:.60} is not a number")
    spent = _shared_count(view, scope, p.counter, ctx)
    if isinstance(spent, Violation):
        return spent
    if spent + this <= p.limit:
        return True
    within = f" within {p.window_text} seconds" if p.window_text else ""
    return Violation(
        f"{p.path.text} would total {_fmt(spent + this)}{within} across the {scope.text}, above "
        f"the budget of {_fmt(p.limit)} (spent or running {_fmt(spent)} in the shared store, "
        f"this step {_fmt(this)})"
    )


def _shared_count(
    view: Behavior, scope: Scope, counter: str, ctx: RuleContext
) -> float | Violation:
    """What the shared counter held before this step, as the caller read it for this step."""
    key = scope.key(view, ctx.context.agent_id, counter)
    if isinstance(key, Violation):
        return key
    before = ctx.shared.get(key)
    if before is None:
        return scope.missing(key)
    return before


# -- requires_gate -----------------------------------------------------------------------------


_CONSUMER_KINDS = frozenset(ActionKind) - TASK_BOUNDARY_KINDS - {ActionKind.STEP_GATE}


def _prepare_requires_gate(params: dict[str, Any]) -> GateOptions:
    select = params.get("select") or {}
    kinds = select.get("kinds")
    verbs = select.get("verbs")
    names = select.get("step_names")
    # Gates approve steps; they never use up an approval themselves.
    selector = Selector(
        frozenset(ActionKind(k) for k in kinds) if kinds else _CONSUMER_KINDS,
        frozenset(Verb(v) for v in verbs) if verbs else None,
        tuple(names) if names else None,
    )
    return GateOptions(
        gate_kind=params.get("gate_kind"),
        same_step=params.get("same_step", True),
        bind_input=params.get("bind_input", True),
        within=params.get("within_steps"),
        single_use=params.get("single_use", True),
        select=selector,
    )


@rule(
    name="requires_gate",
    description=(
        "The step needs an earlier recorded step.gate whose decision is pass: of `gate_kind` "
        "(any kind when omitted), for the same step_name (`same_step`, default true), for this "
        "exact input (`bind_input`: the gate's digest equals the canonical digest of the "
        "step's input, default true), among the last `within_steps` recorded steps (when "
        "given). With `single_use` (default true) one approval authorises one step: the first "
        "later ok step matching `select` that it would authorise uses it up, and steps still "
        "running hold theirs. Denied, pending, failed and used-up gates do not count, and a "
        "later deny for the same step and input revokes earlier unused approvals."
    ),
    params_schema={
        "type": "object",
        "properties": {
            "gate_kind": {"type": "string", "enum": ["human", "guardrail"]},
            "same_step": {"type": "boolean"},
            "bind_input": {"type": "boolean"},
            "within_steps": {"type": "integer", "minimum": 1},
            "single_use": {"type": "boolean"},
            "select": _selector_schema(
                "Which recorded steps use up an approval (default: every step kind except "
                "step.gate); set it like the policy's `match` when approvals bind neither the "
                "step nor its input."
            ),
        },
    },
    example_params={"gate_kind": "human", "same_step": True, "bind_input": True},
    prepare=_prepare_requires_gate,
    _builtin=True,
)
def requires_gate(view: Behavior, p: GateOptions, ctx: RuleContext) -> Verdict:
    index = ctx.history.index(p.key, lambda: GateIndex(p))
    binding = p.binding(view)
    reserved = 0
    if p.single_use:
        reserved = _count_running(ctx, view, lambda b: p.consumes(b) and p.binding(b) == binding)
    available, group = index.lookup(binding)
    if available > reserved:
        return True
    what = f"a passing {p.gate_kind + ' ' if p.gate_kind else ''}approval"
    target = f" for {view.step_name!r}" if p.same_step else ""
    exact = " with this exact input" if p.bind_input else ""
    base = f"needs {what}{target}{exact}"
    if group is None:
        return Violation(f"{base}; none was recorded in the task")
    if available:
        return Violation(
            f"{base}; the {available} open approval(s) are held by steps still running"
        )
    # Otherwise report what happened to the most recent approval for this binding.
    reasons: list[tuple[int, str]] = []
    if group.last_refused is not None:
        seq, decision = group.last_refused
        reasons.append((seq, f"the latest gate (seq {seq}) decided {decision!r}"))
    if group.last_used is not None:
        seq, by = group.last_used
        reasons.append(
            (
                seq,
                f"approval seq {seq} was already used by step seq {by}; one approval "
                "authorises one step",
            )
        )
    expired = index.expired_seq(group)
    if expired is not None:
        reasons.append((expired, f"approval seq {expired} is older than the last {p.within} steps"))
    if not reasons:
        return Violation(f"{base}; none is available")
    return Violation(f"{base}; {max(reasons)[1]}")


# -- forbid_after ------------------------------------------------------------------------------

_SCALAR = {"type": ["string", "number", "boolean"]}
_WHERE = {
    "type": "array",
    "minItems": 1,
    "description": "Conditions on the earlier step's fields; all must hold.",
    "items": {
        "type": "object",
        "required": ["field"],
        "properties": {
            "field": FIELD_SCHEMA,
            "equals": _SCALAR,
            "in": {"type": "array", "minItems": 1, "items": _SCALAR},
            "pattern": {"type": "string", "format": "re2", "minLength": 1},
        },
    },
}
_AFTER = _selector_schema(
    "The earlier step that closes the door: {kinds, verbs, step_names} plus optional `where` "
    "conditions on its fields, e.g. [{field: properties.data.trust, equals: external}] (trust "
    "words there compare as levels: untrusted is external, trusted is internal)."
)
_AFTER["properties"] = {**SELECTOR_SCHEMA["properties"], "where": _WHERE}


class _ForbidAfter(Frozen):
    __slots__ = (
        "factory",
        "key",
        "within",
    )
    within: int | None
    key: str
    factory: Callable[[], TriggerIndex]

    def __init__(
        self,
        within: int | None,
        key: str,
        factory: Callable[[], TriggerIndex],
    ) -> None:
        put = object.__setattr__
        put(self, "within", within)
        put(self, "key", key)
        put(self, "factory", factory)


_TRUST_FIELD = "properties.data.trust"


def _trust_words(values: Any) -> bool:
    return bool(values) and all(isinstance(v, str) and v in TRUST_WORDS for v in values)


def _prepare_forbid_after(params: dict[str, Any]) -> _ForbidAfter:
    after = params["after"]
    conds: list[tuple[FieldPath, str, Any]] = []
    keys: list[tuple[Any, ...]] = []
    for i, cond in enumerate(after.get("where", ())):
        ops = [op for op in ("equals", "in", "pattern") if op in cond]
        if len(ops) != 1:
            raise ValueError(f"after.where[{i}]: give exactly one of equals, in, pattern")
        op = ops[0]
        arg = cond[op]
        keys.append((cond["field"], op, canonical_digest(arg)))
        if op == "pattern":
            arg = compile_re2(arg)
        elif cond["field"] == _TRUST_FIELD and _trust_words(arg if op == "in" else [arg]):
            # Trust marks compare as levels: `untrusted` (older trails) is `external`
            # (today's templates), `trusted` is `internal`.
            op, arg = "level", frozenset(trust_level(a) for a in (arg if op == "in" else [arg]))
        conds.append((parse_path(cond["field"]), op, arg))
    select = Selector.from_params({k: v for k, v in after.items() if k != "where"})
    where = Where(conds, tuple(keys))
    return _ForbidAfter(
        params.get("within_steps"),
        TriggerIndex.key(select, where),
        functools.partial(TriggerIndex, select, where),
    )


@rule(
    name="forbid_after",
    description=(
        "Once a step matching `after` (selector plus `where` conditions) has happened (ok "
        "outcome) in the task, the steps this policy matches are violated; with "
        "`within_steps` K only for the next K steps that happen after it. Blocked, failed and "
        "abandoned steps did not happen: they neither trigger it nor use up the K steps."
    ),
    params_schema={
        "type": "object",
        "required": ["after"],
        "properties": {
            "after": _AFTER,
            "within_steps": {"type": "integer", "minimum": 1},
        },
    },
    example_params={
        "after": {
            "kinds": ["step.resource"],
            "where": [{"field": "properties.data.trust", "equals": "external"}],
        },
    },
    prepare=_prepare_forbid_after,
    _builtin=True,
)
def forbid_after(view: Behavior, p: _ForbidAfter, ctx: RuleContext) -> Verdict:
    index = ctx.history.index(p.key, p.factory)
    if index.last is None:
        return True
    since = index.since()
    if p.within is not None and since >= p.within:
        return True
    _, seq, name = index.last
    if p.within is None:
        return Violation(f"{view.step_name!r} is forbidden after {name!r} (seq {seq}) ran")
    return Violation(
        f"{view.step_name!r} is forbidden for {p.within} step(s) after {name!r} (seq {seq}) "
        f"ran; {since} happened since"
    )


# -- no_repeat ---------------------------------------------------------------------------------


class _NoRepeat(Frozen):
    __slots__ = (
        "include_failed",
        "max",
    )
    max: int
    include_failed: bool

    def __init__(
        self,
        max: int,
        include_failed: bool,
    ) -> None:
        put = object.__setattr__
        put(self, "max", max)
        put(self, "include_failed", include_failed)


@rule(
    name="no_repeat",
    description=(
        "The same step (step_name and canonical input) may run at most `max` times in the "
        "task (default 1), counting recorded ok steps, steps still running and the judged "
        "step: catches loops and duplicate side effects. `include_failed` also counts failed "
        "and abandoned runs (retries); blocked steps never count."
    ),
    params_schema={
        "type": "object",
        "properties": {
            "max": {"type": "integer", "minimum": 1},
            "include_failed": {"type": "boolean"},
        },
    },
    example_params={"max": 2, "include_failed": False},
    prepare=lambda params: _NoRepeat(
        params.get("max", 1), bool(params.get("include_failed", False))
    ),
    _builtin=True,
)
def no_repeat(view: Behavior, p: _NoRepeat, ctx: RuleContext) -> Verdict:
    index = ctx.history.index(RepeatIndex.KEY, RepeatIndex)
    digest = step_digest(view)
    key = (view.step_name, digest)
    done = index.ok[key]
    failed = index.not_ok[key] if p.include_failed else 0
    running = _count_running(
        ctx, view, lambda b: b.step_name == view.step_name and step_digest(b) == digest
    )
    total = done + failed + running + 1
    if total <= p.max:
        return True
    parts = [f"{done} ran"]
    if p.include_failed:
        parts.append(f"{failed} failed or were abandoned")
    parts.append(f"{running} still running")
    return Violation(
        f"{view.step_name!r} with this exact input would run {total} times (limit {p.max}): "
        + ", ".join(parts)
    )


# -- value_provenance --------------------------------------------------------------------------

_MODES = ["auto", "text", "email", "host", "iban", "url", "phone"]
_NEEDS = ["user", "operator", "internal", "trusted"]
_KIND_KEYS = {"urls": "u", "hosts": "h", "emails": "e", "ibans": "i", "phones": "p"}
_KIND_NAMES = {
    "urls": "link",
    "hosts": "host",
    "emails": "address",
    "ibans": "IBAN",
    "phones": "phone number",
}


class _Field(Frozen):
    __slots__ = (
        "extract",
        "mode",
        "needs",
        "path",
    )
    path: FieldPath
    mode: str
    needs: Trust
    extract: tuple[str, ...]

    def __init__(
        self,
        path: FieldPath,
        mode: str,
        needs: Trust,
        extract: tuple[str, ...],
    ) -> None:
        put = object.__setattr__
        put(self, "path", path)
        put(self, "mode", mode)
        put(self, "needs", needs)
        put(self, "extract", extract)


class _Provenance(Frozen):
    __slots__ = (
        "comply_if_missing",
        "fields",
    )
    fields: tuple[_Field, ...]
    comply_if_missing: bool

    def __init__(
        self,
        fields: tuple[_Field, ...],
        comply_if_missing: bool,
    ) -> None:
        put = object.__setattr__
        put(self, "fields", fields)
        put(self, "comply_if_missing", comply_if_missing)


def _prepare_provenance(params: dict[str, Any]) -> _Provenance:
    default = parse_trust(params.get("trust", "internal"), "trust")
    fields: list[_Field] = []
    for item in params["fields"]:
        if isinstance(item, str):
            fields.append(_Field(parse_path(item), "auto", default, ()))
            continue
        needs = default
        if "trust" in item:
            needs = parse_trust(item["trust"], f"fields[{item['field']}].trust")
        kinds = tuple(dict.fromkeys(item.get("extract", ())))
        fields.append(
            _Field(parse_path(item["field"]), item.get("normalise", "auto"), needs, kinds)
        )
    return _Provenance(tuple(fields), params.get("if_missing", "comply") == "comply")


@functools.lru_cache(maxsize=64)
def _context_candidates(values: tuple[str, ...]) -> frozenset[tuple[str, str]]:
    return trusted_candidates(values)


def _values(found: list[Any]) -> Iterator[str | int | float]:
    """Strings and numbers at a field, lists and objects searched; booleans are not values."""
    for v in found:
        if isinstance(v, str):
            if v.strip():
                yield v
        elif isinstance(v, int | float) and not isinstance(v, bool):
            yield v
        elif isinstance(v, list):
            yield from _values(v)
        elif isinstance(v, dict):
            yield from _values(list(v.values()))


def _keys(value: str | int | float, mode: str) -> tuple[tuple[str, str], ...]:
    if isinstance(value, str):
        return provenance_keys(value, mode)
    return number_keys(value)


def value_trust(ctx: RuleContext, value: Any, normalise: str = "auto") -> Trust:
    """The highest trust level `value` (a string or a number) was seen at in the task so far:
    recorded content as `value_provenance` reads it, and the context's trusted values
    (``operator``); ``external`` when it was seen in no content at ``internal`` or above.
    `normalise` is one of value_provenance's modes. Pure: reads the task's index only."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return Trust.EXTERNAL
    keys = _keys(value, normalise)
    index = ctx.history.index(ProvenanceIndex.KEY, ProvenanceIndex)
    found = index.level_of(keys)
    level = found[0] if found is not None else Trust.EXTERNAL
    trusted_ctx = _context_candidates(ctx.context.trusted_values)
    if level < Trust.OPERATOR and any(k in trusted_ctx for k in keys):
        level = Trust.OPERATOR
    return level


class _Lookup:
    """The task's provenance index and the context's trusted values, fetched on first use."""

    __slots__ = (
        "ctx",
        "index",
        "trusted",
    )

    def __init__(self, ctx: RuleContext) -> None:
        self.ctx = ctx
        self.index: ProvenanceIndex | None = None
        self.trusted: frozenset[tuple[str, str]] = frozenset()

    def check(self, keys: tuple[tuple[str, str], ...], needs: Trust) -> str | None:
        """None when one of `keys` was seen at `needs` or above, else why not."""
        if self.index is None:
            self.index = self.ctx.history.index(ProvenanceIndex.KEY, ProvenanceIndex)
            self.trusted = _context_candidates(self.ctx.context.trusted_values)
        found = self.index.level_of(keys)
        if found is not None and found[0] >= needs:
            return None
        if needs <= Trust.OPERATOR and any(k in self.trusted for k in keys):
            return None
        wanted = "trusted content" if needs is Trust.INTERNAL else f"{needs.word} content"
        base = f"did not appear in {wanted} earlier in the task ({_SOURCES[needs]})"
        if found is not None:
            return f"{base}; it came only from {found[0].word} content (seq {found[1]})"
        return base


_SOURCES = {
    Trust.USER: "the user's messages",
    Trust.OPERATOR: "the user's messages, trusted values",
    Trust.INTERNAL: "user messages, trusted values, outputs marked trusted or internal",
}


@rule(
    name="value_provenance",
    description=(
        "Every value at `fields` (e.g. a recipient, an IBAN, a URL's host) must have appeared "
        "earlier in the task in content trusted at least as far as `trust` (per field, or for "
        "all; default internal). Levels, highest first: user (a recorded ok step.message GET "
        "with properties.message.role user), operator (the context's trusted_values), "
        "internal (outputs marked properties.data.trust internal or trusted, or parts of an "
        "output given that level by properties.data.field_trust), external "
        "(everything else: unmarked, untrusted or unknown). A model call's output counts at "
        "the lowest level of the content recorded before it, and never above internal. A "
        "value's level is the highest it was seen at. `extract` checks the values inside a "
        "text instead of the text: every link (urls), link or address host (hosts), e-mail "
        "address (emails), IBAN with valid check digits (ibans) and phone number (phones) in "
        "it must be trusted. Matching is exact after normalisation: text NFKC, whitespace "
        "collapsed, case-folded; e-mail addresses and hosts also IDNA (UTS 46) with no "
        "trailing dot, port or userinfo; IBANs without spaces, upper case; phones as + and "
        "digits (international) or digits (national); numbers by value (40 == 40.0, and a "
        "number written in trusted text counts), but a string is text, so '40' never "
        "matches the number 40.0. A value seen only in lower content, or nowhere, violates."
    ),
    params_schema={
        "type": "object",
        "required": ["fields"],
        "properties": {
            "fields": {
                "type": "array",
                "minItems": 1,
                "description": "Paths, or {field, normalise, trust, extract} with normalise "
                "one of "
                + ", ".join(_MODES)
                + " (default auto: IBAN-like values as IBANs, 'Name <addr>' as the address), "
                "trust the level this field needs, extract the kinds of value to check "
                "inside its text.",
                "items": {
                    "type": ["string", "object"],
                    "format": "path",
                    "required": ["field"],
                    "properties": {
                        "field": FIELD_SCHEMA,
                        "normalise": {"type": "string", "enum": _MODES},
                        "trust": {"type": "string", "enum": _NEEDS},
                        "extract": {
                            "type": "array",
                            "minItems": 1,
                            "items": {"type": "string", "enum": list(EXTRACT_KINDS)},
                        },
                    },
                },
            },
            "trust": {
                "type": "string",
                "enum": _NEEDS,
                "description": "The lowest level a value may come from (default internal).",
            },
            "if_missing": if_missing_schema("comply"),
        },
    },
    example_params={
        "fields": [
            "input.to[*]",
            {"field": "input.iban", "trust": "user"},
            {"field": "input.url", "normalise": "host"},
            {"field": "input.body", "extract": ["hosts", "emails"]},
        ]
    },
    prepare=_prepare_provenance,
    _builtin=True,
)
def value_provenance(view: Behavior, p: _Provenance, ctx: RuleContext) -> Verdict:
    lookup = _Lookup(ctx)
    any_value = False
    for f in p.fields:
        for value in _values(f.path.resolve(view)):
            any_value = True
            if f.extract:
                why = _check_text(value, f, lookup)
                if why is not None:
                    return Violation(why)
                continue
            keys = _keys(value, f.mode)
            why = lookup.check(keys, f.needs)
            if why is not None:
                shown = keys[0][1] if f.mode == "host" and keys else value
                what = "host " if f.mode == "host" else ""
                return Violation(f"{f.path.text} {what}{shown!r:.80} {why}")
    if not any_value and not p.comply_if_missing:
        return Violation(
            "none of " + ", ".join(f.path.text for f in p.fields) + " has a value to check"
        )
    return True


def _check_text(value: str | int | float, f: _Field, lookup: _Lookup) -> str | None:
    if not isinstance(value, str):
        return None  # a number holds no link, address or account
    if len(value) > MAX_SCAN:
        return (
            f"{f.path.text} is {len(value)} characters long, more than the {MAX_SCAN} that "
            "can be searched for links and addresses"
        )
    for kind, found in extract(value, f.extract):
        keys: tuple[tuple[str, str], ...] = ((_KIND_KEYS[kind], found),)
        if kind == "emails":
            keys += (("t", found),)
        why = lookup.check(keys, f.needs)
        if why is not None:
            return f"{f.path.text} holds the {_KIND_NAMES[kind]} {found!r:.80}, which {why}"
    return None
