"""The provider-neutral lifecycle of a governed model client (OpenAI, Anthropic, Ollama, ...).

A raw-client integration is a handful of mapping functions (request -> `Step`, response or
stream chunks -> `ModelReply`, refusal -> the SDK's own error, `ToolResult` -> the provider's
tool-result message) around the one lifecycle kept here:

1. `ModelClient.begin` (or `abegin`) takes the ``step.model`` intent built with `model_step`
   and finds its task: the claim another integration holds on the same Governor (a graph
   node, a governed tool), else the Governor's current task (``with gov.task():``), else a
   task of the client's own, started on first use. A model call that another integration
   claimed (LangChain's middleware) is left to it: `begin` returns None. The request's
   ``user`` messages the task has not recorded yet are recorded first (`Gate.user_messages`),
   unless the call runs inside another integration's step: the user's words are the task's
   ``user`` content and what a planner reads; assistant and tool messages never are.
2. The Gate judges the intent. `Blocked` comes back to the mapping, which raises the SDK's
   refusal before anything is sent: a blocked call never reaches the provider.
3. The mapping calls the provider, then settles the `ModelCall` once: `finish` with the reply
   (outcome properties from `model_outcome` plus ``latency_ms`` and the ``response_model``
   the provider reported; output: the text and the requested tool calls, kept as the
   payload mode says), `failed` with the SDK's error, or `abandoned`. Retries inside the SDK
   are one call. Streams are observed by `stream` / `astream` and finalised once: at their
   end, when closed, or when collected unread (`watch`).
4. `finish` judges each tool call the reply asks for, without recording (`ToolVerdict`:
   what `decide` would say now); `run_tools` then runs requested calls through the Gate:
   allowed ones run (under a tool claim, so nested model calls land in the same task),
   blocked ones come back as refusals for the model to read, asks go to the approver.

Observability faults (a mapping function that raised on a chunk) are reported and counted,
never raised into the agent; the decision path fails closed through the Gate.
"""

from __future__ import annotations

import inspect
import json
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from charter._engine.engine import Decision as EngineDecision
from charter._model.capture import capture
from charter._runtime.gate import Allowed, Blocked, Claim, Gate, claim, current_claim
from charter._runtime.governor import StepHandle
from charter._runtime.internal import report_internal_error
from charter._runtime.steps import Step, model_outcome, user_contents

__all__ = [
    "ModelCall",
    "ModelClient",
    "ModelReply",
    "ToolCall",
    "ToolResult",
    "ToolVerdict",
    "remember_verdicts",
    "tool_call",
    "tool_verdicts",
]

C = TypeVar("C")
R = TypeVar("R")
T = TypeVar("T")

_ERROR_MAX = 500


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call a model asked for: `name`, `args` as a mapping, the provider's `id`
    (None where the provider gives none, as Ollama). `problem` says why the arguments could
    not be read (invalid JSON, not an object); such a call is never run."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    problem: str | None = None


def tool_call(name: Any, arguments: Any, id: Any = None) -> ToolCall:
    """A `ToolCall` from a provider's raw fields: `arguments` is a mapping or a JSON string
    (Chat Completions and Responses send strings; an empty string means no arguments)."""
    call_id = str(id) if id is not None else None
    if isinstance(arguments, Mapping):
        return ToolCall(str(name), {str(k): v for k, v in arguments.items()}, call_id)
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return ToolCall(str(name), {}, call_id)
    try:
        parsed = json.loads(arguments) if isinstance(arguments, (str, bytes)) else arguments
    except ValueError as exc:
        return ToolCall(str(name), {}, call_id, f"the arguments are not valid JSON ({exc})")
    if not isinstance(parsed, Mapping):
        return ToolCall(
            str(name), {}, call_id, f"the arguments are not an object: {type(parsed).__name__}"
        )
    return ToolCall(str(name), {str(k): v for k, v in parsed.items()}, call_id)


