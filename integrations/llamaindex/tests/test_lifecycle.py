"""Runs and tasks: each run its own task, nested governed workflows nest, uninstall gives the
objects their own classes back, and a second govern of the same object is refused."""

from __future__ import annotations

import pytest
from charter_llamaindex import govern
from charter_llamaindex.testing import ScriptedLLM, tool_call
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from .conftest import run, steps, trail


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
