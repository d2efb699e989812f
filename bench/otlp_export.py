"""OTLP export benchmark: prints figures, asserts nothing.

    uv run python bench/otlp_export.py

One governed tool step through `Governor.step` (the 10 policies of bench/engine.py, a buffered
SQLite store in a temporary directory), with and without OTLP export to a real OTLP/HTTP
receiver on loopback (`charter.testing.OtlpReceiver`, protobuf decoded):

1. the agent's side: p50/p99 wall time and p50 thread CPU time per step, without export,
   with export, and with export and payload capture; the difference is what export adds to
   the agent's path (observing the step's start, decision and end);
2. the exporter's side: time to turn one committed record into its spans (step span and
   decision span), measured on the records of a finished run with an in-memory span
   exporter; and end-to-end, the time from the first step until the receiver holds every span.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from charter import Governor
from charter.audit import OtlpExporter
from charter.testing import OtlpReceiver, recorded
from engine import POLICIES  # type: ignore[import-not-found]
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

STEPS = 5_000
PER_TASK = 100


def _percentiles(samples: list[int]) -> tuple[float, float]:
    samples = sorted(samples)
    return samples[len(samples) // 2] / 1000, samples[int(len(samples) * 0.99)] / 1000


def run(location: str, **settings: Any) -> tuple[float, float, float, Governor]:
    gov = Governor(
        policies=POLICIES,
        audit_location=location,
        agent_id="bench",
        queue_size=100_000,
        **settings,
    )
    clock, cpu = time.perf_counter_ns, time.thread_time_ns
    wall: list[int] = []
    cpus: list[int] = []
    done = 0
    while done < STEPS:
        with gov.task(name="bench"):
            for i in range(PER_TASK):
                t0, c0 = clock(), cpu()
                with gov.step(
                    "step.exec",
                    name="Bash",
                    input={"command": f"ls -la src/{i}"},
                    properties={"tool": {"name": "Bash", "call_id": f"call_{i}"}},
                ) as s:
                    s.output = {"stdout": "a.py\nb.py\n", "exit_code": 0}
                wall.append(clock() - t0)
                cpus.append(cpu() - c0)
        done += PER_TASK
    warm = len(wall) // 10
    p50, p99 = _percentiles(wall[warm:])
    cpu_p50, _ = _percentiles(cpus[warm:])
    return p50, p99, cpu_p50, gov


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, OtlpReceiver() as receiver:
        print(f"{STEPS} governed tool steps, {PER_TASK} per task, buffered SQLite store")
        rows = []
        for label, settings in (
            ("no export", {}),
            ("OTLP export", {"otlp_endpoint": receiver.endpoint}),
            ("OTLP export + payloads", {"otlp_endpoint": receiver.endpoint, "otlp_payloads": True}),
        ):
            location = f"sqlite:///{Path(tmp) / label.replace(' ', '_')}.db"
            before = len(receiver.spans())
            t0 = time.perf_counter()
            p50, p99, cpu_p50, gov = run(location, **settings)
            gov.flush(120)
            if settings:
                expected = before + STEPS * 2 + STEPS // PER_TASK
                receiver.wait_for(expected, timeout=120)
            total = time.perf_counter() - t0
            status = gov.status()
            gov.close(60)
            rows.append((label, p50, p99, cpu_p50))
            sent = status["exporters"][0]["spans_exported"] if settings else 0
            print(
                f"  {label:<24} p50 {p50:7.1f} us  p99 {p99:8.1f} us  cpu p50 {cpu_p50:6.1f} us"
                f"  | all spans at the receiver after {total:5.2f} s ({sent} spans)"
            )
        base = rows[0]
        for label, p50, _, cpu_p50 in rows[1:]:
            print(
                f"  added by {label}: p50 {p50 - base[1]:+.1f} us, "
                f"cpu p50 {cpu_p50 - base[3]:+.1f} us per step (agent's thread)"
            )

        # The exporter's side alone: records of a finished run turned into spans.
        location = f"sqlite:///{Path(tmp) / 'records'}.db"
        *_, gov = run(location)
        records = recorded(gov)
        gov.close(10)
        memory = InMemorySpanExporter()
        exporter = OtlpExporter(span_exporter=memory)
        t0 = time.perf_counter_ns()
        exporter.export(records)
        spent = time.perf_counter_ns() - t0
        exporter.close(30)
        print(
            f"  building spans off the agent's thread: {spent / len(records) / 1000:.1f} us "
            f"per record ({len(records)} records, {len(memory.get_finished_spans())} spans)"
        )
    print("(a loaded 2-core machine: figures vary by tens of percent between runs)")


if __name__ == "__main__":
    main()