@dataclass(frozen=True, slots=True)
class ModelReply:
    """What a provider answered, mapped: the `model` it reports, the `text`, token `usage`
    (from `usage()`), the `stop_reason` in the provider's own words, the `tool_calls` it asks
    for, and `complete` False for a stream closed before its end."""

    model: str | None = None
    text: str | None = None
    usage: Mapping[str, int] | None = None
    stop_reason: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    complete: bool = True


@dataclass(frozen=True, slots=True)
class ToolVerdict:
    """The decision a requested tool call would get if it ran now: `decision` is allow,
    warn, ask or block, `reason` one line, `step` the step it was judged as. Nothing is
    recorded for a verdict: the call is judged again, for real, when it runs."""

    call: ToolCall
    decision: str
    reason: str
    step: Step | None = None

    @property
    def allowed(self) -> bool:
        return self.decision in ("allow", "warn")


@dataclass(frozen=True, slots=True)
class ToolResult:
    """One requested tool call after `run_tools`: `output` when it ran and returned,
    `error` when it ran and raised, `refusal` when it did not run (blocked by a policy or a
    person, Charter could not decide, unknown tool, unreadable arguments)."""

    call: ToolCall
    output: Any = None
    error: BaseException | None = None
    refusal: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.refusal is None

    @property
    def content(self) -> str:
        """The text the model reads: the output (strings as they are, anything else as
        JSON), the refusal, or the error's type and message."""
        if self.refusal is not None:
            return self.refusal
        if self.error is not None:
            text = " ".join(str(self.error).split())[:_ERROR_MAX]
            return f"the tool raised {type(self.error).__name__}: {text}"
        if isinstance(self.output, str):
            return self.output
        return json.dumps(capture(self.output), ensure_ascii=False, sort_keys=True)


# -- verdicts travel with the response object ---------------------------------------------

_verdicts: dict[int, tuple[ToolVerdict, ...]] = {}
_verdicts_lock = threading.Lock()


def _forget(key: int) -> None:
    with _verdicts_lock:
        _verdicts.pop(key, None)


def remember_verdicts(obj: Any, verdicts: Sequence[ToolVerdict]) -> None:
    """Keep `verdicts` with the SDK object `obj` (a response, a stream) for as long as it
    lives, for `tool_verdicts`. Objects that cannot be weakly referenced keep none."""
    key = id(obj)
    try:
        weakref.finalize(obj, _forget, key)
    except TypeError:
        return
    with _verdicts_lock:
        _verdicts[key] = tuple(verdicts)


def tool_verdicts(obj: Any) -> tuple[ToolVerdict, ...]:
    """The verdicts on the tool calls a governed response (or a finished stream) asked for,
    in the order the provider listed them; empty when it asked for none."""
    with _verdicts_lock:
        return _verdicts.get(id(obj), ())


# -- the lifecycle ------------------------------------------------------------------------


