"""CrewAI crew benchmark: prints figures, asserts nothing.

    uv run python bench/crewai_crew.py [--steps 20] [--runs 11] [--path both]

A one-agent, one-task crew driven by charter_crewai.testing.ScriptedLLM, scripted to call a
tool on each of `--steps` turns and then answer, on CrewAI's ReAct path, its native
function-calling path, or both. Measures the wall time of one whole kickoff ungoverned,
with do-nothing hooks on the same eight interception points (CrewAI's own hook cost), and
governed by charter_crewai.govern with a realistic policy set and a buffered SQLite audit
trail in a temporary folder; prints the medians, the governed/ungoverned ratio, and what
Charter adds per governed step above the do-nothing hooks in the same round (wall and process
CPU, median of rounds: pairing a round's runs keeps a noisy neighbour out of the figure), with
the middle half of the rounds and the difference between each mode's fastest kickoff beside it.

The governed kickoffs share one Governor, and so one audit store, as a process running many
kickoffs does (opening a store is paid once per process, not per step).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

SCRATCH = tempfile.mkdtemp(prefix="charter-crewai-bench-")
os.environ.update(
    CREWAI_DISABLE_TELEMETRY="true",
    OTEL_SDK_DISABLED="true",
    CREWAI_TRACING_ENABLED="false",
    CREWAI_STORAGE_DIR=os.path.join(SCRATCH, "crewai"),
    HOME=SCRATCH,
)
# CrewAI leaves a lock file per crew in the temp folder; keep them in the scratch one too.
tempfile.tempdir = SCRATCH
atexit.register(shutil.rmtree, SCRATCH, True)

import charter  # noqa: E402
import charter_crewai  # noqa: E402
from _policies import INTEGRATION_POLICIES  # noqa: E402
from charter_crewai.testing import (  # noqa: E402
    ScriptedLLM,
    final_answer,
    native_tool_call,
    react_tool_call,
)
from charter_templates import resolve  # noqa: E402
from crewai import Agent, Crew, Task  # noqa: E402
from crewai.hooks.dispatch import InterceptionPoint, register, unregister  # noqa: E402
from crewai.tools import tool  # noqa: E402

POLICIES = INTEGRATION_POLICIES
USAGE = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}


@tool("get_weather")
def get_weather(city: str) -> str:
    """Read the weather for a city."""
    return f"sunny in {city}, 21 degrees, light wind from the west"


def noop(ctx: Any) -> None:
    return None


def build(steps: int, native: bool) -> Crew:
    if native:
        turns: list[Any] = [
            [native_tool_call("get_weather", {"city": f"city-{i}"})] for i in range(steps)
        ]
        turns.append("Done.")
    else:
        turns = [react_tool_call("get_weather", {"city": f"city-{i}"}) for i in range(steps)]
        turns.append(final_answer("Done."))
    llm = ScriptedLLM(model="bench-model", responses=turns, native=native, usage=USAGE)
    agent = Agent(
        role="forecaster",
        goal="report the weather",
        backstory="reads forecasts",
        llm=llm,
        tools=[get_weather],
        max_iter=steps + 5,
    )
    task = Task(description="Weather everywhere.", expected_output="a report", agent=agent)
    return Crew(agents=[agent], tasks=[task], name="bench-crew")


def one_run(steps: int, native: bool, mode: str, gov: charter.Governor) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one kickoff in `mode` (governed: under `gov`);
    the CPU clock stops after the audit writer committed the kickoff's records."""
    crew = build(steps, native)
    governance = None
    if mode == "governed":
        governance = charter_crewai.govern(crew, governor=gov)
    elif mode == "pass-through":
        for point in InterceptionPoint:
            register(point, noop)
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    result = crew.kickoff()
    elapsed = time.perf_counter() - start
    if governance is not None:
        governance.governor.flush(30)
    used = time.process_time() - cpu
    assert result.raw == "Done."
    if governance is not None:
        governance.uninstall()  # the Governor stays open for the next kickoff
    elif mode == "pass-through":
        for point in InterceptionPoint:
            unregister(point, noop)
    return elapsed, used


