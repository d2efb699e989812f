"""Offline LlamaIndex runs for tests, examples and benchmarks: a scripted function-calling LLM.

`ScriptedLLM` is LlamaIndex's own ``MockFunctionCallingLLM`` answering each chat call with the
next scripted turn: a `tool_call(...)` message (or a list of them, for parallel calls), or
plain text that ends the run. It never opens a connection and needs no key; it reports
`usage` and `stop_reason` the way OpenAI's LLM class does (``additional_kwargs`` and
``raw``), and keeps the messages of every call in `calls`.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from ._llama import load

load()

from llama_index.core.base.llms.types import (  # noqa: E402
    ChatMessage,
    ChatResponse,
    LLMMetadata,
    ToolCallBlock,
)
from llama_index.core.llms.mock import MockFunctionCallingLLM  # noqa: E402
from pydantic import PrivateAttr  # noqa: E402

__all__ = ["ScriptedLLM", "tool_call"]


def tool_call(name: str, args: dict[str, Any] | None = None, call_id: str | None = None) -> Any:
    """One tool call the model makes (a ToolCallBlock in an assistant message)."""
    return ToolCallBlock(
        tool_call_id=call_id or f"call_{uuid.uuid4().hex[:12]}",
        tool_name=name,
        tool_kwargs=dict(args or {}),
    )


class ScriptedLLM(MockFunctionCallingLLM):
    """Answers chat calls with `turns` in order: a `tool_call` block, a list of them, or
    text. Running out raises RuntimeError (a run that calls the model more than scripted).
    `model` is the name in the LLM's metadata; `usage` (input/output token counts) and
    `stop_reason` are reported on every response."""

    model: str = "scripted-model"
    usage: dict[str, int] | None = None
    stop_reason: str | None = "stop"
    _turns: list[Any] = PrivateAttr(default_factory=list)
    _calls: list[list[Any]] = PrivateAttr(default_factory=list)
    _mutex: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, turns: list[Any], **kwargs: Any) -> None:
        super().__init__(response_generator=self._next, **kwargs)
        self._turns = list(turns)

    @property
    def calls(self) -> list[list[Any]]:
        """The messages of every chat call, oldest first (a copy)."""
        with self._mutex:
            return list(self._calls)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model, is_function_calling_model=True)

    def _next(self, messages: Any, **kwargs: Any) -> Any:
        with self._mutex:
            self._calls.append(list(messages))
            if not self._turns:
                raise RuntimeError(f"ScriptedLLM ran out of turns after {len(self._calls)} calls")
            turn = self._turns.pop(0)
        if isinstance(turn, str):
            return ChatMessage(role="assistant", content=turn)
        blocks = turn if isinstance(turn, list) else [turn]
        return ChatMessage(role="assistant", blocks=list(blocks))

    def _reported(self, response: ChatResponse) -> ChatResponse:
        if self.usage:
            prompt, completion = self.usage.get("input_tokens"), self.usage.get("output_tokens")
            response.additional_kwargs.update(
                {"prompt_tokens": prompt, "completion_tokens": completion}
            )
        if self.stop_reason:
            response.raw = {"choices": [{"finish_reason": self.stop_reason}]}
        return response

    def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
        return self._reported(super().chat(messages, **kwargs))

    async def astream_chat(self, messages: Any, **kwargs: Any) -> Any:
        stream = await super().astream_chat(messages, **kwargs)

        async def relay() -> Any:
            async for response in stream:
                yield self._reported(response)

        return relay()
