"""Shared limit counters in the PostgreSQL audit store (see `charter._audit.counters`).

A fleet's replicas on many machines share one database, so a counter's last unit must be
taken by exactly one of them. Every `reserve` is one transaction that first locks one row per
counter key in `charter_counter_totals` (creating it, in key order, so two reservations of the
same keys cannot deadlock) with ``INSERT … ON CONFLICT … DO UPDATE … RETURNING``; everything
it reads and adds afterwards happens under those row locks. Under READ COMMITTED each later
statement takes a fresh snapshot, so it sees every unit a previous lock holder committed: the
second of two racing replicas reads the first's unit and is judged over the limit. The whole
transaction is sent as one pipeline (one round trip on loopback, bar the lock wait).

`commit` takes the same key locks first, then settles its units, so a commit and a reserve
meet in one order (key rows, then unit rows) and never deadlock; `release` only deletes unit
rows by id, which never waits on a key lock.

Tables (schema version 3, created by the migration like the chains):

    charter_counter_units(id text PRIMARY KEY, key, at_us, amount, window_us, held_until_us)
        held units (held_until_us set) and committed units of windowed counters;
    charter_counter_totals(key text PRIMARY KEY, total)
        the committed sum of each counter without a window, and the row locked for every key.

Counters are mutable state (units are held, settled and purged), so unlike the chains these
tables carry no append-only trigger: the writers' role needs SELECT, INSERT, UPDATE and DELETE
on them. What a step was judged on is kept in its own record (``meta["charter.shared"]``),
which is append-only and signed like any other, so a counter rewritten behind the fleet's
back changes later judgements but never the trail of earlier ones.

Failures raise StoreError naming the store. A lost connection is retried like the store's
other calls; a reservation whose COMMIT answer was lost (its `before` counts cannot be known)
finds its claim ids taken when retried and is refused: the step is blocked, and
its units count until their hold ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg

from charter._audit.base import StoreError
from charter._audit.counters import Claim, Reservation, Unit

__all__ = ["PostgresCounters"]

_T = TypeVar("_T")
_IDLE = psycopg.pq.TransactionStatus.IDLE
Retrying = Callable[[str, Callable[[psycopg.Connection[tuple[Any, ...]], bool], _T]], _T]

# Tables of schema version 3 (`charter._audit.postgresql` runs them as a migration).
MIGRATION: tuple[str, ...] = (
    """CREATE TABLE charter_counter_units (
        id text PRIMARY KEY,
        key text NOT NULL,
        at_us bigint NOT NULL,
        amount double precision NOT NULL,
        window_us bigint,
        held_until_us bigint
    )""",
    "CREATE INDEX charter_counter_units_by_key ON charter_counter_units (key, at_us)",
    """CREATE TABLE charter_counter_totals (
        key text PRIMARY KEY,
        total double precision NOT NULL
    )""",
)

# Locks (creating where missing) one row per key, in key order.
_LOCK_KEYS = (
    "INSERT INTO charter_counter_totals (key, total) "
    "SELECT k, 0 FROM unnest(%b::text[]) AS k ORDER BY k "
    "ON CONFLICT (key) DO UPDATE SET total = charter_counter_totals.total "
    "RETURNING key"
)
# Expired holds and units past their window never count again: dropped, so a counter's rows
# stay few however long it lives.
_PURGE = (
    "DELETE FROM charter_counter_units u USING unnest(%b::text[], %b::bigint[]) AS k(key, w) "
    "WHERE u.key = k.key AND (u.held_until_us <= %b::bigint OR u.at_us <= %b::bigint - k.w)"
)
# What each (key, window) holds at now: the committed total (no window) plus the committed
# or live held units inside the window.
_COUNT = (
    "SELECT k.n, CASE WHEN k.w IS NULL THEN coalesce((SELECT t.total FROM "
    "charter_counter_totals t WHERE t.key = k.key), 0) ELSE 0 END + coalesce((SELECT "
    "sum(u.amount) FROM charter_counter_units u WHERE u.key = k.key "
    "AND (k.w IS NULL OR u.at_us > %b::bigint - k.w) "
    "AND (u.held_until_us IS NULL OR u.held_until_us > %b::bigint)), 0) "
    "FROM unnest(%b::text[], %b::bigint[]) WITH ORDINALITY AS k(key, w, n)"
)
_HOLD = (
    "INSERT INTO charter_counter_units (id, key, at_us, amount, window_us, held_until_us) "
    "SELECT i, k, %b::bigint, a, w, %b::bigint FROM unnest(%b::text[], %b::text[], %b::float8[], "
    "%b::bigint[]) AS c(i, k, a, w)"
)
_DROP_HELD = (
    "DELETE FROM charter_counter_units WHERE id = ANY(%b::text[]) AND held_until_us IS NOT NULL"
)
_ADD_TOTALS = (
    "INSERT INTO charter_counter_totals (key, total) "
    "SELECT k, sum(a) FROM unnest(%b::text[], %b::float8[]) AS c(k, a) GROUP BY k ORDER BY k "
    "ON CONFLICT (key) DO UPDATE SET total = charter_counter_totals.total + excluded.total"
)
# A held windowed unit keeps its time and counts for good; one whose hold expired and was
# purged (or was never here) is added again: it happened. A committed one stays as it is.
_SETTLE_WINDOWED = (
    "INSERT INTO charter_counter_units (id, key, at_us, amount, window_us, held_until_us) "
    "SELECT i, k, t, a, w, NULL FROM unnest(%b::text[], %b::text[], %b::bigint[], "
    "%b::float8[], %b::bigint[]) AS c(i, k, t, a, w) "
    "ON CONFLICT (id) DO UPDATE SET amount = excluded.amount, held_until_us = NULL "
    "WHERE charter_counter_units.held_until_us IS NOT NULL"
)


class _Refused(Exception):
    """The database refused the change (a claim id in use): not worth a retry."""


class PostgresCounters:
    """`CounterStore` kept in one PostgreSQL audit store, shared by every process and machine
    that opens it. Obtain it with ``PostgresStore.counters()``; it lives and closes with the
    store and runs each call through the store's connections and retries (`retrying`)."""

    def __init__(self, location: str, retrying: Retrying[Any]) -> None:
        self.location = location
        self._retrying = retrying

    def _run(self, what: str, work: Callable[[psycopg.Connection[tuple[Any, ...]]], _T]) -> _T:
        def attempt(conn: psycopg.Connection[tuple[Any, ...]], _: bool) -> _T:
            try:
                return work(conn)
            except psycopg.IntegrityError as exc:
                raise _Refused(str(exc).strip()) from None
            finally:
                if not conn.closed and conn.info.transaction_status != _IDLE:
                    conn.rollback()

        try:
            result: _T = self._retrying(f"{what} shared counters", attempt)
        except _Refused as exc:
            raise StoreError(
                f"shared counters in {self.location} refused to {what} "
                f"({' '.join(str(exc).split())}); nothing was changed"
            ) from None
        except StoreError as exc:
            raise StoreError(f"{exc}; nothing was changed") from None
        return result

    @staticmethod
    def _windows(claims: Sequence[Claim]) -> tuple[list[str], list[int | None]]:
        """Each distinct (key, window) of `claims` once, in first-seen order."""
        seen: dict[tuple[str, int | None], None] = {}
        for c in claims:
            seen.setdefault((c.key, c.window_us), None)
        return [k for k, _ in seen], [w for _, w in seen]

    @staticmethod
    def _counted(
        rows: list[tuple[Any, ...]], keys: list[str], windows: list[int | None]
    ) -> dict[tuple[str, int | None], float]:
        return {(keys[int(n) - 1], windows[int(n) - 1]): float(v) for n, v in rows}

    def read(self, claims: Sequence[Claim], *, now_us: int) -> list[float]:
        """See `CounterStore.read`: one statement, so the counts of one call are one snapshot."""
        if not claims:
            return []
        keys, windows = self._windows(claims)

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
            return conn.execute(_COUNT, (now_us, now_us, keys, windows)).fetchall()

        counted = self._counted(self._run("read", work), keys, windows)
        return [counted[(c.key, c.window_us)] for c in claims]

    def reserve(
        self, claims: Sequence[Claim], *, now_us: int, hold_until_us: int
    ) -> list[Reservation]:
        """See `CounterStore.reserve`; one transaction for every claim, sent as one pipeline."""
        if not claims:
            return []
        ids = [c.id for c in claims]
        if len(set(ids)) != len(ids):
            raise StoreError(
                f"shared counters in {self.location} refused a claim id used twice in one "
                "reservation; nothing was changed"
            )
        keys, windows = self._windows(claims)
        locked = sorted(set(keys))
        hold = (
            now_us,
            hold_until_us,
            ids,
            [c.key for c in claims],
            [float(c.amount) for c in claims],
            [c.window_us for c in claims],
        )

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
            with conn.pipeline():
                conn.execute(_LOCK_KEYS, (locked,))
                conn.execute(_PURGE, (keys, windows, now_us, now_us))
                counted = conn.execute(_COUNT, (now_us, now_us, keys, windows))
                conn.execute(_HOLD, hold)
                conn.commit()
            return counted.fetchall()

        counted = self._counted(self._run("reserve", work), keys, windows)
        out: list[Reservation] = []
        for c in claims:  # later claims of one call on a key see the earlier ones
            before = counted[(c.key, c.window_us)]
            out.append(Reservation(c, now_us, before))
            counted[(c.key, c.window_us)] = before + c.amount
        return out

    def commit(self, units: Sequence[Unit]) -> None:
        """See `CounterStore.commit`; one transaction, key rows locked first."""
        if not units:
            return
        plain = [u for u in units if u.claim.window_us is None]
        windowed = [u for u in units if u.claim.window_us is not None]
        locked = sorted({u.claim.key for u in units})

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            with conn.pipeline():
                conn.execute(_LOCK_KEYS, (locked,))
                if plain:
                    conn.execute(_DROP_HELD, ([u.claim.id for u in plain],))
                    conn.execute(
                        _ADD_TOTALS,
                        ([u.claim.key for u in plain], [float(u.amount) for u in plain]),
                    )
                if windowed:
                    conn.execute(
                        _SETTLE_WINDOWED,
                        (
                            [u.claim.id for u in windowed],
                            [u.claim.key for u in windowed],
                            [u.at_us for u in windowed],
                            [float(u.amount) for u in windowed],
                            [u.claim.window_us for u in windowed],
                        ),
                    )
                conn.commit()

        self._run("commit", work)

    def release(self, ids: Sequence[str]) -> None:
        """See `CounterStore.release`."""
        if not ids:
            return

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            with conn.pipeline():
                conn.execute(_DROP_HELD, (list(ids),))
                conn.commit()

        self._run("release", work)
