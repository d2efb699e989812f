"""Charter attached to a LlamaIndex agent or workflow.

LlamaIndex's instrumentation dispatcher swallows every exception its handlers raise, so it can
observe but never block. Charter therefore gates where the work is done, by giving the governed
objects a subclass of their own class (``obj.__class__`` is swapped, and swapped back by
`Governance.uninstall`; nothing is added to the objects' fields, so they serialise as before):

- the agent's (or AgentWorkflow's) ``_call_tool(ctx, tool, input)``, where every tool call of
  every LlamaIndex agent goes through: a refused call returns an error `ToolOutput` the model
  reads, exactly what LlamaIndex does with a tool that raised, and the run continues;
- the agents' LLMs' chat methods (``chat``, ``achat``, ``stream_chat``, ``astream_chat``),
  where every model call of a governed run goes through, whichever agent or step makes it;
- ``run()``, where each run becomes a Charter task (ended when the run's result is known).

Which run a call belongs to is read from LlamaIndex's own instrumentation tags (the run id
the workflow runtime sets around each run); the task id is also kept in the run's
``ctx.store`` under `TASK_KEY`, so a context saved with ``ctx.to_dict()`` and resumed later
(in this process or another) continues the same task.
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from charter import AuditError, Governor, report_internal_error
from charter.integration import (
    Allowed,
    Blocked,
    Claim,
    Gate,
    Pending,
    Step,
    StepHandle,
    approval_request,
    claim,
    current_claim,
    message_step,
    read_answers,
)

from . import _llama as li
from . import _translate as tr

__all__ = ["TASK_KEY", "Governance", "govern", "govern_tools"]

TASK_KEY = "charter_task_id"
"""Where a governed run keeps its Charter task id in ``ctx.store``."""

_lock = threading.RLock()
# run id (LlamaIndex's) -> the governed run; entries leave when the run's result is known.
_runs: dict[str, _Run] = {}
# id(object) -> (weak ref, governance) for every governed agent and workflow.
_owners: dict[int, tuple[weakref.ref[Any], Governance]] = {}
# id(llm) -> (llm, how many installed governances use it); swapped back at zero.
_llms: dict[int, list[Any]] = {}
# The governed class made for each LlamaIndex class, and the original of each made one.
_made: dict[type, type] = {}
_original: dict[type, type] = {}

# Set while a governed model call runs: the LLM's inner calls (achat -> chat) are its own.
_in_model: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "charter_llamaindex_model", default=False
)


def _report(exc: BaseException, where: str) -> None:
    if not isinstance(exc, AuditError):
        report_internal_error(exc, f"charter_llamaindex: {where}")


# -- runs ----------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Run:
    """One run of a governed workflow: its Charter task (None until known for a resumed
    context), whether this run owns the task (ends it) and the workflow's name."""

    governance: Governance
    run_id: str
    task_id: str | None
    owned: bool
    name: str
    stored: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)


def _current_run() -> _Run | None:
    run_id = li.current_run_id()
    if run_id is None:
        return None
    with _lock:
        run = _runs.get(run_id)
    return run if run is not None and run.governance.installed else None


async def _task_of(run: _Run, ctx: Any) -> str | Blocked:
    """The task of `run`; a resumed context's task is read from its store the first time."""
    if run.task_id is None:
        saved = None
        try:
            saved = await ctx.store.get(TASK_KEY, default=None) if ctx is not None else None
        except Exception as exc:
            _report(exc, "reading the run's task from ctx.store")
        with run._lock:
            if run.task_id is None:
                gate = run.governance.gate
                if isinstance(saved, str) and gate.resume_task(saved) in ("open", "closing"):
                    run.task_id, run.stored = saved, True
                else:
                    started = gate.start_task(None, name=run.name)
                    if isinstance(started, Blocked):
                        return started
                    run.task_id = started
    if not run.stored and ctx is not None:
        run.stored = True
        try:
            await ctx.store.set(TASK_KEY, run.task_id)
        except Exception as exc:
            _report(exc, "keeping the run's task in ctx.store")
    assert run.task_id is not None
    return run.task_id


