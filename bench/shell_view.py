"""Cost of the parsed shell view: parse and judge per command, and what it adds to a hook.

    uv run python bench/shell_view.py [--repeat 20]

Prints, over the command lines of the coding-agent corpora (packages/baseline/tests):
- parse p50/p99 per command line (`charter._policy.shell.analyse`, cache bypassed),
- parse + judge p50/p99: the parse plus every `shell_command` policy of `coding-agent`
  judging it (the rule functions with their prepared params, as the engine calls them),
- parse + judge again as each line's median over the repeats (stalls of a busy machine
  removed), whose p99 is the cost of the slowest lines,
- the whole `coding-agent` baseline evaluated by a PolicyEngine on a Bash step built by
  `charter.integration.tool_step` (view built, parse cache cleared before each step),
- the import cost of the parser and the rule in a fresh interpreter that imports
  ``charter.integration`` and ``charter.rules`` as the hook does (``-X importtime`` self
  time, median over runs; the stdlib modules they use are on the hook path already), which
  is what a fresh Claude Code hook process pays for them, and the first parse in that fresh
  process (cold code paths).

Timings are wall time on this machine; the load average is printed: figures taken on a busy
machine are only comparable with each other.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "packages" / "baseline" / "tests"))


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _show(label: str, samples: list[float]) -> None:
    print(
        f"  {label:<46} p50 {statistics.median(samples) * 1e6:8.1f} us"
        f"  p99 {_pct(samples, 0.99) * 1e6:8.1f} us  max {max(samples) * 1e6:8.1f} us"
        f"  (n={len(samples)})"
    )


def _commands() -> list[str]:
    from corpus_hostile import HOSTILE
    from corpus_ordinary import ORDINARY

    out: list[str] = list(ORDINARY)
    for case in HOSTILE:
        steps = case if isinstance(case, tuple) and not isinstance(case[1], dict) else (case,)
        out.extend(s for s in steps if isinstance(s, str))
    return out


def _shell_policies() -> list[tuple[Any, Any]]:
    """(rule function, prepared params) of every shell_command condition in coding-agent."""
    from charter.rules import get_rule
    from charter_baseline import load_baseline_policies

    spec = get_rule("shell_command")
    found: list[tuple[Any, Any]] = []

    def walk(rule_type: str, params: Any) -> None:
        if rule_type == "shell_command":
            found.append((spec.fn, spec.prepare(dict(params)) if spec.prepare else params))
        for c in params.get("conditions", ()) if isinstance(params, dict) else ():
            walk(c["rule_type"], c.get("params", {}))

    for p in load_baseline_policies("coding-agent"):
        walk(p.rule_type, dict(p.params))
    return found


def bench_parse(commands: list[str], repeat: int) -> None:
    from charter import Behavior, EvalContext, PolicyEngine
    from charter._model.context import RuleContext
    from charter._policy.shell import analyse
    from charter.integration import tool_step
    from charter_baseline import load_baseline_policies

    parse = analyse.__wrapped__
    policies = _shell_policies()
    engine = PolicyEngine(load_baseline_policies("coding-agent"))
    context = EvalContext(agent_id="bench", task_id="t", project_root="/srv/shop")
    parse_t: list[float] = []
    judge_t: list[float] = []
    whole_t: list[float] = []
    view_t: list[float] = []
    sample = Behavior(
        agent_id="bench", task_id="t", kind="step.exec", step_name="Bash", action_id="a0",
        input={"command": "ls"},
    )  # fmt: skip
    rctx = RuleContext(context, None)  # type: ignore[arg-type]  # shell_command reads no history
    for _ in range(repeat):
        for i, text in enumerate(commands):
            t = time.perf_counter()
            parse(text)
            parse_t.append(time.perf_counter() - t)
            b = sample.replace(input={"command": text})
            analyse.cache_clear()
            t = time.perf_counter()
            for fn, params in policies:
                fn(b, params, rctx)
            judge_t.append(time.perf_counter() - t)
            analyse.cache_clear()
            t = time.perf_counter()
            step = tool_step("claude_code", "Bash", {"command": text}, kind="step.exec")
            view_t.append(time.perf_counter() - t)
            b = sample.replace(input=step.input, properties=step.properties, action_id=f"a{i}")
            analyse.cache_clear()
            t = time.perf_counter()
            engine.evaluate(b, context)
            whole_t.append(time.perf_counter() - t)
    # the median of each line over the repeats: a busy machine's stalls drop out, what a
    # line itself costs stays (the worst lines are the ones p99 describes)
    n = len(commands)
    per_line = [statistics.median(judge_t[i::n]) for i in range(n)]
    print(f"per command line ({n} lines x {repeat}):")
    _show("parse (analyse, uncached)", parse_t)
    _show(f"parse + judge ({len(policies)} shell_command conditions)", judge_t)
    _show("tool_step with the view (parse + view)", view_t)
    _show("whole coding-agent baseline (engine.evaluate)", whole_t)
    _show("parse + judge, each line's median over repeats", per_line)


def bench_import(runs: int) -> None:
    # bytecode as an installed package has it (the workspace sets PYTHONDONTWRITEBYTECODE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="charter-bench-pycache-")
    mods = ("charter._policy.shell", "charter._policy.rules.shell")
    found: dict[str, list[float]] = {m: [] for m in mods}
    first: list[float] = []
    code = (
        "import time, charter.integration, charter.rules; "
        "from charter._policy.shell import analyse; "
        "t=time.perf_counter(); analyse('cd src && git diff | grep -n rm > /tmp/x'); "
        "print('first', time.perf_counter()-t)"
    )
    for i in range(runs + 1):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            capture_output=True,
            env=env,
            text=True,
        )
        if i == 0:
            continue  # warms the bytecode cache
        for line in done.stderr.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) == 3 and parts[2] in found:
                # self time: what the module itself costs; the stdlib modules it imports
                # (dataclasses, posixpath, functools) are loaded by the hook path anyway
                found[parts[2]].append(int(parts[0].split(":")[1]) / 1e6)
        for line in done.stdout.splitlines():
            if line.startswith("first"):
                first.append(float(line.split()[1]))
    print(f"fresh process (n={runs}, -X importtime, bytecode cached):")
    total = 0.0
    for mod, samples in found.items():
        if samples:
            total += statistics.median(samples)
            print(f"  import {mod:<40} self p50 {statistics.median(samples) * 1e3:6.2f} ms")
    print(f"  {'import cost added by the view and the rule':<47} {total * 1e3:6.2f} ms")
    if first:
        print(f"  {'first parse in a fresh process':<47} {statistics.median(first) * 1e6:6.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    commands = _commands()
    bench_parse(commands, args.repeat)
    bench_import(args.runs)


if __name__ == "__main__":
    main()
