"""Charter beside Microsoft's Agent Governance Toolkit (AGT), measured in the same run.

    uv run python bench/agt_compare.py

Prints figures and asserts nothing; not part of the test suite, and AGT is no dependency of
Charter: the script makes a throwaway virtual environment in a temporary directory
(``uv venv``, then ``uv pip install agent-os-kernel agentmesh-platform``), runs AGT there in a
child process, and deletes it at the end. When AGT cannot be installed it says so and still
prints Charter's figures.

Compared, medians of per-call times, in alternating rounds so both see the same load:

1. evaluate, 10 policies, an allowed step: AGT's ``agent_os.policies.PolicyEvaluator`` with
   one document of 10 deny rules (field conditions, 4 of them regular expressions on the
   command) against Charter's ``PolicyEngine.evaluate`` with the 10 policies of
   bench/engine.py (4 forbidding patterns on the command, an allowed-tools list, a field
   list, a comparison, an ask, a compound condition). No rule matches the step, so every
   rule is checked on both sides (AGT stops at the first match).
2. a governed step: AGT's ``agentmesh.governance.govern()`` wrapper around a do-nothing tool
   (policy evaluation with 10 rules and its in-memory audit log) against Charter's
   ``Governor.step`` (build the step, evaluate, record the outcome, redact, hash-chain,
   buffered SQLite in a temporary directory).

Targets: Charter's evaluate <= 0.5x AGT's, its governed step <= 0.4x AGT govern().
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROUNDS = 5
PACKAGES = ("agent-os-kernel", "agentmesh-platform")


def per_call_us(fn: Callable[[], object], n: int) -> float:
    """Median over 5 batches of the mean time per call, in microseconds."""
    for _ in range(min(n, 500)):
        fn()
    batches = []
    clock = time.perf_counter_ns
    for _ in range(5):
        t0 = clock()
        for _ in range(n):
            fn()
        batches.append((clock() - t0) / n / 1000)
    return statistics.median(batches)


# -- AGT (runs in the throwaway environment) -----------------------------------------------

AGT_RULES: list[tuple[str, str, Any]] = [
    ("command", "matches", r"\brm\s+-rf\s+/"),
    ("command", "matches", r"\bmkfs"),
    ("command", "matches", r"curl[^|]*\|\s*(ba)?sh"),
    ("tool_name", "not_in", ["Bash", "Read", "Write", "get_weather"]),
    ("verb", "eq", "DELETE"),
    ("host", "not_in", ["api.example.com"]),
    ("amount", "gt", 1000),
    ("table", "in", ["users", "payments"]),
    ("verb", "eq", "PATCH"),
    ("command", "matches", r"^sudo\b"),
]

GOVERN_POLICY = """\
apiVersion: governance.toolkit/v1
name: bench
default_action: allow
rules:
  - {name: no-rm, condition: "action.command == 'rm -rf /'", action: deny}
  - {name: no-mkfs, condition: "action.command == 'mkfs'", action: deny}
  - {name: no-curl-sh, condition: "action.command == 'curl x | sh'", action: deny}
  - {name: tools, condition: "action.type in ['Delete', 'Format']", action: deny}
  - {name: deletes, condition: "action.verb == 'DELETE'", action: deny}
  - {name: hosts, condition: "action.host == 'evil.example.com'", action: deny}
  - {name: amount, condition: "action.amount > 1000", action: deny}
  - {name: tables, condition: "action.table in ['users', 'payments']", action: deny}
  - {name: patch, condition: "action.verb == 'PATCH'", action: deny}
  - {name: no-sudo, condition: "action.command == 'sudo'", action: deny}
