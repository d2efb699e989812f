"""The integration contract (charter.testing) on a real LangGraph graph: a scripted model in
an agent node calls the contract's tool once through a ToolNode; asks pause with interrupt()
and are answered with Command(resume={"decisions": [...]})."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import charter_langgraph
import pytest
from charter import Governor
from charter.testing import CONTRACT_TOOL, PairedIntegrationContract, ToolRun
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class LangGraphAdapter:
    def _run(
        self, governor: Governor, args: dict[str, Any], approve: bool, callbacks: list
    ) -> ToolRun:
        run = ToolRun()

        def probe(target: str, count: int) -> str:
            run.calls.append({"target": target, "count": count})
            return "probed"

        tool = StructuredTool.from_function(probe, name=CONTRACT_TOOL, description="Probe.")
        call = {"name": CONTRACT_TOOL, "args": args, "id": "call-1", "type": "tool_call"}
        model = GenericFakeChatModel(messages=iter([AIMessage("", tool_calls=[call]), "done"]))

        def agent(state: Chat) -> dict[str, Any]:
            return {"messages": [model.invoke(state["messages"])]}

        builder = StateGraph(Chat)
        builder.add_node("agent", agent)
        builder.add_node("tools", ToolNode([tool]))
        builder.add_edge(START, "agent")
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
        graph = charter_langgraph.govern(builder, governor=governor).compile(
            checkpointer=InMemorySaver()
        )
        config: dict[str, Any] = {"configurable": {"thread_id": "contract"}}
        if callbacks:
            config["callbacks"] = callbacks
        decision = {"type": "approve" if approve else "reject"}
        try:
            out = graph.invoke({"messages": [HumanMessage("probe once")]}, config)
            while out.get("__interrupt__"):
                (question,) = out["__interrupt__"]
                answers = [decision for _ in question.value["action_requests"]]
                out = graph.invoke(Command(resume={"decisions": answers}), config)
        except Exception as exc:
            run.error = exc
            return run
        refusals = [
            m.content for m in out["messages"] if isinstance(m, ToolMessage) and m.status == "error"
        ]
        run.refusal = str(refusals[0]) if refusals else None
        return run

    def run_tool(self, governor: Governor, args: dict[str, Any], approve: bool) -> ToolRun:
        return self._run(governor, args, approve, [])

    def run_tool_doubly(self, governor: Governor, args: dict[str, Any]) -> ToolRun:
        from charter_langchain import CharterCallbackHandler

        return self._run(governor, args, True, [CharterCallbackHandler(governor=governor)])


class TestLangGraphContract(PairedIntegrationContract):
    @pytest.fixture
    def adapter(self) -> LangGraphAdapter:
        return LangGraphAdapter()
