"""charter-langgraph benchmark: prints figures, asserts nothing.

    uv run python bench/langgraph_graph.py

Runs a 50-step StateGraph (50 nodes in a chain, each a small piece of work on the state),
ungoverned and governed by `charter_langgraph.govern` with the example policy manifest and a
buffered SQLite audit trail, and prints the median wall time per run and the ratio
(target: governed <= 1.15x ungoverned), with and without a checkpointer. Also prints the
per-step cost of the gate alone (trivial nodes), the figure a ratio hides.

A third graph wraps every node in a do-nothing wrapper (what wrapping a node costs by
itself); "CPU over pass-through" is the process CPU time (`time.process_time`, every thread,
the audit writer's work included: the clock stops after `Governor.flush`) per step that the
governed graph spends above it in the same round, median of rounds: usable under load.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

import charter_langgraph
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

STEPS = 50
RUNS = 30
# SHA-256 rounds per node in the 'some work' graph: about a millisecond on a laptop core.
WORK_ROUNDS = 1_000
POLICY_FILE = Path(__file__).resolve().parent.parent / "examples" / "policies.yaml"


class State(TypedDict):
    value: int
    digest: str


def work_node(i: int, rounds: int) -> Any:
    # A stand-in for a node's own work (parsing, a lookup, a small model call replayed from
    # a cache): a fixed amount of hashing, so both graphs do the same work per node.
    def node(state: State) -> dict[str, Any]:
        digest = state["digest"]
        data = digest.encode()
        for _ in range(rounds):
            data = hashlib.sha256(data).digest()
        return {"value": state["value"] + i, "digest": data.hex() if rounds else digest}

    node.__name__ = f"node_{i}"
    return node


def pass_through(node: Any) -> Any:
    """`node` behind a wrapper that does nothing but call it."""

    def wrapper(state: State) -> dict[str, Any]:
        return node(state)  # type: ignore[no-any-return]

    wrapper.__name__ = node.__name__
    return wrapper


def build(rounds: int, wrapped: bool = False) -> StateGraph:
    builder = StateGraph(State)
    for i in range(STEPS):
        node = work_node(i, rounds)
        builder.add_node(f"node_{i}", pass_through(node) if wrapped else node)
    builder.add_edge(START, "node_0")
    for i in range(STEPS - 1):
        builder.add_edge(f"node_{i}", f"node_{i + 1}")
    builder.add_edge(f"node_{STEPS - 1}", END)
    return builder


def one_run(graph: Any, n: int, checkpointed: bool, gov: Any = None) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one run; with `gov`, the CPU clock stops
    after its audit writer committed the run's records."""
    config = {"configurable": {"thread_id": f"t{n}"}} if checkpointed else None
    start, cpu = time.perf_counter(), time.process_time()
    graph.invoke({"value": 0, "digest": "seed"}, config)
    elapsed = time.perf_counter() - start
    if gov is not None:
        gov.flush(30)
    return elapsed, time.process_time() - cpu


def compare(rounds: int, checkpointed: bool, folder: str) -> tuple[float, float, float]:
    """(median wall time per run ungoverned, median governed, median CPU per step of the
    governed graph over the pass-through one); the graphs run alternately so that load from
    other processes on the machine falls on all alike."""
    saver = InMemorySaver if checkpointed else (lambda: None)
    plain = build(rounds).compile(checkpointer=saver())
    wrapped = build(rounds, wrapped=True).compile(checkpointer=saver())
    governed = charter_langgraph.govern(
        build(rounds),
        policy_file=str(POLICY_FILE),
        agent_id="bench-graph",
        audit_location=f"sqlite:///{folder}/audit-{rounds}-{checkpointed}.db",
    ).compile(checkpointer=saver())
    governor = charter_langgraph.governor_of(governed)
    base: list[float] = []
    gov: list[float] = []
    over: list[float] = []
    for n in range(RUNS + 3):
        b = one_run(plain, n, checkpointed)
        w = one_run(wrapped, n, checkpointed)
        g = one_run(governed, n, checkpointed, governor)
        if n >= 3:  # warm-up runs are not counted
            base.append(b[0])
            gov.append(g[0])
            over.append((g[1] - w[1]) / STEPS)
    governor.close()
    return statistics.median(base), statistics.median(gov), statistics.median(over)


def main() -> None:
    print(f"charter-langgraph bench: {STEPS}-step graph, median of {RUNS} runs")
    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as folder:
        for rounds, label in ((WORK_ROUNDS, "nodes doing some work"), (0, "trivial nodes")):
            for checkpointed in (False, True):
                base, gov, over = compare(rounds, checkpointed, folder)
                saver = "InMemorySaver" if checkpointed else "no checkpointer"
                per_step = (gov - base) / STEPS * 1e6
                print(
                    f"  {label:<26} {saver:<16} ungoverned {base * 1e3:7.2f} ms  "
                    f"governed {gov * 1e3:7.2f} ms  ratio {gov / base:5.2f}x  "
                    f"(+{per_step:.0f} us/step wall; "
                    f"CPU over pass-through +{over * 1e6:.0f} us/step)"
                )


if __name__ == "__main__":
    main()
