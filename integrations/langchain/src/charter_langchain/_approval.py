"""Approval requests and answers in the shape of LangChain's `HumanInTheLoopMiddleware`.

The interrupt value is a ``HITLRequest`` with one action (``action_requests`` and
``review_configs``); the resume value is a ``HITLResponse`` (``{"decisions": [decision]}``)
or, as HumanInTheLoopMiddleware's per-call mode sends it, a single decision. Approval UIs
built for that middleware therefore answer Charter's requests unchanged. An answer that
cannot be read is a rejection: an approval nobody can be sure was given is not one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import charter

from ._translate import StepSpec

DEFAULT_BY = "human (LangGraph interrupt)"


@dataclass(frozen=True, slots=True)
class Answer:
    """A reviewer's decision: `kind` is approve, edit or reject; `edited` is (name, args)."""

    kind: str
    by: str
    why: str
    edited: tuple[str, dict[str, Any]] | None = None


def approval_request(
    spec: StepSpec, result: charter.EvalResult, tool_call_id: str | None
) -> dict[str, Any]:
    """The interrupt value for `spec`: a one-action HITLRequest plus a ``charter`` section."""
    allowed = ["approve", "edit", "reject"] if tool_call_id is not None else ["approve", "reject"]
    policies = [v.name for v in result.violations if v.ask] or [v.name for v in result.violations]
    action: dict[str, Any] = {
        "name": spec.name,
        "args": dict(spec.input),
        "description": result.reason,
        "charter": {
            "kind": spec.kind,
            "verb": spec.verb,
            "policies": policies,
            "tool_call_id": tool_call_id,
            "digest": charter.canonical_digest(spec.input),
        },
    }
    return {
        "action_requests": [action],
        "review_configs": [{"action_name": spec.name, "allowed_decisions": allowed}],
    }


def read_answer(raw: Any, spec: StepSpec, *, editable: bool) -> Answer:
    """Read a resume value; anything unreadable or not allowed becomes a rejection."""
    decision: Any = raw
    if isinstance(raw, Mapping) and "decisions" in raw:
        decisions = raw.get("decisions")
        if not isinstance(decisions, list) or len(decisions) != 1:
            return _unreadable(f"expected one decision, got {_describe(decisions)}")
        decision = decisions[0]
    if not isinstance(decision, Mapping):
        return _unreadable(f"a decision is a mapping with a type, got {_describe(decision)}")
    by = decision.get("by")
    by = by if isinstance(by, str) and by.strip() else DEFAULT_BY
    why = decision.get("message")
    why = why if isinstance(why, str) else ""
    kind = decision.get("type")
    if kind == "approve":
        return Answer("approve", by, why or "approved")
    if kind == "reject":
        return Answer("reject", by, why or "rejected")
    if kind == "edit" and editable:
        action = decision.get("edited_action")
        if not isinstance(action, Mapping):
            return _unreadable("an edit needs edited_action: {name, args}")
        name = action.get("name")
        args = action.get("args")
        if not isinstance(name, str) or not name or not isinstance(args, Mapping):
            return _unreadable("an edit's edited_action needs a name and an args mapping")
        why = why or f"replaced by the reviewer's edit ({name})"
        return Answer("edit", by, why, (name, {str(k): v for k, v in args.items()}))
    allowed = "approve, edit or reject" if editable else "approve or reject"
    return _unreadable(f"decision type {kind!r} is not one of {allowed} for {spec.name!r}")


def _unreadable(problem: str) -> Answer:
    return Answer("reject", "charter", f"the approval answer could not be read ({problem})")


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
