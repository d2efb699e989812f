"""Async graphs (async nodes, async tools, sync nodes under ainvoke, async approvals) and
parallel branches gated independently."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, NotRequired, TypedDict

import charter
import charter_langgraph
import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, RetryPolicy, Send


class State(TypedDict):
    items: list[str]
    done: Annotated[list[str], operator.add]
    charter_blocked: NotRequired[str]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_async_nodes_and_sync_nodes_under_ainvoke_are_gated(settings, governors, trail, lg):
    ran: list[str] = []

    async def fetch(state: State) -> dict[str, Any]:
        await asyncio.sleep(0)
        ran.append("fetch")
        return {"done": ["fetch"]}

    def purge(state: State) -> dict[str, Any]:
        ran.append("purge")
        return {"done": ["purge"]}

    builder = StateGraph(State)
    builder.add_node("fetch", fetch)
    builder.add_node("purge", purge, metadata={"charter": ("step.resource", "DELETE")})
    builder.add_edge(START, "fetch")
    builder.add_edge("fetch", "purge")
    graph = charter_langgraph.govern(builder, **settings).compile()
    governors.append(charter_langgraph.governor_of(graph))

    out = run(graph.ainvoke({"items": [], "done": []}))

    assert ran == ["fetch"] and out["done"] == ["fetch"]
    assert "deletes" in out["charter_blocked"]
    assert lg.steps(trail()) == [
        ("task.start", "LangGraph", None),
        ("step.exec", "fetch", "ok"),
        ("step.resource", "purge", "blocked"),
        ("task.end", "LangGraph", None),
    ]


def test_async_block_raises_and_is_not_retried(settings, governors, trail, lg):
    attempts: list[str] = []

    async def purge(state: State) -> dict[str, Any]:
        attempts.append("purge")
        return {}

    builder = StateGraph(State)
    builder.add_node("purge", purge, retry_policy=RetryPolicy(max_attempts=3))
    builder.add_edge(START, "purge")
    graph = charter_langgraph.govern(
        builder, nodes={"purge": ("step.resource", "DELETE")}, on_block="raise", **settings
    ).compile()
    governors.append(charter_langgraph.governor_of(graph))

    with pytest.raises(charter.BlockedError):
        run(graph.ainvoke({"items": [], "done": []}))

    assert attempts == []
    assert lg.steps(trail())[1:] == [
        ("step.resource", "purge", "blocked"),
        ("task.error", "LangGraph", None),
    ]


def test_async_tool_node_and_async_approval(settings, governors, trail, lg):
    ran: list[str] = []

    @tool
    async def write_file(path: str, text: str) -> str:
        """Write a file."""
        ran.append(f"write {path}")
        return "ok"

    @tool
    async def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(f"delete {path}")
        return "ok"

    class Chat(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]

    model = lg.scripted(
        AIMessage(
            content="",
            tool_calls=[
                lg.tool_call("write_file", {"path": "a", "text": "t"}, "w1"),
                lg.tool_call("delete_file", {"path": "b"}, "d1"),
            ],
        ),
        "finished",
    )

    async def agent(state: Chat) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([write_file, delete_file]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    graph = charter_langgraph.govern(builder, **settings).compile(checkpointer=InMemorySaver())
    governors.append(charter_langgraph.governor_of(graph))
    config = {"configurable": {"thread_id": "async-tools"}}

    paused = run(graph.ainvoke({"messages": [HumanMessage("go")]}, config))
    (asked,) = paused["__interrupt__"][0].value["action_requests"]
    assert ran == [] and asked["name"] == "write_file"
    out = run(graph.ainvoke(Command(resume=charter_langgraph.approve(by="ivy")), config))

    assert ran == ["write a"]
    refusal = next(m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error")
    assert refusal.tool_call_id == "d1" and "deletes" in refusal.content
    assert out["messages"][-1].content == "finished"
    records = trail()
    assert len({r["task_id"] for r in records}) == 1
    outcomes = {r["step_name"]: r["meta"].get("charter.outcome") for r in records}
    assert outcomes["write_file"] == "ok" and outcomes["delete_file"] == "blocked"


def test_parallel_branches_are_gated_independently(settings, governors, trail, lg):
    ran: list[str] = []

    def fan_out(state: State) -> list[Send]:
        return [Send("work", {"items": [item], "done": []}) for item in state["items"]]

    def work(state: State) -> dict[str, Any]:
        ran.append(state["items"][0])
        return {"done": state["items"]}

    def report(state: State) -> dict[str, Any]:
        return {"done": ["report"]}

    builder = StateGraph(State)
    builder.add_node("work", work)
    builder.add_node("plan", lambda state: {})
    builder.add_node("report", report)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan_out, ["work"])
    builder.add_edge("work", "report")
    graph = charter_langgraph.govern(builder, **settings).compile()
    governors.append(charter_langgraph.governor_of(graph))

    out = graph.invoke({"items": ["a", "b", "c"], "done": []})

    assert sorted(ran) == ["a", "b", "c"]
    assert sorted(out["done"]) == ["a", "b", "c", "report"]
    work_steps = [r for r in trail() if r["step_name"] == "work"]
    assert sorted(r["input"]["items"][0] for r in work_steps) == ["a", "b", "c"]
    assert len({r["action_id"] for r in work_steps}) == 3


def test_one_parallel_branch_refused_the_other_runs(settings, governors, trail, lg):
    ran: list[str] = []

    def archive(state: State) -> dict[str, Any]:
        ran.append("archive")
        return {"done": ["archive"]}

    def purge(state: State) -> dict[str, Any]:
        ran.append("purge")
        return {"done": ["purge"]}

    builder = StateGraph(State)
    builder.add_node("archive", archive)
    builder.add_node("purge", purge)
    builder.add_edge(START, "archive")
    builder.add_edge(START, "purge")
    graph = charter_langgraph.govern(
        builder, nodes={"purge": ("step.resource", "DELETE")}, **settings
    ).compile()
    governors.append(charter_langgraph.governor_of(graph))

    out = graph.invoke({"items": [], "done": []})

    assert ran == ["archive"] and out["done"] == ["archive"]
    outcomes = {r["step_name"]: r["meta"].get("charter.outcome") for r in trail()}
    assert outcomes["archive"] == "ok" and outcomes["purge"] == "blocked"
