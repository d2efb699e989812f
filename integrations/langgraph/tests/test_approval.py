"""Ask -> interrupt() -> Command(resume=...) -> a step.gate bound to the step's input digest,
with real checkpointers: InMemorySaver, and SQLite across a process restart."""

from __future__ import annotations

import sqlite3
import time
from typing import Any, NotRequired, TypedDict

import charter
import charter_langgraph
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt


class State(TypedDict):
    amount: int
    rounds: int
    note: NotRequired[str]
    charter_blocked: NotRequired[str]


def payment_graph(ran: list[str], loops: int = 1) -> StateGraph:
    """prepare -> pay (a POST the policies ask about), looping `loops` times."""

    def prepare(state: State) -> dict[str, Any]:
        ran.append("prepare")
        return {"rounds": state["rounds"] + 1}

    def pay(state: State) -> dict[str, Any]:
        ran.append("pay")
        return {"note": f"paid {state['amount']}"}

    builder = StateGraph(State)
    builder.add_node("prepare", prepare)
    builder.add_node("pay", pay, metadata={"charter": ("step.resource", "POST")})
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "pay")
    builder.add_conditional_edges("pay", lambda s: "prepare" if s["rounds"] < loops else END)
    return builder


def thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


def test_approve_runs_the_node_and_records_a_gate_bound_to_its_input(
    settings, governors, trail, lg
):
    ran: list[str] = []
    graph = charter_langgraph.govern(payment_graph(ran), **settings).compile(
        checkpointer=InMemorySaver()
    )
    governors.append(charter_langgraph.governor_of(graph))

    paused = graph.invoke({"amount": 40, "rounds": 0}, thread("approve"))

    assert ran == ["prepare"]
    (question,) = paused["__interrupt__"]
    # One HumanInTheLoopMiddleware-shaped request; Charter's facts under each action's charter.
    (asked,) = question.value["action_requests"]
    assert question.value["review_configs"] == [
        {"action_name": "pay", "allowed_decisions": ["approve", "reject"]}
    ]
    assert (asked["name"], asked["args"]) == ("pay", {"amount": 40, "rounds": 1})
    digest = charter.canonical_digest({"amount": 40, "rounds": 1})
    assert asked["charter"] == {
        "kind": "step.resource",
        "verb": "POST",
        "policies": ["posts-need-approval"],
        "tool_call_id": None,
        "digest": digest,
    }
    assert asked["description"].startswith("approval required by policy 'posts-need-approval'")

    approval = charter_langgraph.approve(by="alice", why="ok", digest=digest)
    out = graph.invoke(Command(resume=approval), thread("approve"))

    assert out["note"] == "paid 40" and ran == ["prepare", "pay"]
    records = trail()
    assert lg.steps(records) == [
        ("task.start", "LangGraph", None),
        ("step.exec", "prepare", "ok"),
        ("step.gate", "approval", None),
        ("step.resource", "pay", "ok"),
        ("task.end", "LangGraph", None),
    ]
    gate, pay = records[2], records[3]
    assert gate["output"] == {"decision": "pass", "by": "alice", "why": "ok"}
    assert gate["properties"]["gate"]["digest"] == digest == charter.canonical_digest(pay["input"])
    assert gate["properties"]["gate"]["step_name"] == pay["step_name"] == "pay"
    assert gate["seq"] < pay["seq"]
    assert gate["properties"]["gate"]["policies"] == ["posts-need-approval"]


@pytest.mark.parametrize(
    "answer",
    [
        charter_langgraph.deny(by="bob", why="too much"),
        False,
        "reject",
        {"decisions": [{"type": "reject", "message": "no"}]},
        {"something": "else"},
        42,
    ],
)
def test_anything_but_a_clear_approval_denies_and_the_node_never_runs(
    settings, governors, trail, lg, answer
):
    ran: list[str] = []
    graph = charter_langgraph.govern(payment_graph(ran), **settings).compile(
        checkpointer=InMemorySaver()
    )
    governors.append(charter_langgraph.governor_of(graph))
    graph.invoke({"amount": 40, "rounds": 0}, thread("deny"))

    out = graph.invoke(Command(resume=answer), thread("deny"))

    assert ran == ["prepare"]
    assert out["charter_blocked"].startswith("blocked: approval denied by")
    assert lg.steps(trail())[2:] == [
        ("step.gate", "approval", None),
        ("step.resource", "pay", "blocked"),
        ("task.end", "LangGraph", None),
    ]


def test_an_approval_for_another_input_is_stale_and_denies(settings, governors, trail):
    ran: list[str] = []
    graph = charter_langgraph.govern(payment_graph(ran), **settings).compile(
        checkpointer=InMemorySaver()
    )
    governors.append(charter_langgraph.governor_of(graph))
    graph.invoke({"amount": 40, "rounds": 0}, thread("stale"))
    stale = charter.canonical_digest({"amount": 9_999, "rounds": 1})

    graph.invoke(Command(resume=charter_langgraph.approve(by="eve", digest=stale)), thread("stale"))

    assert ran == ["prepare"]
    gate = next(r for r in trail() if r["kind"] == "step.gate")
    assert gate["output"]["decision"] == "deny"
    assert "digest mismatch" in gate["output"]["why"]


