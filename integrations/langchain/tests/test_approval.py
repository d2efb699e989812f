"""Ask -> LangGraph interrupt (HumanInTheLoopMiddleware's shape) -> Command(resume=...)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import charter
import pytest
from charter_langchain import CharterMiddleware
from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command


class Session:
    """One agent on one thread, run sync or async."""

    def __init__(self, agent: Any, mode: str, thread: str = "review-1") -> None:
        self.agent = agent
        self.mode = mode
        self.config = {"configurable": {"thread_id": thread}}

    def send(self, value: Any) -> Any:
        if self.mode == "invoke":
            return self.agent.invoke(value, self.config)
        return asyncio.run(self.agent.ainvoke(value, self.config))

    def start(self, text: str = "go") -> Any:
        return self.send({"messages": [{"role": "user", "content": text}]})

    def resume(self, answer: Any) -> Any:
        return self.send(Command(resume=answer))


def _agent(h: Any, gov: Any, tools: dict[str, Any], *turns: Any, names: list[str]) -> Any:
    return create_agent(
        h.scripted(*turns),
        [tools[n] for n in names],
        middleware=[CharterMiddleware(gov)],
        checkpointer=InMemorySaver(),
    )


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_approved_call_runs_after_the_pause(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str], mode: str
) -> None:
    gov, audit = make_governor([h.ask("mail-ask", step_names=["send_email"])])
    args = {"to": "ann@example.com", "body": "hi"}
    agent = _agent(
        h, gov, tools, h.ai(h.call("send_email", **args)), h.ai(text="sent"), names=["send_email"]
    )
    session = Session(agent, mode)
    paused = session.start()
    (pending,) = paused["__interrupt__"]
    assert ran["send_email"] == 0
    request = pending.value
    assert request["action_requests"][0]["name"] == "send_email"
    assert request["action_requests"][0]["args"] == args
    assert "mail-ask" in request["action_requests"][0]["description"]
    assert request["review_configs"] == [
        {"action_name": "send_email", "allowed_decisions": ["approve", "edit", "reject"]}
    ]
    done = session.resume({"decisions": [{"type": "approve", "by": "ann@ops"}]})
    assert done["messages"][-1].content == "sent"
    assert ran["send_email"] == 1
    (gate,) = audit.steps("step.gate")
    assert gate["output"] == {"decision": "pass", "by": "ann@ops", "why": "approved"}
    assert gate["properties"]["gate"]["digest"] == charter.canonical_digest(args)
    assert gate["properties"]["gate"]["step_name"] == "send_email"
    (mail,) = audit.steps("step.message")
    assert audit.outcome(mail) == "ok" and mail["meta"]["charter.eval"]["approved"] is True
    (task,) = audit.tasks()  # the pause did not split the task
    assert task[-1]["kind"] == "task.end"
    audit.verify()


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_rejected_call_never_runs_and_the_model_reads_why(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str], mode: str
) -> None:
    gov, audit = make_governor([h.ask("mail-ask", step_names=["send_email"])])
    agent = _agent(
        h,
        gov,
        tools,
        h.ai(h.call("send_email", to="all@example.com", body="hi")),
        h.ai(text="ok, not sent"),
        names=["send_email"],
    )
    session = Session(agent, mode)
    session.start()
    done = session.resume({"decisions": [{"type": "reject", "message": "not to everyone"}]})
    assert ran["send_email"] == 0
    refusal = done["messages"][2]
    assert refusal.status == "error" and "not to everyone" in refusal.content
    assert done["messages"][-1].content == "ok, not sent"
    (gate,) = audit.steps("step.gate")
    assert gate["output"]["decision"] == "deny"
    (mail,) = audit.steps("step.message")
    assert audit.outcome(mail) == "blocked"
    audit.verify()


def test_a_single_decision_answer_also_works(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    """The per-call answer shape of HumanInTheLoopMiddleware: one decision, no list."""
    gov, _ = make_governor([h.ask("mail-ask", step_names=["send_email"])])
    agent = _agent(
        h,
        gov,
        tools,
        h.ai(h.call("send_email", to="a@example.com", body="x")),
        h.ai(text="ok"),
        names=["send_email"],
    )
    session = Session(agent, "invoke")
    session.start()
    session.resume({"type": "approve"})
    assert ran["send_email"] == 1


def test_an_unreadable_answer_is_a_rejection(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    gov, audit = make_governor([h.ask("mail-ask", step_names=["send_email"])])
    agent = _agent(
        h,
        gov,
        tools,
        h.ai(h.call("send_email", to="a@example.com", body="x")),
        h.ai(text="ok"),
        names=["send_email"],
    )
    session = Session(agent, "invoke")
    session.start()
    done = session.resume({"decisions": [{"type": "approve"}, {"type": "approve"}]})
    assert ran["send_email"] == 0
    assert "could not be read" in done["messages"][2].content
    (gate,) = audit.steps("step.gate")
    assert gate["output"]["decision"] == "deny" and gate["output"]["by"] == "charter"


def test_editing_a_call_into_a_blocked_tool_does_not_bypass_the_block(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    """The upstream bypass: an edit into another tool skipped that tool's policy."""
    gov, audit = make_governor(
        [
            h.ask("mail-ask", step_names=["send_email"]),
            h.deny("no-deletes", step_names=["delete_file"]),
        ]
    )
    agent = _agent(
        h,
        gov,
        tools,
        h.ai(h.call("send_email", to="a@example.com", body="x")),
        h.ai(text="ok"),
        names=["send_email", "delete_file"],
    )
    session = Session(agent, "invoke")
    session.start()
    edit = {"type": "edit", "edited_action": {"name": "delete_file", "args": {"path": "/etc"}}}
    done = session.resume({"decisions": [edit]})
    assert ran == Counter()
    assert "no-deletes" in done["messages"][2].content
    outcomes = [
        (s["step_name"], audit.outcome(s)) for s in audit.steps() if s["kind"] != "step.model"
    ]
    assert outcomes == [
        ("approval", "ok"),  # the reviewer's answer on the original call
        ("send_email", "blocked"),  # replaced by the edit: never ran
        ("delete_file", "blocked"),  # the edit, judged on its own
    ]
    audit.verify()


