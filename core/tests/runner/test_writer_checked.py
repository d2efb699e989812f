"""Records the writer's redaction found safe to encode skip the store's own safety walk; what
is stored must be byte for byte what the store makes of the same redacted records itself."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from charter._audit.chain import PreparedEntry
from charter._audit.sqlite import SQLiteStore
from charter._runtime.redact import Redactor
from charter._runtime.writer import AuditWriter


def _records() -> list[dict[str, Any]]:
    base = {
        "agent_id": "a",
        "task_id": "t",
        "action_id": None,
        "timestamp": "2026-01-01T00:00:00.000000Z",
        "kind": "step.exec",
        "verb": None,
        "step_name": "Bash",
        "properties": {},
        "meta": {},
    }
    payloads = [
        ({"command": "ls", "timeout": 30}, {"stdout": "a\nb", "exit_code": 0}),
        ({"ratio": 0.25, "nested": [{"k": [1, None, True]}]}, None),
        ({"f": 1e20}, {"g": 1.5e-7}),  # not checked: the store's own path decides
        ({"token": "plain"}, {"note": "ghp_" + "a" * 36}),  # masked: not checked
        ({"é": "non-ASCII key"}, {"x": "\u2028"}),
        ({"float": 2.0, "neg": -0.5}, {}),
    ]
    return [
        base | {"seq": seq, "input": i, "output": o} for seq, (i, o) in enumerate(payloads, start=1)
    ]


def _bodies(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT body FROM steps ORDER BY id")]


class Recording(SQLiteStore):
    """Keeps what append was handed (a subclass: it gets plain records)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.handed: list[Any] = []

    def append(self, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        self.handed.extend(entries)
        return super().append(entries)


def test_checked_records_are_stored_as_the_store_would_store_them(tmp_path: Path) -> None:
    records = _records()
    marks = [Redactor().redact_checked(r)[1] for r in records]
    assert marks == [True, True, False, False, False, False]

    writer = AuditWriter(
        "sqlite",
        store=SQLiteStore(tmp_path / "w.db"),
        durability="sync",
        prepare=Redactor().redact_batch,
    )
    chained = writer.write_now(records)
    reference = SQLiteStore(tmp_path / "r.db")
    expected = reference.append([Redactor().redact(r) for r in records])
    assert chained == expected
    assert _bodies(tmp_path / "w.db") == _bodies(tmp_path / "r.db")
    assert writer.store is not None
    assert writer.store.verify().ok


def test_a_store_of_another_class_gets_plain_records(tmp_path: Path) -> None:
    store = Recording(tmp_path / "s.db")
    writer = AuditWriter("sqlite", store=store, durability="sync", prepare=Redactor().redact_batch)
    writer.write_now(_records())
    assert store.handed and all(isinstance(e, dict) for e in store.handed)
    assert not any(isinstance(e, PreparedEntry) for e in store.handed)
