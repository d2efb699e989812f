"""What the runner records: blocked steps, outcomes with their verdict, abandoned intents,
the closing marker, clock skew, and restoring a task in a fresh runner or process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import charter
import pytest
from charter import AgentBindingError, Behavior, Decision, Runner
from charter._runtime.wire import wire_form
from hypothesis import given, settings
from hypothesis import strategies as st


def _b(kind: str = "step.exec", task_id: str = "t1", **kw: Any) -> Behavior:
    kw.setdefault("step_name", "bash" if kind.startswith("step.") else "job")
    return Behavior(agent_id=kw.pop("agent_id", "default"), task_id=task_id, kind=kind, **kw)


def _cmd(command: str, **kw: Any) -> Behavior:
    return _b(input={"command": command}, **kw)


def test_evaluate_refuses_clock_skew_but_record_and_restore_do_not(
    make_runner: Callable[..., Runner],
) -> None:
    runner = make_runner(max_clock_skew_seconds=60)
    old = datetime.now(UTC) - timedelta(hours=2)
    runner.record(_b("task.start", timestamp=old))
    with pytest.raises(ValueError) as info:
        runner.evaluate(_cmd("ls", timestamp=old))
    message = str(info.value)
    assert "max_clock_skew_seconds= / CHARTER_MAX_CLOCK_SKEW_SECONDS (60)" in message
    assert "7200 s away" in message
    with pytest.raises(ValueError, match="max_clock_skew_seconds"):
        runner.evaluate(_cmd("ls", timestamp=datetime.now(UTC) + timedelta(minutes=5)))
    assert runner.record(_cmd("ls", timestamp=old, output={"ok": True})).seq == 2
    fresh = make_runner(max_clock_skew_seconds=60, audit_location="none")
    fresh.restore_task([_b("task.start", seq=1, timestamp=old)])
    assert fresh.engine.task_state("t1") == "open"


def test_a_blocked_step_is_recorded_once_with_its_verdict(
    make_runner: Callable[..., Runner], read_chain: Callable[..., Any]
) -> None:
    runner = make_runner()
    runner.record(_b("task.start"))
    intent = _cmd("rm -rf /", action_id="a1")
    result = runner.evaluate(intent)
    assert result.decision is Decision.BLOCK
    assert (result.recorded_seq, result.action_id) == (2, "a1")
    with pytest.raises(ValueError, match="already used"):
        runner.record(intent.completed({"done": True}))
    with pytest.raises(ValueError, match="already used"):
        runner.evaluate(intent)
    runner.end_task("t1")
    blocked = read_chain("t1")[1]
    assert blocked["seq"] == 2 and blocked["output"] is None
    assert blocked["meta"]["charter.outcome"] == "blocked"
    verdict = blocked["meta"]["charter.eval"]
    assert verdict["decision"] == "block"
    assert verdict["violations"][0]["name"] == "no-rm"
    assert verdict["reason"] == result.reason
    assert runner.status()["counters"]["blocked"] == 1


def test_allowed_outcomes_carry_the_verdict_and_open_intents_are_abandoned(
    make_runner: Callable[..., Runner], read_chain: Callable[..., Any], db: str
) -> None:
    runner = make_runner()
    runner.record(_b("task.start"))
    ran = _cmd("ls")
    result = runner.evaluate(ran)
    assert result.decision is Decision.ALLOW and result.action_id
    ran = ran.replace(action_id=result.action_id)
    assert runner.record(ran.completed({"stdout": "x"})).seq == 2
    left = _cmd("sleep 100", action_id="left-open")
    runner.evaluate(left)
    assert [i.action_id for i in runner.engine.open_intents("t1")] == ["left-open"]
    runner.end_task("t1")
    records = read_chain("t1")
    assert [(r["seq"], r["kind"], r["meta"].get("charter.outcome")) for r in records] == [
        (1, "task.start", None),
        (2, "step.exec", "ok"),
        (3, "step.exec", "abandoned"),
        (4, "task.end", None),
    ]
    assert records[1]["meta"]["charter.eval"]["decision"] == "allow"
    assert records[2]["action_id"] == "left-open"
    assert records[2]["meta"]["charter.eval"]["decision"] == "allow"
    assert records[3]["meta"]["charter.chain"] == {"final": True, "count": 4}
    assert charter.verify(db).ok


def test_ask_changes_nothing_until_approved(make_runner: Callable[..., Runner]) -> None:
    runner = make_runner()
    runner.record(_b("task.start"))
    ask = _b(kind="step.resource", verb="DELETE", step_name="delete_row", action_id="d1")
    assert runner.evaluate(ask).decision is Decision.ASK
    assert runner.engine.open_intents("t1") == ()
    assert runner.engine.get_history("t1")[-1].kind.value == "task.start"


def test_refusals_of_the_gate(make_runner: Callable[..., Runner]) -> None:
    runner = make_runner()
    with pytest.raises(ValueError, match="was not started"):
        runner.evaluate(_cmd("ls"))
    runner.record(_b("task.start"))
    with pytest.raises(AgentBindingError, match="CHARTER_AGENT_ID"):
        runner.evaluate(_cmd("ls", agent_id="other"))
    with pytest.raises(ValueError, match="has not run"):
        runner.evaluate(_cmd("ls", output={"done": True}))
    with pytest.raises(ValueError, match="not known to this runner"):
        runner.end_task("never")
    runner.end_task("t1")
    runner.end_task("t1")  # ending an ended task does nothing


def test_restore_continues_the_chain_in_a_fresh_runner(
    make_runner: Callable[..., Runner], read_chain: Callable[..., Any], db: str
) -> None:
    first = make_runner()
    first.record(_b("task.start"))
    first.record(_cmd("ls", output={"stdout": ""}))
    pending = _cmd("make", action_id="m1")
    first.evaluate(pending)
    intent = first.engine.open_intent("t1", "m1")
    assert intent is not None
    first.close()
    stored = read_chain("t1")
    second = make_runner()
    second.restore_task(stored)
    second.restore_intent(intent.to_dict())
    assert second.status()["queue"]["queued"] == 0  # restoring writes nothing
    assert second.record(pending.completed({"exit": 0})).seq == 3
    second.end_task("t1")
    records = read_chain("t1")
    assert [r["seq"] for r in records] == [1, 2, 3, 4]
    assert records[2]["meta"]["charter.eval"]["decision"] == "allow"
    store = charter.open_store(db)
    try:
        assert store.verify("t1").ok
    finally:
        store.close()
    with pytest.raises(ValueError, match="already active"):
        third = make_runner(audit_location="none")
        third.restore_task(stored)
        third.restore_task(stored)


_CHILD = textwrap.dedent(
    """
    import json, sys
    import charter
    db, intent = sys.argv[1], json.loads(sys.argv[2])
    runner = charter.Runner(policies=[], audit_location=db, audit_durability="sync")
    store = charter.open_store(db)
    runner.restore_task(store.read_task("t1", "default"))
    store.close()
    runner.restore_intent(intent)
    outcome = charter.Behavior.from_dict(intent).completed({"exit": 0})
    print(runner.record(outcome).seq)
    runner.end_task("t1")
    runner.close()
    """
)


def test_restore_in_a_fresh_process_continues_the_same_chain(
    make_runner: Callable[..., Runner], read_chain: Callable[..., Any], db: str, tmp_path: Path
) -> None:
    runner = make_runner()
    runner.record(_b("task.start"))
    runner.evaluate(_cmd("make", action_id="m1"))
    intent = runner.engine.open_intent("t1", "m1")
    assert intent is not None
    runner.flush(5)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, db, json.dumps(intent.to_dict())],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2"]
    records = read_chain("t1")
    assert [(r["seq"], r["kind"]) for r in records] == [
        (1, "task.start"),
        (2, "step.exec"),
        (3, "task.end"),
    ]
    assert records[1]["meta"]["charter.eval"]["decision"] == "allow"
    store = charter.open_store(db)
    try:
        assert store.verify().ok
    finally:
        store.close()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.datetimes(timezones=st.just(UTC)), min_size=1, max_size=5))
def test_the_stored_timestamp_is_the_behavior_time_to_the_microsecond(
    times: list[datetime],
) -> None:
    # Steps in the same second share the formatted date and time: each keeps its own.
    for ts in [*times, *(t.replace(microsecond=(t.microsecond + 1) % 10**6) for t in times)]:
        wire = wire_form(_b(timestamp=ts))
        assert wire["timestamp"] == ts.isoformat(timespec="microseconds")[:-6] + "Z"
        assert datetime.fromisoformat(wire["timestamp"]) == ts
