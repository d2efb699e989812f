"""The PostgreSQL audit store: one database shared by many writers on many machines.

Same contract as the SQLite store. An append is one transaction: it locks the head rows of
the chains it touches in `charter_chains` (creating a new chain's row, in key order so two
writers cannot deadlock), chains the records onto those heads, inserts them all with one
statement and advances the heads, then commits. The head row lock serialises the appends
to one chain across processes and machines; appends to other chains run in parallel. A batch
whose records carry their writer-assigned seqs, onto heads this process last wrote, is one
statement instead (`charter_append`, schema version 3): it locks the same rows, checks the
heads are still those the batch was sealed onto, and writes, as its own transaction; when a
head moved, it writes nothing and the batch takes the locking path above.

A lost connection or an unreachable server is retried (a few attempts, each waiting up to
the URL's ``connect_timeout``, default 5 s) and then raised as StoreError, which the runner
counts and reports like any store failure. A retry after a connection lost during COMMIT
first checks whether the batch is already stored (records carry the seq their writer
assigned, and a hash covers content and link), so an acknowledged record is never written
twice and an unacknowledged one is never lost.

Schema (version in `charter_schema_version`; each migration in `_MIGRATIONS` brings version
N to N+1 under an advisory lock; a newer schema than this Charter's is refused):

    charter_records(id identity, agent_id, task_id, seq, hash, prev_hash, kind, timestamp,
        body) UNIQUE(agent_id, task_id, seq); body is the record's canonical JSON including
        hash; id gives insertion order. Triggers refuse UPDATE, DELETE and TRUNCATE.
    charter_chains(id identity, agent_id, task_id, head_seq, head_hash, closed)
        UNIQUE(agent_id, task_id); id gives order of first appearance. A trigger refuses
        DELETE, and an UPDATE that moves a head back, rewrites its hash or reopens a chain.
    charter_checkpoints(id identity, agent_id, task_id, seq, body) signed heads; append-only.
    charter_counter_units, charter_counter_totals: shared limit counters (version 3; mutable,
        see `charter._audit.postgresql_counters`).

Append-only deployment: the writers' role gets SELECT and INSERT on `charter_records`,
SELECT, INSERT and UPDATE on `charter_chains`, SELECT and INSERT on `charter_checkpoints`,
SELECT on `charter_schema_version`, and SELECT, INSERT, UPDATE and DELETE on the two counter
tables (see the README); the schema is created by the first store opened by a role that may
create tables.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from charter._audit.base import (
    StoreError,
    check_process,
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
    seal,
)
from charter._audit.checkpoint import checkpoint_rows
from charter._audit.postgresql_counters import MIGRATION as _COUNTERS_MIGRATION
from charter._audit.postgresql_counters import PostgresCounters
from charter._audit.report import TaskSummary, VerifyReport
from charter._audit.url import display_location
from charter._audit.verify import RecordedHead, check_stored_chains

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

_T = TypeVar("_T")
_COLUMNS = ("agent_id", "task_id", "seq", "hash", "prev_hash", "kind", "timestamp")
_SELECT_COLUMNS = 'agent_id, task_id, seq, hash, prev_hash, kind, "timestamp"'
# Held while the schema is created or migrated, so that concurrent openers agree ("CHTR").
_SCHEMA_LOCK = 0x43485452
_DEFAULT_TIMEOUT = 5.0
_ATTEMPTS = 3
_BACKOFF = (0.1, 0.5)
_POOL_SIZE = 4

_REFUSE_FUNCTION = """CREATE FUNCTION charter_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'charter_chains' AND TG_OP = 'UPDATE' THEN
        IF NEW.agent_id = OLD.agent_id AND NEW.task_id = OLD.task_id
            AND (NEW.head_seq > OLD.head_seq
                 OR (NEW.head_seq = OLD.head_seq AND NEW.head_hash IS NOT DISTINCT FROM
                     OLD.head_hash))
            AND (NEW.closed OR NOT OLD.closed) THEN
            RETURN NEW;
        END IF;
        RAISE EXCEPTION 'charter_chains heads only move forward: % of task % refused',
            TG_OP, OLD.task_id USING ERRCODE = 'insufficient_privilege';
    END IF;
    RAISE EXCEPTION '% is append-only: % refused', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$"""

# An append onto heads the writer knows (`expected`), as one statement: it locks those heads
# (creating where missing, in the order given) and, when each still is what the writer sealed
# onto, inserts the records and moves the heads; it returns no row. Otherwise it writes
# nothing and returns the heads as they are, and the writer chains the batch again.
_APPEND_FUNCTION = """CREATE FUNCTION charter_append(
    e_agents text[], e_tasks text[], e_seqs bigint[], e_hashes text[],
    r_agents text[], r_tasks text[], r_seqs bigint[], r_hashes text[], r_prev text[],
    r_kinds text[], r_times text[], r_bodies text[],
    h_agents text[], h_tasks text[], h_seqs bigint[], h_hashes text[], h_closed boolean[])