def _step_ctx() -> Any:
    try:
        return li.step_context()
    except Exception:
        return None


# -- the governed classes ------------------------------------------------------------------------


def _base(obj: Any) -> type:
    return _original.get(type(obj), type(obj))


def _original_method(obj: Any, name: str) -> Any:
    """The original class's `name`, bound to `obj` as ``obj.name`` binds it ungoverned
    (looked up on every call, so a method patched on the class later is the one called).

    Not ``Base.name(obj, ...)``: LlamaIndex's span decorator (wrapt) turns a method called
    through its class into a ``functools.partial``, whose signature it then works out on
    every call, twice as slow as a bound method's and once more for every span inside.
    """
    base = _base(obj)
    return getattr(base, name).__get__(obj, base)


def _governance_of(obj: Any) -> Governance | None:
    with _lock:
        entry = _owners.get(id(obj))
    if entry is not None and entry[0]() is obj and entry[1].installed:
        return entry[1]
    return None


def _run(self: Any, *args: Any, **kwargs: Any) -> Any:
    governance = _governance_of(self)
    original = _original_method(self, "run")
    if governance is None:
        return original(*args, **kwargs)
    return governance._run(self, original, args, kwargs)


async def _call_tool(self: Any, ctx: Any, tool: Any, tool_input: dict[str, Any]) -> Any:
    original = _original_method(self, "_call_tool")
    run = _current_run()
    if run is None:
        return await original(ctx, tool, tool_input)
    agent = await li.current_agent_name(self, ctx)
    return await run.governance._tool(
        run, ctx, tool, tool_input, agent, lambda args: original(ctx, tool, args)
    )


def _governed_class(cls: type, namespace: dict[str, Any]) -> type:
    with _lock:
        made = _made.get(cls)
        if made is None:
            ns = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, **namespace}
            made = type(cls)(cls.__name__, (cls,), ns)
            _made[cls] = made
            _original[made] = cls
        return made


def _swap(obj: Any, namespace: dict[str, Any]) -> None:
    cls = type(obj)
    if cls in _original:
        return
    object.__setattr__(obj, "__class__", _governed_class(cls, namespace))


def _unswap(obj: Any) -> None:
    original = _original.get(type(obj))
    if original is not None:
        object.__setattr__(obj, "__class__", original)


_WORKFLOW_METHODS: dict[str, Any] = {"run": _run}
_AGENT_METHODS: dict[str, Any] = {"run": _run, "_call_tool": _call_tool}


# -- model calls ---------------------------------------------------------------------------------


