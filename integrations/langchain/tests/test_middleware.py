"""CharterMiddleware on real `create_agent` graphs driven by scripted fake chat models."""

from __future__ import annotations

import asyncio
import warnings
from collections import Counter
from typing import Any

import charter
import pytest
from charter_langchain import BlockedStepError, CharterCallbackHandler, CharterMiddleware
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langgraph.checkpoint.memory import InMemorySaver


def _run(agent: Any, text: str = "go", *, mode: str = "invoke", **config: Any) -> Any:
    inputs = {"messages": [{"role": "user", "content": text}]}
    if mode == "invoke":
        return agent.invoke(inputs, config or None)
    return asyncio.run(agent.ainvoke(inputs, config or None))


def _contents(result: Any) -> list[tuple[str, str]]:
    return [(m.type, str(m.content)) for m in result["messages"]]


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_allowed_tools_run_and_the_run_is_one_verified_task(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str], mode: str
) -> None:
    gov, audit = make_governor([h.deny("no-deletes", step_names=["delete_file"])])
    model = h.scripted(h.ai(h.call("get_weather", city="Oslo")), h.ai(text="It is sunny."))
    agent = create_agent(model, [tools["get_weather"]], middleware=[CharterMiddleware(gov)])
    result = _run(agent, mode=mode, configurable={"thread_id": "support/42"})
    assert result["messages"][-1].content == "It is sunny."
    assert ran == Counter({"get_weather": 1})
    (task,) = audit.tasks()
    assert [(r["kind"], r["step_name"]) for r in task] == [
        ("task.start", "agent"),
        ("step.message", "user_message"),  # the user's request, trust level user
        ("step.model", "ScriptedChatModel"),
        ("step.resource", "get_weather"),
        ("step.model", "ScriptedChatModel"),
        ("task.end", "agent"),
    ]
    assert task[0]["task_id"] == charter.task_id_from("support/42")
    assert task[1]["properties"]["message"] == {"role": "user"}
    assert task[3]["input"] == {"city": "Oslo"} and task[3]["output"] == {
        "content": "sunny in Oslo"
    }
    audit.verify()


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_blocked_tool_never_runs_and_the_model_reads_why(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str], mode: str
) -> None:
    gov, audit = make_governor([h.deny("no-deletes", step_names=["delete_file", "remove_file"])])
    name = "delete_file" if mode == "invoke" else "remove_file"
    model = h.scripted(h.ai(h.call(name, path="/etc/passwd")), h.ai(text="I could not delete it."))
    agent = create_agent(model, [tools[name]], middleware=[CharterMiddleware(gov)])
    result = _run(agent, mode=mode)
    assert ran[name] == 0
    refusal = result["messages"][2]
    assert refusal.type == "tool" and refusal.status == "error"
    assert "blocked by policy 'no-deletes'" in refusal.content
    assert result["messages"][-1].content == "I could not delete it."  # the run went on
    (step,) = [s for s in audit.steps() if s["step_name"] == name]
    assert (step["kind"], step["verb"], audit.outcome(step)) == (
        "step.resource",
        "DELETE",
        "blocked",
    )
    audit.verify()


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_parallel_calls_are_judged_one_by_one(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str], mode: str
) -> None:
    gov, audit = make_governor([h.deny("no-deletes", step_names=["delete_file"])])
    model = h.scripted(
        h.ai(
            h.call("get_weather", city="Oslo"),
            h.call("delete_file", path="/etc"),
            h.call("get_weather", city="Rome"),
        ),
        h.ai(text="done"),
    )
    agent = create_agent(
        model, [tools["get_weather"], tools["delete_file"]], middleware=[CharterMiddleware(gov)]
    )
    result = _run(agent, mode=mode)
    assert ran == Counter({"get_weather": 2})
    statuses = sorted((m.name, m.status) for m in result["messages"] if m.type == "tool")
    assert statuses == [
        ("delete_file", "error"),
        ("get_weather", "success"),
        ("get_weather", "success"),
    ]
    outcomes = sorted((s["step_name"], audit.outcome(s)) for s in audit.steps("step.resource"))
    assert outcomes == [("delete_file", "blocked"), ("get_weather", "ok"), ("get_weather", "ok")]
    audit.verify()


