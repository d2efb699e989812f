"""charter-langgraph, offline: a LangGraph agent governed by examples/policies.yaml.

    uv run python examples/langgraph_approval.py

A scripted chat model asks for two tool calls; a payment over the cap is refused (the model
sees the refusal and goes on), then a cleanup node that deletes needs a person's approval:
the graph pauses with `interrupt()`, we approve, and it finishes. The audit trail is printed
and verified at the end. No network, no keys.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any, TypedDict

import charter
import charter_langgraph
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

POLICIES = Path(__file__).resolve().parent / "policies.yaml"


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    charter_blocked: str  # where a refused node's reason lands


@tool
def send_money(to: str, amount: int) -> str:
    """Pay someone."""
    return f"sent {amount} to {to}"


@tool
def get_balance(account: str) -> str:
    """Read an account's balance."""
    return "balance: 12,400"


model = GenericFakeChatModel(
    messages=iter(
        [
            AIMessage(
                content="",
                tool_calls=[
                    {"name": "get_balance", "args": {"account": "ops"}, "id": "c1"},
                    {"name": "send_money", "args": {"to": "acme", "amount": 5000}, "id": "c2"},
                ],
            ),
            "The payment was refused; I will clean up old invoices instead.",
        ]
    )
)


def agent(state: State) -> dict[str, Any]:
    return {"messages": [model.invoke(state["messages"])]}


def cleanup_invoices(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage("Deleted 3 old invoices.")]}


def main() -> None:
    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([send_money, get_balance]))
    builder.add_node("cleanup_invoices", cleanup_invoices)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges(
        "agent", tools_condition, {"tools": "tools", END: "cleanup_invoices"}
    )
    builder.add_edge("tools", "agent")
    builder.add_edge("cleanup_invoices", END)

    with tempfile.TemporaryDirectory() as folder:
        audit = f"{folder}/audit.db"
        graph = charter_langgraph.govern(
            builder,
            policy_file=str(POLICIES),
            agent_id="ops-graph",
            agent_owner="ops-team",
            agent_purpose="pays suppliers and tidies invoices",
            audit_location=f"sqlite:///{audit}",
            nodes={"agent": "step.model", "cleanup_invoices": ("step.resource", "DELETE")},
        ).compile(checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "ops/2026-11-30"}}

        paused = graph.invoke({"messages": [HumanMessage("Pay acme, then tidy up.")]}, config)
        for message in paused["messages"]:
            if message.type == "tool":
                print(f"tool {message.name}: {message.content}")
        # One request for every pending action, in HumanInTheLoopMiddleware's shape.
        (action,) = paused["__interrupt__"][0].value["action_requests"]
        print(f"\npaused: {action['charter']['kind']} {action['charter']['verb']}")
        print(f"  step {action['name']!r}: {action['description']}")

        answer = charter_langgraph.approve(
            by="alice", why="quarterly cleanup", digest=action["charter"]["digest"]
        )
        done = graph.invoke(Command(resume={"decisions": [answer]}), config)
        print(f"\nfinal message: {done['messages'][-1].content}")

        governor = charter_langgraph.governor_of(graph)
        governor.close()
        store = charter.open_store(audit)
        print("\naudit trail:")
        for task in store.list_tasks():
            for r in store.read_task(task.task_id, task.agent_id):
                what = f"{r['kind']} {r.get('verb') or ''}"
                outcome = (r.get("meta") or {}).get("charter.outcome", "")
                print(f"  {r['seq']:>2} {what:<21} {r['step_name']:<18} {outcome}")
        store.close()
        print(f"\nverify: {charter.verify(audit)}")


if __name__ == "__main__":
    main()
