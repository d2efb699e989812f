"""Shared limit counters in the SQLite audit store's file (see `charter._audit.counters`).

Every call is one ``BEGIN IMMEDIATE`` transaction on the store's connection: it takes the
file's single write lock before reading, so a read and the unit added after it can never
interleave with another process's (two processes cannot both take a counter's last unit).

Counter transactions commit with ``synchronous = NORMAL`` (the chains keep FULL): in WAL mode
a commit then survives a crash of any process but not a power loss until the next fsync of the
log, which the next FULL commit of a record does for every frame before it. So a reservation
is as durable as the step's own records: in sync durability the intent that follows it is
fsynced, and with it the reservation; a buffered trail promises nothing sooner anyway.

Tables, created on first use beside the chains (the chain schema and its version are
untouched; a store that never counts outside a task never has them):

    counter_units(id TEXT PRIMARY KEY, key, at_us, amount, window_us, held_until_us)
        held units (held_until_us set) and committed units of windowed counters;
    counter_totals(key TEXT PRIMARY KEY, total)
        the committed sum of each counter without a window (one row, however many steps).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress

from charter._audit.base import StoreError
from charter._audit.counters import Claim, Reservation, Unit

__all__ = ["SQLiteCounters"]

_TABLES = (
    """CREATE TABLE IF NOT EXISTS counter_units (
        id TEXT PRIMARY KEY,
        key TEXT NOT NULL,
        at_us INTEGER NOT NULL,
        amount REAL NOT NULL,
        window_us INTEGER,
        held_until_us INTEGER
    )""",
    "CREATE INDEX IF NOT EXISTS counter_units_by_key ON counter_units (key, at_us)",
    """CREATE TABLE IF NOT EXISTS counter_totals (
        key TEXT PRIMARY KEY,
        total REAL NOT NULL
    )""",
)
_NO_WINDOW = -(2**62)


class SQLiteCounters:
    """`CounterStore` kept in one SQLite audit store's file, shared by every process that
    opens it. Obtain it with ``SQLiteStore.counters()``; it lives and closes with the store:
    `connection` is the store's (its lock held while in use), `begin` takes the write lock."""

    def __init__(
        self,
        location: str,
        connection: Callable[[], AbstractContextManager[sqlite3.Connection]],
        begin: Callable[[sqlite3.Connection], None],
    ) -> None:
        self.location = location
        self._connection = connection
        self._begin = begin
        self._ready = False

    @contextmanager
    def _write(self, what: str) -> Iterator[sqlite3.Connection]:
        with self._connection() as conn:
            conn.execute("PRAGMA synchronous = NORMAL")
            try:
                self._begin(conn)
                if not self._ready:
                    for statement in _TABLES:
                        conn.execute(statement)
                yield conn
                conn.execute("COMMIT")
                self._ready = True
            except BaseException as exc:
                if conn.in_transaction:
                    with suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.IntegrityError):
                    raise StoreError(
                        f"shared counters in {self.location} refused to {what} ({exc}); "
                        "nothing was changed"
                    ) from None
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(
                        f"shared counters in {self.location} could not {what} ({exc}); "
                        "nothing was changed"
                    ) from None
                raise
            finally:
                with suppress(sqlite3.Error):
                    conn.execute("PRAGMA synchronous = FULL")

    def _count(self, conn: sqlite3.Connection, c: Claim, now_us: int) -> float:
        """What the claim's counter holds at `now_us`, read inside `conn`'s transaction."""
        if c.window_us is None:
            after = _NO_WINDOW
            row = conn.execute(
                "SELECT total FROM counter_totals WHERE key = ?", (c.key,)
            ).fetchone()
            base = float(row[0]) if row else 0.0
        else:
            after = now_us - c.window_us
            base = 0.0
        (held,) = conn.execute(
            "SELECT coalesce(sum(amount), 0) FROM counter_units WHERE key = ? "
            "AND at_us > ? AND (held_until_us IS NULL OR held_until_us > ?)",
            (c.key, after, now_us),
        ).fetchone()
        return base + float(held)

    def read(self, claims: Sequence[Claim], *, now_us: int) -> list[float]:
        """See `CounterStore.read`: one write transaction too (it may create the tables), so
        the counts of one call are one snapshot."""
        if not claims:
            return []
        with self._write("read") as conn:
            return [self._count(conn, c, now_us) for c in claims]

    def reserve(
        self, claims: Sequence[Claim], *, now_us: int, hold_until_us: int
    ) -> list[Reservation]:
        """See `CounterStore.reserve`; one transaction for every claim."""
        out: list[Reservation] = []
        if not claims:
            return out
        with self._write("reserve") as conn:
            for c in claims:
                # Expired holds and units past the window never count again: drop them, so a
                # counter's rows stay few however long it lives.
                conn.execute(
                    "DELETE FROM counter_units WHERE key = ? AND held_until_us <= ?",
                    (c.key, now_us),
                )
                if c.window_us is not None:
                    conn.execute(
                        "DELETE FROM counter_units WHERE key = ? AND at_us <= ?",
                        (c.key, now_us - c.window_us),
                    )
                out.append(Reservation(c, now_us, self._count(conn, c, now_us)))
                conn.execute(
                    "INSERT INTO counter_units (id, key, at_us, amount, window_us, held_until_us)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (c.id, c.key, now_us, c.amount, c.window_us, hold_until_us),
                )
        return out

    def commit(self, units: Sequence[Unit]) -> None:
        """See `CounterStore.commit`."""
        if not units:
            return
        with self._write("commit") as conn:
            for u in units:
                c = u.claim
                if c.window_us is None:
                    conn.execute(
                        "DELETE FROM counter_units WHERE id = ? AND held_until_us IS NOT NULL",
                        (c.id,),
                    )
                    conn.execute(
                        "INSERT INTO counter_totals (key, total) VALUES (?, ?) ON CONFLICT (key)"
                        " DO UPDATE SET total = total + excluded.total",
                        (c.key, u.amount),
                    )
                    continue
                done = conn.execute(
                    "UPDATE counter_units SET amount = ?, held_until_us = NULL "
                    "WHERE id = ? AND held_until_us IS NOT NULL",
                    (u.amount, c.id),
                ).rowcount
                if not done:
                    # Its hold expired and was purged (or it was never here): it happened.
                    conn.execute(
                        "INSERT OR IGNORE INTO counter_units "
                        "(id, key, at_us, amount, window_us, held_until_us) "
                        "VALUES (?, ?, ?, ?, ?, NULL)",
                        (c.id, c.key, u.at_us, u.amount, c.window_us),
                    )

    def release(self, ids: Sequence[str]) -> None:
        """See `CounterStore.release`."""
        if not ids:
            return
        with self._write("release") as conn:
            conn.executemany(
                "DELETE FROM counter_units WHERE id = ? AND held_until_us IS NOT NULL",
                [(i,) for i in ids],
            )
