"""LangChain objects in, Charter step descriptions out: pure functions, no I/O, no policy.

Both entry points (the callback handler and the agent middleware) describe the same event
the same way, so a policy written against one holds for the other: a tool call is its name
and arguments resolved through the templates, a model call is ``step.model`` named after
the model, a retriever is ``step.resource GET``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import charter
from charter_templates import TemplateSet, load_templates, resolve

INTEGRATION = "langchain"

# Keys under which providers report why generation stopped, most common first.
_STOP_KEYS = ("finish_reason", "stop_reason", "done_reason")
_USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens")


@dataclass(frozen=True, slots=True)
class StepSpec:
    """What a step is, before it runs: the arguments of `Governor.begin_step`."""

    kind: str
    verb: str | None
    name: str
    input: dict[str, Any]
    properties: dict[str, Any] = field(default_factory=dict)

    def gate_args(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "verb": self.verb,
            "name": self.name,
            "input": self.input,
            "properties": self.properties,
        }


class Templates:
    """The built-in templates, or the user's file from the `template_location` setting.

    Raises `charter_templates.TemplateError` (a ValueError naming the file, entry and fix)
    for a bad file, at construction, so a typo never silently maps tools to step.unknown.
    """

    def __init__(self, location: str | None) -> None:
        self._overrides: TemplateSet | None = load_templates(location) if location else None

    def tool(self, name: str, args: Mapping[str, Any], call_id: str | None = None) -> StepSpec:
        """A tool call: kind, verb and properties from the templates; input = the arguments."""
        kind, verb, properties, _effect = resolve(
            INTEGRATION, name, args, overrides=self._overrides
        )
        props = dict(properties)
        if call_id:
            tool = dict(props.get("tool") or {})
            tool["call_id"] = call_id
            props["tool"] = tool
        return StepSpec(kind, verb, name, dict(args), props)


def tool_args(inputs: Any, input_str: Any) -> dict[str, Any]:
    """A tool's arguments as a mapping: the callback's `inputs` dict, else ``{"input": ...}``."""
    if isinstance(inputs, Mapping):
        return {str(k): v for k, v in inputs.items()}
    if isinstance(input_str, Mapping):
        return {str(k): v for k, v in input_str.items()}
    return {"input": input_str if isinstance(input_str, str) else charter.capture(input_str)}


def message_json(message: Any) -> Any:
    """One message as compact I-JSON: type, content, and tool calls / tool call id if any."""
    kind = getattr(message, "type", None)
    if not isinstance(kind, str):
        return charter.capture(message)
    out: dict[str, Any] = {"type": kind, "content": charter.capture(message.content)}
    name = getattr(message, "name", None)
    if name:
        out["name"] = str(name)
    calls = getattr(message, "tool_calls", None)
    if calls:
        out["tool_calls"] = [
            {"name": c.get("name"), "args": charter.capture(c.get("args")), "id": c.get("id")}
            for c in calls
        ]
    call_id = getattr(message, "tool_call_id", None)
    if call_id:
        out["tool_call_id"] = str(call_id)
    status = getattr(message, "status", None)
    if status == "error":
        out["status"] = "error"
    return out


def new_messages(messages: Sequence[Any]) -> Sequence[Any]:
    """The messages after the model's last turn: what is new to it in this call.

    The earlier ones are already in the audit trail (the model's own outputs, the tool
    results, the first call's prompt), so recording only these keeps a long agent run linear
    instead of quadratic in what is captured, redacted and hashed.
    """
    for i in range(len(messages) - 1, -1, -1):
        if getattr(messages[i], "type", None) == "ai":
            return messages[i + 1 :]
    return messages


def model_step(
    name: str,
    provider: str | None,
    messages: Sequence[Any],
    *,
    model_type: str = "chat",
    tools: Sequence[str] = (),
) -> StepSpec:
    """A model call: ``step.model`` named after the model; input = the messages new since the
    model's last turn (all of them on the first call) and how many it is sent in all."""
    model: dict[str, Any] = {"name": name, "type": model_type}
    if provider:
        model["provider"] = provider
    if tools:
        model["tools"] = list(tools)
    return StepSpec(
        "step.model",
        None,
        name,
        {
            "messages": [message_json(m) for m in new_messages(messages)],
            "message_count": len(messages),
        },
        {"model": model},
    )


def prompt_step(name: str, provider: str | None, prompts: Sequence[str]) -> StepSpec:
    """A completion (non-chat) model call: the prompts as input."""
    spec = model_step(name, provider, (), model_type="llm")
    return StepSpec(spec.kind, None, name, {"prompts": list(prompts)}, spec.properties)


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
        if isinstance(got, Mapping):
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
    if not isinstance(tools, Sequence) or isinstance(tools, str):
        return names
    for t in tools:
        if isinstance(t, Mapping):
            fn = t.get("function")
            name = t.get("name") or (fn.get("name") if isinstance(fn, Mapping) else None)
        else:
            name = getattr(t, "name", None)
        if isinstance(name, str):
            names.append(name)
    return names


def usage_of(message: Any) -> dict[str, Any] | None:
    """Token usage of a model message (``usage_metadata``), or None when it has none."""
    usage = getattr(message, "usage_metadata", None)
    if not isinstance(usage, Mapping):
        return None
    return {k: usage[k] for k in _USAGE_KEYS if isinstance(usage.get(k), int)} or None


def stop_reason_of(message: Any, info: Mapping[str, Any] | None = None) -> str | None:
    for source in (getattr(message, "response_metadata", None), info):
        if isinstance(source, Mapping):
            for key in _STOP_KEYS:
                value = source.get(key)
                if isinstance(value, str) and value:
                    return value
    return None


def model_outcome(messages: Sequence[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(output, outcome-only model properties) for the messages a model call produced."""
    output: dict[str, Any] = {"messages": [message_json(m) for m in messages]}
    props: dict[str, Any] = {}
    for m in messages:
        usage = usage_of(m)
        if usage:
            props["usage"] = usage
        stop = stop_reason_of(m)
        if stop:
            props["stop_reason"] = stop
    output.update(props)
    return output, props


def llm_result_outcome(response: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(output, outcome-only model properties) of a callback's LLMResult (streamed or not:
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
    if "usage" not in props:
        llm_output = getattr(response, "llm_output", None)
        usage = llm_output.get("token_usage") if isinstance(llm_output, Mapping) else None
        if isinstance(usage, Mapping):
            legacy = {
                "input_tokens": usage.get("prompt_tokens"),
                "output_tokens": usage.get("completion_tokens"),
                "total_tokens": usage.get("total_tokens"),
            }
            found = {k: v for k, v in legacy.items() if isinstance(v, int)}
            if found:
                props["usage"] = found
                output["usage"] = found
    if "stop_reason" not in props:
        stop = stop_reason_of(None, info)
        if stop:
            props["stop_reason"] = stop
            output["stop_reason"] = stop
    return output, props


def tool_outcome(result: Any) -> tuple[dict[str, Any], str | None]:
    """(output, error text or None) of what a tool (or the tool node) returned.

    A ToolMessage with status ``error`` is a tool that ran and failed (a handled
    ToolException or bad arguments): its content is the error text.
    """
    kind = getattr(result, "type", None)
    if kind == "tool":
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
    if isinstance(value, list | tuple):
        return [jsonish(v) for v in value]
    if isinstance(getattr(value, "type", None), str) and hasattr(value, "content"):
        return message_json(value)
    return charter.capture(value)


def retriever_step(name: str, query: Any) -> StepSpec:
    """A retriever: a read of the store it searches (``step.resource GET``)."""
    text = query if isinstance(query, str) else charter.capture(query)
    return StepSpec(
        "step.resource",
        "GET",
        name,
        {"query": text},
        {
            "target": {"query": text, "retriever": name}
            if isinstance(text, str)
            else {"retriever": name}
        },
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
