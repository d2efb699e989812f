"""Approvals: who says yes when a policy asks, and what the answer looks like.

The default approver denies: a gate whose approver is missing must fail closed, like every
other unknown state in Charter.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TextIO, runtime_checkable

from charter._engine.engine import EvalResult, PolicyResult
from charter._model.behavior import ActionKind, Behavior
from charter._model.identifiers import new_id
from charter._model.ijson import canonical_digest

__all__ = [
    "Approval",
    "ApprovalRequest",
    "Approver",
    "callback_approver",
    "console_approver",
    "deny_all",
    "gate_record",
]


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A step that needs a human's (or a program's) approval before it may run.

    `behavior` is the step as it would run, `violations` the policies that asked (or
    otherwise objected), `reason` the one-line summary, `result` the full evaluation.
    """

    behavior: Behavior
    violations: tuple[PolicyResult, ...]
    reason: str
    result: EvalResult | None = None

    @property
    def digest(self) -> str:
        """SHA-256 of the step's canonical input: the approval is bound to exactly this input."""
        return canonical_digest(self.behavior.input or {})

    @property
    def policies(self) -> tuple[str, ...]:
        """Names of the policies that asked for approval (all violated ones if none asked)."""
        asking = tuple(v.name for v in self.violations if v.ask)
        return asking or tuple(v.name for v in self.violations)

    def summary(self) -> str:
        """Two lines for a person: what the step is and why it needs approval."""
        b = self.behavior
        verb = f" {b.verb.value}" if b.verb else ""
        return f"{b.kind.value}{verb} {b.step_name!r} input={b.input!r:.200}\n{self.reason}"


@dataclass(frozen=True, slots=True)
class Approval:
    """The answer: `approved`, who gave it (`by`) and why (`why`)."""

    approved: bool
    by: str
    why: str = ""


@runtime_checkable
class Approver(Protocol):
    """Anything callable as ``approver(request) -> Approval``.

    An approver may also be an ``async def``; the Governor awaits it on its async paths. An
    approver that raises counts as a denial.
    """

    def __call__(self, request: ApprovalRequest) -> Approval:
        """Decide on `request`."""
        ...


def deny_all(request: ApprovalRequest) -> Approval:
    """Deny every request: the default, so that a missing approver fails closed."""
    return Approval(
        False,
        "charter.deny_all",
        "no approver is configured (pass approver= to the Governor, e.g. console_approver)",
    )


def console_approver(
    request: ApprovalRequest, *, stdin: TextIO | None = None, stdout: TextIO | None = None
) -> Approval:
    """Ask on the terminal; approves only an answer of y or yes.

    Denies without asking when standard input is not a TTY (CI, a daemon, a pipe), so an
    unattended agent never waits forever and never runs an unapproved step.
    """
    inp = stdin if stdin is not None else sys.stdin
    out = stdout if stdout is not None else sys.stderr
    try:
        interactive = inp is not None and inp.isatty()
    except (OSError, ValueError):
        interactive = False
    if not interactive:
        return Approval(False, "console", "standard input is not a terminal; nobody could answer")
    user = _user()
    out.write(f"\ncharter: approval needed\n  {request.summary()}\nrun this step? [y/N] ")
    out.flush()
    try:
        answer = inp.readline().strip().lower()
    except (OSError, ValueError) as exc:
        return Approval(False, f"console:{user}", f"could not read the answer ({exc})")
    if answer in ("y", "yes"):
        return Approval(True, f"console:{user}", "approved at the console")
    return Approval(False, f"console:{user}", "denied at the console")


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def callback_approver(fn: Callable[[ApprovalRequest], Any], *, by: str | None = None) -> Approver:
    """An approver from `fn(request)`, which returns an Approval, a bool, or (bool, why).

    `by` names the approver in the audit trail (default: the function's name). The returned
    approver is async when `fn` is.
    """
    name = str(by or getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "callback"))

    def convert(answer: Any) -> Approval:
        if isinstance(answer, Approval):
            return answer
        if isinstance(answer, tuple) and len(answer) == 2:
            return Approval(bool(answer[0]), name, str(answer[1]))
        if isinstance(answer, bool):
            return Approval(answer, name, "approved" if answer else "denied")
        raise TypeError(
            f"approver {name} returned {type(answer).__name__}; return an Approval, a bool or "
            "(bool, why)"
        )

    if inspect.iscoroutinefunction(fn):

        async def async_approver(request: ApprovalRequest) -> Approval:
            return convert(await fn(request))

        return async_approver  # type: ignore[return-value]

    def approver(request: ApprovalRequest) -> Approval:
        return convert(fn(request))

    return approver


def gate_record(
    step: Behavior,
    approval: Approval,
    policies: tuple[str, ...] | list[str] = (),
    *,
    timestamp: datetime | None = None,
) -> Behavior:
    """The step.gate that records `approval` of `step`: bound to the step's name and the
    SHA-256 of its canonical input (``properties.gate.digest``), naming the asking policies.
    The one shape every approval is recorded in (the Governor, integrations, `charter test`)."""
    extra: dict[str, Any] = {"timestamp": timestamp} if timestamp is not None else {}
    return Behavior(
        agent_id=step.agent_id,
        task_id=step.task_id,
        kind=ActionKind.STEP_GATE,
        step_name="approval",
        action_id=new_id(),
        output={
            "decision": "pass" if approval.approved else "deny",
            "by": str(approval.by),
            "why": str(approval.why),
        },
        properties={
            "gate": {
                "kind": "human",
                "step_name": step.step_name,
                "digest": canonical_digest(step.input or {}),
                "policies": list(policies),
                "action_id": step.action_id,
            }
        },
        **extra,
    )
