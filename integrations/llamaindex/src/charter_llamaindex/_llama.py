"""Everything this integration reads from LlamaIndex (and its workflows runtime), in one place.

LlamaIndex is imported on first use (`load`), never when charter_llamaindex is imported. The
runtime's context variables (the run id in the instrumentation tags, the running step's
event) are read defensively: an older or newer runtime without one gives None, never an
error in the agent.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from charter.integration import Blocked, Claim, Pending, claim, current_claim

if TYPE_CHECKING:
    from ._governance import Governance

__all__ = ["approve", "deny", "edit"]

# The workflow runtime tags each run with its id: "llamaindex.run_id", "run_id" before 2.17.
_RUN_TAGS = ("llamaindex.run_id", "run_id")
_DIGEST = "charter_digest"
_DECISION = "charter_decision"
_APPROVE_WORDS = frozenset({"approve", "approved", "yes", "y", "ok", "allow"})


@functools.cache
def load() -> Any:
    """The llama_index.core modules this integration uses; ImportError naming the install
    command when LlamaIndex is missing or too old."""
    try:
        import llama_index.core.agent.workflow as agents
        import llama_index.core.tools as tools
        import llama_index.core.workflow as workflow
    except ImportError as exc:
        raise ImportError(
            "charter-llamaindex needs llama-index-core>=0.14: pip install charter-llamaindex"
        ) from exc
    return _Modules(agents, tools, workflow)


@dataclass(frozen=True)
class _Modules:
    agents: Any
    tools: Any
    workflow: Any


# -- what is running ---------------------------------------------------------------------------


@functools.cache
def _tags_var() -> Any:
    """The instrumentation's context variable of run tags (looked up once), or None."""
    try:
        from llama_index_instrumentation.dispatcher import active_instrument_tags
    except ImportError:  # pragma: no cover - older layouts
        try:
            from llama_index.core.instrumentation.dispatcher import active_instrument_tags
        except ImportError:
            return None
    return active_instrument_tags


@functools.cache
def _worker_var() -> Any:
    """The runtime's context variable of the running step's state (looked up once), or None."""
    try:
        from workflows.runtime.types.results import StepWorkerStateContextVar
    except ImportError:  # pragma: no cover - older runtimes
        return None
    return StepWorkerStateContextVar


def current_run_id() -> str | None:
    """LlamaIndex's id of the workflow run this code runs in (from its instrumentation tags)."""
    var = _tags_var()
    if var is None:
        return None
    tags = var.get()
    for key in _RUN_TAGS:
        value = tags.get(key)
        if value is not None:
            return str(value)
    return None


def _step_worker() -> Any:
    var = _worker_var()
    if var is None:
        return None
    try:
        return var.get()
    except LookupError:
        return None


def current_event() -> Any:
    """The event the running step was given, or None."""
    return getattr(_step_worker(), "event", None)


def current_tool_id() -> str | None:
    """The tool-call id of the ToolCall the running step handles, or None."""
    tool_id = getattr(current_event(), "tool_id", None)
    return tool_id if isinstance(tool_id, str) and tool_id else None


def step_context() -> Any:
    """The running step's Context (raises outside a step)."""
    return load().workflow.Context.get_step_context()


def agent_name_now() -> str | None:
    """The agent whose step is running (AgentSetup / AgentInput carry its name)."""
    name = getattr(current_event(), "current_agent_name", None)
    return name if isinstance(name, str) and name else None


async def current_agent_name(workflow: Any, ctx: Any) -> str | None:
    """The agent making a tool call: the one agent of an agent, or AgentWorkflow's current."""
    if is_agent(workflow):
        return name_of(workflow)
    try:
        name = await ctx.store.get("current_agent_name", default=None)
    except Exception:
        return None
    return name if isinstance(name, str) else None


# -- what a target is --------------------------------------------------------------------------


def is_workflow(obj: Any) -> bool:
    return isinstance(obj, load().workflow.Workflow)


def is_agent(obj: Any) -> bool:
    return isinstance(obj, load().agents.BaseWorkflowAgent)


def is_agent_like(obj: Any) -> bool:
    """An agent or an AgentWorkflow: it calls tools through ``_call_tool``."""
    mods = load().agents
    return isinstance(obj, (mods.BaseWorkflowAgent, mods.AgentWorkflow))


def is_context(obj: Any) -> bool:
    return isinstance(obj, load().workflow.Context)


def agents_of(target: Any) -> list[Any]:
    """The agents whose model calls a governed target makes."""
    if target is None:
        return []
    if is_agent(target):
        return [target]
    agents = getattr(target, "agents", None)
    if isinstance(agents, Mapping):
        return [a for a in agents.values() if is_agent(a)]
    return []


