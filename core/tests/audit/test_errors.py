"""Locations, refusals and failures: every error is a StoreError with a usable sentence."""

from __future__ import annotations

import os
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from charter._audit import jsonl as jsonl_module
from charter._audit.base import StoreError
from charter._audit.jsonl import JsonlStore
from charter._audit.location import open_store, parse_location, verify
from charter._audit.sqlite import SQLiteStore
from charter._audit.stdout import StdoutStore

EntryFactory = Callable[..., dict[str, Any]]
FORMS = (
    "sqlite:///path/audit.db, jsonl:///path/audit.jsonl, postgresql://user@host:port/db or stdout"
)


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("sqlite:///rel/audit.db", ("sqlite", "rel/audit.db")),
        ("sqlite:////abs/audit.db", ("sqlite", "/abs/audit.db")),
        ("sqlite:///:memory:", ("sqlite", ":memory:")),
        ("jsonl:///rel/audit.jsonl", ("jsonl", "rel/audit.jsonl")),
        ("jsonl:////abs/audit.jsonl", ("jsonl", "/abs/audit.jsonl")),
        ("logs/audit.jsonl", ("jsonl", "logs/audit.jsonl")),
        ("/var/audit.db", ("sqlite", "/var/audit.db")),
        ("audit.sqlite3", ("sqlite", "audit.sqlite3")),
        ("stdout", ("stdout", "")),
        ("postgresql://app@db:5432/audit", ("postgresql", "postgresql://app@db:5432/audit")),
        (
            "postgres://db/audit?sslmode=require",
            ("postgresql", "postgres://db/audit?sslmode=require"),
        ),
    ],
)
def test_accepted_locations(location: str, expected: tuple[str, str]) -> None:
    assert parse_location(location) == expected


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("mysql://db/audit", "unknown scheme"),
        ("postgresql://", "names no server"),
        ("sqlite://audit.db", "three slashes"),
        ("jsonl:audit.jsonl", "three slashes"),
        ("sqlite:///", "names no file"),
        ("audit.txt", "not a known store"),
        ("none", "turns auditing off"),
        ("", "not a known store"),
    ],
)
def test_refused_locations_list_the_accepted_forms(location: str, why: str) -> None:
    with pytest.raises(StoreError, match=why) as caught:
        open_store(location)
    assert FORMS in str(caught.value)


def test_open_store_types(tmp_path: Path) -> None:
    stores = [
        open_store(f"sqlite:///{tmp_path}/a.db"),
        open_store(tmp_path / "b.jsonl"),
        open_store("stdout"),
    ]
    assert [type(s) for s in stores] == [SQLiteStore, JsonlStore, StdoutStore]
    for store in stores:
        store.close()


def test_memory_sqlite_store(make_entry: EntryFactory) -> None:
    store = open_store("sqlite:///:memory:")
    try:
        store.append([make_entry("t1"), make_entry("t1", n=1)])
        assert verify(store).ok
    finally:
        store.close()
    with pytest.raises(StoreError, match="in-memory"):
        verify("sqlite:///:memory:")


