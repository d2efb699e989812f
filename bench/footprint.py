"""Instructions per governed step, counted by valgrind: prints figures, asserts nothing.

    uv run python bench/footprint.py [--cases gate,langchain,...] [--steps 20] [--cache]

CPU-time figures on a shared machine move 2-3x between runs of the same code, so they cannot
tell two builds apart by less than that. The number of machine instructions a run executes
moves by well under 1%: it is the figure to compare builds with. It leaves out cache misses,
which make the same step cost more inside a framework's run than in a loop, so it ranks
changes rather than predicting microseconds.

Each case runs in a child process under callgrind: a warm-up run first, then the measured
runs inside `sys.call_tracing` (nothing else on these paths calls it), which callgrind is told
to take its counts at on entry and on exit. What every thread executed in between is the
figure: the audit writer's work (each run ends with a flush) and the worker threads some
frameworks run their hooks in (CrewAI) included. A case's figure is (governed - do-nothing) /
governed steps, with the do-nothing counterpart its own bench uses (a pass-through middleware,
wrapped nodes, no-op hooks). `gate` is one tool step (build, decide, complete) in a loop,
without a framework. Governors keep a buffered SQLite trail in a temporary folder, as the
benches do (the writer's batching window scaled to valgrind's pace, see `child`). Needs
valgrind; without it this says so and exits.

``--cache`` has callgrind simulate the first-level caches and the last level as well (sized
like this machine's; about twice as slow) and adds the misses per governed step over the
do-nothing counterpart: instruction fetches (I1) and data reads and writes (D1) that missed
the first level, and what missed the last one. A framework's own work between two steps
evicts Charter's code and data, so a step that misses often costs more inside a run than its
instructions say; these columns show how much.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CASES = ("gate", "langchain", "langgraph", "crewai", "llamaindex")
_TOTALS = re.compile(r"^totals: ([\d ]+)$", re.MULTILINE)
_EVENTS = re.compile(r"^events: ([\w ]+)$", re.MULTILINE)
# How much slower than native code runs under callgrind, without and with the cache
# simulation (see `child`).
_SLOWDOWN, _SLOWDOWN_CACHE = 50, 100
# Columns of --cache: (heading, the callgrind events summed into it).
_MISSES = (
    ("I1 misses", ("I1mr",)),
    ("D1 misses", ("D1mr", "D1mw")),
    ("LL misses", ("ILmr", "DLmr", "DLmw")),
)


# -- the child: one case in one mode, run inside sys.call_tracing ---------------------------


def _store(folder: str) -> str:
    return f"sqlite:///{folder}/audit.db"


def _gate_case(governed: bool, steps: int, folder: str) -> tuple[Callable[[], None], int]:
    from _policies import INTEGRATION_POLICIES
    from charter import integration as ci

    gate = ci.Gate(
        "langchain", policies=INTEGRATION_POLICIES, agent_id="bench", audit_location=_store(folder)
    )
    task = gate.start_task(None, name="footprint")
    assert not isinstance(task, ci.Blocked)

    def run() -> None:
        for i in range(steps):
            args = {"city": f"city-{i}"}
            if governed:
                step = gate.tool_step("get_weather", args, call_id=f"call-{i}")
                decision = gate.decide(step, task)
                assert isinstance(decision, ci.Allowed)
                gate.complete(decision.handle, {"content": "sunny"})
            else:
                str(args)  # the loop's own cost, for the subtraction
        gate.governor.flush(30)

    return run, steps


def _langchain_case(governed: bool, steps: int, folder: str) -> tuple[Callable[[], None], int]:
    import charter
    import langchain_agent as bench

    gov = charter.Governor(policies=bench.POLICIES, agent_id="bench", audit_location=_store(folder))
    mode = "middleware" if governed else "pass-through"
    return (lambda: bench.one_run(steps, mode, gov) and None), 2 * steps + 1


def _langgraph_case(governed: bool, steps: int, folder: str) -> tuple[Callable[[], None], int]:
    import charter_langgraph
    import langgraph_graph as bench

    builder = bench.build(0, wrapped=not governed)
    if governed:
        builder = charter_langgraph.govern(
            builder,
            policy_file=str(bench.POLICY_FILE),
            agent_id="bench",
            audit_location=_store(folder),
        )
    graph = builder.compile()
    gov = charter_langgraph.governor_of(graph) if governed else None
    runs = itertools.count()
    return (lambda: bench.one_run(graph, next(runs), False, gov) and None), bench.STEPS


def _crewai_case(governed: bool, steps: int, folder: str) -> tuple[Callable[[], None], int]:
    import charter
    import crewai_crew as bench

    gov = charter.Governor(policies=bench.POLICIES, agent_id="bench", audit_location=_store(folder))
    mode = "governed" if governed else "pass-through"
    return (lambda: bench.one_run(steps, True, mode, gov) and None), 2 * steps + 3


def _llamaindex_case(governed: bool, steps: int, folder: str) -> tuple[Callable[[], None], int]:
    import charter
    import llamaindex_agent as bench

    gov = charter.Governor(policies=bench.POLICIES, agent_id="bench", audit_location=_store(folder))
    mode = "governed" if governed else "pass-through"
    return (lambda: bench.one_run(steps, mode, gov) and None), 2 * steps + 3


_BUILDERS = {
    "gate": _gate_case,
    "langchain": _langchain_case,
    "langgraph": _langgraph_case,
    "crewai": _crewai_case,
    "llamaindex": _llamaindex_case,
}


def child(case: str, governed: bool, steps: int, runs: int, slowdown: int) -> None:
    # A long-lived process's state: Charter switches to OpenSSL's SHA-256 and to orjson once
    # a process has made a few hundred records, or at once when they are loaded (frameworks
    # load them): the imports would otherwise fall inside the measured runs.
    import hashlib  # noqa: F401

    import orjson  # noqa: F401

    # Under valgrind code runs `slowdown` times slower (about 50x, 100x with the caches
    # simulated), and the audit writer's linger (how long a record waits for others to join
    # its batch) would end after that fraction of the work it covers natively: batches of a
    # few records, each paying a batch's fixed cost. Scaled by the same factor, batches are
    # as large as in a native run.
    from charter._runtime import writer

    writer._LINGER *= slowdown

    sys.path.insert(0, str(HERE))
    with tempfile.TemporaryDirectory() as folder:
        run, per_run = _BUILDERS[case](governed, steps, folder)
        run()  # warm-up: imports, first-use caches, the store's first commit

        def measured() -> None:
            for _ in range(runs):
                run()

        sys.call_tracing(measured, ())
        print(f"STEPS {per_run * runs}")


# -- the parent: children under callgrind ---------------------------------------------------


def count(
    case: str, governed: bool, steps: int, runs: int, cache: bool = False
) -> tuple[dict[str, int], int]:
    """(callgrind's totals by event for what every thread executed during the measured call:
    ``Ir`` the instructions, and with `cache` the simulated misses; governed steps it ran)."""
    with tempfile.TemporaryDirectory() as out:
        command = [
            "valgrind",
            "--tool=callgrind",
            *(["--cache-sim=yes"] if cache else []),
            "--dump-before=sys_call_tracing",
            "--dump-after=sys_call_tracing",
            f"--callgrind-out-file={out}/callgrind.out",
            sys.executable,
            __file__,
            "--child",
            case,
            "governed" if governed else "do-nothing",
            str(steps),
            str(runs),
            str(_SLOWDOWN_CACHE if cache else _SLOWDOWN),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        # A dump ends where the call starts and another where it returns: the last numbered
        # dump is the measured region (the unnumbered file is what ran after it).
        dumps = sorted(Path(out).glob("callgrind.out.*"), key=lambda f: int(f.suffix[1:]))
        text = dumps[-1].read_text() if len(dumps) >= 2 else ""
    collected, events = _TOTALS.search(text), _EVENTS.search(text)
    stepped = re.search(r"STEPS (\d+)", done.stdout)
    if done.returncode != 0 or collected is None or events is None or stepped is None:
        tail = "\n".join((done.stderr or done.stdout).splitlines()[-15:])
        raise RuntimeError(f"{case} ({'governed' if governed else 'do-nothing'}) failed:\n{tail}")
    totals = dict(zip(events.group(1).split(), map(int, collected.group(1).split()), strict=False))
    return totals, int(stepped.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES)
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=20,
        help="tool turns per run (gate: steps; langgraph runs its 50-node graph)",
    )
    parser.add_argument("--runs", type=int, default=2, help="measured runs per case and mode")
    parser.add_argument(
        "--cache", action="store_true", help="simulate the caches too and print misses per step"
    )
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, mode, steps, runs, slowdown = args.child
        child(case, mode == "governed", int(steps), int(runs), int(slowdown))
        return
    if shutil.which("valgrind") is None:
        print("footprint: valgrind is not installed (apt-get install valgrind); nothing measured")
        return
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}: choose from {', '.join(CASES)}")
    gate_steps = max(args.steps, 200)
    jobs: dict[tuple[str, bool], Any] = {}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for case in cases:
            steps = gate_steps if case == "gate" else args.steps
            for governed in (False, True):
                jobs[case, governed] = pool.submit(
                    count, case, governed, steps, args.runs, args.cache
                )
    columns = [("instructions per step", ("Ir",)), *(_MISSES if args.cache else ())]
    print(f"per governed step, over the do-nothing counterpart ({args.runs} runs)")
    print("  case         governed steps" + "".join(f"   {h:>21}" for h, _ in columns))
    for case in cases:
        base, _ = jobs[case, False].result()
        governed, stepped = jobs[case, True].result()
        figures = (
            (sum(governed.get(e, 0) for e in events) - sum(base.get(e, 0) for e in events))
            / stepped
            for _, events in columns
        )
        print(f"  {case:<12} {stepped:>14}" + "".join(f"   {f:>21,.0f}" for f in figures))


if __name__ == "__main__":
    main()
