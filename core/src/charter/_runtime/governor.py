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
import os
import sys
import threading
from collections.abc import Callable, Generator, Mapping

from charter._engine.engine import Decision, EvalResult
from charter._model.behavior import ActionKind, Behavior, Outcome, Verb
from charter._model.capture import capture, capture_noted
from charter._model.errors import BlockedError, PolicyWarning
from charter._model.frozen import Frozen
from charter._model.identifiers import new_id, step_name_from, task_id_from
from charter._model.ijson import canonical_digest
from charter._model.paths import iter_strings
from charter._policy.policy import Severity
from charter._runtime.internal import charter_logger, log_debug, report_internal_error
from charter._runtime.runner import Runner, derive
from charter._runtime.settings import Settings, load_grant
from charter._runtime.writer import ExporterLike

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypeVar

    # The grant model is loaded by the code that handles a grant, the approval machinery by
    # a step a policy wants approved: a governor whose tasks need neither never loads them.
    from charter._policy.capabilities import Grant, GrantLayer
    from charter._policy.rules.capabilities import GrantIndex
    from charter._runtime.approval import Approval, ApprovalRequest, Approver

__all__ = ["Governor", "StepHandle", "TaskHandle"]


if TYPE_CHECKING:
    T = TypeVar("T")

_ERROR_TEXT_MAX = 4000
_WARN_SEVERITIES = frozenset({Severity.HIGH, Severity.MEDIUM, Severity.LOW})
# Read once: an enum member (or its value) read from its class costs about a function call,
# and these are read on every step.
_ASK, _BLOCK, _WARN = Decision.ASK, Decision.BLOCK, Decision.WARN
_MESSAGE, _GET = ActionKind.STEP_MESSAGE, Verb.GET


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


class TaskHandle(Frozen):
    """An open task: `task_id` identifies it in the audit trail."""

    __slots__ = ("name", "task_id")
    task_id: str
    name: str

    def __init__(
        self,
        task_id: str,
        name: str,
    ) -> None:
        put = object.__setattr__
        put(self, "task_id", task_id)
        put(self, "name", name)


class _Call(Frozen):
    __slots__ = ("args", "fn")
    fn: Callable[..., Any]
    args: tuple[Any, ...]

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        object.__setattr__(self, "fn", fn)
        object.__setattr__(self, "args", args)


class _Ask(Frozen):
    __slots__ = ("request",)
    request: ApprovalRequest

    def __init__(self, request: ApprovalRequest) -> None:
        object.__setattr__(self, "request", request)


class _Gate(Frozen):
    __slots__ = ("approved", "by", "seq", "why")
    approved: bool
    by: str
    why: str
    seq: int | None

    def __init__(self, approved: bool, by: str, why: str, seq: int | None) -> None:
        object.__setattr__(self, "approved", approved)
        object.__setattr__(self, "by", by)
        object.__setattr__(self, "why", why)
        object.__setattr__(self, "seq", seq)


