"""The public surface: exactly `__all__`, and a missing framework names the install command."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import charter
import charter_langchain


def test_all_is_exactly_the_public_names() -> None:
    public = {n for n in dir(charter_langchain) if not n.startswith("_")}
    public -= {"annotations", "importlib", "TYPE_CHECKING", "Any"}
    assert set(charter_langchain.__all__) == {
        "BlockedStepError",
        "CharterCallbackHandler",
        "CharterMiddleware",
    }
    assert public == set(charter_langchain.__all__)
    for name in charter_langchain.__all__:
        assert getattr(charter_langchain, name).__module__.startswith("charter_langchain._")


def test_blocked_step_error_is_a_charter_blocked_error() -> None:
    err = charter_langchain.BlockedStepError("blocked: no", step_name="rm", kind="step.exec")
    assert isinstance(err, charter.BlockedError) and isinstance(err, PermissionError)
    assert (err.reason, err.step_name, err.kind) == ("blocked: no", "rm", "step.exec")


def _import_without(module: str, name: str) -> subprocess.CompletedProcess[str]:
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules[{module!r}] = None  # as if it were not installed
        import charter_langchain
        try:
            charter_langchain.{name}
        except ImportError as exc:
            print("ImportError:", exc)
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )


def test_a_missing_framework_names_the_install_command() -> None:
    out = _import_without("langchain_core", "CharterCallbackHandler").stdout
    assert "ImportError:" in out and "pip install charter-langchain" in out
    out = _import_without("langchain", "CharterMiddleware").stdout
    assert "needs langchain" in out and "pip install charter-langchain" in out
