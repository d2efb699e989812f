"""What other integrations see (without importing this package) to avoid double records:
the core claim (`charter.integration.current_claim()`) on exactly the runs charter-langgraph
gated, from inside LangGraph's executor threads and async tasks, and the task in the run
metadata and the thread's checkpoints."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any, TypedDict
from uuid import UUID

import charter_langgraph
import pytest
from charter.integration import current_claim
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition


class Recorder(BaseCallbackHandler):
    """A plain handler: notes each run's kind, name, task metadata and the claim it sees."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    def _note(self, event: str, name: Any, metadata: Any, call_id: Any = None) -> None:
        metadata = dict(metadata or {})
        held = current_claim()
        self.runs.append(
            {
                "event": event,
                "name": name,
                "task": metadata.get("charter_task_id"),
                "agent": metadata.get("charter_agent_id"),
                "call_id": call_id,
                "claim": held,
                "taken": held is not None and held.take(event, call_id, name),
                "thread": threading.get_ident(),
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


def chat_graph(lg: Any, settings: dict[str, Any], saver: InMemorySaver, asynchronous: bool) -> Any:
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

    async def aagent(state: Chat) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(Chat)
    builder.add_node("agent", aagent if asynchronous else agent)
    builder.add_node("tools", ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return charter_langgraph.govern(builder, **settings).compile(checkpointer=saver)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_callback_handler_sees_the_claim_on_exactly_the_gated_steps(
    settings, governors, trail, lg, asynchronous
):
    saver = InMemorySaver()
    graph = chat_graph(lg, settings, saver, asynchronous)
    governor = charter_langgraph.governor_of(graph)
    governors.append(governor)
    recorder = Recorder()
    config = {"configurable": {"thread_id": f"claims-{asynchronous}"}, "callbacks": [recorder]}

    state = {"messages": [HumanMessage("find a and b")]}
    if asynchronous:
        asyncio.run(graph.ainvoke(state, config))
    else:
        graph.invoke(state, config)

    records = trail()
    task_id = records[0]["task_id"]
    # Every run of the graph run, root included, names its Charter task and agent.
    assert {(r["task"], r["agent"]) for r in recorder.runs} == {(task_id, "graph-bot")}
    # Each tool call runs under its own claim (on ToolNode's executor threads under invoke),
    # which a handler takes once: it neither gates nor records the call again.
    tools = [r for r in recorder.runs if r["event"] == "tool"]
    assert sorted(r["call_id"] for r in tools) == ["t1", "t2"]
    for run in tools:
        held = run["claim"]
        assert (held.kind, held.call_id, held.name) == ("tool", run["call_id"], "lookup")
        assert held.governor is governor and held.task_id == task_id and run["taken"]
    if not asynchronous:
        assert len({r["thread"] for r in tools} - {threading.get_ident()}) >= 1
    # The model calls run inside the agent node's claim: not claimed as models (a handler
    # records them), but into this task.
    models = [r for r in recorder.runs if r["event"] == "model"]
    assert len(models) == 2
    for run in models:
        held = run["claim"]
        assert (held.kind, held.name, held.task_id) == ("node", "agent", task_id)
        assert not run["taken"]
    # Outside the gated steps (the graph's own runs) there is no claim.
    assert recorder.runs[0]["event"] == "chain" and recorder.runs[0]["claim"] is None
    assert current_claim() is None
    recorded = sorted(r["step_name"] for r in records if r["kind"].startswith("step."))
    # The graph input's human message is the user's request, recorded once as user content.
    assert recorded == ["agent", "agent", "lookup", "lookup", "user_message"]
    (said,) = [r for r in records if r["step_name"] == "user_message"]
    assert said["input"]["content"] == "find a and b"
    assert said["properties"]["message"] == {"role": "user"}
    # The task id is in the thread's checkpoints too: that is how a resume finds it.
    latest = saver.get_tuple(config)
    assert latest is not None and latest.metadata["charter_task_id"] == task_id
