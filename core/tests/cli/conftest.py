"""The `charter` command run as a real subprocess, on real files and real SQLite stores.

Every run gets an environment without CHARTER_* variables (a developer's shell must not change
a test) plus whatever the test adds. `demo_run` runs `charter demo` once per session into its
own directory; tests that modify a store work on a copy (`demo_copy`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# Fails any test in which Charter swallowed an internal error in this process.
from charter.testing import charter_internal_errors  # noqa: F401

EXECUTABLE = Path(sys.executable).parent / "charter"
# Each run is a new interpreter: let them share compiled bytecode, kept outside the tree.
PYCACHE = Path(tempfile.gettempdir()) / f"charter-cli-tests-pycache-{os.getuid()}"


@dataclass(frozen=True)
class Run:
    """One finished `charter` process."""

    code: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"exit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}"


def run_charter(
    *args: str, cwd: Path, env: dict[str, str] | None = None, stdin: str | None = None
) -> Run:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CHARTER_")}
    clean.pop("PYTHONDONTWRITEBYTECODE", None)
    clean["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    clean.update(env or {})
    done = subprocess.run(
        [str(EXECUTABLE), *args],
        cwd=cwd,
        env=clean,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=180,
    )
    return Run(done.returncode, done.stdout, done.stderr)


class Cli:
    """`cli(*args, env=..., stdin=..., cwd=...)` runs the charter command (in `tmp_path` by
    default); `cli.all(call, ...)` runs independent calls at once, each an args tuple or an
    (args, kwargs) pair, and returns their results in order."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def __call__(self, *args: str, **kwargs: Any) -> Run:
        return run_charter(*args, cwd=kwargs.pop("cwd", self.cwd), **kwargs)

    def all(self, *calls: Any) -> list[Run]:
        def one(call: Any) -> Run:
            if call and isinstance(call[-1], dict):
                return self(*call[0], **call[1])
            return self(*call)

        with ThreadPoolExecutor(max_workers=4) as pool:
            return list(pool.map(one, calls))


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


@dataclass(frozen=True)
class DemoRun:
    """`charter demo` run once in `directory` with the default store."""

    directory: Path
    run: Run

    @property
    def store(self) -> Path:
        return self.directory / ".charter" / "audit.db"


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    directory = tmp_path_factory.mktemp("demo")
    return DemoRun(directory, run_charter("demo", cwd=directory))


@pytest.fixture
def demo_copy(demo_run: DemoRun, tmp_path: Path) -> Path:
    """A private copy of the demo's store (to tamper with), as a .db path."""
    copy = tmp_path / "copy.db"
    shutil.copy(demo_run.store, copy)
    for suffix in ("-wal", "-shm"):
        extra = demo_run.store.with_name(demo_run.store.name + suffix)
        if extra.exists():
            shutil.copy(extra, copy.with_name(copy.name + suffix))
    return copy


@pytest.fixture(scope="session")
def signed_demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One demo trail whose heads were signed, its checkpoint file kept elsewhere."""
    base = tmp_path_factory.mktemp("signed")
    keys = base / "keys"
    keys.mkdir(mode=0o700)
    (base / "outside").mkdir()
    made = run_charter("keys", "create", str(keys / "signing"), cwd=base)
    assert made.code == 0, made
    paths = {
        "key": keys / "signing",
        "public": keys / "signing.pub",
        "store": base / "audit.db",
        "checkpoints": base / "outside" / "checkpoints.jsonl",
    }
    demo = run_charter(
        "demo",
        "--store",
        str(paths["store"]),
        "--signing-key",
        str(paths["key"]),
        "--checkpoint-file",
        str(paths["checkpoints"]),
        cwd=base,
    )
    assert demo.code == 0, demo
    assert f"charter verify --store sqlite:///{paths['store']} --key {paths['key']}.pub" in demo.out
    return paths


POLICY = """\
name: cli-test
version: 1
policies:
  - name: no-rm
    description: Recursive deletes are not for agents.
    rule_type: field_matches
    severity: critical
    match: {kinds: [step.exec]}
    params: {field: input.command, pattern: 'rm\\s+-rf'}
  - name: curl-warns
    rule_type: field_matches
    severity: medium
    match: {kinds: [step.exec]}
    params: {field: input.command, pattern: 'curl'}
"""


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policies.yaml"
    path.write_text(POLICY)
    return path
