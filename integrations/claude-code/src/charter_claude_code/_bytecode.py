"""Bytecode for the hook's own code, compiled at install instead of on every tool call.

A hook process lives for one tool call, so what it imports is paid on each one. Python
compiles a module's source the first time it is imported and keeps the bytecode next to it
(or under ``PYTHONPYCACHEPREFIX``); an installer that does not compile (uv without
``--compile-bytecode``) leaves that to the first hook call. When that call cannot write it
(``PYTHONDONTWRITEBYTECODE`` is set, as in many container images, or the folder belongs to
another user), every later call compiles Charter from source again: about four times the
time of a call with bytecode. `compile_hook_bytecode` (run by ``charter claude install``)
writes it ahead; `uncompiled` (reported by ``charter claude doctor``) finds what would stay
uncompiled.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["HOOK_PACKAGES", "compile_hook_bytecode", "hook_sources", "uncompiled"]

#: The packages outside the standard library whose modules a hook call imports (YAML for a
#: policy file that is not pinned).
HOOK_PACKAGES = (
    "charter",
    "charter_baseline",
    "charter_claude_code",
    "charter_templates",
    "re2",
    "yaml",
)


def hook_sources(packages: Iterable[str] = HOOK_PACKAGES) -> list[str]:
    """The ``.py`` files of the installed `packages` (one not installed is skipped)."""
    from importlib.util import find_spec

    found: list[str] = []
    for name in packages:
        spec = find_spec(name)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            continue
        if not spec.submodule_search_locations:
            found.append(spec.origin)
            continue
        for folder in spec.submodule_search_locations:
            for parent, dirs, files in os.walk(folder):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                found.extend(os.path.join(parent, f) for f in sorted(files) if f.endswith(".py"))
    return found


def _current(source: str) -> bool:
    """Whether the bytecode this interpreter reads for `source` exists and is for it: a
    timestamp-checked file with the source's mtime and size, or a hash-based one."""
    from importlib.util import MAGIC_NUMBER, cache_from_source

    try:
        st = os.stat(source)
        with open(cache_from_source(source), "rb") as f:
            head = f.read(16)
    except (OSError, ValueError, NotImplementedError):
        return False
    if len(head) < 16 or head[:4] != MAGIC_NUMBER:
        return False
    flags = int.from_bytes(head[4:8], "little")
    if flags & 1:
        return True  # hash-based: checked against the source by the import system itself
    mtime = int.from_bytes(head[8:12], "little")
    size = int.from_bytes(head[12:16], "little")
    return mtime == int(st.st_mtime) & 0xFFFFFFFF and size == st.st_size & 0xFFFFFFFF


def _writable(source: str) -> bool:
    """Whether the import system could write the bytecode of `source` when importing it."""
    from importlib.util import cache_from_source

    if sys.dont_write_bytecode:
        return False
    folder = os.path.dirname(cache_from_source(source))
    while not os.path.isdir(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            return False
        folder = parent
    return os.access(folder, os.W_OK)


def uncompiled(sources: Iterable[str] | None = None) -> list[str]:
    """The `sources` (default `hook_sources`) without current bytecode that importing will
    not write either: each hook call that imports one compiles it from source again."""
    chosen = hook_sources() if sources is None else sources
    return [s for s in chosen if not _current(s) and not _writable(s)]


def compile_hook_bytecode(
    sources: Iterable[str] | None = None,
) -> tuple[int, list[tuple[str, str]]]:
    """Write the bytecode of each of `sources` (default `hook_sources`) that has none
    current, where this interpreter reads it (``PYTHONDONTWRITEBYTECODE`` does not stop
    it); returns (files compiled, [(file, reason)] for each that could not be written).
    Never raises for a file: a failure leaves that module to compile on import."""
    import py_compile

    compiled = 0
    failed: list[tuple[str, str]] = []
    for source in hook_sources() if sources is None else sources:
        if _current(source):
            continue
        try:
            py_compile.compile(
                source,
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP,
            )
        except (OSError, py_compile.PyCompileError) as exc:
            failed.append((source, str(exc)))
            continue
        compiled += 1
    return compiled, failed
