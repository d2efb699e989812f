"""Provenance benchmark: prints figures, asserts nothing.

    uv run python bench/provenance.py

1. Evaluate cost of a send judged by the trust-model policies (levels per field, links and
   addresses checked inside the body) after N recorded steps of a mixed task (user messages,
   inboxes with per-field trust, channel reads, web pages, bank records, model calls, sends),
   N = 10, 1,000, 10,000. The provenance rule reads an index, so the cost should stay flat.
2. The cost the provenance index adds to recording one output, by kind of output: the same
   steps recorded into an engine whose index is built and into one without it (no provenance
   policy), median difference per record.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from charter import Behavior, EvalContext, PolicyEngine

AGENT = "bench-agent"
T0 = datetime(2025, 3, 3, 8, 0, tzinfo=UTC)
DEPTHS = (10, 1_000, 10_000)
ITERATIONS = 3_000
RECORDS = 300

PROVENANCE: list[dict[str, Any]] = [
    {
        "name": "replies",
        "rule_type": "value_provenance",
        "severity": "high",
        "action": "ask",
        "match": {"kinds": ["step.message"], "verbs": ["POST"]},
        "params": {
            "fields": [
                "input.to",
                {"field": "input.cc", "trust": "user"},
                {"field": "input.body", "extract": ["hosts", "emails", "ibans", "phones"]},
            ]
        },
    },
    {
        "name": "payments",
        "rule_type": "value_provenance",
        "severity": "critical",
        "match": {"step_names": ["pay_*"]},
        "params": {"fields": ["input.iban", "input.amount"]},
    },
    {
        "name": "web-posts",
        "rule_type": "value_provenance",
        "severity": "critical",
        "match": {"step_names": ["http_post"]},
        "params": {"fields": [{"field": "input.url", "normalise": "host", "trust": "operator"}]},
    },
]
OTHER: list[dict[str, Any]] = [
    {
        "name": "loops",
        "rule_type": "no_repeat",
        "severity": "high",
        "params": {"max": 3},
    },
]
MAIL_TRUST = {
    "trust": "untrusted",
    "field_trust": {"emails[*].sender": "internal", "emails[*].to": "internal"},
}
CHAT_TRUST = {"trust": "untrusted", "field_trust": {"messages[*].user": "internal"}}
WORDS = ["the", "quarterly", "report", "is", "attached", "please", "review", "it", "before"]


def _text(n: int, i: int) -> str:
    words = [WORDS[(i + k) % len(WORDS)] for k in range(n // 6)]
    words[len(words) // 2] = f"https://site{i}.example/page"
    return " ".join(words)[:n]


def _inbox(i: int) -> dict[str, Any]:
    return {
        "emails": [
            {
                "sender": f"colleague{i % 50}@corp.example",
                "to": ["me@corp.example"],
                "subject": f"Report {i}",
                "body": _text(400, i) + f" write to someone{i}@evil.example",
            }
            for _ in range(3)
        ]
    }


OUTPUTS: dict[str, tuple[str, str | None, dict[str, Any], Any]] = {
    # kind of output: (step kind, verb, properties, output builder)
    "inbox, 3 mails (JSON, per-field)": (
        "step.message",
        "GET",
        {"data": MAIL_TRUST},
        lambda i: {"content": json.dumps(_inbox(i))},
    ),
    "web page 4 KB (external)": (
        "step.resource",
        "GET",
        {"data": {"trust": "untrusted"}},
        lambda i: {"text": _text(4_000, i)},
    ),
    "document 4 KB (internal)": (
        "step.resource",
        "GET",
        {"data": {"trust": "internal"}},
        lambda i: {"text": _text(4_000, i)},
    ),
    "document 32 KB (internal)": (
        "step.resource",
        "GET",
        {"data": {"trust": "internal"}},
        lambda i: {"text": _text(32_000, i)},
    ),
    "model reply 500 chars": (
        "step.model",
        None,
        {},
        lambda i: {"text": _text(500, i)},
    ),
}


def _step(i: int, task: str) -> Behavior:
    ts = T0 + timedelta(seconds=2 * i)
    base: dict[str, Any] = {"agent_id": AGENT, "task_id": task, "timestamp": ts}
    r = i % 10
    if i % 100 == 1:
        return Behavior(
            kind="step.message",
            verb="GET",
            step_name="user_message",
            input={"text": f"Reply to colleague{i % 50}@corp.example about invoice {i}"},
            properties={"message": {"role": "user"}},
            **base,
        ).completed({})
    if r in (0, 5):
        return Behavior(kind="step.model", step_name="llm", **base).completed({"text": "ok"})
    if r == 2:
        return Behavior(
            kind="step.message",
            verb="GET",
            step_name="read_inbox",
            properties={"data": MAIL_TRUST},
            **base,
        ).completed(_inbox(i))
    if r == 3:
        return Behavior(
            kind="step.message",
            verb="GET",
            step_name="read_channel",
            properties={"data": CHAT_TRUST},
            **base,
        ).completed({"messages": [{"user": f"u{i}@corp.example", "text": _text(200, i)}]})
    if r == 4:
        return Behavior(
            kind="step.resource",
            verb="GET",
            step_name="fetch_page",
            properties={"data": {"trust": "untrusted"}},
            **base,
        ).completed({"body": _text(1_000, i)})
    if r == 6:
        return Behavior(
            kind="step.resource",
            verb="GET",
            step_name="list_payees",
            properties={"data": {"trust": "internal"}},
            **base,
        ).completed({"payees": [{"name": f"P{i}", "iban": "DE89 3704 0044 0532 0130 00"}]})
    return Behavior(
        kind="step.message",
        verb="POST",
        step_name="send_email",
        input={"to": f"colleague{i % 50}@corp.example", "body": "done"},
        properties={"data": {"trust": "internal"}},
        **base,
    ).completed({"status": "sent"})


def _engine(policies: list[dict[str, Any]], depth: int, task: str) -> PolicyEngine:
    engine = PolicyEngine(policies)
    engine.record(
        Behavior(agent_id=AGENT, task_id=task, kind="task.start", step_name="start", timestamp=T0)
    )
    for i in range(1, depth):
        engine.record(_step(i, task))
    return engine


def _candidates(depth: int, task: str, n: int = 200) -> list[Behavior]:
    ts = T0 + timedelta(seconds=2 * depth + 1)
    return [
        Behavior(
            agent_id=AGENT,
            task_id=task,
            kind="step.message",
            verb="POST",
            step_name="send_email",
            action_id=f"cand-{k}",
            timestamp=ts,
            input={
                "to": f"colleague{k % 50}@corp.example",
                "cc": "me@corp.example",
                "body": f"See https://site{k}.example/page and mail colleague{k % 50}@corp.example",
            },
        )
        for k in range(n)
    ]


def _median_us(samples: list[int]) -> tuple[float, float]:
    samples.sort()
    return (
        statistics.median(samples) / 1_000,
        samples[min(len(samples) - 1, int(len(samples) * 0.99))] / 1_000,
    )


def evaluate_table(depths: tuple[int, ...] = DEPTHS) -> list[tuple[int, float, float]]:
    """(depth, p50 µs, p99 µs) of judging a send after `depth` recorded steps."""
    out = []
    for depth in depths:
        task = f"task-{depth}"
        engine = _engine(PROVENANCE + OTHER, depth, task)
        ctx = EvalContext(agent_id=AGENT, task_id=task, trusted_values=("hooks.corp.example",))
        cands = _candidates(depth, task)
        for b in cands:
            engine.evaluate(b, ctx)  # builds the index (replays the history once)
        clock = time.perf_counter_ns
        samples: list[int] = []
        gc.collect()
        gc.disable()
        try:
            for k in range(ITERATIONS):
                b = cands[k % len(cands)]
                t = clock()
                engine.evaluate(b, ctx)
                samples.append(clock() - t)
        finally:
            gc.enable()
        out.append((depth, *_median_us(samples)))
    return out


def _record_cost(
    policies: list[dict[str, Any]], kind: str, verb: str | None, props: dict[str, Any], output: Any
) -> float:
    task = "rec"
    engine = _engine(policies, 10, task)
    ctx = EvalContext(agent_id=AGENT, task_id=task)
    engine.evaluate(_candidates(10, task, 1)[0], ctx)  # builds whatever index the rules use
    steps = [
        Behavior(
            agent_id=AGENT,
            task_id=task,
            kind=kind,
            verb=verb,
            step_name="tool",
            timestamp=T0 + timedelta(seconds=100 + k),
            properties=props,
        ).completed(output(k))
        for k in range(RECORDS)
    ]
    clock = time.perf_counter_ns
    samples: list[int] = []
    gc.collect()
    gc.disable()
    try:
        for b in steps:
            t = clock()
            engine.record(b)
            samples.append(clock() - t)
    finally:
        gc.enable()
    return _median_us(samples)[0]


def record_table() -> list[tuple[str, float, float]]:
    """(kind of output, µs per record without the index, µs added by the index)."""
    out = []
    for label, (kind, verb, props, output) in OUTPUTS.items():
        without = _record_cost(OTHER, kind, verb, props, output)
        with_index = _record_cost(PROVENANCE + OTHER, kind, verb, props, output)
        out.append((label, without, with_index - without))
    return out


def main() -> None:
    print(f"{len(PROVENANCE)} provenance policies + {len(OTHER)} other, {ITERATIONS} evaluations")
    print(f"{'history depth':>14} {'p50 us':>9} {'p99 us':>9}")
    table = evaluate_table()
    for depth, p50, p99 in table:
        print(f"{depth:>14,} {p50:>9.2f} {p99:>9.2f}")
    by = {d: p50 for d, p50, _ in table}
    print(f"depth 1,000 / depth 10 = {by[1_000] / by[10]:.2f}x (target <= 1.5x)")
    print(f"depth 10,000 / depth 10 = {by[10_000] / by[10]:.2f}x")
    print()
    print(f"{'recorded output':<36} {'record us':>10} {'index adds us':>14}")
    for label, without, added in record_table():
        print(f"{label:<36} {without:>10.1f} {added:>14.1f}")


if __name__ == "__main__":
    main()