def name_of(obj: Any) -> str:
    name = getattr(obj, "name", None)
    if isinstance(name, str) and name:
        return name
    return getattr(obj, "workflow_name", None) or type(obj).__name__


def run_input(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The input of a run as recorded on task.start: the user's message when there is one."""
    message = kwargs.get("user_msg")
    if message is None and args and isinstance(args[0], str):
        message = args[0]
    content = getattr(message, "content", message)
    out: dict[str, Any] = {}
    if content is not None:
        out["user_msg"] = str(content)
    start = kwargs.get("start_event")
    if start is not None:
        out["start_event"] = type(start).__name__
    return out


# -- how a run ends ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """How a run's handler finished: `paused` (cancelled, e.g. to be saved and resumed
    later), `error`, or `result`."""

    paused: bool = False
    error: BaseException | None = None
    result: Any = None


def on_done(handler: Any, callback: Callable[[Outcome], None]) -> None:
    """Call `callback` once the run behind `handler` has its result."""
    task = getattr(handler, "_result_task", None)
    if not isinstance(task, asyncio.Future):
        return  # a runtime without one: the task is closed by the idle sweep

    def done(fut: asyncio.Future[Any]) -> None:
        if fut.cancelled():
            callback(Outcome(paused=True))
            return
        exc = fut.exception()
        if exc is not None:
            cancelled = type(exc).__name__ in ("WorkflowCancelledByUser", "CancelledError")
            callback(Outcome(paused=True) if cancelled else Outcome(error=exc))
            return
        callback(Outcome(result=fut.result()))

    task.add_done_callback(done)


def result_output(result: Any) -> dict[str, Any]:
    """A run's result as task.end output: the agent's response for an agent run."""
    value = getattr(result, "result", result)
    response = getattr(value, "response", None)
    if response is not None:
        out: dict[str, Any] = {"response": str(getattr(response, "content", response))}
        agent = getattr(value, "current_agent_name", None)
        if isinstance(agent, str):
            out["agent"] = agent
        return out
    return {"result": value if isinstance(value, (str, int, float, bool)) else str(value)}


# -- tools -------------------------------------------------------------------------------------


def refused(tool: Any, tool_input: Mapping[str, Any], reason: str) -> Any:
    """The error ToolOutput the model reads instead of a refused call's result (what
    LlamaIndex itself produces for a tool that raised)."""
    name = getattr(getattr(tool, "metadata", None), "name", None) or "unnamed_tool"
    return load().tools.ToolOutput(
        content=reason,
        tool_name=name,
        raw_input=dict(tool_input),
        raw_output=reason,
        is_error=True,
    )


def is_waiting(exc: BaseException) -> bool:
    """True for the runtime's control-flow exception of a step that waits for an event."""
    return type(exc).__name__ == "WaitingForEvent"


def governed_tool(governance: Governance, tool: Any) -> Any:
    """`tool` (a LlamaIndex tool or a plain function) behind Charter's gate."""
    mods = load().tools
    if not isinstance(tool, mods.BaseTool):
        if not callable(tool):
            raise TypeError(f"govern_tools() takes tools or functions, not {type(tool).__name__}")
        tool = mods.FunctionTool.from_defaults(tool)
    return _tool_class()(governance, tool)


@functools.cache
def _tool_class() -> type:
    mods = load().tools

    class GovernedTool(mods.AsyncBaseTool):  # type: ignore[misc, name-defined]
        """A tool judged by Charter before each call; the wrapped tool is `tool`."""

        def __init__(self, governance: Governance, tool: Any) -> None:
            self.tool = tool
            self._governance = governance
            self._async = mods.adapt_to_async_tool(tool)

        @property
        def metadata(self) -> Any:
            return self.tool.metadata

        @property
        def requires_context(self) -> bool:
            return bool(getattr(self.tool, "requires_context", False))

        def call(self, *args: Any, **kwargs: Any) -> Any:
            return _sync_call(self._governance, self.tool, args, kwargs)

        async def acall(self, *args: Any, **kwargs: Any) -> Any:
            held = current_claim()
            if held is not None and held.take("tool", None, self.metadata.name):
                return await self._async.acall(*args, **kwargs)  # the agent gated it
            from ._governance import _current_run

            tool_input = _input(args, kwargs)
            ctx = _ctx_in(kwargs)

            async def run(call_args: dict[str, Any]) -> Any:
                return await self._async.acall(*args, **_merged(kwargs, call_args))

            run_ = _current_run()
            return await self._governance._tool(
                run_, ctx, self.tool, tool_input, agent_name_now(), run
            )

    return GovernedTool


def _input(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in kwargs.items() if not is_context(v)}
    if args:
        out["input"] = args[0] if len(args) == 1 else list(args)
    return out


