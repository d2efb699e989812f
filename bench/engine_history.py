"""History-depth benchmark: prints figures, asserts nothing.

    uv run python bench/engine_history.py

Builds an engine with a policy set that uses every history rule (and the stateless guards
that ship with them), records N steps of a realistic mix into one task (N = 10, 100, 1,000,
10,000), then measures `PolicyEngine.evaluate` of a new step at each depth. History rules
read indexes, so the cost should not grow with N: the target is depth 1,000 / depth 10 <= 1.5.
`history_depth_table()` is what `bench/engine.py` calls.
"""

from __future__ import annotations

import gc
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from charter import Behavior, EvalContext, PolicyEngine, canonical_digest

DEPTHS = (10, 100, 1_000, 10_000)
ITERATIONS = 3_000
AGENT = "bench-agent"
T0 = datetime(2025, 3, 3, 8, 0, tzinfo=UTC)

POLICIES: list[dict[str, Any]] = [
    {
        "name": "model-calls",
        "rule_type": "max_steps",
        "severity": "high",
        "match": {"kinds": ["step.model"]},
        "params": {"max": 1_000_000, "select": {"kinds": ["step.model"]}},
    },
    {
        "name": "deletes",
        "rule_type": "max_steps",
        "severity": "high",
        "match": {"verbs": ["DELETE"]},
        "params": {"max": 1_000_000, "select": {"verbs": ["DELETE"]}},
    },
    {
        "name": "tool-rate",
        "rule_type": "rate_limit",
        "severity": "high",
        "params": {"max": 1_000_000, "window_seconds": 60},
    },
    {
        "name": "tokens",
        "rule_type": "budget",
        "severity": "high",
        "params": {
            "field": "properties.model.usage.total_tokens",
            "limit": 1e12,
            "select": {"kinds": ["step.model"]},
        },
    },
    {
        "name": "spend",
        "rule_type": "budget",
        "severity": "critical",
        "match": {"step_names": ["send_payment"]},
        "params": {"field": "input.amount", "limit": 1e12, "select": {"step_names": ["send_*"]}},
    },
    {
        "name": "payment-approval",
        "rule_type": "requires_gate",
        "severity": "critical",
        "match": {"step_names": ["send_payment"]},
        "params": {"gate_kind": "human", "within_steps": 50},
    },
    {
        "name": "no-exfil-after-untrusted",
        "rule_type": "forbid_after",
        "severity": "critical",
        "match": {"step_names": ["upload_*"]},
        "params": {
            "after": {"where": [{"field": "properties.data.trust", "equals": "untrusted"}]},
            "within_steps": 5,
        },
    },
    {
        "name": "no-loops",
        "rule_type": "no_repeat",
        "severity": "high",
        "params": {"max": 3, "include_failed": True},
    },
    {
        "name": "office-hours",
        "rule_type": "time_window",
        "severity": "medium",
        "params": {"timezone": "Europe/Amsterdam", "hours": ["00:00-24:00"]},
    },
    {
        "name": "in-project",
        "rule_type": "path_within_root",
        "severity": "critical",
        "params": {},
    },
    {
        "name": "no-secrets",
        "rule_type": "no_secrets",
        "severity": "critical",
        "params": {},
    },
    {
        "name": "recipient-provenance",
        "rule_type": "value_provenance",
        "severity": "critical",
        "match": {"step_names": ["send_*"]},
        "params": {
            "fields": ["input.to", "input.iban", {"field": "input.url", "normalise": "host"}]
        },
    },
]