def test_each_run_of_a_node_needs_its_own_approval(settings, governors, trail, lg):
    ran: list[str] = []
    graph = charter_langgraph.govern(payment_graph(ran, loops=2), **settings).compile(
        checkpointer=InMemorySaver()
    )
    governors.append(charter_langgraph.governor_of(graph))
    config = thread("twice")

    graph.invoke({"amount": 5, "rounds": 0}, config)
    second = graph.invoke(Command(resume=charter_langgraph.approve(by="a")), config)

    # The first approval was used up by the first payment: the second one asks again.
    assert ran == ["prepare", "pay", "prepare"]
    assert second["__interrupt__"][0].value["action_requests"][0]["args"] == {
        "amount": 5,
        "rounds": 2,
        "note": "paid 5",
    }
    graph.invoke(Command(resume=charter_langgraph.approve(by="b")), config)
    assert ran == ["prepare", "pay", "prepare", "pay"]
    gates = [r["output"]["by"] for r in trail() if r["kind"] == "step.gate"]
    assert gates == ["a", "b"]


def test_the_gate_is_idempotent_when_the_node_pauses_again_itself(settings, governors, trail, lg):
    bodies: list[str] = []

    def pay(state: State) -> dict[str, Any]:
        bodies.append("pay")
        memo = interrupt({"question": "memo for the payment?"})
        return {"note": f"paid with memo {memo}"}

    builder = StateGraph(State)
    builder.add_node("pay", pay, metadata={"charter": ("step.resource", "POST")})
    builder.add_edge(START, "pay")
    graph = charter_langgraph.govern(builder, **settings).compile(checkpointer=InMemorySaver())
    governors.append(charter_langgraph.governor_of(graph))
    config = thread("twice-paused")

    first = graph.invoke({"amount": 1, "rounds": 0}, config)
    assert first["__interrupt__"][0].value["action_requests"][0]["name"] == "pay"
    second = graph.invoke(Command(resume=charter_langgraph.approve(by="ann")), config)
    # The node's own question comes next; Charter's answer did not leak into it.
    assert second["__interrupt__"][0].value == {"question": "memo for the payment?"}
    out = graph.invoke(Command(resume="M-7"), config)

    assert out["note"] == "paid with memo M-7"
    assert bodies == ["pay", "pay"]
    records = trail()
    assert lg.steps(records) == [
        ("task.start", "LangGraph", None),
        ("step.gate", "approval", None),
        ("step.resource", "pay", "abandoned"),  # paused by its own interrupt, ran again
        ("step.gate", "approval", None),
        ("step.resource", "pay", "ok"),
        ("task.end", "LangGraph", None),
    ]
    assert [r["output"]["by"] for r in records if r["kind"] == "step.gate"] == ["ann", "ann"]


def test_requires_gate_history_rule_across_nodes(audit, governors, trail, lg):
    # A delete needs an earlier passing human gate in the task; gates are asked for by the
    # review node (a POST the second policy asks about), and one gate allows one delete.
    policies = [
        {
            "name": "review-first",
            "rule_type": "deny",
            "severity": "high",
            "action": "ask",
            "match": {"kinds": ["step.resource"], "verbs": ["POST"], "step_names": ["review"]},
            "params": {"reason": "a person reviews the cleanup"},
        },
        {
            "name": "delete-after-review",
            "rule_type": "requires_gate",
            "severity": "critical",
            "match": {"kinds": ["step.resource"], "verbs": ["DELETE"]},
            "params": {
                "gate_kind": "human",
                "same_step": False,
                "bind_input": False,
                "select": {"kinds": ["step.resource"], "verbs": ["DELETE"]},
            },
        },
    ]
    deleted: list[int] = []

    def review(state: State) -> dict[str, Any]:
        return {}

    def cleanup(state: State) -> dict[str, Any]:
        deleted.append(state["rounds"])
        return {"rounds": state["rounds"] + 1}

    def graph_with(entry: str) -> Any:
        builder = StateGraph(State)
        builder.add_node("review", review)
        builder.add_node("cleanup", cleanup)
        builder.add_edge(START, entry)
        if entry == "review":
            builder.add_edge("review", "cleanup")
        builder.add_conditional_edges("cleanup", lambda s: "cleanup" if s["rounds"] < 2 else END)
        graph = charter_langgraph.govern(
            builder,
            nodes={"review": ("step.resource", "POST"), "cleanup": ("step.resource", "DELETE")},
            policies=policies,
            agent_id="graph-bot",
            audit_location=audit,
        ).compile(checkpointer=InMemorySaver())
        governors.append(charter_langgraph.governor_of(graph))
        return graph

    # Without a review, the delete is blocked.
    unreviewed = graph_with("cleanup")
    out = unreviewed.invoke({"amount": 0, "rounds": 0}, thread("no-review"))
    assert deleted == [] and "needs a passing human approval" in out["charter_blocked"]

    # With one approved review, one delete runs; the second needs another approval.
    reviewed = graph_with("review")
    reviewed.invoke({"amount": 0, "rounds": 0}, thread("review"))
    out = reviewed.invoke(Command(resume=charter_langgraph.approve(by="lee")), thread("review"))
    assert deleted == [0]
    assert "was already used" in out["charter_blocked"]
    kinds = lg.steps(trail())
    assert ("step.resource", "cleanup", "ok") in kinds
    assert kinds.count(("step.resource", "cleanup", "blocked")) == 2