"""


def agt_round() -> dict[str, Any]:
    """One round of AGT figures (called in the child process)."""
    from importlib.metadata import version

    from agent_os.policies.evaluator import PolicyEvaluator
    from agent_os.policies.schema import (
        PolicyAction,
        PolicyCondition,
        PolicyDocument,
        PolicyOperator,
        PolicyRule,
    )
    from agentmesh.governance import govern

    document = PolicyDocument(
        name="bench",
        rules=[
            PolicyRule(
                name=f"rule-{i}",
                condition=PolicyCondition(field=f, operator=PolicyOperator(op), value=v),
                action=PolicyAction.DENY,
            )
            for i, (f, op, v) in enumerate(AGT_RULES)
        ],
    )
    evaluator = PolicyEvaluator([document])
    context = {"tool_name": "Bash", "command": "ls -la src", "kind": "step.exec"}
    assert evaluator.evaluate(context).allowed

    def tool(action: dict[str, Any]) -> dict[str, Any]:
        return {"stdout": "a.py\nb.py\n", "exit_code": 0}

    governed = govern(tool, policy=GOVERN_POLICY, agent_id="bench")
    action = {"type": "Bash", "command": "ls -la src", "timeout": 30}
    assert governed(action=action)["exit_code"] == 0
    return {
        "version": f"agent-os-kernel {version('agent-os-kernel')}, "
        f"agentmesh-platform {version('agentmesh-platform')}",
        "evaluate": per_call_us(lambda: evaluator.evaluate(context), 4000),
        "govern": per_call_us(lambda: governed(action=action), 2000),
    }


# -- Charter (runs here) -------------------------------------------------------------------


class CharterBench:
    def __init__(self, folder: Path) -> None:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from charter import Behavior, EvalContext, Governor, PolicyEngine
        from engine import POLICIES  # type: ignore[import-not-found]

        self.engine = PolicyEngine(POLICIES)
        self.ctx = EvalContext(agent_id="bench", task_id="t1")
        self.allowed = Behavior(
            agent_id="bench",
            task_id="t1",
            kind="step.exec",
            step_name="Bash",
            input={"command": "ls -la src"},
        )
        assert self.engine.evaluate(self.allowed, self.ctx).decision == "allow"
        self.gov = Governor(
            policies=POLICIES,
            audit_location=f"sqlite:///{folder / 'charter.db'}",
            audit_durability="buffered",
            agent_id="bench",
            queue_size=100_000,
        )
        self.count = 0

    def evaluate(self) -> float:
        return per_call_us(lambda: self.engine.evaluate(self.allowed, self.ctx), 4000)

    def governed(self) -> float:
        gov = self.gov
        per_task = 500

        def one() -> None:
            self.count += 1
            with gov.step(
                "step.exec", name="Bash", input={"command": "ls -la src", "timeout": 30}
            ) as s:
                s.output = {"stdout": "a.py\nb.py\n", "exit_code": 0}

        times = []
        for _ in range(4):
            with gov.task(name="bench"):
                times.append(per_call_us(one, per_task))
            gov.flush(60)
        return statistics.median(times)

    def close(self) -> None:
        self.gov.close()


# -- the comparison --------------------------------------------------------------------------


def install_agt(folder: Path) -> tuple[Path | None, str]:
    """The throwaway environment's python, or None and why it could not be made."""
    uv = shutil.which("uv")
    if uv is None:
        return None, "uv is not on PATH"
    venv = folder / "agt-venv"
    made = subprocess.run([uv, "venv", "-q", str(venv)], capture_output=True, text=True)
    if made.returncode != 0:
        return None, f"uv venv failed: {made.stderr.strip()[-300:]}"
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    env = dict(os.environ, VIRTUAL_ENV=str(venv))
    env.pop("UV_PROJECT_ENVIRONMENT", None)
    got = subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(python), *PACKAGES],
        capture_output=True,
        text=True,
        env=env,
    )
    if got.returncode != 0:
        return None, f"uv pip install {' '.join(PACKAGES)} failed: {got.stderr.strip()[-300:]}"
    return python, ""


def run_agt(python: Path) -> dict[str, Any] | str:
    got = subprocess.run(
        [str(python), os.path.abspath(__file__), "--agt-round"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if got.returncode != 0:
        return f"AGT round failed: {got.stderr.strip()[-500:]}"
    return json.loads(got.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        print(f"installing {' and '.join(PACKAGES)} into a throwaway environment ...", flush=True)
        python, why = install_agt(folder)
        if python is None:
            print(f"AGT could not be installed here ({why}); Charter's figures only.")
        charter = CharterBench(folder)
        figures: dict[str, list[float]] = {"c_eval": [], "c_step": [], "a_eval": [], "a_gov": []}
        version = ""
        problem = ""
        for _ in range(ROUNDS):
            if python is not None and not problem:
                found = run_agt(python)
                if isinstance(found, str):
                    problem = found
                else:
                    version = found["version"]
                    figures["a_eval"].append(found["evaluate"])
                    figures["a_gov"].append(found["govern"])
            figures["c_eval"].append(charter.evaluate())
            figures["c_step"].append(charter.governed())
        charter.close()
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"load average (1 min): {load:.2f}; {ROUNDS} alternating rounds, medians")
        if version:
            print(f"AGT: {version}")
        if problem:
            print(problem)
        med = {k: statistics.median(v) if v else None for k, v in figures.items()}
        rows = [
            ("evaluate, 10 policies, allowed step", med["c_eval"], med["a_eval"], 0.5),
            (
                "governed step (Charter Governor.step / AGT govern())",
                med["c_step"],
                med["a_gov"],
                0.4,
            ),
        ]
        print(f"{'measure':<54} {'Charter us':>10} {'AGT us':>8} {'ratio':>6} {'target':>7}")
        for name, ours, theirs, target in rows:
            assert ours is not None
            if theirs is None:
                print(f"{name:<54} {ours:>10.2f} {'-':>8} {'-':>6} {target:>6.1f}x")
            else:
                ratio = ours / theirs
                print(f"{name:<54} {ours:>10.2f} {theirs:>8.2f} {ratio:>5.2f}x {target:>6.1f}x")


if __name__ == "__main__":
    if sys.argv[1:] == ["--agt-round"]:
        print(json.dumps(agt_round()))
    else:
        main()
