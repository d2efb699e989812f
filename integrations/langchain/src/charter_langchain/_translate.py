"""LangChain objects in, Charter step descriptions out: pure functions, no I/O, no policy.

Both entry points (the callback handler and the agent middleware) describe the same event
the same way, so a policy written against one holds for the other: a tool call is its name
and arguments resolved through the templates, a model call is ``step.model`` named after
the model, a retriever is ``step.resource GET``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import charter
import charter.integration as ci

FRAMEWORK = "langchain"

# Keys under which providers report why generation stopped, most common first.
_STOP_KEYS = ("finish_reason", "stop_reason", "done_reason")
# Request parameters worth a policy's attention (the tool schemas are listed by name).
_PARAM_KEYS = (
    "temperature",
    "max_tokens",
    "max_completion_tokens",
    "top_p",
    "top_k",
    "stop",
    "seed",
    "tool_choice",
    "stream",
)
# LangChain message types onto the one role vocabulary; anything else is tool-like content.
# A streamed turn a caller merged keeps its chunk class and type: it is the same turn.
_ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "HumanMessageChunk": "user",
    "AIMessageChunk": "assistant",
    "SystemMessageChunk": "system",
    "ToolMessageChunk": "tool",
}


def _role_of(kind: Any) -> str | None:
    """The role a message ``type`` stands for (None: not one of LangChain's)."""
    return _ROLES.get(kind) if isinstance(kind, str) else None


def tool_args(inputs: Any, input_str: Any) -> dict[str, Any]:
    """A tool's arguments as a mapping: the callback's `inputs` dict, else ``{"input": ...}``."""
    if ci.is_mapping(inputs):
        return {str(k): v for k, v in inputs.items()}
    if ci.is_mapping(input_str):
        return {str(k): v for k, v in input_str.items()}
    return {"input": input_str if isinstance(input_str, str) else charter.capture(input_str)}


def message_json(message: Any) -> Any:
    """One LangChain message as ``{role, content, ...}`` (`chat_message`); other values are
    captured as they are."""
    kind = getattr(message, "type", None)
    if not isinstance(kind, str):
        return charter.capture(message)
    role = _ROLES.get(kind)
    if role is None:
        chat_role = getattr(message, "role", None)  # ChatMessage carries its own role
        role = chat_role if chat_role in ci.ROLES else "tool"
    # Only an assistant's turn carries tool calls and only a tool's a call id and status:
    # asking another message costs a pydantic AttributeError each (about 22k instructions).
    assistant, tool = role == "assistant", role == "tool"
    calls = (getattr(message, "tool_calls", None) or ()) if assistant else ()
    return ci.chat_message(
        role,
        message.content,
        name=getattr(message, "name", None),
        tool_calls=[c for c in calls if isinstance(c, Mapping)],
        tool_call_id=getattr(message, "tool_call_id", None) if tool else None,
        error=tool and getattr(message, "status", None) == "error",
    )


def request_params(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The request parameters at ``properties.model.params``."""
    if not params:  # most calls set none: no need to ask for each key
        return {}
    return {k: params[k] for k in _PARAM_KEYS if params.get(k) is not None}


def model_step(
    name: str,
    provider: str | None,
    messages: Sequence[Any],
    *,
    tools: Sequence[str] = (),
    params: Mapping[str, Any] | None = None,
    ids: Mapping[str, Any] | None = None,
) -> ci.Step:
    """A chat model call (see `charter.integration.model_step`): only the messages after
    the model's last turn are converted (the earlier ones are in the trail already)."""
    start = ci.after_model_turn(
        messages, lambda m: _role_of(getattr(m, "type", None)) == "assistant"
    )
    return ci.model_step(
        FRAMEWORK,
        name,
        [message_json(m) for m in messages[start:]],
        message_count=len(messages),
        provider=provider,
        params=request_params(params),
        tools=tools,
        ids=ids,
    )


def prompt_step(
    name: str, provider: str | None, prompts: Sequence[str], ids: Mapping[str, Any] | None = None
) -> ci.Step:
    """A completion (non-chat) model call: the prompts as input."""
    return ci.model_step(FRAMEWORK, name, provider=provider, prompts=prompts, ids=ids)


def callback_model_identity(
    serialized: Mapping[str, Any] | None, metadata: Mapping[str, Any] | None, kwargs: Any
) -> tuple[str, str | None]:
    """(model name, provider) from a callback's arguments; LangChain puts ``ls_*`` keys in
    the metadata, providers put the model in the invocation params."""
    meta = metadata or {}
    params = kwargs.get("invocation_params") or {}
    name = (
        meta.get("ls_model_name")
        or params.get("model")
        or params.get("model_name")
        or (serialized or {}).get("name")
        or params.get("_type")
        or "model"
    )
    provider = meta.get("ls_provider") or params.get("_type")
    return str(name), (str(provider) if provider else None)


def model_identity(model: Any) -> tuple[str, str | None]:
    """(model name, provider) of a chat model object, as its callbacks would report them."""
    params: Mapping[str, Any] = {}
    try:
        # The same source LangChain uses for the callback metadata (``ls_model_name``).
        got = model._get_ls_params()
        if ci.is_mapping(got):
            params = got
    except Exception:
        params = {}
    name = (
        params.get("ls_model_name")
        or getattr(model, "model_name", None)
        or getattr(model, "model", None)
        or type(model).__name__
    )
    provider = params.get("ls_provider")
    return str(name), (str(provider) if provider else None)


def tool_names(tools: Any) -> list[str]:
    """Names of tools given as objects, or as provider schemas (``{"name": ...}`` or
    OpenAI's ``{"function": {"name": ...}}``)."""
    names: list[str] = []
    if type(tools) is not list and (not isinstance(tools, Sequence) or isinstance(tools, str)):
        return names
    for t in tools:
        if ci.is_mapping(t):
            fn = t.get("function")
            name = t.get("name") or (fn.get("name") if ci.is_mapping(fn) else None)
        else:
            name = getattr(t, "name", None)
        if isinstance(name, str):
            names.append(name)
    return names


def usage_of(message: Any) -> dict[str, int] | None:
    """Token usage of a model message (``usage_metadata``), or None when it has none."""
    usage = getattr(message, "usage_metadata", None)
    if not ci.is_mapping(usage):
        return None
    return ci.usage(
        usage.get("input_tokens"), usage.get("output_tokens"), usage.get("total_tokens")
    )


def stop_reason_of(message: Any, info: Mapping[str, Any] | None = None) -> str | None:
    for source in (getattr(message, "response_metadata", None), info):
        if ci.is_mapping(source):
            for key in _STOP_KEYS:
                value = source.get(key)
                if isinstance(value, str) and value:
                    return value
    return None


def model_outcome(messages: Sequence[Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(output, outcome-only properties) for the messages a model call produced."""
    output: dict[str, Any] = {"messages": [message_json(m) for m in messages]}
    usage: dict[str, int] | None = None
    stop: str | None = None
    for m in messages:
        usage = usage_of(m) or usage
        stop = stop_reason_of(m) or stop
    return output, ci.model_outcome(usage=usage, stop_reason=stop)


def llm_result_outcome(response: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(output, outcome-only properties) of a callback's LLMResult (streamed or not:
    LangChain hands `on_llm_end` the merged chunks of a stream)."""
    messages: list[Any] = []
    texts: list[str] = []
    info: Mapping[str, Any] | None = None
    for batch in getattr(response, "generations", None) or []:
        for gen in batch:
            message = getattr(gen, "message", None)
            if message is not None:
                messages.append(message)
            else:
                texts.append(str(getattr(gen, "text", "")))
            gen_info = getattr(gen, "generation_info", None)
            if isinstance(gen_info, Mapping):
                info = gen_info
    output, props = model_outcome(messages)
    if texts:
        output["texts"] = texts
    model = dict((props or {}).get("model") or {})
    if "usage" not in model:
        llm_output = getattr(response, "llm_output", None)
        legacy = llm_output.get("token_usage") if isinstance(llm_output, Mapping) else None
        if isinstance(legacy, Mapping):
            found = ci.usage(
                legacy.get("prompt_tokens"),
                legacy.get("completion_tokens"),
                legacy.get("total_tokens"),
            )
            if found:
                model["usage"] = found
    if "stop_reason" not in model:
        stop = stop_reason_of(None, info)
        if stop:
            model["stop_reason"] = stop
    return output, ci.model_outcome(usage=model.get("usage"), stop_reason=model.get("stop_reason"))


def tool_outcome(result: Any) -> tuple[dict[str, Any], str | None]:
    """(output, error text or None) of what a tool (or the tool node) returned.

    A ToolMessage with status ``error`` is a tool that ran and failed (a handled
    ToolException or bad arguments): its content is the error text.
    """
    kind = getattr(result, "type", None)
    if _role_of(kind) == "tool":
        content = charter.capture(result.content)
        output: dict[str, Any] = {"content": content}
        if getattr(result, "status", None) == "error":
            return output, content if isinstance(content, str) else str(content)
        return output, None
    update = getattr(result, "update", None)
    if update is not None or getattr(result, "goto", None):
        command: dict[str, Any] = {"update": jsonish(update)}
        goto = getattr(result, "goto", None)
        if goto:
            command["goto"] = charter.capture(goto)
        return {"command": command}, None
    return {"content": charter.capture(result)}, None


def jsonish(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): jsonish(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonish(v) for v in value]
    if isinstance(getattr(value, "type", None), str) and hasattr(value, "content"):
        return message_json(value)
    return charter.capture(value)


def retriever_step(name: str, query: Any, ids: Mapping[str, Any] | None = None) -> ci.Step:
    """A retriever: a read of the store it searches (``step.resource GET``)."""
    text = query if isinstance(query, str) else charter.capture(query)
    target = {"query": text, "retriever": name} if isinstance(text, str) else {"retriever": name}
    step = ci.node_step(FRAMEWORK, name, {"query": text}, kind="step.resource", verb="GET", ids=ids)
    return ci.Step(
        step.kind, step.verb, step.name, step.input, {**step.properties, "target": target}
    )


def documents_outcome(documents: Any) -> dict[str, Any]:
    docs = []
    for d in documents or []:
        docs.append(
            {
                "page_content": charter.capture(getattr(d, "page_content", d)),
                "metadata": charter.capture(getattr(d, "metadata", {})),
            }
        )
    return {"documents": docs, "count": len(docs)}
