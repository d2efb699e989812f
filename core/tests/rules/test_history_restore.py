"""A task restored from the store judges exactly as the process that lived through it.

A Runner records a random task into a real SQLite trail; a fresh Gate on the same file then
restores it the way a one-shot process does (`Gate.resume_task`, which adopts the records it
read instead of copying them), and a fresh Runner restores it the general way
(`Runner.restore_task`, every payload checked and copied). Both must return the same
decision and the same per-policy results for every next step, and so must the live Runner
when no recorded payload was redacted. A record that is not I-JSON
(written behind Charter's back) is refused by both ways, and the task's steps are blocked.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from charter import Behavior, Runner, Settings, StoreError
from charter.integration import Blocked, Gate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .test_history_replay import CTX, POLICIES, T0, _Driver, steps


def _runner(db: Path) -> Runner:
    return Runner(
        policies=POLICIES,
        agent_id="agent",
        audit_location=f"sqlite:///{db}",
        audit_durability="sync",
    )


def _gate(db: Path) -> Gate:
    return Gate.from_settings(
        "agent",
        Settings.from_sources(
            env={},
            policies=POLICIES,
            agent_id="agent",
            audit_location=f"sqlite:///{db}",
            audit_durability="sync",
        ),
    )


def _start() -> Behavior:
    return Behavior(agent_id="agent", task_id="t1", kind="task.start", step_name="s", timestamp=T0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recorded=st.lists(steps(), min_size=1, max_size=20), probes=st.lists(steps(), min_size=1))
def test_a_restored_task_judges_as_the_live_one(
    recorded: list[dict[str, Any]], probes: list[dict[str, Any]]
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "audit.db"
        live = _runner(db)
        driver = _Driver()
        live.record(_start())
        for spec in recorded:
            b = driver.behavior(spec)
            live.record(b.completed(driver.output(spec), outcome=spec["outcome"]))
        gate = _gate(db)
        assert gate.resume_task("t1") == "open"
        full = _runner(db)
        assert full.store is not None
        full.restore_task(full.store.read_task("t1", "agent"))
        try:
            # The store holds redacted payloads (INPUTS[4] carries a token), so the live
            # engine, which judged the originals, is a reference only for tasks without one.
            engines = [gate.governor.runner.engine, full.engine]
            if all(spec["input"] != 4 for spec in recorded):
                engines.append(live.engine)
            for spec in probes:
                candidate = driver.behavior(spec)
                want = engines[1].evaluate(candidate, CTX)
                for other in engines:
                    got = other.evaluate(candidate, CTX)
                    assert got.decision == want.decision
                    assert got.results == want.results
        finally:
            live.close()
            full.close()
            gate.governor.close(5.0)


@pytest.mark.allow_internal_errors  # deciding in a task that could not be restored
@pytest.mark.parametrize("body", ['{"x": NaN}', '{"x": -Infinity}', '{"x": 1e400}'])
def test_a_record_that_is_not_ijson_is_refused_and_the_task_blocked(
    tmp_path: Path, body: str
) -> None:
    db = tmp_path / "audit.db"
    live = _runner(db)
    live.record(_start())
    driver = _Driver()
    spec = {"kind": "step.exec", "verb": None, "name": "run", "input": 1, "dt": 1}
    spec |= {"outcome": "ok", "trust": None, "tokens": None}
    live.record(driver.behavior(spec).completed({"ok": True}))
    live.close()
    with sqlite3.connect(db) as conn:
        (text,) = conn.execute("SELECT body FROM steps WHERE seq = 2").fetchone()
        conn.execute(
            "UPDATE steps SET body = ? WHERE seq = 2",
            (text.replace('"output":{"ok":true}', f'"output":{body}'),),
        )
    gate = _gate(db)
    try:
        assert gate.resume_task("t1") == "unknown"
        decision = gate.decide(gate.tool_step("ls", {"path": "."}), "t1")
        assert isinstance(decision, Blocked)
        store = gate.governor.runner.store
        assert store is not None
        with pytest.raises(StoreError, match=r"seq 2 .* malformed; run verify"):
            store.read_task("t1", "agent")
    finally:
        gate.governor.close(5.0)
