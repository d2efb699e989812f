"""Dropped records leave gaps: seq is assigned when a step is recorded and never renumbered,
the next stored record of the chain declares the hole with its cause, and verify and status
report it. A full queue gives up lower-value records before blocked steps and boundaries."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import charter
import pytest
from charter import BlockedError, Governor, Runner, StoreError
from charter._audit.sqlite import SQLiteStore
from charter.audit import Gap

_NO_RM = {
    "name": "no-rm",
    "rule_type": "field_matches",
    "severity": "critical",
    "params": {"field": "input.command", "pattern": "rm -rf"},
}


class HeldStore(SQLiteStore):
    """A real SQLite store whose appends wait until `release` is set (a stalled disk)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.release = threading.Event()

    def append(self, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        self.release.wait(30)
        return super().append(entries)


class RefusingStore(SQLiteStore):
    """A real SQLite store that refuses every batch holding a step named `refused`."""

    def append(self, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        if any(e.get("step_name") == "refused" for e in entries):
            raise StoreError("audit store test refused the record: disk quota exceeded")
        return super().append(entries)


def _flood(gov: Governor, steps: int) -> tuple[list[int], int]:
    """`steps` allowed steps with a blocked one every 25th; returns (blocked seqs, end seq)."""
    blocked: list[int] = []
    with gov.task("flood"):
        for i in range(steps):
            if i % 25 == 24:
                with pytest.raises(BlockedError) as refused:
                    gov.begin_step("step.exec", name="bash", input={"command": "rm -rf /"})
                seq = refused.value.result.recorded_seq
                assert seq is not None
                blocked.append(seq)
            else:
                gov.begin_step("step.exec", name="bash", input={"command": f"echo {i}"}).complete()
        end = gov.runner.engine.next_seq("flood")
    return blocked, end


@pytest.mark.allow_internal_errors
def test_a_flood_on_a_full_queue_leaves_declared_gaps_and_keeps_blocks_and_boundaries(
    tmp_path: Path,
) -> None:
    store = HeldStore(tmp_path / "audit.db")
    runner = Runner(policies=[_NO_RM], queue_size=50, store=store)
    gov = Governor(runner)
    try:
        blocked, end_seq = _flood(gov, 500)
        status = gov.status()["queue"]
        assert status["dropped"] > 300
        store.release.set()
        assert gov.flush(30)
        records = store.read_task("flood", "default")
        stored = {r["seq"]: r for r in records}
        # Every blocked step and both boundaries were kept, although the queue overflowed.
        assert set(blocked) <= set(stored)
        assert all(stored[s]["meta"]["charter.outcome"] == "blocked" for s in blocked)
        assert stored[1]["kind"] == "task.start"
        assert stored[end_seq]["kind"] == "task.end"
        assert max(stored) == end_seq
        report = store.verify()
        assert report.ok, str(report)
        assert report.gaps and all(g.cause == "queue_full" for g in report.gaps)
        assert isinstance(report.gaps[0], Gap)
        # Stored records and declared gaps account for every seq exactly once.
        dropped = {s for g in report.gaps for s in range(g.first, g.last + 1)}
        assert not dropped & set(stored)
        assert dropped | set(stored) == set(range(1, end_seq + 1))
        assert report.dropped == runner.status()["queue"]["dropped"]
        assert runner.status()["queue"]["dropped_by_cause"] == {"queue_full": report.dropped}
        assert runner.status()["queue"]["gaps"] == []  # all declared in the store now
        assert f"{report.dropped} dropped in {len(report.gaps)} gaps (queue_full)" in str(report)
    finally:
        store.release.set()
        runner.close(10)
        store.close()


@pytest.mark.allow_internal_errors
def test_a_queue_full_of_blocked_steps_still_keeps_the_task_end_which_declares_the_rest(
    tmp_path: Path,
) -> None:
    # Blocked steps are of high value, so once they fill the queue nothing is evicted for
    # another one; the task's end takes the newest one's place: dropped, it would take the
    # gap declarations with it and the trail would end as if nothing were missing.
    store = HeldStore(tmp_path / "audit.db")
    runner = Runner(policies=[_NO_RM], queue_size=10, store=store, exit_flush_seconds=0.2)
    gov = Governor(runner)
    try:
        blocked: list[int] = []
        with gov.task("flood"):
            for _ in range(40):
                with pytest.raises(BlockedError) as refused:
                    gov.begin_step("step.exec", name="bash", input={"command": "rm -rf /"})
                seq = refused.value.result.recorded_seq
                assert seq is not None
                blocked.append(seq)
            end_seq = gov.runner.engine.next_seq("flood")
        store.release.set()
        assert gov.flush(30)
        stored = {r["seq"]: r for r in store.read_task("flood", "default")}
        assert stored[1]["kind"] == "task.start"
        assert stored[end_seq]["kind"] == "task.end"
        report = store.verify()
        assert report.ok, str(report)
        dropped = {s for g in report.gaps for s in range(g.first, g.last + 1)}
        assert dropped & set(blocked), "40 blocked steps fit a queue of 10"
        assert not dropped & set(stored)
        assert dropped | set(stored) == set(range(1, end_seq + 1))
        assert runner.status()["queue"]["gaps"] == []  # the task's end declared them all
    finally:
        store.release.set()
        runner.close(10)
        store.close()


@pytest.mark.allow_internal_errors
def test_a_record_the_store_refuses_leaves_a_gap_with_the_stores_reason(tmp_path: Path) -> None:
    store = RefusingStore(tmp_path / "audit.db")
    runner = Runner(policies=[], store=store)
    gov = Governor(runner)
    try:
        with gov.task("t"):
            gov.begin_step("step.exec", name="ls", input={}).complete()
            assert gov.flush(10)
            gov.begin_step("step.exec", name="refused", input={}).complete()
            assert gov.flush(10)
            pending = runner.status()["queue"]["gaps"]
            assert [(g["first"], g["last"], g["cause"]) for g in pending] == [(3, 3, "refused")]
            gov.begin_step("step.exec", name="pwd", input={}).complete()
        assert gov.flush(10)
        seqs = [r["seq"] for r in store.read_task("t", "default")]
        assert seqs == [1, 2, 4, 5]
        report = store.verify()
        assert report.ok, str(report)
        (gap,) = report.gaps
        assert (gap.first, gap.last, gap.cause, gap.declared_at) == (3, 3, "refused", 4)
        assert "disk quota exceeded" in gap.detail
        assert runner.status()["queue"]["dropped_by_cause"] == {"refused": 1}
    finally:
        runner.close(10)
        store.close()


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_a_store_keeps_the_writers_seq_and_refuses_one_not_above_its_head(
    tmp_path: Path, kind: str
) -> None:
    store = charter.open_store(
        f"{kind}:///{tmp_path / ('a.db' if kind == 'sqlite' else 'a.jsonl')}"
    )

    def entry(seq: int, **meta: Any) -> dict[str, Any]:
        return {
            "agent_id": "a",
            "task_id": "t",
            "seq": seq,
            "kind": "step.exec",
            "timestamp": "2026-12-01T00:00:00.000000Z",
            "meta": meta or None,
        }

    try:
        assert [r["seq"] for r in store.append([entry(1), entry(2)])] == [1, 2]
        with pytest.raises(StoreError, match="seq 2 is not above the chain's head seq 3"):
            store.append([entry(3), entry(2)])
        assert store.head("a", "t").seq == 2  # nothing of the refused batch was written
        gap = [{"first": 3, "last": 4, "cause": "queue_full", "detail": ""}]
        store.append([entry(5, **{"charter.gap": gap})])
        report = store.verify()
        assert report.ok and [(g.first, g.last) for g in report.gaps] == [(3, 4)], str(report)
        # A jump the next record does not declare exactly is still a break.
        store.append([entry(8, **{"charter.gap": [{**gap[0], "first": 6, "last": 6}]})])
        report = store.verify()
        assert not report.ok and report.breaks[0].seq == 8, str(report)
    finally:
        store.close()
