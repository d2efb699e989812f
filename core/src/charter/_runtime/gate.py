"""The gate every integration drives: decide, record, task lifecycle, approvals, claims.

Three rules live here and nowhere else, the same for every framework:

- **Deciding.** `Gate.decide` never raises. It answers `Allowed` (with the handle to settle),
  `Blocked` (already recorded by the gate when a policy or a person refused) or `Pending`
  (a policy asks and the integration pauses its framework). When Charter cannot decide (the
  gate itself failed, the step could not be built), the step is blocked with the reason
  under ``fail_mode="closed"`` (the default); under ``"open"`` it is allowed ungoverned
  (`Allowed.handle` is None, nothing is recorded for it) and the fault is reported. No
  policy set, or an engine that raised, is applied the same way inside the runner.
- **Recording.** Outcomes and task ends never raise into the agent in ``buffered``
  durability: a failure is reported through `charter.report_internal_error` (counted,
  visible in status, a test failure under `charter.testing`). In ``sync`` durability an
  outcome that could not be stored raises `charter.AuditError` (after being reported): the
  user asked for a trail that is never behind the agent.
- **Claims.** A step is governed once: the integration that gated it claims it (a context
  variable, and the framework's inherited run metadata under `CLAIM_KEY`) and every other
  integration on the same Governor skips it and puts its own nested steps in that task.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Iterable, Mapping, Sequence

from charter._engine.engine import Decision as EngineDecision
from charter._engine.engine import EvalResult, PolicyResult
from charter._model.behavior import CLOSING_KINDS, Behavior
from charter._model.errors import AuditError, BlockedError
from charter._model.frozen import Frozen, slot_setters
from charter._model.identifiers import step_name_from, task_id_from
from charter._model.paths import iter_strings
from charter._policy.policy import Severity
from charter._runtime.governor import Governor, StepHandle
from charter._runtime.internal import log_debug, report_internal_error
from charter._runtime.runner import Runner
from charter._runtime.settings import Settings
from charter._runtime.steps import Step, message_step, tool_step

TYPE_CHECKING = False
if TYPE_CHECKING:
    from contextlib import AbstractContextManager
    from typing import Any, Literal

    # The approval machinery loads with the first step a policy wants approved.
    from charter._runtime.approval import ApprovalRequest

__all__ = [
    "CLAIM_KEY",
    "Allowed",
    "Answer",
    "Blocked",
    "Claim",
    "Gate",
    "Pending",
    "RunNotFinishedError",
    "approval_request",
    "claim",
    "current_claim",
    "inherited_claim",
    "read_answers",
    "run_task_id",
]


CLAIM_KEY = "charter_claim"
_REASON_MAX = 300
# Distinct (kind, verb, step name) answers `pending` remembers before starting over.
_ASK_MEMORY = 4096


def _line(text: str) -> str:
    return " ".join(str(text).split())


class RunNotFinishedError(RuntimeError):
    """Recorded as the task.error of a run that never reached its end (superseded by a new
    run of its thread, or abandoned when its framework stopped)."""


# -- decisions ----------------------------------------------------------------------------


class Allowed(Frozen):
    """The step may run. Settle `handle` once with `Gate.complete`, `fail` or `abandon`.

    `handle` is None only under ``fail_mode="open"`` when Charter could not decide: the step
    runs ungoverned and the Gate's settle calls do nothing for it. `reason` says why it was
    allowed (a warning, monitor mode, fail-open), `result` is the evaluation when there was one.
    """

    __slots__ = ("handle", "reason", "result")
    handle: StepHandle | None
    reason: str
    result: EvalResult | None

    def __init__(
        self,
        handle: StepHandle | None,
        reason: str,
        result: EvalResult | None,
    ) -> None:
        _put_handle(self, handle)
        _put_reason(self, reason)
        _put_result(self, result)


_put_handle, _put_reason, _put_result = slot_setters(Allowed, "handle", "reason", "result")


class Blocked(Frozen):
    """The step must not run. `reason` is one line for the user or the model.

    `recorded` is True when the gate recorded the blocked step (a policy or a person refused
    it); False when Charter could not decide and nothing could be recorded.
    """

    __slots__ = ("reason", "result", "step")
    step: Step
    reason: str
    result: EvalResult | None

    def __init__(
        self,
        step: Step,
        reason: str,
        result: EvalResult | None,
    ) -> None:
        put = object.__setattr__
        put(self, "step", step)
        put(self, "reason", reason)
        put(self, "result", result)

    @property
    def recorded(self) -> bool:
        return self.result is not None and self.result.recorded_seq is not None

    def error(self, cls: type[BlockedError] = BlockedError) -> BlockedError:
        """The refusal as the exception to raise where the framework needs one: a
        `charter.BlockedError` (a PermissionError: retry machinery does not retry it), or
        the integration's own subclass `cls`."""
        return cls(self.reason, self.result, self.step.name, self.step.kind)


