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
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any, Literal, NotRequired

import charter
import charter.integration as ci
from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import ToolException
from langgraph.config import get_config
from langgraph.errors import GraphBubbleUp
from langgraph.types import interrupt

from ._errors import BlockedStepError
from ._translate import (
    FRAMEWORK,
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
_REVIEWER = "human (LangGraph interrupt)"


class CharterState(AgentState):  # type: ignore[type-arg]
    """The middleware's private state: the open task's id and how many runs the thread had.

    Kept in the graph state (not in the middleware) so a run paused by an approval and
    resumed later, even from another process with a persistent checkpointer, finds its task.
    """

    charter_task_id: NotRequired[Annotated[str | None, PrivateStateAttr]]
    charter_runs: NotRequired[Annotated[int, PrivateStateAttr]]


class CharterMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """Gate and record an agent's model and tool calls; open and close a task per run.

    - ``before_agent`` opens the task: the first run on a thread uses
      ``task_id_from(thread_id)``, later runs on the thread ``<that>:<n>``; without a
      thread id a fresh id. The run's new human messages (after the last AI message) are
      recorded as the user's messages (`Gate.user_messages`). ``after_agent`` closes it
      with task.end.
    - ``wrap_model_call`` / ``awrap_model_call`` gate and record model calls (token usage
      and stop reason recorded); ``wrap_tool_call`` / ``awrap_tool_call`` gate and record tool
      calls (kind, verb and properties from the templates; input = the arguments).
    - Block: with ``on_block="message"`` (default) a tool call returns an error ToolMessage
      with the one-line reason and never runs, and a model call ends the run with an
      AIMessage saying why; with ``on_block="raise"`` a `BlockedStepError` is raised and the
      task is closed with task.error.
    - Ask: with ``approval="interrupt"`` (default) the run pauses with LangGraph's
      `interrupt` (the agent needs a checkpointer) once per model turn, right after the
      model asked for its tool calls, carrying a HumanInTheLoopMiddleware-style
      ``{"action_requests": [...], "review_configs": [...]}`` that lists every call of the
      turn a policy asks about; it resumes with ``Command(resume={"decisions": [one per
      action, in order]})``, each ``{"type": "approve" | "edit" | "reject", ...}``. Each
      answer is recorded as a step.gate bound to the digest of the call's arguments; an
      edited call is judged again from scratch before it runs (and may ask again, then on
      its own). With ``approval="approver"`` the Governor's approver decides instead,
      without pausing.
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
        self._gate = ci.Gate(FRAMEWORK, governor=governor, approver=approver, **settings)
        self.governor: charter.Governor = self._gate.governor
        self.on_block = on_block
        self.approval = approval
        # Tool calls a reviewer replaced, by call id: the tool result tells the model so.
        self._edited: dict[str, ci.Step] = {}
        # The steps the turn's review built, by call id, with a copy of the call they were
        # built from: the call's own gating reuses one only while the call is unchanged.
        self._reviewed: dict[str, tuple[Any, ci.Step]] = {}

    # -- the task -----------------------------------------------------------------------------

    def _open(self, state: Any) -> dict[str, Any]:
        config = get_config()
        thread = (config.get("configurable") or {}).get("thread_id")
        runs = int(_get(state, _RUNS_KEY) or 0) + 1
        previous = _get(state, _TASK_KEY)
        if previous:
            self._gate.supersede(
                previous,
                "the agent run stopped before its end (an error, or a new run on "
                "the thread instead of a resume)",
            )
        task_id = self._gate.run_task_id(thread, runs) if thread is not None else None
        name = (config.get("metadata") or {}).get("lc_agent_name") or "agent"
        messages = _get(state, "messages") or []
        start_input = {"message": message_json(messages[-1])} if messages else None
        started = self._gate.start_task(task_id, str(name), start_input)
        if not isinstance(started, ci.Blocked):
            # The run's new human messages are the user's request: the task's user content.
            refused = self._gate.user_messages(started, ci.user_inputs(messages))
            if refused is not None:
                self._gate.end_task(started, refused.error(BlockedStepError))
                started = refused
        if isinstance(started, ci.Blocked):
            if self.on_block == "raise":
                raise started.error(BlockedStepError)
            return {
                "messages": [AIMessage(content=started.reason)],
                "jump_to": "end",
                _TASK_KEY: None,
                _RUNS_KEY: runs,
            }
        return {_TASK_KEY: started, _RUNS_KEY: runs}

    @hook_config(can_jump_to=["end"])
    def before_agent(self, state: CharterState, runtime: Any) -> dict[str, Any] | None:
        """Open this run's task: the n-th run on a thread is ``charter.integration.
        run_task_id(thread_id, n)``; without a thread id a fresh id."""
        return self._open(state)

    @hook_config(can_jump_to=["end"])
    async def abefore_agent(self, state: CharterState, runtime: Any) -> dict[str, Any] | None:
        """`before_agent` for async runs."""
        if self._gate.sync_durability:
            return await asyncio.to_thread(self._open, state)
        return self._open(state)

    def _close(self, state: Any) -> dict[str, Any]:
        task_id = _get(state, _TASK_KEY)
        if task_id:
            messages = _get(state, "messages") or []
            output = {"message": message_json(messages[-1])} if messages else None
            self._gate.resume_task(task_id)
            self._gate.end_task(task_id, output=output)
        return {_TASK_KEY: None}

    def after_agent(self, state: CharterState, runtime: Any) -> dict[str, Any] | None:
        """Close this run's task with task.end."""
        return self._close(state)

    async def aafter_agent(self, state: CharterState, runtime: Any) -> dict[str, Any] | None:
        """`after_agent` for async runs."""
        return await asyncio.to_thread(self._close, state)

    # -- one review per turn ------------------------------------------------------------------

    def _review_turn(self, state: Any) -> dict[str, Any] | None:
        """Pause once for every tool call of the model's turn that a policy asks about;
        record the answers, and put the reviewers' edits into the model's message."""
        task_id = _get(state, _TASK_KEY)
        messages = _get(state, "messages") or []
        last = messages[-1] if messages else None
        calls = getattr(last, "tool_calls", None)
        if self.approval != "interrupt" or not task_id or not calls or not self._gate.asks:
            return None
        self._gate.resume_task(task_id)
        reviewed: dict[str, tuple[Any, ci.Step]] = {}
        pending = []
        for c in calls:
            step = self._tool_step(c)
            call_id = _id(c)
            plain = _plain_copy(c)
            if call_id is not None and plain is not _NOT_PLAIN:
                reviewed[call_id] = (plain, step)
            found = self._gate.pending(step, task_id, call_id=call_id)
            if found is not None:
                pending.append(found)
        # Only this turn's calls: a call of an earlier turn that never ran is not kept.
        self._reviewed = reviewed
        if not pending:
            return None
        # The first time through this raises GraphInterrupt and the run pauses; when the
        # run resumes, this node runs again from its start and `interrupt` returns the
        # answers. Nothing was recorded before it, so nothing is recorded twice.
        raw = interrupt(ci.approval_request(pending))
        answers = ci.read_answers(raw, pending, default_by=_REVIEWER)
        edits: dict[str, ci.Step] = {}
        for item, answer in zip(pending, answers, strict=True):
            step = self._gate.answer(item, answer)
            if answer.kind == "edit" and item.call_id is not None:
                edits[item.call_id] = step
        if not edits:
            return None
        self._edited.update(edits)
        rewritten = [
            {**c, "name": edits[_id(c)].name, "args": dict(edits[_id(c)].input)}
            if _id(c) in edits
            else c
            for c in calls
        ]
        return {"messages": [last.model_copy(update={"tool_calls": rewritten})]}

    def after_model(self, state: CharterState, runtime: Any) -> dict[str, Any] | None:
        """Ask, in one interrupt, about every tool call of this turn a policy asks about."""
        return self._review_turn(state)

    async def aafter_model(self, state: CharterState, runtime: Any) -> dict[str, Any] | None:
        """`after_model` for async runs."""
        if self._gate.sync_durability:
            return await asyncio.to_thread(self._review_turn, state)
        return self._review_turn(state)

    # -- admission ----------------------------------------------------------------------------

    def _admit(self, step: ci.Step, task_id: str) -> ci.Allowed | ci.Blocked:
        """Decide `step`; a policy that still asks (a call the turn's review did not see,
        such as a reviewer's edit) pauses on its own."""
        pause = self.approval == "interrupt"
        decision = self._gate.decide(step, task_id, pause=pause)
        while isinstance(decision, ci.Pending):
            raw = interrupt(ci.approval_request([decision]))
            (answer,) = ci.read_answers(raw, [decision], default_by=_REVIEWER)
            step = self._gate.answer(decision, answer)
            decision = self._gate.decide(step, task_id, pause=True)
        return decision

    async def _aadmit(self, step: ci.Step, task_id: str) -> ci.Allowed | ci.Blocked:
        if self.approval == "approver":
            decision = await self._gate.adecide(step, task_id)
            assert not isinstance(decision, ci.Pending)  # the approver answers asks
            return decision
        if self._gate.sync_durability:
            return await asyncio.to_thread(self._admit, step, task_id)
        return self._admit(step, task_id)

    def _refused(self, task_id: str | None, decision: ci.Decision) -> charter.BlockedError:
        """The refusal to hand the agent; in raise mode the task is closed with it and it is
        raised instead."""
        assert isinstance(decision, ci.Blocked)  # `_admit` settles every ask
        blocked = decision.error(BlockedStepError)
        if self.on_block == "raise":
            if task_id:
                self._gate.end_task(task_id, error=blocked)
            raise blocked
        return blocked

    # -- model calls --------------------------------------------------------------------------

    def _model_step(self, request: Any) -> ci.Step:
        name, provider = model_identity(request.model)
        messages = list(request.messages)
        system = getattr(request, "system_message", None)
        if system is not None:
            messages.insert(0, system)
        return model_step(
            name,
            provider,
            messages,
            tools=tool_names(request.tools),
            params=getattr(request, "model_settings", None),
        )

    def _model_admission(self, request: Any) -> tuple[str | None, ci.Step | ci.Decision]:
        """(task id, the model call to decide, or the decision when it cannot be judged)."""
        task_id = _get(request.state, _TASK_KEY)
        if not task_id:
            return None, ci.Blocked(ci.Step("step.model", None, "model"), _NO_TASK, None)
        self._gate.resume_task(task_id)
        try:
            return task_id, self._model_step(request)
        except Exception as exc:
            return task_id, self._gate.undecided(ci.Step("step.model", None, "model"), exc)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Gate the model call; record its output, token usage and stop reason."""
        task_id, got = self._model_admission(request)
        decision = self._admit(got, task_id) if isinstance(got, ci.Step) and task_id else got
        if not isinstance(decision, ci.Allowed) or not task_id:
            return _model_refusal(self._refused(task_id, decision))
        handle = decision.handle
        with ci.claim(ci.Claim("model", None, None, self.governor, task_id)):
            try:
                response = handler(request)
            except GraphBubbleUp:
                self._gate.abandon(handle)
                raise
            except BaseException as exc:
                self._gate.fail(handle, exc)
                raise
        output, props = _model_output(response)
        self._gate.complete(handle, output, properties=props)
        return response

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """`wrap_model_call` for async runs."""
        task_id, got = self._model_admission(request)
        decision = await self._aadmit(got, task_id) if isinstance(got, ci.Step) and task_id else got
        if not isinstance(decision, ci.Allowed) or not task_id:
            return _model_refusal(self._refused(task_id, decision))
        handle = decision.handle
        with ci.claim(ci.Claim("model", None, None, self.governor, task_id)):
            try:
                response = await handler(request)
            except GraphBubbleUp:
                await self._gate.aabandon(handle)
                raise
            except BaseException as exc:
                await self._gate.afail(handle, exc)
                raise
        output, props = _model_output(response)
        await self._gate.acomplete(handle, output, properties=props)
        return response

    # -- tool calls ---------------------------------------------------------------------------

    def _tool_step(self, call: Mapping[str, Any]) -> ci.Step:
        args = call.get("args")
        return self._gate.tool_step(
            str(call.get("name")),
            args if isinstance(args, Mapping) else {"input": args},
            call_id=_id(call),
        )

    def _reviewed_step(self, call: Mapping[str, Any]) -> ci.Step | None:
        """The step the turn's review built for `call` when the call is still exactly the
        one it was built from (same id, name and arguments, plain JSON values compared by
        value), else None: anything a later middleware changed is mapped afresh."""
        call_id = _id(call)
        found = self._reviewed.pop(call_id, None) if call_id is not None else None
        if found is None:
            return None
        plain, step = found
        return step if plain == _plain_copy(call) else None

    def _tool_admission(self, request: Any) -> tuple[str | None, ci.Step | ci.Decision]:
        """(task id, the tool call to decide, or the decision when it cannot be judged)."""
        task_id = _get(request.state, _TASK_KEY)
        name = str(request.tool_call.get("name") or "tool")
        if not task_id:
            return None, ci.Blocked(ci.Step("step.unknown", None, name), _NO_TASK, None)
        self._gate.resume_task(task_id)
        try:
            return task_id, self._reviewed_step(request.tool_call) or self._tool_step(
                request.tool_call
            )
        except Exception as exc:
            return task_id, self._gate.undecided(ci.Step("step.unknown", None, name), exc)

    def _unknown_edit(self, request: Any) -> str | None:
        """Why a reviewer's edit cannot run (it names a tool the agent lacks), or None."""
        call_id = _id(request.tool_call)
        if request.tool is not None or call_id not in self._edited:
            return None
        name = self._edited[call_id].name
        return f"not run: the reviewer's edit names {name!r}, not an agent tool"

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Gate the tool call (asking if a policy asks); record its result."""
        task_id, got = self._tool_admission(request)
        decision = self._admit(got, task_id) if isinstance(got, ci.Step) and task_id else got
        if not isinstance(decision, ci.Allowed) or not task_id:
            return _tool_refusal(request, self._refused(task_id, decision))
        handle = decision.handle
        problem = self._unknown_edit(request)
        if problem is not None:
            self._gate.fail(handle, LookupError(problem))
            return _tool_refusal(request, BlockedStepError(problem))
        call_id = _id(request.tool_call)
        name = str(request.tool_call.get("name"))
        with ci.claim(ci.Claim("tool", call_id, name, self.governor, task_id)):
            try:
                result = handler(request)
            except GraphBubbleUp:
                self._gate.abandon(handle)
                raise
            except BaseException as exc:
                self._gate.fail(handle, exc)
                raise
        self._record_tool(handle, result)
        return self._noted(result, call_id)

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """`wrap_tool_call` for async runs."""
        task_id, got = self._tool_admission(request)
        decision = await self._aadmit(got, task_id) if isinstance(got, ci.Step) and task_id else got
        if not isinstance(decision, ci.Allowed) or not task_id:
            return _tool_refusal(request, self._refused(task_id, decision))
        handle = decision.handle
        problem = self._unknown_edit(request)
        if problem is not None:
            await self._gate.afail(handle, LookupError(problem))
            return _tool_refusal(request, BlockedStepError(problem))
        call_id = _id(request.tool_call)
        name = str(request.tool_call.get("name"))
        with ci.claim(ci.Claim("tool", call_id, name, self.governor, task_id)):
            try:
                result = await handler(request)
            except GraphBubbleUp:
                await self._gate.aabandon(handle)
                raise
            except BaseException as exc:
                await self._gate.afail(handle, exc)
                raise
        if self._gate.sync_durability:
            await asyncio.to_thread(self._record_tool, handle, result)
        else:
            self._record_tool(handle, result)
        return self._noted(result, call_id)

    def _record_tool(self, handle: charter.StepHandle | None, result: Any) -> None:
        try:
            output, error = tool_outcome(result)
        except Exception:
            output, error = {}, None
        if error is not None:
            self._gate.fail(handle, ToolException(error))
        else:
            self._gate.complete(handle, output)

    def _noted(self, result: Any, call_id: str | None) -> Any:
        """Tell the model a reviewer replaced its call, so it does not simply retry it."""
        step = self._edited.pop(call_id, None) if call_id else None
        if step is None or not isinstance(result, ToolMessage):
            return result
        note = (
            f"Note: a human reviewer replaced this tool call before it ran; executed instead: "
            f"{step.name} with arguments {json.dumps(jsonish(step.input))}."
        )
        content = result.content
        if isinstance(content, str):
            return result.model_copy(update={"content": f"{note}\n{content}" if content else note})
        return result


_NOT_PLAIN: Any = object()
_SCALARS = (str, int, float, bool, type(None))


def _plain_copy(value: Any) -> Any:
    """A deep copy of `value` when it is made of dicts, lists and JSON scalars only (so
    comparing it later by value tells whether anything changed, in place or not), else
    `_NOT_PLAIN`."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        out = {}
        for k, v in value.items():
            got = _plain_copy(v)
            if got is _NOT_PLAIN or type(k) is not str:
                return _NOT_PLAIN
            out[k] = got
        return out
    if kind is list:
        items = [_plain_copy(v) for v in value]
        return _NOT_PLAIN if any(v is _NOT_PLAIN for v in items) else items
    return _NOT_PLAIN


def _get(state: Any, key: str) -> Any:
    # LangGraph hands the state as a plain dict: asking the Mapping ABC costs six times more.
    if type(state) is dict or isinstance(state, Mapping):
        return state.get(key)
    return getattr(state, key, None)


def _id(call: Mapping[str, Any]) -> str | None:
    return str(call.get("id") or "") or None


def _model_refusal(blocked: charter.BlockedError) -> AIMessage:
    # No tool calls: the agent loop ends here, with the reason as the last message.
    return AIMessage(content=blocked.reason, response_metadata={"charter": "blocked"})


def _tool_refusal(request: Any, blocked: charter.BlockedError) -> ToolMessage:
    call = request.tool_call
    return ToolMessage(
        content=blocked.reason,
        tool_call_id=str(call.get("id") or ""),
        name=str(call.get("name") or ""),
        status="error",
    )


def _model_output(response: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    inner = getattr(response, "model_response", None)
    if inner is not None:
        response = inner
    result = getattr(response, "result", None)
    messages = list(result) if isinstance(result, list) else [response]
    try:
        return model_outcome(messages)
    except Exception:
        return {"messages": [jsonish(m) for m in messages]}, None
