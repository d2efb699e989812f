"""Bytecode: the hook's modules are compiled at install, not on every tool call.

A hook process that finds no bytecode for Charter and cannot write it (PYTHONDONTWRITEBYTECODE,
a folder it cannot write) compiles every module it imports from source on each tool call.
`charter claude install` writes the bytecode ahead, and doctor says when it is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from charter_claude_code import install_hooks
from charter_claude_code._bytecode import compile_hook_bytecode, hook_sources, uncompiled
from charter_claude_code._cli import claude as claude_cli
from click.testing import CliRunner


def _package(tmp_path: Path) -> list[str]:
    pkg = tmp_path / "src" / "probe_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n", encoding="utf-8")
    (pkg / "helpers.py").write_text("def f():\n    return 2\n", encoding="utf-8")
    return [str(pkg / "__init__.py"), str(pkg / "helpers.py")]


def test_compiling_writes_current_bytecode_even_when_imports_would_not(tmp_path, monkeypatch):
    sources = _package(tmp_path)
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert uncompiled(sources) == sources
    assert compile_hook_bytecode(sources) == (2, [])
    assert uncompiled(sources) == []
    assert compile_hook_bytecode(sources) == (0, [])  # nothing left to do
    # An edited source makes its bytecode stale: it is found and compiled again.
    Path(sources[1]).write_text("def f():\n    return 3  # changed\n", encoding="utf-8")
    assert uncompiled(sources) == [sources[1]]
    assert compile_hook_bytecode(sources) == (1, [])


def test_a_module_whose_bytecode_the_import_system_can_write_is_not_reported(tmp_path, monkeypatch):
    sources = _package(tmp_path)
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert uncompiled(sources) == []  # the first import writes it


def test_a_file_that_cannot_be_written_is_named_and_the_rest_compiled(tmp_path, monkeypatch):
    sources = _package(tmp_path)
    cache = tmp_path / "cache"
    monkeypatch.setattr(sys, "pycache_prefix", str(cache))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    # A file where the bytecode's folder must go: no user, root included, can write there.
    cache.mkdir()
    blocked = Path(f"{cache}{Path(sources[0]).parent}")
    blocked.parent.mkdir(parents=True)
    blocked.write_text("not a folder", encoding="utf-8")
    compiled, failed = compile_hook_bytecode(sources)
    assert compiled == 0 and [f for f, _ in failed] == sources
    assert uncompiled(sources) == sources


def test_the_hook_packages_are_found():
    names = {Path(s).parent.name for s in hook_sources()}
    assert {"charter", "charter_claude_code", "charter_templates", "re2"} <= names


def _doctor(project, settings, env):
    out = CliRunner().invoke(
        claude_cli,
        ["doctor", "--project-dir", str(project), "--settings-file", str(settings)],
        env=env,
    )
    return out.exit_code, out.output


def test_install_compiles_what_the_hook_could_not_and_doctor_says_so(
    project, policy, hook_env, tmp_path
):
    # The hook's environment forbids writing bytecode and reads it from an empty prefix: as
    # after an install that compiled nothing, in a container that sets the variable.
    env = {**hook_env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(tmp_path / "bc")}
    settings = project / ".claude" / "settings.json"
    install_hooks(settings, policy_files=[policy])
    code, text = _doctor(project, settings, env)
    assert code == 0, text
    assert "warn bytecode:" in text and "every tool call compiles them from source" in text

    charter = shutil.which("charter", path=os.path.dirname(sys.executable))
    done = subprocess.run(
        [
            *(charter, "claude", "install", "--project-dir", str(project)),
            *("--settings-file", str(settings), "--policy", str(policy)),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "compiled the bytecode of" in done.stdout
    code, text = _doctor(project, settings, env)
    assert code == 0, text
    assert "bytecode" not in text