def test_an_edit_that_needs_approval_is_asked_about_again(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    gov, audit = make_governor(
        [
            h.ask("mail-ask", step_names=["send_email"]),
            h.ask("deletes-ask", step_names=["delete_file"]),
        ]
    )
    agent = _agent(
        h,
        gov,
        tools,
        h.ai(h.call("send_email", to="a@example.com", body="x")),
        h.ai(text="ok"),
        names=["send_email", "delete_file"],
    )
    session = Session(agent, "invoke")
    session.start()
    edit = {"type": "edit", "edited_action": {"name": "delete_file", "args": {"path": "/tmp/x"}}}
    again = session.resume({"decisions": [edit]})
    (pending,) = again["__interrupt__"]
    assert pending.value["action_requests"][0]["name"] == "delete_file"
    assert ran == Counter()
    done = session.resume({"decisions": [{"type": "approve"}]})
    assert ran == Counter({"delete_file": 1})
    note = done["messages"][2]
    assert note.content.startswith("Note: a human reviewer replaced this tool call")
    gates = [g["output"]["decision"] for g in audit.steps("step.gate")]
    assert gates == ["deny", "pass"]  # each answer recorded once, not once per re-run
    audit.verify()


def test_an_edit_of_the_arguments_runs_the_edited_call(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    policies_allow_edit = [
        {
            "name": "mail-ask",
            "rule_type": "field_in",
            "severity": "high",
            "action": "ask",
            "match": {"step_names": ["send_email"]},
            "params": {"field": "input.to", "values": ["team@example.com"]},
        }
    ]
    gov, audit = make_governor(policies_allow_edit)
    agent = _agent(
        h,
        gov,
        tools,
        h.ai(h.call("send_email", to="all@example.com", body="x")),
        h.ai(text="ok"),
        names=["send_email"],
    )
    session = Session(agent, "invoke")
    session.start()
    edit = {
        "type": "edit",
        "edited_action": {"name": "send_email", "args": {"to": "team@example.com", "body": "x"}},
    }
    done = session.resume({"decisions": [edit]})
    assert ran == Counter({"send_email": 1})
    assert "sent to team@example.com" in done["messages"][2].content
    mails = [(s["input"]["to"], audit.outcome(s)) for s in audit.steps("step.message")]
    assert mails == [("all@example.com", "blocked"), ("team@example.com", "ok")]


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_two_asks_in_one_turn_pause_once_and_take_one_decision_each(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str], mode: str
) -> None:
    """HumanInTheLoopMiddleware's contract: one interrupt lists every pending action of the
    turn, and ``{"decisions": [...]}`` answers them in order."""
    gov, audit = make_governor([h.ask("mail-ask", step_names=["send_email"])])
    agent = _agent(
        h,
        gov,
        tools,
        h.ai(
            h.call("send_email", to="a@example.com", body="x"),
            h.call("send_email", to="b@example.com", body="y"),
            h.call("get_weather", city="Oslo"),
        ),
        h.ai(text="ok"),
        names=["send_email", "get_weather"],
    )
    session = Session(agent, mode)
    paused = session.start()
    assert ran == Counter()  # the turn waits for its reviewer before any call runs
    (pending,) = paused["__interrupt__"]
    actions = pending.value["action_requests"]
    assert [(a["name"], a["args"]["to"]) for a in actions] == [
        ("send_email", "a@example.com"),
        ("send_email", "b@example.com"),
    ]
    assert [c["allowed_decisions"] for c in pending.value["review_configs"]] == [
        ["approve", "edit", "reject"]
    ] * 2
    done = session.resume({"decisions": [{"type": "approve"}, {"type": "reject"}]})
    assert ran == Counter({"get_weather": 1, "send_email": 1})
    assert done["messages"][-1].content == "ok"
    mails = sorted((s["input"]["to"], audit.outcome(s)) for s in audit.steps("step.message"))
    assert mails == [("a@example.com", "ok"), ("b@example.com", "blocked")]
    gates = [g["output"]["decision"] for g in audit.steps("step.gate")]
    assert sorted(gates) == ["deny", "pass"]  # each answer recorded once
    audit.verify()


def test_too_few_decisions_for_a_turn_reject_every_call(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    gov, audit = make_governor([h.ask("mail-ask", step_names=["send_email"])])
    agent = _agent(
        h,
        gov,
        tools,
        h.ai(
            h.call("send_email", to="a@example.com", body="x"),
            h.call("send_email", to="b@example.com", body="y"),
        ),
        h.ai(text="ok"),
        names=["send_email"],
    )
    session = Session(agent, "invoke")
    session.start()
    done = session.resume({"decisions": [{"type": "approve"}]})
    assert ran == Counter()
    refusals = [m.content for m in done["messages"] if m.type == "tool"]
    assert len(refusals) == 2 and all("expected 2 decision(s)" in r for r in refusals)
    assert [audit.outcome(s) for s in audit.steps("step.message")] == ["blocked", "blocked"]
    audit.verify()


def test_without_a_checkpointer_the_call_waits_and_never_runs(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    gov, _ = make_governor([h.ask("mail-ask", step_names=["send_email"])])
    agent = create_agent(
        h.scripted(h.ai(h.call("send_email", to="a@example.com", body="x"))),
        [tools["send_email"]],
        middleware=[CharterMiddleware(gov)],
    )
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]})
    assert result["__interrupt__"] and ran["send_email"] == 0


