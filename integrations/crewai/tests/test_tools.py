"""Tool calls: gated before they run, on both tool-calling paths, recorded after."""

from __future__ import annotations

import charter
import pytest
from charter import Approval, callback_approver
from charter.testing import swallowed_errors
from charter_crewai import _translate, govern
from charter_crewai.testing import native_tool_call

NO_DELETES = "no-deletes"


def test_allowed_tool_runs_and_is_recorded(build_crew, calling, audit, trail, ran):
    crew, _llm = build_crew(
        [calling.tool("get_weather", city="Oslo"), calling.final("sunny")], native=calling.native
    )
    handle = govern(crew, policies=[], agent_id="weather-crew", audit_location=audit)

    result = crew.kickoff(inputs={"topic": "weather"})
    handle.uninstall()

    assert result.raw == "sunny"
    assert ran["get_weather"] == ["Oslo"]
    (task_id,) = handle.task_ids
    assert trail.summary(task_id) == [
        ("task.start", "crew", None),
        ("step.message", "user_message", "ok"),
        ("step.model", "scripted-model", "ok"),
        ("step.resource", "get_weather", "ok"),
        ("step.model", "scripted-model", "ok"),
        ("step.self", "tidy up, part 1", "ok"),
        ("task.end", "crew", None),
    ]
    records = trail.read(task_id)
    # The kickoff inputs are the user's request: recorded as a user message.
    assert records[1]["input"] == {"content": {"topic": "weather"}}
    assert records[1]["properties"]["message"] == {"role": "user"}
    tool = records[3]
    assert tool["verb"] == "GET"
    assert tool["input"] == {"city": "Oslo"}
    assert tool["output"] == {"result": "sunny in Oslo"}
    assert tool["properties"]["tool"]["name"] == "get_weather"
    assert tool["properties"]["tool"]["effect"] == "read_only"
    assert tool["properties"]["tool"]["description"] == "Get today's weather for a city."
    # Native calls carry the model's call id; ReAct text has none.
    assert ("call_id" in tool["properties"]["tool"]) is calling.native
    assert tool["properties"]["framework"] == {
        "name": "crewai",
        "agent_role": "cleaner",
        "task": "tidy up, part 1",
        "crew": "crew",
    }
    assert records[0]["input"] == {"topic": "weather"}
    assert records[-1]["output"]["raw"] == "sunny"
    assert trail.verify().ok


def test_blocked_tool_never_runs_and_the_agent_reads_why(
    build_crew, calling, audit, trail, ran, deny, observation
):
    crew, llm = build_crew(
        [calling.tool("delete_file", path="/etc/passwd"), calling.final("could not delete")],
        native=calling.native,
    )
    handle = govern(
        crew,
        policies=[deny(NO_DELETES, kinds=["step.resource"], verbs=["DELETE"])],
        audit_location=audit,
    )

    result = crew.kickoff()
    handle.uninstall()

    assert ran["delete_file"] == []
    assert result.raw == "could not delete"  # the crew carried on after the refusal
    seen = observation(llm)
    assert "Tool execution blocked by hook. Tool: delete_file" in seen
    assert f"Reason: blocked by policy '{NO_DELETES}'" in seen
    (task_id,) = handle.task_ids
    assert ("step.resource", "delete_file", "blocked") in trail.summary(task_id)
    assert trail.summary(task_id)[-1] == ("task.end", "crew", None)
    assert trail.verify().ok


def test_a_policy_rule_that_raises_still_blocks(
    build_crew, calling, audit, trail, ran, observation
):
    @charter.rule(
        name="crewai_test_exploding_rule", description="raises on every step", replace=True
    )
    def exploding(view, params, ctx):
        raise RuntimeError("rule bug")

    crew, llm = build_crew(
        [calling.tool("get_weather", city="Rome"), calling.final("no weather")],
        native=calling.native,
    )
    policy = {
        "name": "explodes",
        "rule_type": "crewai_test_exploding_rule",
        "severity": "critical",
        "match": {"kinds": ["step.resource"]},
    }
    handle = govern(crew, policies=[policy], audit_location=audit)

    crew.kickoff()
    handle.uninstall()

    assert ran["get_weather"] == []
    assert (
        "blocked by policy 'explodes' (critical): rule crewai_test_exploding_rule raised "
        "RuntimeError: rule bug"
    ) in observation(llm)
    assert ("step.resource", "get_weather", "blocked") in trail.summary(handle.task_ids[0])


@pytest.mark.allow_internal_errors
def test_an_error_inside_the_gate_blocks_in_closed_mode(
    build_crew, calling, audit, ran, observation, monkeypatch
):
    def broken(ctx, templates):
        raise KeyError("translation bug")

    monkeypatch.setattr(_translate, "tool_step", broken)
    crew, llm = build_crew(
        [calling.tool("get_weather", city="Rome"), calling.final("gave up")], native=calling.native
    )
    handle = govern(crew, policies=[], audit_location=audit)

    crew.kickoff()

    assert ran["get_weather"] == []
    assert handle.undecided == 1
    seen = observation(llm)
    assert "Charter could not judge step.unknown 'get_weather' (KeyError" in seen
    assert "governance fails closed" in seen
    assert [e.message for e in swallowed_errors() if "get_weather" in e.where][-1] == (
        "'translation bug'"
    )


