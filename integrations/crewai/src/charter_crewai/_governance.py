"""Charter attached to one crew or agent through CrewAI's interception hooks.

CrewAI's hooks are process-global lists. Charter registers one router per interception point,
once, and each router finds the Governance of the crew (or agent) the event belongs to by
object identity; events of crews nobody governs pass untouched. So `govern(crew)` is scoped to
that crew, and two crews governed by different policies never see each other's steps.

Everything Charter decides goes through one `charter.integration.Gate`: the integration only
translates hook contexts into steps (`_translate`) and follows the Gate's decision. CrewAI
swallows every exception a hook raises except HookAborted (and then runs the tool anyway), so
a `Blocked` leaves as the one exception CrewAI lets through, a HookAborted that is also a
charter.BlockedError, and an error inside a gate is decided by the Gate's fail-mode rule
(closed: blocked with the reason; open: runs ungoverned, reported) before it could escape.
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from charter import AuditError, Governor, report_internal_error
from charter.integration import Allowed, Blocked, Gate, Pending, Step, StepHandle

from . import _translate as tr
from ._crewai import CrewAI, load

__all__ = ["Governance", "govern", "governed_crew_tripwire"]

_TASK_IDS_KEPT = 100

# Registry, guarded by _lock. Keys are id() of live objects: each entry keeps a weak reference
# and is dropped when its object dies, so an id is never mistaken for a later object's.
_lock = threading.RLock()
_targets: dict[int, tuple[weakref.ref[Any], Governance]] = {}
_runs: dict[int, dict[int, _Run]] = {}  # id(owner) -> {id(Governance): run}
# id(owner) -> [owner ref, kickoffs of it in progress], for every crew or agent kicked off.
_executing: dict[int, list[Any]] = {}
_active: list[Governance] = []

# Set by the execution-start router when it opened a governed run in this context; read by the
# tripwire CrewAI calls right after, in the same context, before the crew's first step.
_started: contextvars.ContextVar[Governance | None] = contextvars.ContextVar(
    "charter_crewai_started", default=None
)


def _report(exc: BaseException, where: str) -> None:
    """Report an error of this integration's own (charter.testing fails tests on them); an
    AuditError was raised, and reported, by the Gate (sync durability)."""
    if not isinstance(exc, AuditError):
        report_internal_error(exc, f"charter_crewai: {where}")


# -- per-kickoff state ---------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Run:
    """One kickoff of a governed crew or agent: its Charter task."""

    governance: Governance
    owner: weakref.ref[Any]
    task_id: str
    # Runs opened by a first step outside any kickoff end with the task that opened them.
    closes_with_task: int | None = None
    # What model steps counted of each executor's messages (`charter_crewai._translate`).
    counted: tr.Counted = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class _Open:
    """A gated step not settled yet, paired by CrewAI object `key` (kept alive, so its id()
    is not reused while the step is open)."""

    key: Any
    run: _Run | None
    handle: StepHandle | None
    blocked: Blocked | None = None  # a tool call Charter refused: the agent reads why
    ctx: Any = None  # a model call: the hook context that opened it
    usage: dict[str, int] | None = None  # a model call: the LLM's counters before it
    count: int = 0  # a model call: the messages it was sent


def _take(table: dict[int, _Open], key: Any) -> _Open | None:
    entry = table.get(id(key))
    if entry is None or entry.key is not key:
        return None
    del table[id(key)]
    return entry


# -- routing -------------------------------------------------------------------------------------


def _alive_entry(obj: Any) -> Governance | None:
    entry = _targets.get(id(obj))
    if entry is not None and entry[0]() is obj and entry[1].installed:
        return entry[1]
    return None


def _governance_of(obj: Any, crewai: CrewAI) -> Governance | None:
    """The installed Governance of crew or agent `obj`; a copy of a governed crew (CrewAI's
    kickoff_for_each runs copies) carries the original's tripwire and is adopted here."""
    with _lock:
        found = _alive_entry(obj)
        if found is not None or not isinstance(obj, crewai.crew_type):
            return found
        for callback in getattr(obj, "before_kickoff_callbacks", None) or ():
            governance = getattr(callback, "charter_governance", None)
            if isinstance(governance, Governance) and governance.installed:
                governance._track(obj)
                return governance
    return None


