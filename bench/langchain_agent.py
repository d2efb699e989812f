"""LangChain agent benchmark: prints figures, asserts nothing.

    uv run python bench/langchain_agent.py [--steps 50] [--runs 15]

A `create_agent` graph driven by LangChain's fake chat model, scripted to call a tool on
each of `--steps` turns and then answer. Measures the wall time of one whole run, ungoverned
and governed (CharterMiddleware; CharterCallbackHandler; both together), plus a do-nothing
middleware with the same hooks and a do-nothing callback handler (what LangChain's own
machinery costs), with a realistic
policy set and a buffered SQLite audit trail in a temporary folder, and prints the medians
and the governed/ungoverned ratio (target: at most 1.15x for the middleware).

"CPU over baseline" is the process CPU time (`time.process_time`, every thread, the audit
writer's work for the run included: the clock stops after `Governor.flush`) per governed
step above the do-nothing counterpart in the same round (middleware and both over the
pass-through middleware, handler over the do-nothing handler), median of rounds; it stays
usable when other processes load the machine, where wall figures swing. The wall time above
the same counterpart in the same round, median of rounds, follows it in brackets.

Each governed mode keeps one Governor, and so one audit store, for all its runs, as a
process serving many agent runs does; each run is a new task in it. Opening a new store
(its file, schema and first commit) is paid once per process, and is printed on its own.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import charter
from _policies import INTEGRATION_POLICIES
from charter_langchain import CharterCallbackHandler, CharterMiddleware
from charter_templates import resolve
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

POLICIES = INTEGRATION_POLICIES
# Each governed mode against the do-nothing mode with the same hooks (the CPU figure).
_BASELINE = {"middleware": "pass-through", "handler": "listener", "both": "pass-through"}


class PassThrough(AgentMiddleware):  # type: ignore[type-arg]
    """A middleware with the same hooks as CharterMiddleware that does nothing: what
    LangChain's middleware machinery costs by itself."""

    def before_agent(self, state: Any, runtime: Any) -> None:
        return None

    def after_agent(self, state: Any, runtime: Any) -> None:
        return None

    def after_model(self, state: Any, runtime: Any) -> None:
        # CharterMiddleware reviews each model turn's tool calls here: LangGraph runs one
        # more node per turn for it, which is the framework's cost of the hook.
        return None

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(request)

    def wrap_tool_call(self, request: Any, handler: Any) -> Any:
        return handler(request)


