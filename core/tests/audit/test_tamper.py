"""Tampering with stored records is detected with the right reason and seq; nothing else is.

Layout used by every test: chain (agent-a, t1) has seqs 1-6 and is closed by a task.end at
seq 6; chain (agent-a, t2) has seqs 1-4 and is open. Their records are interleaved.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from charter._audit.base import StoreError
from charter._audit.chain import entry_hash
from charter._audit.location import open_store, verify
from charter._audit.report import VerifyReport
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EntryFactory = Callable[..., dict[str, Any]]
Records = dict[tuple[str, int], dict[str, Any]]


def _populate(location: str, make_entry: EntryFactory) -> Records:
    store = open_store(location)
    try:
        chained = store.append([make_entry("t1", "task.start", n=0), make_entry("t2", n=100)])
        for n in range(1, 4):
            chained += store.append([make_entry("t1", n=n), make_entry("t2", n=100 + n)])
        chained += store.append([make_entry("t1", n=4), make_entry("t1", "task.end", n=5)])
    finally:
        store.close()
    return {(r["task_id"], r["seq"]): r for r in chained}


def _forge(record: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy with `changes` and a freshly computed (valid) hash."""
    forged = {**record, **changes}
    forged["hash"] = entry_hash(forged)
    return forged


def _only_break(report: VerifyReport) -> tuple[str, int, str]:
    assert not report.ok
    assert len(report.breaks) == 1, [str(b) for b in report.breaks]
    found = report.breaks[0]
    assert report.first_break == found
    return found.task_id, found.seq, found.reason


# ---------------------------------------------------------------------------- SQLite


@pytest.fixture
def db(tmp_path: Path, make_entry: EntryFactory) -> tuple[Path, Records]:
    path = tmp_path / "audit.db"
    return path, _populate(f"sqlite:///{path}", make_entry)


def _sql(path: Path, statement: str, *params: Any) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute(statement, params)
        conn.commit()
    finally:
        conn.close()


def _sql_insert(path: Path, record: dict[str, Any]) -> None:
    _sql(
        path,
        "INSERT INTO steps (agent_id, task_id, seq, hash, prev_hash, kind, timestamp, body) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        record["agent_id"],
        record["task_id"],
        record["seq"],
        record["hash"],
        record["prev_hash"],
        record["kind"],
        record["timestamp"],
        rfc8785.dumps(record).decode(),
    )


def _where(task: str, seq: int) -> str:
    return f"agent_id = 'agent-a' AND task_id = '{task}' AND seq = {seq}"


def test_sqlite_untouched_verifies(db: tuple[Path, Records]) -> None:
    path, _ = db
    report = verify(f"sqlite:///{path}")
    assert report.ok and (report.chains_checked, report.steps_checked) == (2, 10)


def test_sqlite_vacuum_keeps_the_physical_order(db: tuple[Path, Records]) -> None:
    path, _ = db
    conn = sqlite3.connect(path)
    conn.execute("VACUUM")
    conn.close()
    assert verify(path).ok


def test_sqlite_edited_body(db: tuple[Path, Records]) -> None:
    path, _ = db
    _sql(path, f"UPDATE steps SET body = replace(body, '\"q3\"', '\"qX\"') WHERE {_where('t1', 4)}")
    report = verify(path)
    assert _only_break(report) == ("t1", 4, "edited")
    assert str(report) == "broken: task t1 seq 4 edited: stored hash does not match its content"


def test_sqlite_edited_column(db: tuple[Path, Records]) -> None:
    path, _ = db
    _sql(path, f"UPDATE steps SET kind = 'step.skip' WHERE {_where('t2', 2)}")
    report = verify(path)
    assert _only_break(report) == ("t2", 2, "edited")
    assert "kind column" in report.breaks[0].detail


def test_sqlite_edited_and_rehashed(db: tuple[Path, Records]) -> None:
    path, records = db
    forged = _forge(records[("t1", 3)], output={"hits": []})
    _sql(
        path,
        f"UPDATE steps SET body = ?, hash = ? WHERE {_where('t1', 3)}",
        rfc8785.dumps(forged).decode(),
        forged["hash"],
    )
    report = verify(path)
    assert _only_break(report) == ("t1", 3, "edited")
    assert "re-hashed" in report.breaks[0].detail


