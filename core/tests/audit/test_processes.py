"""Several processes appending at once, and a writer killed mid-stream (real subprocesses)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from charter._audit.location import open_store, verify

Spawn = Callable[..., subprocess.Popen[str]]

# argv: location agent task count batch tag. Appends `count` entries in batches of `batch`;
# entry n carries action_id "<tag>-<n>" and input.n = n.
APPEND_CHILD = """
import sys
from charter._audit.location import open_store

location, agent, task, count, batch, tag = sys.argv[1:7]
count, batch = int(count), int(batch)
store = open_store(location)
done = 0
while done < count:
    size = min(batch, count - done)
    store.append([
        {
            "agent_id": agent, "task_id": task, "action_id": f"{tag}-{done + i}",
            "timestamp": "2026-11-30T05:49:05.123456Z", "kind": "step.exec",
            "verb": "tool.call", "step_name": "work",
            "input": {"n": done + i, "text": "x" * 200}, "output": {"ok": True},
            "properties": None, "meta": None,
        }
        for i in range(size)
    ])
    done += size
store.close()
"""

# argv: location. Appends one entry per call forever and prints each returned seq.
CRASH_CHILD = """
import sys
from charter._audit.location import open_store

store = open_store(sys.argv[1])
n = 0
while True:
    out = store.append([{
        "agent_id": "crash", "task_id": "loop", "action_id": str(n),
        "timestamp": "2026-11-30T05:49:05.123456Z", "kind": "step.exec", "verb": None,
        "step_name": "spin", "input": {"n": n, "pad": "y" * 2000}, "output": None,
        "properties": None, "meta": None,
    }])
    print(out[0]["seq"], flush=True)
    n += 1
"""


def _concurrent_appends(spawn: Spawn, location: str, writers: int, per_writer: int) -> None:
    # Half the writers share one task (one chain contended by all of them), half own theirs.
    shared = writers // 2
    children = [
        spawn(
            APPEND_CHILD,
            location,
            f"w{i}" if i >= shared else "team",
            "shared" if i < shared else f"own-{i}",
            str(per_writer),
            str(3 + i % 5),
            f"w{i}",
        )
        for i in range(writers)
    ]
    for child in children:
        _, err = child.communicate(timeout=120)
        assert child.returncode == 0, err

    report = verify(location)
    assert report.ok, str(report)
    assert report.steps_checked == writers * per_writer
    store = open_store(location)
    try:
        shared_records = store.read_task("shared", "team")
        assert [r["seq"] for r in shared_records] == list(range(1, shared * per_writer + 1))
        # Each writer's entries keep that writer's order within the shared chain.
        for i in range(shared):
            mine = [r["input"]["n"] for r in shared_records if r["action_id"].startswith(f"w{i}-")]
            assert mine == list(range(per_writer))
        for i in range(shared, writers):
            own = store.read_task(f"own-{i}")
            assert [r["seq"] for r in own] == list(range(1, per_writer + 1))
            assert [r["input"]["n"] for r in own] == list(range(per_writer))
        summaries = store.list_tasks()
        assert sum(s.steps for s in summaries) == writers * per_writer
        assert len(summaries) == 1 + writers - shared
    finally:
        store.close()


def test_sqlite_eight_processes(spawn: Spawn, tmp_path: Path) -> None:
    _concurrent_appends(spawn, f"sqlite:///{tmp_path / 'audit.db'}", writers=8, per_writer=200)


def test_postgresql_eight_processes(spawn: Spawn, postgresql_url: str) -> None:
    # Half the writers contend for one chain's head row lock, from separate processes.
    _concurrent_appends(spawn, postgresql_url, writers=8, per_writer=200)


def test_jsonl_four_processes(spawn: Spawn, tmp_path: Path) -> None:
    _concurrent_appends(spawn, f"jsonl:///{tmp_path / 'audit.jsonl'}", writers=4, per_writer=200)


@pytest.mark.parametrize("suffix", [".db", ".jsonl", "postgresql"])
def test_killed_writer_loses_nothing_it_reported(
    spawn: Spawn, tmp_path: Path, suffix: str, request: pytest.FixtureRequest
) -> None:
    if suffix == "postgresql":
        path: Path | str = str(request.getfixturevalue("postgresql_url"))
    else:
        path = tmp_path / f"audit{suffix}"
    child = spawn(CRASH_CHILD, str(path))
    assert child.stdout is not None
    printed = []
    for _ in range(25):
        line = child.stdout.readline()
        assert line, child.stderr.read() if child.stderr else "child exited"
        printed.append(int(line))
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL

    report = verify(path)
    assert report.ok, str(report)
    store = open_store(path)
    try:
        stored = [r["seq"] for r in store.read_task("loop")]
        assert stored[: len(printed)] == printed == list(range(1, 26))
        assert stored == list(range(1, len(stored) + 1))
        # The store keeps working after the crash.
        after = store.append(
            [
                {
                    "agent_id": "crash",
                    "task_id": "loop",
                    "timestamp": "2026-11-30T05:49:05.123456Z",
                    "kind": "task.end",
                }
            ]
        )
        assert after[0]["seq"] == len(stored) + 1
    finally:
        store.close()
