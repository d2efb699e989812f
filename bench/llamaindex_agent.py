"""LlamaIndex agent benchmark: prints figures, asserts nothing.

    uv run python bench/llamaindex_agent.py [--steps 20] [--runs 11]

A FunctionAgent driven by charter_llamaindex.testing.ScriptedLLM (LlamaIndex's own mock
function-calling LLM), scripted to call a tool on each of `--steps` turns and then answer.
Measures the wall time of one whole run ungoverned, through do-nothing wrappers at the same
two places Charter hooks in (the agent's ``_call_tool`` and the LLM's chat methods, by
subclass: LlamaIndex's own cost of being wrapped), and governed by charter_llamaindex.govern
with a realistic policy set and a buffered SQLite audit trail in a temporary folder; prints
the medians, the per-round ratio to ungoverned, and Charter's added cost per governed step
next to the do-nothing wrapper's.

The governed runs share one Governor, and so one audit store, as a process running many
agents does (opening a store is paid once per process, not per step).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import charter
import charter_llamaindex
from _policies import INTEGRATION_POLICIES
from charter_llamaindex.testing import ScriptedLLM, tool_call
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.tools import FunctionTool

POLICIES = INTEGRATION_POLICIES
USAGE = {"input_tokens": 120, "output_tokens": 30}


def get_weather(city: str) -> str:
    """Read the weather for a city."""
    return f"sunny in {city}, 21 degrees, light wind from the west"


class PassThroughLLM(ScriptedLLM):
    """The scripted LLM behind do-nothing wrappers of the chat methods Charter gates."""

    def chat(self, messages: Any, **kwargs: Any) -> Any:
        return super().chat(messages, **kwargs)

    async def achat(self, messages: Any, **kwargs: Any) -> Any:
        return await super().achat(messages, **kwargs)

    async def astream_chat(self, messages: Any, **kwargs: Any) -> Any:
        stream = await super().astream_chat(messages, **kwargs)

        async def relay() -> Any:
            async for item in stream:
                yield item

        return relay()


class PassThroughAgent(FunctionAgent):
    """A FunctionAgent with a do-nothing wrapper around its tool-call step."""

    async def _call_tool(self, ctx: Any, tool: Any, tool_input: dict[str, Any]) -> Any:
        return await super()._call_tool(ctx, tool, tool_input)


def build(steps: int, mode: str) -> FunctionAgent:
    turns: list[Any] = [tool_call("get_weather", {"city": f"city-{i}"}) for i in range(steps)]
    turns.append("Done.")
    llm_cls, agent_cls = (
        (PassThroughLLM, PassThroughAgent)
        if mode == "pass-through"
        else (ScriptedLLM, FunctionAgent)
    )
    llm = llm_cls(turns, model="bench-model", usage=USAGE)
    return agent_cls(tools=[FunctionTool.from_defaults(get_weather)], llm=llm)


async def _run(agent: FunctionAgent, steps: int) -> Any:
    return await agent.run(user_msg="Weather everywhere.", max_iterations=steps + 5)


def one_run(steps: int, mode: str, gov: charter.Governor) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one agent run in `mode` (governed: under
    `gov`); the CPU clock stops after the audit writer committed the run's records."""
    agent = build(steps, mode)
    governance = None
    if mode == "governed":
        governance = charter_llamaindex.govern(agent, governor=gov)
    gc.collect()
    loop = asyncio.new_event_loop()
    try:
        start, cpu = time.perf_counter(), time.process_time()
        result = loop.run_until_complete(_run(agent, steps))
        elapsed = time.perf_counter() - start
        if governance is not None:
            governance.governor.flush(30)
        used = time.process_time() - cpu
    finally:
        loop.close()
    assert str(result) == "Done.", result
    if governance is not None:
        governance.uninstall()  # the Governor stays open for the next run
    return elapsed, used