if TYPE_CHECKING:
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

    def _ending(
        self,
        how: str,
        output: Any = None,
        exc: BaseException | None = None,
        properties: Any = None,
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(output, properties) of the outcome record (None: the intent's own)."""
        if how == "ok":
            # Outputs are cut to the output limits (intents never are: a policy and the
            # secret scan must see every byte of what is about to run).
            settings = self._governor.runner.settings
            limits = (settings.max_output_chars, settings.max_output_items)
            data = _payload(output if output is not None else self.output, limits)
            props = _merged(self.behavior.properties, _payload(properties))
            return (data if data is not None else {}), props
        if how == "failed":
            assert exc is not None
            return _error(exc), None
        return None, None

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
            if self._settled is not None:
                raise RuntimeError(
                    f"step {self.behavior.step_name!r} is already settled ({self._settled}); "
                    "complete, fail or abandon a step once"
                )
            data, props = self._ending(how, output, exc, properties)
            recorded = self._governor.runner._record_outcome(self.behavior, how, data, props)
            self._settled = how
        if how == "ok" and self._governor.planner is not None and _is_user_message(recorded):
            self._governor._plan(recorded)
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

    `grant` is the integration's capability grant for every task this Governor starts, and
    `planner` a function that gets the text of a task's first user message (nothing else)
    and returns a grant for that task; both are recorded in the task's chain and judged by
    the `capabilities` rule, intersected with the operator's (the `capabilities` setting)
    and the task's own (``start_task(grant=...)``). A planner that raises or returns
    something that is not a valid grant gives the task an empty grant, with the reason.
    Refuses (GrantError, a ValueError) an invalid grant, TypeError a planner that is not
    callable.
    """

    def __init__(
        self,
        runner: Runner | None = None,
        *,
        approver: Approver | Callable[[ApprovalRequest], Any] | None = None,
        exporters: tuple[ExporterLike, ...] = (),
        grant: Grant | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        planner: Callable[[str], Any] | None = None,
        **settings: Any,
    ) -> None:
        own_grant = as_grant(grant, "grant=") if grant is not None else None
        if planner is not None and not callable(planner):
            raise TypeError(
                f"planner= must be a function (the user's request text) -> grant, not "
                f"{type(planner).__name__}"
            )
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
        self._approver: Any = approver
        self.grant = own_grant
        self.planner = planner
        self._current: contextvars.ContextVar[str | None] = contextvars.ContextVar(
            f"charter.current_task.{id(self)}", default=None
        )
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._names: dict[str, str] = {}
        self._approvals: dict[tuple[str, str, str], list[_Gate]] = {}
        self._user_said: dict[str, set[str]] = {}
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
        grant: Any = None,
    ) -> _TaskScope:
        """A task as a context manager (``with`` or ``async with``), yielding a TaskHandle.

        Enter records task.start (with a new 32-hex-digit task id when `task_id` is None; any
        other id is mapped with `task_id_from`) and makes it the current task; a normal exit
        records task.end, an exception records task.error with its type and message and is
        re-raised unchanged. Open steps are recorded as abandoned before the end. `grant`
        narrows this task's capabilities (see the class docstring).
        """
        return _TaskScope(
            self,
            {
                "task_id": task_id,
                "name": name,
                "input": input,
                "properties": properties,
                "grant": grant,
            },
        )

    def current_task(self) -> str | None:
        """The task id `step` uses when none is given, or None outside any task."""
        return self._current.get()

    def _start_behavior(
        self, task_id: str | None, name: str, input: Any, properties: Any, grant: Any = None
    ) -> Behavior:
        tid = task_id_from(task_id) if task_id is not None else new_id()
        layers = self._layers(grant)
        meta: dict[str, Any] = {}
        if layers:
            from charter._policy.capabilities import GRANT_META, layers_meta

            meta[GRANT_META] = layers_meta(layers)
        return Behavior(
            agent_id=self.runner.agent_id,
            task_id=tid,
            kind=ActionKind.TASK_START,
            step_name=step_name_from(name),
            input=_payload(input),
            properties=_payload(properties) or {},
            meta=meta,
        )

    def _layers(self, grant: Any) -> list[GrantLayer]:
        """The grant layers a new task starts with: operator, integration, task, planner."""
        layers: list[GrantLayer] = []
        operator = self.runner.settings.capabilities
        if operator is None and self.grant is None and grant is None and self.planner is None:
            return layers
        from charter._policy.capabilities import Grant, GrantLayer

        if operator is not None:
            layers.append(GrantLayer("operator", operator))
        if self.grant is not None:
            layers.append(GrantLayer("integration", self.grant))
        if grant is not None:
            layers.append(GrantLayer("task", as_grant(grant, "grant=")))
        if self.planner is not None:
            waiting = "the planner runs on the task's first user message"
            layers.append(GrantLayer("planner", Grant.empty(), waiting, pending=True))
        return layers

    @property
    def approver(self) -> Any:
        """Who answers when a policy wants a step approved; `deny_all` unless one was given."""
        approver = self._approver
        if approver is None:
            from charter._runtime.approval import deny_all

            approver = self._approver = deny_all
        return approver

    @approver.setter
    def approver(self, approver: Any) -> None:
        self._approver = approver

    # -- capabilities -------------------------------------------------------------------------

    def grant_layers(self, task_id: str | None = None) -> tuple[GrantLayer, ...]:
        """The capability grant layers in force for a task known here (the current one by
        default), oldest first; empty when the task has no grant."""
        return self._grant_index(self._task_for(task_id)).layers

    def _task_for(self, task_id: str | None) -> str:
        tid = task_id if task_id is not None else self._current.get()
        if tid is None:
            raise RuntimeError("no current task: pass task_id=")
        return tid

    def _grant_index(self, task_id: str) -> GrantIndex:
        from charter._policy.rules.capabilities import GrantIndex

        index = GrantIndex()
        for step in self.runner.engine.get_history(task_id):
            index.add(step)
        return index

    def narrow_grant(self, grant: Any, *, task_id: str | None = None) -> None:
        """Narrow a running task's capability grant: `grant` becomes one more layer, so a
        step must also lie inside it (recorded as ``step.self PATCH charter.capabilities``).

        Refuses (GrantError) a widening: a grant naming a tool the task's grant does not
        grant now, and a task started without a grant (give that one when it starts);
        ValueError a task that is not open here. Its argument constraints add to those in
        force: a narrowing never loosens one.
        """
        from charter._policy.capabilities import GrantError, GrantLayer, uncovered

        tid = self._task_for(task_id)
        new = as_grant(grant, "grant")
        state = self.runner.engine.task_state(tid)
        if state != "open":
            raise ValueError(f"task {tid!r} is {state} here; only an open task's grant can narrow")
        index = self._grant_index(tid)
        if not index.granted:
            raise GrantError(
                [
                    f"task {tid!r} was started without a capability grant, and giving it one "
                    "now cannot be checked as a narrowing; give the grant when the task "
                    "starts (start_task(grant=...), Governor(grant=...), the capabilities "
                    "setting)"
                ]
            )
        missing = uncovered(index.layers, new)
        if missing:
            raise GrantError(
                [
                    f"refused: this would widen the capability grant of task {tid!r}: "
                    f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not granted "
                    "now, and a grant can only be narrowed during a task"
                ]
            )
        self._record_grant(tid, [GrantLayer("narrowed", new)])

    async def anarrow_grant(self, grant: Any, *, task_id: str | None = None) -> None:
        """`narrow_grant` for async code."""
        tid = self._task_for(task_id)
        await self._run(lambda: self.narrow_grant(grant, task_id=tid))

    def _record_grant(self, task_id: str, layers: list[GrantLayer]) -> Behavior:
        from charter._policy.capabilities import GRANT_META, GRANT_STEP, layers_meta

        record = Behavior(
            agent_id=self.runner.agent_id,
            task_id=task_id,
            kind=ActionKind.STEP_SELF,
            verb=Verb.PATCH,
            step_name=GRANT_STEP,
            output={"layers": len(layers)},
            meta={GRANT_META: layers_meta(layers), "charter.outcome": Outcome.OK.value},
        )
        return self.runner.record(record)

    def _first_said(self, task_id: str, content: Any) -> bool:
        """Whether `content` (as a message step captures it) is new as a user message of
        `task_id`, marking it said. The first call for a task reads what its history holds
        already (a task restored from the store, a message another integration recorded)."""
        digest = canonical_digest(content)
        with self._lock:
            said = self._user_said.get(task_id)
        if said is None:
            found = set(self.runner.engine.said_digests(task_id))
            with self._lock:
                said = self._user_said.setdefault(task_id, found)
        with self._lock:
            if digest in said:
                return False
            said.add(digest)
            return True

    def _unsay(self, task_id: str, content: Any) -> None:
        """Forget that `content` was said in `task_id` (its message was refused, not recorded)."""
        with self._lock:
            said = self._user_said.get(task_id)
            if said is not None:
                said.discard(canonical_digest(content))

    def _plan(self, message: Behavior) -> None:
        """Run the planner on the task's first user message and record its grant; never
        raises (a planner that fails grants nothing, and the layer says why)."""
        tid = message.task_id
        try:
            layers = self._grant_index(tid).layers
            if not any(x.pending and x.source == "planner" for x in layers):
                return  # planned already, or the task was started before the planner
            request = "\n".join(iter_strings(message.input))
            layer = _planned(self.planner, request)
            self._record_grant(tid, [layer])
        except Exception as exc:  # the planner layer stays pending: nothing is granted
            report_internal_error(exc, "capabilities: recording the planner's grant")

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
        grant: Any = None,
    ) -> str:
        """Record task.start and return the task id (for frameworks with separate callbacks;
        does not change the current task). Raises BlockedError when a policy blocks the task
        itself (nothing is recorded then), ValueError for a task id already started, and
        GrantError for an invalid `grant` (the task's capability grant).
        """
        return self._open(self._start_behavior(task_id, name, input, properties, grant))

    async def astart_task(
        self,
        task_id: str | None = None,
        *,
        name: str = "task",
        input: Any = None,
        properties: Any = None,
        grant: Any = None,
    ) -> str:
        """`start_task` for async code."""
        start = self._start_behavior(task_id, name, input, properties, grant)
        return await self._run(self._open, start)

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

    def _close(
        self, task_id: str, error: BaseException | None, output: Any, wait: bool = True
    ) -> None:
        if self.runner.engine.task_state(task_id) == "ended":
            self._forget(task_id)
            return
        closing = self._closing(task_id, error, output)
        self.runner.end_task(task_id, closing, wait=None if wait else 0)
        self._forget(task_id)

    def _forget(self, task_id: str) -> None:
        with self._lock:
            self._names.pop(task_id, None)
            self._user_said.pop(task_id, None)
            for key in [k for k in self._approvals if k[0] == task_id]:
                del self._approvals[key]

    def end_task(
        self,
        task_id: str,
        error: BaseException | None = None,
        *,
        output: Any = None,
        wait: bool = True,
    ) -> None:
        """Record task.end (with `output`) or, given `error`, task.error; then forget the task.

        Steps still open are recorded as abandoned first. With `wait` (the default), waits
        up to exit_flush_seconds for the task's records to be committed; without it returns
        once they are recorded and queued (the writer starts on them at once), for code that
        must not stop for the store, such as a callback on an event loop. In sync durability
        they are committed before it returns either way. Ending an ended task (for instance
        one the idle sweeper closed) does nothing; refuses (ValueError) a task never started.
        """
        self._close(task_id, error, output, wait)

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
        agent_id = self.runner.agent_id
        step_name = step_name_from(name)
        action_id = new_id()
        if (input is None or type(input) is dict) and (
            properties is None or type(properties) is dict
        ):
            # Plain I-JSON dicts are validated and copied once; anything else is captured.
            try:
                if not properties:
                    return Behavior(
                        agent_id=agent_id,
                        task_id=tid,
                        kind=kind,  # type: ignore[arg-type]
                        verb=verb,  # type: ignore[arg-type]
                        step_name=step_name,
                        action_id=action_id,
                        input=input,
                    )
                return Behavior(
                    agent_id=agent_id,
                    task_id=tid,
                    kind=kind,  # type: ignore[arg-type]
                    verb=verb,  # type: ignore[arg-type]
                    step_name=step_name,
                    action_id=action_id,
                    input=input,
                    properties=properties,
                )
            except (ValueError, RecursionError):
                pass
        fields: dict[str, Any] = {
            "agent_id": agent_id,
            "task_id": tid,
            "kind": kind,
            "verb": verb,
            "step_name": step_name,
            "action_id": action_id,
        }
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
        result = self._decide(b)
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
        result = await self._adecide(b)
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
        from charter._runtime.approval import Approval, ApprovalRequest

        request = step if isinstance(step, ApprovalRequest) else ApprovalRequest(step, (), "")
        gate = self._record_gate(task_id, request, Approval(bool(approved), by, why))
        with self._lock:
            self._approvals.setdefault(_approval_key(task_id, request.behavior), []).append(gate[1])
        return gate[0]

    def _record_gate(
        self, task_id: str, request: ApprovalRequest, approval: Approval
    ) -> tuple[Behavior, _Gate]:
        from charter._runtime.approval import gate_record

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

    def _flow(self, b: Behavior, first: EvalResult | None = None) -> _Flow:
        """The decision flow of `b`; `first` is its evaluation when the caller made it."""
        result: EvalResult = (
            first if first is not None else (yield _Call(self.runner.evaluate, (b,)))
        )
        if result.decision is _ASK:
            gate = self._take_approval(b)
            if gate is None:
                from charter._runtime.approval import ApprovalRequest

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
            if result.decision is _ASK:
                # One approval round per step: the approval just given authorises this run.
                result = yield _Call(self.runner.authorize, (b, result))
        return self._concluded(b, result)

    def _decide(self, b: Behavior, pause: bool = False) -> EvalResult | ApprovalRequest:
        """`b`'s decision flow driven to its end (see `_drive`). A step nothing asks about
        (nearly every one) is concluded without the flow's generator: it would only hand the
        evaluation back."""
        result = self.runner.evaluate(b)
        if result.decision is _ASK:
            return self._drive(self._flow(b, result), pause)
        return self._concluded(b, result)

    async def _adecide(self, b: Behavior, pause: bool = False) -> EvalResult | ApprovalRequest:
        """`_decide` for async code: in sync durability the evaluation (which commits the
        intent) runs off the event loop, as every store write of the flow does."""
        if self.runner.settings.audit_durability == "sync":
            return await self._adrive(self._flow(b), pause)
        result = self.runner.evaluate(b)
        if result.decision is _ASK:
            return await self._adrive(self._flow(b, result), pause)
        return self._concluded(b, result)

    def _concluded(self, b: Behavior, result: EvalResult) -> EvalResult:
        """`result` once no approval is pending: raises BlockedError for a block, warns for
        a warn, reports an incident for what monitor mode or fail_mode open let through."""
        if result.decision is _BLOCK:
            raise BlockedError(_line(result.reason), result)
        if result.decision is _WARN:
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
        from charter._runtime.approval import Approval

        self.approvals_asked += 1
        try:
            answer = self.approver(request)
            if _awaitable(answer):
                close = getattr(answer, "close", None)  # an unawaited coroutine would warn
                if callable(close):
                    close()
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
                if _awaitable(answer):
                    answer = await answer
            return _checked(answer)
        except Exception as exc:
            return self._approver_failed(exc)

    def _approver_failed(self, exc: Exception) -> Approval:
        from charter._runtime.approval import Approval

        charter_logger().error("charter: the approver raised; the step is denied", exc_info=exc)
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
        log_debug("charter warning: task %s step %r: %s", b.task_id, b.step_name, result.reason)
        if not first:
            return
        # Imported here: a process whose steps warn on nothing (a hook call) never loads it.
        import warnings

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
        charter_logger().warning(
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


# inspect is imported where a function is asked about, not with this module: it imports ast,
# dis and tokenize, which a process that lives for one decision (a hook call) never needs.
def _is_async(fn: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004
    )


def _awaitable(value: Any) -> bool:
    import inspect

    return inspect.isawaitable(value)


def _checked(answer: Any) -> Approval:
    from charter._runtime.approval import Approval

    if isinstance(answer, Approval):
        return answer
    raise TypeError(f"the approver returned {type(answer).__name__}, not an Approval")


def as_grant(value: Any, where: str) -> Grant:
    """A grant given in code: a Grant, a mapping, JSON text or a YAML/JSON file path.
    Raises GrantError naming `where` and every problem."""
    from charter._policy.capabilities import Grant, GrantError

    if isinstance(value, Grant):
        return value
    if isinstance(value, Mapping):
        return Grant.from_document(value, where.rstrip("="))
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str) and value.strip():
        text = value.strip()
        if text.startswith("{"):
            return Grant.from_document(text, where.rstrip("="))
        return load_grant(text)
    raise GrantError(
        [f"{where} must be a grant: a mapping with tools, JSON text or a file, not {value!r:.60}"]
    )


def _is_user_message(b: Behavior) -> bool:
    message = b.properties.get("message")
    return (
        b.kind is _MESSAGE
        and b.verb is _GET
        and isinstance(message, dict)
        and message.get("role") == "user"
    )


def _planned(planner: Any, request: str) -> GrantLayer:
    """The planner's layer for `request`: its grant, or an empty one that says why."""
    from charter._policy.capabilities import Grant, GrantLayer

    try:
        answer = planner(request)
        if _awaitable(answer):
            close = getattr(answer, "close", None)
            if callable(close):
                close()
            raise TypeError("it returned an awaitable; a planner is called synchronously")
        if not isinstance(answer, (Grant, Mapping)):
            raise TypeError(f"it returned {type(answer).__name__}, not a grant mapping")
        return GrantLayer("planner", Grant.from_document(answer, "planner grant"))
    except Exception as exc:
        charter_logger().warning("charter: the capability planner failed: %s", exc)
        why = f"the planner failed, so it grants nothing: {type(exc).__name__}: {exc}"
        return GrantLayer("planner", Grant.empty(), why[:1000])
