"""What only the PostgreSQL store has: its schema versions, the append-only role and triggers,
lost connections, a server stopped under a running agent, and many writer processes.

The contract every store keeps (round trip, closed chains, refusals, threads, fork) runs over
PostgreSQL too, through the `store_kind` parameter of the other audit tests.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from charter import BlockedError, Governor, Runner
from charter._audit.base import StoreError, is_intent_record
from charter._audit.counters import Claim, Unit
from charter._audit.location import open_existing_store, open_store, verify
from charter._audit.postgresql import SCHEMA_VERSION, PostgresStore
from charter.testing.postgresql import PostgresServer

EntryFactory = Callable[..., dict[str, Any]]

# The GRANTs the README gives an append-only writer role (the tables belong to another role).
APP_GRANTS = """
CREATE ROLE charter_app LOGIN;
GRANT SELECT, INSERT ON charter_records TO charter_app;
GRANT SELECT, INSERT, UPDATE ON charter_chains TO charter_app;
GRANT SELECT, INSERT ON charter_checkpoints TO charter_app;
GRANT SELECT ON charter_schema_version TO charter_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON charter_counter_units, charter_counter_totals
    TO charter_app;
"""


def _app_url(url: str) -> str:
    return url.replace("postgresql://charter@", "postgresql://charter_app@", 1)


def _sql(url: str, statement: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(statement.encode())
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def pg(postgresql_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(postgresql_url)
    yield store
    store.close()


def test_schema_is_versioned_and_a_newer_one_is_refused(
    postgresql_url: str, make_entry: EntryFactory
) -> None:
    with pytest.raises(StoreError, match="no Charter audit store"):
        open_existing_store(postgresql_url)
    with pytest.raises(StoreError, match="no Charter audit store"):
        verify(postgresql_url)
    store = open_store(postgresql_url)
    store.append([make_entry("t1")])
    store.close()
    assert _sql(postgresql_url, "SELECT version FROM charter_schema_version") == [(SCHEMA_VERSION,)]
    assert verify(postgresql_url).ok
    _sql(postgresql_url, f"UPDATE charter_schema_version SET version = {SCHEMA_VERSION + 1}")
    for opener in (open_store, open_existing_store):
        newer = rf"schema version {SCHEMA_VERSION + 1}, newer .*upgrade charter"
        with pytest.raises(StoreError, match=newer):
            opener(postgresql_url)


def test_writers_opening_a_new_database_at_once_agree_on_its_schema(
    postgresql_url: str, spawn: Callable[..., subprocess.Popen[str]]
) -> None:
    code = (
        "import sys\nfrom charter._audit.location import open_store\n"
        "s = open_store(sys.argv[1])\n"
        "s.append([{'agent_id': 'a', 'task_id': sys.argv[2], 'kind': 'k', 'timestamp': 't'}])\n"
        "s.close()\n"
    )
    children = [spawn(code, postgresql_url, f"t{i}") for i in range(4)]
    for child in children:
        _, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
    report = verify(postgresql_url)
    assert report.ok and report.chains_checked == 4


def test_the_app_role_may_append_and_read_but_never_change_a_record(
    postgresql_url: str, make_entry: EntryFactory
) -> None:
    PostgresStore(postgresql_url).close()  # the owner creates the schema
    _sql(postgresql_url, APP_GRANTS)
    app = open_store(_app_url(postgresql_url))
    try:
        app.append([make_entry("t1", n=0), make_entry("t1", n=1)])
        app.append([make_entry("t1", "task.end", n=2)])
        assert [r["seq"] for r in app.read_task("t1")] == [1, 2, 3]
        # Writer-assigned seqs onto a head the role just wrote: the one-statement append.
        app.append([{**make_entry("t2", n=0), "seq": 1}])
        app.append([{**make_entry("t2", n=1), "seq": 2}])
        assert [r["seq"] for r in app.read_task("t2")] == [1, 2]
        assert app.verify().ok
        # Shared limit counters are mutable state: the app role reserves, settles, releases.
        assert isinstance(app, PostgresStore)
        kept, dropped = app.counters().reserve(
            [Claim("u1", "k", 1), Claim("u2", "k", 1)], now_us=1, hold_until_us=10**9
        )
        app.counters().commit([Unit(kept.claim, kept.at_us, 1)])
        app.counters().release([dropped.claim.id])
        assert app.counters().read([Claim("", "k", 1)], now_us=2) == [1]
    finally:
        app.close()
    app_url = _app_url(postgresql_url)
    for statement in (
        "UPDATE charter_records SET body = '{}' WHERE seq = 2",
        "DELETE FROM charter_records WHERE seq = 3",
        "TRUNCATE charter_records",
        "DELETE FROM charter_chains",
        "UPDATE charter_chains SET head_seq = 1",
        "DROP TABLE charter_records",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            _sql(app_url, statement)
    # An app role cannot create or migrate the schema either; it is told who can.
    _sql(postgresql_url, "DROP TABLE charter_schema_version")
    with pytest.raises(StoreError, match="role that owns the tables"):
        open_store(app_url)


def test_triggers_refuse_rewrites_even_by_the_tables_owner(
    pg: PostgresStore, postgresql_url: str, make_entry: EntryFactory
) -> None:
    pg.append([make_entry("t1", n=0), make_entry("t1", n=1), make_entry("t1", "task.end", n=2)])
    for statement in (
        "UPDATE charter_records SET body = '{}' WHERE seq = 2",
        "DELETE FROM charter_records WHERE seq = 3",
        "TRUNCATE charter_records",
        "TRUNCATE charter_chains",
        "DELETE FROM charter_chains",
        "UPDATE charter_chains SET head_seq = 2",
        "UPDATE charter_chains SET head_hash = 'feed'",
        "UPDATE charter_chains SET closed = false",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="refused"):
            _sql(postgresql_url, statement)
    assert pg.verify().ok
    assert [r["seq"] for r in pg.read_task("t1")] == [1, 2, 3]


def _tamper(url: str, statement: str) -> None:
    """Run `statement` the way an attacker with the owner's rights would: triggers off."""
    _sql(
        url,
        "ALTER TABLE charter_records DISABLE TRIGGER USER; "
        "ALTER TABLE charter_chains DISABLE TRIGGER USER; "
        f"{statement}; "
        "ALTER TABLE charter_records ENABLE TRIGGER USER; "
        "ALTER TABLE charter_chains ENABLE TRIGGER USER",
    )