@pytest.mark.allow_internal_errors
def test_an_error_inside_the_gate_runs_ungoverned_and_is_reported_in_open_mode(
    build_crew, audit, trail, ran, monkeypatch, calling
):
    def broken(ctx, templates):
        raise KeyError("translation bug")

    monkeypatch.setattr(_translate, "tool_step", broken)
    crew, _llm = build_crew(
        [calling.tool("get_weather", city="Rome"), calling.final("sunny")], native=calling.native
    )
    handle = govern(crew, policies=[], fail_mode="open", audit_location=audit)
    earlier = swallowed_errors()
    since = earlier[-1].serial if earlier else 0

    crew.kickoff()
    handle.uninstall()

    assert ran["get_weather"] == ["Rome"]
    assert handle.undecided == 1
    reported = [e for e in swallowed_errors(since) if "get_weather" in e.where]
    assert [(e.type, e.message) for e in reported] == [("KeyError", "'translation bug'")]
    # Ungoverned: nothing is recorded for the call itself.
    assert "get_weather" not in {s[1] for s in trail.summary(handle.task_ids[0])}


@pytest.mark.parametrize("approved", [True, False], ids=["approved", "denied"])
def test_ask_goes_to_the_approver_before_the_tool_runs(
    build_crew, calling, audit, trail, ran, observation, approved
):
    asked = []

    def decide(request):
        asked.append((request.behavior.step_name, request.behavior.input, list(ran["delete_file"])))
        return Approval(approved, "ops-lead", "looks fine" if approved else "not today")

    crew, llm = build_crew(
        [calling.tool("delete_file", path="/tmp/old.log"), calling.final("done")],
        native=calling.native,
    )
    policy = {
        "name": "deletes-need-approval",
        "rule_type": "deny",
        "severity": "high",
        "action": "ask",
        "match": {"kinds": ["step.resource"], "verbs": ["DELETE"]},
    }
    handle = govern(
        crew, policies=[policy], approver=callback_approver(decide), audit_location=audit
    )

    crew.kickoff()
    handle.uninstall()

    # Asked once, with the exact input, before anything ran.
    assert asked == [("delete_file", {"path": "/tmp/old.log"}, [])]
    records = trail.read(handle.task_ids[0])
    gates = [r for r in records if r["kind"] == "step.gate"]
    assert len(gates) == 1
    assert gates[0]["output"]["decision"] == ("pass" if approved else "deny")
    assert gates[0]["output"]["by"] == "ops-lead"
    assert gates[0]["properties"]["gate"]["step_name"] == "delete_file"
    tool = next(r for r in records if r["kind"] == "step.resource")
    if approved:
        assert ran["delete_file"] == ["/tmp/old.log"]
        assert tool["meta"]["charter.outcome"] == "ok"
    else:
        assert ran["delete_file"] == []
        assert tool["meta"]["charter.outcome"] == "blocked"
        assert "approval denied by ops-lead: not today" in observation(llm)
    assert trail.verify().ok


def test_parallel_native_calls_block_only_the_refused_one(build_crew, audit, trail, ran, deny):
    batch = [
        native_tool_call("get_weather", {"city": "Lima"}),
        native_tool_call("delete_file", {"path": "/srv/data"}),
        native_tool_call("get_weather", {"city": "Quito"}),
    ]
    crew, llm = build_crew([batch, "mixed results"], native=True)
    handle = govern(
        crew,
        policies=[deny(NO_DELETES, kinds=["step.resource"], verbs=["DELETE"])],
        audit_location=audit,
    )

    crew.kickoff()
    handle.uninstall()

    assert sorted(ran["get_weather"]) == ["Lima", "Quito"]
    assert ran["delete_file"] == []
    tool_messages = [m for m in llm.calls[-1] if m.get("role") == "tool"]
    assert [m["name"] for m in tool_messages] == ["get_weather", "delete_file", "get_weather"]
    assert f"blocked by policy '{NO_DELETES}'" in tool_messages[1]["content"]
    steps = trail.summary(handle.task_ids[0])
    assert steps.count(("step.resource", "get_weather", "ok")) == 2
    assert steps.count(("step.resource", "delete_file", "blocked")) == 1
    assert trail.verify().ok


@pytest.mark.allow_internal_errors
def test_a_recording_error_never_reaches_the_agent(build_crew, calling, audit, ran, monkeypatch):
    def broken(ctx):
        raise ValueError("recording bug")

    monkeypatch.setattr(_translate, "tool_output", broken)
    crew, _llm = build_crew(
        [calling.tool("get_weather", city="Oslo"), calling.final("sunny")], native=calling.native
    )
    govern(crew, policies=[], audit_location=audit)
    earlier = swallowed_errors()
    since = earlier[-1].serial if earlier else 0

    result = crew.kickoff()

    assert result.raw == "sunny"
    assert ran["get_weather"] == ["Oslo"]
    contained = [e for e in swallowed_errors(since) if e.where.startswith("charter_crewai")]
    assert [(e.where, e.message) for e in contained] == [
        ("charter_crewai: recording a tool result", "recording bug")
    ]