def test_sqlite_file_of_another_application(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(
        StoreError, match=re.escape(f"{path} is an SQLite database but not a Charter")
    ):
        open_store(f"sqlite:///{path}")
    with pytest.raises(StoreError, match="not a Charter"):
        verify(path)


def test_sqlite_store_created_by_another_process_while_opening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process finishes creating the schema between this opener's first look at the
    # file and its next one: the store is Charter's, and opening it must succeed.
    path = tmp_path / "audit.db"
    real_connect = sqlite3.connect
    created: list[SQLiteStore] = []

    def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = real_connect(*args, **kwargs)
        if created:
            return conn

        def between_statements(statement: str) -> None:
            if not created and "sqlite_master" in statement:
                created.append(SQLiteStore(path))

        conn.set_trace_callback(between_statements)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    store = SQLiteStore(path)
    assert created, "the other opener never ran"
    store.close()
    created[0].close()


def test_file_that_is_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are my notes, not a database\n" * 10)
    with pytest.raises(StoreError, match=re.escape(f"{path} is not a Charter audit store")):
        open_store(path)
    assert path.read_text().startswith("these are my notes")


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    open_store(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(StoreError, match="schema version 99"):
        open_store(path)


@pytest.mark.parametrize("name", ["dir.db", "dir.jsonl"])
def test_directory_instead_of_file(tmp_path: Path, name: str) -> None:
    (tmp_path / name).mkdir()
    with pytest.raises(StoreError, match=re.escape(f"{tmp_path / name} is a directory")):
        open_store(tmp_path / name)
    with pytest.raises(StoreError, match="is a directory"):
        verify(tmp_path / name)


@pytest.mark.parametrize("name", ["audit.db", "audit.jsonl"])
def test_location_that_cannot_be_created(tmp_path: Path, name: str) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("a regular file")
    with pytest.raises(StoreError, match=re.escape(f"cannot create the directory {blocker}")):
        open_store(blocker / name)


def test_parent_directories_are_created(tmp_path: Path, file_kind: str) -> None:
    name = "audit.db" if file_kind == "sqlite" else "audit.jsonl"
    path = tmp_path / "deep" / "er" / name
    open_store(f"{file_kind}:///{path}").close()
    assert path.is_file()


@pytest.mark.parametrize("name", ["missing.db", "missing.jsonl"])
def test_verify_never_creates_a_store(tmp_path: Path, name: str) -> None:
    path = tmp_path / "sub" / name
    with pytest.raises(StoreError, match=re.escape(f"no audit store at {path}")):
        verify(path)
    assert not (tmp_path / "sub").exists()


def test_verify_refuses_stdout_and_non_stores() -> None:
    with pytest.raises(StoreError, match="cannot be read back"):
        verify("stdout")
    with pytest.raises(StoreError, match="cannot verify a int"):
        verify(42)  # type: ignore[arg-type]


def test_sqlite_failed_append_writes_nothing(tmp_path: Path, make_entry: EntryFactory) -> None:
    path = tmp_path / "audit.db"
    store = open_store(path)
    try:
        store.append([make_entry("t1"), make_entry("t1", n=1)])
        # Make the recorded head lag behind the rows, so the insert hits UNIQUE mid-batch.
        conn = sqlite3.connect(path)
        conn.execute("UPDATE chains SET head_seq = 1 WHERE task_id = 't1'")
        conn.commit()
        conn.close()
        with pytest.raises(StoreError, match="nothing was written"):
            store.append([make_entry("t2"), make_entry("t1", n=2)])
        with pytest.raises(StoreError, match="'t2' is not in"):
            store.read_task("t2")
        assert len(store.read_task("t1")) == 2
    finally:
        store.close()


@pytest.mark.parametrize("fail", ["write", "fsync"])
def test_jsonl_failed_write_is_cut_back(
    tmp_path: Path, make_entry: EntryFactory, monkeypatch: pytest.MonkeyPatch, fail: str
) -> None:
    path = tmp_path / "audit.jsonl"
    store = open_store(path)
    try:
        store.append([make_entry("t1")])
        before = path.read_bytes()
        real_write = os.write

        def half_write(fd: int, data: Any) -> int:
            real_write(fd, bytes(data)[: len(data) // 2])
            raise OSError(28, "No space left on device")

        def no_fsync(fd: int) -> None:
            raise OSError(5, "Input/output error")

        if fail == "write":
            monkeypatch.setattr(jsonl_module.os, "write", half_write)
        else:
            monkeypatch.setattr(jsonl_module.os, "fsync", no_fsync)
        with pytest.raises(StoreError, match=r"cannot write to audit store .* nothing was written"):
            store.append([make_entry("t1", n=1), make_entry("t2", n=2)])
        monkeypatch.undo()
        assert path.read_bytes() == before
        assert store.append([make_entry("t1", n=3)])[0]["seq"] == 2
    finally:
        store.close()
    assert verify(path).ok


def test_jsonl_head_file_failure_does_not_fail_the_append(
    tmp_path: Path, make_entry: EntryFactory
) -> None:
    path = tmp_path / "audit.jsonl"
    (tmp_path / "audit.jsonl.heads").mkdir()
    store = open_store(path)
    try:
        assert store.append([make_entry("t1")])[0]["seq"] == 1
        health = store.health()
        assert health["ok"] is False and "not updated" in health["detail"]
    finally:
        store.close()
    assert verify(path).ok


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_store_object_refuses_use_after_fork(location: str, make_entry: EntryFactory) -> None:
    store = open_store(location)
    try:
        store.append([make_entry("t1")])
        pid = os.fork()
        if pid == 0:
            try:
                store.append([make_entry("t1", n=1)])
            except StoreError as exc:
                os._exit(0 if "another process" in str(exc) else 2)
            os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert store.append([make_entry("t1", n=2)])[0]["seq"] == 2
    finally:
        store.close()
