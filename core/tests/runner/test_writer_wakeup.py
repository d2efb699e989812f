"""The buffered writer: a waiting caller ends its linger at once; commits match the durability."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from charter import Governor, open_store
from charter._audit import sqlite as sqlite_store
from charter._audit.base import StoreError
from charter._audit.sqlite import SQLiteStore
from charter._runtime import writer
from charter._runtime.internal import internal_error_count, recent_internal_errors
from charter.testing import recorded

# SQLite's PRAGMA synchronous values.
_NORMAL, _FULL = 1, 2


def _pragma(store: object, name: str = "synchronous") -> int:
    assert isinstance(store, SQLiteStore)
    conn = store._conn
    assert isinstance(conn, sqlite3.Connection)
    return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


@pytest.mark.parametrize(("durability", "expected"), [("buffered", _NORMAL), ("sync", _FULL)])
def test_commits_are_full_for_sync_and_normal_for_buffered(
    tmp_path: Path, durability: str, expected: int
) -> None:
    gov = Governor(
        policies=[], audit_location=f"sqlite:///{tmp_path / 'a.db'}", audit_durability=durability
    )
    with gov.task("t"), gov.step("step.exec", name="ls", input={"command": "ls"}) as step:
        step.output = {"ok": True}
    assert _pragma(gov.runner.store) == expected
    assert [r["kind"] for r in recorded(gov)] == ["task.start", "step.exec", "task.end"]
    gov.close()


def test_a_store_opened_by_hand_commits_with_full_durability(tmp_path: Path) -> None:
    store = open_store(tmp_path / "b.db")
    assert _pragma(store) == _FULL
    store.close()
    with pytest.raises(ValueError, match="'full' or 'normal'"):
        SQLiteStore(tmp_path / "c.db", synchronous="off")


def test_a_task_end_does_not_wait_for_the_linger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a linger far beyond the wait's timeout, only a wake-up lets the wait succeed.
    monkeypatch.setattr(writer, "_LINGER", 3600.0)
    gov = Governor(policies=[], audit_location=f"sqlite:///{tmp_path / 'd.db'}")
    for n in range(3):
        with gov.task(f"t{n}"), gov.step("step.exec", name="ls", input={"n": n}) as step:
            step.output = {"ok": True}
        assert gov.flush(30), "flush waited for the writer's linger"
    assert len(recorded(gov)) == 9
    gov.close()


def test_a_small_queue_filling_up_ends_the_linger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a linger far beyond the test and nobody waiting, only the queue filling up can
    # start a batch: a writer waiting out its linger would let a small queue overflow (an
    # agent stepping every 0.5 ms lost 2,043 of 3,002 records on a queue of 100 that way).
    monkeypatch.setattr(writer, "_LINGER", 3600.0)
    gov = Governor(policies=[], audit_location=f"sqlite:///{tmp_path / 'e.db'}", queue_size=10)
    store = gov.runner.store
    assert store is not None
    with gov.task("t"):
        for n in range(4):  # with the task's start, 5 records: half the queue
            with gov.step("step.exec", name="ls", input={"n": n}) as step:
                step.output = {"ok": True}
        agent = gov.runner.agent_id
        deadline = time.monotonic() + 30
        while store.head(agent, "t").seq < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        stored = store.read_task("t", agent)
        assert [r["kind"] for r in stored] == ["task.start"] + ["step.exec"] * 4
        assert gov.status()["queue"]["dropped"] == 0
    gov.close()


def test_a_task_ended_without_waiting_is_written_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `end_task(wait=False)` returns before the commit (an event loop's callback must not
    # stop for the store), but the end still starts the writer: nobody waits, and the
    # linger is far beyond the test.
    monkeypatch.setattr(writer, "_LINGER", 3600.0)
    gov = Governor(policies=[], audit_location=f"sqlite:///{tmp_path / 'f.db'}")
    store = gov.runner.store
    assert store is not None
    task = gov.start_task("t", name="run")
    with gov.step("step.exec", name="ls", input={"command": "ls"}, task_id=task) as step:
        step.output = {"ok": True}
    gov.end_task(task, output={"done": True}, wait=False)
    agent = gov.runner.agent_id
    deadline = time.monotonic() + 30
    while not store.list_tasks(agent) and time.monotonic() < deadline:
        time.sleep(0.01)  # one batch holds the three records: the task is there once it is
    stored = store.read_task("t", agent)
    assert [r["kind"] for r in stored] == ["task.start", "step.exec", "task.end"]
    assert stored[-1]["output"] == {"done": True}
    gov.close()


def _log_grows_to(tmp_path: Path, name: str, tasks: int) -> int:
    """The largest size the store's write-ahead log reached over `tasks` tasks of a buffered
    Governor, each waited for at its end (the writer is idle between them)."""
    path = tmp_path / name
    gov = Governor(policies=[], audit_location=f"sqlite:///{path}")
    wal = Path(f"{path}-wal")
    largest = 0
    for n in range(tasks):
        with gov.task(f"t{n}"):
            for k in range(3):
                with gov.step("step.exec", name="ls", input={"k": k, "pad": "x" * 2000}) as s:
                    s.output = {"ok": True}
        largest = max(largest, wal.stat().st_size)
    assert len(recorded(gov)) == tasks * 5
    assert gov.status()["queue"]["dropped"] == 0
    gov.close()
    return largest


def test_the_writer_checkpoints_the_store_log_between_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite's own checkpoint (inside the commit that crosses its threshold, which an agent at
    # its task's end waits for) is pushed out of reach here: only the writer's checkpoints,
    # run when nothing is queued, can keep the log from growing with every task.
    monkeypatch.setattr(sqlite_store, "_WAL_BACKSTOP_PAGES", 1_000_000)
    monkeypatch.setattr(sqlite_store, "_WAL_CHECKPOINT_BYTES", 1 << 40)
    unchecked = _log_grows_to(tmp_path, "never.db", 60)
    monkeypatch.setattr(sqlite_store, "_WAL_CHECKPOINT_BYTES", 32 << 10)
    checked = _log_grows_to(tmp_path, "idle.db", 60)
    assert unchecked > 1 << 20, "the log did not grow: the test shows nothing"
    assert checked < unchecked / 4


@pytest.mark.parametrize(
    ("durability", "pages"), [("buffered", sqlite_store._WAL_BACKSTOP_PAGES), ("sync", 1000)]
)
def test_only_the_buffered_writer_takes_over_the_store_checkpoints(
    tmp_path: Path, durability: str, pages: int
) -> None:
    # In sync durability every commit is the agent's own: there is no idle writer to leave
    # the checkpoints to, so SQLite keeps making them (every 1,000 pages).
    gov = Governor(
        policies=[], audit_location=f"sqlite:///{tmp_path / 'a.db'}", audit_durability=durability
    )
    assert _pragma(gov.runner.store, "wal_autocheckpoint") == pages
    gov.close()


@pytest.mark.allow_internal_errors
def test_a_checkpoint_that_fails_is_reported_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(store: SQLiteStore) -> bool:
        raise StoreError("disk I/O error")

    monkeypatch.setattr(SQLiteStore, "checkpoint_wal_if_due", refuse)
    since = internal_error_count()
    gov = Governor(policies=[], audit_location=f"sqlite:///{tmp_path / 'a.db'}")
    for n in range(3):
        with gov.task(f"t{n}"), gov.step("step.exec", name="ls", input={"n": n}) as step:
            step.output = {"ok": True}
    assert len(recorded(gov)) == 9
    assert gov.status()["queue"]["dropped"] == 0
    gov.close()
    failed = [e for e in recent_internal_errors(since) if e.where == "audit.wal_checkpoint"]
    assert failed and "disk I/O error" in failed[0].message