def _step(i: int, task: str) -> Behavior:
    """The i-th recorded step of the mix: model calls, tool calls, reads of untrusted pages,
    user messages, approvals and the payments they approve, some failures and blocks."""
    ts = T0 + timedelta(seconds=2 * i)
    base: dict[str, Any] = {"agent_id": AGENT, "task_id": task, "timestamp": ts}
    r = i % 10
    if i % 100 == 1:
        return Behavior(
            kind="step.message",
            verb="GET",
            step_name="user_message",
            input={"text": f"Please pay invoice {i} to bob{i}@example.com, NL91 ABNA 0417 1643 00"},
            properties={"message": {"role": "user"}},
            **base,
        ).completed({})
    if r in (0, 5):
        return Behavior(
            kind="step.model",
            step_name="llm",
            input={"messages": [{"role": "user", "content": f"turn {i}"}]},
            properties={"model": {"usage": {"total_tokens": 900 + i % 7}}},
            **base,
        ).completed({"text": "ok"})
    if r == 1:
        return Behavior(
            kind="step.exec",
            step_name="Bash",
            input={"command": f"ls -la src/{i % 13}"},
            **base,
        ).completed({"stdout": "a b c"}, outcome="failed" if i % 30 == 1 else "ok")
    if r == 2:
        return Behavior(
            kind="step.resource",
            verb="GET",
            step_name="fetch_page",
            input={"url": f"https://news.example.net/{i}"},
            properties={"data": {"trust": "untrusted"}},
            **base,
        ).completed({"body": f"page {i} mentions eve{i}@evil.example"})
    if r == 3:
        return Behavior(
            kind="step.resource",
            verb="GET",
            step_name="Read",
            input={"file_path": f"src/module_{i % 17}.py"},
            properties={"data": {"trust": "trusted"}},
            **base,
        ).completed({"text": "def f(): return 1"})
    if r == 4:
        return Behavior(
            kind="step.resource",
            verb="DELETE",
            step_name="delete_tmp",
            input={"path": f"tmp/{i}"},
            **base,
        ).completed({}, outcome="blocked" if i % 20 == 4 else "ok")
    if r == 6:
        pay = {"to": "bob1@example.com", "iban": "NL91ABNA0417164300", "amount": 10 + i % 5}
        return Behavior(
            kind="step.gate",
            step_name="approve",
            properties={
                "gate": {
                    "kind": "human",
                    "step_name": "send_payment",
                    "digest": canonical_digest(pay),
                }
            },
            **base,
        ).completed({"decision": "pass" if i % 3 else "deny", "by": "alice"})
    if r == 7:
        return Behavior(
            kind="step.resource",
            verb="POST",
            step_name="send_payment",
            input={"to": "bob1@example.com", "iban": "NL91ABNA0417164300", "amount": 10 + i % 5},
            **base,
        ).completed({"status": "sent"})
    if r == 8:
        return Behavior(
            kind="step.resource",
            verb="PATCH",
            step_name="Write",
            input={"file_path": f"src/module_{i % 17}.py", "content": "x = 1\n"},
            **base,
        ).completed({})
    return Behavior(
        kind="step.message",
        verb="POST",
        step_name="reply",
        input={"text": f"done with {i}"},
        **base,
    ).completed({})


def _candidates(depth: int, task: str, n: int = 200) -> list[Behavior]:
    """Distinct (not cached) intents judged at `depth`: a payment, the step that has the most
    policies to run."""
    ts = T0 + timedelta(seconds=2 * depth + 1)
    return [
        Behavior(
            agent_id=AGENT,
            task_id=task,
            kind="step.resource",
            verb="POST",
            step_name="send_payment",
            action_id=f"cand-{k}",
            timestamp=ts,
            input={
                "to": "bob1@example.com",
                "iban": "NL91ABNA0417164300",
                "amount": 10 + k % 5,
                "url": "https://docs.example.org/pay",
                "path": "src/out.txt",
                "note": f"invoice {k}",
            },
        )
        for k in range(n)
    ]


def _engine_at(depth: int) -> tuple[PolicyEngine, EvalContext, list[Behavior]]:
    task = f"task-{depth}"
    engine = PolicyEngine(POLICIES)
    engine.record(
        Behavior(agent_id=AGENT, task_id=task, kind="task.start", step_name="start", timestamp=T0)
    )
    for i in range(1, depth):
        engine.record(_step(i, task))
    ctx = EvalContext(
        agent_id=AGENT,
        task_id=task,
        project_root="/srv/project",
        trusted_values=("docs.example.org",),
    )
    return engine, ctx, _candidates(depth, task)


def _measure(depth: int, iterations: int) -> tuple[float, float]:
    engine, ctx, cands = _engine_at(depth)
    evaluate = engine.evaluate
    for b in cands:  # builds the indexes (the first evaluation replays the history once)
        evaluate(b, ctx)
    samples: list[int] = []
    clock = time.perf_counter_ns
    n = len(cands)
    gc.collect()
    gc.disable()
    try:
        for k in range(iterations):
            b = cands[k % n]
            t = clock()
            evaluate(b, ctx)
            samples.append(clock() - t)
    finally:
        gc.enable()
    samples.sort()
    p50 = statistics.median(samples) / 1_000
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))] / 1_000
    return p50, p99


def history_depth_table(
    depths: tuple[int, ...] = DEPTHS, iterations: int = ITERATIONS
) -> list[tuple[int, float, float]]:
    """(depth, p50 µs, p99 µs) of evaluating a new step after `depth` recorded steps."""
    return [(depth, *_measure(depth, iterations)) for depth in depths]


def main() -> None:
    print(f"{len(POLICIES)} policies, {ITERATIONS} evaluations per depth")
    print(f"{'history depth':>14} {'p50 us':>9} {'p99 us':>9}")
    table = history_depth_table()
    for depth, p50, p99 in table:
        print(f"{depth:>14,} {p50:>9.2f} {p99:>9.2f}")
    by_depth = {d: p50 for d, p50, _ in table}
    print(f"depth 1,000 / depth 10 = {by_depth[1_000] / by_depth[10]:.2f}x (target <= 1.5x)")
    print(f"depth 10,000 / depth 10 = {by_depth[10_000] / by_depth[10]:.2f}x")


if __name__ == "__main__":
    main()