@pytest.mark.parametrize(
    ("statement", "seq", "reason"),
    [
        (
            "UPDATE charter_records SET body = replace(body, 'q2', 'q9') "
            "WHERE task_id = 't1' AND seq = 3",
            3,
            "edited",
        ),
        (
            "UPDATE charter_records SET kind = 'task.end' WHERE task_id = 't1' AND seq = 2",
            2,
            "edited",
        ),
        ("DELETE FROM charter_records WHERE task_id = 't1' AND seq = 2", 2, "deleted"),
        ("DELETE FROM charter_records WHERE task_id = 't1' AND seq = 4", 4, "truncated"),
        ("DELETE FROM charter_chains WHERE task_id = 't1'", 1, "inserted"),
        (
            "UPDATE charter_records SET body = 'not json' WHERE task_id = 't1' AND seq = 1",
            1,
            "malformed",
        ),
    ],
)
def test_tampering_past_the_triggers_is_detected(
    pg: PostgresStore,
    postgresql_url: str,
    make_entry: EntryFactory,
    statement: str,
    seq: int,
    reason: str,
) -> None:
    pg.append([make_entry("t1", n=n) for n in range(4)])
    pg.append([make_entry("t2", n=9)])
    _tamper(postgresql_url, statement)
    report = verify(postgresql_url)
    assert not report.ok
    broken = report.first_break
    assert broken is not None
    assert (broken.task_id, broken.seq, broken.reason) == ("t1", seq, reason), str(report)
    assert pg.verify("t2").ok


def test_the_password_never_shows_in_the_location(postgresql_url: str) -> None:
    with_password = postgresql_url.replace("charter@", "charter:s3cr3t-fake@", 1)
    store = open_store(with_password + "?password=also-fake&application_name=x")
    try:
        assert "s3cr3t" not in store.location and "also-fake" not in store.location
        assert store.location.startswith("postgresql://charter@127.0.0.1:")
        assert "s3cr3t" not in str(store.health())
    finally:
        store.close()


def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch, postgresql_url: str) -> None:
    monkeypatch.delitem(sys.modules, "charter._audit.postgresql", raising=False)
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(StoreError, match=r"pip install 'charter\[postgresql\]'"):
        open_store(postgresql_url)


def test_an_unreachable_server_is_a_store_error_naming_it() -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"postgresql://charter@127.0.0.1:{probe.getsockname()[1]}/audit"
    with pytest.raises(StoreError, match=r"cannot connect to audit store postgresql://"):
        open_store(url)


