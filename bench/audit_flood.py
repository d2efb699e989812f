"""A flood of steps on a small audit queue: prints figures, asserts nothing.

    uv run python bench/audit_flood.py

One agent thread runs 20,000 governed steps (one blocked every 25th) as fast as it can
through `Governor.begin_step` / `complete`, with buffered durability into SQLite and
queue_size=50, the setting under which a full queue matters. Printed: steps/s as the agent
sees them, p50/p99/max latency of one step, records stored, records dropped (each a declared
gap), blocked steps and boundaries kept, and whether the trail verifies.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from charter import BlockedError, Governor

STEPS = 20_000
NO_RM = {
    "name": "no-rm",
    "rule_type": "field_matches",
    "severity": "critical",
    "params": {"field": "input.command", "pattern": "rm -rf"},
}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        location = f"sqlite:///{Path(tmp) / 'audit.db'}"
        gov = Governor(policies=[NO_RM], audit_location=location, queue_size=50)
        latencies: list[float] = []
        blocked = 0
        started = time.perf_counter()
        with gov.task("flood"):
            for i in range(STEPS):
                t0 = time.perf_counter()
                if i % 25 == 24:
                    try:
                        gov.begin_step("step.exec", name="bash", input={"command": "rm -rf /"})
                    except BlockedError:
                        blocked += 1
                else:
                    step = gov.begin_step("step.exec", name="bash", input={"command": f"ls {i}"})
                    step.complete({"ok": True})
                latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - started
        gov.flush(60)
        store = gov.runner.store
        assert store is not None
        records = store.read_task("flood", gov.runner.agent_id)
        report = store.verify()
        kept_blocked = sum(
            1 for r in records if (r.get("meta") or {}).get("charter.outcome") == "blocked"
        )
        kinds = {r["kind"] for r in records}
        queue = gov.status()["queue"]
        gov.close(10)
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1e6

    print(f"steps: {STEPS} ({blocked} blocked) with queue_size=50, buffered SQLite")
    print(f"agent throughput: {STEPS / elapsed:,.0f} steps/s")
    print(f"step latency: p50 {pct(0.5):.0f} us, p99 {pct(0.99):.0f} us, max {pct(1.0):.0f} us")
    print(f"stored {len(records)} records, dropped {queue['dropped']} (evicted {queue['evicted']})")
    print(f"declared gaps: {len(report.gaps)}, covering {report.dropped} records")
    print(
        f"blocked steps kept: {kept_blocked} of {blocked}; boundaries kept: "
        f"{'task.start' in kinds and 'task.end' in kinds}"
    )
    print(f"verify: {report}")


if __name__ == "__main__":
    main()
