"""Ollama's wire shapes onto charter.integration: /api/chat and /api/generate request bodies
to steps, responses and NDJSON chunks to replies, tool results to the messages the model
reads. Pure functions."""

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

FRAMEWORK = "ollama"
PROVIDER = "ollama"

_OPTIONS = ("temperature", "top_p", "top_k", "num_predict", "num_ctx", "seed")


def endpoint(url: str) -> str | None:
    """``chat`` or ``generate`` for the two model endpoints governed, None for the rest."""
    path = url.split("?", 1)[0].rstrip("/")
    if path.endswith("/api/chat"):
        return "chat"
    if path.endswith("/api/generate"):
        return "generate"
    return None


def _params(body: Mapping[str, Any]) -> dict[str, Any]:
    options = body.get("options") if isinstance(body.get("options"), Mapping) else {}
    out = {k: options[k] for k in _OPTIONS if isinstance(options.get(k), (str, int, float, bool))}
    for key in ("stream", "think", "keep_alive"):
        if isinstance(body.get(key), (str, int, float, bool)):
            out[key] = body[key]
    if body.get("format"):
        out["format"] = body["format"] if isinstance(body["format"], str) else "json_schema"
    return out


def _message(m: Mapping[str, Any]) -> dict[str, Any]:
    role = str(m.get("role") or "user")
    if role == "tool":
        return chat_message("tool", m.get("content"), name=m.get("tool_name"))
    calls = []
    for c in m.get("tool_calls") or ():
        fn = c.get("function") if isinstance(c, Mapping) else None
        if isinstance(fn, Mapping):
            calls.append({"name": fn.get("name"), "args": fn.get("arguments")})
    role = role if role in ("system", "user", "assistant") else "user"
    return chat_message(role, m.get("content"), tool_calls=calls)


def request_step(api: str, body: Mapping[str, Any], ids: Mapping[str, Any]) -> Step:
    """The ``step.model`` intent of one request body."""
    model = str(body.get("model") or "unknown-model")
    tools = [
        str((t.get("function") or {}).get("name") or t.get("type") or "?")
        for t in body.get("tools") or ()
        if isinstance(t, Mapping)
    ]
    common: dict[str, Any] = {
        "provider": PROVIDER,
        "params": _params(body),
        "tools": tools,
        "ids": {"api": api, **ids},
    }
    if api == "generate":
        messages = []
        if body.get("system"):
            messages.append(chat_message("system", body["system"]))
        messages.append(chat_message("user", body.get("prompt") or ""))
        return model_step(FRAMEWORK, model, messages, **common)
    given = [m for m in body.get("messages") or () if is_mapping(m)]
    # Only what follows the model's last turn is converted (what the step records); the rest
    # is counted: an agent loop resends the whole conversation on every call.
    start = after_model_turn(given, lambda m: str(m.get("role")) == "assistant")
    msgs = [_message(m) for m in given[start:]]
    return model_step(FRAMEWORK, model, msgs, message_count=len(given), **common)


def _calls(message: Any) -> tuple[ToolCall, ...]:
    # Ollama gives no call id: a call is known by its name and arguments.
    return tuple(
        _tool_call(c.function.name, c.function.arguments)
        for c in getattr(message, "tool_calls", None) or ()
    )


def reply(response: Any) -> ModelReply:
    """A ChatResponse or GenerateResponse as a reply (token counts from prompt_eval_count and
    eval_count, stop reason from done_reason)."""
    message = getattr(response, "message", None)
    text = getattr(message, "content", None) if message is not None else response.response
    return ModelReply(
        model=getattr(response, "model", None),
        text=text,
        usage=usage(
            getattr(response, "prompt_eval_count", None), getattr(response, "eval_count", None)
        ),
        stop_reason=getattr(response, "done_reason", None),
        tool_calls=_calls(message) if message is not None else (),
    )


class Chunks:
    """Accumulates NDJSON chunks: text pieces, tool calls as they come, and the final chunk
    (``done``) with the counts and done_reason."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: list[ToolCall] = []
        self.last: Any = None

    def fold(self, chunk: Any) -> None:
        message = getattr(chunk, "message", None)
        piece = getattr(message, "content", None) if message is not None else chunk.response
        if piece:
            self.text.append(piece)
        if message is not None:
            self.calls.extend(_calls(message))
        if getattr(chunk, "done", False):
            self.last = chunk

    def reply(self, complete: bool) -> ModelReply:
        last = self.last
        return ModelReply(
            model=getattr(last, "model", None),
            text="".join(self.text),
            usage=usage(getattr(last, "prompt_eval_count", None), getattr(last, "eval_count", None))
            if last is not None
            else None,
            stop_reason=getattr(last, "done_reason", None),
            tool_calls=tuple(self.calls) if complete else (),
            complete=complete,
        )


def calls_of(source: Any) -> tuple[ToolCall, ...] | None:
    """The tool calls of a ChatResponse or a Message; None for anything else."""
    message = getattr(source, "message", None)
    if message is not None:
        return _calls(message)
    if hasattr(source, "tool_calls") and hasattr(source, "role"):
        return _calls(source)
    return None


def result_messages(results: Sequence[Any]) -> list[dict[str, Any]]:
    """Each `ToolResult` as the ``tool`` message the model reads next (Ollama names the tool,
    having no call id)."""
    return [{"role": "tool", "tool_name": r.call.name, "content": r.content} for r in results]
