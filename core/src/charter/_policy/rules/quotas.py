"""Quota rules over the task: `rate_limit`, `budget` and `no_repeat`.

They read the task through the history indexes and, for a `scope`, the shared store, exactly
as `max_steps` does (see `charter._policy.rules.history`, which still exports them, and whose
helpers they use). They live apart so that a policy set naming none of them (the Claude Code
hook's, which loads the history rules for every tool call) does not load their code and
parameter schemas.
"""

from __future__ import annotations

import bisect
import functools
from collections import Counter

from charter._model.behavior import Behavior, Outcome
from charter._model.context import RuleContext
from charter._model.frozen import Frozen
from charter._model.paths import FieldPath, parse_path
from charter._model.shared import SharedDemand
from charter._policy.registry import Violation, rule
from charter._policy.rules._fields import FIELD_SCHEMA
from charter._policy.rules._indexes import (
    _counter,
    _int,
    _is_step,
    _list,
    _number,
    index_key,
    is_bookkeeping,
    micros,
    numbers_at,
    step_digest,
)
from charter._policy.rules._scope import SCOPE_SCHEMA, Scope, parse_scope
from charter._policy.rules.history import (
    _ATTEMPT_KEEPS,
    _OK_KEEPS,
    _SELECT,
    Verdict,
    _count_running,
    _fmt,
    _ordinal,
    _running,
    _shared_count,
    _shared_limit,
)
from charter._policy.selector import Selector

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["RepeatIndex", "SumIndex", "TimeIndex", "budget", "no_repeat", "rate_limit"]


# -- indexes -----------------------------------------------------------------------------------
# (exported by `charter._policy.rules._indexes` too; see there for what every index keeps)


class TimeIndex:
    """The timestamps (µs, sorted) of recorded steps that match the selector and whose outcome
    is one of `outcomes`; `count_after` is a bisection."""

    __slots__ = ("_outcomes", "_select", "_times")

    def __init__(self, select: Selector, outcomes: frozenset[Outcome]) -> None:
        self._select = select
        self._outcomes = outcomes
        self._times: list[int] = []

    @staticmethod
    def key(select: Selector, outcomes: frozenset[Outcome]) -> str:
        return index_key("charter.times", select.key, tuple(sorted(outcomes)))

    def add(self, step: Behavior) -> None:
        if (
            step.outcome in self._outcomes
            and self._select.matches(step)
            and not is_bookkeeping(step)
        ):
            # Timestamps almost always arrive in order, so insort appends; concurrent steps
            # may arrive slightly out of order and are still placed correctly.
            bisect.insort(self._times, micros(step.timestamp))

    def export_state(self) -> Any:
        return list(self._times)

    def load_state(self, state: Any) -> None:
        times = [_int(t) for t in _list(state)]
        if times != sorted(times):
            raise ValueError("times out of order")
        self._times = times

    def count_after(self, after_us: int) -> int:
        """How many indexed steps are stamped strictly later than `after_us`."""
        return len(self._times) - bisect.bisect_right(self._times, after_us)


class SumIndex:
    """The running sum of the numbers at `path` over recorded `ok` steps matching the selector."""

    __slots__ = ("_path", "_select", "total")

    def __init__(self, select: Selector, path: FieldPath) -> None:
        self._select = select
        self._path = path
        self.total: float = 0

    @staticmethod
    def key(select: Selector, path: FieldPath) -> str:
        return index_key("charter.sum_ok", select.key, path.text)

    def add(self, step: Behavior) -> None:
        if step.outcome is Outcome.OK and self._select.matches(step) and not is_bookkeeping(step):
            self.total += numbers_at(self._path, step)[0]

    def export_state(self) -> Any:
        return self.total

    def load_state(self, state: Any) -> None:
        self.total = _number(state)


class RepeatIndex:
    """How often each (step_name, input digest) ran: `ok` steps, and failed or abandoned ones."""

    __slots__ = ("not_ok", "ok")

    KEY = index_key("charter.repeats")

    def __init__(self) -> None:
        self.ok: Counter[tuple[str, str]] = Counter()
        self.not_ok: Counter[tuple[str, str]] = Counter()

    def add(self, step: Behavior) -> None:
        outcome = step.outcome
        if outcome is Outcome.BLOCKED or not _is_step(step):
            return
        counter = self.ok if outcome is Outcome.OK else self.not_ok
        counter[(step.step_name, step_digest(step))] += 1

    def export_state(self) -> Any:
        return [
            [[name, digest, n] for (name, digest), n in self.ok.items()],
            [[name, digest, n] for (name, digest), n in self.not_ok.items()],
        ]

    def load_state(self, state: Any) -> None:
        ok, not_ok = _list(state)
        self.ok = _counter(ok)
        self.not_ok = _counter(not_ok)


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
        within = f" within {p.window_text} seconds"
        return _shared_limit(view, p.scope, p.counter, p.max, ctx, within)
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
