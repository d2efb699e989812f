"""The policy engine: pure, in memory, thread-safe. It judges steps and keeps task history.

The engine never does I/O and never reads the clock; the runner around it does both. Every
verdict can therefore be replayed from the recorded history alone.
"""

from __future__ import annotations

import threading
import types
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum

from charter._model.behavior import CLOSING_KINDS, ActionKind, Behavior
from charter._model.capture import LOST_MARKS, is_lost
from charter._model.context import EvalContext, RuleContext
from charter._model.errors import AgentBindingError, PolicyLoadError, TaskClosedError
from charter._model.frozen import Frozen, slot_setters
from charter._model.history import TaskHistory
from charter._model.paths import FieldPath
from charter._policy.policy import (
    CompiledPolicy,
    EnforcementPoint,
    Policy,
    Severity,
    compile_policies,
)
from charter._policy.rules._fixed import fixed_by_identity
from charter._policy.rules._indexes import CallIndex, SaidIndex
from charter._policy.sets import PatternSet, pattern_sets

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NamedTuple

    from charter._model.shared import SharedDemand
else:
    from charter._model.structural import NamedTuple

__all__ = [
    "Decision",
    "EvalResult",
    "EvaluationDeadline",
    "LoadReport",
    "PolicyEngine",
    "PolicyResult",
]


class EvaluationDeadline(Exception):
    """`out_of_time` said so before every applicable policy was judged."""

    def __init__(self, judged: int, total: int) -> None:
        super().__init__(f"{judged} of {total} policies judged")
        self.judged = judged
        self.total = total


class Decision(StrEnum):
    """What happens to a step: run, run with a warning, ask a human, or refuse."""

    ALLOW = "allow"
    WARN = "warn"
    ASK = "ask"
    BLOCK = "block"


_WEIGHT = {
    Severity.CRITICAL: 1.0,
    Severity.HIGH: 0.75,
    Severity.MEDIUM: 0.5,
    Severity.LOW: 0.25,
    Severity.INFO: 0.05,
}
_RANK = {Decision.ALLOW: 0, Decision.WARN: 1, Decision.ASK: 2, Decision.BLOCK: 3}
# A member's value as a plain str (reading `.value` runs a descriptor in Python).
_DECISION_TEXT = {d: d.value for d in Decision}


class PolicyResult(NamedTuple):
    """The verdict of one evaluated policy; `details` says why it was violated.

    A named tuple because one is built per policy per step, on the hot path.
    """

    name: str
    rule_type: str
    severity: Severity
    violated: bool
    details: str | None = None
    ask: bool = False
    description: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "rule_type": self.rule_type,
            "severity": self.severity.value,
            "violated": self.violated,
            "details": self.details,
            "ask": self.ask,
        }


class EvalResult(Frozen):
    """The decision on one step, with one result per policy that was evaluated.

    `recorded_seq` is set when the runner recorded the step itself (a blocked step is recorded
    by the gate that blocked it). `reason` is one line for the user or the model. `monitored`
    is True when monitor mode let through a step that would have been blocked or asked;
    `failed_open` when fail_mode open let through a step Charter could not judge.
    """

    __slots__ = (
        "action_id",
        "decision",
        "failed_open",
        "monitored",
        "reason",
        "recorded_seq",
        "results",
        "risk_score",
    )
    decision: Decision
    risk_score: float
    results: tuple[PolicyResult, ...]
    action_id: str | None
    recorded_seq: int | None
    reason: str
    monitored: bool
    failed_open: bool

    def __init__(
        self,
        decision: Decision,
        risk_score: float,
        results: tuple[PolicyResult, ...],
        action_id: str | None = None,
        recorded_seq: int | None = None,
        reason: str = "",
        monitored: bool = False,
        failed_open: bool = False,
    ) -> None:
        _put_decision(self, decision)
        _put_risk_score(self, risk_score)
        _put_results(self, results)
        _put_action_id(self, action_id)
        _put_recorded_seq(self, recorded_seq)
        _put_reason(self, reason)
        _put_monitored(self, monitored)
        _put_failed_open(self, failed_open)

    @property
    def violations(self) -> tuple[PolicyResult, ...]:
        return tuple(r for r in self.results if r.violated)

    def to_dict(self) -> dict[str, Any]:
        """The I-JSON form kept in ``meta["charter.eval"]`` of the recorded step."""
        risk = self.risk_score
        return {
            "decision": _DECISION_TEXT[self.decision],
            # Rounding converts through decimal text; the risk of most steps, 0 or 1, needs none.
            "risk_score": risk if risk == 0 or risk == 1 else round(risk, 4),
            "reason": self.reason,
            "violations": [r.to_dict() for r in self.results if r.violated],
            "evaluated": len(self.results),
        }


(
    _put_decision,
    _put_risk_score,
    _put_results,
    _put_action_id,
    _put_recorded_seq,
    _put_reason,
    _put_monitored,
    _put_failed_open,
) = slot_setters(
    EvalResult,
    "decision",
    "risk_score",
    "results",
    "action_id",
    "recorded_seq",
    "reason",
    "monitored",
    "failed_open",
)


