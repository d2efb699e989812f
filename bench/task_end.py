"""How long a task's end waits for its records, over many tasks of one long-running process:
prints figures, asserts nothing.

    uv run python bench/task_end.py [--tasks 400] [--think 0,20] [--runs 2]

Each task records 42 steps of about 1.3 KB (a CrewAI kickoff of 20 tool turns writes 44
records of that size) into a buffered SQLite trail, then ends; `end_task` waits until its
records are committed. Every few dozen tasks the store's write-ahead log has to be copied into
the database file (a checkpoint, about 10 ms here). SQLite does that inside the commit that
crosses its threshold, which the ending task waits for; Charter's writer does it once nothing
is queued instead. Both ways run side by side, with `--think` milliseconds between tasks (an
agent waiting for its model): the median, the 99th percentile and the longest wait, and how
many waits took over 5 ms.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import charter
from charter._runtime import writer

_STEPS = 42
_PAD = "x" * 1200


def waits(tasks: int, think: float, in_commit: bool) -> list[float]:
    """Seconds each task's end waited, after the first 20 tasks (the store warming up)."""
    deferring = writer.AuditWriter._defer_wal_checkpoints
    if in_commit:  # the writer leaves the checkpoints to SQLite's commits, as before
        writer.AuditWriter._defer_wal_checkpoints = lambda self, store: None  # type: ignore[method-assign]
    try:
        with tempfile.TemporaryDirectory() as folder:
            gov = charter.Governor(policies=[], audit_location=f"sqlite:///{folder}/audit.db")
            out = []
            for n in range(tasks):
                time.sleep(think)
                task = gov.start_task(f"t{n}")
                for k in range(_STEPS):
                    with gov.step(
                        "step.exec", name="ls", input={"k": k, "pad": _PAD}, task_id=task
                    ) as step:
                        step.output = {"ok": True}
                start = time.perf_counter()
                gov.end_task(task)
                out.append(time.perf_counter() - start)
            gov.close()
    finally:
        writer.AuditWriter._defer_wal_checkpoints = deferring  # type: ignore[method-assign]
    return out[20:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--think", default="0,20", help="ms between tasks, comma-separated")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    print(f"{args.tasks} tasks of {_STEPS + 2} records each, buffered SQLite; wait at task end:")
    print("  think   checkpoint         median      p99      max   waits over 5 ms")
    for think in (float(t) for t in args.think.split(",")):
        for _ in range(args.runs):
            for in_commit in (True, False):
                got = sorted(waits(args.tasks, think / 1000, in_commit))
                where = "in the commit" if in_commit else "idle writer"
                p99 = got[min(len(got) - 1, int(len(got) * 0.99))]
                slow = sum(w > 0.005 for w in got)
                print(
                    f"  {think:4.0f} ms {where:<15} {statistics.median(got) * 1e3:7.2f} ms"
                    f" {p99 * 1e3:7.2f} ms {got[-1] * 1e3:7.2f} ms   {slow}"
                )


if __name__ == "__main__":
    main()
