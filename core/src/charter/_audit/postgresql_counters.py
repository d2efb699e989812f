"""Shared limit counters in the PostgreSQL audit store (see `charter._audit.counters`).

A fleet's replicas on many machines share one database, so a counter's last unit must be
taken by exactly one of them. Every `reserve` is one transaction that first locks one row per
counter key in `charter_counter_totals` (``INSERT … ON CONFLICT … DO UPDATE``, creating the
row where missing, in key order so two reservations of the same keys cannot deadlock);
everything it reads and adds afterwards happens under those row locks. Each SQL statement
after the lock takes a fresh snapshot (READ COMMITTED, inside a VOLATILE function), so it sees
every unit a previous lock holder committed: the second of two racing replicas reads the
first's unit and is judged over the limit.

Each call (`reserve`, `read`, `commit`, `release`) is one statement calling one of the
schema's functions, run as its own transaction: one message and one answer, planned once per
connection. `commit` takes the same key locks first, then settles its units, so a commit and
a reserve meet in one order (key rows, then unit rows) and never deadlock; `release` only
deletes unit rows by id, which never waits on a key lock.

Counter transactions commit with ``synchronous_commit = off`` (the chains keep the server's
setting): a commit is visible to every replica at once and survives any client crash, but a
crash of the server itself may lose the last few hundred milliseconds of reservations. As
with SQLite, a reservation is then as durable as the step's own records: in sync durability
the intent that follows it is committed with a WAL flush, which flushes the reservation
before it; a buffered trail promises nothing sooner anyway.

Tables and functions (schema version 3, created by the migration like the chains):

    charter_counter_units(id text PRIMARY KEY, key, at_us, amount, window_us, held_until_us)
        held units (held_until_us set) and committed units of windowed counters;
    charter_counter_totals(key text PRIMARY KEY, total)
        the committed sum of each counter without a window, and the row locked for every key;
    charter_counters_reserve / _count / _commit / _release / _lock: the calls.

Counters are mutable state (units are held, settled and purged), so unlike the chains these
tables carry no append-only trigger: the writers' role needs SELECT, INSERT, UPDATE and DELETE
on them (and EXECUTE on the functions, which PostgreSQL grants to everyone by default). What a
step was judged on is kept in its own record (``meta["charter.shared"]``), which is
append-only and signed like any other, so a counter rewritten behind the fleet's back changes
later judgements but never the trail of earlier ones.

Failures raise StoreError naming the store. A lost connection is retried like the store's
other calls; a reservation whose answer was lost (its `before` counts cannot be known) finds
its claim ids taken when retried and is refused: the step is blocked, and its units count
until their hold ends.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any, TypeVar

import psycopg

from charter._audit.base import StoreError
from charter._audit.counters import Claim, Reservation, Unit

__all__ = ["PostgresCounters"]

_T = TypeVar("_T")
Retrying = Callable[[str, Callable[[psycopg.Connection[tuple[Any, ...]], bool], _T]], _T]

# Schema version 3 (`charter._audit.postgresql` runs it as a migration): the two tables, and
# one function per call so that a call is one statement (one message, one round trip, one
# plan prepared once) while each SQL statement inside it still takes a fresh snapshot, which
# is what makes the reads after the key lock see the previous lock holder's units.
# `synchronous_commit` is off for the calling transaction only (see the module docstring).
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
    # Locks (creating where missing) one row per key, in key order.
    """CREATE FUNCTION charter_counters_lock(p_keys text[]) RETURNS void
    LANGUAGE sql VOLATILE AS $$
        INSERT INTO charter_counter_totals (key, total)
        SELECT DISTINCT k, 0::float8 FROM unnest(p_keys) AS k ORDER BY 1
        ON CONFLICT (key) DO UPDATE SET total = charter_counter_totals.total
    $$""",
    # What each (key, window) holds at p_now: the committed total (no window) plus the
    # committed or live held units inside the window.
    """CREATE FUNCTION charter_counters_count(p_keys text[], p_windows bigint[], p_now bigint)
    RETURNS TABLE (pos bigint, counted double precision)
    LANGUAGE sql STABLE AS $$
        SELECT k.n, CASE WHEN k.w IS NULL THEN coalesce((SELECT t.total FROM
            charter_counter_totals t WHERE t.key = k.key), 0) ELSE 0 END
            + coalesce((SELECT sum(u.amount) FROM charter_counter_units u WHERE u.key = k.key
                AND (k.w IS NULL OR u.at_us > p_now - k.w)
                AND (u.held_until_us IS NULL OR u.held_until_us > p_now)), 0)
        FROM unnest(p_keys, p_windows) WITH ORDINALITY AS k(key, w, n)
    $$""",
    """CREATE FUNCTION charter_counters_reserve(p_keys text[], p_windows bigint[],
        p_ids text[], p_claim_keys text[], p_amounts float8[], p_claim_windows bigint[],
        p_now bigint, p_hold bigint)
    RETURNS TABLE (pos bigint, counted double precision)
    LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        PERFORM charter_counters_lock(p_keys);
        -- Expired holds and units past their window never count again: dropped, so a
        -- counter's rows stay few however long it lives.
        DELETE FROM charter_counter_units u USING unnest(p_keys, p_windows) AS k(key, w)
            WHERE u.key = k.key AND (u.held_until_us <= p_now OR u.at_us <= p_now - k.w);
        RETURN QUERY SELECT * FROM charter_counters_count(p_keys, p_windows, p_now);
        INSERT INTO charter_counter_units (id, key, at_us, amount, window_us, held_until_us)
            SELECT i, k, p_now, a, w, p_hold
            FROM unnest(p_ids, p_claim_keys, p_amounts, p_claim_windows) AS c(i, k, a, w);
    END $$""",
    """CREATE FUNCTION charter_counters_commit(p_keys text[], p_ids text[], p_claim_keys text[],
        p_at bigint[], p_amounts float8[], p_windows bigint[])
    RETURNS void LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        PERFORM charter_counters_lock(p_keys);
        -- Without a window: the held unit goes, its amount joins the key's total.
        DELETE FROM charter_counter_units u USING unnest(p_ids, p_windows) AS c(i, w)
            WHERE c.w IS NULL AND u.id = c.i AND u.held_until_us IS NOT NULL;
        INSERT INTO charter_counter_totals (key, total)
            SELECT k, sum(a) FROM unnest(p_claim_keys, p_amounts, p_windows) AS c(k, a, w)
            WHERE c.w IS NULL GROUP BY k ORDER BY k
            ON CONFLICT (key) DO UPDATE SET total = charter_counter_totals.total
                + excluded.total;
        -- Windowed: a held unit keeps its time and counts for good; one whose hold expired
        -- and was purged (or was never here) is added again, since it happened; a committed
        -- one stays as it is.
        INSERT INTO charter_counter_units (id, key, at_us, amount, window_us, held_until_us)
            SELECT i, k, t, a, w, NULL
            FROM unnest(p_ids, p_claim_keys, p_at, p_amounts, p_windows) AS c(i, k, t, a, w)
            WHERE c.w IS NOT NULL
            ON CONFLICT (id) DO UPDATE SET amount = excluded.amount, held_until_us = NULL
                WHERE charter_counter_units.held_until_us IS NOT NULL;
    END $$""",
    """CREATE FUNCTION charter_counters_release(p_ids text[]) RETURNS void
    LANGUAGE plpgsql VOLATILE AS $$
    BEGIN
        PERFORM set_config('synchronous_commit', 'off', true);
        DELETE FROM charter_counter_units WHERE id = ANY(p_ids) AND held_until_us IS NOT NULL;
    END $$""",
)

_COUNT = "SELECT pos, counted FROM charter_counters_count(%b::text[], %b::bigint[], %b::bigint)"
_RESERVE = (
    "SELECT pos, counted FROM charter_counters_reserve(%b::text[], %b::bigint[], %b::text[], "
    "%b::text[], %b::float8[], %b::bigint[], %b::bigint, %b::bigint)"
)
_COMMIT = (
    "SELECT charter_counters_commit(%b::text[], %b::text[], %b::text[], %b::bigint[], "
    "%b::float8[], %b::bigint[])"
)
_RELEASE = "SELECT charter_counters_release(%b::text[])"


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
            # Each call is one statement, so it runs as its own transaction: one message and
            # one answer (measured cheaper than a pipeline of statement and COMMIT).
            conn.autocommit = True
            try:
                return work(conn)
            except psycopg.IntegrityError as exc:
                raise _Refused(str(exc).strip()) from None
            finally:
                with suppress(psycopg.Error):
                    conn.autocommit = False  # the store's other calls manage transactions

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
            return conn.execute(_COUNT, (keys, windows, now_us)).fetchall()

        counted = self._counted(self._run("read", work), keys, windows)
        return [counted[(c.key, c.window_us)] for c in claims]

    def reserve(
        self, claims: Sequence[Claim], *, now_us: int, hold_until_us: int
    ) -> list[Reservation]:
        """See `CounterStore.reserve`; one statement (its own transaction) for every claim."""
        if not claims:
            return []
        ids = [c.id for c in claims]
        if len(set(ids)) != len(ids):
            raise StoreError(
                f"shared counters in {self.location} refused a claim id used twice in one "
                "reservation; nothing was changed"
            )
        keys, windows = self._windows(claims)
        params = (
            keys,
            windows,
            ids,
            [c.key for c in claims],
            [float(c.amount) for c in claims],
            [c.window_us for c in claims],
            now_us,
            hold_until_us,
        )

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
            return conn.execute(_RESERVE, params).fetchall()

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
        params = (
            [u.claim.key for u in units],
            [u.claim.id for u in units],
            [u.claim.key for u in units],
            [u.at_us for u in units],
            [float(u.amount) for u in units],
            [u.claim.window_us for u in units],
        )

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            conn.execute(_COMMIT, params)

        self._run("commit", work)

    def release(self, ids: Sequence[str]) -> None:
        """See `CounterStore.release`."""
        if not ids:
            return

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            conn.execute(_RELEASE, (list(ids),))

        self._run("release", work)
