"""Fixtures: Governors on real SQLite audit files, LangChain's fake chat models scripted to
call tools, tools that count their runs, and the audit trail read back and verified."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import charter
import pytest
from charter.testing import charter_internal_errors  # noqa: F401  (autouse)
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.tools import tool

AGENT = "test-bot"


class ScriptedChatModel(GenericFakeChatModel):
    """LangChain's GenericFakeChatModel, able to be bound to tools (create_agent binds them)
    and streaming its scripted messages whole: tool calls and usage survive streaming."""

    calls: int = 0

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return super()._generate(*args, **kwargs)

    def _stream(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        self.calls += 1
        message = next(self.messages)
        if isinstance(message, str):
            message = AIMessage(content=message)
        words = str(message.content).split(" ") if message.content else []
        for i, word in enumerate(words):
            last = i == len(words) - 1
            chunk = AIMessageChunk(
                content=word + ("" if last else " "),
                id=message.id,
                usage_metadata=message.usage_metadata if last else None,
                response_metadata=message.response_metadata if last else {},
            )
            if run_manager:
                run_manager.on_llm_new_token(
                    chunk.content, chunk=ChatGenerationChunk(message=chunk)
                )
            yield ChatGenerationChunk(message=chunk)
        if message.tool_calls or not words:
            yield ChatGenerationChunk(
                message=AIMessageChunk(
                    content="",
                    id=message.id,
                    tool_call_chunks=[
                        {
                            "name": c["name"],
                            "args": __import__("json").dumps(c["args"]),
                            "id": c["id"],
                            "index": n,
                        }
                        for n, c in enumerate(message.tool_calls)
                    ],
                    usage_metadata=None if words else message.usage_metadata,
                )
            )


_ids = itertools.count(1)


def call(name: str, **args: Any) -> dict[str, Any]:
    """One tool call as a model emits it."""
    return {"name": name, "args": args, "id": f"call_{next(_ids)}", "type": "tool_call"}


def ai(*calls: dict[str, Any], text: str = "", tokens: int = 10) -> AIMessage:
    """A scripted model turn: text and tool calls, with token usage and a stop reason."""
    return AIMessage(
        content=text,
        tool_calls=list(calls),
        usage_metadata={
            "input_tokens": tokens,
            "output_tokens": tokens // 2,
            "total_tokens": tokens + tokens // 2,
        },
        response_metadata={"finish_reason": "tool_calls" if calls else "stop"},
    )


def scripted(*turns: AIMessage | str) -> ScriptedChatModel:
    return ScriptedChatModel(messages=iter(turns))


@pytest.fixture
def ran() -> Counter[str]:
    """Side-effect counter: how many times each tool body actually ran."""
    return Counter()


@pytest.fixture
def tools(ran: Counter[str]) -> dict[str, Any]:
    """Real LangChain tools (sync and async) that count their runs in `ran`."""

    @tool
    def get_weather(city: str) -> str:
        """Read the weather for a city."""
        ran["get_weather"] += 1
        return f"sunny in {city}"

    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran["delete_file"] += 1
        return f"deleted {path}"

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        ran["send_email"] += 1
        return f"sent to {to}"

    @tool
    async def get_forecast(city: str) -> str:
        """Read the weather for a city (async)."""
        ran["get_forecast"] += 1
        return f"sunny in {city}"

    @tool
    async def remove_file(path: str) -> str:
        """Delete a file (async)."""
        ran["remove_file"] += 1
        return f"deleted {path}"

    return {t.name: t for t in (get_weather, delete_file, send_email, get_forecast, remove_file)}


def deny(name: str, *, step_names: list[str] | None = None, **match: Any) -> dict[str, Any]:
    """A critical deny policy over the given step names / kinds / verbs."""
    selector: dict[str, Any] = dict(match)
    if step_names:
        selector["step_names"] = step_names
    return {
        "name": name,
        "rule_type": "deny",
        "severity": "critical",
        "match": selector,
        "params": {"reason": f"{name} forbids it"},
    }


def ask(name: str, *, step_names: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "rule_type": "deny",
        "severity": "high",
        "action": "ask",
        "match": {"step_names": step_names},
        "params": {"reason": "a person approves each one"},
    }


def warn(name: str, *, step_names: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "rule_type": "deny",
        "severity": "medium",
        "match": {"step_names": step_names},
        "params": {"reason": "worth a look"},
    }


class Audit:
    """The audit trail of one Governor, read back from its SQLite file."""

    def __init__(self, governor: charter.Governor, location: str) -> None:
        self.governor = governor
        self.location = location

    def tasks(self) -> list[list[dict[str, Any]]]:
        assert self.governor.flush(10)
        store = charter.open_store(self.location)
        try:
            return [store.read_task(t.task_id, t.agent_id) for t in store.list_tasks()]
        finally:
            store.close()

    def records(self) -> list[dict[str, Any]]:
        return [r for task in self.tasks() for r in task]

    def steps(self, kind: str | None = None, *, user: bool = False) -> list[dict[str, Any]]:
        """The steps recorded, of `kind` if given; the user's own messages only with `user`
        (they are what the agent was asked, not steps it took)."""
        return [
            r
            for r in self.records()
            if not r["kind"].startswith("task.")
            and (kind is None or r["kind"] == kind)
            and (user or not _said_by_user(r))
        ]

    def outcome(self, record: dict[str, Any]) -> str:
        return str(record["meta"].get("charter.outcome", "ok"))

    def verify(self) -> charter.VerifyReport:
        assert self.governor.flush(10)
        report = charter.verify(self.location)
        assert report.ok, str(report)
        return report


@pytest.fixture
def make_governor(tmp_path: Path) -> Iterator[Callable[..., tuple[charter.Governor, Audit]]]:
    """Build Governors on SQLite audit files under tmp_path; closed after the test."""
    made: list[charter.Governor] = []

    def build(
        policies: list[dict[str, Any]] | None = None, **settings: Any
    ) -> tuple[charter.Governor, Audit]:
        location = f"sqlite:///{tmp_path}/audit-{len(made)}.db"
        settings.setdefault("agent_id", AGENT)
        gov = charter.Governor(policies=policies or [], audit_location=location, **settings)
        made.append(gov)
        return gov, Audit(gov, location)

    yield build
    for gov in made:
        gov.close(10)


class Helpers:
    """The module's builders, as a fixture (pytest's importlib mode cannot import conftest)."""

    ai = staticmethod(ai)
    call = staticmethod(call)
    scripted = staticmethod(scripted)
    deny = staticmethod(deny)
    ask = staticmethod(ask)
    warn = staticmethod(warn)


@pytest.fixture
def h() -> type[Helpers]:
    return Helpers


def _said_by_user(record: dict[str, Any]) -> bool:
    message = record.get("properties", {}).get("message") or {}
    return (
        record["kind"] == "step.message"
        and record.get("verb") == "GET"
        and (message.get("role") == "user")
    )
