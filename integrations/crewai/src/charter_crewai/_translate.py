"""CrewAI hook contexts in, Charter step arguments out: pure functions, no state, no I/O.

Each function reads a CrewAI hook context (duck-typed: CrewAI builds a new one per dispatch)
and returns what the Governor needs. Payloads stay plain Python values; the Governor captures
them to I-JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from charter_templates import TemplateSet, resolve

INTEGRATION = "crewai"

# CrewAI's own observation for a call a before-tool hook refused (both tool-calling paths).
CREWAI_BLOCKED_PREFIX = "Tool execution blocked by hook."

# Message fields worth keeping in a model step's input; others (files, cache hints, provider
# parts) are transport detail.
_MESSAGE_FIELDS = ("role", "content", "name", "tool_call_id", "tool_calls")


@dataclass(frozen=True, slots=True)
class StepArgs:
    """One step to gate: the Governor's begin_step arguments."""

    kind: str
    verb: str | None
    name: str
    input: dict[str, Any]
    properties: dict[str, Any]


def text(value: Any) -> str | None:
    """`value` as plain text when it is a non-empty string, else None."""
    return str.__str__(value) if isinstance(value, str) and value else None


def agent_role(agent: Any) -> str | None:
    return text(getattr(agent, "role", None))


def task_name(task: Any) -> str | None:
    if task is None:
        return None
    return text(getattr(task, "name", None)) or text(getattr(task, "description", None))


def crew_name(crew: Any) -> str | None:
    return text(getattr(crew, "name", None)) if crew is not None else None


def where(agent: Any, task: Any, crew: Any) -> dict[str, Any]:
    """The ``properties.crewai`` group: which agent, task and crew a step belongs to."""
    found = {
        "agent_role": agent_role(agent),
        "task": task_name(task),
        "crew": crew_name(crew),
    }
    return {k: v for k, v in found.items() if v is not None}


def tool_step(ctx: Any, templates: TemplateSet | None) -> StepArgs:
    """A tool call: the templates map its name (and string args) to kind, verb and effect."""
    name = text(getattr(ctx, "tool_name", None)) or "unnamed_tool"
    raw = getattr(ctx, "tool_input", None)
    args: dict[str, Any] = dict(raw) if isinstance(raw, Mapping) else {"input": raw}
    kind, verb, properties, _effect = resolve(INTEGRATION, name, args, overrides=templates)
    properties["crewai"] = where(ctx.agent, ctx.task, ctx.crew)
    return StepArgs(kind, verb, name, args, properties)


def tool_output(ctx: Any) -> dict[str, Any]:
    return {"result": getattr(ctx, "tool_result", None)}


def blocked_elsewhere(ctx: Any) -> bool:
    """True when the tool did not run because another CrewAI hook refused it."""
    result = getattr(ctx, "tool_result", None)
    return isinstance(result, str) and result.startswith(CREWAI_BLOCKED_PREFIX)


def blocked_observation(ctx: Any, reason: str) -> str:
    """What the agent reads instead of the tool's result: CrewAI's own words plus Charter's."""
    result = getattr(ctx, "tool_result", None)
    name = text(getattr(ctx, "tool_name", None)) or "unnamed_tool"
    base = result if isinstance(result, str) and result else f"{CREWAI_BLOCKED_PREFIX} Tool: {name}"
    return f"{base}\nReason: {reason}"


def message_summary(message: Any) -> dict[str, Any]:
    if isinstance(message, Mapping):
        return {k: message[k] for k in _MESSAGE_FIELDS if message.get(k) is not None}
    return {"content": message}


