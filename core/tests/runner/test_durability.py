"""Durability and faults: SIGKILL mid-run, many processes, broken stores and exporters."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import charter
import pytest
from charter import AuditError, BlockedError, Governor, Runner
from charter.audit import is_intent_record

_SYNC_CHILD = textwrap.dedent(
    """
    import sys
    import charter
    gov = charter.Governor(policies=[], audit_location=sys.argv[1], audit_durability="sync")
    with gov.task("crash"):
        for i in range(100_000):
            h = gov.begin_step("step.exec", name="bash", input={"command": f"echo {i}"})
            print(h.complete({"i": i}).seq, flush=True)
    """
)


def test_sigkill_in_sync_mode_loses_no_returned_step(tmp_path: Path, db: str) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _SYNC_CHILD, db],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    assert child.stdout is not None
    returned: list[int] = []
    deadline = time.monotonic() + 60
    while len(returned) < 40 and time.monotonic() < deadline:
        line = child.stdout.readline()
        if not line:
            break
        returned.append(int(line))
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert len(returned) >= 40, child.stderr.read() if child.stderr else ""
    # Each step is its write-ahead intent, then its outcome.
    assert returned == list(range(3, 3 + 2 * len(returned), 2))
    store = charter.open_store(db)
    try:
        stored = {r["seq"] for r in store.read_task("crash", "default")}
        assert set(returned) <= stored
        report = store.verify()
        assert report.ok, str(report)
    finally:
        store.close()


_ACKING_CHILD = textwrap.dedent(
    """
    import sys
    import charter
    location, task = sys.argv[1], sys.argv[2]
    gov = charter.Governor(policies=[], audit_location=location, audit_durability="sync")
    padding = "x" * int(sys.argv[3])  # big records: a kill often lands inside a write
    with gov.task(task):
        for i in range(100_000):
            data = {"command": f"echo {i}", "pad": padding}
            h = gov.begin_step("step.exec", name="bash", input=data)
            done = h.complete({"i": i})
            print(done.action_id, flush=True)  # acknowledged: the call returned
    """
)


def _wait_for_a_write_in_progress(path: Path, within: float = 10.0) -> None:
    """Return as soon as the file ends inside a line (a writer is mid-append), or give up."""
    deadline = time.monotonic() + within
    with path.open("rb") as handle:
        while time.monotonic() < deadline:
            size = os.fstat(handle.fileno()).st_size
            if size and os.pread(handle.fileno(), 1, size - 1) != b"\n":
                return


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_sigkill_at_random_points_in_sync_mode_loses_no_acknowledged_record(
    tmp_path: Path, kind: str
) -> None:
    location = f"{kind}:///{tmp_path / ('audit.db' if kind == 'sqlite' else 'audit.jsonl')}"
    chance = random.Random(0x5EED)
    acknowledged: dict[str, list[str]] = {}
    for run in range(6):
        task = f"crash-{run}"
        # Small records, and big ones that take long enough to write for a kill to tear one.
        pad = 2_000 if run % 2 else 3_000_000
        child = subprocess.Popen(
            [sys.executable, "-c", _ACKING_CHILD, location, task, str(pad)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        assert child.stdout is not None
        first = child.stdout.readline()  # it is writing now
        assert first, child.stderr.read() if child.stderr else ""
        if kind == "jsonl" and not run % 2:
            _wait_for_a_write_in_progress(tmp_path / "audit.jsonl")
        else:
            time.sleep(chance.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate(timeout=30)
        assert child.returncode == -signal.SIGKILL
        acknowledged[task] = [first.strip(), *rest.split()]
    store = charter.open_store(location)
    try:
        report = store.verify()
        assert report.ok, str(report)
        if kind == "jsonl":  # the targeted kills tore a line, which the next writer fenced
            assert any("truncated, unacknowledged write" in w for w in report.warnings), report
        for task, acked in acknowledged.items():
            stored = {r["action_id"] for r in store.read_task(task, "default")}
            missing = [a for a in acked if a not in stored]
            assert not missing, f"{task}: {len(missing)} acknowledged records lost"
        # The surviving trail takes new records and still verifies.
        store.append(
            [
                {
                    "agent_id": "default",
                    "task_id": "after",
                    "kind": "task.start",
                    "timestamp": "2026-12-01T00:00:00.000000Z",
                }
            ]
        )
        report = store.verify()
        assert report.ok, str(report)
    finally:
        store.close()


_WORKER = textwrap.dedent(
    """
    import sys
    import charter
    db, agent = sys.argv[1], sys.argv[2]
    gov = charter.Governor(policies=[], audit_location=db, agent_id=agent)
    shared = gov.start_task("shared")
    own = gov.start_task("own-" + agent)
    for i in range(30):
        for tid in (shared, own):
            gov.begin_step("step.exec", name="bash", input={"i": i}, task_id=tid).complete()
    gov.end_task(shared)
    gov.end_task(own)
    gov.close()
    """
)


def test_eight_processes_govern_into_one_sqlite_store(tmp_path: Path, db: str) -> None:
    agents = [f"agent-{i}" for i in range(8)]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, db, agent],
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for agent in agents
    ]
    for child in children:
        assert child.wait(timeout=120) == 0, child.stderr.read() if child.stderr else ""
    store = charter.open_store(db)
    try:
        summaries = store.list_tasks()
        assert len(summaries) == 16
        for s in summaries:
            seqs = [r["seq"] for r in store.read_task(s.task_id, s.agent_id)]
            assert seqs == list(range(1, 33)), (s.agent_id, s.task_id)
            assert s.closed
        report = store.verify()
        assert report.ok and report.chains_checked == 16, str(report)
    finally:
        store.close()


def _steps(gov: Governor, n: int = 3) -> list[int]:
    ran = []
    with gov.task("t1"):
        for i in range(n):
            with gov.step("step.exec", name="bash", input={"command": f"echo {i}"}):
                ran.append(i)
        with pytest.raises(BlockedError):
            gov.begin_step("step.exec", name="bash", input={"command": "rm -rf /"})
    return ran


@pytest.mark.allow_internal_errors
def test_unwritable_store_buffered_steps_still_run(
    tmp_path: Path, make_runner: Callable[..., Runner]
) -> None:
    (tmp_path / "afile").write_text("a regular file, not a directory")
    runner = make_runner(audit_location=f"sqlite:///{tmp_path / 'afile' / 'audit.db'}")
    assert _steps(Governor(runner)) == [0, 1, 2]
    runner.flush(10)
    status = runner.status()
    assert status["store"]["ok"] is False
    assert "cannot be opened" in status["store"]["detail"]
    assert status["queue"]["failed"] == 6 and status["queue"]["dropped"] == 6
    assert status["queue"]["delivered"] == 0


@pytest.mark.allow_internal_errors
def test_unwritable_store_sync_raises_and_writes_nothing(
    tmp_path: Path, make_runner: Callable[..., Runner]
) -> None:
    (tmp_path / "afile").write_text("x")
    runner = make_runner(
        audit_location=f"sqlite:///{tmp_path / 'afile' / 'audit.db'}", audit_durability="sync"
    )
    gov = Governor(runner)
    with pytest.raises(AuditError, match="nothing was written"):
        gov.start_task("t1")
    assert runner.engine.task_state("t1") == "unknown"


@pytest.mark.allow_internal_errors
def test_failing_store_buffered_counts_failed_and_dropped(
    make_runner: Callable[..., Runner], flaky_store: Callable[..., Any]
) -> None:
    store = flaky_store()
    runner = make_runner(store=store)
    assert _steps(Governor(runner)) == [0, 1, 2]
    assert runner.flush(10)
    queue = runner.status()["queue"]
    assert (queue["queued"], queue["failed"], queue["dropped"], queue["delivered"]) == (6, 6, 6, 0)
    assert store.calls >= 3


@pytest.mark.allow_internal_errors
def test_failing_store_sync_raises_for_that_step_and_history_does_not_move(
    make_runner: Callable[..., Runner], flaky_store: Callable[..., Any]
) -> None:
    store = flaky_store(failing=False)
    runner = make_runner(store=store, audit_durability="sync")
    gov = Governor(runner)
    tid = gov.start_task("t1")
    h = gov.begin_step("step.exec", name="bash", input={"command": "ls"}, task_id=tid)
    store.failing = True
    with pytest.raises(AuditError, match="history is unchanged"):
        h.complete({"ok": 1})
    assert [b.kind.value for b in runner.engine.get_history(tid)] == ["task.start"]
    assert runner.engine.open_intent(tid, h.action_id) is not None
    # A block stands although it cannot be recorded; an allowed step cannot run unrecorded.
    with pytest.raises(BlockedError, match="not recorded"):
        gov.begin_step("step.exec", name="bash", input={"command": "rm -rf /"}, task_id=tid)
    with pytest.raises(BlockedError, match="intent could not be recorded"):
        gov.begin_step("step.exec", name="bash", input={"command": "ls"}, task_id=tid)
    with pytest.raises(AuditError):
        gov.end_task(tid)
    assert runner.engine.task_state(tid) == "open"
    store.failing = False
    assert h.complete({"ok": 1}).seq == 3  # after its write-ahead intent at seq 2
    gov.end_task(tid)
    stored = store.read_task(tid, "default")
    assert [(r["seq"], r["kind"], is_intent_record(r)) for r in stored] == [
        (1, "task.start", False),
        (2, "step.exec", True),
        (3, "step.exec", False),
        (4, "task.end", False),
    ]
    assert store.verify().ok


@pytest.mark.allow_internal_errors
def test_a_raising_exporter_never_reaches_the_agent(
    make_runner: Callable[..., Runner], read_chain: Callable[..., Any]
) -> None:
    seen: list[int] = []

    class Broken:
        def export(self, records: Sequence[Mapping[str, Any]]) -> None:
            seen.append(len(records))
            raise ConnectionError("collector unreachable")

    runner = make_runner(exporters=[Broken()])
    assert _steps(Governor(runner)) == [0, 1, 2]
    runner.flush(10)
    queue = runner.status()["queue"]
    assert queue["export_failed"] == 6 == sum(seen)
    assert queue["delivered"] == 6 and queue["dropped"] == 0
    assert len(read_chain("t1")) == 6


def test_exporters_receive_chained_records(make_runner: Callable[..., Runner]) -> None:
    got: list[dict[str, Any]] = []
    lock = threading.Lock()

    def collect(records: Sequence[Mapping[str, Any]]) -> None:
        with lock:
            got.extend(dict(r) for r in records)

    runner = make_runner(exporters=[collect], audit_durability="sync")
    _steps(Governor(runner), n=1)
    # start, the step's write-ahead intent and its outcome, the block, end
    assert [r["seq"] for r in got] == [1, 2, 3, 4, 5]
    assert [is_intent_record(r) for r in got] == [False, True, False, False, False]
    assert all(len(r["hash"]) == 64 for r in got)


def test_stdout_and_none_locations(
    make_runner: Callable[..., Runner], capfd: pytest.CaptureFixture[str]
) -> None:
    quiet = make_runner(audit_location="none")
    _steps(Governor(quiet), n=1)
    assert quiet.status()["store"] == {"ok": True, "location": "none", "detail": "auditing is off"}
    loud = make_runner(audit_location="stdout", audit_durability="sync")
    _steps(Governor(loud), n=1)
    lines = [line for line in capfd.readouterr().out.splitlines() if line.startswith("{")]
    assert len(lines) == 5 and '"kind":"task.end"' in lines[-1]  # with the step's intent


def test_pid_guard_is_respected(db: str) -> None:
    # A store opened by this process must not be used by a forked child; the runner opens
    # its store per process, so a child building its own Governor works.
    code = (
        "import charter,sys; g=charter.Governor(policies=[], audit_location=sys.argv[1]);"
        "t=g.start_task(); g.end_task(t); print(g.status()['queue']['delivered'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, db],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert out.stdout.strip() == "2", out.stderr