def test_sqlite_deleted_row(db: tuple[Path, Records]) -> None:
    path, _ = db
    _sql(path, f"DELETE FROM steps WHERE {_where('t1', 3)}")
    assert _only_break(verify(path)) == ("t1", 3, "deleted")


def test_sqlite_deleted_first_row(db: tuple[Path, Records]) -> None:
    path, _ = db
    _sql(path, f"DELETE FROM steps WHERE {_where('t2', 1)}")
    assert _only_break(verify(path)) == ("t2", 1, "deleted")


def test_sqlite_inserted_row_with_wrong_link(db: tuple[Path, Records]) -> None:
    path, records = db
    _sql_insert(path, _forge(records[("t2", 4)], seq=5, prev_hash="0" * 64))
    report = verify(path)
    assert _only_break(report) == ("t2", 5, "inserted")


def test_sqlite_inserted_row_with_valid_link_beyond_head(db: tuple[Path, Records]) -> None:
    path, records = db
    last = records[("t2", 4)]
    _sql_insert(path, _forge(last, seq=5, prev_hash=last["hash"]))
    report = verify(path)
    assert _only_break(report) == ("t2", 5, "inserted")
    assert "recorded head" in report.breaks[0].detail


def test_sqlite_inserted_after_end_marker(db: tuple[Path, Records]) -> None:
    path, records = db
    last = records[("t1", 6)]
    _sql_insert(path, _forge(records[("t1", 2)], seq=7, prev_hash=last["hash"]))
    _sql(path, "UPDATE chains SET head_seq = 7 WHERE task_id = 't1'")
    report = verify(path)
    assert _only_break(report) == ("t1", 7, "inserted")
    assert "end marker" in report.breaks[0].detail


def test_sqlite_reordered_rows(db: tuple[Path, Records]) -> None:
    path, _ = db
    conn = sqlite3.connect(path)
    try:
        (r3,) = conn.execute(f"SELECT rowid FROM steps WHERE {_where('t1', 3)}").fetchone()
        (r4,) = conn.execute(f"SELECT rowid FROM steps WHERE {_where('t1', 4)}").fetchone()
        columns = "agent_id, task_id, seq, hash, prev_hash, kind, timestamp, body"
        row3 = conn.execute(f"SELECT {columns} FROM steps WHERE rowid = ?", (r3,)).fetchone()
        row4 = conn.execute(f"SELECT {columns} FROM steps WHERE rowid = ?", (r4,)).fetchone()
        conn.execute("DELETE FROM steps WHERE rowid IN (?, ?)", (r3, r4))
        insert = f"INSERT INTO steps (rowid, {columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        conn.execute(insert, (r3, *row4))
        conn.execute(insert, (r4, *row3))
        conn.commit()
    finally:
        conn.close()
    report = verify(path)
    assert _only_break(report) == ("t1", 3, "reordered")
    assert "stored after seq 4" in report.breaks[0].detail


def test_sqlite_truncated_closed_task(db: tuple[Path, Records]) -> None:
    path, _ = db
    _sql(path, "DELETE FROM steps WHERE task_id = 't1' AND seq >= 5")
    report = verify(path)
    assert _only_break(report) == ("t1", 5, "truncated")
    assert "recorded head is seq 6" in report.breaks[0].detail


def test_sqlite_whole_chain_deleted(db: tuple[Path, Records]) -> None:
    path, _ = db
    _sql(path, "DELETE FROM steps WHERE task_id = 't2'")
    assert _only_break(verify(path)) == ("t2", 1, "truncated")


def test_sqlite_malformed_body(db: tuple[Path, Records]) -> None:
    path, _ = db
    _sql(path, f"UPDATE steps SET body = '{{not json' WHERE {_where('t2', 2)}")
    assert _only_break(verify(path)) == ("t2", 2, "malformed")


def test_sqlite_chain_without_head(db: tuple[Path, Records]) -> None:
    path, _ = db
    _sql(path, "DELETE FROM chains WHERE task_id = 't2'")
    assert _only_break(verify(path)) == ("t2", 1, "inserted")