class LoadReport(Frozen):
    """The engine's policy state: `enforcing`, `none_configured` (an empty set was loaded) or
    `unavailable` (nothing loaded yet); `offered` policies in the set, `enforced` of them that
    apply to the bound agent."""

    __slots__ = ("by_enforcement_point", "enforced", "offered", "source", "state")
    state: str
    offered: int
    enforced: int
    by_enforcement_point: Mapping[str, int]
    source: str | None

    def __init__(
        self,
        state: str,
        offered: int,
        enforced: int,
        by_enforcement_point: Mapping[str, int] | None = None,
        source: str | None = None,
    ) -> None:
        put = object.__setattr__
        put(self, "state", state)
        put(self, "offered", offered)
        put(self, "enforced", enforced)
        put(
            self,
            "by_enforcement_point",
            {} if by_enforcement_point is None else by_enforcement_point,
        )
        put(self, "source", source)


class Checkpoint(Frozen):
    """A task's state as `PolicyEngine.checkpoint` saw it (opaque to callers)."""

    __slots__ = ("closing", "last_seq", "open_intents", "steps", "task", "task_id")
    task_id: str
    task: TaskHistory | None
    steps: int
    last_seq: int
    closing: bool
    open_intents: dict[str, Behavior]

    def __init__(
        self,
        task_id: str,
        task: TaskHistory | None,
        steps: int,
        last_seq: int,
        closing: bool,
        open_intents: dict[str, Behavior],
    ) -> None:
        put = object.__setattr__
        put(self, "task_id", task_id)
        put(self, "task", task)
        put(self, "steps", steps)
        put(self, "last_seq", last_seq)
        put(self, "closing", closing)
        put(self, "open_intents", open_intents)


def _aggregate(results: list[PolicyResult]) -> tuple[Decision, float, str]:
    decision = Decision.ALLOW
    keep = 1.0
    deciding: PolicyResult | None = None
    for r in results:
        if not r.violated:
            continue
        keep *= 1.0 - _WEIGHT[r.severity]
        if r.severity is Severity.CRITICAL:
            d = Decision.BLOCK
        elif r.ask:
            d = Decision.ASK
        elif r.severity is Severity.INFO:
            d = Decision.ALLOW
        else:
            d = Decision.WARN
        if (
            deciding is None
            or _RANK[d] > _RANK[decision]
            or (_RANK[d] == _RANK[decision] and _WEIGHT[r.severity] > _WEIGHT[deciding.severity])
        ):
            decision, deciding = d, r
    reason = _reason(decision, deciding)
    return decision, 1.0 - keep, reason


def _reason(decision: Decision, r: PolicyResult | None) -> str:
    if r is None:
        return "allowed: no policy was violated"
    why = r.details or r.description or f"rule {r.rule_type} was violated"
    verb = {
        Decision.BLOCK: "blocked",
        Decision.ASK: "approval required",
        Decision.WARN: "warning",
        Decision.ALLOW: "noted",
    }[decision]
    return f"{verb} by policy {r.name!r} ({r.severity.value}): {why}"


# The reason of a step no policy flagged (what `_aggregate` gives for it).
_ALLOWED = _reason(Decision.ALLOW, None)
# An enum member read from its class costs about as much as a small function call.
_ALLOW = Decision.ALLOW


class _Draft(Frozen):
    """An EvalResult being built: the same base and slots, assignable. EvalResult's own
    __init__ sets each field through ``object.__setattr__``, which costs about a quarter of
    judging an allowed step; `_verdict` assigns the slots here, then gives the object
    EvalResult's class (the layouts are the same, so CPython allows it)."""

    __slots__ = EvalResult.__slots__
    # object's own: plain slot assignment, in C (Frozen's refuses). Both, because one type
    # slot serves assignment and deletion: with Frozen's __delattr__ kept, every assignment
    # went through a Python-level lookup of __setattr__ (about 2.5x a plain slot's cost).
    __setattr__ = object.__setattr__  # type: ignore[assignment]
    __delattr__ = object.__delattr__


def _verdict(
    decision: Decision,
    risk: float,
    results: tuple[PolicyResult, ...],
    action_id: str | None,
    reason: str,
) -> EvalResult:
    """``EvalResult(decision, risk, results, action_id, None, reason)``, built faster."""
    r: Any = _Draft()
    r.decision = decision
    r.risk_score = risk
    r.results = results
    r.action_id = action_id
    r.recorded_seq = None
    r.reason = reason
    r.monitored = False
    r.failed_open = False
    r.__class__ = EvalResult
    built: EvalResult = r
    return built


# One applicable policy as evaluate walks it: the policy, its selector's match, the fields
# its rule reads in the payloads, its complying result, its pattern set with its index there
# (or None), and whether its verdict is fixed by the step's identity (`fixed_by_identity`).
_Planned = tuple[
    CompiledPolicy,
    Callable[[Behavior], bool],
    tuple[FieldPath, ...],
    "PolicyResult",
    tuple[PatternSet, int] | None,
    bool,
]
# A planned policy whose selector matched the step: its position among the chosen, its index
# in the plan, the policy, its payload reads, complying result and pattern set as above, its
# result when fixed by the step's identity (else None), and whether a later chosen policy may
# still run a rule (the deadline is only asked then).
_Entry = tuple[
    int,
    int,
    CompiledPolicy,
    tuple[FieldPath, ...],
    "PolicyResult",
    tuple[PatternSet, int] | None,
    "PolicyResult | None",
    bool,
]


