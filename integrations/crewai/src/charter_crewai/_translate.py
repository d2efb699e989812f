"""CrewAI hook contexts in, `charter.integration.Step` out: no state of its own, no I/O (the
one memo, `model_step`'s count of earlier messages, is the caller's to keep).

Each function reads a CrewAI hook context (duck-typed: CrewAI builds a new one per dispatch)
and describes it with the contract's builders, so a crew's steps carry the same property
paths as every other framework's: ``properties.tool.*``, ``properties.model.*``, and CrewAI's
own names (agent role, task, crew) under ``properties.framework.*``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from charter.integration import (
    ROLES,
    Gate,
    Step,
    after_model_turn,
    chat_message,
    is_mapping,
    model_outcome,
    node_step,
    usage,
)
from charter.integration import model_step as build_model_step

# CrewAI's own observation for a call a before-tool hook refused (both tool-calling paths).
CREWAI_BLOCKED_PREFIX = "Tool execution blocked by hook."
# CrewAI's ReAct loop appends a tool's result to the model's own message after this marker.
_OBSERVATION = "\nObservation:"
# Provider roles outside the contract's four; anything else unknown counts as a tool's output.
_ROLE = {"developer": "system", "function": "tool"}


def text(value: Any) -> str | None:
    """`value` as plain text when it is a non-empty string, else None."""
    return str.__str__(value) if isinstance(value, str) and value else None


def _private(model: Any, name: str) -> Any:
    """Private attribute `name` of pydantic model `model` (None when it has none), read from
    the model's ``__pydantic_private__``. Read as an attribute, a private one is found only
    by pydantic's ``__getattr__``, after Python built and dropped an AttributeError: about
    ten times the cost of the read, and CrewAI keeps an LLM's token counters and an
    executor's messages there."""
    found = getattr(model, "__pydantic_private__", None)
    if type(found) is dict and name in found:
        return found[name]
    return getattr(model, name, None)


def executor_messages(executor: Any) -> Any:
    """The messages of CrewAI agent executor `executor`: what its ``messages`` property
    returns (its private state's list), read without the private attribute's detour."""
    found = getattr(_private(executor, "_state"), "messages", None)
    return found if type(found) is list else getattr(executor, "messages", None)


def agent_role(agent: Any) -> str | None:
    return text(getattr(agent, "role", None))


def task_name(task: Any) -> str | None:
    if task is None:
        return None
    return text(getattr(task, "name", None)) or text(getattr(task, "description", None))


def crew_name(crew: Any) -> str | None:
    return text(getattr(crew, "name", None)) if crew is not None else None


def where(agent: Any, task: Any, crew: Any) -> dict[str, Any]:
    """CrewAI's ids of a step (``properties.framework``): its agent, task and crew."""
    return {"agent_role": agent_role(agent), "task": task_name(task), "crew": crew_name(crew)}


def _function(call: Any) -> tuple[Any, Any, Any]:
    """(id, name, parsed arguments) of an OpenAI-style tool call."""
    if not is_mapping(call):
        return None, None, None
    fn = call.get("function")
    fn = fn if is_mapping(fn) else call
    args = fn.get("arguments", fn.get("args"))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    return call.get("id"), fn.get("name"), args


def tool_calls_in(messages: list[Any]) -> list[dict[str, Any]]:
    """The tool calls of the last assistant message among `messages` (native calling)."""
    for message in reversed(messages):
        if is_mapping(message) and message.get("role") == "assistant":
            calls = message.get("tool_calls")
            return list(calls) if isinstance(calls, list) else []
    return []


def call_id(ctx: Any, name: str, args: dict[str, Any]) -> str | None:
    """The id of the native tool call this hook runs: the one call of the agent's last
    model turn with this name and these arguments (None on the ReAct path, or if unclear)."""
    messages = executor_messages(getattr(getattr(ctx, "agent", None), "agent_executor", None))
    calls = tool_calls_in(messages) if isinstance(messages, list) else []
    found = [i for i, n, a in map(_function, calls) if n == name and a == args]
    return found[0] if len(found) == 1 and isinstance(found[0], str) else None


def tool_step(gate: Gate, ctx: Any) -> Step:
    """A tool call: the templates map its name (and string args) to kind, verb and effect."""
    name = text(getattr(ctx, "tool_name", None)) or "unnamed_tool"
    raw = getattr(ctx, "tool_input", None)
    args: dict[str, Any] = dict(raw) if is_mapping(raw) else {"input": raw}
    return gate.tool_step(
        name,
        args,
        call_id=call_id(ctx, name, args),
        description=text(getattr(getattr(ctx, "tool", None), "description", None)),
        ids=where(ctx.agent, ctx.task, ctx.crew),
    )


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