def bench(steps: int, runs: int, folder: Path) -> None:
    modes = ("ungoverned", "pass-through", "governed")
    wall: dict[str, list[float]] = {m: [] for m in modes}
    ratios: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    over: list[float] = []
    over_wall: list[float] = []
    governed_steps = 2 * steps + 3  # tool + model per turn, final model call, user message, task
    gov = charter.Governor(
        policies=POLICIES, agent_id="bench-agent", audit_location=f"sqlite:///{folder}/audit.db"
    )
    for mode in modes:
        one_run(steps, mode, gov)  # warm-up: first run, the store
    # Modes interleave round by round, so a noisy neighbour hits them alike; the per-round
    # ratio is the figure.
    for _ in range(runs):
        order = random.sample(modes, len(modes))
        got = {m: one_run(steps, m, gov) for m in order}
        over.append((got["governed"][1] - got["pass-through"][1]) / governed_steps)
        over_wall.append((got["governed"][0] - got["pass-through"][0]) / governed_steps)
        for m in modes:
            wall[m].append(got[m][0])
            cpu[m].append(got[m][1])
            ratios[m].append(got[m][0] / got["ungoverned"][0])
    gov.close(30)
    base = statistics.median(wall["ungoverned"])
    print(f"FunctionAgent (streaming): {steps} tool turns ({governed_steps} governed steps)")
    print(f"  {runs} rounds; mode          wall median   ratio (median of rounds)   per step")
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


def gate_cost(folder: Path, n: int = 400) -> tuple[float, float]:
    """Microseconds of process CPU Charter spends per tool step and per model step of such a
    run: the translation, the decision and the outcome record, timed alone (no LlamaIndex
    around them), on the same policies and a buffered SQLite trail. The clock stops after the
    audit writer committed the steps' records, as in `one_run`, so the figure compares with
    the in-situ CPU per step (a wall clock stopped before the writer caught up would leave
    its work out)."""
    from charter_llamaindex import _translate as tr
    from llama_index.core.llms import ChatMessage

    governance = charter_llamaindex.govern(
        build(1, "ungoverned"),
        policies=POLICIES,
        agent_id="bench-gate",
        audit_location=f"sqlite:///{folder}/gate.db",
    )
    gate = governance.gate
    task = gate.start_task(None, name="gate cost")
    assert isinstance(task, str)
    tool = FunctionTool.from_defaults(get_weather)
    llm = governance.target.llm
    messages = [ChatMessage(role="user", content="Weather everywhere.")]
    response = type("R", (), {"message": ChatMessage(role="assistant", content="ok")})()

    async def tools() -> float:
        governance.governor.flush(30)
        start = time.process_time()
        for i in range(n):
            step = tr.tool_step(gate, tool, {"city": f"city-{i}"}, f"call-{i}", {"agent": "a"})
            decision = await gate.adecide(step, task)
            await gate.acomplete(decision.handle, {"content": "sunny"})
        governance.governor.flush(30)
        return (time.process_time() - start) / n * 1e6

    async def models() -> float:
        governance.governor.flush(30)
        start = time.process_time()
        for _ in range(n):
            step = tr.model_step(gate, llm, type(llm), messages, {"tools": [tool]}, {})
            decision = await gate.adecide(step, task)
            await gate.acomplete(
                decision.handle,
                tr.response_output(response),
                properties=tr.response_properties(response),
            )
        governance.governor.flush(30)
        return (time.process_time() - start) / n * 1e6

    try:
        return asyncio.run(tools()), asyncio.run(models())
    finally:
        gate.end_task(task)
        governance.uninstall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="tool-calling turns per run")
    parser.add_argument("--runs", type=int, default=11, help="rounds (median taken)")
    args = parser.parse_args()
    print(f"{len(POLICIES)} policies, buffered SQLite audit, LlamaIndex scripted offline")
    with tempfile.TemporaryDirectory() as tmp:
        bench(args.steps, args.runs, Path(tmp))
        per_tool, per_model = gate_cost(Path(tmp))
    print(
        f"Charter alone, process CPU with the audit writes: {per_tool:.0f} us per tool step,"
        f" {per_model:.0f} us per model step"
    )


if __name__ == "__main__":
    main()
