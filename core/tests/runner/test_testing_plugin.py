"""charter.testing fails a test in which Charter swallowed an internal error."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import charter.testing

_TESTS = textwrap.dedent(
    """
    import pytest
    import charter
    from charter._runtime.internal import report_internal_error

    def test_swallows():
        report_internal_error(RuntimeError("swallowed on purpose"), "demo")

    def test_swallowed_in_the_background(tmp_path):
        (tmp_path / "afile").write_text("x")
        gov = charter.Governor(policies=[], audit_location=f"sqlite:///{tmp_path}/afile/a.db")
        with gov.task():
            pass

    @pytest.mark.allow_internal_errors
    def test_allowed():
        report_internal_error(RuntimeError("expected"), "demo")

    def test_clean():
        assert charter.testing.swallowed_errors(10**9) == []
    """
)


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_demo.py").write_text(_TESTS)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "charter.testing",
            "-p",
            "no:cacheprovider",
            "--strict-markers",
            "-q",
            "-rA",
            "test_demo.py",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


def test_a_swallowed_error_fails_the_test_unless_marked(tmp_path: Path) -> None:
    done = _pytest(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "ERROR test_demo.py::test_swallows" in out
    assert "ERROR test_demo.py::test_swallowed_in_the_background" in out
    assert "Charter swallowed 1 internal error(s)" in out
    assert "in demo: RuntimeError: swallowed on purpose" in out
    assert "PASSED test_demo.py::test_allowed" in out
    assert "PASSED test_demo.py::test_clean" in out
    assert "ERROR test_demo.py::test_allowed" not in out


def test_the_module_api() -> None:
    assert charter.testing.__all__ == [
        "CONTRACT_TOOL",
        "ContractAdapter",
        "IntegrationContract",
        "OtlpReceiver",
        "PairedIntegrationContract",
        "ToolRun",
        "charter_internal_errors",
        "pytest_configure",
        "recorded",
        "refused_writes",
        "swallowed_errors",
    ]