def model_step(ctx: Any, seen: int) -> tuple[StepArgs, int]:
    """A model call, and the message count to remember for the next call of the same agent.

    The input carries the messages added since that agent's previous model call (all of them
    on the first), so the trail holds the whole conversation once instead of once per call.
    """
    messages = getattr(ctx, "messages", None)
    messages = list(messages) if isinstance(messages, list | tuple) else []
    start = seen if 0 <= seen <= len(messages) else 0
    llm = getattr(ctx, "llm", None)
    model = text(getattr(llm, "model", None)) or text(llm) or "unknown_model"
    props: dict[str, Any] = {"model": {"name": model}}
    provider = text(getattr(llm, "provider", None))
    if provider is not None:
        props["model"]["provider"] = provider
    crewai = where(ctx.agent, ctx.task, ctx.crew)
    iterations = getattr(ctx, "iterations", None)
    if type(iterations) is int:
        crewai["iteration"] = iterations
    props["crewai"] = crewai
    step_input = {
        "message_count": len(messages),
        "messages": [message_summary(m) for m in messages[start:]],
    }
    return StepArgs("step.model", None, model, step_input, props), len(messages)


def usage_of(llm: Any) -> dict[str, int] | None:
    """The LLM's cumulative token counters (CrewAI keeps them per LLM instance), or None."""
    summary = getattr(llm, "get_token_usage_summary", None)
    if summary is None:
        return None
    counters = summary()
    dumped = counters.model_dump() if hasattr(counters, "model_dump") else dict(counters)
    return {k: v for k, v in dumped.items() if type(v) is int}


def usage_delta(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, int]:
    """Tokens one call used: the counters' growth, empty when the LLM reports none."""
    if before is None or after is None:
        return {}
    delta = {k: max(0, v - before.get(k, 0)) for k, v in after.items()}
    return delta if any(delta.values()) else {}


def tool_calls_in(messages: list[Any]) -> list[dict[str, Any]]:
    """The tool calls of the last assistant message among `messages` (native calling)."""
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "assistant":
            calls = message.get("tool_calls")
            return list(calls) if isinstance(calls, list) else []
    return []


def task_step(ctx: Any) -> StepArgs:
    """A CrewAI task starting: a step.self boundary around the agent's work on it.

    POST: the agent takes on a unit of work of its own (the verb step.self needs).
    """
    task = ctx.task
    agent = ctx.agent
    definition = {
        "name": text(getattr(task, "name", None)),
        "description": text(getattr(task, "description", None)),
        "expected_output": text(getattr(task, "expected_output", None)),
        "agent_role": agent_role(agent),
        "async_execution": getattr(task, "async_execution", None) is True,
    }
    props = {"task": {k: v for k, v in definition.items() if v is not None}}
    crew = getattr(agent, "crew", None)
    props["crewai"] = where(agent, None, crew if not isinstance(crew, str) else None)
    name = text(getattr(ctx, "step_name", None)) or task_name(task) or "task"
    return StepArgs("step.self", "POST", name, {"context": ctx.payload}, props)


def task_output(output: Any) -> dict[str, Any]:
    found = {
        "raw": getattr(output, "raw", None),
        "agent": getattr(output, "agent", None),
        "json": getattr(output, "json_dict", None),
    }
    result = {k: v for k, v in found.items() if v is not None}
    return result if result else {"value": output}


def kickoff_task(owner: Any, inputs: Any, crew_type: type) -> tuple[str, Any, dict[str, Any]]:
    """(name, input, properties) of the Charter task one kickoff becomes."""
    if isinstance(owner, crew_type):
        agents = [agent_role(a) for a in getattr(owner, "agents", None) or []]
        process = getattr(owner, "process", None)
        props = {
            "crewai": {
                "crew": crew_name(owner),
                "crew_id": str(getattr(owner, "id", "")),
                "process": getattr(process, "value", None) or text(process),
                "agents": [a for a in agents if a is not None],
                "tasks": len(getattr(owner, "tasks", None) or []),
            }
        }
        return crew_name(owner) or "crew", inputs, props
    role = agent_role(owner)
    return role or "agent", inputs, {"crewai": {"agent_role": role, "standalone": True}}


def kickoff_output(output: Any) -> dict[str, Any]:
    found = {
        "raw": getattr(output, "raw", None),
        "token_usage": getattr(output, "token_usage", None),
    }
    result = {k: v for k, v in found.items() if v is not None}
    return result if result else {"value": output}