RETURNS TABLE (o_agent text, o_task text, o_seq bigint, o_hash text, o_closed boolean)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN QUERY WITH locked AS (
        INSERT INTO charter_chains AS c (agent_id, task_id, head_seq, head_hash, closed)
        SELECT a, t, 0, NULL, false FROM unnest(e_agents, e_tasks) WITH ORDINALITY
            AS k(a, t, n) ORDER BY n
        ON CONFLICT (agent_id, task_id) DO UPDATE SET head_seq = c.head_seq
        RETURNING c.agent_id, c.task_id, c.head_seq, c.head_hash, c.closed)
    SELECT l.agent_id, l.task_id, l.head_seq, l.head_hash, l.closed FROM locked l
    JOIN unnest(e_agents, e_tasks, e_seqs, e_hashes) AS e(a, t, s, h)
        ON l.agent_id = e.a AND l.task_id = e.t
    WHERE l.head_seq <> e.s OR l.head_hash IS DISTINCT FROM e.h OR l.closed;
    IF FOUND THEN
        RETURN;
    END IF;
    INSERT INTO charter_records (agent_id, task_id, seq, hash, prev_hash, kind, "timestamp", body)
    SELECT a, t, s, h, p, k, ts, b FROM unnest(r_agents, r_tasks, r_seqs, r_hashes, r_prev,
        r_kinds, r_times, r_bodies) WITH ORDINALITY AS r(a, t, s, h, p, k, ts, b, n) ORDER BY n;
    UPDATE charter_chains c SET head_seq = v.s, head_hash = v.h, closed = v.c
    FROM unnest(h_agents, h_tasks, h_seqs, h_hashes, h_closed) AS v(a, t, s, h, c)
    WHERE c.agent_id = v.a AND c.task_id = v.t;