def _merged(kwargs: Mapping[str, Any], call_args: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords a call runs with: `call_args` (judged, perhaps a reviewer's edit) plus
    the Context a tool asks for, which is never judged."""
    out = {k: v for k, v in kwargs.items() if is_context(v)}
    out.update({k: v for k, v in call_args.items() if k != "input"})
    return out


def _ctx_in(kwargs: Mapping[str, Any]) -> Any:
    for value in kwargs.values():
        if is_context(value):
            return value
    try:
        return step_context()
    except Exception:
        return None


def _sync_call(governance: Governance, tool: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
    """A sync call of a governed tool: judged (the Governor's approver answers asks: a sync
    call cannot pause a workflow), run, recorded."""
    from . import _translate as tr
    from ._governance import _current_run

    gate = governance.gate
    tool_input = _input(args, kwargs)
    run = _current_run()
    ids = {"run_id": run.run_id if run else None}
    task = run.task_id if run is not None and run.task_id else governance._own_task()
    if isinstance(task, Blocked):
        return refused(tool, tool_input, task.reason)
    step = tr.tool_step(gate, tool, tool_input, None, ids)
    decision = gate.decide(step, task)
    if isinstance(decision, (Blocked, Pending)):
        reason = decision.reason if isinstance(decision, Blocked) else "needs approval"
        return refused(tool, tool_input, reason)
    try:
        with claim(Claim("tool", None, tr.tool_name(tool), gate.governor, task)):
            output = tool.call(*args, **kwargs)
    except BaseException as exc:
        gate.fail(decision.handle, exc)
        raise
    gate.complete(decision.handle, tr.tool_output(output))
    return output


# -- approvals ---------------------------------------------------------------------------------


def input_required(pending: Pending, request: Mapping[str, Any]) -> Any:
    """The InputRequiredEvent a pending step pauses the workflow with: `prefix` says what
    needs approval and why; `charter` is the HumanInTheLoopMiddleware-shaped request and
    `charter_digest` binds the answer to this step and input."""
    return load().workflow.InputRequiredEvent(
        prefix=f"Charter asks: {pending.step.name}: {pending.request.reason}",
        charter=dict(request),
        charter_digest=pending.digest,
    )


async def wait_for_answer(ctx: Any, waiter: Any, digest: str) -> Any:
    if ctx is None:
        raise RuntimeError("no workflow context to wait in")
    return await ctx.wait_for_event(
        load().workflow.HumanResponseEvent,
        waiter_event=waiter,
        waiter_id=f"charter:{digest}",
        requirements={_DIGEST: digest},
        timeout=None,
    )


def answer_of(event: Any) -> Any:
    """A HumanResponseEvent as a decision for `read_answers`: Charter's own decision when
    `approve`/`deny` built it, else the response text ("approve", "yes", ...: approved;
    anything else is a rejection with the text as its reason)."""
    decision = event.get(_DECISION) if hasattr(event, "get") else None
    if isinstance(decision, Mapping):
        return dict(decision)
    text = str(getattr(event, "response", "") or "").strip()
    if text.lower() in _APPROVE_WORDS:
        return {"type": "approve"}
    return {"type": "reject", "message": text or "rejected"}


def _response(request: Any, decision: dict[str, Any], response: str) -> Any:
    digest = request.get(_DIGEST) if hasattr(request, "get") else None
    if not isinstance(digest, str):
        raise ValueError(
            "approve()/deny() answer the InputRequiredEvent Charter wrote to the stream "
            "(it carries charter_digest); pass that event"
        )
    return load().workflow.HumanResponseEvent(
        response=response, charter_digest=digest, charter_decision=decision
    )


def approve(request: Any, *, by: str = "human", message: str = "") -> Any:
    """The HumanResponseEvent approving the step `request` (Charter's InputRequiredEvent)
    asked about; send it with ``handler.ctx.send_event(...)``."""
    decision = {"type": "approve", "by": by, "message": message or "approved"}
    return _response(request, decision, "approve")


def deny(request: Any, *, by: str = "human", message: str = "") -> Any:
    """The HumanResponseEvent refusing the step `request` asked about."""
    decision = {"type": "reject", "by": by, "message": message or "rejected"}
    return _response(request, decision, "reject")


def edit(request: Any, args: Mapping[str, Any], *, by: str = "human", message: str = "") -> Any:
    """The HumanResponseEvent replacing the arguments of the tool call `request` asked about
    (the edited call is judged again before it runs)."""
    actions = (
        request.get("charter", {}).get("action_requests", []) if hasattr(request, "get") else []
    )
    name = actions[0]["name"] if actions else None
    decision = {
        "type": "edit",
        "by": by,
        "message": message,
        "edited_action": {"name": name, "args": dict(args)},
    }
    return _response(request, decision, "edit")