def test_resume_after_a_restart_continues_the_task_and_needs_a_fresh_approval(
    tmp_path, audit, governors, trail, lg
):
    checkpoints = str(tmp_path / "checkpoints.db")
    ran: list[str] = []

    def process() -> tuple[Any, sqlite3.Connection]:
        # A new Governor, a new SQLite connection and a new compiled graph: what a restarted
        # process has; only the two files carry over.
        conn = sqlite3.connect(checkpoints, check_same_thread=False)
        graph = charter_langgraph.govern(
            payment_graph(ran, loops=2),
            policies=_policies(),
            agent_id="graph-bot",
            audit_location=audit,
        ).compile(checkpointer=SqliteSaver(conn))
        return graph, conn

    first, conn = process()
    config = thread("order/42")
    first.invoke({"amount": 10, "rounds": 0}, config)
    first.invoke(Command(resume=charter_langgraph.approve(by="amy")), config)
    assert ran == ["prepare", "pay", "prepare"]  # paused before the second payment
    charter_langgraph.governor_of(first).close()
    conn.close()

    second, conn = process()
    governors.append(charter_langgraph.governor_of(second))
    snapshot = second.get_state(config)
    assert snapshot.next == ("pay",)  # still waiting: the first approval does not carry over
    out = second.invoke(Command(resume=charter_langgraph.approve(by="ben")), config)
    conn.close()

    assert out["note"] == "paid 10" and ran == ["prepare", "pay", "prepare", "pay"]
    records = trail()
    assert len({r["task_id"] for r in records}) == 1  # one task across both processes
    assert records[0]["properties"]["framework"]["thread_id"] == "order/42"
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert lg.steps(records) == [
        ("task.start", "LangGraph", None),
        ("step.exec", "prepare", "ok"),
        ("step.gate", "approval", None),
        ("step.resource", "pay", "ok"),
        ("step.exec", "prepare", "ok"),
        ("step.gate", "approval", None),
        ("step.resource", "pay", "ok"),
        ("task.end", "LangGraph", None),
    ]
    assert [r["output"]["by"] for r in records if r["kind"] == "step.gate"] == ["amy", "ben"]


def test_without_a_checkpointer_the_approver_decides(settings, governors, trail):
    ran: list[str] = []
    asked: list[str] = []

    def approver(request: charter.ApprovalRequest) -> charter.Approval:
        asked.append(request.behavior.step_name)
        return charter.Approval(True, "bot", "in budget")

    graph = charter_langgraph.govern(payment_graph(ran), approver=approver, **settings).compile()
    governors.append(charter_langgraph.governor_of(graph))

    out = graph.invoke({"amount": 3, "rounds": 0})

    assert asked == ["pay"] and out["note"] == "paid 3"
    gate = next(r for r in trail() if r["kind"] == "step.gate")
    assert gate["output"] == {"decision": "pass", "by": "bot", "why": "in budget"}


def _policies() -> list[dict[str, Any]]:
    return [
        {
            "name": "posts-need-approval",
            "rule_type": "deny",
            "severity": "high",
            "action": "ask",
            "match": {"kinds": ["step.resource"], "verbs": ["POST"]},
            "params": {"reason": "a person approves every write"},
        }
    ]


def test_a_paused_task_closed_as_idle_is_continued_by_a_new_task(audit, governors, trail, lg):
    ran: list[str] = []
    graph = charter_langgraph.govern(
        payment_graph(ran),
        policies=_policies(),
        agent_id="graph-bot",
        audit_location=audit,
        task_idle_seconds=0.001,
        sweep_interval_seconds=3600,
    ).compile(checkpointer=InMemorySaver())
    governor = charter_langgraph.governor_of(graph)
    governors.append(governor)
    config = thread("idle")
    graph.invoke({"amount": 2, "rounds": 0}, config)
    first_task = trail()[0]["task_id"]

    time.sleep(0.01)
    assert governor.runner.sweep_idle() == [first_task]
    out = graph.invoke(Command(resume=charter_langgraph.approve(by="kim")), config)

    assert out["note"] == "paid 2" and ran == ["prepare", "pay"]
    records = trail()
    second = [r for r in records if r["task_id"] != first_task]
    assert lg.steps([r for r in records if r["task_id"] == first_task])[-1] == (
        "task.idle",
        "LangGraph",
        None,
    )
    assert second[0]["properties"]["framework"]["continues"] == first_task
    assert lg.steps(second)[1:] == [
        ("step.gate", "approval", None),
        ("step.resource", "pay", "ok"),
        ("task.end", "LangGraph", None),
    ]