class ModelClient:
    """One governed client: the Gate it decides with, its provider's name, and its task.

    `task_name` names the task the client starts for itself when its calls happen outside
    any task and any claim. Thread-safe.
    """

    def __init__(self, gate: Gate, provider: str, *, task_name: str | None = None) -> None:
        self.gate = gate
        self.provider = provider
        self.task_name = task_name or f"{provider} client"
        self._own_task: str | None = None
        self._lock = threading.Lock()

    # -- tasks ----------------------------------------------------------------------------

    def task_for(self, held: Claim | None = None) -> str | Blocked:
        """The task a model call or a tool call made now belongs to (see the module
        docstring), starting the client's own task when needed."""
        governor = self.gate.governor
        held = held if held is not None else current_claim()
        if held is not None and held.governor is governor:
            return held.task_id
        current = governor.current_task()
        if current is not None:
            return current
        with self._lock:
            if self._own_task is not None and self.gate.task_state(self._own_task) == "open":
                return self._own_task
            started = self.gate.start_task(None, name=self.task_name)
            if isinstance(started, Blocked):
                return started
            self._own_task = started
            return started

    def close(self) -> None:
        """End the task the client started for itself, if it is still open."""
        with self._lock:
            task, self._own_task = self._own_task, None
        if task is not None and self.gate.task_state(task) == "open":
            self.gate.end_task(task)

    # -- model calls ----------------------------------------------------------------------

    def _claimed(self) -> tuple[bool, Claim | None]:
        held = current_claim()
        if held is not None and held.governor is self.gate.governor and held.take("model", None):
            return True, held
        return False, held

    def begin(self, step: Step) -> ModelCall | Blocked | None:
        """Judge the model call `step` before it is sent: a `ModelCall` to settle once, a
        `Blocked` to raise as the SDK's refusal (recorded when a policy refused), or None
        when another integration on the same Governor claimed this model call (send it
        unchanged; that integration records it). Never raises."""
        taken, held = self._claimed()
        if taken:
            return None
        task = self.task_for(held)
        if isinstance(task, Blocked):
            return task
        refused = self._user_said(step, task, held)
        if refused is not None:
            return refused
        decision = self.gate.decide(step, task)
        return self._call(step, task, decision)

    async def abegin(self, step: Step) -> ModelCall | Blocked | None:
        """`begin` for async code (async approvers are awaited)."""
        taken, held = self._claimed()
        if taken:
            return None
        task = self.task_for(held)
        if isinstance(task, Blocked):
            return task
        refused = self._user_said(step, task, held)
        if refused is not None:
            return refused
        decision = await self.gate.adecide(step, task)
        return self._call(step, task, decision)

    def _user_said(self, step: Step, task: str, held: Claim | None) -> Blocked | None:
        """Record the request's user messages the task has not seen yet, before the model
        call is judged: the user's own words are the task's ``user`` content and what its
        planner reads. A refused message refuses the call. A call made inside a step another
        integration gated (a tool, a graph node) sends a prompt that code wrote, not the
        user: nothing is recorded for it (the outer integration recorded the user's words)."""
        if held is not None and held.governor is self.gate.governor:
            return None
        messages = step.input.get("messages")
        if not isinstance(messages, list):
            return None
        contents = user_contents([m for m in messages if isinstance(m, Mapping)])
        if not contents:
            return None
        ids = step.properties.get("framework")
        ids = {k: v for k, v in ids.items() if k != "name"} if isinstance(ids, dict) else None
        return self.gate.user_messages(task, contents, ids=ids)

    def send(
        self,
        prepared: Step | Allowed | Blocked | None,
        send: Callable[[], R],
        refuse: Callable[[Blocked], BaseException],
        observe: Callable[[ModelCall, R], T],
    ) -> R | T:
        """One provider call under the lifecycle, for a mapping's wrapped request method.

        `prepared` is what the mapping made of the request: its ``step.model`` `Step`, None
        when the request is not a model call, or `Gate.undecided`'s verdict when the step
        could not be built. Sends unchanged (returning `send()`) when there is nothing to
        govern, when fail-open let an undescribable call through, or when another
        integration claimed the call; raises `refuse(blocked)` without sending when the call
        is refused; records a send that raised as failed and re-raises it; otherwise returns
        `observe(call, result)`, which settles `call` (now or when a stream ends)."""
        if prepared is None or isinstance(prepared, Allowed):
            return send()
        call = prepared if isinstance(prepared, Blocked) else self.begin(prepared)
        if call is None:
            return send()
        if isinstance(call, Blocked):
            raise refuse(call)
        try:
            result = send()
        except BaseException as exc:
            call.failed(exc)
            raise
        return observe(call, result)

    async def asend(
        self,
        prepared: Step | Allowed | Blocked | None,
        send: Callable[[], Awaitable[R]],
        refuse: Callable[[Blocked], BaseException],
        observe: Callable[[ModelCall, R], Awaitable[T]],
    ) -> R | T:
        """`send` for async clients: `send` and `observe` return awaitables."""
        if prepared is None or isinstance(prepared, Allowed):
            return await send()
        call = prepared if isinstance(prepared, Blocked) else await self.abegin(prepared)
        if call is None:
            return await send()
        if isinstance(call, Blocked):
            raise refuse(call)
        try:
            result = await send()
        except BaseException as exc:
            await call.afailed(exc)
            raise
        return await observe(call, result)

    def _call(self, step: Step, task: str, decision: Any) -> ModelCall | Blocked:
        if isinstance(decision, Blocked):
            return decision
        if not isinstance(decision, Allowed):  # Pending needs pause=True, never asked for
            return Blocked(step, f"blocked: {step.name!r} waits for an approval", None)
        return ModelCall(self, step, task, decision.handle)

    # -- tool calls the model asks for ----------------------------------------------------

    def judge(self, calls: Sequence[ToolCall], task_id: str) -> tuple[ToolVerdict, ...]:
        """The verdict on each requested call, recording nothing. A call Charter cannot
        judge gets the fail-mode verdict (block under fail_mode closed), reported."""
        return tuple(self._judge_one(call, task_id) for call in calls)

    def _judge_one(self, call: ToolCall, task_id: str) -> ToolVerdict:
        gate = self.gate
        step: Step | None = None
        try:
            step = gate.tool_step(call.name, call.args, call_id=call.id, ids=self._ids())
            b = gate._behavior(step, task_id)
            result = gate.governor.runner.preview(b)
        except Exception as exc:
            undecided = gate.undecided(step or Step("step.unknown", None, call.name), exc)
            decision = "allow" if isinstance(undecided, Allowed) else "block"
            return ToolVerdict(call, decision, undecided.reason, step)
        if result.decision is EngineDecision.ASK and gate.governor._has_approval(b):
            return ToolVerdict(call, "allow", "approved earlier for this input", step)
        return ToolVerdict(call, result.decision.value, result.reason, step)

    def _ids(self) -> dict[str, Any]:
        return {"provider": self.provider}

    def run_tools(
        self, calls: Sequence[ToolCall], tools: Mapping[str, Callable[..., Any]]
    ) -> list[ToolResult]:
        """Run each requested call through Charter, in order: judged before it runs (the
        Governor's approver answers asks), run with its arguments as keywords, recorded
        after. A call of a tool not in `tools`, or with unreadable arguments, never runs
        and comes back as a refusal saying so. The tool's own exception is recorded as a
        failure and returned in `ToolResult.error`, never raised."""
        return [self._run_one(call, tools) for call in calls]

    async def arun_tools(
        self, calls: Sequence[ToolCall], tools: Mapping[str, Callable[..., Any]]
    ) -> list[ToolResult]:
        """`run_tools` for async code: coroutine functions are awaited."""
        return [await self._arun_one(call, tools) for call in calls]

    def _prepare(
        self, call: ToolCall, tools: Mapping[str, Callable[..., Any]]
    ) -> ToolResult | tuple[Step, str]:
        if call.problem is not None:
            return ToolResult(call, refusal=f"not run: {call.problem}")
        if call.name not in tools:
            known = ", ".join(sorted(tools)) or "none"
            why = f"not run: no tool named {call.name!r} (known: {known})"
            return ToolResult(call, refusal=why)
        try:
            step = self.gate.tool_step(call.name, call.args, call_id=call.id, ids=self._ids())
        except Exception as exc:
            undecided = self.gate.undecided(Step("step.unknown", None, call.name), exc)
            if isinstance(undecided, Blocked):
                return ToolResult(call, refusal=undecided.reason)
            step = Step("step.unknown", None, call.name, dict(call.args))
        task = self.task_for()
        if isinstance(task, Blocked):
            return ToolResult(call, refusal=task.reason)
        return step, task

    def _run_one(self, call: ToolCall, tools: Mapping[str, Callable[..., Any]]) -> ToolResult:
        prepared = self._prepare(call, tools)
        if isinstance(prepared, ToolResult):
            return prepared
        step, task = prepared
        decision = self.gate.decide(step, task, call_id=call.id)
        if not isinstance(decision, Allowed):
            reason = decision.reason if isinstance(decision, Blocked) else "needs approval"
            return ToolResult(call, refusal=reason)
        with claim(Claim("tool", call.id, step.name, self.gate.governor, task)):
            try:
                output = tools[call.name](**call.args)
            except Exception as exc:
                self.gate.fail(decision.handle, exc)
                return ToolResult(call, error=exc)
        self.gate.complete(decision.handle, output)
        return ToolResult(call, output=output)

    async def _arun_one(
        self, call: ToolCall, tools: Mapping[str, Callable[..., Any]]
    ) -> ToolResult:
        prepared = self._prepare(call, tools)
        if isinstance(prepared, ToolResult):
            return prepared
        step, task = prepared
        decision = await self.gate.adecide(step, task, call_id=call.id)
        if not isinstance(decision, Allowed):
            reason = decision.reason if isinstance(decision, Blocked) else "needs approval"
            return ToolResult(call, refusal=reason)
        with claim(Claim("tool", call.id, step.name, self.gate.governor, task)):
            try:
                output = tools[call.name](**call.args)
                if inspect.isawaitable(output):
                    output = await output
            except Exception as exc:
                await self.gate.afail(decision.handle, exc)
                return ToolResult(call, error=exc)
        await self.gate.acomplete(decision.handle, output)
        return ToolResult(call, output=output)


