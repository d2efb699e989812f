"""The integration contract: everything a framework integration needs, and nothing more.

An integration translates framework events into `Step` descriptions with the builders here
(one set of property paths for every framework), asks a `Gate` for a decision before the
step runs (`Allowed` with the handle to settle, `Blocked` with its reason, or `Pending` for a
person), and settles the step after it ran. The Gate applies fail mode, the recording rule,
approvals and task lifecycle the same way for every framework; claims make sure that two
integrations active on one Governor record each step once, in one task. An integration
never touches the Runner or the PolicyEngine. A raw model client (OpenAI, Anthropic,
Ollama) maps onto `ModelClient`, the one lifecycle for model calls, their streams and the
tool calls they ask for. The README's "Writing an integration" section
walks through a whole one.
"""

from __future__ import annotations

from charter._model.behavior import CLOSING_KINDS
from charter._model.sha256 import sha256_hex
from charter._model.stdjson import dumps as json_dumps
from charter._model.stdjson import loads as json_loads
from charter._runtime.atomic import write_atomically
from charter._runtime.gate import (
    CLAIM_KEY,
    Allowed,
    Answer,
    Blocked,
    Claim,
    Decision,
    Gate,
    Pending,
    RunNotFinishedError,
    approval_request,
    claim,
    current_claim,
    inherited_claim,
    read_answers,
    run_task_id,
)
from charter._runtime.governor import StepHandle
from charter._runtime.steps import (
    ROLES,
    Step,
    after_model_turn,
    chat_message,
    is_mapping,
    message_step,
    model_outcome,
    model_step,
    new_messages,
    node_step,
    tool_step,
    usage,
    user_contents,
    user_inputs,
)

_TYPE_CHECKING = False
if _TYPE_CHECKING:
    from typing import Any as _Any

    from charter._runtime.models import (
        ModelCall,
        ModelClient,
        ModelReply,
        ToolCall,
        ToolResult,
        ToolVerdict,
        remember_verdicts,
        tool_call,
        tool_verdicts,
    )
    from charter._runtime.sdk_client import SDKClientGovernance

# The model-client lifecycle is imported on first use: an integration that never calls a
# model (a Claude Code hook process, whose whole lifetime is the user's wait) skips it.
_MODELS = frozenset(
    {
        "ModelCall",
        "ModelClient",
        "ModelReply",
        "ToolCall",
        "ToolResult",
        "ToolVerdict",
        "remember_verdicts",
        "tool_call",
        "tool_verdicts",
    }
)


def __getattr__(name: str) -> _Any:
    if name in _MODELS:
        from charter._runtime import models

        value = getattr(models, name)
        globals()[name] = value
        return value
    if name == "SDKClientGovernance":
        from charter._runtime.sdk_client import SDKClientGovernance

        globals()[name] = SDKClientGovernance
        return SDKClientGovernance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CLAIM_KEY",
    "CLOSING_KINDS",
    "ROLES",
    "Allowed",
    "Answer",
    "Blocked",
    "Claim",
    "Decision",
    "Gate",
    "ModelCall",
    "ModelClient",
    "ModelReply",
    "Pending",
    "RunNotFinishedError",
    "SDKClientGovernance",
    "Step",
    "StepHandle",
    "ToolCall",
    "ToolResult",
    "ToolVerdict",
    "after_model_turn",
    "approval_request",
    "chat_message",
    "claim",
    "current_claim",
    "inherited_claim",
    "is_mapping",
    "json_dumps",
    "json_loads",
    "message_step",
    "model_outcome",
    "model_step",
    "new_messages",
    "node_step",
    "read_answers",
    "remember_verdicts",
    "run_task_id",
    "sha256_hex",
    "tool_call",
    "tool_step",
    "tool_verdicts",
    "usage",
    "user_contents",
    "user_inputs",
    "write_atomically",
]
