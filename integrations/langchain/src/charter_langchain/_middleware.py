"""`CharterMiddleware`: govern a LangChain v1 agent (`create_agent`) from inside its loop.

The middleware sees every model call and every tool call with the real request in hand, so
it can refuse gracefully: a blocked tool call becomes an error `ToolMessage` the model reads
(the run goes on), a blocked model call ends the run with an `AIMessage` saying why. A
policy that asks pauses the run with LangGraph's `interrupt`, in the request/response shape
of LangChain's `HumanInTheLoopMiddleware`, so existing approval UIs can answer it.

Place it last in ``middleware=[...]``: the last middleware is the innermost wrapper, so it
judges the call exactly as it will run, after any other middleware rewrote it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NotRequired

import charter
from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import ToolException
from langgraph.config import get_config
from langgraph.errors import GraphBubbleUp
from langgraph.types import interrupt

from ._approval import Answer, approval_request, read_answer
from ._claims import Claim, claimed
from ._errors import BlockedStepError
from ._gate import Gate, RunNotFinishedError, _cannot_judge
from ._translate import (
    StepSpec,
    jsonish,
    message_json,
    model_identity,
    model_outcome,
    model_step,
    tool_names,
    tool_outcome,
)

_TASK_KEY = "charter_task_id"
_RUNS_KEY = "charter_runs"
_NO_TASK = (
    "blocked: no Charter task is open for this agent run (CharterMiddleware.before_agent did "
    "not run, or the task was closed); governance fails closed"
)


class CharterState(AgentState):  # type: ignore[type-arg]
    """The middleware's private state: the open task's id and how many runs the thread had.

    Kept in the graph state (not in the middleware) so a run paused by an approval and
    resumed later, even from another process with a persistent checkpointer, finds its task.
    """

    charter_task_id: NotRequired[Annotated[str | None, PrivateStateAttr]]
    charter_runs: NotRequired[Annotated[int, PrivateStateAttr]]


@dataclass(slots=True)
class _Admitted:
    """A call allowed to run: its handle, and its spec when a reviewer edited it."""

    handle: charter.StepHandle
    spec: StepSpec
    edited: bool


class CharterMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """Gate and record an agent's model and tool calls; open and close a task per run.

    - ``before_agent`` opens the task: the first run on a thread uses
      ``task_id_from(thread_id)``, later runs on the thread ``<that>:<n>``; without a
      thread id a fresh id. ``after_agent`` closes it with task.end.
    - ``wrap_model_call`` / ``awrap_model_call`` gate and record model calls (token usage
      and stop reason recorded); ``wrap_tool_call`` / ``awrap_tool_call`` gate and record tool
      calls (kind, verb and properties from the templates; input = the arguments).
    - Block: with ``on_block="message"`` (default) a tool call returns an error ToolMessage
      with the one-line reason and never runs, and a model call ends the run with an
      AIMessage saying why; with ``on_block="raise"`` a `BlockedStepError` is raised and the
      task is closed with task.error.
    - Ask: with ``approval="interrupt"`` (default) the run pauses with LangGraph's
      `interrupt` (the agent needs a checkpointer) carrying a HumanInTheLoopMiddleware-style
      ``{"action_requests": [...], "review_configs": [...]}`` and resumes with
      ``Command(resume={"decisions": [{"type": "approve" | "edit" | "reject", ...}]})``. The
      answer is recorded as a step.gate bound to the digest of the call's arguments; an
      edited call is judged again from scratch before it runs (and may ask again). With
      ``approval="approver"`` the Governor's approver decides instead, without pausing.
    - Warn: the call runs; the warning is recorded with it.

    Build it from a `governor`, or from `charter.Governor` setting keywords plus an optional
    `approver`; refuses both at once, an unknown `on_block` or `approval`, and whatever the
    Governor refuses.
    """

    state_schema = CharterState

    def __init__(
        self,
        governor: charter.Governor | None = None,
        *,
        on_block: Literal["message", "raise"] = "message",
        approval: Literal["interrupt", "approver"] = "interrupt",
        approver: Any = None,
        **settings: Any,
    ) -> None:
        if on_block not in ("message", "raise"):
            raise ValueError(f"on_block={on_block!r}: use 'message' or 'raise'")
        if approval not in ("interrupt", "approver"):
            raise ValueError(f"approval={approval!r}: use 'interrupt' or 'approver'")
        super().__init__()
        self._gate = Gate(governor, settings, approver)
        self.governor: charter.Governor = self._gate.governor
        self.on_block = on_block
        self.approval = approval
        self._tools: dict[str, Any] = {}

    # -- the task -----------------------------------------------------------------------------

    def _open(self, state: Any) -> dict[str, Any]:
        config = get_config()
        configurable = config.get("configurable") or {}
        thread = configurable.get("thread_id")
        runs = int(_get(state, _RUNS_KEY) or 0) + 1
        previous = _get(state, _TASK_KEY)
        if previous and self._gate.task_state(previous) == "open":
            self._gate.end_task(
                previous,
                error=RunNotFinishedError(
                    "the agent run stopped before its end (an error, or a new run on the "
                    "thread instead of a resume)"
                ),
            )
        if thread is None:
            task_id: str | None = None
        else:
            base = charter.task_id_from(str(thread))
            task_id = base if runs == 1 else charter.task_id_from(f"{base}:{runs}")
            if self._gate.task_state(task_id) != "unknown":
                # The id is taken (a thread reused without a checkpointer): stay unique.
                task_id = charter.task_id_from(f"{base}:{uuid.uuid4().hex[:12]}")
        name = (config.get("metadata") or {}).get("lc_agent_name") or "agent"
        messages = _get(state, "messages") or []
        start_input = {"message": message_json(messages[-1])} if messages else None
        try:
            tid = self._gate.start_task(task_id, str(name), start_input)
        except BlockedStepError as exc:
            if self.on_block == "raise":
                raise
            return {
                "messages": [AIMessage(content=exc.reason)],
                "jump_to": "end",
                _TASK_KEY: None,
                _RUNS_KEY: runs,
            }
        return {_TASK_KEY: tid, _RUNS_KEY: runs}

    @hook_config(can_jump_to=["end"])
    def before_agent(self, state: CharterState, runtime: Any) -> dict[str, Any] | None:
        """Open this run's task (see the class docstring for its id)."""
        return self._open(state)

    @hook_config(can_jump_to=["end"])
    async def abefore_agent(self, state: CharterState, runtime: Any) -> dict[str, Any] | None:
        """`before_agent` for async runs."""
        if self._gate._sync_durability():
            return await asyncio.to_thread(self._open, state)
        return self._open(state)

    def _output(self, state: Any) -> Any:
        messages = _get(state, "messages") or []
        return {"message": message_json(messages[-1])} if messages else None

    def after_agent(self, state: CharterState, runtime: Any) -> dict[str, Any] | None:
        """Close this run's task with task.end."""
        task_id = _get(state, _TASK_KEY)
        if task_id:
            self._gate.restore(task_id)
            self._gate.end_task(task_id, output=self._output(state))
        return {_TASK_KEY: None}

    async def aafter_agent(self, state: CharterState, runtime: Any) -> dict[str, Any] | None:
        """`after_agent` for async runs."""
        task_id = _get(state, _TASK_KEY)
        if task_id:
            self._gate.restore(task_id)
            await self._gate.aend_task(task_id, output=self._output(state))
        return {_TASK_KEY: None}

    # -- admission: gate, and ask through interrupt -------------------------------------------

    def _ask(self, spec: StepSpec, task_id: str, tool_call_id: str | None) -> Answer | None:
        """None when no approval is needed; else the reviewer's answer (pauses the run)."""
        if not self._gate.may_ask(spec):
            return None
        result = self._gate.preview(spec, task_id)
        if result.decision is not charter.Decision.ASK:
            return None
        request = approval_request(spec, result, tool_call_id)
        # The first time through this raises GraphInterrupt and the run pauses; when the
        # run resumes, the node runs again from its start and this returns the answer.
        return read_answer(interrupt(request), spec, editable=tool_call_id is not None)

    def _review(
        self, spec: StepSpec, task_id: str, call: Mapping[str, Any] | None
    ) -> tuple[StepSpec, list[tuple[StepSpec, Answer]], Answer | None]:
        """Ask until the call needs no (more) approval: (the call to gate, the calls a
        reviewer replaced with their answers, the answer on the final call)."""
        replaced: list[tuple[StepSpec, Answer]] = []
        call_id = str(call.get("id") or "") if call is not None else None
        while True:
            answer = self._ask(spec, task_id, call_id)
            if answer is None or answer.kind != "edit":
                return spec, replaced, answer
            replaced.append((spec, answer))
            assert answer.edited is not None
            # The edit is a new call: judged from scratch (another tool may need approval).
            name, args = answer.edited
            spec = self._gate.templates.tool(name, args, call_id)

    def _settle_answers(
        self,
        task_id: str,
        replaced: list[tuple[StepSpec, Answer]],
        final: StepSpec,
        answer: Answer | None,
    ) -> None:
        # Recorded only once every answer is in: a node paused by a later interrupt runs
        # again from its start on resume, and must not record the earlier answers twice.
        for old, ans in replaced:
            self._gate.record_answer(old, task_id, False, ans.by, ans.why or "edited")
            try:
                handle = self._gate.begin(old, task_id)
            except BlockedStepError:
                continue  # recorded as blocked: the reviewer replaced it, it never runs
            self._gate.abandon(handle)
        if answer is not None:
            self._gate.record_answer(
                final, task_id, answer.kind == "approve", answer.by, answer.why
            )

    def _admit(self, spec: StepSpec, task_id: str, call: Mapping[str, Any] | None) -> _Admitted:
        """Gate `spec` (asking through interrupt if a policy asks); raises BlockedStepError."""
        if self.approval == "approver":
            return _Admitted(self._gate.begin(spec, task_id), spec, False)
        final, replaced, answer = self._review(spec, task_id, call)
        self._settle_answers(task_id, replaced, final, answer)
        return _Admitted(self._gate.begin(final, task_id), final, bool(replaced))

    async def _aadmit(
        self, spec: StepSpec, task_id: str, call: Mapping[str, Any] | None
    ) -> _Admitted:
        if self.approval == "approver":
            return _Admitted(await self._gate.abegin(spec, task_id), spec, False)
        final, replaced, answer = self._review(spec, task_id, call)
        if self._gate._sync_durability():
            await asyncio.to_thread(self._settle_answers, task_id, replaced, final, answer)
        else:
            self._settle_answers(task_id, replaced, final, answer)
        return _Admitted(await self._gate.abegin(final, task_id), final, bool(replaced))

    def _refused(self, task_id: str | None, blocked: BlockedStepError) -> None:
        """In raise mode: close the task with the block and raise it."""
        if self.on_block == "raise":
            if task_id:
                self._gate.end_task(task_id, error=blocked)
            raise blocked

    async def _arefused(self, task_id: str | None, blocked: BlockedStepError) -> None:
        if self.on_block == "raise":
            if task_id:
                await self._gate.aend_task(task_id, error=blocked)
            raise blocked

    # -- model calls --------------------------------------------------------------------------

    def _model_spec(self, request: Any) -> StepSpec:
        for tool in request.tools or ():
            if isinstance(getattr(tool, "name", None), str):
                self._tools[tool.name] = tool
        name, provider = model_identity(request.model)
        messages = list(request.messages)
        system = getattr(request, "system_message", None)
        if system is not None:
            messages.insert(0, system)
        return model_step(name, provider, messages, tools=tool_names(request.tools))

    def _model_refusal(self, blocked: BlockedStepError) -> AIMessage:
        # No tool calls: the agent loop ends here, with the reason as the last message.
        return AIMessage(content=blocked.reason, response_metadata={"charter": "blocked"})

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Gate the model call; record its output, token usage and stop reason."""
        task_id = _get(request.state, _TASK_KEY)
        if task_id:
            self._gate.restore(task_id)
        try:
            if not task_id:
                raise BlockedStepError(_NO_TASK, kind="step.model")
            spec = self._model_spec(request)
            admitted = self._admit(spec, task_id, None)
        except GraphBubbleUp:
            raise
        except BlockedStepError as blocked:
            self._refused(task_id, blocked)
            return self._model_refusal(blocked)
        except Exception as exc:
            blocked = _cannot_judge(StepSpec("step.model", None, "model", {}), exc)
            self._refused(task_id, blocked)
            return self._model_refusal(blocked)
        handle = admitted.handle
        with claimed(Claim("model", None, None, self.governor, task_id)):
            try:
                response = handler(request)
            except GraphBubbleUp:
                self._gate.abandon(handle)
                raise
            except BaseException as exc:
                self._gate.fail(handle, exc)
                raise
        output, model = _model_output(response)
        self._gate.complete(handle, output, model)
        return response

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """`wrap_model_call` for async runs."""
        task_id = _get(request.state, _TASK_KEY)
        if task_id:
            self._gate.restore(task_id)
        try:
            if not task_id:
                raise BlockedStepError(_NO_TASK, kind="step.model")
            spec = self._model_spec(request)
            admitted = await self._aadmit(spec, task_id, None)
        except GraphBubbleUp:
            raise
        except BlockedStepError as blocked:
            await self._arefused(task_id, blocked)
            return self._model_refusal(blocked)
        except Exception as exc:
            blocked = _cannot_judge(StepSpec("step.model", None, "model", {}), exc)
            await self._arefused(task_id, blocked)
            return self._model_refusal(blocked)
        handle = admitted.handle
        with claimed(Claim("model", None, None, self.governor, task_id)):
            try:
                response = await handler(request)
            except GraphBubbleUp:
                self._gate.abandon(handle)
                raise
            except BaseException as exc:
                await self._gate.afail(handle, exc)
                raise
        output, model = _model_output(response)
        await self._gate.acomplete(handle, output, model)
        return response

    # -- tool calls ---------------------------------------------------------------------------

    def _tool_spec(self, request: Any) -> StepSpec:
        call = request.tool_call
        args = call.get("args")
        return self._gate.templates.tool(
            str(call.get("name")),
            args if isinstance(args, Mapping) else {"input": args},
            str(call.get("id") or "") or None,
        )

    def _tool_refusal(self, request: Any, blocked: BlockedStepError) -> ToolMessage:
        call = request.tool_call
        return ToolMessage(
            content=blocked.reason,
            tool_call_id=str(call.get("id") or ""),
            name=str(call.get("name") or ""),
            status="error",
        )

    def _to_run(self, request: Any, admitted: _Admitted) -> Any:
        if not admitted.edited:
            return request
        spec = admitted.spec
        call = {**request.tool_call, "name": spec.name, "args": dict(spec.input)}
        tool = request.tool
        if getattr(tool, "name", None) != spec.name:
            # Newer tool nodes list their tools on the runtime; older ones do not, so the
            # tools seen on model requests are the fallback.
            available = [*(getattr(request.runtime, "tools", None) or ()), *self._tools.values()]
            tool = next((t for t in available if getattr(t, "name", None) == spec.name), None)
            if tool is None:
                raise LookupError(f"the reviewer's edit names {spec.name!r}, not an agent tool")
        return request.override(tool_call=call, tool=tool)

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Gate the tool call (asking if a policy asks); record its result."""
        task_id = _get(request.state, _TASK_KEY)
        if task_id:
            self._gate.restore(task_id)
        try:
            if not task_id:
                raise BlockedStepError(_NO_TASK, kind="step.unknown")
            spec = self._tool_spec(request)
            admitted = self._admit(spec, task_id, request.tool_call)
        except GraphBubbleUp:
            raise
        except BlockedStepError as blocked:
            self._refused(task_id, blocked)
            return self._tool_refusal(request, blocked)
        except Exception as exc:
            blocked = _cannot_judge(_fallback_spec(request), exc)
            self._refused(task_id, blocked)
            return self._tool_refusal(request, blocked)
        handle = admitted.handle
        try:
            to_run = self._to_run(request, admitted)
        except LookupError as exc:
            self._gate.fail(handle, exc)
            return self._tool_refusal(request, BlockedStepError(f"not run: {exc}"))
        call_id = str(request.tool_call.get("id") or "") or None
        with claimed(Claim("tool", call_id, admitted.spec.name, self.governor, task_id)):
            try:
                result = handler(to_run)
            except GraphBubbleUp:
                self._gate.abandon(handle)
                raise
            except BaseException as exc:
                self._gate.fail(handle, exc)
                raise
        self._record_tool(handle, result)
        return _noted(result, admitted)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """`wrap_tool_call` for async runs."""
        task_id = _get(request.state, _TASK_KEY)
        if task_id:
            self._gate.restore(task_id)
        try:
            if not task_id:
                raise BlockedStepError(_NO_TASK, kind="step.unknown")
            spec = self._tool_spec(request)
            admitted = await self._aadmit(spec, task_id, request.tool_call)
        except GraphBubbleUp:
            raise
        except BlockedStepError as blocked:
            await self._arefused(task_id, blocked)
            return self._tool_refusal(request, blocked)
        except Exception as exc:
            blocked = _cannot_judge(_fallback_spec(request), exc)
            await self._arefused(task_id, blocked)
            return self._tool_refusal(request, blocked)
        handle = admitted.handle
        try:
            to_run = self._to_run(request, admitted)
        except LookupError as exc:
            await self._gate.afail(handle, exc)
            return self._tool_refusal(request, BlockedStepError(f"not run: {exc}"))
        call_id = str(request.tool_call.get("id") or "") or None
        with claimed(Claim("tool", call_id, admitted.spec.name, self.governor, task_id)):
            try:
                result = await handler(to_run)
            except GraphBubbleUp:
                await asyncio.to_thread(self._gate.abandon, handle)
                raise
            except BaseException as exc:
                await self._gate.afail(handle, exc)
                raise
        if self._gate._sync_durability():
            await asyncio.to_thread(self._record_tool, handle, result)
        else:
            self._record_tool(handle, result)
        return _noted(result, admitted)

    def _record_tool(self, handle: charter.StepHandle, result: Any) -> None:
        try:
            output, error = tool_outcome(result)
        except Exception:
            output, error = {}, None
        if error is not None:
            self._gate.fail(handle, ToolException(error))
        else:
            self._gate.complete(handle, output)


def _get(state: Any, key: str) -> Any:
    if isinstance(state, Mapping):
        return state.get(key)
    return getattr(state, key, None)


def _fallback_spec(request: Any) -> StepSpec:
    try:
        name = str(request.tool_call.get("name") or "tool")
    except Exception:
        name = "tool"
    return StepSpec("step.unknown", None, name, {})


def _model_output(response: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    inner = getattr(response, "model_response", None)
    if inner is not None:
        response = inner
    result = getattr(response, "result", None)
    messages = list(result) if isinstance(result, list) else [response]
    try:
        return model_outcome(messages)
    except Exception:
        return {"messages": [jsonish(m) for m in messages]}, {}


def _noted(result: Any, admitted: _Admitted) -> Any:
    """Tell the model a reviewer replaced its call, so it does not simply retry it."""
    if not admitted.edited or not isinstance(result, ToolMessage):
        return result
    spec = admitted.spec
    note = (
        f"Note: a human reviewer replaced this tool call before it ran; executed instead: "
        f"{spec.name} with arguments {json.dumps(jsonish(spec.input))}."
    )
    content = result.content
    if isinstance(content, str):
        return result.model_copy(update={"content": f"{note}\n{content}" if content else note})
    return result
