"""Human approvals through LangGraph's `interrupt()`: the question, the answer, and its use.

The question is a JSON-safe dict (it is stored in the checkpoint and shown by approval UIs).
The answer arrives as the resume value of ``Command(resume=...)``; it is parsed here into a
`charter.Approval` bound to the step's name and input digest, and handed to the Governor
through its approver for exactly one gate. Anything that is not a clear approval is a denial.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import charter

PAYLOAD_TYPE = "charter.approval"
_BY = "langgraph.interrupt"
_YES = frozenset({"approve", "approved", "accept", "accepted", "allow", "yes", "y", "ok"})
_NO = frozenset({"deny", "denied", "reject", "rejected", "block", "no", "n"})


def approve(by: str = "human", why: str = "", *, digest: str | None = None) -> dict[str, Any]:
    """The resume value that approves a step Charter paused on: ``Command(resume=approve(...))``.

    `by` and `why` are recorded in the step.gate. Pass the `digest` from the interrupt's
    payload to bind the answer to that exact input: a different input is then denied.
    """
    answer: dict[str, Any] = {"approved": True, "by": str(by), "why": str(why)}
    if digest is not None:
        answer["digest"] = str(digest)
    return answer


def deny(by: str = "human", why: str = "", *, digest: str | None = None) -> dict[str, Any]:
    """The resume value that denies a step Charter paused on: ``Command(resume=deny(...))``."""
    answer: dict[str, Any] = {"approved": False, "by": str(by), "why": str(why)}
    if digest is not None:
        answer["digest"] = str(digest)
    return answer


def question(
    step: charter.Behavior,
    result: charter.EvalResult,
    digest: str,
    *,
    node: str,
    tool_call_id: str | None = None,
) -> dict[str, Any]:
    """The interrupt payload for one step a policy asks about (JSON-safe)."""
    payload: dict[str, Any] = {
        "type": PAYLOAD_TYPE,
        "agent_id": step.agent_id,
        "task_id": step.task_id,
        "node": node,
        "step": {
            "name": step.step_name,
            "kind": step.kind.value,
            "verb": step.verb.value if step.verb is not None else None,
            "input": step.input,
            "digest": digest,
        },
        "reason": result.reason,
        "policies": [
            {
                "name": v.name,
                "severity": v.severity.value,
                "details": v.details,
                "ask": v.ask,
            }
            for v in result.violations
        ],
        "resume": "Command(resume=charter_langgraph.approve(by=..., why=...)) or deny(...)",
    }
    if tool_call_id is not None:
        payload["step"]["tool_call_id"] = tool_call_id
    return payload


def read_answer(value: Any, digest: str) -> charter.Approval:
    """The Approval a resume value stands for; never raises.

    Accepted: the dicts `approve` / `deny` build (``approved``, ``by``, ``why``, optional
    ``digest``), ``{"decision": "approve" | "deny"}``, LangChain's human-in-the-loop shape
    ``{"decisions": [{"type": "approve" | "reject", "message": ...}]}``, a bool, the words
    approve / deny (and synonyms), or a `charter.Approval`. Anything else, and an answer whose
    digest is not this step's, is a denial that says why.
    """
    try:
        return _read(value, digest)
    except Exception as exc:  # an odd answer must deny, never crash the gate
        return charter.Approval(False, _BY, f"the resume value could not be read ({exc})")


def _read(value: Any, digest: str) -> charter.Approval:
    if isinstance(value, charter.Approval):
        return value
    if isinstance(value, bool):
        return charter.Approval(value, _BY, "approved" if value else "denied")
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _YES:
            return charter.Approval(True, _BY, "approved")
        if word in _NO:
            return charter.Approval(False, _BY, "denied")
        return _unreadable(value)
    if not isinstance(value, Mapping):
        return _unreadable(value)
    given = value.get("digest")
    if given is not None and given != digest:
        return charter.Approval(
            False,
            str(value.get("by") or _BY),
            "the approval names another input (digest mismatch): a stale approval cannot "
            "authorise this step; answer the current interrupt",
        )
    by = str(value.get("by") or _BY)
    why = str(value.get("why") or value.get("message") or value.get("reason") or "")
    if isinstance(value.get("approved"), bool):
        approved: bool = value["approved"]
        return charter.Approval(approved, by, why or ("approved" if approved else "denied"))
    decision = value.get("decision", value.get("type"))
    decisions = value.get("decisions")
    if decision is None and isinstance(decisions, list) and len(decisions) == 1:
        first = decisions[0]
        if isinstance(first, Mapping):
            return _read(first, digest)
    if isinstance(decision, str):
        word = decision.strip().lower()
        if word in _YES:
            return charter.Approval(True, by, why or "approved")
        if word in _NO:
            return charter.Approval(False, by, why or "denied")
        if word == "edit":
            return charter.Approval(
                False, by, "an edited call is not approved as is: approve or reject the step"
            )
    return _unreadable(value)


def _unreadable(value: Any) -> charter.Approval:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return charter.Approval(
        False,
        _BY,
        f"the resume value {shown} is not an approval; resume with "
        "charter_langgraph.approve(...) or deny(...)",
    )


@dataclass(slots=True)
class Answer:
    """A human's answer waiting for the one gate it was given for."""

    step_name: str
    digest: str
    approval: charter.Approval
    taken: bool = False


_answer: contextvars.ContextVar[Answer | None] = contextvars.ContextVar(
    "charter_langgraph.answer", default=None
)


@contextmanager
def answering(answer: Answer | None) -> Iterator[None]:
    """Make `answer` the one the Governor's approver gives while the block runs."""
    token = _answer.set(answer)
    try:
        yield
    finally:
        try:
            _answer.reset(token)
        except ValueError:  # reset from another context; nothing of ours to undo
            pass


class InterruptApprover:
    """The Governor's approver while charter-langgraph governs with it.

    When a gate asks and a human already answered through `interrupt()` for that exact step
    (same name, same input digest), the answer is given once; otherwise the approver the
    Governor had before (by default `charter.deny_all`) decides.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.__qualname__ = f"charter_langgraph({getattr(inner, '__qualname__', inner)!s})"

    def __call__(self, request: charter.ApprovalRequest) -> Any:
        pending = _answer.get()
        if (
            pending is not None
            and not pending.taken
            and pending.step_name == request.behavior.step_name
            and pending.digest == request.digest
        ):
            pending.taken = True
            return pending.approval
        return self.inner(request)


def install_approver(governor: charter.Governor) -> None:
    """Put an InterruptApprover in front of the Governor's approver (once)."""
    if not isinstance(governor.approver, InterruptApprover):
        governor.approver = InterruptApprover(governor.approver)
