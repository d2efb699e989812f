"""The Governor: the small facade every integration uses, sync and async.

An integration translates framework events and calls four things: open a task, gate a step
before it runs, record the step's outcome, close the task. Everything else (verdicts, fail
mode, approvals, warnings, redaction, the audit trail) happens here and in the runner.

The approval flow is written once, as a generator that yields the operations it needs
(evaluate, record, ask the approver); a sync driver runs them in the caller's thread and an
async driver awaits them, moving blocking I/O (sync durability, sync approvers) to a thread.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from charter._engine.engine import Decision, EvalResult
from charter._model.behavior import ActionKind, Behavior, Outcome, Verb
from charter._model.capture import capture, capture_noted
from charter._model.errors import BlockedError, PolicyWarning
from charter._model.identifiers import new_id, step_name_from, task_id_from
from charter._model.ijson import canonical_digest
from charter._policy.policy import Severity
from charter._runtime.approval import Approval, ApprovalRequest, Approver, deny_all, gate_record
from charter._runtime.runner import Runner, derive
from charter._runtime.settings import Settings
from charter._runtime.writer import ExporterLike

__all__ = ["Governor", "StepHandle", "TaskHandle"]

logger = logging.getLogger("charter")

T = TypeVar("T")

_ERROR_TEXT_MAX = 4000
_WARN_SEVERITIES = frozenset({Severity.HIGH, Severity.MEDIUM, Severity.LOW})


def _payload(value: Any, limits: tuple[int, int] | None = None) -> dict[str, Any] | None:
    """Any Python value as an I-JSON object (None stays None), strings and collections cut
    visibly at `limits` (max chars, max items) when given; never raises."""
    if value is None:
        return None
    if limits is None:
        captured = capture(value)
    else:
        captured = capture(value, max_string=limits[0], max_items=limits[1])
    return captured if isinstance(captured, dict) else {"value": captured}


def _merged(base: dict[str, Any], extra: dict[str, Any] | None) -> dict[str, Any]:
    """`base` with each group of `extra` merged in (a group's keys win over the base's)."""
    if not extra:
        return base
    merged = dict(base)
    for group, value in extra.items():
        old = merged.get(group)
        merged[group] = (
            {**old, **value} if isinstance(old, dict) and isinstance(value, dict) else value
        )
    return merged


def _error(exc: BaseException) -> dict[str, Any]:
    message = str(exc)
    if len(message) > _ERROR_TEXT_MAX:
        message = message[:_ERROR_TEXT_MAX] + f"…[truncated {len(message) - _ERROR_TEXT_MAX}]"
    return {"error": {"type": type(exc).__name__, "message": message}}


def _line(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True, slots=True)
class TaskHandle:
    """An open task: `task_id` identifies it in the audit trail."""

    task_id: str
    name: str


@dataclass(frozen=True, slots=True)
class _Call:
    fn: Callable[..., Any]
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _Ask:
    request: ApprovalRequest


@dataclass(frozen=True, slots=True)
class _Gate:
    approved: bool
    by: str
    why: str
    seq: int | None


_Flow = Generator[_Call | _Ask, Any, EvalResult]


class StepHandle:
    """A gated step that was allowed to run; settle it exactly once.

    `result` is the decision it ran under, `action_id` pairs its intent with its outcome,
    `behavior` is the intent. Set `output` (or pass it to `complete`) before leaving a
    ``with gov.step(...)`` block. `complete`, `fail` and `abandon` record the outcome and
    return the recorded behavior; a second settle raises RuntimeError. Recording never
    raises in buffered durability; in sync durability a store failure raises AuditError and
    leaves the step unsettled, so the call can be retried.
    """

    __slots__ = ("_governor", "_lock", "_settled", "behavior", "output", "result")

    def __init__(self, governor: Governor, behavior: Behavior, result: EvalResult) -> None:
        self._governor = governor
        self.behavior = behavior
        self.result = result
        self.output: Any = None
        self._settled: str | None = None
        self._lock = threading.Lock()

    @property
    def action_id(self) -> str:
        return self.behavior.action_id or ""

    @property
    def task_id(self) -> str:
        return self.behavior.task_id

    @property
    def settled(self) -> str | None:
        """None while running, else ``ok``, ``failed`` or ``abandoned``."""
        return self._settled

    def _outcome(
        self,
        how: str,
        output: Any = None,
        exc: BaseException | None = None,
        properties: Any = None,
    ) -> Behavior:
        if self._settled is not None:
            raise RuntimeError(
                f"step {self.behavior.step_name!r} is already settled ({self._settled}); "
                "complete, fail or abandon a step once"
            )
        b = self.behavior
        meta = dict(b.meta)
        if how == "ok":
            # Outputs are cut to the output limits (intents never are: a policy and the
            # secret scan must see every byte of what is about to run).
            settings = self._governor.runner.settings
            limits = (settings.max_output_chars, settings.max_output_items)
            data = _payload(output if output is not None else self.output, limits)
            meta["charter.outcome"] = Outcome.OK.value
            props = _merged(b.properties, _payload(properties))
            return derive(b, output=data if data is not None else {}, meta=meta, properties=props)
        if how == "failed":
            assert exc is not None
            meta["charter.outcome"] = Outcome.FAILED.value
            return derive(b, output=_error(exc), meta=meta)
        meta["charter.outcome"] = Outcome.ABANDONED.value
        return derive(b, meta=meta)

    def _settle(
        self,
        how: str,
        output: Any = None,
        exc: BaseException | None = None,
        properties: Any = None,
    ) -> Behavior:
        # Settled only once the record succeeded: after an AuditError (sync durability) the
        # same call can be retried, and the engine's history did not move in between.
        with self._lock:
            recorded = self._governor.runner.record(self._outcome(how, output, exc, properties))
            self._settled = how
            return recorded

    async def _asettle(
        self,
        how: str,
        output: Any = None,
        exc: BaseException | None = None,
        properties: Any = None,
    ) -> Behavior:
        return await self._governor._run(self._settle, how, output, exc, properties)

    def complete(self, output: Any = None, *, properties: Any = None) -> Behavior:
        """Record the step's success with `output` (any value; captured to I-JSON).

        `properties` adds what is only known once the step ran (a model call's token usage in
        ``{"model": {"usage": ...}}``): each group is merged into the step's own, so history
        rules such as `budget` see it.
        """
        return self._settle("ok", output, properties=properties)

    def fail(self, exc: BaseException) -> Behavior:
        """Record the step's failure: ``{"error": {"type", "message"}}``, outcome failed."""
        return self._settle("failed", exc=exc)

    def abandon(self) -> Behavior:
        """Record that the step did not run to an end (cancelled, interrupted)."""
        return self._settle("abandoned")

    async def acomplete(self, output: Any = None, *, properties: Any = None) -> Behavior:
        """`complete` for async code (store I/O off the event loop in sync durability)."""
        return await self._asettle("ok", output, properties=properties)

    async def afail(self, exc: BaseException) -> Behavior:
        """`fail` for async code."""
        return await self._asettle("failed", exc=exc)

    async def aabandon(self) -> Behavior:
        """`abandon` for async code."""
        return await self._asettle("abandoned")


