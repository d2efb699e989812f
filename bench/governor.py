"""Governor benchmark: prints figures, asserts nothing.

    uv run python bench/governor.py

1. One full governed step through `Governor.step` (build the intent, evaluate with the 10
   policies of bench/engine.py, register, record the outcome, redact, queue) with a buffered
   SQLite store in a temporary directory: p50/p99 latency as the agent sees it.
2. The same with sync durability (each outcome committed before the step returns).
3. Throughput of the runner's batching path into SQLite, in steps/s: end to end
   (`Runner.record` of completed steps, then `flush`), and the writer alone (wire records
   built beforehand, submitted to the queue, then redacted, chained and committed in batches
   by the writer thread until `flush` returns).
4. The floor under the writer, in the same run: the rows the writer stored (same bodies, same
   schema, same pragmas: WAL, synchronous=NORMAL) inserted again into a fresh SQLite file in
   transactions of 500 records, each also upserting its chain heads, by plain `sqlite3`.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from charter import Behavior, Governor, Runner, Settings
from charter._runtime.wire import wire_form
from engine import POLICIES  # type: ignore[import-not-found]


def _percentiles(samples: list[int]) -> tuple[float, float]:
    samples = sorted(samples)
    return samples[len(samples) // 2] / 1000, samples[int(len(samples) * 0.99)] / 1000


def governed_steps(
    location: str, durability: str, steps: int, per_task: int = 100
) -> tuple[float, float]:
    gov = Governor(
        policies=POLICIES,
        audit_location=location,
        audit_durability=durability,
        agent_id="bench",
        queue_size=100_000,
    )
    clock = time.perf_counter_ns
    cpu = time.thread_time_ns
    samples: list[int] = []
    cpu_samples: list[int] = []
    done = 0
    while done < steps:
        with gov.task(name="bench"):
            for i in range(min(per_task, steps - done)):
                t0, c0 = clock(), cpu()
                with gov.step(
                    "step.exec", name="Bash", input={"command": f"ls -la src/{i}", "timeout": 30}
                ) as s:
                    s.output = {"stdout": "a.py\nb.py\n", "exit_code": 0}
                samples.append(clock() - t0)
                cpu_samples.append(cpu() - c0)
            done += per_task
    gov.close()
    warm = len(samples) // 10  # the first tenth warms caches
    cpu_p50, _ = _percentiles(cpu_samples[warm:])
    return (*_percentiles(samples[warm:]), cpu_p50)


def _completed(n: int, task_id: str) -> list[Behavior]:
    return [
        Behavior(
            agent_id="bench",
            task_id=task_id,
            kind="step.exec",
            step_name="Bash",
            action_id=f"a{i}",
            input={"command": f"ls -la src/{i}", "timeout": 30},
            output={"stdout": "a.py\nb.py\n", "exit_code": 0},
        )
        for i in range(n)
    ]


def _runner(location: str) -> Runner:
    return Runner(
        Settings.from_sources(
            policies=POLICIES, audit_location=location, agent_id="bench", queue_size=200_000
        )
    )


def record_throughput(location: str, n: int, tasks: int = 10) -> tuple[float, float]:
    runner = _runner(location)
    per_task = n // tasks
    batches = []
    for t in range(tasks):
        tid = f"rec-{t}"
        runner.record(Behavior(agent_id="bench", task_id=tid, kind="task.start", step_name="b"))
        batches.append(_completed(per_task, tid))
    runner.flush(60)
    t0, c0 = time.perf_counter(), time.process_time()
    for batch in batches:
        for b in batch:
            runner.record(b)
    runner.flush(120)
    elapsed, used = time.perf_counter() - t0, time.process_time() - c0
    delivered = runner.status()["queue"]["delivered"] - tasks
    runner.close()
    return delivered / elapsed, delivered / used


def writer_throughput(location: str, n: int, tasks: int = 10) -> tuple[float, float]:
    runner = _runner(location)
    writer = runner._writer
    # Each chain opens with its task.start (seq 1, written before the clock starts); the
    # steps carry the seq the runner would have given them, from 2.
    starts = [
        wire_form(
            Behavior(agent_id="bench", task_id=f"w-{t}", kind="task.start", step_name="b", seq=1)
        )
        for t in range(tasks)
    ]
    writer.submit(starts)
    writer.flush(60)
    wires: list[dict[str, Any]] = []
    for t in range(tasks):
        for seq, b in enumerate(_completed(n // tasks, f"w-{t}"), start=2):
            wires.append(wire_form(b) | {"seq": seq})
    before = writer.delivered
    t0, c0 = time.perf_counter(), time.process_time()
    for start in range(0, len(wires), 100):
        writer.submit(wires[start : start + 100])
    writer.flush(120)
    elapsed, used = time.perf_counter() - t0, time.process_time() - c0
    delivered = writer.delivered - before
    runner.close()
    return delivered / elapsed, delivered / used


def sqlite_alone(stored: str, fresh: str) -> tuple[float, float]:
    """Records/s of SQLite by itself: the rows of the store at `stored` inserted again,
    500 per transaction with their chains' heads, into a fresh store at `fresh`."""
    from charter._audit.sqlite import _INSERT_STEP, _UPSERT_HEAD, SQLiteStore

    SQLiteStore(fresh, synchronous="normal").close()  # the same schema and pragmas
    with sqlite3.connect(stored) as source:
        rows = source.execute(
            "SELECT agent_id, task_id, seq, hash, prev_hash, kind, timestamp, body FROM steps "
            "WHERE seq > 1 ORDER BY id"
        ).fetchall()
    conn = sqlite3.connect(fresh, isolation_level=None)
    conn.execute("PRAGMA synchronous = NORMAL")
    t0, c0 = time.perf_counter(), time.process_time()
    for start in range(0, len(rows), 500):
        batch = rows[start : start + 500]
        heads = {(r[0], r[1]): (r[0], r[1], r[2], r[3], 0) for r in batch}
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(_INSERT_STEP, batch)
        conn.executemany(_UPSERT_HEAD, list(heads.values()))
        conn.execute("COMMIT")
    elapsed, used = time.perf_counter() - t0, time.process_time() - c0
    conn.close()
    return len(rows) / elapsed, len(rows) / used


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        loc: Callable[[str], str] = lambda name: f"sqlite:///{Path(tmp) / name}"  # noqa: E731
        rows = [
            (
                "Governor.step, 10 policies, buffered SQLite",
                *governed_steps(loc("a.db"), "buffered", 5000),
            ),
            ("Governor.step, 10 policies, sync SQLite", *governed_steps(loc("b.db"), "sync", 500)),
        ]
        print(f"{'measure':<46} {'p50 us':>9} {'p99 us':>9} {'p50 cpu us':>11}")
        for name, p50, p99, cpu in rows:
            print(f"{name:<46} {p50:>9.1f} {p99:>9.1f} {cpu:>11.1f}")
        print()
        print(f"{'throughput':<46} {'steps/s':>9} {'per cpu-s':>11}")
        for name, (wall, per_cpu) in (
            ("Runner.record -> SQLite (end to end)", record_throughput(loc("c.db"), 50_000)),
            ("audit writer batches -> SQLite", writer_throughput(loc("d.db"), 100_000)),
            (
                "SQLite alone, the writer's rows (floor)",
                sqlite_alone(str(Path(tmp) / "d.db"), str(Path(tmp) / "e.db")),
            ),
        ):
            print(f"{name:<46} {wall:>9,.0f} {per_cpu:>11,.0f}")
        print("(p50 cpu: CPU time of the agent's thread per step; per cpu-s: steps per second")
        print(" of process CPU time, i.e. what one idle core sustains when the machine is busy)")


if __name__ == "__main__":
    main()
