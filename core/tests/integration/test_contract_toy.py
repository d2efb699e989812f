"""The conformance kit on the toy framework: the kit itself is checked here, and so is the
README's example integration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from charter import Governor
from charter.testing import CONTRACT_TOOL, IntegrationContract, ToolRun

from .toy import ToyAgent, govern


class ToyAdapter:
    def run_tool(self, governor: Governor, args: dict[str, Any], approve: bool) -> ToolRun:
        run = ToolRun()

        def probe(**kwargs: Any) -> str:
            run.calls.append(kwargs)
            return "probed"

        agent = ToyAgent({CONTRACT_TOOL: probe}, [(CONTRACT_TOOL, args)])
        govern(agent, "toy-run-1", governor=governor)
        try:
            seen = agent.run("probe once")
        except Exception as exc:
            run.error = exc
            return run
        refusals = [s for s in seen if s != "probed"]
        run.refusal = refusals[0] if refusals else None
        return run


class TestToyContract(IntegrationContract):
    @pytest.fixture
    def adapter(self) -> ToyAdapter:
        return ToyAdapter()


_BROKEN = """
import pytest
from charter.testing import IntegrationContract, ToolRun

class Adapter:
    def run_tool(self, governor, args, approve):
        return ToolRun(calls=[args])  # runs the tool without asking Charter

class TestBroken(IntegrationContract):
    @pytest.fixture
    def adapter(self):
        return Adapter()
"""


def test_the_kit_fails_an_integration_that_does_not_gate(tmp_path: Path) -> None:
    (tmp_path / "test_broken.py").write_text(_BROKEN)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "charter.testing",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rA",
            "test_broken.py",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    # Only the fail-open half of the fault contract and the store contract (whose outcome is
    # "the step runs") hold for an integration that never gates.
    assert (
        "PASSED test_broken.py::TestBroken::"
        "test_an_internal_error_while_deciding_follows_the_one_rule[open]" in out
    )
    assert "6 failed, 2 passed" in out, out