class Pending(Frozen):
    """A policy asks: the step waits for a person. Nothing is recorded until the answer is.

    `request` is bound to the SHA-256 of the step's canonical input (`digest`); `call_id` is
    the framework's tool-call id when there is one (it makes the action editable).
    """

    __slots__ = ("call_id", "request", "step", "task_id")
    step: Step
    task_id: str
    request: ApprovalRequest
    call_id: str | None

    def __init__(
        self,
        step: Step,
        task_id: str,
        request: ApprovalRequest,
        call_id: str | None = None,
    ) -> None:
        put = object.__setattr__
        put(self, "step", step)
        put(self, "task_id", task_id)
        put(self, "request", request)
        put(self, "call_id", call_id)

    @property
    def digest(self) -> str:
        return self.request.digest

    def action(self) -> dict[str, Any]:
        """This request as one entry of ``action_requests`` (HumanInTheLoopMiddleware's
        shape: name, args, description) with Charter's facts under ``charter``."""
        return {
            "name": self.step.name,
            "args": dict(self.step.input),
            "description": self.request.reason,
            "charter": {
                "kind": self.step.kind,
                "verb": self.step.verb,
                "policies": list(self.request.policies),
                "tool_call_id": self.call_id,
                "digest": self.digest,
            },
        }


Decision = Allowed | Blocked | Pending


# -- approval requests and answers --------------------------------------------------------


