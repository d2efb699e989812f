"""Kickoffs, tasks and the installation itself: scope, async, copies, uninstall, repair."""

from __future__ import annotations

import asyncio

import charter
import pytest
from charter_crewai import govern
from crewai.hooks import clear_all_global_hooks, clear_all_hooks
from crewai.hooks.dispatch import HookAborted, InterceptionPoint, get_global_hook_list

NO_DELETES = "no-deletes"


def test_a_blocked_kickoff_raises_before_anything_runs(build_crew, audit, ran, deny):
    crew, llm = build_crew(["never used"])
    handle = govern(crew, policies=[deny("frozen", kinds=["task.start"])], audit_location=audit)

    with pytest.raises(charter.BlockedError, match="frozen") as blocked:
        crew.kickoff()

    assert isinstance(blocked.value, HookAborted)  # the one exception CrewAI lets through
    assert llm.calls == []
    assert ran == {}
    assert handle.task_ids == ()  # a refused task is not recorded


def test_a_blocked_crew_task_stops_the_crew(build_crew, audit, trail, deny):
    crew, llm = build_crew(["never used"])
    handle = govern(crew, policies=[deny("no-work", kinds=["step.self"])], audit_location=audit)

    with pytest.raises(charter.BlockedError, match="no-work"):
        crew.kickoff()
    handle.uninstall()

    assert llm.calls == []
    assert trail.summary(handle.task_ids[0]) == [
        ("task.start", "crew", None),
        ("step.self", "tidy up, part 1", "blocked"),
        ("task.error", "crew", None),
    ]
    assert trail.verify().ok


def test_each_task_of_the_crew_is_a_step_self_with_its_output(build_crew, audit, trail):
    crew, _llm = build_crew(["first report", "second report"], tasks=2)
    handle = govern(crew, policies=[], audit_location=audit)

    crew.kickoff()
    handle.uninstall()

    steps = [r for r in trail.read(handle.task_ids[0]) if r["kind"] == "step.self"]
    assert [s["step_name"] for s in steps] == ["tidy up, part 1", "tidy up, part 2"]
    first, second = steps
    assert first["verb"] == "POST"
    assert first["properties"]["task"] == {
        "description": "tidy up, part 1",
        "expected_output": "a short report",
        "agent_role": "cleaner",
        "async_execution": False,
    }
    assert first["output"] == {"raw": "first report", "agent": "cleaner"}
    assert "first report" in second["input"]["context"]  # earlier output is the next input


def test_every_kickoff_is_its_own_task(build_crew, audit, trail):
    crew, _llm = build_crew(["one", "two"])
    handle = govern(crew, policies=[], audit_location=audit)

    crew.kickoff(inputs={"run": "1"})
    crew.kickoff(inputs={"run": "2"})
    handle.uninstall()

    first, second = handle.task_ids
    assert first != second
    assert trail.read(first)[0]["input"] == {"run": "1"}
    assert trail.read(second)[-1]["output"]["raw"] == "two"
    report = trail.verify()
    assert report.ok and report.chains_checked == 2


@pytest.mark.parametrize("method", ["akickoff", "kickoff_async"])
def test_async_kickoffs_are_governed(build_crew, calling, audit, trail, ran, deny, method):
    crew, _llm = build_crew(
        [calling.tool("delete_file", path="/var/db"), calling.final("kept it")],
        native=calling.native,
    )
    handle = govern(
        crew,
        policies=[deny(NO_DELETES, kinds=["step.resource"], verbs=["DELETE"])],
        audit_location=audit,
    )

    result = asyncio.run(getattr(crew, method)())
    handle.uninstall()

    assert result.raw == "kept it"
    assert ran["delete_file"] == []
    steps = trail.summary(handle.task_ids[0])
    assert ("step.resource", "delete_file", "blocked") in steps
    assert steps[-1] == ("task.end", "crew", None)


