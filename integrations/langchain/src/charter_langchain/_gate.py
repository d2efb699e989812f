"""The one place this package talks to the Governor: gate, record, open and close tasks.

Two rules live here. Deciding fails closed: anything but an allow from the Governor,
including an exception inside Charter, becomes a `BlockedStepError` and the step does not
run. Recording is contained: an outcome or task end that cannot be recorded is logged and
counted, never raised into the agent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

import charter
from charter import report_internal_error

from ._errors import BlockedStepError
from ._translate import StepSpec, Templates

logger = logging.getLogger("charter.langchain")

_CLOSING = frozenset({"task.end", "task.error", "task.idle"})


class RunNotFinishedError(RuntimeError):
    """Recorded as the task.error of an agent run that never reached its end."""


def _line(text: str) -> str:
    return " ".join(str(text).split())


def _cannot_judge(spec: StepSpec, exc: BaseException) -> BlockedStepError:
    reason = (
        f"blocked: Charter could not judge {spec.kind} {spec.name!r} "
        f"({type(exc).__name__}: {_line(str(exc))[:300]}); governance fails closed"
    )
    return BlockedStepError(reason, None, step_name=spec.name, kind=spec.kind)


class Gate:
    """A Governor plus the templates, seen through this package's two rules.

    Build from an existing `governor`, or from the Governor's setting keywords (and an
    optional `approver`); refuses (ValueError) both at once. Refuses what
    `charter.Governor` refuses (unknown settings, no policy source) and a bad template file.
    """

    def __init__(
        self,
        governor: charter.Governor | None,
        settings: Mapping[str, Any],
        approver: Any = None,
    ) -> None:
        if governor is not None:
            if settings or approver is not None:
                names = ", ".join([*settings, *(["approver"] if approver is not None else [])])
                raise ValueError(
                    f"pass either governor= or setting keywords, not both (got {names}); "
                    "the governor has its settings and approver already"
                )
            self.governor = governor
        else:
            self.governor = charter.Governor(approver=approver, **settings)
        self.templates = Templates(self.governor.runner.settings.template_location)
        self._ask_key: tuple[int, ...] | None = None
        self._ask_selectors: list[charter.Selector] = []
        self._ask_memo: dict[tuple[str, str | None, str], bool] = {}

    # -- deciding: fails closed -------------------------------------------------------------

    def begin(self, spec: StepSpec, task_id: str) -> charter.StepHandle:
        """Gate `spec` in task `task_id`; returns the handle of an allowed step.

        Raises BlockedStepError for a block, a denied approval, and any error inside
        Charter (then nothing may have been recorded).
        """
        try:
            return self.governor.begin_step(task_id=task_id, **spec.gate_args())
        except charter.BlockedError as exc:
            raise BlockedStepError(
                exc.reason, exc.result, step_name=spec.name, kind=spec.kind
            ) from None
        except Exception as exc:
            raise _cannot_judge(spec, exc) from exc

    async def abegin(self, spec: StepSpec, task_id: str) -> charter.StepHandle:
        """`begin` for async code (async approvers are awaited)."""
        try:
            return await self.governor.abegin_step(task_id=task_id, **spec.gate_args())
        except charter.BlockedError as exc:
            raise BlockedStepError(
                exc.reason, exc.result, step_name=spec.name, kind=spec.kind
            ) from None
        except Exception as exc:
            raise _cannot_judge(spec, exc) from exc

    def may_ask(self, spec: StepSpec) -> bool:
        """False when no loaded policy with ``action: ask`` selects `spec`, so `preview` can
        be skipped. Errs towards True (a preview is only ever a cost, never a risk)."""
        try:
            policies = self.governor.runner.engine.policies
            key = tuple(id(p) for p in policies)
            if key != self._ask_key:
                # A reloaded policy set: rebuild the selectors and forget earlier answers.
                self._ask_selectors = [
                    charter.Selector.from_params(p.match) for p in policies if p.action == "ask"
                ]
                self._ask_memo = {}
                self._ask_key = key
            if not self._ask_selectors:
                return False
            memo_key = (spec.kind, spec.verb, spec.name)
            found = self._ask_memo.get(memo_key)
            if found is None:
                probe = charter.Behavior(
                    agent_id=self.governor.runner.agent_id,
                    task_id="probe",
                    kind=spec.kind,  # type: ignore[arg-type]
                    verb=spec.verb,  # type: ignore[arg-type]
                    step_name=charter.step_name_from(spec.name),
                )
                found = any(s.matches(probe) for s in self._ask_selectors)
                if len(self._ask_memo) < 4096:
                    self._ask_memo[memo_key] = found
            return found
        except Exception:
            return True

    def preview(self, spec: StepSpec, task_id: str) -> charter.EvalResult:
        """The decision on `spec` without recording anything; raises BlockedStepError when
        Charter cannot evaluate."""
        try:
            return self.governor.evaluate(task_id=task_id, **spec.gate_args())
        except Exception as exc:
            raise _cannot_judge(spec, exc) from exc

    def record_answer(
        self, spec: StepSpec, task_id: str, approved: bool, by: str, why: str
    ) -> None:
        """Record a human's answer on `spec` as a step.gate bound to its input's digest; the
        next `begin` of the same step takes it. Raises BlockedStepError when it cannot be
        recorded (an approval that is not on record must not let the step run)."""
        try:
            intent = self.governor.build_step(task_id=task_id, **spec.gate_args())
            self.governor.record_approval(task_id, intent, approved, by, why)
        except Exception as exc:
            raise _cannot_judge(spec, exc) from exc

    def start_task(self, task_id: str | None, name: str, input: Any = None) -> str:
        """Record task.start; returns the task id. Raises BlockedStepError when the task may
        not start (a policy on task.start, or Charter failing)."""
        spec = StepSpec("task.start", None, name, {})
        try:
            return self.governor.start_task(task_id, name=name, input=input)
        except charter.BlockedError as exc:
            raise BlockedStepError(
                exc.reason, exc.result, step_name=name, kind="task.start"
            ) from None
        except Exception as exc:
            raise _cannot_judge(spec, exc) from exc

    def task_state(self, task_id: str) -> str:
        """open, closing, ended or unknown."""
        return self.governor.runner.engine.task_state(task_id)

    def restore(self, task_id: str) -> None:
        """Rebuild `task_id` from the audit store when this Governor has never seen it but
        the store holds it open: a run paused in one process and resumed in another (a
        persistent checkpointer). Never raises; when nothing can be restored, the task stays
        unknown and its steps are blocked."""
        try:
            if self.task_state(task_id) != "unknown":
                return
            runner = self.governor.runner
            store = runner.store
            if store is None:
                return
            records = store.read_task(task_id, runner.agent_id)
            if records and records[-1].get("kind") not in _CLOSING:
                runner.restore_task(records)
        except Exception as exc:
            logger.debug("charter-langchain: task %r not restored: %s", task_id, exc)

    # -- recording: contained -----------------------------------------------------------------

    def complete(
        self,
        handle: charter.StepHandle,
        output: Any,
        model: Mapping[str, Any] | None = None,
    ) -> None:
        """Record success; `model` adds outcome-only ``properties.model`` keys (token usage,
        stop reason) where the budget rules read them. Never raises."""
        try:
            handle.complete(output, properties={"model": dict(model)} if model else None)
        except Exception as exc:
            report_internal_error(exc, f"langchain: the outcome of {handle.behavior.step_name!r}")

    async def acomplete(
        self,
        handle: charter.StepHandle,
        output: Any,
        model: Mapping[str, Any] | None = None,
    ) -> None:
        """`complete` for async code."""
        if self._sync_durability():
            await asyncio.to_thread(self.complete, handle, output, model)
        else:
            self.complete(handle, output, model)

    def fail(self, handle: charter.StepHandle, exc: BaseException) -> None:
        """Record failure (the error's type and message). Never raises."""
        try:
            handle.fail(exc)
        except Exception as recording:
            report_internal_error(
                recording, f"langchain: the failure of {handle.behavior.step_name!r}"
            )

    async def afail(self, handle: charter.StepHandle, exc: BaseException) -> None:
        """`fail` for async code."""
        await self._maybe_thread(self.fail, handle, exc)

    def abandon(self, handle: charter.StepHandle) -> None:
        """Record that the step did not run to an end. Never raises."""
        try:
            handle.abandon()
        except Exception as exc:
            report_internal_error(
                exc, f"langchain: the abandonment of {handle.behavior.step_name!r}"
            )

    def end_task(
        self, task_id: str, error: BaseException | None = None, output: Any = None
    ) -> None:
        """Record task.end (or task.error given `error`). Never raises."""
        try:
            self.governor.end_task(task_id, error=error, output=output)
        except Exception as exc:
            report_internal_error(exc, f"langchain: the end of task {task_id!r}")

    async def aend_task(
        self, task_id: str, error: BaseException | None = None, output: Any = None
    ) -> None:
        """`end_task` for async code (waits for the store off the event loop)."""
        await asyncio.to_thread(self.end_task, task_id, error, output)

    def _sync_durability(self) -> bool:
        return self.governor.runner.settings.audit_durability == "sync"

    async def _maybe_thread(self, fn: Callable[..., None], *args: Any) -> None:
        if self._sync_durability():
            await asyncio.to_thread(fn, *args)
        else:
            fn(*args)
