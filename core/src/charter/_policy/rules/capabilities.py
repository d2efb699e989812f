"""The `capabilities` rule: a step must lie inside the task's capability grant.

The grant travels in the task's chain (``meta["charter.grant"]`` of its task.start and of
any later ``step.self PATCH charter.capabilities`` record that narrows it), so the rule reads
it from the history through an index built once per task, and `charter replay` judges the
same way. A rule can only violate: a grant narrows what the other policies allow and never
widens it.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

from charter._model.behavior import ActionKind, Behavior, Outcome, Verb
from charter._model.context import RuleContext
from charter._model.paths import iter_strings
from charter._model.trust import Trust
from charter._policy.capabilities import (
    GRANT_META,
    GRANT_STEP,
    SOURCE_WORDS,
    ArgConstraint,
    Grant,
    GrantError,
    GrantLayer,
    as_number,
    layers_from_meta,
)
from charter._policy.registry import Violation, rule
from charter._policy.rules._provenance import ProvenanceIndex, provenance_keys, trusted_candidates

__all__ = ["GrantIndex", "capabilities", "is_grant_record"]

Verdict = bool | Violation

# Steps that are not the agent acting on the world: model calls, approvals, task boundaries.
_NOT_JUDGED = frozenset(
    {
        ActionKind.TASK_START,
        ActionKind.TASK_END,
        ActionKind.TASK_ERROR,
        ActionKind.TASK_IDLE,
        ActionKind.STEP_MODEL,
        ActionKind.STEP_GATE,
    }
)


def is_grant_record(step: Behavior) -> bool:
    """Whether `step` is Charter's record of a narrowed grant (not an agent's step)."""
    return (
        step.kind is ActionKind.STEP_SELF
        and step.step_name == GRANT_STEP
        and GRANT_META in step.meta
    )


class GrantIndex:
    """The task's grant layers, as its task.start and its narrowing records left them.

    `granted` is False only for a task whose records carry no grant at all. A planner's
    grant replaces the pending planner layer of the task.start; every other layer is added.
    """

    __slots__ = ("granted", "layers")

    KEY = "charter.capabilities"

    def __init__(self) -> None:
        self.layers: tuple[GrantLayer, ...] = ()
        self.granted = False

    def add(self, step: Behavior) -> None:
        if step.kind is ActionKind.TASK_START:
            if GRANT_META in step.meta:
                self.layers = tuple(layers_from_meta(step.meta[GRANT_META]))
                self.granted = True
        elif is_grant_record(step) and step.outcome is Outcome.OK:
            layers = list(self.layers)
            for layer in layers_from_meta(step.meta[GRANT_META]):
                waiting = [
                    i for i, x in enumerate(layers) if x.pending and x.source == layer.source
                ]
                if waiting and not layer.pending:
                    layers[waiting[0]] = layer
                else:
                    layers.append(layer)
            self.layers = tuple(layers)
            self.granted = True


class UserValueIndex:
    """Normalised candidate values of the task's user messages (ok step.message GET with
    ``properties.message.role == "user"``), extracted once per recorded message."""

    __slots__ = ("values",)

    KEY = "charter.capabilities.user"

    def __init__(self) -> None:
        self.values: set[tuple[str, str]] = set()

    def add(self, step: Behavior) -> None:
        if (
            step.kind is ActionKind.STEP_MESSAGE
            and step.verb is Verb.GET
            and step.outcome is Outcome.OK
            and _role(step.properties) == "user"
        ):
            texts = [*iter_strings(step.input), *iter_strings(step.output)]
            self.values.update(trusted_candidates(texts))

    def export_state(self) -> Any:
        return sorted([ns, value] for ns, value in self.values)

    def load_state(self, state: Any) -> None:
        if type(state) is not list:
            raise TypeError("expected a list of [namespace, value]")
        values: set[tuple[str, str]] = set()
        for row in state:
            if type(row) is not list or len(row) != 2 or not all(type(x) is str for x in row):
                raise TypeError("expected [namespace, value]")
            values.add((row[0], row[1]))
        self.values = values


def _role(properties: dict[str, Any]) -> Any:
    message = properties.get("message")
    return message.get("role") if isinstance(message, dict) else None


@functools.lru_cache(maxsize=64)
def _context_candidates(values: tuple[str, ...]) -> frozenset[tuple[str, str]]:
    return trusted_candidates(values)


class _Params(NamedTuple):
    grant: GrantLayer | None
    comply_without_grant: bool


def _prepare(params: dict[str, Any]) -> _Params:
    raw = params.get("grant")
    grant = None
    if raw is not None:
        try:
            grant = GrantLayer("policy", Grant.from_document(raw, "grant"))
        except GrantError as exc:
            raise ValueError("; ".join(exc.problems)) from None
    return _Params(grant, params.get("without_grant", "violate") == "comply")


def _scalars(found: list[Any]) -> list[Any]:
    """The values at a field, lists and objects opened (their items judged one by one)."""
    out: list[Any] = []
    stack = list(reversed(found))
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            stack.extend(reversed(v))
        elif isinstance(v, dict):
            stack.extend(reversed(list(v.values())))
        else:
            out.append(v)
    return out


class _Sources:
    """The value sources of one evaluation, fetched only when a constraint needs them."""

    __slots__ = ("_ctx", "_trusted", "_user")

    def __init__(self, ctx: RuleContext) -> None:
        self._ctx = ctx
        self._user: set[tuple[str, str]] | None = None
        self._trusted: tuple[ProvenanceIndex, frozenset[tuple[str, str]]] | None = None

    def holds(self, source: str, value: str) -> bool:
        if source == "external":
            return True  # every value is at least external
        keys = provenance_keys(value, "auto")
        if source == "user":
            if self._user is None:
                self._user = self._ctx.history.index(UserValueIndex.KEY, UserValueIndex).values
            return any(k in self._user for k in keys)
        if self._trusted is None:
            seen = self._ctx.history.index(ProvenanceIndex.KEY, ProvenanceIndex)
            self._trusted = (seen, _context_candidates(self._ctx.context.trusted_values))
        seen, configured = self._trusted
        # "trusted" (internal) is what value_provenance trusts by default: content at
        # internal or above; the operator's trusted values count at operator level.
        need = Trust.OPERATOR if source == "operator" else Trust.INTERNAL
        found = seen.level_of(keys)
        if found is not None and found[0] >= need:
            return True
        return any(k in configured for k in keys)


def _problem(c: ArgConstraint, view: Behavior, sources: _Sources) -> str | None:
    """Why the values at `c`'s field break it, or None."""
    values = _scalars(c.path.resolve(view))
    if not values:
        return f"{c.path.text} is missing and the grant requires it" if c.required else None
    for v in values:
        why = _why(c, v, sources)
        if why is not None:
            return f"{c.path.text} {v!r:.80} {why}"
    return None


