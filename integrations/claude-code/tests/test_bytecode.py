"""Bytecode: the hook's modules are compiled at install, not on every tool call.

A hook process that finds no bytecode for Charter and cannot write it (PYTHONDONTWRITEBYTECODE,
a folder it cannot write) compiles every module it imports from source on each tool call.
`charter claude install` writes the bytecode ahead (see test_doctor for the install and the
doctor's warning); these tests check what is found and written.
"""

from __future__ import annotations

import sys
from pathlib import Path

from charter_claude_code._bytecode import compile_hook_bytecode, hook_sources, uncompiled


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