def messages(raw: Any) -> list[dict[str, Any]]:
    """CrewAI's messages as ``[{role, content, ...}]``. A ReAct turn CrewAI extended with
    ``Observation: <result>`` becomes the model's turn followed by the tool's message."""
    out: list[dict[str, Any]] = []
    for m in raw if isinstance(raw, (list, tuple)) else ():
        if not is_mapping(m):
            out.append(chat_message("user", m))
            continue
        role = str(m.get("role"))
        role = _ROLE.get(role, role if role in ROLES else "tool")
        content = m.get("content")
        if role == "assistant" and isinstance(content, str) and _OBSERVATION in content:
            turn, _, observed = content.partition(_OBSERVATION)
            out += [chat_message("assistant", turn), chat_message("tool", observed.strip())]
            continue
        calls = [
            {"id": i, "name": n, "args": a}
            for i, n, a in map(_function, m.get("tool_calls") or ())
            if n is not None
        ]
        out.append(
            chat_message(
                role,
                content,
                name=text(m.get("name")),
                tool_calls=calls,
                tool_call_id=text(m.get("tool_call_id")),
            )
        )
    return out


def _is_assistant(m: Any) -> bool:
    """Whether `messages` converts raw message `m` into (first) an assistant message."""
    return is_mapping(m) and str(m.get("role")) == "assistant"


def _observed(m: Mapping[str, Any]) -> bool:
    """Whether assistant message `m` is a ReAct turn CrewAI extended with ``Observation:``
    (`messages` makes it two: the model's turn and the tool's result)."""
    content = m.get("content")
    return isinstance(content, str) and _OBSERVATION in content


def _count(raw: Sequence[Any], lo: int, hi: int) -> int:
    """How many messages `messages` converts ``raw[lo:hi]`` into, without converting them: one
    per message, two for a ReAct turn with its ``Observation:``."""
    count = hi - lo
    for i in range(lo, hi):
        m = raw[i]
        if is_mapping(m) and str(m.get("role")) == "assistant":
            count += _observed(m)
    return count


#: What `model_step` remembers of a message list between the calls of one run (the caller
#: keeps the dict, keyed by the list's id): the list itself (so the id is not reused while
#: it is remembered), how many of its first messages the last call counted, the last of
#: those, and the count of the ones before it.
Counted = dict[int, tuple[list[Any], int, Any, int]]


def _count_before(raw: Sequence[Any], start: int, counted: Counted | None) -> int:
    """`_count` of ``raw[:start]``, continued from what `counted` remembers of this list: an
    agent loop resends its whole conversation on every call, and counting it again each time
    grows with the run.

    The message a count ended with is counted again next time (CrewAI appends a ReAct
    ``Observation:`` to the model's latest turn after that turn was counted); the ones before
    it are taken as they were, like their content, which is in the trail already. A list
    that is shorter than what was counted, or whose last counted message is another object
    now (CrewAI replaces messages when it summarises a long conversation), is counted whole.
    """
    if counted is None or type(raw) is not list:
        return _count(raw, 0, start)
    memo = counted.get(id(raw))
    lo = total = 0
    if memo is not None and memo[0] is raw and 0 < memo[1] <= start and raw[memo[1] - 1] is memo[2]:
        lo, total = memo[1] - 1, memo[3]
    if start:
        total += _count(raw, lo, start - 1)
        counted[id(raw)] = (raw, start, raw[start - 1], total)
        total += _count(raw, start - 1, start)
    return total


def model_step(gate: Gate, ctx: Any, counted: Counted | None = None) -> Step:
    """A model call: the messages new since the model's last turn, and the model's names.

    `counted`, a dict the caller keeps for one run, spares counting the earlier messages
    again on every call (see `_count_before`)."""
    llm = getattr(ctx, "llm", None)
    model = text(getattr(llm, "model", None)) or text(llm) or "unknown_model"
    params = {
        k: v
        for k in ("temperature", "max_tokens")
        if isinstance(v := getattr(llm, k, None), (int, float))
    }
    agent = getattr(ctx, "agent", None)
    tools = [t for t in (text(getattr(t, "name", None)) for t in _tools(agent)) if t]
    ids = where(agent, ctx.task, ctx.crew)
    iterations = getattr(ctx, "iterations", None)
    if type(iterations) is int:
        ids["iteration"] = iterations
    raw = getattr(ctx, "messages", None)
    raw = raw if isinstance(raw, (list, tuple)) else ()
    # Only what follows the model's last turn is converted (what `new_messages` keeps);
    # the earlier messages are counted, not converted again on every call of a long run.
    # That turn itself was the previous call's output, so it is counted too, unless CrewAI
    # appended a ReAct Observation to it: the tool's result in it is new.
    start = after_model_turn(raw, _is_assistant)
    if start and _observed(raw[start - 1]):
        start -= 1
    recent = messages(raw[start:])
    return build_model_step(
        gate.framework,
        model,
        recent,
        message_count=len(recent) + _count_before(raw, start, counted),
        provider=text(getattr(llm, "provider", None)),
        params=params,
        tools=tools,
        ids=ids,
    )


