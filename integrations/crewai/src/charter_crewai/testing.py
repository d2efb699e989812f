"""Offline CrewAI runs for tests and examples: a scripted LLM and helpers to write its script.

`ScriptedLLM` is a real ``crewai.llms.base_llm.BaseLLM``: it answers each call with the next
scripted response, never opens a connection and needs no key. A response is either text (a
ReAct step such as `react_tool_call(...)`, or `final_answer(...)`) or, for native function
calling (``native=True``), a list of `native_tool_call(...)` dicts or plain final text.

CrewAI still reaches for telemetry, tracing and its storage folder at import time; set
``CREWAI_DISABLE_TELEMETRY=true``, ``OTEL_SDK_DISABLED=true``, ``CREWAI_TRACING_ENABLED=false``
and point ``CREWAI_STORAGE_DIR`` (and ``HOME``) at a temporary folder before importing it.
"""

from __future__ import annotations

import copy
import json
import threading
import uuid
from typing import Any

from ._crewai import load as _load

_load()  # a missing CrewAI fails here with the install command, not deep in pydantic

from crewai.llms.base_llm import BaseLLM  # noqa: E402
from pydantic import Field, PrivateAttr  # noqa: E402

__all__ = ["ScriptedLLM", "final_answer", "native_tool_call", "react_tool_call"]


def react_tool_call(tool: str, args: dict[str, Any], thought: str = "I will use a tool.") -> str:
    """A ReAct step asking CrewAI to run `tool` with `args`."""
    return f"Thought: {thought}\nAction: {tool}\nAction Input: {json.dumps(args)}"


def final_answer(answer: str, thought: str = "I know the answer.") -> str:
    """A ReAct step that ends the task with `answer` (native calling takes plain text)."""
    return f"Thought: {thought}\nFinal Answer: {answer}"


def native_tool_call(tool: str, args: dict[str, Any], call_id: str | None = None) -> dict[str, Any]:
    """One OpenAI-style tool call, for a native response (a list of these)."""
    return {
        "id": call_id or f"call_{uuid.uuid4().hex[:12]}",
        "type": "function",
        "function": {"name": tool, "arguments": json.dumps(args)},
    }


class ScriptedLLM(BaseLLM):
    """A CrewAI LLM that replays `responses` in order, offline.

    `native` turns on native function calling (CrewAI then passes tool schemas and accepts
    tool-call lists). `repeat_last` answers with the last response forever once the script is
    spent (a looping agent); otherwise running out raises RuntimeError. `usage` is reported
    to CrewAI's token counters on every call. `calls` holds the messages of every call.

    Like CrewAI's built-in providers it runs the model-call hooks itself when called outside
    an agent's executor loop (planning steps, direct ``llm.call``); inside the loop CrewAI has
    run them already and these calls do nothing.
    """

    responses: list[Any] = Field(default_factory=list)
    native: bool = False
    repeat_last: bool = False
    usage: dict[str, int] | None = None
    _calls: list[Any] = PrivateAttr(default_factory=list)
    _next: int = PrivateAttr(default=0)
    _mutex: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def calls(self) -> list[Any]:
        """The messages CrewAI sent, one entry per call (a copy)."""
        with self._mutex:
            return list(self._calls)

    def call(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> Any:
        """The next scripted response (a deep copy, so CrewAI may mutate it)."""
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        self._invoke_before_llm_call_hooks(messages, from_agent)
        with self._mutex:
            self._calls.append(copy.deepcopy(messages))
            if self._next < len(self.responses):
                response = self.responses[self._next]
                self._next += 1
            elif self.repeat_last and self.responses:
                response = self.responses[-1]
            else:
                raise RuntimeError(
                    f"ScriptedLLM ran out of responses after {len(self.responses)} calls"
                )
        if self.usage:
            self._track_token_usage_internal(dict(self.usage))
        response = copy.deepcopy(response)
        if isinstance(response, str):
            response = self._invoke_after_llm_call_hooks(messages, response, from_agent)
        return response

    async def acall(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> Any:
        """`call`, for CrewAI's native async paths."""
        return self.call(messages, tools, callbacks, available_functions, from_task, from_agent)

    def supports_function_calling(self) -> bool:
        return self.native

    def get_input_tokens_count(
        self, messages: Any, tools: Any = None, response_model: Any = None
    ) -> int:
        """A script has no tokenizer: four characters a token, without BaseLLM's warning."""
        if isinstance(messages, str):
            return (len(messages) + 3) // 4
        total = sum(len(str(m.get("content") or "")) for m in messages if isinstance(m, dict))
        return (total + 3) // 4
