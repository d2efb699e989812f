"""Aggregate append throughput of 8 writer processes into one PostgreSQL store: prints
figures, asserts nothing.

    uv run python bench/pg_append.py

Starts a throwaway PostgreSQL server in a temporary folder (fsync on, as a deployment would
run), then 8 processes that each open the store and, once all are ready, append 2,500 records
of about 600 bytes in batches of 100 (the buffered writer's batches, which take up to 500): 6
processes to chains of their own, 2 to one shared chain (so its head row lock is contended).
The 6 writers' records carry the seq their writer assigned, as a runner's do (one runner per
task), so a writer that knows its chain's head appends in one statement; the 2 on the shared
chain leave seq to the store and lock the head each time. Printed: records/s over the whole
run (first append to last commit, target >= 15,000), appends/s, and the verify result. Figures
depend heavily on the machine's load; on a 2-core machine the writers, their hashing and the
server share it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from charter.audit import verify
from charter.testing.postgresql import PostgresServer

WRITERS = 8
PER_WRITER = 2_500
BATCH = 100

CHILD = """
import sys, time
from pathlib import Path
from charter.audit import open_store

url, agent, task, count, batch, go = sys.argv[1:7]
count, batch = int(count), int(batch)
store = open_store(url)
store.head(agent, task)  # connected and ready
print("ready", flush=True)
while not Path(go).exists():
    time.sleep(0.001)
started = time.time()
done = 0
while done < count:
    size = min(batch, count - done)
    store.append([
        {
            "agent_id": agent, "task_id": task, "action_id": f"{agent}-{done + i}",
            "timestamp": "2026-12-01T21:00:00.000000Z", "kind": "step.exec",
            "verb": "tool.call", "step_name": "search",
            "input": {"query": f"q{done + i}", "text": "x" * 400}, "output": {"ok": True},
            "properties": {"cost": 0.001}, "meta": {"charter.eval": {"decision": "allow"}},
            **({} if task == "shared" else {"seq": 1 + done + i}),
        }
        for i in range(size)
    ])
    done += size
print(started, time.time(), flush=True)
store.close()
"""


def main() -> None:
    server = PostgresServer(fsync=True)
    server.start()
    try:
        url = server.create_database("bench")
        with tempfile.TemporaryDirectory() as tmp:
            go = Path(tmp) / "go"
            children = []
            sizes = (str(PER_WRITER), str(BATCH))
            for i in range(WRITERS):
                agent, task = ("team", "shared") if i < 2 else (f"w{i}", f"own-{i}")
                children.append(
                    subprocess.Popen(
                        [sys.executable, "-c", CHILD, url, agent, task, *sizes, str(go)],
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                )
            for child in children:
                assert child.stdout is not None
                assert child.stdout.readline().strip() == "ready"
            go.touch()
            spans = []
            for child in children:
                out, _ = child.communicate(timeout=600)
                if child.returncode != 0:
                    raise SystemExit(f"a writer failed (exit {child.returncode})")
                first, last = out.split()
                spans.append((float(first), float(last)))
        elapsed = max(end for _, end in spans) - min(start for start, _ in spans)
        total = WRITERS * PER_WRITER
        report = verify(url)
        print(
            f"{WRITERS} writer processes, {total:,} records in batches of {BATCH} "
            f"(PostgreSQL, loopback, fsync on, {os.cpu_count()} CPUs)"
        )
        print(f"aggregate: {total / elapsed:,.0f} records/s (target >= 15,000)")
        print(f"appends: {total / BATCH / elapsed:,.0f} commits/s, wall {elapsed:.2f} s")
        print(f"verify: {report}")
    finally:
        server.remove()


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"bench run: {time.perf_counter() - started:.1f} s")
