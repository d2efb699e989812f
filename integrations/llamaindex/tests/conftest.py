"""Fixtures: Governors on real SQLite audit files, LlamaIndex agents driven by a scripted
function-calling LLM (LlamaIndex's own mock), tools that count their runs, and the audit
trail read back and verified."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import charter
import pytest
from charter.audit import is_intent_record
from charter.testing import charter_internal_errors  # noqa: F401  (autouse)

AGENT = "llama-bot"


@pytest.fixture
def governor(tmp_path: Path) -> Iterator[Callable[..., charter.Governor]]:
    """Builds a Governor on a fresh SQLite trail (sync durability); closes it after."""
    built: list[charter.Governor] = []

    def build(policies: list[dict[str, Any]] | None = None, **settings: Any) -> charter.Governor:
        settings.setdefault("audit_location", f"sqlite:///{tmp_path / 'audit.db'}")
        settings.setdefault("audit_durability", "sync")
        gov = charter.Governor(policies=policies or [], agent_id=AGENT, **settings)
        built.append(gov)
        return gov

    yield build
    for gov in built:
        gov.close(5.0)


def trail(gov: charter.Governor) -> list[dict[str, Any]]:
    """Every record of the governor's agent, oldest task first, after verifying the chains."""
    assert gov.flush(5.0)
    store = gov.runner.store
    assert store is not None
    assert store.verify().ok
    records: list[dict[str, Any]] = []
    for task in store.list_tasks(gov.runner.agent_id):
        records.extend(store.read_task(task.task_id, gov.runner.agent_id))
    # Outcomes only: sync durability also stores each allowed step's intent ahead of it.
    return [r for r in records if not is_intent_record(r)]


def steps(records: list[dict[str, Any]], kind: str | None = None) -> list[dict[str, Any]]:
    found = [r for r in records if not str(r["kind"]).startswith("task.")]
    return [r for r in found if kind is None or r["kind"] == kind]


def run(work: Any) -> Any:
    """Run a coroutine, or a callable returning an awaitable (a workflow's ``run`` must be
    called inside the event loop), to its end."""
    if asyncio.iscoroutine(work):
        return asyncio.run(work)

    async def main() -> Any:
        return await work()

    return asyncio.run(main())


BLOCK = {"rule_type": "deny", "severity": "critical"}
ASK = {"rule_type": "deny", "severity": "high", "action": "ask"}


def block(name: str, *step_names: str) -> dict[str, Any]:
    return {"name": name, **BLOCK, "match": {"step_names": list(step_names)}}


def ask(name: str, *step_names: str) -> dict[str, Any]:
    return {"name": name, **ASK, "match": {"step_names": list(step_names)}}