def _route(ctx: Any) -> tuple[Governance, Any] | None:
    """(governance, owner) for a step event; the owner is what one Charter task spans."""
    crewai = load()
    crew = getattr(ctx, "crew", None)
    if not isinstance(crew, crewai.crew_type):
        crew = getattr(getattr(ctx, "agent", None), "crew", None)
        crew = crew if isinstance(crew, crewai.crew_type) else None
    if crew is not None and (governance := _governance_of(crew, crewai)) is not None:
        return governance, crew
    agent = getattr(ctx, "agent", None)
    if agent is not None and (governance := _governance_of(agent, crewai)) is not None:
        return governance, crew if crew is not None else agent
    return None


def _boundary_owner(ctx: Any) -> Any:
    """The crew, or the standalone agent, whose kickoff an execution point belongs to."""
    crewai = load()
    crew = getattr(ctx, "crew", None)
    if isinstance(crew, crewai.crew_type):
        return crew
    # A standalone Agent.kickoff() runs as a flow (its executor) that names its agent.
    flow = getattr(ctx, "flow", None)
    agent = getattr(flow, "agent", None)
    if isinstance(agent, crewai.base_agent_type) and getattr(flow, "crew", None) is None:
        return agent
    return None


def _unroutable(exc: Exception, what: str, gate: bool) -> None:
    """Routing itself failed, so nobody knows whose step this is: a gate blocks if any
    installed governance fails closed."""
    _report(exc, f"routing a {what}")
    if not gate:
        return
    with _lock:
        closed = any(g.gate.fail_mode != "open" for g in _active)
    if closed:
        reason = " ".join(
            f"blocked: Charter could not tell which crew this {what} belongs to "
            f"({type(exc).__name__}: {exc}); governance fails closed".split()
        )
        raise load().aborted(reason)


def _safe_route(ctx: Any, what: str, gate: bool) -> tuple[Governance, Any] | None:
    try:
        return _route(ctx)
    except Exception as exc:
        _unroutable(exc, what, gate)
        return None


def _count_execution(owner: Any, step: int) -> None:
    with _lock:
        entry = _executing.get(id(owner))
        if entry is None or entry[0]() is not owner:
            entry = _executing[id(owner)] = [weakref.ref(owner), 0]
        entry[1] += step
        if entry[1] <= 0:
            del _executing[id(owner)]


def _is_executing(owner: Any) -> bool:
    entry = _executing.get(id(owner))
    return entry is not None and entry[0]() is owner


def _on_execution_start(ctx: Any) -> None:
    try:
        owner = _boundary_owner(ctx)
        if owner is None:
            return
        _count_execution(owner, +1)
        governance = _governance_of(owner, load())
    except Exception as exc:
        _unroutable(exc, "kickoff", gate=True)
        return
    if governance is not None:
        try:
            governance._start(owner, ctx)
        except BaseException:
            # A refused kickoff never reaches CrewAI's execution-end dispatch.
            _count_execution(owner, -1)
            raise


def _on_execution_end(ctx: Any) -> None:
    _started.set(None)
    try:
        owner = _boundary_owner(ctx)
        if owner is None:
            return
        _count_execution(owner, -1)
        with _lock:
            runs = _runs.pop(id(owner), {})
        failed = getattr(ctx, "status", None) == "failed"
        error = getattr(ctx, "error", None) if failed else None
        if failed and not isinstance(error, BaseException):
            error = RuntimeError("the kickoff failed")
        for run in runs.values():
            if run.owner() is owner:
                run.governance._finish(run, error, getattr(ctx, "output", None))
    except Exception as exc:
        _report(exc, "recording a kickoff's end")


