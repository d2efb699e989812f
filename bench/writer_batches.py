"""What the buffered audit writer spends per record, by how long it lingers for a batch and
how fast the agent steps: prints figures, asserts nothing.

    uv run python bench/writer_batches.py [--latencies 0,20,100] [--lingers 50,200] [--runs 7]

The LlamaIndex agent of bench/llamaindex_agent.py (20 tool turns, 44 records a run), its
scripted model answering after `latency` milliseconds, governed with a buffered SQLite trail.
For each linger (the writer's `_LINGER`, which this sets between runs) the writer thread's
own CPU time in its batch writes (redaction, encoding, the transaction) is summed over a run
and divided by the run's records; runs of the lingers interleave, so a noisy neighbour hits
them alike. A batch costs about the same whatever it holds (its code, SQLite's and the secret
scanner's state are cold by then), so the slower the agent steps, the fewer records share it
and the more each record costs.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import charter
import llamaindex_agent as agent_bench
from charter._runtime import writer
from charter_llamaindex.testing import ScriptedLLM

_spent = {"ns": 0, "records": 0, "batches": 0}


def _timed_batches() -> None:
    """Sum the writer thread's CPU time in each batch write (thread time: the agent's own work
    and the writer's waits for the GIL are not in it)."""
    write = writer.AuditWriter._write_batch

    def timed(self: writer.AuditWriter, records: list[dict[str, Any]]) -> None:
        start = time.thread_time_ns()
        try:
            write(self, records)
        finally:
            _spent["ns"] += time.thread_time_ns() - start
            _spent["records"] += len(records)
            _spent["batches"] += 1

    writer.AuditWriter._write_batch = timed  # type: ignore[method-assign]


def _model_latency(seconds: float) -> None:
    """The scripted model answers after `seconds`, as a model behind a network would."""
    answer = ScriptedLLM.astream_chat

    async def slow(self: ScriptedLLM, messages: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(seconds)
        return await answer(self, messages, **kwargs)

    ScriptedLLM.astream_chat = slow  # type: ignore[method-assign]


def measure(latency_ms: int, lingers_ms: list[int], runs: int, folder: Path) -> None:
    _model_latency(latency_ms / 1000)
    governors = {
        linger: charter.Governor(
            policies=agent_bench.POLICIES,
            agent_id="bench",
            audit_location=f"sqlite:///{folder}/{latency_ms}-{linger}.db",
        )
        for linger in lingers_ms
    }
    figures: dict[int, list[tuple[float, float]]] = {linger: [] for linger in lingers_ms}

    def one(linger: int) -> tuple[float, float]:
        writer._LINGER = linger / 1000
        _spent.update(ns=0, records=0, batches=0)
        agent_bench.one_run(20, "governed", governors[linger])  # ends with a flush
        return _spent["ns"] / 1000 / _spent["records"], _spent["records"] / _spent["batches"]

    for linger in lingers_ms:
        one(linger)  # warm-up: the store's first commit
    for _ in range(runs):
        for linger in random.sample(lingers_ms, len(lingers_ms)):
            figures[linger].append(one(linger))
    for governor in governors.values():
        governor.close(30)
    for linger in lingers_ms:
        per_record = statistics.median(f[0] for f in figures[linger])
        per_batch = statistics.median(f[1] for f in figures[linger])
        print(
            f"  model {latency_ms:>4} ms, linger {linger:>4} ms: writer CPU {per_record:6.0f} us "
            f"per record, {per_batch:5.1f} records per batch"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latencies", default="0,20,100", help="model latencies, ms")
    parser.add_argument("--lingers", default="50,200", help="writer lingers, ms")
    parser.add_argument("--runs", type=int, default=7, help="measured runs per linger")
    args = parser.parse_args()
    _timed_batches()
    default = round(writer._LINGER * 1000)
    print(f"buffered writer, CPU per record by linger (default {default} ms), medians of runs:")
    with tempfile.TemporaryDirectory() as folder:
        for latency in (int(x) for x in args.latencies.split(",")):
            lingers = [int(x) for x in args.lingers.split(",")]
            measure(latency, lingers, args.runs, Path(folder))


if __name__ == "__main__":
    main()
