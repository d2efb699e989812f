"""Charter attached to one crew or agent through CrewAI's interception hooks.

CrewAI's hooks are process-global lists. Charter registers one router per interception point,
once, and each router finds the Governance of the crew (or agent) the event belongs to by
object identity; events of crews nobody governs pass untouched. So `govern(crew)` is scoped to
that crew, and two crews governed by different policies never see each other's steps.

The rule CrewAI imposes: a hook that raises anything but HookAborted is swallowed and the tool
runs anyway. Every gate below therefore catches everything and decides itself: a block (or an
error in closed fail mode) leaves as the one exception CrewAI lets through, a HookAborted that
is also a charter.BlockedError; an error in open fail mode is logged and the step allowed.
Errors while recording outcomes never reach the agent: they are logged and counted.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from charter import BlockedError, Governor, StepHandle, report_internal_error
from charter_templates import TemplateSet, load_templates

from . import _translate as tr
from ._crewai import CrewAI, load

__all__ = ["Governance", "govern", "governed_crew_tripwire"]

logger = logging.getLogger("charter.crewai")

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
    """Log and count an error on the recording path (charter.testing fails tests on them)."""
    report_internal_error(exc, f"charter_crewai: {where}")


def _one_line(text: str) -> str:
    return " ".join(text.split())


# -- per-kickoff state ---------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Run:
    """One kickoff of a governed crew or agent: its Charter task and what is still open."""

    governance: Governance
    owner: weakref.ref[Any]
    task_id: str
    # Runs opened by a first step outside any kickoff end with the task that opened them.
    closes_with_task: int | None = None
    seen: dict[int, int] = field(default_factory=dict)  # id(executor) -> messages at last call


@dataclass(eq=False, slots=True)
class _Tool:
    tool_input: Any  # kept alive so its id() is not reused while the call is open
    handle: StepHandle | None
    reason: str | None  # set when Charter blocked the call
    run: _Run | None


@dataclass(eq=False, slots=True)
class _Model:
    key: Any  # the executor (or message list) the call is paired by; kept alive
    ctx: Any  # the hook context that opened it, kept alive so identity checks stay sound
    handle: StepHandle
    usage_before: dict[str, int] | None
    llm: Any
    count: int
    run: _Run


@dataclass(eq=False, slots=True)
class _TaskStep:
    task: Any
    handle: StepHandle
    run: _Run


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


def _crew_of(ctx: Any, crewai: CrewAI) -> Any:
    crew = getattr(ctx, "crew", None)
    if isinstance(crew, crewai.crew_type):
        return crew
    crew = getattr(getattr(ctx, "agent", None), "crew", None)
    return crew if isinstance(crew, crewai.crew_type) else None


def _route(ctx: Any) -> tuple[Governance, Any] | None:
    """(governance, owner) for a step event; the owner is what one Charter task spans."""
    crewai = load()
    crew = _crew_of(ctx, crewai)
    if crew is not None:
        governance = _governance_of(crew, crewai)
        if governance is not None:
            return governance, crew
    agent = getattr(ctx, "agent", None)
    if agent is not None:
        governance = _governance_of(agent, crewai)
        if governance is not None:
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
        closed = any(g._fail_closed() for g in _active)
    if closed:
        reason = _one_line(
            f"blocked: Charter could not tell which crew this {what} belongs to "
            f"({type(exc).__name__}: {exc}); fail_mode is closed"
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
    except Exception as exc:
        _report(exc, "routing a kickoff's end")
        return
    failed = getattr(ctx, "status", None) == "failed"
    error = getattr(ctx, "error", None) if failed else None
    if failed and not isinstance(error, BaseException):
        error = RuntimeError("the kickoff failed")
    for run in runs.values():
        if run.owner() is owner:
            run.governance._finish(run, error, getattr(ctx, "output", None))


def _on_pre_step(ctx: Any) -> None:
    if getattr(ctx, "kind", None) != "task":  # flow methods are the flow's business
        return None
    routed = _safe_route(ctx, "task", gate=True)
    if routed is not None:
        routed[0]._pre_task(ctx, routed[1])
    return None


def _on_post_step(ctx: Any) -> None:
    if getattr(ctx, "kind", None) != "task":
        return None
    routed = _safe_route(ctx, "task", gate=False)
    if routed is not None:
        routed[0]._post_task(ctx)
    return None


def _on_pre_model(ctx: Any) -> None:
    routed = _safe_route(ctx, "model call", gate=True)
    if routed is not None:
        routed[0]._pre_model(ctx, routed[1])
    return None


def _on_post_model(ctx: Any) -> None:
    routed = _safe_route(ctx, "model call", gate=False)
    if routed is not None:
        routed[0]._post_model(ctx)
    return None


def _on_pre_tool(ctx: Any) -> None:
    routed = _safe_route(ctx, "tool call", gate=True)
    if routed is not None:
        routed[0]._pre_tool(ctx, routed[1])
    return None


def _on_post_tool(ctx: Any) -> str | None:
    routed = _safe_route(ctx, "tool call", gate=False)
    if routed is not None:
        return routed[0]._post_tool(ctx)
    return None


_ROUTERS: dict[str, Callable[[Any], Any]] = {
    "EXECUTION_START": _on_execution_start,
    "EXECUTION_END": _on_execution_end,
    "PRE_STEP": _on_pre_step,
    "POST_STEP": _on_post_step,
    "PRE_MODEL_CALL": _on_pre_model,
    "POST_MODEL_CALL": _on_post_model,
    "PRE_TOOL_CALL": _on_pre_tool,
    "POST_TOOL_CALL": _on_post_tool,
}
# Gates that should run after every hook registered before a kickoff, so that what Charter
# judges is what runs (a later hook may still rewrite the call's input in place).
_GATES_LAST = ("PRE_MODEL_CALL", "PRE_TOOL_CALL")


def _register_routers(crewai: CrewAI) -> None:
    for name, router in _ROUTERS.items():
        point = getattr(crewai.point, name)
        if router not in crewai.global_hooks(point):
            crewai.register(point, router)


def _unregister_routers(crewai: CrewAI) -> None:
    for name, router in _ROUTERS.items():
        point = getattr(crewai.point, name)
        while router in crewai.global_hooks(point):
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
    ("before_llm_call_hooks", _on_pre_model),
    ("after_llm_call_hooks", _on_post_model),
)


def _agents_of(target: Any, crewai: CrewAI) -> list[Any]:
    if not isinstance(target, crewai.crew_type):
        return [target]
    found: list[Any] = list(getattr(target, "agents", None) or [])
    found.append(getattr(target, "manager_agent", None))
    found.extend(getattr(task, "agent", None) for task in getattr(target, "tasks", None) or [])
    unique: dict[int, Any] = {id(a): a for a in found if a is not None}
    return list(unique.values())


def _add_llm_hooks(agents: Iterable[Any]) -> None:
    # An agent's executor copies the global model-call hooks once, when CrewAI creates it
    # (at the agent's first task). An executor created before govern() never sees Charter's
    # router unless it is added to its own lists.
    for agent in agents:
        executor = getattr(agent, "agent_executor", None)
        for attr, router in _LLM_HOOK_LISTS:
            hooks = getattr(executor, attr, None)
            if isinstance(hooks, list) and router not in hooks:
                hooks.append(router)


def _remove_llm_hooks(agents: Iterable[Any]) -> None:
    for agent in agents:
        executor = getattr(agent, "agent_executor", None)
        for attr, router in _LLM_HOOK_LISTS:
            hooks = getattr(executor, attr, None)
            while isinstance(hooks, list) and router in hooks:
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
    steps, `task_ids` the Charter task ids of its most recent kickoffs (oldest first).
    `uninstall()` detaches Charter and closes a Governor that `govern` built; it is safe to
    call twice, and ``with govern(...):`` calls it on exit.
    """

    def __init__(
        self,
        target: Any,
        governor: Governor,
        *,
        owns_governor: bool,
        templates: TemplateSet | None,
        signature: tuple[Any, ...],
        crewai: CrewAI,
    ) -> None:
        self.target = target
        self.governor = governor
        self._owns_governor = owns_governor
        self._templates = templates
        self._signature = signature
        self._crewai = crewai
        self._installed = False
        self._lock = threading.Lock()
        self._opening = threading.Lock()
        self._task_ids: deque[str] = deque(maxlen=_TASK_IDS_KEPT)
        self._tools: dict[int, _Tool] = {}
        self._models: dict[int, _Model] = {}
        self._tasks: dict[int, _TaskStep] = {}
        self.undecided = 0

    # -- state ----------------------------------------------------------------------------------

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

    def _fail_closed(self) -> bool:
        try:
            return bool(self.governor.runner.settings.fail_mode != "open")
        except Exception:
            return True

    def _track(self, obj: Any) -> None:
        """Route events of `obj` (the target, or a copy of it) here; caller holds _lock."""
        key = id(obj)
        _targets[key] = (weakref.ref(obj, lambda _ref, key=key: _drop_target(key, _ref)), self)

    # -- install / uninstall ----------------------------------------------------------------------

    def _install(self) -> None:
        crewai = self._crewai
        with _lock:
            self._installed = True
            self._track(self.target)
            if self not in _active:
                _active.append(self)
            _register_routers(crewai)
        self._repair()

    def _repair(self) -> None:
        """Make sure every hook this installation relies on is in place (govern() twice)."""
        crewai = self._crewai
        with _lock:
            _register_routers(crewai)
        _add_llm_hooks(_agents_of(self.target, crewai))
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
            runs = []
            for owner_runs in _runs.values():
                run = owner_runs.pop(id(self), None)
                if run is not None:
                    runs.append(run)
            if self in _active:
                _active.remove(self)
            if not _active:
                _unregister_routers(crewai)
        try:
            callbacks = getattr(self.target, "before_kickoff_callbacks", None)
            if isinstance(callbacks, list):
                callbacks[:] = [
                    c for c in callbacks if getattr(c, "charter_governance", None) is not self
                ]
            with _lock:
                keep = [
                    a for a in _agents_of(self.target, crewai) if _route_agent_governed(a, crewai)
                ]
            _remove_llm_hooks(a for a in _agents_of(self.target, crewai) if a not in keep)
        except Exception as exc:
            _report(exc, "uninstalling")
        for run in runs:
            closing = RuntimeError("charter_crewai was uninstalled while this task was open")
            self._finish(run, closing)
        if self._owns_governor:
            try:
                self.governor.close()
            except Exception as exc:
                _report(exc, "closing the governor")

    # -- decisions --------------------------------------------------------------------------------

    def _blocked(self, reason: str, result: Any = None) -> BaseException:
        return self._crewai.aborted(reason, result)

    def _undecided(self, exc: Exception, what: str) -> str | None:
        """Charter could not decide on `what`: the block reason (closed), or None (open)."""
        with self._lock:
            self.undecided += 1
        if self._fail_closed():
            reason = _one_line(
                f"blocked: Charter could not decide on {what} ({type(exc).__name__}: {exc}); "
                "fail_mode is closed"
            )
            logger.error("charter_crewai: %s", reason, exc_info=exc)
            return reason
        logger.error(
            "charter_crewai: allowed %s although Charter could not decide (%s: %s); fail_mode "
            "is open",
            what,
            type(exc).__name__,
            exc,
            exc_info=exc,
        )
        return None

    def _begin(self, run: _Run, args: tr.StepArgs) -> StepHandle:
        return self.governor.begin_step(
            args.kind,
            args.verb,
            name=args.name,
            input=args.input,
            properties=args.properties,
            task_id=run.task_id,
        )

    def _open_run(self, owner: Any, inputs: Any, closes_with_task: int | None) -> _Run:
        name, task_input, props = tr.kickoff_task(owner, inputs, self._crewai.crew_type)
        task_id = self.governor.start_task(name=name, input=task_input, properties=props)
        run = _Run(self, weakref.ref(owner), task_id, closes_with_task)
        with _lock:
            _runs.setdefault(id(owner), {})[id(self)] = run
        with self._lock:
            self._task_ids.append(task_id)
        return run

    def _run_for(self, owner: Any, task: Any = None) -> _Run:
        """The open run of `owner`, opened now when this step is the first Charter sees (a
        governed agent inside an ungoverned crew, or a task executed outside any kickoff).
        Raises BlockedError when a policy blocks that task from starting."""
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
            _add_llm_hooks(_agents_of(owner, crewai))
            self._open_run(owner, getattr(ctx, "inputs", None), None)
        except BlockedError as blocked:
            raise self._blocked(blocked.reason, blocked.result) from None
        except Exception as exc:
            reason = self._undecided(exc, "the kickoff")
            if reason is not None:
                raise self._blocked(reason) from None
        _started.set(self)

    def _finish(self, run: _Run, error: BaseException | None, output: Any = None) -> None:
        """End `run`: settle what is still open, then record task.end or task.error."""
        with self._lock:
            tools = [k for k, v in self._tools.items() if v.run is run]
            open_tools = [self._tools.pop(k) for k in tools]
            models = [k for k, v in self._models.items() if v.run is run]
            open_models = [self._models.pop(k) for k in models]
            tasks = [k for k, v in self._tasks.items() if v.run is run]
            open_tasks = [self._tasks.pop(k) for k in tasks]
        for model in open_models:
            self._settle_stale_model(model)
        for step in open_tasks:
            try:
                if error is not None and isinstance(error, Exception):
                    step.handle.fail(error)
                else:
                    step.handle.abandon()
            except Exception as exc:
                _report(exc, "recording an unfinished task")
        for tool in open_tools:
            try:
                if tool.handle is not None and tool.handle.settled is None:
                    tool.handle.abandon()
            except Exception as exc:
                _report(exc, "recording an unfinished tool call")
        try:
            summary = tr.kickoff_output(output) if error is None and output is not None else None
            self.governor.end_task(run.task_id, error=error, output=summary)
        except Exception as exc:
            _report(exc, "recording the end of a kickoff")

    # -- tasks ------------------------------------------------------------------------------------

    def _pre_task(self, ctx: Any, owner: Any) -> None:
        try:
            run = self._run_for(owner, ctx.task)
            handle = self._begin(run, tr.task_step(ctx))
            with self._lock:
                self._tasks[id(ctx.task)] = _TaskStep(ctx.task, handle, run)
        except self._crewai.hook_aborted:
            raise
        except BlockedError as blocked:
            raise self._blocked(blocked.reason, blocked.result) from None
        except Exception as exc:
            reason = self._undecided(exc, f"task {tr.task_name(ctx.task)!r}")
            if reason is not None:
                raise self._blocked(reason) from None

    def _post_task(self, ctx: Any) -> None:
        try:
            with self._lock:
                step = self._tasks.get(id(ctx.task))
                if step is None or step.task is not ctx.task:
                    return
                del self._tasks[id(ctx.task)]
            step.handle.complete(tr.task_output(ctx.output))
            if step.run.closes_with_task == id(ctx.task):
                with _lock:
                    owner_runs = _runs.get(id(step.run.owner()), {})
                    if owner_runs.get(id(self)) is step.run:
                        del owner_runs[id(self)]
                self._finish(step.run, None)
        except Exception as exc:
            _report(exc, "recording a task's output")

    # -- model calls ------------------------------------------------------------------------------

    def _pre_model(self, ctx: Any, owner: Any) -> None:
        executor = getattr(ctx, "executor", None)
        key_obj = executor if executor is not None else getattr(ctx, "messages", None)
        key = id(key_obj)
        try:
            with self._lock:
                current = self._models.get(key)
                if current is not None and current.ctx is ctx:
                    return  # this very call is already gated (a router listed twice)
                stale = self._models.pop(key, None)
            if stale is not None:
                self._settle_stale_model(stale)
            run = self._run_for(owner)
            args, count = tr.model_step(ctx, run.seen.get(key, 0))
            run.seen[key] = count
            before = self._usage(ctx)
            handle = self._begin(run, args)
            with self._lock:
                self._models[key] = _Model(key_obj, ctx, handle, before, ctx.llm, count, run)
        except self._crewai.hook_aborted:
            raise
        except BlockedError as blocked:
            raise self._blocked(blocked.reason, blocked.result) from None
        except Exception as exc:
            reason = self._undecided(exc, "a model call")
            if reason is not None:
                raise self._blocked(reason) from None

    def _usage(self, ctx: Any) -> dict[str, int] | None:
        try:
            return tr.usage_of(getattr(ctx, "llm", None))
        except Exception as exc:
            _report(exc, "reading token usage")
            return None

    def _post_model(self, ctx: Any) -> None:
        executor = getattr(ctx, "executor", None)
        key_obj = executor if executor is not None else getattr(ctx, "messages", None)
        try:
            with self._lock:
                entry = self._models.get(id(key_obj))
                if entry is None or entry.key is not key_obj:
                    return
                del self._models[id(key_obj)]
            self._complete_model(entry, {"response": getattr(ctx, "response", None)})
        except Exception as exc:
            _report(exc, "recording a model response")

    def _complete_model(self, entry: _Model, output: dict[str, Any]) -> None:
        try:
            usage = tr.usage_delta(entry.usage_before, tr.usage_of(entry.llm))
        except Exception as exc:
            _report(exc, "reading token usage")
            usage = {}
        if not usage:
            entry.handle.complete(output)
            return
        output["usage"] = usage
        # Known only after the call: the outcome's properties carry it, where budget policies
        # read it (properties.model.usage.total_tokens).
        entry.handle.complete(output, properties={"model": {"usage": usage}})

    def _settle_stale_model(self, entry: _Model) -> None:
        """A model call CrewAI never reported back: native tool calls (CrewAI runs no
        after-model hooks for them) are completed with the calls; anything else (the call
        raised) is recorded as abandoned."""
        try:
            if entry.handle.settled is not None:
                return
            messages = getattr(entry.key, "messages", entry.key)
            later = list(messages)[entry.count :] if isinstance(messages, list) else []
            calls = tr.tool_calls_in(later)
            if calls:
                self._complete_model(entry, {"tool_calls": calls})
            else:
                entry.handle.abandon()
        except Exception as exc:
            _report(exc, "recording a model call")

    # -- tool calls -------------------------------------------------------------------------------

    def _pre_tool(self, ctx: Any, owner: Any) -> None:
        tool_input = getattr(ctx, "tool_input", None)
        key = id(tool_input)
        with self._lock:
            current = self._tools.get(key)
            if current is not None and current.tool_input is tool_input:
                if current.reason is not None:
                    raise self._blocked(current.reason)
                return  # this very call is already gated (a router listed twice)
        # Native tool calls get no after-model hook: settle the call that asked for this tool
        # now, so the trail lists the model step before the tools it requested.
        executor = getattr(getattr(ctx, "agent", None), "agent_executor", None)
        if executor is not None:
            with self._lock:
                asked = self._models.get(id(executor))
                if asked is not None and asked.key is executor:
                    del self._models[id(executor)]
                else:
                    asked = None
            if asked is not None:
                self._settle_stale_model(asked)
        run: _Run | None = None
        try:
            run = self._run_for(owner)
            args = tr.tool_step(ctx, self._templates)
            handle = self._begin(run, args)
        except self._crewai.hook_aborted:
            raise
        except BlockedError as blocked:
            self._remember_tool(key, _Tool(tool_input, None, blocked.reason, run))
            raise self._blocked(blocked.reason, blocked.result) from None
        except Exception as exc:
            name = tr.text(getattr(ctx, "tool_name", None)) or "unnamed_tool"
            reason = self._undecided(exc, f"tool {name!r}")
            if reason is not None:
                self._remember_tool(key, _Tool(tool_input, None, reason, run))
                raise self._blocked(reason) from None
            return
        self._remember_tool(key, _Tool(tool_input, handle, None, run))

    def _remember_tool(self, key: int, entry: _Tool) -> None:
        with self._lock:
            self._tools[key] = entry

    def _post_tool(self, ctx: Any) -> str | None:
        tool_input = getattr(ctx, "tool_input", None)
        try:
            with self._lock:
                entry = self._tools.get(id(tool_input))
                if entry is None or entry.tool_input is not tool_input:
                    return None
                del self._tools[id(tool_input)]
            if entry.reason is not None:
                return tr.blocked_observation(ctx, entry.reason)
            if entry.handle is None:
                return None
            if tr.blocked_elsewhere(ctx):
                entry.handle.abandon()  # another hook refused it: it never ran
            else:
                entry.handle.complete(tr.tool_output(ctx))
        except Exception as exc:
            _report(exc, "recording a tool result")
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


def _signature(
    governor: Governor | None, approver: Any, settings: dict[str, Any]
) -> tuple[Any, ...]:
    return (
        id(governor) if governor is not None else None,
        id(approver) if approver is not None else None,
        tuple(sorted((k, repr(v)) for k, v in settings.items())),
    )


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
    if not isinstance(target, crewai.crew_type | crewai.base_agent_type):
        raise TypeError(
            f"govern() takes a crewai.Crew or a crewai Agent, not {type(target).__name__}"
        )
    if governor is not None and (settings or approver is not None):
        extra = [*settings, *(["approver"] if approver is not None else [])]
        raise ValueError(
            "pass either governor= or the Governor's keywords (approver=, policy_file=, ...), "
            f"not both (got governor= and {', '.join(extra)}=)"
        )
    signature = _signature(governor, approver, settings)
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
    owns = governor is None
    gov = governor if governor is not None else Governor(approver=approver, **settings)
    try:
        location = gov.runner.settings.template_location
        templates = load_templates(location) if location else None
        governance = Governance(
            target,
            gov,
            owns_governor=owns,
            templates=templates,
            signature=signature,
            crewai=crewai,
        )
        governance._install()
    except BaseException:
        if owns:
            gov.close()
        raise
    return governance