def _router(what: str, method: str, gate: bool) -> Callable[[Any], Any]:
    """The hook of one step point: routes the event to its Governance's `method`. A gate
    (`gate`, a before-hook) turns any error of its own into the Gate's decision; an
    after-hook reports it (the step ran already)."""

    def route(ctx: Any) -> Any:
        if what == "task" and getattr(ctx, "kind", None) != "task":
            return None  # flow methods are the flow's business
        routed = _safe_route(ctx, what, gate)
        if routed is None:
            return None
        governance, owner = routed
        try:
            return getattr(governance, method)(ctx, owner)
        except governance._crewai.hook_aborted:
            raise
        except Exception as exc:
            if not gate:
                _report(exc, f"recording a {what}")
                return None
            decision = governance.gate.undecided(Step("step.unknown", None, what), exc)
            if isinstance(decision, Blocked):
                raise governance._abort(decision) from None
            return None

    route.__name__ = route.__qualname__ = f"charter_{method.strip('_')}"
    return route


_ROUTERS: dict[str, Callable[[Any], Any]] = {
    "EXECUTION_START": _on_execution_start,
    "EXECUTION_END": _on_execution_end,
    "PRE_STEP": _router("task", "_pre_task", gate=True),
    "POST_STEP": _router("task", "_post_task", gate=False),
    "PRE_MODEL_CALL": _router("model call", "_pre_model", gate=True),
    "POST_MODEL_CALL": _router("model response", "_post_model", gate=False),
    "PRE_TOOL_CALL": _router("tool call", "_pre_tool", gate=True),
    "POST_TOOL_CALL": _router("tool result", "_post_tool", gate=False),
}
# Gates that should run after every hook registered before a kickoff, so that what Charter
# judges is what runs (a later hook may still rewrite the call's input in place).
_GATES_LAST = ("PRE_MODEL_CALL", "PRE_TOOL_CALL")


def _routers(crewai: CrewAI, register: bool) -> None:
    for name, router in _ROUTERS.items():
        point = getattr(crewai.point, name)
        if register and router not in crewai.global_hooks(point):
            crewai.register(point, router)
        while not register and router in crewai.global_hooks(point):
            crewai.unregister(point, router)


def _missing_routers(crewai: CrewAI) -> list[str]:
    return [
        name
        for name, router in _ROUTERS.items()
        if router not in crewai.global_hooks(getattr(crewai.point, name))
    ]


def _move_gates_last(crewai: CrewAI) -> None:
    for name in _GATES_LAST:
        hooks = crewai.global_hooks(getattr(crewai.point, name))
        router = _ROUTERS[name]
        if hooks and hooks[-1] is not router:
            # Append first, then drop the earlier copy: the gate is never absent, and a
            # dispatch that snapshots both copies is gated once (the gates are idempotent).
            hooks.append(router)
            hooks.remove(router)


_LLM_HOOK_LISTS = (
    ("before_llm_call_hooks", _ROUTERS["PRE_MODEL_CALL"]),
    ("after_llm_call_hooks", _ROUTERS["POST_MODEL_CALL"]),
)


def _agents_of(target: Any, crewai: CrewAI) -> list[Any]:
    if not isinstance(target, crewai.crew_type):
        return [target]
    found: list[Any] = list(getattr(target, "agents", None) or [])
    found.append(getattr(target, "manager_agent", None))
    found.extend(getattr(task, "agent", None) for task in getattr(target, "tasks", None) or [])
    unique: dict[int, Any] = {id(a): a for a in found if a is not None}
    return list(unique.values())


