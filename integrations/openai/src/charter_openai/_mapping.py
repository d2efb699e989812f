"""OpenAI's wire shapes onto charter.integration: request bodies to steps, responses and
stream events to replies, tool results to the messages the model reads. Pure functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from charter.integration import (
    ModelReply,
    Step,
    ToolCall,
    after_model_turn,
    chat_message,
    is_mapping,
    model_step,
    usage,
)
from charter.integration import tool_call as _tool_call

FRAMEWORK = "openai"
PROVIDER = "openai"

# Request parameters worth judging and keeping (scalars a policy may read); the rest of a
# body (metadata, response formats, ...) stays out of the trail.
_PARAMS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "n",
    "seed",
    "stream",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning_effort",
    "service_tier",
    "store",
    "user",
)

_ROLES = {"developer": "system", "system": "system", "user": "user", "assistant": "assistant"}


def endpoint(url: str) -> str | None:
    """``chat`` or ``responses`` for the two model endpoints governed, None for the rest."""
    path = url.split("?", 1)[0].rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    return None


def _params(body: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in _PARAMS:
        value = body.get(key)
        if isinstance(value, (str, int, float, bool)):
            out[key] = value
        elif key == "tool_choice" and isinstance(value, Mapping):
            fn = value.get("function")
            name = fn.get("name") if isinstance(fn, Mapping) else value.get("name")
            out[key] = str(name or value.get("type") or "?")
    return out


def _tools(body: Mapping[str, Any]) -> list[str]:
    names: list[str] = []
    for tool in body.get("tools") or ():
        if not isinstance(tool, Mapping):
            continue
        fn = tool.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else tool.get("name")
        names.append(str(name or tool.get("type") or "?"))
    return names


def _chat_role(m: Mapping[str, Any]) -> str:
    """The role `_chat_message` gives Chat Completions message `m`."""
    role = str(m.get("role") or "user")
    return "tool" if role in ("tool", "function") else _ROLES.get(role, "user")


def _chat_message(m: Mapping[str, Any]) -> dict[str, Any]:
    role = _chat_role(m)
    if role == "tool":
        return chat_message(
            "tool", m.get("content"), name=m.get("name"), tool_call_id=m.get("tool_call_id")
        )
    calls = []
    for c in m.get("tool_calls") or ():
        if isinstance(c, Mapping):
            fn = c.get("function") if isinstance(c.get("function"), Mapping) else {}
            call = _tool_call(fn.get("name"), fn.get("arguments"), c.get("id"))
            calls.append({"id": call.id, "name": call.name, "args": call.args})
    return chat_message(role, m.get("content"), name=m.get("name"), tool_calls=calls)


def _item_role(item: Any) -> str | None:
    """The role of the message `_response_item` makes of Responses input item `item`, or
    None for an item it skips (reasoning, web search calls, ...)."""
    if not is_mapping(item):
        return None
    kind = item.get("type")
    if kind == "function_call_output":
        return "tool"
    if kind == "function_call":
        return "assistant"
    if kind in (None, "message") and "role" in item:
        return _ROLES.get(str(item["role"]), "user")
    return None


def _response_item(item: Mapping[str, Any], role: str) -> dict[str, Any]:
    kind = item.get("type")
    if kind == "function_call_output":
        return chat_message("tool", item.get("output"), tool_call_id=item.get("call_id"))
    if kind == "function_call":
        call = _tool_call(item.get("name"), item.get("arguments"), item.get("call_id"))
        return chat_message(
            "assistant", "", tool_calls=[{"id": call.id, "name": call.name, "args": call.args}]
        )
    return chat_message(role, item.get("content"))


def _response_items(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The messages of a Responses request body after the model's last turn, converted, and
    how many the whole body makes (``instructions`` is a system message first)."""
    instructions = body.get("instructions")
    first = [chat_message("system", instructions)] if instructions else []
    given = body.get("input")
    if isinstance(given, str):
        return [*first, chat_message("user", given)], len(first) + 1
    roles = [(item, role) for item in given or () if (role := _item_role(item)) is not None]
    start = after_model_turn(roles, lambda pair: pair[1] == "assistant")
    converted = [_response_item(item, role) for item, role in roles[start:]]
    return (converted if start else [*first, *converted]), len(first) + len(roles)


def request_step(api: str, body: Mapping[str, Any], ids: Mapping[str, Any]) -> Step:
    """The ``step.model`` intent of one request body (Chat Completions or Responses)."""
    count = None
    if api == "chat":
        given = [m for m in body.get("messages") or () if is_mapping(m)]
        # Only what follows the model's last turn is converted (what the step records); the
        # rest is counted: an agent loop resends the whole conversation on every call.
        start = after_model_turn(given, lambda m: _chat_role(m) == "assistant")
        messages = [_chat_message(m) for m in given[start:]]
        count = len(given)
    else:
        messages, count = _response_items(body)
    return model_step(
        FRAMEWORK,
        str(body.get("model") or "unknown-model"),
        messages,
        message_count=count,
        provider=PROVIDER,
        params=_params(body),
        tools=_tools(body),
        ids={"api": api, **ids},
    )


