"""Sync durability is write-ahead: an allowed step's intent is in the store before the step
runs, and a store that cannot take it blocks the step (Governor sync and async, the Gate,
whatever the fail mode). Errors name the store that failed, not the configured location."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from charter import AuditError, BlockedError, Governor, Runner
from charter._audit.base import is_intent_record
from charter._audit.sqlite import SQLiteStore
from charter.integration import Allowed, Blocked, Gate


def _sync(store: SQLiteStore, **settings: Any) -> Governor:
    return Governor(Runner(policies=[], audit_durability="sync", store=store, **settings))


def _intents(store: SQLiteStore, task: str) -> list[dict[str, Any]]:
    return [r for r in store.read_task(task, "default") if is_intent_record(r)]


def test_an_allowed_steps_intent_is_in_the_store_before_it_runs(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "elsewhere.db")
    gov = _sync(store)
    reader = SQLiteStore(tmp_path / "elsewhere.db")
    try:
        with gov.task("t"), gov.step("step.exec", name="bash", input={"command": "ls"}) as step:
            # Another connection sees the intent while the step is running.
            (intent,) = [r for r in reader.read_task("t", "default") if is_intent_record(r)]
            assert intent["action_id"] == step.action_id
            assert intent["output"] is None and intent["input"] == {"command": "ls"}
            assert intent["meta"]["charter.eval"]["decision"] == "allow"
            step.output = {"files": 3}
        records = reader.read_task("t", "default")
        assert [(r["seq"], r["kind"], is_intent_record(r)) for r in records] == [
            (1, "task.start", False),
            (2, "step.exec", True),
            (3, "step.exec", False),
            (4, "task.end", False),
        ]
        assert records[2]["meta"]["charter.outcome"] == "ok"
        assert reader.verify().ok
        # Another process continues the chain after the intent (not over it), and intent
        # records never enter the history the policies see.
        other = Runner(policies=[], audit_durability="sync", store=SQLiteStore(tmp_path / "b.db"))
        try:
            other.restore_task(records[:2])
            assert [b.seq for b in other.engine.get_history("t")] == [1]
            assert other._next_seq("t") == 3
        finally:
            other.close(5)
    finally:
        gov.close(5)
        reader.close()
        store.close()


@pytest.mark.allow_internal_errors
@pytest.mark.parametrize("fail_mode", ["closed", "open"])
def test_a_store_that_dies_mid_task_blocks_the_next_step_before_it_runs(
    tmp_path: Path, fail_mode: str
) -> None:
    store = SQLiteStore(tmp_path / "elsewhere.db")
    gov = _sync(store, fail_mode=fail_mode)
    ran: list[str] = []
    try:
        task = gov.start_task("t")
        with gov.step("step.exec", name="bash", input={"command": "ls"}, task_id=task):
            ran.append("ls")
        store.close()  # the store dies
        deploy = gov.step("step.exec", name="bash", input={"command": "make deploy"}, task_id=task)
        with pytest.raises(BlockedError) as refused, deploy:
            ran.append("deploy")
        assert ran == ["ls"]
        reason = str(refused.value)
        assert "intent could not be recorded in audit store" in reason
        assert store.location in reason and ".charter" not in reason
        with pytest.raises(AuditError, match=r"elsewhere\.db"):
            gov.end_task(task)
    finally:
        gov.close(1)


@pytest.mark.allow_internal_errors
def test_async_steps_are_blocked_too_when_the_store_dies(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "elsewhere.db")
    gov = _sync(store)
    ran: list[str] = []

    async def agent() -> None:
        task = await gov.astart_task("t")
        store.close()
        deploy = gov.step("step.exec", name="bash", input={"command": "make deploy"}, task_id=task)
        with pytest.raises(BlockedError, match="intent could not be recorded"):
            async with deploy:
                ran.append("deploy")

    try:
        asyncio.run(agent())
        assert ran == []
    finally:
        gov.close(1)


@pytest.mark.allow_internal_errors
@pytest.mark.parametrize("fail_mode", ["closed", "open"])
def test_the_gate_blocks_a_step_whose_intent_cannot_be_recorded(
    tmp_path: Path, fail_mode: str
) -> None:
    store = SQLiteStore(tmp_path / "elsewhere.db")
    gate = Gate("test", governor=_sync(store, fail_mode=fail_mode))
    try:
        task = gate.start_task("t", "run")
        assert isinstance(task, str)
        step = gate.tool_step("bash", {"command": "ls"})
        allowed = gate.decide(step, task)
        assert isinstance(allowed, Allowed) and allowed.handle is not None
        gate.complete(allowed.handle, {"ok": True})
        store.close()
        decided = gate.decide(gate.tool_step("bash", {"command": "make deploy"}), task)
        assert isinstance(decided, Blocked), decided
        assert "intent could not be recorded" in decided.reason
        assert store.location in decided.reason

        async def again() -> Any:
            return await gate.adecide(gate.tool_step("bash", {"command": "rm x"}), task)

        assert isinstance(asyncio.run(again()), Blocked)
    finally:
        gate.governor.close(1)


@pytest.mark.allow_internal_errors
def test_an_outcome_that_cannot_be_stored_names_the_store_that_failed(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "elsewhere.db")
    gov = _sync(store)  # audit_location is left at its default, which is not this store
    try:
        task = gov.start_task("t")
        handle = gov.begin_step("step.exec", name="bash", input={"command": "ls"}, task_id=task)
        store.close()
        with pytest.raises(AuditError) as failed:
            handle.complete({"ok": True})
        assert store.location in str(failed.value)
        assert gov.runner.settings.audit_location not in str(failed.value)
    finally:
        gov.close(1)
