"""Model calls: one step.model each, gated before the call, with usage recorded after."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace

import charter
import pytest
from charter_crewai import _translate as tr
from charter_crewai import govern
from charter_crewai.testing import ScriptedLLM
from crewai import Agent, Crew, Task
from crewai.types.usage_metrics import UsageMetrics

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def max_model_calls(limit: int) -> dict:
    return {
        "name": "model-call-budget",
        "rule_type": "max_steps",
        "severity": "critical",
        "params": {"max": limit, "select": {"kinds": ["step.model"]}},
    }


def test_a_model_call_budget_stops_a_looping_agent(build_crew, calling, audit, trail, ran):
    # The model keeps asking for the weather and never answers; only Charter ends the loop.
    cities = ["Paris", "Lyon", "Nice", "Metz", "Caen"]
    crew, llm = build_crew(
        [calling.tool("get_weather", city=c) for c in cities],
        native=calling.native,
        repeat_last=True,
    )
    handle = govern(crew, policies=[max_model_calls(3)], audit_location=audit)

    with pytest.raises(charter.BlockedError) as blocked:
        crew.kickoff()
    handle.uninstall()

    assert "model-call-budget" in blocked.value.reason
    assert len(llm.calls) == 3  # the fourth call never reached the model
    assert ran["get_weather"] == cities[:3]
    steps = trail.summary(handle.task_ids[0])
    assert [s for s in steps if s[0] == "step.model"] == [
        ("step.model", "scripted-model", "ok"),
        ("step.model", "scripted-model", "ok"),
        ("step.model", "scripted-model", "ok"),
        ("step.model", "scripted-model", "blocked"),
    ]
    assert steps[-1] == ("task.error", "crew", None)
    error = trail.read(handle.task_ids[0])[-1]["output"]["error"]
    assert error["type"] == "CharterBlocked"
    assert trail.verify().ok


def test_token_usage_is_recorded_and_feeds_a_token_budget(build_crew, calling, audit, trail):
    crew, llm = build_crew(
        [calling.tool("get_weather", city="Oslo")],
        native=calling.native,
        repeat_last=True,
        usage=USAGE,
    )
    budget = {
        "name": "token-budget",
        "rule_type": "budget",
        "severity": "critical",
        "params": {
            "field": "properties.model.usage.total_tokens",
            "limit": 40,
            "select": {"kinds": ["step.model"]},
        },
    }
    handle = govern(crew, policies=[budget], audit_location=audit)

    with pytest.raises(charter.BlockedError, match="token-budget"):
        crew.kickoff()
    handle.uninstall()

    # 15 tokens a call: after three calls 45 > 40, so the fourth is refused.
    assert len(llm.calls) == 3
    models = [r for r in trail.read(handle.task_ids[0]) if r["kind"] == "step.model"]
    assert [m["meta"]["charter.outcome"] for m in models] == ["ok", "ok", "ok", "blocked"]
    for model in models[:3]:
        assert model["properties"]["model"]["usage"]["total_tokens"] == 15
        assert model["output"]["usage"]["prompt_tokens"] == 10
    assert "usage" not in models[3]["properties"]["model"]


class OwnCounters(ScriptedLLM):
    """An LLM that reports usage through its own summary (as a provider wrapper may), not
    through the counters CrewAI keeps for it: 7 tokens a call, where CrewAI counted 15."""

    def get_token_usage_summary(self) -> UsageMetrics:
        calls = len(self.calls)
        return UsageMetrics(
            prompt_tokens=4 * calls, completion_tokens=3 * calls, total_tokens=7 * calls
        )


def test_an_llm_reporting_its_own_usage_is_read_through_its_summary(calling, tools, audit, trail):
    llm = OwnCounters(
        model="scripted-model",
        responses=[calling.tool("get_weather", city="Oslo"), calling.final("sunny")],
        native=calling.native,
        usage=USAGE,
    )
    agent = Agent(
        role="forecaster",
        goal="weather",
        backstory="reads forecasts",
        llm=llm,
        tools=[tools["get_weather"]],
        max_iter=5,
    )
    crew = Crew(
        agents=[agent], tasks=[Task(description="weather", expected_output="a report", agent=agent)]
    )
    handle = govern(crew, policies=[], audit_location=audit)

    crew.kickoff()
    handle.uninstall()

    models = [r for r in trail.read(handle.task_ids[0]) if r["kind"] == "step.model"]
    assert len(models) == 2
    for model in models:
        assert model["properties"]["model"]["usage"]["total_tokens"] == 7
        assert model["output"]["usage"]["prompt_tokens"] == 4


def test_model_steps_carry_each_message_once(build_crew, calling, audit, trail):
    crew, _llm = build_crew(
        [calling.tool("get_weather", city="Oslo"), calling.final("sunny")], native=calling.native
    )
    handle = govern(crew, policies=[], audit_location=audit)

    crew.kickoff()
    handle.uninstall()

    first, second = [r for r in trail.read(handle.task_ids[0]) if r["kind"] == "step.model"]
    assert first["properties"]["model"] == {
        "name": "scripted-model",
        "provider": "openai",
        "tools": ["delete_file", "get_weather"],
    }
    assert first["properties"]["framework"]["agent_role"] == "cleaner"
    assert first["input"]["message_count"] == len(first["input"]["messages"])
    assert [m["role"] for m in first["input"]["messages"]] == ["system", "user"]
    # The second call shows only what is new since the model's own turn (recorded as the
    # first call's output): the tool's result, on both paths as a tool message.
    added = second["input"]["messages"]
    assert second["input"]["message_count"] == first["input"]["message_count"] + 1 + len(added)
    assert added[0] == {"role": "tool", "content": "sunny in Oslo"} | (
        {"name": "get_weather", "tool_call_id": added[0].get("tool_call_id")}
        if calling.native
        else {}
    )
    if calling.native:
        call = first["output"]["tool_calls"][0]["function"]
        assert call["name"] == "get_weather"
    else:
        assert "Action: get_weather" in first["output"]["response"]
    assert second["output"]["response"] == calling.final("sunny")


def test_agents_that_ran_before_govern_are_gated_too(build_crew, calling, audit, ran):
    # CrewAI copies the model-call hooks into an agent's executor when it first runs; an
    # executor created before govern() must still reach Charter.
    crew, llm = build_crew(
        [calling.tool("get_weather", city="Oslo"), calling.final("sunny")],
        native=calling.native,
        repeat_last=True,
    )
    crew.kickoff()
    calls_before = len(llm.calls)
    govern(crew, policies=[max_model_calls(0)], audit_location=audit)

    with pytest.raises(charter.BlockedError, match="model-call-budget"):
        crew.kickoff()

    assert len(llm.calls) == calls_before


def test_a_failing_model_call_ends_the_task_with_its_error(build_crew, audit, trail):
    crew, _llm = build_crew([])  # every call raises: the script is empty
    handle = govern(crew, policies=[], audit_location=audit)

    with pytest.raises(RuntimeError, match="ran out of responses"):
        crew.kickoff()
    handle.uninstall()

    records = trail.read(handle.task_ids[0])
    models = [r for r in records if r["kind"] == "step.model"]
    assert models and {m["meta"]["charter.outcome"] for m in models} == {"abandoned"}
    assert records[-1]["kind"] == "task.error"
    assert records[-1]["output"]["error"]["type"] == "RuntimeError"
    assert trail.verify().ok


def test_model_calls_outside_the_executor_loop_are_gated(build_crew, audit, trail):
    # Planning steps, observers and converters call llm.call() directly; CrewAI's providers
    # (and ScriptedLLM) run the model-call hooks themselves then.
    crew, llm = build_crew(["a plan", "never sent"])
    agent = crew.agents[0]
    handle = govern(agent, policies=[max_model_calls(1)], audit_location=audit)

    assert llm.call("Plan the work.", from_agent=agent) == "a plan"
    with pytest.raises(charter.BlockedError, match="model-call-budget"):
        llm.call("Plan again.", from_agent=agent)
    handle.uninstall()

    assert len(llm.calls) == 1
    records = trail.read(handle.task_ids[0])
    models = [r for r in records if r["kind"] == "step.model"]
    assert [m["meta"]["charter.outcome"] for m in models] == ["ok", "blocked"]
    assert models[0]["input"]["messages"] == [{"role": "user", "content": "Plan the work."}]
    assert models[0]["output"] == {"response": "a plan"}


@pytest.mark.parametrize("method", ["akickoff", "kickoff_async"])
def test_a_blocked_model_call_raises_from_async_kickoffs(build_crew, calling, audit, method):
    crew, llm = build_crew([calling.final("never")], native=calling.native)
    govern(crew, policies=[max_model_calls(0)], audit_location=audit)

    with pytest.raises(charter.BlockedError, match="model-call-budget"):
        asyncio.run(getattr(crew, method)())

    assert llm.calls == []


def test_message_counts_stay_exact_over_several_turns(build_crew, calling, audit, trail):
    # Three model calls: the third's count includes the first turn (on the ReAct path one
    # message CrewAI extended with its Observation, counted as the model's turn and the
    # tool's result) without that turn being converted again.
    crew, _llm = build_crew(
        [
            calling.tool("get_weather", city="Oslo"),
            calling.tool("get_weather", city="Bergen"),
            calling.final("sunny twice"),
        ],
        native=calling.native,
    )
    handle = govern(crew, policies=[], audit_location=audit)

    crew.kickoff()
    handle.uninstall()

    models = [r for r in trail.read(handle.task_ids[0]) if r["kind"] == "step.model"]
    assert len(models) == 3
    for before, after in itertools.pairwise(models):
        added = after["input"]["messages"]
        assert added[0]["role"] == "tool"
        count = before["input"]["message_count"] + 1 + len(added)
        assert after["input"]["message_count"] == count
    assert models[2]["input"]["messages"][0]["content"] == "sunny in Bergen"


def _model_ctx(messages: list) -> SimpleNamespace:
    """A before-model hook context as CrewAI builds it, for the translation alone."""
    llm = SimpleNamespace(model="scripted-model", provider="openai")
    return SimpleNamespace(llm=llm, agent=None, task=None, crew=None, messages=messages)


def test_a_run_s_message_count_follows_changes_to_what_was_counted():
    # The count of earlier messages is continued from the run's previous call. It must still
    # be the count of the whole conversation when CrewAI changed what was counted: an
    # Observation appended in place to the model's latest turn, or a long conversation
    # summarised into fresh messages.
    gate = charter.integration.Gate("crewai", policies=[], audit_location="none")
    counted: dict = {}

    def user(text: str) -> dict:
        return {"role": "user", "content": text}

    def model(text: str) -> dict:
        return {"role": "assistant", "content": text}

    def count() -> int:
        return tr.model_step(gate, _model_ctx(raw), counted).input["message_count"]

    raw = [{"role": "system", "content": "You forecast."}, user("Oslo?"), model("Action: a")]
    raw.append(user("go on"))
    assert count() == 4
    raw[2]["content"] += "\nObservation: sunny"  # the turn counted last, changed in place
    raw.append(model("Action: b"))
    assert count() == 6  # that turn is two messages now: the model's and the tool's
    raw.append(user("and Bergen?"))
    assert count() == 7
    # Summarised into new messages, as many as were counted: nothing counted before holds.
    raw[:] = [raw[0], user("Summary"), model("a\nObservation: x"), model("b\nObservation: y")]
    raw += [model("Action: c"), user("go on")]
    assert count() == 8
    raw[:] = [raw[0], user("Summary: sunny in Oslo.")]  # shorter than what was counted
    assert count() == 2
    gate.governor.close()