class Answer(Frozen):
    """A reviewer's decision on one pending step: `kind` is approve, edit or reject, `by`
    who answered, `why` their reason, `edited` the replacement (name, args) of an edit."""

    __slots__ = ("by", "edited", "kind", "why")
    kind: Literal["approve", "edit", "reject"]
    by: str
    why: str
    edited: tuple[str, dict[str, Any]] | None

    def __init__(
        self,
        kind: Literal["approve", "edit", "reject"],
        by: str,
        why: str,
        edited: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        put = object.__setattr__
        put(self, "kind", kind)
        put(self, "by", by)
        put(self, "why", why)
        put(self, "edited", edited)


def approval_request(pending: Sequence[Pending]) -> dict[str, Any]:
    """One request for every pending step of a turn, in HumanInTheLoopMiddleware's shape:
    ``{"action_requests": [...], "review_configs": [...]}``; edits are offered for tool
    calls with a call id. Refuses (ValueError) an empty list."""
    if not pending:
        raise ValueError("approval_request needs at least one pending step")
    return {
        "action_requests": [p.action() for p in pending],
        "review_configs": [
            {
                "action_name": p.step.name,
                "allowed_decisions": ["approve", "edit", "reject"]
                if p.call_id is not None
                else ["approve", "reject"],
            }
            for p in pending
        ],
    }


def read_answers(
    raw: Any, pending: Sequence[Pending], *, default_by: str = "human"
) -> list[Answer]:
    """Read a resume value: ``{"decisions": [d, ...]}`` with one decision per pending step,
    in order (a single bare decision is accepted for a single step). Each decision is
    ``{"type": "approve"|"reject"|"edit", "message"?, "by"?, "edited_action"?: {name, args}}``.

    Never raises: anything unreadable, a count that does not match, or an edit of a step
    that is not editable becomes a rejection saying why; an approval nobody can be sure was
    given is not one.
    """
    decisions: Any
    if isinstance(raw, Mapping) and "decisions" in raw:
        decisions = raw.get("decisions")
    elif len(pending) == 1:
        decisions = [raw]
    else:
        decisions = raw
    if not isinstance(decisions, list) or len(decisions) != len(pending):
        problem = f"expected {len(pending)} decision(s), got {_describe(decisions)}"
        return [_unreadable(problem) for _ in pending]
    return [_read_one(d, p, default_by) for d, p in zip(decisions, pending, strict=True)]


def _read_one(decision: Any, pending: Pending, default_by: str) -> Answer:
    if not isinstance(decision, Mapping):
        return _unreadable(f"a decision is a mapping with a type, got {_describe(decision)}")
    by = decision.get("by")
    by = by if isinstance(by, str) and by.strip() else default_by
    why = decision.get("message")
    why = why if isinstance(why, str) else ""
    kind = decision.get("type")
    editable = pending.call_id is not None
    if kind == "approve":
        return Answer("approve", by, why or "approved")
    if kind == "reject":
        return Answer("reject", by, why or "rejected")
    if kind == "edit" and editable:
        action = decision.get("edited_action")
        if not isinstance(action, Mapping):
            return _unreadable("an edit needs edited_action: {name, args}")
        name, args = action.get("name"), action.get("args")
        if not isinstance(name, str) or not name or not isinstance(args, Mapping):
            return _unreadable("an edit's edited_action needs a name and an args mapping")
        why = why or f"replaced by the reviewer's edit ({name})"
        return Answer("edit", by, why, (name, {str(k): v for k, v in args.items()}))
    allowed = "approve, edit or reject" if editable else "approve or reject"
    return _unreadable(f"decision type {kind!r} is not one of {allowed} for {pending.step.name!r}")


def _unreadable(problem: str) -> Answer:
    return Answer("reject", "charter", f"the approval answer could not be read ({problem})")


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# -- claims: one record per step ----------------------------------------------------------


class Claim:
    """One step gated by an integration: `kind` is model, tool or node; a tool claim names
    its call id and tool. `governor` and `task_id` let another integration on the same
    Governor put the steps it does record (nested ones) into this task."""

    __slots__ = ("_lock", "_taken", "call_id", "governor", "kind", "name", "task_id")
    kind: str
    call_id: str | None
    name: str | None
    governor: Governor
    task_id: str
    _taken: bool
    _lock: threading.Lock

    def __init__(
        self, kind: str, call_id: str | None, name: str | None, governor: Governor, task_id: str
    ) -> None:
        self.kind = kind
        self.call_id = call_id
        self.name = name
        self.governor = governor
        self.task_id = task_id
        self._taken = False
        self._lock = threading.Lock()

    def covers(self, kind: str, call_id: str | None, name: str | None = None) -> bool:
        """True when this claim is for a `kind` run with `call_id` (or, when the framework
        gives no call id, with `name`)."""
        if kind != self.kind:
            return False
        if kind == "tool":
            return call_id == self.call_id if call_id is not None else name == self.name
        return True

    def take(self, kind: str, call_id: str | None, name: str | None = None) -> bool:
        """True (once) when this claim covers the run: its first start event is the
        claimed step; nested runs of the same kind are not claimed."""
        if not self.covers(kind, call_id, name):
            return False
        with self._lock:
            if self._taken:
                return False
            self._taken = True
            return True

    def metadata(self) -> dict[str, Any]:
        """The claim as run metadata for frameworks that pass metadata to child runs."""
        return {
            CLAIM_KEY: {
                "kind": self.kind,
                "call_id": self.call_id,
                "name": self.name,
                "task_id": self.task_id,
                "governor": id(self.governor),
            }
        }


def inherited_claim(metadata: Mapping[str, Any] | None, governor: Governor) -> Claim | None:
    """The claim a framework carried to a run in its inherited run metadata (under
    `CLAIM_KEY`, from `Claim.metadata`) when it was made with `governor`; None otherwise.

    For frameworks that hand child runs their parent's metadata across boundaries a context
    variable does not cross. The claim returned is a copy: `covers` tells whether it is for
    the run at hand (a metadata claim is inherited by every child, so it is never "taken").
    """
    found = metadata.get(CLAIM_KEY) if isinstance(metadata, Mapping) else None
    if not isinstance(found, Mapping) or found.get("governor") != id(governor):
        return None
    task_id, kind = found.get("task_id"), found.get("kind")
    if not isinstance(task_id, str) or not isinstance(kind, str):
        return None
    call_id, name = found.get("call_id"), found.get("name")
    return Claim(
        kind,
        call_id if isinstance(call_id, str) else None,
        name if isinstance(name, str) else None,
        governor,
        task_id,
    )


_current: contextvars.ContextVar[Claim | None] = contextvars.ContextVar(
    "charter.claim", default=None
)


def current_claim() -> Claim | None:
    """The innermost claim of this context (thread or asyncio task), or None."""
    return _current.get()


class _Holding:
    """What `claim` returns. A class rather than a generator-based context manager: it
    runs twice per governed step in some integrations, and opening a gate then does not
    import contextlib (a hook call opens one)."""

    __slots__ = ("_claimed", "_token")

    def __init__(self, claimed: Claim) -> None:
        self._claimed = claimed
        self._token: contextvars.Token[Claim | None] | None = None

    def __enter__(self) -> Claim:
        self._token = _current.set(self._claimed)
        return self._claimed

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        token, self._token = self._token, None
        if token is None:
            return
        try:
            _current.reset(token)
        except ValueError:  # reset from another context (a generator finalised elsewhere)
            _current.set(None)


def claim(claimed: Claim) -> AbstractContextManager[Claim]:
    """A context manager that holds `claimed` (``with claim(c) as held``: `held` is `c`)
    while the claimed step runs, in this context (thread or asyncio task)."""
    return _Holding(claimed)


def run_task_id(thread_id: Any, run: int) -> str:
    """The task id of a thread's `run`-th run (1-based): ``task_id_from(thread_id)`` for the
    first, ``<that>:<run>`` after, so every run of a thread is its own task and an ended
    task id is never reused. Refuses (ValueError) a run below 1."""
    if run < 1:
        raise ValueError(f"runs are numbered from 1, got {run}")
    base = task_id_from(str(thread_id))
    return base if run == 1 else task_id_from(f"{base}:{run}")


# -- the gate -----------------------------------------------------------------------------


class Gate:
    """A Governor seen through the integration contract, for one framework.

    Build from an existing `governor`, or from the Governor's setting keywords (and an
    optional `approver`, and the Governor's capability `grant` and `planner`, which every
    integration entry point passes on); refuses (ValueError) both at once. Refuses what
    `charter.Governor` refuses (unknown settings, bad values) and a template file that
    cannot be loaded.
    """

    def __init__(
        self,
        framework: str,
        *,
        governor: Governor | None = None,
        approver: Any = None,
        **settings: Any,
    ) -> None:
        if governor is not None:
            if settings or approver is not None:
                names = ", ".join([*settings, *(["approver"] if approver is not None else [])])
                raise ValueError(
                    f"pass either governor= or setting keywords, not both (got {names}); "
                    "the governor has its settings and approver already"
                )
            self._bind(framework, governor, owned=False)
        else:
            self._bind(framework, Governor(approver=approver, **settings), owned=True)

    def _bind(
        self, framework: str, governor: Governor, *, owned: bool, templates: Any = None
    ) -> None:
        self.governor = governor
        self.framework = framework
        self._snapshots: Any = None
        # (engine.version, answers): `_may_ask`'s memory for the policy set loaded now.
        self._asking: tuple[int, dict[tuple[Any, Any, str], bool]] = (-1, {})
        try:
            self._templates: Any = (
                templates
                if templates is not None
                else _load_templates(governor.runner.settings.template_location)
            )
        except BaseException:
            if owned:  # a refused template file must not leave a runner (and its threads)
                governor.close(0)
            raise

    @property
    def agent_id(self) -> str:
        return self.governor.runner.agent_id

    @property
    def fail_mode(self) -> str:
        return self.governor.runner.settings.fail_mode

    @property
    def sync_durability(self) -> bool:
        return self.governor.runner.settings.audit_durability == "sync"

    @property
    def asks(self) -> bool:
        """Whether a loaded policy can ask at all (``action: ask``). When False, `pending`
        returns None for every step, so an integration may skip building the steps of a
        turn's review. It reads the policies as last loaded (read it each time: a reload
        changes it); a step skipped this way is still judged by `decide` when it runs, and
        a policy that asks by then pauses it there."""
        try:
            return self.governor.runner.engine.asks()
        except Exception:  # pending decides; this only saves work
            return True

    # -- steps --------------------------------------------------------------------------------

    def tool_step(
        self,
        name: str,
        args: Mapping[str, Any] | None,
        *,
        call_id: str | None = None,
        description: str | None = None,
        ids: Mapping[str, Any] | None = None,
        template: str | None = None,
        trust: str | None = None,
        field_trust: Mapping[str, str] | None = None,
    ) -> Step:
        """A tool call mapped through the templates (`template` names the one to use,
        default this framework's; names no template knows are ``step.unknown``); `trust`
        and `field_trust` replace the templates' output levels (see `tool_step`)."""
        resolved = _resolve(self._templates, template or self.framework, name, args)
        kind, verb, properties = resolved.kind, resolved.verb, resolved.properties
        return tool_step(
            self.framework,
            name,
            args,
            kind=kind,
            verb=verb,
            properties=properties,
            call_id=call_id,
            description=description,
            ids=ids,
            trust=trust,
            field_trust=field_trust,
        )

    # -- deciding -----------------------------------------------------------------------------

    def decide(
        self, step: Step, task_id: str, *, pause: bool = False, call_id: str | None = None
    ) -> Decision:
        """Judge `step` in task `task_id` before it runs; never raises.

        With `pause` a policy that asks returns `Pending` (record the answer with `answer`
        and decide again); without it the Governor's approver answers at once. A recorded
        answer for this step and input is used (once) instead of asking again.
        """
        try:
            b = self._behavior(step, task_id)
            got = self.governor._decide(b, pause)
        except BlockedError as exc:
            return Blocked(step, exc.reason, exc.result)
        except Exception as exc:
            return self.undecided(step, exc)
        return self._decided(step, task_id, b, got, call_id)

    async def adecide(
        self, step: Step, task_id: str, *, pause: bool = False, call_id: str | None = None
    ) -> Decision:
        """`decide` for async code (async approvers are awaited, sync ones run in a thread)."""
        try:
            b = self._behavior(step, task_id)
            got = await self.governor._adecide(b, pause)
        except BlockedError as exc:
            return Blocked(step, exc.reason, exc.result)
        except Exception as exc:
            return self.undecided(step, exc)
        return self._decided(step, task_id, b, got, call_id)

    def pending(self, step: Step, task_id: str, *, call_id: str | None = None) -> Pending | None:
        """The approval `step` would need if it ran now: `Pending` when a policy asks and no
        answer for this step and input is on record, else None. Records and registers
        nothing, so a framework can collect every approval a turn needs into one request
        before any call runs; the step is judged for real by `decide` when it runs. Never
        raises (None on error: `decide` then fails closed)."""
        try:
            runner = self.governor.runner
            if not self._may_ask(runner, step, task_id):
                return None
            b = self._behavior(step, task_id)
            if self.governor._has_approval(b):
                return None
            result = runner.preview(b)
            if result.decision is not EngineDecision.ASK:
                return None
            from charter._runtime.approval import ApprovalRequest

            request = ApprovalRequest(b, result.violations, result.reason, result)
        except Exception as exc:
            log_debug("charter: no approval preview for %r: %s", step.name, exc)
            return None
        decided = self._decided(step, task_id, b, request, call_id)
        return decided if isinstance(decided, Pending) else None

    def _may_ask(self, runner: Runner, step: Step, task_id: str) -> bool:
        # Selectors read kind, verb and name only: a probe without payloads is enough to
        # skip the full build and the preview for the (many) steps nothing asks about. Its
        # answer depends on those three and the policy set alone, so it is remembered per
        # set; only a probe that was built (kind and verb valid) is remembered.
        engine = runner.engine
        version = engine.version
        seen, answers = self._asking
        if seen != version:
            answers = {}
            self._asking = (version, answers)
        step_name = step_name_from(step.name)
        key = (step.kind, step.verb, step_name)
        found = answers.get(key)
        if found is None:
            probe = Behavior(
                agent_id=self.agent_id,
                task_id=task_id,
                kind=step.kind,  # type: ignore[arg-type]
                verb=step.verb,  # type: ignore[arg-type]
                step_name=step_name,
            )
            found = engine.may_ask(probe)
            if len(answers) >= _ASK_MEMORY:
                answers.clear()
            answers[key] = found
        return found

    def _behavior(self, step: Step, task_id: str) -> Behavior:
        return self.governor.build_step(
            step.kind,
            step.verb,
            name=step.name,
            input=step.input,
            properties=step.properties,
            task_id=task_id,
        )

    def _decided(
        self,
        step: Step,
        task_id: str,
        b: Behavior,
        got: EvalResult | ApprovalRequest,
        call_id: str | None,
    ) -> Decision:
        if isinstance(got, EvalResult):
            return Allowed(StepHandle(self.governor, b, got), got.reason, got)
        cid = call_id
        if cid is None:
            tool = step.properties.get("tool")
            cid = tool.get("call_id") if isinstance(tool, Mapping) else None
        return Pending(step, task_id, got, cid if isinstance(cid, str) else None)

    def undecided(self, step: Step, exc: BaseException) -> Allowed | Blocked:
        """The decision on `step` when Charter could not judge it because of `exc` (the one
        fail-mode rule; see the module docstring). For integrations whose own translation
        failed before `decide` could be called. Reports `exc` as an internal error."""
        why = (
            f"Charter could not judge {step.kind} {step.name!r} "
            f"({type(exc).__name__}: {_line(str(exc))[:_REASON_MAX]})"
        )
        report_internal_error(exc, f"{self.framework}: deciding {step.name!r}")
        if self.fail_mode == "open":
            return Allowed(None, f"allowed: {why}; fail_mode is open", None)
        return Blocked(step, f"blocked: {why}; governance fails closed", None)

    # -- approvals ----------------------------------------------------------------------------

    def answer(self, pending: Pending, answer: Answer) -> Step:
        """Record a reviewer's answer on `pending` as a step.gate bound to its input; returns
        the step to decide again: the same one, or the reviewer's edit. An edit denies the
        original (recorded as blocked: it never runs) and is a new call, judged from scratch
        before it runs (another tool's policy may block it or ask about it again).

        Raises what recording raises (an approval that is not on record must not let the
        step run; the next `decide` then asks again or fails closed).
        """
        gov = self.governor
        if answer.kind == "edit" and answer.edited is not None:
            gov.record_approval(pending.task_id, pending.request, False, answer.by, answer.why)
            # The replaced call never runs: recorded as blocked by the reviewer's answer.
            replaced = self.decide(pending.step, pending.task_id, pause=True)
            if isinstance(replaced, Allowed):  # no policy asks any more: still never runs
                self.abandon(replaced.handle)
            edited = self.edit(pending, answer)
            assert edited is not None
            return edited
        approved = answer.kind == "approve"
        gov.record_approval(pending.task_id, pending.request, approved, answer.by, answer.why)
        return pending.step

    def edit(self, pending: Pending, answer: Answer) -> Step | None:
        """The step a reviewer's edit stands for, as it will be judged (None: no edit),
        without recording anything: the edited tool and arguments mapped through the
        templates afresh (properties such as ``target.path`` come from the new arguments),
        with the call id and framework ids of the original."""
        if answer.kind != "edit" or answer.edited is None:
            return None
        name, args = answer.edited
        ids = dict(pending.step.properties.get("framework") or {})
        ids.pop("name", None)
        return self.tool_step(name, args, call_id=pending.call_id, ids=ids)

    def user_messages(
        self, task_id: str, contents: Iterable[Any], *, ids: Mapping[str, Any] | None = None
    ) -> Blocked | None:
        """Record what the user said to start or continue task `task_id`: each of `contents`
        (the content of one message the user wrote, text or content parts) as a
        ``step.message GET`` with role user, the content `value_provenance` reads at trust
        level ``user`` and the request a planner (`charter.Governor`'s ``planner=``) reads.

        Pass only the person's own words: never a model's output, a tool's result or a
        framework's prompt. A content this task recorded as a user message already (by any
        integration on the same Governor) is not recorded again; an empty one is skipped.
        Returns `Blocked` when a policy refused a message (refuse the run with it), None when
        all are recorded. Never raises except `charter.AuditError` under sync durability.
        """
        for content in contents:
            if not any(s.strip() for s in iter_strings(content)):
                continue
            step = message_step(
                self.framework, "GET", "user", content, name="user_message", ids=ids
            )
            said = step.input.get("content")
            if not self.governor._first_said(task_id, said):
                continue
            decision = self.decide(step, task_id)
            if isinstance(decision, Allowed):
                self.complete(decision.handle, {})
                continue
            self.governor._unsay(task_id, said)
            if isinstance(decision, Blocked):
                return decision
            return Blocked(step, "blocked: a user message waits for an approval", None)
        return None

    # -- recording ----------------------------------------------------------------------------

    def complete(
        self, handle: StepHandle | None, output: Any, *, properties: Mapping[str, Any] | None = None
    ) -> None:
        """Record success with `output`; `properties` adds outcome-only facts (see
        `model_outcome`). Follows the recording rule; nothing for a None handle."""
        if handle is not None:
            self._recorded(
                "the outcome of",
                handle.behavior.step_name,
                handle.complete,
                output,
                properties=properties if properties else None,  # captured (copied) when recorded
            )

    def fail(self, handle: StepHandle | None, exc: BaseException) -> None:
        """Record failure (the error's type and message). Follows the recording rule."""
        if handle is not None:
            self._recorded("the failure of", handle.behavior.step_name, handle.fail, exc)

    def abandon(self, handle: StepHandle | None) -> None:
        """Record that the step did not run to an end. Follows the recording rule."""
        if handle is not None and handle.settled is None:
            self._recorded("the abandonment of", handle.behavior.step_name, handle.abandon)

    async def acomplete(
        self, handle: StepHandle | None, output: Any, *, properties: Mapping[str, Any] | None = None
    ) -> None:
        """`complete` for async code (store I/O off the event loop in sync durability)."""
        await self._off_loop(self.complete, handle, output, properties=properties)

    async def afail(self, handle: StepHandle | None, exc: BaseException) -> None:
        """`fail` for async code."""
        await self._off_loop(self.fail, handle, exc)

    async def aabandon(self, handle: StepHandle | None) -> None:
        """`abandon` for async code."""
        await self._off_loop(self.abandon, handle)

    def _recorded(self, what: str, name: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        # `what` and `name` are joined only for a report: a recording that succeeds (every
        # step's) does not pay for the text.
        try:
            fn(*args, **kwargs)
        except Exception as exc:
            report_internal_error(exc, f"{self.framework}: {what} {name!r}")
            if isinstance(exc, AuditError) and self.sync_durability:
                raise

    async def _off_loop(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        if self.sync_durability:
            import asyncio  # deferred: one-shot hook processes never need it

            await asyncio.to_thread(fn, *args, **kwargs)
        else:
            fn(*args, **kwargs)

    # -- tasks --------------------------------------------------------------------------------

    def start_task(
        self,
        task_id: str | None,
        name: str,
        input: Any = None,
        properties: Any = None,
        *,
        grant: Any = None,
    ) -> str | Blocked:
        """Record task.start; returns the task id, or `Blocked` when the task may not start
        (a policy on task.start; Charter failing under fail_mode closed; an invalid
        `grant`, the task's own capability grant, intersected with the Governor's)."""
        try:
            return self.governor.start_task(
                task_id, name=name, input=input, properties=properties, grant=grant
            )
        except BlockedError as exc:
            return Blocked(Step("task.start", None, name), exc.reason, exc.result)
        except Exception as exc:
            decision = self.undecided(Step("task.start", None, name), exc)
            if isinstance(decision, Blocked):
                return decision
            raise

    def end_task(
        self,
        task_id: str,
        error: BaseException | None = None,
        output: Any = None,
        *,
        wait: bool = True,
    ) -> None:
        """Record task.end (task.error given `error`); steps still open are recorded as
        abandoned first. Follows the recording rule. `wait=False` returns without waiting for
        the store to commit them (for a callback on an event loop; see
        `charter.Governor.end_task`)."""
        self._recorded(
            "the end of task",
            task_id,
            self.governor.end_task,
            task_id,
            error,
            output=output,
            wait=wait,
        )

    async def aend_task(
        self, task_id: str, error: BaseException | None = None, output: Any = None
    ) -> None:
        """`end_task` for async code (waits for the store off the event loop)."""
        import asyncio  # deferred: one-shot hook processes never need it

        await asyncio.to_thread(self.end_task, task_id, error, output)

    def run_task_id(self, thread_id: Any, run: int) -> str:
        """The task id of a thread's `run`-th run (`run_task_id`), made unique with a random
        suffix when this process already knows that id (a thread reused without a
        checkpointer keeps no run count)."""
        task_id = run_task_id(thread_id, run)
        if self.task_state(task_id) != "unknown":
            import uuid

            task_id = task_id_from(f"{task_id}:{uuid.uuid4().hex[:12]}")
        return task_id

    def supersede(self, task_id: str, why: str = "a new run of its thread started") -> None:
        """Close a run that never reached its end: task.error with RunNotFinishedError."""
        if self.task_state(task_id) in ("open", "closing"):
            self.end_task(task_id, RunNotFinishedError(f"the run did not finish: {why}"))

    def task_state(self, task_id: str) -> str:
        """open, closing, ended or unknown (to this process)."""
        return self.governor.runner.engine.task_state(task_id)

    def resume_task(self, task_id: str) -> str:
        """Make `task_id` usable here when it is open in the audit store but unknown to this
        process (a run paused in one process and resumed in another). Returns the task's
        state afterwards; never raises (a task that cannot be restored stays unknown and its
        steps are blocked)."""
        try:
            state = self.task_state(task_id)
            if state != "unknown":
                return state
            runner = self.governor.runner
            store = runner.store
            if store is None:
                return state
            if self._snapshots is not None and getattr(store, "_reads_ijson", False) is True:
                restored = self._from_snapshot(task_id)
                if restored is not None:
                    return restored
            records = store.read_task(task_id, runner.agent_id)
            if not records:
                return state
            if records[-1].get("kind") in {k.value for k in CLOSING_KINDS}:
                return "ended"
            if getattr(store, "_reads_ijson", False) is True:
                runner._restore_stored(records)
            else:
                runner.restore_task(records)
            return self.task_state(task_id)
        except Exception as exc:
            log_debug("charter: task %r not restored: %s", task_id, exc)
            return "unknown"

    def _from_snapshot(self, task_id: str) -> str | None:
        """The task's state after restoring it from its snapshot, or None (no snapshot for
        the store's head, or one that does not load: the caller restores from the store)."""
        runner = self.governor.runner
        store = runner.store
        assert store is not None
        head = store.head(runner.agent_id, task_id)
        if head.seq == 0:
            return None
        found = self._snapshots.load(runner.agent_id, task_id, head.seq, head.hash)
        if found is None:
            return None
        try:
            runner._adopt_stored(found["history"], found["reserved"])
        except Exception as exc:
            log_debug("charter: snapshot of task %r not used: %s", task_id, exc)
            return None
        return self.task_state(task_id)

    def use_snapshots(
        self, root: str | os.PathLike[str], environ: Mapping[str, str] | None = None
    ) -> bool:
        """Restore tasks from, and save them to, the history snapshots of the project at
        `root` (see `save_snapshot`), authenticated with a key kept in the project's decision
        server folder outside it (``~/.charter/serve/<key>/snapshot.key``, created when
        missing; `environ` gives ``HOME``). Returns whether snapshots are in use: never
        without a home directory (the key would lie inside the project). `resume_task` then
        loads a task's history indexes from its snapshot when the store's chain head is the
        one the snapshot was saved at, reading its steps only when a rule needs them, and
        judges exactly as after a full restore; any other snapshot is ignored."""
        from charter._runtime.snapshot import project_snapshots

        self._snapshots = project_snapshots(root, environ, create=True)
        return self._snapshots is not None

    def save_snapshot(self, task_id: str) -> bool:
        """Save the history of open task `task_id` for the store's current chain head (see
        `use_snapshots`); returns whether it was saved. Nothing is saved when the chain holds
        records this process did not write since it restored the task, when a record was
        stored redacted (a restore from the store would judge from the redacted one), or when
        snapshots are not in use. Never raises."""
        snapshots = self._snapshots
        if snapshots is None:
            return False
        runner = self.governor.runner
        try:
            found = runner._export_stored(task_id)
            if found is None:
                return False
            seq, digest, reserved, history = found
            return bool(snapshots.save(runner.agent_id, task_id, seq, digest, reserved, history))
        except Exception as exc:
            log_debug("charter: task %r not saved: %s", task_id, exc)
            return False

    def resync_task(self, task_id: str) -> bool:
        """For a long-lived process sharing a chain with others (a decision server beside
        one-shot hooks, sync durability): when the store's head of `task_id` is not the
        record this process wrote last, another process appended to it, so this process's
        copy is dropped and the next `resume_task` restores it from the store. Returns
        whether it was dropped; never raises (a store that cannot answer drops it too)."""
        runner = self.governor.runner
        try:
            heads = runner.stored_head(task_id)
            if heads is None or heads[0] == heads[1]:
                return False
        except Exception as exc:
            log_debug("charter: task %r head unreadable: %s", task_id, exc)
        runner.forget_task(task_id)
        return True

    def reopen(self, intent: Behavior | Mapping[str, Any]) -> StepHandle:
        """The handle of an intent allowed in another process (Claude Code's PreToolUse and
        PostToolUse run in two), so its outcome is recorded here, paired with it; its
        ``meta["charter.eval"]`` travels on. The task must be known here (`resume_task`).
        Refuses what `Runner.restore_intent` refuses (an unknown task, a step that ran)."""
        b = intent if isinstance(intent, Behavior) else Behavior.from_dict(dict(intent))
        runner = self.governor.runner
        if b.action_id is None or runner.engine.open_intent(b.task_id, b.action_id) is None:
            runner.restore_intent(b)
        verdict = b.meta.get("charter.eval")
        reason = verdict.get("reason") if isinstance(verdict, Mapping) else None
        result = EvalResult(
            EngineDecision.ALLOW, 0.0, (), b.action_id, None, str(reason or "allowed")
        )
        return StepHandle(self.governor, b, result)

    # -- integrations that run one process per event (Claude Code hooks) ----------------------

    @classmethod
    def from_settings(
        cls,
        framework: str,
        settings: Settings,
        *,
        approver: Any = None,
        templates: Any = None,
    ) -> Gate:
        """A Gate on a new Governor built from a `charter.Settings` (for an integration that
        reads its configuration from its own sources: a command line, the environment).

        `templates` is a TemplateSet already loaded (for instance from a cache an
        integration keeps between processes); None loads the settings' template_location.
        The Governor owns its runner: ``gate.governor.close()`` closes it. Refuses what
        `charter.Runner` refuses and a template file that cannot be loaded.
        """
        governor = Governor(Runner(settings), approver=approver)
        governor._owns_runner = True
        gate = cls.__new__(cls)
        gate._bind(framework, governor, owned=True, templates=templates)
        return gate

    def store_health(self) -> dict[str, Any]:
        """The audit store's health, ``{"ok", "location", "detail"}``; never raises. Not ok
        when the store cannot be opened or does not answer (steps are still judged: an
        integration that needs the trail, e.g. to restore a task, refuses on its own)."""
        try:
            return self.governor.runner._writer.health()
        except Exception as exc:  # pragma: no cover - health() never raises
            return {"ok": False, "location": "?", "detail": str(exc)}

    def history(self, task_id: str) -> tuple[Behavior, ...]:
        """The recorded steps of `task_id` in this process (restored ones included), oldest
        first; empty for a task unknown here. Steps still running are not history."""
        return tuple(self.governor.runner.engine.get_history(task_id))

    def last_seq(self, task_id: str) -> int:
        """The seq of the last recorded step of `task_id` in this process (0 for a task
        unknown here); reads no step."""
        return self.governor.runner.engine.next_seq(task_id) - 1

    def is_recorded(self, task_id: str, action_id: str) -> bool:
        """Whether a recorded step of `task_id` carries `action_id` (steps still running do
        not count); reads no step."""
        return self.governor.runner.engine.has_recorded(task_id, action_id)

    def recorded_call(self, task_id: str, call_id: str) -> Behavior | None:
        """The latest recorded step of `task_id` for the tool call `call_id` (its
        ``properties.tool.call_id``), or None; cheap whatever the task's length."""
        return self.governor.runner.engine.recorded_call(task_id, call_id)

    def intent(self, handle: StepHandle) -> Behavior:
        """The intent of an allowed step as registered, with its verdict in
        ``meta["charter.eval"]``: what to carry to another process and `reopen` there.
        The handle's own behavior when the step is no longer running."""
        b = handle.behavior
        if b.action_id is not None:
            found = self.governor.runner.engine.open_intent(b.task_id, b.action_id)
            if found is not None:
                return found
        return b

    def expire(self, pending: Pending, reason: str) -> Blocked:
        """Record a pending step that will never be answered (its run or turn ended, the
        framework has no way to ask) as blocked with `reason`, and no step.gate: nobody
        answered. Raises what recording raises (AuditError in sync durability)."""
        asked = pending.request.result
        result = EvalResult(
            EngineDecision.BLOCK,
            asked.risk_score if asked is not None else 1.0,
            asked.results if asked is not None else (),
            pending.request.behavior.action_id,
            None,
            reason,
        )
        recorded = self.governor.runner.record_block(pending.request.behavior, result)
        return Blocked(pending.step, reason, recorded)

    def redacted(self, wire: Mapping[str, Any]) -> dict[str, Any]:
        """A copy of a wire form (`intent(...).to_dict()`, `save_pending(...)["step"]`, an
        outcome's ``{"output": ...}``) with every secret masked as the store would mask it
        (the payload mode is not applied): what an integration may keep between processes.
        Never raises; a field that cannot be redacted is replaced by a marker."""
        from charter._runtime.redact import Redactor

        return Redactor("full").redact(dict(wire))

    def save_pending(self, pending: Pending) -> dict[str, Any]:
        """`pending` as plain JSON, to keep while a person is asked outside this process
        (``{"step": the intent's wire form, "verdict": the ask, "task_id", "call_id"}``);
        `load_pending` reads it back in another process."""
        result = pending.request.result
        verdict: dict[str, Any] = (
            self.governor.runner._verdict(result)
            if result is not None
            else {"decision": "ask", "reason": pending.request.reason}
        )
        return {
            "step": pending.request.behavior.to_dict(),
            "verdict": verdict,
            "task_id": pending.task_id,
            "call_id": pending.call_id,
        }

    def load_pending(self, saved: Mapping[str, Any]) -> Pending:
        """The `Pending` that `save_pending` kept (policy results without their
        descriptions). Refuses (ValueError, KeyError) what is not such a form."""
        from charter._runtime.approval import ApprovalRequest

        b = Behavior.from_dict(dict(saved["step"]))
        verdict = saved.get("verdict")
        verdict = verdict if isinstance(verdict, Mapping) else {}
        reason = str(verdict.get("reason") or "approval required")
        found: list[PolicyResult] = []
        for v in verdict.get("violations") or ():
            try:
                found.append(
                    PolicyResult(
                        str(v["name"]),
                        str(v["rule_type"]),
                        Severity(v["severity"]),
                        True,
                        v.get("details"),
                        bool(v.get("ask")),
                    )
                )
            except (KeyError, TypeError, ValueError):
                continue
        risk = verdict.get("risk_score")
        result = EvalResult(
            EngineDecision.ASK,
            float(risk) if isinstance(risk, (int, float)) else 1.0,
            tuple(found),
            b.action_id,
            None,
            reason,
        )
        verb = b.verb.value if b.verb is not None else None
        step = Step(b.kind.value, verb, b.step_name, dict(b.input or {}), dict(b.properties))
        call_id = saved.get("call_id")
        task_id = saved.get("task_id")
        return Pending(
            step,
            task_id if isinstance(task_id, str) else b.task_id,
            ApprovalRequest(b, tuple(found), reason, result),
            call_id if isinstance(call_id, str) else None,
        )

    def approved(self, pending: Pending, answer: Answer | None = None) -> StepHandle:
        """The handle of `pending` after a person approved it and the framework already ran
        it without asking Charter again (Claude Code runs a call its permission prompt
        approved); record the approval with `answer` and settle the handle with the
        outcome. The intent is registered as approved, with the ask's verdict (and
        `answer`'s reviewer and reason as ``approved_by`` / ``approval``), and not judged
        again. Nothing is written before the outcome, even in sync durability: the call has
        run, so it cannot be blocked, and its outcome is its record (a store that fails
        then fails the outcome's recording, with `AuditError`, never this call). The task
        must be known here (`resume_task`); refuses (ValueError) a step that is already
        running or recorded."""
        b = pending.request.behavior
        asked = pending.request.result or EvalResult(
            EngineDecision.ASK, 1.0, (), b.action_id, None, pending.request.reason
        )
        by = answer.by if answer is not None else None
        why = answer.why if answer is not None else None
        result = self.governor.runner.authorize(b, asked, ran=True, by=by, why=why)
        if b.action_id != result.action_id:
            b = b.replace(action_id=result.action_id)
        return StepHandle(self.governor, b, result)

    def adopt(self, step: Step, task_id: str) -> StepHandle:
        """The handle of a step that ran without being judged (the integration only saw it
        end, e.g. hooks installed while it ran), so that what ran is in the history; nothing
        is judged. Settle it like any other. The task must be known here (`resume_task`);
        refuses what `reopen` refuses."""
        return self.reopen(self._behavior(step, task_id))


def _load_templates(location: str | None) -> Any:
    if not location:
        return None
    templates = _templates_module()
    return templates.load_templates(location)


# charter_templates.resolve, found once: an import statement run on every tool call costs
# a module lookup.
_resolver: list[Any] = []


def _resolve(overrides: Any, integration: str, name: str, args: Any) -> Any:
    if not _resolver:
        _resolver.append(_templates_module().resolve)
    return _resolver[0](integration, name, args, overrides=overrides)


def _templates_module() -> Any:
    try:
        import charter_templates
    except ImportError as exc:  # pragma: no cover - every integration depends on it
        raise ImportError(
            "tool steps are mapped by charter-templates: pip install charter-templates"
        ) from exc
    return charter_templates