class _StepScope:
    """``with gov.step(...)`` / ``async with gov.step(...)``."""

    __slots__ = ("_args", "_governor", "_handle")

    def __init__(self, governor: Governor, args: dict[str, Any]) -> None:
        self._governor = governor
        self._args = args
        self._handle: StepHandle | None = None

    def __enter__(self) -> StepHandle:
        self._handle = self._governor.begin_step(**self._args)
        return self._handle

    def __exit__(self, et: Any, exc: BaseException | None, tb: Any) -> None:
        h = self._handle
        if h is None or h.settled is not None:
            return
        try:
            if exc is None:
                h.complete()
            elif isinstance(exc, Exception):
                h.fail(exc)
            else:
                h.abandon()
        except Exception as recording:
            if exc is None:
                raise
            # The user's exception wins; the recording failure rides along on it.
            exc.add_note(f"charter: the step's outcome could not be recorded: {recording}")

    async def __aenter__(self) -> StepHandle:
        self._handle = await self._governor.abegin_step(**self._args)
        return self._handle

    async def __aexit__(self, et: Any, exc: BaseException | None, tb: Any) -> None:
        h = self._handle
        if h is None or h.settled is not None:
            return
        try:
            if exc is None:
                await h.acomplete()
            elif isinstance(exc, Exception):
                await h.afail(exc)
            else:
                await h.aabandon()
        except Exception as recording:
            if exc is None:
                raise
            exc.add_note(f"charter: the step's outcome could not be recorded: {recording}")