class _Choice:
    """The policies that judge the steps of one (context, kind, verb, name), as `evaluate`
    walks them: `entries` in plan order; `judged`, those whose result is not known to be the
    complying one (judged per step, or fixed as a violation); `complying`, every entry's
    complying result (the results of a step none of them flags); `paths`, the input and
    properties fields read by the entries judged per step, each once (where a lost value
    matters); and `last`, the plan's last index."""

    __slots__ = ("complying", "entries", "judged", "last", "paths")

    def __init__(self, entries: tuple[_Entry, ...], last: int) -> None:
        self.entries = entries
        self.complying = tuple(e[4] for e in entries)
        self.judged = tuple(e for e in entries if e[6] is not e[4])
        found: dict[str, FieldPath] = {}
        for e in entries:
            if e[6] is None:
                found.update((p.text, p) for p in e[3])
        self.paths = tuple(found.values())
        self.last = last


_MATCH_MEMORY = 4096


class PolicyEngine:
    """Judges steps against a policy set and keeps each task's history; pure and thread-safe.

    An engine serves one agent: the first call binds it, and a call for another agent raises
    AgentBindingError. Tasks follow a lifecycle: `record` of task.start opens one, task.end /
    task.error / task.idle make it closing (later writes raise TaskClosedError), `end_task`
    evicts it, and an ended task's id is remembered so it is never reused.
    """

    def __init__(
        self,
        policies: Iterable[Policy | Mapping[str, Any]] | None = None,
        *,
        closed_task_memory: int = 10_000,
    ) -> None:
        self._lock = threading.RLock()
        self._compiled: tuple[CompiledPolicy, ...] = ()
        self._reads: dict[int, tuple[FieldPath, ...]] = {}
        # Per compiled policy (by id): its complying result, built once and shared by every
        # step it complies on, and the pattern set that may judge it with others on its field.
        self._complies: dict[int, PolicyResult] = {}
        self._sets: dict[int, tuple[PatternSet, int]] = {}
        self._loaded = False
        self._version = 0
        self._source: str | None = None
        self._applicable: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        # Whether some policy counts outside its task: `shared_demands` is asked on every
        # step, and with no such policy (the common case) it answers without the lock.
        self._any_shared = False
        self._chosen: dict[tuple[Any, ...], _Choice] = {}
        self._tasks: dict[str, TaskHistory] = {}
        self._closed: OrderedDict[str, None] = OrderedDict()
        self._closed_memory = closed_task_memory
        self._agent_id: str | None = None
        self._empty_history = TaskHistory("-")
        if policies is not None:
            self.load_policies(policies)

    # -- policies ---------------------------------------------------------------------------

    def load_policies(
        self, policies: Iterable[Policy | Mapping[str, Any]], *, source: str | None = None
    ) -> LoadReport:
        """Replace the policy set, whole or not at all.

        Raises PolicyLoadError listing every problem; the previous set then stays in force.
        An empty iterable is a valid set: the state becomes `none_configured`.
        """
        compiled, problems = compile_policies(policies, source)
        if problems:
            raise PolicyLoadError([str(p) for p in problems], source or "policy set")
        with self._lock:
            self._compiled = tuple(compiled)
            self._reads = {
                id(c): tuple(
                    p for p in _field_paths(c.prepared) if p.root in ("input", "properties")
                )
                for c in self._compiled
            }
            self._complies = {id(c): _complying(c) for c in self._compiled}
            self._any_shared = any(_counts_shared(c) for c in self._compiled)
            self._sets = pattern_sets(
                [
                    (id(c), c.spec.fn, c.prepared)
                    for c in self._compiled
                    if c.policy.enforcement_point is EnforcementPoint.STEP_EXECUTION
                ]
            )
            self._loaded = True
            # After the set itself: a reader that sees the new number judges with the new set.
            self._version += 1
            self._source = source
            self._applicable.clear()
            self._chosen.clear()
        return self.load_report()

    @property
    def policies(self) -> tuple[Policy, ...]:
        return tuple(c.policy for c in self._compiled)

    def asks(self) -> bool:
        """Whether any loaded policy has ``action: ask``: False means no evaluation can
        answer ask, whatever the step (the policies loaded now; a reload can change it)."""
        return any(c.ask for c in self._compiled)

    @property
    def version(self) -> int:
        """A number that changes whenever a policy set is loaded: an answer derived from the
        policies alone (such as `may_ask`) stays right while it is unchanged."""
        return self._version

    def may_ask(self, intended: Behavior) -> bool:
        """False when no loaded policy with ``action: ask`` selects `intended` (by kind, verb
        and step name alone, no rule is run), so no evaluation can answer ask; errs towards
        True (the filters on environment, classification and agent are not applied)."""
        return any(c.ask and c.selector.matches(intended) for c in self._compiled)

    def load_report(self) -> LoadReport:
        """The current load state and counts (see LoadReport)."""
        with self._lock:
            offered = len(self._compiled)
            if not self._loaded:
                state = "unavailable"
            elif offered == 0:
                state = "none_configured"
            else:
                state = "enforcing"
            agent = self._agent_id
            enforced = sum(
                1 for c in self._compiled if agent is None or _agent_applies(c.policy, agent)
            )
            return LoadReport(
                state=state,
                offered=offered,
                enforced=enforced,
                by_enforcement_point=self.counts_by_enforcement_point(),
                source=self._source,
            )

    def counts_by_enforcement_point(self) -> dict[str, int]:
        """How many loaded policies are judged at each enforcement point."""
        counts = {p.value: 0 for p in EnforcementPoint}
        for c in self._compiled:
            counts[c.policy.enforcement_point.value] += 1
        return counts

    def _policies_for(
        self, context: EvalContext, point: EnforcementPoint
    ) -> tuple[CompiledPolicy, ...]:
        key = (point, context.environment, context.risk_classification, context.agent_id)
        found = self._applicable.get(key)
        if found is None:
            found = tuple(
                c
                for c in self._compiled
                if c.policy.enforcement_point is point and _applies(c.policy, context)
            )
            self._applicable[key] = found
        return found

    def _plan_for(self, context: EvalContext) -> tuple[_Planned, ...]:
        """The step policies applicable in `context`, each with what evaluate needs of it."""
        key = ("plan", context.environment, context.risk_classification, context.agent_id)
        found = self._applicable.get(key)
        if found is None:
            found = tuple(
                (
                    c,
                    c.selector.matches,
                    self._reads.get(id(c), ()),
                    self._complies[id(c)],
                    self._sets.get(id(c)),
                    fixed_by_identity(c.spec.fn, c.prepared),
                )
                for c in self._policies_for(context, EnforcementPoint.STEP_EXECUTION)
            )
            self._applicable[key] = found
        return found

    # -- judging ----------------------------------------------------------------------------

    def evaluate(
        self,
        intended: Behavior,
        context: EvalContext,
        *,
        out_of_time: Callable[[], bool] | None = None,
        shared: Mapping[str, float] | None = None,
    ) -> EvalResult:
        """Judge `intended` against every applicable policy whose selector matches it.

        Returns the aggregated decision: critical violations block, high/medium/low warn, info
        allows (and is reported), a violated ``action: ask`` policy asks unless something
        blocks. A rule that raises counts as violated, with the error in its details.
        Refuses (ValueError) a context that names another task or agent than the step.

        `out_of_time` is the caller's deadline (the engine reads no clock): it is asked after
        each policy whose rule ran while a later policy may still run one, and when it answers
        True, EvaluationDeadline is raised instead of a verdict that would have skipped them.
        A result known without running a rule is not followed by a question: one a pattern
        set already searched for this step clears, and one fixed by the step's kind, verb and
        name (a rule reading nothing else is judged once per such choice and remembered).

        `shared` holds the counts read outside the task for the step's `shared_demands`
        (counter key -> what it held before this step); a policy counting outside the task
        whose count is not there is violated, never judged on its task alone.
        """
        if context.agent_id != intended.agent_id or context.task_id != intended.task_id:
            raise ValueError(
                "context does not describe this step: context is for "
                f"{context.agent_id!r}/{context.task_id!r}, the step for "
                f"{intended.agent_id!r}/{intended.task_id!r}"
            )
        with self._lock:
            if self._agent_id != intended.agent_id:
                self._bind(intended.agent_id)
            history = self._tasks.get(intended.task_id)
            if history is None:
                # A task the engine has not seen is judged on an empty history; indexes built
                # on this shared empty history never receive steps, so sharing it is safe.
                history = self._empty_history
            ctx = RuleContext(context, history, shared)
            choice = self._chosen_for(context, intended, ctx)
            # Only the fields read by the policies judged on this step can make one unjudgeable.
            lost = False
            for path in choice.paths:
                if _lost_along(path, intended):
                    lost = True
                    break
            # Built only once a policy is flagged: until then every result is the complying one.
            # (An entry whose fixed result complies is not even walked: it has nothing to add.)
            results: list[PolicyResult] | None = None
            # Each pattern set searched for this step: its hits, or None for a missing field.
            searched: dict[PatternSet, set[int] | None] = {}
            for pos, i, c, reads, complies, grouped, fixed, more in choice.judged:
                if fixed is not None:
                    result = fixed
                else:
                    worked = True
                    unjudgeable = _unjudgeable(c, reads, intended) if lost else None
                    if unjudgeable is not None:
                        result = unjudgeable
                    elif grouped is None:
                        result = _judge(c, intended, ctx, complies)
                    else:
                        pset, index = grouped
                        if pset in searched:
                            hits = searched[pset]
                            worked = False
                        else:
                            hits = searched[pset] = _search(pset, intended)
                        if hits is not None and index not in hits:
                            result = complies
                        else:
                            result = _judge(c, intended, ctx, complies)
                            worked = True
                    if worked and more and out_of_time is not None and out_of_time():
                        raise EvaluationDeadline(i + 1, choice.last + 1)
                # A policy's only non-violated result is its shared complying one.
                if result is not complies:
                    if results is None:
                        results = list(choice.complying)
                    results[pos] = result
        if results is None:
            return _verdict(_ALLOW, 0.0, choice.complying, intended.action_id, _ALLOWED)
        decision, risk, reason = _aggregate(results)
        return _verdict(decision, risk, tuple(results), intended.action_id, reason)

    def _chosen_for(self, context: EvalContext, intended: Behavior, ctx: RuleContext) -> _Choice:
        """The planned policies whose selector matches `intended`, with the results of those
        whose verdict its identity fixes (judged here, on `intended`). A selector and such a
        verdict read only the step's kind, verb and name (and the agent, the context's), so
        the choice is remembered per (context, kind, verb, name), up to `_MATCH_MEMORY`
        choices (agent-chosen names cannot grow it without bound)."""
        key = (
            context.environment,
            context.risk_classification,
            context.agent_id,
            intended.kind,
            intended.verb,
            intended.step_name,
        )
        choice = self._chosen.get(key)
        if choice is None:
            plan = self._plan_for(context)
            picked = [
                (i, c, reads, complies, grouped, _fixed(c, intended, ctx, complies, by_identity))
                for i, (c, matches, reads, complies, grouped, by_identity) in enumerate(plan)
                if matches(intended)
            ]
            entries: list[_Entry] = []
            work_after = False  # whether an entry after this one may run a rule
            for pos in range(len(picked) - 1, -1, -1):
                i, c, reads, complies, grouped, fixed = picked[pos]
                entries.append((pos, i, c, reads, complies, grouped, fixed, work_after))
                work_after = work_after or fixed is None
            entries.reverse()
            choice = _Choice(tuple(entries), len(plan) - 1)
            if len(self._chosen) >= _MATCH_MEMORY:
                self._chosen.clear()
            self._chosen[key] = choice
        return choice

    def shared_demands(
        self, intended: Behavior, context: EvalContext
    ) -> tuple[tuple[SharedDemand, tuple[str, ...]], ...]:
        """What `evaluate` would need counted outside the task for `intended`: one demand per
        counter (policies with equal counting params share one), with the names of the
        policies judging it. Pure: reads the policies and the step, nothing else; empty when
        no applicable policy counts outside the task (the common case, kept cheap).
        """
        if not self._any_shared:
            return ()
        with self._lock:
            if self._agent_id is not None and self._agent_id != intended.agent_id:
                return ()
            applicable = self._shared_for(context)
        if not applicable:
            return ()
        found: dict[str, tuple[SharedDemand, list[str]]] = {}
        for c in applicable:
            if not c.selector.matches(intended):
                continue
            demand = c.prepared.shared_demand(intended, context.agent_id)
            if demand is None:
                continue
            entry = found.setdefault(demand.key, (demand, []))
            entry[1].append(c.policy.name)
        return tuple((d, tuple(names)) for d, names in found.values())

    def _shared_for(self, context: EvalContext) -> tuple[CompiledPolicy, ...]:
        key = ("shared", context.environment, context.risk_classification, context.agent_id)
        found = self._applicable.get(key)
        if found is None:
            found = tuple(
                c
                for c in self._policies_for(context, EnforcementPoint.STEP_EXECUTION)
                if _counts_shared(c)
            )
            self._applicable[key] = found
        return found

    def evaluate_registration(self, context: EvalContext) -> EvalResult:
        """Judge the agent itself (purpose, owner, classification) with registration policies."""
        with self._lock:
            self._bind(context.agent_id)
            ctx = RuleContext(context, TaskHistory(context.task_id))
            results = [
                _judge(c, context, ctx, self._complies[id(c)])
                for c in self._policies_for(context, EnforcementPoint.AGENT_REGISTRATION)
            ]
        decision, risk, reason = _aggregate(results)
        return EvalResult(decision, risk, tuple(results), None, None, reason)

    def explain(self, intended: Behavior, context: EvalContext) -> str:
        """A human-readable account of `evaluate`: the decision, then each policy's verdict."""
        result = self.evaluate(intended, context)
        lines = [
            f"{intended.kind.value}"
            + (f" {intended.verb.value}" if intended.verb else "")
            + f" {intended.step_name!r}: {result.decision.value.upper()}"
            f" (risk {result.risk_score:.2f})",
            f"  {result.reason}",
        ]
        evaluated = {r.name for r in result.results}
        for r in result.results:
            mark = "VIOLATED" if r.violated else "ok"
            ask = ", asks" if r.ask and r.violated else ""
            detail = f": {r.details}" if r.violated and r.details else ""
            lines.append(f"  [{mark}] {r.name} ({r.rule_type}, {r.severity.value}{ask}){detail}")
        with self._lock:
            skipped = [
                c.policy.name
                for c in self._policies_for(context, EnforcementPoint.STEP_EXECUTION)
                if c.policy.name not in evaluated
            ]
        if skipped:
            lines.append(f"  not matching this step: {', '.join(skipped)}")
        if not result.results:
            lines.append("  no policy applies to this step")
        return "\n".join(lines)

    # -- history ----------------------------------------------------------------------------

    def register_intent(self, intended: Behavior) -> None:
        """Remember an allowed step that is about to run, until its outcome is recorded.

        Refuses an intent without action_id, one whose action_id was used in the task, one that
        already has output, and any write to a task that is not open.
        """
        if intended.action_id is None:
            raise ValueError("an intent needs an action_id, so its outcome can be paired with it")
        if not intended.is_intent:
            raise ValueError("register_intent takes a step that has not run (output must be None)")
        with self._lock:
            self._bind(intended.agent_id)
            task = self._open_task(intended.task_id)
            if intended.action_id in task.action_ids:
                raise ValueError(
                    f"action_id {intended.action_id!r} is already used in task "
                    f"{intended.task_id!r}; each step needs its own action_id"
                )
            task.action_ids.add(intended.action_id)
            task.open_intents[intended.action_id] = intended

    def discard_intent(self, task_id: str, action_id: str) -> None:
        """Forget an intent registered but never let run (its write-ahead record failed), so
        its action_id is free again; does nothing for an unknown intent."""
        with self._lock:
            task = self._tasks.get(task_id)
            if task is not None and task.open_intents.pop(action_id, None) is not None:
                task.action_ids.discard(action_id)

    def record(self, outcome: Behavior) -> Behavior:
        """Add a completed step (or task boundary) to its task's history; returns it with seq.

        task.start opens a task (refused if open, or if the id belonged to an ended task);
        closing kinds make the task closing. seq is assigned when None and must increase
        strictly when given. An action_id may be reused only by the outcome of its own intent.
        """
        with self._lock:
            self._bind(outcome.agent_id)
            tid = outcome.task_id
            if outcome.kind is ActionKind.TASK_START:
                if tid in self._closed:
                    raise TaskClosedError(
                        f"task {tid!r} has ended and its id cannot be reused; start a new task id"
                    )
                if tid in self._tasks:
                    raise ValueError(
                        f"task {tid!r} is already started; record task.start once per task"
                    )
                task = TaskHistory(tid)
            else:
                task = self._open_task(tid)
            aid = outcome.action_id
            if aid is not None:
                if aid in task.action_ids:
                    if aid not in task.open_intents or outcome.is_intent:
                        raise ValueError(
                            f"action_id {aid!r} is already used in task {tid!r}; the only "
                            "reuse allowed is recording the outcome of its own open intent"
                        )
            seq = outcome.seq
            if seq is None:
                outcome = outcome.replace(seq=task.last_seq + 1)
            elif seq <= task.last_seq:
                raise ValueError(
                    f"seq {seq} is not above the task's last seq {task.last_seq}; "
                    "seq must increase strictly (pass seq=None to have it assigned)"
                )
            if aid is not None:
                task.action_ids.add(aid)
                task.open_intents.pop(aid, None)
            if outcome.kind is ActionKind.TASK_START:
                self._tasks[tid] = task
            elif outcome.kind in CLOSING_KINDS:
                task.closing = True
            task.append(outcome)
            return outcome

    def end_task(self, task_id: str) -> None:
        """Evict a task; its id is remembered (bounded) so it cannot be started again."""
        with self._lock:
            self._tasks.pop(task_id, None)
            self._closed[task_id] = None
            self._closed.move_to_end(task_id)
            while len(self._closed) > self._closed_memory:
                self._closed.popitem(last=False)

    def get_history(self, task_id: str) -> tuple[Behavior, ...]:
        """The recorded steps of an open or closing task, in seq order (empty if unknown)."""
        with self._lock:
            task = self._tasks.get(task_id)
            return tuple(task.steps) if task else ()

    def open_intents(self, task_id: str) -> tuple[Behavior, ...]:
        """Intents registered in the task whose outcome has not been recorded yet."""
        with self._lock:
            task = self._tasks.get(task_id)
            return tuple(task.open_intents.values()) if task else ()

    def has_recorded(self, task_id: str, action_id: str) -> bool:
        """Whether a recorded step of the task carries `action_id` (open intents do not
        count); reads no step."""
        with self._lock:
            task = self._tasks.get(task_id)
            return (
                task is not None
                and action_id in task.action_ids
                and action_id not in task.open_intents
            )

    def recorded_call(self, task_id: str, call_id: str) -> Behavior | None:
        """The latest recorded step of the task whose ``properties.tool.call_id`` is
        `call_id`, or None; the steps are read only when there is one (see `TaskHistory`)."""
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return None
            seq = task.index(CallIndex.KEY, CallIndex).seqs.get(call_id)
            if seq is None:
                return None
            return task.step_at(seq)

    def said_digests(self, task_id: str) -> frozenset[str]:
        """The canonical digests of the content of the task's recorded user messages (see
        `SaidIndex`); empty for an unknown task. Reads no step of a restored task whose
        saved history holds them."""
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return frozenset()
            return frozenset(task.index(SaidIndex.KEY, SaidIndex).digests)

    def task_state(self, task_id: str) -> str:
        """`open`, `closing`, `ended` (evicted, id remembered) or `unknown`."""
        with self._lock:
            task = self._tasks.get(task_id)
            if task is not None:
                return "closing" if task.closing else "open"
            return "ended" if task_id in self._closed else "unknown"

    def next_seq(self, task_id: str) -> int:
        """The seq `record` would assign to the task's next step (1 for an unknown task)."""
        with self._lock:
            task = self._tasks.get(task_id)
            # `is not None`: a history is falsy when empty (and asking costs a __len__ call).
            return task.last_seq + 1 if task is not None else 1

    def open_intent(self, task_id: str, action_id: str) -> Behavior | None:
        """The open intent `action_id` of the task, or None when there is none."""
        with self._lock:
            task = self._tasks.get(task_id)
            return task.open_intents.get(action_id) if task is not None else None

    def checkpoint(self, task_id: str) -> Checkpoint:
        """A cheap mark of the task's state, for `rollback` right after a failed write.

        The runner takes one before recording a step whose store commit may still fail
        (durability "sync"), so the history never runs ahead of the audit trail.
        """
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return Checkpoint(task_id, None, 0, 0, False, {})
            return Checkpoint(
                task_id, task, len(task), task.last_seq, task.closing, dict(task.open_intents)
            )

    def rollback(self, checkpoint: Checkpoint) -> None:
        """Undo every `record` of the task since `checkpoint` (and nothing else).

        Intents registered since are kept; history indexes are rebuilt on their next use.
        """
        with self._lock:
            tid = checkpoint.task_id
            task = self._tasks.get(tid)
            if task is None:
                return
            if checkpoint.task is None or checkpoint.task is not task:
                if checkpoint.task is None:
                    del self._tasks[tid]
                return
            rebuilt, undone = task.split(checkpoint.steps)
            rebuilt.last_seq = checkpoint.last_seq
            rebuilt.closing = checkpoint.closing
            rebuilt.action_ids = task.action_ids
            rebuilt.open_intents = task.open_intents
            for step in undone:
                aid = step.action_id
                if aid is None:
                    continue
                if aid in checkpoint.open_intents:
                    rebuilt.open_intents[aid] = checkpoint.open_intents[aid]
                else:
                    rebuilt.action_ids.discard(aid)
            self._tasks[tid] = rebuilt

    def forget_task(self, task_id: str) -> None:
        """Drop an active task from memory without closing it (its id is not remembered as
        ended): another process has appended to its chain, and it is to be restored anew."""
        with self._lock:
            self._tasks.pop(task_id, None)

    def export_task(self, task_id: str) -> dict[str, Any] | None:
        """The history of an open task as plain JSON, for `adopt_task` in another process:
        its recorded step count, last seq, the action ids of its recorded steps and the state
        of every index that can export one (see `TaskHistory.export_indexes`); not its steps
        or open intents. None for a task that is not open here."""
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None or task.closing or self._agent_id is None:
                return None
            total = len(task)
            indexes = task.export_indexes()
            missed = max((total - covers for _, _, covers in indexes.values()), default=0)
            return {
                "agent_id": self._agent_id,
                "task_id": task_id,
                "steps": total,
                "last_seq": task.last_seq,
                "action_ids": sorted(task.action_ids - task.open_intents.keys()),
                "indexes": {k: list(v) for k, v in indexes.items()},
                "carried": [b.to_dict() for b in task.steps_after(total - missed)],
            }

    def adopt_task(self, state: Mapping[str, Any], earlier: Callable[[], list[Behavior]]) -> None:
        """Make the task `export_task` gave `state` for open here, with no open intents; its
        steps are loaded by `earlier` the first time a rule or a caller needs them (see
        `TaskHistory.restored`), and judging it is the same as judging a task rebuilt by
        recording those steps. Refuses (ValueError) a malformed state, a task already active
        here or ended, and (AgentBindingError) another agent's task."""
        try:
            tid = state["task_id"]
            agent_id = state["agent_id"]
            steps = state["steps"]
            last_seq = state["last_seq"]
            ids = state["action_ids"]
            raw = state["indexes"]
            carried = [Behavior.from_dict(dict(b)) for b in state["carried"]]
            if not (
                type(tid) is str
                and type(agent_id) is str
                and type(steps) is int
                and steps > 0
                and type(last_seq) is int
                and last_seq >= steps
                and type(ids) is list
                and all(type(i) is str for i in ids)
                and type(raw) is dict
            ):
                raise TypeError("a field has the wrong type")
            indexes: dict[str, tuple[str, Any, int]] = {}
            for key, value in raw.items():
                kind, saved, covers = value
                if type(kind) is not str or type(covers) is not int:
                    raise TypeError("an index type is not a string")
                indexes[key] = (kind, saved, covers)
            if any(b.task_id != tid or b.agent_id != agent_id for b in carried):
                raise ValueError("a carried step is of another task")
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a saved task history: {exc}") from None
        with self._lock:
            self._bind(agent_id)
            if tid in self._tasks or tid in self._closed:
                raise ValueError(f"task {tid!r} is already active or ended here")
            try:
                task = TaskHistory.restored(tid, indexes, steps, carried, earlier)
            except ValueError as exc:
                raise ValueError(f"not a saved task history: {exc}") from None
            task.last_seq = last_seq
            task.action_ids = set(ids)
            self._tasks[tid] = task

    def active_tasks(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._tasks)

    @property
    def agent_id(self) -> str | None:
        return self._agent_id

    def _bind(self, agent_id: str) -> None:
        if self._agent_id is None:
            self._agent_id = agent_id
            self._applicable.clear()
            self._chosen.clear()
        elif agent_id != self._agent_id:
            raise AgentBindingError(
                f"this engine serves agent {self._agent_id!r}, not {agent_id!r}; "
                "use one engine (or Governor) per agent"
            )

    def _open_task(self, task_id: str) -> TaskHistory:
        task = self._tasks.get(task_id)
        if task is None:
            if task_id in self._closed:
                raise TaskClosedError(f"task {task_id!r} has ended; start a new task to continue")
            raise ValueError(f"task {task_id!r} was not started; record a task.start first")
        if task.closing:
            raise TaskClosedError(
                f"task {task_id!r} is closing (task.end/task.error recorded); "
                "no more steps can be recorded in it"
            )
        return task