def test_kickoff_for_each_governs_every_copy(build_crew, calling, audit, trail, ran, deny):
    # CrewAI runs each input on a copy of the crew; the copies carry the governance along.
    crew, _llm = build_crew(
        [calling.tool("delete_file", path="/srv"), calling.final("kept it")],
        native=calling.native,
    )
    handle = govern(
        crew,
        policies=[deny(NO_DELETES, kinds=["step.resource"], verbs=["DELETE"])],
        audit_location=audit,
    )

    results = crew.kickoff_for_each(inputs=[{"n": "1"}, {"n": "2"}])
    handle.uninstall()

    assert [r.raw for r in results] == ["kept it", "kept it"]
    assert ran["delete_file"] == []
    assert len(handle.task_ids) == 2
    for task_id in handle.task_ids:
        assert ("step.resource", "delete_file", "blocked") in trail.summary(task_id)


def test_two_crews_with_different_policies_do_not_interfere(
    build_crew, calling, tmp_path, ran, deny
):
    strict_audit = f"sqlite:///{tmp_path}/strict.db"
    relaxed_audit = f"sqlite:///{tmp_path}/relaxed.db"
    strict, _ = build_crew(
        [calling.tool("delete_file", path="/strict"), calling.final("kept")],
        native=calling.native,
        name="strict",
    )
    relaxed, _ = build_crew(
        [calling.tool("delete_file", path="/relaxed"), calling.final("deleted")],
        native=calling.native,
        name="relaxed",
    )
    strict_handle = govern(
        strict,
        policies=[deny(NO_DELETES, kinds=["step.resource"], verbs=["DELETE"])],
        agent_id="strict-crew",
        audit_location=strict_audit,
    )
    relaxed_handle = govern(
        relaxed, policies=[], agent_id="relaxed-crew", audit_location=relaxed_audit
    )

    async def both() -> list:
        # Concurrently, in two threads: routing is by crew, not by thread or order.
        return await asyncio.gather(strict.kickoff_async(), relaxed.kickoff_async())

    strict_result, relaxed_result = asyncio.run(both())
    strict_handle.uninstall()
    relaxed_handle.uninstall()

    assert (strict_result.raw, relaxed_result.raw) == ("kept", "deleted")
    assert ran["delete_file"] == ["/relaxed"]
    for location, handle, outcome in (
        (strict_audit, strict_handle, "blocked"),
        (relaxed_audit, relaxed_handle, "ok"),
    ):
        store = charter.open_store(location)
        try:
            assert [t.task_id for t in store.list_tasks()] == list(handle.task_ids)
            records = store.read_task(handle.task_ids[0])
        finally:
            store.close()
        deletes = [r for r in records if r["step_name"] == "delete_file"]
        assert [d["meta"]["charter.outcome"] for d in deletes] == [outcome]
        assert charter.verify(location).ok


def test_uninstall_restores_the_ungoverned_crew(build_crew, calling, audit, trail, ran, deny):
    crew, _llm = build_crew(
        [
            calling.tool("delete_file", path="/one"),
            calling.final("kept"),
            calling.tool("delete_file", path="/two"),
            calling.final("deleted"),
        ],
        native=calling.native,
    )
    handle = govern(
        crew,
        policies=[deny(NO_DELETES, kinds=["step.resource"], verbs=["DELETE"])],
        audit_location=audit,
    )
    crew.kickoff()
    handle.uninstall()
    handle.uninstall()  # twice is harmless

    result = crew.kickoff()

    assert result.raw == "deleted"
    assert ran["delete_file"] == ["/two"]
    assert len(handle.task_ids) == 1  # the second kickoff left no trail
    assert not handle.installed
    assert crew.before_kickoff_callbacks == []
    executor = crew.agents[0].agent_executor
    assert executor.before_llm_call_hooks == [] and executor.after_llm_call_hooks == []
    for point in InterceptionPoint:
        assert get_global_hook_list(point) == []


def test_govern_twice_is_harmless(build_crew, audit, trail, calling):
    crew, _llm = build_crew(
        [calling.tool("get_weather", city="Bern"), calling.final("fine")], native=calling.native
    )
    first = govern(crew, policies=[], agent_id="twice", audit_location=audit)
    second = govern(crew, policies=[], agent_id="twice", audit_location=audit)

    crew.kickoff()
    first.uninstall()

    assert second is first
    steps = trail.summary(first.task_ids[0])
    assert steps.count(("step.resource", "get_weather", "ok")) == 1
    assert len(first.task_ids) == 1


