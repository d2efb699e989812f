"""The marker other integrations read (without importing this package) to avoid double
records: a plain LangChain callback handler sees, on every run of a governed graph, the
task it belongs to, and on exactly the runs charter-langgraph gated, that they are gated."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict
from uuid import UUID

import charter_langgraph
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition


def already_gated(event: str, name: str | None, metadata: dict[str, Any], call_id: Any) -> bool:
    """The rule a callback handler follows: skip a run charter-langgraph gated itself."""
    marker = metadata.get("charter_gated")
    if event == "chain" and name is not None and name == metadata.get("langgraph_node"):
        return marker == f"node:{name}"
    if event == "tool" and call_id is not None:
        return marker == f"tool:{call_id}"
    return False


class Recorder(BaseCallbackHandler):
    """A plain handler: notes each run's kind, name, task marker and whether it is gated."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    def _note(self, event: str, name: Any, metadata: Any, call_id: Any = None, **_: Any) -> None:
        metadata = dict(metadata or {})
        self.runs.append(
            {
                "event": event,
                "name": name,
                "task": metadata.get("charter_task_id"),
                "agent": metadata.get("charter_agent_id"),
                "gated": already_gated(event, name, metadata, call_id),
                "call_id": call_id,
            }
        )

    def on_chain_start(
        self, serialized: Any, inputs: Any, *, run_id: UUID, metadata: Any = None, **kw: Any
    ) -> None:
        self._note("chain", kw.get("name"), metadata)

    def on_chat_model_start(
        self, serialized: Any, messages: Any, *, run_id: UUID, metadata: Any = None, **kw: Any
    ) -> None:
        self._note("model", kw.get("name") or "chat_model", metadata)

    def on_tool_start(
        self, serialized: Any, input_str: str, *, run_id: UUID, metadata: Any = None, **kw: Any
    ) -> None:
        name = kw.get("name") or (serialized or {}).get("name")
        self._note("tool", name, metadata, kw.get("tool_call_id"))


def test_a_plain_callback_handler_sees_the_task_and_exactly_the_gated_runs(
    settings, governors, trail, lg
):
    class Chat(TypedDict):
        messages: Annotated[list[AnyMessage], add_messages]

    @tool
    def lookup(query: str) -> str:
        """Look something up."""
        return "found"

    model = lg.scripted(
        AIMessage(
            content="",
            tool_calls=[
                lg.tool_call("lookup", {"query": "a"}, "t1"),
                lg.tool_call("lookup", {"query": "b"}, "t2"),
            ],
        ),
        "answer",
    )

    def agent(state: Chat) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    saver = InMemorySaver()
    graph = charter_langgraph.govern(builder, **settings).compile(checkpointer=saver)
    governors.append(charter_langgraph.governor_of(graph))
    recorder = Recorder()
    config = {"configurable": {"thread_id": "marker"}, "callbacks": [recorder]}

    graph.invoke({"messages": [HumanMessage("find a and b")]}, config)

    records = trail()
    task_id = records[0]["task_id"]
    # Every run of the graph run, root included, names its Charter task and agent.
    assert {(r["task"], r["agent"]) for r in recorder.runs} == {(task_id, "graph-bot")}
    claimed = sorted((r["event"], r["name"], r["call_id"]) for r in recorder.runs if r["gated"])
    assert claimed == [
        ("chain", "agent", None),
        ("chain", "agent", None),
        ("chain", "tools", None),
        ("tool", "lookup", "t1"),
        ("tool", "lookup", "t2"),
    ]
    # The model calls inside the node are not gated here: a handler may record them.
    models = [r for r in recorder.runs if r["event"] == "model"]
    assert len(models) == 2 and not any(r["gated"] for r in models)
    # What was claimed is what charter-langgraph recorded (the ToolNode by its calls).
    recorded = sorted(r["step_name"] for r in records if r["kind"].startswith("step."))
    assert recorded == ["agent", "agent", "lookup", "lookup"]
    # The task id is in the thread's checkpoints too: that is how a resume finds it.
    latest = saver.get_tuple(config)
    assert latest is not None and latest.metadata["charter_task_id"] == task_id