def test_sqlite_verify_one_task(db: tuple[Path, Records]) -> None:
    path, _ = db
    _sql(path, f"DELETE FROM steps WHERE {_where('t1', 3)}")
    assert verify(path, "t2").ok
    assert _only_break(verify(path, "t1")) == ("t1", 3, "deleted")


# ----------------------------------------------------------------------------- JSONL


@pytest.fixture
def jsonl(tmp_path: Path, make_entry: EntryFactory) -> tuple[Path, Records]:
    path = tmp_path / "audit.jsonl"
    return path, _populate(f"jsonl:///{path}", make_entry)


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _index(lines: list[bytes], record: dict[str, Any]) -> int:
    return lines.index(rfc8785.dumps(record) + b"\n")


def _write(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(lines))


def test_jsonl_untouched_verifies(jsonl: tuple[Path, Records]) -> None:
    path, _ = jsonl
    report = verify(path)
    assert report.ok and report.warnings == []
    assert (report.chains_checked, report.steps_checked) == (2, 10)


def test_jsonl_edited_line(jsonl: tuple[Path, Records]) -> None:
    path, records = jsonl
    lines = _lines(path)
    at = _index(lines, records[("t1", 4)])
    lines[at] = lines[at].replace(b'"q3"', b'"qX"')
    _write(path, lines)
    report = verify(path)
    assert _only_break(report) == ("t1", 4, "edited")
    assert str(report) == "broken: task t1 seq 4 edited: stored hash does not match its content"


def test_jsonl_edited_and_rehashed(jsonl: tuple[Path, Records]) -> None:
    path, records = jsonl
    lines = _lines(path)
    at = _index(lines, records[("t2", 2)])
    lines[at] = rfc8785.dumps(_forge(records[("t2", 2)], verb="tool.skip")) + b"\n"
    _write(path, lines)
    assert _only_break(verify(path)) == ("t2", 2, "edited")


def test_jsonl_deleted_line(jsonl: tuple[Path, Records]) -> None:
    path, records = jsonl
    lines = _lines(path)
    del lines[_index(lines, records[("t1", 3)])]
    _write(path, lines)
    assert _only_break(verify(path)) == ("t1", 3, "deleted")


def test_jsonl_inserted_duplicate_seq(jsonl: tuple[Path, Records]) -> None:
    path, records = jsonl
    lines = _lines(path)
    forged = _forge(records[("t1", 3)], input={"query": "forged"}, prev_hash="f" * 64)
    lines.insert(_index(lines, records[("t1", 3)]) + 1, rfc8785.dumps(forged) + b"\n")
    _write(path, lines)
    report = verify(path)
    assert _only_break(report) == ("t1", 3, "inserted")
    assert "2 records carry seq 3" in report.breaks[0].detail


def test_jsonl_inserted_line_with_wrong_link(jsonl: tuple[Path, Records]) -> None:
    path, records = jsonl
    forged = _forge(records[("t2", 4)], seq=5, prev_hash="0" * 64)
    _write(path, [*_lines(path), rfc8785.dumps(forged) + b"\n"])
    assert _only_break(verify(path)) == ("t2", 5, "inserted")


def test_jsonl_inserted_after_end_marker(jsonl: tuple[Path, Records]) -> None:
    path, records = jsonl
    forged = _forge(records[("t1", 2)], seq=7, prev_hash=records[("t1", 6)]["hash"])
    _write(path, [*_lines(path), rfc8785.dumps(forged) + b"\n"])
    report = verify(path)
    assert _only_break(report) == ("t1", 7, "inserted")
    assert "end marker at seq 6" in report.breaks[0].detail


def test_jsonl_reordered_lines(jsonl: tuple[Path, Records]) -> None:
    path, records = jsonl
    lines = _lines(path)
    a, b = _index(lines, records[("t1", 3)]), _index(lines, records[("t1", 4)])
    lines[a], lines[b] = lines[b], lines[a]
    _write(path, lines)
    report = verify(path)
    assert _only_break(report) == ("t1", 3, "reordered")
    assert "stored after seq 4" in report.breaks[0].detail


