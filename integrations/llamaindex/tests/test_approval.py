"""Approvals through LlamaIndex's own human-in-the-loop: an ask pauses the workflow with an
InputRequiredEvent and resumes on the HumanResponseEvent; a context saved while paused and
resumed later (by another Governor on the same trail, as in another process) continues the
same task."""

from __future__ import annotations

import json
from typing import Any

from charter_llamaindex import TASK_KEY, approve, deny, edit, govern
from charter_llamaindex.testing import ScriptedLLM, tool_call
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context, InputRequiredEvent, JsonSerializer

from .conftest import ask, run, steps, trail


def _agent(sent: list[dict[str, Any]]) -> FunctionAgent:
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append({"to": to, "body": body})
        return f"sent to {to}"

    llm = ScriptedLLM(
        [tool_call("send_email", {"to": "bob@example.com", "body": "hi"}, "call_1"), "done"]
    )
    return FunctionAgent(tools=[FunctionTool.from_defaults(send_email)], llm=llm)


async def _until_asked(handler: Any) -> InputRequiredEvent:
    async for event in handler.stream_events():
        if isinstance(event, InputRequiredEvent):
            return event
    raise AssertionError("the workflow never asked")


def test_an_ask_pauses_with_input_required_and_resumes_on_the_answer(governor) -> None:
    sent: list[dict[str, Any]] = []
    agent = _agent(sent)
    gov = governor([ask("mail-needs-ok", "send_email")])

    async def main() -> tuple[InputRequiredEvent, Any]:
        handler = agent.run(user_msg="mail bob")
        asked = await _until_asked(handler)
        assert sent == [], "nothing runs while a person is asked"
        handler.ctx.send_event(approve(asked, by="alice", message="fine"))
        return asked, await handler

    with govern(agent, governor=gov):
        asked, result = run(main())
    assert str(result) == "done" and sent == [{"to": "bob@example.com", "body": "hi"}]
    assert "send_email" in asked.prefix and "mail-needs-ok" in asked.prefix
    action = asked.charter["action_requests"][0]
    assert action["args"] == {"to": "bob@example.com", "body": "hi"}
    assert action["charter"]["tool_call_id"] == "call_1"
    records = trail(gov)
    gates = steps(records, "step.gate")
    assert len(gates) == 1 and gates[0]["output"]["decision"] == "pass"
    assert gates[0]["output"]["by"] == "alice"
    assert len({r["task_id"] for r in records}) == 1


def test_a_denial_is_recorded_and_the_model_reads_it(governor) -> None:
    sent: list[dict[str, Any]] = []
    agent = _agent(sent)
    gov = governor([ask("mail-needs-ok", "send_email")])

    async def main() -> Any:
        handler = agent.run(user_msg="mail bob")
        handler.ctx.send_event(deny(await _until_asked(handler), message="not bob"))
        return await handler

    with govern(agent, governor=gov):
        run(main())
    assert sent == []
    records = steps(trail(gov))
    assert [r["output"]["decision"] for r in records if r["kind"] == "step.gate"] == ["deny"]
    mail = [r for r in records if r["step_name"] == "send_email"]
    assert [r["meta"]["charter.outcome"] for r in mail] == ["blocked"]
    tool_reply = next(m for m in agent.llm.calls[-1] if m.role == "tool")
    assert "not bob" in str(tool_reply.content)


def test_an_edit_runs_the_edited_arguments(governor) -> None:
    sent: list[dict[str, Any]] = []
    agent = _agent(sent)
    gov = governor([ask("mail-needs-ok", "send_email")])

    async def main() -> Any:
        handler = agent.run(user_msg="mail bob")
        asked = await _until_asked(handler)
        handler.ctx.send_event(edit(asked, {"to": "team@example.com", "body": "hi"}))
        asked_again = await _until_asked(handler)  # the edit is judged from scratch
        handler.ctx.send_event(approve(asked_again))
        return await handler

    with govern(agent, governor=gov):
        run(main())
    assert sent == [{"to": "team@example.com", "body": "hi"}]


def test_a_saved_context_resumes_the_same_task_elsewhere(governor, tmp_path) -> None:
    sent: list[dict[str, Any]] = []
    policies = [ask("mail-needs-ok", "send_email")]
    first_gov = governor(policies)
    agent = _agent(sent)

    async def pause() -> tuple[dict[str, Any], InputRequiredEvent]:
        handler = agent.run(user_msg="mail bob")
        asked = await _until_asked(handler)
        saved = handler.ctx.to_dict(serializer=JsonSerializer())
        await handler.cancel_run()
        return json.loads(json.dumps(saved)), asked

    with govern(agent, governor=first_gov):
        saved, asked = run(pause())
    first_gov.close(5.0)
    assert sent == []

    # Later, elsewhere: a new agent object, a new Governor on the same audit trail.
    later = _agent(sent)
    later.llm = ScriptedLLM(["done"])
    second_gov = governor(policies)

    async def resume() -> Any:
        ctx = Context.from_dict(later, saved, serializer=JsonSerializer())
        handler = later.run(ctx=ctx)
        handler.ctx.send_event(approve(asked, by="carol"))
        result = await handler
        return result, await handler.ctx.store.get(TASK_KEY)

    with govern(later, governor=second_gov):
        result, task_id = run(resume())
    assert str(result) == "done" and sent == [{"to": "bob@example.com", "body": "hi"}]
    records = trail(second_gov)
    assert {r["task_id"] for r in records} == {task_id}, "one task from start to end"
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "task.start" and kinds[-1] == "task.end"
    assert kinds.count("step.gate") == 1
    mail = [r for r in records if r["step_name"] == "send_email"]
    assert [r["meta"]["charter.outcome"] for r in mail] == ["ok"]
