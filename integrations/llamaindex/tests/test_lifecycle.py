"""Runs and tasks: each run its own task, nested governed workflows nest, uninstall gives the
objects their own classes back, a second govern of the same object is refused, and a run's end
never stops the event loop for the store."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import charter
import pytest
from charter._audit.sqlite import SQLiteStore
from charter_llamaindex import govern
from charter_llamaindex.testing import ScriptedLLM, tool_call
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from .conftest import AGENT, run, steps, trail


def _lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"sunny in {city}"


def test_each_run_is_its_own_task(governor) -> None:
    llm = ScriptedLLM(["one", "two"])
    agent = FunctionAgent(tools=[], llm=llm)
    gov = governor([])
    with govern(agent, governor=gov) as governance:
        run(lambda: agent.run(user_msg="first"))
        run(lambda: agent.run(user_msg="second"))
    records = trail(gov)
    assert len(governance.task_ids) == 2
    starts = [r for r in records if r["kind"] == "task.start"]
    ends = [r for r in records if r["kind"] == "task.end"]
    assert len(starts) == 2 and len(ends) == 2
    assert [e["output"]["response"] for e in ends] == ["one", "two"]


def test_a_governed_agent_called_as_a_tool_nests_in_the_callers_task(governor) -> None:
    inner_llm = ScriptedLLM([tool_call("lookup_weather", {"city": "Oslo"}), "sunny"])
    inner = FunctionAgent(
        name="weather",
        tools=[FunctionTool.from_defaults(_lookup, name="lookup_weather")],
        llm=inner_llm,
    )

    async def ask_weather(question: str) -> str:
        """Ask the weather agent."""
        return str(await inner.run(user_msg=question))

    outer = FunctionAgent(
        name="assistant",
        tools=[FunctionTool.from_defaults(async_fn=ask_weather)],
        llm=ScriptedLLM([tool_call("ask_weather", {"question": "Oslo?"}), "It is sunny."]),
    )
    gov = governor([])
    with govern(outer, governor=gov), govern(inner, governor=gov):
        result = run(lambda: outer.run(user_msg="weather?"))
    assert str(result) == "It is sunny."
    records = trail(gov)
    assert len({r["task_id"] for r in records}) == 1, "the inner run nests"
    assert [r["kind"] for r in records if r["kind"].startswith("task.")] == [
        "task.start",
        "task.end",
    ]
    names = [(r["step_name"], r["properties"]["framework"].get("agent")) for r in steps(records)]
    assert ("lookup_weather", "weather") in names and ("ask_weather", "assistant") in names
    # The inner agent's prompt came from the outer model, not from a person: no user message.
    assert [r for r in records if r["kind"] == "step.message"] == records[1:2]


def test_uninstall_gives_the_objects_their_classes_back(governor) -> None:
    llm = MockFunctionCallingLLM()
    agent = FunctionAgent(tools=[], llm=llm)
    governance = govern(agent, governor=governor([]))
    assert type(agent) is not FunctionAgent and isinstance(agent, FunctionAgent)
    assert type(agent).__name__ == "FunctionAgent"
    with pytest.raises(ValueError, match="governed already"):
        govern(agent, governor=governor([]))
    governance.uninstall()
    governance.uninstall()
    assert type(agent) is FunctionAgent and type(llm) is MockFunctionCallingLLM


def test_an_ungoverned_run_after_uninstall_records_nothing(governor) -> None:
    agent = FunctionAgent(tools=[], llm=ScriptedLLM(["a", "b"]))
    gov = governor([])
    with govern(agent, governor=gov):
        run(lambda: agent.run(user_msg="governed"))
    run(lambda: agent.run(user_msg="not governed"))
    assert len([r for r in trail(gov) if r["kind"] == "task.start"]) == 1


class _SlowDisk(SQLiteStore):
    """A real SQLite store whose writes do not start until `go` is set."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.go = threading.Event()

    def append(self, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        self.go.wait(60)
        return super().append(entries)


def test_a_run_ends_without_stopping_the_event_loop_for_the_store(tmp_path: Path) -> None:
    # The run's end is recorded in a callback on the event loop, before `await handler`
    # returns; waiting there for the commit would stall every run on the loop.
    store = _SlowDisk(tmp_path / "audit.db")
    runner = charter.Runner(policies=[], agent_id=AGENT, store=store, exit_flush_seconds=20)
    gov = charter.Governor(runner)
    agent = FunctionAgent(tools=[], llm=ScriptedLLM(["done"]))
    try:
        with govern(agent, governor=gov):
            started = time.monotonic()
            result = run(lambda: agent.run(user_msg="hello"))
            took = time.monotonic() - started
            assert str(result) == "done"
            assert took < 10, f"the run's end waited {took:.0f} s for the store on the loop"
            assert not gov.flush(0), "the store is stalled: the records are still queued"
            store.go.set()
        records = trail(gov)  # flushed and verified
        assert [r["kind"] for r in records] == [
            "task.start",
            "step.message",
            "step.model",
            "task.end",
        ]
        assert records[-1]["output"]["response"] == "done"
    finally:
        store.go.set()
        gov.close(5)