def test_jsonl_truncated_closed_task(jsonl: tuple[Path, Records]) -> None:
    path, records = jsonl
    lines = _lines(path)
    for seq in (6, 5):
        del lines[_index(lines, records[("t1", seq)])]
    _write(path, lines)
    report = verify(path)
    assert _only_break(report) == ("t1", 5, "truncated")
    assert "recorded head is seq 6" in report.breaks[0].detail


def test_jsonl_truncated_file_tail(jsonl: tuple[Path, Records]) -> None:
    path, records = jsonl
    lines = _lines(path)
    _write(path, lines[: _index(lines, records[("t1", 6)])])
    assert _only_break(verify(path)) == ("t1", 6, "truncated")


def test_jsonl_without_head_file_warns_that_truncation_is_undetectable(
    jsonl: tuple[Path, Records],
) -> None:
    path, records = jsonl
    os.remove(f"{path}.heads")
    lines = _lines(path)
    _write(path, lines[: _index(lines, records[("t1", 6)])])
    report = verify(path)
    assert report.ok
    assert "head file audit.jsonl.heads is missing" in report.warnings[0]


def test_jsonl_garbage_line_in_the_middle(jsonl: tuple[Path, Records]) -> None:
    path, _ = jsonl
    lines = _lines(path)
    lines.insert(3, b'{"agent_id":"agent-a","hash":"ab\n')
    _write(path, lines)
    report = verify(path)
    found = report.breaks[0]
    assert _only_break(report) == ("", 0, "malformed")
    assert found.detail == "line 4 of audit.jsonl is not a readable audit record"
    assert str(report) == "broken: malformed: line 4 of audit.jsonl is not a readable audit record"


def test_jsonl_record_with_bad_chain_fields(jsonl: tuple[Path, Records]) -> None:
    path, records = jsonl
    lines = _lines(path)
    at = _index(lines, records[("t2", 3)])
    lines[at] = lines[at].replace(b'"hash":"', b'"hash":7,"x":"')
    _write(path, lines)
    assert _only_break(verify(path)) == ("t2", 3, "malformed")