def _why(c: ArgConstraint, v: Any, sources: _Sources) -> str | None:
    """Why one value breaks `c`, or None."""
    if c.values is not None and not c.allows_value(v):
        return "is not one of the granted values"
    if c.fullmatch is not None:
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            return "is not text, so it cannot match the granted pattern"
        if not c.fullmatch(v if isinstance(v, str) else str(v)):
            return f"does not match the granted pattern {c.pattern!r}"
    if c.minimum is not None or c.maximum is not None:
        number = as_number(v)
        if number is None:
            return "is not a number, and the grant bounds it"
        if c.minimum is not None and number < c.minimum:
            return f"is below the granted minimum {c.minimum}"
        if c.maximum is not None and number > c.maximum:
            return f"is above the granted maximum {c.maximum}"
    if c.source is not None and not isinstance(v, bool) and v is not None:
        text = v if isinstance(v, str) else str(v)
        if text.strip() and not sources.holds(c.source, text):
            return f"did not come from {SOURCE_WORDS[c.source]}"
    return None


def _layer_problem(layer: GrantLayer, view: Behavior, sources: _Sources) -> str | None:
    """Why `layer` does not grant `view`, or None when it does."""
    name = view.step_name
    entries = layer.grant.for_step(name)
    if not entries:
        if layer.pending:
            why = layer.note or "it has not granted anything yet"
            return f"{name!r} is not granted yet: the {layer.source} grant is pending ({why})"
        granted = ", ".join(layer.grant.names()) or "nothing"
        note = f"; {layer.note}" if layer.note else ""
        return (
            f"tool {name!r} is not in the task's {layer.source} grant (it grants {granted}{note})"
        )
    first: str | None = None
    for entry in entries:
        for c in entry.args:
            problem = _problem(c, view, sources)
            if problem is not None:
                break
        else:
            return None
        first = first or problem
    return f"{name!r}: {first} ({layer.source} grant)"