def _llm_hooks(agents: Iterable[Any], add: bool) -> None:
    """Add Charter's model-call routers to (or remove them from) the agents' executors.

    An agent's executor copies the global model-call hooks once, when CrewAI creates it (at
    the agent's first task): one created before govern() never sees Charter's router unless
    it is added to its own lists."""
    for agent in agents:
        executor = getattr(agent, "agent_executor", None)
        for attr, router in _LLM_HOOK_LISTS:
            hooks = getattr(executor, attr, None)
            if isinstance(hooks, list) and add and router not in hooks:
                hooks.append(router)
            while isinstance(hooks, list) and not add and router in hooks:
                hooks.remove(router)


# -- the tripwire ----------------------------------------------------------------------------------

_TRIPWIRE_NAME = "governed_crew_tripwire"


def _tripwire(governance: Governance | None) -> None:
    if governance is not None and not governance.installed:
        return  # uninstalled: running ungoverned is what the user asked for
    started = _started.get()
    if started is not None and (governance is None or started is governance):
        return
    raise load().aborted(
        "blocked: this crew is governed by Charter but Charter's CrewAI hooks did not see its "
        "kickoff (were they removed, e.g. by clear_all_global_hooks(), or was the crew restored "
        "from a checkpoint?); call charter_crewai.govern(...) again before kickoff"
    )


def governed_crew_tripwire(inputs: Any) -> Any:
    """The before-kickoff callback a governed crew carries, as restored from a checkpoint.

    Refuses (charter.BlockedError) to let the crew start unless Charter's hooks opened the
    kickoff: a crew saved while governed must be governed again after it is restored.
    """
    _tripwire(None)
    return inputs


def _make_tripwire(governance: Governance) -> Callable[[Any], Any]:
    def tripwire(inputs: Any) -> Any:
        _tripwire(governance)
        return inputs

    # A plain module-level name: CrewAI validates callbacks when it copies a crew and warns
    # about closures; this name also makes a checkpoint restore the refusing function above.
    tripwire.__module__ = __name__
    tripwire.__name__ = tripwire.__qualname__ = _TRIPWIRE_NAME
    tripwire.__doc__ = governed_crew_tripwire.__doc__
    tripwire.charter_governance = governance  # type: ignore[attr-defined]
    return tripwire


def _is_tripwire(callback: Any) -> bool:
    return callback is governed_crew_tripwire or hasattr(callback, "charter_governance")


# -- the handle --------------------------------------------------------------------------------


