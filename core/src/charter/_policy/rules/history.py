"""History rules: limits, budgets, approvals, flow, repeats and provenance over the task.

`rate_limit`, `budget` and `no_repeat` are in `charter._policy.rules.quotas`, and
`value_provenance`'s index and check (and `value_trust`, which this module still exports) in
`charter._policy.rules._provenance`, loaded on the first step the rule judges.

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

from charter._model.behavior import TASK_BOUNDARY_KINDS, ActionKind, Behavior, Verb
from charter._model.context import RuleContext
from charter._model.frozen import Frozen
from charter._model.ijson import canonical_digest
from charter._model.paths import FieldPath, parse_path
from charter._model.trust import TRUST_WORDS, Trust, parse_trust, trust_level
from charter._policy.regex import compile_re2
from charter._policy.registry import Violation, rule
from charter._policy.rules._fields import FIELD_SCHEMA, if_missing_schema
from charter._policy.rules._indexes import (
    CountIndex,
    GateIndex,
    GateOptions,
    TriggerIndex,
    Where,
    index_key,
)
from charter._policy.rules._scope import SCOPE_SCHEMA, Scope, parse_scope
from charter._policy.selector import SELECTOR_SCHEMA, Selector

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from charter._model.shared import SharedDemand
    from charter._policy.rules._provenance import value_trust

__all__ = [
    "forbid_after",
    "max_steps",
    "requires_gate",
    "value_provenance",
    "value_trust",
]

Verdict = bool | Violation


def __getattr__(name: str) -> Any:
    # `value_trust` lives in `charter._policy.rules._provenance` with the index it reads
    # (see there): a process that loads these rules need not load it.
    if name == "value_trust":
        from charter._policy.rules._provenance import value_trust

        return value_trust
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        return _shared_limit(view, p.scope, p.counter, p.max, ctx, "")
    done = ctx.history.index(p.key, p.factory).count
    running = _count_running(ctx, view, p.select.matches)
    if done + running + 1 <= p.max:
        return True
    return Violation(
        f"this would be the {_ordinal(done + running + 1)} matching step in the task "
        f"(limit {p.max}): {done} already happened, {running} still running"
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


def _shared_limit(
    view: Behavior, scope: Scope, counter: str, limit: int, ctx: RuleContext, within: str
) -> Verdict:
    """Whether this step stays within `limit` matching steps counted by the shared
    `counter` (`within`: the window the count covers, as words, or "")."""
    before = _shared_count(view, scope, counter, ctx)
    if isinstance(before, Violation):
        return before
    if before + 1 <= limit:
        return True
    return Violation(
        f"this would be the {_ordinal(int(before) + 1)} matching step{within} across the "
        f"{scope.text} (limit {limit}): {_fmt(before)} counted in the shared store"
    )


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


# -- value_provenance --------------------------------------------------------------------------
# The rule is registered here; the index it reads and its check are in `_provenance`,
# imported on the first step it judges (see that module).

_MODES = ["auto", "text", "email", "host", "iban", "url", "phone"]
_NEEDS = ["user", "operator", "internal", "trusted"]
# `charter._policy.extract.KINDS`, written out: importing extract (and the index the check
# needs) would cost every process that loads these rules without judging a step with this one.
_EXTRACT_KINDS = ("urls", "hosts", "emails", "ibans", "phones")


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
                            "items": {"type": "string", "enum": list(_EXTRACT_KINDS)},
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
    from charter._policy.rules._provenance import check

    return check(view, p, ctx)
