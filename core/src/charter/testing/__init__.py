"""Test helpers for code that uses Charter (requires pytest).

Charter swallows its own errors on the recording path (a failing store or exporter must not
stop an agent) and only logs and counts them. In a test suite that would hide bugs, so this
module turns a swallowed error into a test failure. Enable it for a whole suite with one
line in ``conftest.py``::

    pytest_plugins = ["charter.testing"]

or import the fixture there (``from charter.testing import charter_internal_errors``), which
applies it to that directory. A test that expects Charter to swallow an error says so with
``@pytest.mark.allow_internal_errors`` (the plugin registers the marker).

It also holds the integration conformance kit: an integration's tests subclass
`IntegrationContract` (or `PairedIntegrationContract`) with an `adapter` fixture that drives
the real framework, and the contract suite checks blocks, allows, approvals, fail mode and
double recording against the audit trail.

`OtlpReceiver` is a real OTLP/HTTP traces receiver on loopback that decodes what an
`OtlpExporter` sends (it needs the ``otlp`` extra).
"""

from __future__ import annotations

import contextlib
import os
import typing

import pytest

from charter._runtime import internal as _internal
from charter._runtime import runner as _runner
from charter.testing._contract import (
    CONTRACT_TOOL,
    ContractAdapter,
    IntegrationContract,
    PairedIntegrationContract,
    ToolRun,
)
from charter.testing._otlp import OtlpReceiver

if typing.TYPE_CHECKING:
    from collections.abc import Iterator

    from charter._runtime.governor import Governor
    from charter._runtime.internal_error import InternalError

__all__ = [
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

_MARKER = "allow_internal_errors"
_FLUSH_SECONDS = 5.0


def recorded(governor: Governor) -> list[dict[str, typing.Any]]:
    """Every step outcome the Governor's agent has in its store, task by task in store order,
    once its writes are flushed and every chain verifies (an `AssertionError` says which
    check failed). Write-ahead intents (sync durability) are left out: each step's outcome
    is its record here."""
    from charter._audit.base import is_intent_record

    governor.flush(_FLUSH_SECONDS)
    store = governor.runner.store
    assert store is not None, "the Governor has no audit store"
    report = store.verify()
    assert report.ok, str(report)
    agent = governor.runner.agent_id
    return [
        r
        for task in store.list_tasks(agent)
        for r in store.read_task(task.task_id, agent)
        if not is_intent_record(r)
    ]


@contextlib.contextmanager
def refused_writes(path: str | os.PathLike[str]) -> Iterator[None]:
    """While the block runs, the SQLite audit store at `path` refuses every new record
    (a trigger aborts each insert with "the disk refused the write") while it still opens,
    answers health checks and reads: a store that fails on write, mid-run, for this process
    and for every other process using the file (a hook run as a subprocess). The file must
    be a Charter SQLite store already; the trigger is dropped on the way out."""
    import sqlite3

    conn = sqlite3.connect(os.fspath(path), timeout=30)
    try:
        conn.execute(
            "CREATE TRIGGER charter_testing_refused BEFORE INSERT ON steps "
            "BEGIN SELECT RAISE(ABORT, 'the disk refused the write'); END"
        )
        conn.commit()
        yield
    finally:
        conn.execute("DROP TRIGGER IF EXISTS charter_testing_refused")
        conn.commit()
        conn.close()


def swallowed_errors(since: int = 0) -> list[InternalError]:
    """The internal errors Charter swallowed in this process after serial `since`.

    Each has `serial`, `where`, `type`, `message` and `traceback`; pass the `serial` of an
    earlier one to see only what came after it.
    """
    return _internal.recent_internal_errors(since)


def pytest_configure(config: pytest.Config) -> None:
    """Register the opt-out marker (harmless when a project registers it too)."""
    config.addinivalue_line(
        "markers", f"{_MARKER}: the test expects Charter to swallow an internal error"
    )


@pytest.fixture(autouse=True)
def charter_internal_errors(request: pytest.FixtureRequest) -> Iterator[list[InternalError]]:
    """Fail the test if Charter swallowed an internal error during it.

    Yields the list of errors seen so far in the test (filled at teardown). Records still
    queued by open runners are flushed first, so an error in the background writer counts
    against the test that caused it. Tests marked ``allow_internal_errors`` may swallow.
    """
    start = _internal.internal_error_count()
    seen: list[InternalError] = []
    yield seen
    _runner.flush_live_runners(_FLUSH_SECONDS)
    seen.extend(_internal.recent_internal_errors(start))
    if seen and request.node.get_closest_marker(_MARKER) is None:
        lines = "\n".join(f"  - in {e.where}: {e.type}: {e.message}" for e in seen[:10])
        more = f"\n  (and {len(seen) - 10} more)" if len(seen) > 10 else ""
        pytest.fail(
            f"Charter swallowed {len(seen)} internal error(s) during this test:\n{lines}{more}\n"
            f"Mark the test @pytest.mark.{_MARKER} if that is expected.",
            pytrace=False,
        )
