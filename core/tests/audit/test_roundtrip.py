"""Appending, reading back, summaries, closed chains and the stdout store."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from charter._audit.base import AuditStore, StoreError
from charter._audit.chain import ChainHead, entry_hash
from charter._audit.location import open_store, verify
from charter._audit.stdout import StdoutStore
from hypothesis import given, settings
from hypothesis import strategies as st

EntryFactory = Callable[..., dict[str, Any]]


def _interleaved(make_entry: EntryFactory) -> list[dict[str, Any]]:
    return [
        make_entry("t1", "task.start", n=0),
        make_entry("t2", "task.start", n=1),
        make_entry("t1", n=2),
        make_entry("t2", n=3, agent_id="agent-a"),
        make_entry("t3", "task.start", agent_id="agent-b", n=4),
        make_entry("t1", n=5),
        make_entry("t1", "task.end", n=6),
    ]


def test_round_trip(store: AuditStore, make_entry: EntryFactory) -> None:
    entries = _interleaved(make_entry)
    chained = store.append(entries[:3])
    chained += store.append(entries[3:])

    for original, record in zip(entries, chained, strict=True):
        assert {k: v for k, v in record.items() if k not in ("seq", "prev_hash", "hash")} == (
            original
        )
        assert record["hash"] == entry_hash(record)
    by_task: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in chained:
        by_task.setdefault((record["agent_id"], record["task_id"]), []).append(record)
    for (agent_id, task_id), records in by_task.items():
        assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
        assert [r["prev_hash"] for r in records] == [None] + [r["hash"] for r in records[:-1]]
        assert store.read_task(task_id, agent_id) == records
        assert store.read_task(task_id) == records
        last = records[-1]
        assert store.head(agent_id, task_id) == ChainHead(last["seq"], last["hash"])
    assert store.head("agent-a", "nope") == ChainHead()

    summaries = {(s.agent_id, s.task_id): s for s in store.list_tasks()}
    assert list(summaries) == [("agent-a", "t1"), ("agent-a", "t2"), ("agent-b", "t3")]
    t1 = summaries[("agent-a", "t1")]
    assert (t1.steps, t1.closed, t1.last_kind) == (4, True, "task.end")
    assert (t1.first_timestamp, t1.last_timestamp) == (
        entries[0]["timestamp"],
        entries[6]["timestamp"],
    )
    t2 = summaries[("agent-a", "t2")]
    assert (t2.steps, t2.closed, t2.last_kind) == (2, False, "step.exec")
    assert [s.task_id for s in store.list_tasks("agent-b")] == ["t3"]

    report = store.verify()
    assert report.ok, str(report)
    assert (report.chains_checked, report.steps_checked) == (3, 7)
    assert str(report) == "ok: 3 chains, 7 steps verified"
    assert store.verify("t1").chains_checked == 1


def test_reopened_store_continues_chains(location: str, make_entry: EntryFactory) -> None:
    first = open_store(location)
    a = first.append([make_entry("t1", n=0), make_entry("t1", n=1)])
    first.close()
    second = open_store(location)
    try:
        b = second.append([make_entry("t1", n=2)])
        assert b[0]["seq"] == 3 and b[0]["prev_hash"] == a[1]["hash"]
        assert second.verify().ok
    finally:
        second.close()


def test_closed_chain_refuses_appends_and_writes_nothing(
    store: AuditStore, make_entry: EntryFactory
) -> None:
    store.append([make_entry("t1", "task.start"), make_entry("t1", "task.end")])
    before = store.read_task("t1")
    with pytest.raises(StoreError, match=r"task 't1'.*closed"):
        store.append([make_entry("t2", n=1), make_entry("t1", n=2)])
    assert store.read_task("t1") == before
    with pytest.raises(StoreError, match="'t2' is not in"):
        store.read_task("t2")
    assert store.head("agent-a", "t2") == ChainHead()
    # The same task id under another agent is another chain.
    other = store.append([make_entry("t1", agent_id="agent-b")])
    assert other[0]["seq"] == 1


def test_closing_and_continuing_in_one_batch_is_refused(
    store: AuditStore, make_entry: EntryFactory
) -> None:
    with pytest.raises(StoreError, match="closed"):
        store.append([make_entry("t1", "task.idle"), make_entry("t1", n=1)])
    assert store.list_tasks() == []


def test_final_meta_marks_the_end_whatever_the_kind(
    store: AuditStore, make_entry: EntryFactory
) -> None:
    store.append([make_entry("t1", meta={"charter.chain": {"final": True}})])
    assert store.list_tasks()[0].closed
    with pytest.raises(StoreError, match="closed"):
        store.append([make_entry("t1", n=1)])


def test_read_task_under_several_agents_asks_for_agent(
    store: AuditStore, make_entry: EntryFactory
) -> None:
    store.append([make_entry("shared", agent_id="a1"), make_entry("shared", agent_id="a2")])
    with pytest.raises(StoreError, match=r"several agents.*'a1', 'a2'.*agent_id"):
        store.read_task("shared")
    assert store.read_task("shared", "a2")[0]["agent_id"] == "a2"


def test_empty_agent_id_is_a_chain(store: AuditStore, make_entry: EntryFactory) -> None:
    store.append([make_entry("t1", agent_id=""), make_entry("t1", agent_id="", n=1)])
    assert [r["seq"] for r in store.read_task("t1", "")] == [1, 2]
    assert store.verify().ok


@pytest.mark.parametrize(
    "bad",
    [
        {"agent_id": "a", "task_id": "t1", "kind": "k", "timestamp": "x", "n": float("nan")},
        {"agent_id": "a", "task_id": "t1", "kind": "k", "timestamp": "x", "seq": 0},
        {"task_id": "t1", "kind": "k", "timestamp": "x"},
    ],
)
def test_bad_entry_fails_the_whole_batch(
    store: AuditStore, make_entry: EntryFactory, bad: dict[str, Any]
) -> None:
    with pytest.raises(StoreError, match="entry 2 of 2 was refused and nothing was written"):
        store.append([make_entry("t1"), bad])
    assert store.list_tasks() == []
    assert store.append([]) == []


def test_single_mapping_is_not_a_batch(store: AuditStore, make_entry: EntryFactory) -> None:
    with pytest.raises(StoreError, match="sequence of entries"):
        store.append(make_entry("t1"))  # type: ignore[arg-type]


def test_unknown_task_is_refused(store: AuditStore, make_entry: EntryFactory) -> None:
    store.append([make_entry("t1")])
    with pytest.raises(StoreError, match="'ghost' is not in"):
        store.read_task("ghost")
    with pytest.raises(StoreError, match="'ghost' is not in"):
        store.verify("ghost")


def test_closed_store_refuses_calls(location: str, make_entry: EntryFactory) -> None:
    opened = open_store(location)
    opened.close()
    opened.close()
    with pytest.raises(StoreError, match="closed"):
        opened.append([make_entry("t1")])
    assert opened.health()["ok"] is False


def test_health_reports_location(store: AuditStore) -> None:
    health = store.health()
    assert health["ok"] is True
    assert health["location"] == store.location
    assert isinstance(health["detail"], str)


def test_one_store_object_shared_by_threads(store: AuditStore, make_entry: EntryFactory) -> None:
    errors: list[BaseException] = []

    def work(task: str) -> None:
        try:
            for n in range(20):
                store.append([make_entry(task, n=n), make_entry("shared", n=n)])
        except BaseException as exc:  # surfaced below; a thread cannot fail the test itself
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert [r["seq"] for r in store.read_task("shared")] == list(range(1, 81))
    assert store.verify().ok


def test_store_location_is_absolute_and_reopenable(
    file_kind: str, tmp_path: Path, make_entry: EntryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    relative = "sub/audit.db" if file_kind == "sqlite" else "sub/audit.jsonl"
    opened = open_store(f"{file_kind}:///{relative}")
    opened.append([make_entry("t1")])
    opened.close()
    assert opened.location == f"{file_kind}:///{tmp_path / relative}"
    assert (tmp_path / relative).is_file()
    assert verify(opened.location).ok
    assert verify(tmp_path / relative).ok
    assert verify(relative).ok


def test_stdout_store_writes_canonical_lines(
    make_entry: EntryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store("stdout")
    chained = store.append([make_entry("t1"), make_entry("t1", "task.end", n=1)])
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == chained
    assert chained[1]["prev_hash"] == chained[0]["hash"]
    assert store.head("agent-a", "t1").seq == 2
    with pytest.raises(StoreError, match="closed"):
        store.append([make_entry("t1", n=2)])
    for call in (store.list_tasks, store.verify, lambda: store.read_task("t1")):
        with pytest.raises(StoreError, match="cannot be read back"):
            call()
    assert store.health()["ok"] is True


def test_stdout_store_write_failure_keeps_heads(make_entry: EntryFactory) -> None:
    stream = io.StringIO()
    store = StdoutStore(stream)
    store.append([make_entry("t1")])
    stream.close()
    with pytest.raises(StoreError, match="standard output"):
        store.append([make_entry("t1", n=1)])
    assert store.head("agent-a", "t1").seq == 1


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_a_store_path_is_quoted_for_its_uri_as_urllib_quotes_it(path: str) -> None:
    import urllib.parse

    from charter._audit.sqlite import _uri_path

    try:
        expected: str | type[Exception] = urllib.parse.quote(path)
    except UnicodeEncodeError:
        expected = UnicodeEncodeError
    if expected is UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            _uri_path(path)
    else:
        assert _uri_path(path) == expected
