"""The SQLite audit store: one file, WAL mode, safe for many processes at once.

Every append is one `BEGIN IMMEDIATE` transaction: it takes SQLite's single write lock,
reads the chain heads from `chains`, inserts the records into `steps`, advances the heads
and commits, so seq assignment can never race another writer and a head only moves when
its records are durable (synchronous=FULL by default: a commit survives power loss;
synchronous="normal" for buffered writers: a commit survives a crash of the process, and in WAL
mode the file stays intact on power loss, which may only lose the last commits). The
buffered writer copies the WAL into the file between its batches (`defer_wal_checkpoints`),
not inside a commit an agent waits for.

Schema (PRAGMA application_id 0x43485452 "CHTR", PRAGMA user_version 1):

    steps(id INTEGER PRIMARY KEY, agent_id, task_id, seq, hash, prev_hash, kind, timestamp,
          body) UNIQUE(agent_id, task_id, seq); body is the record's canonical JSON including
        hash; id (the rowid) gives physical (insertion) order.
    chains(id INTEGER PRIMARY KEY, agent_id, task_id, head_seq, head_hash, closed)
        UNIQUE(agent_id, task_id); id gives order of first appearance.
    checkpoints(id INTEGER PRIMARY KEY, agent_id, task_id, seq, body): signed checkpoints
        as kept (body is the wire form's canonical JSON); created with the store, or on the
        first checkpoint in a store made before checkpoints existed (a file older Charter
        versions still read: they ignore the table).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence

from charter._audit.base import (
    StoreError,
    check_process,
    check_store_path,
    closed_error,
    decode_task_records,
    prepare_batch,
    seq_error,
)
from charter._audit.chain import (
    ChainHead,
    PreparedEntry,
    check_seq,
    decode_json,
    seal_after,
)

# Verification, checkpoints, the shared counters and the report classes load on first use: a
# process that only restores a task and records a step (a hook call) needs none of them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from charter._audit.report import TaskSummary, VerifyReport
    from charter._audit.sqlite_counters import SQLiteCounters

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SQLiteStore"]

APPLICATION_ID = 0x43485452
SCHEMA_VERSION = 1
_BUSY_TIMEOUT_MS = 30_000

_CHECKPOINTS_TABLE = """CREATE TABLE IF NOT EXISTS checkpoints (
        id INTEGER PRIMARY KEY,
        agent_id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        body TEXT NOT NULL
    )"""

_SCHEMA = (
    # An explicit INTEGER PRIMARY KEY keeps rowids (the physical order verify checks)
    # stable across VACUUM, which may renumber implicit rowids.
    """CREATE TABLE steps (
        id INTEGER PRIMARY KEY,
        agent_id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        hash TEXT NOT NULL,
        prev_hash TEXT,
        kind TEXT NOT NULL,
        timestamp TEXT NOT NULL,
        body TEXT NOT NULL,
        UNIQUE (agent_id, task_id, seq)
    )""",
    """CREATE TABLE chains (
        id INTEGER PRIMARY KEY,
        agent_id TEXT NOT NULL,
        task_id TEXT NOT NULL,
        head_seq INTEGER NOT NULL,
        head_hash TEXT,
        closed INTEGER NOT NULL DEFAULT 0,
        UNIQUE (agent_id, task_id)
    )""",
    "CREATE INDEX chains_by_task ON chains (task_id)",
    _CHECKPOINTS_TABLE,
    f"PRAGMA application_id = {APPLICATION_ID}",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)

_INSERT_STEP = (
    "INSERT INTO steps (agent_id, task_id, seq, hash, prev_hash, kind, timestamp, body) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPSERT_HEAD = (
    "INSERT INTO chains (agent_id, task_id, head_seq, head_hash, closed) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (agent_id, task_id) DO UPDATE SET head_seq = excluded.head_seq, "
    "head_hash = excluded.head_hash, closed = excluded.closed"
)
_COLUMNS = ("agent_id", "task_id", "seq", "hash", "prev_hash", "kind", "timestamp")

# SQLite copies its write-ahead log into the database file inside the commit that takes the log
# past 1,000 pages: about 10 ms (pages copied, the file synced) every few dozen batches, paid by
# whoever waits for that commit (an agent at its task's end). A store whose owner has idle
# moments (the buffered audit writer between batches) does it then instead, once this many
# bytes of records were appended since the last time (with the index and the pages a commit
# rewrites, about SQLite's 1,000 pages); SQLite's own stays as a backstop, at a threshold only
# an owner that is never idle reaches (about 16 MB of log).
_WAL_CHECKPOINT_BYTES = 2 << 20
_WAL_BACKSTOP_PAGES = 4_000


# What urllib.parse.quote leaves as it is (its default safe "/"): without importing it, which
# imports ipaddress, in every process that opens a store.
_URI_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~/")


def _uri_path(path: str) -> str:
    """`path` percent-encoded for a ``file:`` URI, exactly as ``urllib.parse.quote(path)``:
    UTF-8 bytes outside letters, digits, ``_.-~/`` become ``%XX``. Raises UnicodeEncodeError
    for text that is not valid Unicode (a lone surrogate), as quote does."""
    data = path.encode("utf-8")
    if all(b in _URI_SAFE for b in data):
        return path
    return "".join(chr(b) if b in _URI_SAFE else f"%{b:02X}" for b in data)


class SQLiteStore:
    """An audit store in one SQLite file (see the module docstring for the schema).

    `create=False` refuses a missing file instead of creating it (used by verify). One
    object may be shared by threads; an internal lock serialises its calls.
    """

    # append takes entries Charter's writer prepared itself (`prepare_batch`).
    _takes_prepared = True

    # read_task returns fresh records of I-JSON values only (`decode_task_records`), which a
    # restore may adopt without copying them again (`Gate.resume_task`).
    _reads_ijson = True

    def __init__(
        self, path: str | os.PathLike[str], *, create: bool = True, synchronous: str = "full"
    ) -> None:
        if synchronous not in ("full", "normal"):
            raise ValueError(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        self.synchronous = synchronous
        raw = os.fspath(path)
        self._memory = raw == ":memory:"
        self._path = raw if self._memory else os.path.abspath(raw)
        self.location = f"sqlite:///{self._path}"
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._counters: SQLiteCounters | None = None
        self._counters_lock = threading.Lock()
        self._pid = os.getpid()
        self._appended = 0  # bytes of records appended since the last idle checkpoint
        if not self._memory:
            check_store_path(self._path, create)
        mode = "rwc" if create else "rw"
        target = "file::memory:" if self._memory else "file:" + _uri_path(self._path)
        try:
            conn = sqlite3.connect(
                f"{target}?mode={mode}",
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=_BUSY_TIMEOUT_MS / 1000,
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open audit store {self._path}: {exc}") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            self._initialise(conn, create)
        except sqlite3.OperationalError as exc:
            conn.close()
            raise StoreError(f"cannot open audit store {self._path}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(
                f"{self._path} is not a Charter audit store (SQLite says: {exc})"
            ) from None
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def counters(self) -> SQLiteCounters:
        """The shared limit counters kept in this store's file (see `SQLiteCounters`)."""
        with self._counters_lock:
            if self._counters is None:
                from charter._audit.sqlite_counters import SQLiteCounters

                self._counters = SQLiteCounters(self.location, self._connection, _begin_write)
            return self._counters

    def _initialise(self, conn: sqlite3.Connection, create: bool) -> None:
        if not self._is_charter(conn):
            # The schema is created under the write lock so that two processes opening a new
            # file at once agree on who creates it.
            conn.execute("BEGIN IMMEDIATE")
            try:
                if not self._is_charter(conn):
                    if not create:
                        raise StoreError(
                            f"{self._path} is an empty SQLite file, not a Charter store"
                        )
                    for statement in _SCHEMA:
                        conn.execute(statement)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"audit store {self._path} has schema version {version}; this Charter reads "
                f"version {SCHEMA_VERSION}"
            )
        if not self._memory:
            conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")

    def _is_charter(self, conn: sqlite3.Connection) -> bool:
        # One statement is one read snapshot: read separately, another process creating the
        # schema in between made a new store look like a foreign database.
        application_id, tables = conn.execute(
            "SELECT (SELECT application_id FROM pragma_application_id()),"
            " (SELECT count(*) FROM sqlite_master)"
        ).fetchone()
        if application_id == APPLICATION_ID:
            return True
        if application_id != 0 or tables:
            raise StoreError(
                f"{self._path} is an SQLite database but not a Charter audit store; "
                "choose another file"
            )
        return False

    def _connection(self) -> _Held:
        """The open connection, held under the store's lock for a ``with`` block; an
        sqlite3.Error raised in the block leaves it as a StoreError naming the store."""
        return _Held(self)

    def append(self, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Chain and commit `entries` in one transaction; see AuditStore.append.

        Canonicalisation happens before the write lock is taken; inside it only the chain
        fields are joined in and hashed.
        """
        prepared = prepare_batch(entries)
        if not prepared:
            return []
        with self._connection() as conn:
            try:
                _begin_write(conn)
                rows, heads, chained = self._seal_batch(conn, prepared)
                conn.executemany(_INSERT_STEP, rows)
                conn.executemany(_UPSERT_HEAD, heads)
                conn.execute("COMMIT")
                self._appended += sum(len(row[-1]) for row in rows)
            except BaseException as exc:
                if conn.in_transaction:
                    _rollback(conn)
                if isinstance(exc, sqlite3.IntegrityError):
                    raise StoreError(
                        f"audit store {self.location} refused the batch ({exc}): its chains "
                        "table disagrees with the stored records (run verify); nothing was written"
                    ) from None
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(
                        f"audit store {self.location} could not append ({exc}); nothing was written"
                    ) from None
                raise
        return chained

    def _seal_batch(
        self, conn: sqlite3.Connection, prepared: list[PreparedEntry]
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]], list[dict[str, Any]]]:
        # (head seq, head hash, closed) per chain, as plain values: this runs per record.
        heads: dict[tuple[str, str], tuple[int, str | None, bool]] = {}
        for item in prepared:
            key = (item.agent_id, item.task_id)
            if key not in heads:
                found = conn.execute(
                    "SELECT head_seq, head_hash, closed FROM chains "
                    "WHERE agent_id = ? AND task_id = ?",
                    key,
                ).fetchone()
                heads[key] = (found[0], found[1], bool(found[2])) if found else (0, None, False)
        rows: list[tuple[Any, ...]] = []
        chained: list[dict[str, Any]] = []
        for item in prepared:
            key = (item.agent_id, item.task_id)
            head_seq, head_hash, closed = heads[key]
            if closed:
                raise closed_error(item.task_id, item.agent_id, self.location)
            if item.seq is not None and item.seq <= head_seq:
                refused = check_seq(item, ChainHead(head_seq, head_hash))
                raise seq_error(refused or "", item.task_id, self.location)
            sealed = seal_after(item, head_seq, head_hash)
            heads[key] = (sealed.seq, sealed.hash, item.closing)
            record = sealed.entry
            rows.append(
                (
                    item.agent_id,
                    item.task_id,
                    sealed.seq,
                    sealed.hash,
                    head_hash,
                    record["kind"],
                    record["timestamp"],
                    sealed.body.decode("utf-8"),
                )
            )
            chained.append(record)
        head_rows = [(a, t, seq, h, int(c)) for (a, t), (seq, h, c) in heads.items()]
        return rows, head_rows, chained

    def defer_wal_checkpoints(self) -> None:
        """Leave the log's checkpoints to `checkpoint_wal_if_due`, which the owner calls when
        nobody waits for a commit; SQLite's own stays as a backstop at `_WAL_BACKSTOP_PAGES`.
        For an owner with idle moments only (the buffered audit writer)."""
        with self._connection() as conn:
            conn.execute(f"PRAGMA wal_autocheckpoint = {_WAL_BACKSTOP_PAGES}")

    def checkpoint_wal_if_due(self) -> bool:
        """Copy the log into the database file when `_WAL_CHECKPOINT_BYTES` of records were
        appended since the last time (a passive checkpoint: it never waits for readers or
        writers, and what it cannot copy now is copied next time). Returns whether it ran.
        Raises StoreError as the other calls do."""
        if self._memory or self._appended < _WAL_CHECKPOINT_BYTES:
            return False
        with self._connection() as conn:
            self._appended = 0
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return True

    def head(self, agent_id: str, task_id: str) -> ChainHead:
        """The committed head of (agent_id, task_id); ChainHead() when the chain is unknown."""
        with self._connection() as conn:
            found = conn.execute(
                "SELECT head_seq, head_hash FROM chains WHERE agent_id = ? AND task_id = ?",
                (agent_id, task_id),
            ).fetchone()
        return ChainHead(found[0], found[1]) if found else ChainHead()

    def list_tasks(self, agent_id: str | None = None) -> list[TaskSummary]:
        """One summary per chain in order of first appearance; `steps` is the head seq."""
        from charter._audit.report import TaskSummary

        where = "" if agent_id is None else " WHERE c.agent_id = ?"
        params: tuple[str, ...] = () if agent_id is None else (agent_id,)
        same_chain = "s.agent_id = c.agent_id AND s.task_id = c.task_id"
        sql = (
            "SELECT c.agent_id, c.task_id, c.head_seq, c.closed, "
            f"(SELECT timestamp FROM steps s WHERE {same_chain} AND s.seq = 1), "
            f"(SELECT timestamp FROM steps s WHERE {same_chain} AND s.seq = c.head_seq), "
            f"(SELECT kind FROM steps s WHERE {same_chain} AND s.seq = c.head_seq) "
            f"FROM chains c{where} ORDER BY c.rowid"
        )
        with self._connection() as conn:
            found = conn.execute(sql, params).fetchall()
        return [
            TaskSummary(a, t, steps, first or "", last or "", bool(closed), kind or "")
            for a, t, steps, closed, first, last, kind in found
        ]

    def read_task(self, task_id: str, agent_id: str | None = None) -> list[dict[str, Any]]:
        """The records of one task in seq order; see AuditStore.read_task for the refusals."""
        with self._connection() as conn:
            if agent_id is None:
                agents = [
                    a
                    for (a,) in conn.execute(
                        "SELECT agent_id FROM chains WHERE task_id = ? ORDER BY rowid", (task_id,)
                    )
                ]
                if len(agents) > 1:
                    names = ", ".join(repr(a) for a in agents)
                    raise StoreError(
                        f"task {task_id!r} exists under several agents ({names}) in "
                        f"{self.location}; pass agent_id to choose one"
                    )
                agent_id = agents[0] if agents else ""
            bodies = conn.execute(
                "SELECT seq, body FROM steps WHERE agent_id = ? AND task_id = ? ORDER BY seq",
                (agent_id, task_id),
            ).fetchall()
        return decode_task_records(bodies, task_id, self.location)

    def verify(self, task_id: str | None = None) -> VerifyReport:
        """Verify every chain (or those of `task_id`) inside one read snapshot.

        Raises StoreError when `task_id` is given and neither its records nor its head exist.
        """
        from charter._audit.verify import RecordedHead, check_stored_chains

        where = "" if task_id is None else " WHERE task_id = ?"
        params: tuple[str, ...] = () if task_id is None else (task_id,)
        with self._connection() as conn:
            conn.execute("BEGIN")
            try:
                recorded: dict[tuple[str, str], tuple[int, RecordedHead]] = {
                    (a, t): (rowid, RecordedHead(seq, h, bool(closed), exact=True))
                    for rowid, a, t, seq, h, closed in conn.execute(
                        "SELECT rowid, agent_id, task_id, head_seq, head_hash, closed "
                        f"FROM chains{where}",
                        params,
                    )
                }
                cursor = conn.execute(
                    f"SELECT rowid, {', '.join(_COLUMNS)}, body FROM steps{where} "
                    "ORDER BY agent_id, task_id, seq",
                    params,
                )
                return check_stored_chains(
                    cursor, _COLUMNS, recorded, "chains", task_id, self.location
                )
            finally:
                conn.execute("COMMIT")

    def add_checkpoints(self, checkpoints: Sequence[Mapping[str, Any]]) -> None:
        """Insert signed checkpoints in one transaction; see AuditStore.add_checkpoints."""
        from charter._audit.checkpoint import checkpoint_rows

        rows = [(*ids, text.decode()) for *ids, text in checkpoint_rows(checkpoints)]
        if not rows:
            return
        with self._connection() as conn:
            try:
                _begin_write(conn)
                conn.execute(_CHECKPOINTS_TABLE)
                conn.executemany(
                    "INSERT INTO checkpoints (agent_id, task_id, seq, body) VALUES (?, ?, ?, ?)",
                    rows,
                )
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    _rollback(conn)
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(
                        f"audit store {self.location} could not keep checkpoints ({exc}); "
                        "nothing was kept"
                    ) from None
                raise

    def chain_hashes(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], dict[int, object]]:
        """seq -> hash column of every stored record of the chains `keys` in one read
        snapshot (a hash column that disagrees with its body is verify's "edited" break);
        chains not stored are left out."""
        wanted = set(keys)
        found: dict[tuple[str, str], dict[int, object]] = {}
        with self._connection() as conn:
            rows = conn.execute("SELECT agent_id, task_id, seq, hash FROM steps ORDER BY id")
            for agent_id, task_id, seq, digest in rows:
                if (agent_id, task_id) in wanted:
                    found.setdefault((agent_id, task_id), {}).setdefault(seq, digest)
        return found

    def read_checkpoints(self) -> list[object]:
        """Every kept checkpoint in insertion order (an unreadable body is None)."""
        with self._connection() as conn:
            found = conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'checkpoints'"
            ).fetchone()[0]
            bodies = conn.execute("SELECT body FROM checkpoints ORDER BY id") if found else []
            values: list[object] = []
            for (body,) in bodies:
                try:
                    values.append(decode_json(body))
                except (TypeError, ValueError):
                    values.append(None)
        return values

    def health(self) -> dict[str, Any]:
        """{"ok", "location", "detail"}: whether the file answers a query; never raises."""
        try:
            with self._connection() as conn:
                chains = conn.execute("SELECT count(*) FROM chains").fetchone()[0]
                mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        except StoreError as exc:
            return {"ok": False, "location": self.location, "detail": str(exc)}
        detail = f"SQLite {sqlite3.sqlite_version}, journal {mode}, {chains} chains"
        return {"ok": True, "location": self.location, "detail": detail}

    def close(self) -> None:
        """Close the connection; later calls raise StoreError. Idempotent."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Held:
    """`SQLiteStore._connection`: a class rather than a generator-based context manager,
    so opening a store does not import contextlib (a hook call opens one)."""

    __slots__ = ("_store",)

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store

    def __enter__(self) -> sqlite3.Connection:
        store = self._store
        store._lock.acquire()
        try:
            if store._conn is None:
                raise StoreError(f"audit store {store.location} is closed")
            check_process(store._pid, store.location)
        except BaseException:
            store._lock.release()
            raise
        return store._conn

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        try:
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"audit store {self._store.location} failed: {exc}") from None
        finally:
            self._store._lock.release()


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction; a failing rollback is dropped (the caller is
    already reporting the failure that led here)."""
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


def _begin_write(conn: sqlite3.Connection) -> None:
    """BEGIN IMMEDIATE, waiting up to the busy timeout for other writers.

    SQLite's own busy handler backs off to 100 ms sleeps, so a writer queued behind a few
    millisecond-long commits of other processes would idle far longer than needed; polling
    with short jittered sleeps keeps many concurrent writers moving.
    """
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
        delay = 0.0005
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                # Extended codes (SQLITE_BUSY_RECOVERY, ...) keep the primary code in the low byte.
                busy = (exc.sqlite_errorcode & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
                if not busy or time.monotonic() > deadline:
                    raise
            import random

            time.sleep(delay * random.uniform(0.5, 1.5))
            delay = min(delay * 2, 0.008)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
