"""Shared fixtures for the audit store tests: entry factories, stores, child processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from charter._audit.base import AuditStore
from charter._audit.location import open_store

EntryFactory = Callable[..., dict[str, Any]]
StoreFactory = Callable[..., AuditStore]


def _entry(
    task_id: str = "t1",
    kind: str = "step.exec",
    *,
    agent_id: str = "agent-a",
    n: int = 0,
    **fields: Any,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "agent_id": agent_id,
        "task_id": task_id,
        "action_id": f"act-{n}",
        "timestamp": f"2026-11-30T05:49:{n % 60:02d}.123456Z",
        "kind": kind,
        "verb": "tool.call",
        "step_name": "search",
        "input": {"query": f"q{n}", "limit": 5, "weights": [0.25, 1.5]},
        "output": {"hits": [{"title": "café ☕", "score": 0.30000000000000004}]},
        "properties": {"cost": 0.0012},
        "meta": None,
    }
    if kind in ("task.end", "task.error", "task.idle"):
        entry["meta"] = {"charter.chain": {"final": True}}
    entry.update(fields)
    return entry


@pytest.fixture
def make_entry() -> EntryFactory:
    """Factory for wire-form entries (without seq/prev_hash/hash)."""
    return _entry


@pytest.fixture(params=["sqlite", "jsonl", "postgresql"])
def store_kind(request: pytest.FixtureRequest) -> str:
    """Each readable store kind in turn."""
    return str(request.param)


@pytest.fixture(params=["sqlite", "jsonl"])
def file_kind(request: pytest.FixtureRequest) -> str:
    """Each store kind that lives in a file, in turn."""
    return str(request.param)


def _location_for(kind: str, directory: Path, name: str = "audit") -> str:
    if kind == "sqlite":
        return f"sqlite:///{directory / (name + '.db')}"
    return f"jsonl:///{directory / (name + '.jsonl')}"


@pytest.fixture
def location_for() -> Callable[..., str]:
    """location_for(kind, directory, name="audit"): a location URL for a file there."""
    return _location_for


@pytest.fixture
def location(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh location of the current store kind (for PostgreSQL, a fresh database)."""
    if store_kind == "postgresql":
        return str(request.getfixturevalue("postgresql_url"))
    return _location_for(store_kind, tmp_path)


@pytest.fixture
def store(location: str) -> Iterator[AuditStore]:
    """A fresh open store of the current kind, closed after the test."""
    opened = open_store(location)
    yield opened
    opened.close()


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start `python -c code args...` children; any still running are killed afterwards."""
    children: list[subprocess.Popen[str]] = []

    def start(code: str, *args: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        children.append(child)
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.communicate()