class Governance:
    """Charter attached to one crew or agent; returned by `govern`.

    `target` is the crew or agent, `governor` the charter.Governor judging and recording its
    steps (through `gate`), `task_ids` the Charter task ids of its most recent kickoffs
    (oldest first), `undecided` how many steps Charter could not judge (blocked under
    fail_mode closed, run ungoverned under open; each reported as an internal error).
    `uninstall()` detaches Charter and closes a Governor that `govern` built; it is safe to
    call twice, and ``with govern(...):`` calls it on exit.
    """

    def __init__(
        self,
        target: Any,
        gate: Gate,
        *,
        owns_governor: bool,
        signature: tuple[Any, ...],
        crewai: CrewAI,
    ) -> None:
        self.target = target
        self.gate = gate
        self._owns_governor = owns_governor
        self._signature = signature
        self._crewai = crewai
        self._installed = False
        self._lock = threading.Lock()
        self._opening = threading.Lock()
        self._task_ids: deque[str] = deque(maxlen=_TASK_IDS_KEPT)
        self._tools: dict[int, _Open] = {}
        self._models: dict[int, _Open] = {}
        self._tasks: dict[int, _Open] = {}
        self.undecided = 0

    # -- state ----------------------------------------------------------------------------------

    @property
    def governor(self) -> Governor:
        return self.gate.governor

    @property
    def installed(self) -> bool:
        return self._installed

    @property
    def task_ids(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._task_ids)

    def __repr__(self) -> str:
        state = "installed" if self._installed else "uninstalled"
        kind = type(self.target).__name__
        name = tr.agent_role(self.target) or tr.crew_name(self.target) or ""
        return f"<charter_crewai.Governance of {kind} {name!r}: {state}>"

    def __enter__(self) -> Governance:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()

    def _track(self, obj: Any) -> None:
        """Route events of `obj` (the target, or a copy of it) here; caller holds _lock."""
        key = id(obj)
        _targets[key] = (weakref.ref(obj, lambda _ref, key=key: _drop_target(key, _ref)), self)

    # -- install / uninstall ----------------------------------------------------------------------

    def _install(self) -> None:
        with _lock:
            self._installed = True
            self._track(self.target)
            if self not in _active:
                _active.append(self)
        self._repair()

    def _repair(self) -> None:
        """Make sure every hook this installation relies on is in place (govern() twice)."""
        crewai = self._crewai
        with _lock:
            _routers(crewai, register=True)
        _llm_hooks(_agents_of(self.target, crewai), add=True)
        callbacks = getattr(self.target, "before_kickoff_callbacks", None)
        if isinstance(callbacks, list) and not any(
            getattr(c, "charter_governance", None) is self for c in callbacks
        ):
            callbacks[:] = [c for c in callbacks if not _is_tripwire(c)]
            callbacks.insert(0, _make_tripwire(self))

    def uninstall(self) -> None:
        """Detach Charter from the target: its kickoffs run ungoverned again.

        A kickoff still running is ended in the audit trail as failed ("uninstalled"). Closes
        the Governor when `govern` built it (flushing the audit trail). Idempotent.
        """
        crewai = self._crewai
        with _lock:
            if not self._installed:
                return
            self._installed = False
            for key, (_ref, governance) in list(_targets.items()):
                if governance is self:
                    del _targets[key]
            runs = [r for o in _runs.values() if (r := o.pop(id(self), None)) is not None]
            if self in _active:
                _active.remove(self)
            if not _active:
                _routers(crewai, register=False)
        try:
            callbacks = getattr(self.target, "before_kickoff_callbacks", None)
            if isinstance(callbacks, list):
                callbacks[:] = [
                    c for c in callbacks if getattr(c, "charter_governance", None) is not self
                ]
            agents = _agents_of(self.target, crewai)
            with _lock:
                keep = [a for a in agents if _route_agent_governed(a, crewai)]
            _llm_hooks([a for a in agents if a not in keep], add=False)
            for run in runs:
                self._finish(run, RuntimeError("charter_crewai was uninstalled while it ran"))
        except Exception as exc:
            _report(exc, "uninstalling")
        if self._owns_governor:
            try:
                self.governor.close()
            except Exception as exc:
                _report(exc, "closing the governor")

    # -- deciding ---------------------------------------------------------------------------------

    def _abort(self, blocked: Blocked) -> BaseException:
        step = blocked.step
        return self._crewai.aborted(blocked.reason, blocked.result, step.name, step.kind)

    def _judge(
        self, owner: Any, fallback: Step, build: Callable[[_Run], Step], task: Any = None
    ) -> tuple[_Run | None, Allowed | Blocked]:
        """The Gate's decision on the step `build` describes, in `owner`'s run (opened now if
        this is its first step). Never raises: a step that cannot be described is decided as
        `fallback` by the one fail-mode rule."""
        run: _Run | Blocked | None = None
        try:
            run = self._run_for(owner, task)
            if isinstance(run, Blocked):
                return None, run
            if run is None:  # the task could not start under fail_mode open: ungoverned
                decision: Allowed | Blocked | Pending = Allowed(None, "ungoverned", None)
            else:
                decision = self.gate.decide(build(run), run.task_id)
        except Exception as exc:
            decision = self.gate.undecided(fallback, exc)
        if isinstance(decision, Pending):  # only with pause=True; the approver answers here
            decision = Blocked(decision.step, decision.request.reason, None)
        if decision.result is None:
            with self._lock:
                self.undecided += 1
        return (run if isinstance(run, _Run) else None), decision

    def _open_run(
        self, owner: Any, inputs: Any, closes_with_task: int | None
    ) -> _Run | Blocked | None:
        """Start the Charter task of a kickoff: its run, `Blocked` when it may not start, or
        None when it could not start under fail_mode open (the Gate reported why)."""
        crewai = self._crewai
        name, task_input, props = tr.kickoff_task(owner, inputs, crewai.crew_type, "crewai")
        try:
            started = self.gate.start_task(None, name, task_input, props)
        except Exception:
            return None
        if isinstance(started, Blocked):
            return started
        if isinstance(owner, crewai.crew_type) and isinstance(inputs, Mapping) and inputs:
            # A crew's user request is its kickoff inputs: the values a person gave the crew
            # (its task descriptions are the crew author's configuration, not user content).
            refused = self.gate.user_messages(started, [dict(inputs)])
            if refused is not None:
                self.gate.end_task(started, self._abort(refused))
                return refused
        run = _Run(self, weakref.ref(owner), started, closes_with_task)
        with _lock:
            _runs.setdefault(id(owner), {})[id(self)] = run
        with self._lock:
            self._task_ids.append(started)
        return run

    def _run_for(self, owner: Any, task: Any = None) -> _Run | Blocked | None:
        """The open run of `owner`, opened now when this step is the first Charter sees (a
        governed agent inside an ungoverned crew, or a task executed outside any kickoff)."""
        # One lock per governance: parallel first steps (native tool batches) open one task.
        with self._opening:
            with _lock:
                run = _runs.get(id(owner), {}).get(id(self))
                if run is not None and run.owner() is owner:
                    return run
                executing = _is_executing(owner)
            closes = id(task) if task is not None and not executing else None
            return self._open_run(owner, None, closes)

    def _start(self, owner: Any, ctx: Any) -> None:
        """A kickoff of the governed crew or agent begins: open its Charter task."""
        crewai = self._crewai
        try:
            with _lock:
                stale = _runs.get(id(owner), {}).pop(id(self), None)
            if stale is not None:
                self._finish(stale, RuntimeError("a new kickoff began before this one ended"))
            missing = _missing_routers(crewai)
            if missing:
                raise RuntimeError(
                    f"Charter's CrewAI hooks for {', '.join(missing)} were removed from CrewAI's "
                    "registry (clear_all_global_hooks()?); call charter_crewai.govern(...) again"
                )
            _move_gates_last(crewai)
            _llm_hooks(_agents_of(owner, crewai), add=True)
            decision: _Run | Allowed | Blocked | None
            decision = self._open_run(owner, getattr(ctx, "inputs", None), None)
        except Exception as exc:
            decision = self.gate.undecided(Step("task.start", None, "kickoff"), exc)
        if isinstance(decision, Blocked):
            raise self._abort(decision) from None
        _started.set(self)

    def _finish(self, run: _Run, error: BaseException | None, output: Any = None) -> None:
        """End `run`: settle what is still open, then record task.end or task.error (steps
        left open are recorded as abandoned by the Gate)."""
        with self._lock:
            left = {
                name: [table.pop(k) for k, v in list(table.items()) if v.run is run]
                for name, table in (("models", self._models), ("tasks", self._tasks))
            }
            for key in [k for k, v in self._tools.items() if v.run is run]:
                del self._tools[key]
        for model in left["models"]:
            self._settle_stale_model(model)
        if isinstance(error, Exception):
            for step in left["tasks"]:
                self.gate.fail(step.handle, error)
        summary = tr.kickoff_output(output) if error is None and output is not None else None
        self.gate.end_task(run.task_id, error, summary)

    # -- tasks ------------------------------------------------------------------------------------

    def _pre_task(self, ctx: Any, owner: Any) -> None:
        fallback = Step("step.self", "POST", tr.task_name(ctx.task) or "task")
        run, decision = self._judge(
            owner, fallback, lambda run: tr.task_step(self.gate, ctx), ctx.task
        )
        if isinstance(decision, Blocked):
            raise self._abort(decision)
        if decision.handle is not None:
            with self._lock:
                self._tasks[id(ctx.task)] = _Open(ctx.task, run, decision.handle)

    def _post_task(self, ctx: Any, owner: Any) -> None:
        with self._lock:
            step = _take(self._tasks, ctx.task)
        if step is None or step.run is None:
            return
        self.gate.complete(step.handle, tr.task_output(ctx.output))
        if step.run.closes_with_task == id(ctx.task):
            with _lock:
                owner_runs = _runs.get(id(step.run.owner()), {})
                if owner_runs.get(id(self)) is step.run:
                    del owner_runs[id(self)]
            self._finish(step.run, None)

    # -- model calls ------------------------------------------------------------------------------

    def _pre_model(self, ctx: Any, owner: Any) -> None:
        executor = getattr(ctx, "executor", None)
        key = executor if executor is not None else getattr(ctx, "messages", None)
        with self._lock:
            current = self._models.get(id(key))
            if current is not None and current.ctx is ctx:
                return  # this very call is already gated (a router listed twice)
            stale = self._models.pop(id(key), None)
        if stale is not None:
            self._settle_stale_model(stale)
        before = self._usage(getattr(ctx, "llm", None))
        fallback = Step("step.model", None, "model")
        run, decision = self._judge(
            owner, fallback, lambda run: tr.model_step(self.gate, ctx, run.counted)
        )
        if isinstance(decision, Blocked):
            raise self._abort(decision)
        if decision.handle is not None:
            count = len(ctx.messages) if isinstance(ctx.messages, list) else 0
            with self._lock:
                self._models[id(key)] = _Open(key, run, decision.handle, None, ctx, before, count)

    def _usage(self, llm: Any) -> dict[str, int] | None:
        try:
            return tr.usage_of(llm)
        except Exception as exc:
            _report(exc, "reading token usage")
            return None

    def _post_model(self, ctx: Any, owner: Any) -> None:
        executor = getattr(ctx, "executor", None)
        key = executor if executor is not None else getattr(ctx, "messages", None)
        with self._lock:
            entry = _take(self._models, key)
        if entry is not None:
            self._complete_model(entry, {"response": getattr(ctx, "response", None)})

    def _complete_model(self, entry: _Open, output: dict[str, Any]) -> None:
        # Usage is known only after the call: the outcome's properties carry it, where budget
        # policies read it (properties.model.usage.total_tokens).
        usage = tr.usage_delta(entry.usage, self._usage(getattr(entry.ctx, "llm", None)))
        if usage:
            output["usage"] = usage
        self.gate.complete(entry.handle, output, properties=tr.model_properties(usage))

    def _settle_stale_model(self, entry: _Open) -> None:
        """A model call CrewAI never reported back: native tool calls (CrewAI runs no
        after-model hooks for them) are completed with the calls; anything else (the call
        raised) is recorded as abandoned."""
        try:
            if entry.handle is None or entry.handle.settled is not None:
                return
            key = entry.key
            messages = key if type(key) is list else tr.executor_messages(key)
            later = messages[entry.count :] if isinstance(messages, list) else []
            calls = tr.tool_calls_in(later)
            if calls:
                self._complete_model(entry, {"tool_calls": calls})
            else:
                self.gate.abandon(entry.handle)
        except Exception as exc:
            _report(exc, "recording a model call")

    # -- tool calls -------------------------------------------------------------------------------

    def _pre_tool(self, ctx: Any, owner: Any) -> None:
        tool_input = getattr(ctx, "tool_input", None)
        with self._lock:
            current = self._tools.get(id(tool_input))
        if current is not None and current.key is tool_input:
            if current.blocked is not None:
                raise self._abort(current.blocked)
            return  # this very call is already gated (a router listed twice)
        # Native tool calls get no after-model hook: settle the call that asked for this tool
        # now, so the trail lists the model step before the tools it requested.
        executor = getattr(getattr(ctx, "agent", None), "agent_executor", None)
        if executor is not None:
            with self._lock:
                asked = _take(self._models, executor)
            if asked is not None:
                self._settle_stale_model(asked)
        name = tr.text(getattr(ctx, "tool_name", None)) or "unnamed_tool"
        fallback = Step("step.unknown", None, name)
        run, decision = self._judge(owner, fallback, lambda run: tr.tool_step(self.gate, ctx))
        blocked = decision if isinstance(decision, Blocked) else None
        handle = decision.handle if isinstance(decision, Allowed) else None
        if blocked is not None or handle is not None:
            with self._lock:
                self._tools[id(tool_input)] = _Open(tool_input, run, handle, blocked)
        if blocked is not None:
            raise self._abort(blocked)

    def _post_tool(self, ctx: Any, owner: Any) -> str | None:
        with self._lock:
            entry = _take(self._tools, getattr(ctx, "tool_input", None))
        if entry is None:
            return None
        if entry.blocked is not None:
            return tr.blocked_observation(ctx, entry.blocked.reason)
        if tr.blocked_elsewhere(ctx):
            self.gate.abandon(entry.handle)  # another hook refused it: it never ran
        else:
            self.gate.complete(entry.handle, tr.tool_output(ctx))
        return None


