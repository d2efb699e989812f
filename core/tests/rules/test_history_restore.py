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

import json
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import pytest
from charter import Behavior, PolicyEngine, Runner, Settings, StoreError
from charter.integration import Blocked, Gate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .test_history_replay import CTX, POLICIES, T0, _Driver, _fresh, steps


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


def _same_judgement(engines: list[PolicyEngine], driver: _Driver, probes: list[Any]) -> None:
    for spec in probes:
        candidate = driver.behavior(spec)
        want = engines[0].evaluate(candidate, CTX)
        for other in engines[1:]:
            got = other.evaluate(candidate, CTX)
            assert got.decision == want.decision
            assert got.results == want.results


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recorded=st.lists(steps(), min_size=1, max_size=20),
    warm=st.lists(steps(), max_size=6),
    later=st.lists(steps(), max_size=6),
    undo=st.one_of(st.none(), steps()),
    probes=st.lists(steps(), min_size=1, max_size=8),
)
def test_an_adopted_export_judges_as_the_live_engine(
    recorded: list[dict[str, Any]],
    warm: list[dict[str, Any]],
    later: list[dict[str, Any]],
    undo: dict[str, Any] | None,
    probes: list[dict[str, Any]],
) -> None:
    """An engine that adopts another's exported history (through JSON, steps behind a
    loader) judges like it, also after more steps and after a rolled-back one; and so does
    an engine that adopts the adopter's own export."""
    live = _fresh([])
    driver = _Driver()
    for spec in recorded:
        b = driver.behavior(spec)
        live.record(b.completed(driver.output(spec), outcome=spec["outcome"]))
    for spec in warm:  # builds some indexes (those their policies ask for), not all
        live.evaluate(driver.behavior(spec), CTX)
    exported = live.export_task("t1")
    assert exported is not None
    state = json.loads(json.dumps(exported))
    covered = state["steps"]
    loads: list[int] = []

    def earlier() -> list[Behavior]:
        loads.append(covered)
        return list(live.get_history("t1"))[:covered]

    copy = PolicyEngine(POLICIES)
    copy.adopt_task(state, earlier)
    for spec in later:
        b = driver.behavior(spec).completed(driver.output(spec), outcome=spec["outcome"])
        assert live.record(b) == copy.record(b)
    if undo is not None:
        mark = copy.checkpoint("t1")
        copy.record(driver.behavior(undo).completed(driver.output(undo)))
        copy.rollback(mark)
    again = copy.export_task("t1")
    assert again is not None
    third = PolicyEngine(POLICIES)
    third.adopt_task(json.loads(json.dumps(again)), lambda: list(live.get_history("t1")))
    _same_judgement([live, copy, third], driver, probes)
    assert copy.next_seq("t1") == live.next_seq("t1") == third.next_seq("t1")
    assert copy.get_history("t1") == live.get_history("t1")


def test_an_adopted_export_loads_no_step_when_its_indexes_were_saved() -> None:
    live = _fresh([])
    driver = _Driver()
    specs = [
        {"kind": k, "verb": v, "name": n, "input": 1, "dt": 1, "outcome": "ok"}
        | {"trust": None, "tokens": 5}
        for k, v, n in [
            ("step.message", "GET", "user_message"),
            ("step.model", None, "llm"),
            ("step.resource", "POST", "pay"),
            ("step.exec", None, "run"),
        ]
    ]
    for spec in specs:
        live.record(driver.behavior(spec).completed(driver.output(spec)))
    for spec in specs:  # every policy asks for its index
        live.evaluate(driver.behavior(spec), CTX)
    assert live.recorded_call("t1", "c1") is None  # and so do the lookups of integrations
    assert len(live.said_digests("t1")) == 1
    state = json.loads(json.dumps(live.export_task("t1")))

    def earlier() -> list[Behavior]:
        raise AssertionError("the steps were loaded")

    copy = PolicyEngine(POLICIES)
    copy.adopt_task(state, earlier)
    _same_judgement([live, copy], driver, specs)
    b = driver.behavior(specs[2]).completed(driver.output(specs[2]))
    assert copy.record(b) == live.record(b)
    _same_judgement([live, copy], driver, specs)
    # Recorded without judging anything (a PostToolUse): the export carries the step its
    # saved states miss, and the next engine still reads no step.
    called = Behavior(
        agent_id="agent",
        task_id="t1",
        kind="step.exec",
        step_name="run",
        action_id="call-1",
        timestamp=T0,
        properties={"tool": {"call_id": "c1"}},
    ).completed({"ok": True})
    following = PolicyEngine(POLICIES)
    following.adopt_task(json.loads(json.dumps(copy.export_task("t1"))), earlier)
    assert following.record(called) == live.record(called)
    third = PolicyEngine(POLICIES)
    third.adopt_task(json.loads(json.dumps(following.export_task("t1"))), earlier)
    _same_judgement([live, third], driver, specs)
    assert third.recorded_call("t1", "c1") == live.recorded_call("t1", "c1") is not None
    assert third.recorded_call("t1", "c2") is None
    assert third.has_recorded("t1", "call-1") and not third.has_recorded("t1", "call-2")
    assert third.said_digests("t1") == live.said_digests("t1")


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s.update(steps=0),
        lambda s: s.update(last_seq="9"),
        lambda s: s.update(action_ids=[1]),
        lambda s: s.pop("indexes"),
        lambda s: s["indexes"].update({"k": [1, 2]}),
    ],
)
def test_a_malformed_export_is_refused(change: Any) -> None:
    live = _fresh([])
    state = json.loads(json.dumps(live.export_task("t1")))
    change(state)
    with pytest.raises(ValueError, match="not a saved task history"):
        PolicyEngine(POLICIES).adopt_task(state, list)