def test_governing_again_with_other_arguments_is_refused(build_crew, audit):
    crew, _llm = build_crew(["unused"])
    govern(crew, policies=[], audit_location=audit)

    with pytest.raises(ValueError, match="already governed with other arguments"):
        govern(crew, policies=[], agent_id="someone-else", audit_location=audit)


@pytest.mark.parametrize(
    ("clear", "noticed_by"),
    [
        # The kickoff router is still there and finds the others gone.
        (clear_all_global_hooks, "were removed from CrewAI's registry"),
        # Nothing of Charter's runs any more but the tripwire the crew carries.
        (clear_all_hooks, "did not see its kickoff"),
    ],
    ids=["tool-and-model-hooks-cleared", "every-hook-cleared"],
)
@pytest.mark.allow_internal_errors  # hooks gone: Charter cannot gate, and reports it
def test_cleared_hooks_fail_closed_until_governed_again(
    build_crew, audit, ran, deny, calling, clear, noticed_by
):
    crew, llm = build_crew(
        [calling.tool("delete_file", path="/x"), calling.final("kept")], native=calling.native
    )
    arguments = {
        "policies": [deny(NO_DELETES, kinds=["step.resource"], verbs=["DELETE"])],
        "audit_location": audit,
    }
    handle = govern(crew, **arguments)
    clear()  # e.g. a test suite resetting CrewAI between its tests

    with pytest.raises(charter.BlockedError, match=r"charter_crewai\.govern\(\.\.\.\) again") as e:
        crew.kickoff()
    assert noticed_by in e.value.reason
    assert llm.calls == []

    assert govern(crew, **arguments) is handle
    assert crew.kickoff().raw == "kept"
    assert ran["delete_file"] == []


def test_a_governed_standalone_agent(build_crew, calling, audit, trail, ran, deny):
    crew, _llm = build_crew(
        [calling.tool("delete_file", path="/home"), calling.final("kept")], native=calling.native
    )
    agent = crew.agents[0]
    handle = govern(
        agent,
        policies=[deny(NO_DELETES, kinds=["step.resource"], verbs=["DELETE"])],
        audit_location=audit,
    )

    result = agent.kickoff("Clean the home folder.")
    handle.uninstall()

    assert result.raw == "kept"
    assert ran["delete_file"] == []
    steps = trail.summary(handle.task_ids[0])
    assert steps[0] == ("task.start", "cleaner", None)
    assert ("step.resource", "delete_file", "blocked") in steps
    assert steps[-1] == ("task.end", "cleaner", None)
    assert trail.verify().ok


def test_a_governed_agent_inside_an_ungoverned_crew(build_crew, audit, trail, ran, deny, calling):
    crew, _llm = build_crew(
        [calling.tool("delete_file", path="/srv"), calling.final("kept")], native=calling.native
    )
    handle = govern(
        crew.agents[0],
        policies=[deny(NO_DELETES, kinds=["step.resource"], verbs=["DELETE"])],
        audit_location=audit,
    )

    crew.kickoff()
    handle.uninstall()

    assert ran["delete_file"] == []
    (task_id,) = handle.task_ids
    steps = trail.summary(task_id)
    # The crew is not governed: the agent's first step (its task) opens the Charter task and
    # the crew's end closes it.
    assert steps == [
        ("task.start", "crew", None),
        ("step.model", "scripted-model", "ok"),
        ("step.resource", "delete_file", "blocked"),
        ("step.model", "scripted-model", "ok"),
        ("step.self", "tidy up, part 1", "ok"),
        ("task.end", "crew", None),
    ]
    assert trail.read(task_id)[0]["properties"]["framework"]["crew"] == "crew"


def test_crews_nobody_governs_are_left_alone(build_crew, audit, ran, deny, calling):
    governed, _ = build_crew([calling.final("done")], native=calling.native, name="governed")
    other, _other_llm = build_crew(
        [calling.tool("delete_file", path="/other"), calling.final("deleted")],
        native=calling.native,
        name="other",
    )
    handle = govern(
        governed,
        policies=[deny(NO_DELETES, kinds=["step.resource"], verbs=["DELETE"])],
        audit_location=audit,
    )

    assert other.kickoff().raw == "deleted"

    assert ran["delete_file"] == ["/other"]
    assert handle.task_ids == ()
    assert other.before_kickoff_callbacks == []