@rule(
    name="capabilities",
    description=(
        "The step must lie inside the task's capability grant: its step_name is a granted "
        "tool (a name or glob) in every layer of the grant (operator, integration, task, "
        "planner, narrowings, and the policy's own `grant`), and the values at each granted "
        "argument satisfy its constraints: `values` (numbers by value, text exactly), "
        "`pattern` (RE2, whole value), `min`/`max` (numbers, or text written as a decimal "
        "number), `source` (a trust level the value must have been seen at, at least: user "
        "(a user message of the task), operator (also the operator's trusted values), "
        "internal (content at internal or above, or operator values; trusted is the older "
        "word for it), external (any value); matched after value_provenance's "
        "normalisation), "
        "`required`. Lists are judged item by item. The grant is read from the task's records "
        "(task.start and later narrowings), so replay judges the same way. Model calls, "
        "approvals, task boundaries, messages the agent receives (step.message GET that "
        "is no tool call) and a framework's units of work (step.self with properties.task, "
        "a CrewAI task) are not judged. A task with no "
        "grant violates unless `without_grant` is comply."
    ),
    params_schema={
        "type": "object",
        "properties": {
            "grant": {
                "type": "object",
                "description": "The operator's grant for every task this policy judges "
                "(intersected with the task's own).",
            },
            "without_grant": {
                "type": "string",
                "enum": ["comply", "violate"],
                "description": "What a step of a task without any grant gets (default violate).",
            },
        },
    },
    example_params={
        "grant": {"tools": {"read_inbox": {}, "send_email": {"args": {"to": {"source": "user"}}}}}
    },
    prepare=_prepare,
    _builtin=True,
)
def capabilities(view: Behavior, p: _Params, ctx: RuleContext) -> Verdict:
    kind = view.kind
    if kind in _NOT_JUDGED:
        return True
    if kind is ActionKind.STEP_MESSAGE and view.verb is Verb.GET and "tool" not in view.properties:
        return True  # a message the agent received (a tool that reads messages is judged)
    if kind is ActionKind.STEP_SELF and (is_grant_record(view) or "task" in view.properties):
        # Charter's grant records, and a framework's unit of work (a CrewAI task): the
        # grant judges the tools the work calls, not the work item around them.
        return True
    index = ctx.history.index(GrantIndex.KEY, GrantIndex)
    layers = index.layers
    if p.grant is not None:
        layers = (p.grant, *layers)
    elif not index.granted:
        if p.comply_without_grant:
            return True
        return Violation(
            "the task was started without a capability grant, so no tool is granted; give "
            "one when the task starts (grant=, the capabilities setting, a planner) or set "
            "without_grant: comply"
        )
    sources = _Sources(ctx)
    for layer in layers:
        problem = _layer_problem(layer, view, sources)
        if problem is not None:
            return Violation(problem)
    return True