def test_a_saved_index_that_does_not_load_is_rebuilt_from_the_steps() -> None:
    live = _fresh([])
    driver = _Driver()
    spec = {"kind": "step.resource", "verb": "POST", "name": "pay", "input": 1, "dt": 1}
    spec |= {"outcome": "ok", "trust": None, "tokens": None}
    live.record(driver.behavior(spec).completed(driver.output(spec)))
    live.evaluate(driver.behavior(spec), CTX)
    state = json.loads(json.dumps(live.export_task("t1")))
    for value in state["indexes"].values():
        value[1] = {"broken": True}
    copy = PolicyEngine(POLICIES)
    copy.adopt_task(state, lambda: list(live.get_history("t1")))
    _same_judgement([live, copy], driver, [spec, spec])


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


# -- snapshots -------------------------------------------------------------------------------


def _snapshot_gate(db: Path, root: Path, home: Path) -> Gate:
    gate = _gate(db)
    assert gate.use_snapshots(root, {"HOME": str(home)})
    return gate


def _steps_loaded(gate: Gate) -> bool:
    return bool(gate.governor.runner.engine._tasks["t1"].steps_loaded)


def _record(runner: Runner, driver: _Driver, spec: dict[str, Any]) -> None:
    b = driver.behavior(spec)
    runner.record(b.completed(driver.output(spec), outcome=spec["outcome"]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recorded=st.lists(steps(), min_size=1, max_size=16),
    warm=st.lists(steps(), max_size=6),
    later=st.lists(steps(), max_size=4),
    probes=st.lists(steps(), min_size=1, max_size=8),
)
def test_a_task_restored_from_its_snapshot_judges_as_a_full_restore(
    recorded: list[dict[str, Any]],
    warm: list[dict[str, Any]],
    later: list[dict[str, Any]],
    probes: list[dict[str, Any]],
) -> None:
    """A process saves its task's snapshot; the next restores from it without reading the
    steps (unless a rule needs an index that was not saved) and judges like a full restore
    from the same SQLite file, also from a snapshot saved by a process that restored from
    one. A process that stored a record redacted saves none."""
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        db, root, home = base / "audit.db", base / "project", base / "home"
        root.mkdir()
        live = _runner(db)
        driver = _Driver()
        live.record(_start())
        for spec in recorded:
            _record(live, driver, spec)
        live.close()
        gates: list[Gate] = []
        full = _runner(db)
        try:
            first = _snapshot_gate(db, root, home)
            gates.append(first)
            assert first.resume_task("t1") == "open"
            for spec in warm:
                first.governor.runner.engine.evaluate(driver.behavior(spec), CTX)
            assert first.save_snapshot("t1")
            second = _snapshot_gate(db, root, home)
            gates.append(second)
            assert second.resume_task("t1") == "open"
            assert not _steps_loaded(second)
            for spec in later:
                _record(second.governor.runner, driver, spec)
            redacted = any(spec["input"] == 4 for spec in later)
            assert second.save_snapshot("t1") is not redacted
            third = _snapshot_gate(db, root, home)
            gates.append(third)
            assert third.resume_task("t1") == "open"
            assert _steps_loaded(third) is redacted
            assert full.store is not None
            full.restore_task(full.store.read_task("t1", "agent"))
            engines = [full.engine, second.governor.runner.engine, third.governor.runner.engine]
            # The second process judged the originals of what it recorded; the store holds a
            # redacted step's payload masked (INPUTS[4] carries a token), so once one was
            # stored only the engines restored from the store are held to each other.
            judged = [full.engine, third.governor.runner.engine] if redacted else engines
            _same_judgement(judged, driver, probes)
            assert len({e.next_seq("t1") for e in engines}) == 1
        finally:
            full.close()
            for gate in gates:
                gate.governor.close(5.0)


def _saved(tmp_path: Path) -> tuple[Path, Path, Path, str]:
    """A task of a few steps in a SQLite trail and its snapshot; (db, root, home, path)."""
    db, root, home = tmp_path / "audit.db", tmp_path / "project", tmp_path / "home"
    root.mkdir()
    live = _runner(db)
    driver = _Driver()
    live.record(_start())
    spec = {"kind": "step.exec", "verb": None, "name": "run", "input": 1, "dt": 1}
    spec |= {"outcome": "ok", "trust": None, "tokens": None}
    for _ in range(6):  # max-all allows 6: the next is refused, unless the count is forged
        _record(live, driver, spec)
    live.close()
    gate = _snapshot_gate(db, root, home)
    try:
        assert gate.resume_task("t1") == "open"
        gate.governor.runner.engine.evaluate(driver.behavior(spec), CTX)
        assert gate.save_snapshot("t1")
        snapshots = gate._snapshots
        path = snapshots.path("agent", "t1")
    finally:
        gate.governor.close(5.0)
    return db, root, home, path


def _judges_as_full(db: Path, root: Path, home: Path) -> bool:
    """Restore in a fresh process; whether it read the steps, after checking it judges a
    run step like a full restore (max-all allows 6 steps: the 6th run is refused)."""
    gate = _snapshot_gate(db, root, home)
    full = _runner(db)
    try:
        assert gate.resume_task("t1") == "open"
        loaded = _steps_loaded(gate)
        assert full.store is not None
        full.restore_task(full.store.read_task("t1", "agent"))
        spec = {"kind": "step.exec", "verb": None, "name": "run", "input": 2, "dt": 1}
        spec |= {"outcome": "ok", "trust": None, "tokens": None}
        _same_judgement([full.engine, gate.governor.runner.engine], _Driver(), [spec])
        return loaded
    finally:
        full.close()
        gate.governor.close(5.0)


def test_a_snapshot_is_used_when_it_verifies(tmp_path: Path) -> None:
    db, root, home, _ = _saved(tmp_path)
    assert _judges_as_full(db, root, home) is False


def test_a_tampered_snapshot_is_ignored(tmp_path: Path) -> None:
    import hashlib
    import hmac

    db, root, home, path = _saved(tmp_path)
    mac, body = Path(path).read_bytes().split(b"\n", 1)
    forged = json.loads(body)
    for key, value in forged["history"]["indexes"].items():
        if "count_ok" in key:
            value[1] = 0  # as if no step had happened: max-all would allow more
    forged_body = json.dumps(forged, separators=(",", ":")).encode()
    # The old MAC, then a MAC under a key that is not the project's.
    for signed in (mac, hmac.new(b"0" * 64, forged_body, hashlib.sha256).hexdigest().encode()):
        Path(path).write_bytes(signed + b"\n" + forged_body)
        assert _judges_as_full(db, root, home) is True
    Path(path).write_bytes(b"not a snapshot")
    assert _judges_as_full(db, root, home) is True


def test_a_snapshot_for_another_head_is_ignored(tmp_path: Path) -> None:
    db, root, home, _ = _saved(tmp_path)
    other = _runner(db)  # another process appends to the chain after the snapshot
    try:
        assert other.store is not None
        other.restore_task(other.store.read_task("t1", "agent"))
        spec = {"kind": "step.exec", "verb": None, "name": "run", "input": 3, "dt": 1}
        spec |= {"outcome": "ok", "trust": None, "tokens": None}
        driver = _Driver()
        driver.n = 100  # action ids the task has not used
        _record(other, driver, spec)
    finally:
        other.close()
    assert _judges_as_full(db, root, home) is True


def test_a_snapshot_under_a_replaced_key_is_ignored(tmp_path: Path) -> None:
    db, root, home, path = _saved(tmp_path)
    key = Path(path).parent.parent / "snapshot.key"
    key.unlink()  # the next process makes a new key: the old snapshot no longer verifies
    assert _judges_as_full(db, root, home) is True


def test_there_are_no_snapshots_without_a_home_outside_the_project(tmp_path: Path) -> None:
    gate = _gate(tmp_path / "audit.db")
    try:
        assert gate.use_snapshots(tmp_path, {}) is False
        assert gate.use_snapshots(tmp_path, {"HOME": str(tmp_path)}) is False
        assert gate.save_snapshot("t1") is False
    finally:
        gate.governor.close(5.0)