def test_raise_mode_aborts_the_run_and_closes_the_task(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    gov, audit = make_governor([h.deny("no-deletes", step_names=["delete_file"])])
    model = h.scripted(h.ai(h.call("delete_file", path="/etc")), h.ai(text="never"))
    agent = create_agent(
        model, [tools["delete_file"]], middleware=[CharterMiddleware(gov, on_block="raise")]
    )
    with pytest.raises(BlockedStepError, match="no-deletes"):
        _run(agent)
    assert ran["delete_file"] == 0
    (task,) = audit.tasks()
    assert task[-1]["kind"] == "task.error"
    assert task[-1]["output"]["error"]["type"] == "BlockedStepError"
    audit.verify()


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_blocked_model_call_ends_the_run_cleanly(
    h: Any, make_governor: Any, tools: dict[str, Any], mode: str
) -> None:
    gov, audit = make_governor([h.deny("no-models", kinds=["step.model"])])
    model = h.scripted(h.ai(text="never"))
    agent = create_agent(model, [tools["get_weather"]], middleware=[CharterMiddleware(gov)])
    result = _run(agent, mode=mode)
    assert model.calls == 0
    last = result["messages"][-1]
    assert last.type == "ai" and "blocked by policy 'no-models'" in last.content
    (task,) = audit.tasks()
    assert [r["kind"] for r in task] == ["task.start", "step.message", "step.model", "task.end"]
    audit.verify()


def test_a_history_rule_stops_a_looping_agent(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    policy = {
        "name": "at-most-3-model-calls",
        "rule_type": "max_steps",
        "severity": "critical",
        "match": {"kinds": ["step.model"]},
        "params": {"max": 3, "select": {"kinds": ["step.model"]}},
    }
    gov, audit = make_governor([policy])
    loop = [h.ai(h.call("get_weather", city=f"city-{i}")) for i in range(10)]
    model = h.scripted(*loop)
    agent = create_agent(model, [tools["get_weather"]], middleware=[CharterMiddleware(gov)])
    result = _run(agent)
    assert model.calls == 3 and ran["get_weather"] == 3
    assert "4th matching step in the task (limit 3)" in result["messages"][-1].content
    models = audit.steps("step.model")
    assert [audit.outcome(s) for s in models] == ["ok", "ok", "ok", "blocked"]
    audit.verify()


def test_token_usage_is_recorded_where_budget_rules_read_it(
    h: Any, make_governor: Any, tools: dict[str, Any]
) -> None:
    budget = {
        "name": "token-budget",
        "rule_type": "budget",
        "severity": "critical",
        "match": {"kinds": ["step.model"]},
        "params": {
            "field": "properties.model.usage.total_tokens",
            "limit": 100,
            "select": {"kinds": ["step.model"]},
        },
    }
    gov, audit = make_governor([budget])
    model = h.scripted(
        h.ai(h.call("get_weather", city="Oslo"), tokens=60),
        h.ai(h.call("get_weather", city="Rome"), tokens=60),
        h.ai(text="never", tokens=60),
    )
    agent = create_agent(model, [tools["get_weather"]], middleware=[CharterMiddleware(gov)])
    result = _run(agent)
    models = audit.steps("step.model")
    assert [s["properties"]["model"].get("usage", {}).get("total_tokens") for s in models] == [
        90,
        90,
        None,
    ]
    assert models[0]["properties"]["model"]["stop_reason"] == "tool_calls"
    assert [audit.outcome(s) for s in models] == ["ok", "ok", "blocked"]
    assert "above the budget of 100" in result["messages"][-1].content
    audit.verify()


def test_warn_runs_the_call_and_records_the_warning(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    gov, audit = make_governor([h.warn("mail-is-watched", step_names=["send_email"])])
    model = h.scripted(h.ai(h.call("send_email", to="a@example.com", body="hi")), h.ai(text="sent"))
    agent = create_agent(model, [tools["send_email"]], middleware=[CharterMiddleware(gov)])
    with pytest.warns(charter.PolicyWarning, match="mail-is-watched"):
        _run(agent)
    assert ran["send_email"] == 1
    (step,) = audit.steps("step.message")
    assert (step["verb"], audit.outcome(step)) == ("POST", "ok")
    assert step["meta"]["charter.eval"]["decision"] == "warn"
    audit.verify()


def test_each_run_on_a_thread_is_its_own_task(
    h: Any, make_governor: Any, tools: dict[str, Any]
) -> None:
    gov, audit = make_governor()
    model = h.scripted(h.ai(text="first"), h.ai(text="second"))
    agent = create_agent(
        model,
        [tools["get_weather"]],
        middleware=[CharterMiddleware(gov)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "chat-7"}}
    agent.invoke({"messages": [{"role": "user", "content": "one"}]}, config)
    agent.invoke({"messages": [{"role": "user", "content": "two"}]}, config)
    ids = sorted(task[0]["task_id"] for task in audit.tasks())
    assert ids == ["chat-7", "chat-7:2"]
    assert all(task[-1]["kind"] == "task.end" for task in audit.tasks())
    audit.verify()


def test_with_the_callback_handler_too_each_step_is_recorded_once(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    gov, audit = make_governor([h.deny("no-deletes", step_names=["delete_file"])])
    model = h.scripted(
        h.ai(h.call("get_weather", city="Oslo"), h.call("delete_file", path="/etc")),
        h.ai(text="done"),
    )
    agent = create_agent(
        model, [tools["get_weather"], tools["delete_file"]], middleware=[CharterMiddleware(gov)]
    )
    handler = CharterCallbackHandler(gov)
    _run(agent, callbacks=[handler])
    assert ran == Counter({"get_weather": 1})
    (task,) = audit.tasks()  # the handler opened no second task
    steps = Counter((r["kind"], r["step_name"]) for r in task if not r["kind"].startswith("task."))
    assert steps == Counter(
        {
            ("step.message", "user_message"): 1,
            ("step.model", "ScriptedChatModel"): 2,
            ("step.resource", "get_weather"): 1,
            ("step.resource", "delete_file"): 1,
        }
    )
    audit.verify()


def test_handler_with_its_own_governor_defers_to_the_middleware(
    h: Any, make_governor: Any, tools: dict[str, Any]
) -> None:
    gov, audit = make_governor()
    other, other_audit = make_governor()
    model = h.scripted(h.ai(h.call("get_weather", city="Oslo")), h.ai(text="done"))
    agent = create_agent(model, [tools["get_weather"]], middleware=[CharterMiddleware(gov)])
    _run(agent, callbacks=[CharterCallbackHandler(other)])
    assert len(audit.steps()) == 3
    assert other_audit.records() == []


def test_approver_mode_uses_the_governors_approver(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    gov, audit = make_governor([h.ask("mail-ask", step_names=["send_email"])])
    gov.approver = charter.callback_approver(lambda request: (True, "fine"), by="ops")
    model = h.scripted(h.ai(h.call("send_email", to="a@example.com", body="hi")), h.ai(text="ok"))
    agent = create_agent(
        model, [tools["send_email"]], middleware=[CharterMiddleware(gov, approval="approver")]
    )
    _run(agent)
    assert ran["send_email"] == 1
    (gate,) = audit.steps("step.gate")
    assert gate["output"] == {"decision": "pass", "by": "ops", "why": "fine"}


@pytest.mark.allow_internal_errors
def test_an_error_inside_charter_blocks_the_call(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str], monkeypatch: Any
) -> None:
    gov, _ = make_governor()
    model = h.scripted(h.ai(h.call("delete_file", path="/tmp/x")), h.ai(text="done"))
    agent = create_agent(model, [tools["delete_file"]], middleware=[CharterMiddleware(gov)])
    real = gov.build_step

    def broken(*args: Any, **kwargs: Any) -> Any:
        if args and args[0] in ("step.model", "step.message"):
            return real(*args, **kwargs)
        raise RuntimeError("engine exploded")

    monkeypatch.setattr(gov, "build_step", broken)
    result = _run(agent)
    assert ran["delete_file"] == 0
    assert "could not judge" in result["messages"][2].content


def test_a_run_without_a_task_is_refused(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    """The graph state lost the task (here: before_agent replaced by a no-op)."""

    class NoStart(CharterMiddleware):
        def before_agent(self, state: Any, runtime: Any) -> None:
            return None

    gov, _ = make_governor()
    model = h.scripted(h.ai(h.call("get_weather", city="Oslo")))
    agent = create_agent(model, [tools["get_weather"]], middleware=[NoStart(gov)])
    result = _run(agent)
    assert model.calls == 0 and ran["get_weather"] == 0
    assert "no Charter task is open" in result["messages"][-1].content


@pytest.mark.allow_internal_errors
def test_a_recording_failure_never_reaches_the_agent(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str], monkeypatch: Any
) -> None:
    gov, _ = make_governor()
    model = h.scripted(h.ai(h.call("get_weather", city="Oslo")), h.ai(text="done"))
    agent = create_agent(model, [tools["get_weather"]], middleware=[CharterMiddleware(gov)])

    def broken(self: Any, output: Any = None) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(charter.StepHandle, "complete", broken)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _run(agent)["messages"][-1].content == "done"
    assert ran["get_weather"] == 1


def test_constructor_refusals(make_governor: Any) -> None:
    gov, _ = make_governor()
    with pytest.raises(ValueError, match="on_block"):
        CharterMiddleware(gov, on_block="explode")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="approval"):
        CharterMiddleware(gov, approval="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="either governor= or setting keywords"):
        CharterMiddleware(gov, policy_file="x.yaml")


def test_a_run_that_never_finished_is_closed_when_the_next_one_starts(
    h: Any, make_governor: Any, tools: dict[str, Any]
) -> None:
    """A paused run the user abandoned (a new message instead of a resume)."""
    gov, audit = make_governor([h.ask("mail-ask", step_names=["send_email"])])
    model = h.scripted(h.ai(h.call("send_email", to="a@example.com", body="x")), h.ai(text="hi"))
    agent = create_agent(
        model,
        [tools["send_email"]],
        middleware=[CharterMiddleware(gov)],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t-9"}}
    assert agent.invoke({"messages": [{"role": "user", "content": "mail"}]}, config)[
        "__interrupt__"
    ]
    agent.invoke({"messages": [{"role": "user", "content": "never mind"}]}, config)
    first, second = sorted(audit.tasks(), key=lambda t: t[0]["task_id"])
    assert first[0]["task_id"] == "t-9" and first[-1]["kind"] == "task.error"
    assert first[-1]["output"]["error"]["type"] == "RunNotFinishedError"
    assert second[0]["task_id"] == "t-9:2" and second[-1]["kind"] == "task.end"
    audit.verify()


def test_a_thread_id_reused_without_a_checkpointer_still_gets_fresh_tasks(
    h: Any, make_governor: Any, tools: dict[str, Any]
) -> None:
    gov, audit = make_governor()
    model = h.scripted(h.ai(text="one"), h.ai(text="two"))
    agent = create_agent(model, [tools["get_weather"]], middleware=[CharterMiddleware(gov)])
    for _ in range(2):
        _run(agent, configurable={"thread_id": "no-memory"})
    ids = sorted(task[0]["task_id"] for task in audit.tasks())
    assert ids[0] == "no-memory" and ids[1].startswith("no-memory:")
    audit.verify()


def test_streaming_the_agent_token_by_token_is_governed_the_same(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str]
) -> None:
    """stream_mode="messages" adds LangGraph's inline stream handler and streams the model."""
    gov, audit = make_governor([h.deny("no-deletes", step_names=["delete_file"])])
    model = h.scripted(
        h.ai(h.call("delete_file", path="/etc"), h.call("get_weather", city="Oslo")),
        h.ai(text="could not delete, but it is sunny"),
    )
    agent = create_agent(
        model, [tools["get_weather"], tools["delete_file"]], middleware=[CharterMiddleware(gov)]
    )
    handler = CharterCallbackHandler(gov)

    async def consume() -> list[Any]:
        inputs = {"messages": [{"role": "user", "content": "go"}]}
        config = {"callbacks": [handler]}
        return [c async for c in agent.astream(inputs, config, stream_mode="messages")]

    chunks = asyncio.run(consume())
    assert chunks and ran == Counter({"get_weather": 1})
    models = audit.steps("step.model")
    assert models[-1]["output"]["messages"][0]["content"] == "could not delete, but it is sunny"
    outcomes = sorted((s["step_name"], audit.outcome(s)) for s in audit.steps("step.resource"))
    assert outcomes == [("delete_file", "blocked"), ("get_weather", "ok")]
    audit.verify()


class _CallTwiceEditingInPlace(AgentMiddleware):  # type: ignore[type-arg]
    """An outer middleware that calls the model, then rewrites the user's message object in
    place (the same pydantic object, new content) and calls the model again."""

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        handler(request)
        request.messages[0].content = "now DROP TABLE users"
        return handler(request)


def test_a_message_changed_in_place_between_model_calls_is_judged_on_its_new_content(
    h: Any, make_governor: Any, tools: dict[str, Any]
) -> None:
    policy = {
        "name": "no-drop-table",
        "rule_type": "field_matches",
        "severity": "critical",
        "match": {"kinds": ["step.model"]},
        "params": {"field": "input.messages[*].content", "pattern": "DROP TABLE"},
    }
    gov, audit = make_governor([policy])
    model = h.scripted(h.ai(text="first answer"), h.ai(text="second answer"))
    middleware = [_CallTwiceEditingInPlace(), CharterMiddleware(gov)]
    agent = create_agent(model, [tools["get_weather"]], middleware=middleware)
    result = _run(agent, "a harmless question")
    assert model.calls == 1  # the second call, with the edited message, never ran
    assert "blocked by policy 'no-drop-table'" in result["messages"][-1].content
    first, second = audit.steps("step.model")
    assert [audit.outcome(s) for s in (first, second)] == ["ok", "blocked"]
    assert first["input"]["messages"][0]["content"] == "a harmless question"
    assert second["input"]["messages"][0]["content"] == "now DROP TABLE users"
    audit.verify()


class _RewritesToolCalls(AgentMiddleware):  # type: ignore[type-arg]
    """An outer middleware that changes each tool call after the turn's review saw it."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        if self.how == "in place":
            request.tool_call["args"]["city"] = "Atlantis"
            return handler(request)
        call = {**request.tool_call, "args": {"city": "Atlantis"}}
        return handler(request.override(tool_call=call))


@pytest.mark.parametrize("how", ["in place", "replaced"])
def test_a_tool_call_changed_after_the_turns_review_is_judged_as_it_runs(
    h: Any, make_governor: Any, tools: dict[str, Any], ran: Counter[str], how: str
) -> None:
    no_atlantis = {
        "name": "no-atlantis",
        "rule_type": "field_matches",
        "severity": "critical",
        "match": {"step_names": ["get_weather"]},
        "params": {"field": "input.city", "pattern": "Atlantis"},
    }
    # A policy that can ask makes the turn's review build every call's step first.
    gov, audit = make_governor([h.ask("ask-emails", step_names=["send_email"]), no_atlantis])
    model = h.scripted(h.ai(h.call("get_weather", city="Oslo")), h.ai(text="done"))
    middleware = [_RewritesToolCalls(how), CharterMiddleware(gov)]
    agent = create_agent(model, [tools["get_weather"]], middleware=middleware)
    result = _run(agent)
    assert ran["get_weather"] == 0
    assert "blocked by policy 'no-atlantis'" in result["messages"][2].content
    (step,) = audit.steps("step.resource")
    assert step["input"] == {"city": "Atlantis"} and audit.outcome(step) == "blocked"
    audit.verify()