def _agent_applies(policy: Policy, agent_id: str) -> bool:
    return policy.agents is None or agent_id in policy.agents


def _applies(policy: Policy, context: EvalContext) -> bool:
    # An unknown environment or classification does not exempt a step from a policy scoped to
    # one: governance fails closed, so the narrower policy still applies.
    if policy.environments is not None and context.environment is not None:
        if context.environment not in policy.environments:
            return False
    if policy.risk_classifications is not None and context.risk_classification is not None:
        if context.risk_classification not in policy.risk_classifications:
            return False
    return _agent_applies(policy, context.agent_id)


# Values that never hold a field path, by exact type: a walk skips them without a test each.
_PLAIN = frozenset({str, bytes, int, float, bool, type(None)})
_SEQUENCES = frozenset({list, tuple, set, frozenset})


def _field_paths(prepared: Any) -> tuple[FieldPath, ...]:
    """The field paths a policy's prepared params hold: what its rule reads."""
    found: list[FieldPath] = []
    stack: list[tuple[Any, int]] = [(prepared, 0)]
    push = stack.append
    plain = _PLAIN
    while stack:
        value, depth = stack.pop()
        kind = type(value)
        if kind is dict or kind in _SEQUENCES:
            # The common containers, without the chain of tests below (same outcome).
            if depth > 8:
                continue
            inner = depth + 1
            for item in value.values() if kind is dict else value:
                if type(item) not in plain:
                    push((item, inner))
        elif isinstance(value, FieldPath):
            found.append(value)
        elif (
            depth > 8
            or value is None
            or isinstance(value, (str, bytes, int, float, type, types.ModuleType))
            or callable(value)
        ):
            continue
        elif isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack.extend((v, depth + 1) for v in value)
        else:  # slots (a slotted dataclass's too) and the instance dict hold every field
            for klass in kind.__mro__:
                for name in getattr(klass, "__slots__", ()):
                    push((getattr(value, name, None), depth + 1))
            stack.extend((v, depth + 1) for v in getattr(value, "__dict__", {}).values())
    return tuple(found)


