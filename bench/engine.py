"""Engine benchmark: prints figures, asserts nothing.

    uv run python bench/engine.py

Measures `PolicyEngine.evaluate` with 10 policies (an allowed and a blocked step), building a
`Behavior`, and the wall time of `python -c "import charter"` in a fresh interpreter.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from charter import Behavior, EvalContext, PolicyEngine

POLICIES: list[dict[str, Any]] = [
    {
        "name": "no-rm",
        "rule_type": "field_matches",
        "severity": "critical",
        "match": {"kinds": ["step.exec"]},
        "params": {"field": "input.command", "pattern": r"\brm\s+-rf\s+/"},
    },
    {
        "name": "no-mkfs",
        "rule_type": "field_matches",
        "severity": "critical",
        "match": {"kinds": ["step.exec"]},
        "params": {"field": "input.command", "pattern": r"\bmkfs"},
    },
    {
        "name": "no-curl-sh",
        "rule_type": "field_matches",
        "severity": "critical",
        "match": {"kinds": ["step.exec"]},
        "params": {"field": "input.command", "pattern": r"curl[^|]*\|\s*(ba)?sh"},
    },
    {
        "name": "tools",
        "rule_type": "allow_only",
        "severity": "high",
        "params": {"tools": ["Bash", "Read", "Write", "get_*"]},
    },
    {
        "name": "deletes-ask",
        "rule_type": "deny",
        "severity": "high",
        "action": "ask",
        "match": {"kinds": ["step.resource"], "verbs": ["DELETE"]},
    },
    {
        "name": "hosts",
        "rule_type": "field_in",
        "severity": "high",
        "match": {"kinds": ["step.resource"], "verbs": ["GET"]},
        "params": {"field": "properties.target.host", "values": ["api.example.com"]},
    },
    {
        "name": "amount",
        "rule_type": "field_compare",
        "severity": "critical",
        "match": {"step_names": ["pay_*"]},
        "params": {"field": "input.amount", "op": "<=", "value": 1000},
    },
    {
        "name": "tables",
        "rule_type": "field_not_in",
        "severity": "medium",
        "params": {"field": "input.table", "values": ["users", "payments"]},
    },
    {
        "name": "safe-or-read",
        "rule_type": "any_of",
        "severity": "low",
        "params": {
            "conditions": [
                {"rule_type": "field_in", "params": {"field": "verb", "values": ["GET"]}},
                {
                    "rule_type": "field_matches",
                    "params": {"field": "step_name", "pattern": "^(Bash|Read)$", "mode": "require"},
                },
            ]
        },
    },
    {
        "name": "no-sudo",
        "rule_type": "field_matches",
        "severity": "high",
        "match": {"kinds": ["step.exec"]},
        "params": {"field": "input.command", "pattern": r"^sudo\b"},
    },
]


def percentiles(fn: Callable[[], object], n: int = 20_000) -> tuple[float, float]:
    for _ in range(min(n // 10, 2000)):
        fn()
    samples = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    samples.sort()
    return samples[len(samples) // 2] / 1000, samples[int(len(samples) * 0.99)] / 1000


def import_time(runs: int = 15) -> tuple[float, float]:
    def once(code: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return (time.perf_counter() - t0) * 1000

    base = statistics.median(once("pass") for _ in range(runs))
    full = statistics.median(once("import charter") for _ in range(runs))
    return full, base


def main() -> None:
    engine = PolicyEngine(POLICIES)
    ctx = EvalContext(agent_id="bench", task_id="t1")
    allowed = Behavior(
        agent_id="bench",
        task_id="t1",
        kind="step.exec",
        step_name="Bash",
        input={"command": "ls -la src"},
    )
    blocked = Behavior(
        agent_id="bench",
        task_id="t1",
        kind="step.exec",
        step_name="Bash",
        input={"command": "sudo rm -rf / --no-preserve-root"},
    )
    assert engine.evaluate(allowed, ctx).decision == "allow"
    assert engine.evaluate(blocked, ctx).decision == "block"

    rows = [
        (
            "evaluate, 10 policies, allowed step",
            *percentiles(lambda: engine.evaluate(allowed, ctx)),
        ),
        (
            "evaluate, 10 policies, blocked step",
            *percentiles(lambda: engine.evaluate(blocked, ctx)),
        ),
        (
            "build a Behavior (step.exec, small input)",
            *percentiles(
                lambda: Behavior(
                    agent_id="bench",
                    task_id="t1",
                    kind="step.exec",
                    step_name="Bash",
                    input={"command": "ls -la src", "timeout": 30},
                )
            ),
        ),
    ]
    print(f"{'measure':<46} {'p50 us':>9} {'p99 us':>9}")
    for name, p50, p99 in rows:
        print(f"{name:<46} {p50:>9.2f} {p99:>9.2f}")
    full, base = import_time()
    label = 'python -c "import charter" (wall, median)'
    print(
        f"{label:<46} {full:>8.1f}ms"
        f"   (python -c pass: {base:.1f} ms; charter adds {full - base:.1f} ms)"
    )
    try:
        from engine_history import history_depth_table  # type: ignore[import-not-found]
    except ImportError:
        return
    print()
    print(f"{'history depth':<14} {'p50 us':>9} {'p99 us':>9}")
    table = history_depth_table()
    for depth, p50, p99 in table:
        print(f"{depth:<14} {p50:>9.2f} {p99:>9.2f}")
    by_depth = {d: p50 for d, p50, _ in table}
    if 10 in by_depth and 1000 in by_depth:
        print(f"depth 1,000 / depth 10 = {by_depth[1000] / by_depth[10]:.2f}x")


if __name__ == "__main__":
    main()