def _usage(u: Any) -> dict[str, int] | None:
    if u is None:
        return None
    first = getattr(u, "prompt_tokens", None)
    if first is None:
        first = getattr(u, "input_tokens", None)
    second = getattr(u, "completion_tokens", None)
    if second is None:
        second = getattr(u, "output_tokens", None)
    return usage(first, second, getattr(u, "total_tokens", None))


def chat_reply(completion: Any) -> ModelReply:
    """A ChatCompletion as a reply (its first choice)."""
    choices = getattr(completion, "choices", None) or ()
    message = choices[0].message if choices else None
    calls: list[ToolCall] = []
    for c in getattr(message, "tool_calls", None) or ():
        fn = getattr(c, "function", None)
        if fn is not None:
            calls.append(_tool_call(fn.name, fn.arguments, c.id))
    return ModelReply(
        model=getattr(completion, "model", None),
        text=getattr(message, "content", None),
        usage=_usage(getattr(completion, "usage", None)),
        stop_reason=choices[0].finish_reason if choices else None,
        tool_calls=tuple(calls),
    )


def response_calls(response: Any) -> tuple[ToolCall, ...]:
    return tuple(
        _tool_call(item.name, item.arguments, item.call_id)
        for item in getattr(response, "output", None) or ()
        if getattr(item, "type", None) == "function_call"
    )


def responses_reply(response: Any, complete: bool = True) -> ModelReply:
    """A Responses API response as a reply (status, or why it is incomplete, as stop reason)."""
    details = getattr(response, "incomplete_details", None)
    stop = getattr(details, "reason", None) or getattr(response, "status", None)
    try:
        text = response.output_text
    except Exception:
        text = None
    return ModelReply(
        model=getattr(response, "model", None),
        text=text,
        usage=_usage(getattr(response, "usage", None)),
        stop_reason=stop,
        tool_calls=response_calls(response),
        complete=complete,
    )


class ChatChunks:
    """Accumulates Chat Completions stream chunks (text, tool-call deltas, the last chunk's
    usage when ``stream_options={"include_usage": True}`` asked for it)."""

    def __init__(self) -> None:
        self.model: str | None = None
        self.text: list[str] = []
        self.stop: str | None = None
        self.usage: dict[str, int] | None = None
        self.calls: dict[int, dict[str, Any]] = {}

    def fold(self, chunk: Any) -> None:
        self.model = getattr(chunk, "model", None) or self.model
        if getattr(chunk, "usage", None) is not None:
            self.usage = _usage(chunk.usage)
        for choice in getattr(chunk, "choices", None) or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None and delta.content:
                self.text.append(delta.content)
            for c in (getattr(delta, "tool_calls", None) or ()) if delta is not None else ():
                slot = self.calls.setdefault(c.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = c.id or slot["id"]
                if c.function is not None:
                    slot["name"] += c.function.name or ""
                    slot["arguments"] += c.function.arguments or ""
            self.stop = choice.finish_reason or self.stop

    def reply(self, complete: bool) -> ModelReply:
        calls = tuple(
            _tool_call(s["name"], s["arguments"], s["id"])
            for _, s in sorted(self.calls.items())
            if s["name"]
        )
        return ModelReply(
            model=self.model,
            text="".join(self.text),
            usage=self.usage,
            stop_reason=self.stop,
            tool_calls=calls if complete else (),
            complete=complete,
        )


class ResponseEvents:
    """Accumulates Responses API stream events: text deltas, and the final response the
    ``response.completed`` (or ``.incomplete`` / ``.failed``) event carries."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.final: Any = None

    def fold(self, event: Any) -> None:
        kind = getattr(event, "type", "")
        if kind == "response.output_text.delta":
            self.text.append(event.delta)
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self.final = event.response

    def reply(self, complete: bool) -> ModelReply:
        if self.final is not None:
            return responses_reply(self.final, complete)
        return ModelReply(text="".join(self.text), complete=complete)


def calls_of(source: Any) -> tuple[str, tuple[ToolCall, ...]] | None:
    """The API and the tool calls of a ChatCompletion, a ChatCompletionMessage or a
    Responses API response; None for anything else."""
    if hasattr(source, "choices"):
        return "chat", chat_reply(source).tool_calls
    if hasattr(source, "tool_calls") and hasattr(source, "role"):
        calls = [
            _tool_call(c.function.name, c.function.arguments, c.id)
            for c in source.tool_calls or ()
            if getattr(c, "function", None) is not None
        ]
        return "chat", tuple(calls)
    if hasattr(source, "output") and hasattr(source, "output_text"):
        return "responses", response_calls(source)
    return None


def result_messages(api: str, results: Sequence[Any]) -> list[dict[str, Any]]:
    """Each `ToolResult` as the message the model reads next: a ``tool`` message for Chat
    Completions, a ``function_call_output`` item for the Responses API."""
    if api == "chat":
        return [
            {"role": "tool", "tool_call_id": r.call.id or "", "content": r.content} for r in results
        ]
    return [
        {"type": "function_call_output", "call_id": r.call.id or "", "output": r.content}
        for r in results
    ]