def _lost_along(path: FieldPath, step: Behavior) -> bool:
    """Whether the value at `path`, or a container on the way to it, could not be captured
    (so the field may be hidden in it)."""
    root = getattr(step, path.root, None)
    if path._simple:
        # Plain keys, the common case: one value at most on the way, walked without lists.
        v = root
        if type(v) is dict and len(v) == 1 and path.steps and path.steps[0] not in v:
            # See the wrapped payload below: the walk would find nothing else.
            (v,) = v.values()
            return type(v) is str and v.startswith(LOST_MARKS)
        for key in path.steps:
            if type(v) is dict and key in v:
                v = v[key]
            else:
                return type(v) is str and v.startswith(LOST_MARKS)
        if type(v) is str:
            return v.startswith(LOST_MARKS)
        return is_lost(v)
    if type(root) is dict and len(root) == 1 and path.steps and path.steps[0] not in root:
        # A payload that was not an object is wrapped in one key ({"value": ...}): lost
        # there, it hides every field.
        (only,) = root.values()
        if type(only) is str and only.startswith(LOST_MARKS):
            return True
    current: list[Any] = [root]
    for key in path.steps:
        nxt: list[Any] = []
        for v in current:
            if type(v) is str and v.startswith(LOST_MARKS):
                return True
            if isinstance(key, str):
                if type(v) is dict and key in v:
                    nxt.append(v[key])
            elif isinstance(key, int):
                if type(v) is list and -len(v) <= key < len(v):
                    nxt.append(v[key])
            elif type(v) is list:
                nxt.extend(v)
            elif type(v) is dict:
                nxt.extend(v.values())
        current = nxt
    return any(is_lost(v) for v in current)