def _tear(path: Path, records: Records) -> None:
    """Leave the torn half of a record at the end of the file, as a writer killed mid-append."""
    whole = rfc8785.dumps(_forge(records[("t2", 4)], seq=5, prev_hash=records[("t2", 4)]["hash"]))
    with path.open("ab") as handle:
        handle.write(whole[: len(whole) // 2])


def test_jsonl_torn_last_line_is_a_warning_and_stays_one_once_followed(
    jsonl: tuple[Path, Records], make_entry: EntryFactory
) -> None:
    path, records = jsonl
    _tear(path, records)
    report = verify(path)
    assert report.ok, str(report)
    assert report.steps_checked == 10
    assert (
        "last line (11) of audit.jsonl is a truncated, unacknowledged write" in (report.warnings[0])
    )
    assert str(report).startswith("ok: 2 chains, 10 steps verified (1 warning: ")

    store = open_store(path)
    try:
        added = store.append([make_entry("t2", n=200)])
    finally:
        store.close()
    assert (added[0]["seq"], added[0]["prev_hash"]) == (5, records[("t2", 4)]["hash"])
    assert _lines(path)[-1] == rfc8785.dumps(added[0]) + b"\n"
    assert _lines(path)[-2].startswith(b'{"charter.fence":{"length":')
    for later in range(2):  # and it stays verifiable, whatever is appended later
        report = verify(path)
        assert report.ok, str(report)
        assert report.steps_checked == 11 + later
        assert len(report.warnings) == 1
        assert "line 11 of audit.jsonl is a truncated, unacknowledged write" in report.warnings[0]
        again = open_store(path)
        try:
            again.append([make_entry("t3", n=300 + later)])
        finally:
            again.close()


def test_jsonl_torn_line_is_fenced_by_a_store_opened_before_the_crash(
    jsonl: tuple[Path, Records], make_entry: EntryFactory
) -> None:
    path, records = jsonl
    store = open_store(path)
    try:
        assert store.head("agent-a", "t2").seq == 4  # it has read the file already
        _tear(path, records)
        added = store.append([make_entry("t2", n=201), make_entry("t2", n=202)])
        assert [r["seq"] for r in added] == [5, 6]
    finally:
        store.close()
    report = verify(path)
    assert report.ok, str(report)
    assert report.steps_checked == 12
    assert "line 11 of audit.jsonl is a truncated, unacknowledged write" in report.warnings[0]


def test_jsonl_opening_for_writing_fences_a_torn_tail_at_once(
    jsonl: tuple[Path, Records],
) -> None:
    path, records = jsonl
    _tear(path, records)
    open_store(path).close()
    assert path.read_bytes().endswith(b"\n")
    report = verify(path)
    assert report.ok and report.steps_checked == 10, str(report)
    assert "line 11 of audit.jsonl is a truncated, unacknowledged write" in report.warnings[0]


def test_jsonl_a_fence_that_names_another_line_does_not_excuse_garbage(
    jsonl: tuple[Path, Records],
) -> None:
    path, _ = jsonl
    lines = _lines(path)
    lines.insert(3, b'{"agent_id":"agent-a","hash":"ab\n')
    lines.insert(4, b'{"charter.fence":{"length":3,"offset":0,"reason":"torn write"}}\n')
    _write(path, lines)
    report = verify(path)
    assert not report.ok
    details = [b.detail for b in report.breaks]
    assert "line 4 of audit.jsonl is not a readable audit record" in details


def test_jsonl_whole_last_record_without_newline_counts(
    jsonl: tuple[Path, Records], make_entry: EntryFactory
) -> None:
    path, _ = jsonl
    path.write_bytes(path.read_bytes()[:-1])
    assert verify(path).ok
    store = open_store(path)
    try:
        assert store.append([make_entry("t2", n=9)])[0]["seq"] == 5
    finally:
        store.close()
    assert verify(path).ok


def test_jsonl_file_cut_under_an_open_store_is_relearned(
    tmp_path: Path, make_entry: EntryFactory
) -> None:
    path = tmp_path / "audit.jsonl"
    store = open_store(path)
    try:
        store.append([make_entry("t1", n=n) for n in range(3)])
        lines = _lines(path)
        _write(path, lines[:1])
        assert store.append([make_entry("t1", n=9)])[0]["seq"] == 2
    finally:
        store.close()
    # The head file still remembers seq 3, so the rewrite shows up as an edit of seq 3's slot.
    assert not verify(path).ok


# ---------------------------------------------------------------- no false alarms

_batches = st.lists(
    st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["t1", "t2", "t3"]), st.booleans()),
        min_size=1,
        max_size=6,
    ),
    min_size=1,
    max_size=8,
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(batches=_batches)
def test_random_appends_always_verify(
    batches: list[list[tuple[str, str, bool]]],
    tmp_path_factory: pytest.TempPathFactory,
    make_entry: EntryFactory,
) -> None:
    directory = tmp_path_factory.mktemp("random")
    for location in (f"sqlite:///{directory}/a.db", f"jsonl:///{directory}/a.jsonl"):
        store = open_store(location)
        expected: dict[tuple[str, str], int] = {}
        closed: set[tuple[str, str]] = set()
        try:
            for number, batch in enumerate(batches):
                entries = [
                    make_entry(task, "task.end" if end else "step.exec", agent_id=agent, n=number)
                    for agent, task, end in batch
                ]
                keys = [(agent, task) for agent, task, _ in batch]
                refused = any(
                    key in closed or (end and key in keys[i + 1 :])
                    for i, (key, (_, _, end)) in enumerate(zip(keys, batch, strict=True))
                )
                if refused:
                    with pytest.raises(StoreError, match="closed"):
                        store.append(entries)
                    continue
                store.append(entries)
                for key, (_, _, end) in zip(keys, batch, strict=True):
                    expected[key] = expected.get(key, 0) + 1
                    if end:
                        closed.add(key)
            report = store.verify()
            assert report.ok, str(report)
            assert report.steps_checked == sum(expected.values())
            assert report.chains_checked == len(expected)
            summaries = {(s.agent_id, s.task_id): s for s in store.list_tasks()}
            assert {k: s.steps for k, s in summaries.items()} == expected
            assert {k for k, s in summaries.items() if s.closed} == closed
        finally:
            store.close()