class Listener(BaseCallbackHandler):
    """A callback handler that does nothing: what LangChain's callbacks cost by themselves."""

    run_inline = True


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model with the fields a provider's chat model has. LangChain
    (for its callbacks) and Charter (for the step's name) read the model's name, temperature
    and max tokens on every call; asking a pydantic model for a field it lacks raises and
    catches an AttributeError (about 22k instructions), which no real model costs."""

    model: str = "scripted-model"
    temperature: float = 0.0
    max_tokens: int = 1024

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


@tool
def get_weather(city: str) -> str:
    """Read the weather for a city."""
    return f"sunny in {city}, 21 degrees, light wind from the west"


def script(steps: int) -> list[AIMessage]:
    usage = {"input_tokens": 120, "output_tokens": 30, "total_tokens": 150}
    turns = [
        AIMessage(
            content="",
            tool_calls=[{"name": "get_weather", "args": {"city": f"city-{i}"}, "id": f"c{i}"}],
            usage_metadata=usage,
            response_metadata={"finish_reason": "tool_calls"},
        )
        for i in range(steps)
    ]
    turns.append(AIMessage(content="Done.", usage_metadata=usage))
    return turns


def governor(folder: Path, name: str) -> charter.Governor:
    return charter.Governor(
        policies=POLICIES, agent_id="bench-bot", audit_location=f"sqlite:///{folder}/{name}.db"
    )


def one_run(steps: int, mode: str, gov: charter.Governor | None) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one whole agent run in `mode`; a governed
    mode runs under `gov`."""
    middleware: list[Any] = []
    config: dict[str, Any] = {"recursion_limit": 4 * steps + 20}
    if mode == "pass-through":
        middleware = [PassThrough()]
    elif mode == "listener":
        config["callbacks"] = [Listener()]
    elif gov is not None:
        if mode in ("middleware", "both"):
            middleware = [CharterMiddleware(gov)]
        if mode in ("handler", "both"):
            config["callbacks"] = [CharterCallbackHandler(gov)]
    model = ScriptedModel(messages=iter(script(steps)))
    agent = create_agent(model, [get_weather], middleware=middleware)
    inputs = {"messages": [{"role": "user", "content": "Weather everywhere, please."}]}
    gc.collect()
    start, cpu = time.perf_counter(), time.process_time()
    result = agent.invoke(inputs, config)
    elapsed = time.perf_counter() - start
    if gov is not None:
        gov.flush(30)  # the audit writer's work for this run counts as Charter's CPU
    used = time.process_time() - cpu
    assert result["messages"][-1].content == "Done."
    return elapsed, used


def store_opening(steps: int, folder: Path) -> float:
    """Process CPU seconds a middleware run on a new store takes over one on a store already
    open (median of three pairs): what a process pays once, on its first governed run."""
    kept = governor(folder, "opening-kept")
    one_run(steps, "middleware", kept)
    extra = []
    for n in range(3):
        fresh = governor(folder, f"opening-{n}")
        first = one_run(steps, "middleware", fresh)[1]
        fresh.close(30)
        extra.append(first - one_run(steps, "middleware", kept)[1])
    kept.close(30)
    return statistics.median(extra)


def resolve_cost() -> float:
    """Microseconds per `charter_templates.resolve` call for the benchmark's tool."""
    resolve("langchain", "get_weather", {"city": "Oslo"})
    start = time.perf_counter()
    for i in range(200):
        resolve("langchain", "get_weather", {"city": f"city-{i}"})
    return (time.perf_counter() - start) / 200 * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="tool-calling turns per run")
    parser.add_argument("--runs", type=int, default=15, help="rounds (median taken)")
    args = parser.parse_args()
    modes = ("ungoverned", "pass-through", "middleware", "listener", "handler", "both")
    wall: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    ratios: dict[str, list[float]] = {m: [] for m in modes}
    over: dict[str, list[float]] = {m: [] for m in _BASELINE}
    over_wall: dict[str, list[float]] = {m: [] for m in _BASELINE}
    steps = 2 * args.steps + 1
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        govs = {m: governor(folder, m) for m in ("middleware", "handler", "both")}
        for mode in modes:
            one_run(args.steps, mode, govs.get(mode))  # warm-up: imports, caches, the store
        # Modes run interleaved, round by round, so a noisy neighbour hits them alike; the
        # per-round ratio is what the target is about.
        for _ in range(args.runs):
            order = random.sample(modes, len(modes))
            got = {m: one_run(args.steps, m, govs.get(m)) for m in order}
            for m in modes:
                wall[m].append(got[m][0])
                cpu[m].append(got[m][1])
                ratios[m].append(got[m][0] / got["ungoverned"][0])
            for m, base in _BASELINE.items():
                over[m].append((got[m][1] - got[base][1]) / steps)
                over_wall[m].append((got[m][0] - got[base][0]) / steps)
        for gov in govs.values():
            gov.close(30)
        opening = store_opening(args.steps, folder)
    base_wall = statistics.median(wall["ungoverned"])
    print(
        f"scripted create_agent run: {args.steps} tool turns ({steps} governed steps), "
        f"{args.runs} interleaved rounds, {len(POLICIES)} policies, buffered SQLite audit"
    )
    print(
        "  mode         wall median   wall ratio (median of rounds)   CPU median   wall per step"
        "   CPU over baseline per step"
    )
    for m in modes:
        w, c, r = (statistics.median(x[m]) for x in (wall, cpu, ratios))
        per_step = "" if m == "ungoverned" else f"+{(w - base_wall) / steps * 1e6:6.0f} us"
        extra = ""
        if m in _BASELINE:
            extra = (
                f"   +{statistics.median(over[m]) * 1e6:5.0f} us over {_BASELINE[m]}"
                f" (wall +{statistics.median(over_wall[m]) * 1e6:.0f} us)"
            )
        print(f"  {m:<11} {w * 1e3:9.1f} ms   {r:5.2f}x   {c * 1e3:22.1f} ms   {per_step}{extra}")
    print(f"  charter_templates.resolve: {resolve_cost():.0f} us per call (once per tool call)")
    print(f"  a new audit store, once per process: +{opening * 1e3:.1f} ms CPU on its first run")


if __name__ == "__main__":
    main()
