"""Tool calls inside ToolNodes: each call gated with the templates' mapping; a refused call
becomes an error ToolMessage and the agent loop goes on."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import charter_langgraph
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command


class AgentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def make_tools(ran: list[str]) -> list[Any]:
    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(f"read {path}")
        return "contents"

    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        ran.append(f"delete {path}")
        return "deleted"

    @tool
    def write_file(path: str, text: str) -> str:
        """Write a file."""
        ran.append(f"write {path}")
        return "written"

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        ran.append(f"email {to}")
        return "sent"

    @tool
    def broken_lookup(query: str) -> str:
        """Look something up (always fails)."""
        raise ValueError("index offline")

    return [read_file, delete_file, write_file, send_email, broken_lookup]


def agent_graph(model: Any, tools: list[Any], tool_node: ToolNode | None = None) -> StateGraph:
    def agent(state: AgentState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(AgentState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tool_node or ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder


def test_blocked_tool_call_returns_an_error_message_and_the_loop_goes_on(
    settings, governors, trail, lg
):
    ran: list[str] = []
    model = lg.scripted(
        AIMessage(
            content="",
            tool_calls=[
                lg.tool_call("read_file", {"path": "notes.txt"}, "c1"),
                lg.tool_call("delete_file", {"path": "notes.txt"}, "c2"),
                lg.tool_call("send_email", {"to": "ops@example.com", "body": "hi"}, "c3"),
            ],
        ),
        "done",
    )
    graph = charter_langgraph.govern(
        agent_graph(model, make_tools(ran)), nodes={"agent": "step.model"}, **settings
    ).compile()
    governors.append(charter_langgraph.governor_of(graph))

    out = graph.invoke({"messages": [HumanMessage("tidy up")]})

    assert sorted(ran) == ["email ops@example.com", "read notes.txt"]
    refusal = next(m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error")
    assert refusal.tool_call_id == "c2" and refusal.name == "delete_file"
    assert refusal.content.startswith("Blocked by Charter: ") and "deletes" in refusal.content
    assert out["messages"][-1].content == "done"

    records = trail()
    by_name = {r["step_name"]: r for r in records}
    assert (by_name["read_file"]["kind"], by_name["read_file"]["verb"]) == ("step.resource", "GET")
    assert by_name["delete_file"]["meta"]["charter.outcome"] == "blocked"
    assert (by_name["send_email"]["kind"], by_name["send_email"]["verb"]) == (
        "step.message",
        "POST",
    )
    assert by_name["send_email"]["properties"]["message"]["to"] == "ops@example.com"
    assert by_name["send_email"]["properties"]["tool"]["call_id"] == "c3"
    assert by_name["send_email"]["properties"]["framework"] == {
        "name": "langgraph",
        "node": "tools",
        "step": 2,
    }
    # The ToolNode itself is not a step: its tool calls are.
    assert [r["step_name"] for r in records].count("tools") == 0
    assert [r["step_name"] for r in records].count("agent") == 2
    assert records[-1]["kind"] == "task.end"


def test_a_failing_tool_is_recorded_failed(settings, governors, trail, lg):
    model = lg.scripted(
        AIMessage(content="", tool_calls=[lg.tool_call("broken_lookup", {"query": "q"}, "c1")]),
        "gave up",
    )
    tools = make_tools([])
    node = ToolNode(tools, handle_tool_errors=True)
    graph = charter_langgraph.govern(agent_graph(model, tools, node), **settings).compile()
    governors.append(charter_langgraph.governor_of(graph))

    out = graph.invoke({"messages": [HumanMessage("look it up")]})

    assert out["messages"][-1].content == "gave up"
    failed = next(r for r in trail() if r["step_name"] == "broken_lookup")
    assert failed["meta"]["charter.outcome"] == "failed"
    assert failed["output"]["error"]["type"] == "ToolCallFailed"
    assert "index offline" in failed["output"]["error"]["message"]


def test_the_gate_sees_a_call_as_the_users_wrapper_edited_it(settings, governors, trail, lg):
    ran: list[str] = []
    tools = make_tools(ran)

    def retarget(request: Any, execute: Any) -> Any:
        # An edit that turns a read into a delete must be judged as the delete it became.
        edited = {**request.tool_call, "name": "delete_file"}
        by_name = {t.name: t for t in tools}
        return execute(request.override(tool_call=edited, tool=by_name["delete_file"]))

    model = lg.scripted(
        AIMessage(content="", tool_calls=[lg.tool_call("read_file", {"path": "a"}, "c1")]),
        "ok",
    )
    node = ToolNode(tools, wrap_tool_call=retarget)
    graph = charter_langgraph.govern(agent_graph(model, tools, node), **settings).compile()
    governors.append(charter_langgraph.governor_of(graph))

    graph.invoke({"messages": [HumanMessage("read a")]})

    assert ran == []
    gated = next(r for r in trail() if r["kind"] == "step.resource")
    assert (gated["step_name"], gated["verb"]) == ("delete_file", "DELETE")
    assert gated["meta"]["charter.outcome"] == "blocked"
    # The user's ToolNode object is left as it was.
    assert node._wrap_tool_call is retarget


def test_a_tool_call_a_policy_asks_about_pauses_and_runs_once_approved(
    settings, governors, trail, lg
):
    ran: list[str] = []
    model = lg.scripted(
        AIMessage(
            content="",
            tool_calls=[
                lg.tool_call("read_file", {"path": "a"}, "c1"),
                lg.tool_call("write_file", {"path": "a", "text": "new"}, "c2"),
            ],
        ),
        "written",
    )
    graph = charter_langgraph.govern(agent_graph(model, make_tools(ran)), **settings).compile(
        checkpointer=InMemorySaver()
    )
    governors.append(charter_langgraph.governor_of(graph))
    config = {"configurable": {"thread_id": "tools-ask"}}

    paused = graph.invoke({"messages": [HumanMessage("edit a")]}, config)

    assert ran == []  # the question comes before any call of the ToolNode runs
    (question,) = paused["__interrupt__"]
    (asked,) = question.value["action_requests"]  # only the call a policy asks about
    assert asked["name"] == "write_file" and asked["args"] == {"path": "a", "text": "new"}
    assert asked["charter"]["tool_call_id"] == "c2"
    assert asked["charter"]["policies"] == ["posts-need-approval"]
    assert question.value["review_configs"] == [
        {"action_name": "write_file", "allowed_decisions": ["approve", "edit", "reject"]}
    ]

    out = graph.invoke(Command(resume=charter_langgraph.approve(by="dana", why="fine")), config)

    assert sorted(ran) == ["read a", "write a"]
    assert out["messages"][-1].content == "written"
    records = trail()
    gate = next(r for r in records if r["kind"] == "step.gate")
    assert gate["output"] == {"decision": "pass", "by": "dana", "why": "fine"}
    assert gate["properties"]["gate"]["digest"] == asked["charter"]["digest"]
    write = next(r for r in records if r["step_name"] == "write_file")
    assert write["meta"]["charter.outcome"] == "ok"
    assert write["meta"]["charter.eval"]["approved"] is True
    assert len({r["task_id"] for r in records}) == 1


def test_two_asking_calls_pause_once_with_both_in_call_order(settings, governors, trail, lg):
    ran: list[str] = []
    model = lg.scripted(
        AIMessage(
            content="",
            tool_calls=[
                lg.tool_call("write_file", {"path": "a", "text": "1"}, "w1"),
                lg.tool_call("write_file", {"path": "b", "text": "2"}, "w2"),
            ],
        ),
        "both handled",
    )
    graph = charter_langgraph.govern(agent_graph(model, make_tools(ran)), **settings).compile(
        checkpointer=InMemorySaver()
    )
    governors.append(charter_langgraph.governor_of(graph))
    config = {"configurable": {"thread_id": "two-asks"}}

    first = graph.invoke({"messages": [HumanMessage("write a and b")]}, config)
    (question,) = first["__interrupt__"]  # one interrupt carries every pending action
    asked = question.value["action_requests"]
    assert [a["charter"]["tool_call_id"] for a in asked] == ["w1", "w2"]
    decisions = [charter_langgraph.approve(by="a"), charter_langgraph.deny(by="b", why="not b")]
    out = graph.invoke(Command(resume={"decisions": decisions}), config)

    assert ran == ["write a"]
    refusal = next(m for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error")
    assert refusal.tool_call_id == "w2" and "approval denied by b: not b" in refusal.content
    gates = [
        (r["output"]["by"], r["output"]["decision"]) for r in trail() if r["kind"] == "step.gate"
    ]
    # The calls run in parallel, so their gates are recorded in either order.
    assert sorted(gates) == [("a", "pass"), ("b", "deny")]


def test_an_edited_call_runs_as_edited_after_its_own_approval(settings, governors, trail, lg):
    ran: list[str] = []
    model = lg.scripted(
        AIMessage(
            content="",
            tool_calls=[lg.tool_call("write_file", {"path": "/etc/x", "text": "t"}, "c1")],
        ),
        "written",
    )
    graph = charter_langgraph.govern(agent_graph(model, make_tools(ran)), **settings).compile(
        checkpointer=InMemorySaver()
    )
    governors.append(charter_langgraph.governor_of(graph))
    config = {"configurable": {"thread_id": "tools-edit"}}
    graph.invoke({"messages": [HumanMessage("write")]}, config)
    edit = {
        "type": "edit",
        "by": "eli",
        "message": "write to tmp instead",
        "edited_action": {"name": "write_file", "args": {"path": "/tmp/x", "text": "t"}},
    }

    # The edit is a new call: the policy asks about it too, in a second question.
    again = graph.invoke(Command(resume={"decisions": [edit]}), config)
    assert ran == []
    (asked,) = again["__interrupt__"][0].value["action_requests"]
    assert asked["args"] == {"path": "/tmp/x", "text": "t"}
    out = graph.invoke(Command(resume=charter_langgraph.approve(by="eli")), config)

    assert ran == ["write /tmp/x"] and out["messages"][-1].content == "written"
    tool_result = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert tool_result.tool_call_id == "c1" and tool_result.status != "error"
    records = trail()
    gates = [r["output"]["decision"] for r in records if r["kind"] == "step.gate"]
    assert gates == ["deny", "pass"]  # the original denied by the edit, the edit approved
    writes = [
        (r["input"]["path"], r["meta"]["charter.outcome"])
        for r in records
        if r["step_name"] == "write_file"
    ]
    assert writes == [("/etc/x", "blocked"), ("/tmp/x", "ok")]
