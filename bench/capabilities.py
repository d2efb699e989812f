"""Capability-grant benchmark: prints figures, asserts nothing.

    uv run python bench/capabilities.py

One task whose task.start carries a grant (read_inbox; send_email with `to` from the user's
request; pay_invoice with bounds and allowed values), N recorded steps of a mail-assistant mix
(N = 10, 1,000), then `PolicyEngine.evaluate` of three new steps: a granted reply (value
source looked up), a granted payment (bounds, values) and a tool outside the grant. Printed
against the same engine with no policy, so the figure is what the `capabilities` rule adds.
The grant is read through a history index built once per task, so depth should not matter.
"""

from __future__ import annotations

import gc
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from charter import Behavior, EvalContext, Grant, GrantLayer, PolicyEngine
from charter._policy.capabilities import GRANT_META, layers_meta

DEPTHS = (10, 1_000)
ITERATIONS = 3_000
AGENT = "bench-agent"
T0 = datetime(2025, 3, 3, 8, 0, tzinfo=UTC)
GRANT = {
    "tools": {
        "read_inbox": {},
        "send_email": {"args": {"to": {"source": "user"}, "subject": {"pattern": ".{0,200}"}}},
        "pay_invoice": {
            "args": {"amount": {"min": 0, "max": 500}, "currency": {"values": ["EUR"]}}
        },
    }
}
CAPS = [{"name": "caps", "rule_type": "capabilities", "severity": "critical"}]


def _task(policies: list[dict[str, Any]], depth: int) -> tuple[PolicyEngine, EvalContext]:
    engine = PolicyEngine(policies)
    ctx = EvalContext(agent_id=AGENT, task_id="t")
    meta = {GRANT_META: layers_meta([GrantLayer("integration", Grant.from_document(GRANT))])}
    engine.record(
        Behavior(
            agent_id=AGENT, task_id="t", kind="task.start", step_name="t", timestamp=T0, meta=meta
        )
    )
    for i in range(depth):
        at = T0 + timedelta(seconds=i + 1)
        if i % 10 == 0:
            b = Behavior(
                agent_id=AGENT,
                task_id="t",
                kind="step.message",
                verb="GET",
                step_name="user_message",
                timestamp=at,
                input={"content": f"reply to person{i}@example.com"},
                properties={"message": {"role": "user"}},
            )
        else:
            b = Behavior(
                agent_id=AGENT,
                task_id="t",
                kind="step.resource",
                verb="GET",
                step_name="read_inbox",
                timestamp=at,
                properties={"data": {"trust": "untrusted"}},
            )
        out = {"emails": [f"mail {i} from someone{i}@example.org, see https://h{i}.example/x"]}
        engine.record(b.completed(out))
    return engine, ctx


def _steps(depth: int) -> dict[str, Behavior]:
    at = T0 + timedelta(seconds=depth + 10)

    def b(name: str, kind: str, verb: str, **input: Any) -> Behavior:
        return Behavior(
            agent_id=AGENT,
            task_id="t",
            kind=kind,
            verb=verb,
            step_name=name,
            timestamp=at,
            input=input,
        )

    return {
        "granted reply": b(
            "send_email", "step.message", "POST", to="person0@example.com", subject="Re: hi"
        ),
        "granted payment": b("pay_invoice", "step.resource", "POST", amount=120, currency="EUR"),
        "tool outside": b("transfer_money", "step.resource", "POST", amount=900),
    }


def _p50_us(engine: PolicyEngine, ctx: EvalContext, step: Behavior) -> float:
    for _ in range(200):
        engine.evaluate(step, ctx)
    samples = []
    gc.disable()
    try:
        for _ in range(ITERATIONS):
            t = time.perf_counter_ns()
            engine.evaluate(step, ctx)
            samples.append(time.perf_counter_ns() - t)
    finally:
        gc.enable()
    return statistics.median(samples) / 1000


def main() -> None:
    print("capabilities rule: PolicyEngine.evaluate p50 (us), rule alone vs no policy")
    print("(2 shared cores, loaded machine: compare rows, not absolute figures)")
    print(f"{'depth':>6}  {'step':<16} {'no policy':>10} {'capabilities':>13} {'added':>8}")
    for depth in DEPTHS:
        bare, bare_ctx = _task([], depth)
        caps, caps_ctx = _task(CAPS, depth)
        for label, step in _steps(depth).items():
            base = _p50_us(bare, bare_ctx, step)
            with_rule = _p50_us(caps, caps_ctx, step)
            print(
                f"{depth:>6}  {label:<16} {base:>10.1f} {with_rule:>13.1f} {with_rule - base:>8.1f}"
            )


if __name__ == "__main__":
    main()