class _TaskScope:
    """``with gov.task(...)`` / ``async with gov.task(...)``."""

    __slots__ = ("_args", "_governor", "_handle", "_token")

    def __init__(self, governor: Governor, args: dict[str, Any]) -> None:
        self._governor = governor
        self._args = args
        self._handle: TaskHandle | None = None
        self._token: contextvars.Token[str | None] | None = None

    def _entered(self, task_id: str) -> TaskHandle:
        self._token = self._governor._current.set(task_id)
        self._handle = TaskHandle(task_id, self._args["name"])
        return self._handle

    def _reset(self) -> None:
        if self._token is not None:
            try:
                self._governor._current.reset(self._token)
            except ValueError:  # exited in another context (e.g. a generator); nothing to undo
                pass

    def __enter__(self) -> TaskHandle:
        return self._entered(self._governor.start_task(**self._args))

    def __exit__(self, et: Any, exc: BaseException | None, tb: Any) -> None:
        self._reset()
        assert self._handle is not None
        try:
            self._governor.end_task(self._handle.task_id, error=exc)
        except Exception as recording:
            if exc is None:
                raise
            exc.add_note(f"charter: the task's end could not be recorded: {recording}")

    async def __aenter__(self) -> TaskHandle:
        return self._entered(await self._governor.astart_task(**self._args))

    async def __aexit__(self, et: Any, exc: BaseException | None, tb: Any) -> None:
        self._reset()
        assert self._handle is not None
        try:
            await self._governor.aend_task(self._handle.task_id, error=exc)
        except Exception as recording:
            if exc is None:
                raise
            exc.add_note(f"charter: the task's end could not be recorded: {recording}")


def _check_policy_files(settings: Settings) -> None:
    missing = [p for p in settings.policy_file or () if not os.path.exists(p)]
    if not missing:
        return
    where = "CHARTER_POLICY_FILE" if settings.origin("policy_file") == "env" else "policy_file="
    shown = ", ".join(repr(os.path.abspath(p)) for p in missing)
    raise ValueError(
        f"{where}: {shown} does not exist (relative paths are read from the working directory "
        f"{os.getcwd()!r}); fix the path, or create the manifest"
    )


