"""Anthropic's wire shapes onto charter.integration: Messages request bodies to steps,
messages and stream events to replies, tool results to the user message the model reads."""

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

FRAMEWORK = "anthropic"
PROVIDER = "anthropic"

_PARAMS = ("max_tokens", "temperature", "top_p", "top_k", "stream", "service_tier")


def endpoint(url: str) -> bool:
    """True for the Messages endpoint (beta included), not count_tokens or batches."""
    return url.split("?", 1)[0].rstrip("/").endswith("/messages")


def _text(content: Any) -> Any:
    if isinstance(content, str) or not isinstance(content, Sequence):
        return content
    texts = [b.get("text") for b in content if is_mapping(b) and b.get("type") == "text"]
    return "\n".join(t for t in texts if isinstance(t, str)) if texts else content


def _parts(m: Mapping[str, Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """The ``tool_result`` blocks, the ``tool_use`` blocks and the other blocks of message
    `m`'s content (none for text content)."""
    content = m.get("content")
    blocks = content if isinstance(content, list) else []
    results = [b for b in blocks if is_mapping(b) and b.get("type") == "tool_result"]
    uses = [b for b in blocks if is_mapping(b) and b.get("type") == "tool_use"]
    rest = [b for b in blocks if b not in results and b not in uses]
    return results, uses, rest


def _converted(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Message `m` in the contract's shape: one tool message per ``tool_result`` block, then
    the message itself unless it held only results."""
    results, uses, rest = _parts(m)
    out = [
        chat_message(
            "tool",
            _text(r.get("content")),
            tool_call_id=r.get("tool_use_id"),
            error=bool(r.get("is_error")),
        )
        for r in results
    ]
    if results and not rest:
        return out
    calls = [{"id": b.get("id"), "name": b.get("name"), "args": b.get("input")} for b in uses]
    role = "assistant" if m.get("role") == "assistant" else "user"
    content = m.get("content")
    out.append(
        chat_message(role, _text(rest) if isinstance(content, list) else content, tool_calls=calls)
    )
    return out


def _count(m: Mapping[str, Any]) -> int:
    """How many messages `_converted` makes of `m`, without converting it."""
    results, _, rest = _parts(m)
    return len(results) + (0 if results and not rest else 1)


def _is_model_turn(m: Mapping[str, Any]) -> bool:
    """Whether `_converted` ends message `m` with an assistant message."""
    if m.get("role") != "assistant":
        return False
    results, _, rest = _parts(m)
    return not results or bool(rest)


def _messages(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """The messages new since the model's last turn, in the contract's shape, and how many
    the whole request makes: an agent loop resends the conversation on every call, and only
    what follows the model's last turn is recorded, so only that is converted."""
    given = [m for m in body.get("messages") or () if is_mapping(m)]
    start = after_model_turn(given, _is_model_turn)
    out: list[dict[str, Any]] = []
    if body.get("system") and not start:
        out.append(chat_message("system", _text(body["system"])))
    for m in given[start:]:
        out += _converted(m)
    earlier = sum(map(_count, given[:start])) + (1 if body.get("system") and start else 0)
    return out, earlier + len(out)


def request_step(body: Mapping[str, Any], ids: Mapping[str, Any]) -> Step:
    """The ``step.model`` intent of one Messages request body."""
    params = {k: body[k] for k in _PARAMS if isinstance(body.get(k), (str, int, float, bool))}
    tools = [
        str(t.get("name") or t.get("type") or "?")
        for t in body.get("tools") or ()
        if isinstance(t, Mapping)
    ]
    messages, count = _messages(body)
    return model_step(
        FRAMEWORK,
        str(body.get("model") or "unknown-model"),
        messages,
        message_count=count,
        provider=PROVIDER,
        params=params,
        tools=tools,
        ids=dict(ids),
    )


def _usage(u: Any, input_tokens: Any = None) -> dict[str, int] | None:
    if u is None:
        return None
    first = getattr(u, "input_tokens", None)
    return usage(first if first is not None else input_tokens, getattr(u, "output_tokens", None))


def message_calls(message: Any) -> tuple[ToolCall, ...]:
    return tuple(
        _tool_call(b.name, b.input, b.id)
        for b in getattr(message, "content", None) or ()
        if getattr(b, "type", None) == "tool_use"
    )


def message_reply(message: Any) -> ModelReply:
    """A Message as a reply: text blocks joined, tool_use blocks as tool calls."""
    texts = [
        b.text
        for b in getattr(message, "content", None) or ()
        if getattr(b, "type", None) == "text"
    ]
    return ModelReply(
        model=getattr(message, "model", None),
        text="".join(texts),
        usage=_usage(getattr(message, "usage", None)),
        stop_reason=getattr(message, "stop_reason", None),
        tool_calls=message_calls(message),
    )


class MessageEvents:
    """Accumulates a Messages stream: message_start (model, input tokens), text and
    input_json deltas per content block, message_delta (stop reason, output tokens)."""

    def __init__(self) -> None:
        self.model: str | None = None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.stop: str | None = None
        self.text: list[str] = []
        self.blocks: dict[int, dict[str, Any]] = {}

    def fold(self, event: Any) -> None:
        kind = getattr(event, "type", "")
        if kind == "message_start":
            self.model = event.message.model
            self.input_tokens = getattr(event.message.usage, "input_tokens", None)
        elif kind == "content_block_start" and event.content_block.type == "tool_use":
            block = event.content_block
            self.blocks[event.index] = {"id": block.id, "name": block.name, "json": ""}
        elif kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                self.text.append(delta.text)
            elif delta.type == "input_json_delta" and event.index in self.blocks:
                self.blocks[event.index]["json"] += delta.partial_json
        elif kind == "message_delta":
            self.stop = event.delta.stop_reason or self.stop
            self.output_tokens = getattr(event.usage, "output_tokens", None)

    def reply(self, complete: bool) -> ModelReply:
        calls = tuple(
            _tool_call(b["name"], b["json"] or "{}", b["id"])
            for _, b in sorted(self.blocks.items())
        )
        return ModelReply(
            model=self.model,
            text="".join(self.text),
            usage=usage(self.input_tokens, self.output_tokens),
            stop_reason=self.stop,
            tool_calls=calls if complete else (),
            complete=complete,
        )


def result_message(results: Sequence[Any]) -> dict[str, Any]:
    """The user message carrying one ``tool_result`` block per `ToolResult`, in order;
    refusals and errors have ``is_error``."""
    return {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": r.call.id or "",
                "content": r.content,
                **({} if r.ok else {"is_error": True}),
            }
            for r in results
        ],
    }