def bench(steps: int, runs: int, native: bool, folder: Path) -> None:
    modes = ("ungoverned", "pass-through", "governed")
    wall: dict[str, list[float]] = {m: [] for m in modes}
    ratios: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    over: list[float] = []
    over_wall: list[float] = []
    governed_steps = 2 * steps + 3  # tool + model per turn, final model call, task, kickoff
    gov = charter.Governor(
        policies=POLICIES,
        agent_id="bench-crew",
        audit_location=f"sqlite:///{folder}/audit-{native}.db",
    )
    for mode in modes:
        one_run(steps, native, mode, gov)  # warm-up: first kickoff, the store
    # Modes interleave round by round, so a noisy neighbour hits them alike; the per-round
    # ratio is the figure.
    for _ in range(runs):
        order = random.sample(modes, len(modes))
        got = {m: one_run(steps, native, m, gov) for m in order}
        over.append((got["governed"][1] - got["pass-through"][1]) / governed_steps)
        over_wall.append((got["governed"][0] - got["pass-through"][0]) / governed_steps)
        for m in modes:
            wall[m].append(got[m][0])
            cpu[m].append(got[m][1])
            ratios[m].append(got[m][0] / got["ungoverned"][0])
    gov.close(30)
    base = statistics.median(wall["ungoverned"])
    path = "native function calling" if native else "ReAct text"
    print(f"{path}: {steps} tool turns ({governed_steps} governed steps), {runs} rounds")
    print("  mode           wall median   ratio (median of rounds)   per governed step")
    for m in modes:
        w, r = statistics.median(wall[m]), statistics.median(ratios[m])
        per_step = "" if m == "ungoverned" else f"+{(w - base) / governed_steps * 1e6:6.0f} us"
        print(f"  {m:<13} {w * 1e3:9.1f} ms   {r:5.2f}x {per_step:>30}")
    print(
        "  process CPU (every thread, audit writes included), median: "
        + ", ".join(f"{m} {statistics.median(cpu[m]) * 1e3:.1f} ms" for m in modes)
    )
    print(
        "  Charter over the do-nothing pass-through per governed step, median of rounds: wall"
        f" +{statistics.median(over_wall) * 1e6:.0f} us,"
        f" CPU +{statistics.median(over) * 1e6:.0f} us"
    )
    # The spread says how far one run's median can be trusted: on a shared VM the middle
    # half of the rounds can span more than the figure itself.
    print(
        "  the same, middle half of the rounds: wall"
        f" {_middle_half(over_wall)}, CPU {_middle_half(over)}"
    )
    # Interference only ever adds time: each mode's fastest kickoff is its cost with the least
    # of it, and their difference moves less with a neighbour's bursts than the medians do.
    print(
        "  the same, fastest kickoff of each mode: wall"
        f" {_per_step(min(wall['governed']) - min(wall['pass-through']), governed_steps)},"
        f" CPU {_per_step(min(cpu['governed']) - min(cpu['pass-through']), governed_steps)}"
    )


def _per_step(seconds: float, steps: int) -> str:
    return f"{seconds / steps * 1e6:+.0f} us"


def _middle_half(values: list[float]) -> str:
    """The first to the third quartile of per-step seconds, in microseconds."""
    if len(values) < 2:
        return "n/a"
    low, _, high = statistics.quantiles(values, n=4)
    return f"{low * 1e6:+.0f} to {high * 1e6:+.0f} us"


def resolve_cost() -> float:
    """Microseconds per `charter_templates.resolve` call (once per governed tool call)."""
    resolve("crewai", "get_weather", {"city": "Oslo"})
    start = time.perf_counter()
    for i in range(200):
        resolve("crewai", "get_weather", {"city": f"city-{i}"})
    return (time.perf_counter() - start) / 200 * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="tool-calling turns per kickoff")
    parser.add_argument("--runs", type=int, default=11, help="rounds (median taken)")
    parser.add_argument("--path", choices=("react", "native", "both"), default="both")
    args = parser.parse_args()
    print(f"{len(POLICIES)} policies, buffered SQLite audit, CrewAI scripted offline")
    with tempfile.TemporaryDirectory() as tmp:
        for native in (False, True):
            if args.path in ("both", "native" if native else "react"):
                bench(args.steps, args.runs, native, Path(tmp))
    print(f"charter_templates.resolve: {resolve_cost():.0f} us per call (once per tool call)")


if __name__ == "__main__":
    main()