def _tools(agent: Any) -> list[Any]:
    tools = getattr(agent, "tools", None)
    return list(tools) if isinstance(tools, list) else []


def _keeps_crewai_summary(llm: Any) -> bool:
    """Whether `llm` reports usage through CrewAI's own get_token_usage_summary, which only
    copies the instance's counter dict into a pydantic model (a validation per read, and it
    is read twice per model call): such an LLM's dict can be read directly. An LLM class that
    overrides the method is asked through it."""
    method = getattr(type(llm), "get_token_usage_summary", None)
    return (
        getattr(method, "__module__", None) == "crewai.llms.base_llm"
        and getattr(method, "__qualname__", None) == "BaseLLM.get_token_usage_summary"
    )


def usage_of(llm: Any) -> dict[str, int] | None:
    """The LLM's cumulative token counters (CrewAI keeps them per LLM instance), or None."""
    fields = _private(llm, "_token_usage") if _keeps_crewai_summary(llm) else None
    if type(fields) is not dict:
        summary = getattr(llm, "get_token_usage_summary", None)
        if summary is None:
            return None
        counters = summary()
        # A pydantic model keeps its field values in __dict__: read there, not through
        # model_dump (a quarter of each reading's cost, and it is read twice per model call).
        fields = getattr(counters, "__dict__", None)
        if not isinstance(fields, dict) or not fields:
            fields = counters.model_dump() if hasattr(counters, "model_dump") else dict(counters)
    return {k: v for k, v in fields.items() if type(v) is int}


def usage_delta(before: dict[str, int] | None, after: dict[str, int] | None) -> dict[str, int]:
    """Tokens one call used: the counters' growth, empty when the LLM reports none."""
    if before is None or after is None:
        return {}
    delta = {k: max(0, v - before.get(k, 0)) for k, v in after.items()}
    return delta if any(delta.values()) else {}


def model_properties(delta: dict[str, int]) -> dict[str, Any] | None:
    """A call's token usage at ``properties.model.usage`` (input, output, total tokens)."""
    counts = usage(
        delta.get("prompt_tokens"), delta.get("completion_tokens"), delta.get("total_tokens")
    )
    return model_outcome(usage=counts)


def task_step(gate: Gate, ctx: Any) -> Step:
    """A CrewAI task starting: a step.self boundary around the agent's work on it.

    POST: the agent takes on a unit of work of its own (the verb step.self needs).
    """
    task, agent = ctx.task, ctx.agent
    definition = {
        "name": text(getattr(task, "name", None)),
        "description": text(getattr(task, "description", None)),
        "expected_output": text(getattr(task, "expected_output", None)),
        "agent_role": agent_role(agent),
        "async_execution": getattr(task, "async_execution", None) is True,
    }
    crew = getattr(agent, "crew", None)
    return node_step(
        gate.framework,
        text(getattr(ctx, "step_name", None)) or task_name(task) or "task",
        {"context": ctx.payload},
        kind="step.self",
        verb="POST",
        properties={"task": {k: v for k, v in definition.items() if v is not None}},
        ids=where(agent, None, crew if not isinstance(crew, str) else None),
    )


def task_output(output: Any) -> dict[str, Any]:
    found = {
        "raw": getattr(output, "raw", None),
        "agent": getattr(output, "agent", None),
        "json": getattr(output, "json_dict", None),
    }
    result = {k: v for k, v in found.items() if v is not None}
    return result if result else {"value": output}


def kickoff_task(
    owner: Any, inputs: Any, crew_type: type, framework: str
) -> tuple[str, Any, dict[str, Any]]:
    """(name, input, properties) of the Charter task one kickoff becomes."""
    if isinstance(owner, crew_type):
        agents = [agent_role(a) for a in getattr(owner, "agents", None) or []]
        process = getattr(owner, "process", None)
        ids = {
            "crew": crew_name(owner),
            "crew_id": str(getattr(owner, "id", "")),
            "process": getattr(process, "value", None) or text(process),
            "agents": [a for a in agents if a is not None],
            "tasks": len(getattr(owner, "tasks", None) or []),
        }
        name = crew_name(owner) or "crew"
    else:
        ids = {"agent_role": agent_role(owner), "standalone": True}
        name = agent_role(owner) or "agent"
    found = {k: v for k, v in ids.items() if v is not None}
    return name, inputs, {"framework": {"name": framework, **found}}


def kickoff_output(output: Any) -> dict[str, Any]:
    found = {
        "raw": getattr(output, "raw", None),
        "token_usage": getattr(output, "token_usage", None),
    }
    result = {k: v for k, v in found.items() if v is not None}
    return result if result else {"value": output}