def test_an_edit_into_a_tool_the_agent_lacks_is_not_run(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    gov, audit = make_governor([h.ask("mail-ask", step_names=["send_email"])])
    agent = _agent(
        h,
        gov,
        tools,
        h.ai(h.call("send_email", to="a@example.com", body="x")),
        h.ai(text="ok"),
        names=["send_email"],
    )
    session = Session(agent, "invoke")
    session.start()
    edit = {"type": "edit", "edited_action": {"name": "format_disk", "args": {}}}
    done = session.resume({"decisions": [edit]})
    assert ran == Counter()
    assert "not an agent tool" in done["messages"][2].content
    (unknown,) = audit.steps("step.unknown")
    assert audit.outcome(unknown) == "failed"
    audit.verify()


def test_a_run_paused_in_one_process_resumes_in_another(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str], tmp_path: Any
) -> None:
    """A persistent checkpointer lets the reviewer answer after a restart: the new process's
    Governor rebuilds the task from the audit store and the chain goes on unbroken."""
    location = f"sqlite:///{tmp_path}/shared.db"
    saver = InMemorySaver()  # stands in for a persistent checkpointer
    config = {"configurable": {"thread_id": "long-review"}}
    policies = [h.ask("mail-ask", step_names=["send_email"])]

    first = charter.Governor(policies=policies, audit_location=location, agent_id="test-bot")
    agent = create_agent(
        h.scripted(h.ai(h.call("send_email", to="a@example.com", body="x"))),
        [tools["send_email"]],
        middleware=[CharterMiddleware(first)],
        checkpointer=saver,
    )
    agent.invoke({"messages": [{"role": "user", "content": "mail"}]}, config)
    first.close(10)  # the process ends while the run waits for its reviewer

    second = charter.Governor(policies=policies, audit_location=location, agent_id="test-bot")
    agent = create_agent(
        h.scripted(h.ai(text="sent")),
        [tools["send_email"]],
        middleware=[CharterMiddleware(second)],
        checkpointer=saver,
    )
    done = agent.invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    second.close(10)
    assert done["messages"][-1].content == "sent" and ran["send_email"] == 1
    store = charter.open_store(location)
    try:
        (task,) = [store.read_task(t.task_id, t.agent_id) for t in store.list_tasks()]
    finally:
        store.close()
    assert [r["kind"] for r in task] == [
        "task.start",
        "step.message",  # the user's request, recorded once: the resume adds no message
        "step.model",
        "step.gate",
        "step.message",
        "step.model",
        "task.end",
    ]
    assert charter.verify(location).ok
