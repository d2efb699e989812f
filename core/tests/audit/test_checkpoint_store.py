"""Stores keep checkpoints as given and hand back whatever they hold, for verify to judge."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from charter._audit.base import AuditStore, StoreError
from charter._audit.checkpoint import sign_head
from charter._audit.location import open_store, verify
from charter._audit.signing import create_key_pair, load_public_key, load_signing_key

EntryFactory = Callable[..., dict[str, Any]]


@pytest.fixture
def pair(tmp_path: Path) -> Any:
    folder = tmp_path / "keys"
    folder.mkdir(mode=0o700)
    return create_key_pair(folder / "signing")


def _checkpoint_heads(store: AuditStore, pair: Any) -> None:
    key = load_signing_key(pair.private_path)
    when = datetime(2026, 12, 1, 12, tzinfo=UTC)
    store.add_checkpoints(
        [
            sign_head(
                key,
                t.agent_id,
                t.task_id,
                t.steps,
                store.head(t.agent_id, t.task_id).hash or "",
                when,
            ).to_wire()
            for t in store.list_tasks()
        ]
    )


def test_checkpoints_round_trip_and_refuse_what_is_not_one(
    store: AuditStore, make_entry: EntryFactory, pair: Any
) -> None:
    store.append([make_entry("t1"), make_entry("t1", n=1)])
    _checkpoint_heads(store, pair)
    (kept,) = store.read_checkpoints()
    assert isinstance(kept, dict) and kept["charter.checkpoint"]["seq"] == 2
    with pytest.raises(StoreError, match=r"checkpoint 1 of 1 is not a charter\.checkpoint object"):
        store.add_checkpoints([{"seq": 3}])
    assert len(store.read_checkpoints()) == 1
    report = verify(store, keys=[load_public_key(pair.public_path)])
    assert report.ok and report.checkpoints == 1, str(report)
    assert str(report) == "ok: 1 chain, 2 steps verified against 1 signed checkpoint"


def test_a_store_made_before_checkpoints_takes_them(
    tmp_path: Path, make_entry: EntryFactory, pair: Any
) -> None:
    path = tmp_path / "old.db"
    store = open_store(path)
    store.append([make_entry("t1")])
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE checkpoints")  # what a store of an earlier version looks like
    conn.commit()
    conn.close()
    public = load_public_key(pair.public_path)
    report = verify(path, keys=[public])
    assert [b.reason for b in report.breaks] == ["unsigned"]
    assert "no valid checkpoint signed by key" in report.breaks[0].detail
    assert verify(path).ok  # without a key it reads as before
    store = open_store(path)
    try:
        assert store.read_checkpoints() == []
        _checkpoint_heads(store, pair)
    finally:
        store.close()
    assert verify(path, keys=[public]).ok


def test_a_torn_checkpoint_line_is_fenced_like_a_torn_record(
    tmp_path: Path, make_entry: EntryFactory, pair: Any
) -> None:
    path = tmp_path / "audit.jsonl"
    store = open_store(path)
    store.append([make_entry("t1")])
    _checkpoint_heads(store, pair)
    store.close()
    whole = path.read_bytes()
    path.write_bytes(whole[:-40])  # the writer died in the middle of the checkpoint line
    store = open_store(path)  # the next writer fences it
    try:
        store.append([make_entry("t1", n=1)])
        _checkpoint_heads(store, pair)
    finally:
        store.close()
    report = verify(path, keys=[load_public_key(pair.public_path)])
    assert report.ok, str(report)
    assert "truncated, unacknowledged write" in report.warnings[0]
    assert report.checkpoints == 1