class ModelCall:
    """One allowed model call, settled exactly once (later settle calls do nothing)."""

    def __init__(
        self, client: ModelClient, step: Step, task_id: str, handle: StepHandle | None
    ) -> None:
        self.client = client
        self.step = step
        self.task_id = task_id
        self.handle = handle
        self.started = time.perf_counter()
        self.verdicts: tuple[ToolVerdict, ...] = ()
        self._streaming = False
        self._settled = False
        self._lock = threading.Lock()

    def _take(self) -> bool:
        with self._lock:
            if self._settled:
                return False
            self._settled = True
            return True

    @property
    def settled(self) -> bool:
        return self._settled

    def _outcome(self, reply: ModelReply) -> tuple[dict[str, Any], dict[str, Any]]:
        props = model_outcome(usage=reply.usage, stop_reason=reply.stop_reason) or {"model": {}}
        model = props["model"]
        model["latency_ms"] = round((time.perf_counter() - self.started) * 1000.0, 3)
        if reply.model:
            model["response_model"] = str(reply.model)
        output: dict[str, Any] = {"text": reply.text if reply.text is not None else ""}
        if reply.tool_calls:
            output["tool_calls"] = [
                {k: v for k, v in (("id", c.id), ("name", c.name), ("args", c.args)) if v}
                for c in reply.tool_calls
            ]
        if not reply.complete:
            output["incomplete"] = True
        return output, props

    def finish(self, reply: ModelReply) -> tuple[ToolVerdict, ...]:
        """Record the reply as the call's outcome, then judge the tool calls it asks for
        (after recording, so history rules see this model call). Returns the verdicts."""
        if not self._take():
            return self.verdicts
        output, props = self._outcome(reply)
        self.client.gate.complete(self.handle, output, properties=props)
        self.verdicts = self.client.judge(reply.tool_calls, self.task_id)
        return self.verdicts

    async def afinish(self, reply: ModelReply) -> tuple[ToolVerdict, ...]:
        """`finish` for async code."""
        if not self._take():
            return self.verdicts
        output, props = self._outcome(reply)
        await self.client.gate.acomplete(self.handle, output, properties=props)
        self.verdicts = self.client.judge(reply.tool_calls, self.task_id)
        return self.verdicts

    def failed(self, exc: BaseException) -> None:
        """Record the SDK's error (after its own retries) as the call's failure."""
        if self._take():
            self.client.gate.fail(self.handle, exc)

    async def afailed(self, exc: BaseException) -> None:
        """`failed` for async code."""
        if self._take():
            await self.client.gate.afail(self.handle, exc)

    def abandoned(self) -> None:
        """Record that the call never produced anything (a stream never read, cancelled)."""
        if self._take():
            self.client.gate.abandon(self.handle)

    def watch(self, owner: Any) -> None:
        """Settle the call as abandoned when `owner` (the SDK's stream object) is collected
        before any chunk was read: a stream created and dropped unread is still in the
        trail (one read in part is settled by `stream` itself, with what arrived). Owners
        that cannot be weakly referenced are not watched."""
        try:
            weakref.finalize(owner, self._dropped)
        except TypeError:
            pass

    def _dropped(self) -> None:
        # Weak-reference callbacks run before a collected generator is closed: a stream that
        # started is left to its own finally, which records what arrived.
        if not self._streaming:
            self.abandoned()

    def _fold(self, fold: Callable[[C], None], chunk: C) -> None:
        try:
            fold(chunk)
        except Exception as exc:  # an observability fault must never break the stream
            report_internal_error(exc, f"{self.client.provider}: reading a streamed chunk")

    def _reply(self, reply: Callable[[bool], ModelReply], complete: bool) -> ModelReply:
        try:
            return reply(complete)
        except Exception as exc:
            report_internal_error(exc, f"{self.client.provider}: the end of a stream")
            return ModelReply(complete=complete)

    def stream(
        self,
        chunks: Iterator[C],
        fold: Callable[[C], None],
        reply: Callable[[bool], ModelReply],
        done: Callable[[tuple[ToolVerdict, ...]], None] | None = None,
    ) -> Iterator[C]:
        """`chunks`, unchanged, observed: each chunk goes to `fold` (the mapping's
        accumulator), and the call is settled once: at the stream's end ``finish(reply(True))``,
        when the consumer stops early (close, break, garbage collection) with what arrived
        (``reply(False)``; abandoned when nothing did), on an error from the SDK `failed`.
        `done` receives the verdicts once finished."""
        seen = 0
        complete = False
        try:
            for chunk in chunks:
                seen += 1
                self._streaming = True
                self._fold(fold, chunk)
                yield chunk
            complete = True
        except GeneratorExit:
            raise
        except BaseException as exc:
            self.failed(exc)
            raise
        finally:
            self._stream_ended(seen, complete, reply, done)

    def _stream_ended(
        self,
        seen: int,
        complete: bool,
        reply: Callable[[bool], ModelReply],
        done: Callable[[tuple[ToolVerdict, ...]], None] | None,
    ) -> None:
        """Settle the call when its stream ended (see `stream`), unless it is settled."""
        if self._settled:
            return
        if seen == 0 and not complete:
            self.abandoned()
            return
        verdicts = self.finish(self._reply(reply, complete))
        if done is not None:
            done(verdicts)

    async def astream(
        self,
        chunks: AsyncIterator[C],
        fold: Callable[[C], None],
        reply: Callable[[bool], ModelReply],
        done: Callable[[tuple[ToolVerdict, ...]], None] | None = None,
    ) -> AsyncIterator[C]:
        """`stream` for an async iterator. The outcome is recorded without awaiting (an
        async generator may be finalised outside its event loop), as in buffered durability."""
        seen = 0
        complete = False
        try:
            async for chunk in chunks:
                seen += 1
                self._streaming = True
                self._fold(fold, chunk)
                yield chunk
            complete = True
        except GeneratorExit:
            raise
        except BaseException as exc:
            self.failed(exc)
            raise
        finally:
            self._stream_ended(seen, complete, reply, done)