def _drop_target(key: int, ref: weakref.ref[Any]) -> None:
    with _lock:
        entry = _targets.get(key)
        if entry is not None and entry[0] is ref:
            del _targets[key]


def _route_agent_governed(agent: Any, crewai: CrewAI) -> bool:
    """True when another installed governance still covers `agent` (caller holds _lock)."""
    if _alive_entry(agent) is not None:
        return True
    crew = getattr(agent, "crew", None)
    return isinstance(crew, crewai.crew_type) and _alive_entry(crew) is not None


def govern(
    target: Any,
    *,
    governor: Governor | None = None,
    approver: Any = None,
    **settings: Any,
) -> Governance:
    """Govern one CrewAI crew (or agent): every kickoff becomes a Charter task, every CrewAI
    task a step.self step, every model call a step.model step and every tool call a step
    mapped by the templates, each judged before it runs and recorded after.

    Pass either an existing charter.Governor (`governor=`) or the Governor's keywords
    (`approver=`, and settings such as policy_file=, agent_id=, audit_location=). Returns the
    Governance handle. Calling it again on a governed target with the same arguments returns
    the same handle (re-registering any hook removed meanwhile). Refuses (TypeError) a target
    that is neither a Crew nor an agent, (ValueError) a governor together with settings and a
    target already governed with other arguments; raises ImportError naming
    ``pip install charter-crewai`` when CrewAI is missing or too old, and whatever the
    Governor raises for bad settings or policies.
    """
    crewai = load()
    if not isinstance(target, (crewai.crew_type, crewai.base_agent_type)):
        raise TypeError(
            f"govern() takes a crewai.Crew or a crewai Agent, not {type(target).__name__}"
        )
    signature = (
        id(governor) if governor is not None else None,
        id(approver) if approver is not None else None,
        tuple(sorted((k, repr(v)) for k, v in settings.items())),
    )
    with _lock:
        existing = _alive_entry(target)
    if existing is not None and existing.target is target:
        if existing._signature != signature:
            raise ValueError(
                "this target is already governed with other arguments; call "
                "handle.uninstall() on the first govern() result before governing it again"
            )
        existing._repair()
        return existing
    gate = Gate("crewai", governor=governor, approver=approver, **settings)
    owns = governor is None
    try:
        governance = Governance(
            target, gate, owns_governor=owns, signature=signature, crewai=crewai
        )
        governance._install()
    except BaseException:
        if owns:
            gate.governor.close()
        raise
    return governance
