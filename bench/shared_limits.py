"""Shared-limit benchmark: prints figures, asserts nothing.

    uv run python bench/shared_limits.py

1. One reservation (`counters.reserve` of one claim: the atomic read and add a step with an
   agent-wide limit makes before it is judged) on an SQLite store file in a temporary
   directory: p50/p99. Then a reservation with its settlement (reserve, then commit), the
   whole cost a step that ran adds.
2. The same reservation while 8 processes reserve on the same file at once: p50/p99 over
   every reservation of every process (the write lock is shared, so this is contention).
3. One governed step through `Governor.step` (buffered SQLite store) with an agent-wide
   `max_steps` and the same step with the limit in the task: p50/p99, the difference being
   what counting outside the task costs a step.
4. Items 1 and 2 against a PostgreSQL store on loopback (target: reserve p99 <= 2 ms): a
   throwaway server in a temporary folder with fsync on, as a deployment runs, or the
   postgresql:// store CHARTER_BENCH_POSTGRESQL names. Each reservation there is one
   transaction that locks the counter's row, so the 8-process case measures that lock.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from charter import Governor
from charter._audit.counters import Claim, CounterStore, SharesCounters, Unit
from charter._audit.location import open_store

CHILD = """
import sys, time, uuid
from charter._audit.counters import Claim
from charter._audit.location import open_store
store = open_store(sys.argv[1])
counters = store.counters()
start = float(sys.argv[3])
while time.time() < start:
    time.sleep(0.001)
out = []
for _ in range(int(sys.argv[2])):
    now = time.time_ns() // 1000
    t0 = time.perf_counter_ns()
    counters.reserve([Claim(uuid.uuid4().hex, "bench", 1)], now_us=now, hold_until_us=now + 10**9)
    out.append(time.perf_counter_ns() - t0)
print(" ".join(map(str, out)))
"""


def _pct(samples: list[int]) -> str:
    s = sorted(samples)
    p50, p99 = s[len(s) // 2] / 1e6, s[int(len(s) * 0.99)] / 1e6
    return f"p50 {p50:.3f} ms, p99 {p99:.3f} ms ({len(s)} samples)"


def reservations(counters: CounterStore, n: int, settle: bool) -> list[int]:
    out = []
    for _ in range(n):
        now = time.time_ns() // 1000
        t0 = time.perf_counter_ns()
        (r,) = counters.reserve(
            [Claim(uuid.uuid4().hex, "bench", 1)], now_us=now, hold_until_us=now + 10**9
        )
        if settle:
            counters.commit([Unit(r.claim, r.at_us, 1)])
        out.append(time.perf_counter_ns() - t0)
    return out


def contended(location: str, processes: int, each: int) -> list[int]:
    start = time.time() + 3  # every child imported and opened before the first reservation
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, location, str(each), str(start)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    samples: list[int] = []
    for child in children:
        out, _ = child.communicate(timeout=300)
        samples.extend(int(x) for x in out.split())
    return samples


def governed(location: str, scope: str, steps: int) -> list[int]:
    policy: dict[str, Any] = {
        "name": "sends",
        "rule_type": "max_steps",
        "severity": "critical",
        "params": {"max": 10**9, "scope": scope, "select": {"kinds": ["step.message"]}},
    }
    gov = Governor(policies=[policy], audit_location=location, agent_id=f"bench-{scope}")
    out = []
    with gov.task(name="bench"):
        for i in range(steps):
            t0 = time.perf_counter_ns()
            with gov.step("step.message", "POST", name="send", input={"to": f"u{i}@example.com"}):
                pass
            out.append(time.perf_counter_ns() - t0)
    gov.close()
    return out


def main() -> None:
    print(f"machine load (1 min): {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPU(s)")
    with tempfile.TemporaryDirectory() as tmp:
        location = f"sqlite:///{Path(tmp) / 'shared.db'}"
        store = open_store(location)
        assert isinstance(store, SharesCounters)
        counters = store.counters()
        reservations(counters, 50, settle=False)  # warm up: tables, page cache
        print("SQLite reserve:", _pct(reservations(counters, 2000, settle=False)))
        print("SQLite reserve + commit:", _pct(reservations(counters, 1000, settle=True)))
        store.close()
        print("SQLite reserve, 8 processes at once:", _pct(contended(location, 8, 300)))
        governed(location, "task", 100)
        for scope in ("task", "agent"):
            figures = _pct(governed(location, scope, 2000))
            print(f"governed step, max_steps scope {scope} (buffered SQLite): {figures}")
    url = os.environ.get("CHARTER_BENCH_POSTGRESQL")
    server = None
    if not url:
        from charter.testing.postgresql import PostgresServer

        server = PostgresServer(fsync=True)
        server.start()
        url = server.create_database("bench")
    try:
        pg = open_store(url)
        assert isinstance(pg, SharesCounters)
        counters = pg.counters()
        reservations(counters, 50, settle=False)
        print("PostgreSQL reserve:", _pct(reservations(counters, 2000, settle=False)))
        print("PostgreSQL reserve + commit:", _pct(reservations(counters, 1000, settle=True)))
        pg.close()
        print("PostgreSQL reserve, 8 processes at once:", _pct(contended(url, 8, 300)))
        print(f"machine load (1 min) after: {os.getloadavg()[0]:.2f}")
    finally:
        if server is not None:
            server.remove()


if __name__ == "__main__":
    main()
