"""charter-langgraph and charter-langchain's callback handler on one Governor: the graph's
gate claims every tool call and node body it governs (charter.integration claims), so the
handler neither gates nor records them again and puts what it does record (the model calls)
into the graph's task. One task, one record per tool call, approvals answered once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any, TypedDict

import charter
import charter_langgraph
import pytest
from charter.audit import is_intent_record
from charter.testing import charter_internal_errors  # noqa: F401  (autouse)
from charter_langchain import CharterCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

ASK_WRITES = {
    "name": "writes-need-approval",
    "rule_type": "deny",
    "severity": "high",
    "action": "ask",
    "match": {"step_names": ["write_file"]},
}


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def build(governor: charter.Governor, ran: list[str], *calls: dict[str, Any]) -> Any:
    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(f"read {path}")
        return "contents"

    @tool
    def write_file(path: str, text: str) -> str:
        """Write a file."""
        ran.append(f"write {path}")
        return "written"

    model = GenericFakeChatModel(messages=iter([AIMessage("", tool_calls=list(calls)), "done"]))

    def agent(state: Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([read_file, write_file]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return charter_langgraph.govern(builder, governor=governor).compile(
        checkpointer=InMemorySaver()
    )


@pytest.fixture
def governor(tmp_path: Path) -> Any:
    def make(policies: list[dict[str, Any]]) -> charter.Governor:
        gov = charter.Governor(
            policies=policies,
            agent_id="paired",
            audit_location=f"sqlite:///{tmp_path / 'audit.db'}",
            audit_durability="sync",
        )
        made.append(gov)
        return gov

    made: list[charter.Governor] = []
    yield make
    for gov in made:
        gov.close()


def trail(gov: charter.Governor) -> list[dict[str, Any]]:
    assert gov.flush(5.0)
    store = gov.runner.store
    assert store is not None and store.verify().ok
    # Outcomes only: sync durability also stores each allowed step's intent ahead of it.
    return [
        r
        for t in store.list_tasks("paired")
        for r in store.read_task(t.task_id, "paired")
        if not is_intent_record(r)
    ]


def kinds(records: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    return [(r["kind"], r["step_name"], r["meta"].get("charter.outcome")) for r in records]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_one_task_and_one_record_per_tool_call(governor: Any, asynchronous: bool) -> None:
    gov = governor([])
    ran: list[str] = []
    graph = build(
        gov,
        ran,
        call("read_file", {"path": "a"}, "c1"),
        call("write_file", {"path": "b", "text": "t"}, "c2"),
    )
    config = {"configurable": {"thread_id": "paired"}, "callbacks": [CharterCallbackHandler(gov)]}
    state = {"messages": [HumanMessage("read a, write b")]}

    out = asyncio.run(graph.ainvoke(state, config)) if asynchronous else graph.invoke(state, config)

    assert out["messages"][-1].content == "done"
    assert sorted(ran) == ["read a", "write b"]
    records = trail(gov)
    assert len({r["task_id"] for r in records}) == 1, "one task for both integrations"
    steps = kinds(records)
    assert steps[0][0] == "task.start" and steps[-1][0] == "task.end"
    tools = sorted((name, outcome) for _, name, outcome in steps if name.endswith("_file"))
    assert tools == [("read_file", "ok"), ("write_file", "ok")], "one record per tool call"
    assert [name for _, name, _ in steps].count("agent") == 2
    # The handler recorded the model calls inside the agent node, into the graph's task.
    assert [s[0] for s in steps].count("step.model") == 2


def test_an_approved_ask_runs_once_and_the_task_ends(governor: Any) -> None:
    gov = governor([ASK_WRITES])
    ran: list[str] = []
    graph = build(gov, ran, call("write_file", {"path": "b", "text": "t"}, "c1"))
    handler = CharterCallbackHandler(governor=gov)
    config = {"configurable": {"thread_id": "paired-ask"}, "callbacks": [handler]}

    paused = graph.invoke({"messages": [HumanMessage("write b")]}, config)
    (question,) = paused["__interrupt__"]
    assert [a["name"] for a in question.value["action_requests"]] == ["write_file"]
    assert ran == []

    out = graph.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)

    assert out["messages"][-1].content == "done"
    assert ran == ["write b"], "the approved call runs exactly once"
    records = trail(gov)
    assert len({r["task_id"] for r in records}) == 1
    gates = [r for r in records if r["kind"] == "step.gate"]
    assert [g["output"]["decision"] for g in gates] == ["pass"]
    writes = [r for r in records if r["step_name"] == "write_file"]
    assert [w["meta"]["charter.outcome"] for w in writes] == ["ok"]
    assert gates[0]["seq"] < writes[0]["seq"]
    assert records[-1]["kind"] == "task.end"