class Governor:
    """Gate an agent's steps and record them: the facade integrations use.

    Build it from a Runner, or from the Runner's setting keywords (``Governor(policy_file=
    "policies.yaml")``; see Settings). Built from keywords, it refuses (ValueError naming the
    path) a `policy_file` that does not exist: a mistyped path is a configuration error, not a
    run in which every step is blocked. A file that disappears later is a load problem and the
    fail mode decides, as with a Runner. `approver` decides steps a policy asks about; the
    default denies them (fail closed). Thread-safe; the current task is held per context
    (thread or asyncio task), so steps in a new thread need ``task_id=``.
    """

    def __init__(
        self,
        runner: Runner | None = None,
        *,
        approver: Approver | Callable[[ApprovalRequest], Any] | None = None,
        exporters: tuple[ExporterLike, ...] = (),
        **settings: Any,
    ) -> None:
        if runner is None:
            resolved = Settings.from_sources(**settings)
            _check_policy_files(resolved)
            runner = Runner(resolved, exporters=exporters)
            self._owns_runner = True
        elif settings or exporters:
            raise ValueError(
                "pass either runner= or setting keywords, not both (the runner has its "
                f"settings already; got {', '.join(settings) or 'exporters='})"
            )
        else:
            self._owns_runner = False
        self.runner = runner
        self.approver: Any = approver if approver is not None else deny_all
        self._current: contextvars.ContextVar[str | None] = contextvars.ContextVar(
            f"charter.current_task.{id(self)}", default=None
        )
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._names: dict[str, str] = {}
        self._approvals: dict[tuple[str, str, str], list[_Gate]] = {}
        self.incidents = 0
        self.approvals_asked = 0

    # -- tasks --------------------------------------------------------------------------------

    def task(
        self,
        task_id: str | None = None,
        *,
        name: str = "task",
        input: Any = None,
        properties: Any = None,
    ) -> _TaskScope:
        """A task as a context manager (``with`` or ``async with``), yielding a TaskHandle.

        Enter records task.start (with a new 32-hex-digit task id when `task_id` is None; any
        other id is mapped with `task_id_from`) and makes it the current task; a normal exit
        records task.end, an exception records task.error with its type and message and is
        re-raised unchanged. Open steps are recorded as abandoned before the end.
        """
        return _TaskScope(
            self, {"task_id": task_id, "name": name, "input": input, "properties": properties}
        )

    def current_task(self) -> str | None:
        """The task id `step` uses when none is given, or None outside any task."""
        return self._current.get()

    def _start_behavior(
        self, task_id: str | None, name: str, input: Any, properties: Any
    ) -> Behavior:
        tid = task_id_from(task_id) if task_id is not None else new_id()
        return Behavior(
            agent_id=self.runner.agent_id,
            task_id=tid,
            kind=ActionKind.TASK_START,
            step_name=step_name_from(name),
            input=_payload(input),
            properties=_payload(properties) or {},
        )

    def _open(self, start: Behavior) -> str:
        result = self.runner.evaluate(start)
        if result.decision in (Decision.BLOCK, Decision.ASK):
            extra = "" if result.decision is Decision.BLOCK else " (tasks cannot be approved)"
            raise BlockedError(_line(result.reason) + extra, result)
        self.runner.record(start)
        with self._lock:
            self._names[start.task_id] = start.step_name
        return start.task_id

    def start_task(
        self,
        task_id: str | None = None,
        *,
        name: str = "task",
        input: Any = None,
        properties: Any = None,
    ) -> str:
        """Record task.start and return the task id (for frameworks with separate callbacks;
        does not change the current task). Raises BlockedError when a policy blocks the task
        itself (nothing is recorded then), ValueError for a task id already started.
        """
        return self._open(self._start_behavior(task_id, name, input, properties))

    async def astart_task(
        self,
        task_id: str | None = None,
        *,
        name: str = "task",
        input: Any = None,
        properties: Any = None,
    ) -> str:
        """`start_task` for async code."""
        return await self._run(self._open, self._start_behavior(task_id, name, input, properties))

    def _closing(self, task_id: str, error: BaseException | None, output: Any) -> Behavior | None:
        if self.runner.engine.task_state(task_id) != "open":
            return None
        with self._lock:
            name = self._names.get(task_id)
        if name is None:
            history = self.runner.engine.get_history(task_id)
            name = history[0].step_name if history else "task"
        if error is not None:
            return Behavior(
                agent_id=self.runner.agent_id,
                task_id=task_id,
                kind=ActionKind.TASK_ERROR,
                step_name=name,
                output=_error(error),
            )
        data = _payload(output)
        return Behavior(
            agent_id=self.runner.agent_id,
            task_id=task_id,
            kind=ActionKind.TASK_END,
            step_name=name,
            output=data if data is not None else {},
        )

    def _close(self, task_id: str, error: BaseException | None, output: Any) -> None:
        if self.runner.engine.task_state(task_id) == "ended":
            self._forget(task_id)
            return
        self.runner.end_task(task_id, self._closing(task_id, error, output))
        self._forget(task_id)

    def _forget(self, task_id: str) -> None:
        with self._lock:
            self._names.pop(task_id, None)
            for key in [k for k in self._approvals if k[0] == task_id]:
                del self._approvals[key]

    def end_task(
        self, task_id: str, error: BaseException | None = None, *, output: Any = None
    ) -> None:
        """Record task.end (with `output`) or, given `error`, task.error; then forget the task.

        Steps still open are recorded as abandoned first. Waits (up to exit_flush_seconds)
        for the task's records to be committed. Ending an ended task (for instance one the
        idle sweeper closed) does nothing; refuses (ValueError) a task never started.
        """
        self._close(task_id, error, output)

    async def aend_task(
        self, task_id: str, error: BaseException | None = None, *, output: Any = None
    ) -> None:
        """`end_task` for async code (waits for the store in a worker thread)."""
        import asyncio  # deferred: `import charter` stays light for one-shot hook processes

        await asyncio.to_thread(self._close, task_id, error, output)

    # -- steps --------------------------------------------------------------------------------

    def build_step(
        self,
        kind: ActionKind | str,
        verb: Verb | str | None = None,
        *,
        name: Any,
        input: Any = None,
        properties: Any = None,
        task_id: str | None = None,
    ) -> Behavior:
        """The intent `step` would gate: payloads captured, a fresh action_id, now as time.

        Raises RuntimeError outside any task when `task_id` is not given, ValueError for a
        kind/verb pair that does not exist.
        """
        tid = task_id if task_id is not None else self._current.get()
        if tid is None:
            raise RuntimeError(
                "no current task: open one with `with gov.task():` (or `async with`), or "
                "pass task_id="
            )
        fields: dict[str, Any] = {
            "agent_id": self.runner.agent_id,
            "task_id": tid,
            "kind": kind,
            "verb": verb,
            "step_name": step_name_from(name),
            "action_id": new_id(),
        }
        if (input is None or type(input) is dict) and (
            properties is None or type(properties) is dict
        ):
            # Plain I-JSON dicts are validated and copied once; anything else is captured.
            try:
                return Behavior(**fields, input=input, properties=properties or {})
            except (ValueError, RecursionError):
                pass
        data, notes = capture_noted(input)
        if input is None:
            data = None
        elif not isinstance(data, dict):
            data = {"value": data}
            notes = {"value" + ("." if k and k[0] != "[" else "") + k: v for k, v in notes.items()}
        props = _payload(properties) or {}
        if notes:
            # Bytes are judged as the text a tool acts on; the record says they were bytes.
            where = {f"input.{k}" if k else "input": how for k, how in notes.items()}
            props = _merged(props, {"capture": {"encoding": where}})
        return Behavior(**fields, input=data, properties=props)

    def step(
        self,
        kind: ActionKind | str,
        verb: Verb | str | None = None,
        *,
        name: Any,
        input: Any = None,
        properties: Any = None,
        task_id: str | None = None,
    ) -> _StepScope:
        """Gate one step as a context manager (``with`` or ``async with``) yielding a
        StepHandle.

        The step is judged before the block runs: a block raises BlockedError (a
        PermissionError; the block never runs and the refusal is recorded), a warn emits a
        PolicyWarning (once per policy per Governor) and runs, an ask goes to the approver.
        On exit the outcome is recorded: ``handle.output`` on success, the exception's type
        and message on failure (the exception is re-raised unchanged).
        """
        return _StepScope(
            self,
            {
                "kind": kind,
                "verb": verb,
                "name": name,
                "input": input,
                "properties": properties,
                "task_id": task_id,
            },
        )

    def begin_step(
        self,
        kind: ActionKind | str,
        verb: Verb | str | None = None,
        *,
        name: Any,
        input: Any = None,
        properties: Any = None,
        task_id: str | None = None,
    ) -> StepHandle:
        """Gate one step without a ``with`` block (separate before/after callbacks).

        Returns a StepHandle to `complete`, `fail` or `abandon` later. Raises BlockedError
        when the step may not run, RuntimeError outside any task.
        """
        b = self.build_step(
            kind, verb, name=name, input=input, properties=properties, task_id=task_id
        )
        result = self._drive(self._flow(b))
        assert isinstance(result, EvalResult)  # without pause the approver answers asks
        return StepHandle(self, b, result)

    async def abegin_step(
        self,
        kind: ActionKind | str,
        verb: Verb | str | None = None,
        *,
        name: Any,
        input: Any = None,
        properties: Any = None,
        task_id: str | None = None,
    ) -> StepHandle:
        """`begin_step` for async code: awaits async approvers, runs sync ones in a thread."""
        b = self.build_step(
            kind, verb, name=name, input=input, properties=properties, task_id=task_id
        )
        result = await self._adrive(self._flow(b))
        assert isinstance(result, EvalResult)  # without pause the approver answers asks
        return StepHandle(self, b, result)

    def evaluate(
        self,
        kind: ActionKind | str,
        verb: Verb | str | None = None,
        *,
        name: Any,
        input: Any = None,
        properties: Any = None,
        task_id: str | None = None,
    ) -> EvalResult:
        """The decision on a step, without running, recording or raising on a block.

        For integrations whose framework handles approvals itself (an interrupt, a
        permission prompt): look at the decision, get the human's answer, pass it to
        `record_approval`, then gate the step with `begin_step`, which finds that answer.
        """
        b = self.build_step(
            kind, verb, name=name, input=input, properties=properties, task_id=task_id
        )
        return self.runner.preview(b)

    def record_approval(
        self,
        task_id: str,
        step: Behavior | ApprovalRequest,
        approved: bool,
        by: str,
        why: str = "",
    ) -> Behavior:
        """Record a human's answer on `step` as a step.gate and keep it for the step.

        The gate is bound to the step's name and the SHA-256 of its canonical input, and is
        used once: the next `begin_step` in the task with that name and input that a policy
        asks about takes it instead of calling the approver. Returns the recorded gate.
        """
        request = step if isinstance(step, ApprovalRequest) else ApprovalRequest(step, (), "")
        gate = self._record_gate(task_id, request, Approval(bool(approved), by, why))
        with self._lock:
            self._approvals.setdefault(_approval_key(task_id, request.behavior), []).append(gate[1])
        return gate[0]

    def _record_gate(
        self, task_id: str, request: ApprovalRequest, approval: Approval
    ) -> tuple[Behavior, _Gate]:
        b = request.behavior
        if b.task_id != task_id:
            b = derive(b, task_id=task_id)
        recorded = self.runner.record(gate_record(b, approval, request.policies))
        return recorded, _Gate(approval.approved, str(approval.by), str(approval.why), recorded.seq)

    def _has_approval(self, b: Behavior) -> bool:
        with self._lock:
            return bool(self._approvals.get(_approval_key(b.task_id, b)))

    def _take_approval(self, b: Behavior) -> _Gate | None:
        key = _approval_key(b.task_id, b)
        with self._lock:
            found = self._approvals.get(key)
            if not found:
                return None
            gate = found.pop(0)
            if not found:
                del self._approvals[key]
            return gate

    # -- the decision flow --------------------------------------------------------------------

    def _flow(self, b: Behavior) -> _Flow:
        result: EvalResult = yield _Call(self.runner.evaluate, (b,))
        if result.decision is Decision.ASK:
            gate = self._take_approval(b)
            if gate is None:
                request = ApprovalRequest(b, result.violations, result.reason, result)
                approval: Approval = yield _Ask(request)
                _, gate = yield _Call(self._record_gate, (b.task_id, request, approval))
            if not gate.approved:
                why = f": {gate.why}" if gate.why else ""
                denied = EvalResult(
                    Decision.BLOCK,
                    result.risk_score,
                    result.results,
                    b.action_id,
                    None,
                    f"blocked: approval denied by {gate.by}{why} ({result.reason})",
                )
                blocked = yield _Call(self.runner.record_block, (b, denied))
                raise BlockedError(_line(blocked.reason), blocked)
            result = yield _Call(self.runner.evaluate, (b,))
            if result.decision is Decision.ASK:
                # One approval round per step: the approval just given authorises this run.
                result = yield _Call(self.runner.authorize, (b, result))
        if result.decision is Decision.BLOCK:
            raise BlockedError(_line(result.reason), result)
        if result.decision is Decision.WARN:
            self._warn(b, result)
        elif result.monitored or result.failed_open:
            self._incident(b, result.reason)
        return result

    def _drive(self, flow: _Flow, pause: bool = False) -> EvalResult | ApprovalRequest:
        # With `pause`, an ask ends the flow with its request (nothing was registered for the
        # step): the integration's framework pauses and the answer is recorded before the
        # step is gated again.
        try:
            op = next(flow)
            while True:
                if isinstance(op, _Ask):
                    if pause:
                        flow.close()
                        return op.request
                    op = flow.send(self._ask(op.request))
                else:
                    op = flow.send(op.fn(*op.args))
        except StopIteration as stop:
            result: EvalResult = stop.value
            return result

    async def _adrive(self, flow: _Flow, pause: bool = False) -> EvalResult | ApprovalRequest:
        try:
            op = next(flow)
            while True:
                if isinstance(op, _Ask):
                    if pause:
                        flow.close()
                        return op.request
                    op = flow.send(await self._aask(op.request))
                else:
                    op = flow.send(await self._run(op.fn, *op.args))
        except StopIteration as stop:
            result: EvalResult = stop.value
            return result

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        # Buffered durability only enqueues, which is fast: a thread hop would cost more.
        if self.runner.settings.audit_durability == "sync":
            import asyncio

            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    def _ask(self, request: ApprovalRequest) -> Approval:
        self.approvals_asked += 1
        try:
            answer = self.approver(request)
            if inspect.isawaitable(answer):
                if inspect.iscoroutine(answer):
                    answer.close()
                return Approval(
                    False,
                    "charter",
                    "the approver is async; gate this step with `async with gov.step(...)`",
                )
            return _checked(answer)
        except Exception as exc:
            return self._approver_failed(exc)

    async def _aask(self, request: ApprovalRequest) -> Approval:
        self.approvals_asked += 1
        try:
            if _is_async(self.approver):
                answer = await self.approver(request)
            else:
                import asyncio

                answer = await asyncio.to_thread(self.approver, request)
                if inspect.isawaitable(answer):
                    answer = await answer
            return _checked(answer)
        except Exception as exc:
            return self._approver_failed(exc)

    def _approver_failed(self, exc: Exception) -> Approval:
        logger.error("charter: the approver raised; the step is denied", exc_info=exc)
        return Approval(False, "charter", f"the approver raised {type(exc).__name__}: {exc}")

    def _warn(self, b: Behavior, result: EvalResult) -> None:
        # Reported once: the PolicyWarning (once per policy) is the report; every occurrence
        # is counted and logged at debug level only.
        first = []
        with self._lock:
            self.incidents += 1
            for v in result.violations:
                if v.severity in _WARN_SEVERITIES and not v.ask and v.name not in self._warned:
                    self._warned.add(v.name)
                    first.append(v)
        logger.debug("charter warning: task %s step %r: %s", b.task_id, b.step_name, result.reason)
        for v in first:
            warnings.warn(
                PolicyWarning(
                    f"policy {v.name!r} ({v.severity.value}) warned on {b.step_name!r}: "
                    f"{v.details or v.description or v.rule_type}"
                ),
                stacklevel=_caller_level(),
            )

    def _incident(self, b: Behavior, reason: str) -> None:
        with self._lock:
            self.incidents += 1
        logger.warning(
            "charter incident: task %s step %r (%s): %s",
            b.task_id,
            b.step_name,
            b.kind.value,
            reason,
        )

    # -- status and shutdown ------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """The runner's status (see Runner.status) plus this Governor's incident and
        approval counters and its approver's name."""
        status = self.runner.status()
        status["governor"] = {
            "incidents": self.incidents,
            "approvals_asked": self.approvals_asked,
            "approver": getattr(self.approver, "__qualname__", type(self.approver).__name__),
        }
        return status

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every record so far is committed (or dropped); False on timeout."""
        return self.runner.flush(timeout)

    def close(self, timeout: float | None = None) -> bool:
        """Flush and close the runner this Governor built (a runner passed in is left open
        to its owner). Returns whether everything was flushed."""
        if self._owns_runner:
            return self.runner.close(timeout)
        return self.runner.flush(timeout)

    def __enter__(self) -> Governor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _caller_level() -> int:
    """The `stacklevel` that points a warning at the first frame outside Charter."""
    frame = sys._getframe(1)  # the frame that calls warnings.warn is level 1
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def _approval_key(task_id: str, b: Behavior) -> tuple[str, str, str]:
    """What an answer is kept under: the task, the step's name and its input's digest."""
    return (task_id, b.step_name, canonical_digest(b.input or {}))


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004
    )


def _checked(answer: Any) -> Approval:
    if isinstance(answer, Approval):
        return answer
    raise TypeError(f"the approver returned {type(answer).__name__}, not an Approval")