def _unjudgeable(
    c: CompiledPolicy, reads: tuple[FieldPath, ...], step: Behavior
) -> PolicyResult | None:
    """A blocking result when `c` reads a field Charter could not capture: judging what is
    left would judge something other than what the tool receives."""
    for path in reads:
        if path.root in ("input", "properties") and _lost_along(path, step):
            p = c.policy
            return PolicyResult(
                p.name,
                p.rule_type,
                Severity.CRITICAL,
                True,
                f"{path.text} could not be captured (see the step's value there), so this policy "
                "cannot judge the step; Charter blocks what it cannot judge",
                False,
                p.description,
            )
    return None


def _counts_shared(c: CompiledPolicy) -> bool:
    """Whether `c` counts steps outside their task (a shared scope)."""
    return getattr(c.prepared, "scope", None) is not None and callable(
        getattr(c.prepared, "shared_demand", None)
    )


def _complying(c: CompiledPolicy) -> PolicyResult:
    """The result of `c` on a step it complies with: the same for every such step."""
    p = c.policy
    return PolicyResult(p.name, p.rule_type, p.severity, False, None, c.ask, p.description)


def _fixed(
    c: CompiledPolicy, step: Behavior, ctx: RuleContext, complies: PolicyResult, by_identity: bool
) -> PolicyResult | None:
    """The result of `c` for every step with `step`'s identity, when its verdict reads nothing
    else (`fixed_by_identity`); None to judge it on each step (also when its rule raised here:
    an error is never remembered as the verdict)."""
    if not by_identity:
        return None
    p = c.policy
    try:
        verdict = c.spec.fn(step, c.prepared, ctx)
    except Exception:
        return None
    if verdict:
        return complies
    details = getattr(verdict, "detail", None)
    return PolicyResult(p.name, p.rule_type, p.severity, True, details, c.ask, p.description)


def _search(pset: PatternSet, step: Behavior) -> set[int] | None:
    """`pset.hits`, or None (judge each policy by its rule) if the search itself failed."""
    try:
        return pset.hits(step)
    except Exception:  # the rules then judge, and a rule that raises is a violation
        return None


def _judge(c: CompiledPolicy, view: Any, ctx: RuleContext, complies: PolicyResult) -> PolicyResult:
    p = c.policy
    try:
        verdict = c.spec.fn(view, c.prepared, ctx)
    except Exception as exc:  # a broken rule must not become an allow
        return PolicyResult(
            p.name,
            p.rule_type,
            p.severity,
            True,
            f"rule {p.rule_type} raised {type(exc).__name__}: {exc}",
            c.ask,
            p.description,
        )
    if verdict:
        return complies
    details = getattr(verdict, "detail", None)
    return PolicyResult(p.name, p.rule_type, p.severity, True, details, c.ask, p.description)