def _model_gate(
    llm: Any, messages: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[_Run, Step] | None:
    if _in_model.get():
        return None
    run = _current_run()
    if run is None:
        return None
    cls = _base(llm)
    try:
        ids = {"run_id": run.run_id, "workflow": run.name, "agent": li.agent_name_now()}
        step = tr.model_step(run.governance.gate, llm, cls, messages, kwargs, ids)
    except Exception as exc:
        # The call could not be described, so it cannot be judged: the one fail-mode rule.
        decided = run.governance.gate.undecided(Step("step.model", None, cls.__name__), exc)
        if isinstance(decided, Blocked):
            raise decided.error() from None
        return None
    return run, step


def _outcome(response: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    try:
        return tr.response_output(response), tr.response_properties(response)
    except Exception as exc:
        _report(exc, "reading a model response")
        return {"response": str(response)}, None


def _settled(gate: Gate, handle: StepHandle | None, response: Any) -> None:
    output, props = _outcome(response)
    gate.complete(handle, output, properties=props)


async def _asettled(gate: Gate, handle: StepHandle | None, response: Any) -> None:
    output, props = _outcome(response)
    await gate.acomplete(handle, output, properties=props)


def _decided_sync(found: tuple[_Run, Step]) -> StepHandle | None:
    run, step = found
    gate = run.governance.gate
    task = run.task_id
    if task is None:  # a sync call in a resumed run before any async step knew its task
        started = gate.start_task(None, name=run.name)
        if isinstance(started, Blocked):
            raise started.error()
        run.task_id = task = started
    decision = gate.decide(step, task)
    if isinstance(decision, (Blocked, Pending)):
        raise _refusal(decision).error()
    return decision.handle


async def _decided(found: tuple[_Run, Step]) -> StepHandle | None:
    run, step = found
    gate = run.governance.gate
    task = await _task_of(run, _step_ctx())
    if isinstance(task, Blocked):
        raise task.error()
    decision = await gate.adecide(step, task)
    if isinstance(decision, (Blocked, Pending)):
        raise _refusal(decision).error()
    return decision.handle


def _refusal(decision: Blocked | Pending, what: str = "a model call") -> Blocked:
    """A refusal to raise. Decided without `pause`, the Governor's approver answers every
    ask, so a Pending is never expected here; should one come, the step does not run."""
    if isinstance(decision, Blocked):
        return decision
    return Blocked(decision.step, f"blocked: {what} cannot wait for an approval", None)


def _chat(self: Any, messages: Any, **kwargs: Any) -> Any:
    original = _original_method(self, "chat")
    found = _model_gate(self, messages, kwargs)
    if found is None:
        return original(messages, **kwargs)
    gate = found[0].governance.gate
    handle = _decided_sync(found)
    token = _in_model.set(True)
    try:
        response = original(messages, **kwargs)
    except BaseException as exc:
        gate.fail(handle, exc)
        raise
    finally:
        _in_model.reset(token)
    _settled(gate, handle, response)
    return response


async def _achat(self: Any, messages: Any, **kwargs: Any) -> Any:
    original = _original_method(self, "achat")
    found = _model_gate(self, messages, kwargs)
    if found is None:
        return await original(messages, **kwargs)
    gate = found[0].governance.gate
    handle = await _decided(found)
    token = _in_model.set(True)
    try:
        response = await original(messages, **kwargs)
    except BaseException as exc:
        await gate.afail(handle, exc)
        raise
    finally:
        _in_model.reset(token)
    await _asettled(gate, handle, response)
    return response


def _stream_chat(self: Any, messages: Any, **kwargs: Any) -> Any:
    original = _original_method(self, "stream_chat")
    found = _model_gate(self, messages, kwargs)
    if found is None:
        return original(messages, **kwargs)
    gate = found[0].governance.gate
    handle = _decided_sync(found)
    token = _in_model.set(True)
    try:
        stream = original(messages, **kwargs)
    except BaseException as exc:
        gate.fail(handle, exc)
        raise
    finally:
        _in_model.reset(token)

    def relay() -> Iterator[Any]:
        last = None
        try:
            for last in stream:
                yield last
        except BaseException as exc:
            gate.fail(handle, exc)
            raise
        _settled(gate, handle, last)

    return relay()


async def _astream_chat(self: Any, messages: Any, **kwargs: Any) -> Any:
    original = _original_method(self, "astream_chat")
    found = _model_gate(self, messages, kwargs)
    if found is None:
        return await original(messages, **kwargs)
    gate = found[0].governance.gate
    handle = await _decided(found)
    token = _in_model.set(True)
    try:
        stream = await original(messages, **kwargs)
    except BaseException as exc:
        await gate.afail(handle, exc)
        raise
    finally:
        _in_model.reset(token)

    async def relay() -> AsyncIterator[Any]:
        last = None
        try:
            async for last in stream:
                yield last
        except BaseException as exc:
            await gate.afail(handle, exc)
            raise
        await _asettled(gate, handle, last)

    return relay()


_LLM_METHODS: dict[str, Any] = {
    "chat": _chat,
    "achat": _achat,
    "stream_chat": _stream_chat,
    "astream_chat": _astream_chat,
}


# -- the handle ----------------------------------------------------------------------------------


class Governance:
    """Charter attached to one LlamaIndex agent, AgentWorkflow or workflow (or to a tool list,
    `govern_tools`). `gate` and `governor` are what it decides with; `tools` holds the
    governed tools of `govern_tools`; `task_ids` the Charter tasks of recent runs. Use as a
    context manager to uninstall on exit."""

    def __init__(self, target: Any, gate: Gate, *, owns_governor: bool) -> None:
        self.target = target
        self.gate = gate
        self.tools: list[Any] = []
        self.task_ids: list[str] = []
        self.installed = False
        self._owns_governor = owns_governor
        self._objects: list[Any] = []
        self._llms: list[Any] = []
        self._tools_task: str | None = None
        self._tools_lock = threading.Lock()

    @property
    def governor(self) -> Governor:
        return self.gate.governor

    def __enter__(self) -> Governance:
        return self

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # -- installing ------------------------------------------------------------------------------

    def _install(self) -> None:
        target = self.target
        agents = li.agents_of(target)
        objects = [target, *(a for a in agents if a is not target)] if target is not None else []
        with _lock:
            for obj in objects:
                found = _owners.get(id(obj))
                if found is not None and found[0]() is obj and found[1].installed:
                    raise ValueError(
                        f"{type(obj).__name__} {li.name_of(obj)!r} is governed already; call "
                        "uninstall() on its Governance before governing it again"
                    )
            for obj in objects:
                _swap(obj, _AGENT_METHODS if li.is_agent_like(obj) else _WORKFLOW_METHODS)
                _owners[id(obj)] = (weakref.ref(obj), self)
                self._objects.append(obj)
            for agent in agents:
                llm = getattr(agent, "llm", None)
                if llm is None or any(llm is seen for seen in self._llms):
                    continue
                entry = _llms.setdefault(id(llm), [llm, 0])
                entry[1] += 1
                _swap(llm, _LLM_METHODS)
                self._llms.append(llm)
            self.installed = True

    def uninstall(self) -> None:
        """Give the agent, workflow and LLMs their own classes back; close a Governor this
        handle built. Runs in progress carry on ungoverned. Idempotent."""
        with _lock:
            if not self.installed:
                return
            self.installed = False
            for obj in self._objects:
                found = _owners.get(id(obj))
                if found is not None and found[1] is self:
                    del _owners[id(obj)]
                _unswap(obj)
            for llm in self._llms:
                entry = _llms.get(id(llm))
                if entry is not None and entry[0] is llm:
                    entry[1] -= 1
                    if entry[1] <= 0:
                        del _llms[id(llm)]
                        _unswap(llm)
            self._objects.clear()
            self._llms.clear()
            for run_id in [k for k, r in _runs.items() if r.governance is self]:
                del _runs[run_id]
        if self._tools_task is not None:
            self.gate.end_task(self._tools_task)
        if self._owns_governor:
            self.governor.close()

    # -- runs ------------------------------------------------------------------------------------

    def _run(
        self, workflow: Any, original: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """The workflow's own `run` (`original`, bound) as one Charter task."""
        ctx = kwargs.get("ctx")
        if ctx is None and args and li.is_context(args[0]):
            ctx = args[0]
        continuing = ctx is not None and bool(getattr(ctx, "is_running", False))
        name = li.name_of(workflow)
        held = current_claim()
        nested = held if held is not None and held.governor is self.governor else None
        task_id: str | None = None
        if nested is not None:
            task_id = nested.task_id
        elif not continuing:
            started = self.gate.start_task(None, name=name, input=li.run_input(args, kwargs))
            if isinstance(started, Blocked):
                raise started.error()
            task_id = started
            self._user_message(task_id, args, kwargs)
        try:
            handler = original(*args, **kwargs)
        except BaseException as exc:
            if task_id is not None and nested is None:
                self.gate.end_task(task_id, exc)
            raise
        run = _Run(self, str(handler.run_id), task_id, nested is None, name)
        with _lock:
            _runs[run.run_id] = run
        if task_id is not None:
            self._remember(task_id)
        li.on_done(handler, lambda outcome: self._finished(run, outcome))
        return handler

    def _user_message(self, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Record the user's message of a run as a step.message GET (role user): the trusted
        content provenance rules compare recipients and hosts with. A nested run's message
        came from a model, not a person, and is not recorded."""
        content = li.run_input(args, kwargs).get("user_msg")
        if content is None:
            return
        step = message_step("llamaindex", "GET", "user", content, name="user_message")
        decision = self.gate.decide(step, task_id)
        if isinstance(decision, (Blocked, Pending)):
            error = _refusal(decision, "a user message").error()
            self.gate.end_task(task_id, error)
            raise error
        self.gate.complete(decision.handle, {})

    def _remember(self, task_id: str) -> None:
        if task_id not in self.task_ids:
            self.task_ids.append(task_id)
            del self.task_ids[:-100]

    def _finished(self, run: _Run, outcome: li.Outcome) -> None:
        with _lock:
            if _runs.get(run.run_id) is run:
                del _runs[run.run_id]
        if not run.owned or run.task_id is None or outcome.paused:
            return  # nested runs end with their parent; a paused run resumes later
        # This runs on the event loop, ahead of whoever awaits the handler: the end is
        # recorded and queued here, and the loop (every other run on it) never stops while
        # the store commits it.
        try:
            if outcome.error is not None:
                self.gate.end_task(run.task_id, outcome.error, wait=False)
            else:
                output = li.result_output(outcome.result)
                self.gate.end_task(run.task_id, output=output, wait=False)
        except Exception as exc:
            _report(exc, "recording a run's end")

    # -- tool calls ------------------------------------------------------------------------------

    async def _tool(
        self,
        run: _Run | None,
        ctx: Any,
        tool: Any,
        tool_input: dict[str, Any],
        agent: str | None,
        call: Any,
    ) -> Any:
        """One tool call: judged, asked about through the workflow, run, recorded."""
        gate = self.gate
        name = tr.tool_name(tool)
        call_id = li.current_tool_id()
        ids = {"run_id": run.run_id if run else None, "agent": agent}
        try:
            step = tr.tool_step(gate, tool, tool_input, call_id, ids)
        except Exception as exc:
            decided = gate.undecided(Step("step.unknown", None, name), exc)
            if isinstance(decided, Blocked):
                return li.refused(tool, tool_input, decided.reason)
            return await call(tool_input)
        task = await _task_of(run, ctx) if run is not None else self._own_task()
        if isinstance(task, Blocked):
            return li.refused(tool, tool_input, task.reason)
        if run is not None:
            self._remember(task)
        decision = await gate.adecide(step, task, pause=ctx is not None, call_id=call_id)
        while isinstance(decision, Pending):
            decision, step = await self._ask(ctx, decision)
        if isinstance(decision, Blocked):
            return li.refused(tool, tool_input, decision.reason)
        handle = decision.handle
        if step.name != name:  # a reviewer's edit may change the arguments, not the tool
            await gate.aabandon(handle)
            return li.refused(
                tool, tool_input, f"blocked: the edit names another tool ({step.name})"
            )
        try:
            with claim(Claim("tool", call_id, name, gate.governor, task)):
                output = await call(dict(step.input))
        except BaseException as exc:
            if li.is_waiting(exc):
                # The tool itself waits for an event: the step is replayed from the top
                # when it arrives, and judged again then.
                await gate.aabandon(handle)
            else:
                await gate.afail(handle, exc)
            raise
        # ToolOutput.exception raises inside (an unset private field) when the tool did not.
        error = getattr(output, "exception", None) if getattr(output, "is_error", False) else None
        if isinstance(error, BaseException):
            await gate.afail(handle, error)
        else:
            await gate.acomplete(handle, tr.tool_output(output))
        return output

    async def _ask(self, ctx: Any, pending: Pending) -> tuple[Allowed | Blocked | Pending, Step]:
        """Pause the workflow with an InputRequiredEvent and read the HumanResponseEvent.

        The runtime replays the whole step when the answer arrives, so this runs twice: the
        first time it raises the runtime's wait, the second it returns the answer at once.
        """
        request = approval_request([pending])
        waiter = li.input_required(pending, request)
        try:
            answer_event = await li.wait_for_answer(ctx, waiter, pending.digest)
        except Exception as exc:
            if li.is_waiting(exc):
                raise
            reason = f"blocked: the approval was not answered ({exc})"
            return self.gate.expire(pending, reason), pending.step
        answer = read_answers(li.answer_of(answer_event), [pending])[0]
        step = self.gate.answer(pending, answer)
        return await self.gate.adecide(step, pending.task_id, pause=True), step

    def _own_task(self) -> str | Blocked:
        """The task of governed tools called outside any governed run (`govern_tools`)."""
        with self._tools_lock:
            if self._tools_task is None:
                started = self.gate.start_task(None, name="llamaindex tools")
                if isinstance(started, Blocked):
                    return started
                self._tools_task = started
                self._remember(started)
            return self._tools_task

    def wrap(self, tools: Sequence[Any]) -> list[Any]:
        """Governed copies of `tools` (LlamaIndex tools or plain functions) for a workflow
        that calls tools itself: same metadata (name, description, schema, return_direct),
        judged before each call. Inside a governed run they are in its task; elsewhere in
        one task of this handle, ended by `uninstall`."""
        return [li.governed_tool(self, tool) for tool in tools]


def govern(
    target: Any,
    *,
    governor: Governor | None = None,
    approver: Any = None,
    **settings: Any,
) -> Governance:
    """Govern a LlamaIndex `FunctionAgent`, `ReActAgent` (any workflow agent),
    `AgentWorkflow` or other `Workflow`: each run is a Charter task, every model call of its
    agents a step.model step and every tool call a step mapped by the templates
    (query-engine and retriever tools are reads of untrusted content), each judged before it
    runs and recorded after. A policy that asks pauses the workflow with an
    InputRequiredEvent and resumes on the HumanResponseEvent (`approve` / `deny`).

    Pass either an existing charter.Governor (`governor=`) or the Governor's keywords
    (`approver=`, and settings such as policy_file=, agent_id=, audit_location=). Returns the
    Governance handle (`uninstall()` undoes it). Refuses (TypeError) anything that is not a
    LlamaIndex workflow, (ValueError) a governor together with settings and an object
    governed already; raises what the Governor raises for bad settings or policies.
    """
    li.load()
    if not li.is_workflow(target):
        raise TypeError(
            "govern() takes a LlamaIndex FunctionAgent, ReActAgent, AgentWorkflow or Workflow, "
            f"not {type(target).__name__}; for a list of tools use govern_tools()"
        )
    gate = Gate("llamaindex", governor=governor, approver=approver, **settings)
    governance = Governance(target, gate, owns_governor=governor is None)
    try:
        governance._install()
    except BaseException:
        if governor is None:
            gate.governor.close()
        raise
    return governance


def govern_tools(
    tools: Sequence[Any],
    *,
    governor: Governor | None = None,
    approver: Any = None,
    **settings: Any,
) -> Governance:
    """Govern a list of tools for a workflow you build yourself: returns a Governance whose
    `tools` are the governed tools (same names, descriptions and schemas), each call judged
    before it runs and recorded after; a refused call returns an error ToolOutput. Called
    from a step of a workflow, an ask pauses it with an InputRequiredEvent; elsewhere the
    Governor's approver answers. Refuses (TypeError) something that is not a list of tools
    or functions."""
    li.load()
    if isinstance(tools, (str, bytes)) or not isinstance(tools, Sequence):
        raise TypeError(f"govern_tools() takes a list of tools, not {type(tools).__name__}")
    gate = Gate("llamaindex", governor=governor, approver=approver, **settings)
    governance = Governance(None, gate, owns_governor=governor is None)
    governance.installed = True
    try:
        governance.tools = governance.wrap(tools)
    except BaseException:
        governance.uninstall()
        raise
    return governance
