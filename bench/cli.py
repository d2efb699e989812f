"""CLI benchmark: prints figures, asserts nothing.

    uv run python bench/cli.py

1. `charter replay`'s engine loop (`replay_chain`) over a store of 20 tasks x 250 tool calls
   recorded under the tool-agent baseline, re-judged under the same baseline: records/s.
2. `charter verify` on the same store (`AuditStore.verify`): records/s.
3. The scripted demo (`run_demo`), in process, output discarded: seconds per run.
Process start-up (about 0.3-1 s for `import charter` plus click and rich) comes on top of
every command and is not measured here.
"""

from __future__ import annotations

import io
import tempfile
import time
from pathlib import Path

import charter
import charter_baseline
from charter._cli.demo import run_demo
from charter._cli.replay import ReplayOptions, replay_chain
from charter_templates import resolve
from rich.console import Console

TASKS = 20
CALLS = 250


def build_store(location: str) -> None:
    gov = charter.Governor(
        policies=charter_baseline.load_baseline_policies("tool-agent"),
        agent_id="bench",
        audit_location=location,
        approver=lambda request: charter.Approval(True, "bench", "approved"),
    )
    with gov:
        for _ in range(TASKS):
            with gov.task(name="bench"):
                with gov.step(
                    "step.message",
                    "GET",
                    name="user_prompt",
                    input={"text": "write to bob@example.com"},
                    properties={"message": {"role": "user"}},
                ) as step:
                    step.output = {"text": "ok"}
                for i in range(CALLS):
                    if i % 3:
                        name, args = "search_files", {"query": f"q{i}"}
                    else:
                        name, args = "send_email", {"to": "bob@example.com", "body": f"b{i}"}
                    kind, verb, properties, _ = resolve("generic", name, args)
                    with gov.step(kind, verb, name=name, input=args, properties=properties) as s:
                        s.output = {"ok": True}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        location = f"sqlite:///{Path(tmp) / 'audit.db'}"
        build_store(location)
        store = charter.open_store(location)
        try:
            chains = [store.read_task(t.task_id, t.agent_id) for t in store.list_tasks()]
            options = ReplayOptions(
                policies=charter_baseline.load_baseline_policies("tool-agent"), label="bench"
            )
            records = sum(len(c) for c in chains)
            start = time.perf_counter()
            changed = sum(
                sum(1 for c in replay_chain(chain, options)[0] if c.changed) for chain in chains
            )
            took = time.perf_counter() - start
            print(
                f"replay: {records} records in {took:.2f} s = {records / took:,.0f} records/s "
                f"({changed} changed, expected 0)"
            )
            start = time.perf_counter()
            report = store.verify()
            took = time.perf_counter() - start
            print(
                f"verify: {report.steps_checked} records in {took:.2f} s = "
                f"{report.steps_checked / took:,.0f} records/s (ok: {report.ok})"
            )
        finally:
            store.close()
        start = time.perf_counter()
        code = run_demo(f"sqlite:///{Path(tmp) / 'demo.db'}", True, Console(file=io.StringIO()))
        print(f"demo: {time.perf_counter() - start:.2f} s in process (exit {code})")


if __name__ == "__main__":
    main()