def test_a_dropped_connection_is_retried(
    pg: PostgresStore, postgresql_url: str, make_entry: EntryFactory
) -> None:
    pg.append([make_entry("t1", n=0)])
    killed = _sql(
        postgresql_url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = 'charter' AND pid <> pg_backend_pid()",
    )
    assert killed and all(ok for (ok,) in killed)
    chained = pg.append([make_entry("t1", n=1)])
    assert chained[0]["seq"] == 2
    assert pg.reconnects >= 1 and "retried" in pg.health()["detail"]
    assert pg.verify().ok


def test_a_commit_whose_answer_was_lost_is_not_written_twice(
    pg: PostgresStore, make_entry: EntryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg.append([{**make_entry("t1", n=0), "seq": 1}])
    real_commit = psycopg.Connection.commit
    lost: list[bool] = []

    def commit_then_lose_the_answer(self: psycopg.Connection[Any]) -> None:
        real_commit(self)
        if not lost:
            lost.append(True)
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(psycopg.Connection, "commit", commit_then_lose_the_answer)
    batch = [{**make_entry("t1", n=n), "seq": n + 1} for n in (1, 2)]
    chained = pg.append(batch)
    monkeypatch.undo()
    assert lost and [r["seq"] for r in chained] == [2, 3]
    assert pg.read_task("t1")[1:] == chained
    assert pg.verify().ok
    # Without writer-assigned seqs a lost answer cannot be told from a lost commit.
    lost.clear()
    monkeypatch.setattr(psycopg.Connection, "commit", commit_then_lose_the_answer)
    with pytest.raises(StoreError, match="unknown: run verify"):
        pg.append([make_entry("t1", n=3)])
    monkeypatch.undo()
    assert len(pg.read_task("t1")) == 4


def test_an_answer_lost_after_a_one_statement_append_is_not_written_twice(
    pg: PostgresStore, make_entry: EntryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writer knows its chain's head after its first append: the next one is a single
    # statement that commits by itself, whose answer is lost here.
    pg.append([{**make_entry("t1", n=0), "seq": 1}])
    real_fetchall = psycopg.Cursor.fetchall
    lost: list[bool] = []

    def fetch_then_lose_the_answer(self: psycopg.Cursor[Any]) -> list[Any]:
        rows = real_fetchall(self)
        if not lost and b"charter_append" in (self._query.query if self._query else b""):
            lost.append(True)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return rows

    monkeypatch.setattr(psycopg.Cursor, "fetchall", fetch_then_lose_the_answer)
    chained = pg.append([{**make_entry("t1", n=n), "seq": n + 1} for n in (1, 2)])
    monkeypatch.undo()
    assert lost and [r["seq"] for r in chained] == [2, 3]
    assert pg.read_task("t1")[1:] == chained
    assert pg.verify().ok


def test_a_head_another_writer_moved_is_read_again_before_chaining(
    pg: PostgresStore, postgresql_url: str, make_entry: EntryFactory
) -> None:
    other = PostgresStore(postgresql_url)
    try:
        pg.append([{**make_entry("t1", n=0), "seq": 1}])  # pg now knows head 1
        other.append([{**make_entry("t1", n=1), "seq": 2}])
        # pg's guess (head 1) is stale: seq 3 is chained onto the real head 2.
        (third,) = pg.append([{**make_entry("t1", n=2), "seq": 3}])
        assert third["prev_hash"] == pg.read_task("t1")[1]["hash"]
        # other's guess (head 2) is stale too: its seq 3 is refused, as at or below the head.
        with pytest.raises(StoreError, match="not above"):
            other.append([{**make_entry("t1", n=5), "seq": 3}])
        other.append([{**make_entry("t1", "task.end", n=3), "seq": 4}])
        with pytest.raises(StoreError, match="closed"):
            pg.append([{**make_entry("t1", n=4), "seq": 5}])
    finally:
        other.close()
    assert [r["seq"] for r in pg.read_task("t1")] == [1, 2, 3, 4]
    assert pg.verify().ok


@pytest.fixture(scope="module")
def own_server() -> Iterator[PostgresServer]:
    """A server of these tests' own, which they stop and start."""
    server = PostgresServer()
    server.start()
    yield server
    server.remove()


@pytest.mark.allow_internal_errors
def test_sync_durability_blocks_while_the_server_is_down(own_server: PostgresServer) -> None:
    own_server.start()
    url = own_server.create_database()
    store = PostgresStore(url, timeout=0.3)
    gov = Governor(Runner(policies=[], audit_durability="sync", store=store))
    ran: list[str] = []
    try:
        task = gov.start_task("t")
        with gov.step("step.exec", name="bash", input={"command": "ls"}, task_id=task):
            ran.append("ls")
        own_server.stop()
        deploy = gov.step("step.exec", name="bash", input={"command": "make deploy"}, task_id=task)
        with pytest.raises(BlockedError, match="intent could not be recorded") as refused, deploy:
            ran.append("deploy")
        assert store.location in str(refused.value)
        own_server.start()
        _wait_healthy(store)
        with gov.step("step.exec", name="bash", input={"command": "pwd"}, task_id=task):
            ran.append("pwd")
        gov.end_task(task)
    finally:
        gov.close(5)
        store.close()
    assert ran == ["ls", "pwd"]
    report = verify(url)
    assert report.ok, str(report)
    records = _read(url, "t")
    outcomes = [r["input"]["command"] for r in records if r["kind"] == "step.exec"]
    assert outcomes.count("make deploy") == 0 or all(
        r["meta"]["charter.outcome"] == "blocked"
        for r in records
        if r["kind"] == "step.exec" and r["input"]["command"] == "make deploy"
    )
    assert [c for c in outcomes if c != "make deploy"] == ["ls", "ls", "pwd", "pwd"]
    assert sum(is_intent_record(r) for r in records) == 2


@pytest.mark.allow_internal_errors
def test_buffered_durability_counts_and_reports_what_the_down_server_missed(
    own_server: PostgresServer,
) -> None:
    own_server.start()
    url = own_server.create_database()
    store = PostgresStore(url, timeout=0.2)
    runner = Runner(policies=[], store=store, audit_durability="buffered")
    gov = Governor(runner)
    try:
        task = gov.start_task("t")
        with gov.step("step.exec", name="bash", input={"command": "ls"}, task_id=task):
            pass
        assert gov.flush(30)
        delivered = runner.status()["queue"]["delivered"]
        own_server.stop()
        with gov.step("step.exec", name="bash", input={"command": "cat notes"}, task_id=task):
            pass  # buffered: the step runs, its record waits for the store
        assert gov.flush(60)
        audit = runner.status()["queue"]
        assert audit["dropped"] >= 1 and audit["dropped_by_cause"].get("refused", 0) >= 1
        assert audit["failed"] >= 1 and audit["delivered"] == delivered
        assert audit["gaps"], audit
        assert runner.status()["store"]["ok"] is False
        own_server.start()
        _wait_healthy(store)
        gov.end_task(task)
        assert gov.flush(30)
    finally:
        gov.close(5)
        store.close()
    report = verify(url)
    assert report.ok, str(report)
    # Every record delivered before the outage is there, and the hole is declared.
    assert report.dropped >= 1 and {g.cause for g in report.gaps} == {"refused"}
    records = _read(url, "t")
    assert [r["kind"] for r in records][:2] == ["task.start", "step.exec"]
    assert records[-1]["kind"] == "task.end"


@pytest.mark.allow_internal_errors
def test_a_shared_limit_blocks_with_the_reason_while_the_server_is_down(
    own_server: PostgresServer,
) -> None:
    own_server.start()
    url = own_server.create_database()
    store = PostgresStore(url, timeout=0.3)
    sends = {
        "name": "sends",
        "rule_type": "max_steps",
        "severity": "critical",
        "params": {"max": 2, "scope": "agent", "select": {"kinds": ["step.message"]}},
    }
    gov = Governor(Runner(policies=[sends], store=store, audit_durability="buffered"))

    def send(task: str, n: int) -> str:
        try:
            with gov.step("step.message", "POST", name="send", input={"n": n}, task_id=task):
                return "allow"
        except BlockedError as exc:
            return exc.reason

    try:
        task = gov.start_task("t")
        assert send(task, 1) == "allow"
        assert gov.flush(30)
        own_server.stop()
        down = send(task, 2)
        # A step no shared limit counts is judged as usual (buffered: its record waits).
        with gov.step("step.exec", name="bash", input={"command": "ls"}, task_id=task):
            pass
        own_server.start()
        _wait_healthy(store)
        again, over = send(task, 3), send(task, 4)
        gov.end_task(task)
        assert gov.flush(30)
    finally:
        gov.close(5)
        store.close()
    assert down.startswith(f"blocked: the shared limit counters in {store.location} could not")
    assert "'sends' count across the agent" in down
    # The refused reservation took nothing: the limit still had one unit left.
    assert again == "allow"
    assert "sends" in over and over.startswith("blocked")


def _read(url: str, task: str) -> list[dict[str, Any]]:
    store = open_existing_store(url)
    try:
        return store.read_task(task, "default")
    finally:
        store.close()


def _wait_healthy(store: PostgresStore) -> None:
    import time

    deadline = time.monotonic() + 30
    while not store.health()["ok"]:
        assert time.monotonic() < deadline, store.health()
        time.sleep(0.1)