END $$"""

# _MIGRATIONS[n] brings a store from schema version n to n + 1 (0: an empty database).
_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE charter_schema_version (version integer NOT NULL)",
        "INSERT INTO charter_schema_version (version) VALUES (0)",
        """CREATE TABLE charter_records (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            agent_id text NOT NULL,
            task_id text NOT NULL,
            seq bigint NOT NULL,
            hash text NOT NULL,
            prev_hash text,
            kind text NOT NULL,
            "timestamp" text NOT NULL,
            body text NOT NULL,
            UNIQUE (agent_id, task_id, seq)
        )""",
        """CREATE TABLE charter_chains (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            agent_id text NOT NULL,
            task_id text NOT NULL,
            head_seq bigint NOT NULL,
            head_hash text,
            closed boolean NOT NULL DEFAULT false,
            UNIQUE (agent_id, task_id)
        )""",
        "CREATE INDEX charter_chains_by_task ON charter_chains (task_id)",
        _REFUSE_FUNCTION,
        "CREATE TRIGGER charter_records_append_only BEFORE UPDATE OR DELETE ON charter_records "
        "FOR EACH ROW EXECUTE FUNCTION charter_refuse_change()",
        "CREATE TRIGGER charter_records_no_truncate BEFORE TRUNCATE ON charter_records "
        "FOR EACH STATEMENT EXECUTE FUNCTION charter_refuse_change()",
        "CREATE TRIGGER charter_chains_forward_only BEFORE UPDATE OR DELETE ON charter_chains "
        "FOR EACH ROW EXECUTE FUNCTION charter_refuse_change()",
        "CREATE TRIGGER charter_chains_no_truncate BEFORE TRUNCATE ON charter_chains "
        "FOR EACH STATEMENT EXECUTE FUNCTION charter_refuse_change()",
    ),
    (
        # Signed checkpoints of chain heads (wire form's canonical JSON), append-only too.
        """CREATE TABLE charter_checkpoints (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            agent_id text,
            task_id text,
            seq bigint,
            body text NOT NULL
        )""",
        "CREATE TRIGGER charter_checkpoints_append_only BEFORE UPDATE OR DELETE ON "
        "charter_checkpoints FOR EACH ROW EXECUTE FUNCTION charter_refuse_change()",
        "CREATE TRIGGER charter_checkpoints_no_truncate BEFORE TRUNCATE ON charter_checkpoints "
        "FOR EACH STATEMENT EXECUTE FUNCTION charter_refuse_change()",
    ),
    # Shared limit counters (mutable state, no append-only trigger: see postgresql_counters),
    # and the one-statement append onto heads the writer already knows.
    (*_COUNTERS_MIGRATION, _APPEND_FUNCTION),
)
SCHEMA_VERSION = len(_MIGRATIONS)

# Locks (creating where missing) the heads of the batch's chains, in the order given.
_LOCK_HEADS = (
    "INSERT INTO charter_chains (agent_id, task_id, head_seq, head_hash, closed) "
    "SELECT a, t, 0, NULL, false FROM unnest(%b::text[], %b::text[]) WITH ORDINALITY "
    "AS k(a, t, n) ORDER BY n "
    "ON CONFLICT (agent_id, task_id) DO UPDATE SET head_seq = charter_chains.head_seq "
    "RETURNING agent_id, task_id, head_seq, head_hash, closed"
)
_WRITE = (
    "WITH added AS (INSERT INTO charter_records "
    f"({_SELECT_COLUMNS}, body) "
    "SELECT a, t, s, h, p, k, ts, b FROM unnest(%b::text[], %b::text[], %b::bigint[], "
    "%b::text[], %b::text[], %b::text[], %b::text[], %b::text[]) WITH ORDINALITY "
    "AS r(a, t, s, h, p, k, ts, b, n) ORDER BY n) "
    "UPDATE charter_chains c SET head_seq = v.s, head_hash = v.h, closed = v.c "
    "FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::text[], %b::bool[]) "
    "AS v(a, t, s, h, c) WHERE c.agent_id = v.a AND c.task_id = v.t"
)
_APPEND_KNOWN = (
    "SELECT o_agent, o_task, o_seq, o_hash, o_closed FROM charter_append("
    "%b::text[], %b::text[], %b::bigint[], %b::text[], %b::text[], %b::text[], %b::bigint[], "
    "%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[], "
    "%b::bigint[], %b::text[], %b::bool[])"
)
# Chain heads remembered per process, so a writer's next append to its own chain is one
# statement; bounded (the oldest is forgotten), and only ever a guess the database checks.
_KNOWN_HEADS = 4096
_STORED = (
    "SELECT r.agent_id, r.task_id, r.seq, r.prev_hash, r.hash, r.body FROM charter_records r "
    "JOIN unnest(%b::text[], %b::text[], %b::bigint[]) AS k(a, t, s) "
    "ON r.agent_id = k.a AND r.task_id = k.t AND r.seq = k.s"
)


def _timeout_of(url: str) -> float:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    values = query.get("connect_timeout")
    if not values:
        return _DEFAULT_TIMEOUT
    try:
        seconds = float(values[-1])
    except ValueError:
        raise StoreError(
            f"audit location {display_location(url)!r} has connect_timeout={values[-1]!r}; "
            "give a number of seconds"
        ) from None
    return seconds if seconds > 0 else _DEFAULT_TIMEOUT


class _CommitUnknown(Exception):
    """The connection was lost while COMMIT was in flight: the batch may or may not be stored."""


class PostgresStore:
    """An audit store in a PostgreSQL database (see the module docstring for the schema).

    `url` is a libpq connection URL (``postgresql://user@host:port/db``; a password is best
    kept in ``PGPASSWORD`` or ``~/.pgpass``). `create=False` refuses a database that holds no
    Charter store instead of creating the schema (used by verify and the CLI). One object may
    be shared by threads (a small connection pool serves them); open one per process.
    `timeout` (seconds; default the URL's ``connect_timeout``, else 5) bounds each attempt's
    wait for a connection; a call makes up to three attempts.
    """

    # append takes entries Charter's writer prepared itself (`prepare_batch`).
    _takes_prepared = True

    # read_task returns fresh records of I-JSON values only (`decode_task_records`), which a
    # restore may adopt without copying them again (`Gate.resume_task`).
    _reads_ijson = True

    def __init__(
        self,
        url: str,
        *,
        create: bool = True,
        pool_size: int = _POOL_SIZE,
        timeout: float | None = None,
    ) -> None:
        self.location = display_location(url)
        self._timeout = timeout if timeout is not None and timeout > 0 else _timeout_of(url)
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._heads: dict[tuple[str, str], tuple[ChainHead, bool]] = {}
        self.reconnects = 0
        connect_kwargs: dict[str, Any] = {"application_name": "charter"}
        if "connect_timeout" not in url:
            connect_kwargs["connect_timeout"] = max(1, round(self._timeout))
        try:
            conn = psycopg.connect(url, **connect_kwargs)
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to audit store {self.location}: {_reason(exc)}"
            ) from None
        try:
            self._initialise(conn, create)
        except psycopg.Error as exc:
            raise StoreError(f"cannot open audit store {self.location}: {_reason(exc)}") from None
        finally:
            conn.close()
        self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] | None = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs=connect_kwargs,
            timeout=self._timeout,
            # A reconnect loop that gives up soon is restarted at once by the next call, so
            # a server back after a long outage is used again within seconds.
            reconnect_timeout=max(2 * self._timeout, 2.0),
            name="charter-audit",
            open=False,
        )
        # Connections are made in the background; a server that went away meanwhile shows
        # up as a failed call, retried and reported like any other.
        self._pool.open(wait=False)
        self._counters = PostgresCounters(self.location, self._retrying)

    def counters(self) -> PostgresCounters:
        """The shared limit counters kept in this database (see `PostgresCounters`)."""
        return self._counters

    # -- schema -----------------------------------------------------------------------------

    def _initialise(self, conn: psycopg.Connection[tuple[Any, ...]], create: bool) -> None:
        version = self._version(conn)
        conn.commit()
        if version == SCHEMA_VERSION:
            return
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"audit store {self.location} has schema version {version}, newer than this "
                f"Charter reads (version {SCHEMA_VERSION}); upgrade charter"
            )
        if not create:
            if version == 0:
                raise StoreError(
                    f"there is no Charter audit store in {self.location} (no "
                    "charter_schema_version table); a writer creates it on first use"
                )
            return  # an older schema reads as it is (its tables are a subset); writers migrate it
        # A session lock, taken before the transaction that reads the version: a transaction
        # begun earlier could still see the catalog as it was before another opener's commit.
        conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK,))
        conn.commit()
        try:
            version = self._version(conn)  # another opener may have migrated meanwhile
            for step in range(version, SCHEMA_VERSION):
                for statement in _MIGRATIONS[step]:
                    conn.execute(statement.encode())
                conn.execute("UPDATE charter_schema_version SET version = %s", (step + 1,))
            conn.commit()
        except psycopg.errors.InsufficientPrivilege as exc:
            conn.rollback()
            raise StoreError(
                f"audit store {self.location} needs its schema created or migrated to version "
                f"{SCHEMA_VERSION}, and this role may not ({_reason(exc)}); open it once as the "
                "role that owns the tables"
            ) from None
        except BaseException:
            conn.rollback()
            raise
        finally:
            if not conn.closed:
                conn.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK,))
                conn.commit()

    @staticmethod
    def _version(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
        found = conn.execute("SELECT to_regclass('charter_schema_version') IS NOT NULL").fetchone()
        if not found or not found[0]:
            return 0
        row = conn.execute("SELECT max(version) FROM charter_schema_version").fetchone()
        return int(row[0]) if row and row[0] is not None else 0

    # -- connections --------------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        pool = self._pool
        if pool is None:
            raise StoreError(f"audit store {self.location} is closed")
        check_process(self._pid, self.location)
        with pool.connection(timeout=self._timeout) as conn:
            yield conn

    def _retrying(
        self, what: str, work: Callable[[psycopg.Connection[tuple[Any, ...]], bool], _T]
    ) -> _T:
        """Run `work(conn, retry)` in a transaction, again on a fresh connection after a lost
        connection or an unreachable server (bounded); raises StoreError after the last try."""
        last = ""
        for attempt in range(_ATTEMPTS):
            if attempt:
                with self._lock:
                    self.reconnects += 1
                time.sleep(min(_BACKOFF[attempt - 1], self._timeout))
            try:
                with self._connection() as conn:
                    return work(conn, attempt > 0)
            except _CommitUnknown as exc:
                raise StoreError(
                    f"audit store {self.location} lost the connection while committing "
                    f"({exc}); whether the batch was stored is unknown: run verify"
                ) from None
            except psycopg.OperationalError as exc:
                # Connection lost, server unreachable or shutting down, deadlock: retryable.
                last = _reason(exc)
            except psycopg.Error as exc:
                raise StoreError(
                    f"audit store {self.location} could not {what} ({_reason(exc)})"
                ) from None
        raise StoreError(
            f"audit store {self.location} could not {what} after {_ATTEMPTS} attempts: {last}"
        )

    # -- writing ------------------------------------------------------------------------------

    def append(self, entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Chain and commit `entries` in one transaction; see AuditStore.append."""
        prepared = prepare_batch(entries)
        if not prepared:
            return []
        try:
            return self._retrying("append", lambda conn, retry: self._append(conn, prepared, retry))
        except StoreError as exc:
            text = str(exc)
            if "nothing was written" in text or "unknown" in text:
                raise
            raise StoreError(f"{text}; nothing was written") from None

    def _append(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        prepared: list[PreparedEntry],
        retry: bool,
    ) -> list[dict[str, Any]]:
        keys = sorted({(item.agent_id, item.task_id) for item in prepared})
        # Only a batch whose seqs its writer assigned (as the runner's are) can take the
        # one-statement path: the write is its own commit, so a lost answer is told from a
        # lost commit only by finding the records, by seq, on the retry.
        if not retry and all(item.seq is not None for item in prepared):
            with self._lock:
                known = {key: self._heads[key] for key in keys if key in self._heads}
            if len(known) == len(keys):
                done = self._append_known(conn, prepared, keys, known)
                if done is not None:
                    return done
        # Pipeline mode: BEGIN travels with the lock, and COMMIT with the write, so an append
        # costs two round trips.
        with conn.pipeline():
            return self._append_in(conn, prepared, retry, keys)

    def _remember(self, heads: Mapping[tuple[str, str], tuple[ChainHead, bool]]) -> None:
        with self._lock:
            for key, head in heads.items():
                self._heads.pop(key, None)
                self._heads[key] = head
            while len(self._heads) > _KNOWN_HEADS:
                del self._heads[next(iter(self._heads))]

    def _append_known(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        prepared: list[PreparedEntry],
        keys: list[tuple[str, str]],
        known: dict[tuple[str, str], tuple[ChainHead, bool]],
    ) -> list[dict[str, Any]] | None:
        """Append onto the heads this process last saw, in one statement that is its own
        transaction; None (nothing written) when a head moved meanwhile."""
        expected = [(a, t, known[(a, t)][0].seq, known[(a, t)][0].hash) for a, t in keys]
        heads = dict(known)
        columns, chained = self._chain(prepared, heads)
        moved = [(a, t, h.seq, h.hash, c) for (a, t), (h, c) in heads.items()]
        params = (
            *(list(column) for column in zip(*expected, strict=True)),
            *columns,
            *(list(column) for column in zip(*moved, strict=True)),
        )
        conn.autocommit = True
        try:
            found = conn.execute(_APPEND_KNOWN, params).fetchall()
        except psycopg.IntegrityError as exc:
            raise StoreError(
                f"audit store {self.location} refused the batch ({_reason(exc)}): its chains "
                "table disagrees with the stored records (run verify); nothing was written"
            ) from None
        finally:
            with contextlib.suppress(psycopg.Error):
                conn.autocommit = False
        if found:
            self._remember({(a, t): (ChainHead(seq, h), closed) for a, t, seq, h, closed in found})
            return None
        self._remember(heads)
        return chained

    def _append_in(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        prepared: list[PreparedEntry],
        retry: bool,
        keys: list[tuple[str, str]],
    ) -> list[dict[str, Any]]:
        found = conn.execute(_LOCK_HEADS, ([a for a, _ in keys], [t for _, t in keys])).fetchall()
        heads = {(a, t): (ChainHead(seq, h), closed) for a, t, seq, h, closed in found}
        if retry:
            stored = self._stored_already(conn, prepared, heads)
            if stored is not None:
                conn.rollback()
                return stored
        columns, chained = self._chain(prepared, heads)
        moved = [(a, t, h.seq, h.hash, c) for (a, t), (h, c) in heads.items()]
        head_columns = tuple(list(column) for column in zip(*moved, strict=True))
        try:
            conn.execute(_WRITE, (*columns, *head_columns))
            conn.commit()
            self._remember(heads)
        except psycopg.IntegrityError as exc:
            raise StoreError(
                f"audit store {self.location} refused the batch ({_reason(exc)}): its chains "
                "table disagrees with the stored records (run verify); nothing was written"
            ) from None
        except psycopg.OperationalError as exc:
            if all(item.seq is not None for item in prepared):
                raise  # retried: the next attempt finds the batch if it was stored
            raise _CommitUnknown(_reason(exc)) from None
        return chained

    def _chain(
        self,
        prepared: list[PreparedEntry],
        heads: dict[tuple[str, str], tuple[ChainHead, bool]],
    ) -> tuple[tuple[list[Any], ...], list[dict[str, Any]]]:
        """Seal `prepared` onto `heads` (moved forward in place): the statement's columns and
        the chained records. Raises StoreError for a closed chain or a seq not above its head."""
        columns: tuple[list[Any], ...] = ([], [], [], [], [], [], [], [])
        agents, tasks, seqs, hashes, prevs, kinds, times, bodies = columns
        chained: list[dict[str, Any]] = []
        for item in prepared:
            key = (item.agent_id, item.task_id)
            head, closed = heads[key]
            if closed:
                raise closed_error(item.task_id, item.agent_id, self.location)
            refused = check_seq(item, head)
            if refused is not None:
                raise seq_error(refused, item.task_id, self.location)
            sealed = seal(item, head)
            heads[key] = (ChainHead(sealed.seq, sealed.hash), item.closing)
            record = sealed.entry
            agents.append(item.agent_id)
            tasks.append(item.task_id)
            seqs.append(sealed.seq)
            hashes.append(sealed.hash)
            prevs.append(head.hash)
            kinds.append(record["kind"])
            times.append(record["timestamp"])
            bodies.append(sealed.body.decode("utf-8"))
            chained.append(record)
        return columns, chained

    @staticmethod
    def _stored_already(
        conn: psycopg.Connection[tuple[Any, ...]],
        prepared: list[PreparedEntry],
        heads: Mapping[tuple[str, str], tuple[ChainHead, bool]],
    ) -> list[dict[str, Any]] | None:
        """The stored records when an earlier attempt committed exactly this batch, else None.

        Every entry must carry its seq, lie at or below its chain's head and match the stored
        record's hash when sealed onto that record's own prev_hash.
        """
        if any(
            item.seq is None or item.seq > heads[(item.agent_id, item.task_id)][0].seq
            for item in prepared
        ):
            return None
        rows = conn.execute(
            _STORED,
            (
                [item.agent_id for item in prepared],
                [item.task_id for item in prepared],
                [item.seq for item in prepared],
            ),
        ).fetchall()
        by_key = {(a, t, s): (prev, h, body) for a, t, s, prev, h, body in rows}
        records: list[dict[str, Any]] = []
        for item in prepared:
            stored = by_key.get((item.agent_id, item.task_id, item.seq))
            if stored is None:
                return None
            prev, digest, body = stored
            assert item.seq is not None
            if seal(item, ChainHead(item.seq - 1, prev)).hash != digest:
                return None
            record = decode_json(body)
            if not isinstance(record, dict):
                return None
            records.append(record)
        return records

    # -- reading ------------------------------------------------------------------------------

    def head(self, agent_id: str, task_id: str) -> ChainHead:
        """The committed head of (agent_id, task_id); ChainHead() when the chain is unknown."""

        def read(conn: psycopg.Connection[tuple[Any, ...]], _: bool) -> ChainHead:
            found = conn.execute(
                "SELECT head_seq, head_hash FROM charter_chains WHERE agent_id = %s "
                "AND task_id = %s AND head_seq > 0",
                (agent_id, task_id),
            ).fetchone()
            conn.rollback()
            return ChainHead(int(found[0]), found[1]) if found else ChainHead()

        return self._retrying("read a chain head", read)

    def list_tasks(self, agent_id: str | None = None) -> list[TaskSummary]:
        """One summary per chain in order of first appearance; `steps` is the head seq."""
        where = "" if agent_id is None else " AND c.agent_id = %s"
        params: tuple[str, ...] = () if agent_id is None else (agent_id,)
        same_chain = "s.agent_id = c.agent_id AND s.task_id = c.task_id"
        sql = (
            "SELECT c.agent_id, c.task_id, c.head_seq, c.closed, "
            f'(SELECT "timestamp" FROM charter_records s WHERE {same_chain} AND s.seq = 1), '
            f'(SELECT "timestamp" FROM charter_records s WHERE {same_chain} '
            "AND s.seq = c.head_seq), "
            f"(SELECT kind FROM charter_records s WHERE {same_chain} AND s.seq = c.head_seq) "
            f"FROM charter_chains c WHERE c.head_seq > 0{where} ORDER BY c.id"
        )

        def read(conn: psycopg.Connection[tuple[Any, ...]], _: bool) -> list[TaskSummary]:
            found = conn.execute(sql.encode(), params).fetchall()
            conn.rollback()
            return [
                TaskSummary(a, t, int(steps), first or "", last or "", bool(closed), kind or "")
                for a, t, steps, closed, first, last, kind in found
            ]

        return self._retrying("list tasks", read)

    def read_task(self, task_id: str, agent_id: str | None = None) -> list[dict[str, Any]]:
        """The records of one task in seq order; see AuditStore.read_task for the refusals."""

        def read(conn: psycopg.Connection[tuple[Any, ...]], _: bool) -> list[tuple[Any, Any]]:
            chosen = agent_id
            if chosen is None:
                agents = [
                    a
                    for (a,) in conn.execute(
                        "SELECT agent_id FROM charter_chains WHERE task_id = %s "
                        "AND head_seq > 0 ORDER BY id",
                        (task_id,),
                    )
                ]
                if len(agents) > 1:
                    names = ", ".join(repr(a) for a in agents)
                    raise StoreError(
                        f"task {task_id!r} exists under several agents ({names}) in "
                        f"{self.location}; pass agent_id to choose one"
                    )
                chosen = agents[0] if agents else ""
            bodies = conn.execute(
                "SELECT seq, body FROM charter_records WHERE agent_id = %s AND task_id = %s "
                "ORDER BY seq",
                (chosen, task_id),
            ).fetchall()
            conn.rollback()
            return bodies

        bodies = self._retrying("read a task", read)
        return decode_task_records(bodies, task_id, self.location)

    def verify(self, task_id: str | None = None) -> VerifyReport:
        """Verify every chain (or those of `task_id`) inside one read snapshot.

        Raises StoreError when `task_id` is given and neither its records nor its head exist.
        """
        return self._retrying("verify", lambda conn, _: self._verify(conn, task_id))

    def _verify(
        self, conn: psycopg.Connection[tuple[Any, ...]], task_id: str | None
    ) -> VerifyReport:
        where = "" if task_id is None else " WHERE task_id = %s"
        params: tuple[str, ...] = () if task_id is None else (task_id,)
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            recorded: dict[tuple[str, str], tuple[int, RecordedHead]] = {
                (a, t): (int(order), RecordedHead(int(seq), h, bool(closed), exact=True))
                for order, a, t, seq, h, closed in conn.execute(
                    "SELECT id, agent_id, task_id, head_seq, head_hash, closed "
                    f"FROM charter_chains{where}".encode(),
                    params,
                )
            }
            with conn.cursor(name="charter_verify") as cursor:
                cursor.itersize = 2000
                cursor.execute(
                    f"SELECT id, {_SELECT_COLUMNS}, body FROM charter_records{where} "
                    "ORDER BY agent_id, task_id, seq".encode(),
                    params,
                )
                return check_stored_chains(
                    cursor, _COLUMNS, recorded, "charter_chains", task_id, self.location
                )
        finally:
            conn.rollback()

    def add_checkpoints(self, checkpoints: Sequence[Mapping[str, Any]]) -> None:
        """Insert signed checkpoints with one statement; see AuditStore.add_checkpoints."""
        rows = checkpoint_rows(checkpoints)
        if not rows:
            return
        columns = (
            [agent_id for agent_id, _, _, _ in rows],
            [task_id for _, task_id, _, _ in rows],
            [seq for _, _, seq, _ in rows],
            [text.decode() for _, _, _, text in rows],
        )

        def write(conn: psycopg.Connection[tuple[Any, ...]], _: bool) -> None:
            conn.execute(
                "INSERT INTO charter_checkpoints (agent_id, task_id, seq, body) "
                "SELECT a, t, s, b FROM unnest(%b::text[], %b::text[], %b::bigint[], "
                "%b::text[]) WITH ORDINALITY AS c(a, t, s, b, n) ORDER BY n",
                columns,
            )
            conn.commit()

        # A retry after a lost answer may keep a checkpoint twice: the same signed head,
        # which verify reads as one.
        self._retrying("keep checkpoints", write)

    def read_checkpoints(self) -> list[object]:
        """Every kept checkpoint in insertion order (an unreadable body is None)."""

        def read(conn: psycopg.Connection[tuple[Any, ...]], _: bool) -> list[Any]:
            found = conn.execute("SELECT to_regclass('charter_checkpoints')").fetchone()
            if not found or found[0] is None:
                conn.rollback()
                return []
            rows = conn.execute("SELECT body FROM charter_checkpoints ORDER BY id").fetchall()
            conn.rollback()
            return [body for (body,) in rows]

        values: list[object] = []
        for body in self._retrying("read checkpoints", read):
            try:
                values.append(decode_json(body))
            except (TypeError, ValueError):
                values.append(None)
        return values

    def health(self) -> dict[str, Any]:
        """{"ok", "location", "detail"}: whether the database answers a query; never raises."""
        try:
            with self._connection() as conn:
                row = conn.execute(
                    "SELECT current_setting('server_version'), count(*) FROM charter_chains"
                ).fetchone()
                conn.rollback()
        except (StoreError, psycopg.Error) as exc:
            return {"ok": False, "location": self.location, "detail": _reason(exc)}
        version, chains = row if row else ("?", 0)
        detail = f"PostgreSQL {version}, schema {SCHEMA_VERSION}, {chains} chains"
        if self.reconnects:
            detail += f", {self.reconnects} retried calls"
        return {"ok": True, "location": self.location, "detail": detail}

    def close(self) -> None:
        """Close the connection pool; later calls raise StoreError. Idempotent."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _reason(exc: BaseException) -> str:
    """One line of what PostgreSQL (or the pool) said."""
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())
