"""Fixtures of the report tests: `charter report` run as a real subprocess, on the store of a
real `charter demo` run and on a store written by a real Governor with hostile text in every
place an agent controls, a failed step, and framework ids that nest."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from charter import BlockedError, Governor, PolicyWarning

# Fails any test in which Charter swallowed an internal error in this process.
from charter.testing import charter_internal_errors  # noqa: F401

EXECUTABLE = Path(sys.executable).parent / "charter"


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


def charter_cli(*args: str, cwd: Path) -> Run:
    """The charter command in a fresh process, without the caller's CHARTER_* variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHARTER_")}
    done = subprocess.run(
        [str(EXECUTABLE), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180
    )
    return Run(done.returncode, done.stdout, done.stderr)


@dataclass(frozen=True)
class Built:
    """A report written by `charter report` from a store."""

    store: Path
    html: Path
    run: Run


@pytest.fixture
def charter() -> Any:
    """`charter(*args, cwd=...)` runs the charter command in a fresh process."""
    return charter_cli


@pytest.fixture
def hostile() -> list[str]:
    """The hostile strings `hostile_report`'s records carry."""
    return list(HOSTILE)


@pytest.fixture(scope="session")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """`charter demo` run once, then `charter report` on its store."""
    directory = tmp_path_factory.mktemp("report-demo")
    demo = charter_cli("demo", cwd=directory)
    assert demo.code == 0, demo
    run = charter_cli("report", "-o", "report.html", cwd=directory)
    return Built(directory / ".charter" / "audit.db", directory / "report.html", run)


@pytest.fixture(scope="session")
def hostile_report(tmp_path_factory: pytest.TempPathFactory) -> Built:
    directory = tmp_path_factory.mktemp("report-hostile")
    store = hostile_store(directory)
    run = charter_cli("report", "--store", str(store), "-o", "hostile.html", cwd=directory)
    return Built(store, directory / "hostile.html", run)


HOSTILE = [
    "</script><script>window.__pwned = 1</script>",
    '<img src=x onerror="window.__pwned = 2">',
    "<!-- <script>window.__pwned = 3</script>",
    "\u2028\u2029 & &amp; <b>bold</b>",
]

POLICIES = [
    {
        "name": "no-rm",
        "rule_type": "field_matches",
        "severity": "critical",
        "match": {"kinds": ["step.exec"]},
        "params": {"field": "input.command", "pattern": "rm -rf"},
    },
    {
        "name": "curl-warns",
        "rule_type": "field_matches",
        "severity": "medium",
        "match": {"kinds": ["step.exec"]},
        "params": {"field": "input.command", "pattern": "curl"},
    },
]


def hostile_store(directory: Path) -> Path:
    """A SQLite store with one task whose records carry `HOSTILE` text in names, inputs,
    outputs, properties, error messages and reasons; a blocked step; a failed step whose
    error is a hostile string; steps nested in a run, a crew task and a graph node."""
    path = directory / "hostile.db"
    warnings.simplefilter("ignore", PolicyWarning)
    gov = Governor(policies=POLICIES, audit_location=f"sqlite:///{path}", audit_durability="sync")
    with gov.task("hostile-task", name="hostile_session", input={"prompt": HOSTILE[0]}):
        with gov.step(
            "step.exec",
            name="bash",
            input={"command": "echo " + HOSTILE[0], "note": HOSTILE[1]},
            properties={"framework": {"name": "test", "node": HOSTILE[3]}},
        ) as step:
            step.output = {"stdout": HOSTILE[2]}
        with gov.step(
            "step.exec",
            name="bash",
            input={"command": "curl " + HOSTILE[1]},
            properties={
                "framework": {
                    "name": "test",
                    "run_id": "run-tool",
                    "parent_run_id": "run-agent",
                    "crew": "research crew",
                    "task": "write the summary",
                }
            },
        ) as step:
            step.output = {"stdout": "ok"}
        with pytest.raises(BlockedError):
            gov.begin_step("step.exec", name="bash", input={"command": "rm -rf " + HOSTILE[0]})
        with (
            pytest.raises(RuntimeError),
            gov.step("step.exec", name="deploy", input={"to": "prod"}),
        ):
            raise RuntimeError("deploy failed: " + HOSTILE[1])
    gov.close()
    return path
