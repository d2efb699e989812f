"""Background work: the idle sweeper, the bounded queue, flushing at exit, closing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import charter
import pytest
from charter import Governor, Runner, TaskClosedError


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_sweeper_closes_an_idle_task(
    make_runner: Callable[..., Runner], read_chain: Callable[..., Any]
) -> None:
    runner = make_runner(task_idle_seconds=0.2, sweep_interval_seconds=0.05)
    gov = Governor(runner)
    tid = gov.start_task("idle-task", name="job")
    h = gov.begin_step("step.exec", name="bash", input={"command": "sleep"}, task_id=tid)
    busy = gov.start_task("busy-task")
    for _ in range(8):  # kept alive by activity while the other one idles
        gov.begin_step("step.model", name="llm", task_id=busy).complete()
        time.sleep(0.05)
    assert _wait_for(lambda: runner.engine.task_state(tid) == "ended")
    assert runner.engine.task_state(busy) == "open"
    runner.flush(5)
    records = read_chain(tid)
    assert [(r["kind"], r["meta"].get("charter.outcome")) for r in records] == [
        ("task.start", None),
        ("step.exec", "abandoned"),
        ("task.idle", None),
    ]
    idle = records[-1]
    assert idle["properties"]["idle"]["reason"] == "expired"
    assert idle["meta"]["charter.chain"] == {"final": True, "count": 3}
    assert idle["step_name"] == "job"
    with pytest.raises(TaskClosedError):
        h.complete()
    gov.end_task(tid)  # already closed by the sweeper: nothing to do
    assert runner.status()["counters"]["idle_tasks_closed"] >= 1


@pytest.mark.allow_internal_errors
def test_a_full_queue_drops_and_counts_without_blocking(
    make_runner: Callable[..., Runner], flaky_store: Callable[..., Any]
) -> None:
    store = flaky_store(failing=False, delay=0.2)
    runner = make_runner(store=store, queue_size=1)
    gov = Governor(runner)
    with gov.task("t1"):
        for i in range(20):
            gov.begin_step("step.exec", name="bash", input={"i": i}).complete()
        # Each append takes 0.2 s: a step that waited for its record would leave one append
        # per step behind it; steps that never wait are done long before the store is.
        appends_while_running = store.calls
    assert appends_while_running < 20
    runner.flush(10)
    queue = runner.status()["queue"]
    assert queue["dropped"] > 0
    # task.start, 20 steps and task.end were offered. A record evicted from the queue to make
    # room for a higher-value one (task.end) was queued first and then dropped: it is counted
    # in both, and in `evicted`.
    assert queue["queued"] - queue["evicted"] + queue["dropped"] == 22
    assert queue["delivered"] == queue["queued"] - queue["evicted"]


_EXITING_CHILD = textwrap.dedent(
    """
    import sys
    import charter
    gov = charter.Governor(policies=[], audit_location=sys.argv[1])
    tid = gov.start_task("exit-task")
    for i in range(300):
        gov.begin_step("step.exec", name="bash", input={"i": i}, task_id=tid).complete()
    # no flush, no close: the atexit hook must commit what is queued
    """
)


def test_the_queue_is_flushed_at_interpreter_exit(
    tmp_path: Path, db: str, read_chain: Callable[..., Any]
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _EXITING_CHILD, db],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert len(read_chain("exit-task")) == 301


def test_close_stops_the_threads_and_is_idempotent(make_runner: Callable[..., Runner]) -> None:
    runner = make_runner()
    threads = [runner._sweeper, runner._writer._thread]
    assert all(t is not None and t.is_alive() for t in threads)
    assert runner.close(5)
    assert runner.close(5)
    assert _wait_for(lambda: not any(t is not None and t.is_alive() for t in threads), 5)
    assert all(t is not None and t.daemon for t in threads)


def test_status_reports_the_store_and_policies(make_runner: Callable[..., Runner]) -> None:
    runner = make_runner(agent_id="bot", environment="prod")
    status = runner.status()
    assert status["store"]["ok"] is True
    assert status["policies"] == {"step_execution": 3, "agent_registration": 0}
    assert status["applicable_policies"] == ["no-rm", "warn-curl", "ask-delete"]
    assert (status["fail_mode"], status["enforcement"], status["durability"]) == (
        "closed",
        "enforce",
        "buffered",
    )
    assert charter.Runner is Runner
